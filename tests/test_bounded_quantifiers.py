"""Bounded quantifiers ``T{n}``, ``T{n,}``, ``T{n,m}``, ``(P){n,m}`` (Flink CEP's ``times``/``timesOrMore``), issue 16.

``P{n,m}`` is ``n`` to ``m`` iterations of ``P`` (the oracle's ``_Rep``); its variables are arrays, as under
``+``.  The selection strategy applies as to ``P+``, with the bound part of the pattern's structure: under
skip_till_next_match an event past the ``m``-th iteration is not selectable for the loop, and a run cannot leave
it before the ``n``-th.  The engine checks the count on the binding (``ir.ast.count_bounds``) and the NFA^b runs
refuse the moves the bound forbids (``match.runs._beyond_bound``).  Compared with the oracle on random streams
under every strategy, in one step and in random micro-batches.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.grammar.parser import parse_query
from sparkcep.ir.ast import Kleene
from sparkcep.ir.errors import CEPError
from sparkcep.ir.printer import format_query
from sparkcep.oracles.match import match_rows, trend_aggregates
from sparkcep.spark.results import canonical
from tests.strategies import event_streams
from tests.test_match_groups import _events
from tests.test_match_language import agrees, shape_queries, with_strategy
from tests.test_match_semantics import STRATEGIES
from tests.test_trend_end_to_end import plain

# ----------------------------------------------------------------------------------------------- syntax


@pytest.mark.parametrize(("text", "bounds", "printed"), [
    ("B{3} b[]", (3, 3), "B{3} b[]"),
    ("B{2,} b[]", (2, None), "B{2,} b[]"),
    ("B{2,4} b[]", (2, 4), "B{2,4} b[]"),
    ("B{0,2} b[]", (0, 2), "B{0,2} b[]"),
    ("B b{2,4}", (2, 4), "B{2,4} b"),
    ("(SEQ(B b, C c)){2,3}", (2, 3), "(SEQ(B b, C c)){2,3}"),
    ("B{1,} b[]", None, "B+ b[]"),
    ("B{0,} b[]", None, "B* b[]"),
])
def test_bounded_quantifiers_parse_and_print_back(text, bounds, printed):
    q = parse_query(f"PATTERN SEQ(A a, {text}) WITHIN 10")
    kleene = q.pattern.items[1]
    assert isinstance(kleene, Kleene) and kleene.bounds == bounds
    assert kleene.op == ("*" if text.startswith("B{0") else "+")
    assert format_query(q).splitlines()[0] == f"PATTERN SEQ(A a, {printed})"
    assert parse_query(format_query(q)) == q


@pytest.mark.parametrize(("text", "message", "column"), [
    ("PATTERN SEQ(A a, B{4,2} b[]) WITHIN 10", "the upper bound is below the lower one", 19),
    ("PATTERN SEQ(A a, B{0} b[]) WITHIN 10", "matches nothing", 19),
    ("PATTERN SEQ(A a, B{2,x} b[]) WITHIN 10", "expected a number or '}'", 22),
    ("PATTERN SEQ(A a, B{-1} b[]) WITHIN 10", "expected a number", 20),
])
def test_bad_bounds_are_positioned_syntax_errors(text, message, column):
    with pytest.raises(CEPError) as err:
        sparkcep.compile(text)
    assert message in str(err.value) and err.value.span.column == column


@pytest.mark.parametrize(("text", "why", "column"), [
    ("PATTERN SEQ(A a, NOT B{2} b[], C c) WITHIN 10", "inside a negation", 22),
    ("PATTERN SEQ(A a, (SEQ(B{2} b[], C c))+) WITHIN 10", "inside a repetition", 23),
    ("PATTERN SEQ(A a, (B+ b[]){2,}) WITHIN 10", "(B+ b[]){2,} is B{2,} b[]", 18),
    ("PATTERN SEQ(A a, (B b OR C c){2}) WITHIN 10", "every iteration takes exactly once", 18),
])
def test_check_refuses_what_does_not_run_with_the_reason(text, why, column):
    with pytest.raises(CEPError) as err:
        sparkcep.compile(text).check()
    assert why in str(err.value) and err.value.span.column == column


# ----------------------------------------------------------------------------------------------- worked examples


def test_two_to_three_bs_under_every_strategy():
    """a0 b1 b2 b3 b4 c5: any match takes 2 or 3 of the four B's (6 + 4 = 10 matches); skip_till_next_match
    takes b1 b2 b3 and must skip b4 (the loop is full, C does not take a B); the contiguity strategies find
    no A, B, B(, B), C in a row (four B's stand between a0 and c5)."""
    events = _events("a0 b1 b2 b3 b4 c5")
    text = "PATTERN SEQ(A a, B{2,3} b[], C c) WITHIN 10 RETURN count(b[].x) AS n, b[1].ts AS b1, b[b.len].ts AS bl"
    assert len(agrees(text, events)) == 10
    assert agrees(with_strategy(text, "skip_till_next_match"), events) == [{"n": 3, "b1": 1, "bl": 3}]
    assert agrees(with_strategy(text, "strict_contiguity"), events) == []
    assert agrees(with_strategy(text, "strict_contiguity"), _events("a0 b1 b2 b3 c5")) == [
        {"n": 3, "b1": 1, "bl": 3}]


def test_at_least_n_under_skip_till_next_match_waits_for_the_nth():
    """``B{3,}``: a C after two B's is not selectable (the loop cannot be left yet), so the run skips it and
    goes on to the third B: one match, a0 b1 b2 b4 b5 c6 (under B+ the C at 3 would end the only match)."""
    events = _events("a0 b1 b2 c3 b4 b5 c6")
    text = ("PATTERN SEQ(A a, B{3,} b[], C c) USING skip_till_next_match WITHIN 10 "
            "RETURN count(b[].x) AS n, c.ts AS c")
    assert agrees(text, events) == [{"n": 4, "c": 6}]
    assert agrees(text.replace("B{3,}", "B+"), events) == [{"n": 2, "c": 3}]


def test_a_bounded_group_counts_iterations():
    """``(SEQ(B b, C+ c[])){2}``: two iterations, each one b and one or more c (counted by b).  Under
    skip_till_next_match the run takes b1 c2 c3 b4 c5, must skip b6 (a third iteration) and takes c7 (the
    second iteration's C+ goes on).  Any match: (b1, b4) with 3 x 3 choices of C's, (b1, b6) with 7 x 1,
    (b4, b6) with 1 x 1: 17."""
    events = _events("a0 b1 c2 c3 b4 c5 b6 c7 d8")
    text = ("PATTERN SEQ(A a, (SEQ(B b, C+ c[])){2}, D d) USING skip_till_next_match WITHIN 10 "
            "RETURN count(b[].x) AS nb, count(c[].x) AS nc")
    assert agrees(text, events) == [{"nb": 2, "nc": 4}]
    rows = agrees(text.replace(" USING skip_till_next_match", ""), events)
    assert {r["nb"] for r in rows} == {2} and len(rows) == 17


# ----------------------------------------------------------------------------------------------- property


SHAPES = [
    "SEQ(A a, B{2,3} b[], C c)",
    "SEQ(A a, B{1,2} b[], C c)",
    "SEQ(A a, B{2} b[])",
    "SEQ(B{2,} b[], C c)",
    "SEQ(A a, B{0,1} b[], C c)",
    "SEQ(A a, ANY(B, C){1,2} b[], D d)",
    "SEQ(A a, B{1,2} b[], !(E z), C c)",
    "SEQ(A a, (SEQ(B b, C c)){1,2}, D d)",
    "SEQ(A a, (SEQ(B b, C+ c[])){1,2})",
    "SEQ(A a, (SEQ(B b, C? c)){2,}, D d)",
    "SEQ(A a, (SEQ(B b, C c)){0,1}, D d)",
    "SEQ(A a, B{2} b[], C c) OR SEQ(D d, (SEQ(B e, C f)){2})",
]
CONDITIONS = ["[id]", "b[i].x >= b[i-1].x", "sum(b[].x) < 8", "a.x < b[1].x", "z.x > a.x", "b[b.len].x > c[1].x"]


def queries(strategy: str):
    return shape_queries(SHAPES, CONDITIONS, strategy, max_conditions=2, windows=(4, 10))


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), events=st.one_of(event_streams("AABBBBCCDE", min_size=6, max_size=10, max_gap=1, ties=False),
                                        event_streams("ABBCDE", min_size=4, max_size=10, max_gap=1)))
