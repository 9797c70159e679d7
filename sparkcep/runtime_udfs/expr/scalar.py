"""Evaluate condition and RETURN expressions over a binding of variables to events.

A *binding* maps each variable to an event (a ``dict`` of attribute → value, including ``type`` and ``ts``)
or, for a Kleene variable, to the ``list`` of its events in time order.  ``cur`` maps a Kleene variable to
the 0-based position of its *current* event, which ``v[i]``, ``v[i-1]``, ``NEXT(v)``, ``v[..i-1]`` and a plain
``v.attr`` inside a per-event predicate refer to.

Null semantics follow SQL: a missing attribute is ``None``; arithmetic and comparisons with ``None`` give
``None``; ``AND``/``OR``/``NOT`` are three-valued; a condition holds only if it is ``True``.  One exception,
from SASE §2.2: a comparison that reads an attribute an event of an ``ANY(...)`` component lacks is TRUE.
Operators mean what Spark SQL's mean under ANSI rules with the ``try_`` forms (an error is NULL), as the SQL
filter computes them: ``%`` truncates, BIGINT overflow and ``x / 0`` are NULL, ``/`` is DOUBLE division, a
string meets a number as the number's type, NaN equals NaN and is above every number (docs/language.md,
"Expression semantics").  A NaN *attribute* value is NULL (pandas cannot tell them apart; the readers refuse
NaN input values).

Expressions are compiled once into closures (``compile_expr``) so engines do not walk the AST per event.

Example::

    >>> from sparkcep.ir.ast import Attr, BinOp, Literal
    >>> f = compile_expr(BinOp(">", Attr("a", "x"), Literal(3)))
    >>> f({"a": {"x": 5}})
    True
"""

from __future__ import annotations

import decimal
import math
import numbers
import operator
import re
from collections.abc import Callable
from typing import Any

from sparkcep.ir.ast import (
    AGGREGATES,
    ENGINE_CASTS,
    ENGINE_FUNCTIONS,
    Attr,
    BinOp,
    Call,
    EquivTest,
    Func,
    Literal,
    Unary,
)
from sparkcep.ir.kinds import kind_of, like_pattern_valid
from sparkcep.ir.limits import raise_recursion_limit
from sparkcep.ir.spec import NEWEST

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
        value = literal_value(e.value)
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

            def compare(b, c):
                x, y = left(b, c), right(b, c)
                if type(x) is int and type(y) is int:  # the common case without a call
                    return op(x, y)
                return _compare(op, x, y)

            return compare
        op = _ARITH[e.op]
        if e.op in ("+", "-", "*"):

            def exact(b, c):
                x, y = left(b, c), right(b, c)
                if type(x) is int and type(y) is int:  # the common case without a call
                    r = op(x, y)
                    return r if INT64_MIN <= r <= INT64_MAX else None
                return _arith(op, x, y)

            return exact
        return lambda b, c: _arith(op, left(b, c), right(b, c))
    if isinstance(e, Func):
        return _compile_func(e, any_vars)
    if isinstance(e, Call):
        return _compile_call(e, any_vars)
    if isinstance(e, EquivTest):
        return _compile_equiv(e)
    raise EvalError(f"cannot evaluate {type(e).__name__}")


def literal_value(value):
    """A literal as the engines read it: an integer outside the 64-bit range is a DOUBLE (as the SQL filter
    writes it), everything else as it is."""
    if type(value) is int and not INT64_MIN <= value <= INT64_MAX:
        return float(value)
    return value


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
    if name == NEWEST:
        return _newest_of_binding(e.args[0].attr)
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
        if name == "sum":  # of BIGINTs: NULL beyond the 64-bit range (Spark's try_sum)
            total = sum(vals)
            return _int64(total) if type(total) is int else total
        if name == "avg":
            return sum(vals) / len(vals)
        return min(vals) if name == "min" else max(vals)

    return agg


def _newest_of_binding(attr: str) -> Callable[[Binding, dict], Any]:
    """:data:`~sparkcep.ir.spec.NEWEST`: the largest valid ``attr`` of the events ``b`` binds (None if none)."""

    def newest(b: Binding, c: dict):
        top = None
        for bound in b.values():
            for ev in bound if isinstance(bound, list) else (bound,):
                v = ev.get(attr) if isinstance(ev, dict) else None
                if v is not None and v == v and (top is None or v > top):
                    top = v
        return top

    return newest


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
    if v is LACKING:
        return True
    if type(v) is bool:
        return not v
    kind, v = _number(v)
    return (not v) if kind is bool else None  # NOT of a number or a string: Spark refuses it; NULL here


