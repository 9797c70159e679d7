"""Compile a :class:`~sparkcep.runtime_udfs.spec.MatchSpec` into the plan the match engines execute.

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

Conjunct semantics are the oracle's (:mod:`sparkcep.oracle`): a conjunct that reads a Kleene variable
positionally must hold at every position where it is defined (``v[i-1]``/``v[..i-1]`` from the second event
on, ``NEXT(v)`` up to the second to last); in an alternative, a conjunct whose variables are all absent
holds, one with an absent positionally read Kleene variable holds, and otherwise absent variables read NULL.
"""

from __future__ import annotations

import functools
import itertools
import math
from bisect import bisect_right
from collections.abc import Callable
from typing import Any

from sparkcep.compiler.ast import (
    Attr,
    BinOp,
    EquivItem,
    EquivTest,
    EventPat,
    Func,
    Kleene,
    Literal,
    Not,
    Or,
    Seq,
    Unary,
    conjuncts,
    map_nodes,
    walk,
)
from sparkcep.compiler.errors import CEPError
from sparkcep.runtime_udfs.expr import LACKING, compile_expr
from sparkcep.runtime_udfs.spec import Component, MatchSpec, OutputColumn, component_mask, component_table

__all__ = [
    "ANY_MATCH",
    "AggStats",
    "NEXT_MATCH",
    "PARTITION",
    "STRICT",
    "Alternative",
    "Conjunct",
    "EngineUnsupportedError",
    "collapsed_outputs",
    "KleeneChecks",
    "Mono",
    "NegPlan",
    "Plan",
    "Schedule",
]

STRICT = "strict_contiguity"
PARTITION = "partition_contiguity"
NEXT_MATCH = "skip_till_next_match"
ANY_MATCH = "skip_till_any_match"
STRATEGIES = (STRICT, PARTITION, NEXT_MATCH, ANY_MATCH)

#: Expanding ``OR``, ``*`` and ``?`` multiplies alternatives; beyond this many the whole pattern runs as one
#: :class:`Automaton` instead (as it does when two alternatives would differ only in their negations).
MAX_ALTERNATIVES = 64


class EngineUnsupportedError(CEPError, NotImplementedError):
    """The spec uses a feature the match engine does not implement (nested Kleene or negation, ...)."""


class _TooManyAlternatives(EngineUnsupportedError):
    """The pattern's disjunctive normal form exceeds :data:`MAX_ALTERNATIVES` (the plan then runs it as one
    :class:`Automaton`)."""


# ----------------------------------------------------------------------------------------------- conjuncts

_POSITIONAL_KINDS = frozenset({"cur", "prev", "next", "prefix"})
_GROWING_KINDS = frozenset({"last", "all", "late"})


def _access_kind(index) -> str:
    """How an ``Attr`` index reads a Kleene variable (see :data:`sparkcep.compiler.ast.Index`)."""
    if index in (None, "cur"):
        return "cur"
    if isinstance(index, int):
        return "first" if index <= 1 else "late"  # v[k], k <= 1, never changes as v grows
    return index  # prev, next, prefix, last, all


class Conjunct:
    """One conjunct of WHERE, compiled, with what the engines need to know about it.

    ``vars``        the variables it names;
    ``access``      Kleene variable → how it is read: ``cur prev next prefix`` (positional), ``first``
                    (``v[1]``), ``late`` (``v[k]``, k ≥ 2), ``last``, ``all``, ``equiv`` (``[v.attr]``);
    ``positional``  Kleene variable → (reads ``v[i-1]``/``v[..i-1]``, reads ``NEXT(v)``): quantified over
                    positions;
    ``grows``       reads ``v[v.len]`` or ``v[]`` (the oracle's notion: never decidable on a prefix);
    ``waits``       Kleene variables whose growth can still change its value (``last``, ``all``, ``late``);
    ``global_``     reads every variable (a bare attribute, an unscoped equivalence item).
    """

    __slots__ = ("expr", "fn", "vars", "access", "positional", "grows", "waits", "global_", "check",
                 "_quantified", "_others", "nulled")

    def __init__(self, expr, kleene_vars: frozenset[str], any_vars: frozenset[str], known: frozenset[str]):
        self.expr = expr
        self.nulled = False  # read NULL for variables absent in its alternative (see Alternative)
        self.fn = compile_expr(expr, any_vars)
        names: set[str] = set()
        access: dict[str, set[str]] = {}
        global_ = False
        for node in walk(expr):
            if isinstance(node, EquivItem):
                var, kind = node.var, "equiv"
            elif isinstance(node, Attr):
                var, kind = node.var, _access_kind(node.index)
            else:
                continue
            if var is None:
                global_ = True
                continue
            if var not in known:
                raise CEPError(f"predicate refers to unknown variable '{var}'")
            names.add(var)
            if var in kleene_vars:
                access.setdefault(var, set()).add(kind)
        self.vars = frozenset(names)
        self.access = {v: frozenset(k) for v, k in access.items()}
        self.positional = {v: (bool(k & {"prev", "prefix"}), "next" in k)
                           for v, k in self.access.items() if k & _POSITIONAL_KINDS}
        self.grows = any(k & {"last", "all"} for k in self.access.values())
        self.waits = frozenset(v for v, k in self.access.items() if k & _GROWING_KINDS)
        self.global_ = global_
        self._quantified = tuple((v, prev, nxt) for v, (prev, nxt) in self.positional.items())
        self._others = {v: tuple(q for q in self._quantified if q[0] != v) for v in self.positional}
        #: ``check(binding) is True`` iff the conjunct holds (``fn`` itself when nothing is quantified)
        self.check: Callable[[dict], Any] = self.fn if not self._quantified else self.holds_all

    def holds_all(self, binding: dict) -> bool:
        """True iff the conjunct holds at every position of every positionally read Kleene variable
        (``sparkcep.oracle``'s semantics; no such variable: it simply holds)."""
        return _quantify(self.fn, binding, self._quantified, {})

    def holds_at(self, binding: dict, var: str, at: int) -> bool:
        """True iff it holds with ``var``'s current position fixed at ``at`` (other positionally read Kleene
        variables, already complete, are quantified)."""
        others = self._others.get(var, self._quantified)
        if not others:
            return self.fn(binding, {var: at}) is True
        return _quantify(self.fn, binding, others, {var: at})


