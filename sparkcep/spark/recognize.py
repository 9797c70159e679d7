"""The Spark layer of ``MATCH_RECOGNIZE``: thin moves of rows into and out of the pure engine
:mod:`sparkcep.runtime_udfs.recognize` (batch and Structured Streaming).

The face (:func:`sparkcep.sql_api.apply_recognize`, which also builds the engine spec, a compiler step this
layer may not import) chains:

* :func:`project`: the input with the per-row Spark SQL sub-expressions of DEFINE/MEASURES
  (:class:`~sparkcep.ir.recognize.RowExpr`, computed by Spark as columns before the shuffle) and the hidden
  event-time column :data:`TS` (``__ts``: epoch microseconds of a TIMESTAMP/TIMESTAMP_NTZ/DATE time column,
  the value itself for a numeric one; the time column is the first ORDER BY item);
* :func:`input_schema`: the projected columns and their Spark types (what ``build_spec`` reads);
* :func:`run_recognize`: the engine's result, typed by ``spec.output_types``:

  - batch (:func:`batch_recognize`): the columns the engine reads (not ``__ts``: Python derives it from the
    time column) repartitioned by the PARTITION BY columns (one Spark partition when there are none), sorted
    within the Spark partition by (partition columns, ORDER BY, the remaining ``spec.columns`` ascending with
    NULLs first), then ONE ``mapInArrow`` pass that cuts the sorted rows where the partition key changes and
    gives runs of whole row pattern partitions to the columnar kernel (``kernel.run_chunk``: Arrow columns in,
    an Arrow table out) when it takes the spec, else to the row engine, each partition's end known
    (``run_partition``; a partition larger than :data:`CHUNK_ROWS` through ``step`` in chunks and
    ``advance(final=True)``).  When the partition keys are ones Python tells apart as Spark does
    (:func:`streamable`), the partitions run as the Arrow batches arrive (the rows of the key a batch ends with
    held until a batch starts with another key), so the worker's work overlaps Spark's conversion of the
    next batches instead of following the task's last one;
  - streaming (:func:`stream_recognize`): an event-time watermark on the time column, ``groupBy(PARTITION
    BY).applyInPandasWithState``: each key's rows wait in the group state until event time is settled (their
    event time is older than the watermark: a later row older than it is late, so no row ordered before them
    can still come), then go to the engine's ``step`` in the batch order, and ``advance`` to the watermark
    emits the matches that are decided.  The group state holds the engine state as JSON (``state_to_json``)
    and the waiting rows;

* :func:`apply_outer`: the result registered as a session-local temporary view (``result_view`` with a
  random suffix per call) and the outer query (SELECT list, WHERE, GROUP BY, ORDER BY on the matches) run on
  it by ``spark.sql``.

Rows: a NULL partition key is a partition of its own (as Spark groups NULLs).  A row whose time column is
NULL is ordered as ORDER BY says in a batch (NULLS FIRST by default for ascending); a stream cannot place it
in event time and drops it.  A row older than the watermark is late (:mod:`sparkcep.spark.late`; one at the
watermark's very time is on time) when its key's rows up to that watermark went to the engine already (the
watermark of the key's last micro-batch): the state function counts it and, with ``late_rows``, outputs it
on the late side channel (Spark itself drops none: the watermark's column reaches the function nulled).  Values
reach the engine as Arrow gives them to Python (TIMESTAMP as time-zone aware datetimes, DECIMAL as Decimal,
...); in a stream pandas cannot tell a double NaN from NULL, both are NULL there.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import pickle
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    IntegralType,
    MapType,
    NumericType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)
from sqlglot import exp

from sparkcep.ir.ast import walk
from sparkcep.ir.errors import CEPError, CEPSemanticError
from sparkcep.ir.outer import outer_sql as outer_text
from sparkcep.ir.outer import parse_outer, renamed_view
from sparkcep.ir.recognize import RecognizeSpec, RowExpr
from sparkcep.runtime_udfs.event_time import EventTimeScale
from sparkcep.spark.adapters import event_time_of, shuffle_partitions
from sparkcep.spark.arrow import _arrow_array, _rows_of, _session_timezone, by_id, gathered
from sparkcep.spark.heap import freeze_worker_heap, freezing
from sparkcep.spark.late import KIND, LATE, REASON, RECORD, RESULT, with_side_columns
from sparkcep.spark.operator import grouped, stamping_arrival
from sparkcep.spark.schema import EVENT_TIME
from sparkcep.spark.schema import watermark_delay as delay_of
from sparkcep.spark.validate import ARRIVAL_COL, RESULT_ARRIVAL, quoted

__all__ = ["TS", "apply_outer", "batch_recognize", "input_schema", "project", "row_exprs", "run_recognize",
           "stream_recognize"]

#: The hidden event-time column the engine reads (``RecognizeSpec.time_column``).
TS = "__ts"

#: Input column names taken by the hidden columns (``__ts``, the front end's RowExpr columns ``__rx<n>``).
_RESERVED = re.compile(r"__ts|__rx\d+", re.IGNORECASE)

#: A stream's event time in microseconds, in the watermark's units (offset included for numeric ts).
_ET = "__sparkcep_et"

#: The group state of a stream: one binary column (see :func:`_dump_state`).
STATE_SCHEMA = StructType([StructField("recognize_state", BinaryType(), False)])

#: Version tag of the group state.
STATE_VERSION = 1


def _engine():
    from sparkcep.runtime_udfs import recognize as engine

    return engine


# ----------------------------------------------------------------------------------------------- projection


def row_exprs(spec_or_q: Any) -> list[RowExpr]:
    """The :class:`RowExpr` nodes of DEFINE and MEASURES (a ``Recognize`` or a ``RecognizeSpec``), one per
    column, in order of appearance."""
    roots = [e for _, e in spec_or_q.defines] + [m.expr for m in spec_or_q.measures]
    found: dict[str, RowExpr] = {}
    for root in roots:
        for node in walk(root):
            if isinstance(node, RowExpr) and node.column not in found:
                found[node.column] = node
    return list(found.values())


def time_column(spec_or_q: Any) -> str | None:
    """The time column: the first ORDER BY item, or None without ORDER BY."""
    return spec_or_q.order_by[0].column if spec_or_q.order_by else None


def _time_field(df: DataFrame, column: str | None) -> tuple[str | None, str | None]:
    """``(name, kind)`` of the time ``column`` in ``df`` (Spark resolves names case-insensitively): kind
    ``timestamp``, ``ntz``, ``date``, ``number``, or None (no such column, or a type without event time)."""
    if column is not None and column not in df.columns:
        column = next((c for c in df.columns if c.lower() == column.lower()), None)
    if column is None:
        return None, None
    dtype = df.schema[column].dataType
    for types, kind in ((TimestampType, "timestamp"), (TimestampNTZType, "ntz"), (DateType, "date"),
                        (NumericType, "number")):
        if isinstance(dtype, types):
            return column, kind
    return column, None


def _ts_of(df: DataFrame, column: str | None) -> exp.Expression:
    """The ``__ts`` value of ``column`` (a sqlglot tree): epoch microseconds for a time, the number itself, else
    NULL (the batch path derives the same values in Python from the time column: :func:`_arrow_ts`)."""
    column, kind = _time_field(df, column)
    if kind is None:
        return exp.cast(exp.null(), "DOUBLE")
    col = exp.column(column, quoted=True)
    if kind == "timestamp":
        return exp.Anonymous(this="unix_micros", expressions=[col])
    if kind == "ntz":  # wall-clock micros since 1970 (no session zone, no DST jump)
        epoch = exp.cast(exp.Literal.string("1970-01-01 00:00:00"), "TIMESTAMP_NTZ")
        return exp.Anonymous(this="timestampdiff", expressions=[exp.var("MICROSECOND"), epoch, col])
    if kind == "date":
        days = exp.cast(exp.Anonymous(this="unix_date", expressions=[col]), "BIGINT")
        return exp.Mul(this=days, expression=exp.Literal.number(86_400_000_000))
    return col


def _arrow_ts(table: pa.Table, column: str | None, kind: str | None) -> pa.ChunkedArray:
    """The ``__ts`` column of a batch partition computed from its time ``column`` of ``kind``
    (:func:`_time_field`), equal to what :func:`_ts_of` makes in Spark: Arrow holds a TIMESTAMP as UTC
    microseconds, a TIMESTAMP_NTZ as wall-clock microseconds, a DATE as days."""
    if kind is None:
        return pa.chunked_array([pa.nulls(table.num_rows, pa.float64())])
    col = table.column(column)
    if kind in ("timestamp", "ntz"):
        return pc.cast(col.cast(pa.timestamp("us", tz=col.type.tz)), pa.int64())
    if kind == "date":
        return pc.multiply(pc.cast(pc.cast(col, pa.int32()), pa.int64()), 86_400_000_000)
    return col


#: PySpark's loggers that print an analysis error with its Java stack on stderr when it is raised.
_ANALYSIS_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


@contextlib.contextmanager
def quiet_analysis() -> Iterator[None]:
    """PySpark's query-context loggers off while Spark analyses something whose error becomes a
    :class:`CEPError` (the user sees that one message, not a logged Java stack before it)."""
    from pyspark.logger import PySparkLogger

    # PySpark's own logger class: one made by logging.getLogger first would fail on PySpark's extra fields
    loggers = [PySparkLogger.getLogger(name) for name in _ANALYSIS_LOGGERS]
    before = [lg.disabled for lg in loggers]
    for lg in loggers:
        lg.disabled = True
    try:
        yield
    finally:
        for lg, was in zip(loggers, before, strict=True):
            lg.disabled = was


def project(df: DataFrame, spec_or_q: Any, ts_unit: str | None = None) -> DataFrame:
    """``df`` with the RowExpr columns (Spark SQL generated by the front end from sqlglot trees) and
    :data:`TS`.  A RowExpr Spark cannot analyse is a :class:`CEPSemanticError` at its position.
    ``ts_unit`` is not needed here (``__ts`` keeps the ts units; the spec's WITHIN is in them)."""
    from pyspark.errors import AnalysisException, ParseException

    for c in df.columns:
        if _RESERVED.fullmatch(c):
            raise CEPSemanticError(f"the input has a column named {c}: names __ts and __rx<n> are reserved for "
                                   "the columns MATCH_RECOGNIZE adds (rename it)")
    exprs = row_exprs(spec_or_q)
    # df[name] and F.expr, not F.col: PySpark sends each Column function's call site to the JVM (a few round
    # trips each), and planning a statement is part of its time
    cols = [df[quoted(c)] for c in df.columns]
    ts = exp.alias_(_ts_of(df, time_column(spec_or_q)), TS, quoted=True).sql(dialect="spark")
    with quiet_analysis():
        for r in exprs:
            try:
                cols.append(F.expr(r.sql).alias(r.column))
            except ParseException as err:
                raise _expr_error(r, err, spec_or_q) from None
        cols.append(F.expr(ts))
        try:
            return df.select(*cols)
        except AnalysisException as err:
            for r in exprs:  # which one: the first that does not analyse alone
                try:
                    df.select(F.expr(r.sql))
                except AnalysisException as one:
                    raise _expr_error(r, one, spec_or_q) from None
            raise CEPSemanticError(f"Spark cannot read the input: {_first_line(err)}") from None


def _first_line(err: Exception) -> str:
    text = str(getattr(err, "getMessage", lambda: err)() or err)
    return text.strip().splitlines()[0] if text.strip() else type(err).__name__


def _expr_error(r: RowExpr, err: Exception, spec_or_q: Any) -> CEPSemanticError:
    return CEPSemanticError(f"Spark cannot compute {r.sql}: {_first_line(err)}", r.span,
                            getattr(spec_or_q, "text", None) or None)


def input_schema(projected: DataFrame) -> dict[str, str]:
    """Every projected column but :data:`TS` (and a stream's hidden arrival), in order, with its Spark type
    (``simpleString``)."""
    return {f.name: f.dataType.simpleString() for f in projected.schema.fields if f.name not in (TS, ARRIVAL_COL)}


def output_struct(spec: RecognizeSpec) -> StructType:
    """The result's Spark schema: ``spec.output`` typed by ``spec.output_types`` (STRING where not given)."""
    types = list(spec.output_types) or ["string"] * len(spec.output)
    if len(types) != len(spec.output):
        raise CEPError(f"the spec has {len(spec.output)} output columns but {len(types)} output types")
    return StructType([StructField(name, _data_type(text), True) for name, text in zip(spec.output, types,
                                                                                        strict=True)])


@functools.lru_cache(maxsize=256)
def _data_type(text: str) -> DataType:
    """The Spark type of a type name (``DataType.fromDDL``: a JVM round trip, once per name and process)."""
    return DataType.fromDDL(text)


# ----------------------------------------------------------------------------------------------- Python values


def _to_table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """The engine's output rows as an Arrow table of ``schema``; a value that does not fit its column's type
    is NULL (a data error never kills the job)."""
    arrays = []
    for f in schema:
        values = [r.get(f.name) for r in rows]
        try:
            arrays.append(_arrow_array(values, f.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, TypeError,
                ValueError):
            arrays.append(pa.array([_one(v, f.type) for v in values], type=f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _one(value: Any, dtype: pa.DataType) -> Any:
    try:
        return _arrow_array([value], dtype)[0].as_py()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, TypeError,
            ValueError):
        return None


def _arrow_schema(struct: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(struct, timezone="UTC", prefers_large_types=False)


def _arrow_rows(table: pa.Table, names: list[str]) -> list[dict]:
    """The rows of ``table`` (its columns ``names``) as dicts of Python values."""
    data = [table.column(c).to_pylist() for c in names]
    return _rows_of(tuple(names))(data) if names else [{} for _ in range(table.num_rows)]


def _pandas_values(s: pd.Series, dtype: DataType, timezone: str) -> list:
    """The Python values of a pandas column PySpark made from a Spark column of type ``dtype``: NULL (NaN, NaT,
    None) as None, integers as int, TIMESTAMP (naive wall-clock in the session zone) as aware UTC datetimes."""
    if isinstance(dtype, TimestampType):
        if s.dt.tz is None:
            s = s.dt.tz_localize(timezone, ambiguous=False, nonexistent="shift_forward")
        s = s.dt.tz_convert("UTC")
        return [None if pd.isna(v) else v.to_pydatetime() for v in s]
    if isinstance(dtype, TimestampNTZType):
        return [None if pd.isna(v) else v.to_pydatetime() for v in s]
    if isinstance(dtype, IntegralType):
        return [None if v is None or v != v else int(v) for v in s.tolist()]
    out = []
    for v in s.tolist():
        if v is None or (isinstance(v, float) and v != v) or v is pd.NaT:
            out.append(None)
        elif isinstance(v, np.ndarray):
            out.append(v.tolist())
        else:
            out.append(v)
    return out


# ----------------------------------------------------------------------------------------------- batch


def sort_order(schema: StructType, spec: RecognizeSpec) -> list[tuple[str, bool, bool]]:
    """Spark's sort within a partition, ``(column, ascending, nulls first)``: partition columns, ORDER BY, then
    the tiebreak (the remaining ``spec.columns``, ascending, NULLs first); columns Spark cannot order (maps)
    are left out.  The one order of the batch path: its sort and the window of PREV/NEXT columns."""
    orderable = {f.name for f in schema.fields if not isinstance(f.dataType, MapType)
                 and "map<" not in f.dataType.simpleString()}
    out: list[tuple[str, bool, bool]] = [(c, True, True) for c in spec.partition_by]
    seen = set(spec.partition_by)
    for item in spec.order_by:
        out.append((item.column, item.ascending, item.ascending if item.nulls_first is None else item.nulls_first))
        seen.add(item.column)
    for c in spec.columns:
        if c not in seen and c in orderable:
            out.append((c, True, True))
            seen.add(c)
    return out


def _sort_columns(df: DataFrame, spec: RecognizeSpec) -> list:
    """:func:`sort_order` as Spark columns."""
    out = []
    for c, ascending, nulls_first in sort_order(df.schema, spec):
        col = F.col(quoted(c))
        if ascending:
            out.append(col.asc_nulls_first() if nulls_first else col.asc_nulls_last())
        else:
            out.append(col.desc_nulls_first() if nulls_first else col.desc_nulls_last())
    return out


def _ordered(order: list[tuple[str, bool, bool]]) -> list[exp.Ordered]:
    return [exp.Ordered(this=exp.column(c, quoted=True), desc=not ascending, nulls_first=nulls_first)
            for c, ascending, nulls_first in order]


def _sorted(df: DataFrame, columns: list[str], order: list[tuple[str, bool, bool]],
            select: list[exp.Expression] | None = None, windows: list[exp.Expression] = ()) -> DataFrame:
    """``df``'s ``columns`` sorted within each Spark partition by ``order`` (``SORT BY``), with the ``windows``
    columns if any, then ``select`` over them if given: one Spark SQL query over a temporary view of ``df`` (a
    name of its own per call, dropped once analysed).  A few JVM round trips, where ``select`` and
    ``sortWithinPartitions`` through PySpark's Column functions cost a few per column (each sends its call
    site to the JVM), and planning is part of a statement's time."""
    if select is not None and not select:  # no column at all (only the rows count): SQL has no empty SELECT
        return _sorted(df, columns, order, None, windows).select()
    view = f"__sparkcep_recognize_{uuid.uuid4().hex}"
    names = [exp.column(c, quoted=True) for c in columns]
    query = exp.select(*names).from_(exp.to_identifier(view)).sort_by(*_ordered(order))
    if windows:
        query = exp.select(*names, *windows).from_(query.subquery("sorted"))
    if select is not None:
        query = exp.select(*select).from_(query.subquery("rows"))
    df.createOrReplaceTempView(view)
    try:
        with quiet_analysis():
            return df.sparkSession.sql(query.sql(dialect="spark"))
    finally:
        df.sparkSession.catalog.dropTempView(view)


def _shifted(column: str, offset: int, partition_by: tuple[str, ...],
             order: list[tuple[str, bool, bool]]) -> exp.Expression:
    """``column`` ``offset`` rows away in the partition: ``lag``/``lead`` over :func:`sort_order` (the order of
    the sort, so the rows come to the window in its order; NULL beyond the partition)."""
    fn = exp.Anonymous(this="lag" if offset < 0 else "lead",
                       expressions=[exp.column(column, quoted=True), exp.Literal.number(abs(offset))])
    return exp.Window(this=fn, partition_by=[exp.column(c, quoted=True) for c in partition_by],
                      order=exp.Order(expressions=_ordered(order[len(partition_by):])))


def _worker_select(worker: Any, columns: list[str], order: list[tuple[str, bool, bool]]) -> tuple[
        list[exp.Expression], list[exp.Expression]]:
    """``(select, windows)``: what the worker reads (``worker.spec.columns``: the columns it keeps, the DEFINEs of
    ``worker.computed`` packed into the one INT column ``worker.mask``) and the ``worker.shifted`` columns these
    read (``lag``/``lead`` windows)."""
    spec = worker.spec
    windows = [exp.alias_(_shifted(column, offset, spec.partition_by, order), name, quoted=True)
               for name, column, offset in worker.shifted]
    select: list[exp.Expression] = [exp.column(c, quoted=True) for c in spec.columns if c in columns]
    if worker.mask is not None:
        name, sql = worker.mask
        select.append(exp.alias_(sqlglot.parse_one(sql, read="spark"), name, quoted=True))
    return select, windows


def _engine_columns(df: DataFrame, spec: RecognizeSpec) -> list[str]:
    """The columns the engine reads (``spec.columns`` and :data:`TS`) that ``df`` has, in spec order."""
    return [c for c in dict.fromkeys([*spec.columns, TS]) if c in df.columns]


def _partition_ids(table: pa.Table, columns: tuple[str, ...]) -> np.ndarray | None:
    """Ids of the rows' partition key, equal where the keys are equal (NULL a key of its own), or None without
    PARTITION BY: one integer column without NULLs is its own ids (no dictionary to build), else dense ids."""
    present = [c for c in columns if c in table.column_names]
    if len(present) == 1 and pa.types.is_integer(table.column(present[0]).type) \
            and table.column(present[0]).null_count == 0:
        return table.column(present[0]).to_numpy().astype(np.int64, copy=False)
    ids: np.ndarray | None = None
    for c in columns:
        if c not in table.column_names:
            continue
        encoded = pc.dictionary_encode(table.column(c), null_encoding="encode")
        if isinstance(encoded, pa.ChunkedArray):
            encoded = encoded.combine_chunks() if encoded.num_chunks != 1 else encoded.chunk(0)
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        if ids is None:
            ids = codes
        else:
            ids = np.unique(ids * len(encoded.dictionary) + codes, return_inverse=True)[1].astype(np.int64)
    return ids


def _partitions(table: pa.Table, ids: np.ndarray | None) -> tuple[pa.Table, list[int]]:
    """``(table, bounds)``: the rows of each partition key together (``bounds[k]:bounds[k + 1]``).  Spark's sort
    puts the partition columns first, so each key is one run already and the table is kept as it is; a key in
    several runs (a value Spark and Arrow group differently) is gathered by :func:`by_id`."""
    n = table.num_rows
    if ids is None or n < 2:
        return table, [0, n]
    cuts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    heads = ids[np.concatenate(([0], cuts))]  # the key of each run: distinct when each key is one run
    if len(np.unique(heads)) == len(heads):
        return table, [0, *cuts.tolist(), n]
    return by_id(table, ids)


#: Rows converted to Python dicts at a time in a batch partition (and results converted back to Arrow at once).
CHUNK_ROWS = 1 << 16

#: Rows of whole partitions given to the columnar kernel at a time (a larger partition goes alone).
KERNEL_ROWS = 1 << 20


def _kernel():
    from sparkcep.runtime_udfs.recognize import kernel

    return kernel


def kernel_runs(spec: RecognizeSpec) -> bool:
    """Whether the batch path gives ``spec``'s partitions to the columnar kernel
    (:mod:`sparkcep.runtime_udfs.recognize.kernel`; explain says why not)."""
    return _kernel().eligibility(spec).ok


def _runs(parts: list[tuple[int, int]], limit: int, j: int = 0) -> Iterator[tuple[int, int]]:
    """``(j, k)``: consecutive ``parts[j:k]`` (from ``parts[j]`` on) of at most ``limit`` rows together (at
    least one part each)."""
    while j < len(parts):
        k = j + 1
        while k < len(parts) and parts[k][1] - parts[j][0] <= limit:
            k += 1
        yield j, k
        j = k


def _typed(table: pa.Table, schema: pa.Schema) -> pa.Table | None:
    """The kernel's result (``spec.output`` columns in order, natural Arrow types) cast to the output
    ``schema``, or None when a value does not fit (the row engine then runs the chunk: a NULL per bad value)."""
    try:
        return pa.Table.from_arrays([table.column(i).cast(f.type) for i, f in enumerate(schema)], schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        return None


#: The Arrow type of a PARTITION BY column packed into the mask (``WorkerSpec.key``), by its Spark type.
_KEY_TYPES = {"int": pa.int32(), "smallint": pa.int16(), "tinyint": pa.int8()}


def _unpacked_key(table: pa.Table, mask: str, dtype: pa.DataType, shift: int) -> pa.Array:
    """The partition key packed into the ``mask`` column's high bits (``sparkcep.compiler.recognize.defines``:
    bit ``shift - 1`` set for NULL, bits from ``shift`` on the key plus 2^31) as an Arrow array of ``dtype``."""
    m = pc.fill_null(table.column(mask), 0).to_numpy().astype(np.int64, copy=False)
    null = (m >> (shift - 1)) & 1 == 1
    key = (m >> shift) - (1 << 31)
    return pa.array(np.where(null, 0, key), mask=null if null.any() else None).cast(dtype)


#: Rows of whole partitions a streamed batch partition gathers before running them (:func:`whole_partitions`).
STREAM_ROWS = 1 << 17


def streamable(schema: StructType, spec: RecognizeSpec) -> bool:
    """Whether a batch partition may run its row pattern partitions as its Arrow batches arrive: there are
    PARTITION BY columns, each of a type whose values Python tells equal exactly when Spark groups them
    (integers, booleans, dates, times, decimals, binary, strings of the binary collation; not floats, whose
    ``-0.0``/``NaN`` Spark normalizes, nor a collation that ignores case), so each key is the one run Spark's
    sort made of it and a batch starting with another key than the last one ended with ends that partition."""
    exact = (IntegralType, BooleanType, DateType, TimestampType, TimestampNTZType, DecimalType, BinaryType)
    names = set(schema.names)

    def ok(dt: DataType) -> bool:
        return isinstance(dt, exact) or (isinstance(dt, StringType)
                                         and getattr(dt, "collation", "UTF8_BINARY") == "UTF8_BINARY")

    return bool(spec.partition_by) and all(c in names and ok(schema[c].dataType) for c in spec.partition_by)


def _key_at(table: pa.Table, columns: tuple[str, ...], i: int) -> tuple:
    """Row ``i``'s partition key (the ``columns`` ``table`` has, as :func:`_partition_ids` reads them)."""
    return tuple(table.column(c)[i].as_py() for c in columns if c in table.column_names)


def whole_partitions(tables: Iterator[pa.Table], columns: tuple[str, ...], rows: int) -> Iterator[pa.Table]:
    """The ``tables`` of a batch partition (sorted by the partition ``columns`` first, each key one run) regrouped
    as they arrive into tables of whole partitions of at least ``rows`` rows each (the last one may have fewer):
    the rows of the key a table ends with are held until a table starts with another key, or the input ends."""
    done: list[pa.Table] = []  # whole partitions not yet given
    held: list[pa.Table] = []  # the last key's rows so far
    last: tuple | None = None
    for t in tables:
        if held and _key_at(t, columns, 0) != last:
            done, held = done + held, []
        ids = _partition_ids(t, columns)
        cuts = np.flatnonzero(ids[1:] != ids[:-1]) if ids is not None else ()
        if len(cuts):
            cut = int(cuts[-1]) + 1
            done, held = [*done, *held, t.slice(0, cut)], [t.slice(cut)]
        else:
            held.append(t)
        last = _key_at(t, columns, t.num_rows - 1)
        if sum(x.num_rows for x in done) >= rows:
            yield pa.concat_tables(done)
            done = []
    if done or held:
        yield pa.concat_tables(done + held)


def partition_function(spec: RecognizeSpec, struct: StructType, *, resort: bool = True,
                       time: tuple[str | None, str | None] | None = None,
                       key: tuple[str, str, str, int] | None = None, streamed: bool = False) -> Callable[
        [Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``fn(batches) -> batches`` for ``mapInArrow`` over rows repartitioned by the PARTITION BY columns and
    sorted: every row pattern partition in it run by the engine.

    When the columnar kernel takes the spec (:func:`kernel_runs`) and Spark's order is the engine's
    (``resort`` false), runs of whole partitions of about :data:`KERNEL_ROWS` rows go to
    ``kernel.run_chunk`` as Arrow columns, its result cast to the output schema; a chunk the kernel declines
    (values it does not read, e.g. NaN) goes to the row engine.  The row engine: rows become Python dicts
    about :data:`CHUNK_ROWS` at a time: runs of whole small partitions (``run_partition`` each), or a larger
    partition's rows in chunks (``step``, then ``advance(final=True)``: the engine keeps only what later rows
    can still need), so memory follows the chunk, not the Spark partition.  ``resort``: sort each partition
    again by the engine's ``sort_key`` (stable, so Spark's order stays among rows it calls equal; a partition
    is then converted whole); not needed when Spark orders every sort column as Python does
    (:func:`spark_orders_like_python`).  ``time``: ``(column, kind)`` of :func:`_time_field` when the batches
    come without :data:`TS` (not shuffled: derived here by :func:`_arrow_ts`).  ``key``: ``(mask column, key
    column, its Spark type, shift)`` when the PARTITION BY column comes packed into the mask's high bits
    (``WorkerSpec.key``), decoded here into a column of its own (:func:`_unpacked_key`).  ``streamed``: the
    partitions are run as the batches arrive (:func:`whole_partitions`, about :data:`STREAM_ROWS` rows at a time),
    so that the worker's work overlaps Spark's conversion of the next batches, instead of after the task's last
    batch; only for partition keys Arrow tells apart exactly as Spark does (:func:`streamable`).  In a Spark task the
    worker's heap is frozen first (:func:`~sparkcep.spark.heap.freeze_worker_heap`: PySpark's collection after the
    task then walks only this task's objects)."""

    def prepared(table: pa.Table) -> pa.Table:
        if time is not None and TS not in table.column_names:
            table = table.append_column(TS, _arrow_ts(table, *time))
        if key is not None:
            mask, name, dtype, shift = key
            table = table.append_column(name, _unpacked_key(table, mask, _KEY_TYPES[dtype], shift))
        return table

    def whole(table: pa.Table, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        table, bounds = _partitions(table, _partition_ids(table, spec.partition_by))
        parts = list(itertools.pairwise(bounds))
        if resort or not kernel_runs(spec):
            yield from _engine_batches(spec, table, parts, schema, resort)
            return
        kernel = _kernel()
        for j, k in _runs(parts, KERNEL_ROWS):
            a, b = parts[j][0], parts[k - 1][1]
            got = kernel.run_chunk(spec, table.slice(a, b - a), [x - a for x, _ in parts[j:k]] + [b - a])
            got = None if got is None else _typed(got, schema)
            if got is None:
                yield from _engine_batches(spec, table, parts[j:k], schema, False)
            else:
                yield from got.to_batches()

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()  # the daemon's collection after the task then walks only this task's objects
        schema = _arrow_schema(struct)
        if streamed:
            for table in whole_partitions((prepared(pa.Table.from_batches([b])) for b in batches if b.num_rows),
                                          spec.partition_by, STREAM_ROWS):
                yield from whole(table, schema)
            return
        table = gathered(batches)
        if table is not None:
            yield from whole(prepared(table), schema)

    return run


def _engine_batches(spec: RecognizeSpec, table: pa.Table, parts: list[tuple[int, int]], schema: pa.Schema,
                    resort: bool) -> Iterator[pa.RecordBatch]:
    """The row engine's results over the partitions ``parts`` (row ranges) of ``table`` (see
    :func:`partition_function`)."""
    engine = _engine()
    key = engine.sort_key(spec) if resort else None
    names = list(table.column_names)
    out: list[dict] = []
    j = 0
    while j < len(parts):
        a, b = parts[j]
        if b - a > CHUNK_ROWS and key is None:  # a large partition, in chunks
            state = engine.init_state(spec)
            for lo in range(a, b, CHUNK_ROWS):
                state, rows = engine.step(spec, state, _arrow_rows(table.slice(lo, min(CHUNK_ROWS, b - lo)), names))
                out.extend(rows)
                if len(out) >= CHUNK_ROWS:
                    yield from _to_table(out, schema).to_batches()
                    out = []
            state, rows = engine.advance(spec, state, None, final=True)
            out.extend(rows)
            j += 1
        else:  # whole partitions, as many as fit in a chunk (at least one)
            k = next(_runs(parts, CHUNK_ROWS, j))[1]
            rows = _arrow_rows(table.slice(a, parts[k - 1][1] - a), names)
            for x, y in parts[j:k]:
                part = rows[x - a:y - a]
                out.extend(engine.run_partition(spec, part if key is None else sorted(part, key=key)))
            j = k
        if len(out) >= CHUNK_ROWS:
            yield from _to_table(out, schema).to_batches()
            out = []
    if out:
        yield from _to_table(out, schema).to_batches()


def batch_recognize(projected: DataFrame, spec: RecognizeSpec, *, partitions: int | None = None,
                    worker: Any = None) -> DataFrame:
    """The engine's result over a batch ``projected`` (:func:`project`): the engine's columns but :data:`TS`
    repartitioned by PARTITION BY (``partitions`` Spark partitions, default ``spark.sql.shuffle.partitions``;
    one without PARTITION BY), sorted within, one ``mapInArrow`` pass (:func:`partition_function`).

    ``worker`` (``sparkcep.compiler.recognize.worker_spec``: ``.spec``, ``.computed``, ``.shifted``, ``.mask``,
    ``.key``, ``.key_shift``):
    when Spark's order is the engine's, the sorted rows reach the worker as ``worker.spec`` reads them: its
    columns only (not the tiebreak columns the sort needed, nor the time column without WITHIN) and the DEFINE
    conditions of ``worker.computed`` computed by Spark after the sort, packed as bits into one INT column
    (``worker.mask``: less to convert to Arrow), over the ``worker.shifted`` columns as ``lag``/``lead`` over
    the sort's order (:func:`_shifted`).
    The sort, the windows and the conditions are one Spark SQL query (:func:`_sorted`)."""
    time = _time_field(projected, time_column(spec))
    # __ts is a function of the time column: derived in Python (_arrow_ts), not shuffled and sent as well
    columns = [c for c in _engine_columns(projected, spec) if c != TS]
    if time[0] is not None and time[0] not in columns:
        columns.append(time[0])
    schema = StructType([projected.schema[c] for c in columns])
    order = sort_order(schema, spec)
    resort = not spark_orders_like_python(schema, spec)
    # df[name], SQL text and SORT BY, not PySpark's Column functions (each sends its call site to the JVM: a few
    # round trips per column, and planning is part of a statement's time); Spark prunes the shuffled columns
    # to those the SELECT reads
    keys = [projected[quoted(c)] for c in spec.partition_by]
    spread = (projected.repartition(shuffle_partitions(projected, partitions), *keys) if keys
              else projected.repartition(1))
    struct = output_struct(spec)
    select, windows, key = None, [], None
    if worker is not None and not resort:
        select, windows = _worker_select(worker, columns, order)
        spec = worker.spec
        if time[0] not in spec.columns:
            time = (None, None)  # not read (no WITHIN): __ts comes as NULLs
        if worker.key is not None:
            key = (worker.mask[0], worker.key, schema[worker.key].dataType.simpleString(), worker.key_shift)
    spread = _sorted(spread, columns, order, select, windows)
    return spread.mapInArrow(partition_function(spec, struct, resort=resort, time=time, key=key,
                                                streamed=streamable(schema, spec)), struct)


#: Spark types whose order is Python's on the values Arrow gives (NULLs and NaN placed by the sort itself).
_PLAIN_ORDER = (NumericType, StringType, BooleanType, DateType, TimestampType, TimestampNTZType, BinaryType)


def spark_orders_like_python(schema: StructType, spec: RecognizeSpec) -> bool:
    """Whether Spark's sort (:func:`_sort_columns`) already gives the engine's ``sort_key`` order: every
    column it sorts by is a number, string, boolean, date, time or binary (arrays, structs and maps are
    compared differently, or not at all, by the two)."""
    names = set(schema.names)
    columns = [*spec.partition_by, *(o.column for o in spec.order_by), *spec.columns]
    return all(isinstance(schema[c].dataType, _PLAIN_ORDER) for c in columns if c in names)


# ----------------------------------------------------------------------------------------------- streaming


def _dump_state(frontier: int | None, engine_json: str, held: list, late: int) -> bytes:
    """A group's state: the event time (µs) up to which its rows went to the engine, the engine state as JSON,
    the rows waiting for the watermark (``(event time µs, row)``) and how many late rows were dropped."""
    return pickle.dumps((STATE_VERSION, frontier, engine_json, held, late), protocol=pickle.HIGHEST_PROTOCOL)


def _load_state(data: bytes) -> tuple[int | None, str, list, int]:
    version, *rest = pickle.loads(data)
    if version != STATE_VERSION:
        raise CEPError(f"MATCH_RECOGNIZE group state version {version} is not supported (expected "
                       f"{STATE_VERSION})")
    frontier, engine_json, held, late = rest
    return frontier, engine_json, held, late


def stream_function(spec: RecognizeSpec, struct: StructType, projected: StructType, *, numeric: bool,
                    ts_unit: str | None = None, timezone: str = "UTC", late_rows: bool = False,
                    watermark_delay_ms: int | None = None) -> Callable[
        [Any, Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]:
    """``fn(key, pdfs, state)`` for ``groupBy(PARTITION BY).applyInPandasWithState`` with event-time timeouts
    (see the module docstring).  ``projected``: the input's Spark schema; ``numeric``: the time column is a
    number (its event time scaled by ``ts_unit``), else a time whose ``__ts`` is the event time in µs.
    ``late_rows``: the output has the side-channel columns of :mod:`sparkcep.spark.late` (``struct`` without
    them): results tagged ``result``, each late row (older than the watermark up to which its key's rows went
    to the engine) a ``late`` row with its record;
    without it late rows are only counted in the group state.
    ``watermark_delay_ms`` (the watermark's delay): rows are settled up to the watermark the group's own rows
    of this micro-batch give the next one (:func:`batch_watermark`), so that a match comes out in the
    micro-batch that reads its last row; None: up to Spark's watermark."""
    names = [c for c in dict.fromkeys([*spec.columns, TS]) if c in projected.names]
    types = {c: projected[c].dataType for c in names}
    scale = EventTimeScale.of(ts_unit)

    def watermark_ts(raw: int) -> float:
        return scale.watermark_ts(raw) if numeric else raw * 1000

    def timeout_ms(due: float) -> int:
        return scale.timeout_ms(due) - 1 if numeric else math.ceil(due / 1000) - 1

    record_columns = [c for c in names if not _RESERVED.fullmatch(c) and c != ARRIVAL_COL]
    out_schema = _arrow_schema(with_side_columns(struct) if late_rows else struct)

    def recognize_stream(key: Any, pdfs: Iterator[pd.DataFrame], group: GroupState) -> Iterator[pd.DataFrame]:
        engine = _engine()
        if group.exists:
            frontier, engine_json, held, late = _load_state(group.get[0])
            state = engine.state_from_json(engine_json)
        else:
            frontier, state, held, late = None, engine.init_state(spec), [], 0
        raw = group.getCurrentWatermarkMs()
        behind, newest = take_rows(pdfs, names, types, timezone, frontier, held)
        late += len(behind)
        dropped = [late_row(row, record_columns, raw, numeric, scale) for row in behind] if late_rows else []
        # settle to the watermark the next micro-batch will have at least (a row at it may still get an equal one)
        now = batch_watermark(raw, newest, watermark_delay_ms)
        bound = now * 1000
        settled, held = settle(held, bound)
        settled.sort(key=engine.sort_key(spec))
        out: list[dict] = []
        if settled:
            state, rows = engine.step(spec, state, settled)
            out.extend(rows)
        state, rows = engine.advance(spec, state, watermark_ts(now))
        out.extend(rows)
        frontier = bound if frontier is None else max(frontier, bound)
        group.update((_dump_state(frontier, engine.state_to_json(state), held, late),))
        dues = []
        if held:
            dues.append(held_due(held))
        wakeup = getattr(engine, "wakeup", None)
        if wakeup is None:
            dues.append(raw)  # the engine may hold a match: look again when the watermark moves
        else:
            due = wakeup(spec, state)
            if due is not None and math.isfinite(due):
                dues.append(timeout_ms(due))
        if dues:
            group.setTimeoutTimestamp(max(min(dues), raw, 1))
        if late_rows:
            out = [{**r, KIND: RESULT} for r in out] + dropped
        if out:
            yield _to_table(out, out_schema).to_pandas()

    return freezing(recognize_stream)  # the daemon's collection after each task walks only its objects


def batch_watermark(raw: int, newest: int | None, delay_ms: int | None) -> int:
    """The watermark (ms) a group may settle its rows to in this micro-batch: Spark's ``raw``, raised to the one
    the next micro-batch will have at least, ``newest // 1000 - delay_ms`` (``newest``: the newest event time,
    µs, of the group's rows in this micro-batch; Spark's watermark statistics read event times in whole ms).
    Every row still to come on time is at or after it, so settling to it now gives what the next micro-batch
    would (``sparkcep.spark.operator.MatchOperator.batch_watermark`` for pattern queries)."""
    if delay_ms is None or newest is None:
        return raw
    return max(raw, newest // 1000 - delay_ms)


# the per-key late rule, shared by one statement's stream and a workload's (spark.recognize_workload)


def take_rows(pdfs: Iterator[pd.DataFrame], names: list[str], types: dict[str, DataType], timezone: str,
              frontier: int | None, held: list) -> tuple[list[dict], int | None]:
    """Read a key's new rows (columns ``names`` of ``types``, event time ``_ET`` in µs): each on-time one is
    appended to ``held`` as ``(event time, row)``; returns the late ones and the newest event time (µs) of the
    on-time ones (None if there is none).  A row is late when it is older than
    ``frontier``, the watermark (µs) up to which its key's rows went to the engine already: its place in the
    order has passed.  A row at that very time is on time (equal timestamps straddling micro-batches are
    matched as in a batch); a row without event time (a NULL time column) cannot be placed and is skipped."""
    behind: list[dict] = []
    newest = None
    for pdf in pdfs:
        if pdf.empty:
            continue
        present = [c for c in names if c in pdf.columns]
        columns = [_pandas_values(pdf[c], types[c], timezone) for c in present]
        for et, row in zip(pdf[_ET].tolist(), _rows_of(tuple(present))(columns) if present else [], strict=True):
            if et is None or et != et:
                continue
            et = int(et)
            if frontier is not None and et < frontier:
                behind.append(row)
            else:
                held.append((et, row))
                newest = et if newest is None or et > newest else newest
    return behind, newest


def settle(held: list, bound: int) -> tuple[list[dict], list]:
    """``(settled rows, still held)``: rows older than the watermark ``bound`` (µs) are settled (no row ordered
    before them can still come); a row at the watermark's very time may still get an equal one, it waits."""
    return [row for et, row in held if et < bound], [(et, row) for et, row in held if et >= bound]


def held_due(held: list) -> int:
    """The event-time timeout (ms) that fires once the watermark passes the oldest held row."""
    return min(et for et, _ in held) // 1000


def late_row(row: dict, columns: list[str], raw: int, numeric: bool, scale: EventTimeScale) -> dict:
    """The side-channel row of a late input ``row`` behind the watermark ``raw`` (ms): its ``columns`` as a
    JSON object (times in ISO 8601)."""
    watermark = (f"{scale.watermark_ts(raw):g}" if numeric
                 else pd.Timestamp(raw, unit="ms", tz="UTC").isoformat())
    event = {c: v.isoformat() if hasattr(v, "isoformat") else v for c, v in ((c, row.get(c)) for c in columns)}
    return {KIND: LATE, REASON: f"late: ts before the watermark {watermark}",
            RECORD: json.dumps(event, default=str)}


def watermarked_time(projected: DataFrame, spec: RecognizeSpec, *, watermark_delay: float | str | None,
                     ts_unit: str | None) -> tuple[DataFrame, bool]:
    """``projected`` with Spark's event-time column (``EVENT_TIME``, the watermark on it allowing
    ``watermark_delay``: ts units, milliseconds for a time column, or a Spark interval string) and its epoch
    microseconds (``_ET``); and whether the time column is numeric.  The time column must be the first,
    ascending ORDER BY item, of a time or numeric type.  ``EVENT_TIME`` comes back nulled (the watermark's
    marker kept), so that Spark drops no row behind the watermark before the state function sees it: the
    function decides lateness per key (:func:`late_rule`).  Shared by one statement's stream and a workload's."""
    column = time_column(spec)
    if column is None or not spec.order_by[0].ascending:
        raise CEPSemanticError("a streaming MATCH_RECOGNIZE needs ORDER BY an ascending time column first")
    dtype = projected.schema[column].dataType
    numeric = isinstance(dtype, NumericType)
    if not numeric and not isinstance(dtype, (TimestampType, TimestampNTZType, DateType)):
        raise CEPSemanticError(f"a streaming MATCH_RECOGNIZE needs ORDER BY a time or numeric column first; "
                               f"{column!r} is {dtype.simpleString()}")
    delay = watermark_delay or 0
    if isinstance(delay, str):
        delay_text = delay
    else:
        delay_text = f"{EventTimeScale.of(ts_unit if numeric else None).delay_ms(delay)} milliseconds"
    if numeric:
        event_time = event_time_of(projected, column, ts_unit)
    else:
        event_time = F.timestamp_micros(F.col(TS).cast("bigint"))
    df = projected.withColumn(EVENT_TIME, event_time).withWatermark(EVENT_TIME, delay_text)
    df = df.withColumn(_ET, F.unix_micros(F.col(EVENT_TIME)))
    # the watermark's column nulled (its marker kept: event-time timeouts need it), so that Spark drops no row
    # at or behind the watermark itself: the state function decides which rows are late, per key
    marker = df.schema[EVENT_TIME].metadata
    return df.withColumn(EVENT_TIME, F.lit(None).cast("timestamp").alias(EVENT_TIME, metadata=marker)), numeric


def stream_recognize(projected: DataFrame, spec: RecognizeSpec, *, watermark_delay: float | None = None,
                     ts_unit: str | None = None, late_rows: bool = False) -> DataFrame:
    """The engine's result over a streaming ``projected``: a watermark on the time column allowing
    ``watermark_delay`` (ts units; milliseconds for a time column), ``groupBy(PARTITION BY)
    .applyInPandasWithState`` in append mode with event-time timeouts (:func:`stream_function`).  The
    watermark's column reaches the state function nulled (as :func:`sparkcep.spark.adapters.with_event_time`
    with ``keep_late``; :func:`watermarked_time`), so that Spark drops no row: the function decides which
    rows are late (:func:`late_rule`) and, with ``late_rows``, outputs them on the side channel of
    :mod:`sparkcep.spark.late`.

    A ``projected`` with the stream's arrival (:data:`~sparkcep.spark.validate.ARRIVAL_COL`, unseen by the
    statement) gives each result :data:`~sparkcep.spark.validate.RESULT_ARRIVAL`: the arrival of its match's
    last row (:func:`arrival_measured`); a row of no match (``WITH UNMATCHED ROWS``, an empty match) gets the
    newest arrival among its key's rows of the micro-batch that emits it
    (:func:`~sparkcep.spark.operator.stamping_arrival`)."""
    df, numeric = watermarked_time(projected, spec, watermark_delay=watermark_delay, ts_unit=ts_unit)
    if ARRIVAL_COL in projected.columns:
        spec = arrival_measured(spec)
    keep = [*_engine_columns(projected, spec), _ET, EVENT_TIME]
    df = df.select(*[F.col(quoted(c)) for c in keep])
    fn, out = stamped_stream_function(spec, output_struct(spec), projected.schema, numeric=numeric,
                                      ts_unit=ts_unit, timezone=_session_timezone(), late_rows=late_rows,
                                      watermark_delay_ms=delay_of(df.schema))
    return grouped(df, list(spec.partition_by)).applyInPandasWithState(
        fn, out, STATE_SCHEMA, "append", GroupStateTimeout.EventTimeTimeout)


def stamped_stream_function(spec: RecognizeSpec, struct: StructType, projected: StructType, *,
                            late_rows: bool = False, **options) -> tuple[Callable, StructType]:
    """``(fn, schema)``: :func:`stream_function` of ``spec`` (``struct``, ``projected``, ``options``: its
    arguments) and its output schema; a ``spec`` that reads the arrival (:func:`arrival_measured`) stamps each
    row (a row of no match: the newest arrival among its key's rows of the call,
    :func:`~sparkcep.spark.operator.stamping_arrival`)."""
    fn = stream_function(spec, struct, projected, late_rows=late_rows, **options)
    out = with_side_columns(struct) if late_rows else struct
    return (stamping_arrival(fn, out.names) if RESULT_ARRIVAL in spec.output else fn), out


def arrival_measured(spec: RecognizeSpec) -> RecognizeSpec:
    """``spec`` whose engine also reads the stream's arrival (:data:`~sparkcep.spark.validate.ARRIVAL_COL`, the
    last column: a tie-break after every other) and outputs, last, the hidden measure
    :data:`~sparkcep.spark.validate.RESULT_ARRIVAL` = ``FINAL LAST(arrival)``: the arrival of the match's last
    row, for every row of the match (ALL ROWS PER MATCH too), whatever rows of its key came later in the same
    micro-batch."""
    from dataclasses import replace

    from sparkcep.ir.ast import Attr
    from sparkcep.ir.recognize import Measure, Nav

    last = Measure(Nav("LAST", Attr(None, ARRIVAL_COL), 0, "FINAL"), RESULT_ARRIVAL)
    types = (*spec.output_types, "bigint") if spec.output_types else ()
    return replace(spec, columns=(*spec.columns, ARRIVAL_COL), measures=(*spec.measures, last),
                   output=(*spec.output, RESULT_ARRIVAL), output_types=types)


# ----------------------------------------------------------------------------------------------- the whole


def run_recognize(projected: DataFrame, spec: RecognizeSpec, *, watermark_delay: float | None = None,
                  ts_unit: str | None = None, partitions: int | None = None, late_rows: bool = False,
                  worker: Any = None) -> DataFrame:
    """:func:`batch_recognize` (``worker``: see there) or :func:`stream_recognize` (``late_rows``: see there),
    following ``projected.isStreaming``."""
    if projected.isStreaming:
        return stream_recognize(projected, spec, watermark_delay=watermark_delay, ts_unit=ts_unit,
                                late_rows=late_rows)
    return batch_recognize(projected, spec, partitions=partitions, worker=worker)


def apply_outer(result: DataFrame, outer_sql: str, result_view: str, text: str | None = None) -> DataFrame:
    """``outer_sql`` (the statement's SELECT/WHERE/GROUP BY/ORDER BY over the table name ``result_view``, as the
    user wrote it) run on ``result`` by ``spark.sql``, under a view name of its own (``result_view`` and a random
    suffix, replaced in the text): the temporary view exists only while it is analysed.  An outer query Spark
    refuses is a :class:`CEPSemanticError`.

    A ``result`` with the late side channel (:func:`stream_recognize` with ``late_rows``): a plain outer query
    (a SELECT list and WHERE, no aggregation, DISTINCT, ORDER BY or LIMIT) passes the late rows through with
    their side columns; another one runs on the results only (late rows then are only counted).  A query so
    rewritten (by sqlglot) keeps the column names Spark gives the query as written."""
    from pyspark.errors import AnalysisException, ParseException

    spark = result.sparkSession
    written = outer_sql  # Spark names the result columns after this text
    if KIND in result.columns:
        passing = _passing_late_rows(outer_sql)
        if passing is None:
            result = result.where(F.col(KIND) == RESULT).drop(KIND, REASON, RECORD)
        else:
            outer_sql = passing
    if RESULT_ARRIVAL in result.columns:  # the results' arrival, through the outer query where it can go
        carried = _carrying_arrival(outer_sql)
        if carried is None:
            result = result.drop(RESULT_ARRIVAL)
        else:
            outer_sql = carried
    # a name of its own per call: two statements analysed at once (threads) never see each other's view
    view = f"{result_view}_{uuid.uuid4().hex}"
    outer_sql, written, result_view = _renamed(outer_sql, result_view, view), _renamed(written, result_view, view), view
    result.createOrReplaceTempView(result_view)
    try:
        with quiet_analysis():
            df = spark.sql(outer_sql)
            if outer_sql == written:
                return df
            names = spark.sql(written).columns  # the rewrite only appends columns: name the user's as written
            return df.toDF(*names, *df.columns[len(names):])
    except (AnalysisException, ParseException) as err:
        raise CEPSemanticError(f"Spark cannot run the query on the matches: {_first_line(err)}", None,
                               text) from None
    finally:
        spark.catalog.dropTempView(result_view)


def _renamed(outer_sql: str, old: str, new: str) -> str:
    """``outer_sql`` reading the table ``new`` where it read ``old``: the names replaced in the text, the rest
    as the user wrote it (``ir.outer.renamed_view``)."""
    return renamed_view(outer_sql, old, new)


def _selects_star(tree) -> bool:
    """Does the SELECT list of ``tree`` (a sqlglot Select) hold a ``*`` (or ``t.*``)?"""
    from sqlglot import exp

    return any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))
               for e in tree.expressions)


def _in_own_scope(e, *kinds) -> bool:
    """Does ``e`` (an item of a SELECT list) hold a node of ``kinds`` of its SELECT's own: not one inside a
    subquery (``(SELECT max(total) FROM t)`` aggregates its own rows), nor a window function's aggregate
    (``sum(a) OVER (...)`` is one value per row)?"""
    from sqlglot import exp

    for node in e.find_all(*kinds):
        if isinstance(node, exp.AggFunc) and isinstance(node.parent, exp.Window) and node.arg_key == "this":
            continue
        up = node
        while up is not None and up is not e and not isinstance(up, (exp.Subquery, exp.Query)):
            up = up.parent
        if up is None or up is e:
            return True
    return False


def _carrying_arrival(outer_sql: str) -> str | None:
    """``outer_sql`` rewritten (sqlglot) to keep the results' arrival (:data:`RESULT_ARRIVAL`) as its last
    column: a row of an aggregating query (GROUP BY or aggregates) carries the newest arrival of its group's
    matches, ``MAX(_arrival_ms)``; another row its match's (unless a ``*`` already selects it).  None where no
    row stands for a set of matches whose arrival can be told (DISTINCT, set operations): the arrival is
    dropped there."""
    from sqlglot import exp

    tree = parse_outer(outer_sql)
    if not isinstance(tree, exp.Select) or tree.args.get("distinct"):
        return None
    arrival = exp.column(RESULT_ARRIVAL, quoted=True)
    if tree.args.get("group") or any(_in_own_scope(e, exp.AggFunc) for e in tree.expressions):
        return outer_text(tree.select(exp.alias_(exp.Max(this=arrival), RESULT_ARRIVAL, quoted=True),
                                      copy=True))
    if _selects_star(tree):
        return outer_sql
    return outer_text(tree.select(arrival, copy=True))


def _passing_late_rows(outer_sql: str) -> str | None:
    """``outer_sql`` rewritten (sqlglot) to keep the late side channel: the side columns in its SELECT list
    (unless a ``*`` holds them) and ``_kind = 'late' OR (...)`` as its WHERE; None for an outer query that is
    not a plain SELECT/WHERE (aggregation, DISTINCT, window functions, ORDER BY, LIMIT, joins, set operations)."""
    from sqlglot import exp

    tree = parse_outer(outer_sql)
    if not isinstance(tree, exp.Select) or any(tree.args.get(k) for k in (
            "group", "having", "distinct", "order", "limit", "offset", "qualify", "joins", "laterals", "with")):
        return None
    if any(_in_own_scope(e, exp.AggFunc, exp.Window, exp.Explode, exp.Posexplode) for e in tree.expressions):
        return None
    if not _selects_star(tree):
        tree = tree.select(*(exp.column(c, quoted=True) for c in (KIND, REASON, RECORD)), copy=True)
    where = tree.args.get("where")
    if where is not None:
        late = exp.EQ(this=exp.column(KIND, quoted=True), expression=exp.Literal.string(LATE))
        tree.set("where", exp.Where(this=exp.or_(late, exp.paren(where.this, copy=False), copy=False)))
    return outer_text(tree)
