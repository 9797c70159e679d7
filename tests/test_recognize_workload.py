"""A workload of MATCH_RECOGNIZE statements sharing one pass: the shared per-partition runner
(runtime_udfs/recognize/workload.py) gives each statement what its engine gives alone (random specs, rows
with ties, statements ordering ties differently, micro-batches with state round trips), and the Spark layer
(spark/recognize_workload.py, ``sparkcep.sql_workload``) gives each statement what ``sparkcep.sql`` gives,
batch and streaming."""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkcep.runtime_udfs import recognize as engine
from sparkcep.runtime_udfs.recognize import workload as shared
from tests.recognize_strategies import RX, partition_rows, specs

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: tiebreaks a statement may have over the strategies' columns: every column it reads (rows tied on them all
#: are the same rows to it), in varying orders, so that statements order tied rows differently
COLUMN_VARIANTS = (("k", "t", "x", "y", RX), ("k", "t", "y", "x", RX), ("k", "t", RX, "x", "y"),
                   ("k", "t", "x", RX, "y"))


@st.composite
def _workloads(draw, streaming: bool = False):
    n = draw(st.integers(1, 4))
    out = []
    for _ in range(n):
        spec = draw(specs(streaming=streaming))
        out.append(replace(spec, columns=draw(st.sampled_from(COLUMN_VARIANTS))))
    return out


def _shared_order(specs_, rows):
    """The rows as the Spark layer sorts them: ORDER BY, then the shared tiebreak."""
    lead = replace(specs_[0], columns=("k", "t", *shared.shared_tiebreak(specs_)))
    return sorted(rows, key=engine.sort_key(lead))


def _alone(spec, rows):
    return engine.run_partition(spec, sorted(rows, key=engine.sort_key(spec)))


@SETTINGS
@given(_workloads(), partition_rows(), st.randoms(use_true_random=False))
def test_shared_partition_equals_each_engine_alone(specs_, rows, rnd):
    rnd.shuffle(rows)
    ordered = _shared_order(specs_, rows)
    ready = shared.presorted(specs_, shared.shared_tiebreak(specs_))
    assert shared.run_shared_partition(specs_, ordered, ready=ready) == [_alone(s, rows) for s in specs_]


def test_a_statement_ordering_ties_otherwise_is_sorted_again():
    """x-then-y and y-then-x order the tied rows at t=1 differently; only the first is presorted by the
    shared sort, and the second's matches follow its own order."""
    from tests.recognize_strategies import V, col, lit, make_spec, op, seq

    def spec(columns):
        return make_spec(seq(V("A"), V("B")), columns=columns, partition_by=("k",),
                         defines=(("A", op("=", col("x"), lit(1))), ("B", op("=", col("y"), lit(1)))),
                         measures=(("ax", col("x", "A")),))

    xy, yx = spec(("k", "t", "x", "y")), spec(("k", "t", "y", "x"))
    rows = [{"k": 0, "t": 1, "x": 1, "y": 0, "__ts": 1}, {"k": 0, "t": 1, "x": 0, "y": 1, "__ts": 1}]
    assert shared.presorted([xy, yx], shared.shared_tiebreak([xy, yx])) == [True, False]
    ordered = _shared_order([xy, yx], rows)
    got = shared.run_shared_partition([xy, yx], ordered, ready=[True, False])
    assert got == [_alone(xy, rows), _alone(yx, rows)]
    assert got[0] != got[1]  # the orders matter here: x-then-y puts (0, 1) first, no A B; y-then-x matches


@st.composite
def _stream_case(draw):
    specs_ = draw(_workloads(streaming=True))
    rows = draw(partition_rows())
    times = sorted({r["t"] for r in rows})
    cuts = sorted(draw(st.lists(st.sampled_from(times), max_size=3))) if times else []
    return specs_, rows, cuts


@SETTINGS
@given(_stream_case())
def test_shared_micro_batches_with_state_round_trips_equal_each_engine_alone(case):
    """Rows of equal time arrive in one micro-batch (as the stream settles them); the watermark after a batch
    is the next time to come."""
    specs_, rows, cuts = case
    ordered = _shared_order(specs_, rows)
    ready = shared.presorted(specs_, shared.shared_tiebreak(specs_))
    batches, rest = [], ordered
    for cut in cuts:
        batches.append([r for r in rest if r["t"] < cut])
        rest = [r for r in rest if r["t"] >= cut]
    batches.append(rest)
    states = shared.init_states(specs_)
    out = [[] for _ in specs_]
    for k, batch in enumerate(batches):
        states = shared.states_from_json(shared.states_to_json(states))
        states, got = shared.step_all(specs_, states, batch, ready=ready)
        out = [a + b for a, b in zip(out, got, strict=True)]
        later = [r["t"] for b in batches[k + 1:] for r in b]
        states, got = shared.advance_all(specs_, states, float(min(later)) if later else None)
        out = [a + b for a, b in zip(out, got, strict=True)]
    states = shared.states_from_json(shared.states_to_json(states))
    states, got = shared.advance_all(specs_, states, None, final=True)
    out = [a + b for a, b in zip(out, got, strict=True)]
    assert out == [_alone(s, rows) for s in specs_]


