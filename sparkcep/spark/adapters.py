"""Thin Spark adapters around the engines (:mod:`~sparkcep.runtime_udfs.match.engine`,
:mod:`~sparkcep.runtime_udfs.trend.engine`, :mod:`~sparkcep.runtime_udfs.shared.engine`; :func:`engine_of`
picks one by the spec's class): they only move data in and out.

* :class:`MatchOperator` holds one compiled spec and the input schema; ``partition_function()`` is the function
  for ``mapInArrow`` over a batch repartitioned by key (:meth:`MatchOperator.run_table` per partition) and
  ``stream_function()`` the one for ``df.groupBy(key).applyInPandasWithState(fn, op.output_schema,
  op.state_schema, "append", GroupStateTimeout.EventTimeTimeout)`` on a stream with a watermark;
* :func:`stream_udf` is a shorthand for the latter;
* :func:`output_schema` types the result columns, the same for both;
* :func:`batch_matches` is *the* batch path (``CompiledQuery.apply``, :func:`apply_match` and the generated job
  call it; a workload's operator, :func:`sparkcep.spark.workload.apply_workload`, runs the same
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
import math
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout
from pyspark.sql.types import (
    IntegralType,
    LongType,
    NumericType,
    StructField,
    StructType,
    TimestampType,
)
from sqlglot import exp

from sparkcep.ir.ast import Attr, EquivItem, Kleene, walk
from sparkcep.ir.errors import CEPError
from sparkcep.ir.sharing import SharedSpec
from sparkcep.ir.spec import MatchSpec, reads_every_event
from sparkcep.runtime_udfs.event_time import EventTimeScale
from sparkcep.runtime_udfs.match import ranges
from sparkcep.spark.operator import MatchOperator, stream_buckets
from sparkcep.spark.schema import ARRIVAL, EVENT_TIME, EVENT_TIME_OFFSET, MASK, load_spec
from sparkcep.spark.validate import quoted

if TYPE_CHECKING:
    from sparkcep.spark.schema import EngineSpec, SpecLike

__all__ = ["apply_match", "batch_input", "batch_matches", "watermarked", "with_event_time"]


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
    away.  It holds the event time plus one microsecond, so that Spark drops the late rows before the operator:
    Spark drops a row whose column is at or before the watermark, LANGUAGE.md §1 only one older than it (an
    event at the watermark's very ts is on time).  With ``keep_late`` it is null, so that late rows reach the
    operator, which routes them (``MatchOperator(..., late_rows=True)``).  The watermark itself stays where
    ``events`` put it, on the event time."""
    schema = events.schema
    marker = schema[EVENT_TIME].metadata  # Spark's watermark marker: event-time timeouts require it
    if keep_late:
        value = F.lit(None).cast("timestamp")
    else:
        value = event_time_of(candidates, ts_col, ts_unit) + F.expr("INTERVAL 1 MICROSECOND")
    return candidates.withColumn(EVENT_TIME, value.alias(EVENT_TIME, metadata=marker))


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
    # a loop's stop condition (UNTIL) is read by the engine on events that may fill no component: their type too
    untils = [n.until for n in walk(spec.pattern) if isinstance(n, Kleene) and n.until is not None] \
        if spec.pattern is not None else []
    exprs = [*spec.predicates, *(o.expr for o in spec.outputs), *(c.local for c in spec.components if c.local),
             *untils]
    read.update(n.attr for e in exprs for n in walk(e) if isinstance(n, (Attr, EquivItem)))
    if MASK not in columns or any(c.negated for c in spec.components) or untils:
        read.add(type_col)
    return [c for c in columns if c not in read]


def batch_input(candidates: DataFrame, spec: EngineSpec, input_schema: StructType | None = None,
                ts_col: str = "ts", type_col: str = "type") -> tuple[DataFrame, StructType]:
    """``(candidates, schema)`` as the batch path shuffles them: under a contiguity strategy the rows numbered in
    input order (``_arrival``) unless the filter did it, the :func:`unread_columns` dropped (neither shuffled nor
    converted).  :func:`batch_matches` and the workload operator
    (:func:`sparkcep.spark.workload.apply_workload`) prepare their input with it."""
    schema = input_schema if input_schema is not None else candidates.schema
    if reads_every_event(spec) and ARRIVAL not in schema.names:
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
    parts = shuffle_partitions(candidates, partitions)
    # a keyless match query in time ranges builds its own operator (keyed by the range): decided first, so that
    # the driver builds one operator (each reads the session's conf: round trips to the JVM before the job)
    if (isinstance(spec, MatchSpec) and not spec.key and parts > 1
            and range_split(spec, schema, options.get("ts_col", "ts")) is None and ranges_pay(candidates)):
        return ranged_matches(candidates, spec, schema, parts, range_windows=range_windows(candidates), **options)
    op = MatchOperator(spec, schema, **options)
    keys = [F.col(quoted(c)) for c in op.group_cols]
    spread = candidates.repartition(parts, *keys) if keys else candidates.repartition(1)
    return spread.mapInArrow(op.partition_function(), op.output_schema)


