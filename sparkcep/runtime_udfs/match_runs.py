"""strict_contiguity, partition_contiguity and skip_till_next_match: NFA^b runs (SASE+ §2.2, SASE++ §2.1).

These strategies select few matches per start, so each partial match is kept as an explicit *run*
(:class:`~sparkcep.runtime_udfs.match_state.Run`) that reads the events in order (``ts``, then ``_seq`` or
arrival number).  A run sits at the position of its last selected event; the event may extend it to the next
position, or, at a Kleene position, to the same one (``take``) or the next (``proceed``).  Every event that
may fill the first position starts a new run: events before a match's first event are never constrained.
The exact rules are the oracle's (:mod:`sparkcep.oracle`):

* **Contiguity (S1).**  Selected events must be adjacent: two events are adjacent iff their ``_seq`` differ
  by exactly one when both carry one, else iff no other event the engine received lies between them.  Each
  event therefore either extends a run or ends it.  ``_seq`` is the event's rank in the whole input for
  strict contiguity, in its partition for partition contiguity; without it the engine must receive every
  event of the partition (those that fill no component with ``_mask`` 0) and ranks them itself.
* **Skip till next match (S2).**  No event skipped between two selected events may have been *selectable*
  there: continue the pattern after the run's events (in any alternative that starts with them: ``OR``,
  ``*``, ``?``), within the window, and satisfy every conjunct already decidable (all its variables bound,
  except those on a whole Kleene sequence: ``v[v.len]``, ``v[]``).  A run that meets a selectable event must
  take it (in every way it can: branching on ambiguous roles) and never survives skipping it; a
  non-selectable event is skipped (the run also branches if the event can still be taken, which only a
  predicate on ``v[k]`` not yet decidable allows).

A **repeated group** ``(SEQ(B b, C c))+`` adds an edge from its last position back to its first: a run there
may start another iteration or go on.  Such alternatives run here under ``skip_till_any_match`` too (a run
that may take an event both takes it, as a clone, and stays), with every conjunct checked on each extended
binding once its variables are bound (:class:`_LoopChecks`).

Conjuncts are checked as soon as their value is final (the forward :class:`Schedule`), a run is dropped when
one fails, and a run that completes the last position yields a match once the whole-sequence conjuncts of a
Kleene last position and the negations hold (a negated end is postponed, as in :mod:`match_ais`).
"""

from __future__ import annotations

from sparkcep.runtime_udfs.match_compile import NEXT_MATCH, Alternative, Plan
from sparkcep.runtime_udfs.match_state import AltState, Run, Sink

__all__ = ["scan"]


class _Checks:
    """The forward schedule of an alternative, flattened for the run loop."""

    __slots__ = ("alt", "single", "element", "whole", "growing")

    def __init__(self, alt: Alternative):
        sched = alt.schedule("forward")
        self.alt = alt
        self.single = [list(zip(sched.single[p], sched.single_grows[p], strict=True)) for p in range(alt.m)]
        self.element = [kc.element_checks() if kc is not None else [] for kc in sched.kleene]
        self.whole = [[(c.check, c.grows) for c in kc.whole] if kc is not None else [] for kc in sched.kleene]
        self.growing = sched.growing

    def evaluate(self, binding: dict, p: int, before: int) -> tuple[bool, bool]:
        """``(the conjuncts that become final hold, except those on whole Kleene sequences; those hold)`` when
        position ``p`` gets an event after a run at position ``before`` (-1: a new run)."""
        kleene = self.alt.kleene
        grows_ok = True
        if before >= 0 and p != before and kleene[before]:
            for check, grows in self.whole[before]:
                if check(binding) is not True:
                    if not grows:
                        return False, False
                    grows_ok = False
        if kleene[p]:
            var = self.alt.vars[p]
            pos = len(binding[var]) - 1
            for cj, prev, after, only_first in self.element[p]:
                if only_first and pos:
                    continue
                at = pos - 1 if after else pos
                if at < 0 or (prev and at < 1):
                    continue
                if (cj.holds_at(binding, var, at) if var in cj.positional else cj.check(binding)) is not True:
                    return False, False
        else:
            for check, grows in self.single[p]:
                if check(binding) is not True:
                    if not grows:
                        return False, False
                    grows_ok = False
        return True, grows_ok

    def undecided_hold(self, binding: dict, p: int) -> bool:
        """The conjuncts skip_till_next_match also requires of a selectable event though their value may still
        change (``v[k]`` of a growing ``v``, bare attributes), with positions up to ``p`` bound."""
        for cj, needed in self.growing:
            if needed <= p and cj.check(binding) is not True:
                return False
        return True


