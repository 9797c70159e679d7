"""Keyless match queries split into time ranges that overlap by the window
(:mod:`sparkcep.runtime_udfs.match.ranges`): each range runs the engine over what it holds and keeps the matches
whose first event it owns; together they are the oracle's matches, each exactly once, with ranges so tiny
that matches cross their borders (narrower than the window too, so that an event is held by several)."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

import sparkcep
from sparkcep.ir.errors import CEPError
from sparkcep.ir.spec import reads_every_event
from sparkcep.oracles.match import match_rows
from sparkcep.oracles.timeouts import timed_out_rows
from sparkcep.runtime_udfs.match import ranges, timeouts
from sparkcep.runtime_udfs.match.compile import Plan
from sparkcep.runtime_udfs.match.engine import advance, init_state, step
from sparkcep.spark.operator import MatchOperator, restored_masks
from sparkcep.spark.results import canonical as rows_canonical
from sparkcep.spark.schema import MASK
from tests.strategies import event_streams
from tests.test_match_engine import canonical
from tests.test_match_timeouts import spec_of as timeout_spec_of

SPLITTABLE = [
    "PATTERN SEQ(A a, B b, C c) WHERE a.x < c.x WITHIN 6 RETURN a.ts, b.ts, c.ts",
    "PATTERN SEQ(A a, ANY(B, C) b) WITHIN 4 RETURN a.ts, b.ts, b.type",
    "PATTERN SEQ(A a, !(B b), C c) WHERE b.x > a.x WITHIN 6 RETURN a.ts, c.ts",
    "PATTERN SEQ(A a, C c, !(B b)) WITHIN 5 RETURN a.ts, c.ts",
    "PATTERN SEQ(A a, B+ b[], C c) WHERE b[i].x >= a.x WITHIN 6 RETURN a.ts, count(b[].x) AS n, c.ts",
    "PATTERN SEQ(A a, B b, C c) WHERE skip_till_next_match(a, b, c) { a.x <= c.x } WITHIN 6 "
    "RETURN a.ts, b.ts, c.ts",
    "PATTERN SEQ(A a, B+ b[], C c) WHERE skip_till_next_match(a, b[], c) { b[i].x > 0 } WITHIN 5 RETURN a.ts, c.ts",
    "PATTERN SEQ(A a, B+ b[] UNTIL (b.x > 2), C c) WITHIN 6 RETURN a.ts, b[1].ts, c.ts",
]

#: contiguity: adjacent in the whole input (every event counts, D too), which a range holding a stretch of it sees
CONTIGUOUS = [
    "PATTERN SEQ(A a, B b) WHERE strict_contiguity(a, b) { a.x <= b.x } WITHIN 4 RETURN a.ts, b.ts",
    "PATTERN SEQ(A a, B+ b[], C c) WHERE strict_contiguity(a, b[], c) { b[i].x > 0 } WITHIN 6 "
    "RETURN a.ts, count(b[].x) AS n, c.ts",
    "PATTERN SEQ(A a, B b, C c) WHERE partition_contiguity(a, b, c) { a.x != c.x } WITHIN 5 RETURN a.ts, c.ts",
    "PATTERN SEQ(A a, NEXT B b, C c) WITHIN 5 RETURN a.ts, b.ts, c.ts",
    "PATTERN SEQ(A a, NEXT !(C c), B b) WITHIN 5 RETURN a.ts, b.ts",
    "PATTERN SEQ(A a, B b, NEXT C c) WHERE a.x < c.x WITHIN 6 RETURN a.ts, b.ts, c.ts",
]

#: range widths (ts units): narrower than a window, as wide, wider, and fractions
WIDTHS = st.sampled_from([0.5, 1, 1.5, 2, 3, 4, 5, 7, 12, 40])


def ranged(spec, events, width, engine=None) -> list[dict]:
    """Every range's engine run over the events it holds (those it does not own barred from the first component)."""
    rspec = ranges.ranged_spec(spec)
    run_step, run_advance, init = (step, advance, init_state) if engine is None else (
        engine.step, engine.advance, engine.init_state)
    out = []
    for held in ranges.split(events, width, spec.window, Plan(spec).mask_of,
                             every_event=reads_every_event(spec)).values():
        state, _ = run_step(rspec, init(), held)
        out += run_advance(rspec, state, math.inf)[1]
    return out


