"""The GRETA trend engine (pure, no JVM): the paper's worked results through the compiler, its queries on
small streams, and property tests against the oracle (DESIGN.md principle 2) for every supported pattern
shape, with random windows and slides, ties in ts, micro-batches, watermarks and state round trips."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.api import CompiledQuery
from sparkcep.grammar import parse_query
from sparkcep.ir.errors import CEPError
from sparkcep.oracles.match import trend_aggregates
from sparkcep.runtime_udfs.match.engine import EngineUnsupportedError
from sparkcep.runtime_udfs.trend import aggregates as trend_aggregates_mod
from sparkcep.runtime_udfs.trend import engine as trend_engine
from sparkcep.runtime_udfs.trend import graph as trend_graph
from sparkcep.runtime_udfs.trend.engine import TrendState
from sparkcep.spark.results import canonical
from tests.strategies import event_streams

FIG6 = [("a", 1), ("b", 2), ("c", 2), ("a", 3), ("e", 3), ("a", 4), ("c", 5), ("d", 6), ("b", 7), ("a", 8), ("b", 9)]
FIG12 = [{"type": "A", "ts": 1, "attr": 5}, {"type": "B", "ts": 2}, {"type": "A", "ts": 3, "attr": 6},
         {"type": "A", "ts": 4, "attr": 4}, {"type": "B", "ts": 7}]


def fig6_events() -> list[dict]:
    return [{"type": t.upper(), "ts": ts} for t, ts in FIG6]


def run(spec, events, cuts=(), watermarks=(), roundtrip=False, seed=0, shuffle=True) -> list[dict]:
    """What ``groupBy(spec.key)`` and a streaming job do: one engine per key, fed the micro-batches that
    ``cuts`` delimit (each shuffled), the watermark advanced after each (never past an event not yet
    delivered, but up to its ts: an event at the watermark is not late, LANGUAGE.md §1), the state optionally
    serialized in between; then flushed and the partitions' rows merged."""
    rnd = random.Random(seed)
    parts: dict[tuple, list[dict]] = {}
    for e in events:
        parts.setdefault(tuple(e.get(k) for k in spec.key), []).append(e)
    rows: list[dict] = []
    for part in parts.values():
        state = trend_engine.init_state()
        bounds = [0, *sorted(min(c, len(part)) for c in cuts), len(part)]
        for k, (lo, hi) in enumerate(zip(bounds, bounds[1:], strict=False)):
            batch = part[lo:hi]
            if shuffle:  # a NEXT step reads the order of equal timestamps: input order, as in Spark (_arrival)
                rnd.shuffle(batch)
            state, out = trend_engine.step(spec, state, batch)
            assert out == []
            if roundtrip:
                state = TrendState.from_bytes(state.to_bytes())
            if k < len(watermarks):
                safe = min([e["ts"] for e in part[hi:]], default=math.inf)
                state, out = trend_engine.advance(spec, state, min(watermarks[k], safe))
                rows += out
        state, out = trend_engine.advance(spec, state, math.inf)
        rows += out
        assert trend_engine.is_empty(state)
    return trend_engine.merge_rows(spec, rows)


def engine_rows(text: str, events, **kw) -> list[dict]:
    return run(sparkcep.compile(text).spec(), events, **kw)


def oracle_rows(text: str, events) -> list[dict]:
    return trend_aggregates(sparkcep.compile(text).query, events)


# ----------------------------------------------------------------------------------------------- the paper


@pytest.mark.parametrize(("pattern", "count"), [("A+", 15), ("SEQ(A+, B)", 23), ("(SEQ(A+, B))+", 43)])
def test_greta_figure_6(pattern, count):
    rows = engine_rows(f"RETURN COUNT(*) PATTERN {pattern} WITHIN 100", fig6_events())
    assert rows == [{"window_start": 0, "window_end": 100, "count_all": count}]


def test_greta_figure_12():
    text = ("RETURN COUNT(*), COUNT(A), MIN(A.attr), MAX(A.attr), SUM(A.attr), AVG(A.attr) "
            "PATTERN (SEQ(A+, B))+ WITHIN 10")
    rows = engine_rows(text, FIG12)
    assert rows == [{"window_start": 0, "window_end": 10, "count_all": 11, "count_A": 20, "min_A_attr": 4,
                     "max_A_attr": 6, "sum_A_attr": 100, "avg_A_attr": 5.0}]
    assert type(rows[0]["count_all"]) is int and type(rows[0]["sum_A_attr"]) is int


@pytest.mark.parametrize("pattern", [
    "(SEQ(A+, NOT SEQ(C, NOT E, D), B))+",  # Figure 6(d)
    "SEQ(A+, NOT E)",  # Figure 8(a): end negation
    "SEQ(NOT E, A+)",  # Figure 8(b): start negation
    "SEQ(A+, NOT C, B)",
    "(SEQ(A+, NOT C))+",
])
def test_greta_negation_examples(pattern):
    text = f"RETURN COUNT(*) PATTERN {pattern} WITHIN 100"
    assert engine_rows(text, fig6_events()) == oracle_rows(text, fig6_events())


