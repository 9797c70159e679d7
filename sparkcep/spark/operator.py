"""The stateful operator around an engine: MatchOperator (streaming state and batch tables) and the
streaming UDF."""

from __future__ import annotations

import copy
import itertools
import json
import math
import pickle
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState
from pyspark.sql.types import (
    ByteType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NumericType,
    ShortType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from sparkcep.ir.ast import Attr, Func
from sparkcep.ir.errors import CEPError
from sparkcep.ir.kinds import typed
from sparkcep.ir.sharing import SharedSpec
from sparkcep.ir.spec import NEWEST, MatchSpec, OutputColumn, TimeoutSpec, TrendSpec, reads_every_event
from sparkcep.runtime_udfs.event_time import EventTimeScale
from sparkcep.runtime_udfs.match import budget as match_budget
from sparkcep.runtime_udfs.match import columnar as match_columnar
from sparkcep.runtime_udfs.match import engine as match_engine
from sparkcep.runtime_udfs.match import ranges
from sparkcep.runtime_udfs.match import stream_columnar as match_stream
from sparkcep.runtime_udfs.match import timeouts as timeout_engine
from sparkcep.runtime_udfs.match.prefilter import prefilter
from sparkcep.runtime_udfs.shared import engine as shared_engine
from sparkcep.runtime_udfs.trend import engine as trend_engine
from sparkcep.runtime_udfs.trend.aggregates import having_filter
from sparkcep.spark import heap, late
from sparkcep.spark.arrow import (
    _arrow_array,
    _arrow_epoch_ms,
    _arrow_times,
    _epoch_ms,
    _epoch_ms_array,
    _exact_row,
    _from_ms,
    _rows_of,
    _session_timezone,
    by_id,
    gathered,
    split_by,
)
from sparkcep.spark.heap import freeze_worker_heap
from sparkcep.spark.schema import (
    ARRIVAL,
    BUCKET,
    CONVERT_ROWS,
    EVENT_TIME,
    EVENT_TIME_OFFSET,
    EXACT,
    MASK,
    SINGLE_GROUP,
    STATE_SCHEMA,
    load_spec,
    output_schema,
    watermark_delay,
)
from sparkcep.spark.validate import ARRIVAL_COL, RESULT_ARRIVAL

if TYPE_CHECKING:
    from sparkcep.spark.schema import EngineSpec, SpecLike

__all__ = ["COLUMNAR_STREAM", "MAX_MATCHES_CONF", "PER_KEY", "MatchOperator", "bucket_column", "checkpoint_grouping",
           "default_buckets", "grouped", "stamping_arrival", "stream_buckets", "stream_udf"]

# ----------------------------------------------------------------------------------------------- conversions


#: About how many rows of a batch partition :meth:`MatchOperator.run_slices` runs at a time (whole keys): the
#: engine's working memory follows the slice (at 10^7 events on 2 partitions, whole partitions took 1.3-1.9 GB of
#: Python RSS, ``bench/scale.py``)
SLICE_ROWS = 1 << 19

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


def engine_of(spec: EngineSpec):
    """The engine module that runs ``spec``: the SASE match engine, the GRETA trend engine or the Sharon shared
    engine, or the timed-out partial matches of a match query (:mod:`~sparkcep.runtime_udfs.match.timeouts`).
    Each has ``check(spec)``, ``init_state()`` (a :class:`~sparkcep.ir.spec.SlotState`),
    ``step``, ``advance``, ``is_empty``, ``wakeup``; the two aggregating ones ``merge_rows`` too."""
    if isinstance(spec, SharedSpec):
        return shared_engine
    if isinstance(spec, TimeoutSpec):
        return timeout_engine
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
    ``max_matches``: the match budget of a match query (:mod:`~sparkcep.runtime_udfs.match.budget`): the
    matches one Spark partition of a batch, or one group in one micro-batch, may produce, and the partial
    matches it may hold; None: the Spark conf :data:`MAX_MATCHES_CONF` of the active session if set (a
    generated job: ``spark-submit --conf spark.sparkcep.maxMatches=N``), else
    :func:`~sparkcep.runtime_udfs.match.budget.default_max_matches`, sized on the executor to its memory; 0:
    no limit.  Beyond it the task fails with
    :class:`~sparkcep.runtime_udfs.match.budget.MatchBudgetError`
    (:func:`~sparkcep.runtime_udfs.match.budget.raised_message` finds its message in the error the driver gets).
    """

    def __init__(self, spec: SpecLike, input_schema: StructType, *, ts_col: str = "ts",
                 type_col: str = "type", timezone: str | None = None, buckets: int | None = None,
                 late_rows: bool = False, max_matches: int | None = None, ts_unit: str | None = None,
                 watermark_delay_ms: int | None = None):
        # a coalesce/CASE over columns of different types has the type Spark gives it (ir.kinds.typed)
        self.spec = typed(load_spec(spec), {f.name: f.dataType.simpleString() for f in input_schema.fields})
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
        #: a stream whose rows carry their arrival (:data:`~sparkcep.spark.validate.ARRIVAL_COL`): each result
        #: row gets :data:`~sparkcep.spark.validate.RESULT_ARRIVAL` (:meth:`stream_function`); the engine never
        #: sees the column
        self.arrival = ARRIVAL_COL in input_schema.names
        self._columns = (frozenset(input_schema.names) - {ARRIVAL_COL}) | {MASK}
        #: a trend spec or sharing context over rows with their arrival: each window's result gets the newest
        #: arrival of its key's events in the window (:class:`WindowArrivals`, in the group's state), which then
        #: ride along as an attribute
        self._panes = (_pane_width(self.spec) if self.arrival and isinstance(self.spec, (TrendSpec, SharedSpec))
                       else None)
        #: a match spec over rows with their arrival: the spec the per-event engine streams, with a hidden result
        #: column, each match's (or timed-out partial match's) own last event's arrival (:func:`stamped_spec`)
        self._stamped = stamped_spec(self.spec) if self.arrival and isinstance(self.spec, MatchSpec) else None
        if self._stamped is not None:
            self.engine.check(self._stamped)
        if self._panes is not None or self._stamped is not None:
            self._columns |= {ARRIVAL_COL}
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
        #: route late events to the output (see :mod:`sparkcep.spark.late`) instead of only counting them
        self.late_rows = late_rows
        #: what :meth:`stream_function` returns: ``output_schema``, plus :data:`RESULT_ARRIVAL` when the rows carry
        #: their arrival, plus the late side channel with ``late_rows``
        streamed = self.output_schema
        if self.arrival:
            streamed = StructType([*streamed.fields, StructField(RESULT_ARRIVAL, LongType(), True)])
        self.stream_schema = late.with_side_columns(streamed) if late_rows else streamed
        if max_matches is None and isinstance(self.spec, MatchSpec):
            max_matches = _conf_max_matches()
        if max_matches is not None and max_matches < 0:
            raise CEPError(f"max_matches must be 0 (no limit) or a positive number, got {max_matches}")
        #: the match budget as given (None: sized on the executor, :meth:`budget`)
        self.max_matches = max_matches
        if watermark_delay_ms is None:
            watermark_delay_ms = watermark_delay(input_schema)
        #: the stream's watermark delay (ms), for :meth:`batch_watermark`; None: wait for Spark's watermark
        self.watermark_delay_ms = None if watermark_delay_ms is None else int(watermark_delay_ms)
        #: ``rows -> rows`` keeping the trend rows where HAVING holds (a sharing context: each query's own), or None
        self._having = _having_of(self.spec)
        #: what streams, in words: ``columnar micro-batches`` (the streaming columnar step,
        #: :mod:`~sparkcep.runtime_udfs.match.stream_columnar`) or ``per-event engine`` (and why)
        self.stream_path = _stream_path(self.spec, input_schema, ts_type, self.nested or not self.spec.key)
        #: the columnar step would stream this spec if a Spark group held several keys: :meth:`with_buckets`
        #: makes it so (the default grouping of a streaming match query, :func:`stream_buckets`)
        self.bucketable = (bool(self.group_cols) and not self._merge
                           and _stream_path(self.spec, input_schema, ts_type, True) == COLUMNAR_STREAM)

    def with_buckets(self, buckets: int) -> MatchOperator:
        """This operator with its keys hashed into ``buckets`` Spark groups (:meth:`grouped`), the columnar step
        streaming where :attr:`bucketable` (without a key: this operator, one group, as the constructor does)."""
        if buckets < 1:
            raise CEPError(f"buckets must be a positive number, got {buckets}")
        if not self.group_cols:
            return self
        op = copy.copy(self)
        op.buckets, op.nested = buckets, True
        if self.bucketable:
            op.stream_path = COLUMNAR_STREAM
        return op

    def budget(self) -> match_budget.Budget | None:
        """A fresh match budget for one partition (None for trend and shared specs, which never enumerate):
        :attr:`max_matches`, else the default for this executor's memory, resolved once per operator."""
        if not isinstance(self.spec, MatchSpec):
            return None
        if not hasattr(self, "_limit"):
            self._limit = match_budget.resolve_max_matches(self.max_matches, len(self.output_schema.fields))
        return match_budget.Budget(self._limit)

    def batch_watermark(self, raw: int, newest: float | None) -> int:
        """The watermark (ms) a micro-batch's rows may be processed to: Spark's current one ``raw``, raised to
        the one the next micro-batch will have as far as this group knows, ``event time of newest -
        delay``, ``newest`` being the newest ts (engine units) of the rows the group got in this micro-batch
        (DESIGN.md principle 11).  Spark's next watermark is the newest event time of *every* row of the batch
        minus the delay, so it is at least this: every event still to come on time has a ts at or above it,
        and advancing the engine to it now decides exactly what the next micro-batch would (the same results
        as batch mode), one micro-batch earlier.  Without a delay (no watermark marker on the input) or rows,
        ``raw``."""
        if self.watermark_delay_ms is None or newest is None:
            return raw
        ms = self._scale.event_ms(newest) if self.numeric_ts else math.floor(newest)
        return max(raw, ms - self.watermark_delay_ms)

    def _advance(self, state, watermark: float, budget: match_budget.Budget | None, spec: EngineSpec | None = None):
        """``engine.advance`` of ``spec`` (default :attr:`spec`), with the partition's match budget for the match
        engine."""
        spec = self.spec if spec is None else spec
        if budget is None:
            return self.engine.advance(spec, state, watermark)
        return self.engine.advance(spec, state, watermark, budget)

    def grouped(self, df: DataFrame) -> Any:
        """``df`` grouped for this operator: by :attr:`group_cols` (a constant column when there are none), or
        by ``pmod(hash(group_cols), buckets)`` when ``buckets`` is set, in a column named with the count
        (:func:`bucket_column`: a streaming checkpoint's state schema records it, :func:`checkpoint_grouping`)."""
        if self.buckets is None:
            return grouped(df, self.group_cols)
        bucket = F.pmod(F.hash(*self.group_cols), F.lit(self.buckets))
        name = bucket_column(self.buckets)
        return df.withColumn(name, bucket).groupBy(name)

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
        """Rows of the partitions of one Spark group: merged per window and group when groups are coarser,
        then only those where the query's HAVING holds (:attr:`_having`)."""
        if self._merge and rows:
            merged = self.engine.merge_rows(self.spec, rows)
            if self._panes is not None:
                WindowArrivals.merge(self.spec, rows, merged)
            rows = merged
        return self._having(rows) if self._having is not None and rows else rows

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

    def frame(self, rows: list[dict], arrival: bool = False) -> pd.DataFrame:
        """Result rows as a pandas batch in ``output_schema`` order, epoch ms as timestamps again; ``arrival``:
        the rows carry their own arrival, last as :data:`~sparkcep.spark.validate.RESULT_ARRIVAL` (which
        :func:`stamping_arrival` keeps; an int64 column when every row has one, else nullable)."""
        if not rows:  # most groups of a selective query: the empty frame is built once (PySpark only reads it)
            if self._empty is None:
                self._empty = self._frame([])
            return self._empty
        return self._frame(rows, arrival)

    def _frame(self, rows: list[dict], arrival: bool = False) -> pd.DataFrame:
        names = self.output_schema.names
        arrived = [r.get(RESULT_ARRIVAL) for r in rows] if arrival else None
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
        if arrived is not None:
            data[RESULT_ARRIVAL] = (np.array(arrived, dtype=np.int64) if None not in arrived
                                    else pd.array(arrived, dtype="Int64"))
        return pd.DataFrame(data)  # in ``names`` order already (columns= as well costs a reindex)

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

    def partition_function(self, held_copies: bool = False) -> Callable[[Iterator[pa.RecordBatch]],
                                                                         Iterator[pa.RecordBatch]]:
        """``fn(batches) -> batches`` for ``mapInArrow`` over a DataFrame repartitioned by :attr:`group_cols`
        (what :func:`batch_matches` runs): the partition's record batches are gathered into one table (a key's
        rows may span batches) and run by :meth:`run_slices`, whose results go out slice by slice.
        ``held_copies``: a partition of time ranges of a keyless query (``adapters.ranged_matches``), whose copies
        held without being owned come with their ``_mask`` negated (:func:`ranges.sent_mask`): restored first
        (:func:`restored_masks`), the partition then runs as one keyless table (:mod:`ranges`' docstring)."""

        def run_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            freeze_worker_heap()  # the daemon's collection after the task then walks only this task's objects
            table = gathered(batches)
            if table is None:
                return
            results = self.run_slices(restored_masks(table) if held_copies else table)
            del table  # run_slices keeps the rows in key order only: the gathered table can go
            for result in results:
                if result.num_rows:
                    yield from result.to_batches()

        return run_partition

    def run_slices(self, table: pa.Table, slice_rows: int | None = None) -> Iterator[pa.Table]:
        """The results of :meth:`run_table` over ``table``, computed and handed out in slices of whole keys of
        about ``slice_rows`` rows (default :data:`SLICE_ROWS`; a key's rows in input order, ``_arrival`` first
        under contiguity), so that the engine's working memory (numpy columns, chains, matches) and the results
        held at once follow the slice, not the partition; one match budget for the whole table.  A query without
        a key that time ranges can split runs in time slices instead (:meth:`_time_sliced`), of ``slice_rows``
        rows if given, else :func:`ranges.slice_rows` (:data:`ranges.TIME_SLICE_ROWS`, more for a wide window).  A
        table of at most that many rows, another query without a key, and a trend query merged over keys
        (:attr:`group_cols` coarser than the key) run whole."""
        timed = slice_rows  # a keyless table's time slices: given, else sized by ranges.slice_rows
        slice_rows = SLICE_ROWS if slice_rows is None else slice_rows
        held = (None if self.spec.key or table.num_rows <= (ranges.TIME_SLICE_ROWS if timed is None else timed)
                else self._time_sliced(table, timed))
        if held is not None:
            budget = self.budget()
            for part in held:
                yield self.run_table(part, budget=budget)
            return
        if table.num_rows <= slice_rows or not self.spec.key or self._merge:
            yield self.run_table(table)
            return
        table = in_input_order(table)
        ids = self.key_ids(table)
        table, bounds = by_id(table, ids)
        ids = np.sort(ids, kind="stable")
        budget = self.budget()
        lo = 0
        for b in bounds[1:]:
            if b - lo >= slice_rows or b == bounds[-1]:
                yield self.run_table(table.slice(lo, b - lo), budget=budget, ids=ids[lo:b])
                lo = b

    def _time_sliced(self, table: pa.Table, slice_rows: int | None) -> Iterator[pa.Table] | None:
        """A keyless ``table`` cut into time slices of about ``slice_rows`` rows (None: :func:`ranges.slice_rows`
        of the table) that overlap by the window
        (:func:`ranges.time_slices`: the time ranges of the Spark batch path, in one worker), each in ts order (ties
        in input order: the engine's order; ``run_table`` restores ``_arrival``'s under contiguity), with the first
        component's bit of ``_mask`` cleared on the rows it holds without owning, so that its engine run builds
        only the matches whose first event it owns: every match once, from the slice owning its first event.  A
        whole table's numpy arrays cost page faults a slice's do not (one worker at 1.5 million rows: twice the
        system CPU of two ranges' workers together).  None (run whole) when ranges cannot split the query
        (:func:`ranges.why_not`), the table has no ``_mask`` to bar rows by, or its ts column is not numbers or
        timestamps."""
        if (ranges.first_var(self.spec) is None or MASK not in table.column_names
                or self.ts_col not in table.column_names):
            return None
        table = in_input_order(table)
        read = match_columnar.engine_ts(table.column(self.ts_col), self.ts_col in self._zones)
        if read is None:
            return None
        at = table.column_names.index(MASK)
        barring = pa.scalar(~ranges.FIRST_BIT, table.schema.field(MASK).type)

        rows = ranges.slice_rows(*read, self.spec.window) if slice_rows is None else slice_rows

        def slices() -> Iterator[pa.Table]:
            for held, barred in ranges.time_slices(*read, self.spec.window, rows):
                part = table.take(held)
                mask = part.column(MASK)
                if barred.any():
                    mask = pc.if_else(pa.array(barred), pc.bit_wise_and(mask, barring), mask)
                yield part.set_column(at, MASK, mask)

        return slices()

    def run_table(self, table: pa.Table, *, budget: match_budget.Budget | None = None,
                  ids: np.ndarray | None = None) -> pa.Table:
        """The matches (or trend rows) of every key in ``table``, as an Arrow table of :attr:`output_schema`:
        rows in input order (``_arrival`` under a contiguity strategy), the keys told apart vectorially
        (:meth:`key_ids`), the rows no match can use dropped by the prefilter when the spec has one
        (:func:`prefilter_of`), then every key's matches at once in numpy when the spec has a columnar
        construction (:func:`match_columnar.columnar`), else engine events for the remaining rows, one engine
        run per key.  ``budget``: the match budget (default: a fresh one for the table, every key together);
        ``ids``: :meth:`key_ids` of ``table`` if known, its rows already in input order (:meth:`run_slices`)."""
        engine, spec = self.engine, self.spec
        if budget is None:
            budget = self.budget()  # every key of the partition together
        if ids is None:
            table = in_input_order(table)
            ids = self.key_ids(table)
        keep = self._prefiltered(table, ids)
        if keep is not None:
            table = table.filter(pa.array(keep, pa.bool_()))
            ids = ids[keep] if ids is not None else None
        if not hasattr(self, "_columnar"):  # looked up once per operator (on the executor), like the prefilter
            self._columnar = (match_columnar.columnar(spec) if isinstance(spec, MatchSpec)
                              and not isinstance(spec, TimeoutSpec) else None)
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
        sees them); a key column the table lacks is null for every row (:func:`match_columnar.key_ids`)."""
        if not self.spec.key:
            return None
        present = [table.column(c) for c in self.spec.key if c in table.column_names]
        return match_columnar.key_ids(present, table.num_rows)

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
        spec = self.spec if self._stamped is None else self._stamped
        # the rows' own arrival (RESULT_ARRIVAL) is in each engine row: a stamped match spec, or trend panes
        own_arrival = self._stamped is not None or self._panes is not None

        offset = EVENT_TIME_OFFSET if self.numeric_ts else 0
        to_ts, to_ms = self._watermark_units(offset)

        def match_stream(key: Any, pdfs: Iterator[pd.DataFrame], group: GroupState) -> Iterator[pd.DataFrame]:
            engine = self.engine
            stored, panes = _load_keyed(group.get[0]) if group.exists else (None, {})
            state = self._state_class.from_bytes(stored) if stored is not None else engine.init_state()
            arrivals = WindowArrivals(self.spec, self._panes, panes) if self._panes is not None else None
            newest = None
            for pdf in pdfs:
                names, data = self._columns_of(pdf)
                if data:
                    events = _rows_of(tuple(names))(data)
                    engine.step(spec, state, events)
                    if arrivals is not None:
                        arrivals.add((), events)
                    newest = _newest(newest, data[names.index("ts")])
            raw = group.getCurrentWatermarkMs()  # Spark requires a watermark for event-time timeouts
            watermark = to_ts(self.batch_watermark(raw, newest))  # in ts units (ms for timestamp ts)
            state, rows = self._advance(state, watermark, self.budget(), spec)
            if arrivals is not None:
                rows = arrivals.stamp((), rows)
                arrivals.prune((), watermark)
            rows = self._finish(rows)
            if engine.is_empty(state):
                group.remove()
            else:
                group.update((_dump_keyed(state.to_bytes(), arrivals.panes if arrivals is not None else {}),))
                _set_timeout(group, engine.wakeup(spec, state), raw, to_ms)
            if rows:
                yield self.frame(rows, own_arrival)

        # rows after the watermark wait in the group's state as columns (cheaper to store than engine events);
        # not for contiguity strategies, which number events in the order they are stepped
        hold = not reads_every_event(spec)

        def nested_stream(key: Any, pdfs: Iterator[pd.DataFrame], group: GroupState) -> Iterator[pd.DataFrame]:
            engine = self.engine
            frontier, stored, held, panes = _load_nested(group.get[0]) if group.exists else (None, {}, None, {})
            arrivals = WindowArrivals(self.spec, self._panes, panes) if self._panes is not None else None
            raw = group.getCurrentWatermarkMs()
            names, data = held if held is not None else (None, None)
            parts: dict[tuple, list[dict]] = {}
            newest = None
            for pdf in pdfs:
                new_names, new_data = self._columns_of(pdf)
                if not new_data:
                    continue
                newest = _newest(newest, new_data[new_names.index("ts")])
                if data is None:
                    names, data = new_names, [list(c) for c in new_data]
                elif new_names == names:
                    for column, values in zip(data, new_data, strict=True):
                        column.extend(values)
                else:  # another set of columns (not seen in practice): step it as it is
                    for k, events in self._split_columns(new_names, new_data).items():
                        parts.setdefault(k, []).extend(events)
            watermark = to_ts(self.batch_watermark(raw, newest))
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
                    state, out = self._advance(state, frontier, budget, spec)
                    rows.extend(arrivals.stamp(k, out) if arrivals is not None else out)
                if k in parts:
                    engine.step(spec, state, parts[k])
                    if arrivals is not None:
                        arrivals.add(k, parts[k])
                state, out = self._advance(state, watermark, budget, spec)
                rows.extend(arrivals.stamp(k, out) if arrivals is not None else out)
                if arrivals is not None:
                    arrivals.prune(k, watermark)
                if engine.is_empty(state):
                    stored.pop(k, None)
                else:
                    stored[k] = (engine.wakeup(spec, state), state.to_bytes())
            if not stored and held is None:
                group.remove()
            else:
                frontier = watermark if frontier is None else max(frontier, watermark)
                group.update((_dump_nested(frontier, stored, held, arrivals.panes if arrivals is not None else {}),))
                dues = [d for d, _ in stored.values() if d is not None]
                if held is not None:  # held rows become processable when the watermark reaches them
                    dues.append(min(held[1][held[0].index("ts")]))
                _set_timeout(group, min(dues, default=None), raw, to_ms)
            rows = self._finish(rows)
            if rows:
                yield self.frame(rows, own_arrival)

        stream = nested_stream if self.nested else match_stream
        if self.stream_path == COLUMNAR_STREAM:
            stream = self._columnar_stream(stream, to_ts, to_ms)
        stream = self._routing_late(stream, to_ts) if self.late_rows else stream
        stream = stamping_arrival(stream, self.stream_schema.names) if self.arrival else stream
        return heap.freezing(stream)  # the daemon's collection after each task walks only that task's objects

    def _columnar_stream(self, engine_stream: Callable, to_ts: Callable[[int], float],
                         to_ms: Callable[[float], int]) -> Callable:
        """The stream function of a spec with a streaming columnar step (:mod:`match_stream`): per call, the
        group's new rows as numpy columns, stepped and advanced to the same watermark as the engine would be;
        the matches as one frame.  A group whose stored state is the per-event engine's (a checkpoint written
        before) goes on with ``engine_stream`` until that state is dropped."""

        def columnar_stream(key: Any, pdfs: Iterator[pd.DataFrame], group: GroupState) -> Iterator[pd.DataFrame]:
            sc = self._stream_step()
            if group.exists and not match_stream.is_state(group.get[0]):
                yield from engine_stream(key, pdfs, group)
                return
            state = match_stream.StreamState.from_bytes(group.get[0]) if group.exists else match_stream.init_state()
            newest = None
            for pdf in pdfs:
                if pdf.empty:
                    continue
                columns = self._stream_columns(pdf)
                match_stream.step(sc, state, columns)
                newest = _newest_of(newest, columns["ts"])
            raw = group.getCurrentWatermarkMs()
            watermark = to_ts(self.batch_watermark(raw, newest))
            state, (carried, chains) = match_stream.advance(sc, state, watermark, self.budget())
            if match_stream.is_empty(state):
                group.remove()
            else:
                group.update((state.to_bytes(),))
                _set_timeout(group, match_stream.wakeup(sc, state), raw, to_ms)
            if len(chains):
                frame = self._columns_frame(match_stream.outputs(sc, carried, chains))
                if self.arrival:  # each match's own last event's arrival (_stamping_arrival keeps it)
                    arrival = carried[ARRIVAL_COL][match_stream.last_rows(sc, carried, chains)]
                    frame[RESULT_ARRIVAL] = pd.array(pd.to_numeric(arrival, errors="coerce"), dtype="Float64"
                                                     ).round().astype("Int64")
                yield frame

        return columnar_stream

    def _stream_step(self) -> match_stream.StreamColumnar:
        """The streaming columnar step, built once per operator where it runs (on the executor), like the batch
        path's construction: every key of a Spark group at once."""
        if not hasattr(self, "_stream"):
            self._stream = match_stream.stream_columnar(self.spec, carry=(ARRIVAL_COL,) if self.arrival else ())
        return self._stream

    def _stream_columns(self, pdf: pd.DataFrame) -> dict[str, np.ndarray]:
        """The engine attributes the streaming columnar step reads, from a pandas batch, as numpy arrays (the
        values :meth:`_columns_of` gives the engine: timestamps as epoch ms)."""
        source = match_columnar.engine_names(pdf.columns, self._columns, self.ts_col, self.type_col)
        columns = {}
        for name in self._stream_step().reads:
            c = source.get(name)
            if c is not None:
                columns[name] = (_epoch_ms_array(pdf[c], self._zones[c]) if c in self._zones
                                 else pdf[c].to_numpy())
        if self.arrival and ARRIVAL_COL in pdf.columns:  # carried unread: each match's last event's arrival
            columns[ARRIVAL_COL] = pd.to_numeric(pdf[ARRIVAL_COL], errors="coerce").to_numpy(np.float64)
        return columns

    def _columns_frame(self, columns: dict[str, np.ndarray]) -> pd.DataFrame:
        """Result columns (numpy, epoch ms for timestamps) as a pandas batch in ``output_schema`` order."""
        data = {name: (_from_ms(columns[name], self._time_outputs[name]) if name in self._time_outputs
                       else columns[name]) for name in self.output_schema.names}
        return pd.DataFrame(data)  # (columns= given as well costs a reindex: several times slower)

    def _watermark_units(self, offset: int) -> tuple[Callable[[int], float], Callable[[float], int]]:
        """``(to_ts, to_ms)``: Spark's watermark (ms) in ts units rounded down, and the watermark (ms) at which
        a time in ts units is reached (:class:`~sparkcep.runtime_udfs.event_time.EventTimeScale`)."""
        if not offset:  # timestamp ts: the engine's ms are the watermark's
            return (lambda raw: raw), (lambda due: math.ceil(due))
        return self._scale.watermark_ts, self._scale.timeout_ms

    def _routing_late(self, stream: Callable, to_ts: Callable[[int], float]) -> Callable:
        """``stream`` with late rows taken out before the engine and emitted as ``late`` side-channel rows."""
        record_cols = [c for c in self._columns if c not in (MASK, EVENT_TIME, SINGLE_GROUP, BUCKET, ARRIVAL_COL)]

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

