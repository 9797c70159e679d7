"""Timed-out partial matches of a match query (Flink CEP's ``TimedOutPartialMatchHandler``): the side output
of the bindings that began a match and could not complete it within the window.

Definition (docs/language.md, "Timed-out partial matches"): for ``SEQ(c1, ..., cn) WITHIN W``, a *partial
match* binds ``c1..ck`` (``1 <= k < n``) to events of strictly increasing ``ts``, each accepted by its
component (type and local predicates), every predicate over ``c1..ck`` alone holding, ``ck.ts - c1.ts < W``.
It *times out* when no event extends it to ``c1..c(k+1)`` (an event after ``ck``, before ``c1.ts + W``, for
which every predicate over ``c1..c(k+1)`` holds): it is maximal, and so never completes.  It is decided, and
emitted, once event time reaches ``c1.ts + W`` (the watermark; batch: at the end of the input).  Each is one
row: the query's result columns over the partial binding (an unbound variable's values NULL) and
``timeout_step``, the variable of the last bound step ``ck``.

Scope (:func:`check`): a ``SEQ`` of single events (``T v``, ``ANY(...) v``) under ``skip_till_any_match`` or
``skip_till_next_match``, with any predicates; not Kleene, negation, ``OR``, the contiguity strategies or
collapsed output.  Under ``skip_till_next_match`` an event that can take the next step must be taken (§5), so
the partial match from a first event is one chain: step ``k + 1`` takes only the first event that extends it.

The engine has the interface of :mod:`sparkcep.runtime_udfs.match.engine` (``step`` buffers, ``advance``
decides at a watermark), so :class:`~sparkcep.spark.operator.MatchOperator` runs it on Spark unchanged.  Per
partition it keeps the events of the last ``W`` of event time; when the watermark passes ``e1.ts + W`` for a
first event ``e1``, a depth-first search from ``e1`` over the kept events lists its maximal partial bindings
(exponential in the worst case, as enumerating matches is: each row is one binding).

Example::

    >>> import sparkcep
    >>> from sparkcep.ir.spec import TimeoutSpec
    >>> spec = TimeoutSpec.of(sparkcep.compile("PATTERN SEQ(A a, B b, C c) WITHIN 10 RETURN a.ts, b.ts").spec())
    >>> state, _ = step(spec, init_state(), [{"type": "A", "ts": 1}, {"type": "B", "ts": 2}, {"type": "A", "ts": 5}])
    >>> advance(spec, state, 11)[1]
    [{'a_ts': 1, 'b_ts': 2, 'timeout_step': 'b'}]
    >>> advance(spec, state, float("inf"))[1]
    [{'a_ts': 5, 'b_ts': None, 'timeout_step': 'a'}]
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import lru_cache

from sparkcep.ir.ast import Attr, EquivItem, EventPat, Seq, walk
from sparkcep.ir.spec import TIMEOUT_STEP, SlotState, TimeoutSpec
from sparkcep.runtime_udfs.expr.components import component_mask, component_table
from sparkcep.runtime_udfs.expr.scalar import LACKING, compile_expr, holds
from sparkcep.runtime_udfs.match.conjuncts import ANY_MATCH, NEXT_MATCH, EngineUnsupportedError

__all__ = ["TimeoutState", "advance", "check", "init_state", "is_empty", "step", "wakeup"]


class TimeoutState(SlotState):
    """One partition: ``events`` (``(ts, arrival, mask, event)``, processed, in ts order, within the window of
    the undecided first events), ``pending`` (buffered, not yet processed), the processed watermark
    ``frontier``, and the late and invalid counts."""

    __slots__ = ("arrivals", "events", "frontier", "invalid", "late", "pending")
    VERSION = 1
    ENGINE = "timed-out partial match"

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.pending: list[tuple] = []
        self.frontier = -math.inf
        self.arrivals = 0
        self.late = 0
        self.invalid = 0


class _Compiled:
    def __init__(self, spec: TimeoutSpec):
        comps = spec.components
        self.vars = tuple(c.var for c in comps)
        any_vars = frozenset(c.var for c in comps if c.any_)
        self.table = component_table(comps, any_vars)
        self.full = (1 << len(comps)) - 1
        # each predicate checked at the step that binds the last of its variables
        self.checks: list[list] = [[] for _ in comps]
        position = {v: k for k, v in enumerate(self.vars)}
        for p in spec.predicates:
            read = [n.var for n in walk(p) if isinstance(n, (Attr, EquivItem)) and n.var is not None]
            at = max((position[v] for v in read), default=0)
            self.checks[at].append(compile_expr(p, any_vars))
        self.outputs = tuple((o.name, compile_expr(o.expr, any_vars)) for o in spec.outputs)
        self.window = spec.window
        self.first_only = spec.strategy == NEXT_MATCH  # a relevant event is taken: one chain per first event


def check(spec: TimeoutSpec) -> None:
    """Raise :class:`EngineUnsupportedError` if ``spec`` is outside this engine's scope (module doc)."""
    items = spec.pattern.items if isinstance(spec.pattern, Seq) else (spec.pattern,)
    if not all(isinstance(p, EventPat) for p in items) or any(c.kleene or c.negated for c in spec.components):
        raise EngineUnsupportedError("timed-out partial matches are defined for a SEQ of single events "
                                     "(T v, ANY(...) v): not for Kleene, negation or OR")
    if spec.strategy not in (ANY_MATCH, NEXT_MATCH):
        raise EngineUnsupportedError(f"timed-out partial matches are defined under skip_till_any_match and "
                                     f"skip_till_next_match, not {spec.strategy}")
    if spec.collapsed:
        raise EngineUnsupportedError("timed-out partial matches have no collapsed output")


