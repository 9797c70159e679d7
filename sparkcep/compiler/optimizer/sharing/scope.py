"""Which queries the shared executor covers (Sharon's query model, §2.1), and why the others run alone.

In scope: a trend-aggregate query returning ``COUNT(*)`` only, whose pattern is a ``SEQ`` (or a single
event) of plain event types (no Kleene, negation, ``ANY``), with no predicates but equivalence tests (the
partition key), GROUP BY attributes within the key.  Everything else keeps its own operator.
"""

from __future__ import annotations

from sparkcep.compiler.ast import EventPat, Seq
from sparkcep.compiler.optimizer.sharing.ir import SharingQuery
from sparkcep.runtime_udfs.spec import TrendSpec


def _reason(spec) -> str | None:
    if not isinstance(spec, TrendSpec):
        return "not a trend-aggregate query"
    items = spec.pattern.items if isinstance(spec.pattern, Seq) else (spec.pattern,)
    if not all(isinstance(p, EventPat) for p in items):
        return "pattern is not a SEQ of event types"
    for c in spec.components:
        if c.negated or c.kleene or c.any_ or len(c.types) != 1:
            return f"component {c.var} is not a single positive event type"
        if c.local is not None:
            return f"local predicate on {c.var}"
    if spec.predicates:
        return "predicates other than equivalence tests"
    if len(spec.aggregates) != 1 or spec.aggregates[0].func != "count" or spec.aggregates[0].var is not None:
        return "RETURN is not COUNT(*) alone"
    if not set(spec.group_by) <= set(spec.key):
        return "GROUP BY outside the partition key"
    return None


def sharing_query(name: str, spec) -> SharingQuery:
    """The Sharon view of one compiled query (its engine spec)."""
    reason = _reason(spec)
    if reason is not None:
        return SharingQuery(name, (), reason=reason)
    return SharingQuery(name, tuple(c.types[0] for c in spec.components), tuple(spec.key), tuple(spec.group_by),
                        spec.window, spec.slide, output=spec.aggregates[0].name)
