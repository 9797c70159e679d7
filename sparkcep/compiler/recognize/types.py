"""The Spark SQL type of a MATCH_RECOGNIZE expression (``simpleString``), from the input columns' types.

Rules: a column has its type; COUNT and MATCH_NUMBER() are ``bigint``; SUM of an integral type ``bigint``, of a
decimal ``decimal(38,s)``, else ``double``; AVG and ``/`` are ``double``; MIN/MAX/PREV/NEXT/FIRST/LAST have
their argument's type; ``+ - * %`` follow Spark's numeric promotion (``tinyint < smallint < int < bigint <
float < double``; a decimal with an integral type stays a decimal of precision 38, with a floating type
becomes ``double``); comparisons, AND/OR/NOT and IS [NOT] NULL are ``boolean``; CLASSIFIER() is ``string``.
Arithmetic on anything else (strings, timestamps, dates) is refused: compute it per row (``unix_seconds(
A.ts)``) and combine numbers.

Example::

    >>> expr_type(BinOp("+", Attr("A", "n"), Literal(1.5)), {"n": "int"})
    'double'
"""

from __future__ import annotations

import re

from sparkcep.compiler.recognize.analysis import walk
from sparkcep.ir import recognize as rx
from sparkcep.ir.ast import Attr, BinOp, Func, Literal, Unary
from sparkcep.ir.errors import CEPSemanticError

__all__ = ["check_engine_types", "expr_type", "is_numeric", "INTEGRAL", "FLOATING"]

INTEGRAL = ("tinyint", "smallint", "int", "bigint")
FLOATING = ("float", "double")
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)\Z")


def is_numeric(t: str) -> bool:
    return t in INTEGRAL or t in FLOATING or bool(_DECIMAL.match(t))


def _scale(t: str) -> int:
    m = _DECIMAL.match(t)
    return int(m.group(2)) if m else 0


def _promote(op: str, left: str, right: str) -> str | None:
    if not (is_numeric(left) and is_numeric(right)):
        return None
    if op == "/":
        return "double"
    if left in FLOATING or right in FLOATING:
        return "double" if "double" in (left, right) or _DECIMAL.match(left) or _DECIMAL.match(right) else "float"
    if _DECIMAL.match(left) or _DECIMAL.match(right):
        scale = _scale(left) + _scale(right) if op == "*" else max(_scale(left), _scale(right))
        return f"decimal(38,{min(scale, 38)})"
    return INTEGRAL[max(INTEGRAL.index(left), INTEGRAL.index(right))]


def expr_type(e: object, schema: dict[str, str], text: str = "") -> str:
    """The type of ``e`` over columns ``schema`` (name -> simpleString); :class:`CEPSemanticError` for what has
    none (arithmetic on non-numbers).  A bare NULL is typed ``string``."""
    t = _type(e, schema, text)
    return "string" if t == VOID else t


#: The type of NULL: it takes the other side's type in if/coalesce/greatest/least and arithmetic.
VOID = "void"


def _unify(name: str, types: list[str], span, text: str) -> str:
    result = VOID
    for t in types:
        if t == VOID or t == result:
            continue
        if result == VOID:
            result = t
            continue
        promoted = _promote("+", result, t)
        if promoted is None:
            raise CEPSemanticError(f"{name}() of {result} and {t} is not supported across rows", span, text)
        result = promoted
    return result


