"""Out-of-order and late input through the streaming adapter's late-event side channel.

The adapter's stream function (``MatchOperator(..., late_rows=True)``) runs here without a JVM, driven the way
Spark calls it (:mod:`sparkcep.spark.group_state`: keys with rows, keys whose event-time timeout has passed)
with Spark's watermark rule (the newest event time of the earlier micro-batches minus the allowed lateness).
Properties:

* input shuffled within the allowed lateness gives exactly the results of sorted input (the oracle), and no
  event is routed as late;
* an event later than that is routed to the late output with its record, and the results are those of the
  input without it: a late event is never half-applied;
* an event at the watermark's very ts is not late (LANGUAGE.md §1): equal timestamps straddling micro-batches
  at lateness 0 give the results of the whole input.

One Spark case runs the same through ``sparkcep run --stream`` over files.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import LongType, StringType, StructField, StructType

import sparkcep
from sparkcep.oracles.match import match_rows, trend_aggregates
from sparkcep.spark import late
from sparkcep.spark.group_state import GroupStates
from sparkcep.spark.operator import MatchOperator
from sparkcep.spark.results import canonical
from sparkcep.spark.schema import EVENT_TIME_OFFSET
from tests.strategies import event_streams

SCHEMA = StructType([StructField("type", StringType()), StructField("ts", LongType()),
                     StructField("id", LongType()), StructField("x", LongType())])
COLUMNS = SCHEMA.fieldNames()

QUERIES = [
    "PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 6 RETURN a.ts AS at, b.ts AS bt, a.id AS id",
    "RETURN id, COUNT(*) AS n, SUM(A.x) AS sx PATTERN SEQ(A+, B) WHERE [id] GROUP-BY id WITHIN 6 SLIDE 3",
    "PATTERN SEQ(A a, B b, !(C c)) WHERE [id] WITHIN 5 RETURN a.ts AS at, b.ts AS bt, a.id AS id",
]


def stream_rows(text: str, batches: list[list[dict]], lateness: int, early: bool = True) -> list[tuple[int, dict]]:
    """``(micro-batch index, row)`` of every output row of ``text`` over ``batches`` the way a streaming job
    runs it (:func:`operator_rows`).  ``early``: the operator knows the watermark's delay, as on Spark
    (the marker of the event-time column), and so emits what its own rows decide
    (``MatchOperator.batch_watermark``); else it waits for Spark's watermark."""
    q = sparkcep.compile(text)
    op = MatchOperator(q.spec(SCHEMA), SCHEMA, late_rows=True, watermark_delay_ms=lateness if early else None)
    return operator_rows(op, batches, lateness)


def operator_rows(op: MatchOperator, batches: list[list[dict]], lateness: int) -> list[tuple[int, dict]]:
    """``(micro-batch index, row)`` of every output row of the operator ``op`` (over :data:`SCHEMA`) over
    ``batches`` the way a streaming job runs it: per micro-batch, the watermark is the newest ts of the earlier
    batches minus ``lateness`` (Spark's, in ms of the derived event time), each key with rows or a passed timeout
    is called; at the end a batch far ahead flushes (index ``len(batches)``)."""
    groups = GroupStates(op.stream_function())
    key = list(op.group_cols)
    newest, out = None, []
    for index, batch in enumerate([*batches, None]):
        if batch is None:
            raw = 10**15  # the flush
        else:
            raw = 0 if newest is None else newest + EVENT_TIME_OFFSET - lateness
        rows: dict[tuple, list[dict]] = {}
        for e in batch or []:
            rows.setdefault(tuple(e.get(k) for k in key), []).append(e)
        pdfs = {k: [pd.DataFrame(r, columns=COLUMNS)] for k, r in rows.items()}
        for frame in groups.micro_batch(pdfs, raw):
            out += [(index, r) for r in frame.to_dict("records")]
        if batch:
            newest = max([*(() if newest is None else (newest,)), *(e["ts"] for e in batch)])
    return out


