"""Arrival-to-result latency per result row, without a JVM (docs/operations.md, "Latency as users feel it"):
the streaming operator stamps each result with the arrival of the rows that produced it, the engine never
sees the arrival column, the SQL filter carries it through, and a micro-batch's progress turns the results'
observed arrival into its latency line."""

from __future__ import annotations

import pandas as pd
from pyspark.sql.types import LongType, StringType, StructField, StructType

import sparkcep
from sparkcep.compiler.codegen.sql import filter_sql
from sparkcep.ir.sharing import SharedQuery, SharedSpec
from sparkcep.ir.spec import TimeoutSpec
from sparkcep.runtime_udfs.match.stream_columnar import MASK
from sparkcep.spark.group_state import SimulatedGroup
from sparkcep.spark.operator import MatchOperator, _load_keyed, _load_nested
from sparkcep.spark.progress import Totals, result_latency
from sparkcep.spark.schema import EVENT_TIME_OFFSET
from sparkcep.spark.validate import ARRIVAL_COL, RESULT_ARRIVAL

PLAIN = StructType([StructField("type", StringType()), StructField("ts", LongType()), StructField("id", LongType())])
CARRIED = StructType([*PLAIN.fields, StructField(ARRIVAL_COL, LongType())])


def call(fn, key, rows: list[dict] | None, group: SimulatedGroup) -> list[dict]:
    pdfs = [pd.DataFrame(rows)] if rows else []
    return [r for frame in fn(key, iter(pdfs), group) for r in frame.to_dict("records")]


def test_each_result_carries_its_own_events_arrival_which_is_no_attribute():
    """A match without RETURN (every input column shown) over rows with their arrival: the arrival is no
    attribute of the match (the plan is bound without it), and the row emitted in the call that reads B
    carries the arrival of its own events (B's, 2 000), not C's later 2 500 of the same call."""
    q = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 100")
    op = MatchOperator(q.spec(PLAIN), CARRIED, watermark_delay_ms=0)
    assert op.arrival and ARRIVAL_COL not in op.output_schema.names
    fn, group = op.stream_function(), SimulatedGroup(None, 0)
    assert call(fn, (1,), [{"type": "A", "ts": 1, "id": 1, ARRIVAL_COL: 1_000}], group) == []
    rows = call(fn, (1,), [{"type": "B", "ts": 5, "id": 1, ARRIVAL_COL: 2_000},
                           {"type": "C", "ts": 6, "id": 1, ARRIVAL_COL: 2_500}], group)
    assert rows == [{"a_type": "A", "a_ts": 1, "a_id": 1, "b_type": "B", "b_ts": 5, "b_id": 1,
                     RESULT_ARRIVAL: 2_000}]
    assert list(op.stream_schema.names) == [*op.output_schema.names, RESULT_ARRIVAL]


def test_under_buckets_each_match_carries_its_own_last_events_arrival():
    """The default grouping of a streaming match query (buckets: a Spark group holds several keys, the columnar
    step streams them): each match is stamped with the arrival of its own last event, carried with the rows
    through the construction, not the newest arrival of its bucket's rows; a match completed by the watermark
    in a later call still gets its last event's arrival."""
    q = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 100 RETURN a.ts AS at, b.ts AS bt")
    masked = StructType([*CARRIED.fields, StructField(MASK, LongType())])
    op = MatchOperator(q.spec(PLAIN), masked, watermark_delay_ms=0).with_buckets(2)
    assert op.stream_path == "columnar micro-batches"
    fn, group = op.stream_function(), SimulatedGroup(None, 0)

    def row(t: str, ts: int, key: int, arrival: int) -> dict:
        return {"type": t, "ts": ts, "id": key, ARRIVAL_COL: arrival, MASK: {"A": 1, "B": 2}.get(t, 0)}

    rows = call(fn, (0,), [row("A", 1, 1, 1_000), row("A", 2, 2, 1_100), row("B", 5, 1, 2_000),
                           row("B", 6, 2, 9_000), row("B", 9, 1, 3_000)], group)
    got = sorted((r["at"], r["bt"], r[RESULT_ARRIVAL]) for r in rows)
    assert got == [(1, 5, 2_000), (1, 9, 3_000), (2, 6, 9_000)]
    rows = call(fn, (0,), [row("B", 20, 2, 5_000), row("C", 21, 1, 7_000)], group)
    assert sorted((r["at"], r["bt"], r[RESULT_ARRIVAL]) for r in rows) == [(2, 20, 5_000)]


