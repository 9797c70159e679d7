"""Stop conditions ``B+ b[] UNTIL (b.x > 10)`` on a loop (Flink CEP's ``oneOrMore().until(...)``), issue 16.

A stop event is an event of the partition of one of the loop's types whose ``UNTIL`` condition holds (read on it
alone, as ``b.attr``; NULL is no stop).  The loop never takes one, and takes nothing after one: no stop event
lies between the loop's first and last events, under every strategy.  Every event of the partition reaches the
engine (a stop event need not pass the loop's own predicates); the NFA^b runs close a run's loop on it
(``match.runs``).  Compared with the oracle (``oracles.match._until_holds``) on random streams under every
strategy, in one step and in random micro-batches, and on Spark batch and streaming.
"""

from __future__ import annotations

import functools
import random

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.grammar.parser import parse_query
from sparkcep.ir.errors import CEPError
from sparkcep.ir.printer import format_query
from sparkcep.ir.serde import from_data, to_data
from sparkcep.oracles.match import match_rows, trend_aggregates
from sparkcep.runtime_udfs.match import engine as match_engine
from sparkcep.runtime_udfs.trend.graph import describe
from sparkcep.spark.results import canonical
from tests.test_match_engine import stream_through_engine
from tests.test_match_groups import _events
from tests.test_match_language import agrees, shape_queries, with_strategy
from tests.test_match_semantics import STRATEGIES, compiled, with_seq
from tests.test_trend_engine import engine_rows, oracle_rows, trend_queries


def test_until_parses_prints_back_and_round_trips():
    q = parse_query("PATTERN SEQ(A a, B+ b[] UNTIL (b.x > 10 OR b.y = 1), C c, D d{2,} UNTIL (d.x = 1)) WITHIN 10")
    b, d = q.pattern.items[1], q.pattern.items[3]
    assert b.until is not None and d.until is not None and d.bounds == (2, None)
    assert format_query(q).splitlines()[0] == \
        "PATTERN SEQ(A a, B+ b[] UNTIL (b.x > 10 OR b.y = 1), C c, D{2,} d UNTIL (d.x = 1))"
    assert parse_query(format_query(q)) == q
    assert from_data(to_data(q)) == q
    # on a group, and Flink's any-event reading
    q = parse_query("PATTERN SEQ(A a, (SEQ(B b, C c))+ UNTIL (c.x > 1), D+ d[] UNTIL ANY (d.y = 2)) WITHIN 10")
    g, d = q.pattern.items[1], q.pattern.items[2]
    assert g.until is not None and not g.until_any and d.until_any
    assert format_query(q).splitlines()[0] == \
        "PATTERN SEQ(A a, (SEQ(B b, C c))+ UNTIL (c.x > 1), D+ d[] UNTIL ANY (d.y = 2))"
    assert parse_query(format_query(q)) == q and from_data(to_data(q)) == q
    # every event reaches the engine (the filter keeps every row), and NFA^b runs close the loop
    q = sparkcep.compile("PATTERN SEQ(A a, B+ b[] UNTIL (b.x > 2), C c) WHERE b.x > 0 WITHIN 10")
    assert [name for _, name in match_engine.engines(q.spec())] == ["nfa_b_runs"]
    assert "engine=nfa_b_runs" in q.explain()
    assert "narrow the window or the stop condition" in q.explain()  # collapsed output does not take UNTIL
    # the Spark projection keeps what only the stop condition reads
    assert "  y," in sparkcep.compile("PATTERN SEQ(A a, B+ b[] UNTIL (b.y > 2), C c) WITHIN 10 RETURN a.ts").sql()


