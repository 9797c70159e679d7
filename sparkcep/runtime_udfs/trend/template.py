"""The GRETA template of a trend query: positions, negated sub-templates, edges, guards and markers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
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
    walk,
)
from sparkcep.runtime_udfs.expr.scalar import compile_expr
from sparkcep.runtime_udfs.match.engine import EngineUnsupportedError

_ts_of = _first = itemgetter(0)

_second = itemgetter(1)

#: Transition kinds: running aggregate, vertex tree, hash map, invalidation queue, scan of stored vertices.
PLAIN, ORDERED, EQUAL, GUARDED, SCAN = "plain", "ordered", "equal", "guarded", "scan"

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
    """Algorithm 1 (generalized to Glushkov) and Algorithm 3 in one traversal of the pattern."""

    def __init__(self, position_of: dict[str, int]):
        self.position_of = position_of
        self.negs: list[_NegTemplate] = []

    def build(self, node) -> _Positions:
        if isinstance(node, EventPat):
            k = self.position_of[node.var]
            return _Positions(frozenset(), {k: _UNMARKED}, {k: _UNMARKED}, {})
        if isinstance(node, Not):
            nid = len(self.negs)
            neg = _NegTemplate(node.inner)
            self.negs.append(neg)
            neg.positions = self.build(node.inner)
            neg.components = tuple(sorted({*neg.positions.first, *neg.positions.last,
                                           *(x for pair in neg.positions.follow for x in pair)}))
            return _Positions(frozenset({frozenset({nid})}))
        if isinstance(node, Kleene):
            inner = self.build(node.inner)
            out = _Positions(inner.empties, dict(inner.first), dict(inner.last), dict(inner.follow))
            if node.op in ("*", "?"):
                out.empties = _UNMARKED
            if node.op in ("+", "*"):
                for x, mx in inner.last.items():
                    for y, my in inner.first.items():
                        _merge_into(out.follow, (x, y), _join(mx, my))
            return out
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
            return self._seq([self.build(item) for item in node.items])
        raise EngineUnsupportedError(f"pattern node {type(node).__name__} is not supported by the trend engine")

    @staticmethod
    def _seq(parts: list[_Positions]) -> _Positions:
        out = _Positions()
        prefix = _UNMARKED  # markers of empty derivations of the items so far
        tails: dict[int, Markers] = {}  # positions that may be the last pick so far → markers after them
        for part in parts:
            for y, my in part.first.items():
                if prefix:
                    _merge_into(out.first, y, _join(prefix, my))
                for x, mx in tails.items():
                    _merge_into(out.follow, (x, y), _join(mx, my))
            for key, alts in part.follow.items():
                _merge_into(out.follow, key, alts)
            tails = {x: _join(m, part.empties) for x, m in tails.items() if part.empties}
            for x, mx in part.last.items():
                _merge_into(tails, x, mx)
            prefix = _join(prefix, part.empties) if part.empties else frozenset()
        out.last = tails
        out.empties = prefix
        return out


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


@dataclass
class _State:
    """A template state: one positive (or, in a negation graph, negated) component."""

    j: int
    comp: int
    var: str
    first: bool = False
    start_guard: tuple | None = None  # start negation (§5 case 3)
    last: bool = False
    end_guard: tuple | None = None  # end negation (§5 case 2)
    filters: tuple = ()
    ins: list[_Trans] = field(default_factory=list)
    plain_out: bool = False
    ordered_out: list[_Trans] = field(default_factory=list)
    guarded_out: list[_Trans] = field(default_factory=list)
    stored: bool = False
    classed: bool = False
    contrib: Callable | None = None  # event → per-measure values (vector algebra)


@dataclass
class _Graph:
    """The template of one graph (the positive pattern, or one negative sub-pattern)."""

    states: list[_State]
    trans: list[_Trans]
