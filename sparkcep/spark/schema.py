"""Column names, state schema, engine specs and the Spark schemas of the engines' outputs."""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    IntegralType,
    LongType,
    NumericType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from sparkcep.ir.ast import Attr, BinOp, Call, EquivTest, Func, Literal, Unary
from sparkcep.ir.errors import CEPError
from sparkcep.ir.serde import from_data
from sparkcep.ir.sharing import SharedSpec
from sparkcep.ir.spec import OVERFLOW, TIMEOUT_STEP, MatchSpec, TimeoutSpec, TrendSpec
from sparkcep.runtime_udfs.event_time import EVENT_TIME_OFFSET

__all__ = ["BUCKET", "EVENT_TIME", "EVENT_TIME_OFFSET", "SINGLE_GROUP", "STATE_SCHEMA", "load_spec", "output_schema"]

#: The bitmask column of the Spark SQL filter (``sparkcep.compiler.plan.builder.MASK``).
MASK = "_mask"

#: The input-order column of a contiguity strategy's filter (``sparkcep.compiler.codegen.sql.ARRIVAL``).
ARRIVAL = "_arrival"

#: The per-key state of :func:`stream_udf`: one binary column holding :meth:`MatchState.to_bytes`.
STATE_SCHEMA = StructType([StructField("engine_state", BinaryType(), False)])

_BOOLEAN_OPS = frozenset({"AND", "OR", "=", "!=", "<", "<=", ">", ">="})

#: A spec as :class:`MatchSpec`, its :func:`~sparkcep.ir.serde.to_data` form, or that form as JSON; or a
#: :class:`TrendSpec` or :class:`~sparkcep.ir.sharing.SharedSpec` (a sharing context).
SpecLike = str | dict | MatchSpec | TrendSpec | SharedSpec

#: A spec an engine runs: SASE match, GRETA trend aggregation or Sharon shared aggregation.
EngineSpec = MatchSpec | TrendSpec | SharedSpec


def load_spec(spec: SpecLike) -> EngineSpec:
    """The spec from its JSON text or data (:func:`sparkcep.ir.serde.to_data` form); a
    :class:`SharedSpec` is taken as it is."""
    if isinstance(spec, str):
        spec = json.loads(spec)
    if isinstance(spec, dict):
        spec = from_data(spec)
    if isinstance(spec, (TrendSpec, SharedSpec)):
        return spec
    if not isinstance(spec, MatchSpec):
        raise CEPError(f"expected a MatchSpec or TrendSpec, got {type(spec).__name__}")
    return spec


def load_weighted(text: str | list) -> list[tuple[EngineSpec, float]]:
    """``[(spec, weight), ...]`` from their JSON text (a generated workload job's ``SHEDDING_SPECS``: a list of
    ``[spec data, weight]`` pairs) or that list."""
    data = json.loads(text) if isinstance(text, str) else text
    return [(load_spec(spec), float(weight)) for spec, weight in data]


# ----------------------------------------------------------------------------------------------- schema


def output_schema(spec: SpecLike, input_schema: StructType, *, ts_col: str = "ts",
                  type_col: str = "type") -> StructType:
    """The Spark type of each result column, in ``spec.outputs`` order (a trend query:
    :func:`_trend_schema`; a sharing context: :func:`_shared_schema`).

    Attribute references take the input column's type (``ts`` its timestamp or numeric type); ``count`` is
    LONG, ``avg`` DOUBLE, ``sum`` the input type (LONG for integral input, DOUBLE for non-numeric input),
    ``min``/``max`` the input type; arithmetic is LONG on integers (but ``/``) and DOUBLE otherwise;
    comparisons and logic are BOOLEAN.
    """
    spec = load_spec(spec)
    fields = {f.name: f.dataType for f in input_schema.fields}
    if isinstance(spec, TrendSpec):
        return _trend_schema(spec, fields, ts_col)
    if isinstance(spec, SharedSpec):
        return _shared_schema(spec, fields, ts_col, type_col)
    out = [StructField(o.name, _type_of(o.expr, fields), True) for o in spec.outputs]
    if isinstance(spec, TimeoutSpec):  # a timed-out partial match: which step it reached last
        out.append(StructField(TIMEOUT_STEP, StringType(), True))
    return StructType(out)

#: Exact trend counts (and sums of integers) as DECIMAL(38, 0); larger values are null with this flag set.
EXACT = DecimalType(38, 0)

