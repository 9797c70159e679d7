"""The IR: the AST, engine specs, errors, names, printer and serde.  Imports nothing else of sparkcep."""
