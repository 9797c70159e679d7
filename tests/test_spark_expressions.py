"""Spark SQL expressions in WHERE and RETURN (docs/language.md §5): the forms IS [NOT] NULL, [NOT] IN,
[NOT] BETWEEN, [NOT] LIKE, CASE, CAST and scalar functions parse and print back; a one-event call is computed by
Spark in the projection before the shuffle (any Spark SQL function); a cross-event one is evaluated by the
engines with Spark's meaning (checked against Spark SQL itself), or refused by ``check`` with its position."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

import sparkcep
from sparkcep.compiler.codegen.sql import DIALECT, to_sql_expr
from sparkcep.grammar import parse_query
from sparkcep.ir.ast import Attr, Call, Literal, Unary, map_nodes
from sparkcep.ir.errors import CEPError
from sparkcep.ir.printer import format_query
from sparkcep.oracles.match import match_rows
from sparkcep.runtime_udfs.expr.scalar import compile_expr
from sparkcep.runtime_udfs.expr.vector import vectorize

WHERE = [
    "abs(a.x - b.x) < 5",
    "a.name LIKE 'x%' AND b.name NOT LIKE '_y\\%'",
    "a.kind IN ('p', 'q') AND b.kind NOT IN ('r')",
    "a.y IS NULL OR b.y IS NOT NULL",
    "a.x BETWEEN 1 AND 5 + b.x AND a.x NOT BETWEEN -1 AND 0",
    "CASE WHEN a.x > b.x THEN 1 WHEN a.x = b.x THEN 0 ELSE -1 END = 1",
    "CASE a.kind WHEN 'p' THEN b.x END > 2",
    "CAST(a.s AS DOUBLE) > CAST(b.x AS BIGINT)",
    "coalesce(a.y, b.y, 0) = 1 AND lower(a.name) = upper(b.name)",
    "(a.x IN (1, 2)) = (b.x IS NULL) AND NOT a.x IS NULL",
    "length(concat(a.name, b.name)) > substring(a.name, 2, 1)",
]


def _bare(node):
    return map_nodes(node, lambda n: n.__class__(**{**n.__dict__, "span": None}) if hasattr(n, "span") else n)


@pytest.mark.parametrize("cond", WHERE)
def test_parse_print_round_trip(cond):
    q = parse_query(f"PATTERN SEQ(A a, B b) WHERE {cond} WITHIN 10 RETURN CASE WHEN a.x IS NULL THEN 'n' END AS c")
    assert _bare(parse_query(format_query(q))) == _bare(q)


def test_forms_are_calls():
    where = parse_query("PATTERN SEQ(A a) WHERE a.x NOT IN (1, 2) WITHIN 10").where
    assert _bare(where) == Unary("NOT", Call("in", (Attr("a", "x"), Literal(1), Literal(2))))
    cast = parse_query("PATTERN SEQ(A a) WHERE CAST(a.x AS double) > 1 WITHIN 10").where.left
    assert (cast.name, cast.type) == ("cast", "DOUBLE")


def test_cross_event_spark_only_function_is_refused_with_its_position():
    text = "PATTERN SEQ(A a, B b) WHERE greatest(a.x, b.x) > 1 WITHIN 10"
    with pytest.raises(CEPError) as info:
        sparkcep.compile(text)
    assert "greatest() is computed by Spark for one event at a time" in info.value.message
    assert info.value.column == text.index("greatest") + 1


@pytest.mark.parametrize("cond, message", [
    ("CAST(a.x + b.x AS DATE) IS NULL", "CAST(... AS DATE) is computed by Spark for one event at a time"),
    ("abs(a.x, b.x) > 1", "abs() takes 1 argument, found 2"),  # the engines would fail on every event
    ("substring(a.s) = b.s", "substring() takes 2 to 3 arguments, found 1"),
])
def test_calls_the_engines_cannot_evaluate_are_refused_with_their_position(cond, message):
    text = f"PATTERN SEQ(A a, B b) WHERE {cond} WITHIN 10"
    with pytest.raises(CEPError) as info:
        sparkcep.compile(text)
    assert message in info.value.message
    assert info.value.column == text.index(cond.split("(")[0]) + 1


def test_one_event_calls_become_hidden_columns():
    """``greatest`` is no engine function: over one event, Spark computes it in the filter's SELECT."""
    c = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE greatest(a.x, a.y) < b.x AND lower(a.n) = lower(b.n) "
                         "WITHIN 10 RETURN greatest(a.x, a.y) AS g")
    sql = c.sql()
    assert "GREATEST(x, y) AS _cep_e0" in sql and "LOWER(n) AS _cep_e1" in sql and "_cep_e2" not in sql
    text = c.explain()
    assert "a._cep_e0 < b.x" in text and "a._cep_e1 = b._cep_e1" in text and "g := a._cep_e0" in text


