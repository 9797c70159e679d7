"""The Sharon optimizer (issue 5): Fig. 4 / Examples 7, 12, 13 and property tests against the brute-force
oracle (:mod:`sparkcep.oracles.sharon`: every subset tried)."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.compiler.optimizer.sharing import (
    Candidate,
    SharingQuery,
    WorkloadPlan,
    find_sharing_plan,
    gwmin,
    gwmin_guaranteed_weight,
    optimize_workload,
)
from sparkcep.compiler.optimizer.sharing.benefit import bvalue, layout_cost
from sparkcep.compiler.optimizer.sharing.graph import build_conflicts, graph_of
from sparkcep.compiler.optimizer.sharing.layout import segments, shared_specs
from sparkcep.compiler.optimizer.sharing.plan_finder import (
    branch_and_bound,
    choose_plan,
    enumeration_plan,
    search_plan,
    valid_space_search,
)
from sparkcep.compiler.optimizer.sharing.prune import guaranteed_weight, reduce, reduce_graph
from sparkcep.compiler.optimizer.sharing.resolve_conflicts import expand
from sparkcep.grammar import parse_workload
from sparkcep.ir.errors import CEPError, CEPSyntaxError
from sparkcep.ir.printer import format_workload
from sparkcep.oracles import sharon as oracle_sharon

FIG4_BENEFITS = {"p1": 25, "p2": 9, "p3": 12, "p4": 15, "p5": 20, "p6": 8, "p7": 18}
FIG4_CONFLICTS = [("p1", "p2"), ("p1", "p3"), ("p1", "p4"), ("p1", "p5"), ("p1", "p6"), ("p2", "p3"),
                  ("p2", "p5"), ("p3", "p4"), ("p3", "p5"), ("p4", "p5")]
WORKLOADS = Path(__file__).parent / "fixtures" / "workloads"


def table1_plan() -> WorkloadPlan:
    """Sharon Table 1's candidates on the Fig. 1 queries, weighted with Example 7's benefits."""
    queries = tuple(SharingQuery(n, p) for n, p in oracle_sharon.FIGURE1_QUERIES.items())
    cands = tuple(Candidate(n, p, qs, oracle_sharon.EXAMPLE7_BENEFITS[n])
                  for n, (p, qs) in oracle_sharon.TABLE1_CANDIDATES.items())
    return WorkloadPlan(queries, candidates=cands, resolve=False)


# ------------------------------------------------------------------------------------------ Sharon Fig. 4

def test_fig4_guaranteed_weight_greedy_and_optimal_plan():
    assert gwmin_guaranteed_weight(FIG4_BENEFITS, FIG4_CONFLICTS) == pytest.approx(38.5667, abs=1e-3)
    greedy, greedy_score = gwmin(FIG4_BENEFITS, FIG4_CONFLICTS)
    assert (set(greedy), greedy_score) == ({"p1", "p7"}, 43)
    plan, score = find_sharing_plan(FIG4_BENEFITS, FIG4_CONFLICTS)
    assert (plan, score) == (frozenset({"p2", "p4", "p6", "p7"}), 50)


def test_fig4_reduction_prunes_p3_and_takes_p7():
    g = graph_of(FIG4_BENEFITS, FIG4_CONFLICTS)
    reduced, free, ridden = reduce(g, guaranteed_weight(g))
    assert free == ["p7"]
    assert [v for v, _ in ridden] == ["p3"] and ridden[0][1] == 38  # Example 7: Score_max(p3) = 12 + 8 + 18
    assert sorted(reduced) == ["p1", "p2", "p4", "p5", "p6"]
    # Example 10: the valid space of the reduced graph holds 10 plans
    assert valid_space_search(reduced)[2] == 10


def test_fig4_from_the_queries_conflicts_and_explain():
    plan = choose_plan(reduce_graph(build_conflicts(table1_plan())))
    assert {frozenset(e) for e in plan.conflicts} == set(oracle_sharon.FIGURE4_EDGES)
    assert plan.guaranteed == pytest.approx(38.5667, abs=1e-3)
    assert [(p.name, p.reason.split(":")[0]) for p in plan.pruned] == [("p3", "conflict-ridden")]
    assert plan.conflict_free == ("p7",)
    assert (plan.chosen, plan.score) == (("p2", "p4", "p6", "p7"), 50)
    assert (plan.greedy, plan.greedy_score) == (("p1", "p7"), 43)


def test_example13_option_of_p1_resolves_conflicts_with_p4_p5():
    plan = build_conflicts(table1_plan())
    p1 = plan.candidate("p1")
    others = [c for c in plan.candidates if c.pattern != p1.pattern]
    options, cut = expand(plan, p1, others)
    assert not cut and options[0] == p1.queries
    assert frozenset({"q1", "q3"}) in options  # Example 13
    assert all(len(o) > 1 and o <= p1.queries for o in options)
    assert len(set(options)) == len(options)


def test_benefit_model_equations():
    # q = (A, B, C), r = (B, C): p = (B, C); rates A 2, B 3, C 5 (events per window)
    plan = WorkloadPlan((SharingQuery("q", ("A", "B", "C")), SharingQuery("r", ("B", "C"))),
                        rates=(("A", 2.0), ("B", 3.0), ("C", 5.0)))
    non_shared = 2 * (2 + 3 + 5) + 3 * (3 + 5)          # Eq. 2-3
    shared = 3 * (3 + 5) + (2 * 2) + (2 * 3) + 0          # Eq. 7: p once; q: Comp 2·2, Comb 2·3; r: nothing
    assert bvalue(plan, ("B", "C"), frozenset({"q", "r"})) == non_shared - shared


def test_benefit_of_a_pattern_repeated_in_a_query():
    """q holds p = (A, B) twice: the executor shares both occurrences (segments p · C · p), and so does the
    model: NonShared 5 + 2, Shared = p once 2 + q's Comp 1 (C) + Comb 1·1·1 + r nothing."""
    plan = WorkloadPlan((SharingQuery("q", ("A", "B", "C", "A", "B")), SharingQuery("r", ("A", "B"))))
    assert bvalue(plan, ("A", "B"), frozenset({"q", "r"})) == (5 + 2) - (2 + 1 + 1)
    shared = WorkloadPlan(plan.queries, candidates=(Candidate("p1", ("A", "B"), frozenset({"q", "r"}), 3.0),),
                          chosen=("p1",))
    assert segments(shared)["q"] == (("p1", ("A", "B")), ("q#1", ("C",)), ("p1", ("A", "B")))
    [spec] = shared_specs(shared)
    assert spec.queries[0].segments == ("p1", "q#1", "p1")
    assert layout_cost(shared, ()) - layout_cost(shared, ("p1",)) == 3
    # rates A 2, B 3, C 5: NonShared 2·15 + 2·5; Shared 2·5 + 5·5 + 2·5·2 -> not beneficial
    rated = replace(shared, rates=(("A", 2.0), ("B", 3.0), ("C", 5.0)))
    assert bvalue(rated, ("A", "B"), frozenset({"q", "r"})) == (30 + 10) - (10 + 25 + 20)
    # a pattern overlapping itself (A, A) in (A, A, A): one occurrence taken, as the executor takes it
    aaa = WorkloadPlan((SharingQuery("q", ("A", "A", "A")), SharingQuery("r", ("A", "A"))))
    assert bvalue(aaa, ("A", "A"), frozenset({"q", "r"})) == (3 + 2) - (2 + 1 + 1)


