"""The workload plan IR of Sharon sharing: frozen dataclasses that compare and hash by structure.

A :class:`WorkloadPlan` starts with the queries of a workload (:class:`SharingQuery`) and the event-type
rates, and every sharing rule (one per module of this package) returns a new plan with one more piece
filled in: the candidates ``(p, Q_p)``, their benefit values, the Sharon graph's conflicts, the pruned
candidates with their reasons, and the chosen plan with its score.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property


@dataclass(frozen=True)
class SharingQuery:
    """One query of the workload as Sharon sees it: a name, a sequence of event types, and the context that
    must be equal for two queries to share (partition key, GROUP BY, window, slide).

    ``reason`` is None for a query the shared executor covers; otherwise why it runs alone.  ``output`` names
    its COUNT(*) column (None: not returned); ``aggregates`` are its other aggregates as ``(name, func,
    position in the pattern, attribute)`` (see :class:`~sparkcep.ir.sharing.SharedAggregate`).
    """

    name: str
    pattern: tuple[str, ...]
    key: tuple[str, ...] = ()
    group_by: tuple[str, ...] = ()
    window: float = 0
    slide: float = 0
    reason: str | None = None
    output: str | None = "count_all"
    aggregates: tuple[tuple[str, str, int, str | None], ...] = ()
    #: HAVING over the query's row (see :class:`~sparkcep.ir.spec.TrendSpec`)
    having: object = None

    @property
    def context(self) -> tuple:
        """Queries share only within one context: same partition key, grouping and windows (Sharon §2.1
        assumption 2)."""
        return (tuple(sorted(self.key)), tuple(sorted(self.group_by)), self.window, self.slide)


@dataclass(frozen=True)
class Candidate:
    """A sharing candidate ``(p, Q_p)`` (Definition 3) and its benefit value (Equation 8).

    ``origin`` names the candidate it was expanded from by conflict resolution (§7.1), else None.
    """

    name: str
    pattern: tuple[str, ...]
    queries: frozenset[str]
    benefit: float = 0.0
    origin: str | None = None


@dataclass(frozen=True)
class Pruned:
    """A candidate removed from the search, and why."""

    name: str
    reason: str


@dataclass(frozen=True)
class WorkloadPlan:
    """The state of the sharing optimizer.

    ``rates``          Rate(E) per event type: expected events of that type per window (Sharon §3).
    ``rates_source``   where the rates came from ("defaults", a stats file, a sample), shown by explain.
    ``candidates``     every candidate found (expanded options included), with its benefit.
    ``conflicts``      the Sharon graph's edges (pairs of candidate names, sorted).
    ``pruned``         candidates taken out of the search, in order, with the reason.
    ``guaranteed``     GWMIN's guaranteed weight on the graph (Equation 10).
    ``conflict_free``  candidates in every optimal plan (Definition 14).
    ``chosen``         the sharing plan; ``score`` its score; ``method`` how it was found.
    """

    queries: tuple[SharingQuery, ...]
    rates: tuple[tuple[str, float], ...] = ()
    rates_source: str = "defaults"
    default_rate: float = 1.0
    budget: float | None = None
    resolve: bool = True
    candidates: tuple[Candidate, ...] = ()
    conflicts: tuple[tuple[str, str], ...] = ()
    pruned: tuple[Pruned, ...] = ()
    guaranteed: float | None = None
    conflict_free: tuple[str, ...] = ()
    chosen: tuple[str, ...] = ()
    score: float = 0.0
    greedy: tuple[str, ...] = ()
    greedy_score: float = 0.0
    method: str = ""
    notes: tuple[str, ...] = field(default=())

    # lookups by name, built once per plan (cached_property writes the instance dict, not a field: equality,
    # hashing and dataclasses.replace see only the fields)
    @cached_property
    def _rates(self) -> dict[str, float]:
        return dict(self.rates)

    @cached_property
    def _queries(self) -> dict[str, SharingQuery]:
        return {q.name: q for q in self.queries}

    @cached_property
    def _candidates(self) -> dict[str, Candidate]:
        return {c.name: c for c in self.candidates}

    def rate(self, event_type: str) -> float:
        return self._rates.get(event_type, self.default_rate)

    def query(self, name: str) -> SharingQuery:
        return self._queries[name]

    def candidate(self, name: str) -> Candidate:
        return self._candidates[name]

    @property
    def pruned_names(self) -> frozenset[str]:
        return frozenset(p.name for p in self.pruned)

    @property
    def live(self) -> tuple[Candidate, ...]:
        """The candidates still in the search (not pruned)."""
        gone = self.pruned_names
        return tuple(c for c in self.candidates if c.name not in gone)
