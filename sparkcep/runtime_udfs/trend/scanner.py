"""The generated hot loop of a COUNT(*) trend query (Algorithm 2 written out per template state)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from operator import add
from typing import TYPE_CHECKING, Any

from sparkcep.runtime_udfs.trend.aggregates import _INF, PARTIAL, _final_avg, _final_sum
from sparkcep.runtime_udfs.trend.index import _key_class, _VertexTree, _Win
from sparkcep.runtime_udfs.trend.template import EQUAL, LINK, ORDERED, PLAIN, _threshold, _ts_of

if TYPE_CHECKING:
    from sparkcep.runtime_udfs.trend.engine import TrendState
    from sparkcep.runtime_udfs.trend.graph import _Compiled
    from sparkcep.runtime_udfs.trend.index import _Batch
    from sparkcep.runtime_udfs.trend.template import _State, _Trans


def _count_group(cs: _Compiled, st: TrendState, group: list, rows: list[dict], batch: _Batch | None) -> None:
    """Events sharing one ts, or one event entering several states: every vertex is computed before any is
    inserted, so none of them precedes another."""
    t = group[0][0]
    if t >= st.close_at:
        _emit(cs, st, t, rows)
    ks = cs.windows_of(t)
    run = st.runs[None]
    wins = run.wins
    first = group[0][2]
    updates = [(plan, ev, _count_vertex(plan, ev, wins, ks, run.link if ev is first else None))
               for _, mask, ev in group for plan in cs.plans(mask)]
    for plan, ev, counts in updates:
        _count_insert(plan, ev, counts, wins, cs.n_slots, batch)
    if cs.links:  # the group's last event is the partition's previous event for the next one
        last = group[-1][2]
        run.link = {plan[0]: (ev, dict(counts)) for plan, ev, counts in updates if plan[8] and ev is last}


def _count_vertex(plan: tuple, ev: dict, wins: dict, ks: range, link: dict | None) -> list:
    """Per window ``k`` of ``ks``, the number of trends that end at the new vertex (Theorem 4.3); ``link``: the
    counts of the partition's previous event (None if it has this event's ts), for a NEXT step."""
    _, start, srcs, probes, _, _, _, links, _, _ = plan
    probes = [(tr, tr.probe(ev)) for tr in probes]
    linked = []
    for tr in links:
        prev = link.get(tr.src) if link else None
        if prev is not None and (tr.pred is None or tr.pred(prev[0], ev)):
            linked.append(prev[1])
    out = []
    for k in ks:
        win = wins.get(k)
        c = start
        for counts in linked:
            c += counts.get(k, 0)
        if win is not None:
            R = win.R
            for src in srcs:
                c += R[src]
            for tr, value in probes:
                c = _index_query(win, tr, value, c)
        if c:
            out.append((k, c))
    return out


def _count_insert(plan: tuple, ev: dict, counts: list, wins: dict, m: int, batch: _Batch | None) -> None:
    """Add a vertex's per-window counts to its state's running counts, trees and maps, and to the final
    counts if it is an END event."""
    state, _, _, _, plain_out, keys, last, _, _, cut_slot = plan
    keys = [(tr, tr.key(ev)) for tr in keys]
    for k, c in counts:
        win = wins.get(k)
        if win is None:
            win = wins[k] = _Win(m, 0)
        R = win.R
        if plain_out:
            R[state] += c
        if cut_slot is not None:
            R[cut_slot] += c
        for tr, value in keys:
            _index_insert(win, tr, value, c, add, 0, batch, k)
        if last:
            R[m] += c


def _index_query(win: _Win, tr: _Trans, probe, total):
    """``total`` plus the count over the vertices behind ORDERED/EQUAL transition ``tr`` that ``probe``
    connects to."""
    ix = win.index.get(tr.id)
    if ix is None or _key_class(probe) is None:
        return total
    if tr.kind == ORDERED:
        return ix.query(probe, total, add)
    try:
        return total + ix.get(probe, 0)
    except TypeError:  # an unhashable value equals no stored key
        return total


def _value_source(tr: _Trans, prefix: str, fn: Callable, env: dict, values: dict, lines: list) -> str:
    """The local holding the value ``fn(ev)`` in the generated scan, emitting its assignment once per
    state branch (a plain attribute is read inline: ``ev.get(attr)``)."""
    name = f"{prefix}{tr.id}"
    env[name] = fn
    attr = getattr(fn, "attr_name", None)
    src = f"ev.get({attr!r})" if attr is not None else f"{name}(ev)"
    if src not in values:
        values[src] = f"v{len(values)}"
        lines.append(f"            {values[src]} = {src}")
    return values[src]


def _window_body(s: _State, m: int, env: dict, lines: list, single: bool) -> list[str]:
    """The generated code for a vertex of state ``s`` in one window ``k`` (``win``, its counts ``R``):
    Theorem 4.3's sum over the predecessors plus the START term, then the updates of the running counts,
    vertex trees and final count.  Event values it needs are assigned to locals in ``lines`` first.  With
    ``single`` (the only window), its vertex trees are the locals ``X<transition>``."""
    values: dict[str, str] = {}  # source of an event value → local name
    probes = [(t, _value_source(t, "P", t.probe, env, values, lines)) for t in s.ins if t.kind in (ORDERED, EQUAL)]
    links = [t for t in s.ins if t.kind == LINK]
    for t in links:  # a NEXT step: the counts of the partition's previous event, if its edge holds
        pred = f" and T{t.id}.pred(p[0], ev)" if t.pred is not None else ""
        lines += [f"            p = link.get({t.src})",
                  f"            L{t.id} = p[1] if p is not None{pred} else EMPTY"]
    if s.link_out:
        lines.append("            N = {}")
    keys = [(t, _value_source(t, "K", t.key, env, values, lines)) for t in s.ordered_out]
    loop = None  # a self-loop probing and keying its tree with the same value: one call does both
    if (len(probes) == 1 and len(keys) == 1 and probes[0][0] is keys[0][0] and probes[0][1] == keys[0][1]
            and probes[0][0].kind == ORDERED):
        loop, v = probes[0]
        probes = keys = []
    terms = [str(int(s.first))] if s.first else []
    terms += [f"R[{t.slot}]" for t in s.ins if t.kind == PLAIN]
    terms += [f"L{t.id}.get(k, 0)" for t in links]
    out = [f"c = {' + '.join(terms) or '0'}"]
    out += [f"c = _index_query(win, T{t.id}, {v}, c)" for t, v in probes]
    if loop is not None:
        tree = f"X{loop.id}" if single else f"win.index[{loop.id}]"
        out.append(f"c = {tree}.count_loop({v}, c, batch, T{loop.id}, k)")
    updates = [f"R[{s.j}] += c"] if s.plain_out else []
    updates += [f"R[{s.cut_slot}] += c"] if s.cut_slot is not None else []
    updates += [f"_index_insert(win, T{t.id}, {v}, c, add, 0, batch, k)" for t, v in keys]
    if s.last:
        updates.append(f"R[{m}] += c")
    if s.link_out:
        updates.append("N[k] = c")
    if s.first and not probes and not links and loop is None:  # c >= 1
        return out + (updates or ["pass"])
    return [*out, "if c:", *(f"    {u}" for u in updates or ["pass"])]


def _copies_body(states: list[_State], m: int) -> list[str] | None:
    """The generated code for an event entering the several states of one component (a bounded quantifier's
    count-indexed copies) in one window, when their transitions are all plain: every state's count is
    computed from the running counts before any is updated, so the event never follows itself.  None
    otherwise (the event then goes through :func:`_count_group`)."""
    if any(t.kind != PLAIN for s in states for t in s.ins) or any(s.ordered_out or s.link_out for s in states):
        return None
    out = []
    for s in states:
        terms = ([str(int(s.first))] if s.first else []) + [f"R[{t.slot}]" for t in s.ins]
        out.append(f"c{s.j} = {' + '.join(terms) or '0'}")
    for s in states:
        updates = ([f"R[{s.j}] += c{s.j}"] if s.plain_out else [])
        updates += ([f"R[{s.cut_slot}] += c{s.j}"] if s.cut_slot is not None else [])
        updates += ([f"R[{m}] += c{s.j}"] if s.last else [])
        if updates:
            out += [f"if c{s.j}:", *(f"    {u}" for u in updates)]
    return out or ["pass"]


def _count_scanner(cs: _Compiled) -> Callable:
    """Generate the hot loop of Algorithm 2 for a COUNT(*) spec: one branch per template state with its
    predecessor states, START term, ORDERED/EQUAL transitions and END update written out, over the list of
    windows that contain the current ts (created as the range moves, with their vertex trees).  The loop
    takes events with distinct timestamps; an event entering several states goes through
    :func:`_count_group`.

    Generated rather than interpreted from the template because the per-event work of a trend count is a
    few additions: a generic loop spends ~10x that on dispatch."""
    m = cs.n_slots  # R[m]: the final count
    trees = [t for t in cs.positive.trans if t.kind == ORDERED]
    env: dict[str, Any] = {"EMPTY": {}, "_emit": _emit, "_count_group": _count_group, "_Win": _Win,
                           "_index_query": _index_query,
                           "_index_insert": _index_insert, "_VertexTree": _VertexTree, "add": add, "NEG_INF": -_INF,
                           "cs": cs, "S": cs.slide, "W": cs.window, "M": m}
    env.update((f"T{t.id}", t) for t in cs.positive.trans)
    lines = [
        "def scan(ready, st, rows, batch):",
        "    run = st.runs[None]",
        "    link = run.link",
        "    wins = run.wins",
        "    close_at = st.close_at",
        "    lo_end = hi_next = nxt = NEG_INF  # nxt: the smallest ts at which close_at, lo_end or hi_next is due",
        "    cur = ()",
        "    for t, mask, ev in ready:",
        "        if t >= nxt:",
        "            if t >= close_at:",
        "                _emit(cs, st, t, rows)",
        "                close_at = st.close_at",
        "                lo_end = NEG_INF",
        "            if t >= lo_end or t >= hi_next:",
        "                ks = cs.windows_of(t)",
        "                lo_end, hi_next = ks.start * S + W, ks.stop * S",
        "                cur = []",
        "                for k in ks:",
        "                    win = wins.get(k)",
        "                    if win is None:",
        "                        win = wins[k] = _Win(M, 0)",
        *(f"                    if {t.id} not in win.index:\n"
          f"                        win.index[{t.id}] = _VertexTree({t.op!r})" for t in trees),
        "                    cur.append((k, win, win.R))",
        "                one = len(cur) == 1",
        "                if one:",
        "                    k, win, R = cur[0]",
        *(f"                    X{t.id} = win.index[{t.id}]" for t in trees),
        "            nxt = min(close_at, lo_end, hi_next)",
    ]
    # dispatch on the component bitmask: without negation a component is one state of the positive graph (or
    # a bounded quantifier's count-indexed copies), so a one-bit mask names its states; an event entering
    # states of several components goes through _count_group
    by_comp: dict[int, list[_State]] = {}
    for s in cs.positive.states:
        by_comp.setdefault(s.comp, []).append(s)
    branches = 0
    for comp, states in by_comp.items():
        if len(states) == 1:
            [s] = states
            lines.append(f"        {'elif' if branches else 'if'} mask == {1 << comp}:  # state {s.label}")
            single = _window_body(s, m, env, lines, True)  # (assigns the event values it reads in the branch)
            several = _window_body(s, m, env, [], False)
        else:
            single = several = _copies_body(states, m)
            if single is None:
                continue
            lines.append(f"        {'elif' if branches else 'if'} mask == {1 << comp}:  # states "
                         f"{', '.join(s.label for s in states)}")
        branches += 1
        lines.append("            if one:")
        lines.extend(f"                {b}" for b in single)
        lines.append("            else:")
        lines.append("                for k, win, R in cur:")
        lines.extend(f"                    {b}" for b in several)
        if cs.links:  # this event is the partition's previous one for the next event
            lines.append(f"            link = {{{states[0].j}: (ev, N)}}" if states[0].link_out else
                         "            link = EMPTY")
    lines += [
        "        else:" if branches else "        if True:",
        *(["            run.link = link"] if cs.links else []),
        "            _count_group(cs, st, [(t, mask, ev)], rows, batch)",
        *(["            link = run.link"] if cs.links else []),
        "            lo_end = nxt = NEG_INF",
    ]
    if cs.links:
        lines.append("    run.link = link")
    source = "\n".join(lines)
    exec(compile(source, "<sparkcep trend scan>", "exec"), env)
    scan = env["scan"]
    scan.source = source  # for debugging: print(_compiled(spec).scanner.source)
    return scan


def _index_insert(win: _Win, tr: _Trans, key, agg, plus, zero, batch: _Batch | None, k: int) -> None:
    """Insert a vertex's aggregate into the vertex tree (ORDERED) or hash map (EQUAL) of ``tr`` in ``win``."""
    if _key_class(key) is None:
        return
    if tr.kind == ORDERED:
        ix = win.index.get(tr.id)
        if ix is None:
            ix = win.index[tr.id] = _VertexTree(tr.op)
        ix.insert(key, agg, plus, zero, batch, tr, k)
        return
    ix = win.index.setdefault(tr.id, {})
    try:
        ix[key] = plus(ix.get(key, zero), agg)
    except TypeError:  # unhashable: equal to no probe
        pass


