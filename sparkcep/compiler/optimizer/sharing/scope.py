"""Which queries the shared executor covers (Sharon's query model, §2.1), and why the others run alone.

In scope: a trend-aggregate query returning ``COUNT(*)``, ``COUNT(v)``, ``SUM``/``AVG``/``MIN``/``MAX(v.attr)``
(the shared engine computes them all: :class:`~sparkcep.ir.sharing.SharedAggregate`, and the
Spark operator writes one column per aggregate), whose pattern is a ``SEQ`` (or a single event) of plain event
types (no Kleene or bounded quantifier, negation, ``ANY``, ``NEXT`` step), with no predicates but equivalence
tests (the partition key), GROUP BY attributes within the key.  Everything else keeps its own operator.
``aggregates=False`` admits ``COUNT(*)`` alone (Sharon's query model as the paper states it).
"""

from __future__ import annotations

from sparkcep.compiler.optimizer.sharing.ir import SharingQuery
from sparkcep.ir.ast import EventPat, Seq, has_strict_steps
from sparkcep.ir.spec import TrendSpec


def _reason(spec, aggregates: bool = True) -> str | None:
    if not isinstance(spec, TrendSpec):
        return "not a trend-aggregate query"
    items = spec.pattern.items if isinstance(spec.pattern, Seq) else (spec.pattern,)
    if not all(isinstance(p, EventPat) for p in items):
        return "pattern is not a SEQ of event types"
    if has_strict_steps(spec.pattern):  # Sharon's shared counts sum over every earlier event of a segment
        return "a NEXT step (its edge joins events adjacent in the partition)"
    for c in spec.components:
        if c.negated or c.kleene or c.any_ or len(c.types) != 1:
            return f"component {c.var} is not a single positive event type"
        if c.local is not None:
            return f"local predicate on {c.var}"
    if spec.predicates:
        return "predicates other than equivalence tests"
    if aggregates:
        if not all(a.func in ("count", "sum", "avg", "min", "max") for a in spec.aggregates):
            return "an aggregate the shared executor does not compute"
    elif len(spec.aggregates) != 1 or spec.aggregates[0].func != "count" or spec.aggregates[0].var is not None:
        return "RETURN is not COUNT(*) alone"
    if not set(spec.group_by) <= set(spec.key):
        return "GROUP BY outside the partition key"
    return None


def sharing_query(name: str, spec, *, aggregates: bool = True) -> SharingQuery:
    """The Sharon view of one compiled query (its engine spec); ``aggregates=False``: admit COUNT(*) alone
    (see the module doc)."""
    reason = _reason(spec, aggregates)
    if reason is not None:
        return SharingQuery(name, (), reason=reason)
    position = {c.var: i for i, c in enumerate(spec.components)}
    count = next((a.name for a in spec.aggregates if a.func == "count" and a.var is None), None)
    others = tuple((a.name, a.func, position[a.var], a.attr) for a in spec.aggregates
                   if not (a.func == "count" and a.var is None))
    return SharingQuery(name, tuple(c.types[0] for c in spec.components), tuple(spec.key), tuple(spec.group_by),
                        spec.window, spec.slide, output=count, aggregates=others, having=spec.having)