@pytest.mark.parametrize(("text", "why", "column"), [
    ("PATTERN SEQ(A a, B+ b[] UNTIL (a.x > 1), C c) WITHIN 10", "the loop's variable is b", 32),
    ("PATTERN SEQ(A a, B+ b[] UNTIL (b[i-1].x > 1), C c) WITHIN 10", "not b[...]", 32),
    ("PATTERN SEQ(A a, B+ b[] UNTIL (count(b[].x) > 1)) WITHIN 10", "no aggregate", 32),
    ("PATTERN SEQ(A a, B? b UNTIL (b.x > 1), C c) WITHIN 10", "no loop to stop", 30),
    ("PATTERN SEQ(A a, (SEQ(B b, C c))? UNTIL (b.x > 1)) WITHIN 10", "no loop to stop", 42),
    ("PATTERN SEQ(A a, (SEQ(B b, C c))+ UNTIL (a.x > 1)) WITHIN 10", "one of the group's variables b, c", 42),
    ("PATTERN SEQ(A a, (SEQ(B b, C c))+ UNTIL (b.x > 1 AND c.x > 1)) WITHIN 10", "(one of the group's", 54),
    ("PATTERN SEQ(A a, (SEQ(C c, B+ b[] UNTIL (b.x > 1)))+) WITHIN 10", "inside a repetition", 42),
    ("PATTERN SEQ(A a, NOT SEQ(C c, B+ b[] UNTIL (b.x > 1)), D d) WITHIN 10", "inside a negation", 45),
])
def test_check_refuses_what_does_not_run_with_the_reason(text, why, column):
    with pytest.raises(CEPError) as err:
        sparkcep.compile(text)
    assert why in str(err.value) and err.value.span.column == column


def test_a_stop_event_ends_the_loop_under_every_strategy():
    """a0 b1 b2(stop) b3 c4: the loop never takes b2 nor, once b2 came, b3 from a run that began before it;
    a loop that starts after the stop (b3) is fine.  skip_till_next_match: a0's run takes b1, cannot take b2 nor
    b3, and ends with c4; contiguity: b2 breaks every loop through it."""
    events = [{**e, "x": 20 if e["ts"] == 2 else e["ts"]} for e in _events("a0 b1 b2 b3 c4")]
    text = "PATTERN SEQ(A a, B+ b[] UNTIL (b.x > 10), C c) WITHIN 10 RETURN count(b[].x) AS n, b[1].ts AS first"
    assert sorted((r["n"], r["first"]) for r in agrees(text, events)) == [(1, 1), (1, 3)]
    without = text.replace(" UNTIL (b.x > 10)", "")
    assert len(agrees(without, events)) == 7
    assert agrees(with_strategy(text, "skip_till_next_match"), events) == [{"n": 1, "first": 1}]
    assert agrees(with_strategy(text, "partition_contiguity"), events) == []
    # the stop event need not pass the loop's own predicates (Flink: until reads every event), nor a lacking
    # attribute stops it (NULL)
    assert sorted(r["first"] for r in agrees(text.replace("WITHIN", "WHERE b.x < 10 WITHIN"), events)) == [1, 3]
    lacking = [{k: v for k, v in e.items() if k != "x" or e["ts"] != 2} for e in events]
    assert len(agrees(text, lacking)) == 7


def test_the_stop_event_may_be_the_next_step():
    """Flink: a stop event leaves the loop and may be taken by the step after it (here a ``B`` too): b3 is c of
    the run that took b1 b2; b2 may also be c (skip_till_next_match branches on an event's ambiguous role)."""
    events = [{**e, "x": 20 if e["ts"] == 3 else e["ts"]} for e in _events("a0 b1 b2 b3 b4")]
    text = "PATTERN SEQ(A a, B+ b[] UNTIL (b.x > 10), B c) USING skip_till_next_match WITHIN 10 " \
           "RETURN count(b[].x) AS n, c.ts AS c"
    assert sorted((r["n"], r["c"]) for r in agrees(text, events)) == [(1, 2), (2, 3)]


