"""Indexed lookup of negative events (SASE §3.3: the negation operator with indexing support).

Each negative component of an alternative keeps the events that may fill it (type test and the component's
own predicates already passed) in ``ts`` order, so the events inside an interval ``(lo, hi)`` are found by
binary search instead of a scan.  When one of the negation predicates (SASE P-) is an equality
``z.attr = <expression of positive variables>`` (``x.shelf_id = z.shelf_id`` in SASE's misplaced-inventory
query), the events are also bucketed by ``attr``: a lookup probes one bucket, then the interval inside it,
and evaluates only the remaining P- conjuncts on what is left.  SQL semantics are kept exactly: a missing or
NaN ``attr`` never equals anything, except on an ``ANY(...)`` component, where a lacking attribute makes the
comparison TRUE (SASE §2.2); those events sit in a bucket every probe visits.

A negated sequence ``!(SEQ(B b, C c))`` (LANGUAGE.md §4: no occurrence of the sub-sequence inside the
interval) keeps the events of all its members in one index; a lookup searches, depth first in ts order, for
events ``b < c`` (strictly increasing ts) inside the interval that fill the members in order and satisfy the
conjuncts on them, each conjunct as soon as its member variables are bound.  Negated single events inside it
(``!(SEQ(B b, !(D d), C c))``, GRETA §5's nesting as the oracle reads it) disqualify an occurrence that has
such an event (satisfying its conjuncts) strictly inside their gap: between the neighbouring members, or
between the outer interval's end and the first/last member.

Any other negated sub-pattern (:class:`GeneralNeg`: a repeated group ``!((SEQ(B b, C c))+)``, negation nested
at any depth, a ``T+`` between two negations inside a negated sequence, ``NOT T+`` whose predicates read the
sequence as a whole, ``b[1]``, ``b[b.len]``, ``sum(b[].x)``) is checked literally, as :mod:`sparkcep.oracles.match`
defines it: one index holds the events of all its components, and a lookup searches, depth first in ts order,
for a derivation of the sub-pattern inside the interval (skip-till-any: any events, strictly increasing ts, at
least one) that satisfies the conjuncts of its scope, with the outer binding in scope, and whose own negations
do not occur in their gaps (the same search, recursively).  Conjuncts are decided as soon as their variables
are bound where that is final (no list variable of the scope, or one read only as ``v[i]``: per element), the
rest on a complete derivation.  For ``NOT T+ v[]`` alone, a conjunct on aggregates over ``v[]`` that is false on
every subset when false on all candidates (SASE++ §5.2, :class:`match_compile.Mono`: ``sum(b[].x) > 10`` of
non-negative values) is first evaluated on all the gap's candidates, and a false answer ends the lookup.  A
search is exponential in the worst case (``NOT B+ b[] WHERE avg(b[].x) > 10`` with no blocking subset tries
every subset of the gap's ``B``s).  A ``NEXT`` step inside the sub-pattern (``!(NEXT C c)``, ``NOT SEQ(B b, NEXT C
c)``) takes only the event numbered (:data:`RANK`) right after the pick before it, or, on the first item, after the
match's event right before the gap; ``NEXT !(C c)`` inside it (``NOT SEQ(B b, NEXT !(C c), D d)``) rejects an
occurrence whose event numbered right after the pick before it is such a ``C``.

The partitioned indexes of SASE §3.3 exist to drop whole partitions once they leave the window; here the
index is pruned by moving past the events at or before a horizon (see :meth:`NegIndex.prune`).
"""

from __future__ import annotations

import itertools
import math
import sys
from bisect import bisect_left, bisect_right
from operator import itemgetter

from sparkcep.ir.ast import Attr, BinOp, EventPat, Func, Kleene, Not, Or, Seq, walk
from sparkcep.runtime_udfs.expr.scalar import LACKING
from sparkcep.runtime_udfs.match.conjuncts import (
    RANKED_NEXT,
    AggStats,
    EngineUnsupportedError,
    NegPlan,
    _mono,
    _negated_shapes,
    _runs,
    collapse_negated_kleene,
    negated_kleene,
)

