"""The reference oracle: a brute-force enumerator of LANGUAGE.md, slow on purpose (DESIGN.md principle 2).

Every engine is property-tested against this module on small random streams, so it implements the language
literally and does nothing clever: it enumerates every way of assigning events to the pattern's components,
then filters the candidates by predicates, window, negation and selection strategy.  Events are dicts with
``type``, ``ts`` (a number) and attributes.

Semantics implemented (LANGUAGE.md section numbers in brackets):

* **Sequences and trends** [§1, §2]: a match is a sequence of events with strictly increasing ``ts`` (two
  events with equal ``ts`` never follow each other), assigned to the positive components of the pattern:
  ``SEQ``, Kleene plus (nested too: GRETA ``(SEQ(A+, B))+``), ``P*`` = ``P+`` or nothing and ``P?`` = ``P``
  or nothing (GRETA §9), bounded ``P{n,m}`` = ``n`` to ``m`` iterations of ``P`` (Flink CEP's ``times``; its
  variables are lists), ``ANY(T1, ..., Tk)``, ``P1 OR P2``.  A match is reported as a *binding*
  ``{var: event}``, where a variable under a ``+``/``*`` is bound to the list of its events in time order;
  unnamed components get the variable named after their type (``_2``, ``_3`` ... when a type repeats), the
  convention of :mod:`sparkcep.compiler.analysis.resolve`.  Components of an untaken ``OR`` branch or an
  unmatched ``?``/``*`` are absent from the binding.  Two derivations of the same event assignment (e.g.
  ``(A+)+``) are one match: matches are sets of ``(event, variable)`` pairs, not parse trees.
* **Equivalence tests** [§2]: ``[attr]`` items (also ``[attr = 'c']``) are the partition key: matches and
  the negative events that can invalidate them are taken from one partition of events with equal values
  (an event lacking the attribute falls into the partition of ``None``).  ``[v.attr]`` is a predicate on the
  events of ``v`` only.
* **Predicates** [§2]: evaluated by :func:`sparkcep.runtime_udfs.expr.scalar.compile_expr` (SQL three-valued
  logic; the SASE lacking-attribute rule for ``ANY`` components).  A type name used as a variable
  (``A.attr``) means the only variable bound to that type; a bare attribute means the only variable's,
  when the pattern has exactly one.  A conjunct that reads a Kleene variable positionally (``v[i]``,
  ``v[i-1]``, ``NEXT(v)``, plain ``v.attr``, ``agg(v[..i-1])``) must hold at *every position where it is
  defined*: ``v[i-1]`` and ``v[..i-1]`` from the second event on, ``NEXT(v)`` up to the second to last.
  Positions run over each *run* of ``v``: maximal stretches of ``v``'s events adjacent in the match
  (GRETA edge predicates relate adjacent events of a trend, so in ``(SEQ(A+, B))+`` the last ``a`` of one
  iteration and the first of the next are not neighbours); inside such a conjunct ``v`` denotes the
  current run.  A conjunct whose variables are all absent from the match holds (it belongs to another
  ``OR`` branch); one that mixes present and absent variables is evaluated with the absent ones NULL (so
  gSPICE's ``(a.v < b.v ...) OR (d.v < e.v ...)`` works).
* **Window** [§3]: match mode ``last.ts - first.ts < w``.  Aggregate mode: windows ``[k·s, k·s + w)``.
* **Negation** [§4, SASE §2.2, GRETA §5]: a ``NOT N`` at some place of the pattern forbids a match of ``N``
  (itself enumerated by this module, nested negation included) lying strictly between the positive events
  of the match adjacent to that place and satisfying the *negation predicates* (the conjuncts whose
  innermost negated variable is in ``N``).  With no positive event before (start negation) the interval
  starts at ``last.ts - w`` (SASE: ``(t - T, t_21)``); with none after (end negation) it ends at
  ``first.ts + w`` (SASE/LANGUAGE ``(a.ts, a.ts + T)``).  In aggregate mode the candidates come from the
  window only, which makes these bounds the window's start and end (GRETA §5 cases 2 and 3).  Negation
  inside Kleene applies per iteration, as GRETA Definition 5 invalidates edges ``end(Pi) → start(Pj)``.
* **Selection strategies** [§5, SASE++ §2.1] over the positive events of a match: ``strict_contiguity`` —
  consecutive in the whole (ts-sorted) input; ``partition_contiguity`` — consecutive within the partition;
  ``skip_till_next_match`` — no event of the partition skipped in a gap between two selected events could
  have been selected at that point (it continues the pattern structurally after the events selected so
  far, within the window, and satisfies every conjunct already decidable: those whose variables are bound,
  except conjuncts on a whole Kleene sequence (``v[v.len]``, ``agg(v[])``) which may still change); events
  before the first and after the last selected event are not constrained; ``skip_till_any_match`` — all
  matches.  The SASE+ form ``skip_till_next_match(a, b[], c)`` applies the strategy to the whole pattern.
  A ``NEXT P`` item of a SEQ (per-step strict contiguity, Flink's ``next``) adds to any strategy: ``P``'s first
  pick is the partition's event right after the pick before it (none before it: no constraint); under
  skip_till_next_match an event that would break the link is not selectable there.  ``NEXT !(C c)`` (Flink's
  notNext): the partition's event right after the previous pick is not a match of ``C c`` (with its
  predicates).  A ``NEXT`` step inside a negated sub-pattern (``!(NEXT C c)`` = ``NOT SEQ(NEXT C c)``, ``NOT
  SEQ(B b, NEXT C c)``) links its first pick to the occurrence's pick before it, or, on the sub-pattern's first
  item, to the match's event right before the gap (none: no constraint); the occurrence still lies in the gap.
  ``NEXT !(C c)`` inside a negated sub-pattern (``NOT SEQ(B b, NEXT !(C c), D d)``) is part of the occurrence: an
  occurrence counts only if the partition's event right after its pick before the marker is no such ``C``;
  inside a repetition it is decided per iteration, after that iteration's pick.
  A stop condition ``T+ v[] UNTIL (cond)`` or ``(P)+ UNTIL (cond)`` (Flink's ``until``) adds to any strategy too:
  no *stop event* (an event of the partition of one of the types of the variable ``cond`` names, any event with
  ``UNTIL ANY``, for which ``cond``, read on it alone, is TRUE) lies between the loop's first and
  last events (of any of its variables), ends included; under skip_till_next_match a stop event, and an event
  after one since the loop's first, is not selectable for the loop.
* **Trend aggregates** [§2 RETURN, §6, GRETA Def. 2 and Theorem 9.1]: over exactly the skip_till_any_match
  matches lying wholly in each window, per GROUP BY group: ``COUNT(*)`` counts matches, ``COUNT(X)`` the
  events of ``X`` in all of them (``X`` a variable, else an event type), ``SUM/MIN/MAX(X.attr)`` their
  non-null attribute values, ``AVG = SUM / COUNT`` of those values.  GROUP BY attributes join the partition
  key; so do equivalence attributes named in RETURN (implicit groups).  A row is emitted per (window,
  group) with at least one match: like SQL GROUP BY, no rows for empty groups, no ``COUNT(*) = 0`` rows.

Time units: a duration without unit is in ``ts`` units; one with a unit is converted with
:meth:`Duration.in_ms` and then divided by ``ts_unit_ms`` (the length of one ``ts`` unit in milliseconds;
``None`` means ``ts`` is in milliseconds).

Example::

    >>> from sparkcep.ir.ast import Duration, EventPat, Query, Seq
    >>> q = Query(Seq((EventPat(("A",), "a"), EventPat(("B",), "b"))), Duration(10))
    >>> evs = [{"type": "A", "ts": 1}, {"type": "B", "ts": 1}, {"type": "B", "ts": 3}]
    >>> [(m["a"]["ts"], m["b"]["ts"]) for m in matches(q, evs)]
    [(1, 3)]
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sparkcep.ir.ast import (
    Attr,
    BinOp,
    Call,
    Duration,
    EquivItem,
    EquivTest,
    EventPat,
    Expr,
    Func,
    Kleene,
    Literal,
    Not,
    Or,
    Pattern,
    Query,
    Seq,
    Unary,
    conjuncts,
    walk,
)
from sparkcep.ir.kinds import typed
from sparkcep.ir.naming import attr_name, column_name, dedupe, default_column, implicit_namer
from sparkcep.oracles import preferment
from sparkcep.runtime_udfs.expr.scalar import LACKING, compile_expr, holds

__all__ = ["DEFAULT_STRATEGY", "OracleError", "is_trend_aggregate", "match_rows", "matches",
           "trend_aggregates"]

DEFAULT_STRATEGY = "skip_till_any_match"

Event = dict[str, Any]
Binding = dict[str, Any]


class OracleError(ValueError):
    """The query is outside what the oracle (and the language) gives a meaning to."""


# ----------------------------------------------------------------------------------------------- patterns
# The AST pattern is translated once into these nodes, with every component named and every negation
# given a scope number.  ``eq=False``: nodes are compared by identity (two ``NOT B`` are different places).


@dataclass(frozen=True, eq=False)
class _Ev:
    types: tuple[str, ...]
    var: str


@dataclass(frozen=True, eq=False)
class _Seq:
    items: tuple
    strict: tuple = ()  # item k written NEXT Pk (Seq.strict)


class _Link:
    """In a derivation, marks that the next pick must be the partition's event right after the previous pick
    (``NEXT P``, per-step strict contiguity)."""


_LINK = _Link()


@dataclass(frozen=True, eq=False)
class _NotNext:
    """In a derivation, ``NEXT !(C c)`` (Flink's notNext): the partition's event right after the previous pick
    must not be a match of ``neg``."""

    neg: _Neg


@dataclass(frozen=True, eq=False)
class _Or:
    alternatives: tuple


@dataclass(frozen=True, eq=False)
class _Rep:
    """``inner`` repeated ``lo`` to ``hi`` times (``hi`` None: unbounded): ``+`` (1, None), ``*`` (0, None),
    ``?`` (0, 1)."""

    inner: object
    lo: int
    hi: int | None
    greedy: bool = True  # only read by AFTER MATCH SKIP's preferment (oracles/preferment.py)


@dataclass(frozen=True, eq=False)
class _Neg:
    """``NOT inner``; ``scope`` numbers the negations it lies in, outermost first, itself last."""

    inner: object
    scope: tuple[int, ...]



@dataclass(frozen=True)
class _Var:
    types: tuple[str, ...]
    any_: bool
    is_list: bool  # under a + or * (within its own positive or negative sub-pattern)
    scope: tuple[int, ...]  # the negations it lies in, outermost first; () for positive components


@dataclass
class _Conjunct:
    """One conjunct of WHERE with what the oracle needs to know about it."""

    expr: Expr
    vars: frozenset[str]
    scope: tuple[int, ...]
    positional: dict[str, tuple[bool, bool]]  # Kleene var → (reads v[i-1] or v[..i-1], reads NEXT(v))
    grows: bool  # reads a whole Kleene sequence (v[v.len], agg(v[])): undecidable on a prefix
    fn: Any = field(repr=False)  # the compiled expression


@dataclass(frozen=True)
class _Stop:
    """A loop with a stop condition: the variables of its events (``loop``), and what a stop event is: an event
    of ``types`` (None: ``UNTIL ANY``, any event of the partition) for which ``fn``, read on it as ``var``, is
    TRUE."""

    loop: frozenset[str]
    var: str
    types: tuple[str, ...] | None
    fn: Any = field(repr=False)


def _loop_vars(node) -> frozenset[str]:
    """The variables of the positive events of a translated pattern node."""
    if isinstance(node, _Ev):
        return frozenset({node.var})
    if isinstance(node, _Seq):
        return frozenset().union(*map(_loop_vars, node.items))
    if isinstance(node, _Or):
        return frozenset().union(*map(_loop_vars, node.alternatives))
    if isinstance(node, _Rep):
        return _loop_vars(node.inner)
    return frozenset()


@dataclass
class _Prepared:
    root: object
    vars: dict[str, _Var]
    conjuncts: list[_Conjunct]
    key: tuple[str, ...]  # partition attributes
    key_values: dict[int, Any]  # position in key → required constant ([attr = 'c'])
    window: float
    strategy: str
    #: the loops with a stop condition ``UNTIL``
    stops: list[_Stop] = field(default_factory=list)

    def in_scope(self, scope: tuple[int, ...]) -> list[_Conjunct]:
        return [c for c in self.conjuncts if c.scope == scope]


def _in_ts_units(d: Duration, ts_unit_ms: float | None) -> float:
    if d.unit is None:
        return d.value
    ms = d.in_ms()
    return ms / ts_unit_ms if ts_unit_ms else ms


def _prepare(query: Query, ts_unit_ms: float | None, extra_key: Sequence[str] = ()) -> _Prepared:
    explicit = [p.var for p in walk(query.pattern) if isinstance(p, EventPat) and p.var is not None]
    if len(set(explicit)) != len(explicit):
        raise OracleError("a variable is bound twice")
    taken = set(explicit)
    variables: dict[str, _Var] = {}
    scopes = itertools.count()

    fresh = implicit_namer(taken)
    stops: list[_Stop] = []

    def convert(p: Pattern, in_list: bool, scope: tuple[int, ...]):
        if isinstance(p, EventPat):
            var = p.var if p.var is not None else fresh(p.types[0] if len(p.types) == 1 else "any")
            variables[var] = _Var(p.types, p.any_ or len(p.types) > 1, in_list, scope)
            return _Ev(p.types, var)
        if isinstance(p, Kleene):
            lo, hi = p.repeat  # P{n,m}: n to m iterations (its variables are lists, as under + and *)
            inner = convert(p.inner, in_list or p.op in ("+", "*"), scope)
            if p.until is not None:
                if scope or in_list or hi == 1:
                    raise OracleError("UNTIL stops a positive loop, not one inside a repetition or negation")
                loop = _loop_vars(inner)
                read = {n.var for n in walk(p.until) if isinstance(n, Attr)}
                var = inner.var if isinstance(inner, _Ev) else next(iter(read), None)
                if var not in loop or not read <= {var}:
                    raise OracleError("UNTIL reads one variable of its loop, as the candidate stop event")
                stops.append(_Stop(loop, var, None if p.until_any else variables[var].types,
                                   compile_expr(p.until)))  # a lacking attribute is NULL: no stop
            return _Rep(inner, lo, hi, p.greedy)
        if isinstance(p, Seq):
            return _Seq(tuple(convert(i, in_list, scope) for i in p.items), p.strict)
        if isinstance(p, Or):
            return _Or(tuple(convert(a, in_list, scope) for a in p.alternatives))
        if isinstance(p, Not):
            inner_scope = (*scope, next(scopes))
            return _Neg(convert(p.inner, False, inner_scope), inner_scope)
        raise OracleError(f"unknown pattern node {type(p).__name__}")

    root = convert(query.pattern, False, ())
    if isinstance(root, _Neg):
        raise OracleError("negation cannot be the whole pattern")
    any_vars = frozenset(v for v, info in variables.items() if info.any_)
    only = next(iter(variables)) if len(variables) == 1 else None

    key: list[str] = []
    key_values: dict[int, Any] = {}
    prepared: list[_Conjunct] = []
    for c in conjuncts(query.where):
        if isinstance(c, EquivTest):
            local = []
            for item in c.items:
                if item.var is None:
                    if item.attr not in key:
                        key.append(item.attr)
                    if item.value is not None:
                        key_values[key.index(item.attr)] = item.value.value
                else:
                    local.append(replace(item, var=_var_name(item.var, variables)))
            if local:
                prepared.append(_conjunct(EquivTest(tuple(local)), variables, any_vars))
        else:
            prepared.append(_conjunct(_resolve(c, variables, only), variables, any_vars))
    for attr in extra_key:
        if attr not in key:
            key.append(attr)
    return _Prepared(root, variables, prepared, tuple(key), key_values,
                     _in_ts_units(query.within, ts_unit_ms), query.strategy or DEFAULT_STRATEGY, stops)


def _var_name(name: str, variables: dict[str, _Var]) -> str:
    """A variable, or an event type bound by exactly one variable (GRETA writes ``A.attr``)."""
    if name in variables:
        return name
    candidates = [v for v, info in variables.items() if name in info.types]
    if len(candidates) != 1:
        raise OracleError(f"'{name}' is not a variable nor a type bound by exactly one variable")
    return candidates[0]


def _resolve(e: Expr, variables: dict[str, _Var], only: str | None) -> Expr:
    if isinstance(e, Attr):
        if e.var is None:
            return replace(e, var=only) if only is not None else e
        return replace(e, var=_var_name(e.var, variables))
    if isinstance(e, Unary):
        return replace(e, operand=_resolve(e.operand, variables, only))
    if isinstance(e, BinOp):
        return replace(e, left=_resolve(e.left, variables, only), right=_resolve(e.right, variables, only))
    if isinstance(e, (Func, Call)):
        return replace(e, args=tuple(_resolve(a, variables, only) for a in e.args))
    if isinstance(e, EquivTest):
        raise OracleError("an equivalence test must be a top-level conjunct of WHERE")
    return e


def _conjunct(e: Expr, variables: dict[str, _Var], any_vars: frozenset[str]) -> _Conjunct:
    refs = [n for n in walk(e) if isinstance(n, (Attr, EquivItem)) and n.var is not None]
    names = frozenset(n.var for n in refs)
    scope: tuple[int, ...] = ()
    for v in names:
        s = variables[v].scope
        if s[: len(scope)] == scope:
            scope = s
        elif scope[: len(s)] != s:
            raise OracleError("a predicate reads variables of two unrelated negations")
    positional: dict[str, tuple[bool, bool]] = {}
    grows = False
    for n in refs:
        if isinstance(n, Attr) and variables[n.var].is_list:
            if n.index in (None, "cur", "prev", "next", "prefix"):
                prev, nxt = positional.get(n.var, (False, False))
                positional[n.var] = (prev or n.index in ("prev", "prefix"), nxt or n.index == "next")
            elif n.index in ("last", "all"):
                grows = True
    return _Conjunct(e, names, scope, positional, grows, compile_expr(e, any_vars))


# ----------------------------------------------------------------------------------------------- derivation
# A derivation is a tuple of items in time order: ``(j, var)`` picks event ``j`` of the list for ``var``; a
# ``_Neg`` marks where a negated sub-pattern sits.  State: (next position, last ts, first ts).

_START = (0, -math.inf, None)


def _derive(node, evs: list[Event], state, w: float, partial: bool = False, prefer: bool = False) -> Iterator:
    """Yield ``(items, state, done)`` for every way ``node`` matches events of ``evs`` from ``state`` on.

    Picks have strictly increasing ``ts`` and stay within ``w`` of the first pick (the window, applied as
    early as possible).  With ``partial``, also yield derivations that stop inside ``node`` (``done``
    False): the prefixes skip_till_next_match needs.  The order is SQL:2016's preferment order with
    ``prefer`` (a greedy repetition yields another iteration before it stops), else reluctant everywhere: an
    event yields the earliest one first, an OR its left alternative first, a SEQ is lexicographic.
    """
    pos, last, first = state
    if isinstance(node, _Ev):
        if partial:
            yield (), state, False
        for j in range(pos, len(evs)):
            ts = evs[j]["ts"]
            if ts > last and evs[j]["type"] in node.types and (first is None or ts - first < w):
                yield ((j, node.var),), (j + 1, ts, ts if first is None else first), True
    elif isinstance(node, _Neg):
        yield (node,), state, True
    elif isinstance(node, _Seq):
        yield from _derive_seq(node.items, evs, state, w, partial, node.strict, prefer)
    elif isinstance(node, _Or):
        for alternative in node.alternatives:
            yield from _derive(alternative, evs, state, w, partial, prefer)
    else:
        yield from _derive_rep(node, 0, evs, state, w, partial, prefer)


def _derive_seq(items: tuple, evs, state, w, partial, strict: tuple = (), prefer: bool = False) -> Iterator:
    if not items:
        yield (), state, True
        return
    for head, st, done in _derive(items[0], evs, state, w, partial, prefer):
        if strict and strict[0]:
            head = (_NotNext(items[0]),) if isinstance(items[0], _Neg) else (_LINK, *head)
        if not done:
            yield head, st, False
            continue
        for tail, st2, done2 in _derive_seq(items[1:], evs, st, w, partial, strict[1:], prefer):
            yield head + tail, st2, done2


def _derive_rep(node: _Rep, count: int, evs, state, w, partial, prefer: bool = False) -> Iterator:
    stop = count >= node.lo
    if stop and not (prefer and node.greedy):
        yield (), state, True
    if node.hi is None or count < node.hi:
        for body, st, done in _derive(node.inner, evs, state, w, partial, prefer):
            if not done:
                yield body, st, False
            elif not _picks(body):
                # an iteration that selects no event (e.g. (B?)+) can only be the whole repetition
                if count == 0:
                    yield body, st, True
            else:
                for rest, st2, done2 in _derive_rep(node, count + 1, evs, st, w, partial, prefer):
                    yield body + rest, st2, done2
    if stop and prefer and node.greedy:  # greedy: another iteration ranks before stopping
        yield (), state, True


def _picks(items: tuple) -> tuple:
    return tuple(i for i in items if isinstance(i, tuple))


def _links_hold(items: tuple) -> bool:
    """Every ``NEXT`` step's first pick is the partition's event right after the pick before it (``j`` are
    positions in the partition's ts order; a step with no pick before it is not linked)."""
    before = None
    linked = False
    for i in items:
        if i is _LINK:
            linked = True
        elif isinstance(i, tuple):
            if linked and before is not None and i[0] != before + 1:
                return False
            before, linked = i[0], False
    return True


def _bind(prep: _Prepared, evs: list[Event], picks: tuple) -> tuple[Binding, dict[str, list[list[Event]]]]:
    """The binding of ``picks``, and each Kleene variable's runs (maximal stretches adjacent in the match)."""
    binding: Binding = {}
    runs: dict[str, list[list[Event]]] = {}
    previous = None
    for j, var in picks:
        if prep.vars[var].is_list:
            binding.setdefault(var, []).append(evs[j])
            if var != previous:
                runs.setdefault(var, []).append([])
            runs[var][-1].append(evs[j])
        else:
            binding[var] = evs[j]
        previous = var
    return binding, runs


def _conjunct_holds(c: _Conjunct, binding: Binding, runs: dict[str, list[list[Event]]]) -> bool:
    if c.vars and not any(v in binding for v in c.vars):
        return True  # a predicate on another OR branch or an unmatched optional component
    if not c.positional:
        return holds(c.fn(binding))
    if any(v not in binding for v in c.positional):
        return True  # an absent Kleene variable has no position to quantify over
    choices = []
    for v, (prev, nxt) in c.positional.items():
        choices.append([(v, run, i) for run in runs[v] for i in range(len(run))
                        if not (prev and i == 0) and not (nxt and i == len(run) - 1)])
    for combination in itertools.product(*choices):
        b = dict(binding)
        cur = {}
        for v, run, i in combination:
            b[v] = run
            cur[v] = i
        if not holds(c.fn(b, cur)):
            return False
    return True


# ----------------------------------------------------------------------------------------------- matching


@dataclass
class _Match:
    binding: Binding
    order: tuple  # global input positions of the picks, then variables: a canonical sort key
    partition: tuple


def _partitions(prep: _Prepared, indexed: list[tuple[int, Event]]) -> Iterator[tuple[tuple, list]]:
    groups: dict[tuple, list[tuple[int, Event]]] = {}
    for g, e in indexed:
        groups.setdefault(tuple(e.get(a) for a in prep.key), []).append((g, e))
    for key, part in groups.items():
        if all(key[i] == value for i, value in prep.key_values.items()):
            yield key, part


def _sorted(events: Sequence[Event]) -> list[tuple[int, Event]]:
    """Events in ``ts`` order (stable: ties keep input order), with their position in that order."""
    return list(enumerate(sorted(events, key=lambda e: e["ts"])))


def _all_matches(prep: _Prepared, indexed: list[tuple[int, Event]], strategy: str) -> list[_Match]:
    out = []
    for key, part in _partitions(prep, indexed):
        evs = [e for _, e in part]
        verdicts: dict[tuple, bool] = {}  # picks → passed everything but negation
        valid: dict[tuple, Binding] = {}
        for items, _, _ in _derive(prep.root, evs, _START, prep.window):
            picks = _picks(items)
            if not picks or picks in valid:
                continue
            binding, runs = _bind(prep, evs, picks)
            if picks not in verdicts:
                verdicts[picks] = (all(_conjunct_holds(c, binding, runs) for c in prep.in_scope(()))
                                   and _strategy_holds(prep, strategy, part, picks))
            if (verdicts[picks] and _links_hold(items) and _until_holds(prep, evs, picks)
                    and _not_next_holds(prep, evs, items, binding, runs)
                    and _negations_hold(prep, evs, items, binding, runs, None, None)):
                valid[picks] = binding
        for picks, binding in valid.items():
            order = (tuple(part[j][0] for j, _ in picks), tuple(v for _, v in picks))
            out.append(_Match(binding, order, key))
    out.sort(key=lambda m: m.order)
    return out


def _stops(stop: _Stop, ev: Event) -> bool:
    """Is ``ev`` a stop event of the loop ``stop`` (of its types, or any with ``UNTIL ANY``, satisfying its
    condition)?"""
    return (stop.types is None or ev["type"] in stop.types) and holds(stop.fn({stop.var: [ev]}, {stop.var: 0}))


def _until_holds(prep: _Prepared, evs: list[Event], picks: tuple) -> bool:
    """No stop event of a loop with ``UNTIL`` lies between its first and last events (of any of its variables),
    ends included: the loop takes no stop event and none after one."""
    for stop in prep.stops:
        taken = [j for j, v in picks if v in stop.loop]
        if taken and any(_stops(stop, evs[g]) for g in range(taken[0], taken[-1] + 1)):
            return False
    return True


def _strategy_holds(prep: _Prepared, strategy: str, part: list[tuple[int, Event]], picks: tuple) -> bool:
    local = [j for j, _ in picks]
    if strategy == "skip_till_any_match":
        return True
    if strategy == "strict_contiguity":
        positions = [part[j][0] for j in local]
        return all(b == a + 1 for a, b in zip(positions, positions[1:], strict=False))
    if strategy == "partition_contiguity":
        return all(b == a + 1 for a, b in zip(local, local[1:], strict=False))
    if strategy == "skip_till_next_match":
        evs = [e for _, e in part]
        return not any(_selectable(prep, evs, picks[: k + 1], g)
                       for k in range(len(picks) - 1) for g in range(local[k] + 1, local[k + 1]))
    raise OracleError(f"unknown selection strategy {strategy}")


def _not_next_holds(prep: _Prepared, evs: list[Event], items: tuple, binding: Binding, runs) -> bool:
    """No ``NEXT !(C c)`` of the derivation has a ``C`` (satisfying its predicates) as the partition's event right
    after the pick before it."""
    before = None
    for i in items:
        if isinstance(i, tuple):
            before = i[0]
        elif isinstance(i, _NotNext) and before is not None and before + 1 < len(evs):
            if _occurs(prep, i.neg, [evs[before + 1]], -math.inf, math.inf, binding, runs):
                return False
    return True


def _selectable(prep: _Prepared, evs: list[Event], prefix: tuple, g: int) -> bool:
    """Could event ``g`` be selected right after the events ``prefix`` (skip_till_next_match)?"""
    chosen = [evs[j] for j, _ in prefix] + [evs[g]]
    for items, _, _ in _derive(prep.root, chosen, _START, prep.window, partial=True):
        picks = _picks(items)
        if len(picks) != len(chosen) or any(p[1] != q[1] for p, q in zip(picks, prefix, strict=False)):
            continue
        last = max(k for k, i in enumerate(items) if isinstance(i, tuple))
        if last and items[last - 1] is _LINK and g != prefix[-1][0] + 1:
            continue  # a NEXT step: only the event right after the prefix's last one could be selected
        var = picks[-1][1]
        if any(var in stop.loop and any(_stops(stop, evs[h]) for h in range(
                next((prefix[k][0] for k, (_, v) in enumerate(picks[:-1]) if v in stop.loop), g), g + 1))
               for stop in prep.stops):
            continue  # a loop with UNTIL takes no stop event, and none after one
        binding, runs = _bind(prep, chosen, picks)
        if all(_conjunct_holds(c, binding, runs) for c in prep.in_scope(())
               if c.vars <= binding.keys() and not c.grows):
            return True
    return False


def _negations_hold(prep: _Prepared, evs: list[Event], items: tuple, binding: Binding, runs,
                    lo: float | None, hi: float | None, outer_pick: int | None = None) -> bool:
    """No negated sub-pattern of the derivation ``items`` occurs where it is forbidden (see module doc).

    ``lo``/``hi`` bound the intervals at the edges; None: the window around the positive events.
    ``outer_pick``: the position in ``evs`` of the event right before ``lo`` that ``items`` continue (a negation
    inside a negation with no pick before it links a ``NEXT`` step to that one); may be -1 (just before
    ``evs``)."""
    items = tuple(i for i in items if isinstance(i, (tuple, _Neg)))
    times = [None if isinstance(i, _Neg) else evs[i[0]]["ts"] for i in items]
    picked = [t for t in times if t is not None]
    for k, item in enumerate(items):
        if not isinstance(item, _Neg):
            continue
        before = [t for t in times[:k] if t is not None]
        after = [t for t in times[k + 1:] if t is not None]
        start = before[-1] if before else (lo if lo is not None else picked[-1] - prep.window)
        end = after[0] if after else (hi if hi is not None else picked[0] + prep.window)
        pick = next((i[0] for i in reversed(items[:k]) if isinstance(i, tuple)), outer_pick)
        if _occurs(prep, item, evs, start, end, binding, runs, pick):
            return False
    return True


def _occurs(prep: _Prepared, neg: _Neg, evs: list[Event], lo: float, hi: float, outer: Binding,
            outer_runs, before: int | None = None) -> bool:
    """Is there a match of ``neg``'s sub-pattern strictly inside ``(lo, hi)`` satisfying its predicates?

    ``before``: the position in ``evs`` (ts order, so ``inside`` is a slice of it) of the match's event right
    before the gap, to which a ``NEXT`` on the sub-pattern's first item links (None: no event before, no link)."""
    offset = next((k for k, e in enumerate(evs) if lo < e["ts"]), len(evs))
    inside = [e for e in evs if lo < e["ts"] < hi]
    local = None if before is None else before - offset  # may be -1: the event right before the slice
    for items, _, _ in _derive(neg.inner, inside, _START, math.inf):
        picks = _picks(items)
        if not picks:
            continue
        if not _links_hold(items if local is None else ((local, None), *items)):
            continue  # a NEXT step inside the negation whose pick is not the event right after the one before
        own, own_runs = _bind(prep, inside, picks)
        binding = {**outer, **own}
        runs = {**outer_runs, **own_runs}
        if (all(_conjunct_holds(c, binding, runs) for c in prep.in_scope(neg.scope))
                and _not_next_holds(prep, inside, items, binding, runs)
                and _negations_hold(prep, inside, items, binding, runs, lo, hi, local)):
            return True
    return False


def _reported(prep: _Prepared, query: Query, indexed: list[tuple[int, Event]]) -> list[_Match]:
    """The matches of the strategy; with AFTER MATCH SKIP only the preferred ones the skip rule reaches
    (:mod:`sparkcep.oracles.preferment`): at a start row, the first derivation of the pattern in SQL:2016's
    preferment order (``_derive(..., prefer=True)``) that is a match of the strategy."""
    found = _all_matches(prep, indexed, prep.strategy)
    if query.skip is None:
        return found
    by_key: dict[tuple, list[_Match]] = {}
    for m in found:
        by_key.setdefault(m.partition, []).append(m)
    out = []
    for key, part in _partitions(prep, indexed):
        evs = [e for _, e in part]
        local = {g: i for i, (g, _) in enumerate(part)}
        candidates = {tuple((local[g], v) for g, v in zip(*m.order, strict=True)): m for m in by_key.get(key, ())}

        def first(s: int, options, evs=evs) -> tuple:
            for items, _, _ in _derive(prep.root, evs, (s, -math.inf, None), prep.window, prefer=True):
                picks = _picks(items)
                if picks in options:
                    return picks
            raise AssertionError("a candidate is a derivation")  # pragma: no cover

        out += preferment.select(query.skip.kind, query.skip.var, len(part), candidates, first)
    out.sort(key=lambda m: m.order)
    return out


# ----------------------------------------------------------------------------------------------- public API


def is_trend_aggregate(query: Query) -> bool:
    """True if RETURN holds a trend aggregate (``COUNT(*)``, ``COUNT(T)``, ``SUM(T.attr)``, ...), as opposed
    to per-match aggregates over a Kleene variable (``avg(b[].x)``)."""
    for item in query.returns or ():
        for node in walk(item.expr):
            if isinstance(node, Func) and (node.star or any(
                    isinstance(a, Attr) and a.index is None for a in node.args)):
                return True
    return False


def matches(query: Query, events: Sequence[Event], *, ts_unit_ms: float | None = None) -> list[Binding]:
    """Every match of the match query ``query`` over ``events`` under its selection strategy.

    A match is a binding ``{var: event}`` (``{var: [events]}`` for Kleene variables) of the positive
    components; matches are ordered by the input positions of their events.
    """
    prep = _prepare(query, ts_unit_ms)
    return [m.binding for m in _reported(prep, query, _sorted(events))]


def match_rows(query: Query, events: Sequence[Event], columns: Sequence[str] | None = None, *,
               ts_unit_ms: float | None = None, types: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One row per match (LANGUAGE.md §2 RETURN).

    With RETURN: its items, named by :func:`naming.column_name` (duplicates suffixed by
    :func:`naming.dedupe`).  Without: ``default_column(var, attr)`` for every positive component in pattern
    order and every attribute in ``columns`` (default: the union of the events' keys, first seen first); a
    Kleene variable contributes its last event's attributes (``v[v.len].attr``), an absent component and a
    lacking attribute None.  ``types``: the attributes' Spark column types, where known (a ``coalesce`` or
    ``CASE`` over columns of different types then has the type Spark gives it, :func:`sparkcep.ir.kinds.typed`).
    """
    if types:
        query = typed(query, types)
    if is_trend_aggregate(query):
        raise OracleError("a trend-aggregate query has no match rows: use trend_aggregates()")
    prep = _prepare(query, ts_unit_ms)
    found = _reported(prep, query, _sorted(events))
    if query.returns is not None:
        any_vars = frozenset(v for v, info in prep.vars.items() if info.any_)
        only = next(iter(prep.vars)) if len(prep.vars) == 1 else None
        names = dedupe([column_name(item, k) for k, item in enumerate(query.returns)])
        fns = [compile_expr(_resolve(item.expr, prep.vars, only), any_vars) for item in query.returns]
        return [{n: _value(fn(m.binding)) for n, fn in zip(names, fns, strict=True)} for m in found]
    if columns is None:
        columns = list(dict.fromkeys(k for e in events for k in e))
    positives = [v for v, info in prep.vars.items() if not info.scope]
    rows = []
    for m in found:
        row = {}
        for v in positives:
            bound = m.binding.get(v)
            event = bound[-1] if isinstance(bound, list) else bound
            for attr in columns:
                row[default_column(v, attr)] = None if event is None else event.get(attr)
        rows.append(row)
    return rows


def _value(v: Any) -> Any:
    """A result value: an attribute an ANY component's event lacks is NULL in the output."""
    return None if v is LACKING else v


def trend_aggregates(query: Query, events: Sequence[Event], *,
                     ts_unit_ms: float | None = None) -> list[dict[str, Any]]:
    """Trend aggregates per window and group (LANGUAGE.md §2, §3, §6; GRETA Definition 2, Theorem 9.1).

    For every window ``[k·s, k·s + w)`` holding an event (``s`` = SLIDE, default ``w``), the
    skip_till_any_match matches of the window's events are grouped by the GROUP BY attributes, and by the
    equivalence attributes RETURN names (``RETURN company, COUNT(*) ... WHERE [company]`` counts per
    company); each group with at least one match gives a row ``window_start, window_end, <group
    attributes>, <RETURN columns>`` in that order, windows ascending.  Counts are exact Python ints.
    """
    if not is_trend_aggregate(query):
        raise OracleError("trend_aggregates() needs COUNT(*), COUNT(T), SUM/MIN/MAX/AVG(T.attr) in RETURN")
    names = dedupe([column_name(item, k) for k, item in enumerate(query.returns)])
    group_by = list(query.group_by)
    allowed = {*_prepare(query, ts_unit_ms).key, *(g.attr for g in group_by if g.var is None)}
    for name, item in zip(names, query.returns, strict=True):
        e = item.expr
        if isinstance(e, Func):
            continue
        if not (isinstance(e, Attr) and e.var is None and e.attr in allowed):
            raise OracleError(f"RETURN {name}: a trend-aggregate query returns aggregates and GROUP BY "
                              "or equivalence attributes")
        if all(g.var is not None or g.attr != e.attr for g in group_by):
            group_by.append(e)
    group_names = [attr_name(g) for g in group_by]
    prep = _prepare(query, ts_unit_ms, extra_key=[g.attr for g in group_by if g.var is None])
    w = prep.window
    s = _in_ts_units(query.slide, ts_unit_ms) if query.slide is not None else w

    indexed = _sorted(events)
    windows = sorted({k for _, e in indexed
                      for k in range(math.floor((e["ts"] - w) / s) + 1, math.floor(e["ts"] / s) + 1)})
    rows = []
    for k in windows:
        start, end = k * s, k * s + w
        inside = [(g, e) for g, e in indexed if start <= e["ts"] < end]
        groups: dict[tuple, list[_Match]] = {}
        for m in _all_matches(prep, inside, DEFAULT_STRATEGY):
            groups.setdefault(_group_value(group_by, prep, m), []).append(m)
        for value in sorted(groups, key=_sort_key):
            row = {"window_start": start, "window_end": end, **dict(zip(group_names, value, strict=True))}
            for name, item in zip(names, query.returns, strict=True):
                if isinstance(item.expr, Func):
                    row[name] = _aggregate(item.expr, prep, groups[value])
                else:
                    row[name] = row[attr_name(item.expr)]
            if query.having is None or _having_holds(query.having, prep, groups[value], row):
                rows.append(row)
    return rows


def _having_holds(having: Expr, prep: _Prepared, found: list[_Match], row: dict[str, Any]) -> bool:
    """HAVING of one window and group, from its definition: each trend aggregate in it computed over the
    group's matches ``found`` (whether RETURN has it or not), each bare name the row's column of that name
    (a group attribute, ``window_start``/``window_end``, a RETURN name or alias)."""
    def value(n):
        if isinstance(n, Func):
            return Literal(_aggregate(n, prep, found))
        if isinstance(n, Attr) and n.var is None:
            if n.attr not in row:
                raise OracleError(f"HAVING: {n.attr} is no column of the trend row")
            return Literal(row[n.attr])
        if isinstance(n, Attr):
            raise OracleError(f"HAVING: {n.var}.{n.attr} is an attribute of one event")
        return n

    return holds(compile_expr(_map_top_down(having, value))({}))


def _map_top_down(node, fn):
    """``node`` with ``fn`` applied top-down: a node ``fn`` replaces is not entered (an aggregate's argument
    is not an expression of its own)."""
    new = fn(node)
    if new is not node or not dataclasses.is_dataclass(node):
        return new
    changes = {}
    for f in dataclasses.fields(node):
        v = getattr(node, f.name)
        if isinstance(v, tuple):
            changes[f.name] = tuple(_map_top_down(x, fn) if dataclasses.is_dataclass(x) else x for x in v)
        elif dataclasses.is_dataclass(v) and f.name != "span":
            changes[f.name] = _map_top_down(v, fn)
    return dataclasses.replace(node, **changes)


def _group_value(group_by: list[Attr], prep: _Prepared, m: _Match) -> tuple:
    """The group of a match: partition attributes, or ``v.attr`` of the first event of ``v``."""
    out = []
    for g in group_by:
        if g.var is None:
            out.append(m.partition[prep.key.index(g.attr)])
        else:
            bound = m.binding.get(_var_name(g.var, prep.vars))
            event = bound[0] if isinstance(bound, list) else bound
            out.append(None if event is None else event.get(g.attr))
    return tuple(out)


def _sort_key(value: tuple) -> tuple:
    return tuple((v is None, str(type(v)), v if v is not None else 0) for v in value)


def _aggregate(f: Func, prep: _Prepared, found: list[_Match]):
    """One trend aggregate over the matches ``found`` (GRETA Definition 2)."""
    if f.star:
        return len(found)
    if len(f.args) != 1 or not isinstance(f.args[0], Attr):
        raise OracleError(f"{f.name}() takes * or an event type/variable (attribute)")
    arg = f.args[0]
    if arg.var is None or arg.attr == "*":  # COUNT(A), as parsed or as resolved by analysis
        target, attr = (arg.attr if arg.var is None else arg.var), None
    else:
        target, attr = arg.var, arg.attr
    events = [e for m in found for e in _events_of(target, prep, m.binding)]
    if f.name == "count":
        return len(events) if attr is None else sum(1 for e in events if e.get(attr) is not None)
    values = [e[attr] for e in events if e.get(attr) is not None]
    if not values:
        return None
    if f.name == "sum":
        return sum(values)
    if f.name == "min":
        return min(values)
    if f.name == "max":
        return max(values)
    if f.name == "avg":
        return sum(values) / len(values)
    raise OracleError(f"unknown aggregate {f.name}()")


def _events_of(target: str, prep: _Prepared, binding: Binding) -> list[Event]:
    """The events of a match bound to variable ``target``, else those of event type ``target``."""
    if target in prep.vars:
        bound = binding.get(target)
        return [] if bound is None else bound if isinstance(bound, list) else [bound]
    out = []
    for bound in binding.values():
        out.extend(e for e in (bound if isinstance(bound, list) else [bound]) if e["type"] == target)
    return out