def test_a_closed_loop_stays_closed_across_micro_batches():
    """a0 b1 b2(stop) d3 | b4 c5, the engine's state written and read back after d3 (b2 read by then): the run
    of a0 stays closed and does not take b4 (it did when the state lost ``Run.closed``, as if b2 never came)."""
    events = [{**e, "x": 20 if e["ts"] == 2 else e["ts"]} for e in _events("a0 b1 b2 d3 b4 c5")]
    text = "PATTERN SEQ(A a, B+ b[] UNTIL (b.x > 10), C c) WITHIN 10 RETURN count(b[].x) AS n, b[1].ts AS first"
    for strategy, expected in (("skip_till_any_match", [(1, 1), (1, 4)]), ("skip_till_next_match", [(1, 1)])):
        _, spec = compiled(with_strategy(text, strategy))
        feed = with_seq(spec, events)
        assert sorted((r["n"], r["first"]) for r in agrees(with_strategy(text, strategy), events)) == expected
        rows = stream_through_engine(spec, 0, [(feed[:4], True, True), (feed[4:], True, True)])
        assert sorted((r["n"], r["first"]) for r in rows) == expected, strategy


#: Runs of events that fill the shapes' loops, with events of other types inside them (stops of UNTIL ANY).
RUNS = ["ABBC", "ABBBBC", "ABDBC", "ABCBCBCD", "ABCDBCD", "ABBBBD", "ABC", "BB", "D"]


@st.composite
def loop_streams(draw, runs: tuple[int, int] = (2, 4)) -> list[dict]:
    """Streams shaped like the patterns' loops (uniform random types rarely complete a trend): runs of events
    such as ``ABBC`` or ``ABCBCD`` of one ``id`` (0 or 1), ts steps of 0 or 1 (ties occur), uniform ``x`` in 0..3
    (``x > 2``: a stop of most shapes), drawn from a seed (hypothesis' own draws lean to 0: few stops)."""
    rnd = random.Random(draw(st.integers(0, 2 ** 32)))
    events, ts = [], rnd.randint(0, 2)
    for _ in range(rnd.randint(*runs)):
        key = rnd.randint(0, 1)
        for kind in rnd.choice(RUNS):
            events.append({"type": kind, "ts": ts, "x": rnd.randint(0, 3), "id": key})
            ts += rnd.choice([0, 1, 1])
    return events


SHAPES = [
    "SEQ(A a, B+ b[] UNTIL (b.x > 2), C c)",
    "SEQ(A a, (SEQ(B b, C c))+ UNTIL (c.x > 2), D d)",
    "SEQ(A a, (SEQ(B b, C? c))* UNTIL (b.x = 0), D d)",
    "SEQ(A a, B+ b[] UNTIL ANY (b.x > 2), C c)",
    "SEQ(A a, (SEQ(B b, C c))+ UNTIL ANY (b.x = 3))",
    "SEQ(A a, (SEQ(B b, C c)){1,2} UNTIL (c.x > 2), D d)",
    "SEQ(A a, B* b[] UNTIL (b.x = 1), C c)",
    "SEQ(A a, B{2,} b[] UNTIL (b.x < 1))",
    "SEQ(A a, B{1,2} b[] UNTIL (b.x > 2), B c)",
    "SEQ(B+ b[] UNTIL (b.x >= 3), C c)",
    "SEQ(A a, ANY(B, C)+ b[] UNTIL (b.x = 0), D d)",
    "SEQ(A a, B+ b[] UNTIL (b.x > 2), !(D z), C c)",
    "SEQ(A a, B+ b[] UNTIL (b.x > 3)) OR SEQ(C c, B+ e[] UNTIL (e.x < 2), D d)",
    "SEQ(A a, NEXT B+ b[] UNTIL (b.x > 2), C c)",
    "SEQ(A a, (SEQ(C c, D d))+, B+ b[] UNTIL (b.x > 2))",
]
CONDITIONS = ["[id]", "a.x < b.x", "b[i].x >= b[i-1].x", "b.x != 2", "z.x > a.x", "c.x != a.x"]


def queries(strategy: str):
    return shape_queries(SHAPES, CONDITIONS, strategy, max_conditions=2, windows=(3, 9))


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), events=loop_streams(runs=(1, 2)))
def test_until_agrees_with_the_oracle(strategy, data, events):
    agrees(data.draw(queries(strategy)), events, data)


