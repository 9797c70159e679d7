"""Semantic analysis: AST → :class:`ResolvedQuery` (variables, predicate classes, output mode, errors).

Example::

    >>> from sparkcep.grammar import parse_query
    >>> r = analyze(parse_query("PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 10"))
    >>> [(p.kind, p.vars) for p in r.predicates]
    [('equivalence', ()), ('parameterized', ('a', 'b'))]
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sparkcep.compiler.analysis.predicates import Predicate, Resolver, classify
from sparkcep.compiler.analysis.resolve import (
    VarInfo,
    check_bounds,
    check_pattern_shape,
    check_strict_steps,
    check_until,
    name_variables,
)
from sparkcep.ir.ast import (
    ENGINE_CASTS,
    ENGINE_FUNCTIONS,
    STRATEGIES,
    TS_UNITS_NS,
    UNITS_MS,
    Attr,
    BinOp,
    Call,
    Duration,
    EquivItem,
    EquivTest,
    Expr,
    Func,
    Literal,
    Query,
    ReturnItem,
    Unary,
    and_all,
    conjuncts,
    map_nodes,
    walk,
)
from sparkcep.ir.errors import CEPSemanticError
from sparkcep.ir.naming import column_name, dedupe
from sparkcep.ir.printer import format_expr

__all__ = ["AggregateItem", "Predicate", "ResolvedQuery", "VarInfo", "analyze", "window_in_ts_units"]

TS_KINDS = (None, "timestamp", "numeric")


@dataclass(frozen=True)
class AggregateItem:
    """One trend aggregate of RETURN: ``COUNT(*)`` (var None), ``COUNT(v)`` (attr None), ``SUM(v.attr)``."""

    name: str
    func: str
    var: str | None
    attr: str | None


@dataclass(frozen=True)
class ResolvedQuery:
    """A checked query, ready for planning.

    ``mode`` is ``"match"`` (one row per match) or ``"aggregate"`` (one row per window and group, GRETA).
    ``partition`` lists the equivalence items (the shuffle key), ``group_by`` the GROUP BY attributes.
    """

    query: Query
    source: str | None
    mode: str
    variables: tuple[VarInfo, ...]
    predicates: tuple[Predicate, ...]
    partition: tuple[EquivItem, ...]
    group_by: tuple[str, ...]
    returns: tuple[ReturnItem, ...] | None
    aggregates: tuple[AggregateItem, ...]
    strategy: str
    return_names: tuple[str, ...] = ()
    ts_kind: str | None = None
    ts_unit: str | None = None
    #: HAVING over the result columns: each aggregate and group attribute is ``Attr(None, <column>)``
    having: Expr | None = None

    def var(self, name: str) -> VarInfo:
        return next(v for v in self.variables if v.name == name)

    def of_kind(self, *kinds: str) -> tuple[Predicate, ...]:
        return tuple(p for p in self.predicates if p.kind in kinds)

    @property
    def window(self) -> float:
        """WITHIN in ts units (milliseconds for timestamp input)."""
        return window_in_ts_units(self.query.within, self.ts_kind, self.ts_unit)

    @property
    def slide(self) -> float:
        d = self.query.slide or self.query.within
        return window_in_ts_units(d, self.ts_kind, self.ts_unit)


def window_in_ts_units(d: Duration, ts_kind: str | None, ts_unit: str | None) -> float:
    """A duration in the units of ``ts``: ms for timestamps, ``ts_unit`` (or bare units) for numbers."""
    if d.unit is None:
        return d.value
    ms = d.in_ms()
    if ts_kind == "numeric":  # exact in integers (ns), one rounding at the end
        return d.value * UNITS_MS[d.unit] * 10**6 / TS_UNITS_NS[ts_unit] if ts_unit else d.value
    return ms


def analyze(query: Query, source: str | None = None, *, ts_kind: str | None = None,
            ts_unit: str | None = None, attr_types: dict[str, str] | None = None) -> ResolvedQuery:
    """Check ``query`` and resolve it. ``ts_kind`` ("timestamp", "numeric" or None if not known yet) and
    ``ts_unit`` (the unit of numeric ts, a key of ``UNITS_MS``) enable the duration checks; ``attr_types``
    (attribute → Spark type name, from the input's schema) the check that a condition is a boolean."""
    if ts_kind not in TS_KINDS:
        raise CEPSemanticError(f"ts kind must be one of timestamp, numeric; got {ts_kind!r}")
    if ts_unit is not None and ts_unit not in TS_UNITS_NS:
        raise CEPSemanticError(f"unknown time unit {ts_unit!r}; known: {', '.join(TS_UNITS_NS)}")
    check_pattern_shape(query.pattern, source)
    pattern, variables = name_variables(query.pattern, source)
    resolver = Resolver(variables, source)

    strategy = query.strategy or "skip_till_any_match"
    if strategy not in STRATEGIES:  # pragma: no cover - the grammar only admits the four
        raise CEPSemanticError(f"unknown selection strategy {strategy}", query.span, source)
    for v in query.strategy_vars or ():
        if v not in variables:
            raise CEPSemanticError(f"unknown variable '{v}' in {strategy}(...)", query.span, source)

    where = resolver.expr(query.where, where="WHERE") if query.where is not None else None
    _check_conditions(where, query.returns, attr_types or {}, resolver)
    predicates = tuple(classify(c, variables, source) for c in conjuncts(where))
    partition = tuple(item for p in predicates if p.kind == "equivalence" for item in p.expr.items)

    group_by = []
    for g in query.group_by:
        if g.var is not None:
            resolver.var_name(g.var, g)
        group_by.append(g.attr)

    mode = "aggregate" if query.returns and any(_is_trend_aggregate(i.expr) for i in query.returns) else "match"
    returns = None
    aggregates: tuple[AggregateItem, ...] = ()
    # columns are named as written (COUNT(A) is count_A), before type names resolve to variables
    return_names = tuple(dedupe([column_name(i, k) for k, i in enumerate(query.returns or ())]))
    if query.returns is not None:
        returns = tuple(replace(i, expr=resolver.expr(i.expr, where="RETURN")) for i in query.returns)
        if mode == "match":  # a trend aggregate's COUNT(v)/SUM(v.attr) ranges over v's events: keep it as written
            returns = tuple(replace(i, expr=_first_of_optional(i.expr, variables)) for i in returns)
        if mode == "aggregate":
            aggregates = _aggregate_items(returns, return_names, partition, tuple(group_by), resolver)
        else:
            _check_match_returns(returns, variables, resolver)
    check_bounds(pattern, mode, source)
    check_strict_steps(pattern, mode, source)
    check_until(pattern, mode, source)
    if mode == "match" and query.group_by:
        raise CEPSemanticError("GROUP BY needs a trend aggregate (COUNT(*), SUM(T.attr), ...) in RETURN",
                               query.group_by[0].span, source)
    if mode == "match" and query.slide is not None:
        raise CEPSemanticError("SLIDE applies to trend-aggregate queries; a match query has only WITHIN",
                               query.slide.span, source)
    having = None
    if query.having is not None:
        if mode != "aggregate":
            raise CEPSemanticError("HAVING needs a trend-aggregate query (COUNT(*), SUM(T.attr), ... in RETURN); "
                                   "a match query's conditions go in WHERE", query.having.span, source)
        _check_conditions(query.having, (), {}, resolver)
        having = _having(query.having, return_names, aggregates, resolver)
    _check_durations(query, ts_kind, ts_unit, source)

    resolved_query = replace(query, pattern=pattern, where=and_all(p.expr for p in predicates),
                             returns=returns)
    return ResolvedQuery(
        query=resolved_query, source=source, mode=mode, variables=tuple(variables.values()),
        predicates=predicates, partition=partition, group_by=tuple(group_by), returns=returns,
        aggregates=aggregates, strategy=strategy, return_names=return_names, ts_kind=ts_kind, ts_unit=ts_unit,
        having=having)


_ARITHMETIC = ("+", "-", "*", "/", "%")


def _check_conditions(where, returns, attr_types: dict[str, str], resolver: Resolver) -> None:
    """Each condition (a WHERE conjunct, an operand of AND, OR, NOT) must be able to be a boolean: Spark SQL
    refuses ``NOT x`` on a number when it analyzes the job, so check refuses it first, at the operand.
    A number, string, arithmetic or aggregate is never one; an attribute is one only if the input's schema
    (when known) says BOOLEAN."""
    def operands(e):
        if isinstance(e, BinOp) and e.op in ("AND", "OR"):
            return (e.left, e.right)
        if isinstance(e, Unary) and e.op == "NOT":
            return (e.operand,)
        return ()

    def check(e) -> None:
        found = None
        if isinstance(e, Literal) and not (e.value is None or isinstance(e.value, bool)):
            found = "a string" if isinstance(e.value, str) else "a number"
        elif (isinstance(e, BinOp) and e.op in _ARITHMETIC) or (isinstance(e, Unary) and e.op == "-"):
            found = "arithmetic"
        elif isinstance(e, Func):
            found = "an aggregate"
        elif isinstance(e, Attr) and attr_types.get(e.attr, "boolean") != "boolean":
            found = f"'{e.attr}', a {attr_types[e.attr]} attribute"
        if found is not None:
            raise resolver.error(f"expected a condition (a comparison or a boolean), found {found}", e)

    roots = [where] if where is not None else []
    roots += [i.expr for i in returns or ()]
    for root in roots:
        stack = [(root, root is where)]
        while stack:
            e, boolean = stack.pop()
            if boolean:
                check(e)
            inner = operands(e)
            if inner:
                stack.extend((o, True) for o in inner)
            elif isinstance(e, (BinOp, Unary, Func, Call)):
                children = (e.left, e.right) if isinstance(e, BinOp) else (e.operand,) if isinstance(e, Unary) \
                    else e.args
                stack.extend((c, False) for c in children)


def _first_of_optional(e, variables: dict[str, VarInfo]):
    """``v.attr`` → ``v[1].attr`` for a ``T? v`` variable (at most one event: both name it)."""
    def fix(n):
        if isinstance(n, Attr) and n.index is None and n.var in variables and variables[n.var].optional:
            return replace(n, index=1)
        return n
    return map_nodes(e, fix)


def _is_trend_aggregate(e) -> bool:
    for node in walk(e):
        if isinstance(node, Func):
            if node.star:
                return True
            arg = node.args[0] if node.args else None
            if isinstance(arg, Attr) and arg.index is None:
                return True
    return False


def _aggregate_items(returns, names, partition, group_by, resolver: Resolver) -> tuple[AggregateItem, ...]:
    keys = {i.attr for i in partition} | set(group_by)
    out = []
    for name, item in zip(names, returns, strict=True):
        e = item.expr
        if isinstance(e, Attr) and e.var is None:
            if e.attr not in keys:
                raise resolver.error(f"'{e.attr}' is neither a GROUP BY nor an equivalence attribute", e)
            if name != e.attr:
                raise resolver.error(f"a group column keeps its name: write {e.attr}, not {e.attr} AS {name}",
                                     item)
            continue
        out.append(_aggregate_item(name, e, resolver))
    return tuple(out)


def _aggregate_item(name: str, e, resolver: Resolver) -> AggregateItem:
    """The trend aggregate ``e`` (resolved) computes, or the error saying what a trend aggregate is."""
    if not isinstance(e, Func) or not (e.star or (isinstance(e.args[0], Attr) and e.args[0].index is None)):
        raise resolver.error("a trend-aggregate RETURN holds COUNT(*), COUNT(T), SUM/MIN/MAX/AVG(T.attr) "
                             "and GROUP BY attributes", e)
    if e.star:
        return AggregateItem(name, "count", None, None)
    arg = e.args[0]
    if e.name == "count" and arg.attr == "*":
        return AggregateItem(name, "count", arg.var, None)
    if e.name == "count":
        raise resolver.error("COUNT takes * or an event type/variable: COUNT(*), COUNT(A)", e)
    if arg.var is None:
        raise resolver.error(f"{e.name}() takes an attribute of an event type or variable, like "
                             f"{e.name.upper()}(T.{arg.attr}); '{arg.attr}' alone names no event", arg)
    return AggregateItem(name, e.name, arg.var, arg.attr)


#: The columns of a trend-aggregate row besides its groups and aggregates.
_WINDOW_COLUMNS = ("window_start", "window_end")


def _having(having, names, aggregates: tuple[AggregateItem, ...], resolver: Resolver):
    """HAVING as a condition over a trend row's columns: each trend aggregate becomes the RETURN column that
    computes it (HAVING filters the rows RETURN produces, after aggregation and the merge of partitions), each
    bare name a column (a group attribute, ``window_start``/``window_end``, or a RETURN name or alias)."""
    computed = {(a.func, a.var, a.attr): a.name for a in aggregates}

    def column(n):
        if not isinstance(n, Func):
            return n
        a = _aggregate_item("", n, resolver)
        name = computed.get((a.func, a.var, a.attr))
        if name is None:
            raise resolver.error(f"HAVING {format_expr(n)}: RETURN does not compute it; HAVING reads the RETURN "
                                 "columns, so add it to RETURN", n)
        return Attr(None, name, span=n.span)

    out = map_nodes(resolver.expr(having, where="HAVING"), column)
    columns = {*_WINDOW_COLUMNS, *names}
    for n in walk(out):
        if isinstance(n, Attr) and (n.var is not None or n.attr not in columns):
            what = f"'{format_expr(n)}' is an attribute of one event" if n.var is not None \
                else f"'{n.attr}' is no column of the result"
            raise resolver.error(f"{what}: HAVING reads a trend row, its {', '.join([*_WINDOW_COLUMNS, *names])}",
                                 n)
        engine = n.name in ENGINE_FUNCTIONS and (n.name != "cast" or n.type in ENGINE_CASTS) \
            if isinstance(n, Call) else True
        if not engine:
            raise resolver.error(f"{n.name}() in HAVING: HAVING is evaluated after aggregation, where "
                                 f"the engines evaluate {', '.join(ENGINE_FUNCTIONS)} (and the operators)", n)
    return out


def _check_match_returns(returns, variables: dict[str, VarInfo], resolver: Resolver) -> None:
    for item in returns:
        for node in walk(item.expr):
            if isinstance(node, Attr):
                if node.var is None:
                    raise resolver.error(f"'{node.attr}' has no variable: write v.{node.attr}", node)
                info = variables[node.var]
                if info.negated:
                    raise resolver.error(f"'{node.var}' is negated: a match holds no such event", node)
                if info.optional and node.index == "cur":
                    raise resolver.error(f"'{node.var}' binds at most one event: return {node.var}.{node.attr} "
                                         f"(or {node.var}[1].{node.attr})", node)
                if info.kleene and node.index in (None, "cur", "prev", "next", "prefix"):
                    raise resolver.error(
                        f"'{node.var}' is a Kleene variable: return {node.var}[1], {node.var}[{node.var}.len] "
                        f"or an aggregate over {node.var}[]", node)
            if isinstance(node, EquivTest):  # pragma: no cover - rejected by Resolver
                raise resolver.error("an equivalence test belongs in WHERE", node)


def _check_durations(query: Query, ts_kind, ts_unit, source) -> None:
    for d in (query.within, query.slide):
        if d is None:
            continue
        if d.value <= 0:
            raise CEPSemanticError("a duration must be positive", d.span, source)
        if ts_kind == "timestamp" and d.unit is None:
            raise CEPSemanticError(
                f"duration {d.value} has no unit, but ts is a timestamp: write e.g. {d.value} seconds",
                d.span, source)
        if ts_kind == "numeric" and d.unit is not None and ts_unit is None:
            raise CEPSemanticError(
                "a duration with a unit needs the unit of the numeric ts column "
                "(option ts_unit / --ts-unit, e.g. 's' or 'ms'), or write a bare number", d.span, source)