def test_figure_6d_count():
    rows = engine_rows("RETURN COUNT(*) PATTERN (SEQ(A+, NOT SEQ(C, NOT E, D), B))+ WITHIN 100", fig6_events())
    assert rows[0]["count_all"] == 13


def test_sliding_windows_share_one_graph():
    """GRETA Example 6 (WITHIN 10 SLIDE 3) on the Figure 6 stream: one row per window, as the oracle."""
    text = "RETURN COUNT(*) PATTERN (SEQ(A+, B))+ WITHIN 10 SLIDE 3"
    rows = engine_rows(text, fig6_events())
    assert rows == oracle_rows(text, fig6_events())
    assert [r["window_start"] for r in rows] == [-6, -3, 0, 3, 6]  # windows [3k, 3k + 10) with a trend


# ----------------------------------------------------------------------------------------------- GRETA Q1–Q3

Q1 = ("RETURN sector, COUNT(*) PATTERN Stock S+ WHERE [company, sector] AND S.price > NEXT(S).price "
      "GROUP-BY sector WITHIN 10 SLIDE 4")
Q2 = ("RETURN mapper, SUM(M.cpu) PATTERN SEQ(Start S, Measurement M+, End E) WHERE [job, mapper] AND "
      "M.load < NEXT(M).load GROUP-BY mapper WITHIN 12 SLIDE 6")
Q3 = ("RETURN segment, COUNT(*), AVG(P.speed) PATTERN SEQ(NOT Accident A, Position P+) WHERE "
      "[P.vehicle, segment] AND P.speed > NEXT(P).speed GROUP-BY segment WITHIN 10 SLIDE 5")


def q1_stream(rnd: random.Random, n: int) -> list[dict]:
    out = []
    for ts in range(n):
        company = rnd.choice("xyz")
        out.append({"type": "Stock", "ts": ts, "company": company, "sector": "s1" if company == "z" else "s0",
                    "price": rnd.randint(1, 5)})
    return out


def q2_stream(rnd: random.Random, n: int) -> list[dict]:
    return [{"type": rnd.choice(["Start", "Measurement", "Measurement", "End"]), "ts": ts // 2 + 1,
             "job": rnd.randint(0, 1), "mapper": rnd.randint(0, 1), "cpu": rnd.randint(0, 9),
             "load": rnd.randint(0, 4)} for ts in range(n)]


def q3_stream(rnd: random.Random, n: int) -> list[dict]:
    return [{"type": rnd.choice(["Position", "Position", "Position", "Accident"]), "ts": ts,
             "segment": rnd.randint(0, 1), "vehicle": rnd.randint(0, 2), "speed": rnd.randint(0, 5)}
            for ts in range(n)]


@pytest.mark.parametrize(("query", "stream"), [(Q1, q1_stream), (Q2, q2_stream), (Q3, q3_stream)],
                         ids=["Q1", "Q2", "Q3"])
@pytest.mark.parametrize("seed", range(6))
def test_greta_queries_against_oracle(query, stream, seed):
    events = stream(random.Random(seed), 13)
    expected = oracle_rows(query, events)
    assert canonical(engine_rows(query, events, cuts=(4, 9), watermarks=(3, 8), roundtrip=True)) == \
        canonical(expected)


def test_q3_counts_per_vehicle_class():
    """``[P.vehicle]`` binds only P's events: trends of different vehicles never mix, the accident is
    shared."""
    events = [{"type": "Position", "ts": 1, "segment": 0, "vehicle": 1, "speed": 5},
              {"type": "Position", "ts": 2, "segment": 0, "vehicle": 2, "speed": 4},
              {"type": "Position", "ts": 3, "segment": 0, "vehicle": 1, "speed": 3},
              {"type": "Accident", "ts": 4, "segment": 0},
              {"type": "Position", "ts": 5, "segment": 0, "vehicle": 2, "speed": 1}]
    rows = engine_rows(Q3.replace("SLIDE 5", "SLIDE 10"), events)
    # vehicle 1: (5), (3), (5, 3); vehicle 2: (4), (4, 1); not (1): it starts after the accident
    assert rows == [{"window_start": 0, "window_end": 10, "segment": 0, "count_all": 5, "avg_P_speed": 25 / 7}]
    assert rows == oracle_rows(Q3.replace("SLIDE 5", "SLIDE 10"), events)


# ----------------------------------------------------------------------------------------------- properties