def test_a_stop_event_ends_a_group_loop():
    """Flink's until on a group pattern: no stop event (a C with x > 2) is taken by the loop or lies inside it,
    between two iterations or inside one: over a0 b1 c2 b3 c4(stop) b5 c6 d7 the loop is (b1 c2) or (b5 c6); a
    loop through c4 (b1 c2 b5 c6, b3 c6, ...) is cut."""
    events = [{**e, "x": 5 if e["ts"] == 4 else 0} for e in _events("a0 b1 c2 b3 c4 b5 c6 d7")]
    text = "PATTERN SEQ(A a, (SEQ(B b, C c))+ UNTIL (c.x > 2), D d) WITHIN 10 RETURN count(b[].x) AS n, b[1].ts AS b1"
    rows = agrees(text, events)
    assert sorted((r["n"], r["b1"]) for r in rows) == [(1, 1), (1, 5)]  # (b1 c2); (b5 c6)
    assert len(agrees(text.replace(" UNTIL (c.x > 2)", ""), events)) > len(rows)


def test_until_any_reads_every_event_of_the_partition():
    """Flink's until reads every event: with UNTIL ANY a D with x > 2 (no B at all) stops the loop too."""
    events = [{**e, "x": 5 if e["ts"] == 2 else 0} for e in _events("a0 b1 d2 b3 c4")]
    text = "PATTERN SEQ(A a, B+ b[] UNTIL ANY (b.x > 2), C c) WITHIN 10 RETURN count(b[].x) AS n, b[1].ts AS b1"
    assert sorted((r["n"], r["b1"]) for r in agrees(text, events)) == [(1, 1), (1, 3)]
    assert len(agrees(text.replace("UNTIL ANY", "UNTIL"), events)) == 3  # d2 is no B: b1 b3 may follow


def test_the_oracle_without_until_differs():
    """The property test can fail: on a stream with a stop event inside the loop the rows differ."""
    events = [{**e, "x": 4 if e["ts"] == 2 else 0} for e in _events("a0 b1 b2 b3 c4")]
    q = sparkcep.compile("PATTERN SEQ(A a, B+ b[] UNTIL (b.x > 2), C c) WITHIN 10")
    plain = sparkcep.compile("PATTERN SEQ(A a, B+ b[], C c) WITHIN 10")
    assert len(match_rows(q.query, events)) < len(match_rows(plain.query, events))


# ----------------------------------------------------------------------------------------------- trend aggregates


