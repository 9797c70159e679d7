"""The GRETA template of a trend query: positions, negated sub-templates, edges, guards and markers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import Any

from sparkcep.ir.ast import (
    Attr,
    BinOp,
    Call,
    EventPat,
    Kleene,
    Literal,
    Not,
    Or,
    Seq,
    Unary,
    linked_first,
    walk,
)
from sparkcep.runtime_udfs.expr.scalar import compile_expr
from sparkcep.runtime_udfs.match.engine import EngineUnsupportedError

_ts_of = _first = itemgetter(0)

_second = itemgetter(1)

#: Transition kinds: running aggregate, vertex tree, hash map, invalidation queue, scan of stored vertices, the
#: previous event of the partition (a ``NEXT`` step).
PLAIN, ORDERED, EQUAL, GUARDED, SCAN, LINK = "plain", "ordered", "equal", "guarded", "scan", "link"

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}

# ----------------------------------------------------------------------------------------------- template
# Marker sets: a frozenset of negation ids that must all be unblocked.  A transition may arise from several
# places of the pattern (``(A+)+``); it is valid if the markers of any one of them are, so it carries a set of
# alternative marker sets, kept minimal (a superset of another alternative is redundant).

Markers = frozenset  # frozenset[frozenset[int]]

_UNMARKED: Markers = frozenset({frozenset()})


def _minimal(alts) -> Markers:
    alts = set(alts)
    return frozenset(a for a in alts if not any(b < a for b in alts))


def _join(a: Markers, b: Markers) -> Markers:
    return _minimal(x | y for x in a for y in b)


@dataclass
class _Positions:
    """Glushkov sets of a sub-pattern, with negation markers.

    ``empties``: marker alternatives of its empty derivations (empty set: not nullable).  ``first``/``last``:
    position → markers between the sub-pattern's start (end) and that position.  ``follow``: (x, y) →
    markers between x and y when y immediately follows x.
    """

    empties: Markers = frozenset()
    first: dict[int, Markers] = field(default_factory=dict)
    last: dict[int, Markers] = field(default_factory=dict)
    follow: dict[tuple[int, int], Markers] = field(default_factory=dict)


def _merge_into(target: dict, key, alts: Markers) -> None:
    target[key] = _minimal(target[key] | alts) if key in target else alts


@dataclass
class _NegTemplate:
    """A negative sub-pattern split off by Algorithm 3: its positions and Glushkov sets."""

    node: Any
    positions: _Positions | None = None
    components: tuple[int, ...] = ()


class _TemplateBuilder:
    """Algorithm 1 (generalized to Glushkov) and Algorithm 3 in one traversal of the pattern.

    A position is a component index, except inside a bounded quantifier ``P{n,m}``, which is unrolled into
    count-indexed copies of ``P``'s positions (see :meth:`_bounded`): iteration 1 keeps the component's own
    position, iteration ``i > 1`` gets a fresh one.  ``comp_of[x]`` is the component of position ``x`` and
    ``iteration_of[x]`` its iteration (``(i, loops)``, ``loops`` True for the ``n+`` state of ``P{n,}``)."""

    def __init__(self, position_of: dict[str, int]):
        self.position_of = position_of
        self.negs: list[_NegTemplate] = []
        self.comp_of: list[int] = sorted(position_of.values())
        self.iteration_of: dict[int, tuple[int, bool]] = {}
        self._copies: dict[tuple[int, int], int] = {}
        self._iteration: tuple[int, bool] | None = None  # the iteration being unrolled (None: not in one)
        self._neg_ids: dict[int, int] = {}  # id(Not node) → negation id: one graph for all its iterations
        #: follow pairs ``(x, y)`` into a ``NEXT`` step: valid only between events adjacent in the partition
        self.links: set[tuple[int, int]] = set()
        #: the negated events of ``NEXT !(C c)`` (Flink's notNext), ``i``-th marked ``not_next_marker(i)``: an edge
        #: ``x -> y`` across one is valid only if the partition's event right after ``x``'s is no such ``C``
        self.not_next: list[EventPat] = []
        #: per such negation, True for ``!(NEXT C c)`` (the ``C`` must also lie strictly inside the gap: after the
        #: pick's ts and before the next pick's), False for ``NEXT !(C c)``
        self.in_gap: list[bool] = []
        #: per such negation, for ``NOT SEQ(NEXT B y, C z, ...)`` (its ``B``) the id of the graph of the unlinked
        #: ``SEQ(B y, C z, ...)``: a vertex whose next event is such a ``B`` stays valid until an occurrence starting
        #: there (or later: it could start there too) has finished; else None
        self.linked: list[int | None] = []
        self._negating = 0  # depth of negations being built
        self._keep: list = []  # the unlinked sub-patterns (their ids key _neg_ids)

    def _position(self, k: int) -> int:
        if self._iteration is None:
            return k
        i, loops = self._iteration
        x = k if i == 1 else self._copies.setdefault((k, i), len(self.comp_of))
        if x == len(self.comp_of):
            self.comp_of.append(k)
        self.iteration_of[x] = (i, loops)
        return x

    def build(self, node) -> _Positions:
        if isinstance(node, EventPat):
            k = self._position(self.position_of[node.var])
            return _Positions(frozenset(), {k: _UNMARKED}, {k: _UNMARKED}, {})
        if isinstance(node, Not) and linked_first(node):
            return self._not_next(node, gap=True)
        if isinstance(node, Not) and isinstance(node.inner, Seq) and node.inner.strict and node.inner.strict[0]:
            return self._linked(node)
        if isinstance(node, Not):
            nid = self._neg_ids.get(id(node))
            if nid is None:  # a negation inside a bounded group is one graph: it blocks every iteration alike
                nid = self._neg_ids[id(node)] = len(self.negs)
                neg = _NegTemplate(node.inner)
                self.negs.append(neg)
                outer, self._iteration = self._iteration, None
                self._negating += 1
                neg.positions = self.build(node.inner)
                self._negating -= 1
                self._iteration = outer
                neg.components = tuple(sorted({*neg.positions.first, *neg.positions.last,
                                               *(x for pair in neg.positions.follow for x in pair)}))
            return _Positions(frozenset({frozenset({nid})}))
        if isinstance(node, Kleene):
            if node.bounds is not None:
                return self._bounded(node)
            return self._loop(self.build(node.inner), node.op)
        if isinstance(node, Or):
            out = _Positions()
            for alt in node.alternatives:
                part = self.build(alt)
                out.empties = _minimal(out.empties | part.empties)
                for src, dst in ((part.first, out.first), (part.last, out.last), (part.follow, out.follow)):
                    for key, alts in src.items():
                        _merge_into(dst, key, alts)
            return out
        if isinstance(node, Seq):
            return self._seq([self._not_next(item) if node.strict and node.strict[k] and isinstance(item, Not)
                              else self.build(item) for k, item in enumerate(node.items)], node.strict, self.links)
        raise EngineUnsupportedError(f"pattern node {type(node).__name__} is not supported by the trend engine")

    def _linked(self, node: Not) -> _Positions:
        """``NOT SEQ(NEXT B y, C z, ...)``: the ``NEXT !(B y)`` marker of ``!(NEXT B y)`` on the edges across it
        (the vertex is judged once its next event is known), and the graph of the unlinked ``SEQ(B y, C z, ...)``,
        whose latest finished start ``L_N`` tells until when a vertex whose next event is such a ``B`` stays valid."""
        inner = node.inner
        if (self._negating or self._iteration is not None or not isinstance(inner.items[0], EventPat)
                or (len(inner.strict) > 1 and inner.strict[1])):
            raise EngineUnsupportedError("NEXT at the start of a negation is supported by the trend engine only on one "
                                         "event followed by an unlinked item, outside repetitions and negations")
        unlinked = Not(replace(inner, strict=(False, *inner.strict[1:])))
        self._keep.append(unlinked)
        self.build(unlinked)
        marker = self._not_next(node, gap=True)
        self.linked[-1] = self._neg_ids[id(unlinked)]
        return marker

    def _not_next(self, node: Not, gap: bool = False) -> _Positions:
        """``NEXT !(C c)``, or ``!(NEXT C c)`` (``gap``): no graph of its own (GRETA's negation invalidates by time,
        this one by adjacency in the partition), an empty item whose marker the edges across it carry
        (:func:`not_next_marker`)."""
        inner = node.inner.items[0] if gap else node.inner
        if not isinstance(inner, EventPat):
            raise EngineUnsupportedError("NEXT !(...) negates one event T v")
        self.not_next.append(inner)
        self.in_gap.append(gap)
        self.linked.append(None)
        return _Positions(frozenset({frozenset({not_next_marker(len(self.not_next) - 1)})}))

    @staticmethod
    def _loop(inner: _Positions, op: str) -> _Positions:
        """``inner`` under ``+``, ``*`` or ``?``."""
        out = _Positions(inner.empties, dict(inner.first), dict(inner.last), dict(inner.follow))
        if op in ("*", "?"):
            out.empties = _UNMARKED
        if op in ("+", "*"):
            for x, mx in inner.last.items():
                for y, my in inner.first.items():
                    _merge_into(out.follow, (x, y), _join(mx, my))
        return out

    def _bounded(self, node: Kleene) -> _Positions:
        """``P{n,m}`` unrolled without ambiguity: ``SEQ(P#1, ..., P#n, (SEQ(P#n+1, (... P#m?)))?)``, and
        ``P{n,}`` as ``SEQ(P#1, ..., P#n-1, P#n+)``.  A trend then runs through the copy of its iteration count
        (count-indexed states), so each event keeps one aggregate per count class and no trend is
        enumerated: iteration ``i``'s vertices are exactly the trends with ``i`` iterations so far."""
        if self._iteration is not None:
            raise EngineUnsupportedError("a bounded quantifier inside a bounded quantifier is not supported")
        lo, hi = node.bounds
        parts = []
        last = hi if hi is not None else lo
        for i in range(1, last + 1):
            loops = hi is None and i == lo
            self._iteration = (i, loops)
            try:
                part = self.build(node.inner)
            finally:
                self._iteration = None
            parts.append(self._loop(part, "+") if loops else part)
        required, optional = parts[:lo], parts[lo:]
        tail: _Positions | None = None
        for part in reversed(optional):
            tail = self._loop(part if tail is None else self._seq([part, tail]), "?")
        return self._seq(required + ([tail] if tail is not None else []))

    @staticmethod
    def _seq(parts: list[_Positions], strict: tuple = (), links: set | None = None) -> _Positions:
        """``SEQ`` of ``parts``; the follow pairs into item ``k`` written ``NEXT`` (``strict[k]``) from the picks
        before it go to ``links`` (GRETA edges between events adjacent in the partition only)."""
        out = _Positions()
        prefix = _UNMARKED  # markers of empty derivations of the items so far
        tails: dict[int, Markers] = {}  # positions that may be the last pick so far → markers after them
        for k, part in enumerate(parts):
            for y, my in part.first.items():
                if prefix:
                    _merge_into(out.first, y, _join(prefix, my))
                for x, mx in tails.items():
                    _merge_into(out.follow, (x, y), _join(mx, my))
                    if strict and strict[k]:
                        links.add((x, y))
            for key, alts in part.follow.items():
                _merge_into(out.follow, key, alts)
            tails = {x: _join(m, part.empties) for x, m in tails.items() if part.empties}
            for x, mx in part.last.items():
                _merge_into(tails, x, mx)
            prefix = _join(prefix, part.empties) if part.empties else frozenset()
        out.last = tails
        out.empties = prefix
        return out


def not_next_marker(i: int) -> int:
    """The marker of the ``i``-th ``NEXT !(C c)``: negative, apart from GRETA negations' ids ``0, 1, ...``; its own
    inverse (``not_next_marker(not_next_marker(i)) == i``)."""
    return -1 - i


def _guard(alts: Markers | None) -> tuple[tuple[int, ...], ...] | None:
    """Marker alternatives as a threshold recipe: None when some alternative is unmarked (always valid)."""
    if alts is None or frozenset() in alts:
        return None
    return tuple(tuple(sorted(a)) for a in sorted(alts, key=sorted))


def _threshold(guard: tuple[tuple[int, ...], ...], latest: list[float]) -> float:
    """The smallest ts a predecessor may have: ``min`` over alternatives of ``max`` over their negations of
    ``L_N`` (the latest start of a finished trend of ``N``)."""
    return min(max(latest[n] for n in alt) for alt in guard)


def _scope_info(node, in_list: bool = False, out: dict | None = None) -> dict[str, bool]:
    """var → "is under + or * within its own positive or negative sub-pattern" (a Kleene variable)."""
    out = {} if out is None else out
    if isinstance(node, EventPat):
        out[node.var] = in_list
    elif isinstance(node, Kleene):
        _scope_info(node.inner, in_list or node.op in ("+", "*"), out)
    elif isinstance(node, Not):
        _scope_info(node.inner, False, out)
    elif isinstance(node, Seq):
        for item in node.items:
            _scope_info(item, in_list, out)
    elif isinstance(node, Or):
        for alt in node.alternatives:
            _scope_info(alt, in_list, out)
    return out


def _mandatory(node) -> set[str]:
    """The variables every match of ``node`` binds (not counting negated sub-patterns)."""
    if isinstance(node, EventPat):
        return {node.var}
    if isinstance(node, Kleene):
        return _mandatory(node.inner) if node.op == "+" else set()
    if isinstance(node, Seq):
        return set().union(*(_mandatory(i) for i in node.items))
    if isinstance(node, Or):
        return set.intersection(*(_mandatory(a) for a in node.alternatives))
    return set()


# ----------------------------------------------------------------------------------------------- predicates


def _rename(e, names: dict[str, str]):
    """``e`` with each variable reference renamed (``names``: var or (var, index) → new var), indexes dropped."""
    if isinstance(e, Attr):
        new = names.get((e.var, e.index), names.get(e.var))
        return Attr(new, e.attr)
    if isinstance(e, Unary):
        return Unary(e.op, _rename(e.operand, names))
    if isinstance(e, BinOp):
        return BinOp(e.op, _rename(e.left, names), _rename(e.right, names))
    if isinstance(e, Literal):
        return e
    if isinstance(e, Call):  # a scalar function over several events (a one-event one is a hidden column)
        return Call(e.name, tuple(_rename(a, names) for a in e.args), e.type)
    raise EngineUnsupportedError(f"{type(e).__name__} is not supported in a trend-aggregate predicate")


def _event_fn(expr, any_var: bool) -> Callable[[dict], Any]:
    """``f(event)`` evaluating ``expr`` whose variable references all read that one event (as ``_e``)."""
    if isinstance(expr, Attr) and not any_var:
        attr = expr.attr

        def attribute(ev: dict) -> Any:
            v = ev.get(attr)
            return None if v != v else v  # NaN reads as NULL, as in expr.compile_expr

        attribute.attr_name = attr  # the generated scan reads it inline (NaN is then no key either)
        return attribute
    fn = compile_expr(expr, frozenset({"_e"}) if any_var else frozenset())
    return lambda ev: fn({"_e": ev})


def _pair_fn(expr, any_vars: frozenset[str]) -> Callable[[dict, dict], bool]:
    """``f(earlier, later)`` for a predicate over two adjacent events (variables ``_p`` and ``_e``)."""
    fn = compile_expr(expr, any_vars)
    return lambda p, e: fn({"_p": p, "_e": e}) is True


def _refs(e) -> set[str | None]:
    return {n.var for n in walk(e) if isinstance(n, Attr)}


@dataclass
class _Edge:
    """An edge predicate on transition ``src → dst``: ``expr`` over ``_p`` (earlier) and ``_e`` (later)."""

    src: int
    dst: int
    expr: Any
    graph: int = -1  # -1 the positive graph, else the negation's id
    trans: _Trans | None = None  # the transition it restricts (set when the graph is built)


# ----------------------------------------------------------------------------------------------- plans


@dataclass
class _Trans:
    """A template transition ``src → dst`` (state indices of one graph) and how its predecessors are summed."""

    id: int
    src: int
    dst: int
    kind: str
    guard: tuple | None = None  # negation markers (middle negation, §5 case 1)
    pred: Callable | None = None  # SCAN: f(earlier, later)
    op: str | None = None  # ORDERED/EQUAL: earlier_key op later_key
    key: Callable | None = None  # ORDERED/EQUAL: earlier event → key
    probe: Callable | None = None  # ORDERED/EQUAL: later event → key
    #: an edge inside a loop with a stop condition (UNTIL), the loop's index in ``_Compiled.until``: each stop
    #: event empties its own running aggregate (:attr:`slot`, when it has no edge predicate), index or stored
    #: vertices
    cut: int | None = None
    #: an edge across ``NEXT !(C c)``, that negation's index (:attr:`_TemplateBuilder.not_next`): its source vertex
    #: enters the edge's own index only once the partition's next event is known to be no such ``C``
    not_next: int | None = None
    #: PLAIN: the entry of a window's running aggregates ``R`` it reads, its source state's (``src``), or inside a
    #: loop with UNTIL that state's own one for the edges inside the loop (:attr:`_State.cut_slot`)
    slot: int | None = None

    def __post_init__(self) -> None:
        if self.slot is None:
            self.slot = self.src


@dataclass
class _State:
    """A template state: one positive (or, in a negation graph, negated) component."""

    j: int
    comp: int
    var: str
    label: str = ""  # the state's name in explain: var, or var#i for iteration i of a bounded quantifier
    iteration: tuple[int, bool] | None = None  # (i, loops) in a bounded quantifier (loops: the n+ state of {n,})
    first: bool = False
    start_guard: tuple | None = None  # start negation (§5 case 3)
    last: bool = False
    end_guard: tuple | None = None  # end negation (§5 case 2)
    #: ``NEXT !(C c)`` after which a trend may end here: that negation's index (:attr:`_TemplateBuilder.not_next`);
    #: a vertex counts as an END once the partition's next event has come and is no such ``C``, or in a window
    #: that ends before any next event
    end_held: int | None = None
    filters: tuple = ()
    ins: list[_Trans] = field(default_factory=list)
    plain_out: bool = False
    ordered_out: list[_Trans] = field(default_factory=list)
    guarded_out: list[_Trans] = field(default_factory=list)
    stored: bool = False
    cut_stored: bool = False  # the source of a SCAN transition inside a loop with UNTIL (:attr:`_Trans.cut`)
    #: the source of a PLAIN transition inside a loop with UNTIL: the entry of ``R`` that sums its vertices no stop
    #: event has followed yet (each stop empties it), which that transition reads
    cut_slot: int | None = None
    link_out: bool = False  # the source of a LINK transition: its vertex of the partition's last event is kept
    #: the transitions across a ``NEXT !(C c)`` it leaves (:attr:`_Trans.not_next`), which its vertex enters late
    held_out: list[_Trans] = field(default_factory=list)
    classed: bool = False
    contrib: Callable | None = None  # event → per-measure values (vector algebra)


@dataclass
class _Graph:
    """The template of one graph (the positive pattern, or one negative sub-pattern)."""

    states: list[_State]
    trans: list[_Trans]
