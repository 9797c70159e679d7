"""The MATCH_RECOGNIZE front end: statements of the Flink and Trino documentation read into IR, the row pattern
grammar (every form, printed and read back), and syntax errors with their place in the statement."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkcep.compiler.recognize import check_recognize
from sparkcep.grammar.recognize import expression_text, parse_pattern, parse_recognize, pattern_text, recognize_text
from sparkcep.ir import recognize as rx
from sparkcep.ir.ast import Attr, BinOp, Duration, Func, Literal, Unary
from sparkcep.ir.errors import CEPSyntaxError
from sparkcep.ir.outer import one_line

A, B, C, D = (rx.PVar(n) for n in "ABCD")

FLINK_VSHAPE = """SELECT *
FROM Ticker
    MATCH_RECOGNIZE (
        PARTITION BY symbol
        ORDER BY rowtime
        MEASURES
            START_ROW.rowtime AS start_tstamp,
            LAST(PRICE_DOWN.rowtime) AS bottom_tstamp,
            LAST(PRICE_UP.rowtime) AS end_tstamp
        ONE ROW PER MATCH
        AFTER MATCH SKIP TO LAST PRICE_UP
        PATTERN (START_ROW PRICE_DOWN+ PRICE_UP)
        DEFINE
            PRICE_DOWN AS
                (LAST(PRICE_DOWN.price, 1) IS NULL AND PRICE_DOWN.price < START_ROW.price) OR
                    PRICE_DOWN.price < LAST(PRICE_DOWN.price, 1),
            PRICE_UP AS
                PRICE_UP.price > LAST(PRICE_DOWN.price, 1)
    ) MR;"""

TRINO_ORDERS = """SELECT * FROM orders MATCH_RECOGNIZE(
     PARTITION BY custkey
     ORDER BY orderdate
     MEASURES
              A.totalprice AS starting_price,
              LAST(B.totalprice) AS bottom_price,
              LAST(U.totalprice) AS top_price
     ONE ROW PER MATCH
     AFTER MATCH SKIP PAST LAST ROW
     PATTERN (A B+ C+ D+)
     SUBSET U = (C, D)
     DEFINE
              B AS totalprice < PREV(totalprice),
              C AS totalprice > PREV(totalprice) AND totalprice <= A.totalprice,
              D AS totalprice > PREV(totalprice)
     )"""

FLINK_WITHIN = """SELECT *
FROM Ticker
    MATCH_RECOGNIZE(
        PARTITION BY symbol
        ORDER BY rowtime
        MEASURES
            C.rowtime AS dropTime,
            A.price - C.price AS dropDiff
        ONE ROW PER MATCH
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A B* C) WITHIN INTERVAL '1' HOUR
        DEFINE
            B AS B.price > A.price - 10,
            C AS C.price < A.price - 10
    )"""

FLINK_AGGREGATES = """SELECT *
FROM Ticker
    MATCH_RECOGNIZE (
        PARTITION BY symbol
        ORDER BY rowtime
        MEASURES
            FIRST(A.rowtime) AS start_tstamp,
            LAST(A.rowtime) AS end_tstamp,
            AVG(A.price) AS avgPrice
        ONE ROW PER MATCH
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A+ B)
        DEFINE
            A AS AVG(A.price) < 15
    ) MR"""


def nav(kind, var, attr, offset, semantics=None):
    return rx.Nav(kind, Attr(var, attr), offset, semantics)


def test_flink_vshape():
    q = parse_recognize(FLINK_VSHAPE)
    assert q.source == "Ticker" and q.alias == "MR"
    assert q.partition_by == ("symbol",)
    assert q.order_by == (rx.OrderItem("rowtime"),)
    assert q.pattern == rx.PConcat((rx.PVar("START_ROW"), rx.PQuant(rx.PVar("PRICE_DOWN"), 1, None),
                                    rx.PVar("PRICE_UP")))
    assert q.measures == (rx.Measure(Attr("START_ROW", "rowtime"), "start_tstamp"),
                          rx.Measure(nav("LAST", "PRICE_DOWN", "rowtime", 0), "bottom_tstamp"),
                          rx.Measure(nav("LAST", "PRICE_UP", "rowtime", 0), "end_tstamp"))
    assert q.rows_per_match == rx.ONE_ROW
    assert q.skip == rx.Skip(rx.SKIP_TO_LAST, "PRICE_UP")
    down_prev = nav("LAST", "PRICE_DOWN", "price", 1)
    assert q.defines == (
        ("PRICE_DOWN", BinOp("OR", BinOp("AND", Unary("IS NULL", down_prev),
                                         BinOp("<", Attr("PRICE_DOWN", "price"), Attr("START_ROW", "price"))),
                             BinOp("<", Attr("PRICE_DOWN", "price"), down_prev))),
        ("PRICE_UP", BinOp(">", Attr("PRICE_UP", "price"), down_prev)),
    )
    assert one_line(q.outer_sql) == "SELECT * FROM __sparkcep_matches AS MR"
    assert q.within is None


def test_trino_subset_and_universal_columns():
    q = parse_recognize(TRINO_ORDERS)
    assert q.subsets == (("U", ("C", "D")),)
    assert q.skip == rx.Skip(rx.SKIP_PAST_LAST_ROW)
    assert q.measures[2] == rx.Measure(nav("LAST", "U", "totalprice", 0), "top_price")
    prev = rx.Nav("PREV", Attr(None, "totalprice"), 1)
    assert q.defines[0] == ("B", BinOp("<", Attr(None, "totalprice"), prev))
    assert q.defines[1][1].right == BinOp("<=", Attr(None, "totalprice"), Attr("A", "totalprice"))
    assert q.alias is None and q.outer_sql == "SELECT * FROM __sparkcep_matches"


def test_flink_within_after_pattern_and_arithmetic():
    q = parse_recognize(FLINK_WITHIN)
    assert q.within == Duration(1, "h")
    assert q.measures[1].expr == BinOp("-", Attr("A", "price"), Attr("C", "price"))
    assert q.defines[0][1] == BinOp(">", Attr("B", "price"), BinOp("-", Attr("A", "price"), Literal(10)))


def test_flink_aggregate_in_define():
    q = parse_recognize(FLINK_AGGREGATES)
    assert q.measures[0].expr == nav("FIRST", "A", "rowtime", 0)
    assert q.measures[2].expr == rx.Agg("avg", Attr("A", "price"), "A")
    assert q.defines == (("A", BinOp("<", rx.Agg("avg", Attr("A", "price"), "A"), Literal(15))),)


def wrap(clause: str, tail: str = "") -> str:
    return f"SELECT * FROM t MATCH_RECOGNIZE ({clause}){tail}"


def wrap_rowtime(clause: str) -> str:  # the ORDER BY after the MEASURES that read the time
    return f"SELECT * FROM t MATCH_RECOGNIZE ({clause} ORDER BY rowtime)"


def test_row_pattern_functions_and_semantics():
    q = parse_recognize(wrap(
        "ORDER BY ts MEASURES RUNNING LAST(A.x, 2) AS a, FINAL FIRST(B.y) AS b, PREV(LAST(A.x, 1), 3) AS c, "
        "NEXT(x) AS d, CLASSIFIER() AS e, CLASSIFIER(U) AS f, MATCH_NUMBER() AS g, COUNT(*) AS h, "
        "FINAL COUNT(A.*) AS i, SUM(U.x) AS j, MIN(x) AS k, RUNNING MAX(B.y * 2) AS l "
        "ALL ROWS PER MATCH PATTERN (A B) SUBSET U = (A, B)"))
    got = [m.expr for m in q.measures]
    assert got == [
        nav("LAST", "A", "x", 2, "RUNNING"), nav("FIRST", "B", "y", 0, "FINAL"),
        rx.Nav("PREV", nav("LAST", "A", "x", 1), 3), nav("NEXT", None, "x", 1),
        rx.Classifier(), rx.Classifier("U"), rx.MatchNumber(), rx.Agg("count", None, None),
        rx.Agg("count", None, "A", "FINAL"), rx.Agg("sum", Attr("U", "x"), "U"), rx.Agg("min", Attr(None, "x")),
        rx.Agg("max", BinOp("*", Attr("B", "y"), Literal(2)), "B", "RUNNING"),
    ]


def test_row_expressions_become_hidden_columns():
    q = parse_recognize(wrap(
        "ORDER BY ts MEASURES upper(A.name) AS a, CASE WHEN B.x > 1 THEN 'hi' END AS b, upper(B.name) AS c "
        "PATTERN (A B) DEFINE B AS B.name LIKE 'x%' AND abs(B.x - A.x) > 1 AND x IN (1, 2) "
        "AND NOT (CAST(A.s AS INT) IS NOT NULL)"))
    a, b, c = (m.expr for m in q.measures)
    assert a == rx.RowExpr("UPPER(name)", "__rx0", "A")
    assert b == rx.RowExpr("CASE WHEN x > 1 THEN 'hi' END", "__rx1", "B")
    assert c == rx.RowExpr("UPPER(name)", "__rx0", "B")  # the same SQL shares one column
    cond = q.defines[0][1]
    assert cond == BinOp("AND", BinOp("AND", BinOp("AND", rx.RowExpr("name LIKE 'x%'", "__rx2", "B"), BinOp(
        ">", Func("abs", (BinOp("-", Attr("B", "x"), Attr("A", "x")),)), Literal(1))),
        rx.RowExpr("x IN (1, 2)", "__rx3", None)),
        Unary("NOT", Unary("IS NOT NULL", rx.RowExpr("TRY_CAST(s AS INT)", "__rx4", "A"))))


@pytest.mark.parametrize(("define", "sql", "var"), [
    ("v > 0.5BD", "v > CAST('0.5' AS DECIMAL(1, 1))", None),
    ("B.v > 1E-2BD", "v > CAST('1E-2' AS DECIMAL(2, 2))", "B"),
    ("ts - INTERVAL 1 MINUTE < TIMESTAMP '2024-01-01 00:03:00'",
     "TRY_SUBTRACT(ts, INTERVAL '1' MINUTE) < CAST('2024-01-01 00:03:00' AS TIMESTAMP)", None),
    ("B.ts + INTERVAL 1 MINUTE < TIMESTAMP '2024-01-01 00:05:00'",
     "TRY_ADD(ts, INTERVAL '1' MINUTE) < CAST('2024-01-01 00:05:00' AS TIMESTAMP)", "B"),
])
def test_an_operator_over_one_row_with_spark_values_is_spark_s(define, sql, var):
    """An operator over one row holding a value only Spark computes (a DECIMAL literal, an INTERVAL, a CAST) is
    computed by Spark whole: the engine would compare a DOUBLE with a DECIMAL, a TIMESTAMP minus an INTERVAL,
    otherwise than Spark (NULL: no match)."""
    q = parse_recognize(wrap(f"ORDER BY ts PATTERN (A B) DEFINE B AS {define}"))
    assert q.defines[0][1] == rx.RowExpr(sql, "__rx0", var)


def test_only_the_operator_over_a_spark_value_is_spark_s():
    """AND/NOT/IS NULL over Spark's values, and the operators around the one over a Spark value, stay the
    engine's (Spark SQL under ANSI would stop the job where the engine's arithmetic gives NULL)."""
    q = parse_recognize(wrap("ORDER BY ts PATTERN (A B) DEFINE B AS B.i * 3 > 0 AND NOT (upper(s) = 'X') "
                             "AND B.ts < TIMESTAMP '2024-01-01 00:00:00' + INTERVAL '4' MINUTE"))
    assert q.defines[0][1] == BinOp("AND", BinOp("AND", BinOp(">", BinOp("*", Attr("B", "i"), Literal(3)), Literal(0)),
                                                 Unary("NOT", rx.RowExpr("UPPER(s) = 'X'", "__rx0", None))),
                                    BinOp("<", Attr("B", "ts"), rx.RowExpr(
                                        "TRY_ADD(CAST('2024-01-01 00:00:00' AS TIMESTAMP), INTERVAL '4' MINUTE)",
                                        "__rx1")))


@pytest.mark.parametrize("measure", ["LAST(CAST(B.v AS DECIMAL(10, 3)) + 1BD)", "LAST(B.ts + INTERVAL 1 DAY)",
                                     "FIRST(B.v * 2BD, 1)"])
def test_a_literal_with_a_suffix_or_unit_reads_no_row(measure):
    """The literal's suffix (``1BD``) and the INTERVAL's unit are no columns of the current row: the argument
    reads B's rows only, and Spark computes it per row."""
    q = parse_recognize(wrap(f"ORDER BY ts MEASURES {measure} AS m PATTERN (A B)"))
    check_recognize(q, streaming=False)
    assert isinstance(q.measures[0].expr.arg, rx.RowExpr) and q.measures[0].expr.arg.var == "B"


