"""GRETA trend aggregation: event-trend aggregates computed online, without constructing trends.

This engine implements Poppe et al., *GRETA: Graph-based Real-time Event Trend Aggregation* (the paper in
``papers/``) for one partition of the equivalence key (the caller partitions, GRETA §6 "Event Trend
Grouping").  It is pure Python, knows nothing about Spark, and has the shape of
:mod:`sparkcep.runtime_udfs.match.engine`: :func:`step` buffers events, :func:`advance` processes those below
a watermark in ``ts`` order and emits the rows of every window the watermark has passed.  An event at the
watermark's very ts is not late (LANGUAGE.md §1: only an older one is) and waits for a later watermark, so
that the events of one ts are always processed together; no window it is in has ended yet.

**Template (§4.1, Algorithm 1; §9 "Multiple Event Type Occurrences").**  Every positive component of the
pattern is a template state, so a type that occurs twice gives two states and an event may enter several.
Transitions are computed as Glushkov's follow relation, which for ``SEQ`` and ``+`` is exactly Algorithm 1
(``end(Pi) → start(Pj)`` for ``SEQ(Pi, Pj)``, ``end(Pi) → start(Pi)`` for ``Pi+``) and extends it to ``*``,
``?`` and ``OR``.  Since every state is a distinct variable, paths of the graph and trends (sets of
``(event, variable)`` pairs) are in bijection (Theorem 4.2).

**Bounded quantifiers and NEXT.**  ``P{n,m}`` is unrolled into count-indexed copies of ``P``'s states
(``b#1`` ... ``b#m``; for ``P{n,}`` the last, ``b#n+``, loops), nested so that a trend has one path: a vertex
of ``b#i`` aggregates the trends with ``i`` iterations so far, and the bound costs O(m) states, not trend
enumeration.  An edge into a ``NEXT`` step (LINK) comes only from the vertex of the partition's previous event
(every event reaches the engine, ``_mask`` 0 for those of no component; of a group of equal timestamps only
the first follows the previous ts), kept across calls in ``_Run.link``.  An edge across ``NEXT !(C c)`` (notNext)
is valid only from a vertex whose next event in the partition is no such ``C``: it has its own running aggregate
(or index, or store), which a vertex enters one event late, once that next event has come (:func:`_release`; a
vertex of a micro-batch's last event waits in ``_Run.held``).

**Stop conditions (UNTIL).**  A trend takes no stop event of a loop with ``UNTIL`` (Flink's ``until``) between
the loop's first and last events, ends included (docs/language.md).  A stop event is no vertex of the loop's
states and *resets the loop's self-edge sums*: every edge inside the loop (``b -> b``, ``b#i -> b#i+1``, a group's
edges) has its own running aggregate (a plain one: an entry of ``R`` after the states', ``_State.cut_slot``, on the
generated scan's fast path), vertex tree, hash map or store per window (``_Trans.cut``), which each stop empties
(:func:`_cut`); edges into and out of the loop read the state's own ones, which keep every vertex.  In a group of
equal timestamps the input order decides: a vertex after a stop has no predecessor inside the loop, one before it
does not enter the emptied structures.  :func:`step` finds the stop events of a batch: it reads the attributes the
conditions read as it goes over the events, evaluates each condition once over them, vectorized
(:meth:`_Compiled.mark_stops`), and marks the stop events in their masks (a bit per loop above the components').

**Negation (§5).**  Each ``NOT N`` is split off (Algorithm 3) into its own graph.  Where ``NOT N`` sits between
two positive sub-patterns, the template transitions from ``end(Pi)`` to ``start(Pj)`` carry a *marker* ``N``;
markers before the first or after the last positive event are start and end negations (§5.1 cases 1–3).
The graph of ``N`` maintains, instead of counts, ``L_N(t)``: the latest start of a finished ``N`` trend that
ended before ``t`` (Definition 5: a finished trend ``(e1..en)`` invalidates events before ``e1.time`` for
events after ``en.time``).  An edge ``p → e`` carrying ``N`` is valid iff ``p.ts >= L_N(e.ts)``; since
``L_N`` only grows, an invalidated vertex stays invalid (§5.2 "Event Pruning").  Start negation restricts the
windows a START event may open (no ``N`` trend between the window start and the event), end negation the
END events a window counts when it closes.

**Aggregates (Theorem 4.3, Theorem 9.1).**  Every vertex carries ``count`` (number of trends from a START
event to it) and, as the query needs, ``count_E``, ``sum``, ``min``, ``max`` of the events of a variable in
those trends; ``AVG = SUM / COUNT(E)``.  Counts are exact Python ints (a window of ``n`` events has up to
``2^n - 1`` trends).  Sums of integers are exact ints; sums of floats are kept exact as fractions and
rounded once on output (their infinities and NaNs absorb, as in float arithmetic).

**Sliding windows share one graph (§6, §7).**  Windows are ``[k·slide, k·slide + window)``.  Each vertex
keeps one aggregate per window it falls into (GRETA's *Window Hash Table*); a template state keeps a
running aggregate per window over all its vertices, so an event whose incoming transitions are plain reads
its predecessors' sum in O(1) per window (A-Seq/Sharon running aggregates).  A window's structures are
dropped as soon as the watermark passes its end and its rows are emitted (the pane purge of §7).

**Predicates (§6).**  Local predicates were applied by the Spark SQL filter (the ``_mask`` bits) or are
evaluated here, as are other predicates on one event.  Edge predicates relate adjacent events of a trend:
``v.x < NEXT(v).x`` and ``v[i].x > v[i-1].x`` restrict the self-transition of Kleene variable ``v``; a
predicate between two single variables restricts the transition between them when one always immediately
precedes the other.  A comparison (``< <= > >=``) between an expression of the earlier and one of the later
event is answered by a *vertex tree* per window (§7): for the events of the current :func:`advance` call a
Fenwick tree over the ranks of their keys (the batch is known, so are its keys), for older events static
sorted levels with cumulative aggregates merged as a binary counter (Bentley–Saxe); an event finds the
aggregate over its valid predecessors in O(log n) (plus O(log² n) C-speed bisections over the older levels).
An equality uses a hash map.  Any other edge predicate is evaluated against the stored vertices of the
predecessor state (GRETA's O(n) worst case).  A scoped equivalence test ``[v.attr]`` splits trends by
``v``'s value: one graph per value, sharing the negation graphs.

**Partitions and groups.**  The caller runs one state per value of ``spec.key``.  GROUP BY attributes are
part of the key, so a partition is one group and its rows carry the group's values.  When the key is finer
than the groups (GRETA Q1: per company, grouped by sector), :func:`merge_rows` combines the partitions' rows
of a window and group.

**Speed.**  For COUNT(*) queries without negation and scoped equivalence, the per-event loop is generated
from the template (:func:`_count_scanner`): a trend count costs a few additions per event and window, which
a generic interpreter of the template would bury under dispatch.  Big counts cost what big-integer additions
cost (linear in their length, ~n bits for n events per window): when every transition is plain, running
counts beyond :data:`BIG_BITS` become GMP integers (``gmpy2``, 2-3x faster to add at thousands of bits; rows
still carry Python ints, and the state pickles them).  :func:`step` and :func:`advance` pause Python's cyclic
garbage collector (:func:`_gc_paused`): its scans over every buffered event cost more than the engine's work.
A batch already in strictly increasing ts order (the common case) is neither sorted nor split at ties.

**Explain.**  :func:`describe` prints the compiled template (states, transitions and their indexes, negation
graphs and what they invalidate, how each WHERE conjunct is evaluated) for ``sparkcep explain``.

**Not supported** (:func:`check` raises :class:`EngineUnsupportedError`): predicates relating non-adjacent
events (``a.x < c.x`` across a Kleene sub-pattern, ``v[1]``, ``v[v.len]``, aggregates over ``v[]``) or a
Kleene variable to another variable; negation predicates reading positive variables; negations at the start
or end of a negated sub-pattern; scoped equivalence tests on several variables or on an optional one; GROUP
BY attributes outside the partition key.

Example::

    >>> import math, sparkcep
    >>> spec = sparkcep.compile("RETURN COUNT(*) PATTERN (SEQ(A+, B))+ WITHIN 10").spec()
    >>> events = [{"type": t, "ts": ts} for t, ts in [("A", 1), ("B", 2), ("A", 3), ("A", 4), ("B", 7)]]
    >>> state, _ = step(spec, init_state(), events)
    >>> state, rows = advance(spec, state, math.inf)
    >>> rows
    [{'window_start': 0, 'window_end': 10, 'count_all': 11}]
"""

