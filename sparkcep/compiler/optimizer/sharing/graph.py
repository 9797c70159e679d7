"""Rule: the Sharon graph (Definition 10, Algorithm 1): vertices are the beneficial candidates weighted by
their BValue, edges their sharing conflicts (Definition 6).

Two candidates conflict if their patterns overlap in a query both share: in that query the positions they
cover intersect (a suffix of one is a prefix of the other, or one contains the other).  The query causes
the conflict.  :func:`sharon_graph` gives the graph as a :class:`networkx.Graph` (node attribute
``weight``), which is what :mod:`~sparkcep.compiler.optimizer.sharing.prune` and
:mod:`~sparkcep.compiler.optimizer.sharing.plan_finder` work on.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import replace

import networkx as nx

from sparkcep.compiler.optimizer.sharing.candidates import occurrences
from sparkcep.compiler.optimizer.sharing.ir import Candidate, WorkloadPlan


def cover(pattern: tuple[str, ...], sequence: tuple[str, ...]) -> int:
    """The positions of ``sequence`` covered by the occurrences of ``pattern``, as a bitmask."""
    mask = 0
    for at in occurrences(pattern, sequence):
        mask |= ((1 << len(at)) - 1) << at.start
    return mask


def causing_queries(plan: WorkloadPlan, a: Candidate, b: Candidate) -> frozenset[str]:
    """The queries in which the patterns of ``a`` and ``b`` overlap (empty: no conflict)."""
    out = set()
    for name in a.queries & b.queries:
        seq = plan.query(name).pattern
        if cover(a.pattern, seq) & cover(b.pattern, seq):
            out.add(name)
    return frozenset(out)


def conflict_edges(plan: WorkloadPlan, candidates: Iterable[Candidate]) -> tuple[tuple[str, str], ...]:
    """Every pair of ``candidates`` in conflict, found per query: only candidates sharing a query are
    compared, each by the positions its pattern covers there."""
    by_query: dict[str, list[tuple[str, int]]] = {}
    covers: dict[tuple, int] = {}
    for c in candidates:
        for name in c.queries:
            key = (c.pattern, name)
            if key not in covers:
                covers[key] = cover(c.pattern, plan.query(name).pattern)
            by_query.setdefault(name, []).append((c.name, covers[key]))
    edges = set()
    for holders in by_query.values():
        for (a, ma), (b, mb) in itertools.combinations(holders, 2):
            if ma & mb:
                edges.add((a, b) if a < b else (b, a))
    return tuple(sorted(edges))


def build_conflicts(plan: WorkloadPlan) -> WorkloadPlan:
    return replace(plan, conflicts=conflict_edges(plan, plan.live))


def graph_of(benefits: Mapping[str, float], conflicts: Iterable[tuple[str, str]]) -> nx.Graph:
    """A weighted conflict graph from plain data (edges naming unknown vertices are ignored)."""
    g = nx.Graph()
    for name, w in benefits.items():
        g.add_node(name, weight=float(w))
    for a, b in conflicts:
        if a in g and b in g and a != b:
            g.add_edge(a, b)
    return g


def sharon_graph(plan: WorkloadPlan) -> nx.Graph:
    """The Sharon graph of the candidates still in the search."""
    return graph_of({c.name: c.benefit for c in plan.live}, plan.conflicts)
