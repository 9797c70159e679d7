"""The trend aggregation engine (GRETA): template, graph, index, aggregates, engine."""
