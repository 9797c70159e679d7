"""The streaming columnar step (``runtime_udfs.match.stream_columnar``) against the per-event engine and the
oracle: random flat queries, events in random micro-batches (out of order, some beyond the lateness: late),
random watermark moves, state round trips; advance by advance the same matches as the engine, and all of them
together the oracle's over the on-time events (= one batch).  Then the operator's stream function, without a
JVM, the way Spark calls it (groups per key or per bucket, timeouts, late rows routed): the same output frames,
micro-batch by micro-batch, as the per-event engine's, and the oracle's rows.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

import sparkcep
from sparkcep.oracles.match import match_rows
from sparkcep.runtime_udfs.match import engine
from sparkcep.runtime_udfs.match import stream_columnar as sc_mod
from sparkcep.runtime_udfs.match.compile import Plan
from sparkcep.spark import late
from sparkcep.spark.group_state import GroupStates, SimulatedGroup
from sparkcep.spark.operator import COLUMNAR_STREAM, MatchOperator
from sparkcep.spark.schema import EVENT_TIME_OFFSET, MASK
from tests.strategies import deliveries, event_streams
from tests.test_match_engine import canonical

# ----------------------------------------------------------------------------------------------- pure


def plain(value):
    """A value as the engine gives it: numpy scalars as Python values, NaN as None, whole floats as ints."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return None if math.isnan(value) else int(value) if value.is_integer() else value
    if isinstance(value, pd.Timestamp):
        return value.value // 10**6
    return None if value is pd.NaT else value


def rows_of(sc, found) -> list[dict]:
    columns = sc_mod.outputs(sc, *found)
    names = list(columns)
    return [{n: plain(columns[n][i]) for n in names} for i in range(len(found[1]))]


def column_batch(events: list[dict], names) -> dict[str, np.ndarray]:
    """Engine columns of a batch: ts and _mask int64, the attributes as object arrays (None: null)."""
    cols = {"ts": np.array([e["ts"] for e in events], dtype=np.int64),
            MASK: np.array([e[MASK] for e in events], dtype=np.int64)}
    for name in names:
        if name not in cols:
            cols[name] = np.array([e.get(name) for e in events] + [None], dtype=object)[:-1]
    return cols


@st.composite
def flat_queries(draw) -> str:
    """Query text the streaming step takes, dense in matches over :data:`STREAM` events: ``SEQ`` of 1-4
    components (``ANY(A, B)``, ``T?``: several alternatives), maybe ``[id]``, a parameterized predicate on
    single-type variables, ``RETURN`` of plain ``v.attr``."""
    comps, plain_vars = [], []
    for k in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["A", "B", "ANY(A, B)", "B?"] if 0 < k else ["A", "ANY(A, B)"]))
        comps.append(f"{kind} v{k}")
        if kind in "AB":
            plain_vars.append(f"v{k}")
    if "?" in comps[-1]:
        comps.append(f"A v{len(comps)}")  # a pattern does not end with T? here (nor is it only optional)
        plain_vars.append(f"v{len(comps) - 1}")
    where = ["[id]"] if draw(st.booleans()) else []
    if len(plain_vars) > 1 and draw(st.booleans()):
        left, right = draw(st.lists(st.sampled_from(plain_vars), min_size=2, max_size=2, unique=True))
        where.append(f"{left}.x {draw(st.sampled_from(['<', '!=', '>=']))} {right}.x")
    returns = ", ".join(f"v{k}.{draw(st.sampled_from(['ts', 'x', 'id', 'type']))} AS r{k}" for k in range(len(comps)))
    return (f"PATTERN SEQ({', '.join(comps)}){' WHERE ' + ' AND '.join(where) if where else ''} "
            f"WITHIN {draw(st.integers(1, 10))} RETURN {returns}")


