"""check_recognize (each refusal, with its reason and place) and build_spec (columns, outputs, types, WITHIN)."""

from __future__ import annotations

import json

import pytest

from sparkcep.compiler.recognize import build_spec, check_recognize, expr_type
from sparkcep.compiler.recognize.analysis import program_size
from sparkcep.grammar.recognize import parse_pattern, parse_recognize
from sparkcep.ir import recognize as rx
from sparkcep.ir.ast import Attr
from sparkcep.ir.errors import CEPSemanticError, CEPSyntaxError
from sparkcep.ir.serde import from_data, to_data
from tests.test_recognize_front import FLINK_AGGREGATES, FLINK_VSHAPE, FLINK_WITHIN, TRINO_ORDERS


def wrap(clause: str, order: str = "ORDER BY ts") -> str:
    return f"SELECT * FROM t MATCH_RECOGNIZE ({order} {clause})"


@pytest.mark.parametrize("text", [FLINK_VSHAPE, TRINO_ORDERS, FLINK_WITHIN, FLINK_AGGREGATES])
@pytest.mark.parametrize("streaming", [False, True])
def test_documentation_examples_pass(text, streaming):
    check_recognize(parse_recognize(text), streaming=streaming)


def refusal(text: str, streaming: bool = False) -> CEPSemanticError:
    q = parse_recognize(text)
    with pytest.raises(CEPSemanticError) as info:
        check_recognize(q, streaming=streaming)
    return info.value


