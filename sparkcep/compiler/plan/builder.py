"""Resolved query → the naive logical plan, before any optimizer rule.

The naive plan filters on event types only, keeps every column, runs on one partition, checks the window
after construction, and leaves every predicate to the sequence/trend operator.  The optimizer's rules
(``sparkcep.compiler.optimizer``) then push work down, each rule one step.
"""

from __future__ import annotations

from sparkcep.compiler.analysis import ResolvedQuery
from sparkcep.compiler.plan.nodes import (
    Filter,
    Node,
    Output,
    Partition,
    Project,
    Sequence,
    Source,
    Trend,
    Window,
)
from sparkcep.ir.ast import Attr, EventPat, Kleene, Not, Pattern, Seq
from sparkcep.ir.spec import (
    INTERNAL_COLUMNS,
    OVERFLOW,
    Aggregate,
    Component,
    MatchSpec,
    OutputColumn,
    TrendSpec,
    with_default_outputs,
)

#: The filter's component bitmask column (see codegen/sql.py).
MASK = INTERNAL_COLUMNS[0]


def components_of(r: ResolvedQuery) -> tuple[Component, ...]:
    """The event components in pattern order (depth-first), with Kleene/negation flags.

    A negated sub-pattern is matched on its own (LANGUAGE.md §4, the oracle): a variable inside it is Kleene
    only under a ``+``/``*``/``?`` of its own, so ``E e`` in ``(SEQ(B b, !(E e), C c))+`` is one event per
    negative occurrence (not ``e+``), while ``NOT E+ e`` is Kleene."""
    out: list[Component] = []

    def visit(p: Pattern, kleene: str | None, negated: bool) -> None:
        if isinstance(p, EventPat):
            out.append(Component(p.var, p.types, p.any_, kleene, negated))
        elif isinstance(p, Kleene):
            # under a + or * anywhere above, a variable is an array (``((SEQ(B b, C c))+)?``: b is b[])
            visit(p.inner, kleene if kleene in ("+", "*") else p.op if p.op in ("+", "*") else kleene or p.op,
                  negated)
        elif isinstance(p, Not):
            visit(p.inner, None, True)
        elif isinstance(p, Seq):
            for i in p.items:
                visit(i, kleene, negated)
        else:
            for a in p.alternatives:
                visit(a, kleene, negated)

    visit(r.query.pattern, None, False)
    return tuple(out)


def output_columns(r: ResolvedQuery, attributes: tuple[str, ...] | None) -> tuple[OutputColumn, ...]:
    """Match-query result columns: RETURN items, or every attribute of every positive component.

    ``attributes`` are the input's columns (None when the schema is not known yet: the default columns are
    then bound when the job sees its input, :func:`with_default_outputs`)."""
    if r.returns is not None:
        return tuple(OutputColumn(n, i.expr) for n, i in zip(r.return_names, r.returns, strict=True))
    if attributes is None:
        return ()
    spec = MatchSpec(components_of(r), (), 0, ())
    return with_default_outputs(spec, attributes).outputs


def build_plan(r: ResolvedQuery, *, type_col: str = "type", ts_col: str = "ts",
               attributes: tuple[str, ...] | None = None) -> Node:
    """The naive plan of ``r`` (see the module docstring)."""
    comps = components_of(r)
    node: Node = Source(type_col, ts_col, r.ts_kind, r.ts_unit)
    node = Filter(node, comps)
    node = Project(node, None)
    node = Partition(node, ())
    non_key = tuple(p.expr for p in r.predicates)
    if r.mode == "aggregate":
        aggs = tuple(Aggregate(a.name, a.func, a.var, a.attr) for a in r.aggregates)
        # equivalence attributes named in RETURN are groups too (constant within a partition)
        returned = [i.expr.attr for i in r.returns if isinstance(i.expr, Attr) and i.expr.var is None]
        groups = tuple(dict.fromkeys([*r.group_by, *returned]))
        spec = TrendSpec(r.query.pattern, comps, non_key, r.window, r.slide, aggs, groups, having=r.having)
        node = Trend(node, spec)
        names = ["window_start", "window_end", *groups, *(a.name for a in aggs), OVERFLOW]
        return Output(node, tuple(OutputColumn(n, Attr(None, n)) for n in names))
    outputs = output_columns(r, attributes)
    spec = MatchSpec(comps, non_key, float("inf"), outputs, r.strategy, pattern=r.query.pattern)
    node = Window(Sequence(node, spec), r.window)
    return Output(node, outputs)
