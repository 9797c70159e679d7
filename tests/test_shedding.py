"""gSPICE load shedding, pure parts (no JVM): observations (Table I/II), Zobrist keys, threshold, shedders,
baselines, controller; contributions checked against the brute-force oracle."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.oracles.match import matches as oracle_matches
from sparkcep.runtime_udfs.shedding.baselines import RandomShedder, TypeShedder
from sparkcep.runtime_udfs.shedding.controller import BatchController, DampedController, LatencyController, fit_cost
from sparkcep.runtime_udfs.shedding.observations import (
    SID,
    Binning,
    abandonment_specs,
    aggregate,
    contributions,
    match_keys,
    pane_frequencies,
    utilities,
)
from sparkcep.runtime_udfs.shedding.shedder import EventCoder, GSpiceH, TypeDrift, fit_gspice
from sparkcep.runtime_udfs.shedding.threshold import KEEP_ALL, Threshold, cumulative_occurrences, utility_threshold
from sparkcep.runtime_udfs.shedding.zobrist import Pane, UtilityTable, Zobrist

# ----------------------------------------------------------------------------------------------- Table I / II

# gSPICE Fig. 3, Table I: observations of type A under q = SEQ(A; B), pane length 3, one attribute E.
TABLE_I = [  # (F_A, F_B, E, complex events contributed to)
    (1, 2, 5, 1), (1, 2, 5, 0), (1, 2, 5, 1),
    (2, 1, 7, 0), (2, 1, 7, 1),
    (2, 1, 8, 0), (2, 1, 8, 0), (2, 1, 8, 1),
]


def _table_i():
    types = np.zeros(len(TABLE_I), dtype=np.int64)
    freq = np.array([(fa, fb) for fa, fb, _, _ in TABLE_I])
    e = np.array([[x] for _, _, x, _ in TABLE_I])
    m = np.array([c for *_, c in TABLE_I], dtype=float)
    return types, freq, e, m


def test_table_ii_aggregated_observations_and_utilities():
    agg = aggregate(*_table_i())
    # Table II: <A,(1,2),{5},M=2,O=3>, <A,(2,1),{7},1,2>, <A,(2,1),{8},1,3>  (the paper prints M=3, O=1 for
    # the last row, a typo: its utility 0.33 = 1/3 and Table I has three observations with one complex event)
    assert agg == {(0, (1, 2), (5,)): (2.0, 3), (0, (2, 1), (7,)): (1.0, 2), (0, (2, 1), (8,)): (1.0, 3)}
    u = utilities(agg)
    assert [round(u[k], 2) for k in sorted(u)] == [0.67, 0.50, 0.33]


def test_aggregation_weights_complex_events_by_pattern_weight():
    types, freq, e, m = _table_i()
    agg = aggregate(types, freq, e, m * 2.5)  # w_q = 2.5
    assert agg[(0, (1, 2), (5,))] == (5.0, 3)


def test_threshold_on_table_ii():
    u = [0.67, 0.50, 0.33]
    o = [3, 2, 3]
    uniq, cum = cumulative_occurrences(u, o)
    assert uniq.tolist() == [0.33, 0.5, 0.67]
    assert cum.tolist() == pytest.approx([3 / 8, 5 / 8, 1.0])
    # the paper's rule: the lowest O_u^c >= rho
    assert utility_threshold(u, o, 0.2, exact=False) == Threshold(0.33, 1.0)
    assert utility_threshold(u, o, 0.375, exact=False) == Threshold(0.33, 1.0)
    assert utility_threshold(u, o, 0.4, exact=False).utility == 0.5
    assert utility_threshold(u, o, 0.9, exact=False).utility == 0.67
    # exact: a share of the events at the threshold, so that the expected drop ratio is rho
    th = utility_threshold(u, o, 0.2)
    assert th.utility == 0.33 and th.tie == pytest.approx(0.2 / (3 / 8))
    assert utility_threshold(u, o, 0.0) == KEEP_ALL


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 20)), min_size=1, max_size=12),
       st.floats(0.01, 1.0))
@settings(max_examples=150, deadline=None)
def test_threshold_drops_rho_in_expectation(pairs, rho):
    u = [float(a) for a, _ in pairs]
    o = [float(b) for _, b in pairs]
    th = utility_threshold(u, o, rho)
    # expected share dropped over the distribution: all below, tie share at the threshold
    total = sum(o)
    pairs = list(zip(u, o, strict=True))
    expected = sum(w for x, w in pairs if x < th.utility) + th.tie * sum(w for x, w in pairs if x == th.utility)
    assert expected / total == pytest.approx(rho, abs=1e-9)
    paper = utility_threshold(u, o, rho, exact=False)
    dropped = sum(w for x, w in zip(u, o, strict=True) if x <= paper.utility) / total
    assert dropped >= rho - 1e-9  # the paper's rule never drops less than rho ...
    below = sum(w for x, w in zip(u, o, strict=True) if x < paper.utility) / total
    assert below < rho + 1e-9  # ... and its threshold is the lowest such utility


# ----------------------------------------------------------------------------------------------- Zobrist


def test_zobrist_numbers_are_distinct_and_seeded():
    z = Zobrist(3, 10, (11, 4), seed=3)
    nums = [x for row in z.types for x in row] + [x for row in z.attrs for x in row]
    assert len(nums) == len(set(nums)) == 3 * 11 + 15 and 0 not in nums
    assert Zobrist(3, 10, (11, 4), seed=3).types == z.types
    assert Zobrist(3, 10, (11, 4), seed=4).types != z.types


@given(st.lists(st.integers(0, 3), max_size=60), st.integers(1, 8), st.integers(1, 3))
@settings(max_examples=150, deadline=None)
def test_incremental_k1_equals_k1_from_scratch(stream, length, width):
    z = Zobrist(4, length, (), freq_width=width, seed=11)
    pane = Pane(z)
    freq = pane_frequencies(np.array(stream, dtype=np.int64), 4, length)
    for i, t in enumerate(stream):
        assert pane.frequencies() == tuple(freq[i])
        assert pane.k1 == z.k1(freq[i])  # the XOR-updated key equals the key computed from the pane
        pane.push(t)


def test_pane_shift_needs_at_most_four_xors():
    z = Zobrist(3, 4, (), seed=1)
    pane = Pane(z, history=[0, 0, 1, 2])
    before = pane.k1
    pane.push(1)  # A leaves (F_A 2 -> 1), B enters (F_B 1 -> 2)
    r = z.types
    assert pane.k1 == before ^ r[0][2] ^ r[0][1] ^ r[1][1] ^ r[1][2]
    assert pane.frequencies() == (1, 2, 1)


def test_pane_frequencies_paper_figure_1_and_history():
    # R0 C1 X2 R3 X4: the pane of X4 (length 4) holds R0 C1 X2 R3 -> F = (F_R, F_C, F_X) = (2, 1, 1)
    f = pane_frequencies(np.array([0, 1, 2, 0, 2]), 3, 4)
    assert f[-1].tolist() == [2, 1, 1]
    # split into two batches with history: same frequencies; other types (-1) take no place
    g = pane_frequencies(np.array([0, 2]), 3, 4, history=[0, 1, 2])
    assert g.tolist() == f[3:].tolist()
    h = pane_frequencies(np.array([0, -1, 1, -1, 2, 0, 2]), 3, 4)
    assert h[[0, 2, 4, 5, 6]].tolist() == f.tolist()


def test_utility_table_lookup_and_default():
    types, freq, e, m = _table_i()
    agg = aggregate(types, freq, e, m)
    z = Zobrist(2, 3, (11,), seed=5)
    table = UtilityTable(z, agg)
    assert table.lookup(0, z.key((1, 2), (5,))) == pytest.approx(2 / 3)
    assert table.lookup(0, z.key((2, 1), (8,))) == pytest.approx(1 / 3)
    assert table.lookup(0, z.key((0, 3), (5,))) == pytest.approx(4 / 8)  # unseen: the type's mean M/O
    assert table.lookup(1, 123) == 0.0


# ----------------------------------------------------------------------------------------------- contributions


def _events(spec_types, n, seed, attrs=("v",)):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ev = {"type": spec_types[int(rng.integers(len(spec_types)))], "ts": i + 1, SID: i}
        for a in attrs:
            ev[a] = int(rng.integers(1, 6))
        out.append(ev)
    return out


QUERIES = [
    "PATTERN SEQ(A a, B b, C c) WHERE a.v < b.v AND a.v + b.v < c.v WITHIN 6",
    "PATTERN SEQ(A a, B+ b[], C c) WHERE a.v < b[i].v AND b[i].v >= b[i-1].v WITHIN 6",
    "PATTERN SEQ(A a, B b) OR SEQ(C c, A d) WHERE a.v < b.v OR c.v = d.v WITHIN 4",
]


@pytest.mark.parametrize("text", QUERIES)
@given(seed=st.integers(0, 10_000))
@settings(max_examples=25, deadline=None)
def test_contributions_match_the_oracle(text, seed):
    """Each event's M equals the number of oracle matches it takes part in."""
    q = sparkcep.compile(text)
    spec = q.spec()
    events = _events("ABC", 14, seed)
    got = contributions([(spec, 1.0)], events)
    expected = np.zeros(len(events))
    count = 0
    for binding in oracle_matches(q.query, events):
        count += 1
        for bound in binding.values():
            for ev in bound if isinstance(bound, list) else [bound]:
                if ev is not None:
                    expected[ev[SID]] += 1
    assert got.matches == count
    assert got.m.tolist() == expected.tolist()
    assert got.untraced == 0
    assert len(match_keys(spec, events)) == count


