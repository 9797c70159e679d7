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
``AND``/``OR``; ``Call`` of the engines' functions and forms (``ENGINE_FUNCTIONS``: abs, coalesce, IS NULL,
IN, BETWEEN, LIKE, CASE, CAST, lower, upper, length, concat, substring), with scalar.py's meaning: numbers,
NULLs and selections column-wise, a string rule (LIKE, substring, a string cast) through scalar.py's helper once
per distinct argument tuple.  Anything else (aggregates, ``v[i]``, equivalence tests, ANY variables) gives
None: the caller keeps the per-binding evaluator for it.

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

import functools
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcep.ir.ast import ENGINE_CASTS, ENGINE_FUNCTIONS, Attr, BinOp, Call, Literal, Unary
from sparkcep.ir.kinds import CAST_KINDS, kind_of
from sparkcep.runtime_udfs.expr import scalar
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
        data = (pc.fill_null(a, 0.0) if a.null_count else a).to_numpy(zero_copy_only=False).astype(np.float64,
                                                                                                  copy=False)
        return _Val("float", data, valid & ~np.isnan(data))
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return _Val("str", a.cast(pa.large_string()), valid)
    raise TypeError(f"vectorized conditions do not read Arrow columns of type {t} (pass what the engine sees)")


def column(x, *, nan_is_null: bool = True) -> _Val:
    """``x`` (a column as the dict passed to a :class:`VectorExpr` holds them) read once: pass the result in the
    dict instead of ``x`` when several conditions read it.  ``nan_is_null`` False: a NaN in it stays a value
    (equal to NaN, above every other DOUBLE), as Spark SQL and MATCH_RECOGNIZE's row evaluator read a row."""
    v = _column(x, len(x))
    if nan_is_null or v.kind != "float" or isinstance(x, _Val):
        return v
    if isinstance(x, (pa.Array, pa.ChunkedArray)) and x.null_count:
        return _Val("float", v.data, pc.is_valid(x).to_numpy(zero_copy_only=False))
    return _Val("float", v.data, np.ones(len(v.data), dtype=bool))


def moved(v: _Val, shift: int, lost: np.ndarray) -> _Val:
    """The column :func:`column` read ``shift`` rows away (row ``i`` holds row ``i + shift``'s value), NULL
    where ``lost`` is set and where ``i + shift`` is off the column."""
    n = len(v.valid)
    if v.kind == "null":
        return v
    lo, hi = min(n, max(0, -shift)), max(0, n - max(0, shift))  # the rows i whose i + shift is inside
    valid = np.zeros(n, dtype=bool)
    if lo < hi:
        valid[lo:hi] = v.valid[lo + shift:hi + shift]
    valid &= ~lost
    if v.kind == "str":
        idx = np.where(valid, np.arange(n, dtype=np.int64) + shift, 0)
        return _Val("str", v.data.take(pa.array(idx, mask=~valid)), valid)
    data = np.zeros(n, dtype=v.data.dtype)
    if lo < hi:
        data[lo:hi] = v.data[lo + shift:hi + shift]
    return _Val(v.kind, data, valid)


def _column(x, n: int) -> _Val:
    if isinstance(x, _Val):  # read once already (:func:`column`)
        if len(x.valid) != n:
            raise ValueError(f"columns of different lengths ({len(x.valid)} and {n})")
        return x
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
    if not (an.any() or bn.any()):
        with np.errstate(invalid="ignore"):
            return _Val("bool", _CMP[op](a, b), valid)
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
    if isinstance(e, Call):
        return _compile_call(e, any_vars, reads)
    return None  # Func (aggregates), EquivTest, anything new


def _bind(fn, op: str):
    return lambda x, y: fn(op, x, y)


# ----------------------------------------------------------------------------------------------- calls
# Spark SQL's functions and forms, as scalar.py evaluates them (its helpers are the rule; where a rule is about
# strings, it runs once per distinct argument tuple, not per row).


class _Mixed(Exception):
    """A coalesce/CASE whose values have kinds Spark would unify but the columns do not say how (their types
    are not known statically): the expression is evaluated per binding instead."""


def _ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=bool)


def _bool(data: np.ndarray, valid: np.ndarray) -> _Val:
    return _Val("bool", np.asarray(data, dtype=bool), valid)


def _pylist(v: _Val) -> list:
    """The column's values as the per-binding evaluator sees them (None where NULL)."""
    if v.kind == "null":
        return [None] * len(v.valid)
    if v.kind == "str":
        return v.data.to_pylist()
    return [x if ok else None for x, ok in zip(v.data.tolist(), v.valid.tolist(), strict=True)]


