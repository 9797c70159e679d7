"""Partition by the equivalence tests and GROUP BY attributes (SASE §4.1, PAIS; GRETA §6 grouping).

``[attr]`` holds for every component, so events with different ``attr`` never meet in a match: shuffle by
it and drop the test from the operator.  ``[attr = 'c']`` becomes a filter ``attr = 'c'``.  ``[v.attr]``
binds only ``v``'s events (other components may lack the attribute), so it cannot partition: it stays
with the operator.  GROUP BY attributes join the key.  A query with no key runs on one partition.
Under ``strict_contiguity`` selected events are consecutive in the whole input, which one partition must see:
nothing is partitioned and the operator checks the tests itself.  Under ``partition_contiguity`` the
partition is the test's: ``[attr = 'c']`` also joins the key (other values are other partitions).

    before: Partition[keys: ()] ... Sequence[predicates: [id], x.a != y.a]
    after:  Partition[keys: (id)] ... Sequence[predicates: x.a != y.a]
"""

from __future__ import annotations

from dataclasses import replace

from sparkcep.compiler.optimizer._spec import operator_spec, with_spec
from sparkcep.compiler.plan.nodes import Filter, Node, Partition, rebuild
from sparkcep.ir.ast import Attr, BinOp, EquivTest, Literal
from sparkcep.ir.spec import reads_every_event


def partition_by_equivalence(plan: Node) -> Node:
    spec = operator_spec(plan)
    strategy = getattr(spec, "strategy", None)
    if strategy == "strict_contiguity":
        return plan
    keys: list[str] = list(spec.key)
    fixed: list[tuple[str, object]] = []
    keep = []
    for p in spec.predicates:
        if not isinstance(p, EquivTest):
            keep.append(p)
            continue
        scoped = tuple(i for i in p.items if i.var is not None)
        for item in p.items:
            if item.var is not None:
                continue
            if item.value is not None:
                fixed.append((item.attr, item.value.value))
            if (item.value is None or (reads_every_event(spec) and strategy != "strict_contiguity")) \
                    and item.attr not in keys:
                keys.append(item.attr)
        if scoped:
            keep.append(replace(p, items=scoped))
    for g in getattr(spec, "group_by", ()):
        if g not in keys:
            keys.append(g)
    fixed_filters = tuple(BinOp("=", Attr(None, attr), Literal(value)) for attr, value in fixed)
    plan = with_spec(plan, replace(spec, predicates=tuple(keep), key=tuple(keys)))

    def fix(n):
        if isinstance(n, Partition):
            return replace(n, keys=tuple(keys), fixed=n.fixed + tuple(fixed))
        if isinstance(n, Filter):
            return replace(n, residual=n.residual + fixed_filters)
        return n

    return rebuild(plan, fix)

