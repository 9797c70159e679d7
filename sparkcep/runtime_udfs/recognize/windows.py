"""Window counts the engine computes itself (``RecognizeSpec.windows``): a stream's per-row counts of the
partition's rows of some types (passing a condition on the row alone, if any) before or after the row's event
time (:class:`~sparkcep.ir.recognize.WindowCount`, a pattern query's negation at the start or the end under
AFTER MATCH SKIP).

Rows come in order (none before those already given, equal event times may still come).  A given row waits in
:class:`WindowState` until the rows its counts read are all known (every later row's event time is at or after
a bound: the last given row's time, a watermark, or the partition's end), then it is released, with its counts,
to the pattern; rows are released in order.  ``before`` (event time ``< t``) is known at once, ``before_within``
(``<= t - w``) once the bound passes ``t - w``, ``after`` (``> t``) once it passes ``t``, ``after_within``
(``>= t + w``) once it reaches ``t + w``; ``latest_before`` (the ts of the latest row before ``t`` with the
row's values, ``pairs``; with ``lacking`` also of a row lacking some of them, NULL, which matches every value) at
once, ``earliest_after`` (of the earliest after ``t``, below ``t + w``) once it
reaches ``t + w``.  The engine may defer a kind (``deferred``: ``after_within``, which
only a match's first row is read for, :func:`.engine._end_checks`): the row is released without it and
:func:`fill` adds it to the released row once settled, while the candidate match that reads it waits.

The counts are kept as sorted event times per type set; the times every later row counts alike (older than the
first held row's time minus WITHIN) are folded into a number.  The ``after*`` counts are the negated counts of
the rest (``-#(<= t)``, ``-#(< t + w)``): they differ from the batch's by the partition's total, the same for
every row, so a comparison of two of them (the DEFINE's) holds alike.
"""

from __future__ import annotations

import functools
from bisect import bisect_left, bisect_right
from typing import Any

from sparkcep.runtime_udfs.recognize.evaluate import Ctx, compile_expr

__all__ = ["WindowState", "due", "fill", "frontier", "give", "release", "window_from_data", "window_to_data"]

Row = dict[str, Any]


class WindowState:
    """Rows given but not released (``held``), per type set the event times of its rows not folded (``times``,
    ascending) and how many were folded (``folded``), or, for a set with ``pairs``, those times per value of its
    rows' ``own`` columns (``nearest``); how many rows were released (``released``) and how many of them have
    their deferred counts (``filled``, :func:`fill`)."""

    __slots__ = ("filled", "folded", "held", "nearest", "released", "times")

    def __init__(self, n_sets: int) -> None:
        self.held: list[Row] = []
        self.times: list[list] = [[] for _ in range(n_sets)]
        self.nearest: list[dict] = [{} for _ in range(n_sets)]
        self.folded: list[int] = [0] * n_sets
        self.released = 0
        self.filled = 0


def _key(w) -> tuple:
    return w.type_column, frozenset(w.types), w.condition, w.pairs, w.lacking


def _sets(windows) -> list[tuple]:
    return list(dict.fromkeys(_key(w) for w in windows))


@functools.lru_cache(maxsize=64)
def _test(condition):
    """The row test of a count's ``condition`` (None: every row of its types): TRUE only, NULL counts as false."""
    if condition is None:
        return None
    f = compile_expr(condition, {}, (), define=0)
    return lambda row: f(Ctx([row]), _HEAD, None) is True


_HEAD = (0, 0, 0, None, None, None)  # the one row of the context, as the row being labelled


def _hashable(key: tuple) -> tuple:
    """A key of values as a dict key (an array or a map value by its text)."""
    try:
        hash(key)
    except TypeError:
        return ("__unhashable", repr(key))
    return key


def give(windows, ts_col: str, ws: WindowState | None, rows) -> WindowState:
    """Take the partition's next rows (in order); a row without event time counts nowhere."""
    sets = [(col, types, _test(cond), pairs, lacking) for col, types, cond, pairs, lacking in _sets(windows)]
    if ws is None:
        ws = WindowState(len(sets))
    for row in rows:
        t = row.get(ts_col)
        if t is not None:
            for k, (col, types, test, pairs, lacking) in enumerate(sets):
                if row.get(col) in types and (test is None or test(row)):
                    if not pairs:
                        ws.times[k].append(t)
                        continue
                    key = tuple(row.get(own) for own, _ in pairs)
                    if lacking or None not in key:  # its times by the values of its own columns (None: lacking)
                        ws.nearest[k].setdefault(_hashable(key), []).append(t)
        ws.held.append(row)
    return ws


def _ready(windows, t, bound, within, deferred) -> bool:
    for w in windows:
        kind = w.kind
        if kind in deferred:
            continue
        if ((kind == "before_within" and not t - within < bound) or (kind == "after" and not t < bound)
                or (kind in ("after_within", "earliest_after") and not t + within <= bound)):
            return False
    return True


def _count(w, ws: WindowState, s: int, t, within, row: Row):
    times, base = ws.times[s], ws.folded[s]
    if t is None:
        return None
    if w.pairs:
        key = tuple(row.get(other) for _, other in w.pairs)
        found = [_nearest(ws.nearest[s].get(_hashable(k), []), t, within, w.kind) for k in _probes(key, w.lacking)]
        found = [f for f in found if f is not None]
        return None if not found else max(found) if w.kind == "latest_before" else min(found)
    if w.kind == "before":
        return base + bisect_left(times, t)
    if w.kind == "before_within":
        return base + bisect_right(times, t - within)
    if w.kind == "after":
        return -(base + bisect_right(times, t))
    return -(base + bisect_left(times, t + within))