def stamping_arrival(stream: Callable, names: list[str]) -> Callable:
    """A group stream function ``stream`` with each output row stamped :data:`RESULT_ARRIVAL`.  The stream's own
    rows carry it where they have one: the streaming columnar step (the default buckets of a match query) stamps
    each match with its own last event's arrival, carried with the rows through the construction; the per-event
    engine each match with the newest arrival of the events it binds (:func:`stamped_spec`), each trend window
    with its own events' (:class:`WindowArrivals`).  A row without one (a MATCH_RECOGNIZE row of no match, events
    stored before their arrival was kept) gets the newest arrival (:data:`ARRIVAL_COL`) among the rows the Spark
    group got in this call, i.e. in the micro-batch that emits the row: at most a later arrival of the same
    micro-batch than its last event's (DESIGN.md principle 11); null in a call with no rows (a timeout).  Also
    the stream function of a streaming MATCH_RECOGNIZE (:func:`sparkcep.spark.recognize.stream_recognize`);
    ``names``: the output columns, :data:`RESULT_ARRIVAL` among them."""

    def stamped(key: Any, pdfs: Iterator[pd.DataFrame], group: GroupState) -> Iterator[pd.DataFrame]:
        arrivals: list[pd.Series] = []  # the call's rows' arrival, read only for a row without its own

        def seen() -> Iterator[pd.DataFrame]:
            for pdf in pdfs:
                if not pdf.empty and ARRIVAL_COL in pdf.columns:
                    arrivals.append(pdf[ARRIVAL_COL])
                yield pdf

        def newest() -> int | None:
            tops = [top for top in (pd.to_numeric(a, errors="coerce").max() for a in arrivals) if top == top]
            return int(max(tops)) if tops else None  # (NaN: no row of that frame has an arrival)

        for out in stream(key, seen(), group):
            own = out[RESULT_ARRIVAL] if RESULT_ARRIVAL in out.columns else None
            if own is not None and not own.isna().any():  # every row has its own arrival (the common case)
                yield out if list(out.columns) == names else out[names]
                continue
            arrival = pd.Series([newest()] * len(out), dtype="Int64", index=out.index)
            if RESULT_ARRIVAL in out.columns:  # the rows' own arrival where the step carried it
                arrival = pd.Series(out[RESULT_ARRIVAL], dtype="Int64").fillna(arrival)
            yield out.assign(**{RESULT_ARRIVAL: arrival})[names]

    return stamped


