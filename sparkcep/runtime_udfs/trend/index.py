"""Per-partition indexes of the trend engine: vertex trees sorted by an edge predicate's attribute with
prefix aggregates, batches, queues, windows and runs."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from decimal import Decimal
from fractions import Fraction
from itertools import accumulate
from operator import add
from typing import TYPE_CHECKING, Any

from sparkcep.runtime_udfs.trend.aggregates import _INF
from sparkcep.runtime_udfs.trend.template import _first, _second

if TYPE_CHECKING:
    from sparkcep.runtime_udfs.trend.graph import _Compiled
    from sparkcep.runtime_udfs.trend.template import _Trans


# ----------------------------------------------------------------------------------------------- runtime structures


def _key_class(v) -> int | str | None:
    """Which keys are mutually comparable: numbers (0), strings (1), else one class per type; None for
    NULL and NaN, which compare with nothing (SQL semantics of expr.compile_expr)."""
    if type(v) is float or type(v) is int:
        return 0 if v == v else None
    if v is None or v != v:
        return None
    if isinstance(v, (int, float, Decimal, Fraction)):
        return 0
    if isinstance(v, str):
        return 1
    return type(v).__qualname__


class _VertexTree:
    """A vertex tree (GRETA §7) of one ORDERED transition in one window: the keys of the earlier events with
    their aggregates, answering "the aggregate over the keys ``k`` with ``k op probe``".

    Two parts.  The *live* part holds the events of the current :func:`advance` call: a Fenwick tree over the
    ranks of the numeric keys that call's events can insert into this window (known up front: the batch
    is), so insertion and query take O(log n) interpreted steps.  The *static* part holds everything older,
    as Bentley–Saxe levels (sorted ``(key, aggregate)`` pairs with cumulative aggregates in the query's
    direction) of strictly decreasing sizes: a finished live part (or a key outside any universe, e.g. a
    string) enters as a new level and equal-or-smaller levels merge into it, at C speed; a query bisects
    each of the O(log n) levels.
    """

    __slots__ = ("op", "above", "strict", "levels", "epoch", "universe", "tree", "raw")

    def __init__(self, op: str) -> None:
        self.op = op
        self.above = op in (">", ">=")  # the Fenwick tree runs over reversed ranks: queries are prefixes
        self.strict = op in ("<", ">")
        self.levels: dict[Any, list[tuple[list, list, list]]] = {}
        self.epoch: int | None = None
        self.universe: list | None = None
        self.tree: list | None = None
        self.raw: list | None = None  # aggregate per rank; None for counts (recovered from the tree)

    def insert(self, key, agg, plus, zero, batch: _Batch, tr: _Trans, k: int) -> None:
        """Store ``agg`` under ``key`` (not NULL): in the live part if ``key`` is in the universe of this
        window's events of ``batch``, else as a new static level."""
        cls = _key_class(key)
        if cls == 0:
            if self.epoch != batch.epoch:
                self._renew(batch, tr, k, plus, zero)
            universe = self.universe
            r = bisect_left(universe, key)
            n = len(universe)
            if r < n and universe[r] == key:
                if self.raw is not None:
                    self.raw[r] = plus(self.raw[r], agg)
                tree = self.tree
                i = n - r if self.above else r + 1
                while i <= n:
                    tree[i] = plus(tree[i], agg)
                    i += i & -i
                return
        self._add_level(cls, [(key, agg)], plus)

    def count_loop(self, key, c: int, batch: _Batch, tr: _Trans, k: int) -> int:
        """COUNT(*) through a self-loop whose probe and key are the same value: ``c`` plus the count over the
        stored keys ``s`` with ``s op key``; the result is then stored under ``key`` (if not 0)."""
        kind = key.__class__
        if (kind is not float and kind is not int) or key != key:
            c = self.query(key, c, add)
            if c and _key_class(key) is not None:
                self.insert(key, c, add, 0, batch, tr, k)
            return c
        if self.epoch != batch.epoch:
            self._renew(batch, tr, k, add, 0)
        if self.levels:
            c = self._static(self.levels.get(0, ()), key, c, add)
        universe = self.universe
        r = bisect_left(universe, key)
        n = len(universe)
        if r == n or universe[r] != key:  # not in this batch's universe (cannot happen for batch events)
            c = self._live(key, c, add)
            if c:
                self._add_level(0, [(key, c)], add)
            return c
        tree = self.tree
        base = n - r if self.above else r + 1
        i = base - 1 if self.strict else base
        while i:
            c += tree[i]
            i &= i - 1
        if c:
            i = base
            while i <= n:
                tree[i] += c
                i += i & -i
        return c

    def _renew(self, batch: _Batch, tr: _Trans, k: int, plus, zero) -> None:
        """Start the live part of this batch: the previous one joins the static levels."""
        self._flush(plus)
        universe = batch.universe(tr, k)
        self.epoch, self.universe = batch.epoch, universe
        self.tree = [zero] * (len(universe) + 1)
        self.raw = None if zero == 0 else [zero] * len(universe)

    def _flush(self, plus) -> None:
        """Move the live part into the static levels."""
        if self.universe is None:
            return
        raw = self.raw
        if raw is None:  # counts: undo the Fenwick sums (the inverse of its linear-time construction)
            tree = self.tree
            n = len(tree) - 1
            for i in range(n, 0, -1):
                j = i + (i & -i)
                if j <= n:
                    tree[j] -= tree[i]
            raw = tree[:0:-1] if self.above else tree[1:]
        pairs = [(key, a) for key, a in zip(self.universe, raw, strict=True) if a]
        self.epoch = self.universe = self.tree = self.raw = None
        if pairs:
            self._add_level(0, pairs, plus)

    def _add_level(self, cls, pairs: list, plus) -> None:
        levels = self.levels.get(cls)
        if levels is None:
            levels = self.levels[cls] = []
        while levels and len(levels[-1][0]) <= len(pairs):
            pairs = sorted(levels.pop()[1] + pairs, key=_first)
        if self.above:
            cum = list(accumulate(map(_second, reversed(pairs)), plus))
            cum.reverse()
        else:
            cum = list(accumulate(map(_second, pairs), plus))
        levels.append((list(map(_first, pairs)), pairs, cum))

    def query(self, probe, total, plus):
        """``total`` plus the aggregate over the stored keys ``k`` with ``k op probe``."""
        cls = _key_class(probe)
        levels = self.levels.get(cls)
        if levels:
            total = self._static(levels, probe, total, plus)
        if cls == 0 and self.universe is not None:
            total = self._live(probe, total, plus)
        return total

    def _static(self, levels, probe, total, plus):
        # "<" and ">=" split the keys before the first one equal to probe, "<=" and ">" after the last
        find = bisect_left if self.strict != self.above else bisect_right
        if self.above:
            for keys, _, cum in levels:
                i = find(keys, probe)
                if i < len(keys):
                    total = plus(total, cum[i])
        else:
            for keys, _, cum in levels:
                i = find(keys, probe)
                if i:
                    total = plus(total, cum[i - 1])
        return total

    def _live(self, probe, total, plus):
        universe, tree = self.universe, self.tree
        i = (bisect_left if self.strict != self.above else bisect_right)(universe, probe)
        if self.above:
            i = len(universe) - i
        while i:
            total = plus(total, tree[i])
            i &= i - 1
        return total