def _quantify(fn, binding: dict, quantified: tuple, fixed: dict) -> bool:
    choices = []
    for var, prev, nxt in quantified:
        bound = binding.get(var)
        if bound is None:
            return True  # not bound yet (a prefix, skip_till_next_match): no position to quantify over
        n = len(bound)
        choices.append([(var, i) for i in range(n) if not (prev and i == 0) and not (nxt and i == n - 1)])
    for combination in itertools.product(*choices):
        cur = dict(fixed)
        cur.update(combination)
        if fn(binding, cur) is not True:
            return False
    return True


def _runs(binding: dict, var: str, positives: tuple[str, ...]) -> list[list]:
    """The runs of the array variable ``var`` in ``binding``: maximal stretches of its events with no event of
    another positive variable between them (in a repeated group ``(SEQ(B b, C c))+`` every ``b`` is its own
    run; ``(SEQ(B+ b[], C c))+`` has one run of ``b`` per iteration)."""
    events = binding[var]
    if len(events) == 1:
        return [events]
    others = sorted(e["ts"] for v in positives if v != var and (bound := binding.get(v)) is not None
                    for e in (bound if isinstance(bound, list) else (bound,)))
    runs = [[events[0]]]
    for before, ev in zip(events, events[1:], strict=False):
        k = bisect_right(others, before["ts"])
        if k < len(others) and others[k] < ev["ts"]:
            runs.append([ev])
        else:
            runs[-1].append(ev)
    return runs


def run_aware(c: Conjunct, positives: tuple[str, ...]) -> Conjunct:
    """A copy of ``c`` whose ``check`` quantifies over the *runs* of its positionally read variables, as the
    oracle does: inside the conjunct ``v`` denotes the current run (``v[1]``, ``v[v.len]``, ``v[]``,
    ``v[i-1]`` are the run's), positions run over every run (an alternative with a repeated group, where a
    variable has several runs)."""
    out = Conjunct.__new__(Conjunct)
    for slot in Conjunct.__slots__:
        setattr(out, slot, getattr(c, slot))
    fn, quantified = c.fn, c._quantified

    def check(binding: dict) -> bool:
        choices = []
        for var, prev, nxt in quantified:
            if binding.get(var) is None:
                return True  # not bound yet, or absent: no position to quantify over
            choices.append([(var, run, i) for run in _runs(binding, var, positives) for i in range(len(run))
                            if not (prev and i == 0) and not (nxt and i == len(run) - 1)])
        for combination in itertools.product(*choices):
            b = dict(binding)
            cur = {}
            for var, run, i in combination:
                b[var] = run
                cur[var] = i
            if fn(b, cur) is not True:
                return False
        return True

    out.check = check
    return out


# ------------------------------------------------------------------------------------- consistency classes

_TRUTH_SIDES = {"<": (-1, 1), "<=": (-1, 1), ">": (1, -1), ">=": (1, -1)}
_SET_MONOTONE = {"max": 1, "min": -1, "count": 1, "sum": None, "avg": 0}


class Mono:
    """A conjunct that reads a Kleene variable ``var`` only through aggregates over its selected events (and,
    for ``prefix``, the current event ``var[i]``), made decidable on a superset (SASE++ §5.2).

    ``fn`` is the conjunct with each aggregate replaced by a synthetic variable ``aggs[k][0]`` holding
    ``{"v": value}``; ``aggs[k] = (name, func, attr, sign)`` where ``sign`` (±1) says whether the conjunct's
    truth grows with the aggregate's value.  :meth:`polarity` combines it with how the aggregate moves as the
    set grows: +1 ⇒ *monotone* (false on a superset ⇒ false on every subset: false-value consistent),
    -1 ⇒ *anti-monotone* (true on a superset ⇒ true on every subset that has a value: true-value consistent).
    """

    __slots__ = ("conj", "fn", "aggs", "attrs")

    def __init__(self, conj: Conjunct, fn, aggs: tuple[tuple[str, str, str, int], ...]):
        self.conj = conj
        self.fn = fn
        self.aggs = aggs
        self.attrs = tuple(dict.fromkeys(a[2] for a in aggs))

    def polarity(self, stats: dict[str, AggStats]) -> int:
        """+1, -1, or 0 (no class) given the statistics of the superset's values."""
        out = None
        for _, func, attr, sign in self.aggs:
            s = stats[attr]
            if s.broken:
                return 0
            mono = _SET_MONOTONE[func]
            if mono is None:  # sum grows with the set iff no value is negative
                mono = 1 if s.nonneg else -1 if s.nonpos else 0
            p = sign * mono
            if p == 0 or (out is not None and p != out):
                return 0
            out = p
        return out or 0

    def exact_needed(self, stats: dict[str, AggStats], binding: dict, var: str) -> bool | None:
        """Evaluate on the superset: None ⇒ no subset can satisfy it (prune), False ⇒ every subset does
        (safe), True ⇒ undecided (evaluate exactly)."""
        polarity = self.polarity(stats)
        if polarity == 0:
            return True
        for name, func, attr, _ in self.aggs:
            binding[name] = {"v": stats[attr].value(func)}
        result = self.fn(binding, {var: 0}) is True
        for name, _, _, _ in self.aggs:
            del binding[name]
        if polarity > 0:
            return True if result else None
        if result and all(func == "count" or not stats[attr].nulls for _, func, attr, _ in self.aggs):
            return False
        return True