def test_statements_with_another_partition_or_order_are_not_shareable():
    from tests.recognize_strategies import V, make_spec

    a = make_spec(V("A"), columns=("k", "t"), partition_by=("k",))
    b = make_spec(V("A"), columns=("k", "t"), partition_by=())
    with pytest.raises(ValueError, match="PARTITION BY or ORDER BY"):
        shared.init_states([a, b])
    assert shared.wakeup_all([a], shared.init_states([a])) is None


# ----------------------------------------------------------------------------------------------- Spark

WORKLOAD = """
-- a comment; with a semicolon
SELECT * FROM rec_wl MATCH_RECOGNIZE (
    PARTITION BY k1, k2 ORDER BY ts
    MEASURES FIRST(A.v) AS a_v, COUNT(B.*) AS nb
    PATTERN (A B+) DEFINE A AS A.t = 'a', B AS B.v > PREV(B.v));
SELECT * FROM rec_wl MATCH_RECOGNIZE (
    PARTITION BY k1 ORDER BY ts
    MEASURES RUNNING COUNT(*) AS n, FINAL LAST(B.v) AS fin, CLASSIFIER() AS cls
    ALL ROWS PER MATCH WITH UNMATCHED ROWS AFTER MATCH SKIP TO NEXT ROW
    PATTERN (A B*? C) DEFINE A AS upper(A.t) = 'A', C AS C.v >= 5);
SELECT k1, mno, total FROM rec_wl MATCH_RECOGNIZE (
    PARTITION BY k1 ORDER BY ts
    MEASURES MATCH_NUMBER() AS mno, SUM(v) AS total
    PATTERN (X{2,3}) DEFINE X AS upper(X.t) <> 'C' AND X.v IS NOT NULL) WHERE total > 3;
SELECT * FROM rec_wl MATCH_RECOGNIZE (
    PARTITION BY k1 ORDER BY ts
    MEASURES LAST(Y.t) AS lt
    PATTERN (Y Z) DEFINE Y AS concat(Y.t, ';') = 'b;', Z AS Z.t <> Y.t)
"""


def _canon(df):
    return sorted((tuple(r) for r in df.collect()), key=repr)


@pytest.mark.spark
def test_batch_workload_shares_one_pass_and_equals_each_statement_alone(spark):
    import sparkcep
    from sparkcep.sql_api import split_statements
    from tests.test_recognize_spark import EVENTS_SCHEMA, events

    spark.createDataFrame(events(), EVENTS_SCHEMA).createOrReplaceTempView("rec_wl")
    texts = split_statements(WORKLOAD)
    assert len(texts) == 4 and len(texts[3]) == len(WORKLOAD)  # each padded to keep the file's positions
    assert texts[1].index("upper") == WORKLOAD.index("upper") and not texts[1][:WORKLOAD.index("SELECT")].strip()
    got = sparkcep.sql_workload(WORKLOAD, spark)
    assert sorted(got) == [0, 1, 2, 3]
    assert [members for members, _ in got.shared] == [[1, 2, 3]]
    assert got.plan[0].startswith("statement 0 runs alone") and got.plan[1].startswith("statements 1, 2, 3 share")
    tagged = got.shared[0][1]
    assert tagged._jdf.queryExecution().executedPlan().toString().count("MapInArrow") == 1
    for i, text in enumerate(texts):
        alone = sparkcep.sql(text, spark)
        assert got[i].columns == alone.columns
        want = _canon(alone)
        assert _canon(got[i]) == want and want, f"statement {i}"
    tagged.unpersist()
    spark.catalog.dropTempView("rec_wl")