@pytest.mark.parametrize(("clause", "message", "place"), [
    ("PATTERN (A B) DEFINE C AS C.x > 1", "unknown pattern variable C", "C AS"),
    ("PATTERN (A B) DEFINE B AS Bx.x > 1", "unknown pattern variable or SUBSET Bx, did you mean B?", "Bx.x"),
    ("PATTERN (A B) DEFINE b AS B.x > 1", "unknown pattern variable b, did you mean B?", "b AS"),
    ("PATTERN (A B) DEFINE B AS B.x > 1, B AS B.x < 5", "defined twice", "B AS B.x < 5"),
    ("PATTERN (A B) SUBSET U = (A, C)", "unknown pattern variable C", "C"),
    ("PATTERN (A B) SUBSET A = (A, B)", "has the name of a pattern variable", "A"),
    ("PATTERN (A B) SUBSET U = (A), U = (B)", "declared twice", "U"),
    ("PATTERN (A B) SUBSET U = (A, B) DEFINE U AS U.x > 1", "is a SUBSET", "U AS"),
    ("AFTER MATCH SKIP TO LAST C PATTERN (A B)", "unknown pattern variable or SUBSET C", "AFTER MATCH SKIP TO LAST C"),
    ("MEASURES COUNT(Z.*) AS n PATTERN (A B)", "unknown pattern variable or SUBSET Z", "COUNT(Z.*)"),
    ("MEASURES CLASSIFIER(Z) AS n PATTERN (A B)", "unknown pattern variable or SUBSET Z", "CLASSIFIER(Z)"),
    ("MEASURES upper(Z.s) AS n PATTERN (A B)", "unknown pattern variable or SUBSET Z", "upper(Z.s)"),
    ("PATTERN (A B) DEFINE B AS B.x > FINAL LAST(A.x)", "FINAL is not allowed in DEFINE", "LAST(A.x)"),
    ("PATTERN (A B) DEFINE B AS FINAL COUNT(A.*) > 1", "FINAL is not allowed in DEFINE", "COUNT(A.*)"),
    ("PATTERN (A B) DEFINE B AS MATCH_NUMBER() > 1", "MATCH_NUMBER() is not allowed in DEFINE", "MATCH_NUMBER()"),
    ("MEASURES PREV(NEXT(A.x)) AS n PATTERN (A B)", "only FIRST or LAST", "NEXT(A.x)"),
    ("MEASURES PREV(LAST(A.x) + 1) AS n PATTERN (A B)", "only FIRST or LAST", "LAST(A.x)"),
    ("MEASURES LAST(PREV(A.x)) AS n PATTERN (A B)", "FIRST/LAST inside PREV/NEXT", "PREV(A.x)"),
    ("MEASURES PREV(A.x + B.x) AS n PATTERN (A B)", "reads several rows (A, B)", "PREV(A.x + B.x)"),
    ("MEASURES LAST(A.x + x) AS n PATTERN (A B)", "reads several rows (A, the current row)", "LAST"),
    ("MEASURES PREV(1) AS n PATTERN (A B)", "needs a column reference", "PREV(1)"),
    ("MEASURES PREV(SUM(A.x)) AS n PATTERN (A B)", "cannot contain an aggregate", "SUM(A.x)"),
    ("MEASURES SUM(A.x + B.x) AS n PATTERN (A B)", "reads several variables (A, B)", "SUM(A.x + B.x)"),
    ("MEASURES SUM(COUNT(A.*)) AS n PATTERN (A B)", "cannot contain another aggregate", "COUNT(A.*)"),
    ("MEASURES SUM(PREV(A.x)) AS n PATTERN (A B)", "inside an aggregate is not supported", "PREV(A.x)"),
    ("MEASURES A.x AS n, B.x AS N PATTERN (A B)", "two measures are named N", "B.x AS N"),
    ("PARTITION BY k MEASURES A.x AS K PATTERN (A B)", "name of a partition column", "A.x AS K"),
    ("ALL ROWS PER MATCH WITH UNMATCHED ROWS PATTERN (A {- B -})", "exclusion", "{- B -}"),
    ("PATTERN (PERMUTE(A, B, C, D, E, F, G))", "PERMUTE of 7 items", "PERMUTE"),
    ("PATTERN (A{5000} B{5000})", "more than 10,000", "A{5000} B{5000}"),
    ("AFTER MATCH SKIP TO FIRST A PATTERN (A B+)", "its own first row", "AFTER"),
    ("AFTER MATCH SKIP TO LAST A PATTERN (A B+)", "its own first row", "AFTER"),
    ("AFTER MATCH SKIP TO FIRST U PATTERN ((A | B) C) SUBSET U = (A, B)", "its own first row", "AFTER"),
    ("AFTER MATCH SKIP TO FIRST A PATTERN (A*)", "its own first row", "AFTER"),
])
def test_refusals(clause, message, place):
    text = wrap(clause)
    err = refusal(text)
    assert message in err.message
    assert err.span is not None and err.source == text
    assert text[err.span.start:].startswith(place), (text[err.span.start:err.span.end], place)


@pytest.mark.parametrize("clause", [
    "AFTER MATCH SKIP TO LAST A PATTERN (A+ B)",  # A may label later rows
    "AFTER MATCH SKIP TO FIRST B PATTERN (A B+)",
    "AFTER MATCH SKIP TO FIRST A PATTERN (B? A)",  # B may come first
    "AFTER MATCH SKIP TO LAST A PATTERN (PERMUTE(A, B))",
    "AFTER MATCH SKIP TO FIRST A PATTERN (A | B)",
])
def test_skip_targets_that_can_move_on(clause):
    check_recognize(parse_recognize(wrap(clause)), streaming=False)


@pytest.mark.parametrize(("text", "message", "place"), [
    (wrap("PATTERN (A B $)"), "the anchor $", "$"),
    (wrap("MEASURES NEXT(A.x) AS n PATTERN (A B)"), "NEXT is not supported in streaming", "NEXT(A.x)"),
    (wrap("PATTERN (A B) DEFINE A AS A.x < NEXT(A.x)"), "NEXT is not supported in streaming", "NEXT(A.x)"),
    (wrap("PATTERN (A B)", order="ORDER BY ts DESC"), "ascending", "ts DESC"),
])
def test_streaming_refusals(text, message, place):
    check_recognize(parse_recognize(text), streaming=False)  # fine in batch
    err = refusal(text, streaming=True)
    assert message in err.message
    assert text[err.span.start:err.span.end].startswith(place)