from __future__ import annotations

import gc
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterable
from functools import wraps
from itertools import compress, count, islice
from operator import eq, ge, gt, le, lt
from typing import TYPE_CHECKING, Any

from sparkcep.ir.spec import SlotState, TrendSpec
from sparkcep.runtime_udfs.match.engine import EngineUnsupportedError
from sparkcep.runtime_udfs.trend.aggregates import (
    _INF,
    BIG_BITS,
    PARTIAL,
    SCAN_CHUNK,
    _final_avg,
    _final_sum,
    _mpz,
    _sum_add,
)
from sparkcep.runtime_udfs.trend.graph import _compiled
from sparkcep.runtime_udfs.trend.index import _Batch, _key_class, _NegRun, _Queue, _Run, _Win
from sparkcep.runtime_udfs.trend.scanner import _count_group, _emit, _index_insert
from sparkcep.runtime_udfs.trend.template import EQUAL, GUARDED, LINK, ORDERED, PLAIN, SCAN, _threshold, _ts_of

if TYPE_CHECKING:
    from sparkcep.runtime_udfs.trend.graph import _Compiled
    from sparkcep.runtime_udfs.trend.template import _State

__all__ = ["EngineUnsupportedError", "TrendState", "advance", "check", "init_state", "is_empty", "merge_rows", "step",
           "wakeup"]

#: Version tag of the serialized state (:meth:`TrendState.to_bytes`).
STATE_VERSION = 1

#: The key of a state's stored vertices behind SCAN edges inside a loop with UNTIL, ``(CUT, state)`` in
#: ``_Run.stores`` (those of its other SCAN edges are under ``state``), and of those behind a SCAN edge across a
#: ``NEXT !(C c)``, ``(HELD, transition)``
CUT, HELD = "cut", "held"


def check(spec: TrendSpec) -> None:
    """Raise :class:`EngineUnsupportedError` (or :class:`CEPError`) if this engine cannot run ``spec``."""
    _compiled(spec)


# ----------------------------------------------------------------------------------------------- state


