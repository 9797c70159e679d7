"""MATCH_RECOGNIZE on Spark (``sparkcep.sql``, ``sparkcep.spark.recognize``) against the brute-force reference.

Batch: statements over a view registered from a DataFrame (several partitions, a NULL key, ties in the time
column, a NULL time) equal :func:`sparkcep.oracles.recognize.recognize_all` over the same projected rows, the
outer query (WHERE, GROUP BY) included.  Streaming: a directory of JSON files read one file per trigger equals
the batch result, across a restart from the checkpoint.  Without a JVM: the streaming state function's buffering
(rows held until the watermark passes them, sorted, late rows dropped) and the conversions of results.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import pickle
import random
import re

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

import sparkcep
from sparkcep.ir import recognize as R
from sparkcep.ir.ast import Attr, BinOp, Literal
from sparkcep.ir.errors import CEPError, CEPSemanticError
from sparkcep.spark import recognize as SR
from sparkcep.spark.group_state import SimulatedGroup
from sparkcep.sql_api import _span_of

BASE = dt.datetime(2024, 3, 1, 9, 0, 0)


def _front():
    parse = pytest.importorskip("sparkcep.grammar.recognize").parse_recognize
    build = pytest.importorskip("sparkcep.compiler.recognize").build_spec
    return parse, build


def _oracle():
    return pytest.importorskip("sparkcep.oracles.recognize").recognize_all


def canon(rows: list[dict], columns) -> list[tuple]:
    """Rows as tuples in ``columns`` order, sorted (results are compared as multisets)."""
    return sorted((tuple(r[c] for c in columns) for r in rows), key=repr)


def reference(spark, text: str) -> tuple[R.RecognizeSpec, list[dict]]:
    """The spec of ``text`` and the reference's outputs over its FROM table's rows (projected as Spark does)."""
    parse, build = _front()
    recognize_all = _oracle()
    q = parse(text)
    projected = SR.project(spark.table(q.source), q)
    spec = build(q, SR.input_schema(projected))
    return spec, recognize_all(spec, [r.asDict() for r in projected.collect()])


# ----------------------------------------------------------------------------------------------- batch

EVENTS_SCHEMA = "k1 string, k2 int, ts timestamp, t string, v bigint"


def events(seed: int = 7, n: int = 70) -> list[tuple]:
    """Random rows: keys x/y/NULL and 1/2, times with ties (0..20 s), labels a/b/c, values with NULLs; one row
    without a time."""
    rnd = random.Random(seed)
    rows = [(rnd.choice(["x", "y", None]), rnd.choice([1, 2]), BASE + dt.timedelta(seconds=rnd.randint(0, 20)),
             rnd.choice("aabbbc"), rnd.choice([*range(8), None])) for _ in range(n)]
    rows.append(("x", 1, None, "a", 3))
    return rows


STATEMENTS = [
    # ONE ROW PER MATCH, two partition columns, PREV, FIRST/LAST, COUNT/SUM per variable, MATCH_NUMBER
    """SELECT * FROM rec_events MATCH_RECOGNIZE (
         PARTITION BY k1, k2 ORDER BY ts
         MEASURES MATCH_NUMBER() AS mno, FIRST(A.v) AS a_v, LAST(B.v) AS last_b, COUNT(B.*) AS nb,
                  SUM(B.v) AS sb, CLASSIFIER() AS cls, FIRST(A.ts) AS start
         ONE ROW PER MATCH
         AFTER MATCH SKIP PAST LAST ROW
         PATTERN (A B+ C?)
         DEFINE A AS A.t = 'a', B AS B.v > PREV(B.v), C AS C.t = 'c')""",
    # ALL ROWS PER MATCH WITH UNMATCHED ROWS, TO NEXT ROW, a reluctant quantifier, a per-row Spark function
    """SELECT * FROM rec_events MATCH_RECOGNIZE (
         PARTITION BY k1 ORDER BY ts
         MEASURES RUNNING COUNT(*) AS n, FINAL LAST(B.v) AS fin, CLASSIFIER() AS cls
         ALL ROWS PER MATCH WITH UNMATCHED ROWS
         AFTER MATCH SKIP TO NEXT ROW
         PATTERN (A B*? C)
         DEFINE A AS upper(A.t) = 'A', C AS C.v >= 5)""",
]


WORKER = """SELECT * FROM rec_events MATCH_RECOGNIZE (
     PARTITION BY k1 ORDER BY ts MEASURES FIRST(A.v) AS a_v, LAST(C.v) AS c_v, COUNT(*) AS n
     PATTERN (A B* C)
     DEFINE A AS NOT (t = 'c') AND v IS NOT NULL, B AS t < 'c' OR v IS NULL, C AS v >= k2 OR t = 'c')"""


PRICES_SCHEMA = "k1 string, ts timestamp, d double, v bigint, e double, s string"

PRICES = """SELECT * FROM rec_events MATCH_RECOGNIZE (
     PARTITION BY k1 ORDER BY ts MEASURES FIRST(A.v) AS a_v, LAST(v) AS last_v, COUNT(*) AS n
     PATTERN (A B+ C?)
     DEFINE A AS d >= PREV(d, 2) OR d = NEXT(d) OR d IS NULL, B AS B.e < PREV(B.e) OR NOT (B.d != 0.0),
            C AS d > NEXT(d) AND v >= 1 OR s = PREV(s))"""


def prices(seed: int = 11, n: int = 80) -> list[tuple]:
    """Random rows of ``PRICES_SCHEMA``: keys x/y/NULL, times with ties, doubles with NaN, -0.0, infinity, NULL."""
    rnd = random.Random(seed)
    doubles = [1.0, 2.0, 2.0, 3.5, float("nan"), -0.0, 0.0, float("inf"), None]
    return [(rnd.choice(["x", "y", None]), BASE + dt.timedelta(seconds=rnd.randint(0, 30)), rnd.choice(doubles),
             rnd.choice([0, 1, 2]), rnd.choice(doubles), rnd.choice(["a", "b", None])) for _ in range(n)]


def _shipped(df) -> list[str]:
    """The columns the mapInArrow worker of ``df``'s plan reads."""
    shipped = re.search(r"MapInArrow run\(([^)]*)\)", df._jdf.queryExecution().optimizedPlan().toString())
    return [c.split("#")[0] for c in shipped.group(1).split(", ")]


def _returned(df) -> list[str]:
    """The columns the mapInArrow worker of ``df``'s plan returns."""
    plan = df._jdf.queryExecution().optimizedPlan().toString()
    returned = re.search(r"MapInArrow run\([^)]*\)#\d+, \[([^\]]*)\]", plan)
    return [c.split("#")[0] for c in returned.group(1).split(", ")]