def _stream_path(spec: EngineSpec, schema: StructType, ts_type, shared_groups: bool) -> str:
    """What streams ``spec`` over ``schema``, in words (:attr:`MatchOperator.stream_path`):
    :data:`COLUMNAR_STREAM`, or the per-event engine and why.  ``shared_groups``: a Spark group holds several
    keys (buckets) or the query has no key.  With one group per key a call holds a key's rows of one
    micro-batch, often a handful, and the columnar step's fixed cost per call (a few hundred µs of numpy calls)
    outweighs what it saves: the per-event engine streams there (``bench/stream_engine.py``)."""
    if not isinstance(spec, MatchSpec):
        return "per-event engine"
    why = match_stream.ineligible(spec)
    if why is None and not shared_groups:
        why = "one Spark group per key: set buckets to run a group's keys at once"
    if why is None and MASK not in schema.names:
        why = "no _mask column"
    if why is None and not isinstance(ts_type, _COLUMNAR_TS):
        why = f"ts of type {ts_type.simpleString()}"
    return COLUMNAR_STREAM if why is None else f"per-event engine ({why})"


#: :attr:`MatchOperator.stream_path` of a spec streamed through the columnar step
COLUMNAR_STREAM = "columnar micro-batches"

#: ts types the streaming columnar step reads (others, e.g. DECIMAL, stream through the per-event engine)
_COLUMNAR_TS = (ByteType, ShortType, IntegerType, LongType, FloatType, DoubleType, TimestampType, TimestampNTZType)


