"""The vectorized sequence-scan prefilter (``runtime_udfs.match.prefilter``) without a JVM.

The property: for random streams with ties in ts, many keys and any arrival order, running the match engine on
the rows the prefilter keeps gives exactly the matches of all rows, which are the oracle's; for sequences of
2–5 components, Kleene (with iterator and aggregate predicates), ANY, OR, T*/T?, repeated groups, negation at
the start, middle and end (single, ANY, negated sequences), windows small and large, and collapsed output.
Masks are computed as the Spark SQL filter does (type test and local predicates per component).
"""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.ir.spec import Component, MatchSpec, with_default_outputs
from sparkcep.oracles.match import matches
from sparkcep.runtime_udfs.match import engine as match_engine
from sparkcep.runtime_udfs.match.compile import Plan
from sparkcep.runtime_udfs.match.engine import EngineUnsupportedError
from sparkcep.runtime_udfs.match.prefilter import SequenceScan, _key_ts_order, _shape, prefilter, within
from sparkcep.spark.results import canonical
from tests.test_match_collapsed import QUERIES as COLLAPSED_QUERIES
from tests.test_match_semantics import COLUMNS, compiled, oracle_rows, queries, run

# ----------------------------------------------------------------------------------------------- helpers


def columns(spec: MatchSpec, events: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(group_ids, ts, mask)`` of ``events`` as the Spark batch path hands them over: dense ids of the values
    of ``spec.key`` (a missing attribute is the None key), ts, and ``_mask`` as the SQL filter computes it."""
    plan = Plan(spec)
    ids: dict[tuple, int] = {}
    group = [ids.setdefault(tuple(e.get(a) for a in spec.key), len(ids)) for e in events]
    raw = [e["ts"] for e in events]
    # integer ts as the batch path hands them over: int64 (uint64 beyond it), compared exactly; else float64
    ts = np.array(raw) if raw and all(isinstance(t, int) for t in raw) else np.array(raw, dtype=np.float64)
    return np.array(group, dtype=np.int64), ts, np.array([plan.mask_of(e) for e in events], dtype=np.int64)


def kept(spec: MatchSpec, events: list[dict]) -> list[dict]:
    """The events the prefilter keeps, in input order, carrying their ``_mask`` (as the batch path feeds them)."""
    scan = prefilter(spec)
    assert scan is not None
    group, ts, mask = columns(spec, events)
    keep = scan(group, ts, mask)
    assert keep.dtype == bool and keep.shape == (len(events),)
    return [{**e, "_mask": int(m)} for e, m, k in zip(events, mask, keep, strict=True) if k]


def assert_exact(text: str, events: list[dict], *, collapsed: bool = False) -> tuple[int, int]:
    """Engine on the kept rows == engine on all rows (== the oracle's rows, for enumerated output); returns
    (kept, all) row counts."""
    if collapsed:
        spec = with_default_outputs(sparkcep.compile(text, collapsed=True).spec(), COLUMNS)
    else:
        q, spec = compiled(text)
    try:
        match_engine.check(spec)
    except EngineUnsupportedError:
        assert prefilter(spec) is None  # what the engine refuses is not prefiltered either
        reject()
    some = kept(spec, events)
    everything = canonical(run(spec, events))
    assert canonical(run(spec, some)) == everything, text
    if not collapsed:
        assert everything == canonical(oracle_rows(q, events)), text
    return len(some), len(events)


@st.composite
def keyed_streams(draw, types: str = "ABCDE", min_size: int = 0, max_size: int = 24, keys: int = 4,
                  max_gap: int = 3) -> list[dict]:
    """Events of ``types`` (a letter given twice is twice as frequent) over ``keys`` values of ``id``
    (sometimes missing), ``x`` in 0..4, ts steps 0..``max_gap`` (ties), in a random arrival order."""
    n = draw(st.integers(min_size, max_size))
    ts = draw(st.integers(0, 3))
    events = []
    for _ in range(n):
        e = {"type": draw(st.sampled_from(types)), "ts": ts, "x": draw(st.integers(0, 4))}
        if draw(st.integers(0, 9)):
            e["id"] = draw(st.integers(0, keys - 1))
        events.append(e)
        ts += draw(st.integers(0, max_gap))
    return draw(st.permutations(events))


@st.composite
def long_queries(draw, plain: bool = False) -> str:
    """SEQ of 2–5 positive components (single, ANY, T+, T*, T?, a nested OR, a repeated group, with OR, ?, T+ or
    another group inside where the engine supports it), maybe one
    negation (start, middle or end; single, ANY or a negated sequence) with a P- predicate, ``[id]`` or not,
    local, parameterized and iterator predicates, a window from 2 to 40 (most of the stream).  ``plain``: no
    negation and no predicate but ``[id]``."""
    n = draw(st.integers(2, 5))
    names = "abcde"[:n]
    comps, kleene = [], set()
    for v in names:
        t = draw(st.sampled_from("ABC"))
        form = draw(st.sampled_from(["single", "single", "single", "any", "plus", "star", "opt", "or", "group"]))
        if form == "any":
            comps.append(f"ANY({t}, {draw(st.sampled_from([x for x in 'ABCD' if x != t]))}) {v}")
        elif form in ("plus", "star"):
            comps.append(f"{t}{'+' if form == 'plus' else '*'} {v}[]")
            kleene.add(v)
        elif form == "opt":
            comps.append(f"{t}? {v}")
        elif form == "or":
            comps.append(f"({t} {v} OR {draw(st.sampled_from('ABC'))} o{v})")
        elif form == "group":
            u, w = draw(st.sampled_from("ABC")), draw(st.sampled_from("ABC"))
            comps.append(draw(st.sampled_from([f"(SEQ({t} {v}, {u} g{v}))+", f"(SEQ({t} {v}, {u} g{v}) OR {w} h{v})+",
                                               f"(SEQ({t} {v}, {u}? g{v}))+", f"(SEQ({t} {v}, ({u} g{v})+))+"])))
        else:
            comps.append(f"{t} {v}")
    conds = []
    if plain:
        if draw(st.integers(0, 3)):
            conds.append("[id]")
        return f"PATTERN SEQ({', '.join(comps)}){' WHERE [id]' if conds else ''} " \
            f"WITHIN {draw(st.sampled_from([2, 4, 6, 10, 16]))}"
    if draw(st.booleans()):
        t = draw(st.sampled_from("ABCDE"))
        neg = draw(st.sampled_from([f"!({t} z)", f"!(ANY({t}, E) z)", f"!(SEQ({t} z, E z2))"]))
        comps.insert(draw(st.sampled_from([0, len(comps) // 2, len(comps)])), neg)
        u = draw(st.sampled_from([v for v in names if v not in kleene] or ["z"]))
        conds.append(draw(st.sampled_from([f"z.x < {u}.x", "z.x != 2", f"z.x = {u}.x + 0"])))
    if draw(st.integers(0, 3)):
        conds.append("[id]")
    for _ in range(draw(st.integers(0, 2))):
        u, v = draw(st.lists(st.sampled_from(names), min_size=2, max_size=2, unique=True))
        if u in kleene or v in kleene or draw(st.booleans()):
            w = draw(st.sampled_from([x for x in names if x not in kleene] or ["-"]))
            if w != "-":
                conds.append(f"{w}.x {draw(st.sampled_from(['<', '>=', '!=']))} {draw(st.integers(0, 4))}")
        else:
            conds.append(f"{u}.x {draw(st.sampled_from(['<', '<=', '>', '!=']))} {v}.x")
    for v in sorted(kleene):
        conds.append(draw(st.sampled_from([f"{v}[i].x >= {v}[i-1].x", f"{v}[i].x > max({v}[..i-1].x)",
                                           f"count({v}[].x) <= 3", f"{v}[i].x != 3"])))
    text = f"PATTERN SEQ({', '.join(comps)})"
    if conds:
        text += " WHERE " + " AND ".join(conds)
    return text + f" WITHIN {draw(st.sampled_from([2, 4, 6, 6, 10, 10, 16, 40]))}"


# ----------------------------------------------------------------------------------------------- unit cases

AB = MatchSpec((Component("a", ("A",)), Component("b", ("B",))), (), 10, ())


def scan_of(spec: MatchSpec, rows: list[tuple[int, float, int]]) -> list[bool]:
    group, ts, mask = (np.array(c) for c in zip(*rows, strict=True))
    return prefilter(spec)(group.astype(np.int64), ts.astype(np.float64), mask.astype(np.int64)).tolist()


def test_window_is_exclusive_and_ties_never_follow_each_other():
    # a@0 b@10: span 10 is not < 10; a@5 b@5: equal ts; a@20 b@29 fits; the order of rows is kept
    rows = [(0, 10, 2), (0, 0, 1), (1, 5, 1), (1, 5, 2), (2, 29, 2), (2, 20, 1)]
    assert scan_of(AB, rows) == [False, False, False, False, True, True]


def test_chains_do_not_cross_keys_and_need_every_position():
    spec = MatchSpec(tuple(Component(v, (v.upper(),)) for v in "abc"), (), 10, ())
    # key 0: a b c (kept); key 1: a b, then c in key 2 (nothing); key 3: b before a (nothing)
    rows = [(0, 1, 1), (0, 2, 2), (0, 3, 4), (1, 1, 1), (1, 2, 2), (2, 3, 4), (3, 1, 2), (3, 2, 1), (3, 3, 4)]
    assert scan_of(spec, rows) == [True] * 3 + [False] * 6


def test_a_row_needs_one_chain_through_it_that_fits_not_a_fitting_prefix_and_suffix():
    """a@0 b@2 c@10 spans 10 = W; a@3 b@5 c@10 fits.  b@2 has a fitting prefix (a@0) and a fitting suffix
    (c@10, which is in a fitting chain) but no fitting chain: the latest start and earliest end decide."""
    spec = MatchSpec(tuple(Component(v, (v.upper(),)) for v in "abc"), (), 10, ())
    rows = [(0, 0, 1), (0, 2, 2), (0, 3, 1), (0, 5, 2), (0, 10, 4)]
    assert scan_of(spec, rows) == [False, False, True, True, True]


def test_an_automaton_is_scanned_along_its_edges_whatever_the_position_order():
    """A shape whose only path goes from position 1 back to position 0 (then to 2), and a loop 0 -> 1 -> 0."""
    back = SequenceScan((((1, 2, 4), (1,), (2,), ((2,), (0,), ())),), 0, 10.0)
    rows = [(0, 1, 2), (0, 2, 1), (0, 3, 4), (1, 1, 1), (1, 2, 2), (1, 3, 4)]
    group, ts, mask = (np.array(c) for c in zip(*rows, strict=True))
    assert back(group, ts.astype(float), mask).tolist() == [True, True, True, False, False, False]
    loop = SequenceScan((((1, 2), (0,), (1,), ((1,), (0,))),), 0, 10.0)
    rows = [(0, 1, 1), (0, 2, 2), (0, 3, 1), (0, 4, 2), (0, 20, 2)]
    group, ts, mask = (np.array(c) for c in zip(*rows, strict=True))
    assert loop(group, ts.astype(float), mask).tolist() == [True, True, True, True, False]


def test_a_row_filling_two_positions_is_not_used_twice():
    spec = MatchSpec((Component("a", ("A",)), Component("b", ("A",))), (), 10, ())
    assert scan_of(spec, [(0, 1, 3)]) == [False]
    assert scan_of(spec, [(0, 1, 3), (0, 2, 3)]) == [True, True]


def test_negative_rows_are_kept_only_where_a_positive_row_survives():
    spec = MatchSpec((Component("a", ("A",)), Component("n", ("N",), negated=True), Component("b", ("B",))), (),
                     10, ())
    rows = [(0, 1, 1), (0, 50, 2), (0, 3, 4),  # key 0: a b survive; n far away kept (conservatively)
            (1, 1, 1), (1, 2, 2)]  # key 1: only a and n: nothing survives, n dropped
    assert scan_of(spec, rows) == [True, True, True, False, False]


@pytest.mark.parametrize("ts", [[3, 1, 2, 1, 5, 0], [0.5, 0.25, 1e300, -3.5, 0.25, 7.0],
                                [2**60, 0, 5, 1, 2**60 - 1, 9]])
def test_rows_are_ordered_by_key_then_ts_on_both_sorts(ts):
    group = np.array([1, 0, 1, 0, 0, 1], dtype=np.int64)
    ts = np.array(ts, dtype=np.float64)
    order = _key_ts_order(group, ts)
    assert sorted(order.tolist()) == list(range(6))
    assert list(zip(group[order], ts[order], strict=True)) == sorted(zip(group, ts, strict=True))


def test_rows_without_a_usable_ts_are_left_to_the_engine():
    assert scan_of(AB, [(0, float("nan"), 1), (0, 1, 0), (0, float("inf"), 2)]) == [True, False, True]
    assert prefilter(AB)(np.array([], np.int64), np.array([]), np.array([], np.int64)).tolist() == []


@pytest.mark.parametrize("strategy", ["skip_till_next_match", "partition_contiguity", "strict_contiguity"])
def test_only_skip_till_any_match_is_eligible(strategy):
    text = f"PATTERN SEQ(A a, B b) USING {strategy} WHERE [id] WITHIN 5"
    assert prefilter(sparkcep.compile(text).spec()) is None
    assert isinstance(prefilter(sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 5").spec()), SequenceScan)


def test_why_skip_till_next_match_is_not_eligible():
    """Under skip_till_next_match a run must take the next relevant event: over a0 b1 b2 c2 the run of a0 takes
    b1 and b2, and c2 (tied with b2) cannot follow: no match.  b2 is in no chain (nothing after it), so the scan
    would drop it, and the run a0 b1 c2 would match: dropping a row in no match changes the matches."""
    q, spec = compiled("PATTERN SEQ(A a, B+ b[], C c) USING skip_till_next_match WITHIN 4")
    assert prefilter(spec) is None
    events = [{"type": t, "ts": ts, "x": 0} for t, ts in (("A", 0), ("B", 1), ("B", 2), ("C", 2))]
    plan = Plan(spec)
    scan = SequenceScan(tuple(_shape(a) for a in plan.alternatives), 0, plan.window)
    keep = scan(*columns(spec, events))
    assert keep.tolist() == [True, True, False, True]
    assert run(spec, events) == oracle_rows(q, events) == []
    assert len(run(spec, [e for e, k in zip(events, keep, strict=True) if k])) == 1


def test_trend_specs_are_not_eligible():
    assert prefilter(sparkcep.compile("RETURN COUNT(*) PATTERN SEQ(A a, B b) WITHIN 5").spec()) is None


def test_alternatives_are_scanned_once_each():
    scan = prefilter(compiled("PATTERN SEQ(A a, B* b[], C c) OR SEQ(D d, A e) WITHIN 5")[1])
    assert [shape[:3] for shape in scan.shapes] == [((1, 2, 4), (0,), (2,)), ((1, 4), (0,), (1,)),
                                                    ((8, 16), (0,), (1,))]


def sase_events(n: int, domain: int, seed: int = 3) -> list[dict]:
    rnd = random.Random(seed)
    return [{"type": rnd.choice("ABCDEFGHIJ"), "ts": t, "id": rnd.randint(1, domain), "x": 0} for t in range(n)]


def test_low_selectivity_drops_most_rows_and_keeps_every_match():
    """SASE §5's setting scaled down: 10 types, 3 in the query, 20 keys, W = 40: few chains fit (842 rows
    of A, B, C; 2 matches)."""
    text = "PATTERN SEQ(A a, B b, C c) WHERE [id] WITHIN 40"
    events = [e for e in sase_events(3000, 20) if e["type"] in "ABC"]
    q, spec = compiled(text)
    some = kept(spec, events)
    assert len(some) < len(events) // 5
    rows = run(spec, some)
    assert rows and canonical(rows) == canonical(run(spec, events)) == canonical(oracle_rows(q, events))


# ----------------------------------------------------------------------------------------------- property


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), events=keyed_streams("ABCD", max_size=12, keys=2, max_gap=2))
def test_engine_on_kept_rows_agrees_on_the_semantics_suite_queries(data, events):
    """The match-semantics suite's random queries (1–4 components, every negation position, Kleene forms with
    iterator, prefix-aggregate and whole-sequence predicates, ANY, OR, T*, T?)."""
    assert_exact(data.draw(queries("skip_till_any_match")), events)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), events=keyed_streams("AABBCCDE", min_size=8, keys=3, max_gap=2))
def test_engine_on_kept_rows_agrees_on_long_sequences(data, events):
    """SEQ of 2–5 components with repeated groups and negated sequences, over up to 24 events and 3 keys; ts
    sometimes halved (fractional ts take the prefilter's other sort)."""
    if data.draw(st.booleans()):
        events = [{**e, "ts": e["ts"] / 2} for e in events]
    assert_exact(data.draw(long_queries()), events)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), events=keyed_streams("AABBCCD", min_size=4, max_size=14, keys=2, max_gap=2))
