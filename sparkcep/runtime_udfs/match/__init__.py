"""The match engine (SASE/SASE+): compile, AIS and runs engines, negation, state, prefilter, columnar construction."""