class TrendState(SlotState):
    """The state of one partition.  Mutated in place by :func:`step` and :func:`advance`, which return it.

    ``frontier``  the watermark processed so far: events with ``ts < frontier`` are late.
    ``pending``   buffered ``(ts, mask, event)`` in arrival order, all with ``ts >= frontier``.
    ``group``     the GROUP BY values (constant within a partition), from the first event.
    ``kmin``      the first window not emitted yet (None before the first event); ``close_at`` its end.
    ``runs``      the positive graph's runtime per scoped-equivalence value (``None``: the only one, or the
                  one without class-variable events that new values start from).
    ``latest``    per negation ``N``: ``L_N``, the latest start of a finished trend of ``N``.
    ``negs``      per negation: its graph's runtime.
    ``epoch``     the number of :func:`advance` calls that processed events (the vertex trees' live parts).
    ``late``      events dropped because ``ts < frontier`` when they arrived.
    ``invalid``   events dropped because their ``ts`` was null, NaN or infinite.
    """

    __slots__ = ("frontier", "pending", "group", "kmin", "close_at", "runs", "latest", "negs", "epoch", "late",
                 "invalid")
    VERSION = STATE_VERSION
    ENGINE = "trend engine"

    def __init__(self) -> None:
        self.frontier: float = -_INF
        self.pending: list[tuple[Any, int, dict]] = []
        self.group: tuple | None = None
        self.kmin: int | None = None
        self.close_at: float = _INF
        self.runs: dict[Any, _Run] = {}
        self.latest: list[float] = []
        self.negs: list[_NegRun] = []
        self.epoch = 0
        self.late = 0
        self.invalid = 0


def init_state() -> TrendState:
    """A fresh, empty partition state."""
    return TrendState()


def _ensure(cs: _Compiled, st: TrendState) -> None:
    """Create the graphs' runtimes on first use (a fresh state does not know the spec)."""
    if not st.runs:
        st.runs[None] = _Run()
        st.latest = [-_INF] * len(cs.negs)
        st.negs = [_NegRun(len(g.states)) for g in cs.negs]


def _mark_older(cs: _Compiled, st: TrendState) -> None:
    """UNTIL: bring a state saved before :func:`step` marked stop events in their masks up to date (once): mark
    those of its buffered events, and give its windows' running aggregates the entries of the plain edges inside
    the loops (``_State.cut_slot``), where it kept them in a hash map on a constant key."""
    run = st.runs.get(None)
    if run is not None and getattr(run, "marked", False):
        return
    if st.pending:
        types = cs.stop_types
        cs.mark_stops(st.pending, [x for x, (_, _, ev) in enumerate(st.pending)
                                   if types is None or ev.get("type") in types])
    zero, m, size = cs.alg.zero, cs.n_states, cs.n_slots
    cut = [t for t in cs.positive.trans if t.kind == PLAIN and t.cut is not None]
    for older in st.runs.values():
        for win in older.wins.values():
            if len(win.R) == m + 1 < size + 1:
                R = [*win.R[:m], *[zero] * (size - m), win.R[-1]]
                for t in cut:
                    R[t.slot] = win.index.pop(t.id, {}).get(0, zero)
                win.R = R
    _ensure(cs, st)
    for older in st.runs.values():
        older.marked = True


def _negation_memory(st: TrendState) -> float:
    """The latest trend start the negation graphs still hold (``-inf`` if none): it can block trends of every
    window not emitted yet that starts at or before it.  Older values are dropped as windows close."""
    newest = max(st.latest, default=-_INF)
    for nr in st.negs:
        newest = max(newest, max(nr.best, default=-_INF),
                     max((store[-1][0] for store in nr.stores.values() if store), default=-_INF),
                     max((q[0][1] for q in nr.queues.values() if q), default=-_INF))
    return newest


def is_empty(state: TrendState) -> bool:
    """True when nothing is buffered and no window or negation state is live (the caller may drop the state)."""
    return (not state.pending and not any(run.wins for run in state.runs.values())
            and _negation_memory(state) == -_INF)


def wakeup(spec: TrendSpec, state: TrendState) -> float | None:
    """The smallest watermark at which :func:`advance` has work to do without new events, or None: the end
    of the first window holding the earliest buffered event (it must be processed before that window's rows;
    an event is processable only once the watermark is past it), the end of the first open window (its rows
    are due), or the time at which the negation state can no longer affect any window."""
    cs = _compiled(spec)
    times = []
    if state.pending:
        first = min(map(_ts_of, state.pending))
        times.append(cs.first_open(first) * cs.slide + cs.window)
    if any(run.wins for run in state.runs.values()):
        times.append(state.close_at)
    newest = _negation_memory(state)
    if newest > -_INF:
        times.append(newest + cs.window)
    return min(times) if times else None


# -------------------------------------------------------------------------------------------- step / advance


def _gc_paused(fn):
    """Run ``fn`` with Python's cyclic garbage collector paused (and its previous state restored).

    :func:`step` and :func:`advance` allocate a tuple per buffered event and create no reference cycles; with
    the collector on, its generational scans over everything the process holds (a micro-batch of event dicts,
    the pending buffer) cost more than the engine's own work on large batches.  Reference counting still frees
    everything as usual; the collector catches up on its next run after the call.
    """

    @wraps(fn)
    def paused(*args, **kwargs):
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()

    return paused


