"""Bind an optimized plan to an input's columns, without running the optimizer again.

A plan compiled without a schema leaves one thing open: the result columns of a match query without RETURN
(every attribute of every positive component, collapsed for collapsed output), and with them the projection
before the shuffle.  :func:`bind` fills them from the input's columns, as planning with those columns known
would (``tests/test_facade.py`` compares the two), so that ``CompiledQuery.apply(df)`` optimizes once per ts kind
and only binds each DataFrame's schema.
"""

from __future__ import annotations

from dataclasses import replace

from sparkcep.compiler.optimizer._spec import with_spec
from sparkcep.compiler.optimizer.prune_columns import referenced_attributes
from sparkcep.compiler.plan.nodes import Node, Output, Project, operator_spec, rebuild
from sparkcep.ir.spec import MatchSpec, with_default_outputs


def bind(plan: Node, attributes: tuple[str, ...]) -> Node:
    """``plan`` with the default result columns of ``attributes`` (a match query without RETURN) and the
    projection of the attributes the query then reads; any other plan is returned unchanged."""
    spec = operator_spec(plan)
    if not isinstance(spec, MatchSpec) or spec.outputs:
        return plan
    spec = with_default_outputs(spec, attributes)
    plan = with_spec(plan, spec)
    plan = rebuild(plan, lambda n: replace(n, columns=spec.outputs) if isinstance(n, Output) else n)
    used = referenced_attributes(plan)
    return rebuild(plan, lambda n: replace(n, columns=used) if isinstance(n, Project) else n)