#: the Spark conf that chooses time ranges for keyless batch queries: ``auto`` (the default: when the input's
#: estimated size is at least :data:`RANGE_MIN_BYTES_CONF`), ``true`` (always), ``false`` (never: one partition)
RANGES_CONF = "spark.sparkcep.keylessRanges"

#: the Spark conf giving the length of a time range in windows (default
#: :data:`~sparkcep.runtime_udfs.match.ranges.RANGE_WINDOWS`): shorter ranges spread a short input over more
#: partitions, and hold more of it twice
RANGE_WINDOWS_CONF = "spark.sparkcep.keylessRangeWindows"

#: the Spark conf giving the smallest estimated input (bytes, Spark's size estimate of the filtered candidates: for
#: files, about the bytes of the columns read) that ``keylessRanges=auto`` splits into time ranges
RANGE_MIN_BYTES_CONF = "spark.sparkcep.keylessRangeMinBytes"

#: the default of :data:`RANGE_MIN_BYTES_CONF`: 16 MiB, about 3-5 million events of a few columns in Parquet
#: (``bench/keyless_parallel.py``: below it the second partition's fixed cost outweighs what it saves)
RANGE_MIN_BYTES = 16 * 2**20


def ranges_pay(df: DataFrame) -> bool:
    """Whether a keyless batch ``df`` (the candidates, already known splittable) runs in time ranges:
    :data:`RANGES_CONF` ``true``/``false``, or with ``auto`` (the default) when Spark's size estimate of ``df``
    (:func:`estimated_bytes`, no job runs) is at least :data:`RANGE_MIN_BYTES_CONF`; an input Spark cannot size
    (e.g. built from an RDD or a Python list) stays in one partition."""
    conf = df.sparkSession.conf
    mode = str(conf.get(RANGES_CONF, "auto")).strip().lower() or "auto"
    if mode not in ("auto", "true", "false"):
        raise CEPError(f"{RANGES_CONF} must be auto, true or false, got {mode!r}")
    if mode != "auto":
        return mode == "true"
    text = conf.get(RANGE_MIN_BYTES_CONF, None)
    try:
        least = int(str(text).strip().replace("_", "")) if text is not None and str(text).strip() else RANGE_MIN_BYTES
    except ValueError:
        raise CEPError(f"{RANGE_MIN_BYTES_CONF} must be a whole number of bytes, got {text!r}") from None
    size = estimated_bytes(df)
    return size is not None and size >= least


def estimated_bytes(df: DataFrame) -> int | None:
    """Spark's estimate of ``df``'s size in bytes (its optimized plan's statistics: for files, their sizes scaled
    to the columns read; computed on the driver, no job), or None when Spark does not know it: a leaf of the plan
    (an RDD, a Python list) has Spark's default size, ``spark.sql.defaultSizeInBytes``."""
    try:
        plan = df._jdf.queryExecution().optimizedPlan()
        leaves = plan.collectLeaves()
        sizes = [int(leaves.apply(i).stats().sizeInBytes()) for i in range(leaves.size())]
        size = int(plan.stats().sizeInBytes())
        unknown = int(df.sparkSession._jsparkSession.sessionState().conf().defaultSizeInBytes())
    except Exception:  # noqa: BLE001 - a plan without statistics (or another Spark): unknown
        return None
    return None if any(s >= unknown for s in sizes) else size


def range_windows(df: DataFrame) -> float:
    """The length of a time range in windows (:data:`RANGE_WINDOWS_CONF`), at least 1."""
    text = df.sparkSession.conf.get(RANGE_WINDOWS_CONF, None)
    if text is None or not str(text).strip():
        return ranges.RANGE_WINDOWS
    try:
        value = float(str(text).strip())
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 1):
        raise CEPError(f"{RANGE_WINDOWS_CONF} must be a number of windows >= 1, got {text!r}")
    return value


def range_split(spec: EngineSpec, schema: StructType, ts_col: str = "ts") -> str | None:
    """Why a keyless batch of ``spec`` runs on one partition, or None when it runs in time ranges (one sentence:
    :func:`sparkcep.runtime_udfs.match.ranges.why_not`, or the ts column's type)."""
    why = ranges.why_not(spec)
    if why is None and MASK not in schema.names:
        why = "the input has no _mask column to tell a range's own events by"
    if why is None and ts_col in schema.names:
        ts_type = schema[ts_col].dataType
        if not isinstance(ts_type, (NumericType, TimestampType)):
            why = f"a {ts_type.simpleString()} ts column is not split by time ranges"
    return why