@pytest.mark.parametrize(("clause", "expected"), [
    ("ONE ROW PER MATCH", rx.ONE_ROW),
    ("ALL ROWS PER MATCH", rx.ALL_ROWS),
    ("ALL ROWS PER MATCH SHOW EMPTY MATCHES", rx.ALL_ROWS),
    ("ALL ROWS PER MATCH OMIT EMPTY MATCHES", rx.ALL_ROWS_OMIT_EMPTY),
    ("ALL ROWS PER MATCH WITH UNMATCHED ROWS", rx.ALL_ROWS_WITH_UNMATCHED),
])
def test_rows_per_match(clause, expected):
    assert parse_recognize(wrap(f"ORDER BY ts {clause} PATTERN (A)")).rows_per_match == expected


@pytest.mark.parametrize(("clause", "expected"), [
    ("AFTER MATCH SKIP PAST LAST ROW", rx.Skip()),
    ("AFTER MATCH SKIP TO NEXT ROW", rx.Skip(rx.SKIP_TO_NEXT_ROW)),
    ("AFTER MATCH SKIP TO FIRST B", rx.Skip(rx.SKIP_TO_FIRST, "B")),
    ("AFTER MATCH SKIP TO LAST B", rx.Skip(rx.SKIP_TO_LAST, "B")),
    ("AFTER MATCH SKIP TO B", rx.Skip(rx.SKIP_TO_LAST, "B")),
])
def test_skip(clause, expected):
    assert parse_recognize(wrap(f"ORDER BY ts {clause} PATTERN (A B)")).skip == expected


