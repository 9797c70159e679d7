"""Per-step strict contiguity ``SEQ(A a, NEXT B b, C c)`` (Flink CEP's ``next`` mixed with ``followedBy``/
``followedByAny`` in one pattern), issue 16.

``NEXT P`` inside a SEQ: the first event of ``P`` is the partition's event right after the match's previous
event (by ts, ties in input order, as under ``partition_contiguity``); the other steps follow the query's
strategy.  Every event of the partition therefore reaches the engine (``ir.spec.reads_every_event``), whose NFA^b
runs let a run enter a ``NEXT`` position only from the event right before (``match.runs._adjacent``).  Compared
with the oracle (``oracles.match._links_hold``) on random streams under every strategy, in one step and in random
micro-batches, and on Spark batch and streaming.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.grammar.parser import parse_query
from sparkcep.ir.errors import CEPError
from sparkcep.ir.printer import format_query
from sparkcep.oracles.match import match_rows, trend_aggregates
from sparkcep.runtime_udfs.match import engine as match_engine
from sparkcep.spark.results import canonical
from tests.strategies import event_streams
from tests.test_bounded_quantifiers import streamed
from tests.test_match_engine import stream_through_engine
from tests.test_match_groups import _events
from tests.test_match_language import agrees, shape_queries, with_strategy
from tests.test_match_semantics import STRATEGIES, compiled, with_seq


def test_next_parses_prints_back_and_marks_the_step():
    q = parse_query("PATTERN SEQ(A a, NEXT B+ b[], C c, NEXT (SEQ(D d, E e))) WITHIN 10")
    assert q.pattern.strict == (False, True, False, True)
    assert format_query(q).splitlines()[0] == "PATTERN SEQ(A a, NEXT B+ b[], C c, NEXT SEQ(D d, E e))"
    assert parse_query(format_query(q)) == q
    assert parse_query("PATTERN SEQ(A a, B b) WITHIN 10").pattern.strict == ()
    # every event reaches the engine (the filter keeps every row), and NFA^b runs check the link
    q = sparkcep.compile("PATTERN SEQ(A a, NEXT B b, C c) WITHIN 10")
    assert [name for _, name in match_engine.engines(q.spec())] == ["nfa_b_runs"]
    assert "WHERE" not in q.sql() and "engine=nfa_b_runs" in q.explain()


@pytest.mark.parametrize(("text", "why", "column"), [
    ("PATTERN SEQ(NEXT A a, B b) WITHIN 10", "on the first item of a SEQ", 18),
    ("PATTERN SEQ(A a, NEXT B? b, C c) WITHIN 10", "can match no event", 23),
    ("PATTERN SEQ(A a, NEXT !(C c)) WITHIN 10", "at the end of the pattern", 23),
    ("PATTERN SEQ(A+ a[], NEXT !(C c), B b) WITHIN 10", "after anything but a single event", 26),
    ("PATTERN SEQ(A a, NEXT !(SEQ(C c, D d)), B b) WITHIN 10", "more than one event", 23),
    ("PATTERN SEQ(A a, (SEQ(B b, NEXT !(C c)))+, D? d) WITHIN 10", "at the end of a repeated sequence", 33),
    ("PATTERN SEQ(A a, SEQ(B b, NEXT !(C c)), D? d) WITHIN 10", "at the end of the pattern (or of a SEQ", 32),
    # before items that may all match no event: the match without them waits for the partition's next event
    ("PATTERN SEQ(A a, NEXT !(C c), B? b) WITHIN 10", "before items that may all match no event", 23),
    ("PATTERN SEQ(A a, NEXT !(B n), (SEQ(B b, C c))*) WITHIN 10", "before items that may all match no event", 23),
    ("PATTERN SEQ(A a, NEXT !(B n), C* c[], (SEQ(B b, C d)){0,2}) WITHIN 10", "before items that may all", 23),
    ("PATTERN SEQ(A a, (SEQ(B? b, NEXT C c))+) WITHIN 10", "after items that may all match no event", 34),
    ("PATTERN SEQ(!(NEXT C c), B b) WITHIN 10", "at the start of a negation that starts the pattern", 20),
    ("PATTERN SEQ(A a, NOT SEQ(B b, NEXT !(C c), D? d), E e) WITHIN 10", "no item after it that must take", 36),
    ("PATTERN SEQ(A a, NOT SEQ(B b, NEXT !(C c)), E e) WITHIN 10", "no item after it that must take", 36),
    ("PATTERN SEQ(A a, NOT SEQ(NEXT !(C c), D d), E e) WITHIN 10", "at the start of a negation (NEXT", 31),
    ("RETURN COUNT(*) PATTERN SEQ(A a, NOT SEQ(B b, NEXT !(C c), D? d), E e) WITHIN 10", "no item after it that "
     "must take", 52),
    ("RETURN COUNT(*) PATTERN SEQ(A a, NOT SEQ(NEXT B y, NEXT C z), D d) WITHIN 10", "start of a negation in a "
     "trend", 47),
    ("RETURN COUNT(*) PATTERN SEQ(A a, NOT SEQ(B? y, NEXT C z), D d) WITHIN 10", "after items that may all", 53),
    ("RETURN COUNT(*) PATTERN SEQ(A a, !(NEXT C c), B? b) WITHIN 10", "after which a trend may end", 34),
])
def test_check_refuses_what_does_not_run_with_the_reason(text, why, column):
    with pytest.raises(CEPError) as err:
        sparkcep.compile(text).check()
    assert why in str(err.value) and err.value.span.column == column


def test_a_not_next_before_items_that_may_all_be_empty_reads_an_event_after_the_window():
    """Why ``SEQ(A a, NEXT !(B n), (SEQ(B b, C c))*)`` is refused in a match query: its match without the group
    ({a: A@1}) holds only if the partition's event right after A@1 is no B, and the oracle reads that event
    wherever it lies, B@100 too, far after the window: a stream would wait for it, maybe forever (as at the end
    of the pattern).  A required item after the negation brings that event inside the match."""
    for text in ("PATTERN SEQ(A a, NEXT !(B n), (SEQ(B b, C c))*) WITHIN 5 RETURN a.ts",
                 "PATTERN SEQ(A a, NEXT !(B n), C? c) WITHIN 5 RETURN a.ts"):
        query = parse_query(text)
        assert match_rows(query, [{"type": "A", "ts": 1}]) == [{"a_ts": 1}]
        assert match_rows(query, [{"type": "A", "ts": 1}, {"type": "B", "ts": 100}]) == []
        with pytest.raises(CEPError, match="before items that may all match no event"):
            sparkcep.compile(text)
    sparkcep.compile("PATTERN SEQ(A a, NEXT !(B n), (SEQ(B b, C c))*, D d) WITHIN 5")  # d must take an event


def test_next_between_two_relaxed_steps():
    """a1 b2 a3 d4 b5 c6 b7 c8: only b2 comes right after an a (a1); c6 and c8 both follow it (relaxed);
    under skip_till_next_match the run takes the first C."""
    events = _events("a1 b2 a3 d4 b5 c6 b7 c8")
    text = "PATTERN SEQ(A a, NEXT B b, C c) WITHIN 10 RETURN a.ts AS a, b.ts AS b, c.ts AS c"
    assert agrees(text, events) == [{"a": 1, "b": 2, "c": 6}, {"a": 1, "b": 2, "c": 8}]
    assert agrees(with_strategy(text, "skip_till_next_match"), events) == [{"a": 1, "b": 2, "c": 6}]
    # a noise event between a1 and b2 breaks the link; one of another partition does not
    assert agrees(text, _events("a1 d2 b3 c4")) == []
    keyed = [{**e, "id": 1} for e in _events("a1 b3 c4")] + [{"type": "D", "ts": 2, "x": 2, "id": 2}]
    assert len(agrees(text.replace(" WITHIN", " WHERE [id] WITHIN"), keyed)) == 1


def test_next_after_a_kleene_step():
    """``SEQ(A a, B+ b[], NEXT C c)``: the last b is the event right before c (d4 is not a B)."""
    rows = agrees("PATTERN SEQ(A a, B+ b[], NEXT C c) WITHIN 10 RETURN count(b[].x) AS n, b[b.len].ts AS last",
                  _events("a0 b1 b2 d3 b4 c5"))
    assert sorted((r["n"], r["last"]) for r in rows) == [(1, 4), (2, 4), (2, 4), (3, 4)]


def test_not_next():
    """``SEQ(A a, NEXT !(C c), B b)`` (Flink's notNext): a0 is followed by c1 (blocked), a3 by d4, a6 by b7, a8
    by c9 (blocked); with ``c.x = a.x + 2`` neither c1 nor c9 blocks (the negation predicate)."""
    events = _events("a0 c1 b2 a3 d4 b5 a6 b7 a8 c9 c10 b11")
    text = "PATTERN SEQ(A a, NEXT !(C c), B b) WITHIN 20 RETURN a.ts AS a, b.ts AS b"
    assert sorted((r["a"], r["b"]) for r in agrees(text, events)) == [(3, 5), (3, 7), (3, 11), (6, 7), (6, 11)]
    keyed = agrees(text.replace(" WITHIN", " WHERE c.x = a.x + 2 WITHIN"), events)
    assert sorted((r["a"], r["b"]) for r in keyed) == [(0, 2), (0, 5), (0, 7), (0, 11), (3, 5), (3, 7), (3, 11),
                                                        (6, 7), (6, 11), (8, 11)]


def test_not_next_with_a_predicate_on_a_later_variable():
    """A negation predicate of ``NEXT !(C z)`` that reads a variable bound after it (``z.x = b.x``) is decided once
    that variable is bound, on the event that came right after the step before: here c0 (x 0) comes right after a0
    but no ``b`` has ``x`` 0, so it does not block (found by the property test under skip_till_next_match; the
    engine blocked the run at c0, ``b.x`` of a Kleene ``b`` holding vacuously before any ``b``). With a single
    ``B b`` it missed the other way: c1 must block the match with b2 when their ``x`` agree."""
    found = [{"type": "A", "ts": 0, "x": 0}, {"type": "C", "ts": 0, "x": 0}, {"type": "B", "ts": 1, "x": 1},
             {"type": "A", "ts": 1, "x": 0}]
    found = [{**e, "id": 0} for e in found]
    text = ("PATTERN SEQ(A a, NEXT NOT ANY(C, D) z, B+ b[]) WHERE [id] AND z.x = b.x WITHIN 3 "
            "RETURN a.ts AS a, b[1].ts AS b")
    for strategy in STRATEGIES:
        rows = agrees(with_strategy(text, strategy), found)
        assert rows == ([] if "contiguity" in strategy else [{"a": 0, "b": 1}]), strategy
    # every b must agree with c1 for it to block (b.x is each b's, the oracle's reading of a Kleene variable)
    events = [{**e, "x": x} for e, x in zip(_events("a0 c1 b2 b3"), (0, 0, 0, 1), strict=True)]
    rows = agrees("PATTERN SEQ(A a, NEXT !(C z), B+ b[]) WHERE z.x = b.x WITHIN 5 RETURN count(b[].x) AS n, "
                  "b[1].ts AS b", events)
    assert sorted((r["n"], r["b"]) for r in rows) == [(1, 3), (2, 2)]
    text = "PATTERN SEQ(A a, NEXT !(C z), B b, D d) WHERE z.x = d.x WITHIN 5 RETURN d.ts AS d"
    events = [{**e, "x": x} for e, x in zip(_events("a0 c1 b2 d3 d4"), (0, 7, 0, 7, 8), strict=True)]
    assert agrees(text, events) == [{"d": 4}]
    # the pending c1 survives a state round trip between two micro-batches
    _, spec = compiled(text)
    feed = with_seq(spec, events)
    assert stream_through_engine(spec, 0, [(feed[:3], True, True), (feed[3:], True, True)]) == [{"d": 4}]


def test_next_inside_a_repeated_group():
    """``(SEQ(B b, NEXT C c))+``: in every iteration c is the event right after its b (b3 d4 c5 is no iteration);
    Flink's ``next`` inside a looping group pattern."""
    events = _events("a0 b1 c2 b3 d4 c5 b6 c7 e8")
    text = "PATTERN SEQ(A a, (SEQ(B b, NEXT C c))+) WITHIN 20 RETURN count(b[].x) AS n, c[c.len].ts AS last"
    assert sorted((r["n"], r["last"]) for r in agrees(text, events)) == [(1, 2), (1, 7), (2, 7)]
    assert len(agrees(text.replace("NEXT ", ""), events)) > 3


def test_a_top_level_next_in_a_pattern_with_a_repeated_group():
    """A NEXT step next to a repeated group is a strict edge of the pattern's automaton: ``d`` right after the
    group's last ``c`` (c5 is followed by e6, not d7), or the group's first ``b`` right after ``a``."""
    events = _events("a0 b1 c2 d3 b4 c5 e6 d7")
    text = "PATTERN SEQ(A a, (SEQ(B b, C c))+, NEXT D d) WITHIN 20 RETURN count(b[].x) AS n, d.ts AS d"
    assert sorted((r["n"], r["d"]) for r in agrees(text, events)) == [(1, 3)]
    text = "PATTERN SEQ(A a, NEXT (SEQ(B b, C c))+, D d) WITHIN 20 RETURN count(b[].x) AS n, d.ts AS d"
    assert sorted((r["n"], r["d"]) for r in agrees(text, events)) == [(1, 3), (1, 7), (1, 7), (2, 7)]
    events = _events("a0 d1 b2 c3 d4")
    assert agrees(text, events) == []


SHAPES = [
    "SEQ(A a, NEXT B b, C c)",
    "SEQ(A a, B b, NEXT C c)",
    "SEQ(A a, NEXT B+ b[], C c)",
    "SEQ(A a, B+ b[], NEXT C c)",
    "SEQ(A? a, NEXT B b, C c)",
    "SEQ(A a, !(D z), NEXT B b)",
    "SEQ(A a, NEXT SEQ(B b, C c), D d)",
    "SEQ(A a, NEXT B{1,2} b[], C c)",
    "SEQ(A a, NEXT B b) OR SEQ(C c, NEXT A d)",
    "SEQ(A a, NEXT ANY(B, C) b, NEXT C c)",
    "SEQ(A a, NEXT !(C z), B b)",
    "SEQ(A a, NEXT NOT ANY(C, D) z, B+ b[])",
    "SEQ(E e, A a, NEXT !(D z), NEXT B b)",
    "SEQ(A a, (SEQ(B b, NEXT C c))+)",
    "SEQ(A a, (SEQ(B b, NEXT C+ c[]))+, D d)",
    "(SEQ(A a, B? b, NEXT C c)){1,2}",
    "SEQ(A a, (SEQ(B b, NEXT (C c OR D d)))*, E e)",
    # a top-level NEXT in a pattern with a repeated group: a strict edge into (or out of) the group's automaton
    "SEQ(A a, (SEQ(B b, C c))+, NEXT D d)",
    "SEQ(A a, NEXT (SEQ(B b, C? c))+, D d)",
    "SEQ(A a, NEXT B b, (SEQ(C c, D d))*, E e)",
]
CONDITIONS = ["[id]", "a.x < b.x", "b[i].x >= b[i-1].x", "z.x > a.x", "c.x != a.x", "z.x = b.x"]


def queries(strategy: str):
    return shape_queries(SHAPES, CONDITIONS, strategy, max_conditions=2, windows=(3, 9))


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), events=event_streams("AABBCCDE", min_size=4, max_size=10, max_gap=2))
def test_next_steps_agree_with_the_oracle(strategy, data, events):
    agrees(data.draw(queries(strategy)), events, data)