#: Pattern shapes (variables a, b, c positive; n, m, o negated) and the edge predicates that fit them.
SHAPES = [
    ("A+ a", ["a.x < NEXT(a).x", "a[i].x >= a[i-1].x", "a.x * 2 > NEXT(a).x", "a.x = NEXT(a).x",
              "a.x + NEXT(a).x > 3", "a.x != NEXT(a).x", "[a.x]"]),
    ("SEQ(A+ a, B b)", ["a.x <= NEXT(a).x", "b.x >= 2", "[a.x]"]),
    ("(SEQ(A+ a, B b))+", ["a.x > NEXT(a).x", "[a.x]"]),
    ("SEQ(A a, B b, C+ c)", ["a.x < b.x", "b.x >= a.x * 2", "a.x + b.x > 4", "a.x = b.x AND c.x < NEXT(c).x"]),
    ("SEQ(A a, B+ b, C c)", ["b.x < NEXT(b).x", "[b.x] AND b.x > NEXT(b).x", "a.id = 0"]),
    ("SEQ(A+ a, A b)", ["a.x < NEXT(a).x"]),
    ("SEQ(A a, A+ b, B c)", ["b.x >= NEXT(b).x"]),
    ("(A+ a)+", ["a.x + NEXT(a).x > 3"]),
    ("SEQ(A a, B b)", ["a.x < b.x", "a.x = b.x"]),
    ("SEQ(B b, A+ a)", ["[a.x]", "a.x > NEXT(a).x"]),
    ("SEQ(ANY(A, B) a, C+ c)", ["c.x < NEXT(c).x"]),
    ("SEQ(ANY(A, B)+ a, C c)", ["a.x < NEXT(a).x"]),
    ("SEQ(A a, B? b, C c)", []),
    ("SEQ(A a, B* b, C c)", []),
    ("SEQ(A a, B b) OR SEQ(C c, D d)", []),
    ("SEQ(A+ a, NOT C n, B b)", ["n.x > 1", "a.x < NEXT(a).x"]),
    ("SEQ(NOT C n, A+ a)", ["a.x > NEXT(a).x"]),
    ("SEQ(A+ a, NOT C n)", ["n.x > 1"]),
    ("SEQ(A+ a, NOT SEQ(C n, D m), B b)", ["n.x < m.x"]),
    ("(SEQ(A+ a, NOT SEQ(C n, NOT E o, D m), B b))+", []),
    ("(SEQ(A a, NOT C n))+", ["a.x < NEXT(a).x"]),
    ("SEQ(A+ a, NOT C+ n, B b)", []),
    ("SEQ(NOT C n, A+ a, NOT D m)", []),
    ("(SEQ(NOT C n, A a))+", []),
    ("SEQ(A? a, NOT C n, B b)", []),
    ("SEQ(A+ a, NOT A n, B b)", []),
    ("SEQ(A a, NOT (C n OR D m), B b)", []),
    ("SEQ(A a, (SEQ(B b, NOT C n))+, D d)", []),
    ("(SEQ(A a, B? b))+", []),
]
AGGREGATES = ["COUNT(*)", "COUNT(a)", "SUM(a.x)", "MIN(a.x)", "MAX(a.x)", "AVG(a.x)"]


@st.composite
def trend_queries(draw, shapes=SHAPES, aggregates=AGGREGATES, max_aggregates: int = 3,
                  windows: tuple[int, int] = (1, 8), slides: tuple[int, int] = (1, 9)) -> str:
    """A random trend-aggregate query: one of ``shapes`` (pattern, its usable predicates), maybe ``[id]`` (and
    GROUP BY id), maybe a predicate, 1..``max_aggregates`` of ``aggregates``, a window, maybe a SLIDE."""
    pattern, predicates = draw(st.sampled_from(shapes))
    conds = []
    if draw(st.booleans()):
        conds.append("[id]")
    if predicates and draw(st.integers(0, 2)):
        conds.append(draw(st.sampled_from(predicates)))
    aggs = draw(st.lists(st.sampled_from(aggregates), min_size=1, max_size=max_aggregates, unique=True))
    text = f"RETURN {', '.join(aggs)} PATTERN {pattern}"
    if conds:
        text += " WHERE " + " AND ".join(conds)
    if "[id]" in conds and draw(st.booleans()):
        text = text.replace("RETURN ", "RETURN id, ", 1) + " GROUP BY id"
    window = draw(st.integers(*windows))
    text += f" WITHIN {window}"
    if draw(st.booleans()):
        text += f" SLIDE {draw(st.integers(*slides))}"
    return text


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=trend_queries(), events=event_streams(types="ABCDE", max_size=8),
       cuts=st.lists(st.integers(0, 8), max_size=3), watermarks=st.lists(st.integers(0, 30), max_size=4),
       roundtrip=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_engine_equals_oracle(text, events, cuts, watermarks, roundtrip, seed):
    spec = sparkcep.compile(text).spec()
    got = run(spec, events, cuts, sorted(watermarks), roundtrip, seed)
    assert canonical(got) == canonical(oracle_rows(text, events)), text