def _neg(v):
    if v is None or v is LACKING:
        return None
    kind, v = _number(v)
    if kind is int:
        return _int64(-v)
    if kind is float:
        return 0.0 - v  # as the SQL filter's try_subtract(0, v): -0.0 is 0.0
    if kind is str:  # Spark negates a string as a DOUBLE (try_cast: NULL if it is no number)
        d = _str_to_double(v)
        return None if d is None else 0.0 - d
    return None  # a boolean: Spark refuses it; NULL here


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


# ----------------------------------------------------------------------------------------------- Spark's values
# (docs/language.md, "Expression semantics"): BIGINT (Python int in the 64-bit range), DOUBLE (float), STRING,
# BOOLEAN; an operator evaluates as Spark SQL's try_ form under ANSI rules, so an error is NULL.

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _number(v):
    """``(kind, value)``: kind ``int`` (numpy integers too), ``float``, ``str``, ``bool``, or the value's own type
    (an array, a struct: compared only with its own type, as Spark does)."""
    t = type(v)
    if t is int or t is float or t is str or t is bool:
        return t, v
    if isinstance(v, bool) or (t.__module__ == "numpy" and t.__name__ in ("bool", "bool_")):
        return bool, bool(v)
    if isinstance(v, numbers.Integral):
        return int, int(v)
    if isinstance(v, float | numbers.Real):
        return float, float(v)
    if isinstance(v, str):
        return str, str(v)
    return t, v


def _int64(v: int):
    """A BIGINT result: NULL where it leaves the 64-bit range (Spark's try_add, try_multiply, ...)."""
    return v if INT64_MIN <= v <= INT64_MAX else None


# Spark's cast of a string to BIGINT / DOUBLE (try_cast): surrounding whitespace and control characters are
# trimmed; BIGINT takes an optional sign and decimal digits only; DOUBLE takes Java's decimal and hexadecimal
# forms (an optional d/f suffix) and inf, infinity, nan in any case.
_TRIM = "".join(chr(c) for c in range(33))
_BIGINT_TEXT = re.compile(r"[+-]?[0-9]+")
_DOUBLE_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[dDfF]?")
_HEX_DOUBLE = re.compile(r"([+-]?)0[xX]([0-9a-fA-F]*(?:\.[0-9a-fA-F]*)?)[pP]([+-]?[0-9]+)[dDfF]?")
_SPECIAL = {"inf": math.inf, "+inf": math.inf, "infinity": math.inf, "+infinity": math.inf, "-inf": -math.inf,
            "-infinity": -math.inf, "nan": math.nan}


def _str_to_bigint(s: str):
    s = s.strip(_TRIM)
    if not _BIGINT_TEXT.fullmatch(s):
        return None
    return _int64(int(s))


def _str_to_double(s: str):
    s = s.strip(_TRIM)
    if _DOUBLE_TEXT.fullmatch(s):
        return float(s.rstrip("dDfF"))
    special = _SPECIAL.get(s.lower())
    if special is not None:
        return special
    m = _HEX_DOUBLE.fullmatch(s)
    if m and m.group(2) not in ("", "."):
        try:
            value = float.fromhex(f"{m.group(1)}0x{m.group(2)}p{m.group(3)}")
        except (OverflowError, ValueError):
            return None
        return value
    return None


def _coerce(x, y):
    """``(kind, x, y)``: both operands as one Spark type (ANSI implicit casts, with try_cast for strings), or
    ``(None, None, None)`` where one is NULL or Spark has no such pair (a boolean and a number, two strings in
    arithmetic: the caller decides)."""
    kx, x = _number(x)
    ky, y = _number(y)
    if kx is ky:
        return kx, x, y
    if kx is str and ky in (int, float):
        x = _str_to_bigint(x) if ky is int else _str_to_double(x)
        return (ky, x, y) if x is not None else (None, None, None)
    if ky is str and kx in (int, float):
        y = _str_to_bigint(y) if kx is int else _str_to_double(y)
        return (kx, x, y) if y is not None else (None, None, None)
    if {kx, ky} == {int, float}:
        return float, float(x), float(y)
    return None, None, None