def test_order_by_is_required():
    err = refusal(wrap("PATTERN (A B)", order=""))
    assert "ORDER BY is required" in err.message
    assert err.span is not None


def test_program_size_counts_unrolled_quantifiers_and_permute():
    assert program_size(parse_pattern("A B+")) == 8  # the engine's program for A B+ (see its docstring)
    assert program_size(parse_pattern("A{2,4}")) == 2 + 2 * 4 + 1
    assert program_size(parse_pattern("PERMUTE(A, B)")) == 2 * 2 + 2 + 1
    assert program_size(parse_pattern("A | B | C")) == 3 + 4 + 1


# ------------------------------------------------------------------------------------------------ build_spec

TICKER = {"symbol": "string", "rowtime": "timestamp", "price": "bigint", "tax": "int", "name": "string"}


def test_spec_of_the_flink_vshape():
    q = parse_recognize(FLINK_VSHAPE)
    spec = build_spec(q, TICKER)
    assert spec.variables == ("START_ROW", "PRICE_DOWN", "PRICE_UP")
    assert spec.columns == ("symbol", "rowtime", "price", "__ts")
    assert spec.output == ("symbol", "start_tstamp", "bottom_tstamp", "end_tstamp")
    assert spec.output_types == ("string", "timestamp", "timestamp", "timestamp")
    assert spec.time_column == "__ts" and spec.within is None
    assert spec.skip == rx.Skip(rx.SKIP_TO_LAST, "PRICE_UP")


def test_all_rows_output_order_and_hidden_columns():
    q = parse_recognize(wrap("PARTITION BY symbol MEASURES upper(A.name) AS un, COUNT(*) AS n ALL ROWS PER MATCH "
                             "PATTERN (A B*)", order="ORDER BY rowtime"))
    spec = build_spec(q, {**TICKER, "__rx0": "string"})
    assert spec.columns == ("symbol", "rowtime", "price", "tax", "name", "__rx0", "__ts")
    assert spec.output == ("symbol", "rowtime", "un", "n", "price", "tax", "name")
    assert spec.output_types == ("string", "timestamp", "string", "bigint", "bigint", "int", "string")


def test_columns_resolve_case_insensitively_to_the_input_spelling():
    q = parse_recognize(wrap("PARTITION BY SYMBOL MEASURES LAST(A.PRICE) AS p PATTERN (A) DEFINE A AS A.Price > 1",
                             order="ORDER BY RowTime"))
    spec = build_spec(q, TICKER)
    assert spec.partition_by == ("symbol",) and spec.order_by[0].column == "rowtime"
    assert spec.measures[0].expr.arg == Attr("A", "price")
    assert spec.defines[0][1].left == Attr("A", "price")
    assert spec.columns == ("symbol", "rowtime", "price", "__ts")


@pytest.mark.parametrize(("measure", "expected"), [
    ("COUNT(A.*)", "bigint"), ("SUM(A.tax)", "bigint"), ("SUM(A.f)", "double"),
    ("AVG(A.tax)", "double"), ("MIN(A.name)", "string"), ("MAX(A.rowtime)", "timestamp"),
    ("A.tax + A.price", "bigint"), ("A.tax + 1", "int"), ("A.tax / 2", "double"), ("A.tax * A.f", "float"),
    ("A.tax > 1", "boolean"), ("A.name IS NULL", "boolean"),
    ("CLASSIFIER()", "string"), ("MATCH_NUMBER()", "bigint"), ("PREV(A.f, 2)", "float"),
    ("LAST(A.name)", "string"), ("abs(A.tax - B.tax)", "int"), ("coalesce(A.tax, B.price)", "bigint"),
    ("-A.tax", "int"), ("1.5", "double"), ("3000000000", "bigint"), ("NULL", "string"),
    ("10000000000000000000", "decimal(38,0)"),
    ("if(A.tax > B.tax, A.tax, B.price)", "bigint"), ("CASE WHEN A.tax > B.tax THEN A.name END", "string"),
    ("coalesce(A.tax, NULL, B.tax)", "int"), ("A.tax + NULL", "int"),
])
def test_output_types(measure, expected):
    q = parse_recognize(wrap(f"MEASURES {measure} AS m PATTERN (A B)", order="ORDER BY rowtime"))
    schema = {**TICKER, "f": "float", "d": "decimal(10,2)"}
    spec = build_spec(q, schema)
    assert dict(zip(spec.output, spec.output_types, strict=True))["m"] == expected
    assert expr_type(q.measures[0].expr, schema) == expected