@pytest.mark.spark
def test_batch_statements_equal_the_reference(spark):
    """Every statement's rows from Spark equal the reference's over the same rows (which it sorts itself), the
    second statement's over the rows in reverse input order, and the outer query's WHERE/GROUP BY runs on the
    matches."""
    rows = events()
    for text, order in zip(STATEMENTS, [rows, rows[::-1]], strict=True):
        spark.createDataFrame(order, EVENTS_SCHEMA).createOrReplaceTempView("rec_events")
        spec, expected = reference(spark, text)
        got = sparkcep.sql(text, spark)
        assert got.columns == list(spec.output)
        assert canon([r.asDict() for r in got.collect()], spec.output) == canon(expected, spec.output)
        assert expected, "the data gives no match: the comparison proves nothing"

    # one-row DEFINEs Spark computes after the sort (NOT, IS NULL, OR, strings ordered, a column against a
    # column, over NULLs and ties): the worker gets them as the bits of one INT column, not t nor k2 nor the time column
    spec, expected = reference(spark, WORKER)
    got = sparkcep.sql(WORKER, spark)
    assert canon([r.asDict() for r in got.collect()], spec.output) == canon(expected, spec.output) and expected
    assert _shipped(got) == ["k1", "v", "__mask"]

    # PREV/NEXT and DOUBLE comparisons (NaN, -0.0, infinity, NULL; ties in the time column) as lag/lead over the
    # sort's order (d, e and the STRING s cost more to ship than the window): the worker gets neither d, e, s nor
    # the time column
    spark.createDataFrame(prices(), PRICES_SCHEMA).createOrReplaceTempView("rec_events")
    spec, expected = reference(spark, PRICES)
    got = sparkcep.sql(PRICES, spark)
    assert canon([r.asDict() for r in got.collect()], spec.output) == canon(expected, spec.output)
    assert len(expected) >= 3, "too few matches: the comparison proves little"
    assert _shipped(got) == ["k1", "v", "__mask"]
    spark.createDataFrame(rows, EVENTS_SCHEMA).createOrReplaceTempView("rec_events")

    outer = """SELECT k1, COUNT(*) AS matches, MAX(nb) AS longest FROM rec_events MATCH_RECOGNIZE (
                 PARTITION BY k1 ORDER BY ts MEASURES COUNT(B.*) AS nb
                 PATTERN (A B+) DEFINE A AS t = 'a', B AS t = 'b') AS m
               WHERE nb >= 2 GROUP BY k1 ORDER BY k1"""
    _, matches = reference(spark, outer)
    groups: dict = {}
    for m in matches:
        if m["nb"] >= 2:
            groups.setdefault(m["k1"], []).append(m["nb"])
    want = sorted(((k, len(v), max(v)) for k, v in groups.items()), key=repr)
    got = [tuple(r) for r in sparkcep.sql(outer, spark).collect()]
    assert sorted(got, key=repr) == want and len(want) >= 2

    # an outer query reading some result columns (one of them only in WHERE, one qualified, in another case):
    # the worker returns those only, reads no input column only a dropped column needed (k2), and the rows are
    # the reference's; COUNT(*) alone keeps one column, so no row is lost
    pruned = STATEMENTS[1].replace("SELECT *", "SELECT K1, m.n, cls").rstrip() + " AS m WHERE fin > 2"
    spec, expected = reference(spark, pruned)
    got = sparkcep.sql(pruned, spark)
    want = canon([m for m in expected if m["fin"] is not None and m["fin"] > 2], ["k1", "n", "cls"])
    assert canon([dict(zip(["k1", "n", "cls"], r, strict=True)) for r in got.collect()], ["k1", "n", "cls"]) == want
    assert len(want) >= 3, "too few rows: the comparison proves little"
    assert _returned(got) == ["k1", "n", "fin", "cls"] and "k2" not in _shipped(got)
    counted = sparkcep.sql(STATEMENTS[1].replace("SELECT *", "SELECT COUNT(*) AS c"), spark)
    assert counted.collect()[0].c == len(reference(spark, STATEMENTS[1])[1]) and len(_returned(counted)) == 1

    # measures named like Spark's functions without parentheses: the outer query means what Spark makes of the
    # same query over a plain table of the matches (a bare word is the column, current_date() the function)
    bare = BARE_WORDS.format(source=f"rec_events MATCH_RECOGNIZE ({BARE_CLAUSE})")
    spec, expected = reference(spark, bare)
    ddl = ", ".join(f"`{c}` {t}" for c, t in zip(spec.output, spec.output_types, strict=True))
    spark.createDataFrame([tuple(m[c] for c in spec.output) for m in expected], ddl).createOrReplaceTempView(
        "rec_plain")
    want = [tuple(r) for r in spark.sql(BARE_WORDS.format(source="rec_plain")).collect()]
    got = sparkcep.sql(bare, spark)
    assert [tuple(r) for r in got.collect()] == want and len(want) >= 2
    assert got.columns == ["k1", "current_timestamp", "n", "current_date()", "last_v", "su", "q",
                           "substr(k1, 1, 2147483647)", "1"]
    assert all(r[1] < BASE + dt.timedelta(days=1) and r[3] > BASE.date() and r[6] == "it's" for r in want)
    # a stream's outer query rewritten by sqlglot to carry the late rows and the arrival keeps those names
    plain = spark.table("rec_plain")
    side = plain.selectExpr("*", "'result' AS _kind", "CAST(NULL AS STRING) AS _reason",
                            "CAST(NULL AS STRING) AS _record", "CAST(1 AS BIGINT) AS _arrival_ms")
    carried = SR.apply_outer(side, "SELECT substr(k1, 1), current_user, 1L FROM v WHERE current_user > 1", "v")
    assert carried.columns == ["substr(k1, 1, 2147483647)", "current_user", "1", "_kind", "_reason", "_record",
                               "_arrival_ms"]
    # an aggregate of a subquery, a window function: not the outer query's aggregation (each row keeps its
    # match's arrival, late rows pass), as Spark runs the query over the plain table
    for q in ["SELECT k1, (SELECT max(current_user) FROM rec_plain) AS mx FROM {t} AS m",
              "SELECT k1, sum(current_user) OVER (PARTITION BY k1 ORDER BY current_timestamp) AS s FROM {t}",
              "SELECT k1, r'a\\n' 'b' AS adjacent FROM {t}"]:  # a raw string and another: one (Spark: a\nb)
        want = sorted((tuple(r) for r in spark.sql(q.format(t="rec_plain")).collect()), key=repr)
        got = SR.apply_outer(side, q.format(t="v"), "v")
        assert sorted((tuple(r)[:2] for r in got.collect()), key=repr) == want and got.columns[-1] == "_arrival_ms"
        assert all(r._arrival_ms == 1 for r in got.collect()) and ("_kind" in got.columns) == ("OVER" not in q)
    spark.catalog.dropTempView("rec_plain")
    spark.catalog.dropTempView("rec_events")


#: an outer query reading measures named current_timestamp/current_user/current_date by their bare names
#: (SELECT, WHERE, ORDER BY), the functions current_date() and session_user() by calls, a string with a
#: doubled quote (Spark 4: it's), and columns Spark names after the text (sqlglot writes SUBSTRING, CAST)
BARE_WORDS = """SELECT k1, current_timestamp, current_user AS n, current_date(), m.current_date AS last_v,
                       session_user() AS su, 'it''s' AS q, substr(k1, 1), 1L
                FROM {source} AS m WHERE current_user >= 2 ORDER BY current_timestamp, current_date, k1"""
BARE_CLAUSE = """PARTITION BY k1 ORDER BY ts
    MEASURES FIRST(A.ts) AS current_timestamp, COUNT(B.*) AS current_user, LAST(B.v) AS current_date
    PATTERN (A B+) DEFINE A AS t = 'a', B AS t = 'b'"""


