"""The Spark layer of a MATCH_RECOGNIZE workload: statements over the same source with the same PARTITION BY
and ORDER BY run in ONE pass (the pure runner :mod:`sparkcep.runtime_udfs.recognize.workload`).

The face (``sparkcep.sql_workload``, which builds the engine specs) chains:

* :func:`rename_row_exprs`: every statement's per-row Spark SQL columns (RowExpr, ``__rx<n>`` in each
  statement) renamed to workload-wide ``__rx<n>``, one column per distinct SQL text (two statements computing
  ``upper(name)`` share one column);
* :func:`project`: ONE projection of the input: its columns, the union of the RowExpr columns, ``__ts``;
* :func:`run_shared`: one tagged result: a ``query`` column (the statement's index in the group) and
  ``_<i>_<j>``, the j-th output column of statement i (NULL in the rows of the other statements):

  - batch: ONE repartition by the PARTITION BY columns, ONE sort within the Spark partitions (PARTITION BY,
    ORDER BY, then the longest statement tiebreak), ONE ``mapInArrow`` pass running every statement's engine
    over each sorted row pattern partition (a statement that orders ties by other columns sorts the
    partition again in Python);
  - streaming: ONE ``applyInPandasWithState``: per key the rows waiting for the watermark are held once, and
    the group state holds one engine state per statement;

* :func:`split`: statement i's rows of the tagged result, its own column names and types.
"""

from __future__ import annotations

import itertools
import math
import pickle
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StructField,
    StructType,
)

from sparkcep.ir.ast import map_nodes
from sparkcep.ir.errors import CEPError, CEPSemanticError
from sparkcep.ir.recognize import Recognize, RecognizeSpec, RowExpr
from sparkcep.runtime_udfs.event_time import EventTimeScale
from sparkcep.spark import recognize as single
from sparkcep.spark.adapters import shuffle_partitions
from sparkcep.spark.arrow import _session_timezone, by_id, gathered
from sparkcep.spark.heap import freeze_worker_heap, freezing
from sparkcep.spark.late import KIND, RESULT, with_side_columns
from sparkcep.spark.operator import grouped, stamping_arrival
from sparkcep.spark.schema import EVENT_TIME
from sparkcep.spark.validate import ARRIVAL_COL, RESULT_ARRIVAL, quoted

__all__ = ["QUERY", "project", "rename_row_exprs", "row_exprs_of", "run_shared", "split", "tagged_struct"]

#: The column of the tagged result naming the statement (its index in the group).
QUERY = "query"

#: Version tag of a shared stream's group state.
STATE_VERSION = 1


def _workload():
    from sparkcep.runtime_udfs.recognize import workload

    return workload


# ----------------------------------------------------------------------------------------------- projection


def rename_row_exprs(qs: Sequence[Recognize]) -> tuple[list[Recognize], list[list[str]]]:
    """``(statements, columns)``: the statements with their RowExpr columns renamed workload-wide (one
    ``__rx<n>`` per distinct SQL text, numbered in order of appearance) and, per statement, its RowExpr
    columns in its own order of appearance (the order its spec's tiebreak reads them)."""
    names: dict[str, str] = {}
    out, own = [], []
    for q in qs:
        mine: list[str] = []

        def fix(node, mine=mine):
            if isinstance(node, RowExpr):
                name = names.setdefault(node.sql, f"__rx{len(names)}")
                if name not in mine:
                    mine.append(name)
                return replace(node, column=name)
            return node

        defines = tuple((v, map_nodes(c, fix)) for v, c in q.defines)
        measures = tuple(replace(m, expr=map_nodes(m.expr, fix)) for m in q.measures)
        out.append(replace(q, defines=defines, measures=measures))
        own.append(mine)
    return out, own


def row_exprs_of(q: Recognize) -> list[RowExpr]:
    """The RowExpr nodes of a statement, one per column, in order of appearance."""
    return single.row_exprs(q)


def project(df: DataFrame, qs: Sequence[Recognize]) -> DataFrame:
    """``df`` with the union of the statements' RowExpr columns (renamed: :func:`rename_row_exprs`) and
    ``__ts`` (of the first statement's time column: they share ORDER BY).  A RowExpr Spark cannot compute is a
    :class:`CEPSemanticError` at its place in its own statement."""
    whole = SimpleNamespace(defines=[d for q in qs for d in q.defines], measures=[m for q in qs for m in q.measures],
                            order_by=qs[0].order_by, text=None)
    try:
        return single.project(df, whole)
    except CEPSemanticError:
        for q in qs:
            single.project(df, q)  # raises with the statement's text
        raise