_EXACT_LIMIT = 10**38


def aggregate_type(func: str, arg: DataType | None) -> DataType:
    """The Spark type of a trend aggregate's column (single trend queries and sharing contexts alike), for
    ``func`` of an attribute of type ``arg`` (None: ``COUNT(*)``/``COUNT(E)``).

    COUNT and SUM of integers are exact (DECIMAL(38, 0); trend counts grow like 2^n, a value beyond 38 digits
    is null and flags ``aggregate_overflow``); SUM of other numbers and AVG are DOUBLE; MIN/MAX keep the input
    type."""
    func = func.lower()
    if func == "count" or (func == "sum" and isinstance(arg, IntegralType)):
        return EXACT
    if func in ("min", "max"):
        return arg
    return DoubleType()


def _window_bound(ts: DataType | None, window: float, slide: float) -> DataType:
    """The type of ``window_start``/``window_end``: the ts type (LONG for integral ts and windows, else DOUBLE)."""
    if isinstance(ts, (TimestampType, TimestampNTZType)):
        return ts
    if isinstance(ts, IntegralType) and float(window).is_integer() and float(slide).is_integer():
        return LongType()
    return DoubleType()


def _trend_schema(spec: TrendSpec, fields: dict[str, DataType], ts_col: str = "ts") -> StructType:
    """``window_start, window_end, <group columns>, <aggregates>, aggregate_overflow``, typed by
    :func:`_window_bound` and :func:`aggregate_type`."""
    bound = _window_bound(fields.get(ts_col), spec.window, spec.slide)
    cols = [StructField("window_start", bound), StructField("window_end", bound)]
    for g in spec.group_by:
        if g not in fields:
            raise CEPError(f"'{g}' is not a column of the input")
        cols.append(StructField(g, fields[g]))
    for a in spec.aggregates:
        arg = fields.get(a.attr) if a.attr else None
        if a.attr and arg is None:
            raise CEPError(f"'{a.attr}' is not a column of the input")
        cols.append(StructField(a.name, aggregate_type(a.func, arg)))
    cols.append(StructField(OVERFLOW, BooleanType()))
    return StructType(cols)


def _shared_schema(spec: SharedSpec, fields: dict[str, DataType], ts_col: str = "ts",
                   type_col: str = "type") -> StructType:
    """A sharing context's one output: ``query, window_start, window_end, <GROUP BY columns>, <aggregates>,
    aggregate_overflow``, one column per aggregate name of its queries (a query's row has its own aggregates,
    the others' null), typed as for a single trend query.  Two queries may share a name
    only with one type."""
    for c in (ts_col, type_col, *spec.key, *spec.group_by):
        if c not in fields:
            raise CEPError(f"the input has no column {c!r}")
    ts = fields[ts_col]
    if not isinstance(ts, (TimestampType, TimestampNTZType, NumericType)):
        raise CEPError(f"the ts column {ts_col!r} must be a timestamp or a number")
    bound = _window_bound(ts, spec.window, spec.slide)
    cols = [StructField("query", StringType()), StructField("window_start", bound),
            StructField("window_end", bound)]
    cols += [StructField(g, fields[g]) for g in spec.group_by]
    aggregates: dict[str, StructField] = {}
    for q in spec.queries:
        typed: list[tuple[str, DataType]] = [(q.output, aggregate_type("count", None))] if q.output is not None else []
        for a in q.aggregates:
            arg = fields.get(a.attr) if a.attr is not None else None
            if a.attr is not None and arg is None:
                raise CEPError(f"the input has no column {a.attr!r}")
            typed.append((a.name, aggregate_type(a.func, arg)))
        for name, dtype in typed:
            if name in aggregates and aggregates[name].dataType != dtype:
                raise CEPError(f"column {name!r} is {aggregates[name].dataType.simpleString()} in one query and "
                               f"{dtype.simpleString()} in {q.name}: give one of them another name (AS ...)")
            aggregates.setdefault(name, StructField(name, dtype))
    return StructType([*cols, *aggregates.values(), StructField(OVERFLOW, BooleanType())])