@pytest.mark.parametrize("text", SPLITTABLE + CONTIGUOUS)
@settings(max_examples=50, deadline=None)
@given(events=event_streams("ABCD", max_size=12, shuffled=True), width=WIDTHS)
def test_time_ranges_equal_the_oracle(text, events, width):
    compiled = sparkcep.compile(text)
    spec = compiled.spec()
    assert ranges.why_not(spec) is None
    assert canonical(ranged(spec, events, width)) == canonical(match_rows(compiled.query, events))


@pytest.mark.parametrize("text", [
    "PATTERN SEQ(A a, B b, C c) WHERE a.x < b.x WITHIN 5 RETURN a.ts, b.ts",
    "PATTERN SEQ(A a, B b, C c) WHERE skip_till_next_match(a, b, c) { a.x <= c.x } WITHIN 5 RETURN a.ts, b.ts",
])
@settings(max_examples=40, deadline=None)
@given(events=event_streams("ABC", max_size=10, shuffled=True), width=WIDTHS)
def test_timed_out_partial_matches_in_time_ranges_equal_the_oracle(text, events, width):
    """The timed-out partial matches (a batch query's ``timeouts``) split the same way."""
    spec = timeout_spec_of(text)
    expected = timed_out_rows(sparkcep.compile(text).query, events, ["type", "ts", "id", "x"])
    assert canonical(ranged(spec, events, width, timeouts)) == canonical(expected)


def sliced(text: str, events: list[dict], rows: int, halves: bool = False,
           masks: list[int] | None = None) -> tuple[list[dict], int]:
    """One worker's run of a keyless table (``MatchOperator.run_slices``) in time slices of about ``rows`` rows:
    its result rows and the number of slices.  The table as the batch path hands it over: ``_mask`` from the
    Spark filter (or ``masks``: as a partition of time ranges gets them, :func:`ranges.sent_mask`, restored by
    ``restored_masks`` first), ``_arrival`` numbering the input order (an event's own, else its position), the rows
    shuffled."""
    ts_type = DoubleType() if halves else LongType()
    schema = StructType([StructField("type", StringType()), StructField("ts", ts_type),
                         StructField("x", LongType()), StructField("_arrival", LongType())])
    q = sparkcep.compile(text)
    spec = q.spec(schema)
    plan = Plan(spec)
    table = pa.table({"type": [e["type"] for e in events],
                      "ts": pa.array([e["ts"] for e in events], pa.float64() if halves else pa.int64()),
                      "x": pa.array([e.get("x") for e in events], pa.int64()),
                      "_arrival": pa.array([e.get("_arrival", k) for k, e in enumerate(events)], pa.int64()),
                      MASK: pa.array([plan.mask_of(e) for e in events] if masks is None else masks, pa.int64())})
    table = table.take(np.random.default_rng(len(events)).permutation(len(events)))
    if masks is not None:
        table = restored_masks(table)
    parts = list(MatchOperator(spec, schema, timezone="UTC").run_slices(table, slice_rows=rows))
    return [r for part in parts for r in part.to_pylist()], len(parts)


