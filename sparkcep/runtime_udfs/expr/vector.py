"""Evaluate a condition over whole columns of candidate bindings at once, with :mod:`expr`'s exact semantics.

``vectorize(expr)`` compiles an AST expression into a :class:`VectorExpr`: called with a dict
``{(var, attr): column}`` (numpy arrays or pyarrow Arrays/ChunkedArrays, all of length n, one row per binding)
it returns a numpy bool array that is True exactly where :func:`sparkcep.runtime_udfs.expr.scalar.compile_expr` on
that row's binding gives ``True``.  A key missing from the dict is an attribute the events lack: NULL in every
row, as ``expr`` reads a missing attribute.

The values must be those the engine sees (``ts`` and timestamp attributes as epoch milliseconds, see
``spark_adapters._arrow_epoch_ms``), each column of one type: integers, floats, strings or booleans (an object
numpy array is read through ``pyarrow.array``, so it may mix ``None`` with values of one type).  Semantics, as
in ``expr``: NaN in an attribute is NULL (a NaN computed by arithmetic is a value); arithmetic and comparisons
with NULL are NULL; AND/OR/NOT are three-valued, with Python's idea of truth (``AND`` only sees a value that
``is False``, ``OR`` one that ``is True``, ``NOT 0`` is TRUE); ``/`` is true division (int/int gives a
correctly rounded float), and ``x / 0`` is NULL; integer arithmetic never wraps (it continues exactly in
Python ints); int and float compare exactly; a string compared with a number is unequal (``=`` FALSE,
``!=`` TRUE, ``<`` NULL); ``'ab' + 'c'`` concatenates and ``'ab' * 2`` repeats.  Unary minus of a string
raises ``TypeError``, as ``expr`` does.

Supported: ``Literal``; ``Attr`` of a plain variable (no index, not a bare attribute, not a variable of an
``ANY`` component: pass those in ``any_vars``); ``Unary`` ``-``/``NOT``; ``BinOp`` ``+ - * /``, comparisons,
``AND``/``OR``.  Anything else (``%``, aggregates, ``v[i]``, equivalence tests, ANY variables) gives None: the
caller keeps the per-binding evaluator for it.  No per-row Python runs except where integers overflow int64.

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

Columns = Mapping[tuple[str, str], object]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_EXACT = 2**53  # integers of at most this magnitude are exact float64 values
_CMP = {"=": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
        ">=": np.greater_equal}
_SWAP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_PC_CMP = {"=": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater,
           ">=": pc.greater_equal}
_PY_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}
_CHECKED = {"+": pc.add_checked, "-": pc.subtract_checked, "*": pc.multiply_checked}


@dataclass(frozen=True)
class _Val:
    """A column of values of one kind: ``null`` (no data), ``bool``, ``int`` (int64, or object Python ints
    after an overflow), ``float`` (float64), ``str`` (a pyarrow large_string array, null where invalid).
    ``valid`` is False where the value is NULL; ``data`` there is a harmless filler (0 for ints, 0 or NaN for
    floats)."""

    kind: str
    data: object
    valid: np.ndarray


def _val(kind: str, data, valid: np.ndarray) -> _Val:
    if kind == "int":
        data = np.where(valid, data, 0)  # no garbage in NULL rows: checked arithmetic must not trip on it
    return _Val(kind, data, valid)


def _null(n: int) -> _Val:
    return _Val("null", None, np.zeros(n, dtype=bool))


def _ints(v: _Val):
    """Numeric data as int64 (bools as 0/1) or object ints; floats unchanged."""
    return v.data.astype(np.int64) if v.kind == "bool" else v.data


# ----------------------------------------------------------------------------------------------- input columns


def _from_numpy(a: np.ndarray) -> _Val:
    n = len(a)
    if a.dtype.kind == "b":
        return _Val("bool", a.astype(bool), np.ones(n, dtype=bool))
    if a.dtype.kind in "iu":
        if a.dtype == np.uint64 and n and a.max() > _INT64_MAX:
            return _Val("int", a.astype(object), np.ones(n, dtype=bool))
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
        return _val("int", _from_numpy(pc.fill_null(a, 0).to_numpy(zero_copy_only=False)).data, valid)
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
        data = np.empty(n, dtype=object)
        data[:] = value
        return _Val("int", data, ones)
    if isinstance(value, float):
        return _Val("float", np.full(n, value), ones)  # a literal NaN stays a value, as in expr
    return _Val("str", pa.array([value] * n, pa.large_string()), ones)


# ----------------------------------------------------------------------------------------------- operators


def _to_float(v: _Val) -> np.ndarray:
    if v.kind == "float":
        return v.data
    return _ints(v).astype(np.float64)  # object ints: float(i), OverflowError past 1e308 as in Python


def _object_arith(op: str, x: np.ndarray, y: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Exact Python int arithmetic (the rare path: int64 overflow, or int/int beyond 2**53)."""
    x, y = x.astype(object), y.astype(object)
    if op == "/":
        y = np.where(valid, y, 1)
    return _PY_ARITH[op](x, y)


