"""Read only the attributes the query uses (projection pushdown before the shuffle).

Keeps the attributes referenced by local tests, operator predicates, a loop's stop condition (``UNTIL``), keys,
GROUP BY and outputs.  A match query without RETURN returns every attribute, so nothing is pruned.

    before: Project[columns: *]      after: Project[columns: (id, price)]
"""

from __future__ import annotations

from dataclasses import replace

from sparkcep.compiler.optimizer._spec import operator_spec
from sparkcep.compiler.plan.nodes import Filter, Node, Output, Partition, Project, Trend, chain, rebuild
from sparkcep.ir.ast import Attr, EquivItem, Kleene, walk


def referenced_attributes(plan: Node) -> tuple[str, ...]:
    """Every attribute the plan reads: local tests, operator predicates, keys, GROUP BY, aggregates and
    RETURN items (the default outputs of a query without RETURN are not counted)."""
    nodes = chain(plan)
    out = next(n for n in nodes if isinstance(n, Output))
    is_trend = any(isinstance(n, Trend) for n in nodes)
    spec = operator_spec(plan)
    used: list[str] = []

    def add(name: str) -> None:
        if name not in used and name != "*":
            used.append(name)

    # the hidden computed columns (project_event_expressions) are no input attributes: what they read is
    hidden = {}
    for n in nodes:
        if isinstance(n, Project):
            hidden.update(n.computed)
    roots = [c.local for c in spec.components if c.local is not None] + list(spec.predicates) + \
        list(hidden.values())
    roots += [n.until for n in walk(getattr(spec, "pattern", None) or ())
              if isinstance(n, Kleene) and n.until is not None]  # read by the engine on every event
    if not is_trend:
        roots += [c.expr for c in out.columns]
    for n in nodes:
        if isinstance(n, Filter):
            roots += list(n.residual)
        if isinstance(n, Partition):
            for k in n.keys:
                add(k)
    for root in roots:
        for n in walk(root):
            if isinstance(n, (Attr, EquivItem)) and n.attr not in hidden:
                add(n.attr)
    if is_trend:
        for a in spec.aggregates:
            if a.attr:
                add(a.attr)
        for g in spec.group_by:
            add(g)
    return tuple(used)


def prune_columns(plan: Node) -> Node:
    nodes = chain(plan)
    out = next(n for n in nodes if isinstance(n, Output))
    if not any(isinstance(n, Trend) for n in nodes) and not out.columns:  # default outputs: every attribute
        return plan
    used = referenced_attributes(plan)
    return rebuild(plan, lambda n: replace(n, columns=used) if isinstance(n, Project) else n)
