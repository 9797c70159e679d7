"""Query weights for a workload's load shedding, from the chosen sharing plan (gSPICE's ``w_q``, §II).

gSPICE weighs each complex event by its query's weight (a domain expert's, 1 by default) when it learns an
event's utility.  In a workload with a Sharon plan, the results of a query whose whole pattern is a chosen
shared pattern are computed once and read by every other query of that candidate: losing one of them loses a
partial result of those queries too.  Such a query weighs ``1 + (|Q_p| - 1)`` per chosen candidate ``p`` that
is its whole pattern (the other queries reading its results); every other query, and every query outside the
shared executor's scope (match queries run alone: the plan says nothing of them), weighs 1.

Example (Sharon's Example 3: ``c``'s results are the shared ``(A, B)`` that ``a`` and ``b`` read)::

    >>> from sparkcep.compiler.optimizer.sharing.ir import Candidate, SharingQuery, WorkloadPlan
    >>> qs = (SharingQuery("a", ("A", "B", "C")), SharingQuery("b", ("A", "B", "D")), SharingQuery("c", ("A", "B")))
    >>> plan = WorkloadPlan(qs, candidates=(Candidate("p1", ("A", "B"), frozenset("abc"), 2.0),), chosen=("p1",))
    >>> shedding_weights(plan)
    {'a': 1.0, 'b': 1.0, 'c': 3.0}
"""

from __future__ import annotations

from sparkcep.compiler.optimizer.sharing.ir import WorkloadPlan
from sparkcep.compiler.optimizer.sharing.layout import segments

__all__ = ["shedding_weights"]


def shedding_weights(plan: WorkloadPlan) -> dict[str, float]:
    """Query name → its weight in the workload's shedding stage (see the module doc)."""
    cut = segments(plan)
    chosen = {name: plan.candidate(name) for name in plan.chosen}
    weights = {}
    for q in plan.queries:
        weight = 1.0
        parts = cut.get(q.name, ()) if q.reason is None else ()
        if len(parts) == 1 and parts[0][0] in chosen:  # its whole pattern is one shared segment
            weight += len(chosen[parts[0][0]].queries) - 1
        weights[q.name] = weight
    return weights