def _engine_ts(ts_col: str, ts_type: object) -> exp.Expression:
    """The ts as the engine compares it (a sqlglot tree): the number itself as a DOUBLE, a timestamp as epoch
    ms."""
    col = exp.column(ts_col, quoted=True)
    if isinstance(ts_type, TimestampType):
        return exp.Div(this=exp.func("UNIX_MICROS", col), expression=exp.Literal.number("1000.0"))
    return exp.cast(col, "double")


def _range_of(ts: exp.Expression, width: float) -> exp.Expression:
    """:func:`ranges.range_of` as a Spark expression (a sqlglot tree; a BIGINT, 0 for a null ts)."""
    return exp.func("COALESCE", exp.func("FLOOR", exp.Div(this=exp.paren(ts), expression=_number(width))),
                    exp.cast(exp.Literal.number(0), "bigint"))


def _number(value: float) -> exp.Expression:
    """``value`` as a Spark SQL DOUBLE literal (exactly: its shortest repr)."""
    return exp.cast(exp.Literal.number(repr(float(value))), "double")


def held_masks_sql(ts_col: str, ts_type: object, width: float, window: float, every_event: bool) -> str:
    """The Spark SQL generator giving each candidate row the ``_mask`` of each copy the ranges holding it get
    (:func:`ranges.holders`, as Spark expressions: with ``width >= window``, its owner ``j``, and ``j - 1`` when the row
    lies less than ``window`` after ``j``'s start): its own ``_mask`` for the owner, and for the range before
    :func:`ranges.sent_mask` (the first component's bit cleared, :func:`ranges.held_mask`, then negated: the copy's
    range follows from its ts and sign, :func:`range_sql`, so no range column crosses the shuffle or Arrow).  That
    copy is left out where its ``_mask`` is then 0 and not ``every_event`` (the engine needs no row that fills no
    component unless contiguity counts it).  One ``explode`` of an array of one or two ints."""
    if not width >= window:
        raise ValueError(f"a time range ({width}) is shorter than the window ({window})")
    ts = _engine_ts(ts_col, ts_type)
    own = _range_of(ts, width)
    before = _range_of(exp.Sub(this=ts, expression=_number(window)), width)
    mask = exp.column(MASK, quoted=True)
    barred = exp.paren(exp.BitwiseAnd(this=mask, expression=exp.Literal.number(~ranges.FIRST_BIT)))
    twice = exp.LT(this=before, expression=own)
    if not every_event:
        twice = exp.and_(twice, exp.NEQ(this=barred.copy(), expression=exp.Literal.number(0)))
    both = exp.Array(expressions=[mask.copy(), exp.BitwiseNot(this=barred)])
    held = exp.If(this=twice, true=both, false=exp.Array(expressions=[mask.copy()]))
    return exp.alias_(exp.func("EXPLODE", held), MASK, quoted=True).sql(dialect="spark")


def range_sql(ts_col: str, ts_type: object, width: float) -> exp.Expression:
    """:func:`ranges.sent_range` as a Spark expression (a sqlglot tree): the range a row of :func:`held_masks_sql`
    belongs to, its ts's owner less one for a copy (a negative ``_mask``)."""
    copy = exp.cast(exp.LT(this=exp.column(MASK, quoted=True), expression=exp.Literal.number(0)), "bigint")
    return exp.Sub(this=_range_of(_engine_ts(ts_col, ts_type), width), expression=copy)


