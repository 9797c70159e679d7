"""A per-match ``sum(v[].x)`` of BIGINTs beyond the 64-bit range is NULL, as Spark's ``try_sum`` gives it
(one semantics: an overflow on one match never kills a job); a trend SUM stays exact."""

from __future__ import annotations

import pytest

import sparkcep
from sparkcep.ir.ast import Attr, Func
from sparkcep.oracles.match import match_rows
from sparkcep.runtime_udfs.expr.scalar import compile_expr

BIG = 2 ** 62
QUERY = "PATTERN SEQ(A a, B+ b[]) WITHIN 10 RETURN b[1].ts AS first, sum(b[].x) AS s, avg(b[].x) AS m"
EVENTS = [{"type": "A", "ts": 1, "x": 0}, {"type": "B", "ts": 2, "x": BIG}, {"type": "B", "ts": 3, "x": BIG},
          {"type": "B", "ts": 4, "x": -BIG}]


def test_sum_beyond_bigint_is_null_and_within_it_exact():
    total = compile_expr(Func("sum", (Attr("b", "x", "all"),)))
    assert total({"b": [{"x": BIG}, {"x": BIG}]}) is None
    assert total({"b": [{"x": BIG}, {"x": BIG}, {"x": -BIG}]}) == BIG  # the whole sum decides, as try_sum
    assert total({"b": [{"x": -BIG}, {"x": -BIG}]}) == -(2 ** 63)
    assert total({"b": [{"x": 1.5}, {"x": 2}]}) == 3.5


@pytest.mark.spark
def test_spark_gives_the_oracle_rows_and_try_sum_agrees(spark):
    assert spark.sql(f"SELECT try_sum(x) AS s FROM VALUES ({BIG}L), ({BIG}L) AS t(x)").collect()[0].s is None
    q = sparkcep.compile(QUERY)
    df = spark.createDataFrame(EVENTS, "type STRING, ts BIGINT, x BIGINT")
    got = sorted(((r.first, r.s) for r in q.apply(df).collect()), key=repr)
    expected = sorted(((r["first"], r["s"]) for r in match_rows(q.query, EVENTS)), key=repr)
    assert got == expected and (2, None) in got and (2, BIG) in got
