"""Rule: find the sharable patterns and the sharing candidates ``(p, Q_p)`` of a workload (Sharon Def. 3).

A pattern ``p`` is a contiguous piece of a query's sequence; it is *sharable* if it has length > 1 and
appears in more than one query of the same sharing context (partition key, grouping, window, slide).  Its
candidate holds *all* the queries of that context containing it.  Candidates are named ``p1, p2, ...`` in
order of the first query containing them, then position, then length.

Example (the traffic workload of Sharon Fig. 1, Table 1)::

    >>> from sparkcep.compiler.optimizer.sharing.ir import SharingQuery, WorkloadPlan
    >>> qs = (SharingQuery("q1", ("OakSt", "MainSt", "StateSt")), SharingQuery("q5", ("MainSt", "StateSt")))
    >>> [(c.name, c.pattern, sorted(c.queries)) for c in find_candidates(WorkloadPlan(qs)).candidates]
    [('p1', ('MainSt', 'StateSt'), ['q1', 'q5'])]
"""

from __future__ import annotations

from dataclasses import replace

from sparkcep.compiler.optimizer.sharing.ir import Candidate, WorkloadPlan


def occurrences(pattern: tuple[str, ...], sequence: tuple[str, ...]) -> list[range]:
    """The position ranges of ``sequence`` where ``pattern`` occurs contiguously."""
    n = len(pattern)
    return [range(i, i + n) for i in range(len(sequence) - n + 1) if sequence[i:i + n] == pattern]


def find_candidates(plan: WorkloadPlan) -> WorkloadPlan:
    found: dict[tuple, list[str]] = {}  # (context, pattern) -> queries, in first-seen order
    order: list[tuple] = []
    for q in plan.queries:
        if q.reason is not None:
            continue
        n = len(q.pattern)
        seen = set()
        for i in range(n):
            for j in range(i + 2, n + 1):
                piece = (q.context, q.pattern[i:j])
                if piece in seen:
                    continue
                seen.add(piece)
                if piece not in found:
                    found[piece] = []
                    order.append(piece)
                found[piece].append(q.name)
    candidates = []
    for piece in order:
        names = found[piece]
        if len(names) > 1:
            candidates.append(Candidate(f"p{len(candidates) + 1}", piece[1], frozenset(names)))
    return replace(plan, candidates=tuple(candidates))