def test_a_trend_window_closed_by_a_timeout_has_its_events_arrival():
    """A window closed by event time moving on elsewhere (the group got no rows in that micro-batch) carries
    the newest arrival of its own events, kept in the group's state."""
    q = sparkcep.compile("RETURN COUNT(*) AS n PATTERN SEQ(A a, B b) WHERE [id] WITHIN 10")
    op = MatchOperator(q.spec(PLAIN), CARRIED, watermark_delay_ms=0)
    fn, group = op.stream_function(), SimulatedGroup(None, 0)
    assert call(fn, (1,), [{"type": "A", "ts": 1, "id": 1, ARRIVAL_COL: 1_000},
                           {"type": "B", "ts": 2, "id": 1, ARRIVAL_COL: 1_500}], group) == []
    group.watermark_ms = EVENT_TIME_OFFSET + 1000  # event time moved on elsewhere: the window closes, no rows
    rows = call(fn, (1,), None, group)
    assert [(int(r["n"]), r[RESULT_ARRIVAL]) for r in rows] == [(1, 1_500)]


def test_a_trend_window_carries_the_newest_arrival_of_its_own_events():
    """A micro-batch reading two files: the first (arrival 1 000) holds key 1's A@1 B@2, the second (arrival
    5 000 for key 2's A@3 B@4, 9 000 for key 1's A@15).  A@15 closes the window [0, 10) (delay 0); the window's
    row, merged over both keys, has the newest arrival of the events in it, 5 000, not 9 000: A@15 is past the
    window.  Key 1's next window, closed by a later call without rows, still gets A@15's arrival (the panes
    are in the group's state), and the state forgets the panes of closed windows."""
    q = sparkcep.compile("RETURN COUNT(*) AS n PATTERN SEQ(A a, B b) WHERE [id] WITHIN 10")
    op = MatchOperator(q.spec(PLAIN), CARRIED, watermark_delay_ms=0)
    fn, group = op.stream_function(), SimulatedGroup(None, 0)

    def event(t: str, ts: int, key: int, arrival: int) -> dict:
        return {"type": t, "ts": ts, "id": key, ARRIVAL_COL: arrival}

    rows = call(fn, (), [event("A", 1, 1, 1_000), event("B", 2, 1, 1_000), event("A", 3, 2, 5_000),
                         event("B", 4, 2, 5_000), event("A", 15, 1, 9_000)], group)
    assert [(r["window_start"], int(r["n"]), r[RESULT_ARRIVAL]) for r in rows] == [(0, 2, 5_000)]
    assert list(_load_nested(group.stored)[3].values()) == [{1: 9_000}]  # key 1's pane [10, 20); [0, 10) closed
    assert call(fn, (), [event("B", 16, 1, 12_000)], group) == []  # window [10, 20) open until 20
    group.watermark_ms = EVENT_TIME_OFFSET + 1000  # event time moved on elsewhere: [10, 20) closes, no rows
    rows = call(fn, (), None, group)
    assert [(r["window_start"], int(r["n"]), r[RESULT_ARRIVAL]) for r in rows] == [(10, 1, 12_000)]
    assert group.stored is None  # nothing left: the panes went with the state


def test_the_filter_carries_the_arrival_whatever_the_query_reads():
    q = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 10 RETURN a.x AS x")
    names = [*PLAIN.names, "x", "y"]
    sql = filter_sql(q.plan(), "events", names, pretty=False, carry=(ARRIVAL_COL,))
    assert ARRIVAL_COL in sql and "y" not in sql.split()


def test_a_batch_reports_its_results_latency_from_their_observed_arrival():
    progress = {"batchId": 4, "timestamp": "2026-01-01T00:00:10.000Z", "durationMs": {"triggerExecution": 2000},
                "observedMetrics": {"sparkcep_output": {"results": 3, "late": 0, "result_arrival_p01": 1767225600000,
                                                        "result_arrival_median": 1767225608000,
                                                        "results_arrived": 3}}}
    assert result_latency(progress) == (4.0, 12.0)  # the batch ended at 00:00:12
    totals = Totals()
    line = totals.add(progress)
    assert line.endswith("result latency p50 4.0 s p99 12.0 s") and totals.result_latencies == [(4, 3, 4.0, 12.0)]
    del progress["observedMetrics"]["sparkcep_output"]["result_arrival_median"]
    assert result_latency(progress) is None and "result latency" not in Totals().add(progress)


def test_a_match_recognize_outer_query_carries_the_results_arrival():
    """The outer query of a MATCH_RECOGNIZE statement over a stream with arrival keeps ``_arrival_ms``: a row
    its match's, a grouped row the newest of its group's, a ``*`` already; DISTINCT drops it (None)."""
    from sparkcep.spark.recognize import _carrying_arrival

    assert _carrying_arrival("SELECT a, b FROM m WHERE a > 1") == "SELECT a, b, `_arrival_ms` FROM m WHERE a > 1"
    assert _carrying_arrival("SELECT * FROM m ORDER BY a") == "SELECT * FROM m ORDER BY a"
    assert (_carrying_arrival("SELECT k, COUNT(*) AS n FROM m GROUP BY k")
            == "SELECT k, COUNT(*) AS n, MAX(`_arrival_ms`) AS `_arrival_ms` FROM m GROUP BY k")
    assert _carrying_arrival("SELECT DISTINCT a FROM m") is None


