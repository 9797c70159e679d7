"""Sharon's shared executor: COUNT(*) of several SEQ queries whose common sub-patterns are counted once.

This engine implements the Shared method of Poppe et al., *Sharon: Shared Online Event Sequence Aggregation*
(§3.2–3.3, the paper in ``papers/``) for one partition of the common partition key.  It is pure Python,
knows nothing about Spark, and has the shape of :mod:`sparkcep.runtime_udfs.trend.engine`: :func:`step`
buffers events, :func:`advance` processes those below a watermark in ``ts`` order and emits the rows of every
window the watermark has passed, one row per (query, window) with at least one trend.  An event at the
watermark's very ts is not late (LANGUAGE.md §1) and waits for a later watermark, with the other events of
its ts; no window it is in has ended yet.

**Segments.**  The sharing plan cuts each query's pattern into *segments* (see
:mod:`sparkcep.compiler.optimizer.sharing.layout`): a shared pattern is one segment for all its queries, a
private piece belongs to one query.  Without a plan every query is one private segment: that is the
Non-Shared method (A-Seq), the baseline the benchmark compares against.

**Counts per START event (§3.2).**  A segment ``E_1 … E_l`` keeps, for every START event ``s`` (an event
of type ``E_1``), the vector ``c_s[j]`` = number of sequences ``s … e`` matching ``E_1 … E_j`` so far.  An
event of type ``E_j`` (``j > 1``) adds ``c_s[j-1]`` to ``c_s[j]`` for every START event before it.  The
vector does not depend on the window: a sequence from ``s`` lies in window ``k`` iff ``s`` does and it ended
before the window's end, and a window's result is read exactly when its end is reached.  Events with
equal ``ts`` are processed as one group that sees the counts as they were before the group (a sequence has
strictly increasing timestamps); START events of one group are merged into one START with multiplicity.

**Count combination (§3.3).**  For query ``q`` = segments ``S_0 · S_1 · … · S_m`` and window ``k``, let
``C_j(k)`` be the number of sequences of ``S_0 … S_j`` in window ``k`` so far.  ``C_0(k) = Σ c_s[l]`` over
the START events of ``S_0`` in window ``k``.  When a START event ``u`` of ``S_j`` (``j > 0``) arrives, it
records the weight ``w_u(k) = C_{j-1}(k)`` (the sequences of the preceding segments that end before ``u``),
and ``C_j(k) = Σ w_u(k) · c_u[l]``.  ``COUNT(*)`` of ``q`` in window ``k`` is ``C_m(k)`` when the window
ends.  Both are kept as running totals, updated when some ``c_u[l]`` grows: ``C_0`` as sums per pane
(``[k·slide, (k+1)·slide)``; a START in pane ``π`` lies in the open windows ``k <= π``), ``C_j`` per open
window, except the last segment's ``C_m``, only read when a window closes and computed then.  Counts are
exact Python ints.

**Other aggregates.**  A query may also return ``COUNT(v)``, ``SUM``/``AVG``/``MIN``/``MAX(v.attr)``
(:class:`SharedAggregate`).  Then every count above is a measured count (:class:`_Vec`): sequences with the
number of ``v`` events, the exact sum of ``v.attr``, its min and max over them; the same additions and
multiplications combine them (the product rule ``(c₁, x₁)·(c₂, x₂) = (c₁c₂, c₁x₂ + x₁c₂)``), and at each
chain position only the query's measures of that occurrence of the segment are kept.

**Layout.**  A segment's START events are stored column-wise (one list per pattern position, one per
weighted window), so an event updates all of them with one C-speed ``map`` over the lists.

**Partitions and groups.**  The caller runs one state per value of ``spec.key``; where the key is finer
than the GROUP BY, :func:`merge_rows` sums a query's counts of a window over the partitions.

**Scope** (:func:`check` raises :class:`EngineUnsupportedError` otherwise): every query is a ``SEQ`` of
event types without predicates but the partition key, all with the same window, slide and key
(:mod:`sparkcep.compiler.optimizer.sharing.scope` decides this before a query is handed here).

Example (as Sharon Example 3: count(A, B, C, D) from count(A, B) and counts per START event of (C, D);
c3 extends the one (a1, b2) by its 2 (c, d) sequences, c6 the 3 (a, b) sequences by 2: 2 + 6)::

    >>> from sparkcep.ir.sharing import SharedQuery, SharedSpec
    >>> spec = SharedSpec(segments=(("ab", ("A", "B")), ("cd", ("C", "D"))),
    ...                   queries=(SharedQuery("q", "count_all", ("ab", "cd")),), window=100, slide=100)
    >>> events = [{"type": t, "ts": int(ts)} for t, ts in zip("ABCBBCDD", "12345678")]
    >>> state, _ = step(spec, init_state(), events)
    >>> advance(spec, state, math.inf)[1]
    [{'query': 'q', 'window_start': 0, 'window_end': 100, 'count_all': 8}]
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from operator import add, itemgetter, mul
from typing import TYPE_CHECKING

from sparkcep.ir.spec import SlotState
from sparkcep.runtime_udfs.match.engine import EngineUnsupportedError
from sparkcep.runtime_udfs.trend.aggregates import _exact, _final_avg, _final_sum, _sum_add

if TYPE_CHECKING:
    from sparkcep.ir.sharing import SharedSpec

__all__ = ["EngineUnsupportedError", "SharedState", "advance", "check", "init_state", "is_empty", "merge_rows", "step",
           "wakeup"]

#: Version tag of the serialized state (:meth:`SharedState.to_bytes`).
STATE_VERSION = 1

_INF = math.inf

_ts_of = itemgetter(0)


class _Vec:
    """A count of sequences with measures over them (§3.3's count combination carried to the other
    aggregates): ``c`` sequences and, per measure ``i`` of kind ``kinds[i]``, ``x[i]``: ``n`` the number of
    measured events in them, ``s`` the exact sum of the measured attribute, ``min``/``max`` its extreme
    (None: no value).  Concatenating two parts multiplies (``c = c1·c2``; an additive measure is
    ``c1·x2 + x1·c2``, each sequence of one part joined with each of the other; min/max fold), uniting sets
    of sequences adds.  No sequence is the int 0, so a ``_Vec`` always has ``c > 0``, and the engine's list
    arithmetic (``map(add, …)``, ``map(mul, …)``, ``sum``) runs unchanged on these values."""

    __slots__ = ("c", "x", "kinds")

    def __init__(self, c: int, x: tuple, kinds: tuple[str, ...]):
        self.c, self.x, self.kinds = c, x, kinds

    def __add__(self, o):
        if type(o) is int:
            if o:
                raise TypeError("a measured count only adds to another or to 0")
            return self
        out = []
        for k, a, b in zip(self.kinds, self.x, o.x, strict=True):
            if k == "n":
                out.append(a + b)
            elif k == "s":
                out.append(_sum_add(a, b))
            else:
                out.append(a if b is None else b if a is None else (min(a, b) if k == "min" else max(a, b)))
        return _Vec(self.c + o.c, tuple(out), self.kinds)

    __radd__ = __add__

    def __mul__(self, o):
        if type(o) is int:
            if o:
                raise TypeError("a measured count only multiplies another or 0")
            return 0
        c1, c2 = self.c, o.c
        out = []
        for k, a, b in zip(self.kinds, self.x, o.x, strict=True):
            if k == "n":
                out.append(c1 * b + a * c2)
            elif k == "s":
                out.append(_sum_add(c1 * b, a * c2))
            else:
                out.append(a if b is None else b if a is None else (min(a, b) if k == "min" else max(a, b)))
        return _Vec(c1 * c2, tuple(out), self.kinds)

    __rmul__ = __mul__

    def __bool__(self) -> bool:
        return True

    def __eq__(self, o) -> bool:
        return isinstance(o, _Vec) and (self.c, self.x) == (o.c, o.x)

    def __hash__(self) -> int:
        return hash((self.c, self.x))

    def __repr__(self) -> str:
        return f"_Vec({self.c}, {self.x})"

    def project(self, keep: tuple[bool, ...]) -> _Vec:
        """The same sequences with only the measures ``keep`` marks (the others: none measured)."""
        return _Vec(self.c, tuple(v if k else (None if kind in ("min", "max") else 0)
                                  for v, k, kind in zip(self.x, keep, self.kinds, strict=True)), self.kinds)


def _project(values, keep):
    return [v if type(v) is int else v.project(keep) for v in values]


def _count(total) -> int:
    return total if type(total) is int else total.c


class _Compiled:
    def __init__(self, spec: SharedSpec):
        self.window, self.slide = spec.window, spec.slide
        ids = [sid for sid, _ in spec.segments]
        index = {sid: i for i, sid in enumerate(ids)}
        self.lengths = [len(p) for _, p in spec.segments]
        self.chains = [tuple(index[s] for s in q.segments) for q in spec.queries]
        self.names = [q.name for q in spec.queries]
        self.outputs = [q.output for q in spec.queries]
        self.group_by = spec.group_by
        # type -> segments it starts; type -> [(segment, position j >= 1)]
        self.starts: dict[str, list[int]] = {}
        self.extends: dict[str, list[tuple[int, int]]] = {}
        for i, (_, pattern) in enumerate(spec.segments):
            self.starts.setdefault(pattern[0], []).append(i)
            for j, t in enumerate(pattern[1:], start=1):
                self.extends.setdefault(t, []).append((i, j))
        # segment -> the (query, chain position j >= 1) that need weights at its START events
        self.users: list[list[tuple[int, int]]] = [[] for _ in ids]
        for qi, chain in enumerate(self.chains):
            for j, i in enumerate(chain):
                if j:
                    self.users[i].append((qi, j))
        self.types = frozenset(self.starts) | frozenset(self.extends)
        self.last = [n - 1 for n in self.lengths]
        self.weight_keys = [(qi, pos) for qi, chain in enumerate(self.chains) for pos in range(1, len(chain))]
        #: ``C_m`` of a query's last segment is only read when a window closes: computed then, not kept
        self.lazy = frozenset((qi, len(chain) - 1) for qi, chain in enumerate(self.chains) if len(chain) > 1)
        self.pos0 = [False] * len(ids)
        for chain in self.chains:
            self.pos0[chain[0]] = True
        self._measures(spec, ids)

    def _measures(self, spec: SharedSpec, ids: list[str]) -> None:
        """Aggregates other than COUNT(*): counts become :class:`_Vec` (``vector``), one measure per (query,
        kind, attribute, positions); an event at position ``j`` of segment ``S`` carries the measures whose
        positions fall there (``at[(S, j)]``); at chain position ``pos`` of query ``qi`` only that query's
        measures with positions in that occurrence of the segment count (``masks[(qi, pos)]``)."""
        self.vector = any(q.aggregates for q in spec.queries)
        self.agg_outputs: list[list[tuple[str, str, int, int | None]]] = [[] for _ in spec.queries]
        self.masks: dict[tuple[int, int], tuple[bool, ...]] | None = None
        self.partial = self.vector and set(spec.key) != set(spec.group_by)
        if not self.vector:
            return
        measures: list[tuple] = []

        def measure(*key) -> int:
            if key not in measures:
                measures.append(key)
            return measures.index(key)

        for qi, q in enumerate(spec.queries):
            for a in q.aggregates:
                func = a.func.lower()
                n = measure("n", qi, a.attr, a.positions)
                x = None
                if func in ("sum", "avg"):
                    x = measure("s", qi, a.attr, a.positions)
                elif func in ("min", "max"):
                    x = measure(func, qi, a.attr, a.positions)
                self.agg_outputs[qi].append((a.name, func, n, x))
        self.kinds = tuple(m[0] for m in measures)
        self.attrs = tuple(dict.fromkeys(m[2] for m in measures if m[2] is not None))
        attr_index = {a: i for i, a in enumerate(self.attrs)}
        lengths = dict(zip(ids, self.lengths, strict=True))
        at: dict[tuple[int, int], list[tuple[int, str, int | None]]] = {}
        masks = {}
        for qi, q in enumerate(spec.queries):
            offset = 0
            for pos, sid in enumerate(q.segments):
                seg, n = ids.index(sid), lengths[sid]
                keep = []
                for m, (kind, mq, attr, positions) in enumerate(measures):
                    inside = [g - offset for g in positions if mq == qi and offset <= g < offset + n]
                    keep.append(bool(inside))
                    for j in inside:
                        entry = (m, kind, None if attr is None else attr_index[attr])
                        if entry not in at.setdefault((seg, j), []):
                            at[(seg, j)].append(entry)
                masks[(qi, pos)] = tuple(keep)
                offset += n
        self.at = at
        self.masks = masks
        self.zero = tuple(None if k in ("min", "max") else 0 for k in self.kinds)

    def weight(self, seg: int, j: int, group: list[tuple]):
        """The events ``group`` (their measured attribute values) at position ``j`` of segment ``seg``, as one
        :class:`_Vec`: as many sequences of length 1 as events, with their measures."""
        entries = self.at.get((seg, j), ())
        out = list(self.zero)
        for m, kind, a in entries:
            for vals in group:
                v = None if a is None else vals[a]
                if kind == "n":
                    if a is None or v is not None:
                        out[m] += 1
                elif v is None:
                    continue
                elif kind == "s":
                    out[m] = _sum_add(out[m], _exact(v))
                elif out[m] is None or (v < out[m] if kind == "min" else v > out[m]):
                    out[m] = v
        return _Vec(len(group), tuple(out), self.kinds)

    def windows_of(self, t) -> range:
        """The windows ``k`` with ``k·slide <= t < k·slide + window``."""
        return range(self.first_open(t), math.floor(t / self.slide) + 1)

    def first_open(self, limit) -> int:
        """The smallest ``k`` whose window has not ended at ``limit`` (``k·slide + window > limit``)."""
        w, s = self.window, self.slide
        k = math.floor((limit - w) / s) + 1
        while k * s + w <= limit:
            k += 1
        while (k - 1) * s + w > limit:
            k -= 1
        return k


@lru_cache(maxsize=64)
def _compiled(spec: SharedSpec) -> _Compiled:
    return _Compiled(spec)


def check(spec: SharedSpec) -> None:
    """Raise :class:`EngineUnsupportedError` if the spec is outside this engine's scope."""
    ids = [sid for sid, _ in spec.segments]
    if len(set(ids)) != len(ids):
        raise EngineUnsupportedError("shared engine: segment ids must be unique")
    if not spec.window > 0 or not spec.slide > 0:
        raise EngineUnsupportedError("shared engine: window and slide must be positive")
    for sid, pattern in spec.segments:
        if not pattern or not all(isinstance(t, str) for t in pattern):
            raise EngineUnsupportedError(f"shared engine: segment {sid} is not a sequence of event types")
    lengths = dict(spec.segments)
    for q in spec.queries:
        if not q.segments or not set(q.segments) <= set(ids):
            raise EngineUnsupportedError(f"shared engine: query {q.name} names unknown segments")
        size = sum(len(lengths[s]) for s in q.segments)
        for a in q.aggregates:
            if a.func.lower() not in ("count", "sum", "avg", "min", "max"):
                raise EngineUnsupportedError(f"shared engine: aggregate {a.func}() is not supported")
            if a.func.lower() != "count" and a.attr is None:
                raise EngineUnsupportedError(f"shared engine: {a.func}() needs an attribute")
            if not a.positions or not all(0 <= g < size for g in a.positions):
                raise EngineUnsupportedError(f"shared engine: aggregate {a.name} of {q.name} has no position")