def _set_timeout(group: GroupState, due: float | None, raw: int, to_ms: Callable[[float], int]) -> None:
    """The group's event-time timeout for work due at watermark ``due`` (ts units; None or infinite: none): a
    timeout fires once the watermark is past it, so this one fires when it reaches ``due``."""
    if due is not None and math.isfinite(due):
        group.setTimeoutTimestamp(max(to_ms(due) - 1, raw, 1))


def _newest_of(newest: float | None, ts: np.ndarray) -> float | None:
    """:func:`_newest` of a numpy ts column."""
    if ts.dtype.kind == "f":
        ts = ts[~np.isnan(ts)]
    elif ts.dtype.kind == "O":
        return _newest(newest, ts.tolist())
    if not len(ts):
        return newest
    top = ts.max().item()
    return top if newest is None or top > newest else newest


def _newest(newest: float | None, ts: list) -> float | None:
    """The larger of ``newest`` and the newest valid value of ``ts`` (None and NaN skipped)."""
    valid = [t for t in ts if t is not None and t == t]
    if not valid:
        return newest
    top = max(valid)
    return top if newest is None or top > newest else newest


#: Version tag of a nested group state (:attr:`MatchOperator.nested`).
NESTED_STATE_VERSION = 1


def _having_of(spec: EngineSpec) -> Callable[[list[dict]], list[dict]] | None:
    """The HAVING filter of a trend spec, or of each query of a sharing context (by its ``query`` column)."""
    if isinstance(spec, TrendSpec):
        return having_filter(spec.having) if spec.having is not None else None
    if not isinstance(spec, SharedSpec):
        return None
    filters = {q.name: having_filter(q.having) for q in spec.queries if q.having is not None}
    if not filters:
        return None

    def each_query(rows: list[dict]) -> list[dict]:
        return [r for r in rows if r["query"] not in filters or filters[r["query"]]([r])]

    return each_query


