"""A vectorized sequence-scan prefilter for skip_till_any_match batch matching (SASE §4: sequence scan with
the window pushed into the scan, partitioned by the equivalence key as PAIS does).

At low selectivity almost every event the Spark filter lets through can be in no match: in its key there is
no chain of earlier events for the positions before it, or no chain of later events for the positions after
it, inside the window.  :func:`prefilter` turns a :class:`~sparkcep.ir.spec.MatchSpec` into a
function that tells so for a whole batch of rows in a few numpy passes, before any row becomes an engine
event (a Python dict)::

    keep = prefilter(spec)(group_ids, ts, mask)

``group_ids`` are int64 key ids (rows of one key share one), ``ts`` as the engine sees them (integers, e.g.
counters or whole epoch ms, stay int64 and are compared exactly, :func:`within`; else float64), ``mask`` the
int64 ``_mask`` column (bit ``k`` set iff the row passed component ``k``'s type test and local predicates,
:mod:`sparkcep.compiler.codegen.sql`); rows may come in any order; ``keep`` is a bool array in input order.
Running the engine on the kept rows gives exactly the matches of all rows.

**The scan.**  Rows are sorted by (key, ts).  For one alternative of the pattern (:class:`Plan`'s alternatives:
``OR``, ``T*``, ``T?`` expand into several; each is a sequence of positive positions, or with a repeated group
an automaton over them: start and end positions and per position the positions that may follow) a forward
pass computes, for each row that may fill position ``q``, the *latest start* of a chain of positions from a
start position that ends at it with strictly increasing ts; a backward pass the *earliest end* of a chain from
it to an end position.  A row survives at ``q`` iff both exist and ``earliest end - latest start < W``
(LANGUAGE.md §3: a match holds iff ``last.ts - first.ts < W``).  Both passes are a running max (min) over the
values of the positions before (after) ``q``, taken up to the row's *tie run* (the rows of its key with its
ts), so equal timestamps never follow each other (LANGUAGE.md §1).  Values are row indices in the sorted order
rather than timestamps: indices of earlier keys are smaller than the first index of a key, so one global
``np.maximum.accumulate`` serves every key, and a value below the key's first index means "no chain" (the
reset at key boundaries).  A flat sequence takes one pass per direction in position order; an automaton with
loops iterates to the fixpoint, at most one round per position.

Why that is exact for the pattern's time structure, and a superset of the rows in matches:

* **Kleene** ``T+`` and repeated groups ``(P)+``: a chain may pass through several events of one position, but
  the latest start (earliest end) of a chain ending (starting) at a row is reached on a chain that visits each
  position once: cutting a chain between two visits of one position (keeping the row) leaves a chain of the
  automaton inside the window (first and last events stay, or move inwards).  Self-loops never change a value.
* **Predicates** (parameterized, iterator, aggregates, ``[v.attr]`` beyond the key) are ignored: they only
  remove matches, so the kept rows are a superset of the rows of matches.
* **ANY** is in the mask bits already; an event that may fill several components tries every position.
* **Negation**: negated components never start or extend a chain.  A row that may fill a negated component
  is kept in every key where some row survives as a positive event (it may invalidate one of its matches);
  in a key where none survives there are no matches, and every row of the key is dropped.

The matches of the kept rows are the matches of all rows: each match's events survive (each is in a chain
that fits the window: the match itself), and every row that can block a match (a negative event of its key)
is kept.  Collapsed output (SASE++ §5.1) lists, per binding of the single variables, the Kleene candidates
between their neighbours: each lies in a chain with them, so it is kept too.

**Eligible specs**: match specs (also with collapsed output) under ``skip_till_any_match`` only, where a
match is a *set* of events that satisfies the pattern and no other event matters but negative ones.  Under
``strict_contiguity`` and ``partition_contiguity`` an event in no match still breaks contiguity (the engine
keeps even rows that fill no component for that), and under ``skip_till_next_match`` a run *must* take the
next relevant event: an event that ends up in no match still decides which events a run selected, so dropping
it changes the matches (``SEQ(A a, B+ b[], C c)`` over a0 b1 b2 c2: the run takes b1 and b2, and c2, tied with
b2, cannot follow; b2 is in no chain, and without it a0 b1 c2 would match).  :func:`prefilter` returns
None for those, for trend and shared specs, and for specs the match engine refuses.

Example::

    >>> import numpy as np
    >>> from sparkcep.ir.spec import Component, MatchSpec
    >>> spec = MatchSpec((Component("a", ("A",)), Component("b", ("B",))), (), 10, ())
    >>> keep = prefilter(spec)
    >>> keep(np.array([0, 0, 0, 1]), np.array([1.0, 5.0, 20.0, 2.0]), np.array([1, 2, 2, 2])).tolist()
    [True, True, False, False]
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from sparkcep.ir.errors import CEPError
from sparkcep.ir.spec import MatchSpec, reads_every_event
from sparkcep.runtime_udfs.match.compile import Plan
from sparkcep.runtime_udfs.match.conjuncts import ANY_MATCH

__all__ = ["SequenceScan", "prefilter", "scan_ts", "within"]


#: An alternative for the scan: (component bitmask per position, start positions, end positions, per position
#: the positions that may come next)
Shape = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[tuple[int, ...], ...]]


class SequenceScan:
    """The prefilter of one spec: ``shapes`` (one :data:`Shape` per alternative, duplicates removed),
    ``negative`` (the bitmask of the negated components) and ``window``.  Call it as
    ``keep = scan(group_ids, ts, mask)``."""

    __slots__ = ("shapes", "negative", "window")

    def __init__(self, shapes: tuple[Shape, ...], negative: int, window: float):
        self.shapes = shapes
        self.negative = negative
        self.window = window

    def __repr__(self) -> str:
        return f"SequenceScan(shapes={self.shapes}, negative={self.negative:#x}, window={self.window})"

    def __call__(self, group_ids, ts, mask) -> np.ndarray:
        group_ids = np.asarray(group_ids, dtype=np.int64)
        ts = scan_ts(ts)
        mask = np.asarray(mask, dtype=np.int64)
        n = len(ts)
        if not (len(group_ids) == len(mask) == n):
            raise ValueError(f"group_ids, ts and mask differ in length ({len(group_ids)}, {n}, {len(mask)})")
        keep = np.zeros(n, dtype=bool)
        if n == 0:
            return keep
        order = _key_ts_order(group_ids, ts)
        g, t, m = group_ids[order], ts[order], mask[order]
        idx = np.arange(n, dtype=np.int64)
        new_group, group_first, group_last, run_first, run_last = _bounds(g, t)
        # the last row before a row's tie run and the first after it (``has_*``: there is one), as indices into
        # the running max/min of the passes
        before = run_first - 1
        has_before = before >= 0
        before[~has_before] = 0
        after = run_last + 1
        has_after = after < n
        after[~has_after] = 0

        window = self.window
        alive = np.zeros(n, dtype=bool)  # sorted order: survives at some position of some alternative
        for shape in self.shapes:
            alive |= _survivors(shape, t, m, idx, group_first, group_last, before, has_before, after, has_after,
                                window, n)
        if self.negative:
            # negative events: kept in keys where some row survives as a positive one
            group_no = np.cumsum(new_group) - 1
            starts = np.flatnonzero(new_group)
            key_alive = np.logical_or.reduceat(alive, starts)
            alive |= ((m & self.negative) != 0) & key_alive[group_no]
        alive |= ~np.isfinite(t)  # the engine counts rows without a usable ts: leave them to it
        keep[order] = alive
        return keep


def scan_ts(ts) -> np.ndarray:
    """``ts`` as the scans compare it: int64 (uint64) for integer input, so counters and epoch-µs-like values
    beyond 2^53 stay exact, else float64 (NaN: no usable ts)."""
    ts = np.asarray(ts)
    if ts.dtype.kind == "u" and ts.dtype.itemsize == 8:
        return ts
    if ts.dtype.kind in "iub":
        return ts.astype(np.int64, copy=False)
    return ts.astype(np.float64, copy=False)


def within(later: np.ndarray, earlier: np.ndarray, window: float) -> np.ndarray:
    """``later - earlier < window`` elementwise for ``later >= earlier`` (rows of one key in (key, ts) order), as
    the engine decides it: float64 ts by the float subtraction; integer ts exactly (the engine subtracts Python
    ints), as ``d < ceil(W)`` for the integer difference ``d``, taken modulo 2^64 in uint64 (exact for any two
    int64 or uint64 values with ``later >= earlier``), never through float."""
    if later.dtype.kind == "f" or earlier.dtype.kind == "f":
        return (later - earlier) < window
    if window == math.inf:
        return np.ones(len(later), dtype=bool)
    bound = math.ceil(window)  # an integer d is below W iff it is below ceil(W)
    if bound <= 0:
        return np.zeros(len(later), dtype=bool)
    if bound >= 2 ** 64:
        return np.ones(len(later), dtype=bool)
    diff = np.ascontiguousarray(later).view(np.uint64) - np.ascontiguousarray(earlier).view(np.uint64)
    return diff < np.uint64(bound)


def _key_ts_order(group_ids: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """A permutation sorting the rows by (key, ts); the order within equal (key, ts) does not matter.  For
    whole-number ts (counters, epoch ms) one argsort of ``key * span + ts`` in int64 (:func:`key_ts_composite`),
    several times faster than ``np.lexsort``, which serves the other cases."""
    composite = key_ts_composite(group_ids, ts)
    if composite is not None:
        return np.argsort(composite[0])
    return np.lexsort((ts, group_ids))


def key_ts_composite(group_ids: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, int] | None:
    """``(key * span + ts - min(ts), span)`` in int64, exact and monotone in (key, ts), or None when ``ts`` is
    not whole numbers (int64, or finite whole floats) or the composite would not fit.  Integer ``ts`` is read
    as int64 (counters beyond 2^53 stay exact)."""
    if not len(ts):
        return None
    lo_g, hi_g = int(group_ids.min()), int(group_ids.max())
    if ts.dtype.kind in "iu":
        lo, hi = int(ts.min()), int(ts.max())
    elif np.isfinite(ts).all() and (ts == np.floor(ts)).all():
        lo, hi = float(ts.min()), float(ts.max())
        if max(abs(lo), abs(hi)) >= 2.0 ** 52:
            return None
        lo, hi = int(lo), int(hi)
    else:
        return None
    span = hi - lo + 1
    if span >= 2 ** 52 or (hi_g - lo_g + 1) * span >= 2 ** 62:
        return None
    rel = (ts - lo).astype(np.int64) if ts.dtype.kind == "f" else (ts - ts.dtype.type(lo)).astype(np.int64)
    return (group_ids - lo_g) * np.int64(span) + rel, span


def _bounds(g: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, ...]:
    """For rows sorted by (key ``g``, ts ``t``): ``(new_group, group_first, group_last, run_first, run_last)``,
    where a row's key starts (bool), the first and last row index of its key and of its *tie run* (the rows of
    its key with its ts).  NaN never equals: a NaN row is a run of its own."""
    n = len(t)
    idx = np.arange(n, dtype=np.int64)
    new_group = np.empty(n, dtype=bool)
    new_group[0] = True
    np.not_equal(g[1:], g[:-1], out=new_group[1:])
    new_run = new_group.copy()
    new_run[1:] |= t[1:] != t[:-1]
    group_first = np.maximum.accumulate(np.where(new_group, idx, 0))
    run_first = np.maximum.accumulate(np.where(new_run, idx, 0))
    last_group = np.empty(n, dtype=bool)
    last_group[-1] = True
    last_group[:-1] = new_group[1:]
    last_run = np.empty(n, dtype=bool)
    last_run[-1] = True
    last_run[:-1] = new_run[1:]
    group_last = np.minimum.accumulate(np.where(last_group, idx, n - 1)[::-1])[::-1]
    run_last = np.minimum.accumulate(np.where(last_run, idx, n - 1)[::-1])[::-1]
    return new_group, group_first, group_last, run_first, run_last


def _survivors(shape: Shape, t, m, idx, group_first, group_last, before, has_before, after, has_after,
               window: float, n: int) -> np.ndarray:
    """Rows (sorted order) on a time-feasible path of ``shape``'s positions inside the window."""
    bits, starts_at, ends_at, follow = shape
    size = len(bits)
    fills = [(m & b) != 0 for b in bits]
    preds = [[p for p in range(size) if q in follow[p] and p != q] for q in range(size)]  # self-loops change nothing
    forward_only = all(q > p for p in range(size) for q in follow[p] if q != p)
    # forward: latest start (a row index) of a path ending at the row at position q; -1: none.  A flat sequence
    # takes one pass in position order; loops (repeated groups) iterate to the fixpoint (at most ``size``
    # rounds: the latest start is reached on a path that visits each position once)
    first = [np.where(fills[q], idx, -1) if q in starts_at else np.full(n, -1, dtype=np.int64) for q in range(size)]
    for _ in range(1 if forward_only else size):
        changed = False
        for q in range(size):
            for p in preds[q]:
                best = np.maximum.accumulate(first[p])[before]  # over rows of strictly smaller ts (and earlier keys)
                ok = fills[q] & has_before & (best >= group_first) & (best > first[q])
                if not ok.any():
                    continue
                ok[ok] = within(t[ok], t[best[ok]], window)
                first[q] = np.where(ok, best, first[q])
                changed = True
        if not changed:
            break
    # backward: earliest end (a row index) of a path starting at the row at position p; n: none
    last = [np.where(fills[p] & (first[p] >= 0), idx, n) if p in ends_at else np.full(n, n, dtype=np.int64)
            for p in range(size)]
    for _ in range(1 if forward_only else size):
        changed = False
        for p in range(size - 1, -1, -1):
            for q in follow[p]:
                if q == p:
                    continue
                best = np.minimum.accumulate(last[q][::-1])[::-1][after]  # over rows of strictly larger ts
                ok = fills[p] & has_after & (best <= group_last) & (first[p] >= 0) & (best < last[p])
                if not ok.any():
                    continue
                ok[ok] = within(t[best[ok]], t[ok], window)
                last[p] = np.where(ok, best, last[p])
                changed = True
        if not changed:
            break
    alive = np.zeros(n, dtype=bool)
    for lo, hi in zip(first, last, strict=True):
        ok = (lo >= 0) & (hi < n)
        ok[ok] = within(t[hi[ok]], t[lo[ok]], window)
        alive |= ok
    return alive