@_gc_paused
def step(spec: TrendSpec, state: TrendState, events: Iterable[dict]) -> tuple[TrendState, list[dict]]:
    """Buffer ``events`` (any order).  Returns ``(state, [])``: rows are only produced by :func:`advance`.

    Events with ``ts < state.frontier`` are late and counted in ``state.late``; events without a usable
    ``ts`` are counted in ``state.invalid``; events that can fill no component are dropped.
    """
    cs = _compiled(spec)
    # one pass over the event dicts: a pass per column at C speed measured slower (each misses the cache on
    # every dict)
    frontier = state.frontier
    full = cs.full
    type_masks = cs.type_masks
    keep_empty = bool(cs.links or cs.not_next)  # NEXT, NEXT !(...): every event of the partition breaks adjacency
    # UNTIL: a stop event may fill no component, yet cuts its loop; the events of its types are kept, the
    # attributes its condition reads read in this pass, and the conditions evaluated once below
    watch = cs.stop_watch if cs.until else None
    if watch is not None:
        _mark_older(cs, state)
    stop_types = cs.stop_types
    attrs = cs.stop_attrs
    one = attrs[0] if len(attrs) == 1 else None
    seen: list[int] = []  # their positions in pending
    values: list = []  # per such event, the attribute (or the tuple of attributes) the conditions read
    pending = state.pending
    append = pending.append
    late = invalid = 0
    for ev in events:
        ts = ev.get("ts")
        kind = ts.__class__
        if kind is not int and (kind is not float or ts - ts != 0.0):  # rare: None, NaN, ±inf, other numbers
            if ts is None or ts != ts or ts in (_INF, -_INF):
                invalid += 1
                continue
        if ts < frontier:
            late += 1
            continue
        mask = ev.get("_mask")
        if mask is None:
            mask = type_masks.get(ev.get("type"), 0) if type_masks is not None else cs.mask_of(ev)
        else:
            mask = cs.mask_of(ev) if mask != mask else int(mask) & full
        if watch is not None and (mask & watch if watch else stop_types is None or ev.get("type") in stop_types):
            seen.append(len(pending))
            values.append(ev.get(one) if one is not None else tuple(map(ev.get, attrs)))
            append((ts, mask, ev))
        elif mask or keep_empty:
            append((ts, mask, ev))
    if seen:
        cs.mark_stops(pending, seen, {one: values} if one is not None else
                      dict(zip(attrs, map(list, zip(*values, strict=True)), strict=True)) if attrs else None)
    state.late += late
    state.invalid += invalid
    if state.group is None and state.pending:
        state.group = tuple(state.pending[0][2].get(g) for g in cs.group_by)
    return state, []


@_gc_paused
def advance(spec: TrendSpec, state: TrendState, watermark: float) -> tuple[TrendState, list[dict]]:
    """Process the buffered events with ``ts < watermark`` in ``ts`` order and return the rows of every
    window whose end the watermark has reached, each window exactly once (events at the watermark's ts wait:
    more of that ts may come, and they are in no window that ends by then).

    ``advance(spec, state, inf)`` flushes everything (batch).  A watermark at or below the frontier is a
    no-op.
    """
    if not watermark > state.frontier:
        return state, []
    cs = _compiled(spec)
    if cs.until:
        _mark_older(cs, state)
    _ensure(cs, state)
    pending = state.pending
    times = list(map(_ts_of, pending))
    strict = all(map(lt, times, islice(times, 1, None)))  # in order and without ties (the common batch)
    if not strict:
        pending.sort(key=_ts_of)
        times.sort()
    cut = bisect_left(times, watermark)
    ready, state.pending = pending[:cut], pending[cut:]
    state.frontier = watermark
    rows: list[dict] = []
    if ready and not cs.never:
        _scan(cs, state, ready, rows, times[:cut] if cut < len(times) else times, strict)
    if state.kmin is not None:
        _emit(cs, state, watermark, rows)
    return state, rows


def _scan(cs: _Compiled, st: TrendState, ready: list, rows: list[dict], times: list, strict: bool) -> None:
    """Process ``ready`` (sorted by ts; ``times`` their ts, ``strict`` if no two are equal) one ``ts`` group at
    a time: the events of a group see the graph as it was before the group, so equal timestamps never follow
    each other in a trend."""
    if st.kmin is None:
        st.kmin = cs.first_open(ready[0][0])
        st.close_at = st.kmin * cs.slide + cs.window
    batch = None
    if cs.ordered:
        st.epoch += 1
        batch = _Batch(cs, ready, st.epoch, times)
    if cs.counts_only:
        if cs.until:
            _scan_counts_until(cs, st, ready, rows, batch, times, strict)
        else:
            _scan_counts(cs, st, ready, rows, batch, times, strict)
        return
    i, total = 0, len(ready)
    while i < total:
        t = ready[i][0]
        j = i + 1
        while j < total and ready[j][0] == t:
            j += 1
        if t >= st.close_at:
            _emit(cs, st, t, rows)
        _process_group(cs, st, t, cs.windows_of(t), ready[i:j], batch)
        i = j


def _scan_counts(cs: _Compiled, st: TrendState, ready: list, rows: list[dict], batch: _Batch | None, times: list,
                 strict: bool) -> None:
    """:func:`_scan` for COUNT(*) over plain, ordered and equality transitions (no negation, no scoped
    equivalence): runs of events with distinct timestamps go through the generated hot loop
    (:func:`_count_scanner`), groups of events sharing a ts through :func:`_count_group`."""
    ties = () if strict else list(compress(count(), map(eq, times, islice(times, 1, None))))
    scan = cs.scanner
    pos = 0
    g = 0
    while g < len(ties):
        start = ties[g]
        while g + 1 < len(ties) and ties[g + 1] == ties[g] + 1:
            g += 1
        end = ties[g] + 2
        g += 1
        if start > pos:
            _chunked(cs, scan, ready[pos:start], st, rows, batch)
        _count_group(cs, st, ready[start:end], rows, batch)
        pos = end
    if pos < len(ready):
        _chunked(cs, scan, ready[pos:] if pos else ready, st, rows, batch)


def _scan_counts_until(cs: _Compiled, st: TrendState, ready: list, rows: list[dict], batch: _Batch | None,
                       times: list, strict: bool) -> None:
    """:func:`_scan_counts` with stop events (UNTIL): the events between them through the generated scan, each
    group of events sharing the ts of a stop event through :func:`_process_group`, which empties the edges inside
    the stopped loops (:func:`_cut`; the scan reads and fills the same windows and indexes).  The stop events are
    marked in their masks (:func:`step`, :meth:`_Compiled.mark_stops`)."""
    marks = cs.stop_marks(ready)
    pos = 0
    for i in sorted(marks):
        if i < pos:
            continue
        t = ready[i][0]
        lo, hi = bisect_left(times, t), bisect_right(times, t)
        if lo > pos:
            _scan_counts(cs, st, ready[pos:lo], rows, batch, times[pos:lo], strict)
        if t >= st.close_at:
            _emit(cs, st, t, rows)
        _process_group(cs, st, t, cs.windows_of(t), ready[lo:hi], batch)
        pos = hi
    if pos < len(ready):
        _scan_counts(cs, st, ready[pos:] if pos else ready, rows, batch, times[pos:] if pos else times, strict)