def test_negated_event_credited_for_abandoned_matches():
    # paper Example 1: R0 C1 X2 R3 X4, all of one item: C1 abandons the PM (R0, X2); R3 X4 complete
    spec = sparkcep.compile("PATTERN SEQ(R r, !(C c), X x) WHERE [id] WITHIN 10").spec()
    events = [{"type": t, "ts": i, "id": 1, SID: i} for i, t in enumerate("RCXRX")]
    (var, positive), = abandonment_specs(spec)
    assert var == "c" and not any(c.negated for c in positive.components)
    got = contributions([(spec, 1.0)], events)
    assert got.matches == 1  # cplx34 = (R3, X4)
    assert got.abandoned == 2  # C1 blocks (R0, X2) and (R0, X4)
    assert got.m.tolist() == [0, 2, 0, 1, 1]
    # dropping C1 would create false positives: the complex events of the shed stream are a superset
    shed = [e for e in events if e[SID] != 1]
    assert match_keys(spec, shed) - match_keys(spec, events) == {((0,), (2,)), ((0,), (4,))}


# ----------------------------------------------------------------------------------------------- shedders


def _trained(kind="hash", n=600, seed=1):
    spec = sparkcep.compile("PATTERN SEQ(A a, B b, C c) WHERE a.v < b.v AND a.v + b.v < c.v WITHIN 8").spec()
    rng = np.random.default_rng(seed)
    types = rng.choice(list("ABC"), size=n, p=[0.7, 0.2, 0.1])
    events = [{"type": str(t), "ts": i, "v": int(rng.integers(1, 11)), SID: i} for i, t in enumerate(types)]
    return spec, events, fit_gspice([(spec, 1.0)], events, pane_length=5, attributes=("v",), kind=kind)


