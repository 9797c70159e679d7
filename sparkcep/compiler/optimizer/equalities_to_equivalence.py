"""Recognize equivalence tests written as equalities (SASE: ``x.id = y.id ∧ x.id = z.id`` is ``[id]``).

When conjuncts ``u.attr = v.attr`` (same attribute, ``v[i].attr`` for Kleene variables: every event) connect
*every* component of the pattern, positive and negative, all events of a match share ``attr``: the
conjuncts become the equivalence test ``[attr]``, which ``partition_by_equivalence`` turns into the shuffle
key.  If one component stays unconnected (say a negated ``!(C z)`` that any C invalidates), partitioning
would hide events from it, so nothing changes; nor under a contiguity strategy (the partition of
``partition_contiguity`` is the query's own equivalence test, and events it would hide still break
contiguity); nor with an ``ANY(...)`` component, which may lack the
attribute (SASE §2.2: then the equality holds, so that event belongs to every partition).  An event whose
``attr`` is NULL satisfies none of the equalities; ``[attr]`` would group NULLs together, so the rule also
filters ``attr IS NOT NULL`` (such events are dropped, as the equalities would drop them).

    before: where a.job_id = b[i].job_id, a.job_id = c.job_id       (SASE++ Hadoop Q1)
    after:  where [job_id]
"""

from __future__ import annotations

from dataclasses import replace

import networkx as nx

from sparkcep.compiler.optimizer._spec import operator_spec, with_spec
from sparkcep.compiler.plan.nodes import Filter, Node, rebuild
from sparkcep.ir.ast import Attr, BinOp, Call, EquivItem, EquivTest, Unary
from sparkcep.ir.spec import reads_every_event


def _same_attr_equality(p) -> tuple[str, str, str] | None:
    """``(attr, u, v)`` for ``u.attr = v.attr`` between two different variables, else None."""
    if not (isinstance(p, BinOp) and p.op == "="):
        return None
    sides = (p.left, p.right)
    if not all(isinstance(s, Attr) and s.var is not None and s.index in (None, "cur") for s in sides):
        return None
    if p.left.attr != p.right.attr or p.left.var == p.right.var:
        return None
    return p.left.attr, p.left.var, p.right.var


def equalities_to_equivalence(plan: Node) -> Node:
    spec = operator_spec(plan)
    if reads_every_event(spec):  # contiguity, NEXT steps: the partition decides which events are adjacent
        return plan
    variables = [c.var for c in spec.components]
    graphs: dict[str, nx.Graph] = {}
    for p in spec.predicates:
        found = _same_attr_equality(p)
        if found:
            attr, u, v = found
            graphs.setdefault(attr, nx.Graph()).add_edge(u, v)
    covered = [attr for attr, g in graphs.items()
               if set(g.nodes) == set(variables) and nx.is_connected(g)]
    if not covered or any(c.any_ for c in spec.components):
        return plan
    keep = [p for p in spec.predicates if (_same_attr_equality(p) or (None,))[0] not in covered]
    keep.append(EquivTest(tuple(EquivItem(attr) for attr in covered)))
    not_null = tuple(Unary("NOT", Call("isnull", (Attr(None, attr),))) for attr in covered)
    plan = with_spec(plan, replace(spec, predicates=tuple(keep)))
    return rebuild(plan, lambda n: replace(n, residual=n.residual + not_null) if isinstance(n, Filter) else n)