#: Edge-predicate queries on longer streams: vertex trees across micro-batches, class graphs, invalidation.
LONG = [
    "RETURN COUNT(*) PATTERN A+ a WHERE a.x > NEXT(a).x",
    "RETURN COUNT(*), SUM(a.x) PATTERN A+ a WHERE a.x < NEXT(a).x",
    "RETURN COUNT(*) PATTERN SEQ(A+ a, B b) WHERE a.x >= NEXT(a).x",
    "RETURN COUNT(*), MAX(a.x) PATTERN SEQ(B b, A+ a) WHERE a[i].x <= a[i-1].x",
    "RETURN COUNT(*) PATTERN SEQ(A a, B b) WHERE a.x < b.x",
    "RETURN COUNT(*) PATTERN SEQ(A+ a, NOT B n, A c) WHERE a.x > NEXT(a).x",
    "RETURN COUNT(*), AVG(a.x) PATTERN A+ a WHERE [a.id] AND a.x > NEXT(a).x",
    "RETURN COUNT(*) PATTERN A+ a WHERE a.x = NEXT(a).x",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(query=st.sampled_from(LONG), window=st.integers(3, 15), slide=st.integers(1, 6),
       events=event_streams(types="AAAB", min_size=8, max_size=13, attrs={"x": (0, 9), "id": (0, 1)}, max_gap=2),
       cuts=st.lists(st.integers(0, 13), max_size=4), watermarks=st.lists(st.integers(0, 30), max_size=5),
       roundtrip=st.booleans())
def test_edge_predicates_on_longer_streams(query, window, slide, events, cuts, watermarks, roundtrip):
    text = f"{query} WITHIN {window} SLIDE {slide}"
    got = engine_rows(text, events, cuts=cuts, watermarks=sorted(watermarks), roundtrip=roundtrip)
    assert canonical(got) == canonical(oracle_rows(text, events)), text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=trend_queries(), events=event_streams(types="ABCDE", max_size=8, attrs={"x": (0, 4), "id": (0, 1)}),
       masked=st.booleans())
def test_prefiltered_mask_equals_oracle(text, events, masked):
    """Events that carry the Spark SQL filter's ``_mask`` bits (type and local predicates) give the same
    rows as events the engine tests itself."""
    spec = sparkcep.compile(text).spec()
    if masked:
        cs = trend_graph._compiled(spec)
        events = [{**e, "_mask": cs.mask_of(e)} for e in events]
    got = run(spec, events)
    assert canonical(got) == canonical(oracle_rows(text, [{k: v for k, v in e.items() if k != "_mask"}
                                                          for e in events])), text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=event_streams(types="AB", max_size=8, attrs={"x": (0, 4)}),
       floats=st.lists(st.floats(-5, 5, allow_nan=False), min_size=8, max_size=8))
def test_float_sums_are_exact_then_rounded(events, floats):
    for e, f in zip(events, floats, strict=False):
        e["x"] = f
    text = "RETURN SUM(a.x), AVG(a.x), MIN(a.x), COUNT(*) PATTERN SEQ(A+ a, B b) WITHIN 6 SLIDE 2"
    got, expected = engine_rows(text, events), oracle_rows(text, events)
    assert [(r["window_start"], r["count_all"], r["min_a_x"]) for r in got] == \
        [(r["window_start"], r["count_all"], r["min_a_x"]) for r in expected]
    for g, e in zip(got, expected, strict=True):
        assert g["sum_a_x"] == pytest.approx(e["sum_a_x"], abs=1e-9)
        assert g["avg_a_x"] == pytest.approx(e["avg_a_x"], abs=1e-9)


# ----------------------------------------------------------------------------------------------- engine contract


def test_exact_count_of_a_plus_over_100_events():
    events = [{"type": "A", "ts": t} for t in range(100)]
    rows = engine_rows("RETURN COUNT(*), COUNT(A) PATTERN A+ WITHIN 1000", events)
    assert rows[0]["count_all"] == 2 ** 100 - 1
    assert rows[0]["count_A"] == 100 * 2 ** 99  # each event is in half of the subsets
    assert type(rows[0]["count_all"]) is int


def test_windows_are_emitted_once_when_the_watermark_passes_their_end():
    spec = sparkcep.compile("RETURN COUNT(*) PATTERN SEQ(A+, B) WITHIN 10 SLIDE 5").spec()
    state = trend_engine.init_state()
    state, _ = trend_engine.step(spec, state, [{"type": "A", "ts": 1}, {"type": "B", "ts": 7},
                                               {"type": "A", "ts": 11}, {"type": "B", "ts": 12}])
    state, rows = trend_engine.advance(spec, state, 9)
    assert rows == []  # [0, 10) has not ended
    state, rows = trend_engine.advance(spec, state, 10)
    assert rows == [{"window_start": 0, "window_end": 10, "count_all": 1}]
    state, rows = trend_engine.advance(spec, state, 14)
    assert rows == []
    state, rows = trend_engine.advance(spec, state, 15)
    assert rows == [{"window_start": 5, "window_end": 15, "count_all": 1}]
    state, rows = trend_engine.advance(spec, state, math.inf)
    assert rows == [{"window_start": 10, "window_end": 20, "count_all": 1}]
    assert trend_engine.advance(spec, state, math.inf) == (state, [])