@pytest.mark.parametrize(("measure", "expected"), [
    ("SUM(A.d)", "decimal(38,2)"), ("A.price * A.d", "decimal(38,2)"), ("A.f + A.d", "double"),
    ("A.tax - A.d", "decimal(38,2)"), ("greatest(A.d, B.f)", "double"), ("coalesce(A.d, B.price)", "decimal(38,2)"),
])
def test_decimal_types_refused_by_the_engine(measure, expected):
    """Spark types them so (expr_type), but the engine does not compute DECIMALs: refused, with the place."""
    q = parse_recognize(wrap(f"MEASURES {measure} AS m PATTERN (A B)", order="ORDER BY rowtime"))
    schema = {**TICKER, "f": "float", "d": "decimal(10,2)"}
    assert expr_type(q.measures[0].expr, schema) == expected
    with pytest.raises(CEPSemanticError, match="across rows is not supported") as err:
        build_spec(q, schema)
    assert err.value.span is not None and err.value.span.start == q.text.index(measure)


@pytest.mark.parametrize(("define", "rx_type"), [
    ("B.price > A.price + 1BD", "decimal(21,0)"), ("B.rowtime > A.rowtime + INTERVAL 1 DAY", "timestamp"),
    ("B.rowtime > CAST(A.rowtime AS DATE)", "date"),
])
def test_types_the_engine_would_compare_otherwise_than_spark_are_refused(define, rx_type):
    """A BIGINT with a DECIMAL across rows (the engine: NULL, no match), a TIMESTAMP with a DATE: refused at the
    comparison; a TIMESTAMP with a TIMESTAMP is the engine's."""
    q = parse_recognize(wrap(f"PATTERN (A B) DEFINE B AS {define}", order="ORDER BY rowtime"))
    schema = {**TICKER, "__rx0": rx_type}
    if rx_type == "timestamp":
        assert build_spec(q, schema).defines
        return
    with pytest.raises(CEPSemanticError, match="comparing a bigint with a decimal|comparing a timestamp with a date"):
        build_spec(q, schema)


@pytest.mark.parametrize(("clause", "schema", "ts_unit", "expected"), [
    ("WITHIN INTERVAL '1' SECOND", {"ts": "timestamp"}, None, 1_000_000),
    ("WITHIN INTERVAL '2' MINUTE", {"ts": "date"}, None, 120_000_000),
    ("WITHIN INTERVAL '1' SECOND", {"ts": "bigint"}, "ms", 1000),
    ("WITHIN INTERVAL '1.5' SECOND", {"ts": "double"}, "s", 1.5),
    ("WITHIN INTERVAL '1' MILLISECOND", {"ts": "bigint"}, "us", 1000),
    ("WITHIN 250", {"ts": "bigint"}, None, 250),
])
def test_within_in_ts_units(clause, schema, ts_unit, expected):
    q = parse_recognize(wrap(f"PATTERN (A B) {clause}"))
    assert build_spec(q, schema, ts_unit=ts_unit).within == pytest.approx(expected)