STREAM = event_streams("ABC", max_size=14, attrs={"x": (0, 3), "id": (0, 1)}, max_gap=2, shuffled=True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=flat_queries(), events=STREAM, data=st.data())
def test_micro_batches_equal_the_engine_advance_by_advance_and_the_oracle(text, events, data):
    q = sparkcep.compile(text)
    spec = q.spec()
    plan = Plan(spec)
    for e in events:
        e[MASK] = plan.mask_of(e)
    # one state holding every key (Spark groups by bucket), or one per key (Spark groups by the key)
    per_key = data.draw(st.booleans())
    sc = sc_mod.stream_columnar(spec, key=() if per_key else None)
    assert sc is not None
    key = lambda e: tuple(e[a] for a in spec.key)  # noqa: E731
    lateness, batches = data.draw(deliveries(events, late=2))
    ours: dict = {}  # state per key (per_key) or one under ()
    theirs: dict = {}  # the engine's state per key
    frontier, newest, on_time, got = -math.inf, None, [], []
    for batch, move, round_trip in batches:
        for e in batch:
            # late: behind the processed watermark of its state (a state made after a move starts at -inf)
            state = ours.get(key(e) if per_key else ())
            if e["ts"] >= (state.frontier if state is not None else -math.inf if per_key else frontier):
                on_time.append(e)
        for k, part in _split(batch, key if per_key else (lambda e: ())).items():
            state = ours.setdefault(k, sc_mod.init_state())
            sc_mod.step(sc, state, column_batch(part, sc.reads))
        for k, part in _split(batch, key).items():
            if k not in theirs:
                theirs[k] = engine.init_state()
                if not per_key and frontier > -math.inf:  # the group's processed watermark (nested_stream's rule)
                    engine.advance(spec, theirs[k], frontier)
            engine.step(spec, theirs[k], part)
        newest = max([newest if newest is not None else -math.inf, *(e["ts"] for e in batch)])
        if move or batch is batches[-1][0]:
            watermark = math.inf if batch is batches[-1][0] else newest - lateness
            want = [r for k in theirs for r in engine.advance(spec, theirs[k], watermark)[1]]
            mine = []
            for k in ours:
                ours[k], found = sc_mod.advance(sc, ours[k], watermark)
                mine += rows_of(sc, found)
            assert canonical(mine) == canonical(want)
            got += mine
            frontier = max(frontier, watermark)
        if round_trip:
            ours = {k: sc_mod.StreamState.from_bytes(s.to_bytes()) for k, s in ours.items()}
    assert all(sc_mod.is_empty(s) for s in ours.values())
    assert sum(s.late for s in ours.values()) == len(events) - len(on_time)
    assert canonical(got) == canonical(match_rows(q.query, on_time))


def _split(events, key) -> dict:
    out: dict = {}
    for e in events:
        out.setdefault(key(e), []).append(e)
    return out


def test_optional_and_any_alternatives_and_carried_rows_stay_in_the_window():
    """``SEQ(ANY(A, B) a, C? c, B b)``: two alternatives, one row filling two positions; only rows within the
    window of the watermark that may begin or continue a match are carried."""
    q = sparkcep.compile("PATTERN SEQ(ANY(A, B) a, C? c, B b) WHERE [id] WITHIN 5 RETURN a.ts, c.ts, b.ts")
    spec = q.spec()
    sc = sc_mod.stream_columnar(spec)
    mask = {"A": 1, "B": 1 | 4, "C": 2}
    events = [{"type": t, "ts": ts, "id": 0} for t, ts in [("A", 1), ("C", 2), ("B", 3), ("B", 9), ("C", 10)]]
    for e in events:
        e[MASK] = mask[e["type"]]
    state = sc_mod.init_state()
    sc_mod.step(sc, state, column_batch(events[:3], sc.reads))
    state, found = sc_mod.advance(sc, state, 3)
    assert sorted(map(tuple, (r.values() for r in rows_of(sc, found))), key=repr) == [(1, 2, 3), (1, None, 3)]
    sc_mod.step(sc, state, column_batch(events[3:], sc.reads))
    state, found = sc_mod.advance(sc, state, 9)
    assert rows_of(sc, found) == []  # B@9 is 8 after A@1
    # carried: B@9 (may begin a match; A@1, C@2, B@3 are a window behind), and the pending C@10
    assert state.columns["ts"].tolist() == [9, 10] and state.done == 1
    assert sc_mod.wakeup(sc, state) == 10
    state = sc_mod.StreamState.from_bytes(state.to_bytes())
    state, found = sc_mod.advance(sc, state, 10)
    assert sc_mod.wakeup(sc, state) == 15  # newest carried ts + W: then every row has left the window
    assert sc_mod.is_empty(sc_mod.advance(sc, state, 15)[0])


