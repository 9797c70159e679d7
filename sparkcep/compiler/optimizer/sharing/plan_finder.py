"""Rule: the sharing plan finder (Sharon §6), GWMIN, and the time budget.

After the reduction of §5 (Algorithm 2), an optimal plan is a maximum weight independent set of the reduced
Sharon graph (Lemma 1).  The paper's Algorithms 3–4 walk every *valid* plan level by level, Apriori style
(:func:`valid_space_search`, kept as the reference); the number of valid plans grows exponentially with the
candidates (2.06 million at 40 route queries of ``bench/sharing.py``).  :func:`choose_plan` instead runs an
exact branch and bound (:func:`branch_and_bound`): the reduced graph breaks apart into connected components
(queries over different routes never conflict), each optimized alone; inside a component a candidate
heavier than all its conflicting candidates together is taken outright, the search branches on the candidate
with the most conflicts, a branch is skipped when a clique-cover upper bound shows it cannot reach the
other's optimum, and optima of sub-graphs are memoized.  Ties are broken as Algorithm 4 breaks them (fewest
candidates, then the first in name order), so both return the same plan.  The conflict-free candidates
(:mod:`~sparkcep.compiler.optimizer.sharing.prune`) are added to the plan found.

A time budget may still be given (§6 "Effectiveness"): when it runs out, the greedy GWMIN plan is used, and
the plan says so.

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
    weight = {v: g.nodes[v]["weight"] for v in g}
    near = {v: set(g.neighbors(v)) for v in g}
    rest = sorted(g, key=str)
    chosen = set()
    while rest:
        v = max(rest, key=lambda u: weight[u] / (len(near[u]) + 1))
        chosen.add(v)
        gone = near[v] | {v}
        for u in gone:
            for x in near[u] - gone:
                near[x].discard(u)
        rest = [u for u in rest if u not in gone]
    return frozenset(chosen), float(sum(weight[v] for v in chosen))


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


_EPS = 1e-9


def _better(score: float, mask: int, best_score: float, best: int) -> bool:
    """Is the plan ``mask`` with ``score`` preferred to ``best``: a higher score, then fewer candidates, then
    the lexicographically smaller sorted tuple of candidate indexes (the order in which Algorithm 4's
    level-wise walk first meets plans, so both searches return the same plan)."""
    tol = _EPS * max(1.0, abs(score), abs(best_score))
    if score > best_score + tol:
        return True
    if score < best_score - tol:
        return False
    n, m = mask.bit_count(), best.bit_count()
    if n != m:
        return n < m
    diff = mask ^ best
    return bool(diff & -diff & mask)


class _BranchAndBound:
    """Exact maximum weight independent set on bitmasks: split into connected components (solved apart and
    added up), take every vertex heavier than its whole neighbourhood (it is in every optimum), branch on a
    vertex of highest degree (take it: drop its neighbours; leave it: drop it), and skip a branch whose upper
    bound, the weight of a greedy clique cover (an independent set holds at most one vertex per clique),
    cannot reach the other branch's optimum.  Optima of vertex subsets are memoized."""

    def __init__(self, w: list[float], adj: list[int], deadline: float | None):
        self.w, self.adj, self.deadline = w, adj, deadline
        self.order = sorted(range(len(w)), key=lambda i: (-w[i], i))  # clique cover: heaviest first
        #: per vertex, its neighbours at least as heavy: while one of them is left, it cannot be forced
        self.heavier = [sum(1 << u for u in self._bits(adj[v]) if w[u] >= w[v]) for v in range(len(w))]
        self.memo: dict[int, tuple[float, int]] = {}
        self.nodes = 0
        self.components = 0

    def _bits(self, mask: int):
        while mask:
            low = mask & -mask
            yield low.bit_length() - 1
            mask ^= low

    def _component(self, mask: int) -> int:
        seen = frontier = mask & -mask
        while frontier:
            reach = 0
            for i in self._bits(frontier):
                reach |= self.adj[i]
            frontier = reach & mask & ~seen
            seen |= frontier
        return seen

    def bound(self, mask: int) -> float:
        """Σ over a greedy clique cover of ``mask`` of each clique's heaviest weight."""
        cliques: list[list[int]] = []  # [vertices adjacent to every member]
        total = 0.0
        for v in self.order:
            if not mask >> v & 1:
                continue
            for c in cliques:
                if c[0] >> v & 1:
                    c[0] &= self.adj[v]
                    break
            else:
                cliques.append([self.adj[v]])
                total += self.w[v]
        return total

    def solve(self, mask: int, top: bool = False) -> tuple[float, int]:
        """The best plan (score, vertex mask) within ``mask``."""
        if not mask:
            return 0.0, 0
        hit = self.memo.get(mask)
        if hit is not None:
            return hit
        self.nodes += 1
        if self.deadline is not None and not self.nodes & 1023 and time.perf_counter() > self.deadline:
            raise BudgetExceeded(frozenset(), 0.0, self.nodes)
        first = self._component(mask)
        if first != mask:  # independent components: optimize each, add up
            score, chosen, rest = 0.0, 0, mask
            while rest:
                part = self._component(rest)
                rest &= ~part
                self.components += int(top)
                s, c = self.solve(part)
                score, chosen = score + s, chosen | c
            result = (score, chosen)
        else:
            self.components += int(top)
            result = self._connected(mask)
        self.memo[mask] = result
        return result

    def _connected(self, mask: int) -> tuple[float, int]:
        w, adj = self.w, self.adj
        forced, forced_score, rest = 0, 0.0, mask
        heavier = self.heavier
        changed = True
        while changed:  # a vertex heavier than all its neighbours together is in every optimal plan
            changed = False
            for v in self._bits(rest):
                if not rest >> v & 1 or heavier[v] & rest:
                    continue
                near = adj[v] & rest
                if w[v] > sum(w[u] for u in self._bits(near)) + _EPS * max(1.0, w[v]):
                    forced |= 1 << v
                    forced_score += w[v]
                    rest &= ~(near | 1 << v)
                    changed = True
        if forced:
            s, c = self.solve(rest)
            return forced_score + s, forced | c
        if mask.bit_count() == 1:
            v = mask.bit_length() - 1
            return w[v], mask
        v = max(self._bits(mask), key=lambda i: ((adj[i] & mask).bit_count(), -i))
        s, c = self.solve(mask & ~(adj[v] | 1 << v))
        best = (w[v] + s, c | 1 << v)
        without = mask & ~(1 << v)
        if self.bound(without) >= best[0] - _EPS * max(1.0, best[0]):
            s, c = self.solve(without)
            if _better(s, c, *best):
                best = (s, c)
        return best