@pytest.mark.spark
def test_next_steps_on_spark_batch_and_streaming_equal_the_oracle(spark, tmp_path):
    """The batch job under two strategies and a streaming run (one file per micro-batch, checkpointed): the
    oracle's rows, with noise events (D) of the same key breaking links and those of the other key not; and
    ``NEXT !(D d)``, NEXT inside a repeated group and next to one in the batch job; a trend aggregate with both,
    batch and streaming."""
    import random

    from tests.test_match_contiguity_spark import frame, spark_rows

    rnd = random.Random(17)
    events, ts = [], 0
    for _ in range(24):
        key = rnd.randint(0, 1)
        for kind in rnd.choice(["D", "B", "ABC", "ABDC", "ADBC", "ABBC"]):
            ts += rnd.choice([0, 1, 1])
            events.append({"type": kind, "ts": ts, "x": rnd.randint(0, 3), "id": key})
    text = "PATTERN SEQ(A a, NEXT B+ b[], C c) USING STRATEGY WHERE [id] WITHIN 6 RETURN a.ts, b[1].ts AS b1, c.ts"
    for strategy in ("skip_till_next_match", "skip_till_any_match"):
        q = sparkcep.compile(text.replace("STRATEGY", strategy))
        expected = match_rows(q.query, events)
        assert len(expected) >= 3, strategy  # the stream must exercise the query
        assert canonical(spark_rows(q.apply(frame(spark, events)))) == canonical(expected), strategy
    # streaming: a NEXT step (inside a repeated group), a NEXT inside a negation (no D right after a before the
    # first b) and a NEXT !(C v) inside a negation (a B right after which comes no C, then a C, between the group
    # and e), the events numbered per key across micro-batches
    text = ("PATTERN SEQ(A a, !(NEXT D u), (SEQ(B b, NEXT C c))+, NOT SEQ(B y, NEXT !(C v), C w), A e) WHERE [id] "
            "WITHIN 9 RETURN a.ts, e.ts, count(b[].x) AS n")
    q = sparkcep.compile(text)
    expected = match_rows(q.query, events)
    assert len(expected) >= 3
    for piece in ("!(NEXT D u), ", "NEXT C", "NEXT !(C v), "):  # the data needs each of them
        assert canonical(match_rows(sparkcep.compile(text.replace(piece, "")).query, events)) != canonical(
            expected), piece
    assert canonical(streamed(spark, q, events, tmp_path)) == canonical(expected)
    # notNext in the batch job: the event right after a is not a D
    q = sparkcep.compile("PATTERN SEQ(A a, NEXT !(D d), B b, C c) WHERE [id] WITHIN 6 RETURN a.ts, b.ts, c.ts")
    expected = match_rows(q.query, events)
    assert len(expected) >= 3 and len(expected) < len(match_rows(sparkcep.compile(
        "PATTERN SEQ(A a, B b, C c) WHERE [id] WITHIN 6").query, events))
    assert canonical(spark_rows(q.apply(frame(spark, events)))) == canonical(expected)
    # NEXT inside a repeated group in the batch job: each iteration's c right after its b; and NEXT into and out of
    # a group at the top level (strict edges of the pattern's automaton)
    # and a NEXT inside a negation: no B immediately followed by a C between a and c
    for text in ("PATTERN SEQ(A a, (SEQ(B b, NEXT C c))+) WHERE [id] WITHIN 6 RETURN a.ts, count(b[].x) AS n",
                 "PATTERN SEQ(A a, NEXT (SEQ(B b, C c))+, NEXT A e) WHERE [id] WITHIN 6 "
                 "RETURN a.ts, count(b[].x) AS n, e.ts",
                 "PATTERN SEQ(A a, NOT SEQ(B y, NEXT C z), C c) WHERE [id] WITHIN 6 RETURN a.ts, c.ts",
                 # NEXT !(...) inside a repeated group (per iteration; also at its end, an A after the group) and
                 # inside a negation, each changing the rows
                 "PATTERN SEQ(A a, (SEQ(B b, NEXT !(D z), C c, NEXT !(D t)))+, NOT SEQ(B y, NEXT !(C v), C w), A e) "
                 "WHERE [id] WITHIN 9 RETURN a.ts, e.ts, count(b[].x) AS n"):
        q = sparkcep.compile(text)
        expected = match_rows(q.query, events)
        assert len(expected) >= 3, text
        for piece in ("NEXT !(D z), ", "NEXT !(C v), ", ", NEXT !(D t)"):
            if piece in text:
                assert canonical(match_rows(sparkcep.compile(text.replace(piece, "")).query, events)) != canonical(
                    expected), piece
        assert canonical(spark_rows(q.apply(frame(spark, events)))) == canonical(expected), text
    # NEXT inside a repeated group of a trend aggregate, NEXT !(D d) (no D right after a) and NEXT inside a negation
    # (no B immediately followed by a D between f and g), batch and streaming (a last event far ahead closes the
    # windows)
    from tests.test_trend_end_to_end import plain

    # and NEXT !(C k) right next to a negation, NEXT !(C p) where a trend may end right after it and NEXT !(C u)
    # inside a negation, with a predicate across it there (s.x > v.x: the released vertices stored and scanned),
    # !(NEXT B i) right next to a negation, and NEXT on the first event of a negated SEQ (no B right after w, then a C)
    text = ("RETURN id, COUNT(*), COUNT(c) PATTERN SEQ(A a, NEXT !(D d), (SEQ(B b, NEXT C c))+) OR "
            "SEQ(A f, !(NEXT B i), NOT SEQ(B y, NEXT D z), C g) OR SEQ(B h, NEXT !(C k), NOT D e, C m) OR "
            "SEQ(B n, NEXT !(C p), A? q) OR SEQ(A r, NOT SEQ(B s, NEXT !(C u), C v), A o) OR "
            "SEQ(A w, NOT SEQ(NEXT B t, C l), D j) "
            "WHERE [id] AND s.x > v.x GROUP BY id WITHIN 6 SLIDE 3")
    trend = sparkcep.compile(text)
    expected = trend_aggregates(trend.query, events)
    assert len(expected) >= 3
    for other in (text.replace("NEXT C", "C"), text.replace("NEXT !(D d), ", ""), text.replace("NEXT D", "D"),
                  text.replace("NEXT !(C k), ", ""), text.replace("NEXT !(C p), ", ""),
                  text.replace("NEXT !(C u), ", ""), text.replace(" AND s.x > v.x", ""),
                  text.replace("!(NEXT B i), ", ""), text.replace("NEXT B t", "B t")):
        assert expected != trend_aggregates(sparkcep.compile(other).query, events), other
    assert canonical(plain(spark_rows(trend.apply(frame(spark, events))))) == canonical(expected)
    tail = {"type": "A", "ts": 10_000, "x": 0, "id": 9}
    got = plain(streamed(spark, trend, [*events, tail], tmp_path / "trend"))
    assert canonical([r for r in got if r["id"] != 9]) == canonical(expected)