@pytest.mark.spark
def test_two_statements_in_threads_read_their_own_matches(spark, monkeypatch):
    """Two ``sparkcep.sql`` calls at once (threads): each registers its matches and waits until the other has
    too before Spark analyses its outer query; each still reads its own matches, never the other's."""
    import threading

    from pyspark.sql import DataFrame

    _front()
    text = ("SELECT n FROM {} MATCH_RECOGNIZE (ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A+) "
            "DEFINE A AS v > 0)")
    for name, n in (("rec_t1", 2), ("rec_t2", 5)):
        spark.createDataFrame([(i, 1) for i in range(n)], "ts bigint, v bigint").createOrReplaceTempView(name)
    both = threading.Barrier(2, timeout=60)
    register = DataFrame.createOrReplaceTempView

    def register_then_wait(df, name):
        register(df, name)
        both.wait()

    monkeypatch.setattr(DataFrame, "createOrReplaceTempView", register_then_wait)
    got: dict = {}

    def run(name: str) -> None:
        try:
            got[name] = [r.n for r in sparkcep.sql(text.format(name), spark).collect()]
        except Exception as err:  # noqa: BLE001 - reported by the assertion below
            got[name] = repr(err)

    threads = [threading.Thread(target=run, args=(name,)) for name in ("rec_t1", "rec_t2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    monkeypatch.undo()
    assert got == {"rec_t1": [2], "rec_t2": [5]}
    for name in ("rec_t1", "rec_t2"):
        spark.catalog.dropTempView(name)


@pytest.mark.spark
def test_errors_are_cep_errors_at_their_place(spark):
    """An unknown table, a per-row function Spark does not know, a column the outer query cannot find: one
    CEPError each (positioned where the statement has a place for it), never Spark's exception, nor PySpark's
    log of it (with the Java stack) before it."""
    import logging

    from pyspark.logger import PySparkLogger

    _front()
    logged: list = []
    handler = logging.Handler()
    handler.emit = logged.append
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).addHandler(handler)
    text = "SELECT *\nFROM no_such_view MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS v > 0)"
    with pytest.raises(CEPError) as err:
        sparkcep.sql(text, spark)
    assert (err.value.line, err.value.column) == (2, 6)
    assert "no_such_view" in err.value.message
    spark.createDataFrame([("p", 1, 1)], "k string, ts bigint, v bigint").createOrReplaceTempView("rec_err")
    text = "SELECT * FROM rec_err MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS array_contains(v, 1))"
    with pytest.raises(CEPError, match="Spark cannot compute") as err:
        sparkcep.sql(text, spark)
    assert err.value.column == text.index("array_contains") + 1
    # Spark refuses "v IN (1) = false" (ParseException): so does the statement (the engine accepted it)
    text = "SELECT * FROM rec_err MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS v IN (1, 2) = false)"
    with pytest.raises(CEPError, match="Spark cannot compute .*PARSE_SYNTAX_ERROR") as err:
        sparkcep.sql(text, spark)
    assert err.value.column == text.index("v IN") + 1
    text = "SELECT nope FROM rec_err MATCH_RECOGNIZE (ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A))"
    with pytest.raises(CEPError, match="on the matches"):
        sparkcep.sql(text, spark)
    spark.catalog.dropTempView("rec_err")
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).removeHandler(handler)
    assert [r.getMessage()[:60] for r in logged] == []


# ----------------------------------------------------------------------------------------------- streaming

STREAM_SCHEMA = "k string, ts timestamp, t string, v bigint"
STREAM_STATEMENT = """SELECT * FROM {view} MATCH_RECOGNIZE (
    PARTITION BY k ORDER BY ts
    MEASURES FIRST(A.ts) AS start, LAST(B.v) AS top, COUNT(*) AS n, MATCH_NUMBER() AS mno
    ONE ROW PER MATCH
    PATTERN (A B+) WITHIN INTERVAL '6' SECOND
    DEFINE A AS A.t = 'a', B AS B.v > PREV(B.v))"""


def _write_files(path, seed: int = 3, files: int = 3, per_file: int = 14) -> None:
    """JSON files of increasing times (one key's rows spread over files), a row without a time in the second."""
    rnd = random.Random(seed)
    path.mkdir(parents=True, exist_ok=True)
    second = 0
    for f in range(files):
        lines = []
        for _ in range(per_file):
            second += rnd.choice([0, 1, 1, 2])
            ts = (BASE + dt.timedelta(seconds=second)).isoformat() + "Z"
            lines.append({"k": rnd.choice(["p", "q", None]), "ts": ts, "t": rnd.choice("aab"), "v": rnd.randint(0, 9)})
        if f == 1:
            lines.append({"k": "p", "ts": None, "t": "z", "v": 1})
        (path / f"part-{f:02d}.json").write_text("".join(json.dumps(x) + "\n" for x in lines))


@pytest.mark.spark
@pytest.mark.slow
def test_streaming_equals_batch_across_a_restart(spark, tmp_path):
    """One file per trigger into a parquet sink, stopped after two files and restarted from the checkpoint with
    the rest (and a far later row of another key that moves the watermark past every WITHIN): the rows equal
    the batch statement's over the same files."""
    _front()
    src, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    _write_files(tmp_path / "all")
    files = sorted((tmp_path / "all").iterdir())
    src.mkdir()

    def run() -> None:
        stream = spark.readStream.schema(STREAM_SCHEMA).option("maxFilesPerTrigger", 1).json(str(src))
        stream.createOrReplaceTempView("rec_stream")
        # one second of lateness: a later file may repeat the last time of the one before
        result = sparkcep.sql(STREAM_STATEMENT.format(view="rec_stream"), spark, watermark_delay=1000)
        assert result.isStreaming
        (result.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(ck))
         .outputMode("append").trigger(availableNow=True).start().awaitTermination())

    for f in files[:2]:
        (src / f.name).write_text(f.read_text())
    run()
    first = spark.read.parquet(str(out)).count()
    for f in files[2:]:
        (src / f.name).write_text(f.read_text())
    late = BASE + dt.timedelta(hours=1)
    (src / "part-99.json").write_text(json.dumps({"k": "zz", "ts": late.isoformat() + "Z", "t": "z", "v": 0}))
    run()

    spark.read.schema(STREAM_SCHEMA).json(str(tmp_path / "all")).createOrReplaceTempView("rec_batch")
    batch = sparkcep.sql(STREAM_STATEMENT.format(view="rec_batch"), spark)
    columns = batch.columns
    got = canon([r.asDict() for r in spark.read.parquet(str(out)).collect()], columns)
    want = canon([r.asDict() for r in batch.collect()], columns)
    assert got == want
    assert 0 < first < len(want)  # the first run emitted some of them, the restart the rest
    spark.catalog.dropTempView("rec_stream")
    spark.catalog.dropTempView("rec_batch")


# ----------------------------------------------------------------------------------------------- no JVM

_IS = {t: BinOp("=", Attr(None, "t"), Literal(t)) for t in "ab"}
#: ``A B+`` (B: rising v) partitioned by k, ONE ROW PER MATCH, COUNT(*) and the first A's time.
SPEC = R.RecognizeSpec(
    R.PConcat((R.PVar("A"), R.PQuant(R.PVar("B"), 1, None))), ("A", "B"),
    (("A", _IS["a"]), ("B", BinOp(">", Attr("B", "v"), R.Nav("PREV", Attr("B", "v"), 1)))), (),
    (R.Measure(R.Agg("count", None), "n"), R.Measure(R.Nav("FIRST", Attr("A", "ts"), 0), "start")),
    R.ONE_ROW, R.Skip(), ("k",), (R.OrderItem("ts"),), ("k", "t", "v", "ts", "__ts"), ("k", "n", "start"),
    ("string", "bigint", "timestamp"))
_INPUT = StructType([StructField("k", StringType()), StructField("t", StringType()), StructField("v", LongType()),
                     StructField("ts", TimestampType()), StructField("__ts", LongType())])
_OUTPUT = StructType([StructField("k", StringType()), StructField("n", LongType()),
                      StructField("start", TimestampType())])


def _micros(second: float) -> int:
    return int((BASE.replace(tzinfo=dt.UTC) + dt.timedelta(seconds=second)).timestamp() * 1_000_000)


def _frame(rows: list[tuple[str, int, float]]) -> pd.DataFrame:
    """A pandas batch as PySpark gives it: naive UTC times, ``__ts`` and the event time in µs."""
    return pd.DataFrame({
        "k": ["p"] * len(rows), "t": [t for t, _, _ in rows], "v": [v for _, v, _ in rows],
        "ts": [pd.Timestamp(BASE + dt.timedelta(seconds=s)) for _, _, s in rows],
        "__ts": [_micros(s) for _, _, s in rows], SR._ET: [_micros(s) for _, _, s in rows]})