def _chunked(cs: _Compiled, scan: Callable, part: list, st: TrendState, rows: list[dict], batch) -> None:
    """Run the generated scan over ``part``; for plain templates (counts flow through the running counts
    only), in chunks of :data:`SCAN_CHUNK` events with :func:`_promote` in between."""
    if not cs.promote:
        scan(part, st, rows, batch)
        return
    for i in range(0, len(part), SCAN_CHUNK):
        scan(part[i:i + SCAN_CHUNK] if len(part) > SCAN_CHUNK else part, st, rows, batch)
        _promote(st)


def _promote(st: TrendState) -> None:
    """Turn the running counts longer than :data:`BIG_BITS` into GMP integers: every sum they enter is then
    a GMP addition (exact, 2-3x faster than Python's at thousands of bits).  Rows carry Python ints
    (:func:`_row`)."""
    for win in st.runs[None].wins.values():
        R = win.R
        for j, v in enumerate(R):
            if v.__class__ is int and v.bit_length() > BIG_BITS:
                R[j] = _mpz(v)


def _process_group(cs: _Compiled, st: TrendState, t, ks: range, group: list, batch: _Batch | None) -> None:
    """Insert the events of one ``ts`` group into the graphs (Algorithm 2 with §5's valid predecessors and
    §6's per-window aggregates): compute every vertex first, then insert them all."""
    if not ks:  # t lies between windows (slide > window): no trend can use these events
        for run in st.runs.values():
            run.link = {}
            if cs.not_next:
                run.held = []
        for nr in st.negs:
            nr.link = {}
            if cs.not_next:
                nr.held = []
        return
    #: ``!(NEXT C c)``: per run, the held vertices the group's first event (such a C) blocks from the next ts on
    transient: dict = {}
    if cs.not_next:  # NEXT !(C c): the held vertices of the partition's previous event meet its next one
        _, mask, ev = group[0]
        for gid, nr in enumerate(st.negs):
            held = getattr(nr, "held", None)
            if held:
                nr.held = []
                for j, hev, start, *ht in held:  # (a state saved before the ts was kept: no store to enter)
                    _neg_release(cs, nr, cs.negs[gid].states[j], hev, ht[0] if ht else start, start, mask, ev)
        for run in st.runs.values():
            held = getattr(run, "held", None)
            if held:
                run.held = []
                for j, hev, ht, aggs in held:
                    _release(cs, run, cs.positive.states[j], hev, ht, aggs, mask, ev, batch,
                             transient.setdefault(id(run), {}))
    latest = st.latest
    if cs.class_var is not None:
        attrs = cs.class_attrs
        for _, mask, ev in group:
            if any(gid == -1 and s.classed for gid, s in cs.roles(mask)):
                value = tuple(ev.get(a) for a in attrs)
                if value not in st.runs:
                    st.runs[value] = st.runs[None].clone()
    positive: list = []
    negative: list = []
    # UNTIL: loop → the group position of its last stop event; a stop is no vertex of its loop, and a vertex
    # after it (in the group's order) has no predecessor inside the loop: those all came before the stop
    cut_at: dict[int, int] = {}
    loop_of = cs.loop_of
    for i, (_, mask, ev) in enumerate(group):
        stopped = cs.loops_of(mask) if cs.until else ()  # (marked by step)
        for loop in stopped:
            cut_at[loop] = i
        for gid, s in cs.roles(mask):
            if s.filters and not all(f(ev) for f in s.filters):
                continue
            if gid == -1:
                loop = loop_of.get(s.comp)
                if stopped and loop in stopped:
                    continue
                runs = (st.runs[tuple(ev.get(a) for a in cs.class_attrs)],) if s.classed else st.runs.values()
                for run in runs:
                    # only the group's first event follows the previous ts: a NEXT step's edge comes from there
                    aggs = _vertex(cs, run, s, ev, t, ks, latest, run.link if i == 0 else None, loop in cut_at,
                                   transient.get(id(run)))
                    if aggs:
                        positive.append((run, s, ev, aggs, i))
            else:
                nr = st.negs[gid]
                start = _neg_vertex(nr, s, ev, t, latest, getattr(nr, "link", None) if i == 0 else None)
                if start is not None:
                    negative.append((gid, s, ev, start, i))
    if cs.links:  # the group's last event is the partition's previous event for the next group
        last = group[-1][2]
        for run in st.runs.values():
            run.link = {}
        for run, s, ev, aggs, _ in positive:
            if s.link_out and ev is last:
                run.link[s.j] = (ev, aggs)
        for nr in st.negs:
            nr.link = {}
        for gid, s, ev, start, _ in negative:
            if s.link_out and ev is last:
                st.negs[gid].link[s.j] = (ev, start)
    if cut_at:
        for run in st.runs.values():
            _cut(cs, run, cut_at)
    for run, s, ev, aggs, i in positive:
        _insert(cs, run, s, ev, t, aggs, batch, i > cut_at.get(loop_of.get(s.comp), -1))
    for run, s, ev, aggs, i in positive:
        if s.held_out or s.end_held is not None:  # NEXT !(C c): known from the group's next event, else from the
            # next group's first
            if i + 1 < len(group):
                _release(cs, run, s, ev, t, aggs, group[i + 1][1], group[i + 1][2], batch)
            else:
                run.held.append((s.j, ev, t, aggs))
    for gid, s, ev, start, i in negative:
        nr = st.negs[gid]
        if s.held_out:  # NEXT !(C c) inside the negation: known from the next event
            if i + 1 < len(group):
                _neg_release(cs, nr, s, ev, t, start, group[i + 1][1], group[i + 1][2])
            else:
                nr.held.append((s.j, ev, start, t))
        if start > nr.best[s.j]:
            nr.best[s.j] = start
        for tr in s.guarded_out:
            _queue_push(nr, tr.id, t, start)
        if s.stored:
            nr.stores.setdefault(s.j, []).append((t, ev, start))
        if s.last and start > latest[gid]:
            latest[gid] = start