def _probes(key: tuple, lacking: bool) -> list[tuple]:
    """The keys of the rows whose ``own`` values match a row's ``other`` values ``key``: the key itself (none
    NULL); ``lacking``: also each with some positions NULL (a row lacking those matches whatever the value)."""
    out = [] if None in key else [key]
    if lacking:
        n = len(key)
        out += [tuple(None if m >> j & 1 else v for j, v in enumerate(key)) for m in range(1, 1 << n)
                if all(m >> j & 1 or v is not None for j, v in enumerate(key))]
    return out


def _nearest(times: list, t, within, kind: str):
    if kind == "latest_before":
        k = bisect_left(times, t)
        return times[k - 1] if k else None
    k = bisect_right(times, t)
    return times[k] if k < len(times) and times[k] < t + within else None


def release(windows, ts_col: str, within, ws: WindowState, bound, final: bool = False,
            deferred: frozenset = frozenset()) -> list[Row]:
    """The held rows whose counts are settled (every row not yet given has event time ``>= bound``; ``final``:
    the partition has ended), in order, each with its counts but those of the ``deferred`` kinds (:func:`fill`
    adds them later, to the released row); then fold what no later row tells apart."""
    sets = _sets(windows)
    index = [sets.index(_key(w)) for w in windows]
    out: list[Row] = []
    held = ws.held
    k = 0
    while k < len(held):
        row = held[k]
        t = row.get(ts_col)
        if t is not None and not final and not _ready(windows, t, bound, within, deferred):
            break
        out.append({**row, **{w.name: _count(w, ws, s, t, within, row)
                              for w, s in zip(windows, index, strict=True) if w.kind not in deferred}})
        k += 1
    del held[:k]
    ws.released += k
    if not deferred:
        _fold(ws, next((r.get(ts_col) for r in held if r.get(ts_col) is not None), bound), within)
    return out


def fill(windows, ts_col: str, within, ws: WindowState, rows: list[Row], base: int, bound, final: bool,
         deferred: frozenset) -> None:
    """Add the ``deferred`` counts to the released rows (``rows``, the first at absolute position ``base``; rows
    before it are gone) that the bound settles, in order; then fold what no later row tells apart."""
    sets = _sets(windows)
    late = [(w, sets.index(_key(w))) for w in windows if w.kind in deferred]
    k = max(ws.filled, base)
    oldest = None
    while k < ws.released:
        row = rows[k - base]
        t = row.get(ts_col)
        if t is not None and not final and not _ready([w for w, _ in late], t, bound, within, ()):
            oldest = t
            break
        for w, s in late:
            row[w.name] = _count(w, ws, s, t, within, row)
        k += 1
    ws.filled = k
    if oldest is None:
        oldest = next((r.get(ts_col) for r in ws.held if r.get(ts_col) is not None), bound)
    _fold(ws, oldest, within)


def _fold(ws: WindowState, oldest, within) -> None:
    """Every later count is of a row at ``oldest`` or after (or None: none comes): the times older than it minus
    WITHIN are counted by each of them alike."""
    if oldest is not None:
        for s, times in enumerate(ws.times):
            cut = bisect_left(times, oldest - within)
            if cut:
                ws.folded[s] += cut
                del times[:cut]
        for nearest in ws.nearest:  # older than every later row's time minus WITHIN: read as NULL
            for key in [k for k, times in nearest.items() if times[-1] < oldest - within]:
                del nearest[key]
            for times in nearest.values():
                del times[:bisect_left(times, oldest - within)]


def frontier(ts_col: str, ws: WindowState | None, watermark):
    """The watermark the pattern may act on: no later than the first held row's time (rows not released yet)."""
    if ws is None or not ws.held:
        return watermark
    t = ws.held[0].get(ts_col)
    return watermark if t is None or watermark is None else min(watermark, t)


def due(windows, ts_col: str, within, ws: WindowState | None, deferred: frozenset = frozenset()):
    """The smallest watermark that releases the first held row (None: nothing held)."""
    if ws is None or not ws.held:
        return None
    t = ws.held[0].get(ts_col)
    if t is None:
        return None
    kinds = {w.kind for w in windows} - deferred
    return t + within if kinds & {"after_within", "earliest_after"} else t


def window_to_data(ws: WindowState | None, enc) -> Any:
    if ws is None:
        return None
    nearest = [[[[enc(v) for v in key], [enc(t) for t in ts]] for key, ts in by.items()] for by in ws.nearest]
    return {"held": [enc(r) for r in ws.held], "times": [[enc(t) for t in ts] for ts in ws.times],
            "folded": list(ws.folded), "released": ws.released, "filled": ws.filled,
            **({"nearest": nearest} if any(ws.nearest) else {})}


def window_from_data(d: Any, dec) -> WindowState | None:
    if d is None:
        return None
    ws = WindowState(len(d["times"]))
    ws.held = [dec(r) for r in d["held"]]
    ws.times = [[dec(t) for t in ts] for ts in d["times"]]
    ws.folded = list(d["folded"])
    ws.released, ws.filled = d["released"], d["filled"]
    for by, items in zip(ws.nearest, d.get("nearest", ()), strict=False):
        for key, ts in items:
            by[_hashable(tuple(dec(v) for v in key))] = [dec(t) for t in ts]
    return ws