@pytest.mark.spark
@pytest.mark.slow
def test_streaming_workload_one_stateful_operator_equals_each_statement_in_batch(spark, tmp_path):
    import sparkcep
    from tests.test_recognize_spark import BASE, STREAM_SCHEMA, STREAM_STATEMENT, _write_files

    second = """SELECT * FROM {view} MATCH_RECOGNIZE (
        PARTITION BY k ORDER BY ts
        MEASURES FIRST(A.ts) AS start, COUNT(*) AS n
        ALL ROWS PER MATCH
        PATTERN (A C+) WITHIN INTERVAL '4' SECOND
        DEFINE A AS lower(A.t) = 'b', C AS C.v < 5)"""
    src, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    _write_files(src)
    # a far later row of another key: the watermark passes every WITHIN, so every match is decided
    late = BASE + dt.timedelta(hours=1)
    (src / "part-99.json").write_text(json.dumps({"k": "zz", "ts": late.isoformat() + "Z", "t": "z", "v": 0}))
    for k, f in enumerate(sorted(src.iterdir())):  # read in name order (the stream orders files by mtime)
        os.utime(f, (1_700_000_000 + 10 * k, 1_700_000_000 + 10 * k))
    stream = spark.readStream.schema(STREAM_SCHEMA).option("maxFilesPerTrigger", 1).json(str(src))
    stream.createOrReplaceTempView("rec_wl_stream")
    texts = [STREAM_STATEMENT.format(view="rec_wl_stream"), second.format(view="rec_wl_stream")]
    got = sparkcep.sql_workload(texts, spark, watermark_delay=1000)
    (members, tagged), = got.shared
    assert members == [0, 1] and tagged.isStreaming and got[1].isStreaming
    (tagged.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(ck))
     .outputMode("append").trigger(availableNow=True).start().awaitTermination())
    rows = spark.read.parquet(str(out))
    spark.read.schema(STREAM_SCHEMA).json(str(src)).createOrReplaceTempView("rec_wl_batch")
    for i, text in enumerate([STREAM_STATEMENT, second]):
        batch = sparkcep.sql(text.format(view="rec_wl_batch"), spark)
        mine = rows.where(f"query = {i}").select(*[f"_{i}_{j}" for j in range(len(batch.columns))])
        want = _canon(batch)
        assert _canon(mine) == want and want, f"statement {i}"
    spark.catalog.dropTempView("rec_wl_stream")
    spark.catalog.dropTempView("rec_wl_batch")


# ----------------------------------------------------------------------------------------------- without Spark


def test_split_statements_keeps_quoted_and_commented_semicolons_and_file_positions():
    from sparkcep.sql_api import split_statements

    texts = split_statements(WORKLOAD + ";\n  ;")
    assert len(texts) == 4
    assert "concat(Y.t, ';') = 'b;'" in texts[3] and "-- a comment; with a semicolon" in texts[0]
    for text in texts:  # blanks where the other statements were: each statement at its place in the file
        start = len(text) - len(text.lstrip())
        assert WORKLOAD[start:len(text)] == text[start:]


def test_plan_groups_statements_by_source_partition_and_order():
    from sparkcep.grammar.recognize import parse_recognize
    from sparkcep.sql_api import plan_workload, split_statements

    qs = [parse_recognize(t) for t in split_statements(WORKLOAD)]
    other_order = parse_recognize("SELECT * FROM REC_WL MATCH_RECOGNIZE (PARTITION BY K1 ORDER BY ts DESC "
                                  "PATTERN (A) DEFINE A AS v > 0)")
    same = parse_recognize("SELECT * FROM REC_WL MATCH_RECOGNIZE (PARTITION BY K1 ORDER BY TS "
                           "PATTERN (A) DEFINE A AS v > 0)")
    groups, lines = plan_workload([*qs, other_order, same])
    assert groups == [[0], [1, 2, 3, 5], [4]]
    assert lines[1].startswith("statements 1, 2, 3, 5 share one pass (FROM rec_wl, PARTITION BY k1, ORDER BY ts)")
    assert "runs alone" in lines[2] and "same PARTITION BY and ORDER BY" in lines[2]


def test_row_expressions_are_renamed_once_per_sql_text_in_each_statement_order():
    from sparkcep.grammar.recognize import parse_recognize
    from sparkcep.spark.recognize_workload import rename_row_exprs, row_exprs_of

    a = parse_recognize("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B) "
                        "DEFINE A AS upper(A.t) = 'A', B AS lower(B.t) = 'b')")
    b = parse_recognize("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B) "
                        "DEFINE A AS lower(A.t) = 'b', B AS abs(B.v) > 1 AND upper(B.t) = 'B')")
    (ra, rb), own = rename_row_exprs([a, b])
    assert [r.column for r in row_exprs_of(ra)] == own[0] == ["__rx0", "__rx1"]
    # (a comparison with a function is Spark's whole: upper(B.t) = 'B' is one column, another than a's A)
    assert [r.column for r in row_exprs_of(rb)] == own[1] == ["__rx1", "__rx2", "__rx3"]
    # the same per-row SQL is one column, each reference keeps its own variable
    assert row_exprs_of(ra)[1].sql == row_exprs_of(rb)[0].sql
    assert (row_exprs_of(ra)[1].var, row_exprs_of(rb)[0].var) == ("B", "A")