class AggStats:
    """Running count/sum/min/max of the non-null values of one attribute (as ``expr`` aggregates them)."""

    __slots__ = ("count", "total", "lo", "hi", "nonneg", "nonpos", "nulls", "broken")

    def __init__(self) -> None:
        self.count = 0
        self.total: Any = 0
        self.lo: Any = None
        self.hi: Any = None
        self.nonneg = True
        self.nonpos = True
        self.nulls = False
        self.broken = False

    def add(self, value) -> None:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            self.nulls = True
            return
        try:
            self.total = self.total + value if self.count else value
            self.lo = value if self.count == 0 or value < self.lo else self.lo
            self.hi = value if self.count == 0 or value > self.hi else self.hi
            self.nonneg = self.nonneg and value >= 0
            self.nonpos = self.nonpos and value <= 0
        except TypeError:
            self.broken = True
        self.count += 1

    def value(self, func: str):
        if func == "count":
            return self.count
        if not self.count:
            return None
        return {"sum": self.total, "min": self.lo, "max": self.hi}[func]


def _mono(conj: Conjunct, var: str, index: str, any_vars: frozenset[str]) -> Mono | None:
    """The :class:`Mono` form of ``conj`` for aggregates over ``var[index]`` (``prefix`` or ``all``), or None
    when the conjunct is not a comparison whose truth moves one way with every such aggregate."""
    expr = conj.expr
    if not (isinstance(expr, BinOp) and expr.op in _TRUTH_SIDES):
        return None
    found: list[tuple[Func, int]] = []
    plain = [0]  # Attr(var, ..., index) outside a recognised aggregate

    def is_agg(node) -> bool:
        return (isinstance(node, Func) and node.name in _SET_MONOTONE and not node.star and len(node.args) == 1
                and isinstance(node.args[0], Attr) and node.args[0].var == var)

    def visit(node, sign: int) -> None:
        if is_agg(node):
            if node.args[0].index != index:
                plain[0] += 1
            found.append((node, sign))
            return
        if isinstance(node, Attr):
            if node.var == var and node.index in ("prefix", "all"):
                plain[0] += 1
            return
        if isinstance(node, Unary):
            visit(node.operand, -sign if node.op == "-" else 0)
        elif isinstance(node, BinOp):
            if node.op == "+":
                visit(node.left, sign)
                visit(node.right, sign)
            elif node.op == "-":
                visit(node.left, sign)
                visit(node.right, -sign)
            elif node.op in ("*", "/") and _number(node.right) is not None:
                visit(node.left, sign * _sign(_number(node.right)))
            elif node.op == "*" and _number(node.left) is not None:
                visit(node.right, sign * _sign(_number(node.left)))
            else:
                visit(node.left, 0)
                visit(node.right, 0)
        elif isinstance(node, Func):
            for arg in node.args:
                visit(arg, 0)

    left, right = _TRUTH_SIDES[expr.op]
    visit(expr.left, left)
    visit(expr.right, right)
    if plain[0] or not found or any(s == 0 or _SET_MONOTONE[f.name] == 0 for f, s in found):
        return None
    names: dict[Func, str] = {}
    aggs = []
    for f, s in found:
        if f not in names:
            names[f] = f"\x00agg{len(names)}"
        aggs.append((names[f], f.name, f.args[0].attr, s))
    rewritten = map_nodes(expr, lambda n: Attr(names[n], "v") if isinstance(n, Func) and n in names else n)
    return Mono(conj, compile_expr(rewritten, any_vars), tuple(aggs))


def _number(node) -> float | None:
    if isinstance(node, Literal) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, Unary) and node.op == "-":
        inner = _number(node.operand)
        return None if inner is None else -inner
    return None


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


# ----------------------------------------------------------------------------------------------- alternatives


