"""Thin Spark adapters around the engines (:mod:`~sparkcep.runtime_udfs.match_engine`,
:mod:`~sparkcep.runtime_udfs.trend_engine`, :mod:`~sparkcep.runtime_udfs.shared_engine`; :func:`engine_of`
picks one by the spec's class): they only move data in and out.

* :class:`MatchOperator` holds one compiled spec and the input schema; ``partition_function()`` is the function
  for ``mapInArrow`` over a batch repartitioned by key (:meth:`MatchOperator.run_table` per partition) and
  ``stream_function()`` the one for ``df.groupBy(key).applyInPandasWithState(fn, op.output_schema,
  op.state_schema, "append", GroupStateTimeout.EventTimeTimeout)`` on a stream with a watermark;
* :func:`stream_udf` is a shorthand for the latter;
* :func:`output_schema` types the result columns, the same for both;
* :func:`batch_matches` is *the* batch path (``CompiledQuery.apply``, :func:`apply_match` and the generated job
  call it; a workload's operator, :func:`sparkcep.runtime_udfs.workload_spark.apply_workload`, runs the same
  :func:`batch_input` and ``run_table`` per operator): the candidates repartitioned by key, one ``mapInArrow``
  call per partition (:meth:`MatchOperator.partition_function`), where the keys are split vectorially and, for
  skip_till_any_match specs, rows no match can use are dropped before they become engine events
  (:func:`prefilter_of`);
* :func:`apply_match` wires :func:`batch_matches` or the streaming function onto a DataFrame (batch, or
  streaming with a watermark);
* :func:`grouped` groups by the key (or by a constant column when there is none), :func:`watermarked` puts
  the event-time watermark on the source's events (a timestamp copy of ts, before the query's filter, so
  that every event moves event time) and :func:`with_event_time` gives the filtered candidates its column
  back for the stateful operator;
* :meth:`MatchOperator.grouped` groups for the operator: by the key; by the GROUP BY columns for a trend
  query partitioned finer than it groups (GRETA Q1, Sharon q1); by ``pmod(hash(...), buckets)`` with
  ``buckets``.  In the last two cases a Spark group holds several partitions: the operator runs one engine
  state per key value inside it and merges the trend rows of a window (:func:`trend_engine.merge_rows`).

Example (batch)::

    matches = batch_matches(candidates, SPEC)

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

import functools
import itertools
import json
import math
import pickle
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
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

from sparkcep.compiler.ast import Attr, BinOp, EquivItem, EquivTest, Func, Literal, Unary, walk
from sparkcep.compiler.errors import CEPError
from sparkcep.compiler.serde import from_data
from sparkcep.runtime_udfs import late, match_budget, match_columnar, match_engine, shared_engine, trend_engine
from sparkcep.runtime_udfs.event_time import EVENT_TIME_OFFSET, EventTimeScale
from sparkcep.runtime_udfs.match_prefilter import prefilter
from sparkcep.runtime_udfs.shared_engine import SharedSpec
from sparkcep.runtime_udfs.spec import OVERFLOW, MatchSpec, TrendSpec

__all__ = ["BUCKET", "EVENT_TIME", "MAX_MATCHES_CONF", "SINGLE_GROUP", "STATE_SCHEMA", "MatchOperator", "apply_match",
           "batch_input", "batch_matches", "grouped", "load_spec", "output_schema", "split_by", "stream_udf",
           "watermarked", "with_event_time"]

#: The bitmask column of the Spark SQL filter (``sparkcep.compiler.plan.builder.MASK``).
MASK = "_mask"
#: The input-order column of a contiguity strategy's filter (``sparkcep.compiler.codegen.sql.ARRIVAL``).
ARRIVAL = "_arrival"
#: The strategies whose engine ranks ties in ts by input order (``sparkcep.compiler.codegen.sql.CONTIGUITY``).
CONTIGUITY = ("strict_contiguity", "partition_contiguity")

#: The per-key state of :func:`stream_udf`: one binary column holding :meth:`MatchState.to_bytes`.
STATE_SCHEMA = StructType([StructField("engine_state", BinaryType(), False)])

_BOOLEAN_OPS = frozenset({"AND", "OR", "=", "!=", "<", "<=", ">", ">="})

#: A spec as :class:`MatchSpec`, its :func:`~sparkcep.compiler.serde.to_data` form, or that form as JSON; or a
#: :class:`TrendSpec` or :class:`~sparkcep.runtime_udfs.shared_engine.SharedSpec` (a sharing context).
SpecLike = str | dict | MatchSpec | TrendSpec | SharedSpec
#: A spec an engine runs: SASE match, GRETA trend aggregation or Sharon shared aggregation.
EngineSpec = MatchSpec | TrendSpec | SharedSpec


def load_spec(spec: SpecLike) -> EngineSpec:
    """The spec from its JSON text or data (:func:`sparkcep.compiler.serde.to_data` form); a
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
    return StructType([StructField(o.name, _type_of(o.expr, fields), True) for o in spec.outputs])


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
    raise CEPError(f"cannot type {type(e).__name__} as a result column")


# ----------------------------------------------------------------------------------------------- conversions


#: The Spark conf a match budget can be given by (read on the driver when an operator is built).
MAX_MATCHES_CONF = "spark.sparkcep.maxMatches"


def _conf_max_matches() -> int | None:
    """:data:`MAX_MATCHES_CONF` of the active session, or None (not set, or no session)."""
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    text = session.conf.get(MAX_MATCHES_CONF, None) if session is not None else None
    if text is None or not str(text).strip():
        return None
    try:
        return int(str(text).strip().replace("_", ""))
    except ValueError:
        raise CEPError(f"{MAX_MATCHES_CONF} must be a whole number (0: no limit), got {text!r}") from None


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