__all__ = ["RANK", "GeneralNeg", "NegIndex", "general_negations", "has_links"]

_ts_of = itemgetter(0)

#: The key under which the engine numbers a partition's events in processing order (``ts``, ties in input
#: order), when a negation links a step with ``NEXT``: a linked step's event is the one numbered right after the
#: event before it (:func:`has_links`, ``engine._ranked``)
RANK = "_rank"


class NegIndex:
    """The negative events of one :class:`NegPlan`: ``events`` as ``(ts, event)`` in ts order; with a keyed
    equality, ``buckets`` by attribute value and ``loose`` (lacking attribute on an ANY component, or an
    unhashable value) for events every probe must consider."""

    __slots__ = ("events", "buckets", "loose")

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.buckets: dict = {}
        self.loose: list[tuple] = []

    def __len__(self) -> int:
        return len(self.events)

    def add(self, plan: NegPlan, ts, event: dict) -> None:
        """Index ``event`` (events arrive in ts order)."""
        entry = (ts, event)
        self.events.append(entry)
        if plan.key_attr is None:
            return
        value = event.get(plan.key_attr)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            if plan.any_:  # a lacking attribute: the equality is TRUE whatever the probe
                self.loose.append(entry)
            return  # else the equality is NULL: this event never invalidates through this component
        try:
            self.buckets.setdefault(value, []).append(entry)
        except TypeError:
            self.loose.append(entry)

    def blocked(self, plan: NegPlan, binding: dict, lo, hi) -> bool:
        """True iff some indexed event lies strictly inside ``(lo, hi)`` and satisfies the negation predicates
        with ``binding`` (the positive variables) and itself as ``plan.var``."""
        if not lo < hi:
            return False
        if plan.general is not None:
            return plan.general.blocked(self.events, binding, lo, hi)
        if RANKED_NEXT in plan.guards:
            return self._successor(plan, binding, lo)
        if plan.members:
            return self._sequence(plan, binding, lo, hi)
        if plan.key_attr is None:
            return self._any(self.events, plan.checks, binding, plan.var, lo, hi)
        probe = plan.probe(binding)
        if probe is LACKING:  # the positive side lacks the attribute: the equality holds for every event
            return self._any(self.events, plan.checks, binding, plan.var, lo, hi)
        if self.loose and self._any(self.loose, plan.checks, binding, plan.var, lo, hi):
            return True
        if probe is None:
            return False
        try:
            bucket = self.buckets.get(probe)
        except TypeError:
            return self._any(self.events, plan.checks, binding, plan.var, lo, hi)
        return bucket is not None and self._any(bucket, plan.rest_checks, binding, plan.var, lo, hi)

    def _sequence(self, plan: NegPlan, binding: dict, lo, hi) -> bool:
        entries = self.events
        members, mask_of = plan.members, plan.member_mask
        masks: dict[int, int] = {}
        last = len(members) - 1
        inners = plan.inners
        touched = [var for _, var, _ in members] + [var for _, seq in inners for _, var, _ in seq]
        saved = [binding.get(var) for var in touched]
        times = [lo] * len(members)

        def mask_at(event) -> int:
            mask = masks.get(id(event))
            if mask is None:
                mask = masks[id(event)] = mask_of(event)
            return mask

        def occurs(seq: tuple, j: int, after, end, done) -> bool:
            """Events filling ``seq[j:]`` in strictly increasing ts inside ``(after, end)``, each passing the
            checks due at it, and then ``done()``."""
            bit, var, checks = seq[j]
            i = bisect_right(entries, after, key=_ts_of)
            while i < len(entries):
                ts, event = entries[i]
                if not ts < end:
                    return False
                i += 1
                if not mask_at(event) & bit:
                    continue
                binding[var] = event
                if seq is members:
                    times[j] = ts
                if all(check(binding) is True for check in checks) and (
                        occurs(seq, j + 1, ts, end, done) if j + 1 < len(seq) else done()):
                    return True
            return False

        def excluded() -> bool:
            """An inner negated sequence occurs in its gap of the occurrence bound in ``binding``/``times``."""
            for gap, seq in inners:
                if occurs(seq, 0, times[gap - 1] if gap else lo, times[gap] if gap <= last else hi, _true):
                    return True
            return False

        def valid() -> bool:
            return not (inners and excluded())

        try:
            return occurs(members, 0, lo, hi, valid)
        finally:
            for var, value in zip(touched, saved, strict=True):
                binding[var] = value

    def _successor(self, plan: NegPlan, binding: dict, lo) -> bool:
        """``NEXT !(C c)`` (notNext) in an automaton: is the event numbered right after the match's event at ``lo``
        (the single event before it) one of the indexed events, satisfying the predicates?  Whatever its ts and
        whether the match takes it (Flink's notNext, the oracle's ``_not_next_holds``)."""
        rank = next((ev[RANK] for bound in binding.values() for ev in _events(bound) if ev["ts"] == lo), None)
        if rank is None:
            return False
        entries = self.events
        for i in range(bisect_left(entries, lo, key=_ts_of), len(entries)):
            event = entries[i][1]
            if event[RANK] > rank:
                return event[RANK] == rank + 1 and self._any([entries[i]], plan.checks, binding, plan.var, -math.inf,
                                                             math.inf)
        return False

    @staticmethod
    def _any(entries: list, checks: tuple, binding: dict, var: str, lo, hi) -> bool:
        i = bisect_right(entries, lo, key=_ts_of)
        n = len(entries)
        if not checks:
            return i < n and entries[i][0] < hi
        saved = binding.get(var)
        try:
            while i < n:
                ts, event = entries[i]
                if not ts < hi:
                    return False
                binding[var] = event
                for check in checks:
                    if check(binding) is not True:
                        break
                else:
                    return True
                i += 1
            return False
        finally:
            binding[var] = saved

    def prune(self, horizon) -> None:
        """Forget the events with ``ts <= horizon``."""
        self.events = _drop(self.events, horizon)
        if self.loose:
            self.loose = _drop(self.loose, horizon)
        if self.buckets:
            for value in list(self.buckets):
                kept = _drop(self.buckets[value], horizon)
                if kept:
                    self.buckets[value] = kept
                else:
                    del self.buckets[value]

    def clear(self) -> None:
        self.events, self.buckets, self.loose = [], {}, []

    def newest(self):
        """The ts of the newest indexed event (the index is empty once the watermark passes it + W)."""
        return self.events[-1][0] if self.events else None