def _type(e: object, schema: dict[str, str], text: str) -> str:
    if isinstance(e, Literal):
        v = e.value
        if isinstance(v, bool):
            return "boolean"
        if isinstance(v, int):
            if -2**31 <= v < 2**31:
                return "int"
            return "bigint" if -2**63 <= v < 2**63 else "decimal(38,0)"
        if isinstance(v, float):
            return "double"
        return VOID if v is None else "string"
    if isinstance(e, Attr):
        return schema[e.attr]
    if isinstance(e, rx.RowExpr):
        return schema[e.column]
    if isinstance(e, Unary):
        if e.op == "-":
            t = _type(e.operand, schema, text)
            if t != VOID and not is_numeric(t):
                raise CEPSemanticError(f"unary minus of a {t} is not supported", e.span, text)
            return t
        return "boolean"
    if isinstance(e, BinOp):
        if e.op in ("AND", "OR", "=", "!=", "<", "<=", ">", ">="):
            return "boolean"
        left, right = _type(e.left, schema, text), _type(e.right, schema, text)
        if VOID in (left, right):
            other = right if left == VOID else left
            return "double" if e.op == "/" else ("int" if other == VOID else other)
        t = _promote(e.op, left, right)
        if t is None:
            raise CEPSemanticError(f"'{e.op}' of {left} and {right} is not supported across rows: compute numbers "
                                   "per row (e.g. unix_seconds(A.ts)) and combine them", e.span, text)
        return t
    if isinstance(e, rx.Nav):
        return _type(e.arg, schema, text)
    if isinstance(e, rx.Classifier):
        return "string"
    if isinstance(e, rx.MatchNumber):
        return "bigint"
    if isinstance(e, rx.Agg):
        if e.func == "count":
            return "bigint"
        t = _type(e.arg, schema, text)
        if e.func in ("min", "max"):
            return t
        if t != VOID and not is_numeric(t):
            raise CEPSemanticError(f"{e.func.upper()} of a {t} is not supported", e.span, text)
        if e.func == "avg":
            return "double"
        if t in INTEGRAL:
            return "bigint"
        return f"decimal(38,{_scale(t)})" if _DECIMAL.match(t) else "double"
    if isinstance(e, Func):
        types = [_type(a, schema, text) for a in e.args]
        if e.name == "abs":
            if types[0] != VOID and not is_numeric(types[0]):
                raise CEPSemanticError(f"abs of a {types[0]} is not supported", e.span, text)
            return types[0]
        if e.name == "if":
            return _unify(e.name, types[1:], e.span, text)
        return _unify(e.name, types, e.span, text)
    raise CEPSemanticError(f"cannot type {type(e).__name__}", getattr(e, "span", None), text)


#: Types whose values the engine compares as Spark does with a value of another type of this set (as DOUBLE;
#: two integers exactly).
_ENGINE_NUMBERS = frozenset({*INTEGRAL, "double"})


def check_engine_types(e: object, schema: dict[str, str], text: str = "") -> None:
    """Refuse (:class:`CEPSemanticError` at its position) an operator of ``e`` the engine would evaluate
    otherwise than Spark: the engine computes comparisons of values of one type (or of integers and DOUBLEs),
    arithmetic, ``abs``, unary minus, SUM and AVG of integers and DOUBLEs; a DECIMAL, DATE or TIMESTAMP meeting
    another type, or in arithmetic, across rows is Spark's to compute (per row: ``CAST(A.d AS DOUBLE)``, or the
    whole comparison over one row, which Spark computes before the shuffle)."""
    for node in walk(e):
        if isinstance(node, BinOp) and node.op not in ("AND", "OR"):
            left, right = _type(node.left, schema, text), _type(node.right, schema, text)
            if VOID in (left, right):
                continue
            if node.op in ("=", "!=", "<", "<=", ">", ">="):
                if left == right or {left, right} <= _ENGINE_NUMBERS or "string" in (left, right) and \
                        {left, right} - {"string"} <= _ENGINE_NUMBERS:
                    continue
                _refuse(f"comparing a {left} with a {right}", node, text)
            elif not (left in _ENGINE_NUMBERS | {"float"} and right in _ENGINE_NUMBERS | {"float"}):
                _refuse(f"'{node.op}' of {left} and {right}", node, text)
        elif isinstance(node, Func) and node.name in ("coalesce", "greatest", "least", "if"):
            values = {_type(a, schema, text) for a in (node.args[1:] if node.name == "if" else node.args)} - {VOID}
            if len(values) > 1 and not values <= _ENGINE_NUMBERS | {"float"}:
                _refuse(f"{node.name}() of {' and '.join(sorted(values))}", node, text)
        elif isinstance(node, Unary) and node.op == "-" or isinstance(node, Func) and node.name == "abs" \
                or isinstance(node, rx.Agg) and node.func in ("sum", "avg") and node.arg is not None:
            arg = node.operand if isinstance(node, Unary) else node.arg if isinstance(node, rx.Agg) else node.args[0]
            t = _type(arg, schema, text)
            if t != VOID and t not in _ENGINE_NUMBERS | {"float"}:
                what = node.op if isinstance(node, Unary) else getattr(node, "func", getattr(node, "name", "")).upper()
                _refuse(f"{what} of a {t}", node, text)


def _refuse(what: str, node: object, text: str) -> None:
    raise CEPSemanticError(f"{what} across rows is not supported: the engine computes with integers, DOUBLEs, "
                           "strings and booleans as Spark does; Spark computes any expression over one row "
                           "(e.g. CAST(A.d AS DOUBLE), or the whole comparison over one row)",
                           getattr(node, "span", None), text)