# ------------------------------------------------------------------------ the engines' functions are Spark's
MIN, MAX = -(2**63), 2**63 - 1
ROWS = [
    {"x": 3, "y": -4, "d": 1.5, "s": " 7 ", "t": "aXb"},
    {"x": MIN, "y": None, "d": -0.0, "s": "abc", "t": "a%b_"},
    {"x": None, "y": 0, "d": None, "s": "1e2", "t": None},
    {"x": -2, "y": 2, "d": float("inf"), "s": "true", "t": "Hello"},
    {"x": MAX, "y": 5, "d": -2.75, "s": "-3", "t": ""},
]
TYPES = {"x": "bigint", "y": "bigint", "d": "double", "s": "string", "t": "string"}
ARROW = {"bigint": pa.int64(), "double": pa.float64(), "string": pa.large_string()}
CALLS = [
    "abs(a.x)", "abs(a.y - a.x)", "abs(a.d)", "abs(a.s)",
    "coalesce(a.y, a.x)", "coalesce(a.t, a.s, 'z')",
    "a.x IS NULL", "a.t IS NOT NULL",
    "a.y IN (0, 2, a.x)", "a.y NOT IN (5, NULL)", "a.s IN ('abc', '-3')", "a.y IN (a.s)",
    "a.y BETWEEN -4 AND a.x", "a.d NOT BETWEEN -3 AND 2",
    "a.t LIKE 'a%'", "a.t LIKE '_X_'", "a.t LIKE 'a\\\\%b\\\\_'", "a.s LIKE '%3'", "a.x LIKE '-%'",
    "CASE WHEN a.x > a.y THEN a.x WHEN a.y IS NULL THEN -1 END", "CASE WHEN a.d > 0 THEN 'p' ELSE a.t END",
    "CAST(a.s AS BIGINT)", "CAST(a.s AS INT)", "CAST(a.s AS DOUBLE)", "CAST(a.d AS BIGINT)", "CAST(a.x AS INT)",
    "CAST(a.x AS STRING)", "CAST(a.s AS BOOLEAN)", "CAST(a.y AS BOOLEAN)", "CAST(a.y AS DOUBLE)",
    "lower(a.t)", "upper(a.t)", "length(a.t)", "length(a.s)", "concat(a.t, a.s)", "concat(a.t, a.x)",
    "substring(a.t, 2, 2)", "substring(a.t, -2, 1)", "substring(a.t, 0, 2)", "substr(a.t, 3)",
    "substring(a.t, -9, 3)", "substring(a.t, 2, -1)",
]


def _expr(text: str):
    return parse_query(f"RETURN {text} AS v PATTERN SEQ(A a) WITHIN 1").returns[0].expr


def _norm(v):
    if isinstance(v, float) and v != v:
        return "nan"
    return v


