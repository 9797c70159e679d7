"""Text and Graphviz DOT renderings of a :class:`~sparkcep.compiler.optimizer.sharing.ir.WorkloadPlan`."""

from __future__ import annotations

import re
from collections import defaultdict

from sparkcep.compiler.optimizer.sharing.benefit import layout_cost
from sparkcep.compiler.optimizer.sharing.ir import WorkloadPlan
from sparkcep.compiler.optimizer.sharing.layout import segments
from sparkcep.compiler.optimizer.sharing.rates import DEFAULT_RATE


def _g(x: float) -> str:
    if abs(x) >= 1e15:  # past a double's exact integers: its digits would be noise (1e50 printed as 1000...7629...)
        return f"{x:g}"
    return f"{x:.2f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def _natural(name: str) -> tuple:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"(\d+)", name))


def _set(names) -> str:
    return "{" + ", ".join(names) + "}"


def _qset(names) -> str:
    return _set(sorted(names, key=_natural))


def _pattern(p) -> str:
    return "(" + ", ".join(p) + ")"


def explain_workload(plan: WorkloadPlan) -> str:
    shared = [q for q in plan.queries if q.reason is None]
    lines = [f"-- workload: {len(plan.queries)} queries, {len(shared)} in the shared executor's scope"]
    types = sorted({t for q in shared for t in q.pattern})
    if plan.rates_source == "defaults":
        lines.append(f"-- rates: Rate(E) = {_g(DEFAULT_RATE)} event per window for every type (default; "
                     "give --stats FILE for measured rates)")
    else:
        given = dict(plan.rates)
        shown = ", ".join(f"{t} {_g(plan.rate(t))}" + ("" if t in given else "*") for t in types)
        lines.append(f"-- rates (events per window, from {plan.rates_source}; * = default "
                     f"{_g(plan.default_rate)}): {shown}")
    lines.append("queries (windows in ms for timestamp ts, else in ts units)")
    for q in plan.queries:
        if q.reason is None:
            key = ", ".join(q.key) or "no key: one partition"
            lines.append(f"  {q.name}: SEQ{_pattern(q.pattern)} [{key}] window {_g(q.window)} slide {_g(q.slide)}")
        else:
            lines.append(f"  {q.name}: runs alone ({q.reason})")
    lines.append(f"candidates (p, Q_p): {len(plan.candidates)}")
    for c in plan.candidates:
        origin = f"  option of {c.origin}" if c.origin else ""
        lines.append(f"  {c.name} {_pattern(c.pattern)} {_qset(c.queries)} BValue {_g(c.benefit)}{origin}")
    lines.append(f"conflicts (Sharon graph): {len(plan.conflicts)} edges")
    near = defaultdict(list)
    for a, b in plan.conflicts:
        near[a].append(b)
    order = {c.name: i for i, c in enumerate(plan.candidates)}
    for a in sorted(near, key=order.get):
        lines.append(f"  {a} -- {', '.join(sorted(near[a], key=order.get))}")
    lines.append(f"pruned: {len(plan.pruned)}")
    for p in plan.pruned:
        lines.append(f"  {p.name}: {p.reason}")
    if plan.guaranteed is not None:
        lines.append(f"guaranteed weight (GWMIN, Eq. 10): {plan.guaranteed:.2f}")
    lines.append(f"conflict-free: {_set(plan.conflict_free)}")
    lines.append(f"greedy plan (GWMIN): {_set(plan.greedy)} score {_g(plan.greedy_score)}")
    lines.append(f"chosen plan: {_set(plan.chosen)} score {_g(plan.score)} by {plan.method}")
    if shared:
        lines.append(f"cost model (Eq. 1-7 on the executor's layout): non-shared {_g(layout_cost(plan, ()))}, "
                     f"chosen plan {_g(layout_cost(plan, plan.chosen))}")
    for note in plan.notes:
        lines.append(f"note: {note}")
    lines.append("executor")
    segs = segments(plan)
    by_context = defaultdict(list)
    for q in plan.queries:
        if q.reason is None:
            by_context[q.context].append(q)
    r = 0
    for context, qs in by_context.items():
        key = ", ".join(context[0]) or "no key"
        lines.append(f"  r{r} := SharedTrend[key=({key}), windows=[k*{_g(context[3])}, k*{_g(context[3])} + "
                     f"{_g(context[2])}), queries={', '.join(q.name for q in qs)}]")
        shared = {}
        for q in qs:
            for sid, pat in segs[q.name]:
                if "#" not in sid:
                    shared.setdefault(sid, (pat, []))[1].append(q.name)
        for sid, (pat, users) in shared.items():
            lines.append(f"        {sid} := Shared[SEQ{_pattern(pat)}, counts per START event, for {', '.join(users)}]")
        for q in qs:
            chain = " · ".join(sid if "#" not in sid else f"SEQ{_pattern(pat)}" for sid, pat in segs[q.name])
            returns = ([f"COUNT(*) AS {q.output}"] if q.output else []) + [
                f"{f.upper()}({q.pattern[at]}@{at}{'.' + attr if attr else ''}) AS {n}"
                for n, f, at, attr in q.aggregates]
            lines.append(f"        {q.name} := {', '.join(returns)} of {chain}")
        r += 1
    for q in plan.queries:
        if q.reason is not None:
            lines.append(f"  r{r} := {q.name} alone (its own operator)")
            r += 1
    return "\n".join(lines)


def dot_workload(plan: WorkloadPlan) -> str:
    """The Sharon graph in Graphviz DOT: chosen candidates filled, pruned ones dashed, edges = conflicts."""
    chosen = set(plan.chosen)
    pruned = {p.name: p.reason for p in plan.pruned}
    lines = ["graph sharon {", "  node [shape=box, fontname=\"Helvetica\"];",
             f"  label=\"chosen plan {_set(plan.chosen)} score {_g(plan.score)}\";"]
    for c in plan.candidates:
        label = f"{c.name}\\n{_pattern(c.pattern)}\\n{_qset(c.queries)}\\nBValue {_g(c.benefit)}"
        style = []
        if c.name in chosen:
            style.append("style=filled, fillcolor=\"#b3e6b3\"")
        elif c.name in pruned:
            style.append("style=dashed")
            label += f"\\n{pruned[c.name].split(':')[0]}"
        attrs = ", ".join([f"label=\"{label}\"", *style])
        lines.append(f"  \"{c.name}\" [{attrs}];")
    for a, b in plan.conflicts:
        lines.append(f"  \"{a}\" -- \"{b}\";")
    lines.append("}")
    return "\n".join(lines)