def test_time_budget_stops_the_branch_and_bound():
    """One connected component of 90 candidates with close weights (weak bounds) needs far more than the
    1024 search nodes after which the deadline is checked: with no time left, GWMIN's plan, said so."""
    rnd = random.Random(7)
    benefits = {f"v{i}": 1 + rnd.random() for i in range(90)}
    edges = [(f"v{i}", f"v{j}") for i, j in itertools.combinations(range(90), 2) if rnd.random() < 0.08]
    g = graph_of(benefits, edges)
    plan, score, method = search_plan(g, 0.0)
    assert method == "greedy GWMIN (time budget 0 s exceeded)"
    assert (plan, score) == gwmin(benefits, edges)


def test_time_budget_falls_back_to_gwmin():
    n = 40
    benefits = {f"v{i}": 1 + (i * 7919) % 13 for i in range(n)}
    conflicts = [(f"v{i}", f"v{j}") for i in range(n) for j in range(i + 1, n) if (i * j) % 5 == 1]
    plan, score = find_sharing_plan(benefits, conflicts, budget=0.0)
    g = graph_of(benefits, conflicts)
    assert not any(g.has_edge(a, b) for a, b in itertools.combinations(plan, 2))
    assert score >= gwmin(benefits, conflicts)[1]


# ------------------------------------------------------------------------------------------ property tests

@st.composite
def graphs(draw, max_vertices: int = 9):
    n = draw(st.integers(0, max_vertices))
    names = [f"v{i}" for i in range(n)]
    benefits = {v: draw(st.integers(-3, 30)) for v in names}
    pairs = list(itertools.combinations(names, 2))
    edges = [p for p in pairs if draw(st.booleans())] if pairs else []
    return benefits, edges