def test_order_by_partition_by_and_outer_statement():
    q = parse_recognize(
        "SELECT m.k, count(*) AS n FROM db.events MATCH_RECOGNIZE (PARTITION BY k, `odd col` "
        "ORDER BY ts DESC NULLS LAST, seq ASC, z NULLS FIRST MEASURES A.x AS x PATTERN (A)) AS m "
        "WHERE x > 1 GROUP BY m.k ORDER BY n")
    assert q.source == "db.events"
    assert q.partition_by == ("k", "odd col")
    assert q.order_by == (rx.OrderItem("ts", False, False), rx.OrderItem("seq"), rx.OrderItem("z", True, True))
    assert one_line(q.outer_sql) == ("SELECT m.k, COUNT(*) AS n FROM __sparkcep_matches AS m WHERE x > 1 "
                                     "GROUP BY m.k ORDER BY n")
    assert q.outer_sql == "SELECT m.k, count(*) AS n FROM __sparkcep_matches AS m WHERE x > 1 GROUP BY m.k ORDER BY n"


@pytest.mark.parametrize(("within", "expected"), [
    ("WITHIN INTERVAL '10' SECOND", Duration(10, "s")),
    ("WITHIN INTERVAL '2' MINUTE", Duration(2, "min")),
    ("WITHIN INTERVAL '1.5' HOUR", Duration(1.5, "h")),
    ("WITHIN INTERVAL '3 days'", Duration(3, "d")),
    ("WITHIN 500", Duration(500, None)),
])
def test_within(within, expected):
    assert parse_recognize(wrap(f"ORDER BY ts PATTERN (A B) DEFINE B AS B.x > 1 {within}")).within == expected