class _Batch:
    """The events of one :func:`advance` call, for the live parts of the vertex trees: per ORDERED
    transition the keys of the batch's events that may enter its source state, and per window the sorted
    distinct numeric keys among them (the Fenwick tree's universe)."""

    def __init__(self, cs: _Compiled, ready: list, epoch: int, times: list):
        self.cs = cs
        self.ready = ready
        self.epoch = epoch
        self.times = times
        self._keys: dict[int, list] = {}
        self._universes: dict[tuple[int, int], list] = {}

    def universe(self, tr: _Trans, k: int) -> list:
        found = self._universes.get((tr.id, k))
        if found is None:
            keys = self._keys.get(tr.id)
            if keys is None:
                bit = 1 << self.cs.positive.states[tr.src].comp
                attr = getattr(tr.key, "attr_name", None)
                keys = self._keys[tr.id] = (
                    [ev.get(attr) if mask & bit else None for _, mask, ev in self.ready] if attr is not None
                    else [tr.key(ev) if mask & bit else None for _, mask, ev in self.ready])
            start = k * self.cs.slide
            lo, hi = bisect_left(self.times, start), bisect_left(self.times, start + self.cs.window)
            # ints and non-NaN floats; other numbers (rare) go to the static levels
            found = self._universes[tr.id, k] = sorted(
                {v for v in keys[lo:hi] if v.__class__ is int or (v.__class__ is float and v == v)})
        return found