def run_stream(text: str, batches: list[list[dict]], lateness: int,
               early: bool = True) -> tuple[list[dict], list[dict]]:
    """``(results, late_rows)`` of :func:`stream_rows`."""
    out = [r for _, r in stream_rows(text, batches, lateness, early)]
    results = [{c: v for c, v in r.items() if c not in (late.KIND, late.REASON, late.RECORD)}
               for r in out if r[late.KIND] == late.RESULT]
    late_rows = [r for r in out if r[late.KIND] == late.LATE]
    return [plain(r) for r in results], late_rows


def plain(row: dict) -> dict:
    out = {}
    for k, v in row.items():
        if k == "aggregate_overflow":
            assert not v
            continue
        out[k] = int(v) if isinstance(v, Decimal) else (None if isinstance(v, float) and math.isnan(v) else v)
    return out


def expected(text: str, events: list[dict]) -> list[dict]:
    q = sparkcep.compile(text)
    if "COUNT(" in text:
        return [plain(r) for r in trend_aggregates(q.query, events)]
    return match_rows(q.query, events, COLUMNS)


@st.composite
def within_lateness(draw, events: list[dict]):
    """``(lateness, batches)``: arrival order ts plus a jitter below the lateness, random micro-batches."""
    lateness = draw(st.integers(1, 4))
    jitter = [draw(st.integers(0, lateness - 1)) for _ in events]
    order = sorted(range(len(events)), key=lambda i: events[i]["ts"] + jitter[i])
    batches = []
    while order:
        size = draw(st.integers(1, 4))
        batches.append([events[i] for i in order[:size]])
        order = order[size:]
    return lateness, batches


STREAMS = event_streams("ABC", max_size=12, attrs={"x": (0, 4), "id": (0, 1)})


@pytest.mark.parametrize("text", QUERIES, ids=["match", "trend", "trailing-negation"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=STREAMS, data=st.data())
def test_out_of_order_within_lateness_equals_sorted_input(text, events, data):
    lateness, batches = data.draw(within_lateness(events))
    results, late_rows = run_stream(text, batches, lateness)
    assert late_rows == []
    assert canonical(results) == canonical(expected(text, events))


@pytest.mark.parametrize("text", QUERIES, ids=["match", "trend", "trailing-negation"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=STREAMS, data=st.data())
def test_events_beyond_the_lateness_are_routed_not_applied(text, events, data):
    """Sorted batches, then one more event of ``ts`` before the watermark of the batch it arrives in."""
    if len(events) < 2:
        return
    lateness = data.draw(st.integers(0, 3))
    cut = data.draw(st.integers(1, len(events) - 1))
    first, rest = events[:cut], events[cut:]
    watermark = max(e["ts"] for e in first) - lateness
    straggler = {"type": data.draw(st.sampled_from("ABC")), "ts": watermark - data.draw(st.integers(1, 4)),
                 "id": data.draw(st.integers(0, 1)), "x": data.draw(st.integers(0, 4))}
    results, late_rows = run_stream(text, [first, [straggler, *rest]], lateness)
    # events of ``rest`` at the watermark (ties with the newest ts of ``first``, lateness 0) are on time
    assert [json.loads(r[late.RECORD]) for r in late_rows] == [straggler]
    assert {r[late.REASON] for r in late_rows} == {f"late: ts before the watermark {watermark:g}"}
    assert canonical(results) == canonical(expected(text, events))


@st.composite
def straddling_ties(draw, events: list[dict]):
    """Sorted micro-batches of ``events`` cut so that equal timestamps often straddle two batches."""
    batches, i = [], 0
    while i < len(events):
        size = draw(st.integers(1, 4))
        j = min(i + size, len(events))
        batches.append(events[i:j])
        i = j
    return batches


TIED = event_streams("ABC", max_size=12, attrs={"x": (0, 4), "id": (0, 1)}, max_gap=1)


@pytest.mark.parametrize("text", QUERIES, ids=["match", "trend", "trailing-negation"])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=TIED, data=st.data())
def test_ties_straddling_micro_batches_at_lateness_0_give_the_batch_result(text, events, data):
    """Input that never goes back in time, lateness 0, equal timestamps across micro-batches (the second
    batch's watermark is the first's newest ts, the ts of its first events): nothing is late, and the
    results are the oracle's (LANGUAGE.md §1: only an event older than newest seen minus lateness is late)."""
    results, late_rows = run_stream(text, data.draw(straddling_ties(events)), 0)
    assert late_rows == []
    assert canonical(results) == canonical(expected(text, events))


def test_late_split_takes_only_events_older_than_the_watermark():
    pdf = pd.DataFrame({"ts": [1, 2, 3, None]})
    kept, positions = late.late_split(pdf, [1, 2, 3, None], 2)
    assert positions == [0] and kept["ts"].tolist()[:2] == [2, 3]
    big = 1_700_000_000_000_000_001  # epoch ns beyond float64's whole numbers: compared exactly
    assert late.late_split(pdf, [big - 1, big, big + 1, None], big)[1] == [0]


# ---------------------------------------------------------------------------------------------------------
# Results in the micro-batch that reads the event completing them (DESIGN.md principle 11)

STRICT = event_streams("ABC", max_size=12, attrs={"x": (0, 4), "id": (0, 1)}, ties=False)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=STRICT, data=st.data())
def test_a_match_comes_out_in_the_micro_batch_that_reads_its_last_event(events, data):
    """Lateness 0, sorted input cut into random micro-batches: each match of ``SEQ(A a, B b)`` is emitted in
    the micro-batch that holds its ``b`` (its own key's newest ts is the next watermark), not one later."""
    batches = data.draw(straddling_ties(events))
    at = {e["ts"]: i for i, batch in enumerate(batches) for e in batch}  # ts are unique
    out = stream_rows(QUERIES[0], batches, 0)
    results = [r for _, r in out if r[late.KIND] == late.RESULT]
    assert canonical([plain({k: v for k, v in r.items() if not k.startswith("_")}) for r in results]) == \
        canonical(expected(QUERIES[0], events))
    assert [i for i, r in out if r[late.KIND] == late.RESULT] == [at[r["bt"]] for r in results]