def test_late_and_invalid_events_are_counted_not_used():
    spec = sparkcep.compile("RETURN COUNT(*) PATTERN A+ WITHIN 10").spec()
    state = trend_engine.init_state()
    state, _ = trend_engine.step(spec, state, [{"type": "A", "ts": 5}, {"type": "A", "ts": None},
                                               {"type": "A", "ts": float("nan")}, {"type": "Z", "ts": 6}])
    state, _ = trend_engine.advance(spec, state, 6)
    state, _ = trend_engine.step(spec, state, [{"type": "A", "ts": 4}, {"type": "A", "ts": 6},
                                               {"type": "A", "ts": 7}])
    assert (state.late, state.invalid) == (1, 2)  # A at the watermark's ts 6 is not late (LANGUAGE.md §1)
    state, rows = trend_engine.advance(spec, state, math.inf)
    assert rows == [{"window_start": 0, "window_end": 10, "count_all": 7}]


def test_equal_timestamps_never_follow_each_other():
    events = [{"type": "A", "ts": 1}, {"type": "A", "ts": 1}, {"type": "B", "ts": 1}, {"type": "B", "ts": 2}]
    text = "RETURN COUNT(*) PATTERN SEQ(A+, B) WITHIN 10"
    assert engine_rows(text, events) == [{"window_start": 0, "window_end": 10, "count_all": 2}]


def test_equal_timestamps_straddling_micro_batches_lateness_0():
    """The issue's repro on the engine: A@1 B@2 | B@2 B@3, each batch followed by Spark's watermark (the
    newest ts so far, lateness 0): the second B@2 is not late, and the count is the batch one."""
    spec = sparkcep.compile("RETURN COUNT(*) PATTERN SEQ(A+, B) WITHIN 10").spec()
    state, rows = trend_engine.init_state(), []
    for batch in ([("A", 1), ("B", 2)], [("B", 2), ("B", 3)]):
        state, _ = trend_engine.step(spec, state, [{"type": t, "ts": ts} for t, ts in batch])
        state, out = trend_engine.advance(spec, state, max(ts for _, ts in batch))
        rows += out
    rows += trend_engine.advance(spec, state, math.inf)[1]
    assert state.late == 0 and rows == [{"window_start": 0, "window_end": 10, "count_all": 3}]


def test_mask_bits_override_types():
    spec = sparkcep.compile("RETURN COUNT(*) PATTERN SEQ(A+ a, B b) WHERE a.x > 1 WITHIN 10").spec()
    events = [{"type": "A", "ts": 1, "x": 0, "_mask": 1}, {"type": "A", "ts": 2, "x": 5, "_mask": 0},
              {"type": "B", "ts": 3, "_mask": 2}]
    state, _ = trend_engine.step(spec, trend_engine.init_state(), events)
    _, rows = trend_engine.advance(spec, state, math.inf)
    assert rows == [{"window_start": 0, "window_end": 10, "count_all": 1}]  # the filter's verdict wins


def test_rows_carry_group_values_and_merge_partitions():
    text = ("RETURN sector, COUNT(*), AVG(S.price) PATTERN Stock S+ WHERE [company, sector] GROUP BY sector "
            "WITHIN 10")
    events = [{"type": "Stock", "ts": 1, "company": "x", "sector": "s", "price": 1},
              {"type": "Stock", "ts": 2, "company": "y", "sector": "s", "price": 4},
              {"type": "Stock", "ts": 3, "company": "y", "sector": "s", "price": 2}]
    spec = sparkcep.compile(text).spec()
    per_partition = []
    for company in "xy":
        state, _ = trend_engine.step(spec, trend_engine.init_state(), [e for e in events if e["company"] == company])
        per_partition += trend_engine.advance(spec, state, math.inf)[1]
    assert {r["sector"] for r in per_partition} == {"s"}
    assert all(any(c.startswith(trend_aggregates_mod.PARTIAL) for c in r) for r in per_partition)
    merged = trend_engine.merge_rows(spec, per_partition)
    # trends: (1) | (4), (2), (4, 2): 4 trends, prices 1 + 4 + 2 + 4 + 2 over 5 events
    assert merged == [{"window_start": 0, "window_end": 10, "sector": "s", "count_all": 4, "avg_S_price": 2.6}]
    assert merged == oracle_rows(text, events)


