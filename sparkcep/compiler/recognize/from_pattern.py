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
* a loop with a stop condition, ``B+ b[] UNTIL (b.x > 10)``: ``b``'s DEFINE takes no stop event, and the rows
  skipped between two of its events have variables of their own, ``_until_b``/``_until_b_step``/
  ``_until_b_later`` (as ``_skipped``/...), none of them a stop event (of ``b``'s types, any with ``UNTIL ANY``);
  the rows skipped before its first event are the shared ones (a stop there is allowed); under
  ``skip_till_next_match`` the rows skipped after its last event before the next component's first are
  ``_past_<c>_tie``/``_past_<c>_step``/``_past_<c>_later`` (the SUBSET ``_past_<c>``, :func:`_closing`), whose test of
  which rows may be skipped lets the loop take no other event once a stop of it is among them (``MAX`` of the stop
  test over ``_past_<c>``): the loop is closed (no event after a stop), so an event it would take may be skipped;
* ``SEQ(A a, NEXT !(C c), B b)`` (notNext): every DEFINE requires that its row, if right after ``a``'s event
  (``PREV(CLASSIFIER())`` one of ``a``'s names), is not a ``c`` (its type, constant equivalence tests, conditions);
* a repeated group of events ``(SEQ(B b, C c)){lo,hi}`` is the quantified concatenation of its events' picks
  (``(<b> <c>)+``); its variables are lists; with ``UNTIL`` the rows skipped after its first event are its own
  ``_until_b*`` (no stop event); an OR inside a SEQ is the alternation of its alternatives' picks, each with its
  own filler before its first event (the alternative is the move, ranked before the event); a negation before an
  optional component or an OR forbids rows before each component that may take the match's next event, the check
  of a later one holding when the match took an optional one in between (``count(q) > 0``);
* under skip_till_next_match the moves after a component's event (another iteration of its loop or group while the
  count allows, the components that may come next once it allows, :func:`_moves`) tell which rows may be skipped;
* an OR of such patterns is the alternation of their row patterns (the left one preferred at a start, as
  SQL:2016's ``|``); the skipped rows are shared, their DEFINEs tell the alternative by ``CLASSIFIER(_picked)``;
* a negated event at the start, ``SEQ(!(C n), A a, B b) WITHIN w`` (first and last components of one event):
  no ``C`` in ``(b.ts - w, a.ts)``; the statement reads no row before its match, so Spark
  counts per row the key's ``C`` events before its ``ts`` and those at or before its ``ts - w`` (two window
  columns; on a stream the engine counts them, :class:`~sparkcep.ir.recognize.WindowCount`) and ``b``'s DEFINE
  requires ``a``'s first count to be at most its own second one; under skip_till_next_match that check does not
  make an event unselectable (it only removes candidates); a negated event at the end, ``SEQ(A a, B b, !(C n))
  WITHIN w``, mirrors it: no ``C`` in ``(b.ts, a.ts + w)``, the key's ``C`` events after ``b``'s ``ts`` at most
  those at or after ``a``'s ``ts + w`` (on a stream the engine holds a candidate match until the watermark
  reaches ``a.ts + w``); conditions on ``n`` alone filter the counted events (on a stream the count's
  ``condition``), and an equality with the component next to it (``n.x = a.x``) makes the column the ``ts`` of
  the key's latest such ``C`` with ``a``'s ``x`` before ``a`` (at the end: the earliest after ``b``),
  :func:`_edge_conditions` (on a stream the engine finds it, a :class:`~sparkcep.ir.recognize.WindowCount` with
  ``pairs``); an ANY-bound negated event follows the lacking-attribute rule (:func:`_lacking_rule`,
  :func:`_nearest`);
* RETURN items (or every attribute of every variable) are the MEASURES, and the outer query selects them.

