"""Push predicates that read one component into the Spark SQL filter (SASE §4.2: early filtering).

A conjunct that reads a single variable and no neighbour (no ``NEXT``, ``v[i-1]``, aggregate) is a property
of one event: it becomes part of that component's local test, evaluated by Spark SQL before the shuffle
(the ``_mask`` bit).  Constant conjuncts filter every event.  This applies to negated components too: a
negative event that fails its own negation predicate can never invalidate a match.

    before: Filter[type IN (A)] ... Sequence[predicates: a.x > 5, a.y < b.y]
    after:  Filter[c0: type IN (A) AND x > 5] ... Sequence[predicates: a.y < b.y]
"""

from __future__ import annotations

from dataclasses import replace

from sparkcep.compiler.analysis.predicates import referenced_vars
from sparkcep.compiler.optimizer._spec import operator_spec, with_spec
from sparkcep.compiler.plan.nodes import Filter, Node, rebuild
from sparkcep.ir.ast import Attr, EquivTest, Func, and_all, map_nodes, walk


def _single_event(expr) -> str | None:
    """The variable of a one-event predicate, or None."""
    if isinstance(expr, EquivTest):
        return None
    for n in walk(expr):
        if isinstance(n, Func) or (isinstance(n, Attr) and (n.var is None or n.index not in (None, "cur"))):
            return None
    vs = referenced_vars(expr)
    return vs[0] if len(vs) == 1 else None


def _as_event_local(expr):
    """``b[i].x`` → ``b.x``: within one event, the current event is the event."""
    def fix(n):
        return replace(n, index=None) if isinstance(n, Attr) and n.index == "cur" else n
    return map_nodes(expr, fix)


def push_local_predicates(plan: Node) -> Node:
    spec = operator_spec(plan)
    local: dict[str, list] = {}
    residual, keep = [], []
    for p in spec.predicates:
        var = _single_event(p)
        if var is not None:
            local.setdefault(var, []).append(_as_event_local(p))
        elif not referenced_vars(p) and not isinstance(p, EquivTest):
            residual.append(p)
        else:
            keep.append(p)
    comps = tuple(
        replace(c, local=and_all(([c.local] if c.local is not None else []) + local.get(c.var, [])))
        for c in spec.components)
    plan = with_spec(plan, replace(spec, components=comps, predicates=tuple(keep)))
    return rebuild(plan, lambda n: replace(n, components=comps, residual=n.residual + tuple(residual))
                   if isinstance(n, Filter) else n)