def _arith(op: str, x: _Val, y: _Val) -> _Val:
    n = len(x.valid)
    valid = x.valid & y.valid
    if x.kind == "null" or y.kind == "null":
        return _null(n)
    if x.kind == "str" or y.kind == "str":
        return _string_arith(op, x, y, valid)
    if op == "/":
        valid = valid & (_to_float(y) != 0) if y.kind == "float" else valid & (_ints(y) != 0)
    if x.kind == "float" or y.kind == "float":
        a, b = _to_float(x), _to_float(y)
        with np.errstate(all="ignore"):
            return _val("float", _PY_ARITH[op](a, np.where(valid, b, 1.0) if op == "/" else b), valid)
    a, b = _ints(x), _ints(y)
    if op == "/":
        if a.dtype != object and b.dtype != object and _small(a) and _small(b):
            with np.errstate(all="ignore"):
                return _val("float", a.astype(np.float64) / np.where(valid, b, 1).astype(np.float64), valid)
        return _val("float", _object_arith(op, a, b, valid).astype(np.float64), valid)
    if a.dtype != object and b.dtype != object:
        try:
            return _val("int", _CHECKED[op](a, b).to_numpy(), valid)
        except pa.ArrowInvalid:  # overflow: continue exactly, as Python ints do
            pass
    return _val("int", _object_arith(op, a, b, valid), valid)


def _small(a: np.ndarray) -> bool:
    """Every value an exact float64 (so int64 → float64 changes nothing)."""
    return not len(a) or (int(a.min()) >= -_EXACT and int(a.max()) <= _EXACT)


def _string_arith(op: str, x: _Val, y: _Val, valid: np.ndarray) -> _Val:
    n = len(valid)
    if op == "+" and x.kind == y.kind == "str":
        return _Val("str", pc.binary_join_element_wise(x.data, y.data, pa.scalar("", pa.large_string())), valid)
    if op == "*" and {x.kind, y.kind} in ({"str", "int"}, {"str", "bool"}):
        s, k = (x, y) if x.kind == "str" else (y, x)
        if k.data.dtype == object:
            raise OverflowError("cannot fit 'int' into an index-sized integer")
        lengths = pc.fill_null(pc.binary_length(s.data), 0).to_numpy(zero_copy_only=False)
        counts = np.where(valid & (lengths > 0), np.maximum(_ints(k), 0), 0)  # 'ab' * -1 == '', '' * k == ''
        if (lengths.astype(np.float64) * counts).sum() > 2**31:
            raise MemoryError("repeated string is too long")  # Python fails too, from 2**54 bytes on
        return _Val("str", pc.binary_repeat(pc.if_else(valid, s.data, None), pa.array(counts)), valid)
    return _null(n)  # TypeError in expr: NULL


