"""Evaluate a condition over whole columns of candidate bindings at once, with :mod:`expr`'s exact semantics.

``vectorize(expr)`` compiles an AST expression into a :class:`VectorExpr`: called with a dict
``{(var, attr): column}`` (numpy arrays or pyarrow Arrays/ChunkedArrays, all of length n, one row per binding)
it returns a numpy bool array that is True exactly where :func:`sparkcep.runtime_udfs.expr.scalar.compile_expr` on
that row's binding gives ``True``.  A key missing from the dict is an attribute the events lack: NULL in every
row, as ``expr`` reads a missing attribute.

The values must be those the engine sees (``ts`` and timestamp attributes as epoch milliseconds, see
``spark_adapters._arrow_epoch_ms``), each column of one type: integers, floats, strings or booleans (an object
numpy array is read through ``pyarrow.array``, so it may mix ``None`` with values of one type).  Semantics, as
in ``expr`` (Spark SQL's, with the ``try_`` forms: docs/language.md, "Expression semantics"): NaN in an
attribute is NULL (a NaN computed by arithmetic or written as a literal is a value, equal to NaN and above
every number); arithmetic and comparisons with NULL are NULL; AND/OR/NOT are three-valued (``AND`` only sees a
value that ``is False``, ``OR`` one that ``is True``; NOT of a non-boolean is NULL); BIGINT ``+ - * %`` give
NULL on overflow, ``%`` truncates, ``/`` divides as DOUBLE, ``x / 0`` and ``x % 0`` are NULL; BIGINT and
DOUBLE compare and compute as DOUBLE; a string meeting a number is cast to the number's type (NULL if it is
no number; one Python call per distinct string); two strings never add.

Supported: ``Literal``; ``Attr`` of a plain variable (no index, not a bare attribute, not a variable of an
``ANY`` component: pass those in ``any_vars``); ``Unary`` ``-``/``NOT``; ``BinOp`` ``+ - * / %``, comparisons,
``AND``/``OR``.  Anything else (aggregates, ``v[i]``, equivalence tests, ANY variables) gives None: the
caller keeps the per-binding evaluator for it.

Example::

    >>> import numpy as np
    >>> from sparkcep.ir.ast import Attr, BinOp, Literal
    >>> e = BinOp("AND", BinOp("<", Attr("a", "x"), Attr("b", "x")),
    ...           BinOp(">=", BinOp("*", Attr("b", "price"), Literal(2)), Attr("c", "price")))
    >>> f = vectorize(e)
    >>> sorted(f.reads)
    [('a', 'x'), ('b', 'price'), ('b', 'x'), ('c', 'price')]
    >>> f({("a", "x"): np.array([1, 5, 1]), ("b", "x"): np.array([2, 2, 2]),
    ...    ("b", "price"): np.array([3.0, 3.0, np.nan]), ("c", "price"): np.array([6, 6, 1])}).tolist()
    [True, False, False]
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcep.ir.ast import Attr, BinOp, Literal, Unary
from sparkcep.runtime_udfs.expr.scalar import _str_to_bigint, _str_to_double

Columns = Mapping[tuple[str, str], object]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_CMP = {"=": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
        ">=": np.greater_equal}
_PC_CMP = {"=": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater,
           ">=": pc.greater_equal}
_PY_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul}
_NP_ARITH = {"+": np.add, "-": np.subtract, "*": np.multiply}
_CHECKED = {"+": pc.add_checked, "-": pc.subtract_checked, "*": pc.multiply_checked}


@dataclass(frozen=True)
class _Val:
    """A column of values of one kind: ``null`` (no data), ``bool``, ``int`` (int64), ``float`` (float64),
    ``str`` (a pyarrow large_string array, null where invalid).  ``valid`` is False where the value is NULL;
    ``data`` there is a harmless filler (0 for ints, 0 or NaN for floats)."""

    kind: str
    data: object
    valid: np.ndarray


def _val(kind: str, data, valid: np.ndarray) -> _Val:
    if kind == "int":
        data = np.where(valid, data, 0)  # no garbage in NULL rows: checked arithmetic must not trip on it
    return _Val(kind, data, valid)


def _null(n: int) -> _Val:
    return _Val("null", None, np.zeros(n, dtype=bool))


# ----------------------------------------------------------------------------------------------- input columns


def _from_numpy(a: np.ndarray) -> _Val:
    n = len(a)
    if a.dtype.kind == "b":
        return _Val("bool", a.astype(bool), np.ones(n, dtype=bool))
    if a.dtype.kind in "iu":
        if a.dtype == np.uint64 and n and a.max() > _INT64_MAX:  # beyond BIGINT: a DOUBLE, as such a literal
            return _Val("float", a.astype(np.float64), np.ones(n, dtype=bool))
        return _Val("int", a.astype(np.int64, copy=False), np.ones(n, dtype=bool))
    if a.dtype.kind == "f":
        data = a.astype(np.float64, copy=False)
        return _Val("float", data, ~np.isnan(data))  # expr: a NaN attribute is NULL
    if a.dtype.kind == "U":
        return _from_arrow(pa.array(a, pa.large_string()))
    if a.dtype.kind == "O":
        return _from_arrow(pa.array(a, from_pandas=True))
    raise TypeError(f"vectorized conditions do not read numpy columns of dtype {a.dtype}")


def _from_arrow(a: pa.Array | pa.ChunkedArray) -> _Val:
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    if pa.types.is_dictionary(a.type):
        a = a.dictionary_decode()
    n, t = len(a), a.type
    valid = pc.is_valid(a).to_numpy(zero_copy_only=False) if a.null_count else np.ones(n, dtype=bool)
    if pa.types.is_null(t):
        return _null(n)
    if pa.types.is_boolean(t):
        return _Val("bool", pc.fill_null(a, False).to_numpy(zero_copy_only=False), valid)
    if pa.types.is_integer(t):
        inner = _from_numpy(pc.fill_null(a, 0).to_numpy(zero_copy_only=False))
        return _val(inner.kind, inner.data, valid)
    if pa.types.is_floating(t):
        data = pc.fill_null(a, 0.0).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        return _Val("float", data, valid & ~np.isnan(data))
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return _Val("str", a.cast(pa.large_string()), valid)
    raise TypeError(f"vectorized conditions do not read Arrow columns of type {t} (pass what the engine sees)")


def _column(x, n: int) -> _Val:
    v = _from_arrow(x) if isinstance(x, (pa.Array, pa.ChunkedArray)) else _from_numpy(np.asarray(x))
    if len(v.valid) != n:
        raise ValueError(f"columns of different lengths ({len(v.valid)} and {n})")
    return v


def _literal(value, n: int) -> _Val:
    ones = np.ones(n, dtype=bool)
    if value is None:
        return _null(n)
    if isinstance(value, bool):
        return _Val("bool", np.full(n, value), ones)
    if isinstance(value, int):
        if _INT64_MIN <= value <= _INT64_MAX:
            return _Val("int", np.full(n, value, dtype=np.int64), ones)
        return _Val("float", np.full(n, float(value)), ones)  # beyond BIGINT: a DOUBLE, as scalar.literal_value
    if isinstance(value, float):
        return _Val("float", np.full(n, value), ones)  # a literal NaN stays a value, as in expr
    return _Val("str", pa.array([value] * n, pa.large_string()), ones)


# ----------------------------------------------------------------------------------------------- operators
# Spark SQL's try_ semantics, as scalar.py: see its _coerce, _arith, _compare.


def _cast_str(v: _Val, kind: str) -> _Val:
    """Spark's try_cast of a string column to BIGINT (``kind`` int) or DOUBLE (float): NULL where it is no
    number.  Strings are rare in arithmetic: one Python call per distinct string."""
    parse = _str_to_bigint if kind == "int" else _str_to_double
    texts = pc.fill_null(v.data, "").to_pylist()
    cache: dict = {}
    values = [cache[t] if t in cache else cache.setdefault(t, parse(t)) for t in texts]
    ok = v.valid & np.array([x is not None for x in values], dtype=bool)
    fill = 0 if kind == "int" else 0.0
    dtype = np.int64 if kind == "int" else np.float64
    data = np.array([fill if x is None else x for x in values], dtype=dtype)
    return _val(kind, data, ok)


def _coerce(x: _Val, y: _Val):
    """Both columns as one Spark type (ANSI implicit casts, try_cast for strings), or None where there is no
    such pair (NULL, a boolean and a number, ...)."""
    if x.kind == "null" or y.kind == "null":
        return None
    if x.kind == y.kind:
        return x, y
    if x.kind == "str" and y.kind in ("int", "float"):
        return _cast_str(x, y.kind), y
    if y.kind == "str" and x.kind in ("int", "float"):
        return x, _cast_str(y, x.kind)
    if {x.kind, y.kind} == {"int", "float"}:
        return _Val("float", _to_float(x), x.valid), _Val("float", _to_float(y), y.valid)
    return None


def _to_float(v: _Val) -> np.ndarray:
    return v.data if v.kind == "float" else v.data.astype(np.float64)


def _arith(op: str, x: _Val, y: _Val) -> _Val:
    n = len(x.valid)
    pair = _coerce(x, y)
    if pair is None or pair[0].kind not in ("int", "float"):
        return _null(n)  # two strings, booleans: no Spark arithmetic
    x, y = pair
    a, b = x.data, y.data
    valid = x.valid & y.valid
    if op in ("/", "%"):
        valid = valid & (b != 0)
    if x.kind == "float" or op == "/":
        a, b = _to_float(x), _to_float(y)
        with np.errstate(all="ignore"):
            if op == "/":
                return _val("float", a / np.where(valid, b, 1.0), valid)
            if op == "%":
                return _val("float", np.fmod(a, np.where(valid, b, 1.0)), valid)
            return _val("float", _NP_ARITH[op](a, b), valid)
    if op == "%":
        with np.errstate(all="ignore"):
            return _val("int", np.fmod(a, np.where(valid, b, 1)), valid)  # truncated; INT64_MIN % -1 is 0
    try:
        return _val("int", _CHECKED[op](a, b).to_numpy(), valid)
    except pa.ArrowInvalid:  # overflow somewhere: exact Python ints, NULL outside the 64-bit range
        exact = _PY_ARITH[op](a.astype(object), b.astype(object))
        ok = valid & np.array([_INT64_MIN <= v <= _INT64_MAX for v in exact], dtype=bool)
        return _val("int", np.where(ok, exact, 0).astype(np.int64), ok)


def _neg(x: _Val) -> _Val:
    if x.kind == "str":  # Spark negates a string as a DOUBLE
        x = _cast_str(x, "float")
    if x.kind == "float":
        return _val("float", 0.0 - x.data, x.valid)  # as scalar._neg: -0.0 is 0.0
    if x.kind == "int":
        ok = x.valid & (x.data != _INT64_MIN)
        return _val("int", -np.where(ok, x.data, 0), ok)
    return _null(len(x.valid))  # NULL, a boolean


def _not(x: _Val) -> _Val:
    if x.kind == "bool":
        return _Val("bool", ~x.data, x.valid)
    return _Val("bool", np.zeros(len(x.valid), dtype=bool), np.zeros(len(x.valid), dtype=bool))


def _numpy_bool(a: pa.Array) -> np.ndarray:
    return pc.fill_null(a, False).to_numpy(zero_copy_only=False)


def _and(x: _Val, y: _Val) -> _Val:
    false = _is(x, False) | _is(y, False)
    return _Val("bool", ~false, false | (x.valid & y.valid))


def _or(x: _Val, y: _Val) -> _Val:
    true = _is(x, True) | _is(y, True)
    return _Val("bool", true, true | (x.valid & y.valid))


def _is(x: _Val, value: bool) -> np.ndarray:
    """Where the value ``is True`` / ``is False`` (expr's AND/OR test identity: ``0`` is not ``False``)."""
    if x.kind != "bool":
        return np.zeros(len(x.valid), dtype=bool)
    return x.valid & (x.data if value else ~x.data)


def _compare(op: str, x: _Val, y: _Val) -> _Val:
    n = len(x.valid)
    pair = _coerce(x, y)
    if pair is None:
        return _Val("bool", np.zeros(n, dtype=bool), np.zeros(n, dtype=bool))
    x, y = pair
    valid = x.valid & y.valid
    if x.kind == "str":
        return _Val("bool", _numpy_bool(_PC_CMP[op](x.data, y.data)), valid)
    if x.kind != "float":
        return _Val("bool", _CMP[op](x.data, y.data), valid)
    a, b = x.data, y.data  # NaN equals NaN and is above every other DOUBLE
    an, bn = np.isnan(a), np.isnan(b)
    with np.errstate(invalid="ignore"):
        eq = (a == b) | (an & bn)
        lt = ((a < b) & ~an) | (~an & bn)
        gt = ((a > b) & ~bn) | (an & ~bn)
    out = {"=": eq, "!=": ~eq, "<": lt, "<=": lt | eq, ">": gt, ">=": gt | eq}[op]
    return _Val("bool", out, valid)


# ----------------------------------------------------------------------------------------------- compilation

_Node = Callable[[Columns, int], _Val]


def _compile(e, any_vars: frozenset[str], reads: set) -> _Node | None:
    if isinstance(e, Literal):
        if e.value is not None and not isinstance(e.value, (bool, int, float, str)):
            return None
        value = e.value
        return lambda cols, n: _literal(value, n)
    if isinstance(e, Attr):
        if e.var is None or e.index is not None or e.var in any_vars:
            return None
        key = (e.var, e.attr)
        reads.add(key)
        return lambda cols, n: _column(cols[key], n) if key in cols else _null(n)
    if isinstance(e, Unary):
        inner = _compile(e.operand, any_vars, reads)
        if inner is None or e.op not in ("-", "NOT"):
            return None
        fn = _not if e.op == "NOT" else _neg
        return lambda cols, n: fn(inner(cols, n))
    if isinstance(e, BinOp):
        if e.op in ("AND", "OR"):
            fn = _and if e.op == "AND" else _or
        elif e.op in _CMP:
            fn = _bind(_compare, e.op)
        elif e.op in _CHECKED or e.op in ("/", "%"):
            fn = _bind(_arith, e.op)
        else:
            return None
        left = _compile(e.left, any_vars, reads)
        right = _compile(e.right, any_vars, reads)
        if left is None or right is None:
            return None
        return lambda cols, n: fn(left(cols, n), right(cols, n))
    return None  # Func (aggregates), EquivTest, anything new


def _bind(fn, op: str):
    return lambda x, y: fn(op, x, y)


@dataclass(frozen=True)
class VectorExpr:
    """A compiled condition: ``f(columns) -> numpy bool array`` (True where the condition is TRUE)."""

    expr: object
    reads: frozenset[tuple[str, str]]
    _fn: _Node

    def _length(self, columns: Columns, n: int | None) -> int:
        if n is not None:
            return n
        for x in columns.values():
            return len(x)
        raise ValueError("no columns: pass n, the number of bindings")

    def __call__(self, columns: Columns, n: int | None = None) -> np.ndarray:
        """Where the condition holds (``expr.holds``): a numpy bool array of the columns' length."""
        v = self._fn(columns, self._length(columns, n))
        if v.kind != "bool":
            return np.zeros(len(v.valid), dtype=bool)  # only True holds, and True is a bool
        return v.valid & v.data

    def values(self, columns: Columns, n: int | None = None) -> pa.Array:
        """The expression's values as a pyarrow array (null where NULL): int64, double, large_string, bool, or
        null.  Integers beyond int64 (Python ints after an overflow) raise ``OverflowError``."""
        v = self._fn(columns, self._length(columns, n))
        if v.kind == "null":
            return pa.nulls(len(v.valid))
        if v.kind == "str":
            return v.data
        return pa.array(v.data, mask=~v.valid)


def vectorize(expr, any_vars: frozenset[str] = frozenset()) -> VectorExpr | None:
    """``expr`` as a :class:`VectorExpr`, or None if it uses anything outside the supported subset (or reads a
    variable of ``any_vars``: SASE's lacking-attribute rule is not vectorized)."""
    reads: set = set()
    fn = _compile(expr, frozenset(any_vars), reads)
    return None if fn is None else VectorExpr(expr, frozenset(reads), fn)
