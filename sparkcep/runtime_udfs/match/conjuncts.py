"""Conjuncts of a match plan: their access kinds, run-aware evaluation, monotonicity of Kleene aggregates
(AggStats) and the plans of negated components (NegPlan, negated shapes)."""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right
from collections.abc import Callable
from typing import Any

from sparkcep.ir.ast import (
    Attr,
    BinOp,
    EquivItem,
    EventPat,
    Func,
    Kleene,
    Literal,
    Not,
    Or,
    Seq,
    Unary,
    map_nodes,
    walk,
)
from sparkcep.ir.errors import CEPError
from sparkcep.ir.spec import Component
from sparkcep.runtime_udfs.expr.scalar import compile_expr

__all__ = ["ANY_MATCH", "AggStats", "NEXT_MATCH", "PARTITION", "STRICT", "Conjunct", "EngineUnsupportedError", "Mono",
           "NegPlan"]

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
    """How an ``Attr`` index reads a Kleene variable (see :data:`sparkcep.ir.ast.Index`)."""
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
        (``sparkcep.oracles.match``'s semantics; no such variable: it simply holds)."""
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


#: in :attr:`NegPlan.guards`: ``NEXT !(C c)`` in an automaton, blocked by the event numbered right after the one
#: before its gap (:meth:`match_negation.NegIndex.blocked`)
RANKED_NEXT = "ranked_next"


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
        #: any other negated sub-pattern: :class:`~sparkcep.runtime_udfs.match.negation.GeneralNeg`
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
