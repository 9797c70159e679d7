"""What explain says about an operator's engine, from its spec: the engine's own account of its physical
choices.  The face passes :func:`describe` into :func:`sparkcep.compiler.codegen.explain.explain_plan`, so the
compiler never imports an engine."""

from __future__ import annotations

from sparkcep.ir.spec import TrendSpec
from sparkcep.runtime_udfs.match import ranges
from sparkcep.runtime_udfs.match.describe import describe as match_describe
from sparkcep.runtime_udfs.trend.graph import describe as trend_lines


def describe(spec) -> tuple[str, list[str]]:
    """``(engine name, lines)`` for a match or trend spec; without a key, the last line says its parallelism
    (:func:`ranges.parallelism`)."""
    if isinstance(spec, TrendSpec):
        name, lines = "greta", trend_lines(spec)  # the GRETA template, as the engine compiled it
    else:
        name, lines = match_describe(spec)
    if not getattr(spec, "key", ()):
        lines = [*lines, ranges.parallelism(spec)]
    return name, lines
