"""Negation of a sub-sequence, ``!(SEQ(B b, C c))``, in the match engine, against the oracle (LANGUAGE.md §4).

A match is invalidated by an occurrence of the whole negated sequence (strictly increasing ts) strictly
inside its interval (between the neighbouring positive events; ``(last - W, first)`` at the start,
``(last, first + W)`` at the end, postponed), satisfying the predicates on the negated variables.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.oracles.match import match_rows
from sparkcep.runtime_udfs.match import engine as match_engine
from sparkcep.spark.results import canonical
from tests.strategies import deliveries, event_streams
from tests.test_match_engine import stream_through_engine

QUERIES = [
    "PATTERN SEQ(A a, !(SEQ(B b, C c)), D d) WITHIN 6 RETURN a.ts, d.ts",
    "PATTERN SEQ(A a, !(SEQ(B b, C c)), D d) WHERE [id] AND b.x < c.x AND a.x = b.x WITHIN 6 RETURN a.ts, d.ts",
    "PATTERN SEQ(!(SEQ(B b, C c)), D d) WHERE c.x > d.x WITHIN 5 RETURN d.ts",
    "PATTERN SEQ(A a, !(SEQ(B b, C c))) WHERE b.x >= a.x WITHIN 5 RETURN a.ts",
    "PATTERN SEQ(A a, D+ d[], !(SEQ(B b, C c, B e)), E e2) WHERE e.x > b.x WITHIN 7 RETURN a.ts, e2.ts, count(d[].x)",
    "PATTERN SEQ(A a, !(SEQ(ANY(B, C) b, D d)), E e) WHERE [id] WITHIN 6 RETURN a.ts, e.ts",
    "PATTERN SEQ(A a, !(SEQ(B b, C c)), !(E z), D d) WITHIN 6 RETURN a.ts, d.ts",
]
STRATEGIES = ["skip_till_any_match", "skip_till_next_match", "partition_contiguity"]


def with_strategy(text: str, strategy: str) -> str:
    head, rest = text.split(" WITHIN ", 1)
    if " WHERE " in head:
        pattern, where = head.split(" WHERE ", 1)
        return f"{pattern} USING {strategy} WHERE {where} WITHIN {rest}"
    return f"{head} USING {strategy} WITHIN {rest}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.sampled_from(QUERIES), strategy=st.sampled_from(STRATEGIES),
       events=event_streams("ABCDE", max_size=10, max_gap=2), data=st.data())
def test_negated_sequence_equals_oracle(text, strategy, events, data):
    q = sparkcep.compile(with_strategy(text, strategy))
    spec = q.spec()
    parts: dict = {}
    for e in events:
        parts.setdefault(tuple(e.get(a) for a in spec.key), []).append(e)
    got, arrived = [], []
    for part in parts.values():
        lateness, batches = data.draw(deliveries(sorted(part, key=lambda e: e["ts"])))
        got += stream_through_engine(spec, lateness, batches)
        arrived += [e for batch, _, _ in batches for e in batch]
    # contiguity ranks equal timestamps in arrival order (LANGUAGE.md §5, streaming), and the deliveries
    # reorder ties within the lateness: the oracle sees the events in the order the engine received them
    expected = canonical(match_rows(q.query, arrived if "contiguity" in strategy else events))
    assert canonical(got) == expected


def test_sase_shoplifting_with_a_negated_sequence():
    """Shoplifting where only a counter reading *followed by* a payment excuses the exit."""
    text = ("EVENT SEQ(SHELF x, !(SEQ(COUNTER y, PAY p)), EXIT z) WHERE [id] AND y.lane = p.lane WITHIN 12 "
            "RETURN x.ts, z.ts")
    events = [{"type": t, "ts": ts, "id": 1, "lane": lane} for t, ts, lane in [
        ("SHELF", 1, 0), ("COUNTER", 2, 1), ("PAY", 3, 2), ("EXIT", 4, 0),   # paid at another lane: alarm
        ("SHELF", 5, 0), ("COUNTER", 6, 1), ("PAY", 7, 1), ("EXIT", 8, 0)]]  # paid: no alarm for x@1 or x@5
    q = sparkcep.compile(text)
    state, _ = match_engine.step(q.spec(), match_engine.init_state(), events)
    rows = match_engine.advance(q.spec(), state, float("inf"))[1]
    assert canonical(rows) == canonical(match_rows(q.query, events))
    assert sorted((r["x_ts"], r["z_ts"]) for r in rows) == [(1, 4)]


@pytest.mark.spark
def test_negated_sequence_on_spark_equals_oracle(spark):
    """The Spark filter keeps the negated sequence's events (their ``_mask`` bits), batch job = oracle."""
    import random

    from pyspark.sql.types import LongType, StringType, StructField, StructType

    rnd = random.Random(4)
    events, ts = [], 0
    for _ in range(60):
        ts += rnd.randint(0, 2)
        events.append({"type": rnd.choice("ABCDE"), "ts": ts, "id": rnd.randint(0, 1), "x": rnd.randint(0, 3)})
    schema = StructType([StructField("type", StringType()), StructField("ts", LongType()),
                         StructField("id", LongType()), StructField("x", LongType())])
    df = spark.createDataFrame([(e["type"], e["ts"], e["id"], e["x"]) for e in events], schema)
    for text in (QUERIES[1], QUERIES[3], QUERIES[5]):
        q = sparkcep.compile(text)
        got = [r.asDict() for r in q.apply(df).collect()]
        expected = match_rows(q.query, events)
        assert expected and canonical(got) == canonical(expected), text