def test_shared_stream_function_has_the_late_rule_of_one_statement(monkeypatch):
    """The workload's state function decides lateness per key as one statement's does (issue 15): a row at
    the watermark's very time waits (an equal one may still come in the next micro-batch and is matched), a
    row older than the watermark its key's rows were settled at is a ``late`` row on the side channel (NULL
    ``query``: late for every statement of the group); the results are the statement's alone."""
    from pyspark.sql.types import IntegerType

    from sparkcep.spark import recognize as single
    from sparkcep.spark import recognize_workload as spark_shared
    from sparkcep.spark.group_state import SimulatedGroup
    from sparkcep.spark.late import KIND, RECORD
    from tests.test_recognize_spark import _INPUT, _OUTPUT, SPEC, _frame, _micros

    monkeypatch.setattr(single, "output_struct", lambda spec: _OUTPUT)  # Spark's DDL parser needs a session
    alone = single.stream_function(SPEC, _OUTPUT, _INPUT, numeric=False, late_rows=True)
    full = spark_shared.tagged_struct([SPEC, SPEC], late_rows=True)
    assert full[spark_shared.QUERY].dataType == IntegerType() and full[spark_shared.QUERY].nullable
    both = spark_shared.stream_function([SPEC, SPEC], full, _INPUT, numeric=False, late_rows=True)
    g1, g2 = SimulatedGroup(), SimulatedGroup()
    batches = [([("a", 0, 1), ("b", 2, 2)], 0.5), ([("b", 4, 3), ("a", 0, 4)], 3.0),
               ([("b", 5, 3), ("b", 3, 1.5)], 8.0)]  # b@3 again: at the watermark of the batch before, on time
    got_alone, got_shared = [], []
    for rows, watermark in batches:
        g1.watermark_ms = g2.watermark_ms = _micros(watermark) // 1000
        got_alone += [r for f in alone(("p",), iter([_frame(rows)]), g1) for r in f.to_dict("records")]
        got_shared += [r for f in both(("p",), iter([_frame(rows)]), g2) for r in f.to_dict("records")]
    results = [(r[KIND], r["n"]) for r in got_alone if r[KIND] == "result"]
    assert results == [("result", 4)]  # a1 b2 b3 b3': the b@3 of the next micro-batch is not lost
    for i in (0, 1):
        assert [(r[KIND], r[f"_{i}_1"]) for r in got_shared if r[spark_shared.QUERY] == i] == results
    late = [r for r in got_shared if r[KIND] == "late"]
    assert [json.loads(r[RECORD])["v"] for r in late] == [3] == [
        json.loads(r[RECORD])["v"] for r in got_alone if r[KIND] == "late"]
    assert all(r[spark_shared.QUERY] is None or r[spark_shared.QUERY] != r[spark_shared.QUERY] for r in late)


def test_shared_stream_results_carry_their_matchs_last_row_arrival(monkeypatch):
    """Statements sharing a pass over a stream with its arrival: each statement's match is stamped with the
    arrival of its own last row (b3, from the first file), not the newest arrival among its key's rows of the
    micro-batch (a5 b6 of the second file), as one statement's stream does."""
    from pyspark.sql.types import LongType, StructField, StructType

    from sparkcep.spark import recognize as single
    from sparkcep.spark import recognize_workload as spark_shared
    from sparkcep.spark.group_state import SimulatedGroup
    from sparkcep.spark.validate import ARRIVAL_COL, RESULT_ARRIVAL
    from tests.test_recognize_spark import _INPUT, _OUTPUT, SPEC, _frame

    arrival = StructField(RESULT_ARRIVAL, LongType())
    monkeypatch.setattr(single, "output_struct", lambda spec: StructType(  # Spark's DDL parser needs a session
        [*_OUTPUT.fields, *([arrival] if RESULT_ARRIVAL in spec.output else [])]))
    schema = StructType([*_INPUT.fields, StructField(ARRIVAL_COL, LongType())])
    fn, full = spark_shared.stamped_function([SPEC, SPEC], schema, numeric=False, watermark_delay_ms=0)
    assert RESULT_ARRIVAL in full.names
    rows = [("a", 0, 1), ("b", 2, 2), ("b", 5, 3), ("b", 1, 4), ("a", 0, 5), ("b", 3, 6)]
    frame = _frame(rows).assign(**{ARRIVAL_COL: [1_000] * 4 + [9_000] * 2})
    got = [r for f in fn(("p",), iter([frame]), SimulatedGroup()) for r in f.to_dict("records")]
    assert sorted((r[spark_shared.QUERY], r[f"_{r[spark_shared.QUERY]}_1"], r[RESULT_ARRIVAL]) for r in got) == [
        (0, 3, 1_000), (1, 3, 1_000)]
