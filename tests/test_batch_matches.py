"""The one batch path (:func:`~sparkcep.spark.adapters.batch_matches`: repartition by key,
``mapInArrow``, the keys split in Python): the same rows as the oracle when a partition's keys span Arrow
batches, with null keys, with and without the prefilter; through ``CompiledQuery.apply`` and ``apply_match`` on
Spark with a tiny ``maxRecordsPerBatch``."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

import sparkcep
from sparkcep.ir.ast import EquivItem, EquivTest
from sparkcep.oracles.match import match_rows, trend_aggregates
from sparkcep.runtime_udfs.match import engine as match_engine
from sparkcep.runtime_udfs.match.budget import MatchBudgetError
from sparkcep.spark import operator as spark_operator
from sparkcep.spark import schema as spark_schema
from sparkcep.spark.adapters import apply_match
from sparkcep.spark.operator import MatchOperator, prefilter_of
from sparkcep.spark.results import canonical
from sparkcep.spark.schema import MASK
from tests.strategies import event_streams
from tests.test_match_arrow import arrow_group, rows_ms
from tests.test_match_arrow import canonical as canonical_ms
from tests.test_match_engine import seq_query, spec_for
from tests.test_spark_adapters import ANY_BC, RETURNS, WHERE, A, C, random_events, schema_of


def partition_rows(op: MatchOperator, table: pa.Table, chunk: int) -> list[dict]:
    """What ``mapInArrow`` gets back from the operator for one partition handed over in batches of ``chunk``."""
    out = list(op.partition_function()(iter(table.to_batches(max_chunksize=chunk))))
    assert all(b.schema.names == op.output_schema.names for b in out)
    return rows_ms(pa.Table.from_batches(out)) if out else []


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(0, 50), spread=st.sampled_from([2_000, 8_000, 30_000]),
       chunk=st.integers(1, 7), masked=st.booleans(), convert=st.sampled_from([1, 5, 1 << 16]),
       sliced=st.sampled_from([1, 6, 1 << 19]))
def test_a_partition_in_small_batches_equals_the_oracle(seed, n, spread, chunk, masked, convert, sliced):
    """Keys interleaved and spanning batch boundaries, id 3 as a null key; with ``_mask`` (as the Spark filter
    computes it) the prefilter runs, without it the engine computes the mask; the kept rows become engine events
    ``convert`` rows (whole keys) at a time; the partition runs in slices of whole keys of ``sliced`` rows."""
    query = seq_query(A, ANY_BC, C, where=WHERE, within=4000, returns=RETURNS)
    spec = spec_for(query)
    events = [{**e, "id": None if e["id"] == 3 else e["id"]} for e in random_events(n, seed=seed, spread_ms=spread)]
    table = arrow_group(events)
    if masked:
        plan = match_engine._plan(spec)
        table = table.append_column(MASK, pa.array([plan.mask_of(e) for e in events], pa.int64()))
    op = MatchOperator(spec, schema_of(), timezone="UTC")
    before, spark_schema.CONVERT_ROWS = spark_schema.CONVERT_ROWS, convert
    slices, spark_operator.SLICE_ROWS = spark_operator.SLICE_ROWS, sliced
    try:
        got = partition_rows(op, table, chunk)
    finally:
        spark_schema.CONVERT_ROWS = before
        spark_operator.SLICE_ROWS = slices
    assert canonical_ms(got) == canonical_ms(match_rows(query, events))


def test_a_big_partition_runs_in_slices_of_whole_keys_under_one_budget():
    """``run_slices`` hands a partition's results out in slices of whole keys (a key's rows in input order:
    ``_arrival`` first under partition contiguity, the rows shuffled here), the same rows as ``run_table`` over the
    whole partition, and the partition's one match budget spans the slices: a budget every slice stays under but
    their sum exceeds fails the partition, as it fails ``run_table``."""
    rng = np.random.default_rng(23)
    n = 400
    order = rng.permutation(n)
    table = pa.table({"type": pa.array(rng.choice(["A", "B", "C"], n).tolist()),
                      "ts": pa.array((np.arange(n) // 2).tolist(), pa.int64()),
                      "x": pa.array(rng.integers(0, 5, n).tolist(), pa.int64()),
                      "id": pa.array(rng.integers(0, 40, n).tolist(), pa.int64()),
                      "_arrival": pa.array(np.arange(n).tolist(), pa.int64())}).take(pa.array(order))
    schema = StructType([StructField("type", StringType()), StructField("ts", LongType()),
                         StructField("x", LongType()), StructField("id", LongType()),
                         StructField("_arrival", LongType())])
    q = sparkcep.compile("PATTERN SEQ(A a, B b) USING partition_contiguity WHERE [id] WITHIN 9 RETURN a.ts, b.ts, a.x")
    op = MatchOperator(q.spec(schema), schema)
    whole = op.run_table(table).to_pylist()
    slices = list(op.run_slices(table, slice_rows=30))
    assert len(slices) > 5 and all(t.num_rows < len(whole) for t in slices)
    assert sorted(r for t in slices for r in map(str, t.to_pylist())) == sorted(map(str, whole)) and whole
    events = [dict(zip(table.column_names, row, strict=True)) for row in zip(*table.to_pydict().values(),
                                                                             strict=True)]
    assert canonical(whole) == canonical(match_rows(q.query, sorted(events, key=lambda e: e["_arrival"])))
    tight = MatchOperator(q.spec(schema), schema, max_matches=len(whole) - 1)
    assert max(t.num_rows for t in slices) < len(whole) - 1
    with pytest.raises(MatchBudgetError):
        list(tight.run_slices(table, slice_rows=30))


def test_the_prefilter_of_the_agreed_interface_is_used():
    """A match spec under skip_till_any_match gets the prefilter (once P2's module is there), and rows it drops
    never become engine events: a key whose rows cannot match yields nothing."""
    spec = spec_for(seq_query(A, C, where=EquivTest((EquivItem("id"),)), within=10))
    fn = prefilter_of(spec)
    if fn is None:
        pytest.skip("sparkcep.runtime_udfs.match.prefilter is not there")
    op = MatchOperator(spec, schema_of(LongType()), timezone="UTC")
    table = pa.table({"id": pa.array([1, 1, 2, 2], pa.int64()), "type": ["A", "C", "A", "C"],
                      "ts": pa.array([1, 5, 1, 50], pa.int64()), MASK: pa.array([1, 2, 1, 2], pa.int64())})
    keep = op._prefiltered(table, op.key_ids(table))
    assert keep is not None and keep.tolist() == [True, True, False, False]
    assert op.run_table(table).to_pylist() == op.run_table(table.slice(0, 2)).to_pylist() != []


def test_key_ids_are_dense_and_null_and_nan_are_one_key():
    schema = StructType([StructField("k", DoubleType()), StructField("j", StringType()),
                         StructField("type", StringType()), StructField("ts", LongType())])
    q = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [k, j] WITHIN 10 RETURN a.ts, b.ts")
    op = MatchOperator(q.spec(schema), schema)
    table = pa.table({"k": pa.array([math.nan, None, 1.0, 1.0, None], pa.float64()),
                      "j": ["x", "x", "x", "y", None], "type": ["A", "B", "A", "B", "B"],
                      "ts": pa.array([1, 2, 3, 4, 5], pa.int64())})
    ids = op.key_ids(table)
    assert ids.dtype == np.int64 and ids[0] == ids[1] and len(set(ids.tolist())) == 4 and set(ids) == set(range(4))
    assert op.run_table(table).to_pylist() == [{"a_ts": 1, "b_ts": 2}]
    no_key = MatchOperator(sparkcep.compile("PATTERN SEQ(A a, B b) WITHIN 10").spec(schema), schema)
    assert no_key.key_ids(table) is None


# ----------------------------------------------------------------------------------------------- on Spark

SCHEMA = StructType([StructField("type", StringType()), StructField("ts", LongType()),
                     StructField("x", LongType()), StructField("id", LongType())])

QUERIES = [
    "PATTERN SEQ(A a, B b, C c) WHERE [id] WITHIN 6 RETURN a.ts, c.ts",
    "PATTERN SEQ(A a, !(D d), B b) WHERE [id] AND d.x > a.x WITHIN 6 RETURN a.ts, b.ts",
    "PATTERN SEQ(A a, B+ b[], C c) WHERE [id] AND b[i].x >= b[i-1].x WITHIN 8 RETURN a.ts, c.ts, count(b[].x) AS n",
    "PATTERN SEQ(A a, B b) USING skip_till_next_match WHERE [id] AND a.x < b.x WITHIN 5 RETURN a.ts, b.ts",
    "PATTERN SEQ(A a, B b) USING partition_contiguity WHERE [id] WITHIN 5 RETURN a.ts, b.x",
    "PATTERN SEQ(A a, B b) WHERE [id, x] WITHIN 5 RETURN a.ts, b.ts",
    "PATTERN SEQ(A a, B b) WHERE a.x > 1 WITHIN 4 RETURN a.ts, b.ts",
    "RETURN COUNT(*) AS n PATTERN SEQ(A a, B+ b[]) WHERE [id] WITHIN 6 SLIDE 3",
]


@pytest.mark.spark
@settings(max_examples=16, deadline=None)
@given(text=st.sampled_from(QUERIES), events=event_streams("ABCD", max_size=14, max_gap=2,
                                                           attrs={"x": (0, 3), "id": (0, 2)}),
       wiring=st.sampled_from(["apply", "apply_match"]), partitions=st.sampled_from([None, 1, 3]))
def test_the_batch_path_on_spark_equals_the_oracle(spark, text, events, wiring, partitions):
    """Three rows per Arrow batch, so that a partition's keys span batches; id 2 is a null key."""
    events = [{**e, "id": None if e["id"] == 2 else e["id"]} for e in events]
    df = spark.createDataFrame([(e["type"], e["ts"], e["x"], e["id"]) for e in events], SCHEMA)
    q = sparkcep.compile(text, buckets=partitions)
    conf = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(conf)
    spark.conf.set(conf, 3)
    try:
        if wiring == "apply":
            result = q.apply(df)
        else:  # the adapter on the compiler's filter, as a user wiring it by hand would
            df.createOrReplaceTempView("batch_matches_events")
            candidates = spark.sql(q.sql(SCHEMA, "batch_matches_events"))
            result = apply_match(candidates, q.spec(SCHEMA), buckets=partitions)
        got = [r.asDict() for r in result.collect()]
    finally:
        spark.conf.set(conf, before)
    if "COUNT" in text:  # one group: the keys' rows of a window merged
        want = trend_aggregates(q.query, events)
        assert sorted((r["window_start"], int(r["n"])) for r in got) == sorted(
            (r["window_start"], r["n"]) for r in want)
    else:
        assert canonical(got) == canonical(match_rows(q.query, events))


@pytest.mark.spark
def test_a_small_batch_runs_in_every_shuffle_partition(spark):
    """Adaptive execution merges a shuffle of a few kB into one partition when it is given only the key, and
    the whole engine then runs in one Python worker; the batch path passes the partition count, so the matches
    of many keys come out of every partition (spark.sql.shuffle.partitions = 2 in the test session)."""
    from pyspark.sql import functions as F

    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"
    rows = [{"type": t, "ts": 10 * k + i, "id": k, "x": 1} for k in range(40) for i, t in enumerate("AB")]
    df = spark.createDataFrame(rows, "type string, ts long, id long, x long")
    q = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 5 RETURN a.id AS id")
    result = q.apply(df).withColumn("pid", F.spark_partition_id())
    seen = {r.pid: r.n for r in result.groupBy("pid").agg(F.count("*").alias("n")).collect()}
    assert sum(seen.values()) == 40
    assert set(seen) == {0, 1}, seen
