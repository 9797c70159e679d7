"""Timed-out partial matches of a match query (Flink CEP's ``TimedOutPartialMatchHandler``): the side output
of the bindings that began a match and could not complete it within the window.

Definition (docs/language.md, "Timed-out partial matches"): for ``SEQ(c1, ..., cn) WITHIN W``, a *partial
match* binds ``c1..ck`` (``1 <= k <= n``): a single step ``T v`` to one event, a Kleene step ``T+ v[]`` to one
event or more, all of strictly increasing ``ts``, each accepted by its step (type and local predicates), the
last one before ``c1.ts + W``; every predicate over ``c1..ck`` holds (a positional one, ``v[i]``, ``v[i-1]``,
at every position), except one reading the whole sequence of the last step ``ck`` while it is open
(``v[v.len]``, ``v[]``, ``v[k]`` with ``k >= 2``): that one is decided when the step closes.  It *times out*
when it is no match (``k = n`` and every predicate holding) and no event extends it (joins ``ck``'s open
sequence, or binds ``c(k+1)``, and gives a partial match): one row per run of the automaton that stopped, the
binding being what that run took.  It is decided, and emitted, once event time reaches ``c1.ts + W`` (the
watermark; batch: at the end of the input).  Each is one row: the query's result columns over the partial
binding (an unbound variable's values NULL) and ``timeout_step``, the variable of the last bound step ``ck``.

Scope (:func:`check`): a ``SEQ`` of single events (``T v``, ``ANY(...) v``) and Kleene steps ``T+ v[]`` under
``skip_till_any_match`` or ``skip_till_next_match``, with any predicates (under skip_till_next_match none over
a whole Kleene sequence); not ``*``, ``?``, bounded quantifiers, ``UNTIL``, repeated groups, negation, ``OR``,
``NEXT`` steps, the contiguity strategies or collapsed output.  Under ``skip_till_next_match`` an event that can
extend a partial match must be taken (§5): from each partial match only the first later event that extends it
does, in each way it can (join the open sequence, or take the next step).

The engine has the interface of :mod:`sparkcep.runtime_udfs.match.engine` (``step`` buffers, ``advance``
decides at a watermark), so :class:`~sparkcep.spark.operator.MatchOperator` runs it on Spark unchanged.  Per
partition it keeps the events of the last ``W`` of event time; when the watermark passes ``e1.ts + W`` for a
first event ``e1``, a depth-first search from ``e1`` over the kept events lists its maximal partial bindings
(exponential in the worst case, as enumerating matches is: each row is one binding; under skip_till_any_match a
Kleene step gives a row per admissible subset of its events that no later event extends).

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

from sparkcep.ir.ast import EventPat, Kleene, Seq
from sparkcep.ir.spec import TIMEOUT_STEP, SlotState, TimeoutSpec
from sparkcep.runtime_udfs.expr.components import component_mask, component_table
from sparkcep.runtime_udfs.expr.scalar import LACKING, compile_expr
from sparkcep.runtime_udfs.match.conjuncts import ANY_MATCH, NEXT_MATCH, Conjunct, EngineUnsupportedError

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
        self.kleene = tuple(c.kleene is not None for c in comps)
        any_vars = frozenset(c.var for c in comps if c.any_)
        self.table = component_table(comps, any_vars)
        self.full = (1 << len(comps)) - 1
        kleene_vars = frozenset(v for v, k in zip(self.vars, self.kleene, strict=True) if k)
        position = {v: k for k, v in enumerate(self.vars)}
        # each predicate is decided at the step that binds the last of its variables, unless it reads that
        # step's whole Kleene sequence (v[v.len], v[], v[k] for k >= 2): then when the step closes
        #: step k → predicates to re-check when an event joins step k's open sequence
        self.grow: list[list[Conjunct]] = [[] for _ in comps]
        #: step k → predicates decided when step k is bound (those waiting on step k - 1's sequence too)
        self.enter: list[list[Conjunct]] = [[] for _ in comps]
        #: predicates waiting on the last step's sequence: a partial match binding it is a match iff they hold
        self.final: list[Conjunct] = []
        for p in spec.predicates:
            c = Conjunct(p, kleene_vars, any_vars, frozenset(self.vars))
            at = max((position[v] for v in c.vars), default=0)
            var = self.vars[at]
            if var not in c.waits:
                self.enter[at].append(c)
                if self.kleene[at] and var in c.vars:
                    self.grow[at].append(c)
            elif at + 1 < len(comps):
                self.enter[at + 1].append(c)
            else:
                self.final.append(c)
        self.outputs = tuple((o.name, compile_expr(o.expr, any_vars)) for o in spec.outputs)
        self.window = spec.window
        self.first_only = spec.strategy == NEXT_MATCH  # a relevant event is taken: one chain per first event


def _unsupported_step(p) -> str | None:
    """Why ``p`` cannot be a step of a pattern with timed-out partial matches, or None."""
    if isinstance(p, EventPat):
        return None
    if isinstance(p, Kleene) and isinstance(p.inner, EventPat):
        if p.op != "+" or p.bounds is not None:
            return f"a Kleene step is T+ v[] ({p.inner.var}: {p.op if p.bounds is None else 'a bounded quantifier'})"
        if p.until is not None:
            return f"a Kleene step has no UNTIL ({p.inner.var})"
        return None
    return "not negation, OR or a repeated group"


def check(spec: TimeoutSpec) -> None:
    """Raise :class:`EngineUnsupportedError` if ``spec`` is outside this engine's scope (module doc)."""
    items = spec.pattern.items if isinstance(spec.pattern, Seq) else (spec.pattern,)
    why = next((w for w in map(_unsupported_step, items) if w is not None), None)
    if why is None and (not isinstance(spec.pattern, (Seq, EventPat, Kleene)) or any(c.negated for c in spec.components)
                        or (isinstance(spec.pattern, Seq) and any(spec.pattern.strict))):
        why = "not negation, OR or a NEXT step"
    if why is not None:
        raise EngineUnsupportedError(f"timed-out partial matches are defined for a SEQ of single events and "
                                     f"Kleene steps (T v, ANY(...) v, T+ v[]): {why}")
    if spec.strategy not in (ANY_MATCH, NEXT_MATCH):
        raise EngineUnsupportedError(f"timed-out partial matches are defined under skip_till_any_match and "
                                     f"skip_till_next_match, not {spec.strategy} (where a run is also broken by "
                                     f"the irrelevant events between its steps)")
    if spec.collapsed:
        raise EngineUnsupportedError("timed-out partial matches have no collapsed output")
    if spec.strategy == NEXT_MATCH:
        kleene_vars = frozenset(c.var for c in spec.components if c.kleene)
        known = frozenset(c.var for c in spec.components)
        for p in spec.predicates:
            if Conjunct(p, kleene_vars, frozenset(), known).waits:
                raise EngineUnsupportedError(
                    "timed-out partial matches under skip_till_next_match: a predicate over a whole Kleene "
                    "sequence (v[v.len], v[], v[k] with k >= 2) is undecided while the sequence grows, and "
                    "skip_till_next_match decides on the prefix which event is taken")


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
        binding = {cs.vars[0]: [ev] if cs.kleene[0] else ev}
        if mask & 1 and all(c.check(binding) is True for c in cs.enter[0]):
            _search(cs, events, i, binding, 0, ts + cs.window, rows)
    if budget is not None and rows:
        budget.charge(len(rows))
    keep = 0
    while keep < len(events) and events[keep][0] <= horizon:
        keep += 1
    state.events = events[keep:]
    return state, rows


