"""A match query of the pattern language with ``AFTER MATCH SKIP`` as a ``MATCH_RECOGNIZE`` (one algebra).

``PATTERN SEQ(A a, B+ b[], C c) WHERE [id] AND b[i].x > a.x WITHIN 10 AFTER MATCH SKIP PAST LAST EVENT``
reports, per start event, the one match SQL:2016's preferment order prefers, then skips as the clause says
(docs/language.md, "Preferred matches and AFTER MATCH SKIP").  That is what ``MATCH_RECOGNIZE`` does over the
key's rows, so the query compiles to the statement IR (:class:`~sparkcep.ir.recognize.Recognize`) and runs on
its engine:

* the equivalence attributes are ``PARTITION BY``, the ts column is ``ORDER BY`` (ties: the other columns);
* each component is a SUBSET ``v`` of row pattern variables with the quantifier it has (``+ * ?``, greedy or
  reluctant); under ``partition_contiguity`` (and ``strict_contiguity`` without a key) the components follow
  each other row by row (``v__step``: ``PREV(ts) < ts``, so that ``ts`` strictly increases, LANGUAGE.md §1);
  under ``skip_till_any_match`` excluded fillers, reluctant (the earliest next event is preferred), stand before
  every event after the first: ``SEQ(A a, B+ b[])`` is ``a__first ({- _skipped*? -} (b__step | {- _skipped_step
  -} {- _skipped_later*? -} b__later))+``, where ``_skipped`` rows are at the previous event's time, ``b__step``
  is later than the row before it and ``b__later`` follows a skipped later row, so every DEFINE reads only its
  row and the one before it (the engine merges partial matches at the same position); under
  ``skip_till_next_match`` a skipped row is only one that could not be taken next (its DEFINE: NOT any component
  that may follow the match's last event so far, told by ``CLASSIFIER(_picked)``, would accept it);
* ``DEFINE v`` is the component's type test and the WHERE conjuncts whose latest variable (in pattern order) is
  ``v``, read with RUNNING semantics: ``v.x``
  and ``v[i].x`` are the current row, ``v[i-1].x`` is ``LAST(v.x, 1)`` (the conjunct then holds on ``v``'s
  first event), an earlier single variable is its row, an earlier Kleene variable's ``b[1]``, ``b[b.len]``,
  ``b[k]``, ``avg(b[].x)`` are ``FIRST``, ``LAST`` and aggregates over its rows;
* a negated event between two components, ``SEQ(A a, !(C n), B b)``, takes no event: under the skip_till_*
  strategies the later rows skipped before ``b``'s first event have variables of their own, ``_blocked_b_step``/
  ``_blocked_b_later`` for those it forbids (its type, constant equivalence tests and conditions) and
  ``_allowed_b_step``/``_allowed_b_later`` for the others, and ``b``'s first event requires
  ``FIRST(_blocked_b.ts) >= ts`` (every one at its time: strictly between is forbidden); those rows are the ones
  after the match's previous event, whatever it is (a loop's last, an optional one's or the one before it); under
  contiguity nothing lies between, it always holds;
* a component written ``NEXT B b`` (per-step contiguity) has no filler before its first event (``b__step``: the
  row right after the match's previous one); under ``skip_till_next_match`` it could take a skipped row only if
  that row is right after the match's last event (``PREV(CLASSIFIER()) = CLASSIFIER(_picked)``);
* ``SEQ(A a, NEXT !(C c), B b)`` (notNext): every DEFINE requires that its row, if right after ``a``'s event
  (``PREV(CLASSIFIER())`` one of ``a``'s names), is not a ``c`` (its type, constant equivalence tests, conditions);
* an OR of such patterns is the alternation of their row patterns (the left one preferred at a start, as
  SQL:2016's ``|``); the skipped rows are shared, their DEFINEs tell the alternative by ``CLASSIFIER(_picked)``;
* RETURN items (or every attribute of every variable) are the MEASURES, and the outer query selects them.

:func:`check_skip_query` refuses, with the reason, what this translation does not give the meaning of the
language to (``OR`` inside a ``SEQ``, repeated groups, negation at the start or end or before an optional component,
conditions that need the whole match, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot.expressions as sx

from sparkcep.compiler.analysis import ResolvedQuery, analyze
from sparkcep.compiler.recognize.analysis import pattern_variables
from sparkcep.ir import recognize as rx
from sparkcep.ir.ast import (
    AGGREGATES,
    SKIP_PAST_LAST_EVENT,
    SKIP_TO_FIRST,
    SKIP_TO_LAST,
    SKIP_TO_NEXT_EVENT,
    Attr,
    BinOp,
    EventPat,
    Func,
    Kleene,
    Literal,
    Not,
    Or,
    Query,
    Seq,
    Unary,
    and_all,
    map_nodes,
    walk,
)
from sparkcep.ir.errors import CEPSemanticError
from sparkcep.ir.naming import dedupe, default_column

__all__ = ["FILLER", "Component", "Negation", "branches", "check_skip_query", "components", "has_reluctant",
           "negations", "to_recognize"]

#: the row pattern variables of the events a skip_till_any/next_match query skips between two of its events:
#: first those at the previous event's time (``PREV(ts) = ts``), then the first later one, then any
FILLER = "_skipped"
FILLER_STEP = "_skipped_step"
FILLER_LATER = "_skipped_later"
#: the SUBSET of the three (the current row in skip_till_next_match's DEFINE of a skipped event)
FILLERS = "_skipped_all"
#: ``_blocked_<v>``: the SUBSET of ``_blocked_<v>_step`` and ``_blocked_<v>_later``, the skipped events before
#: component ``v`` (after the one before it) that a negation there forbids (allowed only at the time of ``v``'s
#: event, §4)
BLOCKED = "_blocked"
#: ``_allowed_<v>_step``/``_allowed_<v>_later``: the other later rows skipped before component ``v`` there (the
#: gap has its own skipped-row variables, so a loop or an optional component before it keeps the shared ones)
ALLOWED = "_allowed"
#: the SUBSET of every component's variables (``CLASSIFIER(_picked)``: the variable of the match's last event)
PICKED = "_picked"
#: a component ``b`` is a SUBSET of: ``b__first`` (the match's first event), ``b__step`` (an event after a time
#: step: later than the row before it), ``b__later`` (an event after skipped events one of which was later
#: than the match's previous event); ``ts`` strictly increasing (LANGUAGE.md §1) with DEFINEs that read no
#: other event of the match, so the engine keeps one partial match per program position
FIRST, STEP, LATER = "__first", "__step", "__later"

_SKIP_KINDS = {SKIP_PAST_LAST_EVENT: rx.SKIP_PAST_LAST_ROW, SKIP_TO_NEXT_EVENT: rx.SKIP_TO_NEXT_ROW,
               SKIP_TO_FIRST: rx.SKIP_TO_FIRST, SKIP_TO_LAST: rx.SKIP_TO_LAST}


@dataclass(frozen=True)
class Component:
    """One component of the pattern: its variable, event types, iterations ``lo..hi`` (hi None: unbounded),
    and whether more iterations are preferred (greedy) or fewer (reluctant)."""

    var: str
    types: tuple[str, ...]
    lo: int = 1
    hi: int | None = 1
    greedy: bool = True
    #: written ``NEXT T v``: its first event is the partition's row right after the match's previous event
    linked: bool = False

    @property
    def kleene(self) -> bool:
        return self.hi != 1


def has_reluctant(query: Query) -> bool:
    return any(isinstance(n, Kleene) and not n.greedy for n in walk(query.pattern))


def _refuse(message: str, node, source: str | None):
    raise CEPSemanticError(message, getattr(node, "span", None), source)


@dataclass(frozen=True)
class Negation:
    """A negated event ``!(T v)`` of the pattern, right before component ``gap`` (after component ``gap - 1``):
    no such event strictly between the two events (docs/language.md §4)."""

    var: str
    types: tuple[str, ...]
    gap: int
    #: ``NEXT !(T v)`` (notNext): the partition's row right after component ``gap - 1``'s event is no such event
    next: bool = False


def components(pattern, source: str | None = None) -> list[Component]:
    """The components of a (variable-named) pattern (of every OR alternative, in order), or the refusal of a
    shape AFTER MATCH SKIP does not take."""
    return [c for comps, _ in branches(pattern, source) for c in comps]


def negations(pattern, source: str | None = None) -> list[Negation]:
    """The negated events of a (variable-named) pattern AFTER MATCH SKIP takes (see :func:`components`)."""
    return [n for _, negs in branches(pattern, source) for n in negs]


def branches(pattern, source: str | None = None) -> list[tuple[list[Component], list[Negation]]]:
    """Per alternative of an OR of whole patterns (one for a pattern without OR): its components and negated
    events (``Negation.gap`` indexes the alternative's components)."""
    if isinstance(pattern, Or):
        return [_shape(alt, source) for alt in pattern.alternatives]
    return [_shape(pattern, source)]


def _flat(pattern, linked: bool = False) -> list[tuple]:
    """The items of a ``SEQ`` with those of a nested ``SEQ`` in its place (``SEQ(A a, SEQ(B b, C c))`` is
    ``SEQ(A a, B b, C c)``: concatenation is associative, in the preferment order too), each with whether it is
    written ``NEXT`` (a nested SEQ written ``NEXT``: its first item)."""
    if not isinstance(pattern, Seq):
        return [(pattern, linked)]
    strict = tuple(pattern.strict) or (False,) * len(pattern.items)
    out: list[tuple] = []
    for k, (item, step) in enumerate(zip(pattern.items, strict, strict=True)):
        out += _flat(item, step or (linked and k == 0))
    return out


def _shape(pattern, source: str | None) -> tuple[list[Component], list[Negation]]:
    flat = _flat(pattern)
    items = [item for item, _ in flat]
    out: list[Component] = []
    negs: list[Negation] = []
    pending: list = []
    for item, linked in flat:
        if isinstance(item, Not):
            if not isinstance(item.inner, EventPat):
                _refuse("with AFTER MATCH SKIP a negation must be of one event (!(T v)): a negated sequence, group "
                        "or OR is not supported yet", item, source)
            if not out:
                _refuse("with AFTER MATCH SKIP a negation before the first component is not supported: it reads "
                        "the events before the match's start event, where the attempt of the skip rule starts",
                        item, source)
            pending.append((item, linked))
            continue
        if isinstance(item, EventPat):
            out.append(Component(item.var, item.types, linked=linked))
        elif isinstance(item, Kleene) and isinstance(item.inner, EventPat):
            lo, hi = item.repeat
            out.append(Component(item.inner.var, item.inner.types, lo, hi, item.greedy, linked))
        else:
            what = {"Or": "an OR inside a SEQ", "Kleene": "a repeated group"}
            _refuse(f"AFTER MATCH SKIP does not support {what.get(type(item).__name__, 'this component')} yet: "
                    "the preferred match is defined for a SEQ of events, Kleene events (T, T+, T*, T?) and "
                    "negated events, and an OR of such patterns", item, source)
        for n, linked_neg in pending:
            after = out[-1]
            if after.lo == 0:
                _refuse(f"with AFTER MATCH SKIP a negation must be followed by a component that takes an event, "
                        f"not the optional {after.var}: the interval would end at whichever event comes next", n,
                        source)
            negs.append(Negation(n.inner.var, n.inner.types, len(out) - 1, linked_neg))
        pending = []
    if pending:
        _refuse("with AFTER MATCH SKIP a negation after the last component is not supported: it needs the events "
                "after the match up to the end of the window (postponed evaluation), past the end of the match "
                "the skip rule resumes after", pending[0][0], source)
    if out[0].lo == 0:
        _refuse("with AFTER MATCH SKIP the first component must take an event (a match starts at its first "
                "event, the start event of the skip rule)", items[0], source)
    return out, negs


def check_skip_query(query: Query, source: str | None = None, r: ResolvedQuery | None = None) -> ResolvedQuery:
    """Refuse, with the reason, a reluctant quantifier without AFTER MATCH SKIP and an AFTER MATCH SKIP query
    the translation to MATCH_RECOGNIZE does not give its meaning (see the module doc)."""
    r = r or analyze(query, source)
    if query.skip is None:
        if has_reluctant(query):
            node = next(n for n in walk(query.pattern) if isinstance(n, Kleene) and not n.greedy)
            _refuse("a reluctant quantifier (+?, *?, ??) only changes which match is preferred: add AFTER MATCH "
                    "SKIP ... (without it every match under the selection strategy is reported)", node, source)
        return r
    if r.mode != "match":
        _refuse("AFTER MATCH SKIP applies to match queries: a trend aggregate counts every trend", query.skip,
                source)
    alternatives = branches(r.query.pattern, source)
    comps = [c for b, _ in alternatives for c in b]
    strategy = r.strategy
    if query.strategy_vars is not None:
        _refuse("AFTER MATCH SKIP takes the strategy of USING, not of WHERE strategy(...) {...}", query.skip,
                source)
    if strategy == "strict_contiguity" and r.partition:
        _refuse("AFTER MATCH SKIP with strict_contiguity and an equivalence test is not supported: use "
                "partition_contiguity (consecutive events of the key)", query.skip, source)
    if any(item.var is not None for item in r.partition):
        _refuse("AFTER MATCH SKIP needs plain equivalence attributes ([attr]); [v.attr] is not supported",
                query.skip, source)
    names = [c.var for c in comps]
    if query.skip.var is not None and query.skip.var not in names:
        _refuse(f"AFTER MATCH SKIP {query.skip.kind} {query.skip.var}: no such variable (the pattern has "
                f"{', '.join(names)})", query.skip, source)
    for first in (b[0] for b, _ in alternatives):
        if query.skip.var == first.var and (query.skip.kind == SKIP_TO_FIRST or not first.kleene):
            _refuse(f"AFTER MATCH SKIP {query.skip.kind} {query.skip.var} would resume every match at its own "
                    "start event (an endless loop, an error in SQL:2016): skip to a variable that comes later in "
                    "the pattern", query.skip, source)
    for p in r.predicates:
        if p.kind == "equivalence":
            continue
        own = [(b, negs) for b, negs in alternatives if set(p.vars) <= {v.var for v in (*b, *negs)}]
        if not own:
            _refuse("with AFTER MATCH SKIP a condition relating variables of two OR alternatives is not supported "
                    "(a match binds one alternative)", p.expr, source)
        b, negs = own[0]
        order = {c.var: k for k, c in enumerate(b)}
        by_var = {c.var: c for c in b}
        if set(p.vars) & {n.var for n in negs}:
            _negation_define(p.expr, order, by_var, negs, source, strategy == "skip_till_next_match")
        else:
            _define(p.expr, order, by_var, source, strategy == "skip_till_next_match")
    return r


def _negation_define(e, order: dict[str, int], by_var: dict[str, Component], negs: list[Negation],
                     source: str | None, next_match: bool) -> Negation:
    """A WHERE conjunct reading a negated variable as a condition of the skipped event it forbids, or its
    refusal: it may read that event and earlier variables, as a running DEFINE of one event after them."""
    neg_of = {n.var: n for n in negs}
    read = [n.var for n in walk(e) if isinstance(n, Attr) and n.var is not None]
    negated = list(dict.fromkeys(v for v in read if v in neg_of))
    if len(negated) > 1:
        _refuse(f"with AFTER MATCH SKIP a condition relating the negated {negated[0]} and {negated[1]} is not "
                "supported (each negated event is looked for alone)", e, source)
    n = neg_of[negated[0]]
    later = [v for v in read if v in order and order[v] >= n.gap]
    if later:
        _refuse(f"with AFTER MATCH SKIP a condition of the negated {n.var} may read only the variables before it, "
                f"not {later[0]}: a skipped event is decided before the event after the negation is taken", e,
                source)
    _define(e, {**order, n.var: n.gap - 0.5}, {**by_var, n.var: Component(n.var, n.types)}, source, next_match)
    return n


def _latest(e, order: dict[str, int]) -> str | None:
    names = [n.var for n in walk(e) if isinstance(n, Attr) and n.var in order]
    return max(names, key=order.__getitem__) if names else None


def _define(e, order: dict[str, int], by_var: dict[str, Component], source: str | None, next_match: bool = False):
    """A WHERE conjunct as a DEFINE condition of its latest variable (RUNNING semantics), or its refusal:
    ``(variable, guard)``, ``guard`` True when the conjunct reads ``v[i-1]`` (it holds on ``v``'s first event)."""
    latest = _latest(e, order)
    if latest is None:
        return next(iter(order)), False
    comp = by_var[latest]
    others = {n.var for n in walk(e) if isinstance(n, Attr) and n.var in order} - {latest}
    if others and comp.lo == 0:
        _refuse(f"with AFTER MATCH SKIP a condition relating the optional variable {latest} to another one is "
                "not supported (when it is absent the condition is still evaluated, with NULL)", e, source)
    if next_match and any(by_var[v].lo == 0 for v in others):
        _refuse("with AFTER MATCH SKIP and skip_till_next_match a condition reading an optional variable and a "
                "later one is not supported", e, source)
    guard = False
    for n in walk(e):
        if isinstance(n, Func) and n.name in AGGREGATES:
            for a in n.args:
                if isinstance(a, Attr) and a.var == latest:
                    _refuse(f"with AFTER MATCH SKIP a condition on {latest}[] as a whole needs the finished "
                            f"sequence: it is not supported on the last variable it reads", e, source)
        if not isinstance(n, Attr) or n.var not in order:
            continue
        if n.index == "next" or n.index == "prefix":
            _refuse("with AFTER MATCH SKIP NEXT(v) and v[..i-1] are not supported", n, source)
        if n.var == latest and comp.kleene:
            if n.index == "last" or (isinstance(n.index, int) and n.index > 1):
                _refuse(f"with AFTER MATCH SKIP a condition on {n.var}[{n.var}.len] or {n.var}[k] needs the "
                        "finished sequence: it is not supported on the last variable it reads", n, source)
            if next_match and n.index == 1:
                _refuse(f"with AFTER MATCH SKIP and skip_till_next_match a condition on {n.var}[1] and "
                        f"{n.var}[i] is not supported", n, source)
            guard = guard or n.index == "prev"
        elif n.var != latest and by_var[n.var].kleene and n.index in (None, "cur", "prev"):
            _refuse(f"with AFTER MATCH SKIP a condition on every event of {n.var} and a later variable is not "
                    "supported", n, source)
    return latest, guard


# ------------------------------------------------------------------------------------------------ translation


def _expr(e, by_var: dict[str, Component], row: str | None = None):
    """An expression of the pattern language (WHERE or RETURN) in MATCH_RECOGNIZE's terms.  ``row``: the
    variable whose DEFINE this is, read by the filler's DEFINE instead (its current row is then the filler's,
    and ``row``'s rows so far are all before it)."""
    def fn(n):
        if isinstance(n, Func) and n.name in AGGREGATES and len(n.args) == 1 and isinstance(n.args[0], rx.Agg):
            return rx.Agg(n.name, n.args[0].arg, n.args[0].var, None, n.span)
        if not isinstance(n, Attr) or n.var not in by_var:
            return n
        plain = Attr(n.var, n.attr, span=n.span)
        if n.index == "all":
            return rx.Agg("count", plain, n.var, None, n.span)  # the aggregate around it names the function
        if n.index == "prev":
            return plain if n.var == row else rx.Nav("LAST", plain, 1, None, n.span)
        if n.index == 1 or (isinstance(n.index, int) and by_var[n.var].kleene):
            return rx.Nav("FIRST", plain, n.index - 1, None, n.span)
        return Attr(FILLERS, n.attr, span=n.span) if n.var == row else plain
    return map_nodes(e, fn)


def _types(var: str, types: tuple[str, ...], type_col: str):
    tests = [BinOp("=", Attr(var, type_col), Literal(t)) for t in types]
    out = tests[0]
    for t in tests[1:]:
        out = BinOp("OR", out, t)
    return out


def _conditions(r: ResolvedQuery, comps: list[Component], type_col: str, ts_col: str, source: str | None,
                as_filler: bool = False) -> dict[str, list]:
    """Each variable's DEFINE conjuncts; ``as_filler``: the same conditions on the current row taken as the
    variable's next event while it is mapped to the filler (skip_till_next_match's "could it be selected")."""
    order = {c.var: k for k, c in enumerate(comps)}
    by_var = {c.var: c for c in comps}
    next_match = r.strategy == "skip_till_next_match"
    negated = {v.name for v in r.variables if v.negated}
    own = set(order) | negated  # an OR alternative's: the conditions of its variables
    out: dict[str, list] = {}
    for c in comps:
        row = FILLERS if as_filler else c.var
        out[c.var] = [_types(row, c.types, type_col)]
        if as_filler:  # strictly after the previous event of the match (LANGUAGE.md §1); for a pick: its variable
            previous = rx.Nav("LAST", Attr(PICKED, ts_col), 0)
            out[c.var].append(BinOp("OR", Unary("IS NULL", previous), BinOp(">", Attr(row, ts_col), previous)))
    for p in r.predicates:
        if p.kind == "equivalence":
            for item in p.expr.items:
                if item.value is not None:
                    for c in comps:
                        out[c.var].append(BinOp("=", Attr(FILLERS if as_filler else c.var, item.attr), item.value))
            continue
        if set(p.vars) & negated or not set(p.vars) <= own:
            continue  # a condition of a negated event (_blocking), or of another OR alternative
        var, guard = _define(p.expr, order, by_var, source, next_match)
        e = _expr(p.expr, by_var, var if as_filler else None)
        if guard:
            count = rx.Agg("count", None, var)
            e = BinOp("OR", BinOp("<=", BinOp("+", count, Literal(1)) if as_filler else count, Literal(1)), e)
        out[var].append(e)
    return out


def _blocking(r: ResolvedQuery, comps: list[Component], negs: list[Negation], gap: int, type_col: str):
    """Is the current row (a skipped one: ``_skipped_all``) an event a negation before component ``gap`` forbids:
    its type, the constant equivalence tests and its conditions (on it and earlier variables)."""
    return _any([_negated(r, comps, n, FILLERS, type_col) for n in negs if n.gap == gap and not n.next])


def _negated(r: ResolvedQuery, comps: list[Component], n: Negation, row: str | None, type_col: str):
    """Is the current row (read as ``row``: ``_skipped_all`` or, None, whatever it is mapped to) an event the
    negation ``n`` forbids: its type, the constant equivalence tests and its conditions (on it and earlier
    variables)?  Never NULL."""
    by_var = {c.var: c for c in comps}
    conds = [_types(row, n.types, type_col)]
    for p in r.predicates:
        if p.kind == "equivalence":
            conds += [BinOp("=", Attr(row, i.attr), i.value) for i in p.expr.items if i.value is not None]
        elif n.var in p.vars:
            e = map_nodes(p.expr, lambda x, v=n.var: Attr(row, x.attr, span=x.span)
                          if isinstance(x, Attr) and x.var == v else x)
            conds.append(_expr(e, by_var))
    return Func("coalesce", (and_all(conds), Literal(False)))


def _any(exprs: list):
    out = exprs[0]
    for e in exprs[1:]:
        out = BinOp("OR", out, e)
    return out


def _selectable(r: ResolvedQuery, comps: list[Component], type_col: str, ts_col: str, source: str | None):
    """skip_till_next_match: could the current (skipped) row be taken next, by a component of ``comps`` that may
    follow the match's last event so far (its conditions decided on what is bound)?  None: never.  A skipped
    event is one that could not (NOT coalesce(..., FALSE) of every OR alternative's)."""
    conditions = _conditions(r, comps, type_col, ts_col, source, as_filler=True)
    can = {v: Func("coalesce", (and_all(conds), Literal(False))) for v, conds in conditions.items()}
    # a NEXT component takes only the row right after the match's last event: the one whose previous row it is
    enter = {c.var: Func("coalesce", (and_all([*conditions[c.var], _right_after()]), Literal(False)))
             if c.linked else can[c.var] for c in comps}
    after = []
    for k, c in enumerate(comps):
        count = rx.Agg("count", None, c.var)
        moves = []
        if c.kleene:
            moves.append(can[c.var] if c.hi is None else BinOp("AND", BinOp("<", count, Literal(c.hi)), can[c.var]))
        leave = []
        for j in range(k + 1, len(comps)):
            leave.append(enter[comps[j].var])
            if comps[j].lo >= 1:
                break
        if leave:
            either = leave[0]
            for m in leave[1:]:
                either = BinOp("OR", either, m)
            moves.append(either if c.lo <= 1 else BinOp("AND", BinOp(">=", count, Literal(c.lo)), either))
        if moves:
            any_move = moves[0] if len(moves) == 1 else BinOp("OR", moves[0], moves[1])
            last = rx.Classifier(PICKED)
            was = BinOp("OR", BinOp("=", last, Literal(c.var + STEP)), BinOp("=", last, Literal(c.var + LATER)))
            if k == 0:
                was = BinOp("OR", BinOp("=", last, Literal(c.var + FIRST)), was)
            after.append(BinOp("AND", was, any_move))
    return _any(after) if after else None


def _right_after():
    """``PREV(CLASSIFIER()) = CLASSIFIER(_picked)``: the current row is the one right after the match's last event
    (the row before it is that event, not a skipped one)."""
    return BinOp("=", rx.Nav("PREV", rx.Classifier(), 1), rx.Classifier(PICKED))


def _pick(c: Component, filler: bool, blocked: str | None = None) -> rx.RowPattern:
    """One event of ``c`` after the match's previous event: the next row if it is later (contiguity); else
    (skip_till_*) after the skipped rows at the previous event's time, the first later row, or, once a later
    row was skipped, any later row.  ``blocked``: a negation lies before ``c``, the later skipped rows it
    forbids are ``blocked``'s (``c``'s DEFINE requires them at its own time)."""
    step = rx.PVar(c.var + STEP)
    if not filler:
        return step
    ties = rx.PExclude(rx.PQuant(rx.PVar(FILLER), 0, None, greedy=False))
    first, more = rx.PVar(FILLER_STEP), rx.PVar(FILLER_LATER)
    if blocked is not None:  # the rows skipped in this gap: allowed, or forbidden by the negation
        allowed = ALLOWED + blocked[len(BLOCKED):]
        first = rx.PAlt((rx.PVar(allowed + "_step"), rx.PVar(blocked + "_step")))
        more = rx.PAlt((rx.PVar(allowed + "_later"), rx.PVar(blocked + "_later")))
    later = rx.PConcat((rx.PExclude(first), rx.PExclude(rx.PQuant(more, 0, None, greedy=False)),
                        rx.PVar(c.var + LATER)))
    return rx.PConcat((ties, rx.PAlt((step, later))))


def _row_pattern(comps: list[Component], filler: bool, gaps: frozenset[int] = frozenset()) -> rx.RowPattern:
    items: list[rx.RowPattern] = []
    for k, c in enumerate(comps):
        unit = _pick(c, filler, f"{BLOCKED}_{c.var}" if k in gaps else None)
        if k == 0 or c.linked:  # the first event; NEXT: the row right after the previous one (no skipped row)
            items.append(rx.PVar(c.var + (FIRST if k == 0 else STEP)))
            if c.hi != 1:
                hi = None if c.hi is None else c.hi - 1
                items.append(rx.PQuant(unit, c.lo - 1, hi, greedy=c.greedy))
        elif not c.kleene and c.lo == 1:
            items.append(unit)
        else:
            items.append(rx.PQuant(unit, c.lo, c.hi, greedy=c.greedy))
    return items[0] if len(items) == 1 else rx.PConcat(tuple(items))


def _later(ts_col: str, op: str):
    """``PREV(ts) <op> ts``: the current row is later than (``<``) or at the time of (``=``) the row before it."""
    return BinOp(op, rx.Nav("PREV", Attr(None, ts_col), 1), Attr(None, ts_col))


def to_recognize(query: Query, source: str | None = None, *, columns: list[str] | tuple[str, ...] = (),
                 type_col: str = "type", ts_col: str = "ts") -> rx.Recognize:
    """The MATCH_RECOGNIZE statement IR of an AFTER MATCH SKIP match query; ``columns`` are the input's columns
    (the default output, without RETURN, is every one of them for every variable)."""
    r = check_skip_query(query, source)
    comps = components(r.query.pattern, source)
    by_var = {c.var: c for c in comps}
    filler = r.strategy in ("skip_till_any_match", "skip_till_next_match")
    defines, subsets, patterns, selectable, forbidden, not_next = [], [], [], [], {}, []
    for alt, negs in branches(r.query.pattern, source):  # an OR of patterns: their alternation, left first
        # under the contiguity strategies no event lies between two of a match: a negation there always holds
        # nor before a NEXT component (its event is the row right after the previous one)
        gaps = sorted({n.gap for n in negs if not n.next and not alt[n.gap].linked}) if filler else []
        conditions = _conditions(r, alt, type_col, ts_col, source)
        names_of = {}
        for k, c in enumerate(alt):
            names = ([c.var + FIRST] if k == 0 else []) + ([c.var + STEP] if k or c.kleene else [])
            later = filler and (c.kleene or (k and not c.linked))  # an event after skipped rows
            names_of[c.var] = names + ([c.var + LATER] if later else [])
        for n in negs:  # NEXT !(C c): the row right after the previous event (whatever it is mapped to) is no c
            if n.next:
                previous = rx.Nav("PREV", rx.Classifier(), 1)
                right_after = _any([BinOp("=", previous, Literal(name)) for name in names_of[alt[n.gap - 1].var]])
                not_next.append(Func("coalesce", (BinOp("AND", right_after, _negated(r, alt, n, None, type_col)),
                                                  Literal(False))))
        for k in gaps:  # a negation before component k: the rows skipped before k's first event that it forbids
            forbidden[alt[k].var] = _blocking(r, alt, negs, k, type_col)
        for c in alt:
            cond = and_all(conditions[c.var])
            if c.var in forbidden:  # every forbidden row skipped since the event before is at the time of c's first
                first = rx.Nav("FIRST", Attr(f"{BLOCKED}_{c.var}", ts_col), 0)
                at_time = Func("coalesce", (BinOp(">=", first, Attr(None, ts_col)), Literal(True)))
                if c.kleene:
                    at_time = BinOp("OR", BinOp(">", rx.Agg("count", None, c.var), Literal(1)), at_time)
                cond = BinOp("AND", cond, at_time)
            for name in names_of[c.var]:
                defines.append((name, BinOp("AND", cond, _later(ts_col, "<")) if name.endswith(STEP) else cond))
            subsets.append((c.var, tuple(names_of[c.var])))
        patterns.append(_row_pattern(alt, filler, frozenset(gaps)))
        if r.strategy == "skip_till_next_match":
            selectable.append(_selectable(r, alt, type_col, ts_col, source))
    picked = tuple(n for _, names in subsets for n in names)
    if filler:
        selectable = [e for e in selectable if e is not None]
        skipped = Unary("NOT", Func("coalesce", (_any(selectable), Literal(False)))) if selectable else None
        ties, step = _later(ts_col, "="), _later(ts_col, "<")
        plain = skipped
        defines += [(FILLER, ties if skipped is None else BinOp("AND", ties, skipped)),
                    (FILLER_STEP, step if plain is None else BinOp("AND", step, plain))]
        if plain is not None:
            defines.append((FILLER_LATER, plain))
        blocked_names = []
        for v, cond in forbidden.items():
            ok = Unary("NOT", cond)  # never NULL (_negated)
            cond, ok = (cond, ok) if skipped is None else (BinOp("AND", cond, skipped), BinOp("AND", ok, skipped))
            name, allowed = f"{BLOCKED}_{v}", f"{ALLOWED}_{v}"
            defines += [(name + "_step", BinOp("AND", step, cond)), (name + "_later", cond),
                        (allowed + "_step", BinOp("AND", step, ok)), (allowed + "_later", ok)]
            subsets.append((name, (name + "_step", name + "_later")))
            blocked_names += [name + "_step", name + "_later", allowed + "_step", allowed + "_later"]
        subsets.append((FILLERS, (FILLER, FILLER_STEP, FILLER_LATER, *blocked_names)))
    if not_next:  # every row of the match, whichever variable it is mapped to
        nowhere = Unary("NOT", _any(not_next))
        defines = [(name, BinOp("AND", cond, nowhere)) for name, cond in defines]
    # the shared skipped-row variables only where a gap without negation uses them
    used = {name for p in patterns for name in pattern_variables(p)}
    defines = [(name, cond) for name, cond in defines if name in used]
    subsets = [(name, tuple(m for m in members if m in used)) for name, members in subsets]
    if r.returns is not None:
        measures = tuple(rx.Measure(_expr(i.expr, by_var), name)
                         for i, name in zip(r.returns, r.return_names, strict=True))
    else:
        names = dedupe([default_column(c.var, a) for c in comps for a in columns])
        values = [Attr(c.var, a) for c in comps for a in columns]
        measures = tuple(rx.Measure(v, n) for v, n in zip(values, names, strict=True))
    skip = query.skip
    outer = sx.select(*[sx.column(m.name, quoted=True) for m in measures]).from_("__sparkcep_matches")
    return rx.Recognize(
        source="events",
        pattern=patterns[0] if len(patterns) == 1 else rx.PAlt(tuple(patterns)),
        partition_by=tuple(dict.fromkeys(item.attr for item in r.partition)),
        order_by=(rx.OrderItem(ts_col),),
        measures=measures,
        skip=rx.Skip(_SKIP_KINDS[skip.kind], skip.var),
        subsets=((PICKED, picked), *subsets),
        defines=tuple(defines),
        within=query.within,
        outer_sql=outer.sql("spark"),
        text=source or "",
    )
