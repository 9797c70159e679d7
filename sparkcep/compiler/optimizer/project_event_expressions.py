"""Compute one-event sub-expressions in the Spark projection before the shuffle (DESIGN.md principle 9).

A sub-expression of an operator predicate or a RETURN item that calls a function (``lower(a.name)``,
``CAST(b.x AS DOUBLE)``, ``a.kind IN ('p', 'q')``, a registered SQL UDF ...) and reads one event only (all its
attributes name the same variable and position) is a property of that event: Spark computes it as a hidden
column of the filter's SELECT, and the engines read the column like an attribute.  So any Spark SQL function
works there, with Spark's own semantics; only calls over values of several events reach the engines
(``abs(a.x - b.x)``), which evaluate the functions of ``runtime_udfs/expr/scalar.py``.  Local predicates are in
the SQL filter already (``push_local_predicates``); a component of ``ANY(...)`` keeps its expressions (its
lacking-attribute rule is the engines').

    before: Project[columns: *]  Sequence[predicates: lower(a.name) = lower(b.name)]
    after:  Project[columns: *, _cep_e0 := lower(name)]  Sequence[predicates: a._cep_e0 = b._cep_e0]
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass, replace

from sparkcep.compiler.optimizer._spec import operator_spec, with_spec
from sparkcep.compiler.plan.nodes import Node, Output, Project, rebuild
from sparkcep.ir.ast import Attr, Call, EquivTest, Func, map_nodes, walk
from sparkcep.ir.spec import MatchSpec

#: The prefix of hidden computed columns (never an input attribute the query may read, never a default output).
HIDDEN = "_cep_e"


def _event_of(expr, any_vars) -> tuple[str, object] | None:
    """``(var, index)`` if ``expr`` calls a function and reads exactly one event, else None (``v.x`` and
    ``v[i].x`` are one event: the current one)."""
    events, first, calls = set(), None, False
    for n in walk(expr):
        if isinstance(n, (Func, EquivTest)):
            return None
        if isinstance(n, Call):
            calls = True
        if isinstance(n, Attr):
            if n.var is None or n.var in any_vars or n.index in ("all", "prefix"):
                return None
            events.add((n.var, "cur" if n.index is None else n.index))
            first = first or (n.var, n.index)
    return first if calls and len(events) == 1 else None


def _local(expr):
    """The expression over the event's own columns (no variable, no index)."""
    def fix(n):
        if isinstance(n, Attr):
            return replace(n, var=None, index=None, span=None)
        return replace(n, span=None) if hasattr(n, "span") else n
    return map_nodes(expr, fix)


def project_event_expressions(plan: Node) -> Node:
    spec = operator_spec(plan)
    any_vars = {c.var for c in spec.components if c.any_}
    computed: dict = {}  # event-local expression -> hidden column name

    def lift(n):
        """Top down: the largest one-event sub-expressions become hidden columns."""
        if not is_dataclass(n) or isinstance(n, Attr):
            return n
        found = _event_of(n, any_vars)
        if found is not None:
            name = computed.setdefault(_local(n), f"{HIDDEN}{len(computed)}")
            return Attr(found[0], name, found[1])
        changes = {}
        for f in fields(n):
            value = getattr(n, f.name)
            new = tuple(lift(v) for v in value) if isinstance(value, tuple) else lift(value)
            if new != value:
                changes[f.name] = new
        return replace(n, **changes) if changes else n

    is_match = isinstance(spec, MatchSpec)
    new_spec = replace(spec, predicates=tuple(lift(p) for p in spec.predicates))
    if is_match:
        new_spec = replace(new_spec, outputs=tuple(replace(o, expr=lift(o.expr)) for o in spec.outputs))
    if not computed:
        return plan
    plan = with_spec(plan, new_spec)
    pairs = tuple((name, expr) for expr, name in computed.items())

    def fix_node(n):
        if isinstance(n, Project):
            return replace(n, computed=n.computed + pairs)
        if isinstance(n, Output) and is_match:
            return replace(n, columns=tuple(replace(o, expr=lift(o.expr)) for o in n.columns))
        return n
    return rebuild(plan, fix_node)