:func:`check_skip_query` refuses, with the reason, what this translation does not give the meaning of the
language to (a negation before an optional last component, groups of more than events, conditions that need
the whole match, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import sqlglot.expressions as sx

from sparkcep.compiler.analysis import ResolvedQuery, analyze
from sparkcep.compiler.analysis.predicates import Predicate
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
    Call,
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
from sparkcep.ir.outer import outer_sql as outer_text

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
#: ``_until_<v>``, ``_until_<v>_step``, ``_until_<v>_later``: the rows skipped between two events of a loop ``v``
#: with ``UNTIL`` (as ``_skipped``, ``_skipped_step``, ``_skipped_later``), none of them a stop event
UNTIL = "_until"
#: ``_past_<v>_tie``, ``_past_<v>_step``, ``_past_<v>_later`` (the SUBSET ``_past_<v>``): under skip_till_next_match the
#: rows skipped before component ``v``'s first event when a loop with ``UNTIL`` may come right before it (as
#: ``_skipped``, ...): their DEFINEs know whether a stop of that loop was skipped since its last event (it closes)
PAST = "_past"
#: the SUBSET of every component's variables (``CLASSIFIER(_picked)``: the variable of the match's last event)
PICKED = "_picked"
#: a component ``b`` is a SUBSET of: ``b__first`` (the match's first event), ``b__step`` (an event after a time
#: step: later than the row before it), ``b__later`` (an event after skipped events one of which was later
#: than the match's previous event); ``ts`` strictly increasing (LANGUAGE.md §1) with DEFINEs that read no
#: other event of the match, so the engine keeps one partial match per program position
FIRST, STEP, LATER = "__first", "__step", "__later"

#: the scalar functions the MATCH_RECOGNIZE engine evaluates (a WHERE condition runs there as a DEFINE)
_FUNCTIONS = ("abs", "if", "coalesce", "greatest", "least")

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
    #: ``T+ v[] UNTIL [ANY] (cond)``: the stop condition (read as ``v.attr`` on the candidate stop event) and
    #: whether any event of the partition (not only one of ``types``) may be a stop
    until: object = None
    until_any: bool = False
    #: an event of a repeated group (``(SEQ(B b, C c))+``): its variable is a list, as a loop's
    in_group: bool = False
    #: the components present or absent together with it (an OR alternative, a group that may be left out);
    #: None when it is absent only by its own quantifier
    together: object = None
    #: an event of a group with ``UNTIL``: the types of the variable its condition names (a stop is of them)
    stop_types: tuple[str, ...] | None = None

    @property
    def kleene(self) -> bool:
        return self.hi != 1 or self.in_group

    @property
    def absent(self) -> bool:
        """May a match leave it out (its own ``?``/``*``, an OR alternative, a group that may be left out)?"""
        return self.lo == 0 or self.together is not None


@dataclass(frozen=True)
class Group:
    """A repeated group of events ``(SEQ(B b, C c)){lo,hi}`` (greedy or reluctant), maybe written ``NEXT``."""

    items: tuple[Component, ...]
    lo: int
    hi: int | None
    greedy: bool = True
    linked: bool = False


@dataclass(frozen=True)
class Choice:
    """An OR inside a SEQ, ``B b OR SEQ(C c, D+ d[])``: its alternatives, each a sequence of components (the left
    one preferred, SQL:2016's ``|``)."""

    alternatives: tuple[tuple[Component, ...], ...]


def _leaves(node) -> list[Component]:
    if isinstance(node, Component):
        return [node]
    if isinstance(node, Group):
        return list(node.items)
    return [c for alt in node.alternatives for c in alt]


def has_reluctant(query: Query) -> bool:
    return any(isinstance(n, Kleene) and not n.greedy for n in walk(query.pattern))


def _refuse(message: str, node, source: str | None):
    raise CEPSemanticError(message, getattr(node, "span", None), source)


@dataclass(frozen=True)
class Negation:
    """A negated event ``!(T v)`` of the pattern, right before component ``gap`` (after the components before it):
    no such event strictly between the match's event before it and the one after it (docs/language.md §4)."""

    var: str
    types: tuple[str, ...]
    gap: int
    #: ``NEXT !(T v)`` (notNext): the partition's row right after the match's event before it is no such event
    next: bool = False
    #: the components that may take the match's next event after it, each with the optional components before it
    #: (``SEQ(A a, !(C n), B? q, D d)``: ``q``, and ``d`` when the match leaves ``q`` out); ``((gap, ()),)``
    #: when a component that takes an event follows it
    targets: tuple[tuple[int, tuple[str, ...]], ...] = ()


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
    return [(comps, negs) for _, comps, negs in trees(pattern, source)]


def trees(pattern, source: str | None = None) -> list[tuple[list, list[Component], list[Negation]]]:
    """As :func:`branches`, each alternative also as its sequence of nodes (:class:`Component`,
    :class:`Group`, :class:`Choice`), the shape of its row pattern."""
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


def _component(item, linked: bool, together=None, in_group: bool = False) -> Component | None:
    """An event or a loop of one event as a component (None: another pattern)."""
    if isinstance(item, EventPat):
        return Component(item.var, item.types, linked=linked, in_group=in_group, together=together)
    if isinstance(item, Kleene) and isinstance(item.inner, EventPat):
        lo, hi = item.repeat
        return Component(item.inner.var, item.inner.types, lo, hi, item.greedy, linked, item.until, item.until_any,
                         in_group, together if lo >= 1 else None)
    return None


def _group(item: Kleene, linked: bool, source: str | None, label: str) -> Group:
    lo, hi = item.repeat
    if hi == 1:
        _refuse("with AFTER MATCH SKIP a group taken at most once is a nested SEQ: write its items in its place",
                item, source)
    flat = _flat(item.inner, linked)
    stop_types = None
    if item.until is not None:  # a stop is an event of the types of the variable the condition names
        named = {n.var for n in walk(item.until) if isinstance(n, Attr)}
        stop_types = next((e.types for e, _ in flat if isinstance(e, EventPat) and e.var in named), ())
    items = []
    for k, (event, step) in enumerate(flat):
        if not isinstance(event, EventPat):
            _refuse("with AFTER MATCH SKIP a repeated group is a SEQ of events (T v): a loop, negation or OR "
                    "inside it is not supported yet", event, source)
        items.append(Component(event.var, event.types, linked=step and k > 0, until=item.until,
                               until_any=item.until_any, in_group=True, together=label if lo == 0 else None,
                               stop_types=stop_types))
    return Group(tuple(items), lo, hi, item.greedy, linked)


def _choice(item: Or, linked: bool, source: str | None, label: str) -> Choice:
    alternatives = []
    for j, alt in enumerate(item.alternatives):
        comps = []
        for k, (sub, step) in enumerate(_flat(alt, linked)):
            c = _component(sub, step, together=f"{label}.{j}")
            if c is None:
                _refuse("with AFTER MATCH SKIP an alternative of an OR inside a SEQ is a SEQ of events and Kleene "
                        "events (T v, T+ v[], T? v, ...): a negation, group or OR inside it is not supported yet",
                        sub, source)
            if k == 0 and c.lo == 0:
                _refuse(f"with AFTER MATCH SKIP an alternative of an OR must start with a component that takes an "
                        f"event, not the optional {c.var}", sub, source)
            comps.append(c)
        alternatives.append(tuple(comps))
    return Choice(tuple(alternatives))


def _shape(pattern, source: str | None) -> tuple[list, list[Component], list[Negation]]:
    flat = _flat(pattern)
    items = [item for item, _ in flat]
    tree: list = []
    out: list[Component] = []
    negs: list[Negation] = []
    pending: list = []
    for item, linked in flat:
        if isinstance(item, Not):
            if not isinstance(item.inner, EventPat):
                _refuse("with AFTER MATCH SKIP a negation must be of one event (!(T v)): a negated sequence, group "
                        "or OR is not supported yet", item, source)
            if not out:  # a leading negation: a check of the first and last events (:func:`_edges`)
                continue
            pending.append((item, linked, (), ()))
            continue
        node = _component(item, linked)
        if node is None and isinstance(item, Kleene):
            node = _group(item, linked, source, f"group{len(tree)}")
        elif node is None and isinstance(item, Or):
            node = _choice(item, linked, source, f"or{len(tree)}")
        elif node is None:
            _refuse("AFTER MATCH SKIP does not support this component: the preferred match is defined for a SEQ "
                    "of events, Kleene events, repeated groups of events, ORs of such sequences and negated "
                    "events", item, source)
        tree.append(node)
        leaves = _leaves(node)
        start = len(out)
        out += leaves
        # the negation's interval ends at the match's next event: this node's first (each alternative's for an
        # OR), or, when this node is optional and left out, a later one's
        firsts = [start + sum(map(len, node.alternatives[:j])) for j in range(len(node.alternatives))] \
            if isinstance(node, Choice) else [start]
        optional = not isinstance(node, Choice) and node.lo == 0
        still = []
        for n, linked_neg, targets, passed in pending:
            targets = (*targets, *((k, passed) for k in firsts))
            if optional:
                still.append((n, linked_neg, targets, (*passed, leaves[0].var)))
            else:
                negs.append(Negation(n.inner.var, n.inner.types, targets[0][0], linked_neg, targets))
        pending = still
    seen: dict[int, tuple[str, ...]] = {}
    for n, item in zip(negs, [i for i, _ in flat if isinstance(i, Not)], strict=False):
        for k, passed in n.targets:
            if seen.setdefault(k, passed) != passed:
                _refuse(f"with AFTER MATCH SKIP two negations before {out[k].var}, one of them before an optional "
                        f"component, are not supported: write them next to each other", item, source)
    if pending and not pending[0][2]:  # after a component that takes an event: at the end
        if len(pending) > 1:  # !(C c), !(D d)
            _refuse("with AFTER MATCH SKIP a negation at the end is supported alone, after a last component",
                    pending[0][0], source)
        pending = []  # a check of the first and last events (:func:`_edges`)
    if pending:
        _refuse("with AFTER MATCH SKIP a negation before an optional last component is not supported: when the "
                "match leaves it out the interval runs to the end of the window",
                pending[0][0], source)
    if not isinstance(tree[0], Choice) and tree[0].lo == 0:
        _refuse("with AFTER MATCH SKIP the first component must take an event (a match starts at its first "
                "event, the start event of the skip rule)", items[0], source)
    return tree, out, negs


def _edges(r: ResolvedQuery, source: str | None) -> tuple[EventPat | None, EventPat | None]:
    """The negated events at the start and at the end of the pattern, ``SEQ(!(C n), A a, B b, !(D m)) WITHIN w``
    (each None when absent); refuses what their translation does not cover.  The one at the start forbids a ``C``
    in ``(b.ts - w, a.ts)``, the one at the end a ``D`` in ``(b.ts, a.ts + w)`` (§4).  The statement cannot read
    rows outside its match, so Spark counts per row the partition's negated events on either side of its ``ts``
    (window functions, :func:`_window_columns`), and the last component's DEFINE compares the first's and its own
    counts (nothing in the interval); the skip rule is unchanged."""
    pattern = r.query.pattern
    flat = [] if isinstance(pattern, Or) else _flat(pattern)
    if isinstance(pattern, Or):
        for alt in pattern.alternatives:
            ends = _flat(alt)
            for k, where in ((0, "start"), (-1, "end")):
                if isinstance(ends[k][0], Not):
                    _refuse(f"with AFTER MATCH SKIP a negation at the {where} of an OR alternative is not supported "
                            "yet", ends[k][0], source)
        return None, None
    return _edge(r, flat, 0, source), _edge(r, flat, -1, source)


def _edge(r: ResolvedQuery, flat: list[tuple], k: int, source: str | None) -> EventPat | None:
    """The negated event at the start (``k`` 0) or the end (``k`` -1) of the flat pattern, or None."""
    item, linked = flat[k]
    if not isinstance(item, Not):
        return None
    where, side = ("start", "before a first") if k == 0 else ("end", "after a last")
    if not isinstance(item.inner, EventPat):
        _refuse("with AFTER MATCH SKIP a negation must be of one event (!(T v)): a negated sequence, group or OR "
                "is not supported yet", item, source)
    nxt = flat[1] if k == 0 else flat[-2]
    if isinstance(nxt[0], Not) or linked or (k == 0 and nxt[1]):
        _refuse(f"with AFTER MATCH SKIP a negation at the {where} is supported alone, {side} component, neither "
                "written NEXT", item, source)
    first, last = (_component(flat[1 if isinstance(flat[0][0], Not) else 0][0], False),
                   _component(flat[-2 if isinstance(flat[-1][0], Not) else -1][0], False))
    if first is None or last is None or first.kleene or last.kleene or first.absent or last.absent:
        span = ("from the last event's ts - WITHIN to the first event's ts" if k == 0 else
                "from the last event's ts to the first event's ts + WITHIN")
        _refuse(f"with AFTER MATCH SKIP a negation at the {where} needs a first and a last component of one event "
                f"each (T v: its interval runs {span})", item, source)
    if r.query.within.unit is not None:
        _refuse(f"with AFTER MATCH SKIP a negation at the {where} needs WITHIN in ts units (a bare number)",
                r.query.within, source)
    _edge_conditions(r, item.inner, first if k == 0 else last, where, source)
    return item.inner


def _edge_conditions(r: ResolvedQuery, neg: EventPat, near: Component, where: str, source: str | None
                     ) -> tuple[list, list[tuple[str, str]]]:
    """The conditions on the negated event ``neg`` at the start or the end: those reading it alone (``n.x >
    5``), and the equalities of one of its attributes with one of ``near``'s, the component next to it (the
    first at the start, the last at the end): ``(n's attribute, near's attribute)``; refuses any other.  Alone,
    they filter the events the window columns count; an equality makes Spark partition the negated events by
    their attribute and the others by ``near``'s, and find on ``near``'s row the latest negated event before it
    (at the start) or the earliest after it (at the end), :func:`_nearest_column`.  A constant equivalence test
    (``[x = 'c']``) needs nothing: it is a partition attribute of the windows."""
    local, pairs = [], []
    for p in r.predicates:
        if p.kind == "equivalence" or neg.var not in p.vars:
            continue
        e = p.expr
        sides = (e.left, e.right) if isinstance(e, BinOp) and e.op == "=" else ()
        attrs = [a for a in sides if isinstance(a, Attr) and a.index in (None, "cur")]
        if set(p.vars) == {neg.var}:
            local.append(e)
        elif len(attrs) == 2 and {a.var for a in attrs} == {neg.var, near.var}:
            own, other = attrs if attrs[0].var == neg.var else attrs[::-1]
            pairs.append((own.attr, other.attr))
        else:
            _refuse(f"with AFTER MATCH SKIP a condition on the negated {neg.var} at the {where} reads {neg.var} "
                    f"alone or is an equality of one of its attributes with one of {near.var}'s, the component "
                    f"next to it ({neg.var}.x = {near.var}.x): Spark looks for the negated events around each "
                    "event with window functions", e, source)
    if pairs and _any_bound(r, near.var):
        _refuse(f"with AFTER MATCH SKIP an equality relating the negated {neg.var} at the {where} to {near.var} needs "
                f"{near.var} of one type, not ANY-bound (an attribute {near.var} lacks would make the equality TRUE "
                "for every negated event, which the window columns do not find)",
                next(p.expr for p in r.predicates if neg.var in p.vars and near.var in p.vars), source)
    if pairs and set(near.types) & set(neg.types):
        _refuse(f"with AFTER MATCH SKIP an equality relating the negated {neg.var} at the {where} to {near.var} "
                f"needs {near.var} of other types than {neg.var} (a row of both would find itself)",
                next(p.expr for p in r.predicates if neg.var in p.vars and near.var in p.vars), source)
    return local, pairs


def _any_bound(r: ResolvedQuery, var: str) -> bool:
    """Is ``var`` bound to an ANY component (``ANY(C, D) v``, as the oracle decides): a predicate on an attribute
    its event lacks (NULL) is TRUE (SASE's lacking-attribute rule, LANGUAGE.md §2)."""
    return any(isinstance(n, EventPat) and n.var == var and (n.any_ or len(n.types) > 1)
               for n in walk(r.query.pattern))


_ARITHMETIC = frozenset("+-*/%")
_COMPARISONS = frozenset(("=", "!=", "<", "<=", ">", ">="))


def _lacking_rule(e, var: str):
    """The condition ``e`` on the ANY-bound ``var`` alone rewritten so that plain NULL semantics (Spark SQL, the
    engine's evaluator) give the evaluator's meaning of the lacking-attribute rule
    (``runtime_udfs/expr/scalar.py``, ``LACKING``): an attribute of ``var`` that is NULL is lacking, arithmetic on
    it stays lacking, a comparison with it is TRUE, NOT of it is TRUE, it is TRUE in an AND and FALSE in an OR and
    as the whole conjunct; a function or ``-`` of it is NULL (as SQL's)."""

    def lacking(n):  # the test that n's value is lacking, or None (never)
        if isinstance(n, Attr):
            return Unary("IS NULL", n) if n.var == var else None
        if isinstance(n, BinOp) and n.op in _ARITHMETIC:
            tests = [t for t in (lacking(n.left), lacking(n.right)) if t is not None]
            return tests[0] if len(tests) == 1 else BinOp("OR", *tests) if tests else None
        return None

    def boolean(n, lacking_is: bool):
        t, got = lacking(n), rewrite(n)
        if t is None:
            return got
        return BinOp("OR", t, got) if lacking_is else BinOp("AND", Unary("NOT", t), got)

    def rewrite(n):
        if isinstance(n, BinOp) and n.op in ("AND", "OR"):
            return replace(n, left=boolean(n.left, n.op == "AND"), right=boolean(n.right, n.op == "AND"))
        if isinstance(n, BinOp):
            got = replace(n, left=rewrite(n.left), right=rewrite(n.right))
            t = lacking(BinOp("+", n.left, n.right)) if n.op in _COMPARISONS else None
            return got if t is None else BinOp("OR", t, got)  # a comparison with a lacking value is TRUE
        if isinstance(n, Unary) and n.op == "NOT":
            t, got = lacking(n.operand), replace(n, operand=rewrite(n.operand))
            return got if t is None else BinOp("OR", t, got)
        if isinstance(n, Unary):
            return replace(n, operand=rewrite(n.operand))
        if isinstance(n, Call):
            return replace(n, args=tuple(rewrite(a) for a in n.args))
        return n

    return boolean(e, False)


def window_negation(query: Query, source: str | None = None) -> str | None:
    """Where this AFTER MATCH SKIP query has a negation the statement checks with window columns Spark computes
    over the partition's rows (a stream's engine counts them): ``"start"``, ``"end"``, ``"start and end"``, or
    None."""
    lead, trail = _edges(check_skip_query(query, source), source)
    return " and ".join(w for w, n in (("start", lead), ("end", trail)) if n is not None) or None


def _fresh(names: dict, taken: frozenset) -> str:
    k = len(names)
    while f"__sparkcep_f{k}" in taken or f"__sparkcep_f{k}" in names.values():
        k += 1
    return f"__sparkcep_f{k}"


def _counted(neg: EventPat, local: list, pairs: list[tuple[str, str]], type_col: str, columns, lacks: bool
             ) -> sx.Expr:
    """Is the row an event the negation ``neg`` forbids, as far as it alone tells: of its types, its conditions
    on it alone TRUE, the attributes it equates with another component's not NULL (Spark SQL); ``lacks``: ``neg``
    is ANY-bound, its conditions follow the lacking-attribute rule (:func:`_lacking_rule`), and an equated
    attribute may be NULL (lacking: the equality holds, :func:`_nearest`)."""
    from sparkcep.compiler.codegen.sql import to_sql_expr

    types = dict(columns) if isinstance(columns, dict) else None
    tests = [sx.column(type_col, quoted=True).isin(*[sx.Literal.string(t) for t in neg.types])]
    tests += [sx.func("coalesce", to_sql_expr(_lacking_rule(e, neg.var) if lacks else e, types=types), sx.false())
              for e in local]
    if not lacks:  # an ANY-bound event lacking an equated attribute is forbidden whatever the other's value
        tests += [_not_null(own) for own, _ in pairs]
    return sx.and_(*tests)


def _not_null(name: str) -> sx.Expr:
    return sx.Not(this=sx.paren(sx.column(name, quoted=True).is_(sx.null())))


def _nearest(r: ResolvedQuery, counted: sx.Expr, pairs: list[tuple[str, str]], ts_col: str, end: bool,
             lacks: bool) -> sx.Expr:
    """:func:`_nearest_column`; for an ANY-bound negated event (``lacks``), whose equality holds on an attribute it
    lacks (NULL) whatever the other's value: per set of its equated attributes it lacks, the nearest event lacking
    exactly those, its other attributes equal the row's (the set empty: :func:`_nearest_column`), the latest of
    them (``end``: the earliest; GREATEST/LEAST skip NULLs)."""
    if not lacks:
        return _nearest_column(r, counted, pairs, ts_col, end)
    columns = []
    for k in range(1 << len(pairs)):
        lacking = [sx.column(own, quoted=True).is_(sx.null()) for j, (own, _) in enumerate(pairs) if k >> j & 1]
        rest = [p for j, p in enumerate(pairs) if not k >> j & 1]
        test = sx.and_(counted.copy(), *lacking, *[_not_null(own) for own, _ in rest])
        columns.append(_nearest_column(r, test, rest, ts_col, end))
    return (sx.Least if end else sx.Greatest)(this=columns[0], expressions=columns[1:])


def _nearest_column(r: ResolvedQuery, counted: sx.Expr, pairs: list[tuple[str, str]], ts_col: str, end: bool
                    ) -> sx.Expr:
    """Per row, the ts of the partition's latest forbidden event strictly before its ``ts`` (``end``: the
    earliest strictly after), among those whose attributes equal the row's as ``pairs`` say (negated event's,
    row's): the window's partition takes the negated event's attribute on a forbidden row and the other's on
    any other row.  ``ROWS`` up to the row before (``end``: from the row after), the rows of one ts ordered
    with the forbidden ones last (first): none at the row's own ts is in the frame (the row itself is not one of
    them, :func:`_edge_conditions`)."""
    ts = sx.column(ts_col, quoted=True)
    keys = [sx.column(a, quoted=True) for a in dict.fromkeys(i.attr for i in r.partition)]
    keys += [sx.Case().when(counted.copy(), sx.column(own, quoted=True)).else_(sx.column(other, quoted=True))
             for own, other in pairs]
    flag = sx.Case().when(counted.copy(), sx.Literal.number(0 if end else 1)).else_(sx.Literal.number(1 if end else 0))
    spec = sx.WindowSpec(kind="ROWS", start=sx.Literal.number(1), start_side="FOLLOWING", end="UNBOUNDED",
                         end_side="FOLLOWING") if end else sx.WindowSpec(
        kind="ROWS", start="UNBOUNDED", start_side="PRECEDING", end=sx.Literal.number(1), end_side="PRECEDING")
    value = sx.Case().when(counted.copy(), ts.copy())
    return sx.Window(this=sx.Min(this=value) if end else sx.Max(this=value), partition_by=keys,
                     order=sx.Order(expressions=[sx.Ordered(this=ts.copy()), sx.Ordered(this=flag)]), spec=spec)


def _window_columns(r: ResolvedQuery, counted: sx.Expr, type_col: str, ts_col: str, end: bool = False
                    ) -> tuple[sx.Expr, sx.Expr]:
    """Per row, the number of the partition's events ``counted`` tells (a negation's, :func:`_counted`) before
    its ``ts`` and the number at or before its ``ts - w``; ``end``: after its ``ts``, and at or after its
    ``ts + w`` (Spark SQL window functions)."""
    count = sx.Count(this=sx.Case().when(counted, sx.Literal.number(1)))
    keys = [sx.column(a, quoted=True) for a in dict.fromkeys(i.attr for i in r.partition)]
    order = sx.Order(expressions=[sx.Ordered(this=sx.column(ts_col, quoted=True))])
    w = sx.Literal.number(r.query.within.value)

    def frame(start, start_side, stop, stop_side):
        return sx.Window(this=count.copy(), partition_by=[k.copy() for k in keys], order=order.copy(),
                         spec=sx.WindowSpec(kind="RANGE", start=start, start_side=start_side, end=stop,
                                            end_side=stop_side))

    same = sx.Window(this=count.copy(), partition_by=[*[k.copy() for k in keys], sx.column(ts_col, quoted=True)])
    if end:
        return (sx.Sub(this=frame("CURRENT ROW", None, "UNBOUNDED", "FOLLOWING"), expression=same),
                frame(w, "FOLLOWING", "UNBOUNDED", "FOLLOWING"))
    return (sx.Sub(this=frame("UNBOUNDED", "PRECEDING", "CURRENT ROW", None), expression=same),
            frame("UNBOUNDED", "PRECEDING", w, "PRECEDING"))


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
    edges = {n.var for n in _edges(r, source) if n is not None}
    for first in (b[0] for b, _ in alternatives):
        if query.skip.var == first.var and (query.skip.kind == SKIP_TO_FIRST or not first.kleene):
            _refuse(f"AFTER MATCH SKIP {query.skip.kind} {query.skip.var} would resume every match at its own "
                    "start event (an endless loop, an error in SQL:2016): skip to a variable that comes later in "
                    "the pattern", query.skip, source)
    for e in [p.expr for p in r.predicates if p.kind != "equivalence"] + [i.expr for i in r.returns or ()
                                                                          ] + _untils(r.query.pattern):
        for n in walk(_per_event(e, {})):
            if isinstance(n, Call) and (n.name not in _FUNCTIONS or n.type is not None):
                _refuse(f"with AFTER MATCH SKIP conditions and RETURN items run as MATCH_RECOGNIZE DEFINEs and "
                        f"MEASURES, which evaluate {', '.join(f'{f}()' for f in _FUNCTIONS)} and operators; "
                        f"another Spark SQL function such as {n.name}() is computed by Spark per event, so its "
                        f"arguments must read one event (one variable, one index)", n, source)
    for p in r.predicates:
        if p.kind == "equivalence" or set(p.vars) & edges:
            continue  # a negation at the start or the end: :func:`_edge_conditions`
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


def _event_key(n: Call):
    """The call with its variables erased: the same per-event column whichever variable reads it."""
    return map_nodes(n, lambda m: Attr(None, m.attr) if isinstance(m, Attr) else m)


def _per_event(e, names: dict, taken: frozenset = frozenset()):
    """``e`` with each call the MATCH_RECOGNIZE engine does not evaluate whose arguments read one event
    (attributes of one variable at one index, no aggregate) replaced by that event's column ``names[call]``
    (a fresh name added to ``names``, keyed by the call without its variable, none of ``taken``: the input's
    and the query's columns): Spark computes it per event before the engine runs (:func:`event_columns`).
    Top-down: the outermost such call is the column (``length(upper(b.s))`` one column, not a call over a
    column of ``upper``)."""

    def column(n):
        if isinstance(n, (Attr, Literal)):
            return n  # a leaf: nothing inside to replace
        if not (isinstance(n, Call) and (n.name not in _FUNCTIONS or n.type is not None)):
            return None  # look inside
        nodes = list(walk(n))
        attrs = {(m.var, m.index) for m in nodes if isinstance(m, Attr)}
        if (len(attrs) == 1 and next(iter(attrs))[0] is not None and next(iter(attrs))[1] != "all"
                and not any(isinstance(m, Func) for m in nodes)):
            var, index = next(iter(attrs))
            name = names.setdefault(_event_key(n), _fresh(names, taken))
            return Attr(var, name, index, span=n.span)
        return n  # over several events: kept, the check refuses it

    return map_nodes(e, lambda n: n, before=column)


def _with_event_columns(r: ResolvedQuery, columns=(), type_col: str = "type", ts_col: str = "ts"
                        ) -> tuple[ResolvedQuery, dict, tuple]:
    """``r`` reading its per-event calls as columns (:func:`_per_event`) and those columns' names, none of
    ``columns`` (the input's) nor of an attribute the query reads (a user column may be named ``__sparkcep_f0``);
    with a negation at the start or the end also its window columns (keyed by their Spark SQL trees) and the
    last component's condition on them (:func:`_edges`); and per such negation ``(end, neg, its window columns'
    names, its equalities with the component next to it, whether it is ANY-bound)``, which
    :func:`_window_counts` turns into the engine's counts of a stream."""
    names: dict = {}
    exprs = [p.expr for p in r.predicates] + [i.expr for i in r.returns or ()] + _untils(r.query.pattern)
    taken = frozenset(columns) | {n.attr for e in exprs for n in walk(e) if isinstance(n, Attr)}
    # an UNTIL condition reads the stop event alone: its calls are columns like a DEFINE's
    pattern = map_nodes(r.query.pattern, lambda n: replace(n, until=_per_event(n.until, names, taken))
                        if isinstance(n, Kleene) and n.until is not None else n)
    # a condition on an ANY-bound negated event at the start or the end alone follows the lacking-attribute rule:
    # rewritten first, so that a call in it (a column Spark adds, which a stream's engine reads) is of the rewrite
    lacking = {n.var for n in _edges(r, None) if n is not None and _any_bound(r, n.var)}
    predicates = tuple(p if p.kind == "equivalence" else replace(p, expr=_per_event(
        _lacking_rule(p.expr, p.vars[0]) if set(p.vars) <= lacking and len(p.vars) == 1 else p.expr, names, taken))
        for p in r.predicates)
    returns = None if r.returns is None else tuple(replace(i, expr=_per_event(i.expr, names, taken))
                                                   for i in r.returns)
    ends = (components(r.query.pattern)[0], components(r.query.pattern)[-1])
    first, last = (c.var for c in ends)
    edges = []
    for end, neg in enumerate(_edges(r, None)):
        if neg is None:
            continue
        local, pairs = _edge_conditions(r, neg, ends[end], "", None)
        lacks = _any_bound(r, neg.var)
        counted = _counted(neg, local, pairs, type_col, columns, lacks)
        if pairs:  # the latest before first.ts at most last.ts - w; at the end the earliest after last.ts at least
            # first.ts + w (or none)
            col = _nearest(r, counted, pairs, ts_col, bool(end), lacks)
            name = names.setdefault(("window", col.sql("spark")), _fresh(names, taken))
            w = Literal(r.query.within.value)
            at = Attr(first, name) if not end else Attr(last, name)
            bound = BinOp("-", Attr(last, ts_col), w) if not end else BinOp("+", Attr(first, ts_col), w)
            cond = BinOp("OR", Unary("IS NULL", at), BinOp(">=" if end else "<=", at, bound))
            predicates += (Predicate(cond, "negation", tuple(dict.fromkeys((first, last)))),)
            edges.append((end, neg, (name,), tuple(pairs), lacks))
            continue
        # none of its events in (last.ts - w, first.ts): count(< first.ts) <= count(<= last.ts - w);
        # at the end, none in (last.ts, first.ts + w): count(> last.ts) <= count(>= first.ts + w)
        near, far = _window_columns(r, counted, type_col, ts_col, bool(end))
        nn = names.setdefault(("window", near.sql("spark")), _fresh(names, taken))
        nf = names.setdefault(("window", far.sql("spark")), _fresh(names, taken))
        cond = BinOp("<=", Attr(last, nn), Attr(first, nf)) if end else BinOp("<=", Attr(first, nn), Attr(last, nf))
        predicates += (Predicate(cond, "negation", tuple(dict.fromkeys((first, last)))),)
        edges.append((end, neg, (nn, nf), (), lacks))
    return (replace(r, query=replace(r.query, pattern=pattern), predicates=predicates, returns=returns), names,
            tuple(edges))


def _untils(pattern) -> list:
    return [n.until for n in walk(pattern) if isinstance(n, Kleene) and n.until is not None]


def event_columns(query: Query, source: str | None = None, types: dict[str, str] | None = None,
                  type_col: str = "type", ts_col: str = "ts") -> list[tuple[str, str]]:
    """``(column, Spark SQL)`` of the per-event function calls of an AFTER MATCH SKIP query (Spark SQL
    functions the MATCH_RECOGNIZE engine does not evaluate, over one event's attributes): the columns Spark adds
    to the input before the engine runs, which :func:`to_recognize` reads instead of the calls."""
    from sparkcep.compiler.codegen.sql import to_sql_expr

    _, names, _ = _with_event_columns(check_skip_query(query, source), types or (), type_col, ts_col)
    return [(name, call[1] if isinstance(call, tuple) else to_sql_expr(call, types=types).sql(dialect="spark"))
            for call, name in names.items()]


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
    # variables that may be absent without ``latest`` (an OR alternative's and a group's are there together)
    apart = [v for v in others if by_var[v].absent and not (by_var[v].together is not None
                                                             and by_var[v].together == comp.together)]
    if comp.absent and any(by_var[v].together is None or by_var[v].together != comp.together for v in others):
        _refuse(f"with AFTER MATCH SKIP a condition relating the optional variable {latest} (or one of an OR "
                "alternative) to another one is not supported (when it is absent the condition is still "
                "evaluated, with NULL)", e, source)
    if next_match and apart:
        _refuse("with AFTER MATCH SKIP and skip_till_next_match a condition reading an optional variable (or one "
                "of an OR alternative) and a later one is not supported", e, source)
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
        if n.var == latest and comp.in_group and n.index not in (None, "cur"):
            _refuse(f"with AFTER MATCH SKIP a condition of the repeated group's {n.var} reads its current event "
                    f"({n.var}.x or {n.var}[i].x) and variables before the group: its iterations' events are not "
                    f"adjacent, {n.var}[i-1] and {n.var}[1] read the current one", n, source)
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
        if isinstance(n, Call):  # a scalar function the engine evaluates (check_skip_query refuses the others)
            return Func(n.name, n.args, span=n.span)
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
        if c.until is not None:  # the loop takes no stop event
            out[c.var].append(Unary("NOT", _stop(c, row, type_col)))
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
        if p.kind == "negation" and as_filler:
            continue  # a leading negation's check removes candidates: an event it fails could still be taken
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
    return _any([_negated(r, comps, n, FILLERS, type_col) for n in negs
                 if gap in dict(n.targets) and not n.next])


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


def _stop(c: Component, row: str | None, type_col: str):
    """Is the current row (read as ``row``; None: whatever it is mapped to) a stop event of the loop ``c``: of its
    types (any event with ``UNTIL ANY``) and its ``UNTIL`` condition TRUE (NULL is no stop)?  Never NULL."""
    cond = map_nodes(c.until, lambda x: Attr(row, x.attr, span=x.span) if isinstance(x, Attr) else x)
    types = c.types if c.stop_types is None else c.stop_types
    return Func("coalesce", (cond if c.until_any else BinOp("AND", _types(row, types, type_col), cond),
                             Literal(False)))


def _any(exprs: list):
    out = exprs[0]
    for e in exprs[1:]:
        out = BinOp("OR", out, e)
    return out


def _moves(tree: list, closed: dict | None = None) -> dict[str, list[tuple[object, list[Component]]]]:
    """Per component: the moves after one of its events, each ``(guard, targets)``: one of ``targets`` takes the
    next event, allowed when ``guard`` (on the counts so far; None: always) holds.  ``closed``: per loop with
    ``UNTIL`` (its first variable), when it is closed (no other iteration)."""
    out: dict[str, list[tuple[object, list[Component]]]] = {}

    def count(c: Component):
        return rx.Agg("count", None, c.var)

    def entering(nodes: list, i: int, cont: list[Component]) -> list[Component]:
        if i == len(nodes):
            return cont
        node = nodes[i]
        if isinstance(node, Choice):
            return [alt[0] for alt in node.alternatives]
        first = node if isinstance(node, Component) else node.items[0]
        return [first] + (entering(nodes, i + 1, cont) if node.lo == 0 else [])

    def visit(nodes: list, cont: list[Component]) -> None:
        for i, node in enumerate(nodes):
            rest = entering(nodes, i + 1, cont)
            if isinstance(node, Choice):
                for alt in node.alternatives:
                    visit(list(alt), rest)
                continue
            # a loop of one event, or the last event of a group's iteration: another iteration, or leave
            loop = node if isinstance(node, Component) else node.items[0]
            moves = []
            if node.hi != 1:
                guard = None if node.hi is None else BinOp("<", count(loop), Literal(node.hi))
                if closed and loop.var in closed:
                    shut = Unary("NOT", closed[loop.var])
                    guard = shut if guard is None else BinOp("AND", guard, shut)
                moves.append((guard, [loop]))
            moves.append((None if node.lo <= 1 else BinOp(">=", count(loop), Literal(node.lo)), rest))
            if isinstance(node, Group):
                for c, after in zip(node.items, node.items[1:], strict=False):
                    out[c.var] = [(None, [after])]
            out[(node if isinstance(node, Component) else node.items[-1]).var] = moves

    visit(tree, [])
    return out


def _selectable(r: ResolvedQuery, tree: list, comps: list[Component], names_of: dict[str, list[str]],
                type_col: str, ts_col: str, source: str | None, closed: dict | None = None):
    """skip_till_next_match: could the current (skipped) row be taken next, by a component of ``comps`` that may
    follow the match's last event so far (its conditions decided on what is bound)?  None: never.  A skipped
    event is one that could not (NOT coalesce(..., FALSE) of every OR alternative's)."""
    conditions = _conditions(r, comps, type_col, ts_col, source, as_filler=True)
    can = {v: Func("coalesce", (and_all(conds), Literal(False))) for v, conds in conditions.items()}
    # a NEXT component takes only the row right after the match's last event: the one whose previous row it is
    enter = {c.var: Func("coalesce", (and_all([*conditions[c.var], _right_after()]), Literal(False)))
             if c.linked else can[c.var] for c in comps}
    after = []
    for var, moves in _moves(tree, closed).items():
        # another iteration of a loop written NEXT follows the strategy (NEXT links its first event only)
        taken = [e if guard is None else BinOp("AND", guard, e)
                 for guard, e in ((g, _any([can[t.var] if t.var == var else enter[t.var] for t in targets]))
                                  for g, targets in moves if targets)]
        if taken:
            last = rx.Classifier(PICKED)
            was = _any([BinOp("=", last, Literal(name)) for name in names_of[var]])
            after.append(BinOp("AND", was, _any(taken)))
    return _any(after) if after else None


def _right_after():
    """``PREV(CLASSIFIER()) = CLASSIFIER(_picked)``: the current row is the one right after the match's last event
    (the row before it is that event, not a skipped one)."""
    return BinOp("=", rx.Nav("PREV", rx.Classifier(), 1), rx.Classifier(PICKED))


def _pick(c: Component, filler: bool, blocked: str | None = None, until: str | None = None, past: bool = False
          ) -> rx.RowPattern:
    """One event of ``c`` after the match's previous event: the next row if it is later (contiguity); else
    (skip_till_*) after the skipped rows at the previous event's time, the first later row, or, once a later
    row was skipped, any later row.  ``blocked``: a negation lies before ``c``, the later skipped rows it
    forbids are ``blocked``'s (``c``'s DEFINE requires them at its own time).  ``until``: an event of a loop
    with ``UNTIL`` after its first one, the skipped rows are ``_until_<until>``'s (no stop event among them).
    ``past``: a loop with ``UNTIL`` may come right before, the skipped rows are ``_past_<c>``'s (:func:`_closing`)."""
    step = rx.PVar(c.var + STEP)
    if not filler:
        return step
    own = f"{UNTIL}_{until}" if until else f"{PAST}_{c.var}" if past else None
    names = (f"{own}_tie" if past else own, f"{own}_step", f"{own}_later") if own else (
        FILLER, FILLER_STEP, FILLER_LATER)
    ties = rx.PExclude(rx.PQuant(rx.PVar(names[0]), 0, None, greedy=False))
    first, more = rx.PVar(names[1]), rx.PVar(names[2])
    if blocked is not None:  # the rows skipped in this gap: allowed, or forbidden by the negation
        allowed = ALLOWED + blocked[len(BLOCKED):]
        first = rx.PAlt((rx.PVar(allowed + "_step"), rx.PVar(blocked + "_step")))
        more = rx.PAlt((rx.PVar(allowed + "_later"), rx.PVar(blocked + "_later")))
    later = rx.PConcat((rx.PExclude(first), rx.PExclude(rx.PQuant(more, 0, None, greedy=False)),
                        rx.PVar(c.var + LATER)))
    return rx.PConcat((ties, rx.PAlt((step, later))))


def _concat(items: list) -> rx.RowPattern:
    return items[0] if len(items) == 1 else rx.PConcat(tuple(items))


def _loop(head: rx.RowPattern, again: rx.RowPattern, lo: int, hi: int | None, greedy: bool) -> rx.RowPattern:
    """``lo..hi`` iterations whose first is ``head`` and the others ``again``: ``(head again{lo-1,hi-1})``,
    optional when ``lo`` is 0 (the preferment order of ``X{lo,hi}``)."""
    loop = head if hi == 1 else rx.PConcat((head, rx.PQuant(again, max(lo - 1, 0), None if hi is None else hi - 1,
                                                            greedy=greedy)))
    return loop if lo >= 1 else rx.PQuant(loop, 0, 1, greedy=greedy)


def _component_pattern(c: Component, filler: bool, gaps: frozenset[str], first: bool,
                       pasts: frozenset[str] = frozenset()) -> rx.RowPattern:
    unit = _pick(c, filler, f"{BLOCKED}_{c.var}" if c.var in gaps else None, past=c.var in pasts)
    # the events of a loop with UNTIL after its first one: no stop event skipped before them
    again = _pick(c, filler, until=c.var) if c.until is not None else unit
    if first or c.linked:  # the first event; NEXT: the row right after the previous one (no skipped row)
        return _loop(rx.PVar(c.var + (FIRST if first else STEP)), again, c.lo, c.hi, c.greedy)
    if c.until is not None:  # (first, again{lo-1,hi-1}): the same preferment order
        return _loop(unit, again, c.lo, c.hi, c.greedy)
    return unit if c.lo == c.hi == 1 else rx.PQuant(unit, c.lo, c.hi, greedy=c.greedy)


def _group_pattern(g: Group, filler: bool, gaps: frozenset[str], first: bool, pasts: frozenset[str] = frozenset()
                   ) -> rx.RowPattern:
    # with UNTIL: the rows skipped after the group's first event are its own (no stop event among them)
    until = g.items[0].var if g.items[0].until is not None else None

    def body(head: bool) -> rx.RowPattern:
        out = []
        for j, c in enumerate(g.items):
            if j == 0 and head and (first or g.linked):
                out.append(rx.PVar(c.var + (FIRST if first else STEP)))
            elif c.linked:
                out.append(rx.PVar(c.var + STEP))
            elif j == 0 and head:
                out.append(_pick(c, filler, f"{BLOCKED}_{c.var}" if c.var in gaps else None, past=c.var in pasts))
            else:
                # a later iteration (checked only before the first one, by count) or event of the iteration
                blocked = c.var in gaps and j == 0 and until is None
                out.append(_pick(c, filler, f"{BLOCKED}_{c.var}" if blocked else None, until,
                                 j == 0 and until is None and c.var in pasts))
        return _concat(out)
    if first or g.linked or until:
        return _loop(body(True), body(False), g.lo, g.hi, g.greedy)
    return rx.PQuant(body(False), g.lo, g.hi, greedy=g.greedy)


def _row_pattern(tree: list, filler: bool, gaps: frozenset[str] = frozenset(), pasts: frozenset[str] = frozenset()
                 ) -> rx.RowPattern:
    """The row pattern of one alternative's nodes; ``gaps``: the components a negation stands before; ``pasts``:
    those a loop with ``UNTIL`` may stand right before (skip_till_next_match, :func:`_closing`)."""
    items: list[rx.RowPattern] = []
    for k, node in enumerate(tree):
        if isinstance(node, Component):
            items.append(_component_pattern(node, filler, gaps, k == 0, pasts))
        elif isinstance(node, Group):
            items.append(_group_pattern(node, filler, gaps, k == 0, pasts))
        else:  # an OR inside the SEQ: the alternation of its alternatives' sequences, the left one preferred
            items.append(rx.PAlt(tuple(_concat([_component_pattern(c, filler, gaps, k == 0 and j == 0, pasts)
                                                for j, c in enumerate(alt)]) for alt in node.alternatives)))
    return _concat(items)


def _closing(tree: list) -> dict[str, list[Component]]:
    """skip_till_next_match: per component, the loops with ``UNTIL`` (their first component) whose last event may
    be the match's last one before its first event.  A stop of such a loop skipped after its last event closes it
    (no event after a stop, LANGUAGE.md): an event of the loop after it may then be skipped, which the skipped rows'
    DEFINEs tell by the stops among the rows skipped since (``_past_<v>``)."""
    moves = _moves(tree)
    out: dict[str, list[Component]] = {}
    nodes = [n for node in tree for n in ([c for alt in node.alternatives for c in alt]
                                          if isinstance(node, Choice) else [node])]
    for node in nodes:
        first = node if isinstance(node, Component) else node.items[0]
        if first.until is None or node.hi == 1:
            continue
        last = node if isinstance(node, Component) else node.items[-1]
        for _, targets in moves[last.var]:
            for t in targets:
                if t is not first and not t.linked:
                    out.setdefault(t.var, []).append(first)
    return out


def _previous(tree: list, target: Component) -> list[Component]:
    """The components whose event may be the match's last one before ``target``'s first (a node's first)."""
    i = next(k for k, node in enumerate(tree) if target in _leaves(node))
    out: list[Component] = []
    for node in reversed(tree[:i]):
        if isinstance(node, Choice):
            for alt in node.alternatives:
                for c in reversed(alt):
                    out.append(c)
                    if c.lo >= 1:
                        break
            break
        out.append(node.items[-1] if isinstance(node, Group) else node)
        if node.lo >= 1:
            break
    return out


def _later(ts_col: str, op: str):
    """``PREV(ts) <op> ts``: the current row is later than (``<``) or at the time of (``=``) the row before it."""
    return BinOp(op, rx.Nav("PREV", Attr(None, ts_col), 1), Attr(None, ts_col))


def to_recognize(query: Query, source: str | None = None, *, columns: list[str] | tuple[str, ...] = (),
                 type_col: str = "type", ts_col: str = "ts") -> rx.Recognize:
    """The MATCH_RECOGNIZE statement IR of an AFTER MATCH SKIP match query; ``columns`` are the input's columns
    (the default output, without RETURN, is every one of them for every variable)."""
    checked = check_skip_query(query, source)
    r, _, edges = _with_event_columns(checked, columns, type_col, ts_col)
    windows = _window_counts(checked, r, edges, type_col)
    comps = components(r.query.pattern, source)
    by_var = {c.var: c for c in comps}
    filler = r.strategy in ("skip_till_any_match", "skip_till_next_match")
    defines, subsets, patterns, selectable, forbidden, not_next = [], [], [], [], {}, []
    past: dict[str, object] = {}  # per component after a loop with UNTIL: its skipped rows' "could be taken"
    for tree, alt, negs in trees(r.query.pattern, source):  # an OR of patterns: their alternation, left first
        # under the contiguity strategies no event lies between two of a match: a negation there always holds
        # nor before a NEXT component (its event is the row right after the previous one)
        gaps = sorted({k for n in negs if not n.next for k, _ in n.targets if not alt[k].linked}) if filler else []
        # a target after optional components left out: the negation holds there only when they are all absent
        passed = {alt[k].var: set(optional) for n in negs if not n.next for k, optional in n.targets}
        conditions = _conditions(r, alt, type_col, ts_col, source)
        closing = _closing(tree) if r.strategy == "skip_till_next_match" else {}
        pattern = _row_pattern(tree, filler, frozenset(alt[k].var for k in gaps), frozenset(closing))
        used = pattern_variables(pattern)
        names_of = {c.var: [c.var + kind for kind in (FIRST, STEP, LATER) if c.var + kind in used] for c in alt}
        for n in negs:  # NEXT !(C c): the row right after the previous event (whatever it is mapped to) is no c
            if n.next:
                previous = rx.Nav("PREV", rx.Classifier(), 1)
                right_after = _any([BinOp("=", previous, Literal(name))
                                    for c in _previous(tree, alt[n.gap]) for name in names_of[c.var]])
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
                for v in sorted(passed.get(c.var, ())):
                    at_time = BinOp("OR", BinOp(">", rx.Agg("count", None, v), Literal(0)), at_time)
                cond = BinOp("AND", cond, at_time)
            for name in names_of[c.var]:
                defines.append((name, BinOp("AND", cond, _later(ts_col, "<")) if name.endswith(STEP) else cond))
            subsets.append((c.var, tuple(names_of[c.var])))
        patterns.append(pattern)
        if r.strategy == "skip_till_next_match":
            selectable.append(_selectable(r, tree, alt, names_of, type_col, ts_col, source))
            for t, loops in closing.items():  # a loop is closed once a stop of it is among the rows skipped since
                own = f"{PAST}_{t}"
                shut = {c.var: Func("coalesce", (rx.Agg("max", _stop(c, own, type_col), own), Literal(False)))
                        for c in loops}
                past[t] = _selectable(r, tree, alt, names_of, type_col, ts_col, source, shut)
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
        skip_of = {t: Unary("NOT", Func("coalesce", (e, Literal(False)))) for t, e in past.items()}
        for t, own_skipped in skip_of.items():  # as the shared ones, with the closed loops
            own = f"{PAST}_{t}"
            names = (own + "_tie", own + "_step", own + "_later")
            defines += [(names[0], BinOp("AND", ties, own_skipped)), (names[1], BinOp("AND", step, own_skipped)),
                        (names[2], own_skipped)]
            blocked_names += names
            # the rows skipped since the match's last event: with a negation before t, its forbidden/allowed rows
            gap = tuple(f"{kind}_{t}_{part}" for kind in (BLOCKED, ALLOWED) for part in ("step", "later"))
            subsets.append((own, names + (gap if t in forbidden else ())))
        for v, cond in forbidden.items():
            ok = Unary("NOT", cond)  # never NULL (_negated)
            gap_skipped = skip_of.get(v, skipped)
            cond, ok = (cond, ok) if gap_skipped is None else (BinOp("AND", cond, gap_skipped),
                                                                BinOp("AND", ok, gap_skipped))
            name, allowed = f"{BLOCKED}_{v}", f"{ALLOWED}_{v}"
            defines += [(name + "_step", BinOp("AND", step, cond)), (name + "_later", cond),
                        (allowed + "_step", BinOp("AND", step, ok)), (allowed + "_later", ok)]
            subsets.append((name, (name + "_step", name + "_later")))
            blocked_names += [name + "_step", name + "_later", allowed + "_step", allowed + "_later"]
        for c in comps:  # a loop with UNTIL: the rows skipped between its events are no stop events
            if c.until is not None:
                ok = Unary("NOT", _stop(c, None, type_col))
                if skipped is not None:
                    ok = BinOp("AND", ok, skipped)
                name = f"{UNTIL}_{c.var}"
                defines += [(name, BinOp("AND", ties, ok)), (name + "_step", BinOp("AND", step, ok)),
                            (name + "_later", ok)]
                blocked_names += [name, name + "_step", name + "_later"]
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
        outer_sql=outer_text(outer),
        windows=windows,
        text=source or "",
    )