def _from_values(kind: str, values: list) -> _Val:
    n = len(values)
    if kind == "str":
        a = pa.array(values, pa.large_string())
        return _Val("str", a, pc.is_valid(a).to_numpy(zero_copy_only=False) if a.null_count else _ones(n))
    valid = np.array([x is not None for x in values], dtype=bool)
    fill = {"int": 0, "float": 0.0, "bool": False}[kind]
    dtype = {"int": np.int64, "float": np.float64, "bool": bool}[kind]
    return _val(kind, np.array([fill if x is None else x for x in values], dtype=dtype), valid)


def _rowwise(fn, kind: str, *args: _Val) -> _Val:
    """``fn`` (one of scalar.py's) over the rows' values, called once per distinct tuple of them."""
    cache: dict = {}
    out = []
    for row in zip(*map(_pylist, args), strict=True):
        key = tuple((type(x), repr(x) if type(x) is float else x) for x in row)  # -0.0 is not 0.0 here
        if key not in cache:
            cache[key] = fn(*row)
        out.append(cache[key])
    return _from_values(kind, out)


def _as_str(v: _Val) -> _Val:
    """CAST(v AS STRING)."""
    n = len(v.valid)
    if v.kind == "str":
        return v
    if v.kind == "null":
        return _Val("str", pa.nulls(n, pa.large_string()), np.zeros(n, dtype=bool))
    if v.kind == "int":
        return _Val("str", pa.array(v.data, mask=~v.valid).cast(pa.large_string()), v.valid)
    if v.kind == "bool":
        return _Val("str", pa.array(np.where(v.data, "true", "false"), pa.large_string(), mask=~v.valid), v.valid)
    return _rowwise(scalar._as_string, "str", v)  # Java's Double.toString


def _abs(x: _Val) -> _Val:
    if x.kind == "str":  # Spark's abs of a string: as a DOUBLE
        x = _cast_str(x, "float")
    if x.kind == "float":
        return _val("float", np.abs(x.data), x.valid)
    if x.kind == "int":
        ok = x.valid & (x.data != _INT64_MIN)
        return _val("int", np.abs(np.where(ok, x.data, 0)), ok)
    return _null(len(x.valid))


def _case_text(fn, x: _Val) -> _Val:
    """lower/upper: Arrow's ASCII kernels where every string is ASCII; Java's (and Python's) full case mapping
    (``'ß'`` upper is ``'SS'``) otherwise."""
    s = _as_str(x)
    if pc.all(pc.string_is_ascii(s.data)).as_py() is not False:
        return _Val("str", (pc.ascii_lower if fn is str.lower else pc.ascii_upper)(s.data), s.valid)
    return _rowwise(lambda t: None if t is None else fn(t), "str", s)


def _cast(type_name: str, x: _Val) -> _Val:
    """TRY_CAST(x AS type_name), as scalar._cast."""
    kind, n = CAST_KINDS[type_name.upper()], len(x.valid)
    if x.kind == "null":
        return _null(n)
    if x.kind == "str" and kind != "str":
        return _rowwise(lambda v: scalar._cast(v, type_name), kind, x)
    if kind == "str":
        return _as_str(x)
    if kind == "bool":
        return _bool(x.data != 0, x.valid) if x.kind != "bool" else x  # NaN is TRUE, as in Java
    if kind == "float":
        return _val("float", x.data.astype(np.float64), x.valid)
    bits = {"INT": 32, "INTEGER": 32, "SMALLINT": 16, "SHORT": 16, "TINYINT": 8, "BYTE": 8}.get(type_name.upper(), 64)
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1)
    if x.kind == "float":  # truncated; NULL outside the range (and for NaN, the infinities)
        with np.errstate(invalid="ignore"):
            t = np.trunc(x.data)
            ok = x.valid & (t >= float(lo)) & (t < float(hi))  # powers of two: exact as DOUBLEs
            return _val("int", np.where(ok, t, 0.0).astype(np.int64), ok)
    data = x.data.astype(np.int64)
    return _val("int", data, x.valid & (data >= lo) & (data <= hi - 1))


def _unify(kind: str | None, vals: list[_Val]) -> list[_Val]:
    """coalesce/CASE values as the type Spark gives the whole (``kind``, from :func:`kind_of`); _Mixed where the
    columns' kinds still differ."""
    if kind in ("int", "float"):
        vals = [_cast_str(v, kind) if v.kind == "str" else v for v in vals]
    if kind == "float":
        vals = [_Val("float", _to_float(v), v.valid) if v.kind == "int" else v for v in vals]
    kinds = {v.kind for v in vals} - {"null"}
    if len(kinds) > 1:
        raise _Mixed
    return vals


