"""Rules: prune candidates from the search (Sharon §3.4 and §5, Algorithm 2).

* :func:`prune_non_beneficial` — candidates with ``BValue ≤ 0`` (Def. 5) are not vertices of the graph.
* :func:`reduce_graph` — GWMIN's guaranteed weight ``Σ w(v)/(deg(v)+1)`` (Eq. 10) is a lower bound of the
  optimal score; a candidate whose best possible plan ``Score_max(v)`` (Eq. 11) is below it is
  *conflict-ridden* (Def. 13) and removed; a candidate without conflicts is *conflict-free* (Def. 14) and is
  in every optimal plan.  Repeated until nothing changes.

Algorithm 2 leaves one detail implicit: once conflict-free candidates are set aside, ``Score_max`` of the
others must still count them (they are in the plan), or a later round could prune a candidate of the
optimum (on Fig. 4, ``p2`` after ``p7`` is set aside).  :func:`score_max` adds them.
"""

from __future__ import annotations

from dataclasses import replace

import networkx as nx

from sparkcep.compiler.optimizer.sharing.graph import sharon_graph
from sparkcep.compiler.optimizer.sharing.ir import Pruned, WorkloadPlan


def guaranteed_weight(g: nx.Graph) -> float:
    """GWMIN's guaranteed weight (Equation 10)."""
    return sum(g.nodes[v]["weight"] / (g.degree(v) + 1) for v in g)


def score_max(g: nx.Graph, v, taken: float = 0.0, total: float | None = None) -> float:
    """Equation 11: the weight of every vertex not adjacent to ``v`` (``v`` included), plus ``taken`` (the
    conflict-free candidates already set aside).  ``total``: the weight of all of ``g``, if known."""
    if total is None:
        total = sum(g.nodes[u]["weight"] for u in g)
    return taken + total - sum(g.nodes[u]["weight"] for u in g.neighbors(v))


def reduce(g: nx.Graph, minimum: float) -> tuple[nx.Graph, list, list[tuple[object, float]]]:
    """Algorithm 2 on a copy of ``g``: the reduced graph, the conflict-free vertices, and the conflict-ridden
    vertices with their ``Score_max``."""
    g = g.copy()
    free: list = []
    ridden: list[tuple[object, float]] = []
    taken = 0.0
    changed = True
    while changed:
        changed = False
        total = sum(g.nodes[u]["weight"] for u in g)
        for v in sorted(g, key=str):
            if g.degree(v) == 0:
                free.append(v)
                taken += g.nodes[v]["weight"]
                total -= g.nodes[v]["weight"]
                g.remove_node(v)
                changed = True
            else:
                smax = score_max(g, v, taken, total)
                if smax < minimum:
                    ridden.append((v, smax))
                    total -= g.nodes[v]["weight"]
                    g.remove_node(v)
                    changed = True
    return g, free, ridden


def prune_non_beneficial(plan: WorkloadPlan) -> WorkloadPlan:
    gone = plan.pruned_names
    new = tuple(Pruned(c.name, f"non-beneficial: BValue {c.benefit:g} <= 0")
                for c in plan.candidates if c.name not in gone and c.benefit <= 0)
    return replace(plan, pruned=plan.pruned + new)


def reduce_graph(plan: WorkloadPlan) -> WorkloadPlan:
    g = sharon_graph(plan)
    minimum = guaranteed_weight(g)
    _, free, ridden = reduce(g, minimum)
    new = tuple(Pruned(v, f"conflict-ridden: Score_max {s:g} < guaranteed weight {minimum:.2f}")
                for v, s in ridden)
    return replace(plan, guaranteed=minimum, conflict_free=tuple(free), pruned=plan.pruned + new)