def test_gspice_h_utilities_are_the_learned_m_over_o():
    spec, events, sh = _trained()
    assert isinstance(sh, GSpiceH)
    codes, values = sh.coder.encode(events)
    u = sh.utilities(codes, values)
    freq = pane_frequencies(codes, 3, 5)
    bins = sh.coder.binning.bin_attributes(values)
    m = contributions([(spec, 1.0)], events).m
    agg = aggregate(codes, freq, bins, m)
    for i in range(len(events)):
        mm, o = agg[(int(codes[i]), tuple(freq[i]), tuple(bins[i]))]
        assert u[i] == pytest.approx(mm / o)


def test_gspice_h_pane_carries_across_batches():
    _, events, sh = _trained()
    codes, values = sh.coder.encode(events)
    whole = sh.utilities(codes, values)
    sh.reset()
    parts = np.concatenate([sh.utilities(codes[:250], values[:250]), sh.utilities(codes[250:], values[250:])])
    assert parts.tolist() == whole.tolist()


def _per_event_utilities(sh: GSpiceH, batches) -> tuple[list[float], list[bool]]:
    """The paper's Algorithm 1, lines 5-7, event by event: ``UT[T][K1 ⊕ K2]`` with the pane's ``K1`` updated
    incrementally (:class:`Pane`), the pane carrying over between batches; and whether each key was learned."""
    pane, out, seen = Pane(sh.z), [], []
    for codes, values in batches:
        bins = sh.coder.binning.bin_attributes(values)
        for t, b in zip(codes.tolist(), bins.tolist(), strict=True):
            key = pane.k1 ^ sh.z.k2(b)
            out.append(sh.table.lookup(t, key))
            seen.append(t >= 0 and key in sh.table.tables[t])
            pane.push(t)
    return out, seen


@given(seed=st.integers(0, 10**6), pane=st.integers(0, 6), width=st.integers(1, 3),
       cuts=st.lists(st.integers(0, 400), max_size=4))
@settings(max_examples=40, deadline=None)
def test_gspice_h_batch_lookup_equals_the_per_event_table_lookup(seed, pane, width, cuts):
    """The vectorized lookup of a batch (pane frequencies, K1 by XOR over the types, sorted keys) gives the
    table's utility of every event, as the per-event loop with the incremental pane does: on live-like data,
    unseen keys (the type's mean) and events of other types (0) included, the batch cut anywhere."""
    spec = sparkcep.compile(QUERIES[0]).spec()
    train = _events("ABCA", 300, seed)
    sh = fit_gspice([(spec, 1.0)], train, pane_length=pane, attributes=("v",), freq_width=width)
    live = _events("ABCDA", 400, seed + 1)
    for e in live[::7]:
        del e["v"]  # a missing value: a bin no training event had, so the key is unseen
    codes, values = sh.coder.encode(live)
    assert (codes == -1).any()
    edges = sorted({0, len(live), *cuts})
    batches = [(codes[a:b], values[a:b]) for a, b in zip(edges, edges[1:], strict=False)]
    want, seen = _per_event_utilities(sh, batches)
    sh.reset()
    got = np.concatenate([sh.utilities(c, v) for c, v in batches]).tolist()
    assert got == want
    assert any(seen) and not all(s for s, c in zip(seen, codes, strict=True) if c >= 0)  # learned and unseen keys