def _select(masks: list[np.ndarray], vals: list[_Val], n: int) -> _Val:
    """Row by row, the value of the first mask that holds (NULL where none does)."""
    kind = next((v.kind for v in vals if v.kind != "null"), "null")
    if kind == "null":
        return _null(n)
    taken = np.zeros(n, dtype=bool)
    valid = np.zeros(n, dtype=bool)
    if kind == "str":
        data = pa.nulls(n, pa.large_string())
    else:
        data = np.zeros(n, dtype={"int": np.int64, "float": np.float64, "bool": bool}[kind])
    for m, v in zip(masks, vals, strict=True):
        m = m & ~taken
        taken |= m
        if v.kind == "null":
            continue
        valid = np.where(m, v.valid, valid)
        data = pc.if_else(pa.array(m), v.data, data) if kind == "str" else np.where(m, v.data, data)
    return _Val(kind, data, valid)


def _coalesce(kind, *vals: _Val) -> _Val:
    vals = _unify(kind, list(vals))
    return _select([v.valid for v in vals], vals, len(vals[0].valid))


def _case(kind, *args: _Val) -> _Val:
    n = len(args[0].valid)
    conds = [_is(args[k], True) for k in range(0, len(args) - 1, 2)]
    vals = [args[k + 1] for k in range(0, len(args) - 1, 2)] + ([args[-1]] if len(args) % 2 else [])
    if len(args) % 2:
        conds.append(_ones(n))
    return _select(conds, _unify(kind, vals), n)


def _in(x: _Val, *items: _Val) -> _Val:
    out = _compare("=", x, items[0])
    for v in items[1:]:
        out = _or(out, _compare("=", x, v))
    return out


def _concat(*xs: _Val) -> _Val:
    strs = [_as_str(x) for x in xs]
    valid = np.logical_and.reduce([s.valid for s in strs])
    return _Val("str", pc.binary_join_element_wise(*[s.data for s in strs], pa.scalar("", pa.large_string())), valid)


def _length(x: _Val) -> _Val:
    s = _as_str(x)
    return _val("int", pc.fill_null(pc.utf8_length(s.data), 0).to_numpy(zero_copy_only=False).astype(np.int64),
                s.valid)


_CALLS = {
    "abs": _abs,
    "isnull": lambda x: _bool(~x.valid, _ones(len(x.valid))),
    "isnotnull": lambda x: _bool(x.valid, _ones(len(x.valid))),
    "in": _in,
    "between": lambda x, lo, hi: _and(_compare(">=", x, lo), _compare("<=", x, hi)),
    "like": lambda x, p: _rowwise(scalar._like, "bool", x, p),
    "lower": lambda x: _case_text(str.lower, x),
    "upper": lambda x: _case_text(str.upper, x),
    "length": _length,
    "concat": _concat,
    "substring": lambda *xs: _rowwise(scalar._substring, "str", *xs),
    "substr": lambda *xs: _rowwise(scalar._substring, "str", *xs),
}
assert set(_CALLS) | {"coalesce", "case", "cast"} == set(ENGINE_FUNCTIONS)


def _compile_call(e: Call, any_vars: frozenset[str], reads: set) -> _Node | None:
    if e.name not in ENGINE_FUNCTIONS or (e.name == "cast" and (e.type or "").upper() not in ENGINE_CASTS):
        return None
    args = [_compile(a, any_vars, reads) for a in e.args]
    if any(a is None for a in args) or not args:
        return None
    if e.name in ("coalesce", "case"):
        fn = functools.partial(_coalesce if e.name == "coalesce" else _case, kind_of(e))
    elif e.name == "cast":
        fn = functools.partial(_cast, e.type)
    else:
        fn = _CALLS[e.name]
    return lambda cols, n: fn(*[a(cols, n) for a in args])


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

    def _run(self, columns: Columns, n: int) -> _Val | list:
        try:
            return self._fn(columns, n)
        except _Mixed:  # per binding, as scalar.py (a coalesce/CASE of columns of different kinds)
            f = scalar.compile_expr(self.expr)
            cols = {key: _pylist(_column(columns[key], n)) for key in self.reads if key in columns}
            rows = [{} for _ in range(n)]
            for (var, attr), values in cols.items():
                for row, value in zip(rows, values, strict=True):
                    row.setdefault(var, {})[attr] = value
            return [f(row) for row in rows]

    def __call__(self, columns: Columns, n: int | None = None) -> np.ndarray:
        """Where the condition holds (``expr.holds``): a numpy bool array of the columns' length."""
        v = self._run(columns, self._length(columns, n))
        if isinstance(v, list):
            return np.array([x is True for x in v], dtype=bool)
        if v.kind != "bool":
            return np.zeros(len(v.valid), dtype=bool)  # only True holds, and True is a bool
        return v.valid & v.data

    def values(self, columns: Columns, n: int | None = None) -> pa.Array:
        """The expression's values as a pyarrow array (null where NULL): int64, double, large_string, bool, or
        null.  Integers beyond int64 (Python ints after an overflow) raise ``OverflowError``; values of
        several kinds (a coalesce of a number and a string column) raise ``pyarrow.ArrowInvalid``."""
        v = self._run(columns, self._length(columns, n))
        if isinstance(v, list):
            return pa.array(v)
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