def test_state_round_trip_mid_stream():
    spec = sparkcep.compile("RETURN COUNT(*), MAX(a.x) PATTERN SEQ(A+ a, NOT C, B) WHERE a.x < NEXT(a).x "
                            "WITHIN 8 SLIDE 2").spec()
    rnd = random.Random(3)
    events = [{"type": rnd.choice("ABC"), "ts": t, "x": rnd.randint(0, 5)} for t in range(60)]
    straight, stored = trend_engine.init_state(), trend_engine.init_state()
    rows_a, rows_b = [], []
    for lo in range(0, 60, 7):
        chunk = events[lo:lo + 7]
        straight, _ = trend_engine.step(spec, straight, chunk)
        straight, out = trend_engine.advance(spec, straight, chunk[-1]["ts"])
        rows_a += out
        stored, _ = trend_engine.step(spec, TrendState.from_bytes(stored.to_bytes()), chunk)
        stored, out = trend_engine.advance(spec, TrendState.from_bytes(stored.to_bytes()), chunk[-1]["ts"])
        rows_b += out
    rows_a += trend_engine.advance(spec, straight, math.inf)[1]
    rows_b += trend_engine.advance(spec, stored, math.inf)[1]
    assert rows_a == rows_b == oracle_rows(
        "RETURN COUNT(*), MAX(a.x) PATTERN SEQ(A+ a, NOT C, B) WHERE a.x < NEXT(a).x WITHIN 8 SLIDE 2", events)


@pytest.mark.parametrize("text", [
    "RETURN COUNT(*) PATTERN SEQ(A+, B) WITHIN 50 SLIDE 10",
    "RETURN COUNT(*), SUM(S.x) PATTERN SEQ(NOT C, S+, NOT D) WHERE S.x > NEXT(S).x WITHIN 50 SLIDE 10",
    "RETURN COUNT(*) PATTERN SEQ(A a, B+ b) WHERE [b.x] AND b.y != NEXT(b).y WITHIN 50 SLIDE 25",
])
def test_state_stays_bounded_on_a_long_stream(text):
    """Windows, stored vertices and negation state are dropped as the watermark passes: the serialized
    state after each batch does not grow with the stream."""
    spec = sparkcep.compile(text).spec()
    rnd = random.Random(5)
    state = trend_engine.init_state()
    sizes = []
    emitted = 0
    for lo in range(0, 20_000, 500):
        chunk = [{"type": rnd.choice("ABCDS"), "ts": t, "x": rnd.randint(0, 3), "y": rnd.randint(0, 9)}
                 for t in range(lo, lo + 500)]
        state, _ = trend_engine.step(spec, state, chunk)
        state, rows = trend_engine.advance(spec, state, chunk[-1]["ts"])
        emitted += len(rows)
        sizes.append(len(state.to_bytes()))
    assert emitted > 100
    assert max(sizes[10:]) < 2 * max(sizes[:10])
    assert len(state.runs) <= 5  # one graph per value of b.x (0..3) and the base one


def test_wakeup_and_is_empty():
    spec = sparkcep.compile("RETURN COUNT(*) PATTERN SEQ(NOT C, A+) WITHIN 10").spec()
    state = trend_engine.init_state()
    assert trend_engine.is_empty(state) and trend_engine.wakeup(spec, state) is None
    state, _ = trend_engine.step(spec, state, [{"type": "A", "ts": 3}, {"type": "C", "ts": 14}])
    assert trend_engine.wakeup(spec, state) == 10  # A at 3 must be processed before [0, 10) ends
    state, _ = trend_engine.advance(spec, state, 3)
    assert len(state.pending) == 2  # more events of ts 3 may come: A at 3 waits
    state, _ = trend_engine.advance(spec, state, 4)
    assert trend_engine.wakeup(spec, state) == 10  # the end of [0, 10)
    state, rows = trend_engine.advance(spec, state, 10)
    assert rows == [{"window_start": 0, "window_end": 10, "count_all": 1}]
    assert not trend_engine.is_empty(state)  # C at 14 is still buffered
    state, _ = trend_engine.advance(spec, state, 14)
    assert trend_engine.wakeup(spec, state) == 20  # C at 14 waits for a later watermark, before [10, 20) ends
    state, _ = trend_engine.advance(spec, state, 15)
    assert trend_engine.wakeup(spec, state) == 24  # C at 14 can block trends until [10, 20) is gone
    state, _ = trend_engine.advance(spec, state, 24)
    assert trend_engine.is_empty(state)


@pytest.mark.parametrize(("text", "message"), [
    ("RETURN COUNT(*) PATTERN SEQ(A a, B+ b, C c) WHERE a.x < c.x WITHIN 5", "adjacent"),
    ("RETURN COUNT(*) PATTERN SEQ(A+ a, B b) WHERE a.x < b.x AND [id] OR a.x > 1 WITHIN 5", "adjacent"),
    ("RETURN COUNT(*) PATTERN SEQ(A a, NOT E e, B b) WHERE e.x > a.x WITHIN 5", "negated"),
    ("RETURN COUNT(*) PATTERN SEQ(A+ a, B b) WHERE a[i].x > a[1].x WITHIN 5", "adjacent"),
])
def test_unsupported_shapes_are_rejected(text, message):
    with pytest.raises(EngineUnsupportedError, match=message):
        trend_engine.check(sparkcep.compile(text).spec())


