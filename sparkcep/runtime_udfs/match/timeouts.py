"""Timed-out partial matches of a match query (Flink CEP's ``TimedOutPartialMatchHandler``): the side output
of the bindings that began a match and could not complete it within the window.

Definition (docs/language.md, "Timed-out partial matches"): for ``SEQ(c1, ..., cn) WITHIN W``, a *partial
match* binds a prefix of the steps up to ``ck``: a single step ``T v`` to one event, a Kleene step to as many
events as its quantifier allows so far (``T+``, ``T*``, ``T{n,m}``: one to ``m``; ``T?``: one), a step before
``ck`` that may take no event (``*``, ``?``, ``{0,m}``) possibly to none, every other step before ``ck`` to at
least its minimum; all of strictly increasing ``ts``, each accepted by its step (type and local predicates), the
last one before ``first.ts + W``; no event of a negation ``!(T n)`` between two of its steps lies between their
events (``NEXT !(T n)``: is the event right after the first's last one); every predicate over ``c1..ck`` holds
(a positional one, ``v[i]``, ``v[i-1]``, at every position; one over a step that took no event as in a match),
except one reading the whole sequence of ``ck`` while it is a Kleene step (``v[v.len]``, ``v[]``, ``v[k]``
with ``k >= 2``): that one is decided when a later step is bound.
It *times out* when it is no match (every step after ``ck`` may take no event, ``ck``
has its minimum, and every predicate holds), no event extends it (joins ``ck``'s sequence, short of its
maximum, or binds a later step, and gives a partial match), and some event could still have extended it when
the window closed: a run ended before (a link, ``NEXT`` or a contiguity strategy, broken by the event right
after its last one; a loop with ``UNTIL`` closed by a stop event; a step at its maximum with no step after it;
every way on blocked by the event of a negation after its last one, or right after it for ``NEXT !(T n)``)
is discarded, as Flink discards a run its contiguity or a negated event kills; a negation at the end decides
whether a binding of every step is a match.  One row per run of the automaton that the window
closed on, the binding being what that run took.  It is decided, and emitted, once event time reaches
``first.ts + W`` (the watermark; batch: at the end of the input).  Each is one row: the query's result columns
over the partial binding (an unbound variable's values NULL) and ``timeout_step``, the variable of the last
bound step ``ck``.

Scope (:func:`check`): a ``SEQ`` of single events (``T v``, ``ANY(...) v``) and Kleene steps (``T+ v[]``,
``T* v[]``, ``T? v``, ``T{n,m} v[]``, a loop with ``UNTIL``), any of them written ``NEXT``, and negated
events between them or at the end (``!(T n)``, ``NEXT !(T n)``: Flink's notFollowedBy and notNext; not one
that can be at the start of a match, nor one whose predicates read a later step) or negated ``SEQ``s of events
(``!(SEQ(T n, U m))``: an occurrence, its events of strictly increasing ts in the gap, blocks as an event does),
under every selection
strategy, with any predicates (under skip_till_next_match none over a whole Kleene sequence); ``OR`` steps of
single or Kleene events or SEQs of them (each step of the path) and an ``OR`` of such SEQs: a partial match is
one of some path (:func:`_paths`), one
binding however many paths share it (extended, a match, alive if so in one of them); repeated groups of
single events (``(SEQ(B b, C c))+``, ``*``, ``{n,m}``: its steps are the path's, ``_Compiled.group``; an event
takes the next step of an iteration, and after its last step the first one again or a step past the group; a
partial match may end inside an iteration; a negation next to it lies between the step before and the group's
first event, or between its last event and the step after; a predicate over its variables, positional,
decided at each event once the group's later steps are bound, ``_Compiled.enter``; over a whole sequence, once
past the group; with ``UNTIL``, a stop event closes the ways that stay in its loop, ``_Compiled.same_loop``),
not one written ``NEXT``; not collapsed output.  Under
``skip_till_next_match`` an event that can extend a partial match must be taken (§5): from each partial match
only the first later event that extends it does, in each way it can (join the open sequence, or take a later
step).  Where links or stop conditions need them, the
events no step takes are kept too (``_mask`` 0): they break links.

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

import itertools
import math
from collections.abc import Iterable
from functools import lru_cache

from sparkcep.ir.ast import Attr, EventPat, Kleene, Not, Or, Seq, walk
from sparkcep.ir.spec import TIMEOUT_STEP, SlotState, TimeoutSpec, reads_every_event
from sparkcep.runtime_udfs.expr.components import component_mask, component_table
from sparkcep.runtime_udfs.expr.scalar import LACKING, compile_expr
from sparkcep.runtime_udfs.match.conjuncts import ANY_MATCH, NEXT_MATCH, Conjunct, EngineUnsupportedError, run_aware

CONTIGUITY = ("strict_contiguity", "partition_contiguity")
NEGATION = "not a negation of anything but one event or a SEQ of single events"

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
    """One path of the pattern (an ``OR`` has one per alternative): its items, each written ``NEXT`` or not
    (``strict``), and ``index``, the position of each item's component in ``spec.components`` (its bit in
    ``_mask``)."""

    def __init__(self, spec: TimeoutSpec, items: tuple, strict: tuple, index: tuple[int, ...], groups: tuple):
        #: step → None, or for a step of a repeated group of single events, its group's (first step, last step,
        #: fewest and most iterations): each of its steps takes one event per iteration
        self.group = groups
        comps = tuple(spec.components[i] for i in index)
        self.bit = tuple(1 << i for i in index)
        self.vars = tuple(c.var for c in comps)
        #: item k is a negation ``!(T v)`` (it takes no event: an event of it between two steps blocks them)
        self.neg = tuple(c.negated for c in comps)
        #: the variable of a step is the list of its events (T+, T*, T{n,m}; not T v, T? v)
        self.lists = tuple(c.kleene in ("+", "*") for c in comps)
        #: step → the fewest and most events it takes (most None: unbounded); a negation none
        self.lo, self.hi = zip(*(g[2:4] if g else i.repeat if isinstance(i, Kleene) else (0, 0) if isinstance(i, Not)
                                 else (1, 1) for i, g in zip(items, groups, strict=True)), strict=True)
        any_vars = frozenset(c.var for c in spec.components if c.any_)
        n = len(comps)
        list_vars = frozenset(c.var for c in spec.components if c.kleene in ("+", "*"))  # (every path's)
        position = {v: k for k, v in enumerate(self.vars)}
        position_of = {c.var: i for i, c in enumerate(spec.components)}
        #: negation item k → the (bit, variable) of each of its events, in order (``!(SEQ(C c, E e))``: two)
        self.negated_events = {k: [(1 << position_of[e.var], e.var) for e in _negated_events(i)]
                               for k, i in enumerate(items) if isinstance(i, Not)}
        negated = {v: k for k, events in self.negated_events.items() for _, v in events}
        known = frozenset(c.var for c in spec.components)
        #: step → the variables whose sequence may still grow while a partial match ends there: its group's
        #: (every step of a repeated group), or its own (a Kleene step)
        self.open = [frozenset(self.vars[g[0]:g[1] + 1]) if g else frozenset({self.vars[k]} if self.lists[k] else ())
                     for k, g in enumerate(groups)]
        grouped = frozenset(v for k, g in enumerate(groups) if g for v in self.open[k])
        positives = tuple(c.var for c in spec.components if not c.negated)
        # a predicate over another path's variables only: they are absent here, so it holds (the oracle's rule);
        # one reading a group's variable positionally quantifies over its runs (a group's events: one each)
        conjuncts = [run_aware(c, positives) if c.positional.keys() & grouped else c
                     for c in (Conjunct(p, list_vars, any_vars, known) for p in spec.predicates)
                     if c.global_ or not c.vars or c.vars & position.keys()]
        #: the predicates of the match, and those of each negation (item → over its event and earlier steps)
        self.predicates = [c for c in conjuncts if not c.vars & negated.keys()]
        #: negation m → per event of it, the predicates decided once it is bound (over it, the events of the
        #: negation before it and earlier steps)
        self.blocking = {m: [[c for c in conjuncts if c.vars & {v for _, v in events[:i + 1]}
                              and not c.vars & {v for _, v in events[i + 1:]}] for i in range(len(events))]
                         for m, events in self.negated_events.items()}
        #: read every bound event (an equivalence test the operator checks itself: strict_contiguity runs
        #: unpartitioned): re-checked whenever an event is bound
        every = [c for c in self.predicates if c.global_]

        def decided(c: Conjunct, k: int) -> bool:
            """Is ``c`` decided on a partial match whose last step is ``k``: over steps up to ``k``, and not
            reading the whole sequence of a variable still open (``k``'s while it is a Kleene step, its group's)?"""
            at = max((position.get(v, -1) for v in c.vars), default=0)  # (another path's variable: absent)
            return at <= k and not c.waits & self.open[k]

        #: step k → predicates to re-check when an event joins step k's open sequence
        self.grow = [[c for c in self.predicates if decided(c, k) and (self.vars[k] in c.vars or c.global_)]
                     if self.lists[k] else [] for k in range(n)]
        #: (k, t) → predicates decided when a partial match's last step goes from k to t > k (those over the steps
        #: skipped in between included: their variables are absent); (-1, t): when its first event takes step t
        self.enter = {(k, t): [c for c in self.predicates if decided(c, t) and not (k >= 0 and decided(c, k))
                               and not c.global_] + every for k in range(-1, n) for t in range(k + 1, n)}
        #: group step t → the predicates reading its variable, re-checked whenever an event takes it (in any
        #: iteration: each adds positions) once the group's steps after t are bound (from the second iteration
        #: on); not those reading a group's whole sequence (decided past the group)
        take = {t: [_once_bound(c, {v for v in c.vars if position.get(v, -1) > t}) for c in self.predicates
                    if self.vars[t] in c.vars and not c.global_ and not c.waits & self.open[t]]
                for t, g in enumerate(groups) if g}
        for (k, t), checks in self.enter.items():
            if t in take:
                self.enter[k, t] = [*checks, *take[t]]
        #: a group's last step → its first: another iteration
        loops = {(g[1], g[0]) for g in groups if g}
        self.enter.update({(k, t): [*take[t], *every] for k, t in loops})
        #: the first step a partial match may start at: the steps before it may take no event
        self.starts = [t for t in range(n) if not self.neg[t] and not any(self.lo[:t]) and not self.inside(t)]
        #: step k → a partial match ending there is a match if it has its minimum and every predicate holds
        self.may_end = [not any(self.lo[k + 1:]) and not (groups[k] and k != groups[k][1]) for k in range(n)]
        #: (k, t) → must an event taking step t after one of step k be the event right after it (a contiguity
        #: strategy; a NEXT step t, or one between passed over)?
        self.linked = {(k, t): spec.strategy in CONTIGUITY or any(strict[s] and not self.neg[s]
                                                                  for s in range(k + 1, t + 1))
                       for k in range(n) for t in range(k, n)}
        self.linked.update({key: spec.strategy in CONTIGUITY for key in loops})
        #: (k, t) → the negations between step k and a later step t: ``!(T v)`` (no such event between their
        #: events), and ``NEXT !(T v)`` (Flink's notNext: the event right after k's last one is no such event)
        self.between = {(k, t): [m for m in range(k + 1, t) if self.neg[m] and not strict[m]]
                        for k in range(n) for t in range(k, n + 1)}
        self.not_next = {(k, t): [m for m in range(k + 1, t) if self.neg[m] and strict[m]]
                         for k in range(n) for t in range(k, n + 1)}
        self.between.update({key: [] for key in loops})
        self.not_next.update({key: [] for key in loops})
        #: step → (its types, None with UNTIL ANY: any event; its stop condition UNTIL compiled), for a loop with one
        #: (a group's steps: the group's loop, whose stop condition reads one of its variables)
        self.stops = [_stop(g[4] if g else i) for i, g in zip(items, groups, strict=True)]

    def inside(self, t: int) -> bool:
        """Is step ``t`` a step of a repeated group after its first one (entered only from the one before)?"""
        return self.group[t] is not None and t != self.group[t][0]

    def counted(self, k: int, t: int, count: int) -> int:
        """The count of step ``t`` once an event takes it after a partial match whose last step ``k`` took
        ``count``: its events (a Kleene step), or the iteration (a group's step: another one from its last step)."""
        if t == k:
            return count + 1
        if self.group[t] and self.group[t] == self.group[k]:
            return count + 1 if t < k else count
        return 1

    def blocks(self, m: int, mask: int, ev: dict, binding: dict) -> bool:
        """Is ``ev`` an event of the negation ``m`` of one event (its type and local predicates) whose predicates
        hold with ``binding`` (the steps before it)?"""
        return self.occurs(m, [(ev["ts"], 0, mask, ev)], 0, -math.inf, math.inf, binding)

    def occurs(self, m: int, events: list, j: int, after: float, until: float, binding: dict, i: int = 0) -> bool:
        """Is there an occurrence of the negation ``m`` from its ``i``-th event on among ``events[j:]``, each
        event after ``after`` (strictly increasing ts) and before ``until``: of its event's type and local
        predicates, the negation's predicates holding with ``binding`` (the steps before it)?"""
        bit, var = self.negated_events[m][i]
        for h in range(j, len(events)):
            ts, _, mask, ev = events[h]
            if ts >= until:
                break
            if ts <= after or not mask & bit:
                continue
            binding[var] = ev
            try:
                if all(_holds(c, binding) for c in self.blocking[m][i]) and (
                        i + 1 == len(self.negated_events[m])
                        or self.occurs(m, events, h + 1, ts, until, binding, i + 1)):
                    return True
            finally:
                del binding[var]
        return False

    def blocked(self, k: int, t: int, events: list, last: int, until: float, binding: dict,
                next_until: float) -> bool:
        """Is the way from step ``k`` (its last event ``events[last]``) to a later step ``t`` blocked: by an event
        of a negation between them after ``events[last]`` and before ``until``, or, for ``NEXT !(...)``, by the
        event right after ``events[last]`` (if before ``next_until``)?"""
        after = events[last][0]
        for m in self.not_next[k, t]:
            if last + 1 < len(events) and events[last + 1][0] < next_until and self.blocks(
                    m, events[last + 1][2], events[last + 1][3], binding):
                return True
        return any(self.occurs(m, events, last + 1, after, until, binding) for m in self.between[k, t])

    def is_match(self, events: list, last: int, binding: dict, k: int, count: int, end: float) -> bool:
        """Is ``binding`` (its last step ``k`` with ``count`` events, the last ``events[last]``) a match: every
        step after ``k`` may take no event, ``k`` has its minimum, every predicate holds, and no event of a
        negation at the end came before the window closed?"""
        return (self.may_end[k] and count >= self.lo[k] and all(_holds(c, binding) for c in self.predicates)
                and not self.blocked(k, len(self.vars), events, last, end, binding, end))

    def alive(self, events: list, last: int, binding: dict, k: int, count: int, end: float, stopped: bool) -> bool:
        """Could an event still have extended ``binding`` when the window closed: is one of its ways not closed
        by a broken link, a stopped loop (``stopped``: a stop event of ``k``'s loop came after its first event,
        in the window) or a negation's event?"""
        broken = last + 1 < len(events) and events[last + 1][0] < end  # the event right after came in the window
        return not all((broken and self.linked[k, step]) or (stopped and self.same_loop(k, step))
                       or (step != k and self.blocked(k, step, events, last, end, binding, end))
                       for step, _ in self.ways(k, count))

    def stops_at(self, k: int, ev: dict) -> bool:
        """Is ``ev`` a stop event of the loop of step ``k`` (of its types, any with ``UNTIL ANY``; its ``UNTIL``
        holding on it alone)?"""
        types, cond, var = self.stops[k]
        return (types is None or ev.get("type") in types) and cond({var: [ev]}, {var: 0}) is True

    def same_loop(self, k: int, t: int) -> bool:
        """Does an event taking step ``t`` after step ``k`` stay in ``k``'s loop (``k`` again, or a step of
        ``k``'s repeated group: the next one of the iteration, or the first one of another)?"""
        return t == k or (self.group[k] is not None and self.group[t] == self.group[k])

    def ways(self, k: int, count: int) -> list[tuple[int, list[Conjunct]]]:
        """The steps an event after a partial match whose last step ``k`` took ``count`` events may take, with
        the predicates to check then: ``k`` again (a Kleene step short of its maximum), or a later step, past
        steps that may take no event, once ``k`` has its minimum."""
        group = self.group[k]
        if group and k != group[1]:  # inside an iteration: its next step
            return [(k + 1, self.enter[k, k + 1])]
        if group:  # an iteration complete: another one (short of the maximum), or on past the group
            out = [(group[0], self.enter[k, group[0]])] if self.hi[k] is None or count < self.hi[k] else []
        else:
            out = [(k, self.grow[k])] if self.lists[k] and (self.hi[k] is None or count < self.hi[k]) else []
        if count >= self.lo[k]:
            t = k + 1
            while t < len(self.vars):
                if not self.neg[t]:
                    out.append((t, self.enter[k, t]))
                if self.lo[t]:
                    break
                t = self.group[t][1] + 1 if self.group[t] else t + 1  # past a whole optional group
        return out


class _Paths:
    """The compiled paths of a pattern (one, or one per alternative of an ``OR``) and what they share."""

    def __init__(self, spec: TimeoutSpec):
        any_vars = frozenset(c.var for c in spec.components if c.any_)
        self.table = component_table(spec.components, any_vars)
        self.full = (1 << len(spec.components)) - 1
        self.outputs = tuple((o.name, compile_expr(o.expr, any_vars)) for o in spec.outputs)
        self.window = spec.window
        self.first_only = spec.strategy == NEXT_MATCH  # a relevant event is taken: one chain per first event
        #: every event of the partition is kept (those that fill no step break links: _mask 0)
        self.every = reads_every_event(spec)
        self.paths = [_Compiled(spec, *path) for path in _paths(spec)]


def _paths(spec: TimeoutSpec) -> list[tuple[tuple, tuple, tuple[int, ...]]]:
    """``(items, NEXT flags, component indexes)`` of each path: an ``OR`` of SEQs has one per alternative, an
    ``OR`` step (``B b OR C c``) one per alternative too; the components are numbered in pattern order."""
    position = {c.var: k for k, c in enumerate(spec.components)}

    def var(item) -> str:  # (a negation of a SEQ: its first event's)
        return _negated_events(item)[0].var if isinstance(item, Not) else (
            item.inner if isinstance(item, Kleene) else item).var

    alternatives = spec.pattern.alternatives if isinstance(spec.pattern, Or) else (spec.pattern,)
    out = []
    for alt in alternatives:
        items = alt.items if isinstance(alt, Seq) else (alt,)
        strict = alt.strict if isinstance(alt, Seq) and alt.strict else (False,) * len(items)
        choices = [[(a, linked) for a in item.alternatives] if isinstance(item, Or) else [(item, linked)]
                   for item, linked in zip(items, strict, strict=True)]
        for choice in itertools.product(*choices):
            # an alternative that is a SEQ of events is its steps, its first one linked as the OR step is
            path = [step for a, linked in choice for step in _flat(a, linked)]
            groups: list = []  # a repeated group of single events is its steps, one per event
            items: list = []
            for item, linked in path:
                if isinstance(item, Kleene) and isinstance(item.inner, Seq):
                    group = (len(items), len(items) + len(item.inner.items) - 1, *item.repeat, item)
                    items += [(e, False) for e in item.inner.items]
                    groups += [group] * len(item.inner.items)
                else:
                    items.append((item, linked))
                    groups.append(None)
            out.append((tuple(i for i, _ in items), tuple(f for _, f in items),
                        tuple(position[var(i)] for i, _ in items), tuple(groups)))
    return out


def _negated_events(item: Not) -> list[EventPat]:
    """The events of a negation of one event or of a ``SEQ`` of events, in order."""
    return [item.inner] if isinstance(item.inner, EventPat) else list(item.inner.items)


def _flat(alt, linked: bool) -> list[tuple]:
    """An OR step's alternative as path items ``(item, written NEXT)``: a ``SEQ`` of events is its steps, the
    first one linked if the OR step is."""
    if not isinstance(alt, Seq):
        return [(alt, linked)]
    strict = alt.strict or (False,) * len(alt.items)
    return [(i, f or (k == 0 and linked)) for k, (i, f) in enumerate(zip(alt.items, strict, strict=True))]


def _event_step(p) -> bool:
    """Is ``p`` a single event or a Kleene event (``T v``, ``T+ v[]``, ``T? v``, ...)?"""
    return isinstance(p, EventPat) or (isinstance(p, Kleene) and isinstance(p.inner, EventPat))


def _event_seq(p) -> bool:
    """Is ``p`` a ``SEQ`` of single events, none written ``NEXT`` (a negation of several events)?"""
    return isinstance(p, Seq) and not any(p.strict) and all(isinstance(i, EventPat) for i in p.items)


def _stop(loop) -> tuple | None:
    """A loop with ``UNTIL``'s ``(types of a stop event, None with UNTIL ANY: any; its condition compiled; the
    variable it reads)``, else None: ``T+ v[] UNTIL (v.x > 2)``, or a repeated group ``(SEQ(B b, C c))+ UNTIL
    (c.x > 2)`` (a stop event is then of ``c``'s types)."""
    if not isinstance(loop, Kleene) or loop.until is None:
        return None
    if isinstance(loop.inner, EventPat):
        var, types = loop.inner.var, loop.inner.types
    else:
        var = next(n.var for n in walk(loop.until) if isinstance(n, Attr))  # (check_until: one of the group's)
        types = next(e.types for e in walk(loop.inner) if isinstance(e, EventPat) and e.var == var)
    return None if loop.until_any else types, compile_expr(loop.until), var


def _once_bound(c: Conjunct, later: set[str]) -> Conjunct:
    """A copy of ``c`` that holds while a variable of ``later`` is unbound (a group's step after the one just
    taken, in the group's first iteration), else is ``c``."""
    if not later:
        return c
    out = Conjunct.__new__(Conjunct)
    for slot in Conjunct.__slots__:
        setattr(out, slot, getattr(c, slot))
    inner = c.check
    out.check = lambda binding: True if any(binding.get(v) is None for v in later) else inner(binding)
    return out


def _holds(c: Conjunct, binding: dict) -> bool:
    """The oracle's rule: a predicate none of whose variables is bound holds (a step that took no event)."""
    return (bool(c.vars) and not any(v in binding for v in c.vars)) or c.check(binding) is True


def _unsupported_step(p) -> str | None:
    """Why ``p`` cannot be an item of a pattern with timed-out partial matches, or None."""
    if isinstance(p, EventPat):
        return None
    if isinstance(p, Kleene) and isinstance(p.inner, EventPat):
        return None
    if isinstance(p, Not):
        return None if isinstance(p.inner, EventPat) or _event_seq(p.inner) else NEGATION
    if isinstance(p, Or):
        return "not an OR inside an OR alternative"
    if isinstance(p, Kleene) and _event_seq(p.inner):
        return None
    return "not a repeated group of anything but single events (a NEXT, negation, OR or loop inside it)"


def _unsupported_group(items: tuple, strict: tuple) -> str | None:
    """Why a repeated group of a ``SEQ``'s ``items`` has no timed-out partial matches, or None: written
    ``NEXT``."""
    if any(s and isinstance(i, Kleene) and isinstance(i.inner, Seq) for i, s in zip(items, strict, strict=True)):
        return "not a repeated group written NEXT"
    return None


def _unsupported_negation(spec: TimeoutSpec, items: tuple, strict: tuple, groups: tuple) -> str | None:
    """Why a negation of ``spec`` has no timed-out partial matches, or None: one that can be at the start of a
    match, ``NEXT !(...)`` with no step after it that must take an event, or one whose predicates read a step
    after it (Flink's conditions read the steps before).  A step of a repeated group (``groups``) takes an event
    if the group must iterate."""
    bounds = [g[2] if g else i.repeat[0] if isinstance(i, Kleene) else 0 if isinstance(i, Not) else 1
              for i, g in zip(items, groups, strict=True)]
    later: set[str] = set()
    for m in reversed(range(len(items))):
        item = items[m]
        if not isinstance(item, Not):
            later |= {n.var for n in walk(item) if isinstance(n, EventPat)}
            continue
        if not any(bounds[:m]):
            return ("not a negation at the start of a match (its interval ends at the match's last event, which "
                    "a partial match lacks)")
        if strict[m] and not any(bounds[m + 1:]):
            return ("not NEXT !(...) with no step after it that must take an event (whether the run is a match "
                    "would depend on an event after the window)")
        for var in (e.var for e in _negated_events(item)):
            for p in spec.predicates:
                read = {n.var for n in walk(p) if isinstance(n, Attr)}
                if var in read and read & later:
                    return (f"not a negation predicate over a later step ({var} with "
                            f"{', '.join(sorted(read & later))})")
    return None


def check(spec: TimeoutSpec) -> None:
    """Raise :class:`EngineUnsupportedError` if ``spec`` is outside this engine's scope (module doc)."""
    why = None
    for alt in spec.pattern.alternatives if isinstance(spec.pattern, Or) else (spec.pattern,):
        for item in alt.items if isinstance(alt, Seq) else (alt,):
            if isinstance(item, Or):
                if not all(_event_step(a) or (isinstance(a, Seq) and all(_event_step(i) for i in a.items))
                           for a in item.alternatives):
                    why = why or ("not an OR step with an alternative other than an event, a Kleene event or a SEQ "
                                  "of them")
            else:
                why = why or _unsupported_step(item)
        if isinstance(alt, Seq):
            why = why or _unsupported_group(alt.items, alt.strict or (False,) * len(alt.items))
    if why is None:
        why = next((w for items, strict, _, groups in _paths(spec)
                    if (w := _unsupported_negation(spec, items, strict, groups))), None)
    if why is not None:
        raise EngineUnsupportedError(f"timed-out partial matches are defined for a SEQ of single events, Kleene "
                                     f"steps (T v, ANY(...) v, T+, T*, T?, T{{n,m}}, UNTIL, NEXT), negated events, "
                                     f"OR steps and repeated groups of single events, and an OR of such SEQs: {why}")
    if spec.strategy not in (ANY_MATCH, NEXT_MATCH, *CONTIGUITY):
        raise EngineUnsupportedError(f"unknown selection strategy {spec.strategy}")
    if spec.collapsed:
        raise EngineUnsupportedError("timed-out partial matches have no collapsed output")
    if spec.strategy == NEXT_MATCH:
        kleene_vars = frozenset(c.var for c in spec.components if c.kleene in ("+", "*"))
        known = frozenset(c.var for c in spec.components)
        for p in spec.predicates:
            if Conjunct(p, kleene_vars, frozenset(), known).waits:
                raise EngineUnsupportedError(
                    "timed-out partial matches under skip_till_next_match: a predicate over a whole Kleene "
                    "sequence (v[v.len], v[], v[k] with k >= 2) is undecided while the sequence grows, and "
                    "skip_till_next_match decides on the prefix which event is taken")


@lru_cache(maxsize=16)
def _compiled(spec: TimeoutSpec) -> _Paths:
    check(spec)
    return _Paths(spec)


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
        # an event that fills no step is kept where links and stop conditions need every event; events of equal
        # ts in the order of _seq, if they carry it (as the match engine), else arrival
        if mask or cs.every:
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
        starts: dict[str, list] = {}  # variable → the paths' states that start with ev bound to it
        for p, path in enumerate(cs.paths):
            for t in path.starts:
                binding = {path.vars[t]: [ev] if path.lists[t] else ev}
                if (mask & path.bit[t] and not (path.stops[t] and path.stops_at(t, ev))
                        and all(_holds(c, binding) for c in path.enter[-1, t])):
                    starts.setdefault(path.vars[t], []).append((p, t, 1, i))
        for var, states in starts.items():
            first = cs.paths[states[0][0]]
            _search(cs, events, i, {var: [ev] if first.lists[first.vars.index(var)] else ev}, states,
                    ts + cs.window, rows)
    if budget is not None and rows:
        budget.charge(len(rows))
    keep = 0
    while keep < len(events) and events[keep][0] <= horizon:
        keep += 1
    state.events = events[keep:]
    return state, rows


def _search(cs: _Paths, events: list, last: int, binding: dict, states: list, end: float, rows: list) -> None:
    """Extend ``binding`` (``events[last]`` its last event) in each path where it is a partial match: its
    ``states`` ``(path, last step k, count of k's events, index of k's first event)``; by every event that joins
    step ``k``'s open Kleene sequence or takes a later step (:meth:`_Compiled.ways`; a linked way only the event
    right after, a loop with ``UNTIL`` no stop event and none after one, a way past a negation no event of it in
    between; skip_till_next_match: by the first event that can in some path, in each way it can); a binding no
    event extends is emitted unless it is a match in one of its paths or no event could have extended it any
    more in any of them when the window closed (a link broken by the event right after, a loop stopped, a way
    blocked by a negation's event, a step at its maximum)."""
    after = events[last][0]
    extended = False
    #: per state: a stop event of step k's loop came after its first event
    stopped = [False] * len(states)
    ways = [cs.paths[p].ways(k, count) for p, k, count, _ in states]
    for j in range(last + 1, len(events)):
        ts, _, mask, ev = events[j]
        if ts >= end:
            break
        for n, (p, k, _, _) in enumerate(states):
            path = cs.paths[p]
            if path.stops[k] and not stopped[n]:
                stopped[n] = path.stops_at(k, ev)
        if ts <= after:
            continue
        found: dict[str, list] = {}  # variable → the states ev gives, binding it
        for n, (p, k, count, first) in enumerate(states):
            path = cs.paths[p]
            for step, checks in ways[n]:
                if (not mask & path.bit[step] or (j != last + 1 and path.linked[k, step])
                        or (path.stops[step] and (stopped[n] if path.same_loop(k, step)
                                                  else path.stops_at(step, ev)))
                        or (step != k and path.blocked(k, step, events, last, ts, binding, math.inf))):
                    continue
                var = path.vars[step]
                before = binding.get(var)
                # (a group's step again, in a later iteration: its list grows)
                binding[var] = [*before, ev] if before is not None else [ev] if path.lists[step] else ev
                if all(_holds(c, binding) for c in checks):
                    found.setdefault(var, []).append((p, step, path.counted(k, step, count),
                                                      first if step == k else j))
                if before is None:
                    del binding[var]
                else:
                    binding[var] = before
        for var, next_states in found.items():
            extended = True
            before = binding.get(var)
            path, step = cs.paths[next_states[0][0]], next_states[0][1]
            binding[var] = [*before, ev] if before is not None else [ev] if path.lists[step] else ev
            _search(cs, events, j, binding, next_states, end, rows)
            if before is None:
                del binding[var]
            else:
                binding[var] = before
        if extended and cs.first_only:
            break
    if extended or any(cs.paths[p].is_match(events, last, binding, k, count, end) for p, k, count, _ in states):
        return
    for n, (p, k, _, _) in enumerate(states):
        path = cs.paths[p]
        if path.stops[k] and not stopped[n]:
            stopped[n] = any(path.stops_at(k, e) for _, _, _, e in events[last + 1:] if e["ts"] < end)
    if not any(cs.paths[p].alive(events, last, binding, k, count, end, stopped[n])
               for n, (p, k, count, _) in enumerate(states)):
        return  # dead before the window closed
    row = {name: fn(binding) for name, fn in cs.outputs}
    row[TIMEOUT_STEP] = cs.paths[states[0][0]].vars[states[0][1]]  # the last bound step's (one in every path)
    rows.append({name: None if v is LACKING else v for name, v in row.items()})
