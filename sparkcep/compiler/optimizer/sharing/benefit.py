"""Rule: the benefit value ``BValue(p, Q_p)`` of every candidate (Sharon §3, Equations 1–8).

``Rate(E)`` is the expected number of events of type ``E`` per window (from ``--stats``, a sample of the
input, or the default, see :mod:`sparkcep.compiler.optimizer.sharing.rates`).  For a query ``q_i`` with
pattern ``E_1 … E_n`` in which ``p = E_m … E_{m+l}`` occurs (``prefix = E_1 … E_{m-1}``,
``suffix = E_{m+l+1} … E_n``):

* ``NonShared(p, q_i) = Rate(E_1) · Rate(P_i)`` with ``Rate(P) = Σ Rate(E_j)``                (Eq. 1–3)
* ``Comp(p, q_i) = Rate(E_1)·Rate(prefix) + Rate(E_{m+l+1})·Rate(suffix)``                      (Eq. 4)
* ``Comb(p, q_i) = Rate(E_1) · Rate(E_m) · Rate(E_{m+l+1})``                                    (Eq. 5)
  over the segments present: an empty prefix or suffix contributes no factor, and a query that *is* ``p``
  has nothing to combine (``Comb = 0``).
* ``Shared(p, Q_p) = Rate(E_m)·Rate(p) + Σ_i Comp(p, q_i) + Comb(p, q_i)``                       (Eq. 6–7)
* ``BValue(p, Q_p) = NonShared(p, Q_p) − Shared(p, Q_p)``                                       (Eq. 8)

Example: with every rate 1, a pattern of length 2 shared by two queries that equal it saves one
computation of it: ``BValue = 2·2 − 2 = 2``.

    >>> from sparkcep.compiler.optimizer.sharing.ir import SharingQuery, WorkloadPlan
    >>> qs = (SharingQuery("a", ("X", "Y")), SharingQuery("b", ("X", "Y")))
    >>> bvalue(WorkloadPlan(qs), ("X", "Y"), frozenset({"a", "b"}))
    2.0
"""

from __future__ import annotations

from dataclasses import replace

from sparkcep.compiler.optimizer.sharing.candidates import occurrences
from sparkcep.compiler.optimizer.sharing.ir import WorkloadPlan


def _rate_of(plan: WorkloadPlan, types) -> float:
    return float(sum(plan.rate(t) for t in types))


def bvalue(plan: WorkloadPlan, pattern: tuple[str, ...], queries: frozenset[str]) -> float:
    """Equation 8 for the candidate ``(pattern, queries)`` (the first occurrence of ``pattern`` in each)."""
    r = plan.rate
    non_shared = 0.0
    shared = r(pattern[0]) * _rate_of(plan, pattern)
    for name in sorted(queries):
        seq = plan.query(name).pattern
        non_shared += r(seq[0]) * _rate_of(plan, seq)
        at = occurrences(pattern, seq)[0]
        prefix, suffix = seq[:at.start], seq[at.stop:]
        comp = 0.0
        if prefix:
            comp += r(prefix[0]) * _rate_of(plan, prefix)
        if suffix:
            comp += r(suffix[0]) * _rate_of(plan, suffix)
        starts = [s[0] for s in (prefix, pattern, suffix) if s]
        comb = 0.0
        if len(starts) > 1:
            comb = 1.0
            for t in starts:
                comb *= r(t)
        shared += comp + comb
    return non_shared - shared


def estimate_benefits(plan: WorkloadPlan) -> WorkloadPlan:
    cands = tuple(replace(c, benefit=bvalue(plan, c.pattern, c.queries)) for c in plan.candidates)
    return replace(plan, candidates=cands)