class SharedState(SlotState):
    """The state of one partition.  Mutated in place by :func:`step` and :func:`advance`, which return it.

    ``frontier``  the watermark processed so far: events with ``ts < frontier`` are late.
    ``pending``   buffered ``(ts, type)`` in arrival order, all with ``ts >= frontier``.
    ``group``     the GROUP BY values (constant within a partition), from the first event.
    ``kmin``      the first window not emitted yet (None before the first event); ``kmax`` the last seen.
    ``segs``      per segment: its START events, column-wise (:class:`_Segment`).
    ``unit``      per segment: ``{window: Σ c_s[l]}`` over its START events in the window (``C_0`` of the
                  queries that begin with it).
    ``totals``    per ``(query, chain position > 0)``: ``{window: C_pos(window)}``.
    ``late``, ``invalid``  events dropped as late / without a usable ts.
    """

    __slots__ = ("frontier", "pending", "group", "kmin", "kmax", "segs", "unit", "totals", "late", "invalid")
    VERSION = STATE_VERSION
    ENGINE = "shared engine"

    def __init__(self) -> None:
        self.frontier: float = -_INF
        self.pending: list[tuple] = []
        self.group: tuple | None = None
        self.kmin: int | None = None
        self.kmax: int | None = None
        self.segs: list = []
        self.unit: list[dict[int, int]] = []
        self.totals: dict[tuple[int, int], dict[int, int]] = {}
        self.late = 0
        self.invalid = 0


