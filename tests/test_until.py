"""Stop conditions ``B+ b[] UNTIL (b.x > 10)`` on a loop (Flink CEP's ``oneOrMore().until(...)``), issue 16.

A stop event is an event of the partition of one of the loop's types whose ``UNTIL`` condition holds (read on it
alone, as ``b.attr``; NULL is no stop).  The loop never takes one, and takes nothing after one: no stop event
lies between the loop's first and last events, under every strategy.  Every event of the partition reaches the
engine (a stop event need not pass the loop's own predicates); the NFA^b runs close a run's loop on it
(``match.runs``).  Compared with the oracle (``oracles.match._until_holds``) on random streams under every
strategy, in one step and in random micro-batches, and on Spark batch and streaming.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.grammar.parser import parse_query
from sparkcep.ir.errors import CEPError
from sparkcep.ir.printer import format_query
from sparkcep.ir.serde import from_data, to_data
from sparkcep.oracles.match import match_rows
from sparkcep.runtime_udfs.match import engine as match_engine
from tests.strategies import event_streams
from tests.test_match_engine import stream_through_engine
from tests.test_match_groups import _events
from tests.test_match_language import agrees, shape_queries, with_strategy
from tests.test_match_semantics import STRATEGIES, compiled, with_seq


def test_until_parses_prints_back_and_round_trips():
    q = parse_query("PATTERN SEQ(A a, B+ b[] UNTIL (b.x > 10 OR b.y = 1), C c, D d{2,} UNTIL (d.x = 1)) WITHIN 10")
    b, d = q.pattern.items[1], q.pattern.items[3]
    assert b.until is not None and d.until is not None and d.bounds == (2, None)
    assert format_query(q).splitlines()[0] == \
        "PATTERN SEQ(A a, B+ b[] UNTIL (b.x > 10 OR b.y = 1), C c, D{2,} d UNTIL (d.x = 1))"
    assert parse_query(format_query(q)) == q
    assert from_data(to_data(q)) == q
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
    ("PATTERN SEQ(A a, (SEQ(C c, B+ b[] UNTIL (b.x > 1)))+) WITHIN 10", "inside a repetition", 42),
    ("PATTERN SEQ(A a, NOT SEQ(C c, B+ b[] UNTIL (b.x > 1)), D d) WITHIN 10", "inside a negation", 45),
    ("RETURN COUNT(*) PATTERN SEQ(A a, B+ b[] UNTIL (b.x > 1)) WITHIN 10", "trend-aggregate", 48),
    ("PATTERN SEQ(A a, B+ b[] UNTIL (b.x > 1), C c) WITHIN 10 AFTER MATCH SKIP PAST LAST EVENT", "MATCH_RECOGNIZE", 32),
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


SHAPES = [
    "SEQ(A a, B+ b[] UNTIL (b.x > 2), C c)",
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
@given(data=st.data(), events=event_streams("AABBBCD", min_size=4, max_size=10, max_gap=2))
def test_until_agrees_with_the_oracle(strategy, data, events):
    agrees(data.draw(queries(strategy)), events, data)


def test_the_oracle_without_until_differs():
    """The property test can fail: on a stream with a stop event inside the loop the rows differ."""
    events = [{**e, "x": 4 if e["ts"] == 2 else 0} for e in _events("a0 b1 b2 b3 c4")]
    q = sparkcep.compile("PATTERN SEQ(A a, B+ b[] UNTIL (b.x > 2), C c) WITHIN 10")
    plain = sparkcep.compile("PATTERN SEQ(A a, B+ b[], C c) WITHIN 10")
    assert len(match_rows(q.query, events)) < len(match_rows(plain.query, events))


@pytest.mark.spark
def test_until_on_spark_batch_and_streaming_equals_the_oracle(spark, tmp_path):
    """The batch job under two strategies and a streaming run (one file per micro-batch, checkpointed): the
    oracle's rows.  The stop events (B with x > 2) fail the loop's own predicate ``b.x < 3``, so the Spark filter
    must still pass them on; those of the other key do not stop the loop."""
    import random

    from sparkcep.spark.results import canonical
    from tests.test_bounded_quantifiers import streamed
    from tests.test_match_contiguity_spark import frame, spark_rows

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
    assert canonical(streamed(spark, q, events, tmp_path)) == canonical(expected)