def _emit(cs: _Compiled, st: TrendState, limit, rows: list[dict]) -> None:
    """Emit every window that ends at or before ``limit`` (GRETA §6: the final aggregate per window), then
    drop what no open window needs any more."""
    w, s = cs.window, cs.slide
    alg = cs.alg
    states = cs.positive.states
    due = sorted({k for run in st.runs.values() for k in run.wins if k * s + w <= limit})
    for k in due:
        total = alg.zero
        for run in st.runs.values():
            win = run.wins.pop(k, None)
            if win is None:
                continue
            total = alg.add(total, win.R[-1])
            for j, _, _, aggs in getattr(run, "held", ()):
                if states[j].end_held is not None and k in aggs:  # NEXT !(C c) at the end: no next event in
                    total = alg.add(total, aggs[k])  # this window (it ends before one came)
            for j, q in win.ends.items():
                q.drop_before(_threshold(states[j].end_guard, st.latest), alg)
                total = alg.add(total, q.total(alg))
        if total:
            rows.append(_row(cs, st, k, total))
    if limit == _INF:
        st.kmin, st.close_at = None, _INF
        st.runs, st.latest, st.negs = {}, [], []
        return
    st.kmin = max(st.kmin, cs.first_open(limit))
    st.close_at = st.kmin * s + w
    horizon = st.kmin * s
    for key in [key for key, run in st.runs.items() if key is not None and not run.wins]:
        del st.runs[key]
    for run in st.runs.values():
        _prune(run.stores, horizon)
    for nr in st.negs:
        _prune(nr.stores, horizon)
        for q in nr.queues.values():
            while q and q[0][0] < horizon:
                q.popleft()
    for i, v in enumerate(st.latest):
        if v < horizon:
            st.latest[i] = -_INF  # too old to block anything in an open window
    for nr in st.negs:
        nr.best = [b if b >= horizon else -_INF for b in nr.best]
        released = getattr(nr, "released", None)
        if released:
            nr.released = {i: b for i, b in released.items() if b >= horizon}


def _prune(stores: dict[int, list], horizon) -> None:
    for store in stores.values():
        cut = bisect_left(store, horizon, key=_ts_of)
        if cut:
            del store[:cut]


def _row(cs: _Compiled, st: TrendState, k: int, total) -> dict:
    s, w = cs.slide, cs.window
    row = {"window_start": k * s, "window_end": k * s + w}
    row.update(zip(cs.group_by, st.group or (None,) * len(cs.group_by), strict=True))
    partials = {}
    for name, func, n, x in cs.outputs:
        if func == "count_all":
            row[name] = total[0] if cs.alg.vector else int(total)  # a Python int, also from a GMP integer
        elif func == "count":
            row[name] = total[n]
        elif not total[n]:
            row[name] = None
        elif func == "sum":
            row[name] = _final_sum(total[x])
        elif func == "avg":
            row[name] = _final_avg(total[x], total[n])
        else:
            row[name] = total[x]
        if cs.partial and func in ("sum", "avg"):
            partials[f"{PARTIAL}{name}_sum"] = total[x] if total[n] else None
            partials[f"{PARTIAL}{name}_n"] = total[n]
    row.update(partials)
    return row