def test_a_stop_event_cuts_the_trends_of_a_loop():
    """a0 b1 b2(stop) b3 c4 (GRETA terms): b2 is no vertex of the loop and resets its self-edge sums, so b3
    extends no trend through b1, while the edge b -> c keeps b1 and b3: trends a0 b1 c4, a0 b3 c4 (7 without
    UNTIL).  The oracle counts the match mode's skip_till_any_match matches, independently of the engine."""
    events = [{**e, "x": 20 if e["ts"] == 2 else e["ts"]} for e in _events("a0 b1 b2 b3 c4")]
    text = "RETURN COUNT(*), COUNT(b), SUM(b.x) PATTERN SEQ(A a, B+ b[] UNTIL (b.x > 10), C c) WITHIN 10"
    expected = [{"window_start": 0, "window_end": 10, "count_all": 2, "count_b": 2, "sum_b_x": 4}]
    assert oracle_rows(text, events) == expected
    assert engine_rows(text, events) == expected
    without = text.replace(" UNTIL (b.x > 10)", "")
    assert engine_rows(without, events)[0]["count_all"] == oracle_rows(without, events)[0]["count_all"] == 7
    # at one ts the input order decides (as the match engine reads ties): b2(stop) before b2' cuts b1 -> b2',
    # after it cuts b2' -> b3
    other = {"type": "B", "ts": 2, "x": 2}
    for tied, loops in (([*events[:3], other, *events[3:]], 4),  # b1; b2'; b3; b2' b3
                        ([*events[:2], other, *events[2:]], 4)):  # b1; b2'; b3; b1 b2'
        assert engine_rows(text, tied, shuffle=False) == oracle_rows(text, tied)
        assert oracle_rows(text, tied)[0]["count_all"] == loops
    # UNTIL ANY: a D with x > 10 between b1 and b3 cuts the loop too (Flink's reading); UNTIL does not
    anyone = [{**e, "type": "D" if e["ts"] == 2 else e["type"]} for e in events]
    for until, count in ((" UNTIL ANY (b.x > 10)", 2), (" UNTIL (b.x > 10)", 3)):
        q = text.replace(" UNTIL (b.x > 10)", until)
        assert engine_rows(q, anyone) == oracle_rows(q, anyone) and oracle_rows(q, anyone)[0]["count_all"] == count
    lines = describe(sparkcep.compile(text).spec())
    assert "  state b: B, MID, UNTIL (b.x > 10): a stop event is none of its vertices" in lines
    assert "  b -> b (Kleene +): running aggregate per window, emptied by each stop event (UNTIL)" in lines
    assert lines[-1].startswith("executor: template interpreter")
    counts = describe(sparkcep.compile(text.replace("COUNT(*), COUNT(b), SUM(b.x)", "COUNT(*)")).spec())
    assert counts[-1] == ("executor: generated COUNT(*) scan (Algorithm 2, Theorem 4.3), exact integers, GMP above "
                          "1500 bits; the events at a stop event's ts (UNTIL) through the template interpreter")


TREND_SHAPES = [
    ("B+ b[] UNTIL (b.x > 2)", ["b.x < NEXT(b).x", "b.x != 1"]),
    ("SEQ(A a, B+ b[] UNTIL (b.x > 2), C c)", ["b.x <= NEXT(b).x", "b[i].x != b[i-1].x", "a.x < 3"]),
    ("SEQ(A a, B* b[] UNTIL (b.x = 0), C c)", ["b.x = NEXT(b).x"]),
    ("SEQ(A a, B{2,} b[] UNTIL (b.x > 2), C c)", ["b.x < NEXT(b).x"]),
    ("SEQ(A a, B{1,3} b[] UNTIL (b.x < 1))", ["b.x > 0"]),
    ("SEQ(A a, B+ b[] UNTIL (b.x > 2), B c)", []),
    ("SEQ(A a, B+ b[] UNTIL (b.x > 1), NOT D e, C c)", []),
    ("SEQ(A a, ANY(B, C)+ b[] UNTIL (b.x = 3), D d)", []),
    ("SEQ(A a, B+ b[] UNTIL (b.x > 2)) OR SEQ(C c, D+ d[] UNTIL (d.x < 1))", []),
    ("SEQ(A a, (SEQ(B b, C c))+ UNTIL (c.x > 2), D d)", ["b.x > 0"]),
    ("SEQ(A a, (SEQ(B b, C? c))* UNTIL ANY (b.x = 0), D d)", []),
    ("SEQ(A a, (SEQ(B b, C c)){2,} UNTIL (b.x > 2), D d)", []),
    ("SEQ(A a, B+ b[] UNTIL ANY (b.x > 2), C c)", ["b.x < NEXT(b).x"]),
]
TREND_AGGREGATES = ["COUNT(*)", "COUNT(b)", "SUM(b.x)", "MIN(b.x)", "MAX(b.x)", "AVG(b.x)"]


