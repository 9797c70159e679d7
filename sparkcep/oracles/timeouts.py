"""The reference for timed-out partial matches (docs/language.md, "Timed-out partial matches"), from the
definition, by enumerating the partial matches prefix by prefix.

A partial match is a tuple of picks ``((position, step), ...)``; the partial matches of one partition are the
nodes of a tree: the root's children are the single picks that are partial matches, and the children of a node
are the one-pick extensions (a later event joining the open Kleene step, or taking a later step) that are
partial matches again (under skip_till_next_match only those of the first later event that gives one).  Every
tuple has one parent, its prefix, so the walk meets each partial match once; the timed-out ones are the leaves
that are no match.  The cost is the number of partial matches times the events of a window: polynomial in the
stream, except where the output itself is not (a Kleene step under skip_till_any_match has a partial match per
admissible subset of its events).

    >>> from sparkcep.grammar import parse_query
    >>> q = parse_query("PATTERN SEQ(A a, B b, C c) WITHIN 10 RETURN a.ts, b.ts")
    >>> timed_out_rows(q, [{"type": "A", "ts": 1}, {"type": "B", "ts": 2}, {"type": "C", "ts": 3},
    ...                    {"type": "A", "ts": 5}])
    [{'a_ts': 5, 'b_ts': None, 'timeout_step': 'a'}]
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sparkcep.ir.ast import Attr, BinOp, Query, walk
from sparkcep.ir.naming import column_name, dedupe, default_column
from sparkcep.ir.spec import TIMEOUT_STEP
from sparkcep.oracles.match import (
    DEFAULT_STRATEGY,
    OracleError,
    _bind,
    _conjunct_holds,
    _Ev,
    _Neg,
    _occurs,
    _Or,
    _partitions,
    _prepare,
    _Rep,
    _resolve,
    _Seq,
    _sorted,
    _stops,
    _value,
    is_trend_aggregate,
)
from sparkcep.runtime_udfs.expr.scalar import compile_expr

__all__ = ["timed_out_picks", "timed_out_rows"]

NEXT_MATCH = "skip_till_next_match"
CONTIGUITY = ("strict_contiguity", "partition_contiguity")

Event = dict[str, Any]


@dataclass(frozen=True)
class _Step:
    """One step of the ``SEQ``: its variable, types, and how many events it takes (``hi`` None: unbounded);
    ``is_list``: its variable is the list of its events (a Kleene step)."""

    var: str
    types: tuple[str, ...]
    lo: int
    hi: int | None
    is_list: bool
    linked: bool = False  # written NEXT: its first event is the partition's event right after the one before
    until: Any = None  # a loop with a stop condition UNTIL: its match oracle's _Stop
    #: the negations between this step and the next: (the match oracle's _Neg of one event or of a SEQ of
    #: events, written NEXT: Flink's notNext, else notFollowedBy)
    negs: tuple = ()
    #: a step of a repeated group of single events (``(SEQ(B b, C c)){lo,hi}``): the positions of the group's
    #: first and last steps; ``lo``/``hi`` are then the group's iterations (each step takes one event in each)
    group: tuple[int, int] | None = None


def timed_out_rows(query: Query, events: Sequence[Event], columns: Sequence[str] | None = None, *,
                   ts_unit_ms: float | None = None) -> list[dict[str, Any]]:
    """One row per timed-out partial match of ``query`` over ``events``: the columns :func:`match_rows
    <sparkcep.oracles.match.match_rows>` gives (RETURN, or ``<var>_<attr>``), over the partial binding, and
    ``timeout_step``, the variable of its last bound step; ordered by the input positions of its events."""
    if is_trend_aggregate(query):
        raise OracleError("a trend-aggregate query has no partial matches")
    if query.skip is not None:
        raise OracleError("an AFTER MATCH SKIP query has no timed-out partial matches")
    prep = _prepare(query, ts_unit_ms)
    paths = _paths(prep)
    names = [v for v, info in prep.vars.items() if not info.scope]  # the positive variables, in pattern order
    if columns is None:
        columns = list(dict.fromkeys(k for e in events for k in e))
    if query.returns is not None:
        any_vars = frozenset(v for v, info in prep.vars.items() if info.any_)
        only = next(iter(prep.vars)) if len(prep.vars) == 1 else None
        titles = dedupe([column_name(item, k) for k, item in enumerate(query.returns)])
        fns = [compile_expr(_resolve(item.expr, prep.vars, only), any_vars) for item in query.returns]
    found = [(order, binding, picks[-1][1]) for order, picks, binding in timed_out_picks(prep, paths, events)]
    found.sort(key=lambda f: f[0])
    rows = []
    for _, binding, last in found:
        if query.returns is not None:
            row = {n: _value(fn(binding)) for n, fn in zip(titles, fns, strict=True)}
        else:
            tail = {v: b[-1] if isinstance(b, list) else b for v, b in binding.items()}  # a sequence: its last
            row = {default_column(v, a): None if v not in tail else tail[v].get(a) for v in names for a in columns}
        row[TIMEOUT_STEP] = last
        rows.append(row)
    return rows


def timed_out_picks(prep, paths: list[list[_Step]], events: Sequence[Event]) -> list[tuple[tuple, tuple, dict]]:
    """The timed-out partial matches of the prepared query ``prep`` (:func:`_paths` its paths) over ``events``:
    ``(input positions, picks ((partition position, variable), ...), binding)``, unordered.  With an ``OR``, a
    partial match of several paths (a prefix they share) is one node: extended if one path extends it (under
    skip_till_next_match only by the first event that extends it in any path), a match if it is one of a
    path, timed out if it is no match and could still have been extended in a path when the window closed."""
    if len(paths) == 1:
        prep, events = as_equivalence(prep, paths[0], events)
    found = []
    indexed = _sorted(events)
    first_only = prep.strategy == NEXT_MATCH
    for _, part in _partitions(prep, indexed):
        walks = [_Partials(prep, steps, part, [e["ts"] for _, e in indexed]) for steps in paths]
        roots: dict[tuple, list[int]] = {}
        for p, w in enumerate(walks):
            for j in range(len(part)):
                for s in range(len(w.steps)):
                    if w.partial(((j, s),)):
                        roots.setdefault(((j, w.steps[s].var),), []).append(p)
        todo = list(roots.items())
        while todo:
            picks, ps = todo.pop()
            children: dict[tuple, list[int]] = {}
            for p in ps:
                for child in walks[p].extensions(walks[p].steps_of(picks)):
                    children.setdefault(walks[p].labelled(child), []).append(p)
            if first_only and children:  # the first event that extends it in any path
                first = min(c[-1][0] for c in children)
                children = {c: q for c, q in children.items() if c[-1][0] == first}
            todo += children.items()
            if (not children and not any(walks[p].complete(walks[p].steps_of(picks)) for p in ps)
                    and any(walks[p].alive(walks[p].steps_of(picks)) for p in ps)):
                found.append((tuple(part[j][0] for j, _ in picks), picks,
                              walks[ps[0]].binding(walks[ps[0]].steps_of(picks))[0]))
    return found


def _paths(prep) -> list[list[_Step]]:
    """The steps of each path of the pattern (:func:`_steps`): an ``OR`` of such SEQs has a path per
    alternative, and an ``OR`` step of single or Kleene events or SEQs of them (``B b OR C c``, ``SEQ(B b, C c)
    OR D d``) a path per alternative too."""
    alternatives = prep.root.alternatives if isinstance(prep.root, _Or) else (prep.root,)
    paths = []
    for alt in alternatives:
        items = alt.items if isinstance(alt, _Seq) else (alt,)
        strict = (alt.strict if isinstance(alt, _Seq) else ()) or (False,) * len(items)
        choices = [[(a, linked) for a in item.alternatives] if isinstance(item, _Or) else [(item, linked)]
                   for item, linked in zip(items, strict, strict=True)]
        paths += [_steps(prep, [step for alt, linked in path for step in _flat(alt, linked)])
                  for path in itertools.product(*choices)]
    return paths


def _flat(alt, linked: bool) -> list[tuple]:
    """An ``OR`` step's alternative as ``(item, written NEXT)``: a ``SEQ`` of single and Kleene events is its
    items, one step each (so a partial match may end inside it), the first linked if the ``OR`` step is."""
    if not isinstance(alt, _Seq):
        return [(alt, linked)]
    strict = alt.strict or (False,) * len(alt.items)
    if any(isinstance(i, _Neg) for i in alt.items):
        raise OracleError("an OR alternative holding a negation has no timed-out partial matches")
    return [(i, f or (k == 0 and linked)) for k, (i, f) in enumerate(zip(alt.items, strict, strict=True))]


def _steps(prep, items: list | None = None) -> list[_Step]:
    """The steps of ``items`` (``(item, written NEXT)``; None: the pattern's, which must have one path), a
    ``SEQ`` of single events and Kleene events (``T+``, ``T*``, ``T?``, ``T{n,m}``, a loop with
    ``UNTIL``; any of them written ``NEXT``; a repeated group of single events: a step per event, each taking
    one event per iteration, :attr:`_Step.group`, with ``UNTIL`` each its loop's stop), each with the negations
    after it (``!(T n)``, ``NEXT !(T n)``,
    ``!(SEQ(T n, U m, ...))``),
    or the :class:`OracleError` saying the query is outside the definition (a negation that can be at the
    start, ``NEXT !(...)`` with no step after it that must take an event, a negation predicate over a later
    step).  A negation next to a repeated group is attached to the step before it as any other (the group's
    last step: the way on past the group, not into another iteration)."""
    if items is None:
        paths = _paths(prep)
        if len(paths) > 1:
            raise OracleError("the pattern has several paths (an OR): see _paths")
        return paths[0]
    steps: list[_Step] = []
    for item, linked in items:
        if isinstance(item, _Neg) and (isinstance(item.inner, _Ev) or _event_seq(item.inner)):
            if not any(s.lo for s in steps):
                raise OracleError("a negation at the start of a match has no timed-out partial matches")
            if linked and not isinstance(item.inner, _Ev):
                raise OracleError("NEXT !(SEQ(...)) has no timed-out partial matches")
            steps[-1] = replace(steps[-1], negs=(*steps[-1].negs, (item, linked)))
            continue
        if isinstance(item, _Rep) and _event_seq(item.inner) and not linked:
            bounds = (len(steps), len(steps) + len(item.inner.items) - 1)
            until = next((stop for stop in prep.stops if stop.loop & {e.var for e in item.inner.items}), None)
            steps += [_Step(e.var, e.types, item.lo, item.hi, True, until=until, group=bounds)
                      for e in item.inner.items]
            continue
        if isinstance(item, _Rep) and isinstance(item.inner, _Ev):
            ev, lo, hi = item.inner, item.lo, item.hi
        elif isinstance(item, _Ev):
            ev, lo, hi = item, 1, 1
        else:
            raise OracleError("timed-out partial matches are defined for a SEQ of single and Kleene events and "
                              "negated events or SEQs of events, and an OR of such SEQs or of single and Kleene "
                              "events")
        until = next((stop for stop in prep.stops if ev.var in stop.loop), None)
        steps.append(_Step(ev.var, ev.types, lo, hi, prep.vars[ev.var].is_list, linked, until))
    index = {s.var: k for k, s in enumerate(steps)}
    for k, s in enumerate(steps):
        for neg, next_ in s.negs:
            if next_ and not any(t.lo for t in steps[k + 1:]):
                raise OracleError("NEXT !(...) with no step after it that must take an event has no timed-out "
                                  "partial matches")
            if any(index.get(v, -1) > k for c in prep.in_scope(neg.scope) for v in c.vars):
                raise OracleError("a negation's predicate over a later step has no timed-out partial matches")
    if prep.strategy not in (DEFAULT_STRATEGY, NEXT_MATCH, *CONTIGUITY):
        raise OracleError(f"unknown selection strategy {prep.strategy}")
    return steps


class _Partials:
    """The definition's tests on the picks ``((position, step), ...)`` of one partition's events ``evs``."""

    def __init__(self, prep, steps: list[_Step], part: list[tuple[int, Event]], stamps: list):
        self.prep, self.steps, self.evs = prep, steps, [e for _, e in part]
        self.index = {s.var: k for k, s in enumerate(steps)}
        self.first_only = prep.strategy == NEXT_MATCH
        #: the position of each event in the order contiguity is judged in (the whole input for strict_contiguity,
        #: else the partition), and the ts of the event at each position of that order
        self.order = [g for g, _ in part] if prep.strategy == "strict_contiguity" else list(range(len(part)))
        self.stamps = stamps if prep.strategy == "strict_contiguity" else [e["ts"] for e in self.evs]

    def steps_of(self, picks) -> tuple:
        """``picks`` labelled by variable as labelled by this path's steps."""
        return tuple((j, self.index[v]) for j, v in picks)

    def labelled(self, picks) -> tuple:
        """``picks`` labelled by this path's steps as labelled by variable."""
        return tuple((j, self.steps[s].var) for j, s in picks)

    def binding(self, picks) -> dict:
        return _bind(self.prep, self.evs, tuple((j, self.steps[s].var) for j, s in picks))

    def _next_steps(self, picks) -> list[int]:
        """The steps the event after ``picks`` may take: the last one's again (a Kleene step short of its
        maximum), or a later one, past steps that may take no event, once the last one has its minimum; in a
        repeated group the next step of the iteration, after its last step the group's first again (short of
        its maximum of iterations) or a later one (once it has its minimum)."""
        k = picks[-1][1]
        taken = sum(1 for _, s in picks if s == k)
        group = self.steps[k].group
        if group and k != group[1]:  # inside an iteration: its next step
            return [k + 1]
        if group:  # an iteration complete: another one (short of the maximum), or on past the group
            out = [group[0]] if self.steps[k].hi is None or taken < self.steps[k].hi else []
        else:
            out = [k] if self.steps[k].is_list and (self.steps[k].hi is None or taken < self.steps[k].hi) else []
        if taken >= self.steps[k].lo:
            t = k + 1
            while t < len(self.steps):
                out.append(t)
                if self.steps[t].lo:
                    break
                t = self.steps[t].group[1] + 1 if self.steps[t].group else t + 1  # past a whole optional group
        return out

    def partial(self, picks) -> bool:
        """Is ``picks`` (a valid sequence of steps, strictly increasing ts) a partial match: each event of its
        step's type, the last before the first's ts plus the window, every predicate over the steps up to the
        last one or bound (a repeated group's steps after it, bound in an earlier iteration) holding, but those
        reading the whole sequence of a variable still open: the last step while it is a Kleene step, every
        step of its repeated group (the match oracle quantifies a positional one over each variable's runs, a
        group's single events: each new event adds positions, so a failing prefix never completes)."""
        j, s = picks[-1]
        ev = self.evs[j]
        if (ev["type"] not in self.steps[s].types or ev["ts"] - self.evs[picks[0][0]]["ts"] >= self.prep.window
                or (len(picks) == 1 and (any(self.steps[t].lo for t in range(s)) or self._inside(s)
                                         or (self.steps[s].until and _stops(self.steps[s].until, ev))))):
            return False
        binding, runs = self.binding(picks)
        open_ = self._open(s)
        if len(picks) > 1 and self._blocked(picks[:-1], s, ev["ts"], math.inf, binding, runs):
            return False
        return all(_conjunct_holds(c, binding, runs) for c in self.prep.in_scope(())
                   if all(self.index.get(v, -1) <= s or v in binding for v in c.vars)  # (another path's: absent)
                   and not any(_reads_whole(c.expr, v) for v in open_ & c.vars))

    def _open(self, s: int) -> frozenset[str]:
        """The variables whose sequence may still grow while the last step is ``s``: its repeated group's, or
        its own if a Kleene step."""
        group = self.steps[s].group
        if group:
            return frozenset(t.var for t in self.steps[group[0]:group[1] + 1])
        return frozenset({self.steps[s].var} if self.steps[s].is_list else ())

    def _inside(self, s: int) -> bool:
        """Is step ``s`` a step of a repeated group after its first one (entered only from the one before)?"""
        return self.steps[s].group is not None and s != self.steps[s].group[0]

    def _blocked(self, picks, t: int, until: float, next_until: float, binding: dict, runs) -> bool:
        """Does a negation between the last step of ``picks`` and step ``t`` (``len(steps)``: the end) hold
        an event of it after the last pick and before ``until``, or, written ``NEXT``, is the event right after
        the last pick (before ``next_until``) one of it (with its predicates, over ``binding``)?"""
        last, k = picks[-1]
        after = self.evs[last]["ts"]
        for step in self.steps[k:t]:
            for neg, next_ in step.negs:
                if next_:
                    if (last + 1 < len(self.evs) and self.evs[last + 1]["ts"] < next_until
                            and _occurs(self.prep, neg, [self.evs[last + 1]], -math.inf, math.inf, binding, runs)):
                        return True
                elif _occurs(self.prep, neg, self.evs, after, until, binding, runs):
                    return True
        return False

    def _same_loop(self, k: int, t: int) -> bool:
        """Is step ``t`` after step ``k`` in ``k``'s loop (``k`` again, a step of ``k``'s repeated group)?"""
        return t == k or (self.steps[k].group is not None and self.steps[t].group == self.steps[k].group)

    def _linked(self, k: int, t: int) -> bool:
        """Must an event taking step ``t`` after one of step ``k`` be right after it (a contiguity strategy, or a
        ``NEXT`` step ``t`` or one between, passed over)?"""
        return self.prep.strategy in CONTIGUITY or any(s.linked for s in self.steps[k + 1:t + 1])

    def _may_take(self, picks, j: int, t: int) -> bool:
        """May event ``j`` take step ``t`` after ``picks``, as far as links and stop conditions go?"""
        last, k = picks[-1]
        if self._linked(k, t) and self.order[j] != self.order[last] + 1:  # right after it (strict: in the input)
            return False
        if self.steps[t].until:  # a loop takes no stop event and none after one (since its first event)
            first = j if not self._same_loop(k, t) else next(i for i, s in picks if self._same_loop(s, t))
            return not any(_stops(self.steps[t].until, self.evs[h]) for h in range(first, j + 1))
        return True

    def alive(self, picks) -> bool:
        """Could an event still have extended ``picks`` when the window closed?  A way (a step an event could
        take next) is closed by a link once the event right after its last one came within the window, a
        way that stays in a loop with ``UNTIL`` (a repeated group's: its next step, another iteration) once a
        stop event came within the window, and a way past a negation once an event of
        it came (``NEXT !(...)``: as the event right after the last pick) within the window."""
        last, k = picks[-1]
        end = self.evs[picks[0][0]]["ts"] + self.prep.window
        after = self.order[last] + 1
        broken = after < len(self.stamps) and self.stamps[after] < end
        binding, runs = self.binding(picks)
        for t in self._next_steps(picks):
            if self._linked(k, t) and broken:
                continue
            if t != k and self._blocked(picks, t, end, end, binding, runs):
                continue
            if self._same_loop(k, t) and self.steps[k].until and any(
                    _stops(self.steps[k].until, e) for e in self.evs[last + 1:] if e["ts"] < end):
                continue
            return True
        return False

    def extensions(self, picks) -> list[tuple]:
        """The partial matches ``picks`` plus one later event (skip_till_next_match: the first that gives one)."""
        last = picks[-1][0]
        end = self.evs[picks[0][0]]["ts"] + self.prep.window
        out = []
        for j in range(last + 1, len(self.evs)):
            ts = self.evs[j]["ts"]
            if ts >= end:
                break
            if ts > self.evs[last]["ts"]:
                out += [p for p in ((*picks, (j, t)) for t in self._next_steps(picks) if self._may_take(picks, j, t))
                        if self.partial(p)]
                if out and self.first_only:
                    break
        return out

    def complete(self, picks) -> bool:
        """A match: every step after the last one may take no event, the last one has its minimum, every
        predicate holds, and no event of a negation at the end came before the window closed."""
        k = picks[-1][1]
        if (any(s.lo for s in self.steps[k + 1:]) or sum(1 for _, s in picks if s == k) < self.steps[k].lo
                or (self.steps[k].group and k != self.steps[k].group[1])):  # (inside an iteration: no match)
            return False
        binding, runs = self.binding(picks)
        end = self.evs[picks[0][0]]["ts"] + self.prep.window
        return (all(_conjunct_holds(c, binding, runs) for c in self.prep.in_scope(()))
                and not self._blocked(picks, len(self.steps), end, end, binding, runs))


def as_equivalence(prep, steps: list[_Step], events: Sequence[Event]):
    """``(prep, events)`` with the equalities ``u.attr = v.attr`` (``v[i].attr`` for a Kleene step: each of its
    events) that connect every step, none an ``ANY(...)`` step, read as what they say, the equivalence test
    ``[attr]``: a partition key, the events without ``attr`` in no partial match (not where every event counts:
    a contiguity strategy, a NEXT step, a loop with UNTIL; nor with a step that may take no event, ``T?``,
    ``T*``, ``T{0,m}``, over which an equality is NULL or holds at no position: the compiler's rule)."""
    negated = [v for s in steps for neg, _ in s.negs for v in _negated_vars(neg)]
    if (any(prep.vars[s.var].any_ or s.linked or s.until or s.lo == 0 for s in steps)
            or any(prep.vars[v].any_ for v in negated) or any(nx for s in steps for _, nx in s.negs)
            or prep.strategy in CONTIGUITY or len(steps) < 2):
        return prep, events
    edges: dict[str, list[tuple[str, str]]] = {}
    for c in prep.conjuncts:
        if _equality(c.expr):
            edges.setdefault(c.expr.left.attr, []).append((c.expr.left.var, c.expr.right.var))
    names = {s.var for s in steps}
    shared = []
    for attr, pairs in edges.items():
        reached, grew = {steps[0].var}, True
        while grew:  # the positive steps, connected through equalities between them
            grew = False
            for u, v in pairs:
                if {u, v} <= names and (u in reached) != (v in reached):
                    reached |= {u, v}
                    grew = True
        # a negated event, tied to a positive step (an equality read in its negation)
        if reached == names and all(any(v in (u, w) and {u, w} - {v} <= names for u, w in pairs) for v in negated):
            shared.append(attr)
    if not shared:
        return prep, events
    prep = replace(prep, key=(*prep.key, *(a for a in shared if a not in prep.key)),
                   conjuncts=[c for c in prep.conjuncts if not (_equality(c.expr) and c.expr.left.attr in shared)])
    return prep, [e for e in events if all(e.get(a) is not None for a in shared)]


def _event_seq(p) -> bool:
    """Is ``p`` a ``SEQ`` of single events, none written ``NEXT`` (a negation of several events)?"""
    return isinstance(p, _Seq) and not any(p.strict) and all(isinstance(i, _Ev) for i in p.items)


def _negated_vars(neg) -> list[str]:
    """The variables of a negation of one event or of a ``SEQ`` of events."""
    return [neg.inner.var] if isinstance(neg.inner, _Ev) else [i.var for i in neg.inner.items]


def _equality(e) -> bool:
    """Is ``e`` ``u.attr = v.attr`` between two variables (``v[i].attr``: each event of a Kleene variable)?"""
    return (isinstance(e, BinOp) and e.op == "=" and isinstance(e.left, Attr) and isinstance(e.right, Attr)
            and e.left.attr == e.right.attr and e.left.var != e.right.var
            and e.left.index in (None, "cur") and e.right.index in (None, "cur"))


def _reads_whole(e, var: str) -> bool:
    """Does ``e`` read the sequence ``var`` beyond its events so far: its last (``v[v.len]``), all of it
    (``v[]``), or an event ``v[k]`` with ``k >= 2`` (absent from a shorter prefix)?"""
    return any(isinstance(n, Attr) and n.var == var
               and (n.index in ("last", "all") or (isinstance(n.index, int) and n.index >= 2)) for n in walk(e))
