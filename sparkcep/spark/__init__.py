"""The thin Spark layer: adapters, operator, workload, io, session, sinks, validate, late, progress."""
