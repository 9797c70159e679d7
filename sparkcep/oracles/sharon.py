"""Brute-force reference for Sharon's sharing-plan optimizer (Sharon §4–§6, LANGUAGE.md §7).

A *sharing candidate* ``(p, Q_p)`` is a pattern (a tuple of event types, a contiguous piece of each query's
sequence) shared by the queries ``Q_p``, weighted by its benefit value ``BValue``.  Two candidates are in
*sharing conflict* (Definition 6) if their patterns overlap in a query both share: in that query the event
positions they cover intersect (a suffix of one is a prefix of the other, or one contains the other).  The
*Sharon graph* (Definition 10) has the candidates as weighted vertices and the conflicts as edges; a valid
sharing plan is an independent set, its score the sum of its weights, an optimal plan a maximum weight
independent set (Lemma 1).

This module is slow and literal on purpose: the optimum is found by trying every subset.

Example (the traffic workload of Sharon Figure 1 / Table 1, reconstructed in :func:`figure4_graph`)::

    >>> g = figure4_graph()
    >>> round(gwmin_guaranteed_weight(g), 2), sorted(gwmin(g)), plan_score(g, gwmin(g))
    (38.57, ['p1', 'p7'], 43)
    >>> plan, score = optimal_plan(g)
    >>> sorted(plan), score
    (['p2', 'p4', 'p6', 'p7'], 50)
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import networkx as nx

__all__ = ["figure4_graph", "gwmin", "gwmin_guaranteed_weight", "optimal_plan", "plan_score",
           "sharon_graph"]

# Sharon Figure 1 shows the queries only as a picture; Table 1 lists each shared pattern with the queries
# containing it, LANGUAGE.md §8 gives q1 = SEQ(OakSt, MainSt, StateSt), and Example 7's guaranteed weight
# 25/6 + 9/4 + 12/5 + 15/4 + 20/5 + 8/2 + 18/1 fixes every vertex degree (5, 3, 4, 3, 4, 1, 0).  Queries whose
# sequences contain exactly the patterns Table 1 assigns them (q5, q6, q7 only need their shared pieces):
FIGURE1_QUERIES: dict[str, tuple[str, ...]] = {
    "q1": ("OakSt", "MainSt", "StateSt"),
    "q2": ("OakSt", "MainSt", "WestSt"),
    "q3": ("ParkAve", "OakSt", "MainSt"),
    "q4": ("ParkAve", "OakSt", "MainSt", "WestSt"),
    "q5": ("MainSt", "StateSt"),
    "q6": ("ElmSt", "ParkAve"),
    "q7": ("ElmSt", "ParkAve"),
}
#: Sharon Table 1: pattern → queries sharing it.
TABLE1_CANDIDATES: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {
    "p1": (("OakSt", "MainSt"), frozenset({"q1", "q2", "q3", "q4"})),
    "p2": (("ParkAve", "OakSt"), frozenset({"q3", "q4"})),
    "p3": (("ParkAve", "OakSt", "MainSt"), frozenset({"q3", "q4"})),
    "p4": (("MainSt", "WestSt"), frozenset({"q2", "q4"})),
    "p5": (("OakSt", "MainSt", "WestSt"), frozenset({"q2", "q4"})),
    "p6": (("MainSt", "StateSt"), frozenset({"q1", "q5"})),
    "p7": (("ElmSt", "ParkAve"), frozenset({"q6", "q7"})),
}
#: Sharon Examples 7 and 12: the benefit values of p1..p7.
EXAMPLE7_BENEFITS: dict[str, float] = {"p1": 25, "p2": 9, "p3": 12, "p4": 15, "p5": 20, "p6": 8, "p7": 18}
#: The conflict edges of Figure 4 that :func:`sharon_graph` derives from the above (10 edges; degrees
#: p1 5, p2 3, p3 4, p4 3, p5 4, p6 1, p7 0, as Example 7 requires):
#:   p1–p2 (q3, q4: ParkAve OakSt | OakSt MainSt)   p1–p3, p1–p5 (containment)   p1–p4 (q2, q4 at MainSt)
#:   p1–p6 (q1 at MainSt)   p2–p3 (containment)   p2–p5 (q4 at OakSt)   p3–p4 (q4 at MainSt)
#:   p3–p5 (q4 at OakSt MainSt)   p4–p5 (containment).  Not in conflict: p2–p4 (Example 5), and p6, p7
#:   with anything else but p1 (no common query).
FIGURE4_EDGES: frozenset[frozenset[str]] = frozenset(frozenset(e) for e in [
    ("p1", "p2"), ("p1", "p3"), ("p1", "p4"), ("p1", "p5"), ("p1", "p6"),
    ("p2", "p3"), ("p2", "p5"), ("p3", "p4"), ("p3", "p5"), ("p4", "p5"),
])


def _positions(pattern: Sequence[str], query: Sequence[str]) -> list[set[int]]:
    """The sets of positions of ``query`` covered by each contiguous occurrence of ``pattern``."""
    n = len(pattern)
    return [set(range(i, i + n)) for i in range(len(query) - n + 1)
            if tuple(query[i:i + n]) == tuple(pattern)]


def sharon_graph(candidates: Mapping[str, tuple[Sequence[str], frozenset[str]]],
                 queries: Mapping[str, Sequence[str]], benefits: Mapping[str, float]) -> nx.Graph:
    """The Sharon graph (Definition 10): a vertex per candidate with ``weight`` = its benefit, an edge per
    sharing conflict (Definition 6: the patterns overlap in a query both candidates share)."""
    g = nx.Graph()
    for name in candidates:
        g.add_node(name, weight=benefits[name])
    for (a, (pa, qa)), (b, (pb, qb)) in itertools.combinations(candidates.items(), 2):
        if any(x & y for q in sorted(qa & qb)
               for x in _positions(pa, queries[q]) for y in _positions(pb, queries[q])):
            g.add_edge(a, b)
    return g


def figure4_graph() -> nx.Graph:
    """Sharon Figure 4: the graph of Table 1's candidates with Example 7's benefits."""
    return sharon_graph(TABLE1_CANDIDATES, FIGURE1_QUERIES, EXAMPLE7_BENEFITS)


def gwmin_guaranteed_weight(g: nx.Graph) -> float:
    """GWMIN's guaranteed weight (Sharon Equation 10): ``Σ weight(v) / (degree(v) + 1)``."""
    return sum(g.nodes[v]["weight"] / (g.degree(v) + 1) for v in g)