class _LoopChecks(_Checks):
    """The checks of an alternative with a repeated group ``(SEQ(B b, C c))+``, whose positions are visited
    more than once: instead of a schedule by position, every conjunct is evaluated on each extended binding as
    soon as its variables are bound, with the oracle's rules.  A conjunct that reads a still growing array
    (the Kleene variable of the run's position, the variables of the group it is in) through ``v[v.len]``,
    ``v[]`` or ``v[k]`` waits; any other conjunct can only gain constraints as arrays grow (``v[i]`` holds at
    every position), so its failure is final."""

    __slots__ = ("conjuncts", "growing_at")

    def __init__(self, alt: Alternative):
        super().__init__(alt)
        self.conjuncts = tuple(alt.conjuncts)
        growing = []
        for p in range(alt.m):
            vs = {alt.vars[p]} if alt.kleene[p] else set()
            for i, j in alt.groups:
                if i <= p <= j:
                    vs.update(alt.vars[i:j + 1])
            growing.append(frozenset(vs))
        self.growing_at = growing

    def evaluate(self, binding: dict, p: int, before: int) -> tuple[bool, bool]:
        growing = self.growing_at[p]
        grows_ok = True
        for c in self.conjuncts:
            if c.nulled or c.global_ or c.waits & growing or any(binding.get(v) is None for v in c.vars):
                continue  # decided at completion (a conjunct on a variable this alternative lacks: there only)
            if c.check(binding) is not True:
                if not c.grows:
                    return False, False
                grows_ok = False
        return True, grows_ok

    def undecided_hold(self, binding: dict, p: int) -> bool:
        growing = self.growing_at[p]
        for c in self.conjuncts:
            if c.nulled or c.grows or not (c.global_ or c.waits & growing):
                continue
            if all(binding.get(v) is not None for v in c.vars) and c.check(binding) is not True:
                return False
        return True

    def completes(self, binding: dict) -> bool:
        """Every conjunct holds on the complete binding."""
        return all(c.check(binding) is True for c in self.conjuncts)


def _checks(alt: Alternative) -> _Checks:
    """The (memoized) :class:`_Checks` of ``alt``."""
    memo = alt.schedule("forward").memo
    checks = memo.get("runs")
    if checks is None:
        checks = memo["runs"] = _LoopChecks(alt) if alt.groups else _Checks(alt)
    return checks


def _extended(alt: Alternative, run: Run | None, p: int, ev: dict) -> dict:
    """The binding of ``run`` (None: a new run) with ``ev`` at position ``p``."""
    var = alt.vars[p]
    if run is None:
        binding = dict.fromkeys(alt.all_vars)
    else:
        binding = dict(run.binding)
    if alt.listed[p]:
        before = binding.get(var)
        binding[var] = [*before, ev] if before else [ev]  # a group's variable: one more iteration
    else:
        binding[var] = ev
    return binding


def _options(alt: Alternative, here: int) -> tuple[int, ...]:
    """The positions an event may take after a run at ``here``: the next one, ``here`` itself if Kleene, the
    first position of a repeated group that ends at ``here``."""
    nxt = (here + 1,) if here + 1 < alt.m else ()
    if here in alt.loop_back:
        nxt = (alt.loop_back[here], *nxt)
    return (here, *nxt) if alt.kleene[here] else nxt