def _neg(x: _Val) -> _Val:
    if x.kind == "null":
        return x
    if x.kind == "str":  # NULL, as expr's _neg (Spark's try_ behaviour: never an exception)
        return _null(len(x.valid))
    if x.kind == "float":
        return _val("float", -x.data, x.valid)
    a = _ints(x)
    if a.dtype != object and (a == _INT64_MIN).any():
        a = a.astype(object)
    return _val("int", -a, x.valid)


def _not(x: _Val) -> _Val:
    if x.kind == "null":
        return _Val("bool", np.zeros(len(x.valid), dtype=bool), x.valid)
    if x.kind == "bool":
        return _Val("bool", ~x.data, x.valid)
    if x.kind == "str":
        return _Val("bool", _numpy_bool(pc.equal(pc.binary_length(x.data), 0)), x.valid)
    return _Val("bool", np.asarray(x.data == 0, dtype=bool), x.valid)  # Python truth: not 0, not 0.0


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
    valid = x.valid & y.valid
    if x.kind == "null" or y.kind == "null":
        return _Val("bool", np.zeros(n, dtype=bool), np.zeros(n, dtype=bool))
    if x.kind == "str" and y.kind == "str":
        return _Val("bool", _numpy_bool(_PC_CMP[op](x.data, y.data)), valid)
    if x.kind == "str" or y.kind == "str":  # str vs number/bool: unequal; ordering is a TypeError (NULL)
        if op in ("=", "!="):
            return _Val("bool", np.full(n, op == "!="), valid)
        return _Val("bool", np.zeros(n, dtype=bool), np.zeros(n, dtype=bool))
    if x.kind == "float" and y.kind == "float":
        return _Val("bool", _CMP[op](x.data, y.data), valid)
    if x.kind == "float":
        return _compare(_SWAP[op], y, x)
    a = _ints(x)
    if y.kind == "float":
        if a.dtype == object:
            return _Val("bool", np.asarray(_CMP[op](a, y.data.astype(object)), dtype=bool), valid)
        return _Val("bool", _int_float_cmp(op, a, y.data), valid)
    b = _ints(y)
    if a.dtype == object or b.dtype == object:
        return _Val("bool", np.asarray(_CMP[op](a.astype(object), b.astype(object)), dtype=bool), valid)
    return _Val("bool", _CMP[op](a, b), valid)


def _int_float_cmp(op: str, i: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``i op f`` exactly (Python compares int and float by value; int64 → float64 may round).

    Rounding is monotone, so ``float(i) < f`` implies ``i < f``; where ``float(i) == f``, ``f`` is a whole number
    and is compared with ``i`` as an integer (2**63 is above every int64)."""
    if _small(i):
        return _CMP[op](i.astype(np.float64), f)
    nan = np.isnan(f)
    with np.errstate(invalid="ignore"):
        fi = i.astype(np.float64)
        tie = fi == f
        top = tie & (f >= 2.0**63)
        whole = np.where(tie & ~top, f, 0.0).astype(np.int64)
        sign = np.where(fi < f, -1, np.where(fi > f, 1, 0))
        sign = np.where(tie, np.where(top, -1, np.sign(i - whole)), sign)
    if op == "!=":
        return nan | (sign != 0)
    return ~nan & _CMP[op](sign, 0)


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
        elif e.op in _CHECKED or e.op == "/":
            fn = _bind(_arith, e.op)
        else:
            return None  # '%': Python's modulo corners are not worth approximating
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
        mask = ~v.valid
        if v.kind == "int" and v.data.dtype == object:
            return pa.array([None if m else x for x, m in zip(v.data.tolist(), mask, strict=True)], pa.int64())
        return pa.array(v.data, mask=mask)


def vectorize(expr, any_vars: frozenset[str] = frozenset()) -> VectorExpr | None:
    """``expr`` as a :class:`VectorExpr`, or None if it uses anything outside the supported subset (or reads a
    variable of ``any_vars``: SASE's lacking-attribute rule is not vectorized)."""
    reads: set = set()
    fn = _compile(expr, frozenset(any_vars), reads)
    return None if fn is None else VectorExpr(expr, frozenset(reads), fn)