def test_match_specs_are_not_trend_specs():
    with pytest.raises(CEPError, match="TrendSpec"):
        trend_engine.check(sparkcep.compile("PATTERN SEQ(A a, B b) WITHIN 5").spec())


# ----------------------------------------------------------------------------------------------- big counts

#: COUNT(*) templates whose transitions are all plain: their running counts get promoted to GMP integers.
PLAIN_COUNTS = ["A+ a", "SEQ(A+ a, B b)", "(SEQ(A+ a, B b))+", "SEQ(A a, B* b, C c)", "SEQ(A a, B b) OR SEQ(C c, D d)",
                "(SEQ(A a, B? b))+", "SEQ(A+ a, B+ b)"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=st.sampled_from(PLAIN_COUNTS), window=st.integers(1, 8), slide=st.integers(1, 9),
       events=event_streams(types="ABCD", max_size=10), cuts=st.lists(st.integers(0, 10), max_size=3),
       watermarks=st.lists(st.integers(0, 30), max_size=4), roundtrip=st.booleans(), chunk=st.integers(1, 3))
def test_gmp_promoted_counts_equal_oracle(pattern, window, slide, events, cuts, watermarks, roundtrip, chunk):
    """With every count promoted to a GMP integer from the first bit on, scanned in chunks of 1-3 events (and
    pickled between batches), the rows are the oracle's, as Python ints."""
    text = f"RETURN COUNT(*) PATTERN {pattern} WITHIN {window} SLIDE {slide}"
    spec = sparkcep.compile(text).spec()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trend_aggregates_mod, "BIG_BITS", 0)
        mp.setattr(trend_engine, "BIG_BITS", 0)
        mp.setattr(trend_graph, "BIG_BITS", 0)
        mp.setattr(trend_aggregates_mod, "SCAN_CHUNK", chunk)
        mp.setattr(trend_engine, "SCAN_CHUNK", chunk)
        got = run(spec, events, cuts, sorted(watermarks), roundtrip)
    assert all(type(r["count_all"]) is int for r in got)
    assert canonical(got) == canonical(oracle_rows(text, events)), text


def test_big_counts_are_exact_python_ints_across_batches_and_round_trips():
    """SEQ(A+, B) over n A's and one B has 2^n - 1 trends: a 5,000-bit count, promoted to GMP mid-stream, kept
    exact through a serialized state, returned as a Python int."""
    pytest.importorskip("gmpy2")
    spec = sparkcep.compile("RETURN COUNT(*) PATTERN SEQ(A+, B) WITHIN 100000").spec()
    assert trend_graph._compiled(spec).promote
    events = [{"type": "A", "ts": t} for t in range(5000)]
    state = trend_engine.init_state()
    for lo in range(0, 5000, 1000):
        state, _ = trend_engine.step(spec, state, events[lo:lo + 1000])
        state, rows = trend_engine.advance(spec, state, lo + 999)
        assert rows == []
        state = TrendState.from_bytes(state.to_bytes())
    assert type(state.runs[None].wins[0].R[0]) is not int  # promoted (and survived the round trip)
    state, _ = trend_engine.step(spec, state, [{"type": "B", "ts": 5000}, {"type": "B", "ts": 5001}])
    state, rows = trend_engine.advance(spec, state, math.inf)
    assert rows == [{"window_start": 0, "window_end": 100000, "count_all": 2 * (2 ** 5000 - 1)}]
    assert type(rows[0]["count_all"]) is int


def test_without_gmpy2_counts_stay_python_ints():
    spec = sparkcep.compile("RETURN COUNT(*) PATTERN SEQ(A+, B) WITHIN 100000").spec()
    events = [{"type": "A", "ts": t} for t in range(2000)] + [{"type": "B", "ts": 2000}]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trend_aggregates_mod, "_mpz", None)
        mp.setattr(trend_engine, "_mpz", None)
        mp.setattr(trend_graph, "_mpz", None)
        trend_graph._compiled.cache_clear()
        assert not trend_graph._compiled(spec).promote
        state, _ = trend_engine.step(spec, trend_engine.init_state(), events)
        assert trend_engine.advance(spec, state, math.inf)[1] == [
            {"window_start": 0, "window_end": 100000, "count_all": 2 ** 2000 - 1}]
    trend_graph._compiled.cache_clear()