def event(t: str, ts: int, key: int, arrival: int | None) -> dict:
    return {"type": t, "ts": ts, "id": key, ARRIVAL_COL: arrival}


def test_one_group_per_key_each_match_carries_its_own_events_arrival():
    """``buckets=0`` (one Spark group per key, the per-event engine): a micro-batch reading two files, the first
    (arrival 1 000) with A@1 B@5, the second (9 000) with B@30: the match (1, 5) has its own events' arrival,
    1 000, not the group's newest, 9 000; a match postponed by a negated end and released by a later call
    without rows (a timeout) has its own events' arrival, not null."""
    q = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 100 RETURN a.ts AS at, b.ts AS bt")
    op = MatchOperator(q.spec(PLAIN), CARRIED, watermark_delay_ms=0)
    assert op.stream_path.startswith("per-event engine") and ARRIVAL_COL not in op.output_schema.names
    fn, group = op.stream_function(), SimulatedGroup(None, 0)
    rows = call(fn, (1,), [event("A", 1, 1, 1_000), event("B", 5, 1, 1_000), event("B", 30, 1, 9_000)], group)
    assert sorted((r["at"], r["bt"], r[RESULT_ARRIVAL]) for r in rows) == [(1, 5, 1_000), (1, 30, 9_000)]
    assert list(rows[0]) == [*op.output_schema.names, RESULT_ARRIVAL]

    q = sparkcep.compile("PATTERN SEQ(A a, B b, !(C c)) WHERE [id] WITHIN 10 RETURN a.ts AS at, b.ts AS bt")
    op = MatchOperator(q.spec(PLAIN), CARRIED, watermark_delay_ms=0)
    fn, group = op.stream_function(), SimulatedGroup(None, 0)
    assert call(fn, (1,), [event("A", 1, 1, 1_000), event("B", 5, 1, 2_000), event("A", 8, 1, 9_000)], group) == []
    group.watermark_ms = EVENT_TIME_OFFSET + 1000  # event time moved on elsewhere: the negated end is over
    rows = call(fn, (1,), None, group)
    assert sorted((r["at"], r["bt"], r[RESULT_ARRIVAL]) for r in rows) == [(1, 5, 2_000)]


def test_a_timed_out_partial_match_carries_its_own_events_arrival():
    """The ``--timeouts`` operator (per-event): A@1 B@5 of the first file (1 000, 2 000) time out when the
    second file's D@30 (9 000) moves event time past the window: stamped 2 000, not 9 000."""
    q = sparkcep.compile("PATTERN SEQ(A a, B b, C c) WHERE [id] WITHIN 10 RETURN a.ts AS at, b.ts AS bt")
    op = MatchOperator(TimeoutSpec.of(q.spec(PLAIN)), CARRIED, watermark_delay_ms=0)
    fn, group = op.stream_function(), SimulatedGroup(None, 0)
    rows = call(fn, (1,), [event("A", 1, 1, 1_000), event("B", 5, 1, 2_000), event("D", 30, 1, 9_000)], group)
    assert [(r["at"], r["bt"], r["timeout_step"], r[RESULT_ARRIVAL]) for r in rows] == [(1, 5, "b", 2_000)]


def test_a_trend_grouped_by_its_key_alone_carries_its_own_events_arrival():
    """One Spark group per key (GROUP BY the key): A@1 B@2 of the first file (1 000), A@15 of the second (9 000)
    closing [0, 10): the window's row has 1 000; the next window, closed by a call without rows, A@15's and
    B@16's newest, 12 000, from the panes kept in the group's state, which go with it."""
    q = sparkcep.compile("RETURN id, COUNT(*) AS n PATTERN SEQ(A a, B b) WHERE [id] GROUP BY id WITHIN 10")
    op = MatchOperator(q.spec(PLAIN), CARRIED, watermark_delay_ms=0)
    assert not op.nested
    fn, group = op.stream_function(), SimulatedGroup(None, 0)
    rows = call(fn, (1,), [event("A", 1, 1, 1_000), event("B", 2, 1, 1_000), event("A", 15, 1, 9_000)], group)
    assert [(r["window_start"], int(r["n"]), r[RESULT_ARRIVAL]) for r in rows] == [(0, 1, 1_000)]
    assert _load_keyed(group.stored)[1] == {(): {1: 9_000}}  # pane [10, 20) kept; [0, 10) closed
    assert call(fn, (1,), [event("B", 16, 1, 12_000)], group) == []
    group.watermark_ms = EVENT_TIME_OFFSET + 1000
    rows = call(fn, (1,), None, group)
    assert [(r["window_start"], int(r["n"]), r[RESULT_ARRIVAL]) for r in rows] == [(10, 1, 12_000)]
    assert group.stored is None