def test_kept_rows_are_exactly_the_rows_of_matches_without_predicates(data, events):
    """Without predicates and negation the scan is exact, not just a superset: it keeps precisely the events
    of the oracle's matches (the window, ties and key boundaries are all decided in the scan)."""
    text = data.draw(long_queries(plain=True))
    events = [{**e, "n": k} for k, e in enumerate(events)]
    q, spec = compiled(text)
    in_matches = {e["n"] for m in matches(q.query, events) for bound in m.values()
                  for e in (bound if isinstance(bound, list) else [bound])}
    assert {e["n"] for e in kept(spec, events)} == in_matches, text


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), events=keyed_streams("AABBCCD", min_size=4, max_size=14, keys=2, max_gap=2),
       offset=st.sampled_from([2 ** 60, 2 ** 61 + 5, -(2 ** 62), 2 ** 63 + 7]),
       scale=st.sampled_from([1, 3, 2 ** 40 + 3, 2 ** 58 + 1]))
def test_large_integer_ts_are_scanned_exactly(data, events, offset, scale):
    """Integer ts far beyond 2^53: ``offset + scale * ts`` WITHIN ``W * scale`` (int64 counters, uint64 beyond
    2^63, and with scale 2^58 + 1 keys whose ts cross zero with spans near 2^63, where no int64 composite fits).
    The kept rows are still exactly the rows of the oracle's matches: the scan neither merges distinct ts into
    a tie (float64 spacing at 2^60 is 256) nor misjudges the window by rounding."""
    text = data.draw(long_queries(plain=True))
    window = int(text.rsplit("WITHIN ", 1)[1])
    text = f"{text.rsplit('WITHIN ', 1)[0]}WITHIN {window * scale}"
    events = [{**e, "n": k, "ts": offset + scale * e["ts"]} for k, e in enumerate(events)]
    q, spec = compiled(text)
    in_matches = {e["n"] for m in matches(q.query, events) for bound in m.values()
                  for e in (bound if isinstance(bound, list) else [bound])}
    assert columns(spec, events)[1].dtype.kind in "iu"
    assert {e["n"] for e in kept(spec, events)} == in_matches, text


