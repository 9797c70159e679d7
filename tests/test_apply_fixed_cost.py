"""The batch path of ``CompiledQuery.apply`` with its fixed cost per Spark job cut (one SQL query for the filter
and the column pruning; the operator's input schema derived in Python; one temp view per input
DataFrame): the same rows as the oracle, and a derived schema equal to the one Spark analyses."""

from __future__ import annotations

import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import LongType, StringType, StructField, StructType

import sparkcep
from sparkcep import api
from sparkcep.compiler.codegen.sql import filter_sql
from sparkcep.oracles.match import match_rows, trend_aggregates
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