@pytest.mark.parametrize("text", SPLITTABLE + CONTIGUOUS)
@settings(max_examples=20, deadline=None)
@given(events=event_streams("ABCD", max_size=14, shuffled=True), rows=st.integers(1, 6), halves=st.booleans())
def test_one_worker_in_time_slices_equals_the_oracle(text, events, rows, halves):
    """A keyless table larger than a slice runs in time slices of ``rows`` rows that overlap by the window
    (``ranges.time_slices``): the oracle's matches, each once, with slices so small that matches cross them; ts
    whole numbers, or halves of them in a DOUBLE column (a window's end between two ts)."""
    if halves:
        events = [{**e, "ts": e["ts"] / 2} for e in events]
    got, parts = sliced(text, events, rows, halves)
    assert rows_canonical(got) == rows_canonical(match_rows(sparkcep.compile(text).query, events))
    ts = [e["ts"] for e in events]
    # more than a slice's rows, and beyond a window of the first: the first slice ends before the table does
    assert parts >= 2 or len(events) <= rows or max(ts) <= min(ts) + sparkcep.compile(text).spec().window


@pytest.mark.parametrize("text", SPLITTABLE + CONTIGUOUS)
@settings(max_examples=25, deadline=None)
@given(events=event_streams("ABCD", max_size=16, shuffled=True), windows=st.sampled_from([1, 1.5, 2, 3]),
       parts=st.integers(2, 3), rows=st.integers(1, 5), halves=st.booleans())
def test_a_partition_of_dealt_ranges_runs_as_one_keyless_table(text, events, windows, parts, rows, halves):
    """The Spark batch path's partitions: ranges of ``windows`` windows dealt round robin over ``parts`` partitions,
    each partition the union of its ranges' copies (``ranges.dealt``), masks as they cross the shuffle (a copy a
    range holds without owning negated: ``ranges.sent_mask``, whose range ``ranges.sent_range`` finds from its ts)
    and run by one worker as one keyless table in time slices of ``rows`` rows: together the oracle's matches, each
    once, with ranges and slices so small that matches cross both."""
    if halves:
        events = [{**e, "ts": e["ts"] / 2} for e in events]
    events = [{**e, "_arrival": k} for k, e in enumerate(events)]
    spec = sparkcep.compile(text).spec()
    width = windows * spec.window
    held = ranges.split(events, width, spec.window, Plan(spec).mask_of, every_event=reads_every_event(spec))
    got = []
    for part in ranges.dealt(held, parts).values():
        owners = {id(e): j for j, copies in held.items() for e in copies}
        masks = [ranges.sent_mask(e["_mask"], ranges.range_of(e["ts"], width) == owners[id(e)]) for e in part]
        assert all(ranges.sent_range(e["ts"], width, m) == owners[id(e)] for e, m in zip(part, masks, strict=True))
        got += sliced(text, part, rows, halves, masks)[0]
    assert rows_canonical(got) == rows_canonical(match_rows(sparkcep.compile(text).query, events))


def test_dealing_needs_two_partitions_and_restoring_undoes_the_sent_mask():
    with pytest.raises(ValueError, match="2 partitions or more"):
        ranges.dealt({0: [], 1: []}, 1)
    assert ranges.sent_mask(0b101, True) == 0b101 and ranges.sent_mask(0b101, False) == ~0b100
    assert ranges.sent_mask(0b001, False) == -1  # held only for its first component: still a copy (contiguity)
    assert ranges.sent_range(25, 10, ranges.sent_mask(3, False)) == 1 and ranges.sent_range(25, 10, 3) == 2
    table = pa.table({MASK: pa.array([5, ~4, -1, 0], pa.int32())})
    assert restored_masks(table).column(MASK).to_pylist() == [5, 4, 0, 0]