def test_bounded_quantifiers_agree_with_the_oracle(strategy, data, events):
    """Dense streams with many B's (the bounds must cut), and streams with ties."""
    agrees(data.draw(queries(strategy)), events, data)


# ----------------------------------------------------------------------------------------------- Spark


@pytest.mark.spark
def test_bounded_quantifiers_on_spark_batch_and_streaming_equal_the_oracle(spark, tmp_path):
    """The batch job under two strategies and a streaming run (one file per micro-batch, checkpointed) give
    the oracle's rows."""
    import random

    from tests.test_match_contiguity_spark import frame, spark_rows

    rnd = random.Random(16)
    events, ts = [], 0
    for _ in range(16):  # noise, and chunks A B.. C.. of one id that an interleaved key may break
        key = rnd.randint(0, 1)
        for kind in rnd.choice(["B", "C", "ABC", "ABBC", "ABBBBC", "ABBBCC"]):
            ts += rnd.choice([0, 1, 1])
            events.append({"type": kind, "ts": ts, "x": rnd.randint(0, 3), "id": key})
    text = ("PATTERN SEQ(A a, B{2,3} b[], (SEQ(C c)){1,2}) USING STRATEGY WHERE [id] WITHIN 6 "
            "RETURN a.ts, b[1].ts AS b1, b[b.len].ts AS bl, count(b[].x) AS nb, count(c[].x) AS nc")
    for strategy in ("skip_till_next_match", "skip_till_any_match"):
        q = sparkcep.compile(text.replace("STRATEGY", strategy))
        expected = match_rows(q.query, events)
        assert len(expected) >= 3, strategy  # the stream must exercise the query
        assert canonical(spark_rows(q.apply(frame(spark, events)))) == canonical(expected), strategy
    assert canonical(streamed(spark, q, events, tmp_path)) == canonical(expected)
    # a trend aggregate with a bounded quantifier and a NEXT step: every event of the partition reaches the
    # engine, in input order (a D, of no component, right after an A at its ts breaks the A's NEXT link);
    # batch, and streaming with a last event far ahead that closes every window
    events = [x for e in events for x in [e, {**e, "type": "D"}][:1 + (e["type"] == "A" and e["x"] % 2)]]
    trend = sparkcep.compile("RETURN id, COUNT(*), SUM(b.x), MAX(c.x) PATTERN SEQ(A a, NEXT B{2,3} b[], "
                             "(SEQ(C c)){1,2}) WHERE [id] GROUP BY id WITHIN 6 SLIDE 3")
    expected = trend_aggregates(trend.query, events)
    assert len(expected) >= 3
    assert canonical(plain(spark_rows(trend.apply(frame(spark, events))))) == canonical(expected)
    tail = {"type": "A", "ts": 10_000, "x": 0, "id": 9}
    got = plain(streamed(spark, trend, [*events, tail], tmp_path / "trend"))
    assert canonical([r for r in got if r["id"] != 9]) == canonical(expected)


def streamed(spark, q, events: list[dict], tmp_path) -> list[dict]:
    """The rows of ``q`` run as a Structured Streaming query over ``events`` in three JSON files, one per
    micro-batch (checkpointed, run to the end)."""
    from sparkcep.spark.io import read_events
    from tests.test_match_contiguity_spark import spark_rows, write_files

    write_files(events, tmp_path / "in", files=3)
    df = read_events(spark, str(tmp_path / "in"), "json", "ts", stream=True, files_per_trigger=1,
                     schema="type STRING, ts BIGINT, x BIGINT, id BIGINT")
    result = q.apply(df)
    (result.writeStream.format("json").option("path", str(tmp_path / "out"))
     .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start().awaitTermination())
    return spark_rows(spark.read.schema(result.schema).json(str(tmp_path / "out")))
