"""What a query needs of each attribute it reads (the per-query input schema of sparkcep.spark.validate), and column
quoting: pure, no Spark."""

from __future__ import annotations

import sparkcep
from sparkcep.api import input_columns
from sparkcep.ir.needs import NUMERIC, TEXT, attribute_needs
from sparkcep.spark.validate import quoted


def needs(text: str) -> dict[str, str]:
    return attribute_needs([sparkcep.compile(text).query])


def test_order_comparisons_arithmetic_and_sums_need_numbers():
    assert needs("PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 8") == {"x": NUMERIC}
    assert needs("PATTERN SEQ(A a, B b) WHERE a.p + 1 = b.q AND a.s = 'up' WITHIN 8 RETURN a.s, b.r") == {
        "p": NUMERIC, "q": NUMERIC, "s": TEXT}
    assert needs("RETURN SUM(A.v) AS s, MAX(A.m) AS m PATTERN SEQ(A+, B) WITHIN 8") == {"v": NUMERIC}


def test_unconstrained_attributes_are_left_to_inference():
    assert needs("PATTERN SEQ(A a, B b) WHERE [id] AND a.k = b.k WITHIN 8 RETURN a.z") == {}


def test_input_columns_are_the_attributes_read_or_all_without_return():
    q = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 8 RETURN a.ts AS at, b.y AS y")
    attributes, _ = input_columns([q])
    assert set(attributes) == {"id", "x", "ts", "y"}
    assert input_columns([sparkcep.compile("PATTERN SEQ(A a, B b) WITHIN 8")])[0] is None


def test_quoted_column_names():
    assert quoted("it's") == "`it's`" and quoted("b`q") == "`b``q`" and quoted("a.b") == "`a.b`"


def test_a_column_spark_sql_would_not_read_back_bare_is_quoted():
    """``if`` is not in the tokenizer's keyword list but starts a function: the filter SQL must quote it (a
    bare ``if > 1`` does not parse); plain names stay bare."""
    import sqlglot

    from sparkcep.compiler.codegen.sql import DIALECT, column

    for name in ("if", "x", "left", "interval"):
        sql = f"SELECT * FROM t WHERE {column(name).sql(dialect=DIALECT)} > 1"
        where = sqlglot.parse_one(sql, read=DIALECT).args["where"].this
        assert where.this.name == name, sql
    assert column("x").sql(dialect=DIALECT) == "x"