class NegPlan:
    """A negative component of an alternative and how to look its events up (SASE §3.3, negation operator).

    A negative event invalidates a match iff it lies strictly inside ``(lo, hi)`` and satisfies the negation
    predicates (SASE P-): ``lo`` is the last event of positive position ``before`` (None: the match's last
    event − W, negated start), ``hi`` the first event of positive position ``after`` (None: the match's first
    event + W, negated end, evaluated once the watermark passes it).  When a P- conjunct is an equality
    ``z.attr = <expression of positive variables>``, negative events are also indexed by ``attr``
    (``key_attr``/``probe``) and only the other conjuncts (``rest``) are evaluated per candidate.
    """

    __slots__ = ("slot", "comp", "var", "any_", "before", "after", "conjuncts", "key_attr", "probe", "rest",
                 "checks", "rest_checks", "comp_mask", "members", "member_mask", "inners", "guards", "general")

    def __init__(self, slot: int, comp: int, component: Component, before: int | None, after: int | None,
                 conjs: list[Conjunct], any_vars: frozenset[str]):
        self.slot, self.comp, self.var, self.any_ = slot, comp, component.var, component.any_
        self.before, self.after = before, after
        self.conjuncts = tuple(conjs)
        self.key_attr = None
        self.probe = None
        keyed = None
        for c in conjs:
            found = _keyed_equality(c, self.var)
            if found is not None:
                self.key_attr, other = found
                self.probe = compile_expr(other, any_vars)
                keyed = c
                break
        self.rest = tuple(c for c in conjs if c is not keyed)
        self.checks = tuple(c.check for c in self.conjuncts)
        self.rest_checks = tuple(c.check for c in self.rest)
        self.comp_mask = 1 << comp
        # a negated sequence !(SEQ(B b, C c)): see :meth:`as_sequence`
        self.members: tuple = ()
        self.member_mask = None
        self.inners: tuple = ()
        #: non-empty in an :class:`Automaton`: its edges say which gaps this negation guards (checked on the
        #: complete match, :meth:`Alternative.blocked_on_edges`); empty: the gap ``(before, after)``
        self.guards: frozenset = frozenset()
        #: any other negated sub-pattern: :class:`~sparkcep.runtime_udfs.match_negation.GeneralNeg`
        self.general = None

    def as_sequence(self, comps: tuple[int, ...], vars_: tuple[str, ...], mask_of,
                    inner: tuple[tuple[int, int, str], ...] = ()) -> None:
        """Make this plan negate the sequence of single-event components ``comps`` (variables ``vars_``):
        its index holds the events of every member, ``mask_of(event)`` tells which members an event may fill
        (type test and local predicates), and a match is blocked by an occurrence of the whole sequence
        (strictly increasing ts) inside the interval satisfying every conjunct on the members
        (``members``: ``(component bit, variable, conjuncts decided once it is bound)`` in order).

        ``inner`` are negations inside the sequence, ``(gap, components, variables)`` of one event or a
        sequence of them: an occurrence only counts if no occurrence of that inner sequence satisfying the
        conjuncts on its variables lies strictly between members ``gap - 1`` and ``gap`` (the interval's ends
        for the first and last gap; GRETA §5, as the oracle nests negation); ``inners`` holds them as
        ``(gap, members)`` with members in the form of ``members``."""
        self.comp_mask = sum(1 << k for k in comps) | sum(1 << k for _, ks, _ in inner for k in ks)
        self.key_attr = self.probe = None
        self.rest, self.rest_checks = self.conjuncts, self.checks
        inner_vars = {v for _, _, vs in inner for v in vs}
        if any(sum(bool(c.vars & set(vs)) for _, _, vs in inner) > 1 for c in self.conjuncts):
            raise EngineUnsupportedError("a predicate reads variables of two different negations inside a negated "
                                         "sequence")
        self.members = self._sequence_members(comps, vars_, [c for c in self.conjuncts if not c.vars & inner_vars])
        self.member_mask = mask_of
        self.inners = tuple((gap, self._sequence_members(ks, vs, [c for c in self.conjuncts if c.vars & set(vs)]))
                            for gap, ks, vs in inner)

    @staticmethod
    def _sequence_members(comps, vars_, conjs) -> tuple:
        """``(component bit, variable, checks decided once it is bound)`` per member of a negated sequence: a
        conjunct is checked at the member that binds the last of the members it reads (one that reads none,
        nulled, at the first)."""
        bound: set[str] = set()
        members: list[tuple] = []
        for k, var in zip(comps, vars_, strict=True):
            bound.add(var)
            first = not members
            members.append((1 << k, var, tuple(c.check for c in conjs
                                               if c.vars & bound == c.vars & set(vars_)
                                               and (var in c.vars or (first and not c.vars & set(vars_))))))
        return tuple(members)


def _keyed_equality(c: Conjunct, var: str):
    """``(attr, other side)`` if ``c`` is ``var.attr = e`` (either way round) with ``e`` free of ``var`` and of
    positionally read Kleene variables; else None."""
    e = c.expr
    if c.positional or not (isinstance(e, BinOp) and e.op == "="):
        return None
    for mine, other in ((e.left, e.right), (e.right, e.left)):
        if (isinstance(mine, Attr) and mine.var == var and mine.index in (None, "cur")
                and all(not (isinstance(n, (Attr, EquivItem)) and n.var in (var, None)) for n in walk(other))):
            return mine.attr, other
    return None


class Alternative:
    """One flat sequence: positive positions ``0..m-1`` (``comps[p]`` is the spec component index),
    negative components between them, and the conjuncts that apply to it."""

    __slots__ = ("index", "comps", "vars", "kleene", "m", "negs", "conjuncts", "all_vars", "_split",
                 "schedules", "trailing", "neg_vars", "first_var", "last_var", "any_vars", "outputs", "groups",
                 "listed", "starts", "ends", "follow", "automaton", "conjuncts_without", "position")

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
                 "kleene_vars", "known")

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
        from sparkcep.runtime_udfs.match_negation import general_negations

        general, general_lists = general_negations(pattern, [p for e in spec.predicates for p in conjuncts(e)],
                                                   kleene_vars)
        try:
            shapes = _alternatives(pattern, position, general)
        except _TooManyAlternatives:
            shapes = None
        negated = frozenset(c.var for c in comps if c.negated)
        # NOT T+ is negated as NOT T (see negated_kleene): those variables are single events here
        collapsed = negated_kleene(pattern) - general_lists
        rewritten = [collapse_negated_kleene(p, collapsed, kleene_vars | collapsed) for e in spec.predicates
                     for p in conjuncts(e)]
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
        for a in alternatives:
            # a repeated group runs on NFA^b runs (match_runs) under every strategy: construction over stacks
            # has no way back from a group's last position to its first
            a.schedule("forward" if self.contiguous or strategy == NEXT_MATCH or a.automaton else "ais")
        if spec.collapsed:
            self._check_collapsed()

    def _check_collapsed(self) -> None:
        """What collapsed output supports: skip_till_any_match, one Kleene position per alternative (at any
        position; enumerated after every single one, ``match_ais._collapsed_steps``) and at least one single
        position, a negated end only where its interval and predicates are the same for every subset."""
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
        # a repeated group: the whole alternative becomes one automaton (its flat items: positions, group ranges,
        # negations whose gaps the automaton's edges give)
        automaton = Automaton(items) if any(kind == "group" for kind, _, _ in items) else None
        if automaton is not None:
            items = automaton.items
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
        todo = list(items)
        while todo:
            kind, k, extra, *where = todo.pop(0)
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
            # there (an outer positive one, a member) is NULL, so it keeps this alternative from invalidating
            lacking = frozenset(v for v in negated if v not in own and groups_of.get(v) is not None
                                and groups_of.get(v) == groups_of.get(comps[ks[0]].var))
            own |= {v for c in parsed if c.vars & lacking and c.vars - lacking for v in c.vars & lacking}

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
                mine = [neg_here(c) for c in parsed if c.vars & own or _unscoped_equiv(c)]
                plan = NegPlan(len(negs), k[0], comps[k[0]], before, after, mine, any_vars)
                by_type = self.by_type
                plan.as_sequence(k, members, lambda ev, by_type=by_type: component_mask(by_type, ev),
                                 tuple((gap, js, tuple(comps[j].var for j in js)) for gap, js in inner))
                plan.guards = guards
                negs.append(plan)
                continue
            mine = [neg_here(c) for c in parsed if c.vars & own or _unscoped_equiv(c)]
            negs.append(NegPlan(len(negs), k, comps[k], before, after, mine, any_vars))
            negs[-1].guards = guards
        alt = Alternative(index, pos_comps, kleene, vars_, tuple(negs), plus, any_vars, tuple(groups))
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
        from sparkcep.runtime_udfs.match_negation import GeneralNeg

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
            for item in p.items:
                tails = dnf(item)  # once: a group's Fragment is one object in every alternative
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