def prefilter(spec) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None:
    """The batch prefilter of ``spec`` (a :class:`SequenceScan`), or None when ``spec`` is not eligible: not a
    match spec, a strategy other than skip_till_any_match, or a spec the match engine refuses (see the module
    docstring for why only skip_till_any_match)."""
    if not isinstance(spec, MatchSpec) or (spec.strategy or ANY_MATCH) != ANY_MATCH or reads_every_event(spec):
        return None  # (NEXT steps: an event in no match still breaks a link)
    try:
        plan = Plan(spec)
    except CEPError:
        return None
    shapes = tuple(dict.fromkeys(_shape(alt) for alt in plan.alternatives))
    negative = sum(1 << k for k, c in enumerate(spec.components) if c.negated)
    window = plan.window if isinstance(plan.window, int) else float(plan.window)  # an int W stays exact
    return SequenceScan(shapes, negative, window)


def _shape(alt) -> Shape:
    """``(component bit per position, start positions, end positions, follow sets)`` of an alternative: the
    automaton of a repeated group (a run may skip positions (``OR``, ``?`` inside) and go back), else the flat
    sequence (each position followed by the next and, if Kleene, by itself)."""
    bits = tuple(1 << k for k in alt.comps)
    follow = getattr(alt, "follow", None)
    if follow is None:  # a plan without automata: a repeated group is scanned as one iteration (sound: see above)
        size = len(bits)
        return bits, (0,), (size - 1,), tuple((p + 1,) if p + 1 < size else () for p in range(size))
    return bits, tuple(alt.starts), tuple(alt.ends), tuple(tuple(f) for f in follow)