def _oracle(benefits, edges):
    g = graph_of({k: v for k, v in benefits.items() if v > 0}, edges)
    return g, oracle_sharon.optimal_plan(g)


@settings(max_examples=300, deadline=None)
@given(graphs())
def test_plan_finder_matches_exhaustive_search(graph):
    benefits, edges = graph
    g, (_, best) = _oracle(benefits, edges)
    plan, score = find_sharing_plan(benefits, edges)
    assert score == pytest.approx(best)
    assert not any(g.has_edge(a, b) for a, b in itertools.combinations(plan, 2))
    assert score == pytest.approx(sum(benefits[v] for v in plan))
    greedy, greedy_score = gwmin(benefits, edges)
    assert greedy == oracle_sharon.gwmin(g)
    assert greedy_score >= gwmin_guaranteed_weight(benefits, edges) - 1e-9  # Eq. 10
    assert greedy_score <= score + 1e-9


@st.composite
def workloads(draw):
    n = draw(st.integers(2, 6))
    queries = []
    for i in range(n):
        length = draw(st.integers(2, 5))
        queries.append(SharingQuery(f"q{i + 1}", tuple(draw(st.lists(st.sampled_from("ABCDE"), min_size=length,
                                                                       max_size=length)))))
    rates = {t: draw(st.integers(1, 6)) for t in "ABCDE"}
    return queries, rates


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.booleans())
def test_workload_plan_is_optimal_on_its_sharon_graph(workload, resolve):
    queries, rates = workload
    plan = optimize_workload(queries, rates, budget=None, resolve=resolve)
    # the oracle graph: every beneficial candidate (options included), conflicts by the oracle's own rule
    non_beneficial = {p.name for p in plan.pruned if p.reason.startswith("non-beneficial")}
    cands = [c for c in plan.candidates if c.name not in non_beneficial]
    assert all(c.benefit > 0 for c in cands)
    g = oracle_sharon.sharon_graph({c.name: (c.pattern, c.queries) for c in cands},
                                   {q.name: q.pattern for q in queries}, {c.name: c.benefit for c in cands})
    if len(g) > 14:
        return  # the oracle tries every subset
    _, best = oracle_sharon.optimal_plan(g)
    assert plan.score == pytest.approx(best)
    assert not any(g.has_edge(a, b) for a, b in itertools.combinations(plan.chosen, 2))
    for c in cands:  # benefits follow Eq. 8 for the candidate's own query set
        assert c.benefit == pytest.approx(bvalue(plan, c.pattern, c.queries))
    # candidates are exactly the contiguous patterns of length > 1 in more than one query (Def. 3)
    originals = {(c.pattern, c.queries) for c in plan.candidates if c.origin is None}
    expected = set()
    for pattern in {q.pattern[i:j] for q in queries for i in range(len(q.pattern))
                    for j in range(i + 2, len(q.pattern) + 1)}:
        holders = frozenset(q.name for q in queries
                            if any(q.pattern[i:i + len(pattern)] == pattern for i in range(len(q.pattern))))
        if len(holders) > 1:
            expected.add((pattern, holders))
    assert originals == expected


@st.composite
def repeating_workloads(draw):
    """Workloads over few types, so that patterns repeat within a query, with random rates."""
    n = draw(st.integers(2, 5))
    types = "ABC"[:draw(st.integers(2, 3))]
    queries = [SharingQuery(f"q{i + 1}", tuple(draw(st.lists(st.sampled_from(types), min_size=2, max_size=7))))
               for i in range(n)]
    rates = {t: draw(st.sampled_from([0.5, 1, 2, 3, 7])) for t in types}
    return queries, rates


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(repeating_workloads())
def test_benefit_equals_the_model_cost_of_what_the_executor_runs(workload):
    """Every candidate's BValue (as explain prints it) is the cost the model assigns to the Non-Shared layout
    minus the cost of the executor's layout with that candidate alone shared; a plan whose candidates share
    no query saves exactly its score."""
    queries, rates = workload
    plan = optimize_workload(queries, rates, budget=None)
    base = layout_cost(plan, ())
    assert base == pytest.approx(sum(rates[q.pattern[0]] * sum(rates[t] for t in q.pattern) for q in queries))
    for c in plan.candidates:
        assert c.benefit == pytest.approx(base - layout_cost(plan, (c.name,)), rel=1e-9, abs=1e-9)
        assert f"{c.name} ({', '.join(c.pattern)})" in explain_text(plan)
    chosen = [plan.candidate(n) for n in plan.chosen]
    if all(not (a.queries & b.queries) for a, b in itertools.combinations(chosen, 2)):
        assert base - layout_cost(plan, plan.chosen) == pytest.approx(plan.score, rel=1e-9, abs=1e-9)