def test_large_integer_ts_pinned_against_float():
    """At 2^60 (float64 spacing 256): A@+129, B@+300 is a match WITHIN 200 (171 < 200), though both round to
    2^60 + 256 (a tie); A@+100, B@+290 is one too (190 < 200), though the rounded span is 256.  The float64
    scan drops both matches, the int64 scan keeps them, as the engine finds them."""
    base = 2 ** 60
    spec = MatchSpec(AB.components, (), 200, ())
    group, mask = np.array([0, 0, 1, 1]), np.array([1, 2, 1, 2])
    ts = [base + 129, base + 300, base + 100, base + 290]
    assert prefilter(spec)(group, np.array(ts, dtype=np.float64), mask).tolist() == [False] * 4
    assert prefilter(spec)(group, np.array(ts), mask).tolist() == [True] * 4
    events = [{"type": t, "ts": x, "id": g} for t, x, g in zip("ABAB", ts, group.tolist(), strict=True)]
    assert len(run(dataclasses.replace(spec, key=("id",)), events)) == 2


@pytest.mark.parametrize("later, earlier, window, want", [
    ([5, 2 ** 63 - 1], [0, -(2 ** 63)], 6, [True, False]),  # a difference of 2^64 - 1: exact in uint64
    ([2 ** 60 + 200], [2 ** 60], 200, [False]), ([2 ** 60 + 199], [2 ** 60], 200, [True]),
    ([2 ** 60 + 200], [2 ** 60], 200.5, [True]), ([2 ** 60 + 201], [2 ** 60], 200.5, [False]),
    ([3], [3], 0, [False]), ([3], [1], math.inf, [True]), ([2 ** 63 + 9], [2 ** 63 + 1], 9, [True]),
])
def test_within_is_exact_for_integers(later, earlier, window, want):
    assert within(np.array(later), np.array(earlier), window).tolist() == want


