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

import re
from dataclasses import replace

from sparkcep.compiler.plan.nodes import Node, chain
from sparkcep.ir.ast import EventPat, Kleene, Not, map_nodes
from sparkcep.ir.errors import CEPError
from sparkcep.ir.naming import safe_identifier
from sparkcep.ir.printer import format_expr, format_pattern
from sparkcep.ir.spec import Component
from sparkcep.runtime_udfs.match import columnar as match_columnar
from sparkcep.runtime_udfs.match import engine as match_engine
from sparkcep.runtime_udfs.match import prefilter as match_prefilter
from sparkcep.runtime_udfs.trend import graph as trend_graph

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


def _pattern(p) -> str:
    """The pattern as written: implicit variables (named after their type by analysis) are not shown."""
    def unname(n):
        base = safe_identifier(n.types[0]) if isinstance(n, EventPat) and len(n.types) == 1 else "any"
        if isinstance(n, EventPat) and n.var is not None and re.fullmatch(rf"{re.escape(base)}(_\d+)?", n.var):
            return replace(n, var=None)
        return n

    return format_pattern(map_nodes(p, unname))


def _match_engines(spec) -> tuple[str, list[str]]:
    """What runs the match query, as the engine dispatches (:func:`match_engine.engines`): one name when every
    alternative runs on the same engine, else ``per alternative`` and a line per alternative with its
    variables; ``none`` and the reason when the match engine refuses the pattern."""
    try:
        alternatives = match_engine.engines(spec)
    except CEPError as e:
        return "none", [f"refused by the match engine: {e.message}"]
    names = {name for _, name in alternatives}
    if len(names) == 1:
        return names.pop(), []
    return "per alternative", [f"alternative {k} ({', '.join(vs)}): {name}"
                               for k, (vs, name) in enumerate(alternatives)]


def _general_searches(spec) -> list[str]:
    """A line per negation that runs as the general existence search over its gap
    (:func:`match_engine.general_negations`): where the exponential worst case can arise."""
    try:
        nodes = match_engine.general_negations(spec)
    except CEPError:
        return []  # refused: _match_engines says why
    return [f"negation {_pattern(n)}: general search over the gap (exponential in the worst case)" for n in nodes]


def explosion_warnings(spec) -> list[str]:
    """A warning per Kleene closure (``T+``, ``T*``, a repeated group) of a match query's positive pattern under
    skip_till_any_match without collapsed output: every subset of its events in a window is a match, so n
    such events can make 2^n matches (the match budget, docs/operations.md, stops such a run).  The way out
    named: collapsed output (one Kleene variable of single events) and a trend aggregate, on a second line."""
    if spec.collapsed or (spec.strategy or "skip_till_any_match") != "skip_till_any_match" or spec.pattern is None:
        return []
    found: list = []

    def visit(node, negated: bool) -> None:
        if isinstance(node, Not):
            return  # a negated closure only blocks: no match is made of it
        if isinstance(node, Kleene) and node.op in ("+", "*") and not negated:
            found.append(node)
        for child in _children(node):
            visit(child, negated)

    visit(spec.pattern, False)
    singles = [k for k in found if isinstance(k.inner, EventPat)]
    collapsible = len(found) == 1 and len(singles) == 1
    way_out = ("use collapsed output (run --collapsed, collapsed=True) or a trend aggregate (RETURN COUNT(*) ...)"
               if collapsible else "use a trend aggregate (RETURN COUNT(*) ...)")
    out = []
    for k in found:
        if isinstance(k.inner, EventPat):
            over = f"events of {' or '.join(k.inner.types)}"
        else:
            over = "iterations"
        out += [f"warning: {_pattern(k)} under skip_till_any_match can produce 2^n matches over n {over} in a "
                "window;", f"         {way_out}"]
    return out