def test_a_time_slice_owns_its_default_rows_or_four_windows_at_the_mean_density():
    """``ranges.slice_rows``: ``TIME_SLICE_ROWS`` (2^16), or 4 windows' events at the table's mean density (valid
    events over their ts span) when that is more, never more than the table; and what ``run_slices`` cuts with."""
    ts = np.arange(1_000_000, dtype=np.int64) * 2  # 1 event per 2 ts units
    valid = np.ones(len(ts), dtype=bool)
    assert ranges.TIME_SLICE_ROWS == 1 << 16 and ranges.slice_rows(ts, valid, 100) == 1 << 16
    assert ranges.slice_rows(ts, valid, 50_000) == math.ceil(4 * 10**6 * 50_000 / 1_999_998)  # 4 windows: ~100,000
    assert ranges.slice_rows(ts, valid, 10**9) == 1_000_000  # a window wider than the table: all of it
    assert ranges.slice_rows(ts, valid & (ts < 1000), 50_000) == 1 << 16  # 500 valid events
    assert ranges.slice_rows(np.zeros(9), np.ones(9, dtype=bool), 5, least=3) == 3  # one ts: one slice anyway

    spec = sparkcep.compile(SPLITTABLE[0]).spec(StructType([StructField("ts", LongType()),
                                                            StructField("x", LongType())]))
    schema = StructType([StructField("ts", LongType()), StructField("x", LongType())])
    n = 3 * (1 << 16) + 5
    table = pa.table({"ts": np.arange(n, dtype=np.int64), "x": np.zeros(n, dtype=np.int64),
                      MASK: np.full(n, 2, dtype=np.int64)})  # B rows: no match, only the slicing counts
    assert len(list(MatchOperator(spec, schema, timezone="UTC").run_slices(table))) == 4


def test_a_slice_owns_its_rows_or_a_window_and_holds_a_window_more():
    """``ranges.time_slices``: slices of ``rows`` events in ts order (ties in input order), longer when their ts
    span less than a window, each holding a window past its last own event (barred there); rows without a valid ts
    in none."""
    ts = np.array([5, 0, 1, 1, 2, 9, 3, 4, 20, 7, 99])
    valid = np.ones(len(ts), dtype=bool)
    valid[-1] = False
    got = [(h.tolist(), b.tolist()) for h, b in ranges.time_slices(ts, valid, 2, 3)]
    assert got == [([1, 2, 3, 4, 6, 7], [False] * 4 + [True] * 2),  # owns 0 1 1 2 (3 rows, a window: <= 0 + 2),
                   ([6, 7, 0, 9], [False] * 3 + [True]),            # holds 3 4 (<= 2 + 2); owns 3 4 5, holds 7
                   ([9, 5, 8], [False] * 3)]                        # owns the rest; 99 has no valid ts: in none
    same = np.zeros(10)
    assert [len(h) for h, _ in ranges.time_slices(same, np.ones(10, dtype=bool), 1, 3)] == [10]  # one ts: 1 slice
    spread = np.arange(10.0)  # 3 rows span less than a window of 2.5: 3 own rows, each row held twice at most
    assert [(h.tolist(), b.sum()) for h, b in ranges.time_slices(spread, spread < 9, 2.5, 2)] == [
        ([0, 1, 2, 3, 4], 2), ([3, 4, 5, 6, 7], 2), ([6, 7, 8], 0)]
    big = np.array([2**62, 2**62 + 2, 2**62 + 3, 2**62 + 5, 2**63 - 2])  # exact beyond 2^53, no overflow at the top
    assert [(h.tolist(), b.tolist()) for h, b in ranges.time_slices(big, np.ones(5, dtype=bool), 3, 1)] == [
        ([0, 1, 2, 3], [False] * 3 + [True]), ([3], [False]), ([4], [False])]


def test_a_range_keeps_the_events_it_holds_that_fill_no_component_only_under_contiguity():
    """Range 0 (width 10) holds a9, a10 and b11 (window 5); a10 fills no component there (barred from the first),
    so it is left out, unless the query reads every event: there it breaks a9's adjacency to b11 (the match
    a9 b11 would be wrong; a10 b11, found by range 1, is the only one)."""
    events = [{"type": "A", "ts": 9}, {"type": "A", "ts": 10}, {"type": "B", "ts": 11}]
    for text, want in [("PATTERN SEQ(A a, NEXT B b) WITHIN 5 RETURN a.ts, b.ts", [(10, 11)]),
                       ("PATTERN SEQ(A a, B b) WITHIN 5 RETURN a.ts, b.ts", [(9, 11), (10, 11)])]:
        spec = sparkcep.compile(text).spec()
        held = ranges.split(events, 10, spec.window, Plan(spec).mask_of, every_event=reads_every_event(spec))
        assert [e["ts"] for e in held[0]] == ([9, 10, 11] if reads_every_event(spec) else [9, 11])
        assert sorted((r["a_ts"], r["b_ts"]) for r in ranged(spec, events, 10)) == want
        assert canonical(ranged(spec, events, 10)) == canonical(match_rows(sparkcep.compile(text).query, events))