def _indexes(out: list[tuple[int, dict]]) -> dict[str, list[int]]:
    """Per result row (as canonical JSON), the sorted micro-batch indexes it came out in."""
    seen: dict[str, list[int]] = {}
    for i, r in out:
        if r[late.KIND] == late.RESULT:
            row = plain({k: v for k, v in r.items() if not k.startswith("_")})
            seen.setdefault(json.dumps(row, sort_keys=True, default=str), []).append(i)
    return {k: sorted(v) for k, v in seen.items()}


@pytest.mark.parametrize("text", QUERIES, ids=["match", "trend", "trailing-negation"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=STREAMS, data=st.data())
def test_emitting_by_the_batch_bound_changes_when_never_what(text, events, data):
    """Out-of-order input within the lateness: the same rows as waiting for Spark's watermark, each no later."""
    lateness, batches = data.draw(within_lateness(events))
    early, waiting = _indexes(stream_rows(text, batches, lateness)), _indexes(stream_rows(text, batches, lateness,
                                                                                          early=False))
    assert early.keys() == waiting.keys()
    for row, indexes in early.items():
        assert len(indexes) == len(waiting[row])
        assert all(a <= b for a, b in zip(indexes, waiting[row], strict=True))


@pytest.mark.parametrize(("text", "batches", "when"), [
    # a trend window [0, 6) of id 0 closes at the event of ts 10 (same key), in its micro-batch
    (QUERIES[1], [[{"type": "A", "ts": 1, "id": 0, "x": 1}], [{"type": "B", "ts": 2, "id": 0, "x": 1}],
                  [{"type": "C", "ts": 10, "id": 0, "x": 1}]], 2),
    # a trailing negation is decided (no C before a.ts + 5) when the key's A at ts 7 arrives
    (QUERIES[2], [[{"type": "A", "ts": 1, "id": 0, "x": 1}, {"type": "B", "ts": 2, "id": 0, "x": 1}],
                  [{"type": "A", "ts": 7, "id": 0, "x": 1}]], 1),
], ids=["trend-window", "trailing-negation"])
def test_a_result_decided_by_its_keys_later_event_comes_out_with_it(text, batches, when):
    early = [i for i, r in stream_rows(text, batches, 0) if r[late.KIND] == late.RESULT]
    waiting = [i for i, r in stream_rows(text, batches, 0, early=False) if r[late.KIND] == late.RESULT]
    assert early and set(early) == {when}
    assert set(waiting) == {when + 1}  # Spark's watermark of the next micro-batch (here: the flush)