# ------------------------------------------------------------------------------------------------- patterns

@pytest.mark.parametrize(("text", "expected"), [
    ("A B+ C", rx.PConcat((A, rx.PQuant(B, 1, None), C))),
    ("A B*? C", rx.PConcat((A, rx.PQuant(B, 0, None, False), C))),
    ("(A|B){2,4} C", rx.PConcat((rx.PQuant(rx.PAlt((A, B)), 2, 4), C))),
    ("A? B?? C{3} D{3}?", rx.PConcat((rx.PQuant(A, 0, 1), rx.PQuant(B, 0, 1, False), rx.PQuant(C, 3, 3),
                                      rx.PQuant(D, 3, 3, False)))),
    ("A{2,} B{,5} C{1,2}? D+?", rx.PConcat((rx.PQuant(A, 2, None), rx.PQuant(B, 0, 5),
                                            rx.PQuant(C, 1, 2, False), rx.PQuant(D, 1, None, False)))),
    ("PERMUTE(A, B | C, D+)", rx.PPermute((A, rx.PAlt((B, C)), rx.PQuant(D, 1, None)))),
    ("A {- B+ -} C", rx.PConcat((A, rx.PExclude(rx.PQuant(B, 1, None)), C))),
    ("^ A $", rx.PConcat((rx.PAnchor("start"), A, rx.PAnchor("end")))),
    ("()", rx.PEmpty()),
    ("A () | ((B))", rx.PAlt((rx.PConcat((A, rx.PEmpty())), B))),
    ("A (B C)*", rx.PConcat((A, rx.PQuant(rx.PConcat((B, C)), 0, None)))),
    ("permute(A) -- a comment\n B", rx.PConcat((rx.PPermute((A,)), B))),
])
def test_pattern_forms(text, expected):
    assert parse_pattern(text) == expected


NAMES = st.sampled_from(["A", "B", "C", "Down", "up_2", "SET", "my var", "a`b", "Permute"])
LEAVES = st.one_of(NAMES.map(rx.PVar), st.just(rx.PEmpty()), st.sampled_from([rx.PAnchor("start"),
                                                                              rx.PAnchor("end")]))


@st.composite
def quantified(draw, inner):
    low = draw(st.integers(0, 4))
    high = draw(st.one_of(st.none(), st.integers(low, 6)))
    return rx.PQuant(draw(inner), low, high, draw(st.booleans()))