def test_gspice_h_batch_lookup_reads_the_table():
    """A table entry changed changes the batch lookup (the utilities come from the table, not a copy)."""
    _, events, sh = _trained()
    codes, values = sh.coder.encode(events)
    u = sh.utilities(codes, values)
    keys, values_sorted = sh.table._sorted[0]
    hit = np.flatnonzero(codes == 0)[0]
    values_sorted[values_sorted == u[hit]] += 1.0
    sh.reset()
    assert sh.utilities(codes, values)[hit] == u[hit] + 1.0


@pytest.mark.parametrize("kind", ["hash", "tree", "forest"])
def test_shedders_drop_about_rho_and_prefer_low_utility(kind):
    spec, events, sh = _trained(kind, n=1500)
    codes, values = sh.coder.encode(events)
    sh.reset()
    u = sh.utilities(codes, values)
    sh.reset()
    drop = sh.decide(codes, values, 0.4, seed=3)
    assert abs(drop.mean() - 0.4) < 0.08
    assert u[drop].mean() < u[~drop].mean()
    sh.reset()
    assert not sh.decide(codes, values, 0.0).any()


def test_gspice_loses_fewer_matches_than_random_on_training_like_data():
    spec, events, sh = _trained(n=1500)
    rnd = RandomShedder(sh.coder)
    truth = match_keys(spec, events)
    lost = {}
    for s in (sh, rnd):
        s.reset()
        codes, values = s.coder.encode(events)
        drop = s.decide(codes, values, 0.3, seed=5)
        kept = [e for e, d in zip(events, drop, strict=True) if not d]
        lost[s.name] = len(truth - match_keys(spec, kept))
    assert lost["gSPICE-H"] < lost["random"]


def test_baselines():
    spec = sparkcep.compile("PATTERN SEQ(A a, B b, C c) WITHIN 8").spec()
    train = ["A"] * 70 + ["B"] * 20 + ["C"] * 10
    bl = TypeShedder.fit([(spec, 1.0)], train)
    assert np.argsort(bl.type_utility).tolist() == [0, 1, 2]  # the flood type A is the cheapest
    codes = bl.coder.codes(["A"] * 70 + ["B"] * 20 + ["C"] * 10)
    drop = bl.decide(codes, np.zeros((100, 0)), 0.35, seed=0)
    assert drop[70:].sum() == 0 and 20 <= drop[:70].sum() <= 50  # only A events, about half of them
    rnd = RandomShedder(EventCoder(("A", "B", "C")))
    d = rnd.decide(np.zeros(20000, dtype=np.int64), np.zeros((20000, 0)), 0.25, seed=1)
    assert abs(d.mean() - 0.25) < 0.02


def test_binning():
    b = Binning((("v", 1.0, 1.0, 10), ("w", 0.0, 2.5, 4)), freq_width=2)
    got = b.bin_attributes(np.array([[1, 0], [10, 9.9], [0, 10.1], [math.nan, -1]]))
    assert got.tolist() == [[0, 0], [9, 3], [0, 3], [10, 0]]
    assert b.sizes == (11, 5)
    assert b.bin_frequencies(np.array([[0, 3, 5]])).tolist() == [[0, 1, 2]]
    u = Binning.uniform(["v", "x"], [{"v": 3}, {"v": 7}, {"v": 5, "x": 0.5}, {"x": 10.5}], n_bins=10)
    assert u.attributes[0] == ("v", 3.0, 1.0, 5) and u.attributes[1][3] == 10


def test_type_drift():
    codes = np.array([0] * 80 + [1] * 15 + [2] * 5)
    d = TypeDrift(codes, 3, threshold=0.15, min_events=100)
    assert not d.update(codes)
    assert d.update(np.array([0] * 34 + [1] * 33 + [2] * 33))
    assert not d.update(np.array([0] * 10))  # fewer than min_events: undecided


# ----------------------------------------------------------------------------------------------- controller


def test_controller_follows_the_paper_safety_bound():
    c = LatencyController(bound=1.0, safety=0.8)
    assert c.update(0.3, 900, 1000, 0.1) == 0.0  # below capacity, below the safety bound: off
    rho = c.update(0.8, 2000, 1000, 0.1)  # 2x overload at the safety bound: keep half
    assert rho == pytest.approx(0.5)
    assert c.update(0.95, 2000, 1000, 0.1) > rho  # above it: drain the queue
    assert LatencyController(1.0).update(0.1, 0, 1000, 0.1) == 0.0