def test_ineligible_specs_say_why():
    for text, why in [("PATTERN SEQ(A a, B+ b[], C c) WITHIN 5", "Kleene closure"),
                      ("PATTERN SEQ(A a, !(B b), C c) WITHIN 5", "negation"),
                      ("PATTERN SEQ(A a, B b) USING skip_till_next_match WITHIN 5", "strategy skip_till_next_match")]:
        assert sc_mod.stream_columnar(sparkcep.compile(text).spec()) is None
        assert sc_mod.ineligible(sparkcep.compile(text).spec()) == why
    with pytest.raises(sparkcep.CEPError, match="another match engine"):
        sc_mod.StreamState.from_bytes(engine.init_state().to_bytes())


# ----------------------------------------------------------------------------------------------- stream function

COLUMNS = ["type", "ts", "id", "x"]
QUERIES = [  # rows that fill a position before the last and the last one (carried, and may end a match)
    "PATTERN SEQ(A a, B b, ANY(B, C) c) WHERE [id] AND a.x <= b.x WITHIN 6{unit} RETURN a.ts AS at, b.ts AS bt, "
    "c.ts AS ct, a.id AS id, c.x AS cx",
    "PATTERN SEQ(A a, B? b, ANY(A, C) c) WHERE [id] WITHIN 5{unit}",
    "PATTERN SEQ(A a, ANY(B, C) b, C c) WHERE a.x != c.x WITHIN 4{unit} RETURN b.type AS t, a.x AS ax, c.ts AS ct",
]


def stream_frames(text: str, batches: list[list[dict]], lateness: int, *, columnar: bool, buckets: int | None,
                  timestamps: bool) -> list[tuple[int, dict]]:
    """``(micro-batch, row)`` of the operator's stream function (late rows routed) over ``batches`` as Spark
    calls it: Spark's watermark the newest event time of the earlier micro-batches minus ``lateness``, each
    group with rows or a passed timeout called, a flush far ahead at the end."""
    ts_type = TimestampType() if timestamps else LongType()
    schema = StructType([StructField("type", StringType()), StructField("ts", ts_type),
                         StructField("id", LongType()), StructField("x", LongType()), StructField(MASK, LongType())])
    q = sparkcep.compile(text.format(unit=" milliseconds" if timestamps else ""))
    spec = q.spec(schema)
    op = MatchOperator(spec, schema, late_rows=True, watermark_delay_ms=lateness, buckets=buckets,
                       timezone="Europe/Paris")
    # the operator's choice: the columnar step where a Spark group holds several keys (buckets) or there is no key
    assert (op.stream_path == COLUMNAR_STREAM) == (op.buckets is not None or not op.spec.key)
    op.stream_path = COLUMNAR_STREAM if columnar else "per-event engine (forced)"
    groups = GroupStates(op.stream_function())
    plan = Plan(op.spec)
    offset = 0 if timestamps else EVENT_TIME_OFFSET
    newest, out = None, []
    for index, batch in enumerate([*batches, None]):
        raw = 10**15 if batch is None else 0 if newest is None else newest + offset - lateness
        rows: dict = {}
        for e in batch or []:
            g = tuple(e[c] for c in op.group_cols) if op.buckets is None else (e["id"] % op.buckets,)
            rows.setdefault(g, []).append({**e, MASK: plan.mask_of(e)})
        pdfs = {}
        for g, group_rows in rows.items():
            pdf = pd.DataFrame(group_rows, columns=[*COLUMNS, MASK])
            if timestamps:  # naive wall-clock times in the session zone, as PySpark hands them over
                pdf["ts"] = pd.to_datetime(pdf["ts"], unit="ms", utc=True).dt.tz_convert("Europe/Paris")
                pdf["ts"] = pdf["ts"].dt.tz_localize(None)
            pdfs[g] = [pdf]
        for frame in groups.micro_batch(pdfs, raw):
            out += [(index, {k: plain(v) for k, v in r.items()}) for r in frame.to_dict("records")]
        if batch:
            newest = max([*(() if newest is None else (newest,)), *(e["ts"] for e in batch)])
    assert not groups
    return out


STREAMS = event_streams("ABC", max_size=14, attrs={"x": (0, 4), "id": (0, 2)}, max_gap=1)