def _true() -> bool:
    return True


def _drop(entries: list, horizon) -> list:
    cut = bisect_right(entries, horizon, key=_ts_of)
    return entries[cut:] if cut else entries


# ------------------------------------------------------------------------------------------ general negation
# Any other negated sub-pattern (a repeated group, negation nested at any depth, a negated sub-pattern other
# than a sequence of single events, T+ read as a whole: b[1], b[b.len], agg(b[])) is checked literally, as the
# oracle defines it: is there a derivation of the sub-pattern over the indexed events strictly inside the gap,
# with strictly increasing ts and at least one event, that satisfies the conjuncts of its scope (with the
# outer binding in scope) and whose own negations hold in their gaps (recursively)?


class _Ev:
    __slots__ = ("bit", "var", "listed")

    def __init__(self, bit: int, var: str, listed: bool):
        self.bit, self.var, self.listed = bit, var, listed


class _Seq:
    __slots__ = ("items", "strict")

    def __init__(self, items: tuple, strict: tuple = ()):
        self.items = items
        self.strict = strict or (False,) * len(items)  # item k written NEXT (Seq.strict)


class _Or:
    __slots__ = ("alternatives",)

    def __init__(self, alternatives: tuple):
        self.alternatives = alternatives


class _Rep:
    __slots__ = ("inner", "lo", "hi")

    def __init__(self, inner, lo: int, hi: int | None):
        self.inner, self.lo, self.hi = inner, lo, hi


_REPEAT = {"+": (1, None), "*": (0, None), "?": (0, 1)}