@pytest.mark.spark
def test_engine_functions_equal_spark_sql(spark):
    """Each call evaluated by Spark SQL (the SQL sparkcep writes, ANSI on), by expr.scalar and by expr.vector on
    the same rows."""
    from pyspark.sql import types as T

    fields = {"bigint": T.LongType(), "double": T.DoubleType(), "string": T.StringType()}
    schema = T.StructType([T.StructField(k, fields[v]) for k, v in TYPES.items()]
                          + [T.StructField("_r", T.IntegerType())])
    df = spark.createDataFrame([tuple(r[k] for k in TYPES) + (i,) for i, r in enumerate(ROWS)], schema)
    exprs = [_expr(c) for c in CALLS]
    cols = [f"{to_sql_expr(e, types=TYPES).sql(dialect=DIALECT)} AS c{k}" for k, e in enumerate(exprs)]
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "true")
    try:
        got = sorted(df.selectExpr("_r", *cols).collect(), key=lambda r: r["_r"])
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)
    bad = []
    for k, (text, e) in enumerate(zip(CALLS, exprs, strict=True)):
        f, v = compile_expr(e), vectorize(e)
        columns = {("a", c): pa.array([r[c] for r in ROWS], ARROW[t]) for c, t in TYPES.items()}
        vector = v.values(columns).to_pylist()
        for row, out, vec in zip(ROWS, got, vector, strict=True):
            want, mine = _norm(out[f"c{k}"]), _norm(f({"a": dict(row)}))
            if want != mine or type(want) is not type(mine) or _norm(vec) != want or type(_norm(vec)) is not type(want):
                bad.append((text, row, want, mine, vec))
    assert not bad, bad


# ---------------------------------------------------------------------------- end to end, batch and streaming
QUERY = ("PATTERN SEQ(A a, B b) WHERE [id] AND abs(a.x - b.x) < 5 AND a.name LIKE 'x%' AND a.kind IN ('p', 'q') "
         "AND upper(a.name) = upper(b.name) AND CAST(b.s AS BIGINT) BETWEEN 1 AND 5 AND coalesce(b.y, 0) >= 0 "
         "AND CASE WHEN a.x > b.x THEN b.y IS NULL ELSE b.y IS NOT NULL END "
         "AND sha1(lower(b.name)) = sha1(lower(a.name)) "
         "WITHIN 10 RETURN a.ts AS at, b.ts AS bt, lower(b.name) AS n, concat(a.kind, b.s) AS ks, "
         "CASE WHEN a.x > b.x THEN 'hi' ELSE 'lo' END AS c")
COLUMNS = ["type", "ts", "id", "x", "name", "kind", "y", "s"]
FILES = [
    [{"type": "A", "ts": 1, "id": 1, "x": 10, "name": "xa", "kind": "p", "y": None, "s": None},
     {"type": "B", "ts": 2, "id": 1, "x": 9, "name": "XA", "kind": None, "y": None, "s": "3"},  # a match
     {"type": "B", "ts": 3, "id": 1, "x": 12, "name": "xa", "kind": None, "y": 1, "s": "abc"},  # CAST: NULL
     {"type": "A", "ts": 4, "id": 2, "x": 12, "name": "xb", "kind": "q", "y": None, "s": None}],
    [{"type": "B", "ts": 5, "id": 2, "x": 14, "name": "xB", "kind": None, "y": 0, "s": " 5 "},  # a match
     {"type": "B", "ts": 6, "id": 2, "x": 20, "name": "xb", "kind": None, "y": 1, "s": "2"},  # abs: 8
     {"type": "A", "ts": 7, "id": 3, "x": 0, "name": "ya", "kind": "p", "y": None, "s": None},  # LIKE fails
     {"type": "B", "ts": 8, "id": 3, "x": 1, "name": "ya", "kind": None, "y": 2, "s": "1"}],
    [{"type": "B", "ts": 1000, "id": 9, "x": 0, "name": "z", "kind": None, "y": 0, "s": "0"}],  # every window closes
]


def _run(tmp_path, capsys, extra: list[str]) -> list[dict]:
    from sparkcep.cli import main

    folder = tmp_path / "in"
    folder.mkdir()
    for k, chunk in enumerate(FILES):
        path = folder / f"part-{k:02d}.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in chunk))
        os.utime(path, (1_000_000 + k, 1_000_000 + k))  # the file source reads in modification-time order
    out = tmp_path / "out"
    code = main(["run", "-e", QUERY, "--input", str(folder), "--output", str(out), *extra])
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err, err
    return [json.loads(line) for f in sorted(out.glob("part-*")) for line in f.read_text().splitlines()]