def branch_and_bound(g: nx.Graph, deadline: float | None = None) -> tuple[frozenset, float, int, int]:
    """An optimal plan of ``g`` (a maximum weight independent set; ties as :func:`valid_space_search`), its
    score, the search nodes expanded and the number of connected components.  Raises
    :class:`BudgetExceeded` after ``deadline`` (a ``time.perf_counter()`` value)."""
    names = sorted(g, key=str)
    index = {v: i for i, v in enumerate(names)}
    w = [float(g.nodes[v]["weight"]) for v in names]
    adj = [sum(1 << index[u] for u in g.neighbors(v)) for v in names]
    search = _BranchAndBound(w, adj, deadline)
    score, mask = search.solve((1 << len(names)) - 1, top=True)
    return frozenset(names[i] for i in search._bits(mask)), score, search.nodes, search.components


def search_plan(g: nx.Graph, budget: float | None) -> tuple[frozenset, float, str]:
    """Reduce ``g`` (Algorithm 2), find an optimal plan of the reduced graph by branch and bound over its
    connected components (:func:`branch_and_bound`) within ``budget`` seconds, add the conflict-free
    candidates; on timeout GWMIN's plan.  Returns (plan, score, how it was found)."""
    minimum = guaranteed_weight(g)
    reduced, free, _ = reduce(g, minimum)
    free_score = float(sum(g.nodes[v]["weight"] for v in free))
    deadline = None if budget is None else time.perf_counter() + budget
    try:
        best, score, nodes, parts = branch_and_bound(reduced, deadline)
    except BudgetExceeded:
        greedy, greedy_score = gwmin_graph(g)
        return greedy, greedy_score, f"greedy GWMIN (time budget {budget:g} s exceeded)"
    except RecursionError:  # a component so large and connected that the branching outgrows Python's stack
        greedy, greedy_score = gwmin_graph(g)
        return greedy, greedy_score, "greedy GWMIN (the search went deeper than Python's recursion limit)"
    return best | frozenset(free), score + free_score, (
        f"Sharon plan finder (optimal; branch and bound, {parts} component{'s' * (parts != 1)}, "
        f"{nodes} search node{'s' * (nodes != 1)})")


def enumeration_plan(g: nx.Graph, budget: float | None) -> tuple[frozenset, float, str]:
    """The paper's plan finder as first built: reduction, then the level-wise walk of every valid plan
    (Algorithms 3–4, :func:`valid_space_search`); on timeout the better of the best plan seen and GWMIN.
    Kept as the reference :func:`search_plan` is tested and benchmarked against."""
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
    return best | frozenset(free), score + free_score, f"Algorithms 3-4 (optimal; {visited} valid plans)"


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