class _Level:
    """One negation scope ``NOT inner``: its variables (``lists``: those under ``+``/``*`` inside it, bound to
    lists), the conjuncts decided in it: ``on_bind[var]`` as soon as ``var`` completes the variables of this
    scope they read (``static``: no list variable of this scope; ``elem``: one list variable read only as
    ``v[i]``, checked per element), and ``late`` at the end of a derivation.  It is also the marker of its
    place in the enclosing scope's derivation."""

    __slots__ = ("inner", "vars", "lists", "children", "on_bind", "early", "late", "bounds", "single")

    def __init__(self) -> None:
        self.inner = None
        self.vars: set[str] = set()
        self.lists: set[str] = set()
        self.children: list[_Level] = []
        self.on_bind: dict[str, list[tuple]] = {}
        self.early: list[tuple] = []  # the conjuncts of on_bind, each once
        self.late: list = []
        #: ``NOT T+ v[]`` alone: ``(v's component bit, v, Mono)`` per conjunct on aggregates over ``v[]`` that is
        #: false on every subset of the candidates when false on all of them (SASE++ §5.2): checked first
        self.bounds: list[tuple] = []
        #: ``NOT T+ v[]`` alone whose only conjunct is ``avg(v[].attr) <op> e``: ``(v's bit, v, attr, conjunct)``,
        #: decided on single events (:func:`_avg_threshold`)
        self.single: tuple | None = None


#: the comparisons for which "some non-empty subset has ``avg op t``" iff "some single event has ``x op t``"
_AVG_OPS = frozenset({">", "<", ">=", "<="})
#: integers up to this magnitude are exact floats: their average, correctly rounded, lies in [min, max]
_EXACT_INT = 2 ** 53


def _avg_threshold(c, var: str, any_vars: frozenset[str]) -> str | None:
    """``attr`` if conjunct ``c`` is ``avg(var[].attr) op e`` (either way round, ``op`` one of ``> < >= <=``)
    with ``e`` free of ``var``, and ``var`` is not an ``ANY`` variable; else None.

    The rule (used by :meth:`_Search.occurs` for ``NOT T+ v[]`` when this is the only conjunct reading ``v``):
    some non-empty subset ``S`` of the gap's candidates has ``avg(S.attr) op t`` iff some single candidate has
    ``attr op t``.  A singleton is a subset; conversely the average of ``S``'s non-NULL values lies between
    their minimum and maximum, so one of them is on the right side of ``t``.  When ``e`` reads another Kleene
    variable positionally (``d[i].x``, quantified over its positions), the averages that satisfy the conjunct
    still form a half-line (below the least, or above the greatest, of the thresholds), so the same holds.
    Exact only where the computed average does lie in ``[min, max]``: integer values of magnitude up to
    2**53 (exact sum, one correctly rounded division).  With a float value the rounding of the sum can put it
    outside (``avg`` of 0.1, 0.1, 0.1 is 0.10000000000000002 > 0.1), so the search runs as before; NULL and
    NaN values are not averaged (:mod:`sparkcep.runtime_udfs.expr.scalar`) and a singleton of one is not a witness.
    """
    e = c.expr
    if var in any_vars or c.global_ or var in c.positional or not (isinstance(e, BinOp) and e.op in _AVG_OPS):
        return None
    for agg, other in ((e.left, e.right), (e.right, e.left)):
        if (isinstance(agg, Func) and agg.name == "avg" and not agg.star and len(agg.args) == 1
                and isinstance(agg.args[0], Attr) and agg.args[0].var == var and agg.args[0].index == "all"
                and not any(isinstance(n, Attr) and n.var == var for n in walk(other))):
            return agg.args[0].attr
    return None


def _build(p, component, listed: bool, level: _Level):
    if isinstance(p, EventPat):
        level.vars.add(p.var)
        if listed:
            level.lists.add(p.var)
        return _Ev(1 << component(p), p.var, listed)
    if isinstance(p, Kleene):
        lo, hi = _REPEAT[p.op]
        return _Rep(_build(p.inner, component, listed or hi is None, level), lo, hi)
    if isinstance(p, Seq):
        return _Seq(tuple(_build(i, component, listed, level) for i in p.items), p.strict)
    if isinstance(p, Or):
        return _Or(tuple(_build(a, component, listed, level) for a in p.alternatives))
    if isinstance(p, Not):
        return _level(p, component, level)
    raise EngineUnsupportedError(f"unknown pattern node {type(p).__name__}")