def _window_counts(r: ResolvedQuery, read: ResolvedQuery, edges: tuple, type_col: str
                   ) -> tuple[rx.WindowCount, ...]:
    """The window columns of a negation at the start or the end (``edges``: what :func:`_with_event_columns`
    named for each) as :class:`~sparkcep.ir.recognize.WindowCount`: Spark computes them in a batch, the engine
    on a stream, with the negated event's conditions on it alone as the count's ``condition`` (``read``: ``r``
    reading its per-event calls as the columns Spark adds, which the engine reads)."""
    out = []
    ends = (components(r.query.pattern)[0], components(r.query.pattern)[-1])
    for end, neg, names, pairs, lacks in edges:
        condition = _row_condition(neg.var, _edge_conditions(read, _edges(read, None)[end], ends[end], "", None)[0])
        if pairs:  # an equality with the component next to it: the ts of the nearest such event
            out.append(rx.WindowCount(names[0], tuple(neg.types), "earliest_after" if end else "latest_before",
                                      type_col, condition, pairs, lacks))
            continue
        kinds = ("after", "after_within") if end else ("before", "before_within")
        for name, kind in zip(names, kinds, strict=True):
            out.append(rx.WindowCount(name, tuple(neg.types), kind, type_col, condition))
    return tuple(out)


def _row_condition(var: str, local: list):
    """The conditions on the negated ``var`` alone as one expression over the row (``Attr(None, x)``), or None."""
    if not local:
        return None
    e = and_all([_expr(c, {}) for c in local])
    return map_nodes(e, lambda n: Attr(None, n.attr, span=n.span) if isinstance(n, Attr) and n.var == var else n)
