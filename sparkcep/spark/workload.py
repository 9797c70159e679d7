"""A whole workload as one Spark DataFrame: the shared operators of its Sharon plan and the queries that run
alone, their outputs united into one result with a ``query`` column.

This is what a generated workload job (``sparkcep compile WORKLOAD.cep -o job.py``), ``sparkcep run WORKLOAD.cep``
and :meth:`sparkcep.api.CompiledWorkload.apply` run.  The plan comes in
as the JSON of :func:`workload_data` (made at compile time, baked into the job):

* ``shared``: one :class:`~sparkcep.ir.sharing.SharedSpec` per sharing context, run by
  :class:`~sparkcep.spark.operator.MatchOperator` with the shared engine (rows ``query,
  window_start, window_end, <GROUP BY columns>, <one column per aggregate of its queries>,
  aggregate_overflow``; Spark groups by the GROUP BY columns, one engine state per partition key inside);
* ``alone``: the queries outside the shared executor's scope, each with its engine spec, its Spark SQL
  filter (over the temporary view ``events``) and its grouping columns; their rows get a ``query`` column.

Spark allows one ``applyInPandasWithState`` per streaming query, so the workload runs as **one stateful
operator**: each operator's input rows (its filter's candidates) are tagged with the operator's number
(:data:`BRANCH`) and its grouping values (:data:`GROUP`, JSON), united and grouped by ``(BRANCH, GROUP)``;
the group function hands each group to its operator's own function (the engines and their group states are
those of the operator run alone) and widens its rows to the united output.

Batch runs on the batch path of single queries (:func:`~sparkcep.spark.adapters.batch_matches`):
each operator's input prepared by :func:`~sparkcep.spark.adapters.batch_input`, the tagged rows
united, repartitioned by ``(BRANCH, hash of the grouping values)`` and run by one ``mapInArrow`` call per
partition (:func:`partition_function`), which splits the partition's Arrow table by operator and hands each
part to that operator's :meth:`~sparkcep.spark.operator.MatchOperator.run_table` (keys split with
Arrow, no pandas), then widens its Arrow rows to the united output.

Streaming (``side_channel=True``), every operator routes late events to the side channel of
:mod:`sparkcep.spark.late` (rows of kind ``late``) instead of dropping them, so that
:func:`sparkcep.spark.sinks.routed` / :func:`sparkcep.spark.sinks.start` write results, late events and dead letters of
the whole workload in one streaming query, exactly once.  The event-time watermark is on the events as read,
before the operators' filters (:func:`~sparkcep.spark.adapters.watermarked`): every event moves
event time, whichever operator reads it; an event two operators read is late (and routed) in each.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pyarrow as pa
import sqlglot
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import LongType, StringType, StructField, StructType

from sparkcep.ir.errors import CEPError
from sparkcep.ir.serde import from_data, to_data
from sparkcep.ir.sharing import SharedAggregate, SharedQuery, SharedSpec
from sparkcep.ir.spec import with_default_outputs
from sparkcep.spark import late
from sparkcep.spark.adapters import batch_input, shuffle_partitions, unread_columns, watermarked, with_event_time
from sparkcep.spark.arrow import _session_timezone, by_id, gathered
from sparkcep.spark.heap import freeze_worker_heap
from sparkcep.spark.operator import MatchOperator
from sparkcep.spark.schema import EVENT_TIME, STATE_SCHEMA, load_spec, watermark_delay
from sparkcep.spark.validate import ARRIVAL_COL, RESULT_ARRIVAL, quoted

__all__ = ["QUERY", "apply_workload", "load_workload", "workload_data"]

#: The column naming the query of each result row.
QUERY = "query"
#: The grouping columns of the workload's one operator: the operator's number, its grouping values as JSON.
BRANCH, GROUP = "_sparkcep_branch", "_sparkcep_group"


def workload_data(shared: list[SharedSpec], alone: list[dict]) -> dict:
    """The JSON-able plan of a workload job: ``shared`` specs and ``alone`` entries (``name``, ``spec``,
    ``filter_sql``, ``group``)."""
    return {"shared": [to_data(s) for s in shared],
            "alone": [{**a, "spec": to_data(a["spec"])} for a in alone]}


def _shared_spec(d: dict) -> SharedSpec:
    return SharedSpec(tuple((sid, tuple(p)) for sid, p in d["segments"]),
                      tuple(SharedQuery(q["name"], q["output"], tuple(q["segments"]),
                                        tuple(SharedAggregate(a["name"], a["func"], tuple(a["positions"]), a["attr"])
                                              for a in q.get("aggregates", ())),
                                        from_data(q.get("having")))
                            for q in d["queries"]),
                      d["window"], d["slide"], tuple(d["key"]), tuple(d["group_by"]))


def load_workload(text: str | dict) -> tuple[list[SharedSpec], list[dict]]:
    """``(shared specs, alone entries)`` from the JSON of :func:`workload_data`."""
    data = json.loads(text) if isinstance(text, str) else text
    shared = [_shared_spec(s) for s in data["shared"]]
    alone = [{**a, "spec": load_spec(a["spec"]), "group": list(a["group"])} for a in data["alone"]]
    return shared, alone


class _Branch:
    """One operator of the workload, as shipped to the executors: its query name (None for a shared operator,
    whose rows name their queries), input columns, and its operator (batch: :func:`partition_function` calls
    its ``run_table``) or its streaming function."""

    def __init__(self, name: str | None, op: MatchOperator, columns, streaming: bool):
        self.name, self.columns = name, list(columns)
        self.group_cols = list(op.group_cols)
        self.fields = list(op.output_schema.fields)
        #: the rows carry their arrival: the results come out stamped with it (RESULT_ARRIVAL)
        self.arrival = op.arrival
        #: batch: the operator, whose ``run_table`` runs this branch's part of a partition
        self.op = None if streaming else op
        self.stream = op.stream_function() if streaming else None


def _branches(events: DataFrame, shared, alone, ts_col: str, type_col: str,
              side_channel: bool, ts_unit: str | None = None) -> list[tuple[_Branch, DataFrame, tuple | None]]:
    """Each operator with its candidates (the events its filter keeps; batch: as
    :func:`~sparkcep.spark.adapters.batch_input` prepares them) and, streaming, its filter as
    :func:`_selection` parts (None: not of that shape); with ``side_channel`` each routes its late rows
    (``MatchOperator(late_rows=True)``)."""
    out = []
    streaming = events.isStreaming
    # each operator emits what its micro-batch decides by the watermark's delay (MatchOperator.batch_watermark)
    delay = watermark_delay(events.schema)
    # a stream's arrival rides along to every operator, which stamps its results with it (RESULT_ARRIVAL)
    carried = streaming and ARRIVAL_COL in events.columns
    attributes = [c for c in events.columns if c != ARRIVAL_COL]
    for spec in shared:
        unread = set(unread_columns(spec, events.columns, ts_col, type_col)) - ({ARRIVAL_COL} if carried else set())
        columns = [c for c in events.columns if c not in unread]
        read = StructType([events.schema[c] for c in columns])
        op = MatchOperator(spec, read, ts_col=ts_col, type_col=type_col, late_rows=side_channel, ts_unit=ts_unit,
                           watermark_delay_ms=delay)
        types = sorted({t for _, pattern in spec.segments for t in pattern})
        test = sqlglot.exp.In(this=sqlglot.exp.column(type_col, quoted=True),
                              expressions=[sqlglot.exp.Literal.string(t) for t in types])
        selection = (test.sql(dialect="spark"), [(c, sqlglot.exp.column(c, quoted=True).sql(dialect="spark"))
                                                 for c in columns])
        out.append((_Branch(None, op, columns, streaming), events.where(F.col(type_col).isin(types)).select(*columns),
                    selection))
    for entry in alone:
        sql = _carrying(entry["filter_sql"], ARRIVAL_COL) if carried else entry["filter_sql"]
        candidates = events.sparkSession.sql(sql)
        spec = with_default_outputs(entry["spec"], attributes)  # without RETURN: every attribute
        schema = candidates.schema
        if not streaming:
            candidates, schema = batch_input(candidates, spec, schema, ts_col, type_col)
        elif EVENT_TIME in schema.names:  # the source's (SELECT *): apply_workload makes it anew after the union
            candidates = candidates.drop(EVENT_TIME)
            schema = StructType([f for f in schema.fields if f.name != EVENT_TIME])
        op = MatchOperator(spec, schema, ts_col=ts_col, type_col=type_col, late_rows=side_channel, ts_unit=ts_unit,
                           watermark_delay_ms=delay)
        selection = _selection(sql) if streaming else None
        out.append((_Branch(entry["name"], op, schema.names, streaming), candidates, selection))
    return out


def _carrying(sql: str, column: str) -> str:
    """A query's Spark SQL filter over ``events`` with ``column`` of ``events`` passed through (added to the
    items of its innermost ``SELECT ... FROM events``, unless that selects ``*``): the sqlglot tree, rewritten."""
    exp = sqlglot.exp
    tree = sqlglot.parse_one(sql, read="spark")
    for select in tree.find_all(exp.Select):
        source = select.args.get("from_")
        if (source is not None and isinstance(source.this, exp.Table) and source.this.name == "events"
                and not any(isinstance(e, exp.Star) for e in select.expressions)
                and column not in {e.alias_or_name for e in select.expressions}):
            select.append("expressions", exp.column(column, quoted=True))
    return tree.sql(dialect="spark")


def _selection(sql: str) -> tuple[str | None, list[tuple[str, str]]] | None:
    """A query's Spark SQL filter over ``events`` (:func:`sparkcep.compiler.codegen.sql.filter_select`: ``SELECT
    items FROM events [WHERE c]``, or that inside ``SELECT * FROM (...) AS candidates WHERE m``) as its parts:
    ``(condition, [(column, expression)])``, Spark SQL generated from the sqlglot tree, the outer condition's
    references to the inner items replaced by their expressions (None: no condition).  None for any other
    shape (``SELECT *``, a join, ...)."""
    exp = sqlglot.exp
    try:
        tree = sqlglot.parse_one(sql, read="spark")
    except sqlglot.errors.ParseError:
        return None
    if not isinstance(tree, exp.Select) or any(tree.args.get(k) for k in ("group", "having", "order", "limit")):
        return None
    conditions, source = [], tree.args.get("from_")
    outer = tree.args.get("where")
    if source is not None and isinstance(source.this, exp.Subquery):
        if [type(e) for e in tree.expressions] != [exp.Star]:
            return None
        tree, conditions = source.this.this, [outer.this] if outer is not None else []
        if not isinstance(tree, exp.Select) or any(tree.args.get(k) for k in ("group", "having", "order", "limit")):
            return None
        source = tree.args.get("from_")
    if (source is None or not isinstance(source.this, exp.Table) or source.this.name != "events"
            or tree.args.get("joins")):
        return None
    if any(isinstance(e, exp.Star) for e in tree.expressions):
        return None
    items = {e.alias_or_name: e.unalias() for e in tree.expressions}
    inner = tree.args.get("where")

    def inlined(n):  # an outer reference to an inner item: the item's expression
        item = items.get(n.name) if isinstance(n, exp.Column) and not n.table else None
        return n if item is None or (isinstance(item, exp.Column) and item.name == n.name) else item.copy()

    conditions = ([inner.this] if inner is not None else []) + [c.transform(inlined) for c in conditions]
    condition = exp.and_(*[exp.paren(c) for c in conditions]) if conditions else None
    return (condition.sql(dialect="spark") if condition is not None else None,
            [(name, e.sql(dialect="spark")) for name, e in items.items()])


def _one_pass(events: DataFrame, pairs) -> DataFrame | None:
    """Streaming: every operator's candidates from **one** pass over ``events``, tagged by :data:`BRANCH` (an
    event several operators read comes out once for each), or None when a filter is not of
    :func:`_selection`'s shape or a column has different types in two operators' candidates.  A union of the
    operators' filtered ``events`` instead repeats the whole subtree under each (Spark shares no sub-plan in a
    streaming query): the source is read, validated, watermarked and shed once per operator.  Each row becomes
    ``IF(condition, struct(branch, columns...), NULL)`` per operator, the non-null ones exploded
    (``inline``)."""
    from pyspark.sql.types import IntegerType

    if any(selection is None for _, _, selection in pairs):
        return None
    fields: dict[str, Any] = {BRANCH: IntegerType()}
    for _, candidates, _ in pairs:
        for f in candidates.schema.fields:
            if fields.setdefault(f.name, f.dataType) != f.dataType:
                return None
    structs = []
    for i, (_, _, (condition, items)) in enumerate(pairs):
        given = dict(items)
        row = F.struct(*[(F.lit(i) if name == BRANCH else F.expr(given[name]) if name in given
                          else F.lit(None)).cast(kind).alias(name) for name, kind in fields.items()])
        structs.append(F.when(F.expr(condition), row) if condition is not None else row)
    return events.select(F.inline(F.filter(F.array(*structs), lambda x: x.isNotNull())))


def partition_function(branches: list[_Branch], schema: pa.Schema) -> Any:
    """``fn(batches) -> batches`` for ``mapInArrow`` over the tagged rows of every operator, repartitioned by
    ``(BRANCH, GROUP)``: the partition's record batches gathered into one table (a key's rows may span batches),
    split by :data:`BRANCH` (stably: each operator's rows stay in input order), each part run by its operator's
    :meth:`~sparkcep.spark.operator.MatchOperator.run_table` and widened to ``schema`` (the united
    output as Arrow, :func:`_widen_table`)."""

    def run_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()  # the daemon's collection after the task then walks only this task's objects
        table = gathered(batches)
        if table is None:
            return
        table, bounds = by_id(table, table.column(BRANCH).to_numpy())
        ids = table.column(BRANCH).to_numpy()
        for lo, hi in itertools.pairwise(bounds):
            b = branches[int(ids[lo])]
            result = b.op.run_table(table.slice(lo, hi - lo).select(b.columns))
            if result.num_rows:
                yield from _widen_table(result, b.name, schema).to_batches()

    return run_partition


def _widen_table(table: pa.Table, name: str | None, schema: pa.Schema) -> pa.Table:
    """An operator's Arrow result with the united output's columns (absent ones null) and its query name."""
    n, arrays = table.num_rows, []
    for field in schema:
        if field.name == QUERY and name is not None:
            arrays.append(pa.array([name] * n, field.type))
        elif field.name in table.column_names:
            column = table.column(field.name)
            arrays.append(column if column.type == field.type else column.cast(field.type))
        else:
            arrays.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _widen(frame: pd.DataFrame, name: str | None, names: list[str]) -> pd.DataFrame:
    """An operator's output frame with the united output's columns (absent ones null) and its query name."""
    if name is not None:
        frame = frame.assign(**{QUERY: name})
    missing = {c: pd.Series([None] * len(frame), dtype=object, index=frame.index) for c in names
               if c not in frame.columns}
    return frame.assign(**missing)[names] if missing else frame[names]


def apply_workload(events: DataFrame, workload, *, ts_col: str = "ts", type_col: str = "type", lateness: float = 0,
                   side_channel: bool = False, ts_unit: str | None = None, shed=None) -> DataFrame:
    """Every operator of ``workload`` (JSON text or data of :func:`workload_data`, or its
    :func:`load_workload` pair) on ``events`` (batch or streaming; registered here as the temporary view
    ``events`` the alone queries' filters read), as one operator whose output has a :data:`QUERY` column and
    the columns of every query (a column a query lacks is null in its rows).  ``side_channel`` (streaming):
    late events come out as rows of :data:`~sparkcep.spark.late.KIND` ``late``; the rows the operators
    are given are counted as ``events_relevant`` (an event two operators read counts twice).  ``ts_unit``: the
    unit of numeric ts, which scales the stream's event time (:mod:`sparkcep.runtime_udfs.event_time`).
    ``shed`` (streaming): ``DataFrame -> DataFrame``, the one load-shedding stage in front of every operator,
    put on the events after the watermark (dropped events still move event time)."""
    shared, alone = workload if isinstance(workload, tuple) else load_workload(workload)
    streaming = events.isStreaming
    side_channel = side_channel and streaming
    if streaming:  # the watermark on every event, before the operators' filters: any event moves event time
        events = watermarked(events, ts_col, lateness, ts_unit=ts_unit)
        if shed is not None:
            events = shed(events)
    events.createOrReplaceTempView("events")
    pairs = _branches(events, shared, alone, ts_col, type_col, side_channel, ts_unit)
    if not pairs:
        raise CEPError("the workload has no query to run")
    branches = [b for b, _, _ in pairs]  # what the group functions carry to the executors (no DataFrames)
    fields = {QUERY: None}
    for b in branches:
        for f in b.fields:
            seen = fields.setdefault(f.name, f)
            if seen is not None and seen.dataType != f.dataType:
                raise CEPError(f"column {f.name!r} is {seen.dataType.simpleString()} in one query and "
                               f"{f.dataType.simpleString()} in {b.name or 'a shared operator'}: give one of them "
                               "another name (AS ...)")
    schema = StructType([f if f is not None else StructField(QUERY, StringType()) for f in fields.values()])
    if any(b.arrival for b in branches):  # each result with the arrival of its events, as a single query's
        schema = StructType([*schema.fields, StructField(RESULT_ARRIVAL, LongType(), True)])
    tagged = _one_pass(events, pairs) if streaming else None
    if tagged is not None:  # each operator's grouping values, by its branch
        group = F.lit("")
        for i, b in enumerate(branches):
            if b.group_cols:
                group = F.when(F.col(BRANCH) == i, F.to_json(F.struct(*[F.col(c) for c in b.group_cols]))
                               ).otherwise(group)
        tagged = tagged.select(BRANCH, group.alias(GROUP), *[c for c in tagged.columns if c != BRANCH])
    for i, (b, candidates, _) in enumerate(pairs if tagged is None else ()):
        if not streaming:  # only a partitioning: a hash of the grouping values will do
            group = F.hash(*[F.col(quoted(c)) for c in b.group_cols]) if b.group_cols else F.lit(0)
        else:
            group = F.to_json(F.struct(*[F.col(c) for c in b.group_cols])) if b.group_cols else F.lit("")
        part = candidates.select(F.lit(i).alias(BRANCH), group.alias(GROUP), *candidates.columns)
        tagged = part if tagged is None else tagged.unionByName(part, allowMissingColumns=True)

    if not streaming:  # the batch path of single queries (batch_matches), one operator per part
        from pyspark.sql.pandas.types import to_arrow_schema

        arrow_schema = to_arrow_schema(schema, timezone=_session_timezone())
        spread = tagged.repartition(shuffle_partitions(tagged), BRANCH, GROUP)
        return spread.mapInArrow(partition_function(branches, arrow_schema), schema)

    out_schema = late.with_side_columns(schema) if side_channel else schema
    out_names = out_schema.names

    def stream(key: Any, pdfs: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        b = branches[int(key[0])]
        for out in b.stream(key[1:], (pdf[b.columns] for pdf in pdfs), state):
            yield _widen(out, b.name, out_names)

    tagged = with_event_time(tagged, events, ts_col, keep_late=side_channel, ts_unit=ts_unit)
    if side_channel:
        from sparkcep.spark.sinks import counted

        tagged = counted(tagged, "events_relevant")
    return tagged.groupBy(BRANCH, GROUP).applyInPandasWithState(
        stream, outputStructType=out_schema, stateStructType=STATE_SCHEMA, outputMode="append",
        timeoutConf=GroupStateTimeout.EventTimeTimeout)
