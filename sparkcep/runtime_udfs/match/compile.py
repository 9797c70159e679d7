"""Compile a :class:`~sparkcep.ir.spec.MatchSpec` into the plan the match engines execute.

The pattern is normalized into **alternatives**: flat sequences of *positive* components (one event, or a
Kleene ``T+ v[]`` collecting one or more events) with *negative* components ``!(T z)`` / ``!(ANY(...) z)``
sitting in the gaps.  ``P1 OR P2`` (gSPICE Q2), ``T* v[]`` (``T+ v[]`` or nothing) and ``T? v`` (``T v`` or
nothing) expand into several alternatives (GRETA §9: ``SEQ(P*, Q) = SEQ(P+, Q) ∨ Q``); each runs on its own
and their matches are disjoint, because two alternatives never bind the same positive variables.

A **repeated group** ``(SEQ(B b, C c))+`` (with ``OR``, ``?``, ``*``, negations and other groups inside) makes
its alternative an :class:`Automaton` over its positions, built by the Glushkov construction
(:class:`Fragment`: first, last and follow sets, negations riding on the edges); its variables are arrays like
Kleene ones (one entry per event, ``Alternative.groups`` their ranges) and such alternatives run on NFA^b runs
(:mod:`match_runs`) under every strategy.  A **negation** ``NOT N`` becomes one
negative item per alternative of ``N`` in the same gap (``NOT (P OR Q)``: ``NOT P`` and ``NOT Q``, with the
other alternative's variables read as NULL, as the oracle does), each a single event or a sequence of single
events with single negated events inside (:meth:`NegPlan.as_sequence`); ``T+``/``T*`` inside a negation is
negated as ``T`` where the oracle's semantics make that exact (:func:`negated_kleene`).  Any other negation
(:func:`match_negation.general_negations`) is one negative item checked literally (``NegPlan.general``).

Every conjunct of WHERE is analysed once (:class:`Conjunct`): the variables it reads, how it reads each
Kleene variable (``v[i]``, ``v[i-1]``, ``v[..i-1]``, ``NEXT(v)``, ``v[1]``, ``v[k]``, ``v[v.len]``, ``v[]``),
hence *when* its value becomes final while a match is built.  A :class:`Schedule` then places each conjunct
and each negation check at the earliest point of a given binding order where it can be decided (SASE §4.2,
dynamic filtering), and classifies the predicates on a Kleene variable by SASE++ §5.2's **predicate
consistency**:

* true-and-false consistent (``b[i].x > 5``, ``a.id = b[i].id``): a per-event filter (``elem``);
* true- or false-value consistent, i.e. monotone in the set of events selected so far
  (``b[i].x > max(b[..i-1].x)``, ``c.x < max(b[].x)``): decided early on the superset of candidates
  (:class:`Mono`), exactly only where the superset leaves the question open;
* inconsistent (``b[i].x >= b[i-1].x``, ``b[b.len].x > 2 * avg(b[].x)``): evaluated on each selected event,
  or on the complete Kleene sequence (SASE++ §5.1: postponed to the end).

Conjunct semantics are the oracle's (:mod:`sparkcep.oracles.match`): a conjunct that reads a Kleene variable
positionally must hold at every position where it is defined (``v[i-1]``/``v[..i-1]`` from the second event
on, ``NEXT(v)`` up to the second to last); in an alternative, a conjunct whose variables are all absent
holds, one with an absent positionally read Kleene variable holds, and otherwise absent variables read NULL.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sparkcep.ir.ast import (
    EquivTest,
    EventPat,
    Kleene,
    Literal,
    Not,
    Or,
    Seq,
    conjuncts,
    count_anchor,
    count_bounds,
    walk,
)
from sparkcep.ir.errors import CEPError
from sparkcep.ir.spec import Component, MatchSpec
from sparkcep.runtime_udfs.expr.components import Stop, component_mask, component_table, is_stop, stop_table
from sparkcep.runtime_udfs.match.automaton import (
    END,
    START,
    Automaton,
    _fragment,
    _group,
    _loops,
    not_next_components,
)
from sparkcep.runtime_udfs.match.collapsed import _negation_groups, _nullify, _output_fn, _unscoped_equiv
from sparkcep.runtime_udfs.match.conjuncts import (
    _GROWING_KINDS,
    ANY_MATCH,
    MAX_ALTERNATIVES,
    NEXT_MATCH,
    PARTITION,
    RANKED_NEXT,
    STRATEGIES,
    STRICT,
    Conjunct,
    EngineUnsupportedError,
    NegPlan,
    _mono,
    _negated_shapes,
    _TooManyAlternatives,
    collapse_negated_kleene,
    negated_kleene,
    run_aware,
)

if TYPE_CHECKING:
    from sparkcep.runtime_udfs.match.conjuncts import Mono

__all__ = ["Alternative", "KleeneChecks", "Plan", "Schedule"]


class Alternative:
    """One flat sequence: positive positions ``0..m-1`` (``comps[p]`` is the spec component index),
    negative components between them, and the conjuncts that apply to it."""

    __slots__ = ("index", "comps", "vars", "kleene", "m", "negs", "conjuncts", "all_vars", "_split",
                 "schedules", "trailing", "neg_vars", "first_var", "last_var", "any_vars", "outputs", "groups",
                 "listed", "starts", "ends", "follow", "automaton", "conjuncts_without", "position", "bounds",
                 "group_bounds", "strict", "not_next", "until", "loops", "strict_edges")

    def __init__(self, index: int, comps: tuple[int, ...], kleene: tuple[bool, ...], vars_: tuple[str, ...],
                 negs: tuple[NegPlan, ...], conjs: tuple[Conjunct, ...], any_vars: frozenset[str],
                 groups: tuple[tuple[int, int], ...] = ()):
        self.index = index
        #: repeated groups ``(SEQ(B b, C c))+`` as ``(first, last)`` positions (the edges back are the
        #: :class:`Automaton`'s); their variables are arrays like Kleene ones (``listed``)
        self.groups = groups
        inside = {p for i, j in groups for p in range(i, j + 1)}
        self.listed = tuple(kl or p in inside for p, kl in enumerate(kleene))
        self.any_vars = any_vars
        self.comps, self.kleene, self.vars = comps, kleene, vars_
        self.m = len(comps)
        self.negs = negs
        self.conjuncts = conjs
        neg_vars = tuple(v for n in negs for v in ((n.var,) if not n.members else
                                                   (*(m[1] for m in n.members),
                                                    *(m[1] for _, ms in n.inners for m in ms))))
        self.all_vars = vars_ + neg_vars
        self.trailing = tuple(n for n in negs if n.after is None and not n.guards)
        self.neg_vars = frozenset(neg_vars)
        self.first_var, self.last_var = vars_[0], vars_[-1]
        self.position = {v: p for p, v in enumerate(vars_)}
        #: where a match may start and end, and per position the positions that may come next (a Kleene
        #: position follows itself); a repeated group makes them an automaton's (:meth:`attach`)
        self.starts, self.ends = (0,), (self.m - 1,)
        self.follow = tuple(((p,) if kleene[p] else ()) + ((p + 1,) if p + 1 < self.m else ())
                            for p in range(self.m))
        self.automaton: Automaton | None = None
        #: per position, the ``(n, m)`` count bound of a ``T{n,m} v[]`` Kleene position (None: unbounded); None
        #: when the alternative has none (set by :class:`Plan`)
        self.bounds: tuple | None = None
        #: an automaton's bounded groups ``(P){n,m}``: ``(anchor position, n, m, first, last)`` (see
        #: :func:`match_runs._beyond_bound`)
        self.group_bounds: tuple = ()
        #: positions entered only from the partition's event right before (``NEXT`` steps; set by :class:`Plan`)
        self.strict: frozenset[int] = frozenset()
        #: an automaton's edges ``(p, q)`` of NEXT steps inside a repeated group (``Automaton.strict``)
        self.strict_edges: frozenset[tuple[int, int]] = frozenset()
        #: position → the negations ``NEXT !(C c)`` right after it: the partition's next event must not be one
        self.not_next: dict[int, tuple] = {}
        #: the positions of loops with a stop condition ``UNTIL`` → its :class:`Stop` (set by :class:`Plan`; see
        #: :meth:`stops_at`), and → the positions of that loop (one event's, or a repeated group's)
        self.until: dict[int, Stop] = {}
        self.loops: dict[int, frozenset[int]] = {}
        self.conjuncts_without: Callable[[frozenset[str]], tuple[Conjunct, ...]] | None = None
        self._split: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self.schedules: dict[str, Schedule] = {}
        self.outputs: tuple = ()  # (name, fn) per result column, set by Plan

    def attach(self, automaton: Automaton, conjuncts_without) -> None:
        """Make this alternative run as ``automaton`` (a repeated group): its negations apply on its edges
        (all ``guards``), those after a match's last event are its negated end (``trailing``, postponed);
        ``conjuncts_without(missing)`` gives the conjuncts of a match that leaves ``missing`` unbound."""
        self.automaton = automaton
        self.starts, self.ends, self.follow = automaton.starts, automaton.ends, automaton.follow
        self.trailing = tuple(self.negs[s] for s in automaton.trailing_slots)
        self.conjuncts_without = conjuncts_without

    def path(self, binding: dict) -> list[tuple[Any, int]]:
        """``(ts, position)`` of a binding's events in ts order (events of a match have distinct ts)."""
        position = self.position
        return sorted((ev["ts"], position[v]) for v, bound in binding.items() if v in position and bound is not None
                      for ev in (bound if isinstance(bound, list) else (bound,)))

    def blocked_on_edges(self, negs: list, binding: dict, window: float, end: bool) -> bool:
        """Is a complete match of an automaton invalidated by a negation in one of its gaps?  ``end``: only the
        gap after its last event (the postponed negated end), else all the others.  A gap is invalidated iff
        every variant of negations of its edge has one that occurs there (the oracle: valid if any derivation
        is)."""
        edges = self.automaton.edges
        path = self.path(binding)
        first, last = path[0][0], path[-1][0]
        if end:
            gaps = [((path[-1][1], END), last, first + window)]
        else:
            gaps = [((START, path[0][1]), last - window, first)]
            gaps += [((p, q), lo, hi) for (lo, p), (hi, q) in zip(path, path[1:], strict=False)]
        plans = self.negs
        for key, lo, hi in gaps:
            variants = edges.get(key)
            if variants and all(any(negs[s].blocked(plans[s], binding, lo, hi) for s in v) for v in variants):
                return True
        return False

    def end_blocked(self, negs: list, binding: dict, window: float) -> bool:
        """Is a postponed match (complete binding) invalidated by its negated end?  ``negs``: the
        alternative's negative indexes."""
        if self.automaton is not None:
            return self.blocked_on_edges(negs, binding, window, True)
        for np in self.trailing:
            lo, hi = self.interval(np, binding, window)
            if negs[np.slot].blocked(np, binding, lo, hi):
                return True
        return False

    def row(self, binding: dict) -> dict:
        """The output row of a complete binding."""
        return {name: fn(binding) for name, fn in self.outputs}

    def split(self, mask: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(positive positions, negative slots)`` an event with component bitmask ``mask`` may fill here,
        positions ascending (memoized per mask)."""
        out = self._split.get(mask)
        if out is None:
            positions = tuple(p for p, k in enumerate(self.comps) if mask >> k & 1)
            slots = tuple(n.slot for n in self.negs if mask & n.comp_mask)
            out = self._split[mask] = (positions, slots)
        return out

    def stops_at(self, ev: dict) -> frozenset[int]:
        """The loop positions ``ev`` is a stop event of (:func:`is_stop`: of the loop's types, or any with ``UNTIL
        ANY``, satisfying its condition read on ``ev`` alone; an attribute it lacks is NULL, so no stop)."""
        verdicts: dict[int, bool] = {}
        out = []
        for p, stop in self.until.items():
            verdict = verdicts.get(id(stop))
            if verdict is None:
                verdict = verdicts[id(stop)] = is_stop(stop, ev)
            if verdict:
                out.append(p)
        return frozenset(out)

    def schedule(self, order: str) -> Schedule:
        """The check schedule for binding order ``"ais"`` (construction, :mod:`match_ais`) or ``"forward"``
        (runs, :mod:`match_runs`)."""
        sched = self.schedules.get(order)
        if sched is None:
            sched = self.schedules[order] = Schedule(self, _ais_order(self.kleene) if order == "ais"
                                                     else tuple(range(self.m)))
        return sched

    def span(self, binding: dict) -> tuple[Any, Any]:
        """``(first ts, last ts)`` of a complete binding."""
        if self.automaton is not None:
            path = self.path(binding)
            return path[0][0], path[-1][0]
        first, last = binding[self.first_var], binding[self.last_var]
        first = first[0] if isinstance(first, list) else first
        last = last[-1] if isinstance(last, list) else last
        return first["ts"], last["ts"]

    def interval(self, plan: NegPlan, binding: dict, window: float, last_ts=None) -> tuple[Any, Any]:
        """The open interval in which ``plan``'s negative events invalidate ``binding`` (complete as far as
        ``plan`` needs; ``last_ts``: the ts of the match's last event, if its variable is not bound yet)."""
        if plan.before is None:
            lo = (self.span(binding)[1] if last_ts is None else last_ts) - window
        else:
            ev = binding[self.vars[plan.before]]
            lo = (ev[-1] if isinstance(ev, list) else ev)["ts"]
        if plan.after is None:
            hi = self.span(binding)[0] + window
        else:
            ev = binding[self.vars[plan.after]]
            hi = (ev[0] if isinstance(ev, list) else ev)["ts"]
        return lo, hi


def _ais_order(kleene: tuple[bool, ...]) -> tuple[int, ...]:
    """The binding order of AIS construction: backward from the last position, except that a block of
    consecutive Kleene positions is enumerated forward right after the single position before it."""
    order: list[int] = []
    j = len(kleene) - 1
    while j >= 0:
        if not kleene[j]:
            order.append(j)
            j -= 1
            continue
        i = j
        while i > 0 and kleene[i - 1]:
            i -= 1
        if i > 0:
            order.append(i - 1)
        order.extend(range(i, j + 1))
        j = i - 2
    return tuple(order)


class KleeneChecks:
    """The conjuncts decided while the Kleene variable ``var`` is being filled, by class.

    ``elem``   read only ``var[i]`` (true-and-false consistent): a filter on each candidate event;
    ``first``  read only ``var[1]``-like fixed positions: checked on the first selected event;
    ``each``   ``(conjunct, prev, nxt)``: checked at each new position (``nxt``: at the previous one);
    ``prefix`` :class:`Mono` over ``var[..i-1]``: decided per candidate on the candidates before it, exactly
               only where that leaves the question open;
    ``whole``  the rest, read the complete sequence (``var[var.len]``, ``var[]``, ``var[k]``): checked when
               the variable is complete; ``whole_mono`` maps some of them to a :class:`Mono` over ``var[]``,
               decided once on all candidates.
    """

    __slots__ = ("var", "elem", "first", "each", "prefix", "whole", "whole_mono")

    def __init__(self, var: str):
        self.var = var
        self.elem: list[Conjunct] = []
        self.first: list[Conjunct] = []
        self.each: list[tuple[Conjunct, bool, bool]] = []
        self.prefix: list[Mono] = []
        self.whole: list[Conjunct] = []
        self.whole_mono: dict[Conjunct, Mono] = {}

    def element_checks(self) -> list[tuple[Conjunct, bool, bool, bool]]:
        """All per-event conjuncts as ``(conjunct, prev, nxt, first only)``, for exact evaluation."""
        out = [(c, False, False, False) for c in self.elem] + [(c, False, False, True) for c in self.first]
        out += [(c, prev, nxt, False) for c, prev, nxt in self.each]
        out += [(m.conj, True, False, False) for m in self.prefix]
        return out


class Schedule:
    """Where each conjunct and negation check is decided for one binding order of an alternative.

    ``order``    positions in the order they become complete; ``rank[p]`` is ``p``'s index in it;
    ``single``   per single position, the checks (``Conjunct.check``: holds iff it returns True) decided
                 once it is bound;
    ``kleene``   per Kleene position, its :class:`KleeneChecks`;
    ``negs_at``  per position, the negations decided once it is complete (negated end: ``alt.trailing``);
    ``growing``  the conjuncts skip_till_next_match re-evaluates on every prefix (the oracle's "decidable"
                 conjuncts whose value may still change): ``(conjunct, last position read)``.
    ``memo``     engine-specific data derived from the above once.
    """

    __slots__ = ("order", "rank", "single", "kleene", "negs_at", "growing", "single_grows", "memo")

    def __init__(self, alt: Alternative, order: tuple[int, ...]):
        self.memo: dict[str, Any] = {}  # what an engine derives from the schedule once (see match_ais)
        self.order = order
        self.rank = {p: r for r, p in enumerate(order)}
        position = {v: p for p, v in enumerate(alt.vars)}
        m = alt.m
        self.single: list[list[Callable[[dict], bool]]] = [[] for _ in range(m)]
        self.single_grows: list[list[bool]] = [[] for _ in range(m)]
        self.kleene: list[KleeneChecks | None] = [KleeneChecks(alt.vars[p]) if alt.kleene[p] else None
                                                  for p in range(m)]
        self.negs_at: list[list[NegPlan]] = [[] for _ in range(m)]
        self.growing: list[tuple[Conjunct, int]] = []
        last = order[-1]
        for c in alt.conjuncts:
            ps = [position[v] for v in c.vars if v in position]
            anchor = last if c.global_ or not ps else max(ps, key=self.rank.__getitem__)
            if (c.global_ or c.waits) and not c.grows:
                self.growing.append((c, max(ps, default=-1)))
            kc = self.kleene[anchor]
            if kc is None:
                self.single[anchor].append(c.check)
                # a conjunct that read a variable this alternative lacks (an unmatched ``?``/``*``, another OR
                # branch) fails the match, but, as in the oracle, never decides selectability
                # (skip_till_next_match: its variables are not all bound): treated like a growing one
                self.single_grows[anchor].append(c.grows or c.nulled)
            else:
                _classify(kc, c, alt)
        for plan in alt.negs:
            if plan.after is None or plan.guards:
                continue
            ps = [position[v] for c in plan.conjuncts for v in c.vars if v in position]
            ps += [p for p in (plan.before, plan.after) if p is not None]
            self.negs_at[max(ps, key=self.rank.__getitem__)].append(plan)


def _classify(kc: KleeneChecks, c: Conjunct, alt: Alternative) -> None:
    """File ``c``, anchored at Kleene variable ``kc.var``, into the right class of ``kc``."""
    var = kc.var
    kinds = c.access.get(var, frozenset())
    any_vars = alt.any_vars
    if c.global_ or kinds & _GROWING_KINDS:
        kc.whole.append(c)
        if kinds == {"all"} and not c.global_ and set(c.positional) <= {var}:
            mono = _mono(c, var, "all", any_vars)
            if mono is not None:
                kc.whole_mono[c] = mono
        return
    others = set(c.positional) - {var}
    if kinds <= {"first"}:
        kc.first.append(c)
    elif kinds == {"cur"}:
        kc.elem.append(c)
    elif kinds == {"cur", "prefix"} and not others and (mono := _mono(c, var, "prefix", any_vars)) is not None:
        kc.prefix.append(mono)
    else:
        prev, nxt = c.positional.get(var, (False, False))
        kc.each.append((c, prev, nxt))


# ----------------------------------------------------------------------------------------------- the plan


class Plan:
    """A compiled :class:`MatchSpec`: strategy, window, alternatives, outputs, the type/local-predicate test
    for events that arrive without a ``_mask``."""

    __slots__ = ("spec", "strategy", "window", "alternatives", "full", "by_type", "contiguous", "any_vars",
                 "kleene_vars", "known", "strict_steps", "stops", "ranked", "rank_key")

    def __init__(self, spec: MatchSpec):
        comps = spec.components
        if not comps:
            raise EngineUnsupportedError("a match query needs at least one component")
        strategy = spec.strategy or ANY_MATCH
        if strategy not in STRATEGIES:
            raise EngineUnsupportedError(f"unknown selection strategy {strategy}")
        if not spec.window > 0:
            raise CEPError(f"the window must be positive, got {spec.window}")
        self.spec = spec
        self.strategy = strategy
        self.contiguous = strategy in (STRICT, PARTITION)
        self.window = spec.window
        self.full = (1 << len(comps)) - 1
        position = {c.var: k for k, c in enumerate(comps)}
        if len(position) != len(comps):
            raise EngineUnsupportedError("a variable is bound twice")
        self.any_vars = any_vars = frozenset(c.var for c in comps if c.any_)
        self.by_type = component_table(comps, any_vars)

        pattern = spec.pattern if spec.pattern is not None else _flat_pattern(comps)
        kleene_vars = frozenset(c.var for c in comps if c.kleene in ("+", "*"))
        # negations no fast path checks exactly run the general existence check (match_negation.GeneralNeg);
        # the variables under + or * inside them stay lists
        from sparkcep.runtime_udfs.match.negation import general_negations, has_links

        general, general_lists = general_negations(pattern, [p for e in spec.predicates for p in conjuncts(e)],
                                                   kleene_vars)
        #: a negation links a step with NEXT (``!(NEXT C c)``): the engine numbers the partition's events
        #: (``match_negation.RANK``), all of which reach it
        self.ranked = any(has_links(n) for n in general)
        #: ... per partition of the unscoped equivalence attributes still read here (``[id]`` under
        #: strict_contiguity, which runs as one partition)
        self.rank_key = tuple(dict.fromkeys(i.attr for e in spec.predicates for c in conjuncts(e)
                                            if isinstance(c, EquivTest) for i in c.items if i.var is None))
        try:
            shapes = _alternatives(pattern, position, general)
        except _TooManyAlternatives:
            shapes = None
        negated = frozenset(c.var for c in comps if c.negated)
        # NOT T+ is negated as NOT T (see negated_kleene): those variables are single events here
        collapsed = negated_kleene(pattern) - general_lists
        rewritten = [collapse_negated_kleene(p, collapsed, kleene_vars | collapsed) for e in spec.predicates
                     for p in conjuncts(e)]
        # bounded quantifiers P{n,m}: P+ (P*) whose iterations, counted by one variable, lie in [n, m]
        bounded = _bounded(pattern, spec.collapsed)
        rewritten += [c for k in bounded for c in count_bounds(k)]
        # a negated variable is one event (a negation inside a repeated group applies per iteration)
        kleene_vars = (kleene_vars - negated) | general_lists
        self.kleene_vars, self.known = kleene_vars, frozenset(position)
        parsed = [Conjunct(p, kleene_vars, any_vars, self.known) for p in rewritten if p is not None]
        groups = _negation_groups(spec.pattern) if spec.pattern is not None else {}
        for c in parsed:
            read = c.vars & negated
            if len(read) > 1 and len({groups.get(v, v) for v in read}) > 1:
                raise EngineUnsupportedError("a predicate reads two negated variables of different negations")
        alternatives: list[Alternative] = []
        for _ in range(2):
            if shapes is None:
                # beyond MAX_ALTERNATIVES, or alternatives that select the same variables and differ only in their
                # negations (valid if either is): the whole pattern as one automaton (one alternative, on runs)
                shapes = _alternatives(pattern, position, general, whole=True)
            alternatives = []
            for items in shapes:
                positives = [(k, kl) for kind, k, kl in items if kind in ("pos", "group")]
                if not positives:
                    continue  # nothing to select: no match (the oracle skips empty derivations)
                alternatives.append(self._alternative(len(alternatives), items, comps, parsed, negated, any_vars))
            seqs = [a.vars for a in alternatives]
            if len(set(seqs)) == len(seqs):
                break
            shapes = None
        if not alternatives:
            raise EngineUnsupportedError("the pattern has no positive component")
        if any(not comps[position[v]].negated for v in groups if v in position):
            raise EngineUnsupportedError("negation of a sub-pattern needs its components marked negated")
        self.alternatives = tuple(alternatives)
        # the count bound of each T{n,m} v[] position of a flat alternative, which the NFA^b runs enforce as they
        # take events (skip_till_next_match must not see an event beyond m as selectable, nor leave before n)
        single = {k.inner.var: k.bounds for k in bounded if isinstance(k.inner, EventPat)}
        grouped = {count_anchor(k): k.bounds for k in bounded if not isinstance(k.inner, EventPat)}
        for a in alternatives:
            if a.automaton is None and any(v in single for v in a.vars):
                a.bounds = tuple(single.get(v) if kl else None for v, kl in zip(a.vars, a.kleene, strict=True))
            elif a.automaton is not None:
                # (P){n,m} as an automaton: its anchor's position counts the iterations, its widest group range
                # (P's positions) is what a run leaves once it has done them
                a.group_bounds = tuple(
                    (p, lo, hi, *max((r for r in a.groups if r[0] <= p <= r[1]), key=lambda r: r[1] - r[0],
                                       default=(p, p)))
                    for v, (lo, hi) in {**single, **grouped}.items() if (p := a.position.get(v)) is not None)
        # UNTIL: a loop of one event closes on a stop event (match_runs); positions by variable
        stops = stop_table(spec.pattern, comps)
        for a in alternatives:
            for stop in stops:
                loop = frozenset(p for p, v in enumerate(a.vars) if v in stop.loop)
                a.until.update(dict.fromkeys(loop, stop))
                a.loops.update(dict.fromkeys(loop, loop))
        #: the alternatives with a stop condition: an event that fills no component reaches them if it is a stop
        self.stops = tuple(a for a in alternatives if a.until)
        if self.stops and spec.collapsed:
            raise EngineUnsupportedError("collapsed output with UNTIL is not supported")
        for a in alternatives:
            # a repeated group runs on NFA^b runs (match_runs) under every strategy: construction over stacks
            # has no way back from a group's last position to its first
            a.schedule("forward" if self.contiguous or strategy == NEXT_MATCH or a.automaton or a.strict or a.not_next
                       or a.until else "ais")
        #: NEXT steps: every event of the partition must reach the engine, as under a contiguity strategy
        self.strict_steps = self.ranked or any(a.strict or a.not_next or a.strict_edges for a in alternatives)
        if spec.collapsed:
            self._check_collapsed()

    def _check_collapsed(self) -> None:
        """What collapsed output supports: skip_till_any_match, one Kleene position per alternative (at any
        position; enumerated after every single one, ``match_ais._collapsed_steps``) and at least one single
        position, a negated end only where its interval and predicates are the same for every subset."""
        if self.ranked:
            raise EngineUnsupportedError("collapsed output does not support NEXT inside a negation nor NEXT !(...) "
                                         "next to a repeated group: the event right after a gap's start depends "
                                         "on which candidates a row stands for")
        if self.strategy != ANY_MATCH:
            raise EngineUnsupportedError(f"collapsed output is for skip_till_any_match (the strategy that "
                                         f"enumerates every subset), not {self.strategy}")
        for alt in self.alternatives:
            if alt.automaton is not None:
                raise EngineUnsupportedError("collapsed output does not support a repeated group "
                                             "((SEQ(B b, C c))+), nor a pattern that runs as one automaton (more "
                                             f"than {MAX_ALTERNATIVES} alternatives): its candidates are not one "
                                             "set of events")
            if sum(alt.kleene) != 1:
                raise EngineUnsupportedError("collapsed output needs exactly one Kleene variable (T+ v[]) in each "
                                             "alternative of the pattern")
            p = alt.kleene.index(True)
            if alt.m == 1:
                raise EngineUnsupportedError("collapsed output needs a single (non-Kleene) event in the pattern: "
                                             "a row stands for one binding of the non-Kleene variables")
            if p == alt.m - 1 and any(np.before is None for np in alt.negs):
                raise EngineUnsupportedError("collapsed output does not support a negated start before a Kleene "
                                             "variable in last position: its interval begins at the match's last "
                                             "event - W, a Kleene candidate, so whether a subset's match is "
                                             "blocked depends on the subset")
            if alt.trailing:
                # no d in (last.ts, first.ts + W): the same for every subset iff first and last are single
                # events and no predicate of the negation reads the Kleene variable
                var = alt.vars[p]
                if p == alt.m - 1:
                    why = f"its interval (last.ts, {alt.vars[0]}.ts + W) starts at the match's last event, a candidate"
                elif p == 0:
                    why = f"its interval (last.ts, {var}[1].ts + W) ends W after the subset's first event"
                elif any(c.global_ or var in c.vars for np in alt.trailing for c in np.conjuncts):
                    why = f"a predicate of the negation reads the Kleene variable {var}"
                else:
                    continue
                raise EngineUnsupportedError("collapsed output does not support this negated end: whether a "
                                             f"subset's match is blocked depends on the subset ({why})")

    def _alternative(self, index: int, items: list, comps, parsed: list[Conjunct], negated: frozenset[str],
                     any_vars: frozenset[str]) -> Alternative:
        # NEXT items: the positions a run may only enter from the event right before in the partition
        # (NEXT !(C c), Flink's notNext: the negation of the partition's event right after the previous position)
        strict, seen, not_next = set(), 0, set()
        for k, (kind, *_) in enumerate(items):
            seen += kind == "pos"
            if kind == "next":
                if k + 1 < len(items) and items[k + 1][0] == "neg":
                    not_next.add(k + 1)
                else:
                    strict.add(seen)
        # (in an automaton, the components of those negations: checked on the complete match, on the event
        # numbered right after the one before the gap, ``match_negation.RANK``)
        next_comps = {items[k][1] for k in not_next}
        if self.spec.pattern is not None:  # ... and those inside a repeated group, per iteration
            position = {c.var: j for j, c in enumerate(comps)}
            next_comps |= not_next_components(self.spec.pattern, lambda p: position[p.var])
        not_next = {id(items[k]) for k in not_next}
        # the items written NEXT (a position or a repeated group): in an automaton, their edges from the items
        # before are strict (``Fragment.then(linked=True)``)
        linked = [k > 0 and items[k - 1][0] == "next" and i[0] != "neg" for k, i in enumerate(items) if i[0] != "next"]
        marked = [id(i) in not_next for i in items if i[0] != "next"]
        items = [i for i in items if i[0] != "next"]
        if not_next and any(kind == "group" for kind, *_ in items):
            self.ranked = True
        # a repeated group: the whole alternative becomes one automaton (its flat items: positions, group ranges,
        # negations whose gaps the automaton's edges give); a top-level NEXT step is a strict edge of it
        automaton = Automaton(items, linked) if any(kind == "group" for kind, _, _ in items) else None
        if automaton is not None:
            items, strict = automaton.items, set()
        pos_comps = tuple(k for kind, k, *_ in items if kind == "pos")
        kleene = tuple(kl for kind, _, kl, *_ in items if kind == "pos")
        vars_ = tuple(comps[k].var for k in pos_comps)
        present = set(vars_)
        absent = frozenset(c.var for c in comps if not c.negated) - present

        def here(c: Conjunct, absent: frozenset[str] = absent) -> Conjunct:
            """``c`` with the absent variables read as NULL (the oracle's semantics for OR, ``*``, ``?``); TRUE if
            it reads an absent Kleene variable by position (no position to quantify over: a negation predicate
            ``z.x < b[i].x`` in an alternative without ``b`` leaves ``z`` unconstrained, as in the oracle)."""
            if not c.vars & absent:
                return c
            if any(v in absent for v in c.positional):
                return Conjunct(Literal(True), self.kleene_vars, any_vars, self.known)
            nulled = Conjunct(_nullify(c.expr, absent), self.kleene_vars, any_vars, self.known)
            nulled.nulled = True
            return nulled

        looped = frozenset(comps[pos_comps[p]].var for i, j in _loops(items) for p in range(i, j + 1))
        if any(c.kleene not in ("+", "*") for c in comps if c.var in looped):
            raise EngineUnsupportedError("Kleene closure over a sub-pattern needs its components marked Kleene "
                                         "('+'): their variables are arrays")
        if looped:
            # a variable of a repeated group has one run per iteration (events of it adjacent in the match):
            # conjuncts that read one positionally quantify over its runs (the oracle's semantics)
            plain_here = here

            def here(c: Conjunct, absent: frozenset[str] = absent) -> Conjunct:
                c = plain_here(c, absent)
                return run_aware(c, vars_) if set(c.positional) & looped else c

        def select(present: set[str] | frozenset[str], absent: frozenset[str]) -> tuple[Conjunct, ...]:
            """The conjuncts on positive variables that apply when exactly ``present`` are bound."""
            out = []
            for c in parsed:
                if c.vars & negated:
                    continue
                if c.vars and not c.vars & present:
                    continue  # another alternative's predicate
                if any(v not in present for v in c.positional):
                    continue  # an absent Kleene variable has no position to quantify over
                out.append(here(c, absent))
            return tuple(out)

        plus = select(present, absent)
        negs = []
        seen = 0
        groups = []
        groups_of = _negation_groups(self.spec.pattern) if self.spec.pattern is not None else {}
        todo = list(zip(items, marked if automaton is None else [False] * len(items), strict=True))
        nexts: dict[int, list] = {}
        while todo:
            (kind, k, extra, *where), is_not_next = todo.pop(0)
            guards: frozenset = frozenset()
            if kind == "pos":
                seen += 1
                continue
            if kind == "loop":
                groups.append((seen - k, seen - 1))  # a repeated group's range (see Automaton)
                continue
            if where:
                before, after, *rest = where
                guards = rest[0] if rest else frozenset()
            else:
                before = seen - 1 if seen else None
                after = seen if seen < len(pos_comps) else None
            if kind == "neggen":
                negs.append(self._general_negation(len(negs), k, before, after, guards, parsed, here, vars_))
                continue
            ks = k if kind == "negseq" else (k,)
            inner = extra if kind == "negseq" else ()
            own = {comps[j].var for j in ks} | {comps[j].var for _, js in inner for j in js}
            # variables of the same negation this negative alternative lacks (NOT (P OR Q), ? inside) read NULL,
            # as absent variables do in the oracle: a conjunct that reads one of them and a variable that is
            # there (a positive one of this alternative, a member) is NULL, so it keeps this alternative from
            # invalidating; one whose variables are all absent here (the other member and a positive variable
            # of another OR alternative or an unmatched ``?``) holds, so it is no predicate of this one, even
            # beside a conjunct of the first kind on the same member (``b.x = a.x AND b.x = d.x``, ``d`` absent)
            lacking = frozenset(v for v in negated if v not in own and groups_of.get(v) is not None
                                and groups_of.get(v) == groups_of.get(comps[ks[0]].var))
            there = frozenset(present | own)

            def applies(c: Conjunct, own=frozenset(own), lacking=lacking, there=there) -> bool:
                return bool(c.vars & own or c.vars & lacking and c.vars & there or _unscoped_equiv(c))

            def neg_here(c: Conjunct, lacking=lacking) -> Conjunct:
                c = here(c)
                if not c.vars & lacking:
                    return c
                nulled = Conjunct(_nullify(c.expr, lacking), self.kleene_vars, any_vars, self.known)
                nulled.nulled = True
                return run_aware(nulled, vars_) if set(nulled.positional) & looped else nulled

            # an unscoped equivalence test ([id], kept as a predicate under strict contiguity) binds the
            # negative components too (LANGUAGE.md §2)
            if kind == "negseq":
                members = tuple(comps[j].var for j in k)
                mine = [neg_here(c) for c in parsed if applies(c)]
                plan = NegPlan(len(negs), k[0], comps[k[0]], before, after, mine, any_vars)
                by_type = self.by_type
                plan.as_sequence(k, members, lambda ev, by_type=by_type: component_mask(by_type, ev),
                                 tuple((gap, js, tuple(comps[j].var for j in js)) for gap, js in inner))
                plan.guards = guards
                negs.append(plan)
                continue
            mine = [neg_here(c) for c in parsed if applies(c)]
            negs.append(NegPlan(len(negs), k, comps[k], before, after, mine, any_vars))
            negs[-1].guards = guards
            if automaton is not None and kind == "neg" and k in next_comps:
                negs[-1].guards = guards | {RANKED_NEXT}  # NEXT !(C c) on an automaton's edges
                self.ranked = True  # (by the events' numbers, engine._ranked)
            if is_not_next:  # decided by the runs on the event right after ``before``, not over a gap
                negs[-1].guards = frozenset({"not_next"})
                nexts.setdefault(before, []).append(negs[-1])
        alt = Alternative(index, pos_comps, kleene, vars_, tuple(negs), plus, any_vars, tuple(groups))
        alt.strict = frozenset(strict)
        if automaton is not None:
            alt.strict_edges = frozenset(automaton.strict)
        alt.not_next = {p: tuple(plans) for p, plans in nexts.items()}
        if automaton is not None:
            # a match of the automaton may leave out variables of the group (OR, ?, * inside): its conjuncts are
            # those of the variables it binds (``Alternative.conjuncts_without``)
            alt.attach(automaton, functools.cache(lambda missing: select(present - missing, absent | missing)))
        singles = frozenset(v for v, kl in zip(vars_, alt.listed, strict=True) if not kl)
        alt.outputs = tuple((o.name, _output_fn(_nullify(o.expr, absent) if absent else o.expr, singles, any_vars))
                            for o in self.spec.outputs)
        return alt

    def _general_negation(self, slot: int, node: Not, before, after, guards, parsed: list[Conjunct], here,
                          positives: tuple[str, ...]) -> NegPlan:
        """The :class:`NegPlan` of a negation checked literally (:class:`match_negation.GeneralNeg`): its index
        holds the events of every component inside it, nested negations included."""
        from sparkcep.runtime_udfs.match.negation import GeneralNeg

        position = {c.var: k for k, c in enumerate(self.spec.components)}
        inside = [position[p.var] for p in walk(node) if isinstance(p, EventPat)]
        own = {self.spec.components[k].var for k in inside}
        mine = [here(c) for c in parsed if c.vars & own or _unscoped_equiv(c)]
        plan = NegPlan(slot, inside[0], self.spec.components[inside[0]], before, after, mine, self.any_vars)
        plan.key_attr = plan.probe = None
        plan.rest, plan.rest_checks = plan.conjuncts, plan.checks
        plan.comp_mask = sum(1 << k for k in inside)
        by_type = self.by_type
        plan.general = GeneralNeg(node, lambda p: position[p.var], mine, lambda ev: component_mask(by_type, ev),
                                  positives, self.any_vars)
        plan.guards = guards
        return plan

    def mask_of(self, event: dict) -> int:
        """Type test and local predicates, for an event that arrived without a ``_mask``."""
        return component_mask(self.by_type, event)

    def stops_any(self, event: dict) -> bool:
        """Is ``event`` a stop event of some loop with ``UNTIL`` (so that it reaches the runs though it fills no
        component)?"""
        return any(a.stops_at(event) for a in self.stops)


def _bounded(pattern, collapsed: bool) -> list[Kleene]:
    """The bounded quantifiers ``P{n,m}`` of a pattern, each with a :func:`count_anchor` (what ``check`` admits:
    not inside a negation nor inside another repetition, no collapsed output)."""
    out = []

    def visit(p, repeated: bool, negated: bool) -> None:
        if isinstance(p, Kleene):
            if p.bounds is not None:
                where = ("inside a negation" if negated else "inside another repetition" if repeated else
                         "with collapsed output" if collapsed else None)
                if where is not None:
                    raise EngineUnsupportedError(f"a bounded quantifier {{n,m}} {where} is not supported")
                if count_anchor(p) is None:
                    raise EngineUnsupportedError("a bounded group needs a single event every iteration takes once")
                inner = p.inner
                while isinstance(inner, Seq) and len(inner.items) == 1:
                    inner = inner.items[0]
                out.append(replace(p, inner=inner))
            visit(p.inner, repeated or p.op != "?", negated)
        elif isinstance(p, Not):
            visit(p.inner, repeated, True)
        elif isinstance(p, (Seq, Or)):
            for i in (p.items if isinstance(p, Seq) else p.alternatives):
                visit(i, repeated, negated)

    visit(pattern, False, False)
    return out


def _flat_pattern(comps: tuple[Component, ...]):
    """The pattern a spec without ``pattern`` stands for: its components in a flat ``SEQ``."""
    items = []
    for c in comps:
        p = EventPat(c.types, c.var, c.any_, array=c.kleene in ("+", "*"))
        if c.kleene:
            p = Kleene(p, c.kleene)
        items.append(Not(p) if c.negated else p)
    return Seq(tuple(items))


def _alternatives(pattern, position: dict[str, int], general=frozenset(),
                  whole: bool = False) -> list[list[tuple[str, int, bool]]]:
    """The pattern in disjunctive normal form: alternatives of ``("pos", component, is Kleene)`` and
    ``("neg", component, False)`` items in order; ``whole``: one alternative, the whole pattern as one
    :class:`Fragment` (``("group", fragment, False)``)."""

    def component(p: EventPat) -> int:
        if p.var not in position:
            raise EngineUnsupportedError(f"pattern variable '{p.var}' is not among the spec's components")
        return position[p.var]

    def dnf(p) -> list[list[tuple[str, int, bool]]]:
        if isinstance(p, EventPat):
            return [[("pos", component(p), False)]]
        if isinstance(p, Kleene):
            inner = p.inner
            while isinstance(inner, Seq) and len(inner.items) == 1:
                inner = inner.items[0]  # (SEQ(B b))+ is B+ b[]: one run of b, as the oracle reads it
            if not isinstance(inner, EventPat):
                if p.op == "?":
                    return dnf(inner) + [[]]
                return _group(p, inner, dnf, component)
            k = component(inner)
            if p.op == "+":
                return [[("pos", k, True)]]
            if p.op == "*":
                return [[("pos", k, True)], []]
            return [[("pos", k, False)], []]
        if isinstance(p, Not):
            if p in general:
                return [[("neggen", p, False)]]  # the whole negation, checked literally (match_negation)
            # NOT N forbids a match of any alternative of N in the gap: one negative item per alternative, all in
            # the same gap (NOT (P OR Q) = NOT P, NOT Q there)
            out = []
            for members, inner in _negated_shapes(p.inner, component):
                if not members:
                    continue  # selects no event: never occurs (the oracle skips empty derivations)
                if len(members) == 1 and not inner:
                    out.append(("neg", members[0], False))
                else:
                    out.append(("negseq", tuple(members), tuple(inner)))
            return [out]
        if isinstance(p, Seq):
            out: list[list] = [[]]
            for item, strict in zip(p.items, p.strict or (False,) * len(p.items), strict=True):
                tails = dnf(item)  # once: a group's Fragment is one object in every alternative
                if strict:  # NEXT item: its first position follows the one before it strictly
                    tails = [[("next", None, False), *t] for t in tails]
                out = [a + b for a in out for b in tails]
                if len(out) > MAX_ALTERNATIVES:
                    raise _TooManyAlternatives(f"the pattern expands to more than {MAX_ALTERNATIVES} "
                                                 "alternatives")
            return out
        if isinstance(p, Or):
            out = [a for alt in p.alternatives for a in dnf(alt)]
            if len(out) > MAX_ALTERNATIVES:
                raise _TooManyAlternatives(f"the pattern expands to more than {MAX_ALTERNATIVES} alternatives")
            return out
        raise EngineUnsupportedError(f"unknown pattern node {type(p).__name__}")

    if whole:
        return [[("group", _fragment(pattern, dnf, component), False)]]
    # identical alternatives (``(T*)?``, ``((P)+)?`` with a P that can be empty) find the same matches: once
    out: list[list] = []
    for items in dnf(pattern):
        if items not in out:
            out.append(items)
    return out