def test_stream_function_holds_rows_until_the_watermark_and_drops_late_ones():
    """Rows wait until the watermark passes them and go to the engine in time order whatever order they came
    in; a row behind what was processed is dropped and counted; the outputs equal the batch run's."""
    engine = pytest.importorskip("sparkcep.runtime_udfs.recognize")
    fn = SR.stream_function(SPEC, _OUTPUT, _INPUT, numeric=False)
    group = SimulatedGroup()

    def call(rows, watermark_s: float) -> list[dict]:
        group.watermark_ms = _micros(watermark_s) // 1000
        frames = list(fn(("p",), iter([_frame(rows)] if rows else []), group))
        return [r for f in frames for r in f.to_dict("records")]

    # a1 b2 b3 | b4 (then a lower b: the match ends) a6 b7; rows come out of order, and one arrives too late
    out = call([("b", 2, 2), ("a", 0, 1)], 0.5)  # nothing settled before 0.5 s
    assert out == [] and group.timeout is not None
    out += call([("b", 5, 3), ("b", 9, 4)], 3.5)  # a1 b2 b3 settled; the match may still grow
    out += call([("a", 0, 6), ("b", 1, 5), ("b", 7, 7)], 6.5)  # b4 extends, b1@5 ends it
    out += call([("b", 8, 4.5)], 8.0)  # behind the processed 6.5 s: late, dropped
    assert [r["n"] for r in out] == [4]
    assert pickle.loads(group.stored)[-1] == 1  # one late row counted
    frontier, _, held, _ = SR._load_state(group.stored)
    assert frontier == _micros(8.0) and held == []

    rows = [{"k": "p", "t": t, "v": v, "ts": BASE + dt.timedelta(seconds=s), "__ts": _micros(s)}
            for t, v, s in [("a", 0, 1), ("b", 2, 2), ("b", 5, 3), ("b", 9, 4), ("b", 1, 5), ("a", 0, 6),
                            ("b", 7, 7)]]
    batch = engine.run_partition(SPEC, rows)
    assert [r["n"] for r in batch] == [4, 2]  # the second match is decided only at the partition's end


@pytest.mark.parametrize(("delay_ms", "expected"), [(None, []), (0, [3]), (1000, [])])
def test_stream_function_settles_to_the_watermark_its_own_rows_give(delay_ms, expected):
    """With the watermark's delay known, a micro-batch settles its rows up to the watermark the next one will
    have at least (newest row's time minus the delay): a1 b2 b3 b1@4 a@5 in one micro-batch at watermark 0
    give the match ended by b1@4 at once (delay 0), not one micro-batch later; with 1 s of delay the watermark
    is 4 s, b1@4 may still have company, and the match waits, as without the delay."""
    pytest.importorskip("sparkcep.runtime_udfs.recognize")
    fn = SR.stream_function(SPEC, _OUTPUT, _INPUT, numeric=False, watermark_delay_ms=delay_ms)
    group = SimulatedGroup()
    rows = [("a", 0, 1), ("b", 2, 2), ("b", 5, 3), ("b", 1, 4), ("a", 0, 5)]
    out = [r for f in fn(("p",), iter([_frame(rows)]), group) for r in f.to_dict("records")]
    assert [r["n"] for r in out] == expected


def test_stream_function_routes_late_rows_to_the_side_channel():
    """With ``late_rows`` a row older than the watermark comes out as a ``late`` row holding its record, the
    results as ``result`` rows; a row at the watermark's very time is on time."""
    pytest.importorskip("sparkcep.runtime_udfs.recognize")
    from sparkcep.spark.late import KIND, REASON, RECORD

    fn = SR.stream_function(SPEC, _OUTPUT, _INPUT, numeric=False, late_rows=True)
    group = SimulatedGroup()

    def call(rows, watermark_s: float) -> list[dict]:
        group.watermark_ms = _micros(watermark_s) // 1000
        return [r for f in fn(("p",), iter([_frame(rows)]), group) for r in f.to_dict("records")]

    assert call([("a", 0, 1), ("b", 2, 2)], 0.5) == []
    assert call([("b", 4, 3), ("a", 0, 4)], 3.0) == []  # a1 b2 settled; b@3, at the watermark's time, waits
    out = call([("b", 3, 1.5)], 8.0)  # behind the settled 3 s: late; a@4 ends a1 b2 b3
    late = [r for r in out if r[KIND] == "late"]
    assert [json.loads(r[RECORD]) for r in late] == [{"k": "p", "t": "b", "v": 3,
                                                       "ts": "2024-03-01T09:00:01.500000+00:00"}]
    assert late[0][REASON].startswith("late: ts before the watermark 2024-03-01T09:00:08")
    assert [(r[KIND], r["n"]) for r in out if r[KIND] == "result"] == [("result", 3)]


@pytest.mark.parametrize("rows_per_match", [R.ONE_ROW, R.ALL_ROWS])
def test_stream_results_carry_their_matchs_last_row_arrival(rows_per_match):
    """A micro-batch reading two files of one key: the first (arrival 1 000) holds a1 b2 b3 and b1@4, which
    ends the match; the second (arrival 9 000) a5 b6, which starts another.  The match (n = 3) is stamped with
    the arrival of its last row, b3 (every row of it under ALL ROWS PER MATCH), not the newest arrival among
    the key's rows of the micro-batch."""
    pytest.importorskip("sparkcep.runtime_udfs.recognize")
    from dataclasses import replace

    from sparkcep.spark.validate import ARRIVAL_COL, RESULT_ARRIVAL

    spec, struct = replace(SPEC, rows_per_match=rows_per_match), _OUTPUT
    if rows_per_match != R.ONE_ROW:
        spec = replace(spec, output=("k", "t", "n"), output_types=("string", "string", "bigint"))
        struct = StructType([_OUTPUT["k"], StructField("t", StringType()), _OUTPUT["n"]])
    schema = StructType([*_INPUT.fields, StructField(ARRIVAL_COL, LongType())])
    spec = SR.arrival_measured(spec)
    struct = StructType([*struct.fields, StructField(RESULT_ARRIVAL, LongType())])
    fn, out = SR.stamped_stream_function(spec, struct, schema, numeric=False, watermark_delay_ms=0)
    assert out.names[-1] == RESULT_ARRIVAL
    rows = [("a", 0, 1), ("b", 2, 2), ("b", 5, 3), ("b", 1, 4), ("a", 0, 5), ("b", 3, 6)]
    frame = _frame(rows).assign(**{ARRIVAL_COL: [1_000] * 4 + [9_000] * 2})
    group = SimulatedGroup()
    got = [r for f in fn(("p",), iter([frame]), group) for r in f.to_dict("records")]
    assert [(r["n"], r[RESULT_ARRIVAL]) for r in got] == (
        [(3, 1_000)] if rows_per_match == R.ONE_ROW else [(1, 1_000), (2, 1_000), (3, 1_000)])


def test_results_that_do_not_fit_their_type_are_null():
    """An engine value Arrow cannot take for the column's type is NULL in its row, not an error."""
    schema = pa.schema([("n", pa.int64()), ("s", pa.string())])
    table = SR._to_table([{"n": 3, "s": "x"}, {"n": "oops", "s": "y"}, {"n": 2**70, "s": None}], schema)
    assert table.to_pylist() == [{"n": 3, "s": "x"}, {"n": None, "s": "y"}, {"n": None, "s": None}]


def test_pandas_values_restore_nulls_integers_and_utc_times():
    s = pd.Series([1.0, float("nan"), 3.0])
    assert SR._pandas_values(s, LongType(), "UTC") == [1, None, 3]
    times = pd.Series([pd.Timestamp("2024-03-01 10:00:00"), pd.NaT])
    got = SR._pandas_values(times, TimestampType(), "Europe/Paris")
    assert got == [dt.datetime(2024, 3, 1, 9, 0, tzinfo=dt.UTC), None]


def test_span_of_the_from_table():
    span = _span_of("select *\n  from  `Ev` match_recognize (...)", "Ev")
    assert (span.line, span.column, span.end_column) == (2, 9, 13)
    assert _span_of("SELECT 1", "ev") is None


def test_python_sorts_again_only_where_spark_orders_differently():
    from pyspark.sql.types import ArrayType, DoubleType

    plain = StructType([*_INPUT.fields, StructField("d", DoubleType())])
    assert SR.spark_orders_like_python(plain, SPEC)
    spec = R.RecognizeSpec(**{**SPEC.__dict__, "columns": (*SPEC.columns, "arr")})
    nested = StructType([*_INPUT.fields, StructField("arr", ArrayType(LongType()))])
    assert not SR.spark_orders_like_python(nested, spec)