def _level(node: Not, component, parent: _Level | None) -> _Level:
    level = _Level()
    level.inner = _build(node.inner, component, False, level)
    if parent is not None:
        parent.children.append(level)
    return level


def _levels(level: _Level):
    yield level
    for child in level.children:
        yield from _levels(child)


def _is_listed(p, listed: bool = False) -> set[str]:
    """The variables under ``+``/``*`` in negation ``p``'s own scopes (each ``NOT`` starts a new one)."""
    if isinstance(p, EventPat):
        return {p.var} if listed else set()
    if isinstance(p, Kleene):
        return _is_listed(p.inner, listed or _REPEAT[p.op][1] is None)
    if isinstance(p, Not):
        return _is_listed(p.inner, False)
    if isinstance(p, Seq):
        return set().union(*(_is_listed(i, listed) for i in p.items))
    if isinstance(p, Or):
        return set().union(*(_is_listed(a, listed) for a in p.alternatives))
    return set()


def _outermost_negations(p):
    if isinstance(p, Not):
        yield p
    elif isinstance(p, Kleene):
        yield from _outermost_negations(p.inner)
    elif isinstance(p, Seq):
        for i in p.items:
            yield from _outermost_negations(i)
    elif isinstance(p, Or):
        for a in p.alternatives:
            yield from _outermost_negations(a)


def has_links(node) -> bool:
    """Does a negated sub-pattern link a step with ``NEXT`` (``!(NEXT C c)``, ``NOT SEQ(B b, NEXT C c)``)?  Then
    it runs the general check, over events numbered in the partition's order (:data:`RANK`)."""
    return any(isinstance(n, Seq) and any(n.strict) for n in walk(node))


def general_negations(pattern, exprs, kleene_vars: frozenset[str]) -> tuple[frozenset, frozenset[str]]:
    """The outermost negations of ``pattern`` that the fast paths (a negated event, a negated sequence of
    single events with negated single events or sequences inside, ``T+`` negated as ``T``) cannot check
    exactly, and the variables under ``+``/``*`` inside them (lists in their conjuncts).  ``exprs`` are the
    conjuncts of WHERE."""
    out, lists = set(), set()
    for node in _outermost_negations(pattern):
        general = False
        try:
            _negated_shapes(node.inner, lambda p: 0)
        except EngineUnsupportedError:
            general = True
        # an OR inside an inner negation: a conjunct that reads one alternative's variable and one outside it is
        # NULL on an occurrence of another alternative (the oracle's absent variables), which the negated
        # sequence's fast path does not model
        general = general or any(isinstance(o, Or) for inner in walk(node.inner) if isinstance(inner, Not)
                                 for o in walk(inner.inner))
        # ... and an OR with a T+ inside: a conjunct reading the T+ positionally (z[i]) holds when its alternative
        # did not occur (the oracle: no position to quantify over), where NOT T's rewrite would read z as NULL
        general = general or (any(isinstance(o, Or) for o in walk(node.inner))
                              and any(isinstance(k, Kleene) and k.op != "?" for k in walk(node.inner)))
        # ... and a NEXT step inside (its event must be the one numbered right after the event before it)
        general = general or has_links(node)
        collapsed = negated_kleene(node)
        if not general and collapsed:
            for e in exprs:
                try:
                    collapse_negated_kleene(e, collapsed, kleene_vars | collapsed)
                except EngineUnsupportedError:
                    general = True
                    break
        if general:
            out.add(node)
            lists |= _is_listed(node)
    return frozenset(out), frozenset(lists)


#: an upper bound on the search's stack frames per selected event (derive, its continuation, the repetition)
_FRAMES_PER_EVENT = 8


