"""Explain text: the plan as ``r0 := …`` lines in dependency order (ibis style), one ``visit_<Node>`` each.

Example (SASE Q2, shoplifting)::

    r0 := Source[type_col=type, ts_col=ts]
    r1 := Filter[r0]
            c0 x: type = 'SHELF-READING'
            c1 !y: type = 'COUNTER-READING'
            c2 z: type = 'EXIT-READING'
    ...
"""

from __future__ import annotations

from collections.abc import Callable

from sparkcep.compiler.plan.nodes import Node, chain
from sparkcep.ir.errors import CEPError
from sparkcep.ir.printer import format_expr, format_pattern_as_written
from sparkcep.ir.spec import Component

INDENT = " " * 8


def _number(x: float) -> str:
    if x == float("inf"):
        return "inf"
    return str(int(x)) if float(x).is_integer() else repr(x)


def _component(k: int, c: Component, type_col: str) -> str:
    quoted = [f"'{t}'" for t in c.types]
    types = quoted[0] if len(quoted) == 1 else f"IN ({', '.join(quoted)})"
    mark = "!" if c.negated else ""
    kleene = c.kleene or ""
    local = f" AND {format_expr(c.local)}" if c.local is not None else ""
    op = "" if len(quoted) > 1 else "= "
    any_ = " (ANY)" if c.any_ else ""
    return f"c{k} {mark}{c.var}{kleene}{any_}: {type_col} {op}{types}{local}"


#: What an engine says about its physical choices for a spec: ``(engine name, lines)``.  The face supplies it
#: (:func:`sparkcep.runtime_udfs.describe.describe`): the compiler imports no engine.
Describe = Callable[[object], tuple[str, list[str]]]


def _undescribed(spec) -> tuple[str, list[str]]:
    return "?", []


class Explainer:
    def __init__(self, ts_unit: str, type_col: str, describe: Describe = _undescribed):
        self.ts_unit = ts_unit
        self.type_col = type_col
        self.describe = describe

    def duration(self, x: float) -> str:
        return f"{_number(x)} {self.ts_unit}"

    def visit_Source(self, n, ref):
        extra = f", ts={n.ts_kind}" if n.ts_kind else ""
        if n.ts_unit:
            extra += f", ts_unit={n.ts_unit}"
        return f"Source[type_col={n.type_col}, ts_col={n.ts_col}{extra}]", []

    def visit_Filter(self, n, ref):
        lines = [_component(k, c, self.type_col) for k, c in enumerate(n.components)]
        lines += [f"all: {format_expr(r)}" for r in n.residual]
        return f"Filter[{ref}, _mask bit k <=> component k's type and local predicates]", lines

    def visit_Project(self, n, ref):
        cols = "*" if n.columns is None else ", ".join(n.columns) or "(type, ts only)"
        # hidden columns Spark computes per event before the shuffle (project_event_expressions)
        return f"Project[{ref}, columns={cols}]", [f"{name} := {format_expr(e)}" for name, e in n.computed]

    def visit_Partition(self, n, ref):
        if not n.keys:
            return f"Partition[{ref}, keys=() -- no key: the operator says its parallelism]", []
        return f"Partition[{ref}, keys=({', '.join(n.keys)})]", []

    def visit_Window(self, n, ref):
        return f"Window[{ref}, last.ts - first.ts < {self.duration(n.window)}]", []

    def visit_Sequence(self, n, ref):
        s = n.spec
        engine, physical = self.describe(s)
        head = f"Sequence[{ref}, window={self.duration(s.window)}, strategy={s.strategy}, engine={engine}]"
        lines = [f"pattern {format_pattern_as_written(s.pattern)}"] if s.pattern is not None else []
        lines += [f"where {format_expr(p)}" for p in s.predicates]
        return head, lines + physical

    def visit_Trend(self, n, ref):
        s = n.spec
        head = (f"Trend[{ref}, windows=[k*{self.duration(s.slide)}, k*{self.duration(s.slide)} + "
                f"{self.duration(s.window)}), engine=greta]")
        lines = [f"pattern {format_pattern_as_written(s.pattern)}"]
        lines += [f"where {format_expr(p)}" for p in s.predicates]
        lines += [f"{a.name} := {a.func.upper()}({a.var or '*'}{'.' + a.attr if a.attr else ''})"
                  for a in s.aggregates]
        if s.having is not None:
            lines.append(f"having {format_expr(s.having)} (on each final row: after the merge of partitions)")
        return head, lines + self.describe(s)[1]  # the GRETA template, as the engine compiled it

    def visit_Output(self, n, ref):
        if not n.columns:
            return f"Output[{ref}, columns=<every attribute of every positive component>]", []
        cols = ", ".join(f"{c.name} := {format_expr(c.expr)}" for c in n.columns)
        return f"Output[{ref}, {cols}]", []


def explain_plan(plan: Node, ts_unit: str = "ts units", describe: Describe = _undescribed) -> str:
    """The plan as ``rK := Node[...]`` lines, sources first; ``describe(spec)`` gives each operator's engine
    and the lines on its physical choices (``engine=?`` and none without it)."""
    nodes = chain(plan)
    ex = Explainer(ts_unit, nodes[0].type_col, describe)
    out = []
    for k, node in enumerate(nodes):
        visit = getattr(ex, f"visit_{type(node).__name__}", None)
        if visit is None:
            raise CEPError(f"explain: no translation of plan node {type(node).__name__}")
        head, lines = visit(node, f"r{k - 1}")
        out.append(f"r{k} := {head}")
        out += [INDENT + line for line in lines]
    return "\n".join(out)