def test_controller_keeps_a_simulated_queue_within_the_bound():
    """A fluid queue at 2x overload with noisy per-event costs stays under the bound."""
    rng = np.random.default_rng(0)
    c = LatencyController(bound=1.0)
    mu, lam, dt = 1000.0, 2000.0, 0.05
    backlog = 0.0  # seconds of queued work
    worst = 0.0
    for _ in range(400):
        kept = lam * dt * (1 - c.rho)
        cost = kept / (mu * rng.uniform(0.8, 1.2))
        backlog = max(0.0, backlog + cost - dt)
        latency = backlog + dt
        worst = max(worst, latency)
        c.update(latency, lam, kept / max(cost, 1e-9), dt)
    assert worst <= 1.0
    assert 0.4 < c.rho < 0.65


def _queue(c: DampedController, lam: float, cost_of, dt: float, steps: int, rng) -> tuple[float, list[float]]:
    """A single-server queue in virtual time fed ``lam`` events/s; ``cost_of(rho, n, rng)`` is the work of the
    ``n`` events kept at drop ratio ``rho``.  Returns the worst latency and the ρ of every interval."""
    backlog, worst, rhos = 0.0, 0.0, []
    for _ in range(steps):
        arrived = int(rng.poisson(lam * dt))
        kept = int(round(arrived * (1 - c.rho)))
        work = cost_of(c.rho, kept, rng)
        backlog = max(0.0, backlog + work - dt)
        latency = backlog + dt
        worst = max(worst, latency)
        c.update(latency, arrived, kept, work, dt)
        rhos.append(c.rho)
    return worst, rhos


@settings(max_examples=40, deadline=None)
@given(st.floats(1.2, 3.0), st.floats(0.0, 0.5), st.integers(0, 10**6))
def test_damped_controller_converges_to_the_overload_and_keeps_the_bound(overload, noise, seed):
    """A fluid queue at ``overload`` x the service rate with noisy per-event costs: the latency stays within the
    bound and ρ settles at the drop amount the overload calls for, 1 − 1/overload."""
    rng = np.random.default_rng(seed)
    mu, dt = 1000.0, 0.02
    c = DampedController(bound=1.0)
    worst, rhos = _queue(c, overload * mu, lambda rho, n, r: n / mu * r.uniform(1 - noise, 1 + noise), dt, 600, rng)
    assert worst <= 1.0
    assert np.mean(rhos[-200:]) == pytest.approx(1 - 1 / overload, abs=0.05 + noise / 4)


@settings(max_examples=30, deadline=None)
@given(st.floats(1.2, 2.5), st.floats(0.0, 0.9), st.integers(0, 10**6))
def test_damped_controller_measures_what_the_shedder_saves(overload, bias, seed):
    """A shedder that drops the cheap events first (kept events cost more the more it drops, as gSPICE's do
    when the valuable events are the expensive ones) needs a larger ρ than the overload alone says: the
    controller measures the work of the kept events, not ρ, so it still keeps the bound."""
    rng = np.random.default_rng(seed)
    mu, dt = 1000.0, 0.02
    c = DampedController(bound=1.0)
    cost = lambda rho, n, r: n / mu * (1 + bias * rho) * r.uniform(0.9, 1.1)  # noqa: E731
    worst, rhos = _queue(c, overload * mu, cost, dt, 600, rng)
    assert worst <= 1.0
    late = np.mean(rhos[-200:])
    assert late > 1 - 1 / overload - 0.05  # at least about what an unbiased shedder needs
    assert (1 - late) * overload * (1 + bias * late) == pytest.approx(1.0, abs=0.12)  # the work just fits


def test_damped_controller_margin_follows_cost_spikes():
    c = DampedController(bound=1.0, safety=0.8)
    assert c.target == pytest.approx(0.8)  # the paper's safety bound
    c.prime([0.01, 0.35, 0.02])  # one interval's work can reach 0.35 s: keep room for it
    c.update(0.0, 0, 0, 0.0, 0.05)  # intervals of 0.05 s: their events wait up to 0.05 s too
    assert c.target == pytest.approx(0.6)
    c.prime([0.9])
    assert c.target == pytest.approx(0.3)  # never below floor x bound
    rng = np.random.default_rng(3)
    spiky = DampedController(bound=1.0)  # every 25th interval does 0.3 s of extra work
    steps = iter(range(10**6))
    cost = lambda rho, n, r: n / 1000.0 + (0.3 if next(steps) % 25 == 0 else 0.0)  # noqa: E731
    worst, _ = _queue(spiky, 2000.0, cost, 0.02, 500, rng)
    assert worst <= 1.0
    assert DampedController(1.0).update(0.1, 0, 0, 0.0, 0.02) == 0.0  # nothing arrived: no shedding