def init_state() -> SharedState:
    return SharedState()


def is_empty(state: SharedState) -> bool:
    """True when nothing is buffered and no window is open (the caller may drop the state)."""
    return not state.pending and state.kmin is None


def wakeup(spec: SharedSpec, state: SharedState) -> float | None:
    """The smallest watermark at which :func:`advance` has work without new events, or None: the end of the
    first window holding the earliest buffered event (processable once the watermark is past it), or the end
    of the first open window."""
    times = []
    if state.pending:
        first = min(map(_ts_of, state.pending))
        times.append(_compiled(spec).first_open(first) * spec.slide + spec.window)
    if state.kmin is not None:
        times.append(state.kmin * spec.slide + spec.window)
    return min(times) if times else None


def step(spec: SharedSpec, state: SharedState, events: Iterable[dict]) -> tuple[SharedState, list[dict]]:
    """Buffer ``events`` (any order); rows come from :func:`advance`.  Late events (``ts < frontier``) and
    events without a usable ``ts`` are counted; events of no segment's type are dropped."""
    cs = _compiled(spec)
    frontier = state.frontier
    types = cs.types
    append = state.pending.append
    for ev in events:
        ts = ev.get("ts")
        if ts is None or ts != ts or ts in (_INF, -_INF):
            state.invalid += 1
            continue
        if ts < frontier:
            state.late += 1
            continue
        t = ev.get("type")
        if t not in types:
            continue
        if state.group is None and cs.group_by:
            state.group = tuple(ev.get(g) for g in cs.group_by)
        if cs.vector:
            append((ts, t, tuple(ev.get(a) for a in cs.attrs)))
        else:
            append((ts, t))
    return state, []


