"""Match construction for SASE/SASE+ pattern queries: the pure, incremental engine behind match queries.

This engine is pure Python and knows nothing about Spark (DESIGN.md principles 1 and 4).  It runs one
partition of the equivalence key (the caller partitions, as SASE's PAIS does) and supports:

* **Sequences** of single events and ``ANY(T1, ..., Tk)`` events (SASE §2.2), with local, parameterized and
  ``[v.attr]`` predicates under SQL three-valued logic and SASE's lacking-attribute rule.
* **Negation** (SASE §2.2, §3.3; LANGUAGE.md §4) of one event or ``ANY(...)`` anywhere in the sequence:
  middle ``SEQ(A a, !(B b), C c)``, negated start ``SEQ(!(B b), C c)`` (no b in ``(last.ts - W,
  first.ts)``), negated end ``SEQ(A a, !(B b))`` (no b in ``(last.ts, first.ts + W)``: such a match is
  *postponed* and emitted once the watermark reaches ``first.ts + W``; :func:`wakeup` returns that time), with
  negation predicates (P-) and indexed lookup of the negative events (:mod:`match_negation`); also of a
  sequence of single events ``!(SEQ(B b, C c))``: an occurrence of the whole sequence inside the interval
  invalidates.
* **Kleene closure** ``T+ v[]`` (and ``T* v[]``, ``T? v``) anywhere in the sequence, with ``v[i]``,
  ``v[i-1]``, ``v[..i-1]``, ``NEXT(v)``, ``v[1]``, ``v[k]``, ``v[v.len]`` and aggregates over ``v[]`` in WHERE
  and RETURN (SASE++ §2.1).
* **Selection strategies** (SASE++ §2.1, LANGUAGE.md §5): ``skip_till_any_match`` by sequence scan and
  construction over active instance stacks with SASE++'s postponing and early filters (:mod:`match_ais`);
  ``skip_till_next_match``, ``partition_contiguity`` and ``strict_contiguity`` by NFA^b runs
  (:mod:`match_runs`).  Contiguity needs more than one partition's filtered events, see below.
* **Disjunction** ``P1 OR P2`` (gSPICE Q2), with ``*``/``?`` expanded the same way (:mod:`match_compile`).
* **Collapsed output** (``MatchSpec.collapsed``, SASE++ §5.1): one row per binding of the non-Kleene
  variables that has a match, with the Kleene candidates (:func:`sparkcep.ir.spec.collapsed_outputs`).
* **Kleene closure of a sub-pattern** ``SEQ(A a, (SEQ(B b, C c))+, D d)``, with ``T+``, ``T?``, ``T*``, ``OR``,
  negations and other repeated groups inside (an automaton over the positions, :class:`match_compile.Automaton`;
  its variables are arrays, one entry per event), by NFA^b runs under every strategy;
  **negation** of ``T+`` (as ``T``), of ``P OR Q``, and negated events or sequences of them, or ``T+``,
  inside a negated sequence (:mod:`match_compile`); any other negated sub-pattern (a repeated group, nesting
  of any depth, ``T+`` between two negations of a negated sequence, ``NOT T+`` whose predicates read ``v[1]``,
  ``v[v.len]``, ``v[k]`` or ``v[]``) by a general existence search over the gap (:mod:`match_negation`).

Not supported (:func:`check` raises :class:`EngineUnsupportedError`): a predicate reading variables of two
different negations (the oracle refuses it too), and collapsed output of a query it does not fit (repeated
groups included; see ``Plan._check_collapsed``).  A pattern that expands to more than ``MAX_ALTERNATIVES``
alternatives, or whose alternatives would select the same variables and differ only in their negations
(``(!B OR !C)``: valid if either is), runs as one automaton.

The streaming contract: :func:`step` only buffers; :func:`advance` processes the buffered events up to the
watermark in ``ts`` order and returns every match completed (each exactly once); events before a processed
watermark are late and counted, never matched (LANGUAGE.md §1: only an event *older* than the watermark is
late); an event at the processed watermark's very ts is taken after the events of that ts already processed
(in arrival order, whatever its ``_seq``: a batch that ranks ties by ``_seq`` gives all events of a ts
at once), which never follow it in a match; the state is pruned to the window.  ``advance(spec,
state, math.inf)`` flushes (batch).  :meth:`MatchState.to_bytes` keeps the state between micro-batches.

Events are dicts with ``type``, ``ts`` (a number) and optionally:

* ``_mask`` — bit ``k`` set ⇔ the event may fill component ``k`` (absent or ``None`` ⇒ the engine tests type
  and local predicate itself);
* ``_seq`` — the event's rank in the order a contiguity strategy is defined over (the whole input for
  ``strict_contiguity``, the partition for ``partition_contiguity``): selected events must have consecutive
  ``_seq``.  It also orders events of equal ``ts`` (else arrival order does).  Without ``_seq``, contiguity
  is judged on the events the engine receives, so it must receive every event of the partition, those that
  fill no component with ``_mask`` 0 (they are kept only for that).

Example::

    >>> from sparkcep.ir.ast import Attr
    >>> from sparkcep.ir.spec import Component, MatchSpec, OutputColumn
    >>> spec = MatchSpec(components=(Component("a", ("A",)), Component("b", ("B",))), predicates=(),
    ...                  window=10, outputs=(OutputColumn("a_ts", Attr("a", "ts")),
    ...                                      OutputColumn("b_ts", Attr("b", "ts"))))
    >>> state = init_state()
    >>> state, _ = step(spec, state, [{"type": "B", "ts": 5}, {"type": "A", "ts": 1}, {"type": "A", "ts": 3}])
    >>> state, rows = advance(spec, state, 5)
    >>> rows
    [{'a_ts': 3, 'b_ts': 5}, {'a_ts': 1, 'b_ts': 5}]
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterable
from functools import lru_cache
from operator import itemgetter

from sparkcep.ir.ast import Not
from sparkcep.ir.errors import CEPError
from sparkcep.ir.spec import MatchSpec
from sparkcep.runtime_udfs.match import ais as match_ais
from sparkcep.runtime_udfs.match import runs as match_runs
from sparkcep.runtime_udfs.match.budget import Budget, MatchBudgetError
from sparkcep.runtime_udfs.match.compile import Plan
from sparkcep.runtime_udfs.match.conjuncts import ANY_MATCH, EngineUnsupportedError
from sparkcep.runtime_udfs.match.negation import RANK
from sparkcep.runtime_udfs.match.state import STATE_VERSION, AltState, MatchState, Sink

__all__ = [
    "STATE_VERSION",
    "Budget",
    "EngineUnsupportedError",
    "MatchBudgetError",
    "MatchState",
    "advance",
    "check",
    "general_negations",
    "init_state",
    "is_empty",
    "step",
    "wakeup",
]

_ts_of = itemgetter(0)
_order = itemgetter(0, 1)


@lru_cache(maxsize=64)
def _compile(spec: MatchSpec) -> Plan:
    return Plan(spec)


_last: tuple = (None, None)  # (spec, plan) of the latest call: adapters call once per key with the same spec


def _plan(spec: MatchSpec) -> Plan:
    global _last
    last_spec, plan = _last
    if last_spec is not spec:
        plan = _compile(spec)  # hashes the whole spec tree: skipped when the very same object comes back
        _last = (spec, plan)
    return plan


def check(spec: MatchSpec) -> None:
    """Raise :class:`EngineUnsupportedError` (or :class:`CEPError`) if this engine cannot run ``spec``."""
    _plan(spec)


#: What runs one alternative of a pattern: ``sase_ssc`` is sequence scan and construction over active instance
#: stacks (:mod:`match_ais`: skip_till_any_match), ``nfa_b_runs`` NFA^b runs (:mod:`match_runs`: the other
#: strategies, and an alternative with a repeated group ``(SEQ(B b, C c))+`` under every strategy).
ENGINES = {"sase_ssc": match_ais, "nfa_b_runs": match_runs}


def engines(spec: MatchSpec) -> tuple[tuple[tuple[str, ...], str], ...]:
    """Per alternative of ``spec``'s pattern (in the order of ``Plan.alternatives``): its positive variables and
    the name (a key of :data:`ENGINES`) of what runs it, by the rule :func:`advance` dispatches by. Raises like
    :func:`check`."""
    plan = _plan(spec)
    return tuple((alt.vars, "nfa_b_runs" if _on_runs(plan, alt) else "sase_ssc") for alt in plan.alternatives)


def _on_runs(plan: Plan, alt) -> bool:
    """Does ``alt`` run on NFA^b runs (:mod:`match_runs`)?  Under every strategy but skip_till_any_match, and
    under that one an automaton (a repeated group) and an alternative with a NEXT step."""
    return plan.strategy != ANY_MATCH or alt.automaton is not None or bool(alt.strict or alt.not_next or alt.until)


def general_negations(spec: MatchSpec) -> tuple[Not, ...]:
    """The negations of ``spec``'s pattern that run as the general existence search over their gap
    (:class:`match_negation.GeneralNeg`, selected by :func:`match_negation.general_negations`: exponential in
    the worst case), in pattern order, as compiled. Raises like :func:`check`."""
    plan = _plan(spec)
    first = {}
    for alt in plan.alternatives:
        for np in alt.negs:
            if np.general is not None:
                first[np.general.node] = min(first.get(np.general.node, np.comp), np.comp)
    return tuple(sorted(first, key=first.__getitem__))


def init_state() -> MatchState:
    """A fresh, empty partition state."""
    return MatchState()


def is_empty(state: MatchState) -> bool:
    """True when nothing is buffered, postponed or live (the caller may drop the state)."""
    if state.pending or state.postponed:
        return False
    return all(a.live_instances() == 0 and not any(a.negs) for a in state.alts)


def wakeup(spec: MatchSpec, state: MatchState) -> float | None:
    """The smallest watermark at which :func:`advance` has work to do without new events, or None.

    That is the earliest of: the earliest buffered ``ts`` (it becomes processable), the deadline
    ``first.ts + W`` of a match postponed by a negated end (it can then be decided and emitted), and the time
    at which everything live has left the window (the state can then be dropped).  A streaming adapter sets
    its event-time timeout to it.
    """
    times = []
    if state.pending:
        times.append(min(map(_ts_of, state.pending)))
    if state.postponed:
        times.append(state.postponed[0][0])
    newest = [t for t in (a.newest() for a in state.alts) if t is not None]
    if newest:
        times.append(max(newest) + _plan(spec).window)
    return min(times) if times else None


def step(spec: MatchSpec, state: MatchState, events: Iterable[dict]) -> tuple[MatchState, list[dict]]:
    """Buffer ``events`` (any order).  Returns ``(state, [])``: rows are only produced by :func:`advance`.

    Events with ``ts < state.frontier`` are late and counted in ``state.late``; events without a usable
    ``ts`` are counted in ``state.invalid``; events that can fill no component are dropped (kept as breaks of
    contiguity under a contiguity strategy when they carry no ``_seq``).
    """
    plan = _plan(spec)
    frontier = state.frontier
    full = plan.full
    keep_empty = plan.contiguous or plan.strict_steps
    ranked = plan.ranked
    stops = bool(plan.stops)
    pending = state.pending
    arrivals = state.arrivals
    for ev in events:
        ts = ev.get("ts")
        if ts is None or ts != ts:
            state.invalid += 1
            continue
        if ts < frontier:
            state.late += 1
            continue
        mask = ev.get("_mask")
        mask = plan.mask_of(ev) if mask is None or mask != mask else int(mask) & full
        tie = ev.get("_seq")
        if tie is None or tie != tie:
            if not (mask or keep_empty or (stops and plan.stops_any(ev))):
                continue
            tie = arrivals
        elif not (mask or ranked or (stops and plan.stops_any(ev))):
            continue  # (a stop event of a loop with UNTIL fills no component, yet closes the loop; a negation with
            # a NEXT step numbers every event of a partition, engine._ranked)
        arrivals += 1
        pending.append((ts, tie, mask, ev))
    state.arrivals = arrivals
    return state, []


def advance(spec: MatchSpec, state: MatchState, watermark: float,
            budget: Budget | None = None) -> tuple[MatchState, list[dict]]:
    """Process the buffered events with ``ts <= watermark`` in ``ts`` order and return the completed matches.

    Each match is emitted exactly once, as a dict ``output name → value``.  ``advance(spec, state, inf)``
    flushes everything (batch).  A watermark below the frontier is a no-op; one at the frontier processes the
    events that came at its very ts since (no match ends earlier, none starts later).  ``budget``
    (:class:`~sparkcep.runtime_udfs.match.budget.Budget`): every match built (emitted, or postponed for a
    negated end) is counted against it as it is built, and so are the live runs of :mod:`match_runs` after
    each event; :class:`~sparkcep.runtime_udfs.match.budget.MatchBudgetError` once either exceeds its limit
    (the state is then unusable).
    """
    if watermark < state.frontier or (watermark == state.frontier and not state.pending):
        return state, []
    plan = _plan(spec)
    _prepare(plan, state)
    pending = state.pending
    pending.sort(key=_order)
    cut = bisect_right(pending, watermark, key=_ts_of)
    ready, state.pending = pending[:cut], pending[cut:]
    state.frontier = watermark
    if plan.ranked and ready:
        ready = _ranked(plan, ready, state)
    rows: list[dict] = []
    sink = Sink(plan, state, rows, budget)
    if ready:
        for alt, st in zip(plan.alternatives, state.alts, strict=True):
            (match_runs if _on_runs(plan, alt) else match_ais).scan(plan, alt, st, ready, sink)
    sink.settle()  # released postponed matches were counted when they were built
    _release(plan, state, watermark, rows)
    _prune(plan, state, watermark)
    return state, rows


def _ranked(plan: Plan, ready: list, state: MatchState) -> list:
    """``ready`` with each event numbered in processing order within its partition of the equivalence test (the
    engine may run several: ``strict_contiguity`` checks ``[id]`` itself), as a negation with a ``NEXT`` step
    reads it (``match_negation.RANK``): copies, the caller's events are not changed."""
    numbers = state.ranked
    key = plan.rank_key
    out = []
    for ts, tie, mask, ev in ready:
        part = tuple(ev.get(a) for a in key)
        try:
            n = numbers.get(part, 0)
        except TypeError:  # an unhashable key value (an array column): by its text
            part = repr(part)
            n = numbers.get(part, 0)
        numbers[part] = n + 1
        out.append((ts, tie, mask, {**ev, RANK: n}))
    return out