@pytest.mark.parametrize("cuts", [[], [2]])
def test_trend_until_any_keeps_the_events_that_break_next(cuts):
    """With UNTIL ANY every event is a stop candidate; one that is no stop and fills no component is still an
    event of the partition that breaks ``NEXT``: over A0 D1 B2 ... the B is not right after the A, no trend
    (the engine once dropped D1 with the candidates that are no stop)."""
    events = [{**e, "x": 0} for e in _events("a0 d1 b2 c3 d4")]
    text = "RETURN COUNT(*) PATTERN SEQ(A a, NEXT B+ b[] UNTIL ANY (b.x > 2), C c) WITHIN 10 SLIDE 10"
    assert oracle_rows(text, events) == []
    assert engine_rows(text, events, cuts=cuts, shuffle=False) == []
    adjacent = [e for e in events if e["ts"] != 1]  # (the test can fail: without D1 there is a trend)
    assert canonical(engine_rows(text, adjacent, shuffle=False)) == canonical(oracle_rows(text, adjacent)) != []


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=trend_queries(TREND_SHAPES, TREND_AGGREGATES, max_aggregates=2, windows=(3, 9), slides=(1, 5)),
       events=loop_streams(),
       cuts=st.lists(st.integers(0, 9), max_size=2), watermarks=st.lists(st.integers(0, 25), max_size=3),
       roundtrip=st.booleans())
def test_trend_until_equals_the_oracle(text, events, cuts, watermarks, roundtrip):
    """Windows and slides, micro-batches, watermarks and state round trips; a batch's events in input order
    (ties: the order the oracle reads too)."""
    got = engine_rows(text, events, cuts=cuts, watermarks=sorted(watermarks), roundtrip=roundtrip, shuffle=False)
    assert canonical(got) == canonical(oracle_rows(text, events)), text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=trend_queries(TREND_SHAPES, ["COUNT(*)"], max_aggregates=1, windows=(3, 9), slides=(1, 5)),
       events=loop_streams(), cuts=st.lists(st.integers(0, 12), max_size=2), roundtrip=st.booleans())
def test_trend_until_counts_in_the_generated_scan_equal_the_oracle(text, events, cuts, roundtrip):
    """COUNT(*) alone runs in the generated scan, the groups of events at a stop event's ts in the interpreter:
    both read and fill the same windows and indexes."""
    got = engine_rows(text, events, cuts=cuts, roundtrip=roundtrip, shuffle=False)
    assert canonical(got) == canonical(oracle_rows(text, events)), text


@pytest.mark.spark
def test_until_on_spark_batch_and_streaming_equals_the_oracle(spark, tmp_path):
    """The batch job under two strategies and a streaming run (one file per micro-batch, checkpointed): the
    oracle's rows.  The stop events (B with x > 2) fail the loop's own predicate ``b.x < 3``, so the Spark filter
    must still pass them on; those of the other key do not stop the loop."""

    from sparkcep.spark.results import canonical
    from tests.test_bounded_quantifiers import streamed
    from tests.test_match_contiguity_spark import frame, spark_rows
    from tests.test_trend_end_to_end import plain as numbers

    rnd = random.Random(23)
    events, ts = [], 0
    for _ in range(30):
        key = rnd.randint(0, 1)
        for kind in rnd.choice(["D", "B", "ABC", "ABBC", "ABBBC", "AB"]):
            ts += rnd.choice([0, 1, 1])
            events.append({"type": kind, "ts": ts, "x": rnd.randint(0, 3), "id": key})
    text = ("PATTERN SEQ(A a, B+ b[] UNTIL (b.x > 2), C c) USING STRATEGY WHERE [id] AND b.x < 3 WITHIN 8 "
            "RETURN a.ts, b[1].ts AS b1, b[b.len].ts AS bl, c.ts")
    for strategy in ("skip_till_next_match", "skip_till_any_match"):
        q = sparkcep.compile(text.replace("STRATEGY", strategy))
        expected = match_rows(q.query, events)
        plain = match_rows(sparkcep.compile(text.replace("STRATEGY", strategy).replace(
            " UNTIL (b.x > 2)", "")).query, events)
        assert len(expected) >= 3 and canonical(expected) != canonical(plain), strategy  # the stops matter
        assert canonical(spark_rows(q.apply(frame(spark, events)))) == canonical(expected), strategy
    assert canonical(streamed(spark, q, events, tmp_path / "match")) == canonical(expected)
    # on a group and with Flink's any-event reading (the batch job), in a trend aggregate (the batch job), and both
    # in a trend aggregate (streaming)
    q = sparkcep.compile("PATTERN SEQ(A a, (SEQ(B b, C c))+ UNTIL ANY (b.x > 2)) WHERE [id] WITHIN 8 "
                         "RETURN a.ts, b[1].ts AS b1, count(b[].x) AS n")
    expected = match_rows(q.query, events)
    assert len(expected) >= 3
    assert canonical(spark_rows(q.apply(frame(spark, events)))) == canonical(expected)
    q = sparkcep.compile("RETURN id, COUNT(*), SUM(b.x) PATTERN SEQ(A a, B+ b[] UNTIL (b.x > 2), C c) "
                         "WHERE [id] AND b.x < 3 GROUP BY id WITHIN 8 SLIDE 4")
    expected = trend_aggregates(q.query, events)
    assert len(expected) >= 3 and canonical(expected) != canonical(trend_aggregates(sparkcep.compile(
        q.source.replace(" UNTIL (b.x > 2)", "")).query, events))
    assert canonical(numbers(spark_rows(q.apply(frame(spark, events))))) == canonical(expected)
    text = ("RETURN id, COUNT(*), SUM(c.x) PATTERN SEQ(A a, (SEQ(B b, C c))+ UNTIL ANY (b.x > 2)) WHERE [id] "
            "GROUP BY id WITHIN 8 SLIDE 4")
    q = sparkcep.compile(text)
    expected = trend_aggregates(q.query, events)
    assert len(expected) >= 3 and all(canonical(expected) != canonical(trend_aggregates(sparkcep.compile(
        text.replace(" UNTIL ANY (b.x > 2)", other)).query, events)) for other in ("", " UNTIL (b.x > 2)"))
    assert canonical(numbers(streamed(spark, q, events, tmp_path / "trend"))) == canonical(expected)


