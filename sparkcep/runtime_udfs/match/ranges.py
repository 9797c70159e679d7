"""Time ranges for a match query without a key: the input split into ranges that overlap by the window.

A query with no equivalence key is one partition of the input (SASE's PAIS has nothing to split by).  Its
matches are still local in time: every event of a match lies in ``[first.ts, first.ts + W)`` (the window,
``last.ts - first.ts < W``).  So the ts axis is cut into ranges of a fixed ``width``: range ``j`` *owns* the
events of ``[j * width, (j + 1) * width)`` (``j = floor(ts / width)``, computable per event: no pass over the
input for its bounds) and also *holds* those of ``[(j + 1) * width, (j + 1) * width + W)``; each range runs the
engine over what it holds, with the events it holds but does not own barred from the first component (bit 0 of
their ``_mask`` cleared), so that it builds only the matches whose first event it owns.  Every match is then
reported exactly once, by the range that owns its first event, and whole: a match that crosses a border is found
by the range before it.  With ``width >= W`` an event is held by two ranges at most (its owner, and the one before
when it lies less than ``W`` after a border): about ``W / width`` of the input twice.

That needs the engine's matches to depend only on their own span.  It holds when the pattern starts with a
single positive event (its ts is the match's first) under any selection strategy (runs start at their first
event; negations inside or at the end look only inside ``(first.ts, first.ts + W)``), with a finite window.
Contiguity (``strict_contiguity``, ``partition_contiguity`` of a query without key, a ``NEXT`` step) asks
whether two events are adjacent in the whole input: a range holds *every* event of a ts interval (the batch
filter keeps every event under contiguity), i.e. a contiguous stretch of the whole input in its order (ts, ties
in input order), so two events a range holds are adjacent in it exactly when they are adjacent in the whole
input, and the range's own numbering of its events is as good as a global one.  Not for a negated start (it
looks back up to ``W`` before the first event), a Kleene or disjunctive start, a trend query (its windows'
aggregates would need combining) or no WITHIN: :func:`why_not` says which.

**A partition runs its ranges as one keyless table.**  The Spark batch path deals the ranges round robin over
``parts >= 2`` partitions (range ``j`` to partition ``j mod parts``), so two ranges of one partition are at least two
apart, and with ``width >= W`` what range ``j`` holds, ts in ``[j * width, (j + 1) * width + W)``, lies before
everything range ``j + 2`` holds (ts from ``(j + 2) * width`` on).  A match whose first event range ``j`` owns (the
only unbarred rows) spans less than ``W`` from a ts before ``(j + 1) * width``: every row of the partition in its
span is one range ``j`` holds, and every row range ``j`` holds in it is there (under contiguity, the same stretch
of the input in the same order: ts, ties in input order).  So the engine over the union of the partition's ranges,
with no key, builds exactly the matches of its ranges, each once (:func:`dealt` gives that union; the worker cuts
it into :func:`time_slices` as it cuts any keyless table).  No row needs its range then: a copy a range holds
without owning crosses the shuffle with its ``_mask`` bitwise negated (:func:`sent_mask`, negative), which gives its
range from its ts (:func:`sent_range`: the one before the owner), and the worker restores it (``~mask``).

Pure (no pyspark): the Spark batch path routes rows with :func:`holders`, :func:`sent_mask` and
:func:`sent_range`, as Spark expressions.  One worker running a keyless table alone (one partition) cuts it the
same way into slices of about a fixed number of events (:func:`time_slices`), so that its working memory follows
the slice, not the table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import numpy as np

from sparkcep.ir.ast import EventPat, Seq
from sparkcep.ir.spec import MatchSpec, TrendSpec

#: the ``_mask`` bit of the first component (component 0), which only a range's own events keep
FIRST_BIT = 1

#: the default ``width`` of a range, in windows: events held twice are about 1/16 of the input
RANGE_WINDOWS = 16


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


def why_not(spec: object) -> str | None:
    """Why ``spec`` cannot run in time ranges (one sentence for explain), or None when it can."""
    if not isinstance(spec, MatchSpec):
        if isinstance(spec, TrendSpec) or hasattr(spec, "queries"):
            return "a trend query's window aggregates are not split by time ranges"
        return "only match queries are split by time ranges"
    if not math.isfinite(spec.window):
        return "no WITHIN: a match may span the whole input"
    if _first(spec) is None:
        return "the pattern does not start with one positive event"
    return None


def parallelism(spec: object) -> str:
    """What explain says about the parallelism of a query without a key."""
    why = why_not(spec)
    if why is None:
        return ("parallelism (no key): batch in time ranges of spark.sparkcep.keylessRangeWindows windows (16) "
                "overlapping by the window, dealt over the shuffle partitions, each match reported by the range "
                "owning its first event, when Spark estimates the input at spark.sparkcep.keylessRangeMinBytes (16 "
                "MiB) or more, else 1 partition (spark.sparkcep.keylessRanges=true or false: always or never); "
                "streaming: 1 partition (time ranges are batch only: not built for streams, whose stateful grouping "
                "is part of the checkpoint; a micro-batch spanning less than a range, 16 windows, would fill one or "
                "two ranges anyway)")
    return f"parallelism 1 (no key): {why}"


def ranged_spec(spec: MatchSpec, range_col: str | None = None) -> MatchSpec:
    """``spec`` as a range runs it: keyed by ``range_col`` (the column naming the range that holds an event: one
    engine run per range) if given; ValueError if ranges cannot split it (:func:`why_not`)."""
    if first_var(spec) is None:
        raise ValueError(f"not splittable by time ranges: {why_not(spec)}")
    return spec if range_col is None else replace(spec, key=(range_col,))


def range_of(ts: float | None, width: float) -> int:
    """The range that owns an event at ``ts``: ``floor(ts / width)`` (None and NaN: range 0, whose engine
    counts the event invalid)."""
    if ts is None or ts != ts:
        return 0
    return math.floor(ts / width)


def holders(ts: float | None, width: float, window: float) -> range:
    """The ranges that hold an event at ``ts``: its owner and every range whose end is less than ``window``
    before it (ranges ``j`` with ``ts < (j + 1) * width + window``, i.e. from ``floor((ts - window) / width)``
    on)."""
    own = range_of(ts, width)
    if ts is None or ts != ts:
        return range(own, own + 1)
    return range(min(math.floor((ts - window) / width), own), own + 1)


def held_mask(mask: int, owns: bool) -> int:
    """The ``_mask`` of an event in a range: as it is where the range owns the event, without the first
    component's bit where it only holds it (no match the range reports starts there)."""
    return mask if owns else mask & ~FIRST_BIT