#: why a negation is not one of the fast paths (it then runs the general check, match_negation.GeneralNeg)
_NEGATION_LIMIT = ("negation of a sub-pattern is supported by the match engine for sequences of single events, "
                   "T+ (as T), OR and negated sequences of single events inside them, as in NOT (SEQ(B b, "
                   "!(SEQ(D d, E e)), C+ c[]) OR E f); not for ")


def _negated_shapes(pattern, component) -> list[tuple[list[int], list[tuple[int, int]]]]:
    """The alternatives of a negated pattern as ``(member components, inner negations)``: members form a
    sequence of single events; an inner negation ``(gap, component)`` forbids its event between members
    ``gap - 1`` and ``gap`` (0: from the outer interval's start, ``len(members)``: up to its end).

    ``T+``/``T*`` inside a negation count as ``T`` (:func:`negated_kleene` says when that is exact).  Next to
    an inner negation that stays exact, because the one ``T`` can be the ``T+``'s event at that side (its
    first for a negation before it, its last for one after it); a ``T+`` with inner negations on both sides
    raises (no single event bounds both gaps as the whole sequence does): like every shape this raises
    :class:`EngineUnsupportedError` for, the negation then runs the general check
    (:func:`match_negation.general_negations`)."""

    def shapes(p, top: bool) -> list[tuple[list[int], list[tuple[int, int]], list[int]]]:
        if isinstance(p, EventPat):
            return [([component(p)], [], [])]
        if isinstance(p, Kleene):
            inner = p.inner
            while isinstance(inner, Seq) and len(inner.items) == 1:
                inner = inner.items[0]
            if not isinstance(inner, EventPat):
                raise EngineUnsupportedError(_NEGATION_LIMIT + "a repeated group inside a negation")
            one = ([component(inner)], [], [0] if p.op != "?" else [])
            return [one, ([], [], [])] if p.op in ("*", "?") else [one]
        if isinstance(p, Not):
            if top:
                raise EngineUnsupportedError(_NEGATION_LIMIT + "a negation of a negation")
            inner = p.inner
            while isinstance(inner, Kleene) and inner.op != "?" and isinstance(inner.inner, EventPat):
                inner = inner.inner  # NOT T+ = NOT T
            if isinstance(inner, Or):
                alternatives = inner.alternatives
            else:
                alternatives = (inner,)
            negs = []
            for a in alternatives:
                items = a.items if isinstance(a, Seq) else (a,)
                ks = []
                for item in items:
                    while isinstance(item, Kleene) and item.op != "?" and isinstance(item.inner, EventPat):
                        item = item.inner  # T+ as T, exact without a negation inside (see negated_kleene)
                    if not isinstance(item, EventPat):
                        raise EngineUnsupportedError(_NEGATION_LIMIT + "a negated sub-pattern inside a negated "
                                                     "sequence other than a sequence of single events "
                                                     "(NOT SEQ(B b, !(SEQ(C c, D d)), E e))")
                    ks.append(component(item))
                negs.append(tuple(ks))
            return [([], [(0, ks) for ks in negs], [])]
        if isinstance(p, Seq):
            out = [([], [], [])]
            for item in p.items:
                out = [(m1 + m2, i1 + [(g + len(m1), k) for g, k in i2], k1 + [j + len(m1) for j in k2])
                       for m1, i1, k1 in out for m2, i2, k2 in shapes(item, False)]
            return out
        if isinstance(p, Or):
            return [s for a in p.alternatives for s in shapes(a, top)]
        raise EngineUnsupportedError(f"unknown pattern node {type(p).__name__}")

    out = []
    for members, inner, kleene in shapes(pattern, True):
        gaps = {g for g, _ in inner}
        if any(j in gaps and j + 1 in gaps for j in kleene):
            raise EngineUnsupportedError(_NEGATION_LIMIT + "a Kleene closure with negations on both sides inside "
                                         "a negated sequence (NOT SEQ(B b, !(E e), C+ c[], !(D d), F f))")
        out.append((members, inner))
    return out


def negated_kleene(pattern) -> frozenset[str]:
    """The variables of ``T+``/``T*`` inside a negation.  Under the oracle's semantics a ``T+`` sequence
    satisfying the negation's predicates exists iff a single ``T`` does, as long as each predicate reads the
    variable only as ``v[i]`` (then every event of the sequence satisfies it alone) or reads ``v[i-1]``,
    ``v[..i-1]`` or ``NEXT(v)`` (then it holds vacuously on one event): the engine negates ``T`` instead
    (:func:`collapse_negated_kleene`)."""
    out: set[str] = set()

    def visit(p, negated: bool, kleene: bool) -> None:
        if isinstance(p, EventPat):
            if negated and kleene:
                out.add(p.var)
        elif isinstance(p, Kleene):
            visit(p.inner, negated, kleene or p.op != "?")
        elif isinstance(p, Not):
            visit(p.inner, True, False)
        elif isinstance(p, Seq):
            for i in p.items:
                visit(i, negated, kleene)
        elif isinstance(p, Or):
            for a in p.alternatives:
                visit(a, negated, kleene)

    visit(pattern, False, False)
    return frozenset(out)