# ------------------------------------------------------------------------------------------ NEXT inside a negation

def test_next_inside_a_negation():
    """``!(NEXT C c)``: no C right after the match's event before the gap (in the gap: a C that is the next
    step's own event does not block, unlike ``NEXT !(C c)``); ``NOT SEQ(B y, NEXT C z)``: no B immediately
    followed by a C between a and d; ``NOT SEQ(NEXT B y, C z)``: no B right after a, then a C, in the gap."""
    events = _events("a1 c2 b3 a4 d5 c6 b7 a8 b9")
    text = "PATTERN SEQ(A a, !(NEXT C c), B b) WITHIN 10 RETURN a.ts AS a, b.ts AS b"
    assert sorted((r["a"], r["b"]) for r in agrees(text, events)) == [(4, 7), (4, 9), (8, 9)]
    assert agrees("PATTERN SEQ(A a, !(NEXT C c), C b) WITHIN 10 RETURN b.ts AS b", _events("a1 c2 c3")) == [{"b": 2}]
    assert agrees("PATTERN SEQ(A a, NEXT !(C c), C b) WITHIN 10 RETURN b.ts AS b", _events("a1 c2 c3")) == []
    text = "PATTERN SEQ(A a, !(SEQ(B y, NEXT C z)), D d) WITHIN 10 RETURN a.ts AS a, d.ts AS d"
    assert agrees(text, _events("a1 b2 e3 c4 d5 a6 b7 c8 d9")) == [{"a": 1, "d": 5}]
    text = "PATTERN SEQ(A a, !(SEQ(NEXT B y, C z)), D d) WITHIN 12 RETURN a.ts AS a, d.ts AS d"
    assert agrees(text, _events("a1 b2 e3 c4 d5 a6 e7 b8 c9 d10")) == [{"a": 6, "d": 10}]
    # after a Kleene step: the C right after the last b blocks; a predicate of the negation reads the match
    text = "PATTERN SEQ(A a, B+ b[], !(NEXT C z), D d) WHERE z.x = a.x WITHIN 10 RETURN count(b[].x) AS n"
    for c3, expected in ((0, [1, 2]), (1, [1, 1, 2])):  # {b2} then c3; {b4} then d5; {b2, b4} then d5
        events = [{**e, "x": x} for e, x in zip(_events("a1 b2 c3 b4 d5"), (0, 0, c3, 0, 0), strict=True)]
        assert sorted(r["n"] for r in agrees(text, events)) == expected
    # collapsed output (one row for many Kleene subsets, each with its own event before the gap) refuses it
    spec = dataclasses.replace(compiled("PATTERN SEQ(A a, B+ b[], !(NEXT C z), D d) WITHIN 10")[1], collapsed=True)
    with pytest.raises(CEPError, match="collapsed output does not support NEXT inside a negation"):
        match_engine.check(spec)