def test_batch_controller_latency_from_batch_times():
    b = BatchController(bound=10.0)  # target: latency 8 s
    assert b.on_batch(0.0, 2.0, 1000, 1000) == 0.0
    assert b.on_batch(2.0, 2.2, 1200, 1200) == 0.0  # no overload: no shedding
    assert b.latencies == [2.0, 4.2]
    rho = b.on_batch(4.2, 9.0, 1100, 1100)  # a slow batch: the next one holds 9 s of arrivals and must be short
    assert rho > 0.5
    assert b.on_batch(14.0, 0.0, 0, 0) == rho and b.latencies == [2.0, 4.2, 11.2]  # an empty batch: no sample
    falling = b.on_batch(15.0, 1.0, 300, 100)  # a cheap batch: ρ falls by at most half the way
    assert rho / 2 <= falling < rho


def test_fit_cost_separates_the_fixed_cost():
    rng = np.random.default_rng(1)
    kept = rng.integers(1000, 20000, size=8)
    fixed, per_event = fit_cost(kept, 1.5 + 0.0004 * kept)
    assert fixed == pytest.approx(1.5) and per_event == pytest.approx(0.0004)
    assert fit_cost([5000, 5000], [3.0, 3.0], fixed=1.0) == (1.0, pytest.approx(0.0004))  # same sizes: a ratio
    assert fit_cost([100, 200], [3.0, 1.0]) == (2.0, 0.0)  # bigger was cheaper: noise, all fixed
    assert fit_cost([], []) == (0.0, 0.0)


def _batches(c: BatchController, rate: float, fixed: float, per_event: float, noise: float, gap: float, n: int,
             rng) -> tuple[list[float], int, int]:
    """A simulated Spark micro-batch stream (no JVM, virtual time): batch k starts when batch k − 1 has ended
    (plus a scheduling gap), holds the events that arrived since batch k − 1 started (Poisson, ``rate``/s),
    keeps each with probability 1 − ρ and takes ``fixed + per_event × kept`` seconds, both terms with
    multiplicative noise.  Returns each batch's latency (start + duration − previous start: what its first
    event waited), the number of events offered and the number dropped."""
    prev, start, latencies, offered_all, dropped = 0.0, 1.0, [], 0, 0  # the query starts at 0, its first batch at 1 s
    for _ in range(n):
        offered = int(rng.poisson(rate * (start - prev)))
        kept = int(rng.binomial(offered, 1 - c.rho))
        offered_all, dropped = offered_all + offered, dropped + offered - kept
        duration = (fixed * rng.uniform(1 - noise, 1 + noise)
                    + per_event * kept * rng.uniform(1 - noise, 1 + noise))
        latencies.append(start + duration - prev)
        c.on_batch(start, duration, offered, kept)
        prev, start = start, start + duration + gap * rng.uniform(0, 2)
    return latencies, offered_all, dropped


@settings(max_examples=60, deadline=None)
@given(st.floats(1.2, 3.0), st.floats(0.2, 2.5), st.floats(0.0, 0.3), st.floats(0.0, 0.3), st.integers(0, 10**6))
def test_batch_controller_keeps_the_bound_under_overload(overload, fixed, noise, gap, seed):
    """Spark-like micro-batches at 1.2–3x the operator's capacity μ = 1 / c (a fixed cost per batch on top):
    after a short start-up every batch's latency stays within the bound, and the drop ratio is about what the
    overload and the fixed cost call for."""
    rng = np.random.default_rng(seed)
    mu, bound = 3000.0, 30.0
    c = BatchController(bound)
    latencies, offered, dropped = _batches(c, overload * mu, fixed, 1 / mu, noise, gap, 60, rng)
    assert max(latencies[4:]) <= bound
    # back-to-back batches of d = F + c·keep·λ·d have latency 2d + gap ≤ target: keep ≤ (1 − 2F / (target − gap)) / (λc)
    need = 1 - (1 - 2 * fixed / (c.target - 2 * gap)) / overload
    assert need - 0.06 <= dropped / offered <= need + 0.1  # what the overload and F call for (start-up unshed)