class GeneralNeg:
    """The literal existence check of one negated sub-pattern (see above), set as ``NegPlan.general``."""

    __slots__ = ("node", "root", "vars", "mask_of", "positives", "outer_positional", "linked")

    def __init__(self, node: Not, component, conjs, mask_of, positives: tuple[str, ...],
                 any_vars: frozenset[str] = frozenset()):
        self.node = node  # the negated sub-pattern as written (explain names it)
        self.linked = has_links(node)
        self.root = _level(node, component, None)
        self.mask_of = mask_of
        self.positives = positives
        level_of = {v: lv for lv in _levels(self.root) for v in lv.vars}
        self.vars = frozenset(level_of)
        depth = {}

        def number(lv: _Level, d: int) -> None:
            depth[id(lv)] = d
            for child in lv.children:
                number(child, d + 1)

        number(self.root, 0)
        outer: set[str] = set()
        for c in conjs:
            mine = [level_of[v] for v in c.vars if v in level_of]
            outer |= {v for v in c.positional if v not in level_of}
            if not mine:
                for lv in _levels(self.root):  # [attr] over every component: in every scope
                    lv.late.append(c)
                continue
            lv = max(mine, key=lambda x: depth[id(x)])
            if any(m is not lv and not _encloses(m, lv) for m in mine):
                raise EngineUnsupportedError("a predicate reads variables of two different negations inside a "
                                             "negation")
            own = c.vars & lv.vars
            lists = own & lv.lists
            if c.global_:
                lv.late.append(c)
            elif not lists:
                lv.early.append((c, own, None))
                for v in own:
                    lv.on_bind.setdefault(v, []).append((c, own, None))
            elif (len(lists) == 1 and c.access.get(next(iter(lists))) == frozenset({"cur"})
                  and set(c.positional) == lists):
                v = next(iter(lists))
                lv.early.append((c, own, v))
                for u in own:
                    lv.on_bind.setdefault(u, []).append((c, own, v))
            else:
                lv.late.append(c)
        self.outer_positional = frozenset(outer)
        for lv in _levels(self.root):
            rep = lv.inner
            if isinstance(rep, _Rep) and isinstance(rep.inner, _Ev) and rep.inner.listed:
                ev = rep.inner  # every derivation that selects an event binds ev.var
                for c in lv.late:
                    if c.access.get(ev.var) == frozenset({"all"}) and not (c.vars - {ev.var}) & lv.vars:
                        mono = _mono(c, ev.var, "all", any_vars)
                        if mono is not None:
                            lv.bounds.append((ev.bit, ev.var, mono))
                if not lv.early and len(lv.late) == 1 and not lv.children:
                    attr = _avg_threshold(lv.late[0], ev.var, any_vars)
                    if attr is not None:
                        lv.single = (ev.bit, ev.var, attr, lv.late[0])

    def blocked(self, entries: list, binding: dict, lo, hi) -> bool:
        """True iff the sub-pattern occurs strictly inside ``(lo, hi)`` among ``entries`` (``(ts, event)`` in
        ts order) with ``binding`` (the outer variables) in scope."""
        # the search recurses a few frames per selected event: a gap of many events needs a deeper stack
        # than Python's default (pure Python frames: 3.11+ does not grow the C stack for them)
        depth = _FRAMES_PER_EVENT * len(entries) + 500
        if sys.getrecursionlimit() < depth:
            sys.setrecursionlimit(depth)
        b = dict(binding)
        for v in self.vars:
            b[v] = None
        runs = {v: _runs(b, v, self.positives) for v in self.outer_positional if isinstance(b.get(v), list)}
        before = None
        if self.linked:  # the match's event right before the gap: the one at ``lo`` (a match's ts are distinct)
            before = next((ev[RANK] for v in self.positives for ev in _events(binding.get(v)) if ev["ts"] == lo),
                          None)
        return _Search(entries, self.mask_of, b).occurs(self.root, lo, hi, runs, before)


def _events(bound) -> tuple | list:
    return () if bound is None else bound if isinstance(bound, list) else (bound,)


def _encloses(outer: _Level, inner: _Level) -> bool:
    return any(child is inner or _encloses(child, inner) for child in outer.children)