def _blocked_inside(binding: dict, guarded: tuple, negs: list, position: dict, kleene: tuple) -> bool:
    """Is a complete match invalidated by a negation inside a repeated group?  The match's events in ts order
    give its position transitions ``(p, q)`` (``p == q`` at a Kleene position is one run, not a transition);
    a negation guarding ``(p, q)`` must have no event between the two events."""
    flat = sorted((ev["ts"], position[v]) for v, bound in binding.items() if v in position and bound is not None
                  for ev in (bound if isinstance(bound, list) else (bound,)))
    for (lo, p), (hi, q) in zip(flat, flat[1:], strict=False):
        if p == q and kleene[p]:
            continue
        for np in guarded:
            if (p, q) in np.guards and negs[np.slot].blocked(np, binding, lo, hi):
                return True
    return False


def scan(plan: Plan, alt: Alternative, st: AltState, ready: list, sink: Sink) -> None:
    """Feed ``ready`` (``(ts, tie, mask, event)`` in processing order) to the runs of ``alt``."""
    window = plan.window
    contiguous = plan.contiguous
    next_match = plan.strategy == NEXT_MATCH
    checks = _checks(alt)
    # skip_till_next_match: the other alternatives that start like this one, per position (selectability)
    siblings = [[(_checks(other), other.split) for other in plan.alternatives
                 if other is not alt and other.vars[:p + 1] == alt.vars[:p + 1]]
                for p in range(alt.m)] if next_match and len(plan.alternatives) > 1 else None
    kleene = alt.kleene
    last = alt.m - 1
    negs, neg_plans = st.negs, alt.negs
    final_negs = tuple(n for n in alt.negs if n.after is not None and not n.guards)
    guarded = tuple(n for n in alt.negs if n.guards)
    position = {v: p for p, v in enumerate(alt.vars)}
    split = alt.split
    interval = alt.interval

    looping = bool(alt.groups)
    survives_last = kleene[last] or last in alt.loop_back

    def complete(run: Run) -> None:
        binding = run.binding
        if looping:
            if not checks.completes(binding):
                return
        elif kleene[last]:
            for check, _ in checks.whole[last]:
                if check(binding) is not True:
                    return
        for np in final_negs:
            lo, hi = interval(np, binding, window)
            if negs[np.slot].blocked(np, binding, lo, hi):
                return
        if guarded and _blocked_inside(binding, guarded, negs, position, kleene):
            return
        sink.finish(alt, binding)

    def selectable_elsewhere(run: Run, mask: int, ev: dict) -> bool:
        for other_checks, other_split in siblings[run.pos]:
            other = other_checks.alt
            positions = other_split(mask)[0]
            for p in _options(other, run.pos):
                if p in positions:
                    binding = _extended(other, run, p, ev)
                    if other_checks.evaluate(binding, p, run.pos)[0] and other_checks.undecided_hold(binding, p):
                        return True
        return False

    for ts, _, mask, ev in ready:
        positions, slots = split(mask)
        for s in slots:
            negs[s].add(neg_plans[s], ts, ev)
        seq = ev.get("_seq")
        if seq is not None and seq != seq:
            seq = None
        survivors: list[Run] = []
        born: list[Run] = []
        for run in st.runs:
            if ts - run.first >= window:
                continue  # can take nothing more
            if contiguous and seq is not None and run.last_seq is not None and seq != run.last_seq + 1:
                continue  # the next event of its order is not this one
            selected = False
            if ts > run.last_ts:
                for p in _options(alt, run.pos):
                    if p not in positions:
                        continue
                    binding = _extended(alt, run, p, ev)
                    decided, grows_ok = checks.evaluate(binding, p, run.pos)
                    if decided and next_match and checks.undecided_hold(binding, p):
                        selected = True
                    if decided and grows_ok:
                        born.append(Run(p, binding, run.first, ts, seq))
                if not selected and siblings is not None and siblings[run.pos]:
                    selected = selectable_elsewhere(run, mask, ev)
            if not contiguous and not selected:
                survivors.append(run)
        if positions and positions[0] == 0:
            binding = _extended(alt, None, 0, ev)
            decided, grows_ok = checks.evaluate(binding, 0, -1)
            if decided and grows_ok:
                born.append(Run(0, binding, ts, ts, seq))
        for new in born:
            if new.pos == last:
                complete(new)
                if survives_last:
                    survivors.append(new)
            else:
                survivors.append(new)
        st.runs = survivors