def _vertex(cs: _Compiled, run: _Run, s: _State, ev: dict, t, ks: range, latest: list,
            link: dict | None = None, cut: bool = False, transient: dict | None = None) -> dict:
    """The aggregates of a new vertex of state ``s`` per window ``k`` (Theorem 4.3 / 9.1): the START term plus
    the sum over its valid predecessors, for every window of ``ks`` where it has a trend.  ``link``: the
    vertices of the partition's previous event (None if it has this event's ts), a ``NEXT`` step's only
    predecessors; ``cut``: a stop event of its loop (UNTIL) came before it at its ts, so no edge inside the
    loop leads to it; ``transient``: per ``!(NEXT C c)`` edge, the vertices valid at this ts only (their next event,
    such a ``C``, has it: it is not inside the gap of a trend that ends here)."""
    alg = cs.alg
    zero, plus = alg.zero, alg.add
    scanned: dict | None = None
    probes = []
    linked = []  # NOT SEQ(NEXT B y, ...): the edge's queue of vertices whose next event is such a B, and L_N
    for tr in s.ins:
        if cut and tr.cut is not None:
            continue
        # (beside a negation its guard holds: no event, so no negated trend, lies between such a vertex and its C)
        for pev, paggs in transient.get(tr.id, ()) if transient else ():
            if _edge_holds(tr, pev, ev):
                if scanned is None:
                    scanned = {}
                for k, a in paggs.items():
                    scanned[k] = plus(scanned.get(k, zero), a)
        if tr.kind == LINK:
            prev = link.get(tr.src) if link else None
            if prev is not None and (tr.pred is None or tr.pred(prev[0], ev)):
                if scanned is None:
                    scanned = {}
                for k, a in prev[1].items():
                    scanned[k] = plus(scanned.get(k, zero), a)
        elif tr.kind == SCAN:
            store = run.stores.get((CUT, tr.src) if tr.cut is not None else
                                   (HELD, tr.id) if tr.not_next is not None else tr.src)
            if not store:
                continue
            floor = _threshold(tr.guard, latest) if tr.guard else -_INF
            pred = tr.pred
            for pts, pev, paggs in store:
                if pts >= floor and pred(pev, ev):
                    if scanned is None:
                        scanned = {}
                    for k, a in paggs.items():
                        scanned[k] = plus(scanned.get(k, zero), a)
        elif tr.kind == GUARDED:
            probes.append((tr, _threshold(tr.guard, latest)))
        elif tr.kind in (ORDERED, EQUAL):
            probes.append((tr, tr.probe(ev)))
        if tr.not_next is not None and cs.not_next_neg[tr.not_next] is not None:
            linked.append((tr, latest[cs.not_next_neg[tr.not_next]]))
    start_floor = None
    if s.first:
        start_floor = _threshold(s.start_guard, latest) if s.start_guard else -_INF
    values = s.contrib(ev) if s.contrib is not None else None
    slide = cs.slide
    wins = run.wins
    out = {}
    for k in ks:
        win = wins.get(k)
        acc = zero
        if win is not None:
            R = win.R
            for tr in s.ins:
                if tr.kind == PLAIN and not (cut and tr.cut is not None):
                    acc = plus(acc, R[tr.slot])
            for tr, probe in probes:
                if tr.kind == GUARDED:
                    q = win.guarded.get(tr.id)
                    if q is not None:
                        q.drop_before(probe, alg)
                        acc = plus(acc, q.total(alg))
                    continue
                ix = win.index.get(tr.id)
                if ix is None or _key_class(probe) is None:
                    continue
                if tr.kind == ORDERED:
                    acc = ix.query(probe, acc, plus)
                else:
                    try:
                        acc = plus(acc, ix.get(probe, zero))
                    except TypeError:  # an unhashable value equals no stored key
                        pass
            for tr, floor in linked:  # valid while no occurrence starting at (or after) their B has finished
                q = win.guarded.get(tr.id)
                if q is not None:
                    q.drop_before(floor, alg, inclusive=True)
                    acc = plus(acc, q.total(alg))
        if scanned is not None:
            acc = plus(acc, scanned.get(k, zero))
        start = 1 if start_floor is not None and k * slide > start_floor else 0
        a = alg.lift(acc, start, values)
        if a:
            out[k] = a
    return out