def _compare(op, x, y):
    """``x op y`` as Spark SQL compares (``op`` one of :data:`_CMP`'s operators): a string and a number compare as
    the number's type (the string try_cast to it: NULL if it is no number), BIGINT and DOUBLE as DOUBLE, strings
    by code point, FALSE < TRUE; NaN equals NaN and is above every other DOUBLE."""
    tx, ty = type(x), type(y)
    if tx is int and ty is int:  # the common case, first
        return op(x, y)
    if x is LACKING or y is LACKING:
        return True
    if x is None or y is None:
        return None
    if (tx is float or tx is int) and (ty is float or ty is int):
        kind, a, b = float, float(x), float(y)
    else:
        kind, a, b = _coerce(x, y)
    if kind is None:
        return None
    if kind is float and (a != a or b != b):
        a, b = (a != a, 0.0 if a != a else a), (b != b, 0.0 if b != b else b)
    try:
        return bool(op(a, b))
    except TypeError:  # e.g. the order of two dicts
        return None


def _arith(op, x, y):
    """``x op y`` as Spark SQL's try_ arithmetic (``op`` one of :data:`_ARITH`'s operators): BIGINT ``+ - * %`` stay
    BIGINT and give NULL on overflow; ``/`` is DOUBLE division; ``x / 0`` and ``x % 0`` are NULL; ``%`` truncates
    (the result has the sign of ``x``); DOUBLE follows IEEE 754 (inf, NaN); a string is try_cast to the other
    operand's type; two strings, or a boolean, give NULL."""
    tx, ty = type(x), type(y)
    if tx is int and ty is int:  # the common case, first
        kind, a, b = int, x, y
    elif x is LACKING or y is LACKING:
        return LACKING
    elif x is None or y is None:
        return None
    elif (tx is float or tx is int) and (ty is float or ty is int):
        kind, a, b = float, float(x), float(y)
    else:
        kind, a, b = _coerce(x, y)
    if kind is int:
        if op is operator.truediv:
            return None if b == 0 else float(a) / float(b)
        if op is operator.mod:
            if b == 0:
                return None
            r = abs(a) % abs(b)
            return -r if a < 0 else r
        return _int64(op(a, b))
    if kind is float:
        if op is operator.truediv:
            return None if b == 0 else a / b
        if op is operator.mod:
            return _fmod(a, b)
        return op(a, b)
    return None


def _fmod(a: float, b: float):
    """Java's (and Spark's) DOUBLE remainder: truncated, NULL for a zero divisor (try_mod)."""
    if b == 0:
        return None
    if a != a or b != b or math.isinf(a):
        return math.nan
    if math.isinf(b):
        return a
    return math.fmod(a, b)


# ------------------------------------------------------------------------------------ scalar functions and forms
# Spark SQL's meaning with the try_ rule (an error is NULL).  A per-event call is computed by Spark in the
# projection before the shuffle (compiler/optimizer/project_event_expressions.py), so any Spark SQL function works
# there; the engines (and the oracle) evaluate the functions below, over values of several events.


def _value(v):
    return None if v is LACKING else v


def _abs(x):
    kind, x = _number(x)
    if kind is str:
        kind, x = float, _str_to_double(x)
    if x is None:
        return None
    if kind is int:
        return _int64(abs(x))
    return abs(x) if kind is float else None


def _in(x, *values):
    if x is None:
        return None
    unknown = False
    for v in values:
        r = _compare(operator.eq, x, v)
        if r is True:
            return True
        unknown = unknown or r is None
    return None if unknown else False


def _between(x, lo, hi):
    return _and(_compare(operator.ge, x, lo), _compare(operator.le, x, hi))


def _as_string(v):
    """Spark's CAST(v AS STRING) for the engines' values."""
    kind, v = _number(v)
    if v is None or kind is str:
        return v
    if kind is bool:
        return "true" if v else "false"
    if kind is int:
        return str(v)
    if kind is float:
        if v != v:
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        if v == 0 or 1e-3 <= abs(v) < 1e7:  # Java's Double.toString: plain notation in this range
            return repr(v)
        sign, digits, exponent = decimal.Decimal(repr(v)).as_tuple()
        text = "".join(map(str, digits)).rstrip("0") or "0"
        return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{len(digits) - 1 + exponent}"
    return None


def _like(x, pattern):
    x, pattern = _as_string(x), _as_string(pattern)
    if x is None or pattern is None or not like_pattern_valid(pattern):
        return None  # Spark raises on an escape before another character than _ % \ : NULL
    out, k = [], 0
    while k < len(pattern):
        ch = pattern[k]
        if ch == "\\" and k + 1 < len(pattern):
            out.append(re.escape(pattern[k + 1]))
            k += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        k += 1
    return re.fullmatch("".join(out), x, re.DOTALL) is not None