def advance(spec: SharedSpec, state: SharedState, watermark: float) -> tuple[SharedState, list[dict]]:
    """Process the buffered events with ``ts < watermark`` in ``ts`` order and return the rows of every
    window whose end the watermark has reached (``inf`` flushes everything); events at the watermark's ts
    wait, as more of that ts may come."""
    if not watermark > state.frontier:
        return state, []
    cs = _compiled(spec)
    if not state.segs:
        _reset(cs, state)
    pending = state.pending
    pending.sort(key=_ts_of)
    cut = bisect_left(pending, watermark, key=_ts_of)
    ready, state.pending = pending[:cut], pending[cut:]
    state.frontier = watermark
    rows: list[dict] = []
    i = 0
    while i < len(ready):
        t = ready[i][0]
        j = i
        while j < len(ready) and ready[j][0] == t:
            j += 1
        if state.kmin is not None:
            _emit(cs, state, t, rows)
        _group(cs, state, t, Counter(e[1] for e in ready[i:j]), ready[i:j])
        i = j
    if state.kmin is not None:
        _emit(cs, state, watermark, rows)
    return state, rows


class _Segment:
    """The START events of one segment, column-wise (C-speed list arithmetic over all of them at once):
    ``ts`` and ``pane`` (``floor(ts / slide)``, ascending) per START, ``cols[j]`` the counts ``c_s[j]``, and per
    ``(query, chain position > 0)`` using the segment ``weights[key][k]`` = ``w_s(k)`` per START (0 where
    the START is not in window ``k``)."""

    __slots__ = ("ts", "pane", "cols", "weights")

    def __init__(self, length: int, keys) -> None:
        self.ts: list = []
        self.pane: list[int] = []
        self.cols: list[list[int]] = [[] for _ in range(length)]
        self.weights: dict[tuple[int, int], dict[int, list[int]]] = {key: {} for key in keys}

    def pane_sums(self, values: list[int]):
        """``(pane, Σ values of the STARTs in it)`` per pane."""
        panes = self.pane
        i, n = 0, len(panes)
        while i < n:
            p = panes[i]
            j = bisect_right(panes, p, i)
            yield p, sum(values[i:j])
            i = j