def test_stream_function_numeric_time_decides_by_within_at_the_watermark():
    """Numeric ts in seconds (``ts_unit="s"``): Spark's watermark (ms, offset included) is read in seconds; a
    match whose WITHIN has passed comes out at the watermark that reaches it, and the timeout is set for it."""
    pytest.importorskip("sparkcep.runtime_udfs.recognize")
    from sparkcep.runtime_udfs.event_time import EVENT_TIME_OFFSET

    spec = R.RecognizeSpec(**{**SPEC.__dict__, "defines": (("A", _IS["a"]), ("B", _IS["b"])), "within": 3.0,
                              "measures": (R.Measure(R.Agg("count", None), "n"),), "output": ("k", "n"),
                              "output_types": ("string", "bigint")})
    schema = StructType([*_INPUT.fields[:3], StructField("ts", LongType()), StructField("__ts", LongType())])
    fn = SR.stream_function(spec, StructType(_OUTPUT.fields[:2]), schema, numeric=True, ts_unit="s")
    group = SimulatedGroup()

    def call(rows, watermark_s: float) -> list[dict]:
        group.watermark_ms = EVENT_TIME_OFFSET + int(watermark_s * 1000)
        frame = pd.DataFrame({"k": ["p"] * len(rows), "t": [t for t, _ in rows], "v": [0] * len(rows),
                              "ts": [s for _, s in rows], "__ts": [s for _, s in rows],
                              SR._ET: [s * 1_000_000 + EVENT_TIME_OFFSET * 1000 for _, s in rows]})
        return [r for f in fn(("p",), iter([frame]), group) for r in f.to_dict("records")]

    assert call([("a", 10), ("b", 11), ("b", 12)], 12.5) == []  # B+ may still grow until 13
    assert group.timeout == EVENT_TIME_OFFSET + 13_000 - 1  # fires once the watermark reaches 13 s
    assert call([], 12.9) == []
    assert call([], 13.0) == [{"k": "p", "n": 3}]


@pytest.mark.spark
def test_ts_of_a_timestamp_ntz_column_ignores_the_session_zone(spark):
    """``__ts`` of TIMESTAMP_NTZ is wall-clock microseconds since 1970: two hours apart across a DST change of
    the session's zone are still two hours (WITHIN reads them)."""
    spec = R.RecognizeSpec(**{**SPEC.__dict__, "order_by": (R.OrderItem("a"),)})
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Europe/Paris")
    try:
        df = spark.sql("SELECT TIMESTAMP_NTZ'2024-03-31 01:30:00' AS a UNION ALL "
                       "SELECT TIMESTAMP_NTZ'2024-03-31 03:30:00'")
        ts = sorted(r[SR.TS] for r in SR.project(df, spec).collect())
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    assert ts == [1_711_848_600_000_000, 1_711_848_600_000_000 + 7_200_000_000]


@pytest.mark.spark
def test_input_columns_with_reserved_names_are_refused(spark):
    """A source column named like a hidden column (``__ts``, a RowExpr's ``__rx0``) is an error, not read in
    place of the hidden one."""
    for name in ["__ts", "__RX0"]:
        df = spark.createDataFrame([("p", "a", 1, 1)], f"k string, t string, v bigint, {name} bigint")
        with pytest.raises(CEPError, match="reserved"):
            SR.project(df, SPEC)


@pytest.mark.parametrize("streamed", [False, True])
def test_partition_function_in_chunks_equals_the_reference(monkeypatch, streamed):
    """With tiny chunks, a large partition goes through the engine in ``step`` chunks (PREV reaching back across
    a chunk's edge) and small ones several to a conversion; the rows equal the reference's.  ``streamed``: the
    partitions run as the Arrow batches of 5 rows arrive, 4 rows at a time, the 23-row partition held across
    five batches and the others cut inside a batch."""
    pytest.importorskip("sparkcep.runtime_udfs.recognize")
    recognize_all = _oracle()
    rnd = random.Random(11)
    rows = []
    for k, n in [("p", 23), ("q", 2), ("r", 3), (None, 1), ("s", 4)]:
        for i in range(n):
            ts = BASE.replace(tzinfo=dt.UTC) + dt.timedelta(seconds=i)
            rows.append({"k": k, "t": rnd.choice("abb"), "v": rnd.randint(0, 5), "ts": ts,
                         "__ts": int(ts.timestamp() * 1_000_000)})
    table = pa.Table.from_pylist(rows, schema=pa.schema([("k", pa.string()), ("t", pa.string()), ("v", pa.int64()),
                                                         ("ts", pa.timestamp("us", tz="UTC")), ("__ts", pa.int64())]))
    monkeypatch.setattr(SR, "CHUNK_ROWS", 4)
    monkeypatch.setattr(SR, "STREAM_ROWS", 4)
    fn = SR.partition_function(SPEC, _OUTPUT, resort=False, streamed=streamed)
    got = [r for b in fn(iter(table.to_batches(max_chunksize=5))) for r in pa.Table.from_batches([b]).to_pylist()]
    want = recognize_all(SPEC, rows)
    assert canon(got, SPEC.output) == canon(want, SPEC.output) and len(want) >= 4


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([None, -1, 0, 3, 2 ** 40]), min_size=1, max_size=30),
       st.lists(st.integers(1, 7), min_size=1, max_size=30), st.integers(1, 9), st.booleans())
def test_whole_partitions_regroups_the_batches_as_they_arrive(keys, sizes, rows, as_string):
    """``whole_partitions`` over a task's batches (sorted by key: each key one run, NULL a key of its own, cut
    into batches of random sizes) gives every row once, in order, each key's rows in one table, every table but
    the last with at least ``rows`` rows; and it gives a table as soon as the batches read make one: the batch
    holding the first row after it is the last one read."""
    keys = sorted(keys, key=lambda k: (k is not None, k or 0))
    if as_string:
        keys = [None if k is None else f"k{k}" for k in keys]
    table = pa.table({"k": pa.array(keys, pa.string() if as_string else pa.int64()), "i": list(range(len(keys)))})
    batches, at = [], 0
    for size in itertools.cycle(sizes):
        if at >= len(keys):
            break
        batches.append(table.slice(at, size))
        at += size
    read = []

    def arriving():
        for b in batches:
            read.append(b.num_rows)
            yield b

    out = []
    for t in SR.whole_partitions(arriving(), ("k",), rows):
        out.append(t)
        end = sum(x.num_rows for x in out)
        if end < len(keys):  # given once the batch holding the next key's first row was read, no later
            assert sum(read) - read[-1] <= end < sum(read)
    assert pa.concat_tables(out).column("i").to_pylist() == list(range(len(keys)))
    assert all(t.num_rows >= rows for t in out[:-1])
    ends = set(itertools.accumulate(t.num_rows for t in out))
    assert all(keys[i] != keys[i - 1] for i in ends if i < len(keys))  # no key in two tables


def test_streamable_keys():
    """Partitions run as the batches arrive only when each key is one run whose end Python can see: keys that
    Python tells equal as Spark groups them (not DOUBLE: -0.0 and NaN; not a case-blind collation), and a
    PARTITION BY at all (else the task is one partition)."""
    from pyspark.sql.types import DateType, DecimalType, ShortType

    schema = StructType([StructField("k", StringType()), StructField("t", StringType()),
                         StructField("v", LongType()), StructField("ts", TimestampType())])

    def keyed(*columns):
        return R.RecognizeSpec(**{**SPEC.__dict__, "partition_by": columns})

    assert SR.streamable(schema, SPEC) and SR.streamable(schema, keyed("k", "v", "ts"))
    assert not SR.streamable(schema, keyed())
    for dtype, ok in [(DoubleType(), False), (StringType("UTF8_LCASE"), False), (ShortType(), True),
                      (DateType(), True), (DecimalType(10, 2), True)]:
        other = StructType([*schema.fields, StructField("x", dtype)])
        assert SR.streamable(other, keyed("k", "x")) is ok, dtype


