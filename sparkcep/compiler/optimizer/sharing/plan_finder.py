"""Rule: the sharing plan finder (Sharon §6, Algorithms 3–4), GWMIN, and the time budget.

The finder walks the *valid* plans (independent sets of the reduced Sharon graph) level by level, as
Apriori does: a plan of size ``s + 1`` is built only from two valid plans of size ``s`` that agree on their
first ``s − 1`` candidates and whose last candidates do not conflict (Lemma 6), so invalid branches are cut
at their roots (Lemma 4) and every valid plan is seen once (Lemma 7).  The conflict-free candidates
(:mod:`~sparkcep.compiler.optimizer.sharing.prune`) are added to the best plan found.

Since the valid space can be exponential, a time budget may be given (§6 "Effectiveness"): when it runs out,
the better of the best plan seen so far and the greedy GWMIN plan is used, and the plan says so.

Example (Sharon Fig. 4 and Examples 7, 12)::

    >>> benefits = {"p1": 25, "p2": 9, "p3": 12, "p4": 15, "p5": 20, "p6": 8, "p7": 18}
    >>> conflicts = [("p1", "p2"), ("p1", "p3"), ("p1", "p4"), ("p1", "p5"), ("p1", "p6"), ("p2", "p3"),
    ...              ("p2", "p5"), ("p3", "p4"), ("p3", "p5"), ("p4", "p5")]
    >>> plan, score = find_sharing_plan(benefits, conflicts)
    >>> sorted(plan), score
    (['p2', 'p4', 'p6', 'p7'], 50.0)
    >>> greedy, greedy_score = gwmin(benefits, conflicts)
    >>> sorted(greedy), greedy_score
    (['p1', 'p7'], 43.0)
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import replace

import networkx as nx

from sparkcep.compiler.optimizer.sharing.graph import graph_of, sharon_graph
from sparkcep.compiler.optimizer.sharing.ir import WorkloadPlan
from sparkcep.compiler.optimizer.sharing.prune import guaranteed_weight, reduce


class BudgetExceeded(Exception):
    """The plan finder ran out of its time budget (carries the best plan seen so far)."""

    def __init__(self, best: frozenset, score: float, levels: int):
        super().__init__(f"time budget exceeded at level {levels}")
        self.best, self.score, self.levels = best, score, levels


def gwmin_graph(g: nx.Graph) -> tuple[frozenset, float]:
    """GWMIN (Sakai et al.): repeatedly take the vertex with the largest ``weight / (degree + 1)`` in the
    remaining graph (ties: the smallest name), drop it and its neighbours."""
    rest = g.copy()
    chosen = set()
    while rest:
        v = max(sorted(rest, key=str), key=lambda u: rest.nodes[u]["weight"] / (rest.degree(u) + 1))
        chosen.add(v)
        rest.remove_nodes_from([v, *rest.neighbors(v)])
    return frozenset(chosen), float(sum(g.nodes[v]["weight"] for v in chosen))


def valid_space_search(g: nx.Graph, deadline: float | None = None) -> tuple[frozenset, float, int]:
    """Algorithms 3–4 on ``g``: the best independent set (ties: the first found, smallest first), its score,
    and the number of valid plans visited.  Raises :class:`BudgetExceeded` after ``deadline``
    (a ``time.perf_counter()`` value)."""
    names = sorted(g, key=str)
    index = {v: i for i, v in enumerate(names)}
    w = [float(g.nodes[v]["weight"]) for v in names]
    adj = [frozenset(index[u] for u in g.neighbors(v)) for v in names]
    best: tuple[int, ...] = ()
    best_score = 0.0
    for i, x in enumerate(w):
        if x > best_score:
            best, best_score = (i,), x
    # a level: prefix (s-1 candidates) -> [(last candidate, score of the plan)], last ascending
    level: dict[tuple[int, ...], list[tuple[int, float]]] = {(): [(i, w[i]) for i in range(len(names))]}
    visited = len(names)
    depth = 1
    tick = 0
    while level:
        nxt: dict[tuple[int, ...], list[tuple[int, float]]] = {}
        for prefix, lasts in level.items():
            for a_pos, (a, score_a) in enumerate(lasts):
                child_prefix = (*prefix, a)
                children = []
                near = adj[a]
                for b, _ in lasts[a_pos + 1:]:
                    if b in near:
                        continue
                    score = score_a + w[b]
                    children.append((b, score))
                    if score > best_score:
                        best, best_score = (*child_prefix, b), score
                if children:
                    nxt[child_prefix] = children
                    visited += len(children)
                tick += 1
                if deadline is not None and not tick & 255 and time.perf_counter() > deadline:
                    raise BudgetExceeded(frozenset(names[i] for i in best), best_score, depth)
        level = nxt
        depth += 1
    return frozenset(names[i] for i in best), best_score, visited


def search_plan(g: nx.Graph, budget: float | None) -> tuple[frozenset, float, str]:
    """Reduce ``g`` (Algorithm 2), search its valid space (Algorithms 3–4) within ``budget`` seconds, add the
    conflict-free candidates; on timeout the better of the best plan seen and GWMIN.  Returns (plan, score,
    how it was found)."""
    minimum = guaranteed_weight(g)
    reduced, free, _ = reduce(g, minimum)
    free_score = float(sum(g.nodes[v]["weight"] for v in free))
    deadline = None if budget is None else time.perf_counter() + budget
    try:
        best, score, visited = valid_space_search(reduced, deadline)
    except BudgetExceeded as stop:
        greedy, greedy_score = gwmin_graph(g)
        partial = stop.best | frozenset(free)
        if greedy_score >= stop.score + free_score:
            return greedy, greedy_score, f"greedy GWMIN (time budget {budget:g} s exceeded at level {stop.levels})"
        return partial, stop.score + free_score, (f"best plan seen before the time budget {budget:g} s ran out "
                                                  f"(level {stop.levels}; beats GWMIN {greedy_score:g})")
    return best | frozenset(free), score + free_score, f"Sharon plan finder (optimal; {visited} valid plans)"


def find_sharing_plan(benefits: Mapping[str, float], conflicts: Iterable[tuple[str, str]], *,
                      budget: float | None = None) -> tuple[frozenset[str], float]:
    """An optimal sharing plan (Definition 9) of the candidates ``benefits`` (name → BValue) with the given
    sharing conflicts, and its score.  Non-beneficial candidates (BValue ≤ 0) are never chosen.  With a
    ``budget`` in seconds the search may stop early and return the greedy plan (see the module doc)."""
    g = graph_of({k: v for k, v in benefits.items() if v > 0}, conflicts)
    plan, score, _ = search_plan(g, budget)
    return frozenset(plan), float(score)


def gwmin(benefits: Mapping[str, float], conflicts: Iterable[tuple[str, str]]) -> tuple[frozenset[str], float]:
    """The greedy GWMIN plan of the beneficial candidates and its score."""
    g = graph_of({k: v for k, v in benefits.items() if v > 0}, conflicts)
    return gwmin_graph(g)


def gwmin_guaranteed_weight(benefits: Mapping[str, float], conflicts: Iterable[tuple[str, str]]) -> float:
    """GWMIN's guaranteed weight (Equation 10) on the graph of the beneficial candidates."""
    return guaranteed_weight(graph_of({k: v for k, v in benefits.items() if v > 0}, conflicts))


def choose_plan(plan: WorkloadPlan) -> WorkloadPlan:
    g = sharon_graph(plan)
    greedy, greedy_score = gwmin_graph(g)
    chosen, score, method = search_plan(g, plan.budget)
    return replace(plan, chosen=tuple(sorted(chosen, key=_natural)), score=score,
                   greedy=tuple(sorted(greedy, key=_natural)), greedy_score=greedy_score, method=method)


def _natural(name: str) -> tuple:
    """``p2 < p10``; ``p1.2`` (option 2 of p1) after ``p1``."""
    return tuple(int(x) if x.isdigit() else x for x in name.lstrip("p").split("."))