def _totals(cs: _Compiled, st: SharedState, qi: int, pos: int, lo: int, hi: int) -> dict[int, int]:
    """``C_pos(k)`` for the open windows ``lo <= k <= hi`` (non-zero ones): the sequences of the first
    ``pos + 1`` segments of query ``qi`` lying in window ``k`` so far.  For ``pos = 0`` a suffix sum of the
    first segment's pane sums (a START in pane ``π`` lies in the open windows ``k <= π``)."""
    if pos and (qi, pos) in cs.lazy:  # the query's last segment: Σ w_u(k)·c_u[l], computed when read
        sg = st.segs[cs.chains[qi][pos]]
        by_window, last = sg.weights[(qi, pos)], sg.cols[-1]
        if cs.masks is not None:
            last = _project(last, cs.masks[(qi, pos)])
        out = {}
        for k in range(lo, hi + 1):
            ws = by_window.get(k)
            if ws:
                v = sum(map(mul, ws, last))
                if v:
                    out[k] = v
        return out
    if pos:
        tot = st.totals[(qi, pos)]
        return {k: tot[k] for k in range(lo, hi + 1) if tot.get(k)}
    unit = st.unit[cs.chains[qi][0]]
    if not unit:
        return {}
    out = {}
    run = sum(v for p, v in unit.items() if p > hi)
    for k in range(hi, lo - 1, -1):
        run += unit.get(k, 0)
        if run:
            out[k] = run
    if cs.masks is not None:
        keep = cs.masks[(qi, 0)]
        out = {k: v.project(keep) for k, v in out.items()}
    return out