def test_not_next_in_a_pattern_with_a_repeated_group():
    """``NEXT !(C z)`` next to a repeated group (the alternative runs as an automaton): a0 is followed by c1, so
    only a4 starts a match; the C right after a must also not be the group's own first event (notNext reads
    the event whatever takes it: c1 blocks a0, while e4 lets a3 through)."""
    text = "PATTERN SEQ(A a, NEXT !(C z), (SEQ(B b, D d))+) WITHIN 20 RETURN a.ts AS a, count(b[].x) AS n"
    rows = agrees(text, _events("a0 c1 b2 d3 a4 b5 d6 b7 d8"))
    assert sorted((r["a"], r["n"]) for r in rows) == [(4, 1), (4, 1), (4, 1), (4, 2)]
    text = "PATTERN SEQ(A a, NEXT !(C z), (SEQ(C b, D d))+) WITHIN 20 RETURN a.ts AS a, count(b[].x) AS n"
    assert agrees(text, _events("a0 c1 d2 a3 e4 c5 d6")) == [{"a": 3, "n": 1}]


def test_not_next_inside_a_repetition_and_inside_a_negation():
    """Inside ``(...)+`` ``NEXT !(C z)`` is decided per iteration, after that iteration's B: b1 is followed by c2,
    so only b4 and b6 start iterations (b6's next event is e7, not a C); also at the end of the group when an item
    after it must take an event.  Inside a negation it is part of the
    occurrence: b1 c2 d3 is none (c2 right after b1), so a0 e4 matches; b6 d7 is one, blocking a5 e8 (and a0
    e8)."""
    text = "PATTERN SEQ(A a, (SEQ(B b, NEXT !(C z), D d))+) WITHIN 20 RETURN a.ts AS a, count(b[].x) AS n"
    rows = agrees(text, _events("a0 b1 c2 d3 b4 d5 b6 e7 d8"))
    assert sorted((r["a"], r["n"]) for r in rows) == [(0, 1), (0, 1), (0, 1), (0, 2)]
    # at the end of the repeated SEQ, with a D after the group: b3 is followed by c4, the last iteration's b6 by
    # d7 (the event that ends the match), b1 by e2
    text = "PATTERN SEQ(A a, (SEQ(B b, NEXT !(C z)))+, D d) WITHIN 20 RETURN count(b[].x) AS n, d.ts AS d"
    rows = agrees(text, _events("a0 b1 e2 b3 c4 d5 b6 d7"))
    assert sorted((r["n"], r["d"]) for r in rows) == [(1, 5), (1, 7), (1, 7), (2, 7)]
    # at the end of a nested SEQ that a C must follow: b1 is followed by c2, b3 by d4
    text = "PATTERN SEQ(A a, SEQ(B b, NEXT !(C z)), C d) WITHIN 20 RETURN b.ts AS b, d.ts AS d"
    assert agrees(text, _events("a0 b1 c2 b3 d4 c5")) == [{"b": 3, "d": 5}]
    text = "PATTERN SEQ(A a, !(SEQ(B y, NEXT !(C z), D w)), E e) WITHIN 20 RETURN a.ts AS a, e.ts AS e"
    assert agrees(text, _events("a0 b1 c2 d3 e4 a5 b6 d7 e8")) == [{"a": 0, "e": 4}]
    # a predicate relating z to the pick before it: c2 (x 1) differs from b1 (x 0), so it does not count
    events = [{**e, "x": x} for e, x in zip(_events("a0 b1 c2 d3 e4"), (0, 0, 1, 0, 0), strict=True)]
    text = "PATTERN SEQ(A a, !(SEQ(B y, NEXT !(C z), D w)), E e) WHERE z.x = y.x WITHIN 20 RETURN e.ts AS e"
    assert agrees(text, events) == []