def test_step_and_advance_restore_the_garbage_collector():
    import gc

    spec = sparkcep.compile("RETURN COUNT(*) PATTERN SEQ(A+, B) WITHIN 10").spec()
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            gc.enable() if enabled else gc.disable()
            state, _ = trend_engine.step(spec, trend_engine.init_state(), fig6_events())
            assert gc.isenabled() is enabled
            trend_engine.advance(spec, state, math.inf)
            assert gc.isenabled() is enabled
        gc.enable()
        with pytest.raises(AttributeError):
            trend_engine.step(spec, trend_engine.init_state(), [None])  # not an event: fails inside the pause
        assert gc.isenabled()
    finally:
        gc.enable() if was else gc.disable()


# ----------------------------------------------------------------------------------------------- describe


def describe(text: str) -> str:
    return "\n".join(trend_graph.describe(sparkcep.compile(text).spec()))


def test_describe_shows_the_template_of_nested_kleene_with_negation():
    """GRETA Example 2 / Fig. 7(a): the positive template of (SEQ(A+, B))+ with its Kleene loops, the two
    negative sub-patterns with their own graphs, and the transitions each invalidates."""
    text = describe("RETURN COUNT(*) PATTERN (SEQ(A+, NOT SEQ(C, NOT E, D), B))+ WITHIN 10")
    assert text.splitlines()[:6] == [
        "template (GRETA §4.1): 2 states, 3 transitions",
        "  state A: A, START",
        "  state B: B, END",
        "  A -> A (Kleene +): running aggregate per state and window",
        "  A -> B (SEQ): invalidation queue, invalid if an N0 trend lies between the two events",
        "  B -> A (Kleene +): running aggregate per state and window",
    ]
    assert "negation N0 = NOT SEQ(C, NOT E, D) (GRETA §5, its own graph), a finished trend invalidates: A -> B" in text
    assert "negation N1 = NOT E (GRETA §5, its own graph), a finished trend invalidates: C -> D" in text
    assert "  C -> D (SEQ): invalidation queue, invalid if an N1 trend lies between the two events" in text


@pytest.mark.parametrize(("where", "expected"), [
    ("b.x < NEXT(b).x", "b.x < NEXT(b).x: edge predicate on b -> b, index: vertex tree (Fenwick tree + sorted levels)"),
    ("b[i].x = b[i-1].x", "b[i].x = b[i-1].x: edge predicate on b -> b, index: hash map"),
    ("b.x != NEXT(b).x", "b.x != NEXT(b).x: edge predicate on b -> b, index: scan of the stored vertices"),
    ("[b.id]", "[b.id]: scoped equivalence: one graph per value of b.id"),
    ("b.x > 2", "b.x > 2: vertex filter on b, pushed to the Spark SQL filter"),
])
def test_describe_classifies_each_conjunct_with_its_index(where, expected):
    text = describe(f"RETURN COUNT(*) PATTERN SEQ(A a, B+ b) WHERE {where} WITHIN 10")
    assert f"  {expected}" in text.splitlines(), text


def test_describe_puts_a_predicate_between_two_single_events_on_their_transition():
    text = describe("RETURN COUNT(*) PATTERN SEQ(A a, B b, C c) WHERE a.x < b.y AND b.z = c.z WITHIN 10")
    assert "  a.x < b.y: edge predicate on a -> b, index: vertex tree (Fenwick tree + sorted levels)" in text
    assert "    keyed by a.x of the earlier event, probed with b.y of the later one" in text
    assert "  b -> c (SEQ): hash map" in text


def test_describe_names_the_executor_and_the_integers():
    assert describe("RETURN COUNT(*) PATTERN SEQ(A+, B) WITHIN 10").endswith(
        "executor: generated COUNT(*) scan (Algorithm 2, Theorem 4.3), exact integers, GMP above 1500 bits")
    assert describe("RETURN COUNT(*), SUM(A.x) PATTERN SEQ(NOT C, A+) WITHIN 10").endswith(
        "executor: template interpreter (Algorithm 2 with §5 invalidation), per vertex and window "
        "[count, COUNT(A.x), SUM(A.x)] (Theorem 9.1)")
    assert "state A: A, START, END, START only if no N0 trend lies between the window start and it" in describe(
        "RETURN COUNT(*) PATTERN SEQ(NOT C, A+) WITHIN 10")


def test_describe_reports_what_the_engine_refuses():
    # sparkcep.compile refuses the query itself (check is the contract); describe still explains the spec
    text = "RETURN COUNT(*) PATTERN SEQ(A a, B+ b, C c) WHERE a.x < c.x WITHIN 5"
    text = "\n".join(trend_graph.describe(CompiledQuery(parse_query(text), text).spec()))
    assert text.startswith("template: not supported by the trend engine:") and "adjacent" in text


def test_explain_prints_the_engine_template():
    plan = sparkcep.compile("RETURN COUNT(*) PATTERN SEQ(A+ a, B b) WHERE a.x > NEXT(a).x WITHIN 10").explain()
    assert "          a -> a (Kleene +): vertex tree (Fenwick tree + sorted levels)" in plan.splitlines()