def _arrow_epoch_ms(col: pa.ChunkedArray | pa.Array) -> list:
    """Epoch milliseconds of an Arrow timestamp column (ints when every value is a whole ms), None for null.

    Arrow holds the instant itself (UTC), with or without a zone: no wall-clock reading is involved, so unlike
    :func:`_epoch_ms` there is no ambiguous hour."""
    ms = match_columnar.epoch_ms(col)  # int64 when every value is a whole ms, else float64
    if not ms.null_count:
        return ms.to_numpy().tolist()
    values = pc.fill_null(ms, 0).to_numpy().tolist()
    valid = pc.is_valid(ms).to_numpy(zero_copy_only=False)
    return [v if ok else None for v, ok in zip(values, valid, strict=True)]


def split_by(keys: Iterable, events: list[dict]) -> dict[Any, list[dict]]:
    """``events`` grouped by their ``keys`` (one key per event), each group in input order."""
    parts: dict[Any, list[dict]] = {}
    for k, ev in zip(keys, events, strict=True):
        part = parts.get(k)
        if part is None:
            parts[k] = [ev]
        else:
            part.append(ev)
    return parts


def gathered(batches: Iterator[pa.RecordBatch]) -> pa.Table | None:
    """A ``mapInArrow`` partition's non-empty record batches as one table (a key's rows may span batches), or
    None for an empty partition."""
    batches = [b for b in batches if b.num_rows]
    return pa.Table.from_batches(batches) if batches else None


def by_id(table: pa.Table, ids: np.ndarray) -> tuple[pa.Table, list[int]]:
    """``(table, bounds)``: the rows of ``table`` stably sorted by their ``ids`` (rows of one id together, in
    input order), and where each id's rows start (``bounds[k]:bounds[k + 1]``, ending with the row count)."""
    n = table.num_rows
    if n < 2 or not (ids != ids[0]).any():
        return table, [0, n]
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    return table.take(order), [0, *(np.flatnonzero(ids[1:] != ids[:-1]) + 1).tolist(), n]