NEGATED_SHAPES = [
    "SEQ(A a, !(NEXT C z), B b)",
    "SEQ(A a, !(SEQ(B y, NEXT C z)), D d)",
    "SEQ(A a, !(SEQ(NEXT B y, C z)), D d)",
    "SEQ(A a, B+ b[], !(NEXT C z), D d)",
    "SEQ(A a, !(NEXT C z))",
    "SEQ(A? a, !(NEXT C z), B b)",
    "SEQ(A a, (SEQ(B b, !(NEXT D z), C c))+)",
    "SEQ(A a, !(SEQ(B y, NEXT C+ z[])), D d)",
    "SEQ(A a, !(NEXT (C z OR D y)), B b)",
    "SEQ(A a, !(SEQ(B y, !(NEXT E e), C z)), D d)",
    "SEQ(A a, NEXT B b, !(NEXT C z), D d)",
    "SEQ(A a, !(NEXT C z), B b) OR SEQ(D d, E e)",
]
# NEXT !(...) (notNext) in a pattern with a repeated group: on the automaton's edge after a, by event numbers
GROUP_SHAPES = [
    "SEQ(A a, NEXT !(C z), (SEQ(B b, D d))+)",
    "SEQ(A a, NEXT !(C z), B b, (SEQ(C c, D d))*)",
    "SEQ((SEQ(B b, C c))+, A a, NEXT NOT ANY(D, E) z, E e)",
]
NEGATED_CONDITIONS = ["[id]", "z.x > a.x", "z.x = b.x", "y.x < z.x", "a.x < b.x", "e.x = a.x"]