def _type_of(e: Any, fields: dict[str, DataType]) -> DataType:
    if isinstance(e, Literal):
        v = e.value
        if isinstance(v, bool):
            return BooleanType()
        if isinstance(v, int):
            return LongType()
        if isinstance(v, float):
            return DoubleType()
        return StringType()
    if isinstance(e, Attr):
        if e.attr not in fields:
            raise CEPError(f"'{e.attr}' is not a column of the input", e.span)
        return fields[e.attr]
    if isinstance(e, Unary):
        if e.op == "NOT":
            return BooleanType()
        inner = _type_of(e.operand, fields)
        return LongType() if isinstance(inner, IntegralType) else DoubleType()
    if isinstance(e, BinOp):
        if e.op in _BOOLEAN_OPS:
            return BooleanType()
        sides = (_type_of(e.left, fields), _type_of(e.right, fields))
        if e.op != "/" and all(isinstance(t, IntegralType) for t in sides):
            return LongType()
        return DoubleType()
    if isinstance(e, EquivTest):
        return BooleanType()
    if isinstance(e, Func):
        if e.name == "candidates":  # collapsed output: a Kleene variable's candidates (timestamps as epoch ms)
            types = [_type_of(a, fields) for a in e.args]
            return ArrayType(StructType([
                StructField(a.attr, LongType() if isinstance(t, (TimestampType, TimestampNTZType)) else t, True)
                for a, t in zip(e.args, types, strict=True)]))
        if e.name == "count":
            return LongType()
        if e.name == "avg" or len(e.args) != 1:
            return DoubleType()
        arg = _type_of(e.args[0], fields)
        if e.name == "sum":
            if isinstance(arg, IntegralType):
                return LongType()
            return arg if isinstance(arg, NumericType) else DoubleType()
        return arg
    if isinstance(e, Call):
        return _call_type(e, fields)
    raise CEPError(f"cannot type {type(e).__name__} as a result column")


_CAST_TYPES = {"BIGINT": LongType, "LONG": LongType, "INT": LongType, "INTEGER": LongType, "DOUBLE": DoubleType,
               "STRING": StringType, "BOOLEAN": BooleanType}


def _call_type(e: Call, fields: dict[str, DataType]) -> DataType:
    """The type of a scalar function the engines evaluate over several events (a one-event one is a hidden
    column, typed by Spark)."""
    if e.name in ("isnull", "in", "between", "like"):
        return BooleanType()
    if e.name in ("lower", "upper", "concat", "substring", "substr"):
        return StringType()
    if e.name == "length":
        return LongType()
    if e.name in ("cast", "coalesce", "case") and (e.type or "").upper() in _CAST_TYPES:  # coalesce: ir.kinds.typed
        return _CAST_TYPES[e.type.upper()]()
    values = list(e.args)
    if e.name == "case":
        values = [e.args[k] for k in range(1, len(e.args), 2)] + ([e.args[-1]] if len(e.args) % 2 else [])
    types = [_type_of(v, fields) for v in values if not (isinstance(v, Literal) and v.value is None)]
    if not types or e.name not in ("abs", "coalesce", "case"):
        raise CEPError(f"cannot type {e.name}() as a result column")
    if all(isinstance(t, IntegralType) for t in types):
        return LongType()
    if all(isinstance(t, NumericType) for t in types):
        return DoubleType()
    return types[0]

#: With numeric ts, the event-time column the watermark runs on: ``ts × unit + EVENT_TIME_OFFSET`` ms (one ts unit
#: is 1 ms unless the query declares ``ts_unit``; :mod:`sparkcep.runtime_udfs.event_time`, which defines
#: ``EVENT_TIME_OFFSET``).
EVENT_TIME = "_event_time"

#: The key of Spark's watermark marker (the metadata of a ``withWatermark`` column) holding the delay in ms.
WATERMARK_DELAY = "spark.watermarkDelayMs"


def watermark_delay(schema: StructType) -> int | None:
    """The watermark delay (ms) on ``schema``'s :data:`EVENT_TIME` column (Spark's marker), or None."""
    if EVENT_TIME not in schema.names:
        return None
    delay = schema[EVENT_TIME].metadata.get(WATERMARK_DELAY)
    return None if delay is None else int(delay)

#: The constant grouping column of a query without partition key (one group: parallelism 1).
SINGLE_GROUP = "_sparkcep_all"

#: The grouping column of a bucketed operator: ``pmod(hash(key), buckets)``.
BUCKET = "_sparkcep_bucket"

#: About how many rows of a partition :meth:`MatchOperator.run_table` turns into engine events (dicts) at a time
#: (whole keys): the Arrow table of the partition is compact, its rows as Python dicts are not.
CONVERT_ROWS = 1 << 16