def _completed(cs: _Compiled, st: SharedState, seg: int, sg: _Segment, deltas: list[int]) -> None:
    """The STARTs' ``c_s[l]`` grew by ``deltas``: add them to their panes' sums (queries beginning with the
    segment) and, weighted, to the running totals ``C_pos(k)`` of the queries using it later in their chain."""
    if cs.pos0[seg]:
        unit = st.unit[seg]
        for p, d in sg.pane_sums(deltas):
            if d:
                unit[p] = unit.get(p, 0) + d
    lazy = cs.lazy
    for key, by_window in sg.weights.items():
        if key in lazy:
            continue
        tot = st.totals[key]
        ds = deltas if cs.masks is None else _project(deltas, cs.masks[key])
        for k, ws in by_window.items():
            d = sum(map(mul, ws, ds))
            if d:
                tot[k] = tot.get(k, 0) + d


def _group(cs: _Compiled, st: SharedState, t, types: Counter, events: list[tuple] = ()) -> None:
    """One group of events with equal ``ts``: weights of new START events, then the count updates, then the
    new START events (so no event of the group extends a sequence of the group).  With measures
    (``cs.vector``) the group's events of a type enter as one :class:`_Vec` instead of their number."""
    values: dict[str, list[tuple]] = {}
    if cs.vector:
        for e in events:
            values.setdefault(e[1], []).append(e[2])
    ks = cs.windows_of(t)
    if not ks:  # between windows (slide > window): the group is in no window
        return
    if st.kmin is None:
        st.kmin = ks.start
    klo, khi = max(ks.start, st.kmin), ks.stop - 1
    st.kmax = khi if st.kmax is None else max(st.kmax, khi)
    new = []
    for tp, n in types.items():
        for seg in cs.starts.get(tp, ()):
            weights = {}
            for qi, pos in cs.users[seg]:
                w = _totals(cs, st, qi, pos - 1, klo, khi)
                if w:
                    weights[(qi, pos)] = w
            new.append((seg, cs.weight(seg, 0, values[tp]) if cs.vector else n, weights))
    todo = [(seg, j, n, tp) for tp, n in types.items() for seg, j in cs.extends.get(tp, ())]
    if todo:
        todo.sort(key=_desc)
        segs = st.segs
        for seg, j, n, tp in todo:
            sg = segs[seg]
            if not sg.ts:
                continue
            cols = sg.cols
            prev = cols[j - 1]
            if cs.vector:
                w = cs.weight(seg, j, values[tp])
                deltas = [w * x for x in prev]
            else:
                deltas = prev if n == 1 else [n * x for x in prev]
            cols[j] = list(map(add, cols[j], deltas))
            if j == cs.last[seg]:
                _completed(cs, st, seg, sg, deltas)
    for seg, n, weights in new:
        sg = st.segs[seg]
        size = len(sg.ts)
        sg.ts.append(t)
        sg.pane.append(khi)
        cols = sg.cols
        cols[0].append(n)
        for col in cols[1:]:
            col.append(0)
        for key, by_window in sg.weights.items():
            w = weights.get(key, {})
            for k in w:
                if k not in by_window:
                    by_window[k] = [0] * size
            for k, ws in by_window.items():
                ws.append(w.get(k, 0))
        if cs.lengths[seg] == 1:
            _completed(cs, st, seg, sg, [0] * size + [n])

#: columns carrying a SUM/AVG's exact sum and count when rows of several partitions are merged
PARTIAL = "_partial_"