@pytest.mark.parametrize(("text", "reason"), [
    ("PATTERN SEQ(!(B b), A a, C c) WITHIN 5", "does not start with one positive event"),
    ("PATTERN SEQ(A+ a[], C c) WITHIN 5", "does not start with one positive event"),
    ("PATTERN SEQ(A a, C c) OR SEQ(B b, C d) WITHIN 5", "does not start with one positive event"),
])
def test_specs_ranges_cannot_split_say_why(text, reason):
    spec = sparkcep.compile(text).spec()
    assert reason in ranges.why_not(spec)
    with pytest.raises(ValueError, match="not splittable"):
        ranges.ranged_spec(spec)


def test_an_event_is_held_by_its_owner_and_the_ranges_ending_less_than_a_window_before_it():
    assert list(ranges.holders(26, 10, 6)) == [2]
    assert list(ranges.holders(25, 10, 6)) == [1, 2]  # 25 < 20 + 6
    assert list(ranges.holders(20, 10, 25)) == [-1, 0, 1, 2]  # range -1 = [-10, 0) holds up to 25
    assert list(ranges.holders(-3, 10, 2)) == [-1]
    assert list(ranges.holders(None, 10, 6)) == [0]
    assert ranges.range_of(19.99, 10) == 1 and ranges.range_of(-0.5, 10) == -1