# ------------------------------------------------------------------------------------- stop events found per batch

#: values an attribute may hold: Arrow would read some of them unlike the per-event evaluator if they were mixed
STOP_VALUES = {
    "int": st.integers(-(2**63) - 2, 2**63 + 1) | st.sampled_from([0, 3, 2**53 + 1, -7]),
    "float": st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.5, 3.0, -2.0]),
    "str": st.sampled_from(["", "a", "3", "2.5", "x1"]),
    "bool": st.booleans(),
}
STOP_CONDITIONS = ["b.x > 2", "b.x % 3 = -2", "b.x * 4611686018427387904 > 0", "b.x = 1", "b.x IS NULL",
                   "b.x + b.y > 2", "b.x > 'a'", "NOT b.x", "b.x / b.y > 1"]


@st.composite
def stop_batches(draw):
    """Events of the loop's type B and another type, whose attributes are of one kind per batch (the vectorized
    evaluation) or mixed (per event), with missing values and None."""
    kinds = draw(st.lists(st.sampled_from(sorted(STOP_VALUES)), min_size=1, max_size=2, unique=True))
    value = st.one_of(st.none(), *(STOP_VALUES[k] for k in kinds))
    events = []
    for _ in range(draw(st.integers(1, 12))):
        ev = {"type": draw(st.sampled_from("BBD"))}
        for attr in "xy":
            if draw(st.integers(0, 5)):
                ev[attr] = draw(value)
        events.append(ev)
    return events


@functools.cache
def _stop_of(cond: str, any_: bool):
    from sparkcep.runtime_udfs.expr.components import stop_table

    spec = sparkcep.compile(f"RETURN COUNT(*) PATTERN SEQ(A a, B+ b[] UNTIL {'ANY ' if any_ else ''}({cond}), C c) "
                            "WITHIN 10").spec()
    (stop,) = stop_table(spec.pattern, spec.components)
    return stop