@pytest.mark.parametrize("text", QUERIES, ids=["predicate", "optional", "no-key"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=STREAMS, data=st.data())
def test_stream_function_equals_the_engine_batch_by_batch(text, events, data):
    """Out of order beyond the lateness (late rows routed, not applied), groups per key or in buckets, numeric or
    timestamp ts: the frames of each micro-batch are the per-event engine's; all results the oracle's over the
    events not routed as late."""
    lateness, batches = data.draw(deliveries(events, late=2))
    batches = [b for b, _, _ in batches]
    options = {"buckets": data.draw(st.sampled_from([None, 2])), "timestamps": data.draw(st.booleans())}
    ours = stream_frames(text, batches, lateness, columnar=True, **options)
    theirs = stream_frames(text, batches, lateness, columnar=False, **options)
    assert sorted(map(repr, ours)) == sorted(map(repr, theirs))
    results = [{k: v for k, v in r.items() if k not in (late.KIND, late.REASON, late.RECORD)}
               for _, r in ours if r[late.KIND] == late.RESULT]
    # Spark's rule: an event behind the watermark of its micro-batch (the earlier ones' newest ts - lateness)
    late_events, newest = [], None
    for batch in batches:
        late_events += [e for e in batch if newest is not None and e["ts"] < newest - lateness]
        newest = max([*(() if newest is None else (newest,)), *(e["ts"] for e in batch)])
    assert sum(r[late.KIND] == late.LATE for _, r in ours) == len(late_events)
    on_time = [e for e in events if not any(e is x for x in late_events)]
    query = sparkcep.compile(text.format(unit="")).query
    assert canonical(results) == canonical(match_rows(query, on_time, COLUMNS))


def test_a_group_holding_an_engine_state_goes_on_with_the_engine():
    """A checkpoint written before the columnar step (the group's state is the engine's) resumes on the engine."""
    schema = StructType([StructField("type", StringType()), StructField("ts", LongType()),
                         StructField("id", LongType()), StructField("x", LongType()), StructField(MASK, LongType())])
    spec = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 5 RETURN a.ts AS at, b.ts AS bt").spec(schema)
    before, after = (MatchOperator(spec, schema, buckets=2, watermark_delay_ms=0) for _ in range(2))
    assert after.stream_path == COLUMNAR_STREAM
    before.stream_path = "per-event engine (forced)"
    frame = lambda t, ts: pd.DataFrame([{"type": t, "ts": ts, "id": 0, "x": 0, MASK: 1 if t == "A" else 2}])  # noqa: E731
    group = SimulatedGroup(None, 0)
    assert list(before.stream_function()((0,), iter([frame("A", 1)]), group)) == []
    assert not sc_mod.is_state(group.stored)
    out = list(after.stream_function()((0,), iter([frame("B", 3)]),
                                       SimulatedGroup(group.stored, 1 + EVENT_TIME_OFFSET)))
    assert [r for f in out for r in f.to_dict("records")] == [{"at": 1, "bt": 3}]


def test_a_key_state_found_under_a_bucket_is_refused_with_the_grouping():
    """An old checkpoint of one Spark group per key resumed in buckets without telling apply() (an integer key
    whose value is also a bucket number): one key's engine state reaches the bucketed function; it is refused
    with one message naming the grouping, not misread."""
    schema = StructType([StructField("type", StringType()), StructField("ts", LongType()),
                         StructField("id", LongType()), StructField("x", LongType()), StructField(MASK, LongType())])
    spec = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 5 RETURN a.ts AS at, b.ts AS bt").spec(schema)
    per_key = MatchOperator(spec, schema, watermark_delay_ms=0)
    frame = lambda t, ts: pd.DataFrame([{"type": t, "ts": ts, "id": 0, "x": 0, MASK: 1 if t == "A" else 2}])  # noqa: E731
    group = SimulatedGroup(None, 0)
    assert list(per_key.stream_function()((0,), iter([frame("A", 1)]), group)) == [] and group.exists
    bucketed = per_key.with_buckets(2)
    with pytest.raises(sparkcep.CEPError, match="the checkpoint was made with one Spark group per key"):
        list(bucketed.stream_function()((0,), iter([frame("B", 3)]), SimulatedGroup(group.stored, 1)))
