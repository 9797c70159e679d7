"""Sharon multi-query sharing: which queries share the aggregation of which sub-patterns.

Rules, one per module, each a pure ``WorkloadPlan → WorkloadPlan`` function, applied in :data:`RULES` order:

1. :func:`~.candidates.find_candidates` — sharable patterns and candidates ``(p, Q_p)`` (Def. 3)
2. :func:`~.benefit.estimate_benefits` — BValue from event-type rates (Eq. 1–8, on the executor's cut)
3. :func:`~.prune.prune_non_beneficial` — BValue ≤ 0 leaves the search (§3.4)
4. :func:`~.resolve_conflicts.resolve_conflicts` — candidates expanded into options (§7.1)
5. :func:`~.graph.build_conflicts` — the Sharon graph's edges (Def. 6, 10)
6. :func:`~.prune.reduce_graph` — GWMIN's guaranteed weight, conflict-ridden / conflict-free (Alg. 2)
7. :func:`~.plan_finder.choose_plan` — an optimal plan of the reduced graph (§6; exact branch and bound over its
   connected components instead of Alg. 3–4's walk of every valid plan), GWMIN on timeout

Example::

    >>> from sparkcep.compiler.optimizer.sharing.ir import SharingQuery
    >>> qs = [SharingQuery(n, p) for n, p in [("a", ("X", "Y", "Z")), ("b", ("X", "Y")), ("c", ("W", "Z"))]]
    >>> optimize_workload(qs).chosen
    ('p1',)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sparkcep.compiler.optimizer.sharing.benefit import estimate_benefits
from sparkcep.compiler.optimizer.sharing.candidates import find_candidates
from sparkcep.compiler.optimizer.sharing.graph import build_conflicts
from sparkcep.compiler.optimizer.sharing.ir import Candidate, Pruned, SharingQuery, WorkloadPlan
from sparkcep.compiler.optimizer.sharing.plan_finder import (
    choose_plan,
    find_sharing_plan,
    gwmin,
    gwmin_guaranteed_weight,
)
from sparkcep.compiler.optimizer.sharing.prune import prune_non_beneficial, reduce_graph
from sparkcep.compiler.optimizer.sharing.rates import DEFAULT_RATE
from sparkcep.compiler.optimizer.sharing.resolve_conflicts import resolve_conflicts

__all__ = ["RULES", "Candidate", "Pruned", "SharingQuery", "WorkloadPlan", "find_sharing_plan", "gwmin",
           "gwmin_guaranteed_weight", "optimize_workload"]

RULES = (find_candidates, estimate_benefits, prune_non_beneficial, resolve_conflicts, build_conflicts,
         reduce_graph, choose_plan)


def optimize_workload(queries: Sequence[SharingQuery], rates: Mapping[str, float] | None = None, *,
                      rates_source: str | None = None, budget: float | None = 5.0, resolve: bool = True,
                      default_rate: float = DEFAULT_RATE, rules=RULES) -> WorkloadPlan:
    """Run the sharing rules on a workload.  ``rates``: events per window per type (default
    :data:`~.rates.DEFAULT_RATE`); ``budget``: seconds for the plan finder before GWMIN's plan is used
    (None: no limit); ``resolve``: expand candidates into options (§7.1)."""
    plan = WorkloadPlan(tuple(queries), rates=tuple(sorted((rates or {}).items())),
                        rates_source=rates_source or ("given rates" if rates else "defaults"),
                        default_rate=default_rate, budget=budget, resolve=resolve)
    for rule in rules:
        plan = rule(plan)
    return plan