def sent_mask(mask: int, owns: bool) -> int:
    """The ``_mask`` a range's copy of an event carries over the shuffle: :func:`held_mask`, bitwise negated (``~``:
    negative, as no mask is) where the range holds the event without owning it, so that :func:`sent_range` finds
    the range without a column for it; the worker restores it (``~`` again)."""
    held = held_mask(mask, owns)
    return held if owns else ~held


def sent_range(ts: float | None, width: float, sent: int) -> int:
    """The range a row crossing the shuffle with ``_mask`` ``sent`` (:func:`sent_mask`) belongs to: its ts's owner, or
    the range before it for a copy (negative ``sent``; with ``width >= window`` only the range before holds an event
    without owning it)."""
    return range_of(ts, width) - (sent < 0)


def dealt(held: dict[int, list[dict]], parts: int) -> dict[int, list[dict]]:
    """The rows each of ``parts`` partitions gets when ranges (:func:`split`: range number → its events) are dealt
    round robin (range ``j`` to partition ``j mod parts``): the union of its ranges' events, run as one keyless table
    (this module's docstring: exact for ``parts >= 2`` and ranges at least a window wide)."""
    if parts < 2:
        raise ValueError(f"ranges are dealt over 2 partitions or more, got {parts}")
    out: dict[int, list[dict]] = {}
    for j in sorted(held):
        out.setdefault(j % parts, []).extend(held[j])
    return out