def explain_text(plan):
    from sparkcep.compiler.optimizer.sharing.explain import explain_workload

    return explain_workload(plan)


@st.composite
def larger_graphs(draw):
    n = draw(st.integers(10, 26))
    density = draw(st.sampled_from([0.08, 0.15, 0.25, 0.4]))
    rnd = random.Random(draw(st.integers(0, 2**32)))
    benefits = {f"v{i}": rnd.choice([rnd.randint(1, 6), rnd.randint(1, 40), round(rnd.uniform(0.1, 50), 3)])
                for i in range(n)}
    edges = [(f"v{i}", f"v{j}") for i, j in itertools.combinations(range(n), 2) if rnd.random() < density]
    return benefits, edges


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(larger_graphs())
def test_branch_and_bound_returns_the_plan_of_the_full_enumeration(graph):
    """Larger graphs (10-26 candidates) than exhaustive search takes: the branch and bound returns the very
    plan (same ties) that the level-wise enumeration of every valid plan (Algorithms 3-4) returns."""
    benefits, edges = graph
    g = graph_of(benefits, edges)
    plan, score, method = search_plan(g, None)
    old_plan, old_score, old_method = enumeration_plan(g, None)
    assert old_method.startswith("Algorithms 3-4 (optimal") and method.startswith("Sharon plan finder (optimal")
    assert score == pytest.approx(old_score)
    assert plan == old_plan
    assert not any(g.has_edge(a, b) for a, b in itertools.combinations(plan, 2))
    # and on the unreduced graph, against the enumeration directly
    best, best_score, _, _ = branch_and_bound(g)
    enum_best, enum_score, _ = valid_space_search(g)
    assert (best, best_score) == (enum_best, pytest.approx(enum_score))


@pytest.mark.parametrize("n,degree", [(60, 3), (120, 4), (200, 3)])
def test_branch_and_bound_scales_past_the_enumeration(n, degree):
    """Sparse graphs far beyond the valid-space walk: exact (the optimum of a maximum weight clique search of
    networkx on the complement graph, an independent method, where it finishes) and within a short budget."""
    import networkx as nx

    rnd = random.Random(n)
    benefits = {f"v{i}": rnd.randint(1, 100) for i in range(n)}
    edges = [(f"v{i}", f"v{j}") for i, j in itertools.combinations(range(n), 2) if rnd.random() < degree / n]
    g = graph_of(benefits, edges)
    plan, score, method = search_plan(g, 10.0)
    assert method.startswith("Sharon plan finder (optimal")
    assert not any(g.has_edge(a, b) for a, b in itertools.combinations(plan, 2))
    assert score == sum(benefits[v] for v in plan) >= gwmin(benefits, edges)[1]
    if n <= 60:
        h = nx.complement(g)
        nx.set_node_attributes(h, benefits, "weight")
        _, clique_weight = nx.max_weight_clique(h, weight="weight")
        assert score == clique_weight


# ------------------------------------------------------------------------------------------ workloads

def test_traffic_workload_explain_and_dot():
    w = sparkcep.compile_shared_workload((WORKLOADS / "sharon_traffic.cep").read_text())
    text = w.explain()
    assert "candidates (p, Q_p): " in text and "chosen plan: " in text and "Rate(E) = 1 event per window" in text
    assert {c.pattern for c in w.plan.candidates if c.origin is None} == {
        p for p, _ in oracle_sharon.TABLE1_CANDIDATES.values()}
    dot = w.explain(format="dot")
    assert dot.startswith("graph sharon {") and dot.count(" -- ") == len(w.plan.conflicts)


def test_stats_file_changes_the_rates(tmp_path):
    stats = tmp_path / "stats.json"
    stats.write_text('{"rates": {"OakSt": 40, "MainSt": 40, "ParkAve": 5}}')
    w = sparkcep.compile_shared_workload((WORKLOADS / "sharon_traffic.cep").read_text(), stats=stats)
    assert w.plan.rates_source == f"statistics file {stats}"
    assert "OakSt 40" in w.explain() and "StateSt 1*" in w.explain()