@settings(max_examples=60, deadline=None)
@given(st.floats(0.05, 0.8), st.floats(0.2, 2.5), st.floats(0.0, 0.3), st.floats(0.0, 0.3), st.integers(0, 10**6))
def test_batch_controller_sheds_nothing_below_capacity(load, fixed, noise, gap, seed):
    """Below capacity nothing is shed.  With a fixed cost F per batch, back-to-back batches of an unshed stream
    at λ settle at d = F / (1 − λc) and a latency of 2d + gap; capacity is the λ at which that reaches the
    safety bound; the stream runs at ``load`` x that."""
    rng = np.random.default_rng(seed)
    mu, bound = 3000.0, 30.0
    c = BatchController(bound)
    cap = (1 - 2 * fixed * (1 + noise) / (c.target - 2 * gap)) * mu
    latencies, _, dropped = _batches(c, load * cap, fixed, 1 / mu, noise, gap, 60, rng)
    assert dropped == 0 and c.rho == 0
    assert max(latencies) <= bound


# ----------------------------------------------------------------------------------------------- language, CLI


def test_with_shedding_latency_clause():
    from sparkcep.api import compile_workload
    from sparkcep.grammar import parse_workload

    w = parse_workload("with shedding latency 500 ms;\n"
                       "q1: PATTERN SEQ(A a, B b) WITHIN 10 s; PATTERN SEQ(A a) WITHIN 1 s")
    assert w.shedding_latency.in_ms() == 500 and len(w.queries) == 2
    assert parse_workload("PATTERN SEQ(A a, B b) WITHIN 10 s").shedding_latency is None
    assert sparkcep.compile("WITH SHEDDING LATENCY 1 s PATTERN SEQ(A a, B b) WITHIN 10 s").shedding_latency == 1.0
    assert sparkcep.compile("PATTERN SEQ(A a, B b) WITHIN 10 s").shedding_latency is None  # off by default
    assert sparkcep.compile("WITH SHEDDING LATENCY 1 s PATTERN SEQ(A a) WITHIN 1 s",
                            shedding_latency=2.0).shedding_latency == 2.0  # the option wins
    qs = compile_workload("WITH SHEDDING LATENCY 2 min PATTERN SEQ(A a) WITHIN 1 s; PATTERN SEQ(B b) WITHIN 1 s")
    assert [q.shedding_latency for q in qs] == [120.0, 120.0]


@pytest.mark.parametrize("text, column, message", [
    ("WITH SHEDDING LATENCY 1 PATTERN SEQ(A a) WITHIN 1 s", 25, "expected a time unit"),
    ("WITH SHEDDING LATENCY 0 s PATTERN SEQ(A a) WITHIN 1 s", 1, "must be positive"),
    ("WITH SHEDDING 1 s PATTERN SEQ(A a) WITHIN 1 s", 15, "unexpected '1'"),
])
def test_with_shedding_latency_errors(text, column, message):
    from sparkcep.ir.errors import CEPSyntaxError

    with pytest.raises(CEPSyntaxError) as info:
        sparkcep.compile(text)
    assert (info.value.line, info.value.column) == (1, column)
    assert message in info.value.message
    assert "^" in info.value.render()


def test_cli_shedding_latency_option():
    import argparse

    from sparkcep.cli import _seconds

    assert [_seconds(x) for x in ("1s", "1 s", "500ms", "2", "2min")] == [1.0, 1.0, 0.5, 2.0, 120.0]
    for bad in ("x", "0s", "1 parsec"):
        with pytest.raises(argparse.ArgumentTypeError):
            _seconds(bad)


def test_shedding_model_option_reaches_the_stage(monkeypatch):
    """``run --shedding-model random|type`` (the paper's baselines, for comparisons) gets the stage that
    shedder; an unknown kind is a CEPError."""
    import pandas as pd
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    import sparkcep.spark.shedding as stage
    from sparkcep.api import shedding_stage
    from sparkcep.cli import _shedding_options, build_parser
    from sparkcep.ir.errors import CEPError
    from sparkcep.runtime_udfs.shedding.shedder import fit_shedder

    args = build_parser().parse_args(["run", "-e", "PATTERN SEQ(A a, B b) WITHIN 10", "--input", "x", "--stream",
                                      "--shedding-latency", "5s", "--shedding-model", "type"])
    assert _shedding_options(args) == {"shedding_latency": 5.0, "shedding_model": "type"}
    q = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE a.v < b.v WITHIN 10", **_shedding_options(args))
    monkeypatch.setattr(stage, "install", lambda df, shedder, **kw: (df, shedder))

    class Candidates:  # what the stage reads of a DataFrame: its schema
        schema = StructType([StructField("type", StringType()), StructField("ts", LongType()),
                             StructField("v", LongType())])

    train = pd.DataFrame({"type": ["A", "A", "B"] * 20, "ts": range(60), "v": [i % 7 for i in range(60)]})
    for kind, cls in (("type", TypeShedder), ("random", RandomShedder), ("hash", GSpiceH)):
        _, shedder = shedding_stage(Candidates(), q.spec(), ["v"], train, bound=5.0, model=kind)
        assert type(shedder) is cls
    with pytest.raises(CEPError, match="unknown shedding model 'coin'"):
        fit_shedder([(q.spec(), 1.0)], [], kind="coin")