@pytest.mark.spark
def test_a_keyless_batch_runs_in_time_ranges_on_every_partition(spark, tmp_path):
    """The batch path splits a keyless query's input into time ranges (of one window here, dealt round robin over
    the 2 shuffle partitions of the test session) when ``keylessRanges`` is ``true``, or ``auto`` (the default)
    with an input Spark estimates at ``keylessRangeMinBytes`` or more; a tiny input under the default threshold,
    and ``false``, run in one partition: the oracle's matches, those crossing range borders included, each once,
    the same either way; both partitions produce matches; strict contiguity too (every event in its ranges, ties
    in input order)."""
    from pyspark.sql import functions as F

    from sparkcep.spark.adapters import (
        RANGE_MIN_BYTES_CONF,
        RANGE_WINDOWS_CONF,
        RANGES_CONF,
        held_masks_sql,
        partition_salts,
        range_sql,
        spark_hash_long,
    )
    from sparkcep.spark.results import canonical as rows_canonical

    salts = partition_salts(5)
    hashed = spark.range(1).select(*(F.hash(F.lit(v).cast("bigint")) for v in [*salts, -7, 2**40 + 3])).first()
    assert list(hashed) == [spark_hash_long(v) for v in [*salts, -7, 2**40 + 3]]
    assert [spark_hash_long(v) % 5 for v in salts] == [0, 1, 2, 3, 4]

    # the generator and the range of each copy as Spark computes them: ranges.split's copies, sent_mask, sent_range
    rows = [(ts, m) for ts in [-12, -10, -7, -3, 0, 2, 9, 10, 12, 13, 29] for m in [1, 2, 3]]
    sent = spark.createDataFrame(rows, "ts long, _mask int").select("ts", F.expr(held_masks_sql(
        "ts", LongType(), 10, 3, False))).select("ts", MASK, F.expr(range_sql("ts", LongType(), 10).sql("spark")))
    want = [(e["ts"], ranges.sent_mask(e[MASK], ranges.range_of(e["ts"], 10) == j), j) for j, copies in
            ranges.split([{"ts": ts, "m": m} for ts, m in rows], 10, 3, lambda e: e["m"], every_event=False).items()
            for e in copies]
    assert sorted(tuple(r) for r in sent.collect()) == sorted(want)

    events = [{"type": "ABCD"[(5 * k + k // 4) % 4], "ts": 2 * k - k % 3, "x": k % 7} for k in range(60)]
    # range 40 holds b205, which fills no component there (barred from the first) but breaks b204's adjacency to c206
    events += [{"type": t, "ts": ts, "x": x} for t, ts, x in [("B", 204, 1), ("B", 205, 2), ("C", 206, 0)]]
    spark.createDataFrame(events, "type string, ts long, x long").write.parquet(str(tmp_path / "events"))
    df = spark.read.parquet(str(tmp_path / "events"))  # a file: Spark knows its size (a few KB)
    queries = [sparkcep.compile("PATTERN SEQ(A a, B b, C c) WHERE a.x != c.x WITHIN 13 RETURN a.ts, b.ts, c.ts"),
               sparkcep.compile("PATTERN SEQ(B b, C c) WHERE strict_contiguity(b, c) { b.x != c.x } WITHIN 5 "
                                "RETURN b.ts, c.ts")]

    def run(q) -> list[dict]:
        return [r.asDict() for r in q.apply(df).withColumn("pid", F.spark_partition_id()).collect()]

    one = [run(q) for q in queries]  # auto, and a tiny input: 1 partition
    spark.conf.set(RANGE_WINDOWS_CONF, "1")
    spark.conf.set(RANGE_MIN_BYTES_CONF, "0")
    try:
        spark.conf.set(RANGES_CONF, "true")
        ranged = [run(queries[0])]
        spark.conf.set(RANGES_CONF, "auto")
        ranged.append(run(queries[1]))
        spark.conf.set(RANGES_CONF, "false")
        assert {r["pid"] for r in run(queries[0])} == {0}
        spark.conf.set(RANGES_CONF, "yes")
        with pytest.raises(CEPError, match="keylessRanges must be auto, true or false"):
            queries[0].apply(df)
    finally:
        for conf in (RANGES_CONF, RANGE_WINDOWS_CONF, RANGE_MIN_BYTES_CONF):
            spark.conf.unset(conf)
    for q, got, single in zip(queries, ranged, one, strict=True):
        assert {r.pop("pid") for r in got} == {0, 1}
        assert {r.pop("pid") for r in single} == {0}
        want = match_rows(q.query, events)
        assert rows_canonical(got) == rows_canonical(want) == rows_canonical(single)
    assert any(r["b_ts"] // 5 != r["c_ts"] // 5 for r in match_rows(queries[1].query, events))  # crosses a border
    assert {"b_ts": 205, "c_ts": 206} in match_rows(queries[1].query, events)


def test_explain_says_the_parallelism_of_a_query_without_key():
    ranged = sparkcep.compile(SPLITTABLE[0]).explain()
    assert "parallelism (no key): batch in time ranges of" in ranged
    assert "when Spark estimates the input at spark.sparkcep.keylessRangeMinBytes (16 MiB) or more" in ranged
    assert ("streaming: 1 partition (time ranges are batch only: not built for streams, whose stateful grouping is "
            "part of the checkpoint;") in ranged
    contiguous = sparkcep.compile(CONTIGUOUS[0]).explain()
    assert "parallelism (no key): batch in time ranges of" in contiguous
    one = sparkcep.compile("PATTERN SEQ(!(B b), A a, C c) WITHIN 5").explain()
    assert "parallelism 1 (no key): the pattern does not start with one positive event" in one
    keyed = sparkcep.compile("PATTERN SEQ(A a, C c) WHERE [id] WITHIN 5").explain()
    assert "parallelism" not in keyed
