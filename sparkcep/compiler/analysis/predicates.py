"""Reference checking and predicate classification (LANGUAGE.md §2 Conditions, §9 Errors).

Each top-level conjunct of WHERE gets one class:

============== ==========================================================================================
equivalence    ``[attr]``, ``[a1, a2]``, ``[attr = 'c']``, ``[v.attr]``: the partition key
local          reads one positive, non-Kleene variable (or one Kleene event by itself, ``b[i].x > 5``)
parameterized  reads two or more positive variables, no Kleene neighbour (``x.shelf_id != y.shelf_id``)
edge           relates consecutive events of a Kleene variable: ``NEXT(v)``, ``v[i-1]`` (GRETA edges)
aggregate      uses an aggregate over a Kleene variable: ``b[b.len].period > 2 * avg(b[].period)``
negation       reads a negated variable (SASE P-): a negative event only counts if it satisfies it
constant       reads no variable at all
============== ==========================================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sparkcep.compiler.analysis.resolve import VarInfo
from sparkcep.ir.ast import (
    AGGREGATES,
    ENGINE_CASTS,
    ENGINE_FUNCTIONS,
    Attr,
    BinOp,
    Call,
    EquivItem,
    EquivTest,
    Expr,
    Func,
    Literal,
    Unary,
    walk,
)
from sparkcep.ir.errors import CEPSemanticError

KINDS = ("equivalence", "local", "parameterized", "edge", "aggregate", "negation", "constant")


@dataclass(frozen=True)
class Predicate:
    """One classified conjunct of WHERE."""

    expr: Expr
    kind: str
    vars: tuple[str, ...]


class Resolver:
    """Checks and rewrites expressions against the query's variables.

    Rewrites: a type name used as a variable (``SUM(A.attr)``, ``COUNT(A)``) becomes the variable bound to
    that type; a bare attribute in WHERE becomes an attribute of the only variable (with several variables
    it is an error: which event's attribute would it be?).
    """

    def __init__(self, variables: dict[str, VarInfo], source: str | None):
        self.variables = variables
        self.source = source
        by_type: dict[str, list[str]] = {}
        for v in variables.values():
            for t in v.types:
                by_type.setdefault(t, []).append(v.name)
        self.by_type = by_type

    def error(self, message: str, node) -> CEPSemanticError:
        return CEPSemanticError(message, getattr(node, "span", None), self.source)

    def var_name(self, name: str, node) -> str:
        """The variable a name refers to: a variable, or a type bound by exactly one variable."""
        if name in self.variables:
            return name
        candidates = self.by_type.get(name, [])
        if len(candidates) == 1:
            return candidates[0]
        if len(candidates) > 1:
            raise self.error(f"type '{name}' is bound by several variables ({', '.join(candidates)}): "
                             "name the variable", node)
        raise self.error(f"unknown variable '{name}'", node)

    # ---------------------------------------------------------------------------------------- rewriting

    def expr(self, e: Expr, *, where: str, in_aggregate: bool = False) -> Expr:
        """Check and rewrite ``e`` appearing in clause ``where`` ('WHERE', 'RETURN', 'GROUP BY')."""
        if isinstance(e, Literal):
            return e
        if isinstance(e, Attr):
            return self.attr(e, where=where, in_aggregate=in_aggregate)
        if isinstance(e, Unary):
            return replace(e, operand=self.expr(e.operand, where=where, in_aggregate=in_aggregate))
        if isinstance(e, BinOp):
            return replace(e, left=self.expr(e.left, where=where, in_aggregate=in_aggregate),
                           right=self.expr(e.right, where=where, in_aggregate=in_aggregate))
        if isinstance(e, Func):
            return self.func(e, where=where)
        if isinstance(e, Call):
            return self.call(e, where=where)
        if isinstance(e, EquivTest):
            if where != "WHERE":
                raise self.error("an equivalence test [...] belongs in WHERE", e)
            return replace(e, items=tuple(self.equiv_item(i) for i in e.items))
        raise self.error(f"unexpected {type(e).__name__}", e)  # pragma: no cover

    def equiv_item(self, item: EquivItem) -> EquivItem:
        if item.var is None:
            return item
        return replace(item, var=self.var_name(item.var, item))

    def attr(self, a: Attr, *, where: str, in_aggregate: bool) -> Attr:
        if a.var is None:
            if where != "WHERE":
                return a  # a partition/GROUP BY attribute; checked by the caller
            if len(self.variables) == 1:
                return replace(a, var=next(iter(self.variables)))
            raise self.error(f"'{a.attr}' has no variable: write v.{a.attr} (the pattern binds "
                             f"{', '.join(self.variables)})", a)
        var = self.var_name(a.var, a)
        info = self.variables[var]
        a = replace(a, var=var)
        if a.index is not None and not info.kleene:
            if a.index == "next":
                raise self.error(f"NEXT() needs a Kleene variable; '{var}' is not one", a)
            if a.index == "prev":
                raise self.error(f"{var}[i-1] needs a Kleene variable; '{var}' is not one", a)
            raise self.error(f"'{var}' is not a Kleene variable: it has no [index]", a)
        if not info.repeated and (a.index in ("prev", "next", "prefix") or _is_position(a.index)):
            raise self.error(self._single_event(var, info, a.index), a)
        if a.index in ("all", "prefix") and not in_aggregate:
            raise self.error(f"{var}[] is a sequence of events: use it inside avg/sum/min/max/count", a)
        return a

    @staticmethod
    def _single_event(var: str, info: VarInfo, index) -> str:
        """The message for a reference that needs a sequence of events on a variable bound to at most one."""
        form = {"prev": f"{var}[i-1]", "next": f"NEXT({var})", "prefix": f"{var}[..i-1]"}.get(index, f"{var}[{index}]")
        why = ("it binds at most one event (T? or inside (P)?)" if info.optional
               else "each of its negative occurrences is one event (a negation inside a repeated group)")
        if _is_position(index):
            return f"{form} needs a Kleene variable (T+ or T*): '{var}' is not one, {why}; write {var}[1]"
        return f"{form} needs a Kleene variable (T+ or T*): '{var}' is not one, {why}"

    def call(self, f: Call, *, where: str) -> Call:
        """A scalar Spark SQL function or form: its arguments are values (a ``v[]`` sequence means the name
        was meant as an aggregate, which only the engines' five are)."""
        for n in walk(f):
            if isinstance(n, Attr) and n.index in ("all", "prefix"):
                raise self.error(f"unknown function {f.name}() over a sequence of events; the aggregates are "
                                 f"{', '.join(AGGREGATES)}", f)
        f = replace(f, args=tuple(self.expr(a, where=where) for a in f.args))
        low, high = _ARITY.get(f.name, (0, None))
        if len(f.args) < low or (high is not None and len(f.args) > high):
            count = str(low) if low == high else f"{low} to {high}" if high else f"at least {low}"
            raise self.error(f"{_call_name(f)} takes {count} argument{'' if count == '1' else 's'}, "
                             f"found {len(f.args)}", f)
        if f.name not in ENGINE_FUNCTIONS or (f.name == "cast" and f.type not in ENGINE_CASTS):
            events = {(a.var, "cur" if a.index is None else a.index) for a in walk(f) if isinstance(a, Attr)}
            anys = sorted({v for v, _ in events if v in self.variables and self.variables[v].any_})
            if len(events) > 1 or anys:
                why = f"'{anys[0]}' is an ANY(...) component" if anys else "it reads several events"
                raise self.error(
                    f"{_call_name(f)} is computed by Spark for one event at a time, and {why}; over values of several "
                    f"events the engines evaluate {', '.join(ENGINE_FUNCTIONS)} (and the operators)", f)
        return f

    def func(self, f: Func, *, where: str) -> Func:
        if f.name not in AGGREGATES:
            raise self.error(f"unknown function {f.name}(); known: {', '.join(AGGREGATES)}", f)
        if f.star:
            if f.name != "count":
                raise self.error(f"only COUNT takes *: {f.name}() takes an attribute, like {f.name}(T.x)", f)
            if where == "WHERE":
                raise self.error("COUNT(*) is a trend aggregate: it belongs in RETURN", f)
            return f
        if len(f.args) != 1:
            raise self.error(f"{f.name}() takes exactly one argument", f)
        arg = f.args[0]
        if not isinstance(arg, Attr):
            # the engines aggregate one attribute over a variable's events, never an expression
            raise self.error(f"{f.name}() takes one attribute, like {f.name}(b[].x); "
                             f"found {_described(arg)}", arg)
        if where == "WHERE":
            if not isinstance(arg, Attr) or arg.var is None:
                raise self.error(f"{f.name}() in WHERE takes an attribute of a Kleene variable, "
                                 "like avg(b[].x)", f)
            var = self.var_name(arg.var, arg)
            if not self.variables[var].kleene:
                raise self.error(f"aggregate {f.name}() over '{var}', which is not a Kleene variable", f)
        if isinstance(arg, Attr) and arg.var is None and f.name == "count":
            # COUNT(A): a type or variable, not an attribute
            return replace(f, args=(replace(arg, var=self.var_name(arg.attr, arg), attr="*"),))
        return replace(f, args=(self.expr(arg, where=where, in_aggregate=True),))


#: The engines' functions' argument counts (Spark refuses others: WRONG_NUM_ARGS), (least, most or None).
_ARITY = {"abs": (1, 1), "isnull": (1, 1), "isnotnull": (1, 1), "in": (2, None), "between": (3, 3),
          "like": (2, 2), "lower": (1, 1), "upper": (1, 1), "length": (1, 1), "concat": (1, None),
          "substring": (2, 3), "substr": (2, 3), "coalesce": (1, None), "case": (2, None), "cast": (1, 1)}
assert set(_ARITY) == set(ENGINE_FUNCTIONS)


def _call_name(f: Call) -> str:
    return f"CAST(... AS {f.type})" if f.name == "cast" else f"{f.name}()"


def _described(e: Expr) -> str:
    """How a non-attribute aggregate argument reads in a message."""
    if isinstance(e, Literal):
        return "a constant"
    if isinstance(e, Func):
        return "another aggregate"
    if isinstance(e, EquivTest):
        return "an equivalence test"
    return "an expression"


def _is_position(index) -> bool:
    """``v[k]`` for ``k > 1``: only a sequence of events has a k-th one."""
    return isinstance(index, int) and not isinstance(index, bool) and index != 1


def referenced_vars(e: Expr) -> tuple[str, ...]:
    """Variables an expression reads, in first-seen order (equivalence items without a variable: none)."""
    out: list[str] = []
    for node in walk(e):
        var = node.var if isinstance(node, (Attr, EquivItem)) else None
        if var is not None and var not in out:
            out.append(var)
    return tuple(out)


def classify(e: Expr, variables: dict[str, VarInfo], source: str | None) -> Predicate:
    """The class of one (resolved) conjunct; a P+/P- mix across OR is an error (SASE §2.2)."""
    vs = referenced_vars(e)
    if isinstance(e, EquivTest):
        return Predicate(e, "equivalence", vs)
    _check_or_mix(e, variables, source)
    if any(variables[v].negated for v in vs):
        return Predicate(e, "negation", vs)
    nodes = list(walk(e))
    if any(isinstance(n, Func) for n in nodes):
        return Predicate(e, "aggregate", vs)
    if any(isinstance(n, Attr) and n.index in ("prev", "next") for n in nodes):
        return Predicate(e, "edge", vs)
    if not vs:
        return Predicate(e, "constant", vs)
    if len(vs) == 1:
        return Predicate(e, "local", vs)
    return Predicate(e, "parameterized", vs)


def _check_or_mix(e: Expr, variables: dict[str, VarInfo], source: str | None) -> None:
    for node in walk(e):
        if isinstance(node, BinOp) and node.op == "OR":
            sides = []
            for side in (node.left, node.right):
                vs = referenced_vars(side)
                sides.append(any(variables[v].negated for v in vs) if vs else None)
            if None not in sides and sides[0] != sides[1]:
                raise CEPSemanticError(
                    "a predicate cannot mix a negated variable and positive-only conditions across OR "
                    "(write it as P+ AND P-)", node.span, source)