def _recognize_task(monkeypatch, shared: bool) -> tuple:
    """MATCH_RECOGNIZE's batch function (one statement, or two sharing the pass: ``recognize_workload``) and its
    partition's record batches."""
    pytest.importorskip("sparkcep.runtime_udfs.recognize")
    rows = [{"k": k, "t": t, "v": i, "ts": BASE.replace(tzinfo=dt.UTC) + dt.timedelta(seconds=i), "__ts": i}
            for i, (k, t) in enumerate(zip("ppppqqq", "abbabba", strict=True))]
    table = pa.Table.from_pylist(rows, schema=pa.schema([("k", pa.string()), ("t", pa.string()), ("v", pa.int64()),
                                                         ("ts", pa.timestamp("us", tz="UTC")), ("__ts", pa.int64())]))
    if not shared:
        return SR.partition_function(SPEC, _OUTPUT, resort=False), table
    from sparkcep.spark import recognize_workload

    monkeypatch.setattr(SR, "output_struct", lambda spec: _OUTPUT)  # Spark's DDL parser needs a session
    specs = [SPEC, SPEC]
    return recognize_workload.partition_function(specs, recognize_workload.tagged_struct(specs), [False, False]), table


def _match_task(monkeypatch, workload: bool) -> tuple:
    """A match query's batch function (``MatchOperator.partition_function``, or a workload's: ``workload``) and
    its partition's record batches."""
    from sparkcep.spark import workload as workload_spark
    from sparkcep.spark.operator import MatchOperator

    read = StructType([StructField("type", StringType()), StructField("ts", LongType()), StructField("id", LongType())])
    op = MatchOperator(sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 5 RETURN a.ts AS at, b.ts AS bt")
                       .spec(read), read, timezone="UTC")
    table = pa.table({"type": list("ABAB"), "ts": pa.array([1, 2, 3, 4], pa.int64()),
                      "id": pa.array([1, 1, 2, 2], pa.int64())})
    if not workload:
        return op.partition_function(), table
    branch = workload_spark._Branch("p", op, read.names, streaming=False)
    schema = pa.schema([("query", pa.string()), ("at", pa.int64()), ("bt", pa.int64())])
    table = table.append_column(workload_spark.BRANCH, pa.array([0] * 4, pa.int32()))
    return workload_spark.partition_function([branch], schema), table


@pytest.mark.parametrize("task", ["recognize", "recognize_workload", "match", "workload"])
def test_partition_function_freezes_the_worker_heap_in_a_task_only(monkeypatch, task):
    """PySpark's reused Python worker collects garbage over its whole heap after every task (about 50 ms with the
    engine loaded): every batch operator's function (MATCH_RECOGNIZE, its shared workload, a match query, a
    workload of them) freezes the objects alive when its task starts (``gc.freeze``), so that the collection
    walks only what the task made.  Outside a Spark task (this test process) the heap is left alone; the rows
    are the same either way."""
    import gc

    from pyspark import TaskContext

    fn, table = (_recognize_task(monkeypatch, task != "recognize") if task.startswith("recognize")
                 else _match_task(monkeypatch, task == "workload"))
    frozen = gc.get_freeze_count()
    outside = [r for b in fn(iter(table.to_batches())) for r in pa.Table.from_batches([b]).to_pylist()]
    assert gc.get_freeze_count() == frozen and outside
    monkeypatch.setattr(TaskContext, "get", classmethod(lambda cls: object()))  # as in a Spark task
    try:
        inside = [r for b in fn(iter(table.to_batches())) for r in pa.Table.from_batches([b]).to_pylist()]
        assert gc.get_freeze_count() > frozen
    finally:
        gc.unfreeze()
    assert inside == outside


_KEYED = ("SELECT * FROM {t} MATCH_RECOGNIZE (PARTITION BY p ORDER BY ts MEASURES FIRST(A.id) AS a, LAST(id) AS c, "
          "COUNT(*) AS n AFTER MATCH SKIP PAST LAST ROW PATTERN ((A | B){{2,4}} C) "
          "DEFINE A AS typ = 'A', B AS typ = 'B', C AS typ = 'C')")
_KEYS = (None, -(2 ** 31), -3, 0, 5, 2 ** 31 - 1)


def _keyed_rows(seed: int, n: int = 200) -> list[dict]:
    rnd = random.Random(seed)
    return [{"p": rnd.choice(_KEYS), "ts": i, "id": 100 + i, "typ": rnd.choice("AABBCD")} for i in range(n)]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("kernel_on", [True, False])
def test_an_int_key_packed_into_the_mask_gives_the_reference_rows(monkeypatch, seed, kernel_on):
    """A single INT PARTITION BY column travels in the mask's high bits (``WorkerSpec.key``): the worker gets
    ``id`` and the BIGINT mask only, decodes the key (NULL, -2^31, 2^31 - 1 included) and cuts the partitions on
    it; the kernel and the row engine (reading the bits with ``bit_test``) give the reference's rows.  The mask
    is made here as Spark's SQL defines it: ``(p + 2^31) << 31``, or bit 30 for a NULL key, OR the bits."""
    parse, build = _front()
    recognize_all = _oracle()
    from sparkcep.compiler.recognize import worker_spec

    schema = {"p": "int", "ts": "bigint", "id": "bigint", "typ": "string"}
    spec = build(parse(_KEYED.format(t="keyed")), schema)
    w = worker_spec(spec, schema)
    assert w.key == "p" and "p" not in w.spec.columns and "p" in spec.output
    rows = sorted(_keyed_rows(seed), key=lambda r: (r["p"] is not None, r["p"] or 0, r["ts"]))
    bits = {v: b for v, b, _ in w.computed}
    masks = [(1 << 30 if r["p"] is None else (r["p"] + 2 ** 31) << 31) | (1 << bits[r["typ"]] if r["typ"] in bits
                                                                         else 0) for r in rows]
    assert all(0 <= m < 2 ** 63 for m in masks)
    table = pa.table({"id": pa.array([r["id"] for r in rows], pa.int64()), w.mask[0]: pa.array(masks, pa.int64())})
    if not kernel_on:
        monkeypatch.setattr(SR, "kernel_runs", lambda spec: False)
    assert spec.output == ("p", "a", "c", "n")
    struct = StructType([StructField("p", IntegerType()), *(StructField(c, LongType()) for c in ("a", "c", "n"))])
    fn = SR.partition_function(w.spec, struct, resort=False, key=(w.mask[0], "p", "int", w.key_shift))
    got = [r for b in fn(iter(table.to_batches(max_chunksize=50))) for r in pa.Table.from_batches([b]).to_pylist()]
    want = recognize_all(spec, [{**r, "__ts": r["ts"]} for r in rows])
    assert canon(got, spec.output) == canon(want, spec.output) and len({r["p"] for r in want}) >= 2


@pytest.mark.spark
def test_an_int_key_packed_into_the_mask_on_spark(spark):
    """On Spark, the mask Spark computes with the key in its high bits (NULL and the INT extremes among the keys)
    gives the reference's rows, over Arrow batches of 7 rows run as they arrive."""
    data = [(r["p"], r["ts"], r["id"], r["typ"]) for r in _keyed_rows(4)]
    spark.createDataFrame(data, "p int, ts bigint, id bigint, typ string").createOrReplaceTempView("keyed")
    text = _KEYED.format(t="keyed")
    spec, want = reference(spark, text)
    conf = "spark.sql.execution.arrow.maxRecordsPerBatch"
    old = spark.conf.get(conf)
    spark.conf.set(conf, "7")  # the partitions run as the batches arrive, keys cut inside batches
    try:
        got = [r.asDict() for r in sparkcep.sql(text, spark).collect()]
    finally:
        spark.conf.set(conf, old)
    assert canon(got, spec.output) == canon(want, spec.output) and len({r["p"] for r in want}) >= 3


