"""Thin Spark adapters around :mod:`sparkcep.runtime_udfs.match_engine`: they only move data in and out.

* :class:`MatchOperator` holds one compiled spec and the input schema; ``batch_function()`` is the function
  for ``df.groupBy(key).applyInPandas(fn, op.output_schema)`` and ``stream_function()`` the one for
  ``df.groupBy(key).applyInPandasWithState(fn, op.output_schema, op.state_schema, "append",
  GroupStateTimeout.EventTimeTimeout)`` on a stream with a watermark;
* :func:`batch_udf` and :func:`stream_udf` are shorthands for those two functions;
* :func:`output_schema` types the result columns, the same for both;
* :func:`apply_match` wires either one onto a DataFrame (batch, or streaming with a watermark);
* :func:`grouped` groups by the key (or by a constant column when there is none), :func:`watermarked` puts
  the event-time watermark on the ts column (a derived timestamp column for numeric ts).

Example (batch)::

    op = MatchOperator(SPEC, events.schema)
    matches = grouped(candidates, KEY).applyInPandas(op.batch_function(), op.output_schema)

Input rows carry the type column, the ts column, optionally ``_mask``, and attribute columns; columns that
are not in the input schema given (e.g. a derived event-time column for the watermark) are ignored.  The
engine sees the type as ``type`` and the timestamp as ``ts`` whatever the columns are called.  Columns of
Spark type ``TIMESTAMP`` (or ``TIMESTAMP_NTZ``), ts among them, are epoch milliseconds inside the engine (the
spec's window is then in ms), and timestamp result columns become timestamps again.  A numeric ts is
passed through; a streaming job then puts its watermark on a timestamp derived from it (1 ts unit ↔ 1 ms),
so that ``getCurrentWatermarkMs()`` reads in ts units.  PySpark hands ``TIMESTAMP`` values to pandas as naive
wall-clock times in the session time zone, so the adapters need that zone: pass ``timezone`` or let them read
``spark.sql.session.timeZone`` from the active session when the function is built (on the driver).  In the
hour a daylight-saving clock repeats, wall-clock times are ambiguous; the adapters, like PySpark, read them
as standard time.  A UTC session avoids the question.

Streaming: each call buffers the key's new rows, advances the engine to ``state.getCurrentWatermarkMs()``,
emits the completed matches, and either removes the state (nothing left) or stores it and sets an event-time
timeout for the watermark at which buffered events become processable or the live instances expire.  Rows
Spark still delivers behind the watermark the engine has already processed are counted as late by the engine
(``MatchState.late``) and never produce output.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import (
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

from sparkcep.compiler.ast import Attr, BinOp, EquivTest, Func, Literal, Unary
from sparkcep.compiler.errors import CEPError
from sparkcep.compiler.serde import from_data
from sparkcep.runtime_udfs import match_engine, trend_engine
from sparkcep.runtime_udfs.match_engine import EngineUnsupportedError
from sparkcep.runtime_udfs.spec import OVERFLOW, MatchSpec, TrendSpec

__all__ = ["EVENT_TIME", "SINGLE_GROUP", "STATE_SCHEMA", "MatchOperator", "apply_match", "batch_udf", "grouped",
           "load_spec", "output_schema", "stream_udf", "watermarked"]

#: The bitmask column of the Spark SQL filter (``sparkcep.compiler.plan.builder.MASK``).
MASK = "_mask"

#: The per-key state of :func:`stream_udf`: one binary column holding :meth:`MatchState.to_bytes`.
STATE_SCHEMA = StructType([StructField("engine_state", BinaryType(), False)])

_BOOLEAN_OPS = frozenset({"AND", "OR", "=", "!=", "<", "<=", ">", ">="})

#: A spec as :class:`MatchSpec`, its :func:`~sparkcep.compiler.serde.to_data` form, or that form as JSON.
SpecLike = str | dict | MatchSpec


def load_spec(spec: SpecLike) -> MatchSpec | TrendSpec:
    """The spec from its JSON text or data (:func:`sparkcep.compiler.serde.to_data` form)."""
    if isinstance(spec, str):
        spec = json.loads(spec)
    if isinstance(spec, dict):
        spec = from_data(spec)
    if isinstance(spec, TrendSpec):
        return spec
    if not isinstance(spec, MatchSpec):
        raise CEPError(f"expected a MatchSpec or TrendSpec, got {type(spec).__name__}")
    if spec.strategy in ("strict_contiguity", "partition_contiguity"):
        raise EngineUnsupportedError(
            f"{spec.strategy} needs every event of the stream (or partition) in order, with a sequence number; "
            "the engine supports it, the Spark filter does not feed it that way yet")
    return spec


# ----------------------------------------------------------------------------------------------- schema


def output_schema(spec: SpecLike, input_schema: StructType) -> StructType:
    """The Spark type of each result column, in ``spec.outputs`` order.

    Attribute references take the input column's type (``ts`` its timestamp or numeric type); ``count`` is
    LONG, ``avg`` DOUBLE, ``sum`` the input type (LONG for integral input, DOUBLE for non-numeric input),
    ``min``/``max`` the input type; arithmetic is LONG on integers (but ``/``) and DOUBLE otherwise;
    comparisons and logic are BOOLEAN.
    """
    spec = load_spec(spec)
    fields = {f.name: f.dataType for f in input_schema.fields}
    if isinstance(spec, TrendSpec):
        return _trend_schema(spec, fields)
    return StructType([StructField(o.name, _type_of(o.expr, fields), True) for o in spec.outputs])


#: Exact trend counts (and sums of integers) as DECIMAL(38, 0); larger values are null with this flag set.
EXACT = DecimalType(38, 0)
_EXACT_LIMIT = 10**38


def _trend_schema(spec: TrendSpec, fields: dict[str, DataType]) -> StructType:
    """``window_start, window_end, <group columns>, <aggregates>, aggregate_overflow``.

    Window bounds have the ts type (LONG for integral ts and windows, else DOUBLE).  COUNT and SUM of
    integers are exact (DECIMAL(38, 0); trend counts grow like 2^n, a value beyond 38 digits is null and
    flags ``aggregate_overflow``); SUM of other numbers and AVG are DOUBLE; MIN/MAX keep the input type.
    """
    ts = fields.get("ts")
    if isinstance(ts, (TimestampType, TimestampNTZType)):
        bound: DataType = ts
    elif isinstance(ts, IntegralType) and float(spec.window).is_integer() and float(spec.slide).is_integer():
        bound = LongType()
    else:
        bound = DoubleType()
    cols = [StructField("window_start", bound), StructField("window_end", bound)]
    for g in spec.group_by:
        if g not in fields:
            raise CEPError(f"'{g}' is not a column of the input")
        cols.append(StructField(g, fields[g]))
    for a in spec.aggregates:
        arg = fields.get(a.attr) if a.attr else None
        if a.attr and arg is None:
            raise CEPError(f"'{a.attr}' is not a column of the input")
        if a.func == "count" or (a.func == "sum" and isinstance(arg, IntegralType)):
            dtype: DataType = EXACT
        elif a.func in ("min", "max"):
            dtype = arg
        else:
            dtype = DoubleType()
        cols.append(StructField(a.name, dtype))
    cols.append(StructField(OVERFLOW, BooleanType()))
    return StructType(cols)


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
    raise CEPError(f"cannot type {type(e).__name__} as a result column")


# ----------------------------------------------------------------------------------------------- conversions


def _session_timezone() -> str:
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    return session.conf.get("spark.sql.session.timeZone") if session is not None else "UTC"


def _epoch_ms(s: pd.Series, timezone: str | None) -> list:
    """Epoch milliseconds of a datetime series (ints when every value is a whole ms), None for NaT.

    ``timezone`` is the zone naive values are in (None: they are UTC, as TIMESTAMP_NTZ values are read).
    """
    if s.dt.tz is None and timezone is not None:
        s = s.dt.tz_localize(timezone, ambiguous=False, nonexistent="shift_forward")
    if s.dt.tz is not None:
        s = s.dt.tz_convert("UTC").dt.tz_localize(None)
    missing = s.isna().to_numpy()
    us = s.to_numpy(dtype="datetime64[us]").view("int64")
    values = (us // 1000).tolist() if (us % 1000 == 0).all() else (us / 1000).tolist()
    if missing.any():
        values = [None if m else v for v, m in zip(values, missing, strict=True)]
    return values


def _from_ms(values: list, aware: bool) -> pd.Series:
    """Timestamps from epoch-ms numbers or None (tz-aware UTC, or naive UTC for TIMESTAMP_NTZ)."""
    us = np.round(np.array(list(values), dtype="float64") * 1000)  # None → NaN → NaT
    stamps = pd.to_datetime(us, unit="us", utc=True)
    return pd.Series(stamps if aware else stamps.tz_localize(None))


# ----------------------------------------------------------------------------------------------- adapters


def _exact_row(row: dict, exact: list[str]) -> dict:
    """Exact integers as Decimals for DECIMAL(38, 0); a value with more digits is null and flags the row."""
    out, overflow = dict(row), False
    for name in exact:
        v = out.get(name)
        if v is None:
            continue
        if abs(v) >= _EXACT_LIMIT:
            out[name], overflow = None, True
        else:
            out[name] = Decimal(v)
    out[OVERFLOW] = overflow
    return out


def engine_of(spec: MatchSpec | TrendSpec):
    """The engine module that runs ``spec``: the SASE match engine or the GRETA trend engine."""
    return trend_engine if isinstance(spec, TrendSpec) else match_engine


class MatchOperator:
    """The engine of one spec (match or trend) and input schema, as Spark pandas functions.

    ``ts_col``/``type_col`` name the input's timestamp and type columns; ``timezone`` is the session time
    zone PySpark converts ``TIMESTAMP`` values to (default: read from the active session when built).
    """

    def __init__(self, spec: SpecLike, input_schema: StructType, *, ts_col: str = "ts",
                 type_col: str = "type", timezone: str | None = None):
        self.spec = load_spec(spec)
        self.engine = engine_of(self.spec)
        self.engine.check(self.spec)
        if isinstance(self.spec, TrendSpec) and set(self.spec.key) != set(self.spec.group_by):
            raise EngineUnsupportedError(
                f"this trend query partitions by ({', '.join(self.spec.key)}) but groups by "
                f"({', '.join(self.spec.group_by)}): merging per-partition aggregates into coarser groups is not "
                "built yet; GROUP BY exactly the equivalence attributes, or see the next release")
        if ts_col not in input_schema.names:
            raise CEPError(f"the input has no ts column {ts_col!r}")
        self.output_schema = output_schema(self.spec, input_schema)
        self.state_schema = STATE_SCHEMA
        ts_type = input_schema[ts_col].dataType
        self.numeric_ts = isinstance(ts_type, NumericType)
        self.ts_col, self.type_col = ts_col, type_col
        self._columns = frozenset(input_schema.names) | {MASK}
        # timestamp columns are epoch ms inside the engine; the zone their naive pandas values are in
        self._zones: dict[str, str | None] = {}
        for f in input_schema.fields:
            if isinstance(f.dataType, TimestampType):
                timezone = timezone or _session_timezone()
                self._zones[f.name] = timezone
            elif isinstance(f.dataType, TimestampNTZType):
                self._zones[f.name] = None
        self._time_outputs = {
            f.name: isinstance(f.dataType, TimestampType)
            for f in self.output_schema.fields
            if isinstance(f.dataType, (TimestampType, TimestampNTZType))
        }
        self._exact = [f.name for f in self.output_schema.fields if f.dataType == EXACT]
        self._trend = isinstance(self.spec, TrendSpec)
        self._state_class = trend_engine.TrendState if self._trend else match_engine.MatchState

    def events(self, pdf: pd.DataFrame) -> list[dict]:
        """Engine events from a pandas batch: one dict per row, timestamps as epoch ms."""
        if pdf.empty:  # PySpark may hand over empty chunks with untyped (object) columns
            return []
        names, data = [], []
        for c in pdf.columns:
            if c not in self._columns:
                continue
            if c in self._zones:
                values = _epoch_ms(pdf[c], self._zones[c])
            else:
                values = pdf[c].tolist()
            names.append(c)
            data.append(values)
            if c == self.ts_col and c != "ts":
                names.append("ts")
                data.append(values)
            elif c == self.type_col and c != "type":
                names.append("type")
                data.append(values)
        return [dict(zip(names, row, strict=True)) for row in zip(*data, strict=True)]

    def frame(self, rows: list[dict]) -> pd.DataFrame:
        """Result rows as a pandas batch in ``output_schema`` order, epoch ms as timestamps again."""
        names = self.output_schema.names
        if self._trend:
            rows = [_exact_row(r, self._exact) for r in rows]
        # an empty list would become float64, which PySpark cannot turn into e.g. an empty string column
        data: dict[str, Any] = {name: [r[name] for r in rows] if rows else pd.Series([], dtype=object)
                                for name in names}
        for name, aware in self._time_outputs.items():
            data[name] = _from_ms(data[name], aware)
        return pd.DataFrame(data, columns=names)

    def batch_function(self) -> Callable[[pd.DataFrame], pd.DataFrame]:
        """``fn(pdf) -> pdf`` for ``groupBy(key).applyInPandas``: all events of one key in, all its matches
        out (the engine is flushed with an infinite watermark)."""
        spec = self.spec

        def match_batch(pdf: pd.DataFrame) -> pd.DataFrame:
            engine = self.engine
            state, _ = engine.step(spec, engine.init_state(), self.events(pdf))
            _, rows = engine.advance(spec, state, math.inf)
            return self.frame(rows)

        return match_batch

    def stream_function(self) -> Callable[[Any, Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]:
        """``fn(key, pdfs, state)`` for ``groupBy(key).applyInPandasWithState`` with event-time timeouts.

        Buffers the key's new rows, advances the engine to the current watermark, emits the completed
        matches, then drops the state if nothing is left, or stores it with a timeout for the watermark at
        which buffered events become processable or the live instances leave the window.  Rows behind the
        watermark the engine already processed are counted as late in the state (``MatchState.late``).
        """
        spec = self.spec

        offset = EVENT_TIME_OFFSET if self.numeric_ts else 0

        def match_stream(key: Any, pdfs: Iterator[pd.DataFrame], group: GroupState) -> Iterator[pd.DataFrame]:
            engine = self.engine
            state = self._state_class.from_bytes(group.get[0]) if group.exists else engine.init_state()
            for pdf in pdfs:
                engine.step(spec, state, self.events(pdf))
            raw = group.getCurrentWatermarkMs()  # Spark requires a watermark for event-time timeouts
            watermark = raw - offset  # in ts units (ms for timestamp ts)
            state, rows = engine.advance(spec, state, watermark)
            if engine.is_empty(state):
                group.remove()
            else:
                group.update((state.to_bytes(),))
                due = engine.wakeup(spec, state)
                if due is not None and math.isfinite(due):
                    # a timeout fires once the watermark is past it: this one fires when it reaches `due`
                    group.setTimeoutTimestamp(max(math.ceil(due + offset) - 1, raw, 1))
            if rows:
                yield self.frame(rows)

        return match_stream


def batch_udf(spec_json: SpecLike, input_schema: StructType, **options: Any) -> Callable[[pd.DataFrame],
                                                                                          pd.DataFrame]:
    """``MatchOperator(spec_json, input_schema, **options).batch_function()``."""
    return MatchOperator(spec_json, input_schema, **options).batch_function()


def stream_udf(spec_json: SpecLike, input_schema: StructType, **options: Any) -> Callable[
        [Any, Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]:
    """``MatchOperator(spec_json, input_schema, **options).stream_function()``."""
    return MatchOperator(spec_json, input_schema, **options).stream_function()


#: With numeric ts, the event-time column the watermark runs on: 1 ts unit ↔ 1 ms, so that Spark's watermark
#: (``getCurrentWatermarkMs``) reads directly in ts units, shifted by :data:`EVENT_TIME_OFFSET`.
EVENT_TIME = "_event_time"
#: Numeric ts ``t`` is event time ``t + EVENT_TIME_OFFSET`` ms: Spark's watermark starts at 0 and drops rows
#: at or before it as late, which would lose every event with ``ts <= 0`` (ts counted from 0 is common).
EVENT_TIME_OFFSET = 10**12


def watermarked(df: DataFrame, ts_col: str, lateness: float) -> DataFrame:
    """``df`` with an event-time watermark on ``ts_col`` allowing ``lateness`` (ts units; milliseconds for
    timestamp ts).  A watermark needs a timestamp column: numeric ts get :data:`EVENT_TIME`."""
    event_time = ts_col
    if isinstance(df.schema[ts_col].dataType, NumericType):
        df = df.withColumn(EVENT_TIME, F.timestamp_micros(((F.col(ts_col) + EVENT_TIME_OFFSET) * 1000).cast("bigint")))
        event_time = EVENT_TIME
    return df.withWatermark(event_time, f"{math.ceil(lateness)} milliseconds")


#: The constant grouping column of a query without partition key (one group: parallelism 1).
SINGLE_GROUP = "_sparkcep_all"


def grouped(df: DataFrame, key) -> Any:
    """``df.groupBy(*key)``; without a key, one group by a constant column (``applyInPandasWithState``
    accepts neither an empty grouping nor a grouping expression)."""
    if key:
        return df.groupBy(*key)
    return df.withColumn(SINGLE_GROUP, F.lit(0)).groupBy(SINGLE_GROUP)


def apply_match(df: DataFrame, spec: SpecLike, **options: Any) -> DataFrame:
    """The matches of ``df`` grouped by ``spec.key``: ``applyInPandas`` for a batch DataFrame,
    ``applyInPandasWithState`` (append mode, event-time timeouts) for a streaming one, which must carry a
    watermark.  ``options`` go to :class:`MatchOperator`.  A spec without key runs as one group.
    """
    op = MatchOperator(spec, df.schema, **options)
    groups = grouped(df, op.spec.key)
    if not df.isStreaming:
        return groups.applyInPandas(op.batch_function(), op.output_schema)
    return groups.applyInPandasWithState(op.stream_function(), op.output_schema, op.state_schema, "append",
                                         GroupStateTimeout.EventTimeTimeout)