def _arrow_array(values: list, dtype: pa.DataType) -> pa.Array:
    """An Arrow array of ``dtype`` from Python values, NaN as null (as PySpark converts a pandas result)."""
    try:
        return pa.array(values, type=dtype, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # e.g. whole floats for a LONG column: cast as PySpark does
        return pa.array(values, from_pandas=True).cast(dtype, safe=False)


def _arrow_times(values: list, dtype: pa.DataType) -> pa.Array:
    """Arrow timestamps (``dtype``) from epoch-ms numbers or None (NaN: null), rounded to microseconds."""
    us = [None if v is None or v != v else round(v * 1000) for v in values]
    return pa.array(us, type=pa.int64()).cast(dtype)


def _from_ms(values: list, aware: bool) -> pd.Series:
    """Timestamps from epoch-ms numbers or None (tz-aware UTC, or naive UTC for TIMESTAMP_NTZ)."""
    us = np.round(np.array(list(values), dtype="float64") * 1000)  # None → NaN → NaT
    stamps = pd.to_datetime(us, unit="us", utc=True)
    return pd.Series(stamps if aware else stamps.tz_localize(None))


# ----------------------------------------------------------------------------------------------- adapters


@functools.lru_cache(maxsize=64)
def _rows_of(names: tuple[str, ...]) -> Callable[[list[list]], list[dict]]:
    """``fn(columns) -> rows``: dicts from column lists, as a comprehension over a dict display generated for
    ``names`` (several times faster per row than ``dict(zip(names, row))``)."""
    args = [f"c{i}" for i in range(len(names))]
    body = ", ".join(f"{name!r}: {a}" for name, a in zip(names, args, strict=True))
    source = f"lambda columns: [{{{body}}} for {', '.join(args)}, in zip(*columns, strict=True)]"
    return eval(source)  # noqa: S307 - the source is built from repr() of column names only


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


def engine_of(spec: EngineSpec):
    """The engine module that runs ``spec``: the SASE match engine, the GRETA trend engine or the Sharon shared
    engine.  Each has ``check(spec)``, ``init_state()`` (a :class:`~sparkcep.runtime_udfs.spec.SlotState`),
    ``step``, ``advance``, ``is_empty``, ``wakeup``; the two aggregating ones ``merge_rows`` too."""
    if isinstance(spec, SharedSpec):
        return shared_engine
    return trend_engine if isinstance(spec, TrendSpec) else match_engine


class MatchOperator:
    """The engine of one spec and input schema, as Spark pandas functions: a match query (SASE), a trend query
    (GRETA) or a sharing context (Sharon's shared engine, several trend queries in one output with a ``query``
    column); :func:`engine_of` picks the engine, everything else is the same.

    ``ts_col``/``type_col`` name the input's timestamp and type columns; ``timezone`` is the session time
    zone PySpark converts ``TIMESTAMP`` values to (default: read from the active session when built).
    ``buckets``: Spark groups by ``pmod(hash(group_cols), buckets)`` (:meth:`grouped`), the operator keeps one
    engine state per key inside a group (:attr:`nested`; the streaming state column then holds
    ``(NESTED_STATE_VERSION, frontier, {key: (wakeup, engine state)}, held rows)``, so a checkpoint of one
    layout does not resume with the other).
    ``max_matches``: the match budget of a match query (:mod:`~sparkcep.runtime_udfs.match_budget`): the
    matches one Spark partition of a batch, or one group in one micro-batch, may produce, and the partial
    matches it may hold; None: the Spark conf :data:`MAX_MATCHES_CONF` of the active session if set (a
    generated job: ``spark-submit --conf spark.sparkcep.maxMatches=N``), else
    :func:`~sparkcep.runtime_udfs.match_budget.default_max_matches`, sized on the executor to its memory; 0:
    no limit.  Beyond it the task fails with
    :class:`~sparkcep.runtime_udfs.match_budget.MatchBudgetError`
    (:func:`~sparkcep.runtime_udfs.match_budget.raised_message` finds its message in the error the driver gets).
    """

    def __init__(self, spec: SpecLike, input_schema: StructType, *, ts_col: str = "ts",
                 type_col: str = "type", timezone: str | None = None, buckets: int | None = None,
                 late_rows: bool = False, max_matches: int | None = None, ts_unit: str | None = None):
        self.spec = load_spec(spec)
        self.engine = engine_of(self.spec)
        self.engine.check(self.spec)
        key = tuple(self.spec.key)
        #: trend rows (a trend query or a sharing context): exact aggregates, windows, GROUP BY columns
        self._aggregating = isinstance(self.spec, (TrendSpec, SharedSpec))
        # a trend query partitioned finer than its groups (GRETA Q1): a Spark group is a GROUP BY group,
        # holding one engine state per partition, whose rows of a window are merged (merge_rows)
        self._merge = self._aggregating and set(key) != set(self.spec.group_by)
        #: the columns Spark groups by (hashed into ``buckets`` groups when given): GROUP BY when merging, else key
        self.group_cols: tuple[str, ...] = tuple(self.spec.group_by) if self._merge else key
        if buckets is not None and buckets < 1:
            raise CEPError(f"buckets must be a positive number, got {buckets}")
        self.buckets = buckets if buckets and self.group_cols else None
        #: one engine state per key inside each Spark group (a dict in the group's state), or one per group
        self.nested = self._merge or self.buckets is not None
        if ts_col not in input_schema.names:
            raise CEPError(f"the input has no ts column {ts_col!r}")
        self.output_schema = output_schema(self.spec, input_schema, ts_col=ts_col, type_col=type_col)
        self.state_schema = STATE_SCHEMA
        ts_type = input_schema[ts_col].dataType
        self.numeric_ts = isinstance(ts_type, NumericType)
        #: numeric ts: how its event-time column is scaled (ts_unit); timestamps are ms in the engine already
        self._scale = EventTimeScale.of(ts_unit if self.numeric_ts else "ms")
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
        self._timezone = timezone or next((z for z in self._zones.values() if z is not None), None) or "UTC"
        self._empty: pd.DataFrame | None = None  # the result frame of a group without output, built once
        self._arrow_schema: pa.Schema | None = None  # output_schema as Arrow (applyInArrow), built on first use
        self._exact = [f.name for f in self.output_schema.fields if f.dataType == EXACT]
        self._state_class = type(self.engine.init_state())
        # a sharing context's row has the aggregates of its own query only (the other columns are null)
        self._sparse = isinstance(self.spec, SharedSpec)
        # float columns whose NaN (Spark's null in pandas) the engine gets as None: the key (one partition for
        # null, as Spark's) and a sharing context's measured attributes
        measured = ({a.attr for q in self.spec.queries for a in q.aggregates if a.attr is not None}
                    if self._sparse else set())
        self._none_cols = frozenset(key) | measured
        #: route late events to the output (see :mod:`sparkcep.runtime_udfs.late`) instead of only counting them
        self.late_rows = late_rows
        #: what :meth:`stream_function` returns: ``output_schema``, plus the late side channel with ``late_rows``
        self.stream_schema = late.with_side_columns(self.output_schema) if late_rows else self.output_schema
        if max_matches is None and isinstance(self.spec, MatchSpec):
            max_matches = _conf_max_matches()
        if max_matches is not None and max_matches < 0:
            raise CEPError(f"max_matches must be 0 (no limit) or a positive number, got {max_matches}")
        #: the match budget as given (None: sized on the executor, :meth:`budget`)
        self.max_matches = max_matches

    def budget(self) -> match_budget.Budget | None:
        """A fresh match budget for one partition (None for trend and shared specs, which never enumerate):
        :attr:`max_matches`, else the default for this executor's memory, resolved once per operator."""
        if not isinstance(self.spec, MatchSpec):
            return None
        if not hasattr(self, "_limit"):
            self._limit = match_budget.resolve_max_matches(self.max_matches, len(self.output_schema.fields))
        return match_budget.Budget(self._limit)

    def _advance(self, state, watermark: float, budget: match_budget.Budget | None):
        """``engine.advance``, with the partition's match budget for the match engine."""
        if budget is None:
            return self.engine.advance(self.spec, state, watermark)
        return self.engine.advance(self.spec, state, watermark, budget)

    def grouped(self, df: DataFrame) -> Any:
        """``df`` grouped for this operator: by :attr:`group_cols` (a constant column when there are none), or
        by :data:`BUCKET`, ``pmod(hash(group_cols), buckets)``, when ``buckets`` is set."""
        if self.buckets is None:
            return grouped(df, self.group_cols)
        bucket = F.pmod(F.hash(*self.group_cols), F.lit(self.buckets))
        return df.withColumn(BUCKET, bucket).groupBy(BUCKET)

    def _split_columns(self, names: list[str], data: list[list]) -> dict[tuple, list[dict]]:
        if not data or not data[0]:
            return {}
        events = _rows_of(tuple(names))(data)
        if not self.spec.key:
            return {(): events}
        missing = [None] * len(events)  # a key column the input lacks is null
        return split_by(zip(*[data[names.index(c)] if c in names else missing for c in self.spec.key], strict=True),
                        events)

    def _finish(self, rows: list[dict]) -> list[dict]:
        """Rows of the partitions of one Spark group: merged per window and group when groups are coarser."""
        return self.engine.merge_rows(self.spec, rows) if self._merge and rows else rows

    def events(self, pdf: pd.DataFrame) -> list[dict]:
        """Engine events from a pandas batch: one dict per row, timestamps as epoch ms."""
        names, data = self._columns_of(pdf)
        return _rows_of(tuple(names))(data) if data else []

    def _columns_of(self, pdf: pd.DataFrame) -> tuple[list[str], list[list]]:
        """The engine's column names and values (lists) of a pandas batch: ``events`` before the rows."""
        if pdf.empty:  # PySpark may hand over empty chunks with untyped (object) columns
            return [], []
        if ARRIVAL in pdf.columns:  # contiguity strategies: the engine numbers events in input order
            pdf = pdf.sort_values(ARRIVAL, kind="stable")
        names, data = [], []
        for c in pdf.columns:
            if c not in self._columns:
                continue
            if c in self._zones:
                values = _epoch_ms(pdf[c], self._zones[c])
            else:
                values = pdf[c].tolist()
                if c in self._none_cols and pdf[c].dtype.kind == "f" and pdf[c].isna().any():
                    values = [None if v != v else v for v in values]  # one partition for null (as Spark's)
            self._add_column(names, data, c, values)
        return names, data

    def _add_column(self, names: list[str], data: list[list], c: str, values: list) -> None:
        """Append column ``c``; the ts and type columns also under the engine's names ``ts`` and ``type``."""
        names.append(c)
        data.append(values)
        if c == self.ts_col and c != "ts":
            names.append("ts")
            data.append(values)
        elif c == self.type_col and c != "type":
            names.append("type")
            data.append(values)

    def frame(self, rows: list[dict]) -> pd.DataFrame:
        """Result rows as a pandas batch in ``output_schema`` order, epoch ms as timestamps again."""
        if not rows:  # most groups of a selective query: the empty frame is built once (PySpark only reads it)
            if self._empty is None:
                self._empty = self._frame([])
            return self._empty
        return self._frame(rows)

    def _frame(self, rows: list[dict]) -> pd.DataFrame:
        names = self.output_schema.names
        if self._aggregating:
            rows = [_exact_row(r, self._exact) for r in rows]
        # an empty list would become float64, which PySpark cannot turn into e.g. an empty string column
        if not rows:
            data: dict[str, Any] = {name: pd.Series([], dtype=object) for name in names}
        elif self._sparse:
            data = {name: [r.get(name) for r in rows] for name in names}
        else:
            data = {name: [r[name] for r in rows] for name in names}
        for name, aware in self._time_outputs.items():
            data[name] = _from_ms(data[name], aware)
        return pd.DataFrame(data, columns=names)

    @property
    def arrow_schema(self) -> pa.Schema:
        """:attr:`output_schema` as Arrow, built on first use."""
        if self._arrow_schema is None:
            from pyspark.sql.pandas.types import to_arrow_schema

            self._arrow_schema = to_arrow_schema(self.output_schema, timezone=self._timezone)
        return self._arrow_schema

    def table(self, rows: list[dict]) -> pa.Table:
        """Result rows as an Arrow table of ``output_schema`` (for ``applyInArrow``), epoch ms as timestamps."""
        schema = self.arrow_schema
        if self._aggregating:
            rows = [_exact_row(r, self._exact) for r in rows]
        arrays = []
        for field in schema:
            values = [r.get(field.name) for r in rows] if self._sparse else [r[field.name] for r in rows]
            if field.name in self._time_outputs:
                arrays.append(_arrow_times(values, field.type))
            else:
                arrays.append(_arrow_array(values, field.type))
        return pa.Table.from_arrays(arrays, schema=schema)

    def _arrow_columns(self, table: pa.Table) -> tuple[list[str], list[list]]:
        """:meth:`_columns_of` for an Arrow table: the same engine columns, read without pandas (rows in the
        table's order: :meth:`run_table` puts them in input order first)."""
        if not table.num_rows:
            return [], []
        names, data = [], []
        for c in table.column_names:
            if c not in self._columns:
                continue
            col = table.column(c)
            if c in self._zones:
                values = _arrow_epoch_ms(col)
            else:
                values = col.to_pylist()
                if c in self._none_cols and pa.types.is_floating(col.type):
                    values = [None if v != v else v for v in values]  # NaN and null: one partition (as Spark's)
            self._add_column(names, data, c, values)
        return names, data

    def partition_function(self) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
        """``fn(batches) -> batches`` for ``mapInArrow`` over a DataFrame repartitioned by :attr:`group_cols`
        (what :func:`batch_matches` runs): the partition's record batches are gathered into one table (a key's
        rows may span batches) and run by :meth:`run_table`."""

        def run_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            table = gathered(batches)
            if table is None:
                return
            result = self.run_table(table)
            if result.num_rows:
                yield from result.to_batches()

        return run_partition

    def run_table(self, table: pa.Table) -> pa.Table:
        """The matches (or trend rows) of every key in ``table``, as an Arrow table of :attr:`output_schema`:
        rows in input order (``_arrival`` under a contiguity strategy), the keys told apart vectorially
        (:meth:`key_ids`), the rows no match can use dropped by the prefilter when the spec has one
        (:func:`prefilter_of`), then every key's matches at once in numpy when the spec has a columnar
        construction (:func:`match_columnar.columnar`), else engine events for the remaining rows, one engine
        run per key."""
        engine, spec = self.engine, self.spec
        budget = self.budget()  # every key of the partition together
        if ARRIVAL in table.column_names and table.num_rows:  # contiguity: the engine numbers events in input order
            table = table.take(pc.sort_indices(table, [(ARRIVAL, "ascending")]))  # a stable sort
        ids = self.key_ids(table)
        keep = self._prefiltered(table, ids)
        if keep is not None:
            table = table.filter(pa.array(keep, pa.bool_()))
            ids = ids[keep] if ids is not None else None
        if not hasattr(self, "_columnar"):  # looked up once per operator (on the executor), like the prefilter
            self._columnar = match_columnar.columnar(spec) if isinstance(spec, MatchSpec) else None
        if self._columnar is not None and table.num_rows:  # all keys at once in numpy (match_columnar)
            result = match_columnar.arrow_matches(
                self._columnar, table, ids, ts_col=self.ts_col, type_col=self.type_col, time_cols=self._zones,
                columns=self._columns, schema=self.arrow_schema, budget=budget)
            if result is not None:
                return result
        n = table.num_rows
        table, bounds = by_id(table, ids) if ids is not None else (table, [0, n])
        rows: list[dict] = []
        # engine events (dicts) for whole keys at a time, about CONVERT_ROWS rows, not for the whole partition
        chunk = [0]
        for b in bounds[1:]:
            if b - chunk[-1] >= CONVERT_ROWS or b == n:
                chunk.append(b)
        first = 0
        for lo, hi in itertools.pairwise(chunk):
            if lo == hi:
                continue
            names, data = self._arrow_columns(table.slice(lo, hi - lo))
            events = _rows_of(tuple(names))(data)
            last = bounds.index(hi, first)
            for a, b in itertools.pairwise(bounds[first:last + 1]):
                state, _ = engine.step(spec, engine.init_state(), events[a - lo:b - lo])
                rows.extend(self._advance(state, math.inf, budget)[1])
            first = last
        return self.table(self._finish(rows))

    def key_ids(self, table: pa.Table) -> np.ndarray | None:
        """Dense int64 ids of the rows' ``spec.key`` values (rows of one key share an id), computed with Arrow
        (no Python per row), or None without a key.  Null and NaN are one key (as :meth:`_split_columns`
        sees them); a key column the table lacks is null for every row."""
        ids: np.ndarray | None = None
        for c in self.spec.key:
            if c not in table.column_names:
                continue
            col = match_columnar.nan_as_null(table.column(c))
            encoded = pc.dictionary_encode(col, null_encoding="encode")
            if isinstance(encoded, pa.ChunkedArray):
                encoded = encoded.combine_chunks() if encoded.num_chunks != 1 else encoded.chunk(0)
            codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            if ids is None:
                ids = codes
            else:  # combine and make dense again (no overflow however many key columns)
                ids = np.unique(ids * len(encoded.dictionary) + codes, return_inverse=True)[1].astype(np.int64)
        if ids is None and self.spec.key:
            ids = np.zeros(table.num_rows, dtype=np.int64)
        return ids

    def _prefiltered(self, table: pa.Table, ids: np.ndarray | None) -> np.ndarray | None:
        """The rows to keep (bool array) by the spec's prefilter, or None (no prefilter, nothing to drop)."""
        if not table.num_rows or MASK not in table.column_names:
            return None
        if not hasattr(self, "_prefilter"):  # looked up once per operator (on the executor)
            self._prefilter = prefilter_of(self.spec)
        fn = self._prefilter
        if fn is None:
            return None
        ts_col = table.column(self.ts_col)
        # the very values the engine sees (epoch ms for timestamps, _arrow_epoch_ms): int64 stays exact
        read = match_columnar.engine_ts(ts_col, self.ts_col in self._zones)
        if read is None:  # another column type: as float64
            ts = pc.fill_null(pc.cast(ts_col, pa.float64()), math.nan).to_numpy()
            read = ts, pc.is_valid(ts_col).to_numpy(zero_copy_only=False) & ~np.isnan(ts)
        ts, valid = read
        mask = pc.fill_null(table.column(MASK), 0).to_numpy().astype(np.int64)
        group_ids = ids if ids is not None else np.zeros(table.num_rows, dtype=np.int64)
        keep = np.zeros(table.num_rows, dtype=bool)
        if valid.all():
            keep[:] = fn(group_ids, ts, mask)
        else:  # rows without a ts are dropped by the engine anyway (counted invalid)
            keep[valid] = fn(group_ids[valid], ts[valid], mask[valid])
        return None if keep.all() else keep

    def stream_function(self) -> Callable[[Any, Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]:
        """``fn(key, pdfs, state)`` for ``groupBy(key).applyInPandasWithState`` with event-time timeouts.

        Buffers the key's new rows, advances the engine to the current watermark, emits the completed
        matches, then drops the state if nothing is left, or stores it with a timeout for the watermark at
        which buffered events become processable or the live instances leave the window.  Rows behind the
        watermark the engine already processed are counted as late in the state (``MatchState.late``).
        """
        spec = self.spec

        offset = EVENT_TIME_OFFSET if self.numeric_ts else 0
        to_ts, to_ms = self._watermark_units(offset)

        def match_stream(key: Any, pdfs: Iterator[pd.DataFrame], group: GroupState) -> Iterator[pd.DataFrame]:
            engine = self.engine
            state = self._state_class.from_bytes(group.get[0]) if group.exists else engine.init_state()
            for pdf in pdfs:
                engine.step(spec, state, self.events(pdf))
            raw = group.getCurrentWatermarkMs()  # Spark requires a watermark for event-time timeouts
            watermark = to_ts(raw)  # in ts units (ms for timestamp ts)
            state, rows = self._advance(state, watermark, self.budget())
            if engine.is_empty(state):
                group.remove()
            else:
                group.update((state.to_bytes(),))
                due = engine.wakeup(spec, state)
                if due is not None and math.isfinite(due):
                    # a timeout fires once the watermark is past it: this one fires when it reaches `due`
                    group.setTimeoutTimestamp(max(to_ms(due) - 1, raw, 1))
            if rows:
                yield self.frame(rows)

        # rows after the watermark wait in the group's state as columns (cheaper to store than engine events);
        # not for contiguity strategies, which number events in the order they are stepped
        hold = getattr(spec, "strategy", None) not in ("strict_contiguity", "partition_contiguity")

        def nested_stream(key: Any, pdfs: Iterator[pd.DataFrame], group: GroupState) -> Iterator[pd.DataFrame]:
            engine = self.engine
            frontier, stored, held = _load_nested(group.get[0]) if group.exists else (None, {}, None)
            raw = group.getCurrentWatermarkMs()
            watermark = to_ts(raw)
            names, data = held if held is not None else (None, None)
            parts: dict[tuple, list[dict]] = {}
            for pdf in pdfs:
                new_names, new_data = self._columns_of(pdf)
                if not new_data:
                    continue
                if data is None:
                    names, data = new_names, [list(c) for c in new_data]
                elif new_names == names:
                    for column, values in zip(data, new_data, strict=True):
                        column.extend(values)
                else:  # another set of columns (not seen in practice): step it as it is
                    for k, events in self._split_columns(new_names, new_data).items():
                        parts.setdefault(k, []).extend(events)
            held = None
            if data is not None:
                ts = data[names.index("ts")]
                masks = data[names.index(MASK)] if MASK in names else None
                later, now = [], []
                for i, t in enumerate(ts):
                    if not (hold and t is not None and t > watermark):
                        now.append(i)
                    elif masks is None or masks[i] != 0:  # a row no component takes is dropped, as step does
                        later.append(i)
                if later:
                    held = (names, [[column[i] for i in later] for column in data])
                if len(now) < len(ts):
                    data = [[column[i] for i in now] for column in data]
                for k, events in self._split_columns(names, data).items():
                    parts.setdefault(k, []).extend(events)
            # partitions with new events, or with work due at this watermark (a partition with a window of the
            # group open is among them when the window closes: every partition emits it in this same call)
            due_now = [k for k, (due, _) in stored.items() if k not in parts and due is not None and due <= watermark]
            rows: list[dict] = []
            budget = self.budget()  # every key of the group in this micro-batch together
            for k in [*parts, *due_now]:
                entry = stored.get(k)
                state = self._state_class.from_bytes(entry[1]) if entry is not None else engine.init_state()
                if frontier is not None:  # what the group has processed: older events are late here too
                    state, out = self._advance(state, frontier, budget)
                    rows.extend(out)
                if k in parts:
                    engine.step(spec, state, parts[k])
                state, out = self._advance(state, watermark, budget)
                rows.extend(out)
                if engine.is_empty(state):
                    stored.pop(k, None)
                else:
                    stored[k] = (engine.wakeup(spec, state), state.to_bytes())
            if not stored and held is None:
                group.remove()
            else:
                frontier = watermark if frontier is None else max(frontier, watermark)
                group.update((_dump_nested(frontier, stored, held),))
                dues = [d for d, _ in stored.values() if d is not None]
                if held is not None:  # held rows become processable when the watermark reaches them
                    dues.append(min(held[1][held[0].index("ts")]))
                due = min(dues, default=None)
                if due is not None and math.isfinite(due):
                    group.setTimeoutTimestamp(max(to_ms(due) - 1, raw, 1))
            rows = self._finish(rows)
            if rows:
                yield self.frame(rows)

        stream = nested_stream if self.nested else match_stream
        return self._routing_late(stream, to_ts) if self.late_rows else stream

    def _watermark_units(self, offset: int) -> tuple[Callable[[int], float], Callable[[float], int]]:
        """``(to_ts, to_ms)``: Spark's watermark (ms) in ts units rounded down, and the watermark (ms) at which
        a time in ts units is reached (:class:`~sparkcep.runtime_udfs.event_time.EventTimeScale`)."""
        if not offset:  # timestamp ts: the engine's ms are the watermark's
            return (lambda raw: raw), (lambda due: math.ceil(due))
        return self._scale.watermark_ts, self._scale.timeout_ms

    def _routing_late(self, stream: Callable, to_ts: Callable[[int], float]) -> Callable:
        """``stream`` with late rows taken out before the engine and emitted as ``late`` side-channel rows."""
        record_cols = [c for c in self._columns if c not in (MASK, EVENT_TIME, SINGLE_GROUP, BUCKET)]

        def routed(key: Any, pdfs: Iterator[pd.DataFrame], group: GroupState) -> Iterator[pd.DataFrame]:
            watermark = to_ts(group.getCurrentWatermarkMs())
            late_rows: list[dict] = []

            def on_time() -> Iterator[pd.DataFrame]:
                for pdf in pdfs:
                    if pdf.empty:
                        continue
                    times = {c: _epoch_ms(pdf[c], z) for c, z in self._zones.items() if c in pdf.columns}
                    ts = times[self.ts_col] if self.ts_col in times else pdf[self.ts_col].tolist()
                    kept, positions = late.late_split(pdf, ts, watermark)
                    if positions:
                        cols = [c for c in pdf.columns if c in record_cols]
                        text = (pd.Timestamp(watermark, unit="ms", tz="UTC").isoformat() if self.ts_col in self._zones
                                else str(watermark) if isinstance(watermark, int) else f"{watermark:g}")
                        late_rows.extend(late.late_records(pdf, positions, cols, times, watermark, text))
                    yield kept

            for out in stream(key, on_time(), group):
                yield out.assign(**{late.KIND: late.RESULT, late.REASON: None, late.RECORD: None})
            if late_rows:
                empty = {name: [None] * len(late_rows) for name in self.output_schema.names}
                side = {c: [r[c] for r in late_rows] for c in (late.KIND, late.REASON, late.RECORD)}
                frame = pd.DataFrame({**empty, **side}, columns=self.stream_schema.names)
                for name, aware in self._time_outputs.items():
                    frame[name] = _from_ms(frame[name], aware)
                yield frame

        return routed


#: Version tag of a nested group state (:attr:`MatchOperator.nested`).
NESTED_STATE_VERSION = 1


def _dump_nested(frontier: float, stored: dict, held: tuple | None) -> bytes:
    """A Spark group's state: the watermark it has processed; per partition key, ``(wakeup, engine state)``;
    the rows after that watermark not given to an engine yet, as ``(column names, column lists)`` or None."""
    return pickle.dumps((NESTED_STATE_VERSION, frontier, stored, held), protocol=pickle.HIGHEST_PROTOCOL)


def _load_nested(data: bytes) -> tuple[float, dict, tuple | None]:
    version, *rest = pickle.loads(data)
    if version != NESTED_STATE_VERSION:
        raise CEPError(f"group state version {version} is not supported (expected {NESTED_STATE_VERSION})")
    frontier, stored, held = rest
    return frontier, stored, held


def stream_udf(spec_json: SpecLike, input_schema: StructType, **options: Any) -> Callable[
        [Any, Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]:
    """``MatchOperator(spec_json, input_schema, **options).stream_function()``."""
    return MatchOperator(spec_json, input_schema, **options).stream_function()


#: With numeric ts, the event-time column the watermark runs on: ``ts × unit + EVENT_TIME_OFFSET`` ms (one ts unit
#: is 1 ms unless the query declares ``ts_unit``; :mod:`sparkcep.runtime_udfs.event_time`).
EVENT_TIME = "_event_time"


def event_time_of(df: DataFrame, ts_col: str, ts_unit: str | None = None) -> Column:
    """The event time of ``df``'s ts: the timestamp itself, or numeric ts scaled by its unit (floored to the
    microsecond, exactly for whole numbers) and shifted by :data:`EVENT_TIME_OFFSET`."""
    if not isinstance(df.schema[ts_col].dataType, NumericType):
        return F.col(ts_col)
    num, den = EventTimeScale.of(ts_unit).micros
    ts = F.col(ts_col)
    if isinstance(df.schema[ts_col].dataType, IntegralType):
        ts = ts.cast("bigint")  # a finer unit: floored exactly, in decimals
        micros = ts * num if den == 1 else F.floor(ts.cast("decimal(20,0)") / F.lit(den).cast("decimal(20,0)"))
    else:
        micros = F.floor(ts * num / den).cast("bigint")
    return F.timestamp_micros((micros + EVENT_TIME_OFFSET * 1000).cast("bigint"))


def watermarked(df: DataFrame, ts_col: str, lateness: float, keep_late: bool = False,
                ts_unit: str | None = None) -> DataFrame:
    """``df`` with an event-time watermark allowing ``lateness`` (ts units; milliseconds for timestamp ts) on
    :data:`EVENT_TIME`, a timestamp copy of ``ts_col`` (numeric ts: :func:`event_time_of`, scaled by
    ``ts_unit``, else 1 unit is 1 ms; shifted by :data:`EVENT_TIME_OFFSET`).

    Put it on the events as read, before the query's filter (and the shedding stage): Spark's watermark is the
    newest event time its watermark operator has seen, so every event moves event time, not only the query's,
    and a match held for the watermark (a negated end, a trend window) comes out once any later event shows
    that time has passed.  Spark's optimizer pushes a filter below an event-time watermark (every conjunct not
    on the event-time column); so that the query's filter stays above it, ``ts_col`` passes the watermark
    through a non-deterministic identity, which no filter is pushed through.  After the filter (and the
    shedding stage), :func:`with_event_time` puts the watermark's column back on the candidates for the
    stateful operator.

    ``keep_late``: the result is ready for the stateful operator as it is, with the event-time column nulled
    (``with_event_time(df, df, ts_col, keep_late=True)``): for a stream without a filter, or one filtered
    before (the watermark then only sees the filtered rows)."""
    numeric = isinstance(df.schema[ts_col].dataType, NumericType)
    delay = EventTimeScale.of(ts_unit if numeric else None).delay_ms(lateness)
    df = df.withColumn(EVENT_TIME, event_time_of(df, ts_col, ts_unit))
    df = df.withWatermark(EVENT_TIME, f"{delay} milliseconds")
    # the barrier: Spark pushes no filter through a projection that is not deterministic (and ts always stays)
    df = df.withColumn(ts_col, F.when(F.spark_partition_id() >= 0, F.col(ts_col)))
    return with_event_time(df, df, ts_col, keep_late=True) if keep_late else df


def with_event_time(candidates: DataFrame, events: DataFrame, ts_col: str, keep_late: bool = False,
                    ts_unit: str | None = None) -> DataFrame:
    """``candidates`` (rows of the :func:`watermarked` ``events``, after the query's filter and the shedding
    stage) with the watermark's column :data:`EVENT_TIME` (re)made for the stateful operator: Spark's
    event-time timeouts need a column carrying the watermark's marker, and the filter may have projected it
    away.  It holds the event time, so that Spark drops rows behind the watermark before the operator; with
    ``keep_late`` it is null, so that late rows reach the operator, which routes them
    (``MatchOperator(..., late_rows=True)``).  The watermark itself stays where ``events`` put it."""
    schema = events.schema
    marker = schema[EVENT_TIME].metadata  # Spark's watermark marker: event-time timeouts require it
    if keep_late:
        value = F.lit(None).cast("timestamp")
    else:
        value = event_time_of(candidates, ts_col, ts_unit)
    return candidates.withColumn(EVENT_TIME, value.alias(EVENT_TIME, metadata=marker))


#: The constant grouping column of a query without partition key (one group: parallelism 1).
SINGLE_GROUP = "_sparkcep_all"
#: The grouping column of a bucketed operator: ``pmod(hash(key), buckets)``.
BUCKET = "_sparkcep_bucket"


def grouped(df: DataFrame, key) -> Any:
    """``df.groupBy(*key)``; without a key, one group by a constant column (``applyInPandasWithState``
    accepts neither an empty grouping nor a grouping expression)."""
    if key:
        return df.groupBy(*key)
    return df.withColumn(SINGLE_GROUP, F.lit(0)).groupBy(SINGLE_GROUP)


def unread_columns(spec: EngineSpec, columns: list[str], ts_col: str = "ts",
                   type_col: str = "type") -> list[str]:
    """The columns of a match query's input that its engine never reads (so a batch need not shuffle them):
    neither key, ts, ``_mask``, ``_arrival`` nor an attribute of a predicate or result; the type column too
    when ``_mask`` is there and no negation needs types (a negated sequence tests its members' types).  For a
    sharing context: neither ts, type, key, GROUP BY nor a measured attribute.  None for a trend query."""
    if isinstance(spec, SharedSpec):
        read = {ts_col, type_col, *spec.key, *spec.group_by,
                *(a.attr for q in spec.queries for a in q.aggregates if a.attr is not None)}
        return [c for c in columns if c not in read]
    if not isinstance(spec, MatchSpec):
        return []
    read = {ts_col, MASK, ARRIVAL, *spec.key}
    exprs = [*spec.predicates, *(o.expr for o in spec.outputs), *(c.local for c in spec.components if c.local)]
    read.update(n.attr for e in exprs for n in walk(e) if isinstance(n, (Attr, EquivItem)))
    if MASK not in columns or any(c.negated for c in spec.components):
        read.add(type_col)
    return [c for c in columns if c not in read]


#: About how many rows of a partition :meth:`MatchOperator.run_table` turns into engine events (dicts) at a time
#: (whole keys): the Arrow table of the partition is compact, its rows as Python dicts are not.
CONVERT_ROWS = 1 << 16


def prefilter_of(spec: EngineSpec) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None:
    """The spec's row prefilter (:func:`sparkcep.runtime_udfs.match_prefilter.prefilter`: ``keep = f(group_ids,
    ts, mask)`` drops rows that cannot be in any match, for skip_till_any_match specs), or None: not a match
    spec or not eligible."""
    return prefilter(spec) if isinstance(spec, MatchSpec) else None


def batch_input(candidates: DataFrame, spec: EngineSpec, input_schema: StructType | None = None,
                ts_col: str = "ts", type_col: str = "type") -> tuple[DataFrame, StructType]:
    """``(candidates, schema)`` as the batch path shuffles them: under a contiguity strategy the rows numbered in
    input order (``_arrival``) unless the filter did it, the :func:`unread_columns` dropped (neither shuffled nor
    converted).  :func:`batch_matches` and the workload operator
    (:func:`sparkcep.runtime_udfs.workload_spark.apply_workload`) prepare their input with it."""
    schema = input_schema if input_schema is not None else candidates.schema
    if getattr(spec, "strategy", None) in CONTIGUITY and ARRIVAL not in schema.names:
        # contiguity ranks ties in ts by input order: number the rows before the shuffle reorders them
        candidates = candidates.withColumn(ARRIVAL, F.monotonically_increasing_id())
        schema = StructType([*schema.fields, StructField(ARRIVAL, LongType(), False)])
    unread = unread_columns(spec, schema.names, ts_col, type_col)
    if unread:
        candidates = candidates.drop(*unread)
        schema = StructType([f for f in schema.fields if f.name not in unread])
    return candidates, schema


def batch_matches(candidates: DataFrame, spec: SpecLike, input_schema: StructType | None = None, *,
                  partitions: int | None = None, **options: Any) -> DataFrame:
    """The matches (or trend rows) of a batch ``candidates`` DataFrame (the output of the Spark SQL filter):
    the one batch path of :meth:`sparkcep.CompiledQuery.apply`, :func:`apply_match` and the generated job.

    The columns the engine never reads (:func:`unread_columns`) are dropped, the rows are hash-partitioned by
    the operator's :attr:`~MatchOperator.group_cols` into :func:`shuffle_partitions` partitions (``partitions``,
    default ``spark.sql.shuffle.partitions``, kept by adaptive execution; one partition without a key) and each
    partition runs in one ``mapInArrow`` call (:meth:`MatchOperator.partition_function`): Python splits the keys
    itself, vectorially, so Spark neither sorts nor groups, and Spark's cost per group is paid once per partition.
    Under a contiguity strategy the rows are numbered in input order (``_arrival``) before the shuffle, unless
    the filter did it.  ``input_schema``: the schema of ``candidates`` if known (saves a round trip to the
    JVM); ``options`` go to :class:`MatchOperator` (``buckets`` is ignored: a batch has no per-group state to
    bound)."""
    spec = load_spec(spec)
    candidates, schema = batch_input(candidates, spec, input_schema, options.get("ts_col", "ts"),
                                     options.get("type_col", "type"))
    options.pop("buckets", None)
    op = MatchOperator(spec, schema, **options)
    keys = [F.col(f"`{c}`") for c in op.group_cols]
    if keys:
        spread = candidates.repartition(shuffle_partitions(candidates, partitions), *keys)
    else:
        spread = candidates.repartition(1)
    return spread.mapInArrow(op.partition_function(), op.output_schema)


def shuffle_partitions(df: DataFrame, partitions: int | None = None) -> int:
    """The number of partitions the batch path shuffles ``df`` into: ``partitions``, else
    ``spark.sql.shuffle.partitions``, always as an explicit count.  Given only the columns, adaptive query
    execution merges a small shuffle (a few MB: typical candidates after the filter) into one partition, and
    then the whole engine runs in one Python worker on one core; a count is kept as it is."""
    if partitions is not None:
        return partitions
    return int(df.sparkSession.conf.get("spark.sql.shuffle.partitions"))


def apply_match(df: DataFrame, spec: SpecLike, **options: Any) -> DataFrame:
    """The matches of ``df`` grouped by ``spec.key``: :func:`batch_matches` for a batch DataFrame (``buckets``,
    if given, is its number of partitions), ``applyInPandasWithState`` (append mode, event-time timeouts) for a
    streaming one, which must carry a watermark (hashed into ``buckets`` groups only when asked: the grouping is
    part of its checkpoint).  ``options`` go to :class:`MatchOperator`.  A spec without key runs as one group.
    """
    if not df.isStreaming:
        return batch_matches(df, spec, partitions=options.pop("buckets", None), **options)
    op = MatchOperator(spec, df.schema, **options)
    groups = op.grouped(df)
    return groups.applyInPandasWithState(op.stream_function(), op.stream_schema, op.state_schema, "append",
                                         GroupStateTimeout.EventTimeTimeout)
