"""Evaluate condition and RETURN expressions over a binding of variables to events.

A *binding* maps each variable to an event (a ``dict`` of attribute → value, including ``type`` and ``ts``)
or, for a Kleene variable, to the ``list`` of its events in time order.  ``cur`` maps a Kleene variable to
the 0-based position of its *current* event, which ``v[i]``, ``v[i-1]``, ``NEXT(v)``, ``v[..i-1]`` and a plain
``v.attr`` inside a per-event predicate refer to.

Null semantics follow SQL: a missing attribute is ``None``; arithmetic and comparisons with ``None`` give
``None``; ``AND``/``OR``/``NOT`` are three-valued; a condition holds only if it is ``True``.  One exception,
from SASE §2.2: a comparison that reads an attribute an event of an ``ANY(...)`` component lacks is TRUE.

Expressions are compiled once into closures (``compile_expr``) so engines do not walk the AST per event.

Example::

    >>> from sparkcep.ir.ast import Attr, BinOp, Literal
    >>> f = compile_expr(BinOp(">", Attr("a", "x"), Literal(3)))
    >>> f({"a": {"x": 5}})
    True
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

from sparkcep.ir.ast import AGGREGATES, Attr, BinOp, EquivTest, Func, Literal, Unary
from sparkcep.ir.limits import raise_recursion_limit

# expressions nest up to the language's depth limit (docs/language.md, Limits); compiling and evaluating them
# recurses in pure Python, on executors too, where nothing else raises the limit
raise_recursion_limit()

Binding = dict[str, Any]
Compiled = Callable[..., Any]


class _Lacking:
    """The value of an attribute that an event of an ANY component does not have."""

    __slots__ = ()

    def __repr__(self) -> str:  # pragma: no cover
        return "LACKING"


LACKING = _Lacking()

_ARITH = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "%": operator.mod,
}
_CMP = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


class EvalError(ValueError):
    """An expression cannot be evaluated in this context (e.g. ``v[i]`` with no current position)."""


def holds(value: Any) -> bool:
    """A condition holds only when it evaluates to True (``None`` — unknown — does not hold)."""
    return value is True


def compile_expr(expr, any_vars: frozenset[str] = frozenset()) -> Compiled:
    """Compile ``expr`` into ``f(binding, cur=None) -> value``.

    ``any_vars`` are the variables bound to ``ANY(...)`` components (SASE's lacking-attribute rule).
    """
    fn = _compile(expr, frozenset(any_vars))

    def run(binding: Binding, cur: dict[str, int] | None = None) -> Any:
        return fn(binding, cur or {})

    return run


def _compile(e, any_vars: frozenset[str]) -> Callable[[Binding, dict], Any]:
    if isinstance(e, Literal):
        value = e.value
        return lambda b, c: value
    if isinstance(e, Attr):
        return _compile_attr(e, any_vars)
    if isinstance(e, Unary):
        inner = _compile(e.operand, any_vars)
        if e.op == "NOT":
            return lambda b, c: _not(inner(b, c))
        return lambda b, c: _neg(inner(b, c))
    if isinstance(e, BinOp):
        left = _compile(e.left, any_vars)
        right = _compile(e.right, any_vars)
        if e.op == "AND":
            return lambda b, c: _and(left(b, c), right(b, c))
        if e.op == "OR":
            return lambda b, c: _or(left(b, c), right(b, c))
        if e.op in _CMP:
            op = _CMP[e.op]
            return lambda b, c: _compare(op, left(b, c), right(b, c))
        op = _ARITH[e.op]
        return lambda b, c: _arith(op, left(b, c), right(b, c))
    if isinstance(e, Func):
        return _compile_func(e, any_vars)
    if isinstance(e, EquivTest):
        return _compile_equiv(e)
    raise EvalError(f"cannot evaluate {type(e).__name__}")


def _event_at(events: list, var: str, index, cur: dict) -> dict | None:
    if index in (None, "cur"):
        if var not in cur:
            if index is None:  # a plain reference to a Kleene variable outside a per-event predicate
                raise EvalError(f"'{var}' is a Kleene variable: say which event ({var}[i], {var}[1], ...)")
            raise EvalError(f"{var}[i] has no current event here")
        pos = cur[var]
    elif index == "prev":
        pos = cur[var] - 1
    elif index == "next":
        pos = cur[var] + 1
    elif index == "last":
        pos = len(events) - 1
    elif isinstance(index, int):
        pos = index - 1
    else:
        raise EvalError(f"{var}[{index}] only makes sense inside an aggregate")
    if 0 <= pos < len(events):
        return events[pos]
    return None


def _compile_attr(e: Attr, any_vars: frozenset[str]):
    var, attr, index = e.var, e.attr, e.index
    lacking = LACKING if var in any_vars else None

    if var is None:

        def bare(b: Binding, c: dict):
            for bound in b.values():
                for ev in bound if isinstance(bound, list) else (bound,):
                    if ev is not None and ev.get(attr) is not None:
                        return ev[attr]
            return None

        return bare

    def ref(b: Binding, c: dict):
        bound = b.get(var)
        if isinstance(bound, list):
            ev = _event_at(bound, var, index, c)
        else:
            if bound is None:  # absent (T*, (P)*, (P)?, an OR branch not taken): NULL whatever the index
                return None
            if index not in (None, "cur", "last", 1):
                raise EvalError(f"'{var}' is not a Kleene variable")
            ev = bound
        if ev is None:
            return None
        value = ev.get(attr)
        if value is None:
            return lacking
        if isinstance(value, float) and math.isnan(value):
            return lacking
        return value

    return ref


def _values(arg: Attr, b: Binding, c: dict) -> list:
    bound = b.get(arg.var)
    if bound is None:
        return []
    events = bound if isinstance(bound, list) else [bound]
    if arg.index == "prefix":
        events = events[: c.get(arg.var, len(events))]
    out = []
    for ev in events:
        v = ev.get(arg.attr)
        if v is not None and not (isinstance(v, float) and math.isnan(v)):
            out.append(v)
    return out


def _compile_func(e: Func, any_vars: frozenset[str]):
    name = e.name
    if name not in AGGREGATES:
        raise EvalError(f"unknown function {name}()")
    if e.star:
        raise EvalError("COUNT(*) is a trend aggregate, not a per-match expression")
    if len(e.args) != 1 or not isinstance(e.args[0], Attr):
        raise EvalError(f"{name}() takes one attribute of a Kleene variable")
    arg = e.args[0]

    def agg(b: Binding, c: dict):
        vals = _values(arg, b, c)
        if name == "count":
            return len(vals)
        if not vals:
            return None
        if name == "sum":
            return sum(vals)
        if name == "avg":
            return sum(vals) / len(vals)
        return min(vals) if name == "min" else max(vals)

    return agg


def _compile_equiv(e: EquivTest):
    items = e.items

    def equiv(b: Binding, c: dict):
        for item in items:
            seen = []
            for var, bound in b.items():
                if item.var is not None and var != item.var:
                    continue
                for ev in bound if isinstance(bound, list) else (bound,):
                    if ev is not None:  # an unbound variable (e.g. another OR branch), as in attribute refs
                        seen.append(ev.get(item.attr))
            if item.value is not None and any(v != item.value.value for v in seen):
                return False
            if len(set(map(_hashable, seen))) > 1:
                return False
        return True

    return equiv


def _hashable(v):
    return repr(v) if isinstance(v, (list, dict)) else v


def _not(v):
    return None if v is None else (True if v is LACKING else not v)


def _neg(v):
    if v is None or v is LACKING:
        return None
    try:
        return -v
    except TypeError:  # a string or other non-number: NULL, as Spark's try_ arithmetic (never an exception)
        return None


def _and(x, y):
    if x is False or y is False:
        return False
    if x is None or y is None:
        return None
    return True


def _or(x, y):
    if x is True or y is True:
        return True
    if x is None or y is None:
        return None
    return False


def _compare(op, x, y):
    if x is LACKING or y is LACKING:
        return True
    if x is None or y is None:
        return None
    try:
        return bool(op(x, y))
    except TypeError:
        return None


def _arith(op, x, y):
    if x is LACKING or y is LACKING:
        return LACKING
    if x is None or y is None:
        return None
    try:
        return op(x, y)
    except (TypeError, ZeroDivisionError):
        return None