def _expected() -> list[dict]:
    """The oracle's rows.  ``sha1`` is Spark's only (the oracle evaluates the engines' functions): the oracle
    runs the query without that conjunct, which the ``upper`` equality implies."""
    text = QUERY.replace(" AND sha1(lower(b.name)) = sha1(lower(a.name))", "")
    assert text != QUERY
    rows = [e for chunk in FILES for e in chunk]
    return match_rows(sparkcep.compile(text).query, rows, COLUMNS)


def test_oracle_evaluates_the_query():
    assert {(r["at"], r["bt"], r["n"], r["ks"], r["c"]) for r in _expected()} == {
        (1, 2, "xa", "p3", "hi"), (4, 5, "xb", "q 5 ", "lo")}


@pytest.mark.spark
def test_batch_equals_oracle(spark, tmp_path, capsys):
    from sparkcep.spark.results import canonical

    assert canonical(_run(tmp_path, capsys, [])) == canonical(_expected())


@pytest.mark.spark
@pytest.mark.slow
def test_streaming_equals_oracle(spark, tmp_path, capsys):
    from sparkcep.spark.results import canonical

    got = _run(tmp_path, capsys, ["--stream", "--once", "--files-per-trigger", "1", "--lateness", "10",
                                  "--checkpoint", str(tmp_path / "ck")])
    assert canonical(got) == canonical(_expected())


NEG_QUERY = ("PATTERN SEQ(A a, !(C c), B b) WHERE [id] AND lower(c.name) = lower(a.name) "
             "AND upper(a.name) = upper(b.name) AND abs(a.x - b.x) <= 5 WITHIN 10 "
             "RETURN a.ts AS at, b.ts AS bt, CASE WHEN a.x IN (b.x, 9) THEN 'in' END AS w")
TREND_QUERY = ("RETURN COUNT(*) AS n PATTERN SEQ(A+ a[], B b) WHERE [id] AND upper(a[i].name) != upper(a[i-1].name) "
               "AND abs(a[i].x - a[i-1].x) < 6 WITHIN 10")
APPLY_EVENTS = [("A", 1, 1, 1, "Xa"), ("C", 2, 1, 5, "xa"), ("A", 3, 1, 4, "XA"), ("B", 4, 1, 3, "xa"),
                ("A", 5, 1, 9, "q"), ("B", 6, 1, 2, "Q"), ("C", 7, 1, 1, "zz"), ("B", 8, 1, 8, "q")]


@pytest.mark.spark
def test_negation_and_trend_in_apply_equal_the_oracle(spark):
    """Hidden columns read by a negation predicate (of the negated event) and by a trend's edge predicates
    (``a[i]`` and ``a[i-1]``), with ``abs`` over two events in the trend engine."""
    from sparkcep.oracles.match import trend_aggregates
    from sparkcep.spark.results import canonical

    cols = ["type", "ts", "id", "x", "name"]
    df = spark.createDataFrame(APPLY_EVENTS, "type string, ts bigint, id bigint, x bigint, name string")
    rows = [dict(zip(cols, e, strict=True)) for e in APPLY_EVENTS]
    neg = sparkcep.compile(NEG_QUERY)
    want = match_rows(neg.query, rows, cols)
    assert {(r["at"], r["bt"]) for r in want} == {(3, 4), (5, 8)}  # C@2 'xa' blocks A@1; abs(9 - 2) > 5
    assert canonical([r.asDict() for r in neg.apply(df).collect()]) == canonical(want)
    trend = sparkcep.compile(TREND_QUERY)
    got = [{k: int(v) for k, v in r.asDict().items() if k != "aggregate_overflow"} for r in trend.apply(df).collect()]
    assert got == trend_aggregates(trend.query, rows)