def _cast(x, type_name: str):
    if x is None:
        return None
    kind, v = _number(x)
    t = type_name.upper()
    if t in ("BIGINT", "LONG", "INT", "INTEGER", "SMALLINT", "SHORT", "TINYINT", "BYTE"):
        bits = {"INT": 32, "INTEGER": 32, "SMALLINT": 16, "SHORT": 16, "TINYINT": 8, "BYTE": 8}.get(t, 64)
        if kind is str:
            v = _str_to_bigint(v)
        elif kind is float:
            v = None if v != v or math.isinf(v) else int(v)
        elif kind is bool:
            v = int(v)
        elif kind is not int:
            return None
        return v if v is not None and -(2 ** (bits - 1)) <= v < 2 ** (bits - 1) else None
    if t == "DOUBLE":
        if kind is str:
            return _str_to_double(v)
        return float(v) if kind in (int, float, bool) else None
    if t == "STRING":
        return _as_string(v)
    if t == "BOOLEAN":
        if kind is str:
            return {"t": True, "true": True, "y": True, "yes": True, "1": True, "f": False, "false": False,
                    "n": False, "no": False, "0": False}.get(v.strip(_TRIM).lower())
        return bool(v) if kind in (int, float, bool) else None  # NaN is TRUE, as in Java
    raise EvalError(f"CAST to {type_name} is computed by Spark only (in a one-event expression)")


def _substring(s, pos, length=2**31 - 1):
    """Spark's substring: 1-based, a negative ``pos`` counts from the end, 0 is 1; positions are INTs (NULL
    beyond 32 bits, as TRY_CAST gives them)."""
    s, pos, length = _as_string(s), _cast(pos, "INT"), _cast(length, "INT")
    if s is None or pos is None or length is None:
        return None
    start = pos - 1 if pos > 0 else (len(s) + pos if pos < 0 else 0)
    end = start + length if length > 0 else start
    start = max(start, 0)
    return s[start:max(end, start)] if end > 0 else ""


def _strict(fn):
    """``fn`` over its arguments, NULL if any is NULL."""
    return lambda *xs: None if any(x is None for x in xs) else fn(*xs)


_FUNCTIONS: dict[str, Callable] = {
    "abs": _strict(_abs),
    "isnull": lambda x: x is None,
    "isnotnull": lambda x: x is not None,
    "in": _in,
    "between": _between,
    "like": _like,
    "lower": _strict(lambda s: None if _as_string(s) is None else _as_string(s).lower()),
    "upper": _strict(lambda s: None if _as_string(s) is None else _as_string(s).upper()),
    "length": _strict(lambda s: None if _as_string(s) is None else len(_as_string(s))),
    "concat": _strict(lambda *xs: None if any(_as_string(x) is None for x in xs)
                      else "".join(_as_string(x) for x in xs)),
    "substring": _substring,
    "substr": _substring,
}
assert set(_FUNCTIONS) | {"coalesce", "case", "cast"} == set(ENGINE_FUNCTIONS)


def _compile_call(e: Call, any_vars: frozenset[str]):
    args = [_compile(a, any_vars) for a in e.args]
    name = e.name
    widen = _widening(kind_of(e))
    if name == "coalesce":
        def coalesce(b, c):
            for a in args:
                v = widen(_value(a(b, c)))  # as Spark casts each value first: a string that is no number is NULL
                if v is not None:
                    return v
            return None
        return coalesce
    if name == "case":
        pairs = [(args[k], args[k + 1]) for k in range(0, len(args) - 1, 2)]
        default = args[-1] if len(args) % 2 else (lambda b, c: None)

        def case(b, c):
            for cond, value in pairs:
                if holds(cond(b, c)):
                    return widen(_value(value(b, c)))
            return widen(_value(default(b, c)))
        return case
    if name == "cast":
        (arg,) = args
        if (e.type or "").upper() not in _CASTS:
            raise EvalError(f"CAST to {e.type} is computed by Spark only (in a one-event expression)")
        return lambda b, c: _cast(_value(arg(b, c)), e.type)
    fn = _FUNCTIONS.get(name)
    if fn is None:
        raise EvalError(f"{name}() is computed by Spark only (in a one-event expression)")
    return lambda b, c: fn(*[_value(a(b, c)) for a in args])


_CASTS = frozenset(ENGINE_CASTS)


def _widening(kind: str | None) -> Callable:
    """A value of ``coalesce`` or ``CASE`` as the type Spark gives the whole (:func:`sparkcep.ir.kinds.kind_of`):
    a BIGINT among DOUBLEs is a DOUBLE, a string among numbers is try_cast to their type."""
    if kind == "float":
        return lambda v: _cast(v, "DOUBLE") if v is not None and type(v) is not float else v
    if kind == "int":
        return lambda v: _str_to_bigint(v) if type(v) is str else v
    return lambda v: v