@pytest.mark.parametrize(("clause", "schema", "message", "place"), [
    ("PATTERN (A B) WITHIN INTERVAL '1' SECOND", {"ts": "bigint"}, "needs its unit", "WITHIN"),
    ("PATTERN (A B) WITHIN 10", {"ts": "timestamp"}, "needs an INTERVAL", "WITHIN"),
    ("PATTERN (A B) DEFINE B AS B.nope > 1", {"ts": "bigint"}, "unknown column nope", "B.nope"),
    ("PATTERN (A B)", {"ts": "string"}, "is a string, not a TIMESTAMP", "ts"),
    ("PARTITION BY k, kk PATTERN (A B)", {"ts": "bigint", "k": "int"}, "unknown column kk", "kk PATTERN"),
    ("MEASURES A.x AS X ALL ROWS PER MATCH PATTERN (A B)", {"ts": "bigint", "x": "int"}, "input column x",
     "A.x AS X"),
    ("MEASURES LAST(A.s) - FIRST(A.s) AS d PATTERN (A B)", {"ts": "bigint", "s": "timestamp"},
     "'-' of timestamp and timestamp", "LAST(A.s) - FIRST(A.s)"),
    ("MEASURES SUM(A.s) AS d PATTERN (A B)", {"ts": "bigint", "s": "string"}, "SUM of a string", "SUM(A.s)"),
])
def test_build_spec_refusals(clause, schema, message, place):
    text = wrap(clause)
    q = parse_recognize(text)
    check_recognize(q, streaming=False)
    with pytest.raises(CEPSemanticError) as info:
        build_spec(q, schema)
    err = info.value
    assert message in err.message
    assert text[err.span.start:].startswith(place), (text[err.span.start:err.span.end], place)


def test_specs_survive_the_json_of_generated_jobs():
    text = wrap("PARTITION BY symbol MEASURES FINAL LAST(A.price, 1) AS l, COUNT(U.*) AS n, CLASSIFIER() AS c, "
                "MATCH_NUMBER() AS m, if(A.price > B.price, 'up', NULL) AS f, upper(A.name) AS un, -1.5 AS k "
                "ALL ROWS PER MATCH OMIT EMPTY MATCHES AFTER MATCH SKIP TO FIRST B "
                "PATTERN (^ A {- B+? -} PERMUTE(A, B) (A | B){2,3} $) SUBSET U = (A, B) "
                "DEFINE B AS B.price > PREV(LAST(A.price), 2) AND B.name IS NOT NULL WITHIN INTERVAL '5' SECOND",
                order="ORDER BY rowtime DESC NULLS LAST")
    spec = build_spec(parse_recognize(text), {**TICKER, "__rx0": "string"})
    data = json.loads(json.dumps(to_data(spec), allow_nan=False))
    assert from_data(data) == spec


def test_unknown_functions_are_refused_with_a_suggestion():
    text = wrap("PATTERN (A B) DEFINE B AS B.x > 1 AND PREVV(B.x) > 2")
    err = refusal(text)
    assert "unknown function PREVV()" in err.message and "did you mean PREV?" in err.message
    assert text[err.span.start:err.span.end] == "PREVV"
    text = wrap("MEASURES my_udf(A.x) AS u, upper(A.s) AS s PATTERN (A B)")
    err = refusal(text)
    assert "unknown function my_udf()" in err.message and text[err.span.start:err.span.end] == "my_udf"
    # a function the session knows (a registered SQL UDF) passes when the caller can ask the session
    check_recognize(parse_recognize(text), streaming=False, functions=lambda name: name.lower() == "my_udf")
    check_recognize(parse_recognize(wrap("MEASURES unix_seconds(A.ts) AS u, timestampdiff(SECOND, A.ts, A.t2) "
                                         "AS d PATTERN (A B)")), streaming=False)


def test_unknown_function_over_several_rows_is_named():
    with pytest.raises(CEPSyntaxError) as info:
        parse_recognize(wrap("MEASURES NEXTT(A.x, B.x) AS n PATTERN (A B)"))
    assert "unknown function NEXTT(): " in info.value.message and "did you mean NEXT?" in info.value.message
