"""From the chosen sharing plan to the shared executor's layout: each query's pattern cut into segments.

A segment is a shared pattern of the plan (computed once for all its queries, named after its candidate)
or a private piece of one query between shared ones (named ``<query>#<k>``).  An occurrence of a chosen
pattern is used where it does not overlap one already taken (left to right); a valid plan never makes two
chosen patterns overlap in a query.

Example::

    >>> from sparkcep.compiler.optimizer.sharing.ir import Candidate, SharingQuery, WorkloadPlan
    >>> plan = WorkloadPlan((SharingQuery("q", ("A", "B", "C", "D")), SharingQuery("r", ("B", "C"))),
    ...                     candidates=(Candidate("p1", ("B", "C"), frozenset({"q", "r"}), 2.0),), chosen=("p1",))
    >>> segments(plan)["q"]
    (('q#0', ('A',)), ('p1', ('B', 'C')), ('q#2', ('D',)))
"""

from __future__ import annotations

from sparkcep.compiler.optimizer.sharing.candidates import occurrences
from sparkcep.compiler.optimizer.sharing.ir import WorkloadPlan


def cut(sequence: tuple[str, ...], shared: list[tuple[str, tuple[str, ...]]], private: str = "#"
        ) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``sequence`` cut into segments ``(id, pattern)``: every occurrence of a ``shared`` pattern ``(id,
    pattern)`` (in the order given, each left to right) that overlaps no occurrence already taken is that
    shared segment; the pieces between are private, named ``<private><k>`` (``k`` = the segment's index).

    This is the one place that decides what the executor shares, and the benefit model
    (:mod:`~sparkcep.compiler.optimizer.sharing.benefit`) costs the same cut::

        >>> cut(("A", "B", "C", "A", "B"), [("p1", ("A", "B"))], "q#")
        (('p1', ('A', 'B')), ('q#1', ('C',)), ('p1', ('A', 'B')))
    """
    taken: dict[int, tuple[str, range]] = {}
    covered: set[int] = set()
    for sid, pattern in shared:
        for at in occurrences(pattern, sequence):
            if covered.isdisjoint(at):
                taken[at.start] = (sid, at)
                covered.update(at)
    segs = []
    i = 0
    while i < len(sequence):
        if i in taken:
            sid, at = taken[i]
            segs.append((sid, sequence[at.start:at.stop]))
            i = at.stop
        else:
            j = i
            while j < len(sequence) and j not in taken:
                j += 1
            segs.append((f"{private}{len(segs)}", sequence[i:j]))
            i = j
    return tuple(segs)


def segments(plan: WorkloadPlan) -> dict[str, tuple[tuple[str, tuple[str, ...]], ...]]:
    """query name → its segments ``(segment id, pattern)`` in order, for every query the executor covers."""
    chosen = [plan.candidate(n) for n in plan.chosen]
    return {q.name: cut(q.pattern, [(c.name, c.pattern) for c in chosen if q.name in c.queries], f"{q.name}#")
            for q in plan.queries if q.reason is None}


def shared_specs(plan: WorkloadPlan, *, share: bool = True) -> list:
    """The shared executor's specs, one per sharing context (same key, grouping, window, slide), in order
    of the first query of each.  ``share=False`` gives the Non-Shared layout (each query one private segment),
    the baseline the executor is compared against."""
    from dataclasses import replace

    from sparkcep.ir.sharing import SharedAggregate, SharedQuery, SharedSpec

    segs = segments(plan if share else replace(plan, chosen=()))
    contexts: dict[tuple, list] = {}
    for q in plan.queries:
        if q.reason is None:
            contexts.setdefault(q.context, []).append(q)
    out = []
    for qs in contexts.values():
        seen: dict[str, tuple[str, ...]] = {}
        queries = []
        for q in qs:
            for sid, pattern in segs[q.name]:
                seen.setdefault(sid, pattern)
            queries.append(SharedQuery(q.name, q.output, tuple(sid for sid, _ in segs[q.name]),
                                       tuple(SharedAggregate(n, f, (at,), attr) for n, f, at, attr in q.aggregates),
                                       q.having))
        first = qs[0]
        out.append(SharedSpec(tuple(seen.items()), tuple(queries), first.window, first.slide, first.key,
                              first.group_by))
    return out