def collapse_negated_kleene(expr, collapsed: frozenset[str], kleene_vars: frozenset[str]):
    """``expr`` with every negated ``T+`` variable of ``collapsed`` read as one event (``v[i].x`` → ``v.x``),
    or None when it holds vacuously on one event (it reads ``v[i-1]``, ``v[..i-1]`` or ``NEXT(v)``).  Raises
    :class:`EngineUnsupportedError` when the rewrite would change its meaning (``v[1]``, ``v[v.len]``,
    ``v[k]``, aggregates over ``v[]``, ``[v.attr]``)."""
    read = [n for n in walk(expr) if isinstance(n, (Attr, EquivItem)) and n.var in collapsed]
    if not read:
        return expr
    probe = Conjunct(expr, kleene_vars, frozenset(), frozenset(n.var for n in walk(expr)
                                                               if isinstance(n, (Attr, EquivItem)) and n.var))
    for n in read:
        prev, nxt = probe.positional.get(n.var, (False, False))
        if prev or nxt:
            return None
    for n in read:
        if probe.access.get(n.var, frozenset()) - {"cur"}:
            raise EngineUnsupportedError(
                f"NOT T+ with a predicate on '{n.var}' other than {n.var}[i].attr (or {n.var}[i-1], "
                f"NEXT({n.var})) is not supported by the match engine: for {n.var}[1], {n.var}[{n.var}.len], "
                f"{n.var}[k] or an aggregate a T+ that satisfies it need not hold a single T that does, so it "
                "cannot be negated as T")
    return map_nodes(expr, lambda n: Attr(n.var, n.attr, None, n.span)
                     if isinstance(n, Attr) and n.var in collapsed else n)


def _group(p: Kleene, inner, dnf, component) -> list[list[tuple]]:
    """The DNF of a repeated group ``(P)+``/``(P)*``: one alternative holding a ``("group", fragment, False)``
    item, the group compiled to a :class:`Fragment` (its own ``OR``, ``?``, ``*``, nested groups and
    negations included: iterations may take different branches).  ``(B+)+`` and ``(SEQ(B+ b[], !(E e)))+``
    stay the flat ``B+``/``SEQ(B+ b[], !(E e))`` they equal (a match is a set of events, valid if one
    derivation is, and taking all of them as one iteration has the fewest negation gaps)."""
    members = inner.items if isinstance(inner, Seq) else (inner,)
    plain = [i for i in members if not isinstance(i, Not)]
    if len(plain) == 1 and isinstance(plain[0], Kleene) and plain[0].op == "+":
        one = plain[0].inner
        while isinstance(one, Seq) and len(one.items) == 1:
            one = one.items[0]
        if isinstance(one, EventPat):
            return dnf(inner) + ([[]] if p.op == "*" else [])
    plus = _fragment(inner, dnf, component).repeat("+")
    # the group item selects at least one event; matching nothing ((P)* = (P)+ or nothing, or an inner P that
    # can be empty) is an alternative of its own (sase_ssc), with the negations such an empty stretch holds, so
    # that no binding belongs to two alternatives
    empty = _minimal(plus.null + ((frozenset(),) if p.op == "*" else ()))
    plus.null = ()  # (several ways to be empty, each with negations: alternatives Plan merges into one automaton)
    return [[("group", plus, False)]] + [[plus.negs[n] for n in sorted(v)] for v in empty]


def _minimal(variants) -> tuple[frozenset, ...]:
    """The minimal sets among ``variants`` (sets of negative items that sit in one gap in some derivation): a
    gap is blocked iff every variant is, so a superset of another variant adds nothing."""
    vs = set(variants)
    return tuple(sorted((v for v in vs if not any(o < v for o in vs)), key=lambda v: (len(v), sorted(v))))


def _cross(xs, ys) -> tuple[frozenset, ...]:
    return _minimal(x | y for x in xs for y in ys)