@pytest.mark.spark
def test_a_registered_udf_runs_in_define_and_measures(spark):
    """A function registered in the session (``spark.udf.register``) is accepted by ``sparkcep.sql`` in a
    per-row DEFINE and MEASURES expression and computed by Spark before the shuffle; an unknown one is still
    refused at its place."""
    spark.udf.register("twice_v", lambda v: None if v is None else 2 * v, "bigint")
    spark.createDataFrame([("p", 1, "a"), ("p", 2, "b"), ("p", 5, "b"), ("p", 1, "b"), ("q", 4, "a")],
                          "k string, v bigint, t string").selectExpr(
        "k", "v", "t", "timestamp_seconds(monotonically_increasing_id()) AS ts").createOrReplaceTempView("udf_ev")
    text = """SELECT * FROM udf_ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES LAST(twice_v(B.v)) AS last_twice, COUNT(B.*) AS n
        PATTERN (A B+) DEFINE A AS t = 'a', B AS twice_v(B.v) > 3)"""
    assert [tuple(r) for r in sparkcep.sql(text, spark).collect()] == [("p", 10, 2)]
    with pytest.raises(CEPError, match=r"unknown function nope_v\(\)") as err:
        sparkcep.sql(text.replace("B AS twice_v", "B AS nope_v"), spark)
    assert err.value.span is not None


@pytest.mark.spark
def test_batch_ts_derived_in_python_equals_sparks(spark):
    """The batch path does not shuffle ``__ts``: Python derives it from the time column as Arrow gives it to
    ``mapInArrow`` (``_arrow_ts``); it equals Spark's ``__ts`` (``project``) for TIMESTAMP (session zone not
    UTC), TIMESTAMP_NTZ across a DST change, DATE before 1970, numbers, and NULL for a string."""
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Europe/Paris")
    try:
        df = spark.sql(
            "SELECT * FROM VALUES "
            "(TIMESTAMP'2024-03-31 01:30:00.123456', TIMESTAMP_NTZ'2024-03-31 01:30:00', DATE'1969-12-30', 7, "
            "CAST(1.5 AS DECIMAL(10, 2)), 2.5D, 'x'), "
            "(TIMESTAMP'2024-03-31 03:30:00', TIMESTAMP_NTZ'2024-03-31 03:30:00', DATE'2024-02-29', -3, "
            "CAST(-2 AS DECIMAL(10, 2)), -0.5D, 'y'), "
            "(NULL, NULL, NULL, NULL, NULL, NULL, NULL) AS t(tz, ntz, d, i, dec, dbl, s)")
        for column in df.columns:
            spec = R.RecognizeSpec(**{**SPEC.__dict__, "order_by": (R.OrderItem(column.upper()),)})
            want = [r[SR.TS] for r in SR.project(df, spec).select(SR.TS).collect()]
            time = SR._time_field(df, column.upper())

            def derive(batches, time=time):
                for b in batches:
                    table = pa.Table.from_batches([b])
                    yield pa.record_batch([SR._arrow_ts(table, *time).combine_chunks().cast(pa.string())],
                                          names=["ts"])

            got = [r["ts"] for r in df.coalesce(1).mapInArrow(derive, "ts string").collect()]
            assert [None if v is None else float(v) for v in got] == [
                None if v is None else float(v) for v in want], column
            assert want[0] is not None or column == "s"
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)


def test_partition_function_keys_out_of_runs_equal_the_reference():
    """Spark's sort puts a key's rows in one run, and the batch path then cuts the table where the key changes
    (no gathering); a key in several runs (as a Spark and Arrow grouping that differ could give) is still one
    partition.  ``__ts`` derived from the time column (``time``) as in Spark; rows over Arrow batches of 3."""
    pytest.importorskip("sparkcep.runtime_udfs.recognize")
    recognize_all = _oracle()
    rnd = random.Random(5)
    rows = []
    for k, n in [("p", 7), (None, 3), ("q", 6), ("p", 5), (None, 2)]:  # p and NULL in two runs each
        for _ in range(n):
            ts = BASE.replace(tzinfo=dt.UTC) + dt.timedelta(seconds=len(rows))
            rows.append({"k": k, "t": rnd.choice("abb"), "v": rnd.randint(0, 5), "ts": ts})
    schema = pa.schema([("k", pa.string()), ("t", pa.string()), ("v", pa.int64()),
                        ("ts", pa.timestamp("us", tz="UTC"))])
    table = pa.Table.from_pylist(rows, schema=schema)
    fn = SR.partition_function(SPEC, _OUTPUT, resort=False, time=("ts", "timestamp"))
    got = [r for b in fn(iter(table.to_batches(max_chunksize=3))) for r in pa.Table.from_batches([b]).to_pylist()]
    want = recognize_all(SPEC, [{**r, "__ts": int(r["ts"].timestamp() * 1_000_000)} for r in rows])
    assert canon(got, SPEC.output) == canon(want, SPEC.output) and len(want) >= 4
    contiguous = table.sort_by([("k", "ascending")])
    cut, bounds = SR._partitions(contiguous, SR._partition_ids(contiguous, ("k",)))
    assert cut is contiguous and len(bounds) == 4



def test_an_integer_key_without_nulls_is_its_own_partition_id(monkeypatch):
    """One integer partition column without NULLs gives the partition cut its values as ids (no dictionary):
    the same cuts, a key in two runs still gathered; with a NULL (or a string key) the dictionary path stays."""
    import pyarrow.compute as pc

    keys = [7, 7, -3, -3, -3, 2 ** 40, 7, 5]  # 7 in two runs
    table = pa.Table.from_batches(pa.table({"k": pa.array(keys, pa.int64()), "v": list(range(len(keys)))})
                                  .to_batches(max_chunksize=3))
    want = SR._partitions(table, SR._partition_ids(table, ("k",)))
    encode = pc.dictionary_encode
    monkeypatch.setattr(pc, "dictionary_encode", lambda *a, **k: pytest.fail("built a dictionary"))
    ids = SR._partition_ids(table, ("k",))
    got, bounds = SR._partitions(table, ids)

    def groups(cut):
        t, b = cut
        return sorted((t.column("k")[x].as_py(), t.column("v").to_pylist()[x:y]) for x, y in itertools.pairwise(b))

    assert groups((got, bounds)) == groups(want) == [(-3, [2, 3, 4]), (5, [7]), (7, [0, 1, 6]), (2 ** 40, [5])]
    sorted_keys = table.sort_by("k")
    assert SR._partitions(sorted_keys, SR._partition_ids(sorted_keys, ("k",)))[0] is sorted_keys  # runs: no gather
    monkeypatch.setattr(pc, "dictionary_encode", encode)
    nulls = pa.table({"k": pa.array([1, None, None, 1], pa.int32())})
    assert SR._partitions(nulls, SR._partition_ids(nulls, ("k",)))[1] == [0, 2, 4]