@settings(max_examples=200, deadline=None)
@given(cond=st.sampled_from(STOP_CONDITIONS), any_=st.booleans(), events=stop_batches(), read=st.booleans())
# Arrow reads [3, 0.5] as doubles (no BIGINT overflow: 3 * 2^62 is NULL, no stop) and [0.5, True] as [0.5, 1.0]
@example(cond="b.x * 4611686018427387904 > 0", any_=False, events=[{"type": "B", "x": 3}, {"type": "B", "x": 0.5}],
         read=False)
@example(cond="b.x = 1", any_=True, events=[{"type": "D", "x": 0.5}, {"type": "B", "x": True}], read=True)
def test_stop_events_found_at_once_are_those_found_one_by_one(cond, any_, events, read):
    """:func:`stop_rows` (the condition evaluated once over a batch, vectorized where the columns allow) finds
    exactly the events :func:`is_stop` finds one by one, also where an attribute mixes kinds (ints beyond BIGINT or
    a double, booleans and floats, strings) and with the attributes read beforehand (as ``step`` reads them)."""
    from sparkcep.runtime_udfs.expr.components import is_stop, stop_rows

    stop = _stop_of(cond, any_)
    assert stop.vector is not None
    columns = {attr: [ev.get(attr) for ev in events] for _, attr in stop.vector.reads} if read else None
    rows = None if not read else range(len(events)) if any_ else [i for i, ev in enumerate(events)
                                                                    if ev["type"] == "B"]
    if rows is not None and not any_:
        columns = {a: [values[i] for i in rows] for a, values in columns.items()}
        picked = [events[i] for i in rows]
        got = [rows[i] for i in stop_rows(stop, picked, range(len(picked)), columns)]
    else:
        got = stop_rows(stop, events, rows, columns)
    assert got == [i for i, ev in enumerate(events) if is_stop(stop, ev)]


def test_a_state_saved_before_stop_events_were_marked_reads_on():
    """A checkpoint written before :func:`step` marked stop events in their masks (and before a plain edge inside
    the loop had its own running count, when it kept one in a hash map on a constant key) is brought up to date
    once: its buffered events' stops are found, its windows' counts of the loop's self-edge moved, and the rows
    are the oracle's."""
    from sparkcep.runtime_udfs.trend import engine as trend_engine
    from sparkcep.runtime_udfs.trend.engine import TrendState
    from sparkcep.runtime_udfs.trend.graph import _compiled

    rnd = random.Random(5)
    events = [{"type": rnd.choice("ABBBC"), "ts": ts, "x": rnd.randint(0, 4)} for ts in range(40)]
    for text in ("RETURN COUNT(*) PATTERN SEQ(A a, B+ b[] UNTIL (b.x > 2), C c) WITHIN 20 SLIDE 5",
                 "RETURN COUNT(*), SUM(b.x) PATTERN SEQ(A a, B{2,} b[] UNTIL (b.x > 2), C c) WITHIN 20 SLIDE 5"):
        spec = sparkcep.compile(text).spec()
        cs = _compiled(spec)
        state, _ = trend_engine.step(spec, trend_engine.init_state(), events[:25])
        state, rows = trend_engine.advance(spec, state, 18)  # ts 18..24 stay buffered
        assert any(m >> cs.n for _, m, _ in state.pending) and state.runs[None].wins
        old = TrendState.from_bytes(state.to_bytes())  # as the code before wrote it:
        old.pending = [(t, m & cs.full, ev) for t, m, ev in old.pending]  # no marks,
        for run in old.runs.values():
            del run.marked  # no flag,
            for win in run.wins.values():  # the self-edges' counts in hash maps
                for t in cs.positive.trans:
                    if t.cut is not None and t.slot != t.src:
                        win.index[t.id] = {0: win.R[t.slot]}
                win.R = [*win.R[:cs.n_states], win.R[-1]]
        old = TrendState.from_bytes(old.to_bytes())
        old, more = trend_engine.step(spec, old, events[25:])
        old, last = trend_engine.advance(spec, old, float("inf"))
        assert canonical(rows + more + last) == canonical(oracle_rows(text, events)), text
