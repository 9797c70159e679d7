"""skip_till_any_match: sequence scan and construction over active instance stacks (SASE §3.2, §4.1–4.3),
with Kleene closure by SASE++ §5's postponing and early filters.

**Pattern matching (shared by all matches).**  Positive position ``p`` of an alternative owns an *active
instance stack* of ``(ts, event, rip)``; ``rip`` ("most recent instance in the previous stack") is the
absolute length of stack ``p-1`` when the event arrived, so stack ``p-1``'s entries below ``rip`` are exactly
the events that may precede it.  Events of equal ``ts`` are scanned as one group whose RIPs are all taken
before any of them is pushed, below the entries of that ``ts`` an earlier scan pushed (events that came at
the processed watermark's very ts): timestamps strictly increase within every match.  An event that can fill
position ``p > 0`` but has no live predecessor is dropped (transition filtering).  A Kleene position's stack
holds every candidate event of the closure: SASE++'s "main run" collecting the superset ``M`` of every
match's events, built once and shared instead of cloning one run per subset (§5.1, Propositions 5.1–5.2).
Negative events go to a :class:`~sparkcep.runtime_udfs.match.negation.NegIndex` per negative component.

**Result construction (per match).**  An event that fills the last position starts a depth-first walk over
the RIP pointers.  Single positions are bound backward from the last one (newest first); a block of
consecutive Kleene positions is enumerated *forward*, right after binding the single position before it, so
that every subset of its candidates is built in time order and the predicates on ``v[i]``, ``v[i-1]``,
``v[..i-1]`` are decided as each event is added.  Every conjunct and negation check is placed where its last
variable is bound (:class:`~sparkcep.runtime_udfs.match.compile.Schedule`: SASE's dynamic filtering), so a
failing prefix cuts its whole subtree; predicates on the whole Kleene sequence (``v[v.len]``, ``v[]``) are
postponed to the point where the sequence is complete (SASE++ §5.1).  Before a Kleene position is enumerated,
its candidates are filtered by predicate consistency (SASE++ §5.2): true-and-false consistent conjuncts drop
candidates outright; monotone conjuncts over ``v[..i-1]`` mark each candidate *first only* (false on all
earlier candidates) or *safe* (true on them); monotone conjuncts over ``v[]`` prune the whole enumeration or
skip their final check.

**Collapsed output (SASE++ §5.1).**  The walk binds every single position first (through the Kleene stack:
the position before it lies below the RIP of its newest candidate) and the one Kleene position last; the first
admissible subset of its candidates ends the walk with one row, the candidates between its neighbours.  With
the Kleene position last, a match ends at any candidate: the row is made at the first trigger that completes
a match, later triggers of its binding only join its candidates, and it waits in ``MatchState.postponed``
until the watermark passes ``first.ts + W`` (released like a negated end).

**Window pushdown (SASE §4.3).**  Before each ``ts`` group, entries with ``ts <= group ts - W`` are pruned,
and so is every entry whose predecessors are all pruned: both conditions hold for a prefix of a stack, so
pruning moves a head pointer, and every entry a walk sees lies within the window of the triggering event.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from operator import itemgetter

from sparkcep.runtime_udfs.match.compile import Alternative, Plan, Schedule
from sparkcep.runtime_udfs.match.conjuncts import AggStats
from sparkcep.runtime_udfs.match.state import AltState, Sink, _numbers

__all__ = ["n_stacks", "prune", "scan"]

_RIP = itemgetter(2)
_SINGLE, _BLOCK, _THROUGH, _KLEENE = 0, 1, 2, 3

#: Below this many candidates, a Kleene position's monotone predicates are evaluated exactly on every selection
#: rather than decided on the superset of candidates first (SASE++ §5.2's early filters pay for themselves on
#: larger sets).  ``math.inf`` turns those filters off: postponing alone (SASE++ §5.1).
EARLY_FILTER_MIN = 8


def n_stacks(alt: Alternative) -> int:
    """Stacks an alternative needs: one per position but a single last one (its events only trigger)."""
    return alt.m if alt.kleene[-1] else alt.m - 1


def prune(st: AltState, now, window) -> float:
    """Move each stack's head past entries with ``now - ts >= window`` (no event at ``now`` or later is inside
    their window: the very subtraction of LANGUAGE.md §3's ``last.ts - first.ts < W``, so float ts round as the
    oracle's do) or without live predecessors; compact lists once more than half of an array is dead.  Returns
    the oldest live ts (inf: none): nothing changes before ``now - oldest`` reaches the window."""
    stacks, offs, heads = st.stacks, st.offs, st.heads
    prev_head = 0
    oldest = math.inf
    for k, stack in enumerate(stacks):
        off = offs[k]
        h = heads[k]
        end = off + len(stack)
        while h < end:
            ts, _, rip = stack[h - off]
            if now - ts >= window or (k and rip <= prev_head):
                h += 1
            else:
                break
        heads[k] = prev_head = h
        if h < end and stack[h - off][0] < oldest:
            oldest = stack[h - off][0]
        dead = h - off
        if dead > 32 and 2 * dead > len(stack):
            del stack[:dead]
            offs[k] = h
    return oldest


def scan(plan: Plan, alt: Alternative, st: AltState, ready: list, sink: Sink) -> None:
    """Sequence scan over ``ready`` (``(ts, tie, mask, event)`` sorted by ts), constructing the matches each
    event completes."""
    window = plan.window
    stacks, offs, heads, negs = st.stacks, st.offs, st.heads, st.negs
    neg_plans = alt.negs
    last = alt.m - 1
    kleene_last = alt.kleene[last]
    count = len(stacks)
    split = alt.split
    trigger = None
    oldest = prune(st, ready[0][0], window) if ready else math.inf
    i, total = 0, len(ready)
    while i < total:
        t = ready[i][0]
        j = i + 1
        while j < total and ready[j][0] == t:
            j += 1
        if t - oldest >= window:
            oldest = prune(st, t, window)
        ends = [offs[k] + len(stacks[k]) for k in range(count)]
        if not i:  # the first group may continue a ts an earlier scan ended with: its entries never precede it
            for k in range(count):
                stack = stacks[k]
                n = len(stack)
                while n and stack[n - 1][0] == t:
                    n -= 1
                ends[k] = offs[k] + n
        for entry in ready[i:j]:
            ev = entry[3]
            positions, slots = split(entry[2])
            for s in slots:
                negs[s].add(neg_plans[s], t, ev)
            for p in positions:
                if p:
                    rip = ends[p - 1]
                    if rip <= heads[p - 1]:
                        continue
                else:
                    rip = 0
                if p != last or kleene_last:
                    stacks[p].append((t, ev, rip))
                    if t < oldest:
                        oldest = t
                    if p != last:
                        continue
                if trigger is None:
                    trigger = _constructor(plan, alt, st, sink)
                trigger(ev, rip, ends[p] if kleene_last else 0)
        i = j


def _steps(alt: Alternative, order: tuple[int, ...]) -> list[tuple]:
    """The construction walk: ``(_SINGLE, p)`` binds single position ``p`` below the RIP of position
    ``p+1``; ``(_BLOCK, i, j, has_pred)`` binds the single position ``i-1`` (if any) and then enumerates the
    Kleene positions ``i..j`` forward."""
    kleene = alt.kleene
    steps: list[tuple] = []
    r = 0
    while r < len(order):
        p = order[r]
        if kleene[p] or (r + 1 < len(order) and order[r + 1] == p + 1):
            i = p if kleene[p] else p + 1
            j = i
            while j + 1 < alt.m and kleene[j + 1]:
                j += 1
            steps.append((_BLOCK, i, j, not kleene[p]))
            r += j - i + 1 + (not kleene[p])
        else:
            steps.append((_SINGLE, p))
            r += 1
    return steps


def _collapsed_steps(alt: Alternative) -> tuple[tuple[int, ...], list[tuple]]:
    """Collapsed output's binding order and walk: every single position first, backward from the last one,
    then the (one) Kleene position ``c`` enumerated last, so that one walk through its subsets decides whether
    a binding of the single positions has a match.  ``(_THROUGH, c-1)`` binds position ``c-1`` below the RIP
    of the newest candidate of ``c`` (the trigger, if ``c`` is last); ``(_KLEENE, c)`` enumerates ``c``'s
    candidates between the events bound at ``c-1`` and ``c+1``."""
    m = alt.m
    c = alt.kleene.index(True)
    order = (*range(m - 1, c, -1), *range(c - 1, -1, -1), c)
    steps = [(_THROUGH, p) if p == c - 1 else (_SINGLE, p) for p in order[:-1]]
    return order, [*steps, (_KLEENE, c)]


def _collapsed_schedule(alt: Alternative) -> Schedule:
    sched = alt.schedules.get("collapsed")
    if sched is None:
        sched = alt.schedules["collapsed"] = Schedule(alt, _collapsed_steps(alt)[0])
    return sched


def _constructor(plan: Plan, alt: Alternative, st: AltState, sink: Sink):
    """Build ``trigger(event, rip, end)``: every match ``event`` completes as the last positive position
    (``end``: stack length before its ts group, when that position is a Kleene one) goes to ``sink``."""
    collapsed = plan.spec.collapsed
    sched = _collapsed_schedule(alt) if collapsed else alt.schedule("ais")
    stacks, offs, heads, negs = st.stacks, st.offs, st.heads, st.negs
    vars_ = alt.vars
    last = alt.m - 1
    window = plan.window
    interval = alt.interval
    binding: dict = dict.fromkeys(alt.all_vars)
    rip_at = [0] * (alt.m + 1)
    single = sched.single
    kleene = sched.kleene
    negs_at = [tuple((np, negs[np.slot]) for np in lst) for lst in sched.negs_at]
    finish, emit, outputs, postpone = sink.finish, sink.emit, alt.outputs, bool(alt.trailing)
    rows = sink.rows
    # the match budget: what is left of it for this alternative's rows (earlier ones' are in rows already)
    cap = math.inf if sink.room is None else sink.room - sink.postponed_n
    memo = sched.memo.get("ais")
    if memo is None:
        memo = sched.memo["ais"] = (
            _collapsed_steps(alt)[1] if collapsed else _steps(alt, sched.order),
            [tuple((cj, prev, after, kc.var in cj.positional) for cj, prev, after in kc.each)
             if kc is not None else () for kc in kleene],
            [tuple(cj.check for cj in kc.whole) if kc is not None else () for kc in kleene])
    steps, each_of, whole_of = memo
    nsteps = len(steps)
    forced: list = [None, 0, 0]  # the triggering event of a Kleene last position, its rip, its stack end
    now = [None]  # the ts of the triggering event: the match's last event
    # collapsed output (Plan._check_collapsed: one Kleene position, enumerated last, _collapsed_steps): a walk
    # that completes only records that the binding of the single positions has a match; the Kleene position
    # then emits one row with its candidates instead of one per subset
    found = [False]
    idx_at = [0] * alt.m  # collapsed: the absolute stack index of the event bound at each single position
    kleene_last = bool(alt.kleene[last])
    singles_vars = tuple(v for v, kl in zip(vars_, alt.kleene, strict=True) if not kl)
    # collapsed, Kleene last: a match ends at any candidate, so a row (the binding of the single positions)
    # collects candidates until the window of its first event closes, waiting in ``postponed`` (released by
    # match_engine like a negated end, at first ts + W); ``registry`` finds a binding's waiting row
    registry: dict[tuple, dict] = {}
    if collapsed and kleene_last:
        for _, _, k, waiting in sink.state.postponed:
            if k == alt.index:
                registry[tuple(id(waiting[v]) for v in singles_vars)] = waiting

    def checks_ok(p: int) -> bool:
        for check in single[p]:
            if check(binding) is not True:
                return False
        return not negs_at[p] or negations_ok(p)

    def negations_ok(p: int) -> bool:
        for np, index in negs_at[p]:
            lo, hi = interval(np, binding, window, now[0])
            if index.blocked(np, binding, lo, hi):
                return False
        return True

    def step(s: int) -> None:
        if s == nsteps:
            if collapsed:
                found[0] = True
            elif postpone:
                finish(alt, binding)
            else:
                emit({name: fn(binding) for name, fn in outputs})
                if len(rows) > cap:
                    sink.check()
            return
        spec = steps[s]
        kind = spec[0]
        if kind == _BLOCK:
            block(s, spec[1], spec[2], spec[3])
            return
        if kind == _THROUGH:
            through(s, spec[1])
            return
        if kind == _KLEENE:
            collapse(s, spec[1])
            return
        p = spec[1]
        stack, off, var, checks, negated = stacks[p], offs[p], vars_[p], single[p], negs_at[p]
        for a in range(rip_at[p + 1] - 1 - off, heads[p] - 1 - off, -1):
            _, ev, rip = stack[a]
            binding[var] = ev
            for check in checks:
                if check(binding) is not True:
                    break
            else:
                if not negated or negations_ok(p):
                    rip_at[p] = rip
                    step(s + 1)
        binding[var] = None

    def block(s: int, i: int, j: int, has_pred: bool) -> None:
        # his[c]: candidates of position c lie below it; `newest` walks the rip of the newest candidate down
        his = [0] * (j + 1)
        if j == last:
            his[j], newest = forced[2], forced[1]
        else:
            hi = rip_at[j + 1]
            if hi <= heads[j]:
                return
            his[j], newest = hi, stacks[j][hi - 1 - offs[j]][2]
        for c in range(j - 1, i - 1, -1):
            if newest <= heads[c]:
                return
            his[c] = newest
            newest = stacks[c][newest - 1 - offs[c]][2]
        if not has_pred:
            enumerate_kleene(s, i, j, i, None, his)
            return
        p = i - 1
        stack, off, var = stacks[p], offs[p], vars_[p]
        for a in range(newest - 1 - off, heads[p] - 1 - off, -1):
            _, ev, rip = stack[a]
            binding[var] = ev
            if checks_ok(p):
                rip_at[p] = rip
                enumerate_kleene(s, i, j, i, a + off, his)
        binding[var] = None

    def through(s: int, p: int) -> None:
        """Collapsed: bind single position ``p`` before the Kleene position ``p+1``, below the RIP of its
        newest candidate (every older candidate's RIP is at most that)."""
        c = p + 1
        if c == last:
            newest = forced[1]
        else:
            hi = rip_at[c + 1]
            if hi <= heads[c]:
                return
            newest = stacks[c][hi - 1 - offs[c]][2]
        stack, off, var = stacks[p], offs[p], vars_[p]
        for a in range(newest - 1 - off, heads[p] - 1 - off, -1):
            _, ev, rip = stack[a]
            binding[var] = ev
            if checks_ok(p):
                rip_at[p] = rip
                idx_at[p] = a + off
                step(s + 1)
        binding[var] = None

    def elem_ok(c: int, ev: dict) -> bool:
        kc = kleene[c]
        if not kc.elem:
            return True
        binding[kc.var] = [ev]
        ok = all(cj.holds_at(binding, kc.var, 0) for cj in kc.elem)
        binding[kc.var] = None
        return ok

    def collapse(s: int, c: int) -> None:
        """Collapsed: the Kleene position ``c``, enumerated after every single one (one row if any subset of
        its candidates completes a match)."""
        his = [0] * (c + 1)
        his[c] = forced[2] if c == last else rip_at[c + 1]
        if c == last:
            waiting = registry.get(tuple(id(binding[v]) for v in singles_vars))
            if waiting is not None:  # it has a match already: the trigger only joins its candidates
                if elem_ok(c, forced[0]):
                    waiting[vars_[c]].append(forced[0])
                return
        enumerate_kleene(s, c, c, c, idx_at[c - 1] if c else None, his)

    def collapsed_row(c: int, var: str, cands: list, lo: int) -> None:
        """Collapsed: the binding of the single positions has a match; its row, with the candidates."""
        if c != last:
            binding[var] = [entry[1] for entry in cands]
            if postpone:  # a negated end (Plan._check_collapsed: the same for every subset)
                finish(alt, binding)
            else:
                emit({name: fn(binding) for name, fn in outputs})
                if len(rows) > cap:
                    sink.check()
            return
        # every candidate so far: those of the trigger's ts group before it too (they cannot precede it)
        stack, off = stacks[c], offs[c]
        evs = [entry[1] for entry in stack[lo - off:] if elem_ok(c, entry[1])]
        waiting = {v: binding[v] for v in singles_vars}
        waiting[var] = evs
        heapq.heappush(sink.state.postponed,
                       (binding[vars_[0]]["ts"] + window, next(_numbers), alt.index, waiting))
        registry[tuple(id(waiting[v]) for v in singles_vars)] = waiting

    def extend_ok(c: int, pos: int, q: int, need) -> bool:
        """The per-event conjuncts of Kleene position ``c`` at its new position ``pos`` (candidate ``q``);
        ``need``: which prefix conjuncts to evaluate per candidate (None: all)."""
        kc = kleene[c]
        var = kc.var
        if pos == 0:
            for cj in kc.first:
                if cj.check(binding) is not True:
                    return False
        for cj, prev, after, positional in each_of[c]:
            at = pos - 1 if after else pos
            if at < 0 or (prev and at < 1):
                continue
            if (cj.holds_at(binding, var, at) if positional else cj.check(binding)) is not True:
                return False
        if pos:
            for k, mono in enumerate(kc.prefix):
                if (need is None or need[k][q]) and not mono.conj.holds_at(binding, var, pos):
                    return False
        return True

    def complete_ok(c: int, whole_checks) -> bool:
        """The whole-sequence conjuncts and the negations decided once Kleene position ``c`` is complete."""
        for check in whole_checks:
            if check(binding) is not True:
                return False
        return not negs_at[c] or negations_ok(c)

    def enumerate_kleene(s: int, i: int, j: int, c: int, lower: int | None, his: list[int]) -> None:
        """Every selection for Kleene position ``c`` after absolute index ``lower`` of stack ``c-1``, then
        position ``c+1`` of the block, or the next step."""
        stack, off, kc = stacks[c], offs[c], kleene[c]
        var = kc.var
        lo, hi = heads[c], his[c]
        if lower is not None:
            lo = max(lo, bisect_right(stack, lower, lo - off, hi - off, key=_RIP) + off)
        cands = stack[lo - off:hi - off]  # (ts, event, rip); absolute index lo + q unless filtered
        g_last = c == last
        if g_last:  # the trigger: every selection ends with it
            if lower is not None and forced[1] <= lower:
                return
            cands.append((now[0], forced[0], forced[1]))
        idxs = None
        if kc.elem:
            keep = []
            for q, entry in enumerate(cands):
                binding[var] = [entry[1]]
                if all(cj.holds_at(binding, var, 0) for cj in kc.elem):
                    keep.append(q)
            binding[var] = None
            if g_last and (not keep or keep[-1] != len(cands) - 1):
                return
            idxs = [lo + q for q in keep]
            cands = [cands[q] for q in keep]
        n = len(cands)
        if not n:
            return
        first_only = need = None
        if kc.prefix and n >= EARLY_FILTER_MIN:
            first_only, need = _prefix_status(kc, binding, var, cands)
        whole_checks = whole_of[c]
        if kc.whole_mono and n >= EARLY_FILTER_MIN:
            evs = [entry[1] for entry in cands]
            stats = _stats(evs, {a for mono in kc.whole_mono.values() for a in mono.attrs})
            binding[var] = evs
            safe = set()
            for cj, mono in kc.whole_mono.items():
                verdict = mono.exact_needed(stats, binding, var)
                if verdict is None:
                    binding[var] = None
                    return
                if verdict is False:
                    safe.add(cj)
            whole_checks = tuple(cj.check for cj in kc.whole if cj not in safe)
        checked = bool(kc.first or each_of[c] or kc.prefix)
        final = bool(whole_checks or negs_at[c])
        seq: list = []
        times: list = []
        binding[var] = seq
        todo = [0]  # per depth, the next candidate to try
        while todo:
            if found[0]:  # collapsed: one match is enough to emit the row
                break
            q = todo[-1]
            if q >= n:
                todo.pop()
                if seq:
                    seq.pop()
                    times.pop()
                continue
            todo[-1] = q + 1
            ts, ev, _ = cands[q]
            pos = len(seq)
            if pos and (ts <= times[-1] or (first_only is not None and first_only[q])):
                continue
            seq.append(ev)
            times.append(ts)
            if not checked or extend_ok(c, pos, q, need):
                is_g = g_last and q == n - 1
                if (is_g or not g_last) and (not final or complete_ok(c, whole_checks)):
                    if c < j:
                        enumerate_kleene(s, i, j, c + 1, lo + q if idxs is None else idxs[q], his)
                    else:
                        step(s + 1)
                if not is_g:
                    todo.append(q + 1)
                    continue
            seq.pop()
            times.pop()
        if found[0]:
            found[0] = False
            collapsed_row(c, var, cands, lo)
        binding[var] = None

    first_step = steps[0]

    def trigger(ev: dict, rip: int, end: int) -> None:
        now[0] = ev["ts"]
        if collapsed and kleene_last:
            forced[0], forced[1], forced[2] = ev, rip, end
            step(0)
            forced[0] = None
            return
        if first_step[0] == _BLOCK:
            forced[0], forced[1], forced[2] = ev, rip, end
            block(0, first_step[1], first_step[2], first_step[3])
            forced[0] = None
            return
        binding[vars_[last]] = ev
        if checks_ok(last):
            rip_at[last] = rip
            step(1)
        binding[vars_[last]] = None

    return trigger


def _stats(evs: list[dict], attrs) -> dict[str, AggStats]:
    stats = {a: AggStats() for a in attrs}
    for ev in evs:
        for a, s in stats.items():
            s.add(ev.get(a))
    return stats


def _prefix_status(kc, binding: dict, var: str, cands: list[tuple]):
    """Per candidate, from the candidates strictly before it (the superset of any prefix it can follow):
    ``first_only[q]`` — some false-value consistent conjunct fails, so it can only be the first event;
    ``need[k][q]`` — conjunct ``k`` is not true-value consistent-true there, so it must be evaluated."""
    monos = kc.prefix
    n = len(cands)
    first_only = [False] * n
    need = [[True] * n for _ in monos]
    stats = {a: AggStats() for mono in monos for a in mono.attrs}
    q = 0
    while q < n:
        r = q
        while r < n and cands[r][0] == cands[q][0]:
            r += 1
        for x in range(q, r):
            binding[var] = [cands[x][1]]
            for k, mono in enumerate(monos):
                verdict = mono.exact_needed(stats, binding, var)
                if verdict is None:
                    first_only[x] = True
                elif verdict is False:
                    need[k][x] = False
        for x in range(q, r):
            for a, st in stats.items():
                st.add(cands[x][1].get(a))
        q = r
    binding[var] = None
    return first_only, need
