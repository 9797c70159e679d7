"""Rule: the benefit value ``BValue(p, Q_p)`` of every candidate (Sharon §3, Equations 1–8).

``Rate(E)`` is the expected number of events of type ``E`` per window (from ``--stats``, a sample of the
input, or the default, see :mod:`sparkcep.compiler.optimizer.sharing.rates`).  ``Rate(P) = Σ_j Rate(E_j)``
over the positions of ``P`` (a type occurring ``k`` times counts ``k`` times: §7.3's factor ``k``).

The model costs what the executor runs.  The executor (:func:`~.layout.cut`) cuts each query into
*segments*: every non-overlapping occurrence of a shared pattern (left to right) is the shared segment, the
pieces between are private.  Sharon's Eq. 4–6 are the case of one occurrence (segments prefix · p · suffix);
for any cut ``S_0 · … · S_m`` of a query they read:

* ``Comp(q) = Σ_{private S} Rate(first(S)) · Rate(S)``    counts per START event of each private segment (Eq. 4)
* ``Comb(q) = Π_{j=0..m} Rate(first(S_j))`` if ``m ≥ 1``, else 0: the count multiplications (Eq. 5)

and a shared pattern ``p`` costs ``Rate(first(p)) · Rate(p)`` once, however many queries and occurrences use
it (Eq. 7).  For a candidate:

* ``NonShared(p, Q_p) = Σ_{q ∈ Q_p} Rate(E_1^q) · Rate(P^q)``                                    (Eq. 1–3)
* ``Shared(p, Q_p) = Rate(first(p)) · Rate(p) + Σ_{q ∈ Q_p} Comp(q) + Comb(q)``, ``q`` cut by ``p`` alone
                                                                                                 (Eq. 4–7)
* ``BValue(p, Q_p) = NonShared(p, Q_p) − Shared(p, Q_p)``                                       (Eq. 8)

So a query holding ``p`` ``k`` times saves ``k`` private computations of it, and pays one more factor in
``Comb`` per occurrence.  :func:`layout_cost` is the same model on a whole plan's layout:
``layout_cost(plan, ()) − layout_cost(plan, (c,)) == BValue(c)`` for every candidate ``c``.

Example: with every rate 1, a pattern of length 2 shared by two queries that equal it saves one
computation of it: ``BValue = 2·2 − 2 = 2``; a query ``(X, Y, X, Y)`` holds it twice and saves both
(``1·4`` non-shared, ``Comb = 1·1``).

    >>> from sparkcep.compiler.optimizer.sharing.ir import SharingQuery, WorkloadPlan
    >>> qs = (SharingQuery("a", ("X", "Y")), SharingQuery("b", ("X", "Y")), SharingQuery("c", ("X", "Y", "X", "Y")))
    >>> bvalue(WorkloadPlan(qs), ("X", "Y"), frozenset({"a", "b"}))
    2.0
    >>> bvalue(WorkloadPlan(qs), ("X", "Y"), frozenset({"a", "c"}))
    3.0
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from sparkcep.compiler.optimizer.sharing.ir import WorkloadPlan
from sparkcep.compiler.optimizer.sharing.layout import cut, segments
from sparkcep.ir.errors import CEPError


def _rate_of(plan: WorkloadPlan, types) -> float:
    return float(sum(plan.rate(t) for t in types))


def segment_cost(plan: WorkloadPlan, pattern: tuple[str, ...]) -> float:
    """Counts per START event of one segment: ``Rate(first) · Rate(pattern)`` (Eq. 2 for a whole query)."""
    return plan.rate(pattern[0]) * _rate_of(plan, pattern)


def query_cost(plan: WorkloadPlan, segs: Iterable[tuple[str, tuple[str, ...]]], shared: frozenset[str]) -> float:
    """``Comp(q) + Comb(q)`` of a query cut into ``segs`` (``(id, pattern)``), the ids in ``shared`` costed
    elsewhere (once for all their queries)."""
    segs = list(segs)
    comp = sum(segment_cost(plan, pattern) for sid, pattern in segs if sid not in shared)
    comb = 0.0
    if len(segs) > 1:
        comb = 1.0
        for _, pattern in segs:
            comb *= plan.rate(pattern[0])
    return comp + comb


def bvalue(plan: WorkloadPlan, pattern: tuple[str, ...], queries: frozenset[str]) -> float:
    """Equation 8 for the candidate ``(pattern, queries)``, each query cut by every non-overlapping occurrence
    of ``pattern`` as the executor cuts it."""
    non_shared = 0.0
    shared = segment_cost(plan, pattern)
    for name in sorted(queries):
        seq = plan.query(name).pattern
        non_shared += segment_cost(plan, seq)
        shared += query_cost(plan, cut(seq, [("p", pattern)]), frozenset({"p"}))
    return non_shared - shared


def layout_cost(plan: WorkloadPlan, chosen: Iterable[str]) -> float:
    """The model's cost (Eq. 1–7) of running the queries in scope with the sharing plan ``chosen`` (candidate
    names) as the executor lays it out (:func:`~.layout.segments`): every shared pattern once, plus each
    query's ``Comp + Comb``.  ``chosen = ()`` is the Non-Shared method, ``Σ_q NonShared(q)``."""
    chosen = tuple(chosen)
    segs = segments(replace(plan, chosen=chosen))
    names = frozenset(chosen)
    used = {sid: pattern for parts in segs.values() for sid, pattern in parts if sid in names}
    return (sum(segment_cost(plan, pattern) for pattern in used.values())
            + sum(query_cost(plan, parts, names) for parts in segs.values()))


def estimate_benefits(plan: WorkloadPlan) -> WorkloadPlan:
    """Every candidate's :func:`bvalue`; a CEPError when the rates are too large for the model: its costs
    multiply the rates along a pattern, and past the finite doubles a benefit would be ``inf − inf``."""
    cands = tuple(replace(c, benefit=bvalue(plan, c.pattern, c.queries)) for c in plan.candidates)
    if not all(math.isfinite(x) for x in (layout_cost(plan, ()), *(c.benefit for c in cands))):
        largest = max((rate for _, rate in plan.rates), default=plan.default_rate)
        raise CEPError(f"the event rates of {plan.rates_source} are too large for Sharon's cost model (up to "
                       f"{largest:g} events per window): its costs multiply the rates of a pattern's types, and "
                       "they overflow the finite doubles; give rates in smaller units (events per window)")
    return replace(plan, candidates=cands)
