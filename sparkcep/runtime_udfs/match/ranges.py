"""Time ranges for a match query without a key: the input split into ranges that overlap by the window.

A query with no equivalence key is one partition of the input (SASE's PAIS has nothing to split by).  Its
matches are still local in time: every event of a match lies in ``[first.ts, first.ts + W)`` (the window,
``last.ts - first.ts < W``).  So range ``j`` = ``[cuts[j-1], cuts[j])`` (``cuts`` ascending, the first range
open below, the last open above) *owns* the events whose ts falls in it and also *holds* those of
``[cuts[j], cuts[j] + W)``; each range runs the engine over what it holds, and keeps only the matches whose
first event it owns.  Every match is then reported exactly once, by the range that holds its first event, and
whole: a match that crosses a cut is found by the range before it.

That needs the engine's matches to depend only on their own span.  It holds when the pattern starts with a
single positive event (its ts is the match's first) under ``skip_till_any_match`` or
``skip_till_next_match`` (runs start at their first event; negations inside or at the end look only inside
``(first.ts, first.ts + W)``), with a finite window.  Not for a negated start (it looks back up to ``W``
before the first event), a Kleene or disjunctive start, contiguity or a ``NEXT`` step (consecutive in the
whole input), a trend query (its windows' aggregates would need combining) or no WITHIN: :func:`why_not`
says which.

Pure (no pyspark): the Spark batch path routes rows with :func:`holders` and filters with :func:`owner`.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import replace

from sparkcep.ir.ast import Attr, EventPat, Kleene, Not, Or, Seq
from sparkcep.ir.spec import MatchSpec, OutputColumn, TrendSpec

#: the output column a range's engine adds: the ts of the match's first event (dropped after the filter)
FIRST_TS = "_first_ts"

SPLITTABLE = ("skip_till_any_match", "skip_till_next_match")


def first_var(spec: object) -> str | None:
    """The variable whose event starts every match of ``spec``, if ranges can split it, else None."""
    return None if why_not(spec) else _first(spec)


def _first(spec: MatchSpec) -> str | None:
    pattern = spec.pattern
    if pattern is not None:
        head = pattern.items[0] if isinstance(pattern, Seq) and pattern.items else pattern
        if not isinstance(head, EventPat) or head.array or head.var is None:
            return None
    if not spec.components:
        return None
    c = spec.components[0]
    if c.negated or c.kleene is not None:
        return None
    if pattern is not None and c.var != head.var:
        return None
    return c.var


def _next_step(pattern: object) -> bool:
    """Whether ``pattern`` has a ``NEXT`` item (:attr:`Seq.strict`) anywhere."""
    if isinstance(pattern, Seq):
        return any(pattern.strict) or any(_next_step(p) for p in pattern.items)
    if isinstance(pattern, (Kleene, Not)):
        return _next_step(pattern.inner)
    if isinstance(pattern, Or):
        return any(_next_step(p) for p in pattern.alternatives)
    return False


def why_not(spec: object) -> str | None:
    """Why ``spec`` cannot run in time ranges (one sentence for explain), or None when it can."""
    if not isinstance(spec, MatchSpec):
        if isinstance(spec, TrendSpec) or hasattr(spec, "queries"):
            return "a trend query's window aggregates are not split by time ranges"
        return "only match queries are split by time ranges"
    if spec.strategy not in SPLITTABLE:
        return f"{spec.strategy} needs every event of the input in order"
    if _next_step(spec.pattern):
        return "a NEXT step needs the event right after its previous one in the whole input"
    if not math.isfinite(spec.window):
        return "no WITHIN: a match may span the whole input"
    if _first(spec) is None:
        return "the pattern does not start with one positive event"
    return None


def parallelism(spec: object) -> str:
    """What explain says about the parallelism of a query without a key."""
    why = why_not(spec)
    if why is None:
        return ("parallelism (no key): 1 partition; with spark.sparkcep.keylessRanges=true, batch in time ranges "
                "overlapping by the window, one per shuffle partition, each match reported by the range holding "
                "its first event (measured slower on 2 cores: bench/keyless_parallel.py); streaming: 1 partition")
    return f"parallelism 1 (no key): {why}"


def ranged_spec(spec: MatchSpec, range_col: str | None = None) -> MatchSpec:
    """``spec`` with one more output, :data:`FIRST_TS`: the ts of the match's first event; with ``range_col``
    (the column naming the range that holds an event) also that column of the first event, and keyed by it
    (one engine run per range)."""
    var = first_var(spec)
    if var is None:
        raise ValueError(f"not splittable by time ranges: {why_not(spec)}")
    outputs = (*spec.outputs, OutputColumn(FIRST_TS, Attr(var, "ts")))
    if range_col is None:
        return replace(spec, outputs=outputs)
    return replace(spec, outputs=(*outputs, OutputColumn(range_col, Attr(var, range_col))), key=(range_col,))


def owner(ts: float | None, cuts: Sequence[float]) -> int:
    """The range that owns an event at ``ts`` (None: the first range, whose engine counts it invalid)."""
    if ts is None or ts != ts:
        return 0
    return bisect.bisect_right(cuts, ts)


def holders(ts: float | None, cuts: Sequence[float], window: float) -> range:
    """The ranges that hold an event at ``ts``: its owner and every range whose end is less than ``window``
    before it (ranges ``j`` with ``ts < cuts[j] + window``)."""
    own = owner(ts, cuts)
    if ts is None or ts != ts:
        return range(own, own + 1)
    return range(bisect.bisect_right(cuts, ts - window), own + 1)


def cuts_of(lo: float, hi: float, parts: int) -> list[float]:
    """``parts - 1`` cuts splitting ``[lo, hi]`` into ``parts`` ranges of equal length (none for one part or
    an empty span)."""
    if parts <= 1 or not hi > lo:
        return []
    step = (hi - lo) / parts
    return [lo + step * k for k in range(1, parts)]


def split(events: Sequence[dict], cuts: Sequence[float], window: float, ts_col: str = "ts") -> list[list[dict]]:
    """The events each range holds, in input order (one list per range: ``len(cuts) + 1``)."""
    out: list[list[dict]] = [[] for _ in range(len(cuts) + 1)]
    for e in events:
        for j in holders(e.get(ts_col), cuts, window):
            out[j].append(e)
    return out


def owned(rows: Sequence[dict], part: int, cuts: Sequence[float]) -> list[dict]:
    """The rows of range ``part``'s engine (of :func:`ranged_spec`) whose first event it owns, without
    :data:`FIRST_TS`."""
    return [{k: v for k, v in r.items() if k != FIRST_TS} for r in rows if owner(r[FIRST_TS], cuts) == part]