class _Queue:
    """A FIFO of ``(ts, aggregate)`` in ts order with its total, popping from the front in amortized O(1)
    for any aggregate (two stacks).  Holds the vertices behind a negation marker: a finished negative trend
    invalidates a prefix of them, for good (§5.2)."""

    __slots__ = ("front", "back", "back_total")

    def __init__(self, zero) -> None:
        self.front: list[tuple[Any, Any]] = []  # oldest last; each with the total of itself and newer fronts
        self.back: list[tuple[Any, Any]] = []
        self.back_total = zero

    def push(self, ts, agg, alg) -> None:
        self.back.append((ts, agg))
        self.back_total = alg.add(self.back_total, agg)

    def drop_before(self, ts, alg, inclusive: bool = False) -> None:
        """Drop the entries older than ``ts`` (``inclusive``: and those at ``ts``)."""
        while True:
            if not self.front:
                if not self.back:
                    return
                acc = alg.zero
                for t, a in reversed(self.back):
                    acc = alg.add(acc, a)
                    self.front.append((t, acc))
                self.back = []
                self.back_total = alg.zero
            if self.front[-1][0] > ts if inclusive else self.front[-1][0] >= ts:
                return
            self.front.pop()

    def total(self, alg):
        return alg.add(self.front[-1][1], self.back_total) if self.front else self.back_total


class _Win:
    """One window's aggregates in one positive graph: ``R[j]`` the running aggregate over the vertices of
    state ``j`` (then those of the states' vertices no stop event has followed, ``_State.cut_slot``) and ``R[-1]``
    the final aggregate (over END events), the vertex trees and hash maps
    (``index``), the queues of guarded transitions and of END events awaiting end negation (``guarded``,
    ``ends``)."""

    __slots__ = ("R", "index", "guarded", "ends")

    def __init__(self, n_states: int, zero) -> None:
        self.R = [zero] * (n_states + 1)
        self.index: dict[int, Any] = {}
        self.guarded: dict[int, _Queue] = {}
        self.ends: dict[int, _Queue] = {}


class _Run:
    """The runtime of the positive graph (one per value of a scoped equivalence test): windows, and the
    vertices of states whose outgoing edges are checked one by one (``ts, event, {window: aggregate}``), and
    the vertices of the partition's last event in states a ``NEXT`` step leaves (``{state: (event, {window:
    aggregate})}``), and those of its states a ``NEXT !(C c)`` edge leaves, held until the partition's next event
    says whether they may enter it (``(state index, event, ts, {window: aggregate})``; a state saved before this slot
    existed has none)."""

    __slots__ = ("wins", "stores", "link", "held", "marked")

    def __init__(self) -> None:
        self.wins: dict[int, _Win] = {}
        self.stores: dict[int, list] = {}
        self.link: dict[int, tuple] = {}
        self.held: list[tuple] = []
        #: UNTIL: the state's buffered events carry their stop marks (``engine._mark_older``; one saved before has
        #: none)
        self.marked = False

    def clone(self) -> _Run:
        out = _Run()
        for k, win in self.wins.items():
            copy = _Win.__new__(_Win)
            copy.R = list(win.R)
            copy.index = {t: _copy_index(ix) for t, ix in win.index.items()}
            copy.guarded = {t: _copy_queue(q) for t, q in win.guarded.items()}
            copy.ends = {t: _copy_queue(q) for t, q in win.ends.items()}
            out.wins[k] = copy
        out.stores = {j: list(store) for j, store in self.stores.items()}
        out.link = dict(self.link)
        out.held = list(getattr(self, "held", ()))
        out.marked = getattr(self, "marked", False)
        return out


def _copy_index(ix):
    if isinstance(ix, dict):
        return dict(ix)
    out = _VertexTree(ix.op)
    out.levels = {c: list(levels) for c, levels in ix.levels.items()}  # levels are never mutated in place
    out.epoch, out.universe = ix.epoch, ix.universe  # the universe is shared and read-only
    out.tree = None if ix.tree is None else list(ix.tree)
    out.raw = None if ix.raw is None else list(ix.raw)
    return out


def _copy_queue(q: _Queue) -> _Queue:
    out = _Queue(None)
    out.front, out.back, out.back_total = list(q.front), list(q.back), q.back_total
    return out


class _NegRun:
    """The runtime of one negation graph: per state the largest trend start over its vertices (``best``),
    the monotone queues of guarded transitions (``(ts, start)``, starts decreasing), stored vertices, and the
    vertices of the partition's last event in states a ``NEXT`` step inside the negation leaves (``{state: (event,
    start)}``; a state saved before this slot existed has none), and those a ``NEXT !(C c)`` inside it holds."""

    __slots__ = ("best", "queues", "stores", "link", "held", "released")

    def __init__(self, n_states: int) -> None:
        self.best = [-_INF] * n_states
        self.queues: dict[int, deque] = {}
        self.stores: dict[int, list] = {}
        self.link: dict[int, tuple] = {}
        #: ``NEXT !(C c)`` inside the negation: its vertices of the partition's last event, ``(state, event, start)``,
        #: waiting for the next event; and per transition across it the largest start of the released ones
        self.held: list[tuple] = []
        self.released: dict[int, float] = {}