PATTERNS = st.recursive(LEAVES, lambda inner: st.one_of(
    st.lists(inner, min_size=2, max_size=4).map(lambda xs: rx.PConcat(tuple(xs))),
    st.lists(inner, min_size=2, max_size=3).map(lambda xs: rx.PAlt(tuple(xs))),
    st.lists(inner, min_size=1, max_size=3).map(lambda xs: rx.PPermute(tuple(xs))),
    inner.map(rx.PExclude),
    quantified(inner),
), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(PATTERNS)
def test_printed_patterns_parse_back(p):
    text = pattern_text(p)
    assert parse_pattern(text) == p
    statement = wrap(f"ORDER BY ts PATTERN ({text})")
    assert parse_recognize(statement).pattern == p


def test_pattern_positions_are_in_the_statement():
    text = "SELECT *\nFROM t MATCH_RECOGNIZE (\n  ORDER BY ts\n  PATTERN (A  Bee+)\n)"
    p = parse_recognize(text).pattern
    bee = p.items[1].inner
    assert (bee.span.line, bee.span.column, bee.span.end_column) == (4, 15, 18)
    assert text[bee.span.start:bee.span.end] == "Bee"


# ------------------------------------------------------------------------------------------------- errors

def error(text: str) -> CEPSyntaxError:
    with pytest.raises(CEPSyntaxError) as info:
        parse_recognize(text)
    return info.value


@pytest.mark.parametrize(("text", "message", "place"), [
    (wrap("ORDER BY ts PATTERN (A B |)"), "unexpected end of the pattern", ")"),
    (wrap("ORDER BY ts PATTERN (A{3,2})"), "minimum above its maximum", "{3,2}"),
    (wrap("ORDER BY ts PATTERN (A -})"), "unexpected '-}'", "-}"),
    (wrap("ORDER BY ts PATTERN (A B#)"), "unexpected character '#'", "#"),
    (wrap("ORDER BY ts PATTERN (A{99999})"), "the limit is 10,000", "99999"),
    (wrap("ORDER BY ts PATTERN ()"), "empty PATTERN", "("),
    (wrap("ORDER BY ts DEFINE A AS A.x > 1"), "needs a PATTERN", ")"),
    (wrap("ORDER BY ts PATTERN (A) PATTERN (B)"), "PATTERN given twice", "PATTERN"),
    (wrap("ORDER BY ts PATTERN (A) DEFINE A AS A.x = = 1"), "an operand is missing", "="),
    (wrap("ORDER BY ts PATTERN (A) DEFINE A AS A.x > 1 extra"), "unexpected 'extra'", "extra"),
    (wrap("ORDER BY ts PATTERN (A) DEFINE A AS A.x = 'oops"), "unterminated quote", "'"),
    (wrap("ORDER BY ts MEASURES A.x PATTERN (A)"), "expression AS name", "A.x"),
    (wrap("ORDER BY ts PATTERN (A) DEFINE A A.x > 1"), "variable AS condition", "A A.x > 1"),
    (wrap("ORDER BY ts PATTERN (A) FOO"), "expected another clause", "FOO"),
    (wrap("ORDER BY ts AFTER MATCH SKIP TO PATTERN (A)"), "expected a pattern variable", "PATTERN"),
    (wrap("ORDER BY ts AFTER MATCH SKIP SOMEWHERE PATTERN (A)"), "expected PAST LAST ROW", "SOMEWHERE"),
    (wrap("ORDER BY ts PATTERN (A) WITHIN INTERVAL '1' FORTNIGHT"), "WITHIN takes INTERVAL", "WITHIN"),
    (wrap("ORDER BY ts MEASURES PREV(A.x, -1) AS p PATTERN (A)"), "non-negative integer", "-1"),
    (wrap("ORDER BY ts MEASURES FINAL upper(A.x) AS p PATTERN (A)"), "FINAL applies to a row pattern", "FINAL"),
    (wrap("ORDER BY ts MEASURES FINAL MATCH_NUMBER() AS p PATTERN (A)"), "FINAL applies to a row pattern", "FINAL"),
    (wrap("ORDER BY ts MEASURES SUM(*) AS p PATTERN (A)"), "only COUNT(*)", "SUM(*)"),
    (wrap("ORDER BY ts MEASURES 1e999 AS p PATTERN (A)"), "out of range", "1e999"),
    (wrap("ORDER BY ts MEASURES A.x + 1" + "0" * 40 + " AS p PATTERN (A)"), "out of range", "1000"),
    (wrap("ORDER BY ts MEASURES stddev(A.x) AS p PATTERN (A)"), "not supported in MATCH_RECOGNIZE", "stddev(A.x)"),
    (wrap("ORDER BY ts MEASURES concat(A.s, B.s) AS p PATTERN (A B)"), "columns of different rows", "concat"),
    (wrap("ORDER BY ts MEASURES upper(LAST(A.s)) AS p PATTERN (A B)"), "row pattern functions", "upper"),
    ("SELECT * FROM t WHERE x > 1", "no MATCH_RECOGNIZE clause", "SELECT"),
    ("SELECT * FROM (SELECT * FROM t) MATCH_RECOGNIZE (ORDER BY ts PATTERN (A))", "must follow FROM",
     "MATCH_RECOGNIZE"),
    (wrap("ORDER BY ts PATTERN (A)", " WHERE"), "cannot read the statement around", "WHERE"),
    (wrap("ORDER BY ts PATTERN (A)", "; SELECT 1"), "one statement expected", ";"),
])
def test_syntax_errors_are_placed(text, message, place):
    err = error(text)
    assert message in err.message
    span = err.span
    assert span is not None and err.source == text
    assert text[span.start:span.end].startswith(place), (text[span.start:span.end], place)
    rendered = str(err)
    assert f"line {span.line}, column {span.column}" in rendered and "^" in rendered


def test_error_position_on_a_later_line():
    text = "SELECT *\nFROM t MATCH_RECOGNIZE (\n  ORDER BY ts\n  PATTERN (A B+ | )\n)"
    err = error(text)
    assert (err.span.line, err.span.column) == (4, 19)
    assert str(err).splitlines()[1:] == ["    PATTERN (A B+ | )", "                    ^"]


def test_keywords_in_any_case_and_clauses_in_any_order():
    lower = parse_recognize("select * from t match_recognize (define B as B.x > prev(B.x) pattern (A B+?) "
                            "after match skip to next row order by ts measures final last(B.x) as x) m")
    upper = parse_recognize("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts MEASURES FINAL LAST(B.x) AS x "
                            "AFTER MATCH SKIP TO NEXT ROW PATTERN (A B+?) DEFINE B AS B.x > PREV(B.x)) m")
    assert replace(lower, outer_sql=upper.outer_sql) == upper  # the outer query as written, in its case
    assert one_line(lower.outer_sql) == one_line(upper.outer_sql) == "SELECT * FROM __sparkcep_matches AS m"
    assert lower.pattern == rx.PConcat((A, rx.PQuant(B, 1, None, False)))


def test_nesting_beyond_the_limit_is_refused_with_a_place():
    deep = "(" * 2100 + "A" + ")*" * 2100
    err = error(wrap(f"ORDER BY ts PATTERN ({deep})"))
    assert "nested too deeply" in err.message and err.span is not None
    ok = "(" * 300 + "A" + ")*" * 300
    assert parse_pattern(pattern_text(parse_pattern(ok))) == parse_pattern(ok)


def test_conditionals_over_several_rows_become_if():
    q = parse_recognize(wrap(
        "ORDER BY ts MEASURES if(A.x > B.x, A.x, B.x) AS a, "
        "CASE WHEN A.x > B.x THEN 'up' WHEN A.x < B.x THEN 'down' END AS b, "
        "CASE A.k WHEN B.k THEN 1 ELSE 0 END AS c, CASE WHEN A.x > 1 THEN A.y END AS d PATTERN (A B)"))
    a, b, c, d = (m.expr for m in q.measures)
    ax, bx = Attr("A", "x"), Attr("B", "x")
    assert a == Func("if", (BinOp(">", ax, bx), ax, bx))
    assert b == Func("if", (BinOp(">", ax, bx), Literal("up"),
                            Func("if", (BinOp("<", ax, bx), Literal("down"), Literal(None)))))
    assert c == Func("if", (BinOp("=", Attr("A", "k"), Attr("B", "k")), Literal(1), Literal(0)))
    assert d == rx.RowExpr("CASE WHEN x > 1 THEN y END", "__rx0", "A")  # one row: Spark computes it


def test_unreadable_expression_is_refused_without_sqlglot_warnings(caplog):
    text = wrap("ORDER BY ts PATTERN (A) DEFINE A AS if?(A.x > 1, 1, 0)")
    err = error(text)
    assert "expected an expression" in err.message
    assert not [r for r in caplog.records if r.name.startswith("sqlglot")]


def test_flink_match_rowtime_is_the_last_rows_time():
    q = parse_recognize(wrap_rowtime("MEASURES MATCH_ROWTIME() AS t, FIRST(A.x) AS f PATTERN (A B) "
                                     "DEFINE B AS B.x > A.x"))
    assert q.measures[0].expr == rx.Nav("LAST", Attr(None, "rowtime"), 0)
    assert q.measures[1].expr == nav("FIRST", "A", "x", 0)
    err = error(wrap("ORDER BY ts MEASURES MATCH_PROCTIME() AS t PATTERN (A)"))
    assert "processing time" in err.message


def test_columns_and_measures_named_like_clause_keywords():
    q = parse_recognize(wrap("ORDER BY ts MEASURES A.within AS subset, A.define AS within PATTERN (A B) "
                             "DEFINE B AS B.within > 1 AND B.subset = A.define WITHIN INTERVAL '1' SECOND"))
    assert [m.name for m in q.measures] == ["subset", "within"]
    assert q.measures[0].expr == Attr("A", "within")
    assert q.defines[0][1] == BinOp("AND", BinOp(">", Attr("B", "within"), Literal(1)),
                                    BinOp("=", Attr("B", "subset"), Attr("A", "define")))
    assert q.within == Duration(1, "s")


@pytest.mark.parametrize("text", [FLINK_VSHAPE, TRINO_ORDERS, FLINK_WITHIN, FLINK_AGGREGATES, wrap(
    "PARTITION BY k, `odd col` ORDER BY ts DESC NULLS FIRST MEASURES RUNNING LAST(A.x, 2) AS a, "
    "FINAL COUNT(U.*) AS `n n`, CLASSIFIER(U) AS c, MATCH_NUMBER() AS m, upper(A.s) || 'x' AS u, "
    "if(A.x > B.x, 'it''s', NULL) AS f, PREV(FIRST(B.x), 3) AS p, -A.x AS neg, -1.5 AS k2 "
    "ALL ROWS PER MATCH WITH UNMATCHED ROWS AFTER MATCH SKIP TO FIRST U PATTERN (^ A {- B+? -} (C | D){2,3} $) "
    "SUBSET U = (A, B) DEFINE B AS B.x > PREV(B.x) AND NOT (A.s LIKE 'a%') AND B.y IS NOT NULL WITHIN 500",
    " AS mr WHERE mr.a > 1 ORDER BY m")])
def test_statements_print_and_parse_back(text):
    q = parse_recognize(text)
    printed = recognize_text(q)
    again = parse_recognize(printed)
    assert again == q
    assert recognize_text(again) == printed


ATTRS = st.builds(Attr, st.sampled_from(["A", "B", "U", None]), st.sampled_from(["x", "price", "odd col"]))
LITERALS = st.one_of(st.integers(-10**12, 10**12), st.floats(allow_nan=False, allow_infinity=False, width=64),
                     st.text(max_size=5), st.booleans(), st.none()).map(Literal)
SEMANTICS = st.sampled_from([None, "RUNNING", "FINAL"])
NAVS = st.one_of(
    st.builds(rx.Nav, st.sampled_from(["FIRST", "LAST", "PREV", "NEXT"]), ATTRS, st.integers(0, 5), SEMANTICS),
    st.builds(rx.Nav, st.sampled_from(["PREV", "NEXT"]),
              st.builds(rx.Nav, st.sampled_from(["FIRST", "LAST"]), ATTRS, st.integers(0, 3), SEMANTICS),
              st.integers(0, 3), SEMANTICS))
AGGS = st.one_of(
    st.builds(lambda var, s: rx.Agg("count", None, var, s), st.sampled_from(["A", "U", None]), SEMANTICS),
    st.builds(lambda f, a, s: rx.Agg(f, a, a.var, s), st.sampled_from(["count", "sum", "avg", "min", "max"]),
              ATTRS, SEMANTICS))
SPECIALS = st.one_of(st.builds(rx.Classifier, st.sampled_from([None, "A", "U"]), SEMANTICS),
                     st.just(rx.MatchNumber()))
EXPRESSIONS = st.recursive(st.one_of(ATTRS, LITERALS, NAVS, AGGS, SPECIALS), lambda inner: st.one_of(
    st.builds(BinOp, st.sampled_from(["+", "-", "*", "/", "%", "=", "!=", "<", "<=", ">", ">=", "AND", "OR"]),
              inner, inner),
    st.builds(Unary, st.sampled_from(["NOT", "IS NULL", "IS NOT NULL"]), inner),
    st.builds(Unary, st.just("-"), inner.filter(lambda e: not isinstance(e, Literal)))), max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(EXPRESSIONS)
def test_printed_expressions_parse_back(e):
    text = wrap(f"ORDER BY ts MEASURES {expression_text(e)} AS m PATTERN (A B) SUBSET U = (A, B)")
    assert parse_recognize(text).measures[0].expr == e


def test_every_grammar_file_is_package_data():
    tomllib = pytest.importorskip("tomllib")
    root = Path(__file__).resolve().parent.parent
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for grammar in (root / "sparkcep").rglob("*.lark"):
        package = ".".join(grammar.parent.relative_to(root).parts)
        assert "*.lark" in data.get(package, []), f"{grammar.name}: add {package!r} to package-data"


def test_expression_error_positions_on_later_lines():
    text = ("SELECT * FROM t MATCH_RECOGNIZE (\n  ORDER BY ts\n  PATTERN (A B)\n  DEFINE B AS\n"
            "    B.x > 1 AND\n    B.y = = 2\n)")
    err = error(text)
    assert (err.span.line, err.span.column) == (6, 11)
    assert str(err).splitlines()[1:] == ["      B.y = = 2", "            ^"]
    text = "SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts MEASURES\n  FINAL upper(A.s) AS u PATTERN (A))"
    err = error(text)
    assert (err.span.line, err.span.column, err.span.end_column) == (2, 3, 8)
    q = parse_recognize("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts MEASURES\n  1 + LAST(A.s, 1) AS u PATTERN (A))")
    nav = q.measures[0].expr.right
    assert (nav.span.line, nav.span.column, nav.span.end_column) == (2, 7, 19)


def test_between_and_in_over_several_rows_become_comparisons():
    q = parse_recognize(wrap("ORDER BY ts MEASURES B.x BETWEEN A.x AND 3 AS a, B.x NOT IN (A.x, 3) AS b, "
                             "B.x IN (1, 2) AS c PATTERN (A B)"))
    a, b, c = (m.expr for m in q.measures)
    bx, ax = Attr("B", "x"), Attr("A", "x")
    assert a == BinOp("AND", BinOp(">=", bx, ax), BinOp("<=", bx, Literal(3)))
    assert b == Unary("NOT", BinOp("OR", BinOp("=", bx, ax), BinOp("=", bx, Literal(3))))
    assert c == rx.RowExpr("x IN (1, 2)", "__rx0", "B")  # one row: Spark computes it


def test_null_safe_equality_over_several_rows():
    q = parse_recognize(wrap("ORDER BY ts MEASURES B.x <=> A.x AS a PATTERN (A B)"))
    bx, ax = Attr("B", "x"), Attr("A", "x")
    assert q.measures[0].expr == Func("coalesce", (BinOp("=", bx, ax),
                                                   BinOp("AND", Unary("IS NULL", bx), Unary("IS NULL", ax))))


def test_quoted_variable_names():
    q = parse_recognize(wrap("ORDER BY ts MEASURES LAST(`SET`.x) AS l PATTERN (`SET`+ `my var`) "
                             "DEFINE `SET` AS `SET`.x > 1"))
    assert q.pattern == rx.PConcat((rx.PQuant(rx.PVar("SET"), 1, None), rx.PVar("my var")))
    assert q.defines[0][0] == "SET" and q.measures[0].expr == nav("LAST", "SET", "x", 0)
    check_recognize(q, streaming=False)


def test_comments_stay_out_of_the_outer_statement():
    """Explain's line of the outer query has no comment; the query Spark runs keeps those inside it, as written."""
    q = parse_recognize("/* from the docs */ SELECT * -- all\nFROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A)) m "
                        "WHERE /* keep */ x > 1 -- end")
    assert one_line(q.outer_sql) == "SELECT * FROM __sparkcep_matches AS m WHERE x > 1"
    assert q.outer_sql == "SELECT * -- all\nFROM __sparkcep_matches AS m WHERE /* keep */ x > 1"


@pytest.mark.parametrize(("text", "outer"), [
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A))WHERE x > 1",
     "SELECT * FROM __sparkcep_matches WHERE x > 1"),
    ("SELECT * FROM`t`MATCH_RECOGNIZE (ORDER BY ts PATTERN (A)) WHERE x > 1",
     "SELECT * FROM __sparkcep_matches WHERE x > 1"),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A))`m`WHERE m.x > 1",
     "SELECT * FROM __sparkcep_matches AS m WHERE m.x > 1"),
])
def test_the_result_view_is_a_word_of_its_own_in_the_outer_statement(text, outer):
    """Nothing needs a blank before or after ``FROM t MATCH_RECOGNIZE (...) m``: the result view put in its place
    was glued to the next word (``__sparkcep_matchesWHERE``: a sqlglot ParseError traceback from explain) or to
    FROM (``SELECT * FROM__sparkcep_matches``, read as ``SELECT * AS FROM__sparkcep_matches``)."""
    q = parse_recognize(text)
    assert one_line(q.outer_sql) == outer