def test_partition_function_kernel_and_row_engine_give_the_reference_rows(monkeypatch):
    """The batch path gives runs of whole partitions (at most ``KERNEL_ROWS`` rows, a larger one alone) to the
    columnar kernel and a chunk it declines (NaN in a DOUBLE a measure's aggregate reads; the DEFINE reads it as
    Spark orders it) to the row engine: the rows equal the reference's and the row engine's alone, over NULL keys,
    ties in time and a partition larger than a run."""
    pytest.importorskip("sparkcep.runtime_udfs.recognize.kernel")
    recognize_all = _oracle()
    from sparkcep.runtime_udfs.recognize import kernel

    spec = R.RecognizeSpec(**{**SPEC.__dict__, "measures": (
        R.Measure(R.Agg("count", None), "n"), R.Measure(R.Nav("FIRST", Attr("A", "v"), 0), "first_v"),
        R.Measure(R.Agg("max", Attr("B", "v"), "B"), "max_v")), "output": ("k", "n", "first_v", "max_v"),
        "output_types": ("string", "bigint", "double", "double")})
    assert kernel.eligibility(spec).ok
    output = StructType([StructField("k", StringType()), StructField("n", LongType()),
                         StructField("first_v", DoubleType()), StructField("max_v", DoubleType())])
    rnd = random.Random(3)
    from sparkcep.runtime_udfs.recognize import sort_key

    # "o" ends with an A and "o2" has rising B's: one partition taken for two would match across them
    rows = [{"k": "o", "t": "a", "v": 0.0, "ts": 0, "__ts": 0},
            *({"k": "o2", "t": "b", "v": float(i), "ts": i, "__ts": i} for i in (1, 2))]
    for k, n in [("p", 3), ("q", 4), (None, 5), ("r", 19), ("s", 2), ("t", 6), ("u", 3)]:
        block = [{"k": k, "t": rnd.choice("aabbb"), "v": float("nan") if k == "t" and i == 2 else
                  float(rnd.randint(0, 4)), "ts": i // 2, "__ts": i // 2} for i in range(n)]
        rows += sorted(block, key=sort_key(spec))  # as Spark sorts them (ties by the other columns)
    table = pa.Table.from_pylist(rows, schema=pa.schema([("k", pa.string()), ("t", pa.string()),
                                                         ("v", pa.float64()), ("ts", pa.int64()),
                                                         ("__ts", pa.int64())]))
    calls = []

    def spy(spec, chunk, bounds):
        calls.append(got := run_chunk(spec, chunk, bounds))
        return got

    run_chunk = kernel.run_chunk
    monkeypatch.setattr(kernel, "run_chunk", spy)
    monkeypatch.setattr(SR, "KERNEL_ROWS", 8)

    def result(fn) -> list[tuple]:
        return canon([r for b in fn(iter(table.to_batches(max_chunksize=4)))
                      for r in pa.Table.from_batches([b]).to_pylist()], spec.output)

    got = result(SR.partition_function(spec, output, resort=False))
    assert len(calls) == 6 and sum(c is None for c in calls) == 1  # o+o2+p, q, NULL, r alone, s+t (NaN), u
    monkeypatch.setattr(SR, "kernel_runs", lambda spec: False)
    rows_engine = result(SR.partition_function(spec, output, resort=False))
    assert len(calls) == 6
    # a NaN result is NULL in the output (as PySpark converts NaN from Python)
    want = canon([{c: None if v != v else v for c, v in r.items()} for r in recognize_all(spec, rows)],
                 spec.output)
    assert got == rows_engine == want and len(want) >= 6


@pytest.mark.spark
def test_coalesce_if_greatest_widen_their_values_as_spark(spark):
    """``coalesce``/``if``/``greatest`` over a BIGINT and a DOUBLE are DOUBLE in Spark, each value widened first:
    over two rows their product with 2^62 is Spark's DOUBLE, not a BIGINT overflow (NULL), in MEASURES and in a
    DEFINE (which then holds), in the engine and the reference alike; compared with Spark SQL over the same
    rows."""
    spark.createDataFrame([("p", 1, 2, None, "a"), ("p", 2, None, 1.5, "b"), ("q", 1, 3, None, "a"),
                           ("q", 2, 7, 0.5, "b")], "k string, ts bigint, x bigint, d double, t string"
                          ).createOrReplaceTempView("widen_ev")
    values = ["coalesce({a}.x, {b}.d) * 4611686018427387904", "if({a}.x > 0, {a}.x, {b}.d) + 9223372036854775807",
              "greatest({a}.x, {b}.d) * 4611686018427387904"]
    text = ("SELECT * FROM widen_ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES "
            + ", ".join(f"{v.format(a='A', b='B')} AS m{k}" for k, v in enumerate(values))
            + f" PATTERN (A B) DEFINE A AS t = 'a', B AS {values[0].format(a='A', b='B')} > 0)")
    want = spark.sql("SELECT a.k, " + ", ".join(f"{v.format(a='a', b='b')} AS m{k}" for k, v in enumerate(values))
                     + " FROM widen_ev a JOIN widen_ev b ON a.k = b.k AND a.t = 'a' AND b.t = 'b' AND b.ts = a.ts + 1"
                     ).collect()
    assert len(want) == 2 and all(r.m0 >= 2 ** 63 for r in want)  # beyond BIGINT
    spec, expected = reference(spark, text)
    got = sparkcep.sql(text, spark)
    assert sorted(map(tuple, got.collect())) == sorted(map(tuple, want))
    assert canon(expected, spec.output) == sorted(map(tuple, want))
    spark.catalog.dropTempView("widen_ev")


@pytest.mark.spark
@pytest.mark.slow
def test_decimal_literals_and_intervals_in_define_mean_what_spark_means(spark):
    """``v > 0.5BD`` and TIMESTAMP/INTERVAL arithmetic in DEFINE are Spark's (they matched nothing before: the
    engine compared a DOUBLE with a DECIMAL, a TIMESTAMP minus an INTERVAL, as NULL); each DEFINE is checked
    against Spark over the same rows; a DOUBLE compared with a DECIMAL across rows is refused at its place."""
    base = dt.datetime(2024, 1, 1)
    spark.createDataFrame([("k", base + dt.timedelta(seconds=30 * i), v) for i, v in enumerate([0.2, 0.7, 1.0, 3.0])],
                          "k string, ts timestamp, v double").createOrReplaceTempView("typed_ev")
    defines = {"A": "v < 0.5BD", "B": "v > 1E-2BD AND ts - INTERVAL 1 MINUTE < TIMESTAMP '2024-01-01 00:00:00'",
               "C": "ts < TIMESTAMP '2024-01-01 00:00:00' + INTERVAL '1' MINUTE + INTERVAL 1 SECOND",
               "D": "v > CAST('2.5' AS DECIMAL(2, 1))"}
    held = spark.sql("SELECT " + ", ".join(f"{c} AS {n}" for n, c in defines.items()) + " FROM typed_ev ORDER BY ts"
                     ).collect()
    assert [[n for n in defines if r[n]] for r in held] == [["A", "B", "C"], ["B", "C"], ["C"], ["D"]]
    text = ("SELECT * FROM typed_ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES CLASSIFIER() AS c "
            "ALL ROWS PER MATCH PATTERN (A B C D) DEFINE " + ", ".join(f"{n} AS {c}" for n, c in defines.items())
            + ")")
    assert [r.c for r in sparkcep.sql(text, spark).orderBy("ts").collect()] == ["A", "B", "C", "D"]
    refused = text.replace("D AS v > CAST('2.5' AS", "D AS D.v > CAST(A.v AS")
    with pytest.raises(CEPSemanticError, match="comparing a double with a decimal") as err:
        sparkcep.sql(refused, spark)
    assert err.value.span.start == refused.index("D.v > CAST(A.v")
    spark.catalog.dropTempView("typed_ev")


@pytest.mark.spark
def test_a_data_error_in_what_spark_computes_per_row_is_null_not_a_failed_job(spark):
    """DEFINE parts Spark computes per row (hidden columns) under ANSI (Spark 4's default): a bad string cast, a
    zero divisor, an overflow are NULL (docs/language.md §12: ``try_*`` behaviour), so a DEFINE over them is
    false or NULL-tested, and the job runs (before: CAST_INVALID_INPUT killed it)."""
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    spark.createDataFrame([("k", i, s) for i, s in enumerate(["2", "x", "3", "x"])],
                          "k string, ts bigint, s string").createOrReplaceTempView("bad_ev")
    text = ("SELECT * FROM bad_ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES CLASSIFIER() AS c "
            "ALL ROWS PER MATCH PATTERN (A B C) DEFINE A AS CAST(s AS INT) > 1, "
            "B AS CAST(s AS INT) % 0 IS NULL AND CAST(s AS INT) / 0 IS NULL, "
            "C AS CAST(s AS BIGINT) * 9223372036854775807 IS NULL)")
    assert [(r.ts, r.c) for r in sparkcep.sql(text, spark).orderBy("ts").collect()] == [(0, "A"), (1, "B"), (2, "C")]
    spark.catalog.dropTempView("bad_ev")