def _holds(c, b: dict, runs: dict) -> bool:
    """The oracle's ``_conjunct_holds``: absent variables, positions quantified over runs."""
    if c.vars and all(b.get(v) is None for v in c.vars):
        return True
    if not c.positional:
        return c.fn(b) is True
    if any(b.get(v) is None for v in c.positional):
        return True
    choices = []
    for v, (prev, nxt) in c.positional.items():
        choices.append([(v, run, i) for run in runs.get(v) or (b[v],) for i in range(len(run))
                        if not (prev and i == 0) and not (nxt and i == len(run) - 1)])
    saved = {v: b[v] for v in c.positional}
    try:
        for combination in itertools.product(*choices):
            cur = {}
            for v, run, i in combination:
                b[v] = run
                cur[v] = i
            if c.fn(b, cur) is not True:
                return False
        return True
    finally:
        b.update(saved)


class _Search:
    """Depth-first search for a derivation, binding into ``b`` and undoing on the way back."""

    __slots__ = ("entries", "mask_of", "masks", "b")

    def __init__(self, entries: list, mask_of, b: dict):
        self.entries, self.mask_of, self.masks, self.b = entries, mask_of, {}, b

    def mask(self, event) -> int:
        m = self.masks.get(id(event))
        if m is None:
            m = self.masks[id(event)] = self.mask_of(event)
        return m

    def occurs(self, level: _Level, lo, hi, runs: dict, before=None) -> bool:
        """Does ``level``'s sub-pattern occur strictly inside ``(lo, hi)``?  ``before``: the :data:`RANK` of the
        event right before the gap, to which a ``NEXT`` on its first item links (None: none, no link)."""
        if not lo < hi:
            return False
        entries, b = self.entries, self.b
        end = bisect_left(entries, hi, key=_ts_of)
        for bit, var, mono in level.bounds:
            stats = {a: AggStats() for a in mono.attrs}
            for j in range(bisect_right(entries, lo, key=_ts_of), end):
                event = entries[j][1]
                if self.mask(event) & bit:
                    for a, st in stats.items():
                        st.add(event.get(a))
            if mono.exact_needed(stats, b, var) is None:
                return False  # false on all candidates, so on every subset of them
        if level.single is not None:
            decided = self.single(level.single, lo, end, runs)
            if decided is not None:
                return decided
        items: list = []  # ("pick", var, ts, listed, event) and ("neg", level) in derivation order

        def check_bind(var: str, event) -> bool:
            for c, own, elem in level.on_bind.get(var, ()):
                if any(b.get(v) is None for v in own):
                    continue
                if elem is None:
                    if not _holds(c, b, runs):
                        return False
                    continue
                events = (event,) if var == elem else b[elem]
                saved = b[elem]
                try:
                    for e in events:
                        b[elem] = [e]
                        if not _holds(c, b, runs):
                            return False
                finally:
                    b[elem] = saved
            return True

        def linked_to() -> int | None:
            """The rank the next pick must come right after, if it is a NEXT step's first (a ``("link",)`` item
            since the last pick): the last pick's, else the event's before the gap (None: no constraint)."""
            link = False
            for it in reversed(items):
                if it[0] == "pick":
                    return it[4][RANK] if link else None
                link = link or it[0] == "link"
            return before if link else None

        def derive(node, last, cont) -> bool:
            if isinstance(node, _Ev):
                var, bit = node.var, node.bit
                link = linked_to()
                for j in range(bisect_right(entries, last, key=_ts_of), end):
                    ts, event = entries[j]
                    if not self.mask(event) & bit or (link is not None and event[RANK] != link + 1):
                        continue
                    if node.listed:
                        bound = b[var]
                        b[var] = [event] if bound is None else [*bound, event]
                    else:
                        bound = None
                        b[var] = event
                    items.append(("pick", var, ts, node.listed, event))
                    try:
                        if check_bind(var, event) and cont(ts):
                            return True
                    finally:
                        items.pop()
                        b[var] = bound
                return False
            if isinstance(node, _Level):
                items.append(("neg", node))
                try:
                    return cont(last)
                finally:
                    items.pop()
            if isinstance(node, _Seq):
                return seq(node, 0, last, cont)
            if isinstance(node, _Or):
                return any(derive(a, last, cont) for a in node.alternatives)
            return rep(node, 0, last, cont)

        def seq(node: _Seq, k: int, last, cont) -> bool:
            if k == len(node.items):
                return cont(last)
            if not node.strict[k]:
                return derive(node.items[k], last, lambda t: seq(node, k + 1, t, cont))
            if isinstance(node.items[k], _Level):  # NEXT !(C c): decided on the complete occurrence
                items.append(("notnext", node.items[k]))
                try:
                    return seq(node, k + 1, last, cont)
                finally:
                    items.pop()
            items.append(("link",))  # a NEXT step: its first pick comes right after the pick before it
            try:
                return derive(node.items[k], last, lambda t: seq(node, k + 1, t, cont))
            finally:
                items.pop()

        def rep(node: _Rep, count: int, last, cont) -> bool:
            if count >= node.lo and cont(last):
                return True
            if node.hi is not None and count >= node.hi:
                return False
            mark = _n_picks(items)

            def after(t) -> bool:
                if _n_picks(items) == mark:  # an iteration that selects no event can only be the whole repetition
                    return count == 0 and cont(t)
                return rep(node, count + 1, t, cont)

            return derive(node.inner, last, after)

        def complete(_last) -> bool:
            picks = [it for it in items if it[0] == "pick"]
            if not picks:
                return False  # selects no event: never occurs (the oracle skips empty derivations)
            own_runs = dict(runs)
            previous = None
            for _, var, _, listed, event in picks:
                if listed:
                    if var != previous:
                        own_runs.setdefault(var, []).append([])
                    own_runs[var][-1].append(event)
                previous = var
            for c in level.late:
                if not _holds(c, b, own_runs):
                    return False
            for c, own, _ in level.early:  # not decided on the way: one of its variables is absent
                if any(b.get(v) is None for v in own) and not _holds(c, b, own_runs):
                    return False
            for k, it in enumerate(items):
                if it[0] == "notnext":
                    pick = next((p for p in reversed(items[:k]) if p[0] == "pick"), None)
                    if pick is not None and self.successor_occurs(it[1], pick, own_runs):
                        return False
                    continue
                if it[0] != "neg":
                    continue
                pick = next((p for p in reversed(items[:k]) if p[0] == "pick"), None)
                start = lo if pick is None else pick[2]
                stop = next((p[2] for p in items[k + 1:] if p[0] == "pick"), hi)
                if self.occurs(it[1], start, stop, own_runs, before if pick is None else pick[4].get(RANK)):
                    return False
            return True

        return derive(level.inner, lo, complete)


    def successor_occurs(self, level: _Level, pick: tuple, runs: dict) -> bool:
        """``NEXT !(C c)`` inside the sub-pattern: is the event numbered (:data:`RANK`) right after ``pick``'s
        an occurrence of ``level`` (whatever its ts)?  Not one of the indexed events: it is no such ``C``."""
        rank = pick[4][RANK]
        entries = self.entries
        for j in range(bisect_left(entries, pick[2], key=_ts_of), len(entries)):
            event = entries[j][1]
            if event[RANK] > rank:
                return (event[RANK] == rank + 1
                        and _Search([entries[j]], self.mask_of, self.b).occurs(level, -math.inf, math.inf, runs))
        return False

    def single(self, single: tuple, lo, end: int, runs: dict) -> bool | None:
        """``NOT T+ v[]`` with ``avg(v[].attr) op e`` only (:func:`_avg_threshold`): does a single candidate in
        the gap (entries after ``lo``, before index ``end``) satisfy the conjunct?  None (search the subsets)
        when a candidate's value is not an integer of magnitude up to 2**53."""
        entries, b = self.entries, self.b
        bit, var, attr, c = single
        witnesses = []
        for j in range(bisect_right(entries, lo, key=_ts_of), end):
            event = entries[j][1]
            if not self.mask(event) & bit:
                continue
            value = event.get(attr)
            if value is None or (isinstance(value, float) and value != value):
                continue  # not averaged
            if not isinstance(value, int) or abs(value) > _EXACT_INT:
                return None
            witnesses.append(event)
        saved = b[var]
        try:
            for event in witnesses:
                b[var] = [event]
                if _holds(c, b, runs):
                    return True
        finally:
            b[var] = saved
        return False


def _n_picks(items: list) -> int:
    return sum(1 for it in items if it[0] == "pick")
