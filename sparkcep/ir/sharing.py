"""The spec of Sharon's shared executor: what the sharing optimizer hands the shared engine."""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkcep.ir.ast import Expr

__all__ = ["SharedAggregate", "SharedQuery", "SharedSpec"]


@dataclass(frozen=True)
class SharedAggregate:
    """A trend aggregate other than ``COUNT(*)``: ``func`` (count, sum, avg, min, max) of ``attr`` (None:
    ``COUNT(E)``, every event counts) over the events at ``positions`` (indexes into the query's pattern, the
    concatenation of its segments), summed over the query's trends (GRETA Definition 2)."""

    name: str
    func: str
    positions: tuple[int, ...]
    attr: str | None = None


@dataclass(frozen=True)
class SharedQuery:
    """One query of the shared operator: its name, the name of its COUNT(*) column (None: not returned), its
    segments in order, its other aggregates, and its HAVING over its row's columns."""

    name: str
    output: str | None
    segments: tuple[str, ...]
    aggregates: tuple[SharedAggregate, ...] = ()
    having: Expr | None = field(default=None, metadata={"omit_default": True})


@dataclass(frozen=True)
class SharedSpec:
    """The shared operator of one sharing context: segments ``(id, pattern)``, the queries made of them, the
    windows ``[k·slide, k·slide + window)`` (ts units, ms for timestamps), the partition key and GROUP BY."""

    segments: tuple[tuple[str, tuple[str, ...]], ...]
    queries: tuple[SharedQuery, ...]
    window: float
    slide: float
    key: tuple[str, ...] = ()
    group_by: tuple[str, ...] = ()
