"""The MATCH_RECOGNIZE operator: a prioritized NFA (Pike VM) over the rows of one partition.

Threads ``(start, leaf, node)`` are kept in one list in priority order: earlier start rows first, then the
pattern's preferment order (the order the epsilon closures of :mod:`.program` list their leaves).  For each
row, a thread of start ``s`` for the row is appended (its closure may already hold ``MATCH``: an empty
match), then every thread waiting at ``CHAR v`` labels the row ``v`` if ``v``'s DEFINE holds (RUNNING, over
its own chain of labels) and moves to the leaves of the closure after it.  A thread reaching ``MATCH``
records the match of its start and removes the lower-priority threads of that start; the threads of the same
start still alive are preferred to it and may replace it later.  The match at the earliest undecided start
is decided once that start has no thread left; then the AFTER MATCH SKIP rule picks the next start and the
threads and recorded matches of the starts skipped are dropped.

With window counts the engine computes (``RecognizeSpec.windows``, :mod:`.windows`: a stream's negation at the
start or end of a pattern query) a row reaches the VM once its counts are settled; a DEFINE conjunct reading a
count of the match's first row at or after its ts + WITHIN is split off as a check of the candidate match, which
waits in the thread list (leaf :data:`PENDING`, the less preferred threads of its start going on) until that
count is settled (:func:`_resolve`).

Threads of one start at the same instruction are merged (the less preferred dropped) when every DEFINE reads
only the row being labelled and its physical neighbours (then their futures are the same); otherwise each
keeps its own history, up to :data:`MAX_THREADS` live threads per partition.  Two CHARs with the same future
are one instruction here (:func:`same_futures`), and a later start's thread where the earliest undecided start
has one is dropped when that start's match is sure to skip past it (:func:`merge_leaves`).

The same code runs a whole partition (:func:`run_partition`) and a stream (:func:`step` per micro-batch,
:func:`advance` at each watermark, ``final=True`` at the partition's end); the state keeps only the rows from
the earliest undecided start (minus PREV's reach) and serializes to JSON (:func:`state_to_json`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sparkcep.ir import recognize as R
from sparkcep.ir.ast import Attr, BinOp
from sparkcep.ir.errors import CEPError
from sparkcep.runtime_udfs.expr.scalar import _ARITH, _CMP, _arith, _compare
from sparkcep.runtime_udfs.recognize.evaluate import (
    Ctx,
    Slots,
    children,
    compile_expr,
    history_free,
    next_reach,
    prev_reach,
)
from sparkcep.runtime_udfs.recognize.program import CHAR, Program, compile_pattern
from sparkcep.runtime_udfs.recognize.windows import due, fill, frontier, give, release

__all__ = ["MAX_THREADS", "Compiled", "RecognizeBudgetError", "RecognizeState", "advance", "compiled",
           "init_state", "run_partition", "step", "wakeup"]

Row = dict[str, Any]

#: The most live threads (partial matches) one partition may hold at once.
MAX_THREADS = 200_000


class RecognizeBudgetError(CEPError):
    """A MATCH_RECOGNIZE partition holds more partial matches than :data:`MAX_THREADS`."""


class Compiled:
    """What the engine derives from a spec once: the program, the DEFINE and MEASURES closures."""

    def __init__(self, spec: R.RecognizeSpec):
        self.spec = spec
        variables = tuple(spec.variables)
        self.program: Program = compile_pattern(spec.pattern, variables)
        index = {v: i for i, v in enumerate(variables)}
        members = {v: frozenset((i,)) for v, i in index.items()}
        for name, vars_ in spec.subsets:
            members[name] = frozenset(index[v] for v in vars_ if v in index)
        self.members = members
        defines = dict(spec.defines)
        for var, cond in defines.items():
            if var not in index:
                raise ValueError(f"DEFINE of {var}, which is not a row pattern variable")
            if _has(cond, R.MatchNumber):
                raise ValueError("MATCH_NUMBER() is not allowed in DEFINE")
        # a negation at the end on a stream: the DEFINE conjuncts reading a count at or after the start's ts +
        # WITHIN check a candidate match once that count is settled (:func:`_end_checks`), not the row
        defines, checks = _end_checks(spec, defines, self.program, index, members)
        self.deferred = frozenset(("after_within",)) if checks is not None else frozenset()
        self.checks = [compile_expr(checks[v], members, variables, define=index[v]) if checks and v in checks
                       else None for v in variables]
        self.far = tuple(w.name for w in spec.windows if w.kind in self.deferred)
        # running aggregates of DEFINE kept on the nodes of the threads (node[4]); those of MEASURES on a
        # copy of the match's chain made when it is output
        self.define_slots = Slots(members, variables)
        self.defines: list[Callable | None] = [
            compile_expr(defines[v], members, variables, define=index[v], slots=self.define_slots)
            if v in defines else None for v in variables]
        self.slotted = bool(self.define_slots.items)
        self.mergeable = all(history_free(defines[v], index[v], members) for v in defines)
        self.all_rows = spec.rows_per_match != R.ONE_ROW
        # ALL ROWS PER MATCH evaluates RUNNING measures at every row of a match: aggregates and FIRST are kept
        # on a copy of the chain, one step per row; ONE ROW PER MATCH evaluates them once, a walk is cheaper
        self.measure_slots = Slots(members, variables)
        self.measures = [(m.name, compile_expr(m.expr, members, variables,
                                               slots=self.measure_slots if self.all_rows else None))
                         for m in spec.measures]
        self.measure_names = frozenset(m.name for m in spec.measures)
        exprs = [c for _, c in spec.defines] + [m.expr for m in spec.measures]
        self.reach = max((prev_reach(e) for e in exprs), default=0)
        # NEXT reads rows after the one labelled (or after a match's last row): `step` labels a row only once
        # that many rows after it are there, so a partition given in chunks reads the same rows as a whole one
        self.ahead = max((next_reach(e) for e in exprs), default=0)
        self.skip = spec.skip.kind
        self.skip_members = members.get(spec.skip.var) if spec.skip.var else None
        if spec.skip.kind in (R.SKIP_TO_FIRST, R.SKIP_TO_LAST) and self.skip_members is None:
            raise ValueError(f"AFTER MATCH SKIP TO {spec.skip.var}: not a row pattern variable or SUBSET")
        self.within = spec.within
        self.ts = spec.time_column
        # rows come in ascending event time: a thread whose start is `within` or more before a row is dead
        self.monotone = bool(spec.order_by) and spec.order_by[0].ascending
        after = [self.program.closure(pc + 1, False, False) if op == CHAR else ()
                 for pc, (op, _, _) in enumerate(self.program.code)]
        #: the leaves after each CHAR, and the start leaves (``^`` holding, not), each CHAR named by the least one
        #: with the same future (:func:`same_futures`): threads there are merged as at one instruction
        self.leaf_of = same_futures(self.program, after)
        self.after = [_renamed(leaves, self.leaf_of) for leaves in after]
        self.start_bol = _renamed(self.program.closure(0, True, False), self.leaf_of)
        self.start_plain = _renamed(self.program.closure(0, False, False), self.leaf_of)
        #: counts the engine computes per row before the pattern sees it (:mod:`.windows`)
        self.windows = spec.windows
        #: the leaves at which a later start's thread is dropped for the earliest undecided start's
        #: (:func:`merge_leaves`); empty: none is
        self.merge_leaves = merge_leaves(self) if self.mergeable and self.within is None else frozenset()


def same_futures(program: Program, after: list[tuple[int, ...]]) -> dict[int, int]:
    """Each CHAR's pc -> the least pc of a CHAR with the same future: the same variable and exclusion, and
    after it leaf by leaf (in preferment order) leaves with the same future, the same MATCH or wait at
    ``ANCHOR $`` (the coarsest such partition: refined from variable and exclusion until stable).  A thread's
    future depends on its leaf alone (a closure after a row starts with no ITER begun), so threads at two such
    leaves go on alike, as at one: ``STRT DOWN+ UP``'s first ``DOWN`` and its loop's are one."""
    code = program.code
    chars = [pc for pc, (op, _, _) in enumerate(code) if op == CHAR]
    cls: dict[int, object] = {pc: (code[pc][1], code[pc][2]) for pc in chars}
    while True:
        ids: dict[tuple, int] = {}
        new = {pc: ids.setdefault((cls[pc], tuple(cls[x] if x in cls else ("end", x) for x in after[pc])), len(ids))
               for pc in chars}
        if len(ids) == len(set(cls.values())):
            break
        cls = new
    least: dict[object, int] = {}
    for pc in chars:
        least.setdefault(cls[pc], pc)
    return {pc: least[cls[pc]] for pc in chars}


def _renamed(leaves: tuple[int, ...], leaf_of: dict[int, int]) -> tuple[int, ...]:
    """``leaves`` with each CHAR named as :func:`same_futures` says, the first of a repeated one kept."""
    return tuple(dict.fromkeys(leaf_of.get(x, x) for x in leaves))


def merge_leaves(c: Compiled) -> frozenset[int]:
    """The leaves ``x`` (``CHAR`` pcs, ``-w - 1`` waiting at ``ANCHOR $``) at which, after a row, a thread of a
    later start ``s`` may be dropped because a thread of the earliest undecided start ``s0`` is at ``x`` too and
    every leaf ``s0`` reached on that row before ``x`` (in the thread list's order) is one of them as well.
    For DEFINEs that read only the labelled row and PREV/NEXT of it (``c.mergeable``) and no WITHIN (the
    caller's conditions).  Why this is exact, for rows ``s0 < s <= i`` and the threads after row ``i``:

    1. The two threads at ``x`` have the same future: a DEFINE reads nothing of the match's history, and
       without WITHIN nothing else depends on the start.  So if the later one ``T`` leads to a match, so does
       ``s0``'s.
    2. If ``T`` leads to no match, dropping it changes nothing: a thread acts on others only by matching (it
       cuts the less preferred threads of its start), and a less preferred thread of ``s`` at ``x`` merged with
       it has its future.
    3. If ``T`` leads to a match, ``s0``'s final match ``M0`` is at least as preferred as the one through its
       thread at ``x``.  Every match ``s0`` recorded before row ``i`` is less preferred than all its live
       threads, and one recorded on row ``i`` is less preferred than ``x`` (recording it cut the threads of
       ``s0`` after it, so ``x`` came first).  So ``M0`` goes on after row ``i`` through a leaf ``y`` that
       ``s0`` reached on row ``i`` at or before ``x`` (the list is in preferment order; a leaf a less preferred
       prefix reaches too is kept for the preferred one).  ``M0`` is decided before ``s`` and holds rows ``s0``
       to ``i``, and row ``i + 1`` unless ``y`` waits at ``ANCHOR $`` (then ``i`` is the partition's last).
       ``s`` is skipped, whatever ``T`` gives, if the row ``M0`` skips to lies after ``s``: then dropping ``T``
       is exact.  That holds

       * under PAST LAST ROW always (``M0`` ends after row ``i >= s``): every leaf;
       * under TO LAST v if every path from ``y`` to ``MATCH`` labels a row ``v`` (a row after ``i``; so v is
         in ``M0``, never the standard's missing skip target);
       * under TO FIRST v if besides no path from the pattern's start to ``y`` labels a row ``v`` (``M0``'s
         first ``v`` is then after ``i``);
       * never under TO NEXT ROW (``s0 + 1 <= s``), nor with WITHIN (``s0``'s window closes first: its thread
         at ``x`` may die where ``T`` matches, and ``M0`` may be an earlier, shorter match).

    Both conditions are read off the compiled program (the closures after each ``CHAR``), not the pattern
    text.  ``STRT DOWN+ UP`` under TO LAST UP: every leaf (each path ends with ``UP``), so a start inside a
    falling run lives on its own row only (with :func:`same_futures`) instead of keeping two threads and a
    match the skip throws away."""
    if c.skip == R.SKIP_TO_NEXT_ROW:
        return frozenset()
    prog = c.program
    code = prog.code
    chars = [pc for pc, same in c.leaf_of.items() if pc == same]  # the CHARs a thread can be at
    succ = {pc: c.after[pc] for pc in chars}
    if c.skip == R.SKIP_PAST_LAST_ROW:
        return frozenset(chars) | frozenset(x for pc in chars for x in succ[pc] if x < 0)
    vset = c.skip_members
    match_pc = prog.match_pc
    # every path from the leaf to MATCH labels a row v: the greatest fixed point (a cycle that never reaches
    # MATCH is vacuously fine); a thread waiting at ANCHOR $ consumes no more rows
    must = {pc: True for pc in chars}
    for x in {x for pc in chars for x in succ[pc] if x < 0}:
        must[x] = match_pc not in prog.resume(x)
    changed = True
    while changed:
        changed = False
        for pc in chars:
            if must[pc] and code[pc][1] not in vset and any(x == match_pc or not must[x] for x in succ[pc]):
                must[pc] = False
                changed = True
    ok = {pc for pc in chars if must[pc]}
    if c.skip == R.SKIP_TO_FIRST:  # less the leaves some path reaches after labelling a row v
        seen: set[int] = set()
        todo = [x for pc in chars if code[pc][1] in vset for x in succ[pc] if x >= 0 and x != match_pc]
        while todo:
            x = todo.pop()
            if x not in seen:
                seen.add(x)
                todo += [y for y in succ[x] if y >= 0 and y != match_pc]
        ok -= seen
    return frozenset(ok)


#: the leaf of a candidate match whose check waits (:func:`_end_checks`): kept in the thread list at its place in
#: the preferment order until the check is decided (far below the leaves ``-wid - 1`` of threads waiting at an
#: ``ANCHOR $``, :meth:`Program.resume`)
PENDING = -(1 << 40)


def _conjuncts(e) -> list:
    if isinstance(e, BinOp) and e.op == "AND":
        return _conjuncts(e.left) + _conjuncts(e.right)
    return [e]


def _end_checks(spec: R.RecognizeSpec, defines: dict, program: Program, index: dict, members: dict
                ) -> tuple[dict, dict | None]:
    """``(defines, checks)``: the DEFINEs without their top-level conjuncts that read an ``after_within`` count
    the engine computes, and those conjuncts per variable; ``checks`` None (DEFINEs unchanged) unless every such
    read is of a variable only ever the match's first row (its count is settled once the watermark reaches the
    start's ts + WITHIN, whatever the row labelled)."""
    far = {w.name for w in spec.windows if w.kind == "after_within"}
    if not far:
        return defines, None
    firsts = set(program.closure(0, False, False)) | set(program.closure(0, True, False))
    only_first = {i for i in range(len(spec.variables))
                  if all(pc in firsts for pc, (op, a, _) in enumerate(program.code) if op == CHAR and a == i)}
    kept, checks = {}, {}
    for var, cond in defines.items():
        mine, rest = [], []
        for part in _conjuncts(cond):
            (mine if _reads(part, far) else rest).append(part)
        if mine:
            reads = [n for m in mine for n in _attrs(m) if n.attr in far]
            ends = all(program.closure(pc + 1, False, False) == (program.match_pc,)
                       for pc, (op, a, _) in enumerate(program.code) if op == CHAR and a == index[var])
            if not ends or any(n.var is None or not members.get(n.var, frozenset()) <= only_first for n in reads) \
                    or any(_reads(r, far) for r in rest):
                return defines, None  # the row waits for its counts (:mod:`.windows`)
            checks[var] = _and(mine)
        if rest:
            kept[var] = _and(rest)
    return kept, checks


def _and(parts: list):
    out = parts[0]
    for p in parts[1:]:
        out = BinOp("AND", out, p)
    return out


def _attrs(e) -> list:
    return ([e] if isinstance(e, Attr) else []) + [a for c in children(e) for a in _attrs(c)]


def _reads(e, names: set) -> bool:
    return any(a.attr in names for a in _attrs(e))


def _has(e, kind) -> bool:
    return isinstance(e, kind) or any(_has(c, kind) for c in children(e))


_CACHE: dict[int, tuple[R.RecognizeSpec, Compiled]] = {}


def compiled(spec: R.RecognizeSpec) -> Compiled:
    """The compiled form of ``spec`` (cached by identity)."""
    got = _CACHE.get(id(spec))
    if got is not None and got[0] is spec:
        return got[1]
    c = Compiled(spec)
    if len(_CACHE) > 64:
        _CACHE.clear()
    _CACHE[id(spec)] = (spec, c)
    return c


class RecognizeState:
    """The state of one partition: buffered rows from absolute position ``base``, ``pos`` rows seen, the
    earliest undecided start ``next_start``, matches so far ``mnum``, the last row of any match ``covered``,
    the live ``threads`` (start, leaf, node) in priority order, the recorded ``matched`` (start -> (end,
    node)) of undecided starts and the rows whose window counts are not settled yet (``window``, :mod:`.windows`;
    None without window counts)."""

    __slots__ = ("base", "covered", "ended", "matched", "mnum", "next_start", "pos", "rows", "threads", "window")

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.base = 0
        self.pos = 0
        self.next_start = 0
        self.mnum = 0
        self.covered = -1
        self.threads: list[tuple] = []
        self.matched: dict[int, tuple[int, Any]] = {}
        self.ended = False
        self.window = None


def init_state(spec: R.RecognizeSpec) -> RecognizeState:
    compiled(spec)  # fail early on a spec the engine cannot run
    return RecognizeState()


def run_partition(spec: R.RecognizeSpec, rows: Sequence[Row]) -> list[Row]:
    """The outputs of one whole partition (rows in order, see ``sort_key``; its end known)."""
    c = compiled(spec)
    st = RecognizeState()
    if c.windows:  # every count settled: the partition's end is known
        st.window = give(c.windows, c.ts, None, rows)
        rows = release(c.windows, c.ts, c.within, st.window, None, final=True)
    st.rows = list(rows)
    out: list[Row] = []
    _run(c, st, len(st.rows), out, trim=False)
    _finish(c, st, out)
    return out


def step(spec: R.RecognizeSpec, state: RecognizeState, rows: Sequence[Row]) -> tuple[RecognizeState, list[Row]]:
    """Feed the next rows of the partition (in order, none before those already given).  With NEXT(e, k) in
    the query, the last k rows given wait for the rows after them (or the end, ``advance(final=True)``)."""
    c = compiled(spec)
    if state.ended:
        raise ValueError("the partition has ended (advance(..., final=True) was called)")
    if c.windows and rows:  # the rows whose counts are settled (every later row is at or after the last one)
        state.window = give(c.windows, c.ts, state.window, rows)
        bound = max((t for t in (r.get(c.ts) for r in rows) if t is not None), default=None)
        rows = release(c.windows, c.ts, c.within, state.window, bound, deferred=c.deferred) \
            if bound is not None else []
        state.rows.extend(rows)
        rows = []
        if bound is not None:
            _fill(c, state, bound, False)
    state.rows.extend(rows)
    out: list[Row] = []
    _run(c, state, max(state.pos, state.base + len(state.rows) - c.ahead), out, trim=True)
    if c.far:  # candidates whose check the rows given settle
        _resolve(c, state)
        _decide(c, state, out)
        _trim(c, state)
    return state, out


def advance(spec: R.RecognizeSpec, state: RecognizeState, watermark: float | None, *,
            final: bool = False) -> tuple[RecognizeState, list[Row]]:
    """Decide what the watermark (every later row has ``__ts >= watermark``) or the partition's end
    (``final=True``) decides."""
    c = compiled(spec)
    out: list[Row] = []
    if state.ended:
        return state, out
    if c.windows and state.window is not None:  # rows whose counts the watermark (or the end) settles
        if final or watermark is not None:
            state.rows.extend(release(c.windows, c.ts, c.within, state.window, None if final else watermark, final,
                                      c.deferred))
            _fill(c, state, watermark, final)
            if not final:
                _run(c, state, max(state.pos, state.base + len(state.rows) - c.ahead), out, trim=True)
            _resolve(c, state)
            if not final:
                _decide(c, state, out)
        watermark = frontier(c.ts, state.window, watermark)  # the pattern has seen no row from the first held
    if final:
        _run(c, state, state.base + len(state.rows), out, trim=False)  # rows held back for NEXT
        _finish(c, state, out)
        state.ended = True
        state.rows, state.base = [], state.pos
        return state, out
    if watermark is not None and c.within is not None and c.monotone and state.threads:
        ctx_rows, base = state.rows, state.base
        keep = []
        for t in state.threads:
            gap = _arith(_ARITH["-"], watermark, ctx_rows[t[0] - base].get(c.ts))
            if gap is None or not _compare(_CMP[">="], gap, c.within) or t[1] == PENDING:
                keep.append(t)
        state.threads = keep
        _decide(c, state, out)
        _trim(c, state)
    return state, out


def wakeup(spec: R.RecognizeSpec, state: RecognizeState) -> float | None:
    """The smallest watermark at which :func:`advance` can decide something without new rows (None: only
    new rows or the partition's end can)."""
    c = compiled(spec)
    if state.ended:
        return None
    held = due(c.windows, c.ts, c.within, state.window, c.deferred) if c.windows else None
    if c.within is None or not c.monotone or not state.threads:
        return held
    ts = state.rows[state.threads[0][0] - state.base].get(c.ts)
    if ts is None:
        return held
    mine = _arith(_ARITH["+"], ts, c.within)
    if held is None:
        return mine
    # the pattern acts on a watermark no later than the first held row: that row's release comes first
    return held if frontier(c.ts, state.window, mine) < mine else min(held, mine)


# ----------------------------------------------------------------------------------------------- the VM


def _run(c: Compiled, st: RecognizeState, upto: int, out: list[Row], trim: bool) -> None:
    """Process rows ``st.pos`` .. ``upto - 1`` (already in ``st.rows``)."""
    prog = c.program
    code = prog.code
    match_pc = prog.match_pc
    defines = c.defines
    after = c.after
    mergeable = c.mergeable
    within, ts_col, monotone = c.within, c.ts, c.monotone
    sub, ge, lt = _ARITH["-"], _CMP[">="], _CMP["<"]
    ctx = Ctx(st.rows, st.base)
    rows = st.rows
    n_vars = len(prog.variables)
    start_bol, start_plain = c.start_bol, c.start_plain
    past_last = c.skip == R.SKIP_PAST_LAST_ROW
    # a thread of a later start at a leaf where the earliest undecided start s0 is too, after every leaf of s0
    # before it on the row is one of `merge_at`, has the same future, and s0's match skips past the later start
    # if they match: drop it (:func:`merge_leaves`; this keeps `A B+ C` linear in long runs of B, and each start
    # inside the V-shape's falling run one row long)
    merge_at = c.merge_leaves
    every = past_last and bool(merge_at)  # PAST LAST ROW: every leaf of s0
    quiet = c.spec.rows_per_match != R.ALL_ROWS_WITH_UNMATCHED  # a start without a match outputs nothing
    char_var = [a if op == CHAR else -1 for op, a, _ in code]
    char_excl = [b if op == CHAR else 0 for op, _, b in code]
    threads = st.threads
    matched = st.matched
    slotted, extend = c.slotted, c.define_slots.extend
    checks, far = c.checks, c.far
    for i in range(st.pos, upto):
        base = st.base
        row = rows[i - base]
        # a thread for start row i, least preferred of all
        for leaf in (start_bol if i == 0 else start_plain):
            if leaf == match_pc:
                matched[i] = (i, None)
                break
            threads.append((i, leaf, None))
        if within is not None:
            row_ts = row.get(ts_col)
        memo = [None] * n_vars if mergeable else None
        new: list[tuple] = []
        seen: set | None = set() if mergeable else None
        first_pcs: set = set()  # the instructions threads of the earliest undecided start s0 are at
        #: those a later start's thread is dropped at: s0's leaves of this row in order, up to the first not in
        #: merge_at
        merged_pcs: set = first_pcs if every else set()
        open_ = bool(merge_at) and not every
        s0 = st.next_start
        cut = -1
        new_match = False
        for t in threads:
            s = t[0]
            if s == cut:
                continue
            leaf = t[1]
            if leaf < 0:  # waiting at ANCHOR $: a row came, the path dies
                if leaf == PENDING:  # a candidate whose check waits keeps its place
                    new.append(t)
                continue
            var = char_var[leaf]
            if within is not None and monotone and s != i:
                gap = _arith(sub, row_ts, rows[s - base].get(ts_col))
                if gap is not None and _compare(ge, gap, within):
                    continue
            if memo is not None and memo[var] is False:  # known to fail on this row: no node to build
                continue
            parent = t[2]
            if parent is None:
                node = (i, var, char_excl[leaf], None, extend(ctx, i, var, None) if slotted else None, None)
            else:
                node = (i, var, char_excl[leaf], parent, extend(ctx, i, var, parent[4]) if slotted else None,
                        parent if parent[1] != var else parent[5])
            cond = defines[var]
            if cond is not None:
                if memo is not None:
                    ok = memo[var]
                    if ok is None:
                        ok = memo[var] = cond(ctx, node, node) is True
                else:
                    ok = cond(ctx, node, node) is True
                if not ok:
                    continue
            for nxt in after[leaf]:
                if nxt == match_pc:
                    if within is not None:
                        gap = _arith(sub, row_ts, rows[s - base].get(ts_col))
                        if not _compare(lt, gap, within):
                            continue
                    check = checks[var] if far else None
                    if check is not None:
                        if not all(f in rows[s - base] for f in far):  # its start's count is not settled yet
                            new.append((s, PENDING, node))
                            continue
                        if check(ctx, node, node) is not True:
                            continue
                    matched[s] = (i + 1, node)
                    cut = s
                    new_match = True
                    break
                if seen is not None:
                    if s == s0:
                        if nxt in first_pcs:
                            continue
                        first_pcs.add(nxt)
                        if open_:
                            if nxt in merge_at:
                                merged_pcs.add(nxt)
                            else:
                                open_ = False
                    else:
                        if nxt in merged_pcs:
                            continue
                        key = (s, nxt)
                        if key in seen:
                            continue
                        seen.add(key)
                new.append((s, nxt, node))
        if len(new) > MAX_THREADS:
            raise RecognizeBudgetError(
                f"MATCH_RECOGNIZE: more than {MAX_THREADS:,} partial matches alive in one partition (an "
                "ambiguous pattern such as (A|B)* over rows where both hold, with a DEFINE that reads other rows "
                "of the match); make the DEFINE conditions exclusive, add WITHIN, or use a reluctant quantifier")
        st.threads = threads = new
        st.pos = i + 1
        if new_match and past_last and not far:  # (a pending candidate before it may end earlier)
            _prune_inside(st)
            threads = st.threads
        if not threads:
            if quiet and not matched:  # every start so far is decided, without a match
                st.next_start = i + 1
                continue
            _decide(c, st, out)
            threads = st.threads
        elif threads[0][0] != st.next_start:
            _decide(c, st, out)
            threads = st.threads
    if trim:
        _trim(c, st)


def _fill(c: Compiled, st: RecognizeState, bound, final: bool) -> None:
    """Add the deferred counts the bound settles to the rows the pattern has (:func:`.windows.fill`)."""
    if c.deferred:
        fill(c.windows, c.ts, c.within, st.window, st.rows, st.base, bound, final, c.deferred)


def _resolve(c: Compiled, st: RecognizeState) -> None:
    """Decide the pending candidates (:data:`PENDING`) whose start's counts are settled: one whose check holds
    is the start's match so far (the less preferred threads of its start go), else it is dropped."""
    if not c.far or not any(t[1] == PENDING for t in st.threads):
        return
    rows, base = st.rows, st.base
    ctx = Ctx(rows, base)
    keep, cut = [], None
    for t in st.threads:
        s, leaf, node = t
        if s == cut:
            continue
        if leaf == PENDING and all(f in rows[s - base] for f in c.far):
            if c.checks[node[1]](ctx, node, node) is True:
                st.matched[s] = (node[0] + 1, node)
                cut = s
            continue
        keep.append(t)
    st.threads = keep


def _prune_inside(st: RecognizeState) -> None:
    """PAST LAST ROW: once the earliest undecided start has a match ending at ``e``, its final match ends at
    ``e`` or later, so the starts before ``e`` are skipped whatever happens: drop their threads."""
    s = st.next_start
    got = st.matched.get(s)
    if got is None or got[0] <= s + 1:
        return
    e = got[0]
    st.threads = [t for t in st.threads if t[0] == s or t[0] >= e]
    for k in [k for k in st.matched if s < k < e]:
        del st.matched[k]


def _finish(c: Compiled, st: RecognizeState, out: list[Row]) -> None:
    """The partition has ended: threads waiting at ``ANCHOR $`` go on, the others die; decide the rest."""
    prog = c.program
    cut = -1
    for s, leaf, node in st.threads:
        if leaf >= 0 or leaf == PENDING or s == cut:
            continue
        for nxt in prog.resume(leaf):
            if nxt == prog.match_pc:
                if node is not None and c.within is not None:
                    first = st.rows[s - st.base].get(c.ts)
                    last = st.rows[node[0] - st.base].get(c.ts)
                    if not _compare(_CMP["<"], _arith(_ARITH["-"], last, first), c.within):
                        continue
                st.matched[s] = (st.pos if node is not None else s, node)
                cut = s
                break
    st.threads = []
    _decide(c, st, out)


def _decide(c: Compiled, st: RecognizeState, out: list[Row]) -> None:
    """Decide the earliest undecided starts that have no live thread left, in order."""
    threads = st.threads
    while st.next_start < st.pos:
        s = st.next_start
        if threads and threads[0][0] == s:
            return
        got = st.matched.pop(s, None)
        if got is None:
            if c.spec.rows_per_match == R.ALL_ROWS_WITH_UNMATCHED and s > st.covered:
                out.append(_unmatched_row(c, st, s))
            nxt = s + 1
        else:
            end, node = got
            st.mnum += 1
            _emit(c, st, s, node, out)
            if end > s:
                st.covered = max(st.covered, end - 1)
            nxt = _next_start(c, s, end, node)
        st.next_start = nxt
        if threads and threads[0][0] < nxt:
            st.threads = threads = [t for t in threads if t[0] >= nxt]
        if st.matched and min(st.matched) < nxt:
            for k in [k for k in st.matched if k < nxt]:
                del st.matched[k]


def _next_start(c: Compiled, s: int, end: int, node) -> int:
    if end == s or c.skip == R.SKIP_TO_NEXT_ROW:
        return s + 1
    if c.skip == R.SKIP_PAST_LAST_ROW:
        return end
    mset = c.skip_members
    target = None
    n = node
    while n is not None:
        if n[1] in mset:
            target = n[0]
            if c.skip == R.SKIP_TO_LAST:
                break
        n = n[3]
    return s + 1 if target is None or target == s else target


def _trim(c: Compiled, st: RecognizeState) -> None:
    keep_from = st.next_start - c.reach
    drop = keep_from - st.base
    if drop > 0:
        del st.rows[:drop]
        st.base += drop


# ----------------------------------------------------------------------------------------------- output


def _out_row(c: Compiled, row: Row, values: dict) -> Row:
    names = c.measure_names
    return {name: values.get(name) if name in names else row.get(name) for name in c.spec.output}


def _unmatched_row(c: Compiled, st: RecognizeState, s: int) -> Row:
    return _out_row(c, st.rows[s - st.base], {})


def _emit(c: Compiled, st: RecognizeState, s: int, node, out: list[Row]) -> None:
    ctx = Ctx(st.rows, st.base, st.mnum)
    rows, base = st.rows, st.base
    if node is not None and c.measure_slots.items:
        node = c.measure_slots.rebuild(ctx, node)
    if not c.all_rows:
        values = {name: f(ctx, node, node) for name, f in c.measures}
        out.append(_out_row(c, rows[s - base], values))
        return
    if node is None:
        if c.spec.rows_per_match != R.ALL_ROWS_OMIT_EMPTY:
            values = {name: f(ctx, None, None) for name, f in c.measures}
            out.append(_out_row(c, rows[s - base], values))
        return
    chain = []
    n = node
    while n is not None:
        chain.append(n)
        n = n[3]
    for h in reversed(chain):
        if h[2]:
            continue
        values = {name: f(ctx, h, node) for name, f in c.measures}
        out.append(_out_row(c, rows[h[0] - base], values))
