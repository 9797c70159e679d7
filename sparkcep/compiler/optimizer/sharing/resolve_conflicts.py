"""Rule: sharing conflict resolution (Sharon §7.1, Algorithms 5–6).

Each candidate ``v = (p, Q_p)`` in conflict is expanded into *options* ``(p, Q'_p)``, ``Q'_p ⊂ Q_p``,
``|Q'_p| > 1``: breadth first, an option drops from its queries a non-empty subset of the queries that
cause one of its conflicts with a candidate of another pattern (Definition 16).  Options get their own
BValue (Eq. 8); beneficial ones join the graph as candidates named ``<candidate>.<k>`` and the conflicts are
recomputed over all of them (options of one pattern conflict where they share a query).

Equation 14 bounds the number of options exponentially; at most :data:`MAX_OPTIONS` options are kept per
candidate (first found, i.e. fewest queries dropped) and explain reports a cut.

Example (Sharon Example 13): ``(p1, {q1, q2, q3, q4})`` of Fig. 4 gets the option ``(p1, {q1, q3})``, which
does not conflict with ``p4`` and ``p5`` (shared by q2, q4).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from sparkcep.compiler.optimizer.sharing.benefit import bvalue
from sparkcep.compiler.optimizer.sharing.graph import causing_queries
from sparkcep.compiler.optimizer.sharing.ir import Candidate, WorkloadPlan

#: Options kept per candidate (Equation 14 is exponential in the degree and the causing queries).
MAX_OPTIONS = 16


def _subsets(queries: frozenset[str]):
    items = sorted(queries)
    for k in range(1, len(items) + 1):
        for combo in itertools.combinations(items, k):
            yield frozenset(combo)


def expand(plan: WorkloadPlan, v: Candidate, others: list[Candidate]) -> tuple[list[frozenset[str]], bool]:
    """Algorithm 5: the query sets of ``v``'s options (the original first), and whether the cap cut them."""
    seen = {v.queries}
    options = [v.queries]
    current = [v.queries]
    while current:
        following = []
        for qs in current:
            option = Candidate(v.name, v.pattern, qs)
            for u in others:
                causing = causing_queries(plan, option, u)
                for drop in _subsets(causing):
                    rest = qs - drop
                    if len(rest) > 1 and rest not in seen:
                        if len(options) >= MAX_OPTIONS:
                            return options, True
                        seen.add(rest)
                        options.append(rest)
                        following.append(rest)
        current = following
    return options, False


def resolve_conflicts(plan: WorkloadPlan) -> WorkloadPlan:
    if not plan.resolve:
        return plan
    live = list(plan.live)
    out = list(plan.candidates)
    notes = list(plan.notes)
    for v in live:
        others = [u for u in live if u.pattern != v.pattern]
        options, cut = expand(plan, v, others)
        if cut:
            notes.append(f"{v.name}: options cut at {MAX_OPTIONS}")
        k = 0
        for qs in options[1:]:
            b = bvalue(plan, v.pattern, qs)
            if b > 0:
                k += 1
                out.append(Candidate(f"{v.name}.{k}", v.pattern, qs, b, origin=v.name))
    return replace(plan, candidates=tuple(out), notes=tuple(notes))