def statement_schema(projected: DataFrame, own_columns: Sequence[str]) -> dict[str, str]:
    """The schema ``build_spec`` reads for one statement: the input columns, then its own RowExpr columns in
    its order (so that its spec, tiebreak included, is the one it has alone)."""
    types = single.input_schema(projected)
    rx = {c for c in types if single._RESERVED.fullmatch(c)}
    out = {c: t for c, t in types.items() if c not in rx}
    out.update({c: types[c] for c in own_columns})
    return out


# ----------------------------------------------------------------------------------------------- the tagged result


def _name(i: int, j: int) -> str:
    return f"_{i}_{j}"


def tagged_struct(specs: Sequence[RecognizeSpec], *, late_rows: bool = False, arrival: bool = False) -> StructType:
    """``query`` then ``_<i>_<j>`` for the j-th output column of statement i, typed as it is alone;
    ``arrival``: then :data:`~sparkcep.spark.validate.RESULT_ARRIVAL`; ``late_rows``: then the side columns of
    :mod:`sparkcep.spark.late` (``query`` NULL in a late row)."""
    out = [StructField(QUERY, IntegerType(), late_rows)]
    for i, spec in enumerate(specs):
        for j, f in enumerate(single.output_struct(spec).fields):
            out.append(StructField(_name(i, j), f.dataType, True))
    if arrival:
        out.append(StructField(RESULT_ARRIVAL, LongType(), True))
    return with_side_columns(StructType(out)) if late_rows else StructType(out)


def split(tagged: DataFrame, specs: Sequence[RecognizeSpec], i: int) -> DataFrame:
    """Statement ``i``'s rows of the tagged result under its own output column names (and their arrival, a
    stream's :data:`~sparkcep.spark.validate.RESULT_ARRIVAL`, where the tagged result has it)."""
    names = specs[i].output
    arrival = [F.col(RESULT_ARRIVAL)] if RESULT_ARRIVAL in tagged.columns else []
    return tagged.where(F.col(QUERY) == F.lit(i)).select(
        *[F.col(_name(i, j)).alias(n) for j, n in enumerate(names)], *arrival)


def _tables(outs: list[list[dict]], schemas: list[pa.Schema], full: pa.Schema) -> Iterator[pa.Table]:
    """The statements' output rows as tables of the tagged schema ``full`` (with side columns: tagged
    ``result``)."""
    for i, rows in enumerate(outs):
        if not rows:
            continue
        own = single._to_table(rows, schemas[i])
        n = own.num_rows
        arrays = []
        for f in full:
            if f.name == QUERY:
                arrays.append(pa.array([i] * n, type=f.type))
            elif f.name == KIND:  # the late side channel's tag (stream_shared with late_rows)
                arrays.append(pa.array([RESULT] * n, type=f.type))
            elif f.name.startswith(f"_{i}_"):
                arrays.append(own.column(int(f.name.rsplit("_", 1)[1])))
            elif f.name == RESULT_ARRIVAL and RESULT_ARRIVAL in own.column_names:  # its match's last row's
                arrays.append(own.column(RESULT_ARRIVAL))
            else:
                arrays.append(pa.nulls(n, type=f.type))
        yield pa.Table.from_arrays(arrays, schema=full)


# ----------------------------------------------------------------------------------------------- batch


def _lead(specs: Sequence[RecognizeSpec]) -> RecognizeSpec:
    """A spec whose sort (:func:`sparkcep.spark.recognize._sort_columns`) is the shared one."""
    s0 = specs[0]
    return replace(s0, columns=(*s0.partition_by, *(o.column for o in s0.order_by),
                                *_workload().shared_tiebreak(specs)))


def ready_flags(schema: StructType, specs: Sequence[RecognizeSpec]) -> list[bool]:
    """Per statement: the shared Spark sort is its own order (else its partitions are sorted again)."""
    flags = _workload().presorted(specs, _workload().shared_tiebreak(specs))
    return [ok and single.spark_orders_like_python(schema, s) for ok, s in zip(flags, specs, strict=True)]