class Fragment:
    """A sub-pattern compiled by the Glushkov construction over its *positions* (its positive components,
    each once: variables are unique), with its negative items riding on the edges.

    ``positions``  ``(component, is Kleene)`` in pattern order;
    ``negs``       its negative items ``(kind, k, extra)`` (see :func:`_alternatives`);
    ``null``       how it matches no event: variants, each the set of negative items (indices into ``negs``)
                   lying in that empty stretch; ``()`` if it cannot;
    ``first``      position → variants of the negative items before it, when it is the first event;
    ``last``       position → variants of those after it, when it is the last;
    ``follow``     ``(p, q)`` → variants of those between ``p`` and ``q`` when ``q`` directly follows ``p``
                   (a Kleene position follows itself, with no negation: the same run).

    A match of the pattern is a path of positions, and its binding determines the path (the positions of its
    events in ts order), so paths are never duplicated even when derivations are (``((P)+)+``); a gap between
    two events is invalidated iff every variant of its edge has a negative item that occurs there (the oracle:
    a binding is a match if any derivation of it is valid).

        >>> f = Fragment.leaf(0, False).then(Fragment.leaf(1, False)).repeat("+")
        >>> sorted(f.follow), sorted(f.first), sorted(f.last)
        ([(0, 1), (1, 0)], [0], [1])
    """

    __slots__ = ("positions", "negs", "null", "first", "last", "follow", "ranges")

    def __init__(self, positions=(), negs=(), null=(frozenset(),), first=None, last=None, follow=None, ranges=()):
        #: ``(first, last)`` positions of each repeated group inside (their variables are arrays)
        self.ranges = list(ranges)
        self.positions = list(positions)
        self.negs = list(negs)
        self.null = null
        self.first: dict[int, tuple] = first or {}
        self.last: dict[int, tuple] = last or {}
        self.follow: dict[tuple[int, int], tuple] = follow or {}

    @classmethod
    def leaf(cls, comp: int, kleene: bool) -> Fragment:
        one = (frozenset(),)
        return cls([(comp, kleene)], (), (), {0: one}, {0: one}, {(0, 0): one} if kleene else {})

    @classmethod
    def negation(cls, items: list) -> Fragment:
        """Negative items that sit in one gap (a ``NOT (P OR Q)`` gives one per alternative)."""
        return cls((), items, (frozenset(range(len(items))),))

    def _shifted(self, dp: int, dn: int) -> Fragment:
        def sh(vs):
            return tuple(frozenset(n + dn for n in v) for v in vs)
        return Fragment(self.positions, self.negs, sh(self.null), {p + dp: sh(v) for p, v in self.first.items()},
                        {p + dp: sh(v) for p, v in self.last.items()},
                        {(p + dp, q + dp): sh(v) for (p, q), v in self.follow.items()},
                        [(i + dp, j + dp) for i, j in self.ranges])

    def then(self, other: Fragment) -> Fragment:
        """``SEQ(self, other)``."""
        b = other._shifted(len(self.positions), len(self.negs))
        first = dict(self.first)
        for q, fv in b.first.items():
            if self.null:  # other's first positions can come first only if self can match nothing
                first[q] = _cross(self.null, fv)
        last = dict(b.last)
        for p, lv in self.last.items():
            if b.null:
                last[p] = _cross(lv, b.null)
        follow = {**self.follow, **b.follow}
        for p, lv in self.last.items():
            for q, fv in b.first.items():
                follow[(p, q)] = _cross(lv, fv)
        return Fragment(self.positions + b.positions, self.negs + b.negs, _cross(self.null, b.null), first, last,
                        follow, self.ranges + b.ranges)

    def union(self, other: Fragment) -> Fragment:
        """``self OR other``."""
        b = other._shifted(len(self.positions), len(self.negs))
        return Fragment(self.positions + b.positions, self.negs + b.negs, _minimal(self.null + b.null),
                        {**self.first, **b.first}, {**self.last, **b.last}, {**self.follow, **b.follow},
                        self.ranges + b.ranges)

    def repeat(self, op: str) -> Fragment:
        """``(self)+``, ``(self)*`` or ``(self)?``.  As in the oracle, an iteration that selects no event can
        only be the whole repetition."""
        null = _minimal(self.null + ((frozenset(),) if op in ("*", "?") else ()))
        follow = dict(self.follow)
        if op != "?":
            for p, lv in self.last.items():
                for q, fv in self.first.items():
                    follow[(p, q)] = _minimal(follow.get((p, q), ()) + _cross(lv, fv))
        ranges = self.ranges + ([(0, len(self.positions) - 1)] if op != "?" and self.positions else [])
        return Fragment(self.positions, self.negs, null, dict(self.first), dict(self.last), follow, ranges)


def _fragment(p, dnf, component) -> Fragment:
    """The :class:`Fragment` of a sub-pattern inside a repeated group."""
    if isinstance(p, EventPat):
        return Fragment.leaf(component(p), False)
    if isinstance(p, Kleene):
        inner = p.inner
        while isinstance(inner, Seq) and len(inner.items) == 1:
            inner = inner.items[0]
        if isinstance(inner, EventPat):
            f = Fragment.leaf(component(inner), p.op != "?")
            if p.op != "+":
                f.null = (frozenset(),)
            return f
        return _fragment(inner, dnf, component).repeat(p.op)
    if isinstance(p, Seq):
        out = Fragment()
        for item in p.items:
            out = out.then(_fragment(item, dnf, component))
        return out
    if isinstance(p, Or):
        out = _fragment(p.alternatives[0], dnf, component)
        for a in p.alternatives[1:]:
            out = out.union(_fragment(a, dnf, component))
        return out
    if isinstance(p, Not):
        (items,) = dnf(p)
        return Fragment.negation(items)
    raise EngineUnsupportedError(f"unknown pattern node {type(p).__name__}")


#: the pseudo positions of an automaton's edges from its start and to its end (see :class:`Automaton`)
START, END = -1, -2


class Automaton:
    """An alternative with a repeated group (or the whole pattern, see :data:`MAX_ALTERNATIVES`), compiled to
    one :class:`Fragment` over all its items: ``items``, the flat items :meth:`Plan._alternative` reads (the
    positions in pattern order, after the last position of each repeated group a ``loop`` marker giving the
    range its variables are arrays in, then every negative item with its gap left open: the edges say where
    it applies), and the automaton:

    ``starts``/``ends``  the positions a match may begin/end at;
    ``follow``           per position, the positions that may come next;
    ``edges``            ``(p, q)`` → variants (tuples of negative slots) of the negations in that gap, only for
                         the gaps that some negation can invalidate; ``(START, q)`` is the gap before a match's
                         first event (from its last event − W), ``(p, END)`` the one after its last event (up
                         to its first event + W: a negated end, postponed).
    """

    __slots__ = ("items", "starts", "ends", "follow", "edges", "trailing_slots")

    def __init__(self, items: list):
        whole = Fragment()
        for item in items:
            kind, k, extra = item
            if kind == "pos":
                f = Fragment.leaf(k, extra)
            elif kind == "group":
                f = k
            else:
                f = Fragment.negation([item])
            whole = whole.then(f)
        flat: list[tuple] = []
        for p, (comp, kl) in enumerate(whole.positions):
            flat.append(("pos", comp, kl))
            flat += [("loop", j - i + 1, False) for i, j in whole.ranges if j == p]
        guard = frozenset({"edges"})
        flat += [(kind, k, extra, None, None, guard) for kind, k, extra in whole.negs]
        self.items = flat
        m = len(whole.positions)
        self.starts = tuple(sorted(whole.first))
        self.ends = tuple(sorted(whole.last))
        self.follow = tuple(tuple(sorted(q for (p2, q) in whole.follow if p2 == p)) for p in range(m))
        edges = {}
        for key, vs in ([((START, q), v) for q, v in whole.first.items()]
                        + [((p, END), v) for p, v in whole.last.items()] + list(whole.follow.items())):
            if vs and all(vs):  # some derivation with no negation in the gap: never invalidated
                edges[key] = tuple(tuple(sorted(v)) for v in vs)
        self.edges = edges
        self.trailing_slots = tuple(sorted({s for (_, q), vs in edges.items() if q == END for v in vs for s in v}))


