"""The shared executor (pure, no JVM): shared execution == non-shared execution == each query alone on the
GRETA trend engine == the brute-force oracle, on random workloads, streams, windows, micro-batches and
state round trips (DESIGN.md principle 2)."""

from __future__ import annotations

import itertools
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.ir.sharing import SharedQuery, SharedSpec
from sparkcep.oracles.match import trend_aggregates
from sparkcep.runtime_udfs.shared import engine as shared_engine
from sparkcep.runtime_udfs.shared.engine import SharedState
from sparkcep.runtime_udfs.trend import engine as trend_engine
from tests.strategies import event_streams


def run_shared(spec: SharedSpec, events: list[dict], cuts=(), roundtrip=False) -> list[dict]:
    """One engine per key value, fed ts-ordered micro-batches split at ``cuts`` with the watermark at the
    next batch's first ts after each (not late, LANGUAGE.md §1: only an older event is; equal timestamps may
    straddle batches), the state optionally serialized in between, then flushed."""
    parts: dict[tuple, list[dict]] = {}
    for e in sorted(events, key=lambda e: e["ts"]):
        parts.setdefault(tuple(e.get(k) for k in spec.key), []).append(e)
    rows = []
    for part in parts.values():
        state = shared_engine.init_state()
        bounds = sorted({c for c in cuts if 0 < c < len(part)})
        pieces = [part[a:b] for a, b in zip([0, *bounds], [*bounds, len(part)], strict=True)]
        for i, piece in enumerate(pieces):
            state, out = shared_engine.step(spec, state, piece)
            assert out == []
            following = pieces[i + 1][0]["ts"] if i + 1 < len(pieces) else math.inf
            state, out = shared_engine.advance(spec, state, following)  # no event still to come is older
            rows.extend(out)
            if roundtrip:
                state = SharedState.from_bytes(state.to_bytes())
        state, out = shared_engine.advance(spec, state, math.inf)
        rows.extend(out)
        assert shared_engine.is_empty(state)
    return shared_engine.merge_rows(spec, rows) if set(spec.key) != set(spec.group_by) else rows