def gwmin(g: nx.Graph) -> set[str]:
    """The greedy plan of GWMIN (Sakai et al.): repeatedly take the vertex with the largest
    ``weight / (degree + 1)`` in the remaining graph (ties: smallest name), drop it and its neighbours."""
    rest = g.copy()
    chosen = set()
    while rest:
        v = max(sorted(rest), key=lambda u: rest.nodes[u]["weight"] / (rest.degree(u) + 1))
        chosen.add(v)
        rest.remove_nodes_from([v, *rest.neighbors(v)])
    return chosen


def plan_score(g: nx.Graph, plan: set[str]) -> float:
    """The score of a sharing plan (Definition 8): the sum of its candidates' benefits."""
    return sum(g.nodes[v]["weight"] for v in plan)


def optimal_plan(g: nx.Graph) -> tuple[set[str], float]:
    """An optimal sharing plan (Definition 9) by trying every subset: a maximum weight independent set and
    its score.  Ties go to the first set in order of size, then names."""
    best: tuple[set[str], float] = (set(), 0)
    nodes = sorted(g)
    for k in range(1, len(nodes) + 1):
        for subset in itertools.combinations(nodes, k):
            if any(g.has_edge(a, b) for a, b in itertools.combinations(subset, 2)):
                continue
            score = plan_score(g, set(subset))
            if score > best[1]:
                best = (set(subset), score)
    return best