def _dump_nested(frontier: float, stored: dict, held: tuple | None, panes: dict | None = None) -> bytes:
    """A Spark group's state: the watermark it has processed; per partition key, ``(wakeup, engine state)``;
    the rows after that watermark not given to an engine yet, as ``(column names, column lists)`` or None;
    with ``panes`` (a trend over rows with their arrival, :class:`WindowArrivals`), per key the newest arrival
    per pane (a state without them, written before, loads with none)."""
    state = (NESTED_STATE_VERSION, frontier, stored, held, *((panes,) if panes else ()))
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def _load_nested(data: bytes) -> tuple[float, dict, tuple | None, dict]:
    loaded = pickle.loads(data)
    if not (isinstance(loaded, tuple) and len(loaded) in (4, 5) and isinstance(loaded[0], int)):
        # one key's engine state where a group of several keys was expected: Spark found the state of a key
        # under a bucket number (an integer key, from a checkpoint made with one Spark group per key)
        raise CEPError("a Spark group's state is one key's, not a bucket's: the checkpoint was made with one Spark "
                       "group per key; resume it with that grouping (buckets=0, or give apply() the checkpoint: "
                       "apply(df, checkpoint=DIR)) or start a new checkpoint")
    version, *rest = loaded
    if version != NESTED_STATE_VERSION:
        raise CEPError(f"group state version {version} is not supported (expected {NESTED_STATE_VERSION})")
    frontier, stored, held, *panes = rest
    return frontier, stored, held, panes[0] if panes else {}