def per_query(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        r = dict(r)
        out.setdefault(r.pop("query"), []).append(r)
    return {k: sorted(v, key=lambda r: (r["window_start"], r.get("id") or 0)) for k, v in out.items()}


def alone(q: sparkcep.CompiledQuery, events: list[dict]) -> list[dict]:
    spec = q.spec()
    parts: dict[tuple, list[dict]] = {}
    for e in events:
        parts.setdefault(tuple(e.get(k) for k in spec.key), []).append(e)
    rows = []
    for part in parts.values():
        state, _ = trend_engine.step(spec, trend_engine.init_state(), part)
        rows.extend(trend_engine.advance(spec, state, math.inf)[1])
    if set(spec.key) != set(spec.group_by):
        rows = trend_engine.merge_rows(spec, rows)
    return sorted(rows, key=lambda r: (r["window_start"], r.get("id") or 0))


def by_window(rows):
    return sorted(rows, key=lambda r: (r["window_start"], r.get("id") or 0))


@st.composite
def workload_texts(draw):
    window = draw(st.integers(2, 9))
    slide = draw(st.integers(1, window))
    group = draw(st.booleans())
    n = draw(st.integers(2, 5))
    lines = []
    for i in range(n):
        pattern = draw(st.lists(st.sampled_from("ABCD"), min_size=1, max_size=4))
        ret = "RETURN id, COUNT(*)" if group else "RETURN COUNT(*)"
        lines.append(f"q{i}: {ret} PATTERN SEQ({', '.join(pattern)}) WHERE [id] WITHIN {window} SLIDE {slide}")
    rates = {t: draw(st.integers(1, 8)) for t in "ABCD"}
    return ";\n".join(lines), rates


def assert_shared_equals_non_shared_alone_and_oracle(w, events, cuts, roundtrip) -> None:
    """Every query of ``w``: the shared plan (in micro-batches ``cuts``, state round trips) = the non-shared
    plan = the query alone on the GRETA engine = the oracle, window by window."""
    [spec] = w.specs()
    [baseline] = w.specs(share=False)
    shared = per_query(run_shared(spec, events, cuts, roundtrip))
    non_shared = per_query(run_shared(baseline, events))
    for q in w.queries:
        expected = by_window(trend_aggregates(q.query, events))
        assert shared.get(q.name, []) == expected, (q.name, spec)
        assert non_shared.get(q.name, []) == expected
        assert alone(q, events) == expected


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(workload_texts(), event_streams(types="ABCDE", max_size=9, attrs={"id": (0, 1)}),
       st.lists(st.integers(1, 8), max_size=3), st.booleans())
def test_shared_equals_non_shared_equals_alone_equals_oracle(workload, events, cuts, roundtrip):
    text, rates = workload
    w = sparkcep.api.CompiledWorkload(tuple(sparkcep.compile_workload(text)), _plan_with_rates(text, rates))
    assert all(q.reason is None for q in w.plan.queries)
    assert_shared_equals_non_shared_alone_and_oracle(w, events, cuts, roundtrip)


def _plan_with_rates(text, rates):
    from sparkcep.compiler.optimizer.sharing import optimize_workload
    from sparkcep.compiler.optimizer.sharing.scope import sharing_query

    qs = sparkcep.compile_workload(text)
    return optimize_workload([sharing_query(q.name, q.spec()) for q in qs], rates, budget=None)


def test_sharon_fig1_workload_shares_and_agrees_with_the_oracle():
    text = open("tests/fixtures/workloads/sharon_traffic.cep").read().replace("10 minutes", "10").replace(
        "1 minute", "2")
    rates = {"OakSt": 5, "MainSt": 5, "ParkAve": 2, "StateSt": 1, "WestSt": 1, "ElmSt": 3}
    plan = _plan_with_rates(text, rates)
    assert plan.chosen  # something is shared
    w = sparkcep.api.CompiledWorkload(tuple(sparkcep.compile_workload(text)), plan)
    [spec] = w.specs()
    assert len(spec.segments) < sum(len(q.segments) for q in spec.queries)
    streets = ["ElmSt", "ParkAve", "OakSt", "MainSt", "WestSt", "StateSt", "OakSt", "MainSt", "StateSt"]
    events = [{"type": t, "ts": i, "vehicle": v} for v in (1, 2) for i, t in enumerate(streets * 2)]
    rows = per_query(run_shared(spec, events, cuts=(3, 7, 11)))
    for q in w.queries:
        assert rows.get(q.name, []) == by_window(trend_aggregates(q.query, events)), q.name
    assert any(rows.values())


def test_paper_example3_combination():
    spec = SharedSpec((("ab", ("A", "B")), ("cd", ("C", "D"))), (SharedQuery("q", "n", ("ab", "cd")),), 100, 100)
    events = [{"type": t, "ts": i} for i, t in enumerate("ABCABBCDD", start=1)]
    q = sparkcep.compile("RETURN COUNT(*) AS n PATTERN SEQ(A, B, C, D) WITHIN 100")
    [row] = run_shared(spec, events)
    assert row["n"] == trend_aggregates(q.query, events)[0]["n"]


def test_late_and_invalid_events_are_counted():
    spec = SharedSpec((("ab", ("A", "B")),), (SharedQuery("q", "c", ("ab",)),), 10, 10)
    state, _ = shared_engine.step(spec, shared_engine.init_state(), [{"type": "A", "ts": 5}])
    state, _ = shared_engine.advance(spec, state, 6)
    state, _ = shared_engine.step(spec, state, [{"type": "B", "ts": 6}, {"type": "B", "ts": None},
                                                 {"type": "B", "ts": 4}, {"type": "B", "ts": 7}])
    assert (state.late, state.invalid) == (1, 1)  # B at the watermark's ts 6 is not late (LANGUAGE.md §1)
    assert shared_engine.advance(spec, state, math.inf)[1] == [
        {"query": "q", "window_start": 0, "window_end": 10, "c": 2}]


# --------------------------------------------------------------------- aggregates other than COUNT(*) (issue 5.3)

AGGREGATES = ("count(*)", "count", "sum", "avg", "min", "max")


@st.composite
def aggregate_workloads(draw):
    """Queries with named variables returning COUNT(*), COUNT(v), SUM/AVG/MIN/MAX(v.x) in any mix."""
    window = draw(st.integers(2, 9))
    slide = draw(st.integers(1, window))
    group = draw(st.booleans())
    lines = []
    for i in range(draw(st.integers(2, 4))):
        types = draw(st.lists(st.sampled_from("ABC"), min_size=1, max_size=4))
        items = []
        for f in draw(st.lists(st.sampled_from(AGGREGATES), min_size=1, max_size=3, unique=True)):
            v = f"v{draw(st.integers(0, len(types) - 1))}"
            items.append("COUNT(*)" if f == "count(*)" else f"COUNT({v})" if f == "count" else f"{f.upper()}({v}.x)")
        ret = ", ".join((["id"] if group else []) + items)
        seq = ", ".join(f"{t} v{k}" for k, t in enumerate(types))
        lines.append(f"q{i}: RETURN {ret} PATTERN SEQ({seq}) WHERE [id] WITHIN {window} SLIDE {slide}")
    return ";\n".join(lines), {t: draw(st.integers(1, 8)) for t in "ABC"}


@st.composite
def valued_streams(draw):
    """Events with ``id`` and a numeric ``x`` (ints and exact binary fractions), ``x`` sometimes missing."""
    events = draw(event_streams(types="ABCD", max_size=9, attrs={"id": (0, 1)}))
    for e in events:
        if draw(st.integers(0, 4)):
            e["x"] = draw(st.sampled_from([-3, -1, 0, 2, 5, 2.5, -1.25]))
    return events


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(aggregate_workloads(), valued_streams(), st.lists(st.integers(1, 8), max_size=3), st.booleans())
def test_aggregates_shared_equal_alone_and_the_oracle(workload, events, cuts, roundtrip):
    """COUNT(v), SUM/AVG/MIN/MAX(v.x) through the shared executor (measured counts, Sharon §3.3's
    combination with the product rule): shared == non-shared == each query alone on the GRETA engine == the
    brute-force oracle, with micro-batches, state round trips, and partitions merged (no GROUP BY)."""
    from sparkcep.compiler.optimizer.sharing import optimize_workload
    from sparkcep.compiler.optimizer.sharing.scope import sharing_query

    text, rates = workload
    queries = tuple(sparkcep.compile_workload(text))
    plan = optimize_workload([sharing_query(q.name, q.spec(), aggregates=True) for q in queries], rates,
                             budget=None)
    assert all(q.reason is None for q in plan.queries)
    w = sparkcep.api.CompiledWorkload(queries, plan)
    assert_shared_equals_non_shared_alone_and_oracle(w, events, cuts, roundtrip)


def test_aggregates_of_a_shared_segment_used_twice_in_a_query():
    """q holds the shared (A, B) twice; SUM over the second occurrence's B only, MIN over the first's A."""
    text = ("q: RETURN COUNT(*), SUM(d.x), MIN(a.x), COUNT(c) PATTERN SEQ(A a, B b, A c, B d) WITHIN 20;"
            "r: RETURN SUM(b.x), MAX(b.x) PATTERN SEQ(A a, B b) WITHIN 20")
    queries = tuple(sparkcep.compile_workload(text))
    from sparkcep.compiler.optimizer.sharing import optimize_workload
    from sparkcep.compiler.optimizer.sharing.scope import sharing_query

    plan = optimize_workload([sharing_query(q.name, q.spec(), aggregates=True) for q in queries], budget=None)
    [spec] = sparkcep.api.CompiledWorkload(queries, plan).specs()
    assert [q.segments for q in spec.queries] == [(plan.chosen[0], plan.chosen[0]), (plan.chosen[0],)]
    events = [{"type": t, "ts": i, "x": x}
              for i, (t, x) in enumerate(zip("ABABAB", [3, 1, -2, 4, 7, 2.5], strict=True))]
    rows = per_query(run_shared(spec, events))
    for q in queries:
        assert rows[q.name] == by_window(trend_aggregates(q.query, events)) == alone(q, events), q.name
    assert rows["q"][0]["sum_d_x"] == sum(
        events[d]["x"] for a, b, c, d in itertools.combinations(range(6), 4)
        if "".join(events[i]["type"] for i in (a, b, c, d)) == "ABAB")
