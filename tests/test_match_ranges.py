"""Keyless match queries split into time ranges that overlap by the window
(:mod:`sparkcep.runtime_udfs.match.ranges`): each range runs the engine over what it holds and keeps the matches
whose first event it owns; together they are the oracle's matches, each exactly once, with ranges so tiny
that matches cross their borders."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.oracles.match import match_rows
from sparkcep.runtime_udfs.match import ranges
from sparkcep.runtime_udfs.match.engine import advance, init_state, step
from tests.strategies import event_streams
from tests.test_match_engine import canonical

SPLITTABLE = [
    "PATTERN SEQ(A a, B b, C c) WHERE a.x < c.x WITHIN 6 RETURN a.ts, b.ts, c.ts",
    "PATTERN SEQ(A a, ANY(B, C) b) WITHIN 4 RETURN a.ts, b.ts, b.type",
    "PATTERN SEQ(A a, !(B b), C c) WHERE b.x > a.x WITHIN 6 RETURN a.ts, c.ts",
    "PATTERN SEQ(A a, C c, !(B b)) WITHIN 5 RETURN a.ts, c.ts",
    "PATTERN SEQ(A a, B+ b[], C c) WHERE b[i].x >= a.x WITHIN 6 RETURN a.ts, count(b[].x) AS n, c.ts",
    "PATTERN SEQ(A a, B b, C c) WHERE skip_till_next_match(a, b, c) { a.x <= c.x } WITHIN 6 "
    "RETURN a.ts, b.ts, c.ts",
    "PATTERN SEQ(A a, B+ b[], C c) WHERE skip_till_next_match(a, b[], c) { b[i].x > 0 } WITHIN 5 RETURN a.ts, c.ts",
]


def ranged(spec, events, cuts) -> list[dict]:
    """Every range's engine run over the events it holds, its owned matches kept."""
    rspec = ranges.ranged_spec(spec)
    out = []
    for part, held in enumerate(ranges.split(events, cuts, spec.window)):
        state, _ = step(rspec, init_state(), held)
        _, rows = advance(rspec, state, math.inf)
        out += ranges.owned(rows, part, cuts)
    return out


@pytest.mark.parametrize("text", SPLITTABLE)
@settings(max_examples=60, deadline=None)
@given(events=event_streams("ABCD", max_size=12, shuffled=True),
       cuts=st.lists(st.integers(-1, 30), max_size=6).map(lambda c: sorted(set(c))))
def test_time_ranges_equal_the_oracle(text, events, cuts):
    compiled = sparkcep.compile(text)
    spec = compiled.spec()
    assert ranges.why_not(spec) is None
    assert canonical(ranged(spec, events, cuts)) == canonical(match_rows(compiled.query, events))


@pytest.mark.parametrize(("text", "reason"), [
    ("PATTERN SEQ(!(B b), A a, C c) WITHIN 5", "does not start with one positive event"),
    ("PATTERN SEQ(A+ a[], C c) WITHIN 5", "does not start with one positive event"),
    ("PATTERN SEQ(A a, C c) WHERE strict_contiguity(a, c) { a.x > 0 } WITHIN 5", "strict_contiguity needs"),
    ("PATTERN SEQ(A a, C c) WHERE partition_contiguity(a, c) { [x] } WITHIN 5", "partition_contiguity needs"),
    ("PATTERN SEQ(A a, NEXT B b, C c) WITHIN 5", "a NEXT step needs"),
    ("PATTERN SEQ(A a, NEXT !(C c), B b) WITHIN 5", "a NEXT step needs"),
])
def test_specs_ranges_cannot_split_say_why(text, reason):
    spec = sparkcep.compile(text).spec()
    assert reason in ranges.why_not(spec)
    with pytest.raises(ValueError, match="not splittable"):
        ranges.ranged_spec(spec)


def test_an_event_is_held_by_its_owner_and_the_ranges_ending_less_than_a_window_before_it():
    cuts = [10, 20, 30]
    assert list(ranges.holders(26, cuts, 6)) == [2]
    assert list(ranges.holders(25, cuts, 6)) == [1, 2]  # 25 < 20 + 6
    assert list(ranges.holders(20, cuts, 25)) == [0, 1, 2]
    assert list(ranges.holders(None, cuts, 6)) == [0]
    assert ranges.cuts_of(0, 100, 4) == [25, 50, 75]
    assert ranges.cuts_of(5, 5, 4) == []


@pytest.mark.spark
def test_a_keyless_batch_runs_in_time_ranges_on_every_partition(spark):
    """The batch path splits a keyless query's input into time ranges (one per shuffle partition, 2 in the test
    session): the oracle's matches, those crossing the range border included, each once; both partitions
    produce matches."""
    from pyspark.sql import functions as F

    from sparkcep.spark.adapters import RANGES_CONF
    from sparkcep.spark.results import canonical as rows_canonical

    events = [{"type": "ABC"[k % 3], "ts": 2 * k, "x": k % 7} for k in range(60)]
    df = spark.createDataFrame(events, "type string, ts long, x long")
    q = sparkcep.compile("PATTERN SEQ(A a, B b, C c) WHERE a.x != c.x WITHIN 13 RETURN a.ts, b.ts, c.ts")
    assert {r.pid for r in q.apply(df).select(F.spark_partition_id().alias("pid")).collect()} == {0}  # default: off
    spark.conf.set(RANGES_CONF, "true")
    try:
        result = q.apply(df).withColumn("pid", F.spark_partition_id())
        got = [r.asDict() for r in result.collect()]
    finally:
        spark.conf.unset(RANGES_CONF)
    assert {r.pop("pid") for r in got} == {0, 1}
    want = match_rows(q.query, events)
    assert any(r["a_ts"] < 59 <= r["c_ts"] for r in want)  # a match crosses the border (ts 0..118: cut at 59)
    assert rows_canonical(got) == rows_canonical(want)


def test_explain_says_the_parallelism_of_a_query_without_key():
    ranged = sparkcep.compile(SPLITTABLE[0]).explain()
    assert "with spark.sparkcep.keylessRanges=true, batch in time ranges overlapping by the window" in ranged
    one = sparkcep.compile("PATTERN SEQ(!(B b), A a, C c) WITHIN 5").explain()
    assert "parallelism 1 (no key): the pattern does not start with one positive event" in one
    keyed = sparkcep.compile("PATTERN SEQ(A a, C c) WHERE [id] WITHIN 5").explain()
    assert "parallelism" not in keyed