def split(events: Sequence[dict], width: float, window: float, mask_of: Callable[[dict], int],
          ts_col: str = "ts", every_event: bool = True) -> dict[int, list[dict]]:
    """The events each range holds, in input order (range number → events; ranges holding none are left out), each
    a copy with its ``_mask`` (``mask_of(event)``, then :func:`held_mask`).  Unless ``every_event`` (a query that
    reads every event: ``ir.spec.reads_every_event``), a range leaves out an event it holds without owning it
    when its ``_mask`` is then 0: it fills no component there (the Spark batch path drops that copy too)."""
    out: dict[int, list[dict]] = {}
    for e in events:
        ts, mask = e.get(ts_col), mask_of(e)
        own = range_of(ts, width)
        for j in holders(ts, width, window):
            held = held_mask(mask, j == own)
            if held or every_event or j == own:
                out.setdefault(j, []).append({**e, "_mask": held})
    return out


#: The events a time slice of a keyless table owns at least by default (:func:`slice_rows`): its numpy columns then
#: stay in the cores' caches.  ``bench/keyless_parallel.py``'s q1 at 10^7 (1.5 million rows), one worker's CPU in
#: one process: slices of 2^14-2^16 rows 0.74-0.79 s, of 2^19 rows 1.01-1.09 s; the two range partitions at once
#: 0.83-0.89 s against 1.26-1.29 s (2 cores, load 5-7).
TIME_SLICE_ROWS = 1 << 16

#: A time slice owns at least this many windows of events (:func:`slice_rows`): the window more that it holds is
#: then at most a quarter of what it owns.
SLICE_WINDOWS = 4


def slice_rows(ts: np.ndarray, valid: np.ndarray, window: float, least: int = TIME_SLICE_ROWS) -> int:
    """The ``rows`` of :func:`time_slices` for a table (``ts``/``valid`` as there): ``least``, or more where
    :data:`SLICE_WINDOWS` windows hold more events at the table's mean density (its valid events over their ts
    span), so that the events a slice holds twice stay a small part of it however wide the window."""
    good = ts[valid]
    if len(good) < 2:
        return least
    span = float(good.max()) - float(good.min())
    if not (span > 0 and math.isfinite(span)):  # one ts (one slice anyway), or an infinite one
        return least
    return max(least, min(len(good), math.ceil(SLICE_WINDOWS * len(good) * min(window, span) / span)))


def time_slices(ts: np.ndarray, valid: np.ndarray, window: float,
                rows: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """A table's events cut as :func:`split` cuts them, but into ranges of about ``rows`` events in ts order (ties
    in input order: the engine's order) rather than of a fixed width: ``(held, barred)`` per slice, ``held`` the
    row numbers of the events it holds, in that order, and ``barred`` (bool, aligned) those it holds without
    owning, whose first component's bit the caller clears (:func:`held_mask`).  ``ts``/``valid``: the rows' ts as
    the engine compares them, and whether they have one.

    A slice owns consecutive events of that order: ``rows`` of them, or more until their ts span a window (up to
    :func:`_reach` of the first: as with ranges at least a window wide, an event is held by two slices at most),
    the last slice the rest.  It also holds the events after them up to a window after its last own event's ts
    (:func:`_reach`): every event of a match one of its own events starts, and under contiguity a stretch of the
    whole input from its first own event on.  The rows without a valid ts are in none (the engine drops them: no
    match, no break of contiguity)."""
    good = np.flatnonzero(valid)
    order = good[np.argsort(ts[good], kind="stable")]
    s = ts[order]
    n = len(s)
    lo = 0
    while lo < n:
        hi = min(max(lo + max(rows, 1), int(np.searchsorted(s, _reach(s[lo], window, s.dtype), side="right"))), n)
        top = hi if hi == n else max(hi, int(np.searchsorted(s, _reach(s[hi - 1], window, s.dtype), side="right")))
        yield order[lo:top], np.arange(lo, top) >= hi
        lo = hi


def _reach(last: np.generic, window: float, dtype: np.dtype) -> float | int:
    """``last + window`` as a bound of ts of ``dtype`` (``ts <= bound``), never less: exact in integers however
    large (at most the largest integer of ``dtype``), one float step above in floating point.  The largest ts a
    slice whose last own event is at ``last`` holds: every event of a match starting at or before ``last``
    (``ts - first < window``), and those at exactly ``last + window`` too (no match the slice reports uses them:
    harmless)."""
    if np.issubdtype(dtype, np.integer):
        return min(int(last) + math.floor(window), int(np.iinfo(dtype).max))
    return float(np.nextafter(last + window, math.inf))