def _insert(cs: _Compiled, run: _Run, s: _State, ev: dict, t, aggs: dict, batch: _Batch | None,
            loop: bool = True) -> None:
    """Add a vertex to the window aggregates, vertex trees and queues of its state, and to the final
    aggregate if it is an END event (Algorithm 2 lines 8–10).  ``loop`` False: a stop event of its loop (UNTIL)
    came after it at its ts, so it enters no index of an edge inside the loop."""
    alg = cs.alg
    plus, zero = alg.add, alg.zero
    keys = [(tr, tr.key(ev)) for tr in s.ordered_out if loop or tr.cut is None]
    j = s.j
    wins = run.wins
    n_slots = cs.n_slots
    cut_slot = s.cut_slot if loop else None
    for k, a in aggs.items():
        win = wins.get(k)
        if win is None:
            win = wins[k] = _Win(n_slots, zero)
        if s.plain_out:
            win.R[j] = plus(win.R[j], a)
        if cut_slot is not None:
            win.R[cut_slot] = plus(win.R[cut_slot], a)
        for tr, key in keys:
            _index_insert(win, tr, key, a, plus, zero, batch, k)
        for tr in s.guarded_out:
            q = win.guarded.get(tr.id)
            if q is None:
                q = win.guarded[tr.id] = _Queue(zero)
            q.push(t, a, alg)
        if s.last and s.end_held is None:  # (NEXT !(C c) right before the end: counted once released)
            if s.end_guard is None:
                win.R[-1] = plus(win.R[-1], a)
            else:
                q = win.ends.get(j)
                if q is None:
                    q = win.ends[j] = _Queue(zero)
                q.push(t, a, alg)
    if s.stored:
        run.stores.setdefault(j, []).append((t, ev, aggs))
    if s.cut_stored and loop:
        run.stores.setdefault((CUT, j), []).append((t, ev, aggs))


def _release(cs: _Compiled, run: _Run, s: _State, ev: dict, t, aggs: dict, mask: int, after: dict,
             batch: _Batch | None, transient: dict | None = None) -> None:
    """``NEXT !(C c)``: the vertex ``aggs`` of event ``ev`` in state ``s`` enters the index of each edge across such
    a negation that it leaves, unless ``after`` (with component bitmask ``mask``), the partition's event right
    after ``ev``, is such a ``C`` (its type, local predicates and predicates on it alone) -- in the windows still
    open (GRETA: an edge ``p -> e`` across it is valid iff ``p``'s next event is no ``C``, known one event late).
    For ``!(NEXT C c)`` the ``C`` must also lie inside the gap: one at ``ev``'s ts blocks nothing, one at a later ts
    (``after`` then starts a ts group) blocks the edges to events after its ts only (``transient``: the vertex is a
    predecessor of the events at its ts)."""
    alg = cs.alg
    plus, zero = alg.add, alg.zero
    if s.end_held is not None and not _blocks(cs, s.end_held, mask, ev, after):
        # a trend may end here: an END in the windows still open (they hold ``after``; those that closed before it
        # came counted the vertex when they were emitted, scanner._emit)
        for w, a in aggs.items():
            win = run.wins.get(w)
            if win is not None:
                win.R[-1] = plus(win.R[-1], a)
    for tr in s.held_out:
        if _blocks(cs, tr.not_next, mask, ev, after):
            if not cs.not_next_gap[tr.not_next]:
                continue
            if cs.not_next_neg[tr.not_next] is not None and after["ts"] > t:
                # NOT SEQ(NEXT B y, ...) and ``after`` is such a B inside the gap: valid until an occurrence of the
                # unlinked sub-pattern starting at its ts or later has finished, i.e. while L_N < its ts (the
                # queue is in the order of the B's ts: vertices are released in ts order)
                _enqueue(cs, run, tr, after["ts"], aggs)
                continue
            if transient is not None and after["ts"] > t:
                transient.setdefault(tr.id, []).append((ev, aggs))
                continue
        if tr.kind == SCAN:
            run.stores.setdefault((HELD, tr.id), []).append((t, ev, aggs))
            continue
        if tr.kind == GUARDED:  # next to a negation: vertices enter in ts order, a finished N trend drops a prefix
            _enqueue(cs, run, tr, t, aggs)
            continue
        key = tr.key(ev)
        for w, a in aggs.items():
            win = run.wins.get(w)
            if win is not None:  # else the window has closed (emitted) since
                _index_insert(win, tr, key, a, plus, zero, batch, w)


def _enqueue(cs: _Compiled, run: _Run, tr, key, aggs: dict) -> None:
    """A released vertex (``aggs`` per window) enters the queue of ``tr`` under ``key`` in the windows still open."""
    for w, a in aggs.items():
        win = run.wins.get(w)
        if win is not None:
            q = win.guarded.get(tr.id)
            if q is None:
                q = win.guarded[tr.id] = _Queue(cs.alg.zero)
            q.push(key, a, cs.alg)


def _blocks(cs: _Compiled, i: int, mask: int, ev: dict, after: dict) -> bool:
    """Is ``after`` (component bitmask ``mask``), the partition's event right after ``ev``, a ``C`` of the ``i``-th
    ``NEXT !(C c)`` (its type, local predicates, predicates on it alone and those relating it to ``ev``)?"""
    return bool(mask >> cs.not_next[i] & 1 and all(f(after) for f in cs.not_next_filters[i])
                and all(f(ev, after) for f in cs.not_next_pairs[i]))


_COMPARE = {"<": lt, "<=": le, ">": gt, ">=": ge, "=": eq}


def _edge_holds(tr, pev: dict, ev: dict) -> bool:
    """Does the edge predicate of ``tr`` hold from ``pev`` to ``ev``, as its index would answer it?"""
    if tr.kind == SCAN:
        return tr.pred(pev, ev)
    if tr.op is None or tr.key is None:
        return True
    key, probe = tr.key(pev), tr.probe(ev)
    cls = _key_class(key)
    if cls is None or cls != _key_class(probe):
        return False
    try:
        return bool(_COMPARE[tr.op](key, probe))
    except TypeError:
        return False