def _loops(items: list) -> list[tuple[int, int]]:
    """``(first, last)`` positive positions of each repeated group of an alternative's items."""
    out, seen = [], 0
    for kind, k, *_ in items:
        if kind == "pos":
            seen += 1
        elif kind == "loop":
            out.append((seen - k, seen - 1))
    return out


def _unscoped_equiv(c: Conjunct) -> bool:
    """``[attr]`` over every component (not ``[v.attr]``): it binds negative components too."""
    return isinstance(c.expr, EquivTest) and any(i.var is None for i in c.expr.items)


def _negation_groups(pattern) -> dict[str, int]:
    """Variable → the id of the negation it is under (the variables of one ``NOT SEQ(...)`` share it)."""
    groups: dict[str, int] = {}

    def visit(p, group) -> None:
        if isinstance(p, EventPat):
            if group is not None:
                groups[p.var] = group
        elif isinstance(p, Not):
            visit(p.inner, id(p) if group is None else group)
        elif isinstance(p, Kleene):
            visit(p.inner, group)
        elif isinstance(p, Seq):
            for i in p.items:
                visit(i, group)
        elif isinstance(p, Or):
            for a in p.alternatives:
                visit(a, group)

    visit(pattern, None)
    return groups


def _nullify(expr, absent: frozenset[str]):
    """``expr`` with every attribute of an ``absent`` variable replaced by NULL, except inside aggregates:
    those aggregate an absent Kleene variable's (empty) sequence, as :mod:`expr` does."""
    if isinstance(expr, Attr):
        return Literal(None) if expr.var in absent else expr
    if isinstance(expr, Unary):
        return Unary(expr.op, _nullify(expr.operand, absent))
    if isinstance(expr, BinOp):
        return BinOp(expr.op, _nullify(expr.left, absent), _nullify(expr.right, absent))
    return expr


CANDIDATES = "candidates"


def collapsed_outputs(spec: MatchSpec) -> tuple[OutputColumn, ...]:
    """The result columns of collapsed output (SASE++ §5.1's intermediate match ``M``).

    Every column over non-Kleene variables stays; the columns over a Kleene variable ``v`` become one column
    ``v``, the array of its candidate events, each a struct of ``ts`` and the attributes those columns read.
    A row stands for exactly the matches its candidates give: every non-empty subset, in ts order with
    strictly increasing ts, that satisfies the predicates (those on ``v[i-1]``, ``v[]``, ``v[v.len]``, ...)
    and negations.

        >>> from sparkcep.compiler.ast import Attr, Func
        >>> outputs = (OutputColumn("a_ts", Attr("a", "ts")), OutputColumn("n", Func("count", (Attr("b", "x"),))))
        >>> spec = MatchSpec((Component("a", ("A",)), Component("b", ("B",), kleene="+")), (), 10, outputs)
        >>> [(o.name, [a.attr for a in o.expr.args] if isinstance(o.expr, Func) else o.expr.attr)
        ...  for o in collapsed_outputs(spec)]
        [('a_ts', 'ts'), ('b', ['ts', 'x'])]
    """
    kleene = [c.var for c in spec.components if c.kleene in ("+", "*") and not c.negated]
    keep, attrs = [], {v: ["ts"] for v in kleene}
    for o in spec.outputs:
        read = [n for n in walk(o.expr) if isinstance(n, Attr) and n.var in attrs]
        if not read:
            keep.append(o)
        for n in read:
            if n.attr not in attrs[n.var]:
                attrs[n.var].append(n.attr)
    names = {o.name for o in keep}
    for v in kleene:
        name = v if v not in names else f"{v}_candidates"
        keep.append(OutputColumn(name, Func(CANDIDATES, tuple(Attr(v, a) for a in attrs[v]))))
    return tuple(keep)


def _candidates_fn(expr: Func):
    var = expr.args[0].var
    attrs = [a.attr for a in expr.args]

    def candidates(binding: dict) -> list[dict]:
        out = []
        for ev in binding.get(var) or ():
            row = {}
            for a in attrs:
                value = ev.get(a)
                row[a] = None if isinstance(value, float) and value != value else value
            out.append(row)
        return out

    return candidates


def _output_fn(expr, singles: frozenset[str], any_vars: frozenset[str]):
    """``f(binding) -> value`` of a result column; a lacking attribute (``expr.LACKING``) reads as None.

    A plain ``v.attr`` of a non-Kleene variable (most default columns are one) reads the event directly: the
    same value as :func:`compile_expr` gives, without its generic dispatch (missing and NaN are None).
    """
    if isinstance(expr, Func) and expr.name == CANDIDATES:
        return _candidates_fn(expr)
    if isinstance(expr, Attr) and expr.var in singles and expr.index is None:
        var, attr = expr.var, expr.attr

        def column(binding: dict) -> Any:
            event = binding.get(var)
            if event is None:
                return None
            value = event.get(attr)
            return None if isinstance(value, float) and value != value else value

        return column
    fn = compile_expr(expr, any_vars)

    def value(binding: dict) -> Any:
        out = fn(binding)
        return None if out is LACKING else out

    return value