@pytest.mark.parametrize(("strategy", "shapes"), [(s, n) for s in STRATEGIES for n in ("negated", "group")])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_negations_with_next_agree_with_the_oracle(strategy, shapes, data):
    noise = shapes == "negated"
    text = data.draw(shape_queries(NEGATED_SHAPES if noise else GROUP_SHAPES, NEGATED_CONDITIONS, strategy,
                                   max_conditions=2, windows=(4, 10) if noise else (8, 14)))
    # the pattern's own types (and a noise type F: a link broken by another event), dense enough to match; with
    # a group, no noise and no ties (its matches are long)
    types = sorted({t for t in "ABCDE" if f"{t} " in text or f"{t}," in text}) + (["F"] if noise else [])
    events = data.draw(event_streams(types, min_size=5, max_size=11, max_gap=2 if noise else 1, ties=noise))
    agrees(text, events, data)


# NEXT !(C z) inside a repetition (per iteration, after its event) and inside a negation (an occurrence counts only
# if the event right after its pick before the marker is no such event)
NOT_NEXT_INSIDE = [
    "SEQ(A a, (SEQ(B b, NEXT !(C z), C d))+)",
    "SEQ((SEQ(A a, NEXT !(B z), B b))+, C c)",
    "SEQ(A a, (SEQ(B b, NEXT !(C z), A? d, C e))*, B f)",
    "(SEQ(A a, NEXT !(B z), B b)){1,2}",
    "SEQ(A a, (SEQ(B b, NEXT !(C z)))+, C d)",
    "SEQ(A a, (SEQ(B b, NEXT !(C z))){1,2}, A? e, C d)",
    "SEQ(A a, SEQ(B b, NEXT !(C z)), C d)",
    "SEQ(A a, SEQ(B y, SEQ(C b, NEXT !(B z))), A? e, C d)",
    "SEQ(A a, SEQ(B b, NEXT !(C z)) OR C y, B d)",
    "SEQ(A a, !(SEQ(B y, NEXT !(C z), C w)), B e)",
    "SEQ(A a, !(SEQ(B y, NEXT !(C z), C+ w[])), A e)",
    "SEQ(A a, !((SEQ(B y, NEXT !(C z), C w))+), A e)",
    "SEQ(A a, !(SEQ(C y, NEXT !(B z), B w)), !(SEQ(B v, NEXT !(C u), C t)), A e)",
]
NOT_NEXT_CONDITIONS = ["[id]", "z.x > a.x", "z.x = b.x", "y.x < z.x", "z.x != y.x", "u.x = v.x", "a.x < e.x"]


@pytest.mark.parametrize("strategy", ["skip_till_any_match", "skip_till_next_match", "partition_contiguity"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_not_next_inside_a_repetition_or_a_negation_agrees_with_the_oracle(strategy, data):
    text = data.draw(shape_queries(NOT_NEXT_INSIDE, NOT_NEXT_CONDITIONS, strategy, max_conditions=2,
                                   windows=(6, 14)))
    events = data.draw(event_streams("ABC", min_size=5, max_size=11, max_gap=1, ties=False))
    agrees(text, events, data)