#: What starts a one-key group's state that holds its trend panes beside the engine state (:func:`_dump_keyed`); no
#: pickle starts so (a pickle starts with its protocol's opcode, 0x80), so a state written before loads as it was.
_KEYED_PANES = b"sparkcep-panes:"


def _dump_keyed(state: bytes, panes: dict) -> bytes:
    """A one-key Spark group's state: its engine state, and with ``panes`` (a trend over rows with their arrival,
    :class:`WindowArrivals`, under the key ``()``) the newest arrival per pane of its events, after
    :data:`_KEYED_PANES`; without panes the engine state alone, as before they were kept."""
    if not panes:
        return state
    return _KEYED_PANES + pickle.dumps((state, panes), protocol=pickle.HIGHEST_PROTOCOL)


def _load_keyed(data: bytes) -> tuple[bytes, dict]:
    """Inverse of :func:`_dump_keyed`: ``(engine state, panes)``; a state without panes (or written before they were
    kept) has none."""
    if not data.startswith(_KEYED_PANES):
        return data, {}
    return pickle.loads(memoryview(data)[len(_KEYED_PANES):])


def _pane_width(spec: TrendSpec) -> float:
    """The width of the panes :class:`WindowArrivals` keeps: windows ``[k·slide, k·slide + window)`` are unions
    of panes ``[p·g, (p + 1)·g)`` for ``g`` the greatest common divisor of window and slide (integral ones;
    else the slide, and a window's arrival may then count a pane's events just outside it)."""
    window, slide = spec.window, spec.slide or spec.window
    if float(window).is_integer() and float(slide).is_integer() and slide > 0:
        return float(math.gcd(int(window), int(slide)))
    return float(slide)