def _aggregates(cs: _Compiled, qi: int, total: _Vec, row: dict) -> None:
    """The query's aggregates other than COUNT(*) from its measured count (as the GRETA engine finalizes
    them: exact sums, None where no event has the attribute)."""
    x = total.x
    for name, func, n, m in cs.agg_outputs[qi]:
        if func == "count":
            row[name] = x[n]
        elif not x[n]:
            row[name] = None
        elif func == "sum":
            row[name] = _final_sum(x[m])
        elif func == "avg":
            row[name] = _final_avg(x[m], x[n])
        else:
            row[name] = x[m]
        if cs.partial and func in ("sum", "avg"):
            row[f"{PARTIAL}{name}_sum"] = x[m] if x[n] else None
            row[f"{PARTIAL}{name}_n"] = x[n]


def _desc(item):
    return (item[0], -item[1])


def _emit(cs: _Compiled, st: SharedState, limit, rows: list[dict]) -> None:
    """Emit every window that ends at or before ``limit`` (one row per query with a non-zero count), then drop
    the totals and START events no open window needs."""
    w, s = cs.window, cs.slide
    due_end = st.kmax if limit == _INF else min(st.kmax, cs.first_open(limit) - 1)
    if due_end < st.kmin:
        return
    group = st.group or (None,) * len(cs.group_by)
    for qi, chain in enumerate(cs.chains):
        totals = _totals(cs, st, qi, len(chain) - 1, st.kmin, due_end)
        for k in range(st.kmin, due_end + 1):
            total = totals.get(k)
            if total:
                row = {"query": cs.names[qi], "window_start": k * s, "window_end": k * s + w}
                row.update(zip(cs.group_by, group, strict=True))
                if cs.outputs[qi] is not None:
                    row[cs.outputs[qi]] = _count(total)
                if cs.vector:
                    _aggregates(cs, qi, total, row)
                rows.append(row)
    if limit == _INF:
        _reset(cs, st)
        return
    st.kmin = max(st.kmin, due_end + 1)
    kmin = st.kmin
    for table in (*st.unit, *st.totals.values()):
        for k in [k for k in table if k < kmin]:
            del table[k]
    live = False
    for sg in st.segs:
        cut = bisect_left(sg.pane, kmin)  # STARTs in panes before kmin lie in no open window
        if cut:
            del sg.ts[:cut], sg.pane[:cut]
            for col in sg.cols:
                del col[:cut]
        for by_window in sg.weights.values():
            for k in [k for k in by_window if k < kmin]:
                del by_window[k]
            if cut:
                for ws in by_window.values():
                    del ws[:cut]
        live = live or bool(sg.ts)
    if st.kmin > st.kmax and not live:
        st.kmin = st.kmax = None


def _reset(cs: _Compiled, st: SharedState) -> None:
    st.kmin = st.kmax = None
    st.segs = [_Segment(n, [key for key in cs.weight_keys if cs.chains[key[0]][key[1]] == i])
               for i, n in enumerate(cs.lengths)]
    st.unit = [{} for _ in cs.lengths]
    st.totals = {key: {} for key in cs.weight_keys}


def merge_rows(spec: SharedSpec, rows: Iterable[dict]) -> list[dict]:
    """Combine the rows of several partitions into one row per query, window and group: when the partition
    key is finer than the GROUP BY (``WHERE [vehicle]`` without ``GROUP BY vehicle``), a query's count in a
    window is the sum over the partitions."""
    outputs = {q.name: q.output for q in spec.queries}
    aggregates = {q.name: q.aggregates for q in spec.queries}
    merged: dict[tuple, dict] = {}
    for r in rows:
        k = (r["query"], r["window_start"], *(r.get(g) for g in spec.group_by))
        into = merged.get(k)
        if into is None:
            merged[k] = dict(r)
            continue
        out = outputs[r["query"]]
        if out is not None:
            into[out] += r[out]
        for a in aggregates[r["query"]]:
            func, name = a.func.lower(), a.name
            x, y = into[name], r[name]
            if func == "count":
                into[name] = x + y
            elif func in ("min", "max"):
                into[name] = x if y is None else y if x is None else (min(x, y) if func == "min" else max(x, y))
            else:
                total, n = f"{PARTIAL}{name}_sum", f"{PARTIAL}{name}_n"
                into[n] += r[n]
                into[total] = r[total] if into[total] is None else into[total] if r[total] is None else \
                    _sum_add(into[total], r[total])
                if into[n]:
                    into[name] = _final_sum(into[total]) if func == "sum" else _final_avg(into[total], into[n])
    return [{c: v for c, v in row.items() if not c.startswith(PARTIAL)} for row in merged.values()]