def partition_function(specs: Sequence[RecognizeSpec], full: StructType, ready: Sequence[bool]) -> Callable[
        [Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``fn(batches) -> batches`` for ``mapInArrow`` over the shared sorted rows: every statement's engine over
    every row pattern partition.  Runs of small partitions are converted about ``CHUNK_ROWS`` rows at a
    time; a larger partition goes through ``step`` in chunks when every statement reads the shared order,
    else whole."""
    chunk = single.CHUNK_ROWS
    partition_by = specs[0].partition_by
    structs = [single.output_struct(s) for s in specs]  # on the driver (DDL parsing needs the session)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()  # the daemon's collection after the task then walks only this task's objects
        table = gathered(batches)
        if table is None:
            return
        wl = _workload()
        full_schema = single._arrow_schema(full)
        schemas = [single._arrow_schema(s) for s in structs]
        names = list(table.column_names)
        ids = single._partition_ids(table, partition_by)
        table, bounds = by_id(table, ids) if ids is not None else (table, [0, table.num_rows])
        parts = list(itertools.pairwise(bounds))
        outs: list[list[dict]] = [[] for _ in specs]

        def flush():
            for t in _tables(outs, schemas, full_schema):
                yield from t.to_batches()
            for o in outs:
                o.clear()

        j = 0
        while j < len(parts):
            a, b = parts[j]
            if b - a > chunk and all(ready):
                states = wl.init_states(specs)
                for lo in range(a, b, chunk):
                    rows = single._arrow_rows(table.slice(lo, min(chunk, b - lo)), names)
                    states, got = wl.step_all(specs, states, rows, ready=ready)
                    for o, g in zip(outs, got, strict=True):
                        o.extend(g)
                    if sum(map(len, outs)) >= chunk:
                        yield from flush()
                states, got = wl.advance_all(specs, states, None, final=True)
                for o, g in zip(outs, got, strict=True):
                    o.extend(g)
                j += 1
            else:
                k = j
                while k + 1 < len(parts) and parts[k + 1][1] - a <= chunk:
                    k += 1
                rows = single._arrow_rows(table.slice(a, parts[k][1] - a), names)
                for x, y in parts[j:k + 1]:
                    got = wl.run_shared_partition(specs, rows[x - a:y - a], ready=ready)
                    for o, g in zip(outs, got, strict=True):
                        o.extend(g)
                j = k + 1
            if sum(map(len, outs)) >= chunk:
                yield from flush()
        yield from flush()

    return run


def _engine_columns(df: DataFrame, specs: Sequence[RecognizeSpec]) -> list[str]:
    wanted = dict.fromkeys(c for s in specs for c in (*s.columns, single.TS))
    return [c for c in wanted if c in df.columns]


def batch_shared(projected: DataFrame, specs: Sequence[RecognizeSpec], *,
                 partitions: int | None = None) -> DataFrame:
    """The tagged result over a batch: one repartition, one sort, one ``mapInArrow`` pass."""
    _workload().check_shareable(specs)
    df = projected.select(*[F.col(quoted(c)) for c in _engine_columns(projected, specs)])
    keys = [F.col(quoted(c)) for c in specs[0].partition_by]
    spread = df.repartition(shuffle_partitions(df, partitions), *keys) if keys else df.repartition(1)
    spread = spread.sortWithinPartitions(*single._sort_columns(df, _lead(specs)))
    full = tagged_struct(specs)
    return spread.mapInArrow(partition_function(specs, full, ready_flags(df.schema, specs)), full)


# ----------------------------------------------------------------------------------------------- streaming


def _dump(frontier: int | None, states_json: str, held: list, late: int) -> bytes:
    return pickle.dumps((STATE_VERSION, frontier, states_json, held, late), protocol=pickle.HIGHEST_PROTOCOL)


def _load(data: bytes) -> tuple[int | None, str, list, int]:
    version, *rest = pickle.loads(data)
    if version != STATE_VERSION:
        raise CEPError(f"shared MATCH_RECOGNIZE group state version {version} is not supported (expected "
                       f"{STATE_VERSION})")
    frontier, states_json, held, late = rest
    return frontier, states_json, held, late


def stream_function(specs: Sequence[RecognizeSpec], full: StructType, projected: StructType, *, numeric: bool,
                    ts_unit: str | None = None, timezone: str = "UTC", late_rows: bool = False,
                    watermark_delay_ms: int | None = None) -> Callable[
        [Any, Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]:
    """``fn(key, pdfs, state)`` for ``applyInPandasWithState``: as the single statement's
    (:func:`sparkcep.spark.recognize.stream_function`, the same per-key late rule and the same settling bound,
    :func:`sparkcep.spark.recognize.batch_watermark` of ``watermark_delay_ms``), the waiting rows held once
    and one engine state per statement; settled rows go to every statement's ``step`` (each in its own
    order).  ``late_rows``: ``full`` has the side columns of :mod:`sparkcep.spark.late` and each late row is
    a ``late`` row (``query`` NULL: it is late for every statement of the group), else it is only counted."""
    wanted = dict.fromkeys(c for s in specs for c in (*s.columns, single.TS))
    names = [c for c in wanted if c in projected.names]
    types = {c: projected[c].dataType for c in names}
    record_columns = [c for c in names if not single._RESERVED.fullmatch(c) and c != ARRIVAL_COL]
    scale = EventTimeScale.of(ts_unit)
    structs = [single.output_struct(s) for s in specs]  # on the driver (DDL parsing needs the session)

    def watermark_ts(raw: int) -> float:
        return scale.watermark_ts(raw) if numeric else raw * 1000

    def timeout_ms(due: float) -> int:
        return scale.timeout_ms(due) - 1 if numeric else math.ceil(due / 1000) - 1

    def recognize_stream(key: Any, pdfs: Iterator[pd.DataFrame], group: GroupState) -> Iterator[pd.DataFrame]:
        wl = _workload()
        if group.exists:
            frontier, states_json, held, late = _load(group.get[0])
            states = wl.states_from_json(states_json)
        else:
            frontier, states, held, late = None, wl.init_states(specs), [], 0
        raw = group.getCurrentWatermarkMs()
        behind, newest = single.take_rows(pdfs, names, types, timezone, frontier, held)
        now = single.batch_watermark(raw, newest, watermark_delay_ms)
        bound = now * 1000
        late += len(behind)
        settled, held = single.settle(held, bound)
        outs: list[list[dict]] = [[] for _ in specs]
        if settled:
            states, got = wl.step_all(specs, states, settled)  # each statement sorts them its own way
            outs = [a + b for a, b in zip(outs, got, strict=True)]
        states, got = wl.advance_all(specs, states, watermark_ts(now))
        outs = [a + b for a, b in zip(outs, got, strict=True)]
        frontier = bound if frontier is None else max(frontier, bound)
        group.update((_dump(frontier, wl.states_to_json(states), held, late),))
        dues = []
        if held:
            dues.append(single.held_due(held))
        due = wl.wakeup_all(specs, states)
        if due is not None and math.isfinite(due):
            dues.append(timeout_ms(due))
        if dues:
            group.setTimeoutTimestamp(max(min(dues), raw, 1))
        schemas = [single._arrow_schema(s) for s in structs]
        full_schema = single._arrow_schema(full)
        tables = list(_tables(outs, schemas, full_schema))
        if late_rows and behind:
            rows = [single.late_row(row, record_columns, raw, numeric, scale) for row in behind]
            tables.append(single._to_table(rows, full_schema))
        if tables:
            yield pa.concat_tables(tables).to_pandas()

    return freezing(recognize_stream)  # the daemon's collection after each task walks only its objects


def stream_shared(projected: DataFrame, specs: Sequence[RecognizeSpec], *, watermark_delay: float | str | None = None,
                  ts_unit: str | None = None, late_rows: bool = False) -> DataFrame:
    """The tagged result over a stream: one watermark, one ``applyInPandasWithState`` (:func:`stream_function`;
    ``late_rows``: the late side channel).  As one statement's stream, Spark's event-time column reaches the
    state function nulled (:func:`sparkcep.spark.recognize.watermarked_time`): Spark drops no row itself, the
    function applies the per-key late rule.  A ``projected`` with the stream's arrival
    (:data:`~sparkcep.spark.validate.ARRIVAL_COL`) stamps each result with it as the single statement's stream
    does (:func:`stamped_function`)."""
    _workload().check_shareable(specs)
    spec = specs[0]
    df, numeric = single.watermarked_time(projected, spec, watermark_delay=watermark_delay, ts_unit=ts_unit)
    arrival = [ARRIVAL_COL] if ARRIVAL_COL in projected.columns else []
    keep = [*_engine_columns(projected, specs), single._ET, EVENT_TIME, *arrival]
    df = df.select(*[F.col(quoted(c)) for c in keep])
    fn, full = stamped_function(specs, projected.schema, numeric=numeric, ts_unit=ts_unit,
                                timezone=_session_timezone(), late_rows=late_rows,
                                watermark_delay_ms=single.delay_of(df.schema))
    return grouped(df, list(spec.partition_by)).applyInPandasWithState(
        fn, full, single.STATE_SCHEMA, "append", GroupStateTimeout.EventTimeTimeout)


def stamped_function(specs: Sequence[RecognizeSpec], projected: StructType, *, late_rows: bool = False,
                     **options) -> tuple[Callable, StructType]:
    """``(fn, schema)``: :func:`stream_function` of ``specs`` (``options``: its keywords) and the tagged
    schema.  Over a ``projected`` with the stream's arrival each statement's engine also computes its match's
    last row's arrival (:func:`sparkcep.spark.recognize.arrival_measured`), the tagged result's
    :data:`~sparkcep.spark.validate.RESULT_ARRIVAL` (a row of no match: the newest arrival among its key's
    rows of the call, :func:`~sparkcep.spark.operator.stamping_arrival`)."""
    arrival = ARRIVAL_COL in projected.names
    full = tagged_struct(specs, late_rows=late_rows, arrival=arrival)
    if not arrival:
        return stream_function(specs, full, projected, late_rows=late_rows, **options), full
    measured = [single.arrival_measured(s) for s in specs]
    fn = stream_function(measured, full, projected, late_rows=late_rows, **options)
    return stamping_arrival(fn, full.names), full


def run_shared(projected: DataFrame, specs: Sequence[RecognizeSpec], *, watermark_delay: float | str | None = None,
               ts_unit: str | None = None, partitions: int | None = None, late_rows: bool = False) -> DataFrame:
    """:func:`batch_shared` or :func:`stream_shared` (``late_rows``: see there), following
    ``projected.isStreaming``."""
    if projected.isStreaming:
        return stream_shared(projected, specs, watermark_delay=watermark_delay, ts_unit=ts_unit,
                             late_rows=late_rows)
    return batch_shared(projected, specs, partitions=partitions)


# ----------------------------------------------------------------------------------------------- the sink


def group_writer(results: Callable[[int, DataFrame], DataFrame], outputs: Sequence[str], late: Sequence[str],
                 dead_letters: str | None, latency: bool = False) -> Callable[[DataFrame, int], None]:
    """The ``foreachBatch`` function of a shared stream (:func:`stream_shared` with ``late_rows``, routed with
    :func:`sparkcep.spark.sinks.routed`): member k's results (``results(k, rows)``: its rows of the
    micro-batch, its outer query applied) into ``outputs[k]``, the late rows into every ``late[k]`` (a row late
    for the group is late for each statement in it), the dead letters into ``dead_letters``; each micro-batch's
    files written once (:func:`sparkcep.spark.sinks.write_batch`).  A result's arrival is not written; with
    ``latency`` each result gets :data:`~sparkcep.spark.validate.LATENCY_COL` instead
    (:func:`sparkcep.spark.sinks.result_latency`)."""
    from sparkcep.spark.late import LATE, REASON, RECORD
    from sparkcep.spark.sinks import DEAD, result_latency, write_batch
    from sparkcep.spark.validate import REASON as REJECT_REASON
    from sparkcep.spark.validate import RECORD as REJECT_RECORD

    side = [F.col(REASON).alias(REJECT_REASON), F.col(RECORD).alias(REJECT_RECORD)]

    def write(df: DataFrame, batch_id: int) -> None:
        df.persist()
        try:
            counts = {row[0]: row[1] for row in df.groupBy(KIND).count().collect()}
            rows = df.where(F.col(KIND) == RESULT)
            for k, path in enumerate(outputs):
                result = results(k, rows)
                written = [F.col(quoted(c)) for c in result.columns if c != RESULT_ARRIVAL]
                extra = [result_latency(result.columns)] if latency else []  # the rows are computed (cached) now
                write_batch(result.select(*written, *extra), path, batch_id, None if counts.get(RESULT) else 0)
            for path in late:
                write_batch(df.where(F.col(KIND) == LATE).select(*side), path, batch_id, counts.get(LATE, 0))
            if dead_letters is not None:
                write_batch(df.where(F.col(KIND) == DEAD).select(*side), dead_letters, batch_id,
                            counts.get(DEAD, 0))
        finally:
            df.unpersist()

    return write
