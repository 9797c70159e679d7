"""The batch path of ``CompiledQuery.apply`` with its fixed cost per Spark job cut (one SQL query for the filter
and the column pruning; the operator's input schema derived in Python; one temp view per input
DataFrame; no Spark job before the action, which reads the input once; a Python worker that unpickles the
operator imports the engines, not the compiler): the same rows as the oracle, and a derived schema equal to the
one Spark analyses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import LongType, StringType, StructField, StructType

import sparkcep
from sparkcep import api
from sparkcep.compiler.codegen.sql import filter_sql
from sparkcep.oracles.match import match_rows, trend_aggregates
from sparkcep.spark.operator import MatchOperator
from sparkcep.spark.results import canonical
from tests.strategies import event_streams

SCHEMA = StructType([StructField("type", StringType()), StructField("ts", LongType()),
                     StructField("x", LongType()), StructField("id", LongType()), StructField("note", StringType())])

QUERIES = [
    "PATTERN SEQ(A a, B b, C c) WHERE [id] WITHIN 6 RETURN a.ts, c.ts",
    "PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 5",
    "PATTERN SEQ(A a, !(D d), B b) WHERE [id] WITHIN 6 RETURN a.ts, b.ts",
    "PATTERN SEQ(A a, B+ b[], C c) USING strict_contiguity WHERE [id] WITHIN 8 RETURN a.ts, count(b[].x) AS n",
    "PATTERN SEQ(A a, B b) USING partition_contiguity WHERE [id] WITHIN 5 RETURN a.ts, b.x",
    "PATTERN SEQ(A a, B b) WHERE a.x > 1 WITHIN 4 RETURN a.ts, b.ts",
    "RETURN id, COUNT(*) AS n PATTERN SEQ(A a, B+ b[]) WHERE [id] WITHIN 5 SLIDE 5",
]


def test_default_filter_sql_is_unchanged_without_drop():
    """``drop`` only changes the SQL when given: without it it is the explain/job SQL as before."""
    plan = sparkcep.compile(QUERIES[0]).plan(SCHEMA)
    assert filter_sql(plan, "t", SCHEMA.fieldNames(), drop=()) == filter_sql(plan, "t", SCHEMA.fieldNames())


def test_drop_is_in_the_one_select():
    plan = sparkcep.compile(QUERIES[0]).plan(SCHEMA)
    sql = filter_sql(plan, "t", SCHEMA.fieldNames(), drop=("type", "note", "x"))
    inner = sqlglot.parse_one(sql, read="spark").find(sqlglot.exp.Subquery).this
    assert [e.alias_or_name for e in inner.expressions] == ["ts", "id", "_mask"]
    assert "`type` IN ('A', 'B', 'C')" in sql  # the filter still reads the dropped type column


@pytest.mark.spark
@settings(max_examples=14, deadline=None)
@given(text=st.sampled_from(QUERIES), events=event_streams("ABCD", max_size=10, max_gap=2))
def test_batch_apply_equals_oracle_and_derived_schema_is_sparks(spark, text, events):
    events = [{**e, "note": "n"} for e in events]
    df = spark.createDataFrame([(e["type"], e["ts"], e.get("x"), e.get("id"), e["note"]) for e in events], SCHEMA)
    q = sparkcep.compile(text)
    got = [r.asDict() for r in q.apply(df).collect()]
    plan = q.plan(SCHEMA)
    spec = api.operator_spec(plan)
    if "COUNT" in text:  # a trend aggregate (GRETA): per window and key
        want = trend_aggregates(q.query, events)
        assert sorted((r["window_start"], r["id"], int(r["n"])) for r in got) == sorted(
            (r["window_start"], r["id"], r["n"]) for r in want)
    else:
        assert canonical(got) == canonical(match_rows(q.query, events))
    drop, derived = api._candidate_schema(plan, spec, SCHEMA, "ts", "type")
    analysed = spark.sql(filter_sql(plan, api._view_of(df), SCHEMA.fieldNames(), pretty=False,
                                    arrival="contiguity" in text, drop=drop))
    assert [(f.name, f.dataType) for f in analysed.schema.fields] == [(f.name, f.dataType) for f in derived.fields]
    if "RETURN" in text:  # without RETURN every column is an output
        assert "note" not in analysed.columns  # never shuffled (pruned by the plan or dropped)


@pytest.mark.spark
def test_one_view_per_input_dataframe(spark):
    df = spark.createDataFrame([("A", 1, 1, 1, "n"), ("B", 2, 2, 1, "n")], SCHEMA)
    q = sparkcep.compile(QUERIES[1])
    first = q.apply(df).count()
    view = api._views[df]
    assert q.apply(df).count() == first == 1
    assert api._views[df] == view
    other = spark.createDataFrame([("A", 1, 1, 1, "n")], SCHEMA)
    assert q.apply(other).count() == 0 and api._views[other] != view


@pytest.mark.spark
def test_apply_runs_no_spark_job_and_its_count_reads_the_input_once(spark, tmp_path):
    """apply() only builds the plan (no schema inference, sampling or view job); the action then reads the input
    once, in one stage, however many stages the shuffle and the count add."""
    rows = [("A", 1, 1, 1, "n"), ("B", 2, 2, 1, "n"), ("C", 3, 0, 1, "n"), ("D", 4, 0, 2, "n")]
    spark.createDataFrame(rows, SCHEMA).write.parquet(str(tmp_path / "events"))
    df = spark.read.parquet(str(tmp_path / "events"))
    q = sparkcep.compile(QUERIES[0])
    sc, tracker = spark.sparkContext, spark.sparkContext.statusTracker()

    def jobs(group, action):
        sc.setJobGroup(group, group)
        try:
            return action(), tracker.getJobIdsForGroup(group)
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)

    result, built = jobs("sparkcep-apply", lambda: q.apply(df))
    assert built == []
    found, counted = jobs("sparkcep-count", result.count)
    assert found == 1
    store = sc._jsc.sc().statusStore()
    reads = [store.lastStageAttempt(s).inputRecords() for j in counted for s in tracker.getJobInfo(j).stageIds]
    assert [r for r in reads if r] == [4], reads


def test_a_worker_unpickling_the_operator_imports_no_compiler(tmp_path):
    """What mapInArrow sends a Python worker (the batch path's partition function, pickled as Spark pickles it)
    runs there with the engines imported and the compiler not: the package imports its public names on first use,
    so a worker's start skips sqlglot, Lark, networkx and the compiler (most of its import time)."""
    from pyspark.serializers import CloudPickleSerializer

    q = sparkcep.compile(QUERIES[0])
    plan = q.plan(SCHEMA)
    spec = api.operator_spec(plan)
    _, candidates = api._candidate_schema(plan, spec, SCHEMA, "ts", "type")
    assert candidates.fieldNames() == ["ts", "id", "_mask"]
    path = tmp_path / "partition_function.pickle"
    operator = MatchOperator(spec, candidates, timezone="UTC")
    path.write_bytes(CloudPickleSerializer().dumps(operator.partition_function()))
    worker = f"""
import pickle, sys
import pyarrow as pa
fn = pickle.loads(open({str(path)!r}, "rb").read())
batch = pa.RecordBatch.from_pydict({{"ts": [1, 2, 3], "id": [7, 7, 7], "_mask": pa.array([1, 2, 4], pa.int32())}})
out = pa.Table.from_batches(list(fn(iter([batch]))))
print(out.to_pylist())
print(sorted({{m.split(".")[0] for m in sys.modules}} & {{"sqlglot", "lark", "networkx"}}),
      sorted(m for m in sys.modules if m.startswith(("sparkcep.compiler", "sparkcep.grammar", "sparkcep.api"))))
"""
    root = str(Path(__file__).resolve().parent.parent)
    run = subprocess.run([sys.executable, "-c", worker], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": root}, check=False)
    assert run.returncode == 0, run.stderr
    rows, imported = run.stdout.strip().splitlines()
    assert rows == "[{'a_ts': 1, 'c_ts': 3}]"
    assert imported == "[] []"