def test_declared_rates_in_the_workload(tmp_path):
    """``WITH RATES (...)`` before the queries feeds the benefit model; a statistics file still wins; the clause
    prints back as written; a type declared twice is an error with line, column and caret."""
    queries = (WORKLOADS / "sharon_traffic.cep").read_text()
    text = "WITH RATES (OakSt = 40, MainSt = 40.5, ParkAve = 5);\n" + queries
    workload = parse_workload(text)
    assert workload.rates == (("OakSt", 40.0), ("MainSt", 40.5), ("ParkAve", 5.0))
    assert parse_workload(format_workload(workload)) == workload
    w = sparkcep.compile_shared_workload(text)
    assert w.plan.rates_source == "the workload's WITH RATES clause"
    assert "MainSt 40.5" in w.explain() and "StateSt 1*" in w.explain()
    default = sparkcep.compile_shared_workload(queries)
    assert {c.pattern: c.benefit for c in w.plan.candidates} != {c.pattern: c.benefit for c in default.plan.candidates}
    stats = tmp_path / "stats.json"
    stats.write_text('{"rates": {"OakSt": 7}}')
    assert sparkcep.compile_shared_workload(text, stats=stats).plan.rates_source == f"statistics file {stats}"
    with pytest.raises(CEPSyntaxError) as err:
        parse_workload("WITH RATES (A = 1,\n  A = 2) PATTERN SEQ(A a, B b) WITHIN 5")
    assert "declared twice" in str(err.value) and "line 2, column 3" in str(err.value)


def test_rates_too_large_for_the_cost_model_are_one_clear_error(tmp_path):
    """Sharon's costs multiply the rates along a pattern: rates whose products overflow the finite doubles (a
    benefit ``inf − inf``, NaN: a ValueError from explain before) are refused with one message naming where the
    rates came from; large rates whose costs stay finite still plan."""
    queries = (WORKLOADS / "sharon_traffic.cep").read_text()
    for text in ("WITH RATES (OakSt = 1.5e308, MainSt = 40);\n" + queries,
                 "WITH RATES (OakSt = 1e160, MainSt = 1e160, StateSt = 1e160);\n" + queries):
        with pytest.raises(CEPError, match="the event rates of the workload's WITH RATES clause are too large"):
            sparkcep.compile_shared_workload(text).explain()
    stats = tmp_path / "stats.json"
    stats.write_text('{"rates": {"OakSt": 1e300, "MainSt": 1e300}}')
    with pytest.raises(CEPError, match=f"the event rates of statistics file {stats} are too large"):
        sparkcep.compile_shared_workload(queries, stats=stats)
    assert "OakSt 1e+50" in sparkcep.compile_shared_workload("WITH RATES (OakSt = 1e50);\n" + queries).explain()


def test_out_of_scope_queries_run_alone():
    text = ("a: RETURN COUNT(*) PATTERN SEQ(A, B, C) WHERE [id] WITHIN 10;"
            "b: RETURN COUNT(*) PATTERN SEQ(A, B) WHERE [id] WITHIN 10;"
            "c: RETURN COUNT(*) PATTERN SEQ(A, B+) WHERE [id] WITHIN 10;"
            "d: PATTERN SEQ(A a, B b) WHERE [id] WITHIN 10")
    w = sparkcep.compile_shared_workload(text)
    reasons = {q.name: q.reason for q in w.plan.queries}
    assert reasons["a"] is None and reasons["b"] is None
    assert reasons["c"] == "pattern is not a SEQ of event types" and reasons["d"] == "not a trend-aggregate query"
    assert "c: runs alone" in w.explain()


def test_cli_explain_workload_text_dot_and_stats(capsys, tmp_path):
    from sparkcep.cli import main

    path = str(WORKLOADS / "sharon_ecommerce.cep")
    assert main(["explain", path]) == 0
    out = capsys.readouterr().out
    assert out.count("r0 := Source[") == 4 and "-- sharing across the workload (Sharon)" in out
    assert "chosen plan: {p1}" in out
    assert main(["explain", path, "--format", "dot"]) == 0
    assert capsys.readouterr().out.startswith("graph sharon {")
    stats = tmp_path / "rates.json"
    stats.write_text('{"Laptop": 3, "Case": 3, "Adapter": 2}')
    assert main(["explain", path, "--stats", str(stats)]) == 0
    assert f"from statistics file {stats}" in capsys.readouterr().out
    assert main(["explain", path, "--format", "dot", "--query", "q8"]) == 2
    assert "sharing graph of a workload" in capsys.readouterr().err
    stats.write_text("[1, 2]")
    assert main(["explain", path, "--stats", str(stats)]) == 2