@pytest.mark.parametrize("case", COLLAPSED_QUERIES, ids=lambda c: c[0][:60])
@settings(max_examples=60, deadline=None)
@given(events=keyed_streams("ABCD", max_size=14, keys=2, max_gap=2))
def test_collapsed_output_is_exact(case, events):
    """Collapsed rows (with their candidate arrays) of the kept rows are those of all rows."""
    events = [{**e, "n": k} for k, e in enumerate(events)]
    assert_exact(case[0], events, collapsed=True)


PAPER_QUERIES = [
    "PATTERN SEQ(A x, !(B y), C z) WHERE [id] WITHIN 12",
    "PATTERN SEQ(A x, A y, !(ANY(B, A) z)) WHERE [id] AND x.x != y.x AND x.x = z.x WITHIN 6",
    "PATTERN SEQ(A a, B+ b[], C c) WHERE [id] AND b[i].x >= b[i-1].x WITHIN 10 RETURN a.ts, count(b[].x), c.ts",
    "PATTERN SEQ(A a, B b, C c) OR SEQ(D d, E e, A f) WHERE (a.x < b.x AND a.x + b.x < c.x) OR (d.x < e.x) "
    "WITHIN 9",
    "PATTERN SEQ(!(E e), A a, (SEQ(B b, C c))+, D d) WHERE [id] WITHIN 15",
    "PATTERN SEQ(A a, B b, !(SEQ(C c, D d)), E f) WHERE [id] WITHIN 10",
    "PATTERN SEQ(A a, (SEQ(B b, C c) OR D d)+, E e) WHERE [id] WITHIN 12",
    "PATTERN SEQ(A a, (SEQ(B b, C? c))+) WHERE [id] WITHIN 8",
    "PATTERN SEQ(A a, (SEQ(B b, (SEQ(C c, D d))+))+, E e) WHERE [id] WITHIN 15",
]


@pytest.mark.parametrize("text", PAPER_QUERIES)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=keyed_streams(max_size=30, keys=3))
def test_engine_on_kept_rows_agrees_on_paper_shaped_queries(text, events):
    assert_exact(text, events)