def _prepare(plan: Plan, state: MatchState) -> None:
    """Create the alternatives' states on first use; rebuild negation buckets after a load."""
    if not state.alts:
        ais = plan.strategy == ANY_MATCH
        state.alts = [AltState(match_ais.n_stacks(a) if ais and not a.automaton else 0, len(a.negs))
                      for a in plan.alternatives]
        return
    if len(state.alts) != len(plan.alternatives) or any(
            len(st.negs) != len(a.negs) for a, st in zip(plan.alternatives, state.alts, strict=True)):
        raise CEPError("this match engine state belongs to another query")
    for alt, st in zip(plan.alternatives, state.alts, strict=True):
        if st.stale:
            for np, index in zip(alt.negs, st.negs, strict=True):
                events = index.events
                index.clear()
                for ts, ev in events:
                    index.add(np, ts, ev)
            st.stale = False


def _release(plan: Plan, state: MatchState, watermark: float, rows: list[dict]) -> None:
    """Decide the postponed matches whose negated end is over (deadline ``<= watermark``: every event before
    it has been indexed) and emit those no negative event invalidates."""
    postponed = state.postponed
    while postponed and postponed[0][0] <= watermark:
        _, _, k, binding = heapq.heappop(postponed)
        alt = plan.alternatives[k]
        if not alt.end_blocked(state.alts[k].negs, binding, plan.window):
            rows.append(alt.row(binding))


def _prune(plan: Plan, state: MatchState, watermark: float) -> None:
    """Drop what no future match can use: stack entries and runs whose first event is a window or more before
    ``watermark``, negative events at or before ``watermark - W``; negative events of non-start negations once
    nothing live can precede them."""
    window = plan.window
    horizon = watermark - window
    waiting = {k for _, _, k, _ in state.postponed} if state.postponed else ()
    for alt, st in zip(plan.alternatives, state.alts, strict=True):
        if st.stacks:
            match_ais.prune(st, watermark, window)
        if st.runs:
            st.runs = [r for r in st.runs if watermark - r.first < window]
        if not alt.negs:
            continue
        idle = st.live_instances() == 0 and alt.index not in waiting
        for np, index in zip(alt.negs, st.negs, strict=True):
            if idle and np.before is not None:
                index.clear()
            elif len(index):
                index.prune(horizon)