def _search(cs: _Compiled, events: list, last: int, binding: dict, k: int, end: float, rows: list) -> None:
    """Extend ``binding`` of steps ``0..k`` (``events[last]`` its last event) by every event that joins step
    ``k``'s open Kleene sequence or takes step ``k + 1`` (skip_till_next_match: by the first event that can,
    in each way it can); a binding no event extends is emitted unless it is a match."""
    n = len(cs.vars)
    ways = ([(k, cs.grow[k])] if cs.kleene[k] else []) + ([(k + 1, cs.enter[k + 1])] if k + 1 < n else [])
    after = events[last][0]
    extended = False
    for j in range(last + 1, len(events)):
        ts, _, mask, ev = events[j]
        if ts >= end:
            break
        if ts <= after:
            continue
        for step, checks in ways:
            if not mask & (1 << step):
                continue
            var = cs.vars[step]
            before = binding.get(var)
            binding[var] = [*before, ev] if step == k else [ev] if cs.kleene[step] else ev
            if all(c.check(binding) is True for c in checks):
                extended = True
                _search(cs, events, j, binding, step, end, rows)
            if before is None:
                del binding[var]
            else:
                binding[var] = before
        if extended and cs.first_only:
            break
    if not extended and not (k == n - 1 and all(c.check(binding) is True for c in cs.final)):
        row = {name: fn(binding) for name, fn in cs.outputs}
        row[TIMEOUT_STEP] = cs.vars[k]
        rows.append({name: None if v is LACKING else v for name, v in row.items()})
