"""The AST of the sparkcep language: frozen dataclasses that compare and hash by structure.

Positions (``span``) are carried on every node but never take part in equality, so that
``parse(print(parse(q))) == parse(q)`` holds.  Spellings that mean the same thing are normalized by the
parser (``<>``/``≠`` → ``!=``, ``∧`` → ``AND``, ``GROUP-BY`` → ``GROUP BY``, ``~T``/``NOT T`` → ``Not``).

Example::

    >>> q = Query(pattern=Seq((EventPat(("A",), "a"), EventPat(("B",), "b"))), within=Duration(10))
    >>> q.pattern.items[1].var
    'b'
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkcep.ir.errors import Span


def _span() -> Span | None:
    return field(default=None, compare=False, repr=False)


# ----------------------------------------------------------------------------------------------- expressions

#: Index forms of an attribute reference on a Kleene variable.
#:   None      ``v.attr``            (plain, or the current event inside a Kleene predicate: GRETA ``S.price``)
#:   "all"     ``v[].attr``          (the whole Kleene sequence; only inside an aggregate)
#:   "cur"     ``v[i].attr``         (the current event)
#:   "prev"    ``v[i-1].attr``       (the previously selected event)
#:   "prefix"  ``v[..i-1].attr``     (all events before the current one; only inside an aggregate)
#:   "last"    ``v[v.len].attr``     (the last event)
#:   "next"    ``NEXT(v).attr``      (the next event of the trend, GRETA)
#:   int k     ``v[k].attr``         (the k-th event, 1-based; ``v[1]`` is the first)
Index = str | int | None


@dataclass(frozen=True)
class Literal:
    """A constant: int, float, str, bool or None (``NULL``)."""

    value: object
    span: Span | None = _span()


@dataclass(frozen=True)
class Attr:
    """An attribute reference ``var[index].attr``; ``var`` is None for a bare attribute (``sector``)."""

    var: str | None
    attr: str
    index: Index = None
    span: Span | None = _span()


@dataclass(frozen=True)
class Unary:
    """``-x`` or ``NOT x``; ``op`` is ``"-"`` or ``"NOT"``."""

    op: str
    operand: Expr
    span: Span | None = _span()


@dataclass(frozen=True)
class BinOp:
    """Binary operator. ``op`` is one of ``+ - * / %``, ``= != < <= > >=``, ``AND``, ``OR``."""

    op: str
    left: Expr
    right: Expr
    span: Span | None = _span()


@dataclass(frozen=True)
class Func:
    """A function call. Aggregates: ``avg sum min max count`` (lower-cased); ``COUNT(*)`` has ``star=True``.

    ``COUNT(A)`` (a type or variable) is ``Func("count", (Attr(None, "A"),))`` until analysis resolves it.
    """

    name: str
    args: tuple[Expr, ...] = ()
    star: bool = False
    span: Span | None = _span()


@dataclass(frozen=True)
class Call:
    """A scalar (per-value) Spark SQL function or special form; aggregates are :class:`Func`.

    ``name`` is lower-case: a function (``abs``, ``lower``, ``coalesce``, ...) or one of the forms
    ``x IS NULL`` → ``Call("isnull", (x,))``, ``x IN (a, b)`` → ``Call("in", (x, a, b))``,
    ``x BETWEEN lo AND hi`` → ``Call("between", (x, lo, hi))``, ``x LIKE p`` → ``Call("like", (x, p))``,
    ``CASE WHEN c1 THEN v1 ... [ELSE d] END`` → ``Call("case", (c1, v1, ..., d?))`` (an odd count has an ELSE),
    ``CAST(x AS T)`` → ``Call("cast", (x,), type="T")``.  ``NOT IN``/``NOT BETWEEN``/``NOT LIKE``/``IS NOT
    NULL`` are ``Unary("NOT", ...)`` around the form."""

    name: str
    args: tuple[Expr, ...] = ()
    type: str | None = None
    span: Span | None = _span()


@dataclass(frozen=True)
class EquivItem:
    """One item of an equivalence test: ``attr``, ``v.attr`` or ``attr = 'const'``."""

    attr: str
    var: str | None = None
    value: Literal | None = None
    span: Span | None = _span()


@dataclass(frozen=True)
class EquivTest:
    """``[attr]``, ``[a1, a2]``, ``[attr = 'c']``, ``[v.attr, a2]``: all components share these attributes."""

    items: tuple[EquivItem, ...]
    span: Span | None = _span()


Expr = Literal | Attr | Unary | BinOp | Func | Call | EquivTest


# ----------------------------------------------------------------------------------------------- patterns


@dataclass(frozen=True)
class EventPat:
    """One event of one of ``types`` bound to ``var``.

    ``T v`` is ``EventPat(("T",), "v")``; ``ANY(T1, T2) v`` is ``EventPat(("T1", "T2"), "v", any_=True)``;
    ``array`` is True where the variable was written ``v[]`` (Kleene variables, SASE+ style).
    """

    types: tuple[str, ...]
    var: str | None = None
    any_: bool = False
    array: bool = False
    span: Span | None = _span()


@dataclass(frozen=True)
class Kleene:
    """``P+`` (``op="+"``), ``P*`` (``"*"``) or ``P?`` (``"?"``).  ``T+ v[]`` is ``Kleene(EventPat(("T",), "v",
    array=True), "+")``.

    ``bounds`` ``(n, m)`` is a bounded quantifier: ``P{n}`` is ``(n, n)``, ``P{n,}`` ``(n, None)``, ``P{n,m}``
    ``(n, m)`` (Flink CEP's ``times``/``timesOrMore``): ``n`` to ``m`` iterations.  ``op`` is then the plain
    operator it narrows (``"+"``, or ``"*"`` when ``n`` is 0), so code that ignores ``bounds`` sees a superset;
    ``{1,}`` and ``{0,}`` are normalized to plain ``+`` and ``*`` (``bounds`` None).

    ``greedy`` is False for the reluctant forms ``P+?``, ``P*?``, ``P??`` (fewer iterations preferred); it only
    matters under ``AFTER MATCH SKIP`` (:class:`AfterMatchSkip`), where one preferred match per start event is
    reported.

    ``until`` is a stop condition (``B+ b[] UNTIL (b.x > 10)``, Flink CEP's ``until``) on a loop: of one event
    ``T v``, or a group ``(SEQ(B b, C c))+ UNTIL (c.x > 10)`` whose condition names one of its variables ``v``.  An
    event of ``v``'s types (any event of the partition with ``until_any``, ``UNTIL ANY (...)``, Flink's reading)
    satisfying it, read on that event as ``v``, is never taken by the loop and ends it: no loop event comes after
    it (docs/language.md, "Stop conditions")."""

    inner: Pattern
    op: str = "+"
    span: Span | None = _span()
    greedy: bool = field(default=True, metadata={"omit_default": True})
    bounds: tuple[int, int | None] | None = field(default=None, metadata={"omit_default": True})
    until: Expr | None = field(default=None, metadata={"omit_default": True})
    until_any: bool = field(default=False, metadata={"omit_default": True})

    @property
    def repeat(self) -> tuple[int, int | None]:
        """``(min, max)`` iterations (``max`` None: unbounded)."""
        if self.bounds is not None:
            return self.bounds
        return {"+": (1, None), "*": (0, None), "?": (0, 1)}[self.op]


@dataclass(frozen=True)
class Seq:
    """``SEQ(P1, ..., Pn)``.

    ``strict[k]`` is True where item ``k`` was written ``NEXT Pk`` (per-step strict contiguity, Flink's ``next``):
    its first event must be the event right after the match's previous event in the partition (``NEXT !(C c)``,
    Flink's notNext: that event is not such a ``C``).  ``()`` when no item is (every step follows the query's
    strategy)."""

    items: tuple[Pattern, ...]
    span: Span | None = _span()
    strict: tuple[bool, ...] = field(default=(), metadata={"omit_default": True})


@dataclass(frozen=True)
class Not:
    """Negation ``!(P)``, ``~P``, ``NOT P``: no match of ``inner`` at this place of the enclosing SEQ."""

    inner: Pattern
    span: Span | None = _span()


@dataclass(frozen=True)
class Or:
    """Disjunction of patterns ``P1 OR P2 OR ...``."""

    alternatives: tuple[Pattern, ...]
    span: Span | None = _span()


Pattern = EventPat | Kleene | Seq | Not | Or


# ----------------------------------------------------------------------------------------------- query


#: Time units, normalized. A duration without unit is in the units of the ``ts`` column.
UNITS_MS = {"ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
#: The units a numeric ts column can be declared in (``ts_unit``, ``--ts-unit``): their length in nanoseconds.
TS_UNITS_NS = {"ns": 1, "us": 1_000, **{u: ms * 10**6 for u, ms in UNITS_MS.items()}}


@dataclass(frozen=True)
class Duration:
    """``WITHIN 12 hours`` → ``Duration(12, "h")``; ``WITHIN 10`` → ``Duration(10, None)``."""

    value: int | float
    unit: str | None = None
    span: Span | None = _span()

    def in_ms(self) -> float | None:
        return None if self.unit is None else self.value * UNITS_MS[self.unit]


@dataclass(frozen=True)
class ReturnItem:
    expr: Expr
    alias: str | None = None
    span: Span | None = _span()


#: ``AFTER MATCH SKIP`` kinds (SQL:2016's, with EVENT for ROW; ``TO v`` is ``TO LAST v``).
SKIP_PAST_LAST_EVENT = "PAST LAST EVENT"
SKIP_TO_NEXT_EVENT = "TO NEXT EVENT"
SKIP_TO_FIRST = "TO FIRST"
SKIP_TO_LAST = "TO LAST"


@dataclass(frozen=True)
class AfterMatchSkip:
    """``AFTER MATCH SKIP PAST LAST EVENT | TO NEXT EVENT | TO FIRST v | TO LAST v``: the match query reports,
    per start event, the match preferred by SQL:2016's preferment order, and resumes where the rule says
    (docs/language.md, "Preferred matches and AFTER MATCH SKIP"); ``var`` names ``v`` for ``TO FIRST/LAST``."""

    kind: str = SKIP_PAST_LAST_EVENT
    var: str | None = None
    span: Span | None = _span()


#: Selection strategies (LANGUAGE.md §5).
STRATEGIES = ("strict_contiguity", "partition_contiguity", "skip_till_next_match", "skip_till_any_match")


@dataclass(frozen=True)
class Query:
    """One query.

    ``strategy`` is None when not given (the default is skip_till_any_match).  ``strategy_vars`` holds the
    variable list of the SASE+ form ``WHERE skip_till_next_match(a, b[], c) { cond }``; it is None for the
    ``USING strategy`` form.  ``return_first`` records where RETURN was written (GRETA/Sharon put it first).
    """

    pattern: Pattern
    within: Duration
    name: str | None = None
    returns: tuple[ReturnItem, ...] | None = None
    strategy: str | None = None
    strategy_vars: tuple[str, ...] | None = None
    where: Expr | None = None
    group_by: tuple[Attr, ...] = ()
    slide: Duration | None = None
    return_first: bool = False
    span: Span | None = _span()
    #: ``AFTER MATCH SKIP ...`` (None: every match under the strategy is reported)
    skip: AfterMatchSkip | None = field(default=None, metadata={"omit_default": True})
    #: ``HAVING cond`` of a trend-aggregate query: a condition over its GROUP BY attributes and aggregates
    having: Expr | None = field(default=None, metadata={"omit_default": True})


@dataclass(frozen=True)
class Workload:
    """A file of queries separated by ``;``; ``shedding_latency`` is the latency bound of ``WITH SHEDDING
    LATENCY <duration>`` (gSPICE load shedding, off when None)."""

    queries: tuple[Query, ...]
    span: Span | None = _span()
    shedding_latency: Duration | None = None
    #: ``WITH RATES (T = n, ...)``: declared events per window of each type (Sharon's benefit model)
    rates: tuple[tuple[str, float], ...] | None = None


# ----------------------------------------------------------------------------------------------- helpers


def walk(node):
    """Yield ``node`` and every AST node below it, depth first, in source order.

    Iterative (an explicit stack, not nested generators), so a deep tree costs one step per node: nested
    ``yield from`` passed every node up through each level above it."""
    stack = [node]
    while stack:
        node = stack.pop()
        yield node
        children = []
        for f in getattr(node, "__dataclass_fields__", {}):
            if f == "span":
                continue
            value = getattr(node, f)
            if isinstance(value, tuple):
                children.extend(v for v in value if hasattr(v, "__dataclass_fields__"))
            elif hasattr(value, "__dataclass_fields__"):
                children.append(value)
        stack.extend(reversed(children))


def conjuncts(expr: Expr | None) -> list[Expr]:
    """Split an expression on top-level ``AND`` (iteratively: a chain of ANDs is as deep as it is long)."""
    out: list[Expr] = []
    stack = [] if expr is None else [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, BinOp) and e.op == "AND":
            stack += [e.right, e.left]
        else:
            out.append(e)
    return out


def and_all(exprs) -> Expr | None:
    """Join expressions with ``AND`` (None for none)."""
    out = None
    for e in exprs:
        out = e if out is None else BinOp("AND", out, e)
    return out


def map_nodes(node, fn, before=None):
    """Rebuild ``node`` bottom-up, replacing every AST node ``n`` below and including it by ``fn(n)``.
    ``before``: tried first on each node, top-down; a node it maps to anything but None is replaced by that,
    neither descended into nor passed to ``fn``."""
    from dataclasses import fields, is_dataclass, replace

    if not is_dataclass(node):
        return node
    if before is not None:
        done = before(node)
        if done is not None:
            return done
    changes = {}
    for f in fields(node):
        if f.name == "span":
            continue
        value = getattr(node, f.name)
        if isinstance(value, tuple):
            new = tuple(map_nodes(v, fn, before) for v in value)
        else:
            new = map_nodes(value, fn, before)
        if new is not value and new != value:
            changes[f.name] = new
    return fn(replace(node, **changes) if changes else node)


def can_be_empty(p) -> bool:
    """Can the pattern ``p`` match without selecting an event (``?``, ``*``, ``{0,m}``, a negation)?"""
    if isinstance(p, EventPat):
        return False
    if isinstance(p, Kleene):
        return p.repeat[0] == 0 or can_be_empty(p.inner)
    if isinstance(p, Seq):
        return all(can_be_empty(i) for i in p.items)
    if isinstance(p, Or):
        return any(can_be_empty(a) for a in p.alternatives)
    return True  # a negation selects nothing


def has_until(pattern) -> bool:
    """Does a loop of the pattern have a stop condition (:attr:`Kleene.until`)?  Then every event of the partition
    must reach the engine: a stop event need not pass the loop's own predicates."""
    return pattern is not None and any(isinstance(n, Kleene) and n.until is not None for n in walk(pattern))


def has_strict_steps(pattern) -> bool:
    """Does the pattern link two steps with ``NEXT`` (:attr:`Seq.strict`)?  Then, as under a contiguity strategy,
    every event of the partition must reach the engine (one between two steps breaks the link)."""
    return pattern is not None and any(isinstance(n, Seq) and any(n.strict) for n in walk(pattern))


def linked_first(node: Not) -> bool:
    """Is ``node`` ``!(NEXT C c)`` (``NOT SEQ(NEXT C c)``): one event, linked to the pick right before the gap?"""
    inner = node.inner
    return (isinstance(inner, Seq) and len(inner.items) == 1 and bool(inner.strict) and inner.strict[0]
            and isinstance(inner.items[0], EventPat))


def count_anchor(p: Kleene) -> str | None:
    """The variable every iteration of ``p`` binds exactly one event to, whose count is then ``p``'s number of
    iterations: the event of ``T{n,m} v``, else the first single event (``T v``, no quantifier) directly in
    the repeated ``SEQ`` (``(SEQ(B b, C+ c[])){2,3}`` counts ``b``).  None if there is none (``(B b OR C c){2}``,
    ``(B+ b[]){2}``: their iterations are not determined by a match's events)."""
    inner = p.inner
    while isinstance(inner, Seq) and len(inner.items) == 1:
        inner = inner.items[0]
    if isinstance(inner, EventPat):
        return inner.var
    if isinstance(inner, Seq):
        for item in inner.items:
            if isinstance(item, EventPat):
                return item.var
    return None


def count_bounds(p: Kleene) -> list[Expr]:
    """The conditions ``P{n,m}`` adds to ``P+``/``P*`` on a match's binding: ``n <= count(v[].ts) <= m`` for its
    :func:`count_anchor` ``v`` (``ts`` is never NULL in an event); none for a plain quantifier."""
    if p.bounds is None:
        return []
    var = count_anchor(p)
    if var is None:
        return []
    lo, hi = p.bounds
    n = Func("count", (Attr(var, "ts", "all"),))
    out = [BinOp(">=", n, Literal(lo))] if lo > 1 else []
    return out + ([BinOp("<=", n, Literal(hi))] if hi is not None else [])


#: The aggregate functions of RETURN and WHERE (analysis checks names against it; the engines evaluate them).
AGGREGATES = ("avg", "sum", "min", "max", "count")

#: The special forms of :class:`Call` (printed as SQL syntax, not as a function call).
FORMS = ("isnull", "in", "between", "like", "case", "cast")
#: The scalar functions and forms the engines evaluate over values of several events, with Spark SQL's meaning
#: (runtime_udfs/expr/scalar.py).  A call that reads one event may use any Spark SQL function: Spark computes it.
ENGINE_FUNCTIONS = ("abs", "coalesce", "isnull", "isnotnull", "in", "between", "like", "case", "cast", "lower",
                    "upper", "length", "concat", "substring", "substr")
#: The CAST target types the engines evaluate (any other is computed by Spark, for one event).
ENGINE_CASTS = ("BIGINT", "LONG", "INT", "INTEGER", "SMALLINT", "SHORT", "TINYINT", "BYTE", "DOUBLE", "STRING",
                "BOOLEAN")