@lru_cache(maxsize=16)
def _compiled(spec: TimeoutSpec) -> _Compiled:
    check(spec)
    return _Compiled(spec)


def init_state() -> TimeoutState:
    """A fresh, empty partition state."""
    return TimeoutState()


def is_empty(state: TimeoutState) -> bool:
    """True when nothing is buffered or kept."""
    return not state.events and not state.pending


def wakeup(spec: TimeoutSpec, state: TimeoutState) -> float | None:
    """The smallest watermark at which :func:`advance` has work without new events: the earliest buffered ts,
    or the window end ``e1.ts + W`` of the earliest kept event (its partial matches are then decided)."""
    times = [min(t for t, *_ in state.pending)] if state.pending else []
    if state.events:
        times.append(state.events[0][0] + spec.window)
    return min(times) if times else None


def step(spec: TimeoutSpec, state: TimeoutState, events: Iterable[dict]) -> tuple[TimeoutState, list[dict]]:
    """Buffer ``events`` (any order); late ones (``ts`` before the processed watermark) and those without a
    usable ``ts`` are counted; those no component accepts are dropped."""
    cs = _compiled(spec)
    for ev in events:
        ts = ev.get("ts")
        if ts is None or ts != ts:
            state.invalid += 1
            continue
        if ts < state.frontier:
            state.late += 1
            continue
        mask = ev.get("_mask")
        mask = component_mask(cs.table, ev) if mask is None or mask != mask else int(mask) & cs.full
        if mask:  # events of equal ts in the order of _seq, if they carry it (as the match engine), else arrival
            tie = ev.get("_seq")
            state.pending.append((ts, state.arrivals if tie is None or tie != tie else tie, mask, ev))
            state.arrivals += 1
    return state, []


def advance(spec: TimeoutSpec, state: TimeoutState, watermark: float,
            budget=None) -> tuple[TimeoutState, list[dict]]:
    """Process the buffered events with ``ts <= watermark``, then emit the timed-out partial matches of every
    first event ``e1`` with ``e1.ts + W <= watermark`` (each once) and drop the events no undecided first
    event can use.  ``advance(spec, state, inf)`` flushes (batch).  ``budget`` is accepted for the operator's
    sake; every row counts against it."""
    if watermark < state.frontier:
        return state, []
    cs = _compiled(spec)
    ready = [p for p in state.pending if p[0] <= watermark]
    if ready:
        state.pending = [p for p in state.pending if p[0] > watermark]
        state.events = sorted([*state.events, *ready], key=lambda p: (p[0], p[1]))
    state.frontier = watermark
    horizon = watermark - cs.window  # first events at or before it are decided
    events = state.events
    rows: list[dict] = []
    for i, (ts, _, mask, ev) in enumerate(events):
        if ts > horizon:
            break
        if mask & 1 and all(holds(f({cs.vars[0]: ev})) for f in cs.checks[0]):
            _search(cs, events, i, {cs.vars[0]: ev}, 1, ts + cs.window, rows)
    if budget is not None and rows:
        budget.charge(len(rows))
    keep = 0
    while keep < len(events) and events[keep][0] <= horizon:
        keep += 1
    state.events = events[keep:]
    return state, rows


def _search(cs: _Compiled, events: list, last: int, binding: dict, k: int, end: float, rows: list) -> None:
    """Extend ``binding`` of ``c1..ck`` (``events[last]`` the event of ``ck``) by every event that can take
    step ``k + 1`` (skip_till_next_match: by the first such event only); a binding no event extends is emitted
    (if it is partial)."""
    if k == len(cs.vars):
        return  # a complete match: not a timed-out one
    var, bit, checks = cs.vars[k], 1 << k, cs.checks[k]
    after = events[last][0]
    extended = False
    for j in range(last + 1, len(events)):
        ts, _, mask, ev = events[j]
        if ts >= end:
            break
        if ts <= after or not mask & bit:
            continue
        binding[var] = ev
        if all(holds(f(binding)) for f in checks):
            extended = True
            _search(cs, events, j, binding, k + 1, end, rows)
        del binding[var]
        if extended and cs.first_only:
            break
    if not extended:
        row = {name: fn(binding) for name, fn in cs.outputs}
        row[TIMEOUT_STEP] = cs.vars[k - 1]
        rows.append({n: None if v is LACKING else v for n, v in row.items()})