def spark_hash_long(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of a BIGINT (Murmur3 x86 32-bit, ``Murmur3_x86_32.hashLong``, seed 42): the hash by
    which ``repartition(n, col)`` sends a row to partition ``pmod(hash, n)``."""
    mask = 0xFFFFFFFF

    def mix(h: int, k: int) -> int:
        k = (k * 0xCC9E2D51) & mask
        k = ((k << 15) | (k >> 17)) & mask
        h ^= (k * 0x1B873593) & mask
        h = ((h << 13) | (h >> 19)) & mask
        return (h * 5 + 0xE6546B64) & mask

    h = mix(mix(seed, value & mask), (value >> 32) & mask) ^ 8
    h = ((h ^ (h >> 16)) * 0x85EBCA6B) & mask
    h = ((h ^ (h >> 13)) * 0xC2B2AE35) & mask
    h ^= h >> 16
    return h - (1 << 32) if h >= 1 << 31 else h


@functools.lru_cache(maxsize=16)
def partition_salts(parts: int) -> tuple[int, ...]:
    """For each partition ``p`` of ``parts``, a BIGINT that ``repartition(parts, col)`` sends to ``p`` (the
    smallest one): hashing these instead of the range numbers deals the ranges out round robin, range ``j`` to
    partition ``j mod parts``, so that every partition gets its share however few ranges there are."""
    salts: dict[int, int] = {}
    value = 0
    while len(salts) < parts:
        salts.setdefault(spark_hash_long(value) % parts, value)
        value += 1
    return tuple(salts[p] for p in range(parts))


def ranged_matches(candidates: DataFrame, spec: MatchSpec, schema: StructType, parts: int,
                   **options: Any) -> DataFrame:
    """The matches of a keyless batch in time ranges of :func:`range_windows` windows each
    (:mod:`~sparkcep.runtime_udfs.match.ranges`; the range of a row is computed from its ts alone: no pass over
    the input), overlapping by the window: every row goes to the ranges that hold them (:func:`ranges.holders`, as
    Spark expressions) with the first component's bit of its ``_mask`` cleared where the range does not own it
    (:func:`ranges.held_mask`; one generator, :func:`held_masks_sql`, which leaves out a copy that then fills no
    component unless the query reads every event, and sends such a copy's ``_mask`` negated, :func:`ranges.sent_mask`,
    so that its range follows from its ts and sign, :func:`range_sql`, and no range column is shuffled), the ranges
    are dealt round robin over ``parts`` (at least 2) hash partitions (:func:`partition_salts`: no sampling job), and
    each partition runs its ranges as one keyless table (:meth:`MatchOperator.partition_function` with
    ``held_copies``: the masks restored, then time slices as in one partition): two ranges of a partition are at least
    two apart, so what one holds lies a window or more before what the next holds (:mod:`ranges`' docstring), and
    each match comes from the range that owns its first event, and from no other.  Under contiguity every event
    reaches its ranges (the filter keeps them) and ``_arrival`` numbers them in input order before the split: a
    range holds a contiguous stretch of the input and sees adjacency as the whole input has it."""
    if parts < 2:
        raise ValueError(f"time ranges are dealt over 2 partitions or more, got {parts}")
    ts_col = options.get("ts_col", "ts")
    ts_type = schema[ts_col].dataType
    width = spec.window * options.pop("range_windows", ranges.RANGE_WINDOWS)
    # F.expr over Spark SQL text, df[name], not F.col and F's functions: PySpark sends each Column function's call
    # site to the JVM (a few round trips each), and the driver builds the plan before the job starts
    held = candidates.select(*(candidates[quoted(c)] for c in schema.names if c != MASK), F.expr(held_masks_sql(
        ts_col, ts_type, width, spec.window, reads_every_event(spec))))
    held_schema = StructType([*(f for f in schema.fields if f.name != MASK), schema[MASK]])
    op = MatchOperator(ranges.ranged_spec(spec), held_schema, **options)
    salts = exp.Array(expressions=[exp.cast(exp.Literal.number(v), "bigint") for v in partition_salts(parts)])
    slot = exp.Add(this=exp.func("PMOD", range_sql(ts_col, ts_type, width), exp.Literal.number(parts)),
                   expression=exp.Literal.number(1))
    dealt = exp.func("ELEMENT_AT", salts, exp.cast(slot, "int")).sql(dialect="spark")
    return held.repartition(parts, F.expr(dealt)).mapInArrow(op.partition_function(held_copies=True),
                                                              op.output_schema)


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
    streaming one, which must carry a watermark.  A stream's keys are hashed into ``buckets`` Spark groups
    (:func:`~sparkcep.spark.operator.stream_buckets`: by default ``spark.sql.shuffle.partitions`` of them where
    the columnar step streams the query, else one group per key; ``buckets=0``: one group per key; the
    grouping is part of a checkpoint: with ``checkpoint``, the one it was made with).  ``options`` go to
    :class:`MatchOperator`.  A spec without key runs as one group.
    """
    checkpoint = options.pop("checkpoint", None)
    if not df.isStreaming:
        return batch_matches(df, spec, partitions=options.pop("buckets", None) or None, **options)
    buckets = options.pop("buckets", None)
    op = MatchOperator(spec, df.schema, **options)
    buckets = stream_buckets(op, df.sparkSession, buckets, checkpoint)
    if buckets is not None:
        op = op.with_buckets(buckets)
    groups = op.grouped(df)
    return groups.applyInPandasWithState(op.stream_function(), op.stream_schema, op.state_schema, "append",
                                         GroupStateTimeout.EventTimeTimeout)