def _cut(cs: _Compiled, run: _Run, cut_at: dict[int, int]) -> None:
    """Stop events (UNTIL) of the loops of ``cut_at`` came: drop every vertex behind an edge inside those loops,
    in every window (GRETA: a stop resets the loop's self-edge sums; edges out of the loop keep every vertex, in
    the state's own running aggregate and indexes)."""
    zero = cs.alg.zero
    for tr in cs.positive.trans:
        if tr.cut in cut_at:
            for win in run.wins.values():
                if tr.kind == PLAIN:
                    win.R[tr.slot] = zero
                win.index.pop(tr.id, None)
            run.stores.pop((CUT, tr.src), None)


def _neg_vertex(nr: _NegRun, s: _State, ev: dict, t, latest: list, link: dict | None = None) -> float | None:
    """The latest start of a trend of a negative sub-pattern ending at this event (None: no such trend).  ``link``:
    the negation's vertices of the partition's previous event (None if it has this event's ts), a ``NEXT`` step's
    only predecessors."""
    best = t if s.first else -_INF
    for tr in s.ins:
        if tr.not_next is not None and tr.kind == PLAIN:  # NEXT !(C c) inside the negation: from the vertices
            v = nr.released.get(tr.id, -_INF)  # released so far (guarded: its queue; a predicate: its store)
        elif tr.kind == LINK:
            prev = link.get(tr.src) if link else None
            v = prev[1] if prev is not None and (tr.pred is None or tr.pred(prev[0], ev)) else -_INF
        elif tr.kind == PLAIN:
            v = nr.best[tr.src]
        elif tr.kind == GUARDED:
            q = nr.queues.get(tr.id)
            floor = _threshold(tr.guard, latest)
            while q and q[0][0] < floor:
                q.popleft()
            v = q[0][1] if q else -_INF
        else:
            floor = _threshold(tr.guard, latest) if tr.guard else -_INF
            store = nr.stores.get((HELD, tr.id) if tr.not_next is not None else tr.src, ())
            v = max((pstart for pts, pev, pstart in store if pts >= floor and tr.pred(pev, ev)), default=-_INF)
        if v > best:
            best = v
    return None if best == -_INF else best


def _neg_release(cs: _Compiled, nr: _NegRun, s: _State, ev: dict, t, start: float, mask: int, after: dict) -> None:
    """``NEXT !(C c)`` inside a negation: the vertex (``start``) of ``ev`` (at ``t``) in state ``s`` of the
    negation's graph becomes a predecessor across each such edge it leaves, unless ``after``, the partition's event
    right after ``ev``, is such a ``C``.  A plain edge keeps the largest start released (O(1) per vertex).  Next
    to another negation inside the negation (``NOT SEQ(B y, NEXT !(C z), NOT E e, D w)``) the released vertex
    enters the edge's guarded queue (GRETA §5's monotone queue: vertices are released in ts order, so it stays
    sorted; amortized O(1)).  With a predicate across the edge (``WHERE y.x = w.x``) the released vertices are
    stored, in ts order, and each vertex of its target scans them (O(n) per vertex, O(n²) per window: GRETA's bound
    for a predicate it cannot index), those before the guard's threshold skipped; queue and store are pruned with
    the negation's others as windows close."""
    for tr in s.held_out:
        if _blocks(cs, tr.not_next, mask, ev, after):
            continue
        if tr.kind == PLAIN:
            if start > nr.released.get(tr.id, -_INF):
                nr.released[tr.id] = start
        elif tr.kind == GUARDED:
            _queue_push(nr, tr.id, t, start)
        else:
            nr.stores.setdefault((HELD, tr.id), []).append((t, ev, start))


def _queue_push(nr: _NegRun, i: int, t, start: float) -> None:
    """Enter a vertex (``t``, ``start``) into the monotone queue of guarded transition ``i``: an entry with an
    older ts and no larger start can never be the answer again."""
    q = nr.queues.get(i)
    if q is None:
        q = nr.queues[i] = deque()
    while q and q[-1][1] <= start:
        q.pop()
    q.append((t, start))


def merge_rows(spec: TrendSpec, rows: Iterable[dict]) -> list[dict]:
    """Combine the rows of several partitions into one row per window and group (GRETA §6 grouping).

    The engine runs per partition of ``spec.key``; when the key holds attributes that are not GROUP BY
    attributes (GRETA Q1: key ``company, sector``, groups ``sector``), several partitions contribute to one
    group: counts and sums add up, MIN/MAX fold, and AVG is the summed sum over the summed count, which the
    rows carry as ``_partial_<name>_sum``/``_n`` columns for that purpose.  The result has no partial
    columns and is sorted by window, then group.
    """
    cs = _compiled(spec)
    merged: dict[tuple, dict] = {}
    for row in rows:
        key = (row["window_start"], row["window_end"], *(row[g] for g in cs.group_by))
        into = merged.get(key)
        if into is None:
            merged[key] = dict(row)
            continue
        for name, func, _, _ in cs.outputs:
            a, b = into[name], row[name]
            if func in ("count_all", "count"):
                into[name] = a + b
            elif func in ("min", "max"):
                into[name] = a if b is None else b if a is None else (min if func == "min" else max)(a, b)
        for name, func, _, _ in cs.outputs:
            if func in ("sum", "avg"):
                total, n = f"{PARTIAL}{name}_sum", f"{PARTIAL}{name}_n"
                into[total] = _sum_add(into[total], row[total])
                into[n] += row[n]
                if into[n]:
                    into[name] = _final_sum(into[total]) if func == "sum" else _final_avg(into[total], into[n])
    out = []
    for key in sorted(merged, key=lambda k: (k[0], _sort_key(k[2:]))):
        row = merged[key]
        out.append({c: v for c, v in row.items() if not c.startswith(PARTIAL)})
    return out


def _sort_key(value: tuple) -> tuple:
    return tuple((v is None, str(type(v)), v if v is not None else 0) for v in value)