def _children(node):
    for f in getattr(node, "__dataclass_fields__", {}):
        if f == "span":
            continue
        value = getattr(node, f)
        for v in value if isinstance(value, tuple) else (value,):
            if hasattr(v, "__dataclass_fields__") and not isinstance(v, EventPat):
                yield v


def _prefiltered(spec) -> list[str]:
    """The batch prefilter's line (:mod:`sparkcep.runtime_udfs.match.prefilter`), if the spec has one."""
    scan = match_prefilter.prefilter(spec)
    if scan is None:
        return []
    return [f"batch prefilter: sequence scan over {len(scan.shapes)} chain(s), drops rows in no chain inside the "
            "window"]


def _columnar(spec) -> list[str]:
    """The columnar construction's line (:mod:`sparkcep.runtime_udfs.match.columnar`), if the spec has one."""
    cc = match_columnar.columnar(spec)
    if cc is None:
        return []
    predicates = sum(map(len, cc.checks))
    parts = getattr(cc, "parts", (cc,))  # several alternatives (OR, T?): the union of each one's chains
    over = (f"{len(cc.bits)} position(s)" if len(parts) == 1 else
            f"{len(parts)} sequences of {'/'.join(str(len(p.bits)) for p in parts)} position(s)")
    return [f"batch construction: columnar over {over}, all keys at once in numpy"
            + (f", {predicates} predicate(s) vectorized" if predicates else "")]


class Explainer:
    def __init__(self, ts_unit: str, type_col: str):
        self.ts_unit = ts_unit
        self.type_col = type_col

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
        return f"Project[{ref}, columns={cols}]", []

    def visit_Partition(self, n, ref):
        if not n.keys:
            return f"Partition[{ref}, keys=() -- one partition: parallelism 1]", []
        return f"Partition[{ref}, keys=({', '.join(n.keys)})]", []

    def visit_Window(self, n, ref):
        return f"Window[{ref}, last.ts - first.ts < {self.duration(n.window)}]", []

    def visit_Sequence(self, n, ref):
        s = n.spec
        engine, per_alternative = _match_engines(s)
        head = f"Sequence[{ref}, window={self.duration(s.window)}, strategy={s.strategy}, engine={engine}]"
        lines = [f"pattern {_pattern(s.pattern)}"] if s.pattern is not None else []
        lines += [f"where {format_expr(p)}" for p in s.predicates]
        return head, (lines + per_alternative + _general_searches(s) + explosion_warnings(s) + _prefiltered(s)
                      + _columnar(s))

    def visit_Trend(self, n, ref):
        s = n.spec
        head = (f"Trend[{ref}, windows=[k*{self.duration(s.slide)}, k*{self.duration(s.slide)} + "
                f"{self.duration(s.window)}), engine=greta]")
        lines = [f"pattern {_pattern(s.pattern)}"]
        lines += [f"where {format_expr(p)}" for p in s.predicates]
        lines += [f"{a.name} := {a.func.upper()}({a.var or '*'}{'.' + a.attr if a.attr else ''})"
                  for a in s.aggregates]
        return head, lines + trend_graph.describe(s)  # the GRETA template, as the engine compiled it

    def visit_Output(self, n, ref):
        if not n.columns:
            return f"Output[{ref}, columns=<every attribute of every positive component>]", []
        cols = ", ".join(f"{c.name} := {format_expr(c.expr)}" for c in n.columns)
        return f"Output[{ref}, {cols}]", []


def explain_plan(plan: Node, ts_unit: str = "ts units") -> str:
    """The plan as ``rK := Node[...]`` lines, sources first."""
    nodes = chain(plan)
    ex = Explainer(ts_unit, nodes[0].type_col)
    out = []
    for k, node in enumerate(nodes):
        visit = getattr(ex, f"visit_{type(node).__name__}", None)
        if visit is None:
            raise CEPError(f"explain: no translation of plan node {type(node).__name__}")
        head, lines = visit(node, f"r{k - 1}")
        out.append(f"r{k} := {head}")
        out += [INDENT + line for line in lines]
    return "\n".join(out)
