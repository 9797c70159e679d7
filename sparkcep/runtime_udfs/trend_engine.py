"""GRETA trend aggregation: event-trend aggregates computed online, without constructing trends.

This engine implements Poppe et al., *GRETA: Graph-based Real-time Event Trend Aggregation* (the paper in
``papers/``) for one partition of the equivalence key (the caller partitions, GRETA §6 "Event Trend
Grouping").  It is pure Python, knows nothing about Spark, and has the shape of
:mod:`sparkcep.runtime_udfs.match_engine`: :func:`step` buffers events, :func:`advance` processes those at or
below a watermark in ``ts`` order and emits the rows of every window the watermark has passed.

**Template (§4.1, Algorithm 1; §9 "Multiple Event Type Occurrences").**  Every positive component of the
pattern is a template state, so a type that occurs twice gives two states and an event may enter several.
Transitions are computed as Glushkov's follow relation, which for ``SEQ`` and ``+`` is exactly Algorithm 1
(``end(Pi) → start(Pj)`` for ``SEQ(Pi, Pj)``, ``end(Pi) → start(Pi)`` for ``Pi+``) and extends it to ``*``,
``?`` and ``OR``.  Since every state is a distinct variable, paths of the graph and trends (sets of
``(event, variable)`` pairs) are in bijection (Theorem 4.2).

**Negation (§5).**  Each ``NOT N`` is split off (Algorithm 3) into its own graph.  Where ``NOT N`` sits between
two positive sub-patterns, the template transitions from ``end(Pi)`` to ``start(Pj)`` carry a *marker* ``N``;
markers before the first or after the last positive event are start and end negations (§5.1 cases 1–3).
The graph of ``N`` maintains, instead of counts, ``L_N(t)``: the latest start of a finished ``N`` trend that
ended before ``t`` (Definition 5: a finished trend ``(e1..en)`` invalidates events before ``e1.time`` for
events after ``en.time``).  An edge ``p → e`` carrying ``N`` is valid iff ``p.ts >= L_N(e.ts)``; since
``L_N`` only grows, an invalidated vertex stays invalid (§5.2 "Event Pruning").  Start negation restricts the
windows a START event may open (no ``N`` trend between the window start and the event), end negation the
END events a window counts when it closes.

**Aggregates (Theorem 4.3, Theorem 9.1).**  Every vertex carries ``count`` (number of trends from a START
event to it) and, as the query needs, ``count_E``, ``sum``, ``min``, ``max`` of the events of a variable in
those trends; ``AVG = SUM / COUNT(E)``.  Counts are exact Python ints (a window of ``n`` events has up to
``2^n - 1`` trends).  Sums of integers are exact ints; sums of floats are kept exact as fractions and
rounded once on output (their infinities and NaNs absorb, as in float arithmetic).

**Sliding windows share one graph (§6, §7).**  Windows are ``[k·slide, k·slide + window)``.  Each vertex
keeps one aggregate per window it falls into (GRETA's *Window Hash Table*); a template state keeps a
running aggregate per window over all its vertices, so an event whose incoming transitions are plain reads
its predecessors' sum in O(1) per window (A-Seq/Sharon running aggregates).  A window's structures are
dropped as soon as the watermark passes its end and its rows are emitted (the pane purge of §7).

**Predicates (§6).**  Local predicates were applied by the Spark SQL filter (the ``_mask`` bits) or are
evaluated here, as are other predicates on one event.  Edge predicates relate adjacent events of a trend:
``v.x < NEXT(v).x`` and ``v[i].x > v[i-1].x`` restrict the self-transition of Kleene variable ``v``; a
predicate between two single variables restricts the transition between them when one always immediately
precedes the other.  A comparison (``< <= > >=``) between an expression of the earlier and one of the later
event is answered by a *vertex tree* per window (§7): for the events of the current :func:`advance` call a
Fenwick tree over the ranks of their keys (the batch is known, so are its keys), for older events static
sorted levels with cumulative aggregates merged as a binary counter (Bentley–Saxe); an event finds the
aggregate over its valid predecessors in O(log n) (plus O(log² n) C-speed bisections over the older levels).
An equality uses a hash map.  Any other edge predicate is evaluated against the stored vertices of the
predecessor state (GRETA's O(n) worst case).  A scoped equivalence test ``[v.attr]`` splits trends by
``v``'s value: one graph per value, sharing the negation graphs.

**Partitions and groups.**  The caller runs one state per value of ``spec.key``.  GROUP BY attributes are
part of the key, so a partition is one group and its rows carry the group's values.  When the key is finer
than the groups (GRETA Q1: per company, grouped by sector), :func:`merge_rows` combines the partitions' rows
of a window and group.

**Speed.**  For COUNT(*) queries without negation and scoped equivalence, the per-event loop is generated
from the template (:func:`_count_scanner`): a trend count costs a few additions per event and window, which
a generic interpreter of the template would bury under dispatch.  Big counts cost what big-integer additions
cost (linear in their length, ~n bits for n events per window): when every transition is plain, running
counts beyond :data:`BIG_BITS` become GMP integers (``gmpy2``, 2-3x faster to add at thousands of bits; rows
still carry Python ints, and the state pickles them).  :func:`step` and :func:`advance` pause Python's cyclic
garbage collector (:func:`_gc_paused`): its scans over every buffered event cost more than the engine's work.
A batch already in strictly increasing ts order (the common case) is neither sorted nor split at ties.

**Explain.**  :func:`describe` prints the compiled template (states, transitions and their indexes, negation
graphs and what they invalidate, how each WHERE conjunct is evaluated) for ``sparkcep explain``.

**Not supported** (:func:`check` raises :class:`EngineUnsupportedError`): predicates relating non-adjacent
events (``a.x < c.x`` across a Kleene sub-pattern, ``v[1]``, ``v[v.len]``, aggregates over ``v[]``) or a
Kleene variable to another variable; negation predicates reading positive variables; negations at the start
or end of a negated sub-pattern; scoped equivalence tests on several variables or on an optional one; GROUP
BY attributes outside the partition key.

Example::

    >>> import math, sparkcep
    >>> spec = sparkcep.compile("RETURN COUNT(*) PATTERN (SEQ(A+, B))+ WITHIN 10").spec()
    >>> events = [{"type": t, "ts": ts} for t, ts in [("A", 1), ("B", 2), ("A", 3), ("A", 4), ("B", 7)]]
    >>> state, _ = step(spec, init_state(), events)
    >>> state, rows = advance(spec, state, math.inf)
    >>> rows
    [{'window_start': 0, 'window_end': 10, 'count_all': 11}]
"""

from __future__ import annotations

import gc
import math
import re
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache, wraps
from itertools import accumulate, compress, count, islice
from operator import add, eq, itemgetter, lt
from typing import Any

