"""The batch path of a whole workload (:func:`sparkcep.spark.workload.apply_workload` on a batch
DataFrame): the batch path of single queries (``batch_input``, repartition, one ``mapInArrow`` call per
partition, each operator's rows run by its ``MatchOperator.run_table``), with the operators' rows interleaved in
a partition and their keys spanning Arrow batches (a tiny ``maxRecordsPerBatch``): each query's rows are its
oracle's.  The workload mixes a shared operator (GROUP BY coarser than the key: rows merged across keys), a
trend query alone, match queries alone with and without a key, and a strict-contiguity query (``_arrival``)."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.spark import workload as workload_spark
from sparkcep.spark.results import canonical
from tests.strategies import event_streams
from tests.test_generated_workload_job import oracle_rows

WORKLOAD = ("a: RETURN COUNT(*) PATTERN SEQ(A, B, C) WHERE [id] WITHIN 6 SLIDE 3;\n"
            "b: RETURN COUNT(*) PATTERN SEQ(A, B, D) WHERE [id] WITHIN 6 SLIDE 3;\n"
            "c: RETURN COUNT(*) PATTERN SEQ(B, D) WHERE [id] WITHIN 6 SLIDE 3;\n"
            "t: RETURN id, COUNT(*) AS nt PATTERN SEQ(A a, C c) WHERE [id] AND a.x < c.x WITHIN 6 SLIDE 2;\n"
            "m: PATTERN SEQ(A a, D d) WHERE [id] AND a.x <= d.x WITHIN 6 RETURN a.ts AS at, d.ts AS dt, a.id AS id;\n"
            "s: PATTERN SEQ(B b, C c) USING strict_contiguity WHERE [id] WITHIN 4 RETURN b.ts AS bt, c.ts AS ct;\n"
            "n: PATTERN SEQ(C c, D d) WITHIN 3 RETURN c.ts AS c_ts, d.ts AS d_ts")
COLUMNS = ["type", "ts", "x", "id"]
SCHEMA = "type STRING, ts BIGINT, x BIGINT, id BIGINT"


def plain(rows) -> list[dict]:
    """Spark rows as the oracle gives them: no nulls (other queries' columns), no overflow flag, ints."""
    return [{k: int(v) if isinstance(v, Decimal) else v for k, v in r.asDict().items()
             if v is not None and k != "aggregate_overflow"} for r in rows]


def test_the_workload_plan_has_every_kind_of_operator():
    data, _ = sparkcep.compile_shared_workload(WORKLOAD, budget=None).job_plan()
    [shared] = data["shared"]
    assert {q["name"] for q in shared["queries"]} == {"a", "b", "c"} and shared["key"] == ["id"]
    assert not shared["group_by"]  # coarser than the key: one Spark partition holds every id, rows merged
    assert {a["name"]: a["group"] for a in data["alone"]} == {"t": ["id"], "m": ["id"], "s": [], "n": []}


@pytest.mark.spark
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                 HealthCheck.function_scoped_fixture])
@given(events=event_streams("ABCD", min_size=10, max_size=40, max_gap=2, attrs={"x": (0, 3), "id": (0, 3)}),
       records=st.sampled_from([1, 3, 7]), partitions=st.sampled_from([1, 2, 3]))
def test_workload_batch_path_equals_the_oracle_across_arrow_batches(spark, events, records, partitions):
    conf = {"spark.sql.execution.arrow.maxRecordsPerBatch": str(records),
            "spark.sql.shuffle.partitions": str(partitions)}
    before = {k: spark.conf.get(k) for k in conf}
    df = spark.createDataFrame([tuple(e[c] for c in COLUMNS) for e in events], SCHEMA)
    w = sparkcep.compile_shared_workload(WORKLOAD, budget=None)
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        result = w.apply(df)
        plan = result._jdf.queryExecution().executedPlan().toString()
        got = plain(result.collect())
    finally:
        for k, v in before.items():
            spark.conf.set(k, v)
    assert "MapInArrow" in plan and "FlatMapGroupsInPandas" not in plan
    assert canonical(got) == canonical(oracle_rows(WORKLOAD, events, COLUMNS))


def test_partition_function_routes_interleaved_rows_to_their_operators():
    """No JVM: the tagged rows of two operators, interleaved and cut into record batches of 2 rows, give each
    operator's own ``run_table`` rows, widened to the united columns with the query's name."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sparkcep.spark.operator import MatchOperator

    read = StructType([StructField("type", StringType()), StructField("ts", LongType()),
                       StructField("id", LongType())])
    m1 = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 5 RETURN a.ts AS at, b.ts AS bt")
    m2 = sparkcep.compile("PATTERN SEQ(B b, A a) WITHIN 5 RETURN b.ts AS bt, a.id AS id")
    ops = [MatchOperator(m1.spec(read), read), MatchOperator(m2.spec(read), read)]
    branches = [workload_spark._Branch(name, op, read.names, streaming=False)
                for name, op in zip("pq", ops, strict=True)]
    schema = pa.schema([("query", pa.string()), ("at", pa.int64()), ("bt", pa.int64()), ("id", pa.int64())])
    events = [("A", 1, 1), ("B", 2, 1), ("A", 3, 2), ("B", 4, 2), ("B", 5, 1), ("A", 6, 1)]
    rows = [(b, *e) for e in events for b in (1, 0)]  # each event once per operator, interleaved
    table = pa.table({workload_spark.BRANCH: pa.array([r[0] for r in rows], pa.int32()),
                      "type": [r[1] for r in rows], "ts": pa.array([r[2] for r in rows], pa.int64()),
                      "id": pa.array([r[3] for r in rows], pa.int64())})
    out = pa.Table.from_batches(list(workload_spark.partition_function(branches, schema)(table.to_batches(2))))
    assert out.schema == schema
    expected = []
    for i, (b, op) in enumerate(zip(branches, ops, strict=True)):
        own = table.filter(pc.equal(table.column(workload_spark.BRANCH), i)).select(read.names)
        expected += [{"query": b.name, "at": None, "bt": None, "id": None, **r} for r in op.run_table(own).to_pylist()]
    assert expected and canonical(out.to_pylist()) == canonical(expected)