def test_shedding_features_are_the_attributes_that_decide_matches(monkeypatch):
    """The stage bins the attributes the conditions and keys read, not those only RETURN reads: the bench's
    sequence number ``n`` (RETURN a.n) put every live event in the last bin of the training range."""
    import pandas as pd
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    import sparkcep.spark.shedding as stage
    from sparkcep.api import shedding_stage

    monkeypatch.setattr(stage, "install", lambda df, shedder, **kw: (df, shedder))

    class Candidates:
        schema = StructType([StructField(c, StringType() if c == "type" else LongType())
                             for c in ("type", "ts", "id", "v", "w", "n")])

    train = pd.DataFrame({"type": ["A", "B", "C"] * 20, "ts": range(60), "id": [i % 2 for i in range(60)],
                          "v": [i % 7 for i in range(60)], "w": [i % 5 for i in range(60)], "n": range(60)})
    one = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE a.v < b.v WITHIN 10 RETURN a.n AS an, b.n AS bn").spec()
    other = sparkcep.compile("PATTERN SEQ(A a, C c) WHERE [id] AND c.w > 2 WITHIN 10 RETURN a.n AS n").spec()
    for kind in ("hash", "tree"):
        _, shedder = shedding_stage(Candidates(), one, ["v", "n"], train, bound=5.0, model=kind)
        assert shedder.coder.binning.names == ("v",)
        _, shedder = shedding_stage(Candidates(), one, ["v", "n"], train, bound=5.0, model=kind,
                                    weighted=[(one, 1.0), (other, 1.0)])
        assert shedder.coder.binning.names == ("v", "id", "w")


def test_retraining_on_drift():
    """Trained where A floods; the stream turns to B-heavy: drift is detected and the model refit on the
    recent processed events, after which the utility distribution reflects the new stream."""
    from sparkcep.runtime_udfs.shedding.shedder import Retraining

    spec, train, base = _trained(n=1500)
    fit = lambda evs: fit_gspice([(spec, 1.0)], evs, pane_length=5, attributes=("v",))  # noqa: E731
    sh = Retraining(base, fit, buffer=1500, min_events=500, train_codes=base.coder.encode(train)[0])
    rng = np.random.default_rng(9)
    same = [{"type": str(t), "ts": 10_000 + i, "v": int(rng.integers(1, 11))}
            for i, t in enumerate(rng.choice(list("ABC"), size=600, p=[0.7, 0.2, 0.1]))]
    codes, values = sh.coder.encode(same)
    sh.decide(codes, values, 0.2, seed=1)
    sh.processed(same)
    assert sh.retrains == 0  # same distribution: no retraining
    shifted = [{"type": str(t), "ts": 20_000 + i, "v": int(rng.integers(1, 11))}
               for i, t in enumerate(rng.choice(list("ABC"), size=1500, p=[0.2, 0.5, 0.3]))]
    for k in range(0, 1500, 500):
        part = shifted[k:k + 500]
        codes, values = sh.coder.encode(part)
        drop = sh.decide(codes, values, 0.2, seed=k)
        sh.processed([e for e, d in zip(part, drop, strict=True) if not d])
    assert sh.retrains >= 1
    assert sh.drift.distance(sh.coder.encode(shifted[-500:])[0]) < 0.15  # the new reference is the new stream


def test_shedding_report_names_the_fitted_batch_cost(capsys, tmp_path):
    """``run``'s report ends with the backlog controller's last cost fit (``F + o × read + c × kept``), which
    ``bench/live_latency.py`` prints per shedder: what shedding saves (``c``) and what it does not (``o``)."""
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "bench"))
    from live_latency import Run

    from sparkcep.api import report_shedding
    from sparkcep.runtime_udfs.shedding.controller import BacklogController
    from sparkcep.spark.shedding import ControlFile, Shedding

    ctl = BacklogController(bound=5.0)
    for offered, kept in ((1000, 1000), (1000, 1000), (2000, 1000), (2000, 400), (1000, 900)):
        ctl.on_batch(duration=0.5 + 1e-4 * offered + 5e-4 * kept, offered=offered, kept=kept, latency=2.0,
                     backlog=0, interval=2.0)
    stage = Shedding("s", ("A",), ctl, ControlFile(str(tmp_path / "c.json")), dropped={"A": 10}, offered=100)
    report_shedding(stage, type("Query", (), {"isActive": False})())
    line = capsys.readouterr().err
    assert "micro-batch cost fitted as 0.50 s + 100 µs per event read + 500 µs per event kept" in line

    class Lines:
        lines = [line]

    assert Run.shedding(Lines())["fit"] == (0.5, 100.0, 500.0)