from sparkcep.compiler.ast import (
    Attr,
    BinOp,
    EquivTest,
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
from sparkcep.compiler.errors import CEPError
from sparkcep.compiler.naming import safe_identifier
from sparkcep.compiler.printer import format_expr, format_pattern
from sparkcep.runtime_udfs.expr import compile_expr
from sparkcep.runtime_udfs.match_engine import EngineUnsupportedError
from sparkcep.runtime_udfs.spec import SlotState, TrendSpec, component_mask, component_table

try:  # GMP integers: big-count additions 2-3x faster than Python ints (exact either way)
    from gmpy2 import mpz as _mpz
except ImportError:  # pragma: no cover - gmpy2 is a dependency; the engine stays exact without it
    _mpz = None

__all__ = [
    "EngineUnsupportedError",
    "TrendState",
    "advance",
    "check",
    "describe",
    "init_state",
    "is_empty",
    "merge_rows",
    "step",
    "wakeup",
]

#: Version tag of the serialized state (:meth:`TrendState.to_bytes`).
STATE_VERSION = 1

#: Prefix of the columns that carry exact SUM/AVG partials for :func:`merge_rows` (only when the partition key
#: is finer than the groups).
PARTIAL = "_partial_"

_INF = math.inf

#: Running counts longer than this many bits become GMP integers (below it Python ints add faster).
BIG_BITS = 1500
#: Events per call of the generated scan between two checks for counts to promote to GMP integers.
SCAN_CHUNK = 4096
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


# ----------------------------------------------------------------------------------------------- aggregates


def _exact(v):
    """A SUM operand kept exact: ints as they are, finite floats as fractions; inf/NaN stay floats."""
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return Fraction(v) if math.isfinite(v) else v
    if isinstance(v, (Decimal, Fraction)):
        return Fraction(v) if not isinstance(v, Decimal) or v.is_finite() else float(v)
    raise TypeError(f"SUM/AVG over a non-numeric value {v!r}")


def _fold(f):
    def fold(a, b):
        if a is None:
            return b
        if b is None:
            return a
        return f(a, b)

    return fold


@_fold
def _sum_add(a, b):
    if type(a) is float or type(b) is float:  # an infinity or NaN absorbs every finite part
        return (a if type(a) is float else 0.0) + (b if type(b) is float else 0.0)
    return a + b


_MIN, _MAX = _fold(min), _fold(max)


class _CountAlgebra:
    """COUNT(*) only: an aggregate is the trend count itself, 0 is "no trend"."""

    zero = 0
    add = staticmethod(add)
    vector = False

    @staticmethod
    def lift(pred, start: int, values) -> int:
        return pred + start


class _VectorAlgebra:
    """Theorem 9.1: an aggregate is ``[count, measure...]``; None is "no trend".

    Measures: ``("n", target, attr)`` number of target events (with a non-null ``attr``) in the trends,
    ``("s", ...)`` the sum of ``attr``, ``("min", ...)``/``("max", ...)``.  ``values`` of an event are, per
    measure, None if the event does not contribute, else 1 (``n``), its exact value (``s``) or its value.
    """

    zero = None
    vector = True

    def __init__(self, kinds: tuple[str, ...]):
        self.kinds = kinds
        combine = {"n": add, "s": _sum_add, "min": _MIN, "max": _MAX}
        self._ops = tuple(combine[k] for k in kinds)

    def add(self, a, b):
        if a is None:
            return b
        if b is None:
            return a
        out = [a[0] + b[0]]
        for i, op in enumerate(self._ops, 1):
            out.append(op(a[i], b[i]))
        return out

    def lift(self, pred, start: int, values):
        c = start + (pred[0] if pred is not None else 0)
        if not c:
            return None
        out = [c]
        for i, kind in enumerate(self.kinds, 1):
            p = pred[i] if pred is not None else (0 if kind == "n" else None)
            v = values[i - 1]
            if v is None:
                out.append(p)
            elif kind == "n":
                out.append(p + c)
            elif kind == "s":
                part = v if type(v) is float else v * c  # e.sum = e.attr * e.count + Σ p.sum
                out.append(part if p is None else _sum_add(p, part))
            elif kind == "min":
                out.append(v if p is None or v < p else p)
            else:
                out.append(v if p is None or v > p else p)
        return out


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


class _Compiled:
    """Everything the engine needs from a :class:`TrendSpec`, compiled once."""

    def __init__(self, spec: TrendSpec):
        if not isinstance(spec, TrendSpec):
            raise CEPError(f"the trend engine needs a TrendSpec, got {type(spec).__name__}")
        if not (spec.window > 0 and spec.slide > 0):
            raise CEPError(f"window and slide must be positive, got {spec.window} and {spec.slide}")
        comps = spec.components
        if not comps or spec.pattern is None:
            raise EngineUnsupportedError("a trend query needs a pattern with at least one component")
        if isinstance(spec.pattern, Not):
            raise EngineUnsupportedError("negation cannot be the whole pattern")
        self.window, self.slide = spec.window, spec.slide
        self.n = len(comps)
        self.full = (1 << self.n) - 1
        self.group_by = tuple(spec.group_by)
        self.partial = bool(set(spec.key) - set(self.group_by))
        missing = [g for g in self.group_by if g not in spec.key]
        if missing:
            raise EngineUnsupportedError(
                f"GROUP BY {', '.join(missing)} is not part of the partition key {spec.key}: the trend engine "
                "takes group values from the events of one partition")
        position_of = {c.var: k for k, c in enumerate(comps)}
        for node in walk(spec.pattern):
            if isinstance(node, EventPat) and node.var not in position_of:
                raise EngineUnsupportedError(f"pattern variable {node.var!r} has no component")
        builder = _TemplateBuilder(position_of)
        pos = builder.build(spec.pattern)
        negs = builder.negs
        if not pos.first:
            raise EngineUnsupportedError("the pattern has no positive event")
        any_vars = frozenset(c.var for c in comps if c.any_ or len(c.types) > 1)
        self._any_vars = any_vars
        self._positive_vars = {c.var for c in comps if not c.negated}
        self._negated_vars = {c.var for c in comps if c.negated}
        is_list = _scope_info(spec.pattern)
        mandatory = _mandatory(spec.pattern)

        # which graph each component belongs to: -1 the positive one, else the negation's id
        owner = dict.fromkeys(range(self.n), -1)
        for nid, neg in enumerate(negs):
            for k in neg.components:
                owner[k] = nid  # a negation's positions exclude those of the negations nested in it
        for k, c in enumerate(comps):
            if c.negated != (owner[k] != -1):
                raise EngineUnsupportedError(f"component {c.var!r} is inconsistent with the pattern")

        # classify the non-local predicates (§6: vertex predicates, edge predicates)
        vertex_filters: dict[int, list] = {}
        edges: list[_Edge] = []
        class_items: list = []
        self.never = False
        follow_sets = {-1: pos.follow, **{nid: neg.positions.follow for nid, neg in enumerate(negs)}}
        first_sets = {-1: pos.first, **{nid: neg.positions.first for nid, neg in enumerate(negs)}}
        #: per WHERE conjunct, how it is evaluated: a description, or the _Edge it became (for describe())
        self.classified: list[tuple[Any, Any]] = []
        for conj in spec.predicates:
            how = self._classify(conj, comps, position_of, owner, is_list, mandatory, any_vars, follow_sets,
                                 first_sets, negs, vertex_filters, edges, class_items)
            self.classified.append((conj, how))
        self.neg_nodes = tuple(neg.node for neg in negs)
        self.components = comps
        self.class_var: str | None = None
        self.class_attrs: tuple[str, ...] = ()
        if class_items:
            var_names = {v for v, _ in class_items}
            if len(var_names) > 1:
                raise EngineUnsupportedError(
                    "scoped equivalence tests on several variables are not supported by the trend engine")
            self.class_var = var_names.pop()
            if self.class_var not in mandatory:
                raise EngineUnsupportedError(
                    f"[{self.class_var}.attr] needs {self.class_var!r} in every trend (not optional)")
            self.class_attrs = tuple(dict.fromkeys(a for _, a in class_items))

        # aggregates (Theorem 9.1)
        measures: list[tuple[str, str, str | None]] = []

        def measure(kind: str, target: str, attr: str | None) -> int:
            key = (kind, target, attr)
            if key not in measures:
                measures.append(key)
            return measures.index(key) + 1

        self.outputs: list[tuple[str, str, int, int]] = []
        for a in spec.aggregates:
            func = a.func.lower()
            if func == "count" and a.var is None:
                self.outputs.append((a.name, "count_all", 0, 0))
            elif func == "count":
                self.outputs.append((a.name, "count", measure("n", a.var, a.attr), 0))
            elif func in ("sum", "avg", "min", "max") and a.var is not None and a.attr is not None:
                n = measure("n", a.var, a.attr)
                x = measure("s" if func in ("sum", "avg") else func, a.var, a.attr)
                self.outputs.append((a.name, func, n, x))
            else:
                raise EngineUnsupportedError(f"aggregate {a.func}({a.var or '*'}) is not supported")
        self.measures = tuple(measures)
        self.alg = _VectorAlgebra(tuple(m[0] for m in measures)) if measures else _CountAlgebra()

        # graphs: the positive one and one per negation
        self.positive = self._graph(pos, [k for k in range(self.n) if owner[k] == -1], comps, edges, vertex_filters,
                                    any_vars, positive=True)
        self.negs = []
        for nid, neg in enumerate(negs):
            np_ = neg.positions
            if any(_guard(m) is not None for m in (*np_.first.values(), *np_.last.values())):
                raise EngineUnsupportedError(
                    "a negation at the start or end of a negated sub-pattern is not supported")
            self.negs.append(self._graph(np_, [k for k in range(self.n) if owner[k] == nid], comps, edges,
                                         vertex_filters, any_vars, positive=False))

        # component → roles: ("pos", state) or ("neg", nid, state)
        self.roles_of: dict[int, list] = {k: [] for k in range(self.n)}
        for st in self.positive.states:
            self.roles_of[st.comp].append((-1, st))
        for nid, g in enumerate(self.negs):
            for st in g.states:
                self.roles_of[st.comp].append((nid, st))
        self._roles: dict[int, tuple] = {}
        self.by_type = component_table(comps, any_vars)
        #: type → component bitmask, when no component has a local predicate to evaluate
        self.type_masks = None if any(c.local is not None for c in comps) else {
            t: sum(1 << k for k, _, _ in entries) for t, entries in self.by_type.items()}
        self.n_states = len(self.positive.states)
        #: COUNT(*) over one positive graph whose edges need no stored vertices: the specialized scan
        self.counts_only = (not self.alg.vector and not self.negs and self.class_var is None
                            and all(t.kind in (PLAIN, ORDERED, EQUAL) for t in self.positive.trans)
                            and not any(s.filters for s in self.positive.states))
        self._plans: dict[int, tuple] = {}
        self._scanner: Callable | None = None
        self.ordered = any(t.kind == ORDERED for t in self.positive.trans)
        #: counts flow through running counts only (no vertex tree or hash map): promote big ones to GMP
        self.promote = (self.counts_only and _mpz is not None
                        and all(t.kind == PLAIN for t in self.positive.trans))

    # ------------------------------------------------------------------------------------------ predicates

    def _classify(self, conj, comps, position_of, owner, is_list, mandatory, any_vars, follow_sets, first_sets,
                  negs, vertex_filters, edges, class_items) -> str | _Edge:
        """Sort one conjunct of WHERE into a vertex filter, an edge predicate or a scoped equivalence; returns
        how it is evaluated (the :class:`_Edge` for an edge predicate), for :func:`describe`."""
        if isinstance(conj, EquivTest):
            how = []
            for item in conj.items:
                if item.var is None:
                    raise EngineUnsupportedError(
                        f"the equivalence test [{item.attr}] must be the partition key of the trend engine")
                if item.var not in position_of:
                    raise CEPError(f"equivalence test refers to unknown variable {item.var!r}")
                k = position_of[item.var]
                if item.value is not None:
                    attr, value = item.attr, item.value.value
                    vertex_filters.setdefault(k, []).append(lambda ev, a=attr, v=value: ev.get(a) == v)
                    how.append(f"vertex filter on {item.var} (in the engine)")
                elif owner[k] == -1:
                    class_items.append((item.var, item.attr))
                    how.append(f"scoped equivalence: one graph per value of {item.var}.{item.attr}")
                elif len(negs[owner[k]].components) > 1:
                    raise EngineUnsupportedError(
                        f"[{item.var}.{item.attr}] inside a negated sub-sequence is not supported")
                else:
                    how.append(f"holds for the single event of {item.var}")
            return "; ".join(dict.fromkeys(how))
        if any(isinstance(n, (Func, EquivTest)) for n in walk(conj)):
            raise EngineUnsupportedError("aggregates over a Kleene variable are not supported in a trend query's "
                                         "WHERE (GRETA predicates relate adjacent events)")
        names = _refs(conj)
        if None in names:
            raise EngineUnsupportedError("a bare attribute in WHERE is ambiguous here: name its variable")
        unknown = names - position_of.keys()
        if unknown:
            raise CEPError(f"predicate refers to unknown variable {sorted(unknown)[0]!r}")
        if not names:
            if compile_expr(conj)({}) is not True:
                self.never = True
                return "constant, false: no trend"
            return "constant, true"
        graphs = {owner[position_of[v]] for v in names}
        if len(graphs) > 1:
            raise EngineUnsupportedError(
                "a predicate relating a negated variable to variables outside its negated sub-pattern is not "
                "supported by the trend engine")
        gid = graphs.pop()
        follow = follow_sets[gid]
        indexes = {(n.var, n.index) for n in walk(conj) if isinstance(n, Attr)}
        single = {None, "cur", "last", 1}
        if len(names) == 1:
            (v,) = names
            k = position_of[v]
            idx = {i for _, i in indexes}
            if not is_list[v]:
                if not idx <= single:
                    raise EngineUnsupportedError(f"{v!r} is a single event: index {sorted(map(str, idx))} unknown")
                vertex_filters.setdefault(k, []).append(self._filter(conj, v))
                return f"vertex filter on {v} (in the engine)"
            if idx <= {None, "cur"}:
                vertex_filters.setdefault(k, []).append(self._filter(conj, v))
                return f"vertex filter on {v} (in the engine)"
            if idx <= {None, "cur", "next"}:
                names_ = {(v, None): "_p", (v, "cur"): "_p", (v, "next"): "_e"}
            elif idx <= {None, "cur", "prev"}:
                names_ = {(v, "prev"): "_p", (v, None): "_e", (v, "cur"): "_e"}
            else:
                raise EngineUnsupportedError(
                    f"predicate {_show(conj)} relates non-adjacent events of {v!r}: GRETA edge predicates "
                    "relate an event and the next (NEXT(v), v[i-1])")
            if (k, k) in follow:
                edges.append(_Edge(k, k, _rename(conj, names_), gid))
                return edges[-1]
            return f"holds vacuously: no two events of {v} are adjacent"
        if len(names) == 2:
            u, v = sorted(names, key=position_of.get)
            if is_list[u] or is_list[v] or not {i for _, i in indexes} <= single:
                raise EngineUnsupportedError(
                    f"predicate {_show(conj)} relates a Kleene variable to another variable: not supported by "
                    "the trend engine")
            ku, kv = position_of[u], position_of[v]
            required = mandatory if gid == -1 else _mandatory(negs[gid].node)
            for a, b, ka, kb in ((u, v, ku, kv), (v, u, kv, ku)):
                preds = {x for x, y in follow if y == kb}
                if preds == {ka} and kb not in first_sets[gid] and {a, b} <= required:
                    edges.append(_Edge(ka, kb, _rename(conj, {a: "_p", b: "_e"}), gid))
                    return edges[-1]
        raise EngineUnsupportedError(
            f"predicate {_show(conj)} does not relate adjacent events of a trend: not supported by the trend "
            "engine")

    def _filter(self, conj, var: str) -> Callable[[dict], bool]:
        fn = compile_expr(_rename(conj, {var: "_e"}), frozenset({"_e"}) if var in self._any_vars else frozenset())
        return lambda ev: fn({"_e": ev}) is True

    # ------------------------------------------------------------------------------------------ graphs

    def _graph(self, p: _Positions, members: list[int], comps, edges: list[_Edge], vertex_filters,
               any_vars, positive: bool) -> _Graph:
        state_of = {k: j for j, k in enumerate(members)}
        states = [_State(j, k, comps[k].var) for j, k in enumerate(members)]
        for k, alts in p.first.items():
            s = states[state_of[k]]
            s.first, s.start_guard = True, _guard(alts)
        for k, alts in p.last.items():
            s = states[state_of[k]]
            s.last, s.end_guard = True, _guard(alts)
        for k, fs in vertex_filters.items():
            if k in state_of:
                states[state_of[k]].filters = tuple(fs)
        trans: list[_Trans] = []
        for (x, y), alts in sorted(p.follow.items()):
            guard = _guard(alts)
            mine = [e for e in edges if (e.src, e.dst) == (x, y)]
            t = _Trans(len(trans), state_of[x], state_of[y], PLAIN, guard)
            src_any, dst_any = comps[x].var in any_vars, comps[y].var in any_vars
            if mine and positive and guard is None and len(mine) == 1 and not (src_any or dst_any):
                self._index(t, mine[0].expr)
            if mine and t.kind == PLAIN:
                t.kind = SCAN
                fns = [_pair_fn(e.expr, frozenset(n for n, a in (("_p", src_any), ("_e", dst_any)) if a))
                       for e in mine]
                t.pred = fns[0] if len(fns) == 1 else (lambda p_, e_, fs=tuple(fns): all(f(p_, e_) for f in fs))
            elif t.kind == PLAIN and guard is not None:
                t.kind = GUARDED
            for e in mine:
                e.trans = t
            trans.append(t)
            states[t.dst].ins.append(t)
            src = states[t.src]
            if t.kind == PLAIN:
                src.plain_out = True
            elif t.kind in (ORDERED, EQUAL):
                src.ordered_out.append(t)
            elif t.kind == GUARDED:
                src.guarded_out.append(t)
            else:
                src.stored = True
        if positive:
            for s in states:
                s.classed = s.var == self.class_var
                if self.alg.vector:
                    s.contrib = self._contrib(s)
        return _Graph(states, trans)

    @staticmethod
    def _index(t: _Trans, expr) -> None:
        """Make ``t`` ORDERED/EQUAL if ``expr`` compares an expression of the earlier event with one of the
        later: ``f(_p) op g(_e)``."""
        if not (isinstance(expr, BinOp) and expr.op in _FLIP and expr.op != "!="):
            return
        left, right = _refs(expr.left), _refs(expr.right)
        if left == {"_p"} and right == {"_e"}:
            early, late, op = expr.left, expr.right, expr.op
        elif left == {"_e"} and right == {"_p"}:
            early, late, op = expr.right, expr.left, _FLIP[expr.op]
        else:
            return
        t.kind = EQUAL if op == "=" else ORDERED
        t.op = op
        t.key = _event_fn(_rename(early, {"_p": "_e"}), False)
        t.probe = _event_fn(late, False)

    def _contrib(self, s: _State) -> Callable[[dict], tuple]:
        """``event → per-measure values`` for events entering state ``s`` (see :class:`_VectorAlgebra`)."""
        plan = []
        for kind, target, attr in self.measures:
            if target in self._positive_vars:
                applies: Any = target == s.var
            elif target in self._negated_vars:
                applies = False
            else:
                applies = target  # an event type: decided per event
            plan.append((kind, applies, attr))

        def values(ev: dict) -> tuple:
            out = []
            for kind, applies, attr in plan:
                if applies is False or (applies is not True and ev.get("type") != applies):
                    out.append(None)
                    continue
                if attr is None:
                    out.append(1)
                    continue
                v = ev.get(attr)
                if v is None:
                    out.append(None)
                elif kind == "n":
                    out.append(1)
                elif kind == "s":
                    out.append(_exact(v))
                else:
                    out.append(v)
            return tuple(out)

        return values

    # ------------------------------------------------------------------------------------------ runtime helpers

    def roles(self, mask: int) -> tuple:
        """The (graph, state) roles of an event with component bitmask ``mask`` (memoized per mask)."""
        out = self._roles.get(mask)
        if out is None:
            out = self._roles[mask] = tuple(r for k in range(self.n) if mask >> k & 1 for r in self.roles_of[k])
        return out

    def plans(self, mask: int) -> tuple:
        """For :func:`_scan_counts`: per state an event with ``mask`` enters, ``(j, start, plain predecessor
        states, probes, plain_out, keys, last)``; probes and keys are the ORDERED/EQUAL transitions into and
        out of the state."""
        out = self._plans.get(mask)
        if out is None:
            plans = []
            for _, s in self.roles(mask):
                probes = tuple(t for t in s.ins if t.kind != PLAIN)
                keys = tuple(s.ordered_out)
                plans.append((s.j, int(s.first), tuple(t.src for t in s.ins if t.kind == PLAIN), probes,
                              s.plain_out, keys, s.last))
            out = self._plans[mask] = tuple(plans)
        return out

    @property
    def scanner(self) -> Callable:
        """The generated hot loop (:func:`_count_scanner`), built on first use."""
        if self._scanner is None:
            self._scanner = _count_scanner(self)
        return self._scanner

    def mask_of(self, event: dict) -> int:
        """Type test and local predicates, for an event that arrived without a ``_mask``."""
        return component_mask(self.by_type, event)

    def windows_of(self, t) -> range:
        """The indices ``k`` of the windows ``[k·slide, k·slide + window)`` that contain ``t``."""
        s = self.slide
        hi = int(t // s)
        while hi * s > t:
            hi -= 1
        while (hi + 1) * s <= t:
            hi += 1
        return range(self.first_open(t), hi + 1)

    def first_open(self, limit) -> int:
        """The smallest ``k`` whose window has not ended at ``limit`` (``k·slide + window > limit``)."""
        w, s = self.window, self.slide
        k = int((limit - w) // s) + 1
        while k * s + w <= limit:
            k += 1
        while (k - 1) * s + w > limit:
            k -= 1
        return k


def _show(e) -> str:
    return format_expr(e)


@lru_cache(maxsize=64)
def _compiled(spec: TrendSpec) -> _Compiled:
    return _Compiled(spec)


def check(spec: TrendSpec) -> None:
    """Raise :class:`EngineUnsupportedError` (or :class:`CEPError`) if this engine cannot run ``spec``."""
    _compiled(spec)


#: How each transition kind finds a new event's predecessors, for :func:`describe`.
_INDEX_NAMES = {
    PLAIN: "running aggregate per state and window",
    ORDERED: "vertex tree (Fenwick tree + sorted levels)",
    EQUAL: "hash map",
    GUARDED: "invalidation queue",
    SCAN: "scan of the stored vertices",
}


def _markers(guard: tuple) -> str:
    """Negation marker alternatives as text: ``N0``, ``N0 & N1``, ``N0 | N1``."""
    return " | ".join(" & ".join(f"N{n}" for n in alt) for alt in guard)


def _as_written(p) -> str:
    """A (negated) sub-pattern as written: variables that analysis named after their type are not shown."""
    def unname(n):
        if isinstance(n, EventPat) and n.var is not None and len(n.types) == 1 and re.fullmatch(
                rf"{re.escape(safe_identifier(n.types[0]))}(_\d+)?", n.var):
            return replace(n, var=None)
        return n

    return format_pattern(map_nodes(p, unname))


def describe(spec: TrendSpec) -> list[str]:
    """The GRETA template this engine builds for ``spec``, as lines for ``explain`` (read from the compiled
    template itself, so the text cannot drift from what runs): per graph (the positive pattern and each
    negative sub-pattern split off by Algorithm 3) its states with their types and START/END roles and its
    transitions (``SEQ``, Kleene loops) with the index that sums their predecessors, and what each negation
    invalidates; how each WHERE conjunct is evaluated (vertex filter, edge predicate on a transition with its
    index, scoped equivalence); and the executor.

    >>> import sparkcep
    >>> spec = sparkcep.compile("RETURN COUNT(*) PATTERN Stock S+ WHERE S.price > NEXT(S).price WITHIN 10").spec()
    >>> print("\\n".join(describe(spec)))
    template (GRETA §4.1): 1 state, 1 transition
      state S: Stock, START, END
      S -> S (Kleene +): vertex tree (Fenwick tree + sorted levels)
    predicates (GRETA §6):
      S.price > NEXT(S).price: edge predicate on S -> S, index: vertex tree (Fenwick tree + sorted levels)
        keyed by S.price of the earlier event, probed with S.price of the later one
    executor: generated COUNT(*) scan (Algorithm 2, Theorem 4.3), exact Python ints
    """
    try:
        cs = _compiled(spec)
    except CEPError as e:
        return [f"template: not supported by the trend engine: {e}"]
    comps = cs.components

    def name(g: _Graph, j: int) -> str:
        return comps[g.states[j].comp].var

    def graph_lines(g: _Graph, indent: str) -> list[str]:
        lines = []
        for st_ in g.states:
            c = comps[st_.comp]
            roles = [r for r, on in (("START", st_.first), ("END", st_.last)) if on] or ["MID"]
            if st_.start_guard:
                roles.append(f"START only if no {_markers(st_.start_guard)} trend lies between the window start "
                             "and it")
            if st_.end_guard:
                roles.append(f"END only if no {_markers(st_.end_guard)} trend follows it in the window")
            lines.append(f"{indent}state {c.var}: {' | '.join(c.types)}, {', '.join(roles)}")
        for t in g.trans:
            src, dst = g.states[t.src], g.states[t.dst]
            label = "Kleene +" if dst.comp <= src.comp else "SEQ"
            guard = f", invalid if an {_markers(t.guard)} trend lies between the two events" if t.guard else ""
            lines.append(f"{indent}{name(g, t.src)} -> {name(g, t.dst)} ({label}): {_INDEX_NAMES[t.kind]}{guard}")
        return lines

    n_states, n_trans = len(cs.positive.states), len(cs.positive.trans)
    out = [f"template (GRETA §4.1): {n_states} state{'s' * (n_states != 1)}, "
           f"{n_trans} transition{'s' * (n_trans != 1)}"]
    out += graph_lines(cs.positive, "  ")
    graphs = [cs.positive, *cs.negs]
    for nid, (node, g) in enumerate(zip(cs.neg_nodes, cs.negs, strict=True)):
        hits = [f"{name(h, t.src)} -> {name(h, t.dst)}" for h in graphs for t in h.trans
                if t.guard and any(nid in alt for alt in t.guard)]
        hits += [f"START {comps[x.comp].var}" for h in graphs for x in h.states
                 if x.start_guard and any(nid in alt for alt in x.start_guard)]
        hits += [f"END {comps[x.comp].var}" for h in graphs for x in h.states
                 if x.end_guard and any(nid in alt for alt in x.end_guard)]
        out.append(f"negation N{nid} = NOT {_as_written(node)} (GRETA §5, its own graph), a finished trend "
                   f"invalidates: {', '.join(hits) or 'nothing'}")
        out += graph_lines(g, "  ")
    locals_ = [(c.var, c.local) for c in comps if c.local is not None]
    if cs.classified or locals_ or spec.key:
        out.append("predicates (GRETA §6):")
    if spec.key:
        out.append(f"  [{', '.join(spec.key)}]: partition key (equivalence tests and GROUP BY), one graph per value")
    for var, local in locals_:
        out.append(f"  {_show(local)}: vertex filter on {var}, pushed to the Spark SQL filter")
    for conj, how in cs.classified:
        if not isinstance(how, _Edge):
            out.append(f"  {_show(conj)}: {how}")
            continue
        t = how.trans
        g = graphs[how.graph + 1]
        src, dst = name(g, t.src), name(g, t.dst)
        out.append(f"  {_show(conj)}: edge predicate on {src} -> {dst}, index: {_INDEX_NAMES[t.kind]}")
        if t.kind in (ORDERED, EQUAL):
            ex = how.expr
            early, late = (ex.left, ex.right) if _refs(ex.left) == {"_p"} else (ex.right, ex.left)
            out.append(f"    keyed by {_show(_rename(early, {'_p': src}))} of the earlier event, probed with "
                       f"{_show(_rename(late, {'_e': dst}))} of the later one")
    if cs.counts_only:
        ints = f"exact integers, GMP above {BIG_BITS} bits" if cs.promote else "exact Python ints"
        out.append(f"executor: generated COUNT(*) scan (Algorithm 2, Theorem 4.3), {ints}")
    else:
        names = {"n": "COUNT", "s": "SUM", "min": "MIN", "max": "MAX"}
        measures = "".join(f", {names[k]}({t}{'.' + a if a else ''})" for k, t, a in cs.measures)
        out.append(f"executor: template interpreter (Algorithm 2 with §5 invalidation), per vertex and window "
                   f"[count{measures}] (Theorem 9.1)")
    return out


# ----------------------------------------------------------------------------------------------- runtime structures


def _key_class(v) -> int | str | None:
    """Which keys are mutually comparable: numbers (0), strings (1), else one class per type; None for
    NULL and NaN, which compare with nothing (SQL semantics of expr.compile_expr)."""
    if type(v) is float or type(v) is int:
        return 0 if v == v else None
    if v is None or v != v:
        return None
    if isinstance(v, (int, float, Decimal, Fraction)):
        return 0
    if isinstance(v, str):
        return 1
    return type(v).__qualname__


class _VertexTree:
    """A vertex tree (GRETA §7) of one ORDERED transition in one window: the keys of the earlier events with
    their aggregates, answering "the aggregate over the keys ``k`` with ``k op probe``".

    Two parts.  The *live* part holds the events of the current :func:`advance` call: a Fenwick tree over the
    ranks of the numeric keys that call's events can insert into this window (known up front: the batch
    is), so insertion and query take O(log n) interpreted steps.  The *static* part holds everything older,
    as Bentley–Saxe levels (sorted ``(key, aggregate)`` pairs with cumulative aggregates in the query's
    direction) of strictly decreasing sizes: a finished live part (or a key outside any universe, e.g. a
    string) enters as a new level and equal-or-smaller levels merge into it, at C speed; a query bisects
    each of the O(log n) levels.
    """

    __slots__ = ("op", "above", "strict", "levels", "epoch", "universe", "tree", "raw")

    def __init__(self, op: str) -> None:
        self.op = op
        self.above = op in (">", ">=")  # the Fenwick tree runs over reversed ranks: queries are prefixes
        self.strict = op in ("<", ">")
        self.levels: dict[Any, list[tuple[list, list, list]]] = {}
        self.epoch: int | None = None
        self.universe: list | None = None
        self.tree: list | None = None
        self.raw: list | None = None  # aggregate per rank; None for counts (recovered from the tree)

    def insert(self, key, agg, plus, zero, batch: _Batch, tr: _Trans, k: int) -> None:
        """Store ``agg`` under ``key`` (not NULL): in the live part if ``key`` is in the universe of this
        window's events of ``batch``, else as a new static level."""
        cls = _key_class(key)
        if cls == 0:
            if self.epoch != batch.epoch:
                self._renew(batch, tr, k, plus, zero)
            universe = self.universe
            r = bisect_left(universe, key)
            n = len(universe)
            if r < n and universe[r] == key:
                if self.raw is not None:
                    self.raw[r] = plus(self.raw[r], agg)
                tree = self.tree
                i = n - r if self.above else r + 1
                while i <= n:
                    tree[i] = plus(tree[i], agg)
                    i += i & -i
                return
        self._add_level(cls, [(key, agg)], plus)

    def count_loop(self, key, c: int, batch: _Batch, tr: _Trans, k: int) -> int:
        """COUNT(*) through a self-loop whose probe and key are the same value: ``c`` plus the count over the
        stored keys ``s`` with ``s op key``; the result is then stored under ``key`` (if not 0)."""
        kind = key.__class__
        if (kind is not float and kind is not int) or key != key:
            c = self.query(key, c, add)
            if c and _key_class(key) is not None:
                self.insert(key, c, add, 0, batch, tr, k)
            return c
        if self.epoch != batch.epoch:
            self._renew(batch, tr, k, add, 0)
        if self.levels:
            c = self._static(self.levels.get(0, ()), key, c, add)
        universe = self.universe
        r = bisect_left(universe, key)
        n = len(universe)
        if r == n or universe[r] != key:  # not in this batch's universe (cannot happen for batch events)
            c = self._live(key, c, add)
            if c:
                self._add_level(0, [(key, c)], add)
            return c
        tree = self.tree
        base = n - r if self.above else r + 1
        i = base - 1 if self.strict else base
        while i:
            c += tree[i]
            i &= i - 1
        if c:
            i = base
            while i <= n:
                tree[i] += c
                i += i & -i
        return c

    def _renew(self, batch: _Batch, tr: _Trans, k: int, plus, zero) -> None:
        """Start the live part of this batch: the previous one joins the static levels."""
        self._flush(plus)
        universe = batch.universe(tr, k)
        self.epoch, self.universe = batch.epoch, universe
        self.tree = [zero] * (len(universe) + 1)
        self.raw = None if zero == 0 else [zero] * len(universe)

    def _flush(self, plus) -> None:
        """Move the live part into the static levels."""
        if self.universe is None:
            return
        raw = self.raw
        if raw is None:  # counts: undo the Fenwick sums (the inverse of its linear-time construction)
            tree = self.tree
            n = len(tree) - 1
            for i in range(n, 0, -1):
                j = i + (i & -i)
                if j <= n:
                    tree[j] -= tree[i]
            raw = tree[:0:-1] if self.above else tree[1:]
        pairs = [(key, a) for key, a in zip(self.universe, raw, strict=True) if a]
        self.epoch = self.universe = self.tree = self.raw = None
        if pairs:
            self._add_level(0, pairs, plus)

    def _add_level(self, cls, pairs: list, plus) -> None:
        levels = self.levels.get(cls)
        if levels is None:
            levels = self.levels[cls] = []
        while levels and len(levels[-1][0]) <= len(pairs):
            pairs = sorted(levels.pop()[1] + pairs, key=_first)
        if self.above:
            cum = list(accumulate(map(_second, reversed(pairs)), plus))
            cum.reverse()
        else:
            cum = list(accumulate(map(_second, pairs), plus))
        levels.append((list(map(_first, pairs)), pairs, cum))

    def query(self, probe, total, plus):
        """``total`` plus the aggregate over the stored keys ``k`` with ``k op probe``."""
        cls = _key_class(probe)
        levels = self.levels.get(cls)
        if levels:
            total = self._static(levels, probe, total, plus)
        if cls == 0 and self.universe is not None:
            total = self._live(probe, total, plus)
        return total

    def _static(self, levels, probe, total, plus):
        # "<" and ">=" split the keys before the first one equal to probe, "<=" and ">" after the last
        find = bisect_left if self.strict != self.above else bisect_right
        if self.above:
            for keys, _, cum in levels:
                i = find(keys, probe)
                if i < len(keys):
                    total = plus(total, cum[i])
        else:
            for keys, _, cum in levels:
                i = find(keys, probe)
                if i:
                    total = plus(total, cum[i - 1])
        return total

    def _live(self, probe, total, plus):
        universe, tree = self.universe, self.tree
        i = (bisect_left if self.strict != self.above else bisect_right)(universe, probe)
        if self.above:
            i = len(universe) - i
        while i:
            total = plus(total, tree[i])
            i &= i - 1
        return total


class _Batch:
    """The events of one :func:`advance` call, for the live parts of the vertex trees: per ORDERED
    transition the keys of the batch's events that may enter its source state, and per window the sorted
    distinct numeric keys among them (the Fenwick tree's universe)."""

    def __init__(self, cs: _Compiled, ready: list, epoch: int, times: list):
        self.cs = cs
        self.ready = ready
        self.epoch = epoch
        self.times = times
        self._keys: dict[int, list] = {}
        self._universes: dict[tuple[int, int], list] = {}

    def universe(self, tr: _Trans, k: int) -> list:
        found = self._universes.get((tr.id, k))
        if found is None:
            keys = self._keys.get(tr.id)
            if keys is None:
                bit = 1 << self.cs.positive.states[tr.src].comp
                attr = getattr(tr.key, "attr_name", None)
                keys = self._keys[tr.id] = (
                    [ev.get(attr) if mask & bit else None for _, mask, ev in self.ready] if attr is not None
                    else [tr.key(ev) if mask & bit else None for _, mask, ev in self.ready])
            start = k * self.cs.slide
            lo, hi = bisect_left(self.times, start), bisect_left(self.times, start + self.cs.window)
            # ints and non-NaN floats; other numbers (rare) go to the static levels
            found = self._universes[tr.id, k] = sorted(
                {v for v in keys[lo:hi] if v.__class__ is int or (v.__class__ is float and v == v)})
        return found


class _Queue:
    """A FIFO of ``(ts, aggregate)`` in ts order with its total, popping from the front in amortized O(1)
    for any aggregate (two stacks).  Holds the vertices behind a negation marker: a finished negative trend
    invalidates a prefix of them, for good (§5.2)."""

    __slots__ = ("front", "back", "back_total")

    def __init__(self, zero) -> None:
        self.front: list[tuple[Any, Any]] = []  # oldest last; each with the total of itself and newer fronts
        self.back: list[tuple[Any, Any]] = []
        self.back_total = zero

    def push(self, ts, agg, alg) -> None:
        self.back.append((ts, agg))
        self.back_total = alg.add(self.back_total, agg)

    def drop_before(self, ts, alg) -> None:
        """Drop the entries older than ``ts``."""
        while True:
            if not self.front:
                if not self.back:
                    return
                acc = alg.zero
                for t, a in reversed(self.back):
                    acc = alg.add(acc, a)
                    self.front.append((t, acc))
                self.back = []
                self.back_total = alg.zero
            if self.front[-1][0] >= ts:
                return
            self.front.pop()

    def total(self, alg):
        return alg.add(self.front[-1][1], self.back_total) if self.front else self.back_total


class _Win:
    """One window's aggregates in one positive graph: ``R[j]`` the running aggregate over the vertices of
    state ``j`` and ``R[-1]`` the final aggregate (over END events), the vertex trees and hash maps
    (``index``), the queues of guarded transitions and of END events awaiting end negation (``guarded``,
    ``ends``)."""

    __slots__ = ("R", "index", "guarded", "ends")

    def __init__(self, n_states: int, zero) -> None:
        self.R = [zero] * (n_states + 1)
        self.index: dict[int, Any] = {}
        self.guarded: dict[int, _Queue] = {}
        self.ends: dict[int, _Queue] = {}


class _Run:
    """The runtime of the positive graph (one per value of a scoped equivalence test): windows, and the
    vertices of states whose outgoing edges are checked one by one (``ts, event, {window: aggregate}``)."""

    __slots__ = ("wins", "stores")

    def __init__(self) -> None:
        self.wins: dict[int, _Win] = {}
        self.stores: dict[int, list] = {}

    def clone(self) -> _Run:
        out = _Run()
        for k, win in self.wins.items():
            copy = _Win.__new__(_Win)
            copy.R = list(win.R)
            copy.index = {t: _copy_index(ix) for t, ix in win.index.items()}
            copy.guarded = {t: _copy_queue(q) for t, q in win.guarded.items()}
            copy.ends = {t: _copy_queue(q) for t, q in win.ends.items()}
            out.wins[k] = copy
        out.stores = {j: list(store) for j, store in self.stores.items()}
        return out


def _copy_index(ix):
    if isinstance(ix, dict):
        return dict(ix)
    out = _VertexTree(ix.op)
    out.levels = {c: list(levels) for c, levels in ix.levels.items()}  # levels are never mutated in place
    out.epoch, out.universe = ix.epoch, ix.universe  # the universe is shared and read-only
    out.tree = None if ix.tree is None else list(ix.tree)
    out.raw = None if ix.raw is None else list(ix.raw)
    return out


def _copy_queue(q: _Queue) -> _Queue:
    out = _Queue(None)
    out.front, out.back, out.back_total = list(q.front), list(q.back), q.back_total
    return out


class _NegRun:
    """The runtime of one negation graph: per state the largest trend start over its vertices (``best``),
    the monotone queues of guarded transitions (``(ts, start)``, starts decreasing) and stored vertices."""

    __slots__ = ("best", "queues", "stores")

    def __init__(self, n_states: int) -> None:
        self.best = [-_INF] * n_states
        self.queues: dict[int, deque] = {}
        self.stores: dict[int, list] = {}


# ----------------------------------------------------------------------------------------------- state


class TrendState(SlotState):
    """The state of one partition.  Mutated in place by :func:`step` and :func:`advance`, which return it.

    ``frontier``  the watermark processed so far: events with ``ts <= frontier`` are late.
    ``pending``   buffered ``(ts, mask, event)`` in arrival order, all with ``ts > frontier``.
    ``group``     the GROUP BY values (constant within a partition), from the first event.
    ``kmin``      the first window not emitted yet (None before the first event); ``close_at`` its end.
    ``runs``      the positive graph's runtime per scoped-equivalence value (``None``: the only one, or the
                  one without class-variable events that new values start from).
    ``latest``    per negation ``N``: ``L_N``, the latest start of a finished trend of ``N``.
    ``negs``      per negation: its graph's runtime.
    ``epoch``     the number of :func:`advance` calls that processed events (the vertex trees' live parts).
    ``late``      events dropped because ``ts <= frontier`` when they arrived.
    ``invalid``   events dropped because their ``ts`` was null, NaN or infinite.
    """

    __slots__ = ("frontier", "pending", "group", "kmin", "close_at", "runs", "latest", "negs", "epoch", "late",
                 "invalid")
    VERSION = STATE_VERSION
    ENGINE = "trend engine"

    def __init__(self) -> None:
        self.frontier: float = -_INF
        self.pending: list[tuple[Any, int, dict]] = []
        self.group: tuple | None = None
        self.kmin: int | None = None
        self.close_at: float = _INF
        self.runs: dict[Any, _Run] = {}
        self.latest: list[float] = []
        self.negs: list[_NegRun] = []
        self.epoch = 0
        self.late = 0
        self.invalid = 0



def init_state() -> TrendState:
    """A fresh, empty partition state."""
    return TrendState()


def _ensure(cs: _Compiled, st: TrendState) -> None:
    """Create the graphs' runtimes on first use (a fresh state does not know the spec)."""
    if not st.runs:
        st.runs[None] = _Run()
        st.latest = [-_INF] * len(cs.negs)
        st.negs = [_NegRun(len(g.states)) for g in cs.negs]


def _negation_memory(st: TrendState) -> float:
    """The latest trend start the negation graphs still hold (``-inf`` if none): it can block trends of every
    window not emitted yet that starts at or before it.  Older values are dropped as windows close."""
    newest = max(st.latest, default=-_INF)
    for nr in st.negs:
        newest = max(newest, max(nr.best, default=-_INF),
                     max((store[-1][0] for store in nr.stores.values() if store), default=-_INF),
                     max((q[0][1] for q in nr.queues.values() if q), default=-_INF))
    return newest


def is_empty(state: TrendState) -> bool:
    """True when nothing is buffered and no window or negation state is live (the caller may drop the state)."""
    return (not state.pending and not any(run.wins for run in state.runs.values())
            and _negation_memory(state) == -_INF)


def wakeup(spec: TrendSpec, state: TrendState) -> float | None:
    """The smallest watermark at which :func:`advance` has work to do without new events, or None: the
    earliest buffered ``ts`` (it becomes processable), the end of the first open window (its rows are due),
    or the time at which the negation state can no longer affect any window."""
    cs = _compiled(spec)
    times = [ts for ts, _, _ in state.pending]
    if any(run.wins for run in state.runs.values()):
        times.append(state.close_at)
    newest = _negation_memory(state)
    if newest > -_INF:
        times.append(newest + cs.window)
    return min(times) if times else None


# -------------------------------------------------------------------------------------------- step / advance


def _gc_paused(fn):
    """Run ``fn`` with Python's cyclic garbage collector paused (and its previous state restored).

    :func:`step` and :func:`advance` allocate a tuple per buffered event and create no reference cycles; with
    the collector on, its generational scans over everything the process holds (a micro-batch of event dicts,
    the pending buffer) cost more than the engine's own work on large batches.  Reference counting still frees
    everything as usual; the collector catches up on its next run after the call.
    """

    @wraps(fn)
    def paused(*args, **kwargs):
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()

    return paused


@_gc_paused
def step(spec: TrendSpec, state: TrendState, events: Iterable[dict]) -> tuple[TrendState, list[dict]]:
    """Buffer ``events`` (any order).  Returns ``(state, [])``: rows are only produced by :func:`advance`.

    Events with ``ts <= state.frontier`` are late and counted in ``state.late``; events without a usable
    ``ts`` are counted in ``state.invalid``; events that can fill no component are dropped.
    """
    cs = _compiled(spec)
    # one pass over the event dicts: a pass per column at C speed measured slower (each misses the cache on
    # every dict)
    frontier = state.frontier
    full = cs.full
    type_masks = cs.type_masks
    append = state.pending.append
    late = invalid = 0
    for ev in events:
        ts = ev.get("ts")
        kind = ts.__class__
        if kind is not int and (kind is not float or ts - ts != 0.0):  # rare: None, NaN, ±inf, other numbers
            if ts is None or ts != ts or ts in (_INF, -_INF):
                invalid += 1
                continue
        if ts <= frontier:
            late += 1
            continue
        mask = ev.get("_mask")
        if mask is None:
            mask = type_masks.get(ev.get("type"), 0) if type_masks is not None else cs.mask_of(ev)
        else:
            mask = cs.mask_of(ev) if mask != mask else int(mask) & full
        if mask:
            append((ts, mask, ev))
    state.late += late
    state.invalid += invalid
    if state.group is None and state.pending:
        state.group = tuple(state.pending[0][2].get(g) for g in cs.group_by)
    return state, []


@_gc_paused
def advance(spec: TrendSpec, state: TrendState, watermark: float) -> tuple[TrendState, list[dict]]:
    """Process the buffered events with ``ts <= watermark`` in ``ts`` order and return the rows of every
    window whose end the watermark has reached, each window exactly once.

    ``advance(spec, state, inf)`` flushes everything (batch).  A watermark at or below the frontier is a
    no-op.
    """
    if not watermark > state.frontier:
        return state, []
    cs = _compiled(spec)
    _ensure(cs, state)
    pending = state.pending
    times = list(map(_ts_of, pending))
    strict = all(map(lt, times, islice(times, 1, None)))  # in order and without ties (the common batch)
    if not strict:
        pending.sort(key=_ts_of)
        times.sort()
    cut = bisect_right(times, watermark)
    ready, state.pending = pending[:cut], pending[cut:]
    state.frontier = watermark
    rows: list[dict] = []
    if ready and not cs.never:
        _scan(cs, state, ready, rows, times[:cut] if cut < len(times) else times, strict)
    if state.kmin is not None:
        _emit(cs, state, watermark, rows)
    return state, rows


def _scan(cs: _Compiled, st: TrendState, ready: list, rows: list[dict], times: list, strict: bool) -> None:
    """Process ``ready`` (sorted by ts; ``times`` their ts, ``strict`` if no two are equal) one ``ts`` group at
    a time: the events of a group see the graph as it was before the group, so equal timestamps never follow
    each other in a trend."""
    if st.kmin is None:
        st.kmin = cs.first_open(ready[0][0])
        st.close_at = st.kmin * cs.slide + cs.window
    batch = None
    if cs.ordered:
        st.epoch += 1
        batch = _Batch(cs, ready, st.epoch, times)
    if cs.counts_only:
        _scan_counts(cs, st, ready, rows, batch, times, strict)
        return
    i, total = 0, len(ready)
    while i < total:
        t = ready[i][0]
        j = i + 1
        while j < total and ready[j][0] == t:
            j += 1
        if t >= st.close_at:
            _emit(cs, st, t, rows)
        _process_group(cs, st, t, cs.windows_of(t), ready[i:j], batch)
        i = j


def _scan_counts(cs: _Compiled, st: TrendState, ready: list, rows: list[dict], batch: _Batch | None, times: list,
                 strict: bool) -> None:
    """:func:`_scan` for COUNT(*) over plain, ordered and equality transitions (no negation, no scoped
    equivalence): runs of events with distinct timestamps go through the generated hot loop
    (:func:`_count_scanner`), groups of events sharing a ts through :func:`_count_group`."""
    ties = () if strict else list(compress(count(), map(eq, times, islice(times, 1, None))))
    scan = cs.scanner
    pos = 0
    g = 0
    while g < len(ties):
        start = ties[g]
        while g + 1 < len(ties) and ties[g + 1] == ties[g] + 1:
            g += 1
        end = ties[g] + 2
        g += 1
        if start > pos:
            _chunked(cs, scan, ready[pos:start], st, rows, batch)
        _count_group(cs, st, ready[start:end], rows, batch)
        pos = end
    if pos < len(ready):
        _chunked(cs, scan, ready[pos:] if pos else ready, st, rows, batch)


def _chunked(cs: _Compiled, scan: Callable, part: list, st: TrendState, rows: list[dict], batch) -> None:
    """Run the generated scan over ``part``; for plain templates (counts flow through the running counts
    only), in chunks of :data:`SCAN_CHUNK` events with :func:`_promote` in between."""
    if not cs.promote:
        scan(part, st, rows, batch)
        return
    for i in range(0, len(part), SCAN_CHUNK):
        scan(part[i:i + SCAN_CHUNK] if len(part) > SCAN_CHUNK else part, st, rows, batch)
        _promote(st)


def _promote(st: TrendState) -> None:
    """Turn the running counts longer than :data:`BIG_BITS` into GMP integers: every sum they enter is then
    a GMP addition (exact, 2-3x faster than Python's at thousands of bits).  Rows carry Python ints
    (:func:`_row`)."""
    for win in st.runs[None].wins.values():
        R = win.R
        for j, v in enumerate(R):
            if v.__class__ is int and v.bit_length() > BIG_BITS:
                R[j] = _mpz(v)


def _count_group(cs: _Compiled, st: TrendState, group: list, rows: list[dict], batch: _Batch | None) -> None:
    """Events sharing one ts, or one event entering several states: every vertex is computed before any is
    inserted, so none of them precedes another."""
    t = group[0][0]
    if t >= st.close_at:
        _emit(cs, st, t, rows)
    ks = cs.windows_of(t)
    wins = st.runs[None].wins
    updates = [(plan, ev, _count_vertex(plan, ev, wins, ks)) for _, mask, ev in group for plan in cs.plans(mask)]
    for plan, ev, counts in updates:
        _count_insert(plan, ev, counts, wins, cs.n_states, batch)


def _count_vertex(plan: tuple, ev: dict, wins: dict, ks: range) -> list:
    """Per window ``k`` of ``ks``, the number of trends that end at the new vertex (Theorem 4.3)."""
    _, start, srcs, probes, _, _, _ = plan
    probes = [(tr, tr.probe(ev)) for tr in probes]
    out = []
    for k in ks:
        win = wins.get(k)
        c = start
        if win is not None:
            R = win.R
            for src in srcs:
                c += R[src]
            for tr, value in probes:
                c = _index_query(win, tr, value, c)
        if c:
            out.append((k, c))
    return out


def _count_insert(plan: tuple, ev: dict, counts: list, wins: dict, m: int, batch: _Batch | None) -> None:
    """Add a vertex's per-window counts to its state's running counts, trees and maps, and to the final
    counts if it is an END event."""
    state, _, _, _, plain_out, keys, last = plan
    keys = [(tr, tr.key(ev)) for tr in keys]
    for k, c in counts:
        win = wins.get(k)
        if win is None:
            win = wins[k] = _Win(m, 0)
        R = win.R
        if plain_out:
            R[state] += c
        for tr, value in keys:
            _index_insert(win, tr, value, c, add, 0, batch, k)
        if last:
            R[m] += c


def _index_query(win: _Win, tr: _Trans, probe, total):
    """``total`` plus the count over the vertices behind ORDERED/EQUAL transition ``tr`` that ``probe``
    connects to."""
    ix = win.index.get(tr.id)
    if ix is None or _key_class(probe) is None:
        return total
    if tr.kind == ORDERED:
        return ix.query(probe, total, add)
    try:
        return total + ix.get(probe, 0)
    except TypeError:  # an unhashable value equals no stored key
        return total


def _value_source(tr: _Trans, prefix: str, fn: Callable, env: dict, values: dict, lines: list) -> str:
    """The local holding the value ``fn(ev)`` in the generated scan, emitting its assignment once per
    state branch (a plain attribute is read inline: ``ev.get(attr)``)."""
    name = f"{prefix}{tr.id}"
    env[name] = fn
    attr = getattr(fn, "attr_name", None)
    src = f"ev.get({attr!r})" if attr is not None else f"{name}(ev)"
    if src not in values:
        values[src] = f"v{len(values)}"
        lines.append(f"            {values[src]} = {src}")
    return values[src]


def _window_body(s: _State, m: int, env: dict, lines: list, single: bool) -> list[str]:
    """The generated code for a vertex of state ``s`` in one window ``k`` (``win``, its counts ``R``):
    Theorem 4.3's sum over the predecessors plus the START term, then the updates of the running counts,
    vertex trees and final count.  Event values it needs are assigned to locals in ``lines`` first.  With
    ``single`` (the only window), its vertex trees are the locals ``X<transition>``."""
    values: dict[str, str] = {}  # source of an event value → local name
    probes = [(t, _value_source(t, "P", t.probe, env, values, lines)) for t in s.ins if t.kind != PLAIN]
    keys = [(t, _value_source(t, "K", t.key, env, values, lines)) for t in s.ordered_out]
    loop = None  # a self-loop probing and keying its tree with the same value: one call does both
    if (len(probes) == 1 and len(keys) == 1 and probes[0][0] is keys[0][0] and probes[0][1] == keys[0][1]
            and probes[0][0].kind == ORDERED):
        loop, v = probes[0]
        probes = keys = []
    terms = [str(int(s.first))] if s.first else []
    terms += [f"R[{t.src}]" for t in s.ins if t.kind == PLAIN]
    out = [f"c = {' + '.join(terms) or '0'}"]
    out += [f"c = _index_query(win, T{t.id}, {v}, c)" for t, v in probes]
    if loop is not None:
        tree = f"X{loop.id}" if single else f"win.index[{loop.id}]"
        out.append(f"c = {tree}.count_loop({v}, c, batch, T{loop.id}, k)")
    updates = [f"R[{s.j}] += c"] if s.plain_out else []
    updates += [f"_index_insert(win, T{t.id}, {v}, c, add, 0, batch, k)" for t, v in keys]
    if s.last:
        updates.append(f"R[{m}] += c")
    if s.first and not probes and loop is None:  # c >= 1
        return out + (updates or ["pass"])
    return [*out, "if c:", *(f"    {u}" for u in updates or ["pass"])]


def _count_scanner(cs: _Compiled) -> Callable:
    """Generate the hot loop of Algorithm 2 for a COUNT(*) spec: one branch per template state with its
    predecessor states, START term, ORDERED/EQUAL transitions and END update written out, over the list of
    windows that contain the current ts (created as the range moves, with their vertex trees).  The loop
    takes events with distinct timestamps; an event entering several states goes through
    :func:`_count_group`.

    Generated rather than interpreted from the template because the per-event work of a trend count is a
    few additions: a generic loop spends ~10x that on dispatch."""
    m = cs.n_states
    trees = [t for t in cs.positive.trans if t.kind == ORDERED]
    env: dict[str, Any] = {"_emit": _emit, "_count_group": _count_group, "_Win": _Win, "_index_query": _index_query,
                           "_index_insert": _index_insert, "_VertexTree": _VertexTree, "add": add, "NEG_INF": -_INF,
                           "cs": cs, "S": cs.slide, "W": cs.window, "M": m}
    env.update((f"T{t.id}", t) for t in cs.positive.trans)
    lines = [
        "def scan(ready, st, rows, batch):",
        "    wins = st.runs[None].wins",
        "    close_at = st.close_at",
        "    lo_end = hi_next = nxt = NEG_INF  # nxt: the smallest ts at which close_at, lo_end or hi_next is due",
        "    cur = ()",
        "    for t, mask, ev in ready:",
        "        if t >= nxt:",
        "            if t >= close_at:",
        "                _emit(cs, st, t, rows)",
        "                close_at = st.close_at",
        "                lo_end = NEG_INF",
        "            if t >= lo_end or t >= hi_next:",
        "                ks = cs.windows_of(t)",
        "                lo_end, hi_next = ks.start * S + W, ks.stop * S",
        "                cur = []",
        "                for k in ks:",
        "                    win = wins.get(k)",
        "                    if win is None:",
        "                        win = wins[k] = _Win(M, 0)",
        *(f"                    if {t.id} not in win.index:\n"
          f"                        win.index[{t.id}] = _VertexTree({t.op!r})" for t in trees),
        "                    cur.append((k, win, win.R))",
        "                one = len(cur) == 1",
        "                if one:",
        "                    k, win, R = cur[0]",
        *(f"                    X{t.id} = win.index[{t.id}]" for t in trees),
        "            nxt = min(close_at, lo_end, hi_next)",
    ]
    # dispatch on the component bitmask: without negation every component is one state of the positive graph,
    # so a one-bit mask names the state; an event entering several states goes through _count_group
    for s in cs.positive.states:
        lines.append(f"        {'if' if s.j == 0 else 'elif'} mask == {1 << s.comp}:  # state {s.var}")
        single = _window_body(s, m, env, lines, True)
        lines.append("            if one:")
        lines.extend(f"                {b}" for b in single)
        lines.append("            else:")
        lines.append("                for k, win, R in cur:")
        lines.extend(f"                    {b}" for b in _window_body(s, m, env, [], False))
    lines += [
        "        else:",
        "            _count_group(cs, st, [(t, mask, ev)], rows, batch)",
        "            lo_end = nxt = NEG_INF",
    ]
    source = "\n".join(lines)
    exec(compile(source, "<sparkcep trend scan>", "exec"), env)
    scan = env["scan"]
    scan.source = source  # for debugging: print(_compiled(spec).scanner.source)
    return scan


def _index_insert(win: _Win, tr: _Trans, key, agg, plus, zero, batch: _Batch | None, k: int) -> None:
    """Insert a vertex's aggregate into the vertex tree (ORDERED) or hash map (EQUAL) of ``tr`` in ``win``."""
    if _key_class(key) is None:
        return
    if tr.kind == ORDERED:
        ix = win.index.get(tr.id)
        if ix is None:
            ix = win.index[tr.id] = _VertexTree(tr.op)
        ix.insert(key, agg, plus, zero, batch, tr, k)
        return
    ix = win.index.setdefault(tr.id, {})
    try:
        ix[key] = plus(ix.get(key, zero), agg)
    except TypeError:  # unhashable: equal to no probe
        pass


def _process_group(cs: _Compiled, st: TrendState, t, ks: range, group: list, batch: _Batch | None) -> None:
    """Insert the events of one ``ts`` group into the graphs (Algorithm 2 with §5's valid predecessors and
    §6's per-window aggregates): compute every vertex first, then insert them all."""
    if not ks:
        return  # t lies between windows (slide > window): no trend can use these events
    latest = st.latest
    if cs.class_var is not None:
        attrs = cs.class_attrs
        for _, mask, ev in group:
            if any(gid == -1 and s.classed for gid, s in cs.roles(mask)):
                value = tuple(ev.get(a) for a in attrs)
                if value not in st.runs:
                    st.runs[value] = st.runs[None].clone()
    positive: list = []
    negative: list = []
    for _, mask, ev in group:
        for gid, s in cs.roles(mask):
            if s.filters and not all(f(ev) for f in s.filters):
                continue
            if gid == -1:
                runs = (st.runs[tuple(ev.get(a) for a in cs.class_attrs)],) if s.classed else st.runs.values()
                for run in runs:
                    aggs = _vertex(cs, run, s, ev, t, ks, latest)
                    if aggs:
                        positive.append((run, s, ev, aggs))
            else:
                start = _neg_vertex(st.negs[gid], s, ev, t, latest)
                if start is not None:
                    negative.append((gid, s, ev, start))
    for run, s, ev, aggs in positive:
        _insert(cs, run, s, ev, t, aggs, batch)
    for gid, s, ev, start in negative:
        nr = st.negs[gid]
        if start > nr.best[s.j]:
            nr.best[s.j] = start
        for tr in s.guarded_out:
            q = nr.queues.get(tr.id)
            if q is None:
                q = nr.queues[tr.id] = deque()
            while q and q[-1][1] <= start:
                q.pop()
            q.append((t, start))
        if s.stored:
            nr.stores.setdefault(s.j, []).append((t, ev, start))
        if s.last and start > latest[gid]:
            latest[gid] = start


def _vertex(cs: _Compiled, run: _Run, s: _State, ev: dict, t, ks: range, latest: list) -> dict:
    """The aggregates of a new vertex of state ``s`` per window ``k`` (Theorem 4.3 / 9.1): the START term plus
    the sum over its valid predecessors, for every window of ``ks`` where it has a trend."""
    alg = cs.alg
    zero, plus = alg.zero, alg.add
    scanned: dict | None = None
    probes = []
    for tr in s.ins:
        if tr.kind == SCAN:
            store = run.stores.get(tr.src)
            if not store:
                continue
            floor = _threshold(tr.guard, latest) if tr.guard else -_INF
            pred = tr.pred
            for pts, pev, paggs in store:
                if pts >= floor and pred(pev, ev):
                    if scanned is None:
                        scanned = {}
                    for k, a in paggs.items():
                        scanned[k] = plus(scanned.get(k, zero), a)
        elif tr.kind == GUARDED:
            probes.append((tr, _threshold(tr.guard, latest)))
        elif tr.kind != PLAIN:
            probes.append((tr, tr.probe(ev)))
    start_floor = None
    if s.first:
        start_floor = _threshold(s.start_guard, latest) if s.start_guard else -_INF
    values = s.contrib(ev) if s.contrib is not None else None
    slide = cs.slide
    wins = run.wins
    out = {}
    for k in ks:
        win = wins.get(k)
        acc = zero
        if win is not None:
            R = win.R
            for tr in s.ins:
                if tr.kind == PLAIN:
                    acc = plus(acc, R[tr.src])
            for tr, probe in probes:
                if tr.kind == GUARDED:
                    q = win.guarded.get(tr.id)
                    if q is not None:
                        q.drop_before(probe, alg)
                        acc = plus(acc, q.total(alg))
                    continue
                ix = win.index.get(tr.id)
                if ix is None or _key_class(probe) is None:
                    continue
                if tr.kind == ORDERED:
                    acc = ix.query(probe, acc, plus)
                else:
                    try:
                        acc = plus(acc, ix.get(probe, zero))
                    except TypeError:  # an unhashable value equals no stored key
                        pass
        if scanned is not None:
            acc = plus(acc, scanned.get(k, zero))
        start = 1 if start_floor is not None and k * slide > start_floor else 0
        a = alg.lift(acc, start, values)
        if a:
            out[k] = a
    return out


def _insert(cs: _Compiled, run: _Run, s: _State, ev: dict, t, aggs: dict, batch: _Batch | None) -> None:
    """Add a vertex to the window aggregates, vertex trees and queues of its state, and to the final
    aggregate if it is an END event (Algorithm 2 lines 8–10)."""
    alg = cs.alg
    plus, zero = alg.add, alg.zero
    keys = [(tr, tr.key(ev)) for tr in s.ordered_out]
    j = s.j
    wins = run.wins
    n_states = len(cs.positive.states)
    for k, a in aggs.items():
        win = wins.get(k)
        if win is None:
            win = wins[k] = _Win(n_states, zero)
        if s.plain_out:
            win.R[j] = plus(win.R[j], a)
        for tr, key in keys:
            _index_insert(win, tr, key, a, plus, zero, batch, k)
        for tr in s.guarded_out:
            q = win.guarded.get(tr.id)
            if q is None:
                q = win.guarded[tr.id] = _Queue(zero)
            q.push(t, a, alg)
        if s.last:
            if s.end_guard is None:
                win.R[-1] = plus(win.R[-1], a)
            else:
                q = win.ends.get(j)
                if q is None:
                    q = win.ends[j] = _Queue(zero)
                q.push(t, a, alg)
    if s.stored:
        run.stores.setdefault(j, []).append((t, ev, aggs))


def _neg_vertex(nr: _NegRun, s: _State, ev: dict, t, latest: list) -> float | None:
    """The latest start of a trend of a negative sub-pattern ending at this event (None: no such trend)."""
    best = t if s.first else -_INF
    for tr in s.ins:
        if tr.kind == PLAIN:
            v = nr.best[tr.src]
        elif tr.kind == GUARDED:
            q = nr.queues.get(tr.id)
            floor = _threshold(tr.guard, latest)
            while q and q[0][0] < floor:
                q.popleft()
            v = q[0][1] if q else -_INF
        else:
            floor = _threshold(tr.guard, latest) if tr.guard else -_INF
            v = max((pstart for pts, pev, pstart in nr.stores.get(tr.src, ()) if pts >= floor and tr.pred(pev, ev)),
                    default=-_INF)
        if v > best:
            best = v
    return None if best == -_INF else best


def _emit(cs: _Compiled, st: TrendState, limit, rows: list[dict]) -> None:
    """Emit every window that ends at or before ``limit`` (GRETA §6: the final aggregate per window), then
    drop what no open window needs any more."""
    w, s = cs.window, cs.slide
    alg = cs.alg
    states = cs.positive.states
    due = sorted({k for run in st.runs.values() for k in run.wins if k * s + w <= limit})
    for k in due:
        total = alg.zero
        for run in st.runs.values():
            win = run.wins.pop(k, None)
            if win is None:
                continue
            total = alg.add(total, win.R[-1])
            for j, q in win.ends.items():
                q.drop_before(_threshold(states[j].end_guard, st.latest), alg)
                total = alg.add(total, q.total(alg))
        if total:
            rows.append(_row(cs, st, k, total))
    if limit == _INF:
        st.kmin, st.close_at = None, _INF
        st.runs, st.latest, st.negs = {}, [], []
        return
    st.kmin = max(st.kmin, cs.first_open(limit))
    st.close_at = st.kmin * s + w
    horizon = st.kmin * s
    for key in [key for key, run in st.runs.items() if key is not None and not run.wins]:
        del st.runs[key]
    for run in st.runs.values():
        _prune(run.stores, horizon)
    for nr in st.negs:
        _prune(nr.stores, horizon)
        for q in nr.queues.values():
            while q and q[0][0] < horizon:
                q.popleft()
    for i, v in enumerate(st.latest):
        if v < horizon:
            st.latest[i] = -_INF  # too old to block anything in an open window
    for nr in st.negs:
        nr.best = [b if b >= horizon else -_INF for b in nr.best]


def _prune(stores: dict[int, list], horizon) -> None:
    for store in stores.values():
        cut = bisect_left(store, horizon, key=_ts_of)
        if cut:
            del store[:cut]


def _final_sum(v):
    return float(v) if isinstance(v, Fraction) else v


def _final_avg(v, n: int):
    if type(v) is float:  # inf or NaN
        return v
    return float(v / n) if isinstance(v, Fraction) else v / n


def _row(cs: _Compiled, st: TrendState, k: int, total) -> dict:
    s, w = cs.slide, cs.window
    row = {"window_start": k * s, "window_end": k * s + w}
    row.update(zip(cs.group_by, st.group or (None,) * len(cs.group_by), strict=True))
    partials = {}
    for name, func, n, x in cs.outputs:
        if func == "count_all":
            row[name] = total[0] if cs.alg.vector else int(total)  # a Python int, also from a GMP integer
        elif func == "count":
            row[name] = total[n]
        elif not total[n]:
            row[name] = None
        elif func == "sum":
            row[name] = _final_sum(total[x])
        elif func == "avg":
            row[name] = _final_avg(total[x], total[n])
        else:
            row[name] = total[x]
        if cs.partial and func in ("sum", "avg"):
            partials[f"{PARTIAL}{name}_sum"] = total[x] if total[n] else None
            partials[f"{PARTIAL}{name}_n"] = total[n]
    row.update(partials)
    return row


def merge_rows(spec: TrendSpec, rows: Iterable[dict]) -> list[dict]:
    """Combine the rows of several partitions into one row per window and group (GRETA §6 grouping).

    The engine runs per partition of ``spec.key``; when the key holds attributes that are not GROUP BY
    attributes (GRETA Q1: key ``company, sector``, groups ``sector``), several partitions contribute to one
    group: counts and sums add up, MIN/MAX fold, and AVG is the summed sum over the summed count, which the
    rows carry as ``_partial_<name>_sum``/``_n`` columns for that purpose.  The result has no partial
    columns and is sorted by window, then group.
    """
    cs = _compiled(spec)
    merged: dict[tuple, dict] = {}
    for row in rows:
        key = (row["window_start"], row["window_end"], *(row[g] for g in cs.group_by))
        into = merged.get(key)
        if into is None:
            merged[key] = dict(row)
            continue
        for name, func, _, _ in cs.outputs:
            a, b = into[name], row[name]
            if func in ("count_all", "count"):
                into[name] = a + b
            elif func in ("min", "max"):
                into[name] = a if b is None else b if a is None else (min if func == "min" else max)(a, b)
        for name, func, _, _ in cs.outputs:
            if func in ("sum", "avg"):
                total, n = f"{PARTIAL}{name}_sum", f"{PARTIAL}{name}_n"
                into[total] = _sum_add(into[total], row[total])
                into[n] += row[n]
                if into[n]:
                    into[name] = _final_sum(into[total]) if func == "sum" else _final_avg(into[total], into[n])
    out = []
    for key in sorted(merged, key=lambda k: (k[0], _sort_key(k[2:]))):
        row = merged[key]
        out.append({c: v for c, v in row.items() if not c.startswith(PARTIAL)})
    return out


def _sort_key(value: tuple) -> tuple:
    return tuple((v is None, str(type(v)), v if v is not None else 0) for v in value)