def test_a_sharing_context_carries_each_windows_own_events_arrival():
    """A shared executor (a workload's sharing context) of q (A then B) and r (C then D), one Spark group per key
    and several keys per group (GROUP BY coarser than the key): the first file (1 000) holds key 1's A@1 B@2, the
    second key 1's C@3 D@4 (5 000) and key 2's A@5 B@6 (3 000), and A@15 (9 000) closes [0, 10).  Each query's row has
    the newest arrival of the window's events of its own types, not the 9 000 of A@15, nor r's 5 000 for q."""
    queries = (SharedQuery("q", "n", ("ab",)), SharedQuery("r", "m", ("cd",)))
    files = [event("A", 1, 1, 1_000), event("B", 2, 1, 1_000), event("C", 3, 1, 5_000), event("D", 4, 1, 5_000),
             event("A", 5, 2, 3_000), event("B", 6, 2, 3_000), event("A", 15, 1, 9_000)]
    for group_by, key, expected in [(("id",), (1,), {("q", 1_000), ("r", 5_000)}),
                                    ((), (), {("q", 3_000), ("r", 5_000)})]:
        spec = SharedSpec((("ab", ("A", "B")), ("cd", ("C", "D"))), queries, 10, 10, key=("id",), group_by=group_by)
        op = MatchOperator(spec, CARRIED, watermark_delay_ms=0)
        fn, group = op.stream_function(), SimulatedGroup(None, 0)
        rows = call(fn, key, [e for e in files if not key or e["id"] == 1], group)
        assert {(r["query"], r[RESULT_ARRIVAL]) for r in rows} == expected


def test_states_written_before_the_arrival_was_kept_load():
    """A checkpoint written before: a match state whose events carry no arrival (their matches get the newest
    arrival of the events that have one, else the micro-batch's), a one-key trend state of engine bytes alone."""
    q = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 100 RETURN a.ts AS at, b.ts AS bt")
    before = SimulatedGroup(None, 0)
    assert call(MatchOperator(q.spec(PLAIN), PLAIN, watermark_delay_ms=0).stream_function(), (1,),
                [{"type": "A", "ts": 1, "id": 1}], before) == []
    fn = MatchOperator(q.spec(PLAIN), CARRIED, watermark_delay_ms=0).stream_function()
    rows = call(fn, (1,), [event("B", 5, 1, 2_000), event("C", 6, 1, 3_000)], before)
    assert [(r["at"], r["bt"], r[RESULT_ARRIVAL]) for r in rows] == [(1, 5, 2_000)]

    q = sparkcep.compile("RETURN id, COUNT(*) AS n PATTERN SEQ(A a, B b) WHERE [id] GROUP BY id WITHIN 10")
    before = SimulatedGroup(None, 0)
    call(MatchOperator(q.spec(PLAIN), PLAIN, watermark_delay_ms=0).stream_function(), (1,),
         [{"type": "A", "ts": 1, "id": 1}, {"type": "B", "ts": 2, "id": 1}], before)
    assert not before.stored.startswith(b"sparkcep")  # the engine's bytes alone, as before
    fn = MatchOperator(q.spec(PLAIN), CARRIED, watermark_delay_ms=0).stream_function()
    rows = call(fn, (1,), [event("B", 3, 1, 4_000), event("A", 15, 1, 9_000)], before)
    assert [(int(r["n"]), r[RESULT_ARRIVAL]) for r in rows] == [(2, 4_000)]


def test_a_late_events_record_leaves_the_arrival_out():
    """The late side channel's record of an event is its columns as read: the hidden arrival, which the engine
    now carries as an attribute, is not among them."""
    import json

    from sparkcep.spark import late

    q = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 100 RETURN a.ts AS at, b.ts AS bt")
    op = MatchOperator(q.spec(PLAIN), CARRIED, watermark_delay_ms=0, late_rows=True)
    fn, group = op.stream_function(), SimulatedGroup(None, EVENT_TIME_OFFSET + 50)
    rows = call(fn, (1,), [event("A", 1, 1, 1_000)], group)
    assert [json.loads(r[late.RECORD]) for r in rows if r[late.KIND] == late.LATE] == [{"type": "A", "ts": 1, "id": 1}]