class WindowArrivals:
    """The arrival of a trend window's result (streaming, rows with :data:`~sparkcep.spark.validate.ARRIVAL_COL`):
    the newest arrival among its key's events in the window that went to the engine, whichever micro-batch
    they came in; a result merged over keys (GROUP BY coarser than the key) has the newest of its keys'.  Not
    the newest arrival among the rows the Spark group got in the micro-batch that emits it, which can be a later
    file's event past the window (the one whose time closed it).  Kept per key as the newest arrival per pane
    (:func:`_pane_width`) in the group's state, ``panes``, pruned once no open window covers them.  A sharing
    context (:class:`~sparkcep.ir.sharing.SharedSpec`) keeps them per event type too (slots ``(type, pane)``):
    a query's row gets the newest arrival of the window's events of its own types."""

    def __init__(self, spec: TrendSpec | SharedSpec, width: float, panes: dict):
        self.window, self.slide, self.width, self.panes = spec.window, spec.slide or spec.window, width, panes
        #: a sharing context: per query, the event types of its segments (None: a trend query, slots are panes)
        self.types = None
        if isinstance(spec, SharedSpec):
            segments = dict(spec.segments)
            self.types = {q.name: frozenset(t for s in q.segments for t in segments[s]) for q in spec.queries}

    def add(self, key: Any, events: list[dict]) -> None:
        """Count ``events`` (the key's events going to the engine) in their panes."""
        own, width, newest, typed = self.panes.setdefault(key, {}), self.width, -math.inf, self.types is not None
        for e in events:
            ts, arrived = e.get("ts"), e.get(ARRIVAL_COL)
            if ts is None or arrived is None or ts != ts or arrived != arrived:
                continue
            p = (e.get("type"), int(ts // width)) if typed else int(ts // width)
            if arrived > own.get(p, newest):
                own[p] = arrived

    def stamp(self, key: Any, rows: list[dict]) -> list[dict]:
        """``rows`` (the key's window results) with :data:`~sparkcep.spark.validate.RESULT_ARRIVAL`: the newest
        arrival of the panes of their window (None if none)."""
        own = self.panes.get(key, {})
        for row in rows:
            first, end = math.floor(row["window_start"] / self.width), math.ceil(row["window_end"] / self.width)
            if self.types is not None:  # the panes of the query's own types
                mine = self.types[row["query"]]
                arrived = [a for (t, p), a in own.items() if t in mine and first <= p < end]
            else:
                arrived = [own[p] for p in range(first, end) if p in own] if end - first <= len(own) else [
                    a for p, a in own.items() if first <= p < end]
            row[RESULT_ARRIVAL] = int(max(arrived)) if arrived else None
        return rows

    def prune(self, key: Any, watermark: float) -> None:
        """Forget the panes no window still open at ``watermark`` covers: the last window holding pane ``p``
        starts at the last multiple of the slide at or before it, and every window ending at or before the
        watermark has been emitted."""
        own = self.panes.get(key)
        if own is None:
            return
        typed = self.types is not None
        for slot in [slot for slot in own if math.floor((slot[1] if typed else slot) * self.width / self.slide)
                     * self.slide + self.window <= watermark]:
            del own[slot]
        if not own:
            del self.panes[key]

    @staticmethod
    def merge(spec: TrendSpec | SharedSpec, rows: list[dict], merged: list[dict]) -> None:
        """The arrival of each row of ``merged`` (``merge_rows`` of ``rows``): the newest of its rows'."""
        def key(row: dict) -> tuple:  # (a sharing context's rows: per query)
            return row.get("query"), row["window_start"], row["window_end"], *(row[g] for g in spec.group_by)

        newest: dict[tuple, int] = {}
        for row in rows:
            if row.get(RESULT_ARRIVAL) is not None:
                k = key(row)
                newest[k] = max(newest.get(k, row[RESULT_ARRIVAL]), row[RESULT_ARRIVAL])
        for row in merged:
            row[RESULT_ARRIVAL] = newest.get(key(row))


def stamped_spec(spec: MatchSpec) -> MatchSpec:
    """``spec`` with one more, hidden, result column :data:`~sparkcep.spark.validate.RESULT_ARRIVAL`: the newest
    arrival (:data:`~sparkcep.spark.validate.ARRIVAL_COL`, carried in the events as one more attribute) of the
    events each match binds, i.e. its last event's in arrival order (a timed-out partial match: of those it bound).
    The per-event engine computes it like any result column; the operator's ``output_schema`` leaves it out."""
    newest = Func(NEWEST, (Attr(None, ARRIVAL_COL),))
    return replace(spec, outputs=(*spec.outputs, OutputColumn(RESULT_ARRIVAL, newest)))


#: ``buckets`` asking for one Spark group per key (the grouping before buckets became the default of a streaming
#: match query; a checkpoint made so resumes with it).
PER_KEY = 0


def restored_masks(table: pa.Table) -> pa.Table:
    """``table`` (a partition of time ranges) with the ``_mask`` of each copy a range holds without owning it, sent
    negated (:func:`ranges.sent_mask`), restored (``~mask``: the first component's bit cleared)."""
    at = table.column_names.index(MASK)
    mask = table.column(at)
    return table.set_column(at, MASK, pc.if_else(pc.less(mask, 0), pc.bit_wise_not(mask), mask))


def in_input_order(table: pa.Table) -> pa.Table:
    """``table`` in input order (a stable sort by ``_arrival``) when it carries it: under a contiguity strategy
    the engine numbers events in input order; else ``table`` as it is."""
    if ARRIVAL in table.column_names and table.num_rows:
        return table.take(pc.sort_indices(table, [(ARRIVAL, "ascending")]))  # a stable sort
    return table


def bucket_column(buckets: int) -> str:
    """The grouping column of ``buckets`` buckets, named with the count (``_sparkcep_bucket_of_4``): a streaming
    checkpoint's state schema then records the grouping it was made with (:func:`checkpoint_grouping`)."""
    return f"{BUCKET}_of_{buckets}"


def default_buckets(spark) -> int:
    """The buckets of a streaming match query that the columnar step streams (:func:`stream_buckets`): the
    session's ``spark.sql.shuffle.partitions``, the partitions of the stateful operator (Spark keeps the
    checkpoint's count on a restart), so about one bucket per task of a micro-batch."""
    return max(1, int(spark.conf.get("spark.sql.shuffle.partitions")))


#: :func:`checkpoint_grouping` of a checkpoint grouped by buckets whose count its state schema does not record
#: (made with ``buckets=N`` before the grouping column was named with its count).
UNRECORDED = -1


def checkpoint_grouping(spark, checkpoint: str) -> int | None:
    """The grouping the streaming checkpoint ``checkpoint`` was made with, read from the key schema Spark
    stores beside the state of each stateful operator (``state/<operator>/0/_metadata/schema``): the bucket
    count (:func:`bucket_column`), :data:`PER_KEY` (keyed by the query's columns), :data:`UNRECORDED`, or None
    when it holds no state yet (a new checkpoint: any grouping may start it)."""
    from sparkcep.spark.sinks import _jvm_fs

    jvm, root, fs = _jvm_fs(spark, checkpoint.rstrip("/") + "/state")
    if not fs.exists(root):
        return None
    fields: list[str] = []
    for status in fs.listStatus(root):
        schema = jvm.org.apache.hadoop.fs.Path(status.getPath(), "0/_metadata/schema")
        if fs.exists(schema):
            stream = fs.open(schema)
            try:
                fields.extend(_key_fields(bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream))))
            finally:
                stream.close()
    if not fields:
        return None
    for name in fields:
        if name.startswith(f"{BUCKET}_of_") and name[len(BUCKET) + 4:].isdigit():
            return int(name[len(BUCKET) + 4:])
    return UNRECORDED if BUCKET in fields else PER_KEY


def _key_fields(data: bytes) -> list[str]:
    """The field names of the key schema (the first struct's JSON) of a state schema file."""
    text = data.decode("utf-8", errors="replace")
    start = text.find("{")
    while start >= 0:
        try:
            schema, _ = json.JSONDecoder().raw_decode(text, start)
        except ValueError:
            schema = None
        if isinstance(schema, dict) and isinstance(schema.get("fields"), list):
            return [f.get("name", "") for f in schema["fields"] if isinstance(f, dict)]
        start = text.find("{", start + 1)
    return []


def stream_buckets(op: MatchOperator, spark, buckets: int | None = None, checkpoint: str | None = None) -> int | None:
    """The buckets a streaming ``op`` groups by, or None (one Spark group per key).  ``buckets`` as given
    (:data:`PER_KEY`: one group per key); None: the grouping ``checkpoint`` was made with if it holds state
    (:func:`checkpoint_grouping`), else :func:`default_buckets` where the columnar step would stream
    (:attr:`MatchOperator.bucketable`), else one group per key.  A grouping other than the checkpoint's is
    refused: the state of a key is found by its group."""
    if buckets is not None and buckets < 0:
        raise CEPError(f"buckets must be 0 (one Spark group per key) or a positive number, got {buckets}")
    recorded = checkpoint_grouping(spark, checkpoint) if checkpoint else None
    if recorded == UNRECORDED and buckets is None:
        raise CEPError(f"the checkpoint {checkpoint} groups keys into buckets without recording how many: "
                       "give the same buckets it was made with (buckets=N)")
    if buckets is None:
        if recorded is not None:
            return recorded or None
        return default_buckets(spark) if op.bucketable else None
    if recorded not in (None, UNRECORDED, buckets):
        def what(n: int) -> str:
            return "one Spark group per key (buckets=0)" if n == PER_KEY else f"{n} buckets (buckets={n})"

        raise CEPError(f"the checkpoint {checkpoint} was made with {what(recorded)}, not {what(buckets)}: the "
                       "grouping is part of a checkpoint; resume with its grouping or start a new checkpoint")
    return buckets or None


def stream_udf(spec_json: SpecLike, input_schema: StructType, **options: Any) -> Callable[
        [Any, Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]:
    """``MatchOperator(spec_json, input_schema, **options).stream_function()``."""
    return MatchOperator(spec_json, input_schema, **options).stream_function()


def grouped(df: DataFrame, key) -> Any:
    """``df.groupBy(*key)``; without a key, one group by a constant column (``applyInPandasWithState``
    accepts neither an empty grouping nor a grouping expression)."""
    if key:
        return df.groupBy(*key)
    return df.withColumn(SINGLE_GROUP, F.lit(0)).groupBy(SINGLE_GROUP)


def prefilter_of(spec: EngineSpec) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None:
    """The spec's row prefilter (:func:`sparkcep.runtime_udfs.match.prefilter.prefilter`: ``keep = f(group_ids,
    ts, mask)`` drops rows that cannot be in any match, for skip_till_any_match specs), or None: not a match
    spec or not eligible."""
    # a timed-out partial match is made of rows that are in no match: nothing may be dropped for it
    return prefilter(spec) if isinstance(spec, MatchSpec) and not isinstance(spec, TimeoutSpec) else None
