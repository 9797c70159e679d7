"""strict_contiguity, partition_contiguity and skip_till_next_match: NFA^b runs (SASE+ §2.2, SASE++ §2.1).

These strategies select few matches per start, so each partial match is kept as an explicit *run*
(:class:`~sparkcep.runtime_udfs.match.state.Run`) that reads the events in order (``ts``, then ``_seq`` or
arrival number).  A run sits at the position of its last selected event; the event may extend it to the next
position, or, at a Kleene position, to the same one (``take``) or the next (``proceed``).  Every event that
may fill the first position starts a new run: events before a match's first event are never constrained.
The exact rules are the oracle's (:mod:`sparkcep.oracles.match`):

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

A **repeated group** ``(SEQ(B b, C c) OR D d)+`` makes the alternative an automaton over its positions
(:class:`~sparkcep.runtime_udfs.match.automaton.Automaton`): a run may start at any of its ``starts``, moves
along ``follow`` (back to a group's first positions, into another branch), and completes at any of its
``ends``; a binding is one path, so no match is found twice.  Such alternatives run here under
``skip_till_any_match`` too (a run that may take an event both takes it, as a clone, and stays), with every
conjunct checked on each extended binding once its variables are bound (:class:`_LoopChecks`), and the
negations checked on the complete match, per gap (:meth:`Alternative.blocked_on_edges`).  Only a match whose
path ends on an edge with a negated end (``(p, END)`` in ``Automaton.edges``) is postponed, to ``first.ts +
W``; the others are emitted as soon as they complete, as in a flat alternative.

Conjuncts are checked as soon as their value is final (the forward :class:`Schedule`), a run is dropped when
one fails, and a run that completes the last position yields a match once the whole-sequence conjuncts of a
Kleene last position and the negations hold (a negated end is postponed, as in :mod:`match_ais`).
"""

from __future__ import annotations

from sparkcep.runtime_udfs.match.automaton import END
from sparkcep.runtime_udfs.match.compile import Alternative, Plan
from sparkcep.runtime_udfs.match.conjuncts import NEXT_MATCH
from sparkcep.runtime_udfs.match.state import AltState, Run, Sink

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
    """The checks of an automaton (a repeated group ``(SEQ(B b, C c))+``), whose positions are visited more than
    once: instead of a schedule by position, every conjunct is evaluated on each extended binding as
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
        """Every conjunct holds on the complete binding (those of the variables it binds: a group with ``OR``,
        ``?`` or ``*`` inside may leave some out, which then read NULL as in the oracle)."""
        alt = self.alt
        missing = frozenset(v for v in alt.vars if binding.get(v) is None)
        conjuncts = alt.conjuncts_without(missing) if missing else self.conjuncts
        return all(c.check(binding) is True for c in conjuncts)


def _checks(alt: Alternative) -> _Checks:
    """The (memoized) :class:`_Checks` of ``alt``."""
    memo = alt.schedule("forward").memo
    checks = memo.get("runs")
    if checks is None:
        checks = memo["runs"] = _LoopChecks(alt) if alt.automaton else _Checks(alt)
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


def _beyond_bound(alt: Alternative, binding: dict, here: int, p: int) -> bool:
    """Does a count bound keep a run at position ``here`` from moving to ``p`` (-1: from completing)?  At a
    ``T{n,m} v[]`` position: another event of ``v`` past ``m``, or leaving ``v`` before ``n``; in a bounded group
    ``(P){n,m}`` of an automaton: entering its anchor (the event each iteration takes once) an ``m+1``-th time,
    or leaving the group's positions after fewer than ``n`` iterations.  The oracle's bounded repetition, so such
    an event is not selectable either (skip_till_next_match)."""
    if alt.group_bounds:
        for anchor, lo, hi, first, last in alt.group_bounds:
            n = len(binding.get(alt.vars[anchor]) or ())
            if p == anchor and hi is not None and n >= hi:
                return True
            if first <= here <= last and not first <= p <= last and n < lo:
                return True
        return False
    bound = alt.bounds[here] if alt.bounds is not None and here >= 0 else None
    if bound is None:
        return False
    n = len(binding[alt.vars[here]])
    return (bound[1] is not None and n >= bound[1]) if p == here else n < bound[0]


#: ``Run.last_seq`` of a run some event came after (NEXT steps, events without ``_seq``); ranks are >= 0
_STALE = -2


def _adjacent(run: Run, seq) -> bool:
    """Is the event being read (``_seq`` ``seq``, None: not given) the partition's event right after ``run``'s
    last one?  With ``_seq``: consecutive ranks; without: no event was read since (the run is not stale)."""
    if seq is not None:
        return run.last_seq is not None and run.last_seq != _STALE and seq == run.last_seq + 1
    return run.last_seq is None


def _not_next_plans(alt: Alternative) -> dict[int, tuple]:
    """Per position, its negations ``NEXT !(C c)`` as ``(plan, checks, late checks)``: the checks of the
    predicates decidable on the event right after the position, and those that read a variable bound after it
    (``z.x = b.x`` in ``SEQ(A a, NEXT !(C z), B+ b[])``), decided once the run completes."""
    out = {}
    for p, plans in alt.not_next.items():
        later = frozenset(alt.vars[p + 1:])
        out[p] = tuple((plan, tuple(c.check for c in plan.conjuncts if not c.vars & later),
                        tuple(c.check for c in plan.conjuncts if c.vars & later)) for plan in plans)
    return out


def _not_next(plans: tuple, binding: dict, mask: int, ev: dict, suspects: dict | None):
    """``ev`` (component bitmask ``mask``) is the partition's event right after a run's last one, at a position
    with negations ``NEXT !(C c)`` (``plans``, see :func:`_not_next_plans`): True if it is such a ``C`` satisfying
    the predicates (the run is blocked); else the run's ``suspects`` (negated variable → event), with ``ev``
    added for each negation it fills and satisfies the decidable predicates of while others wait for a later
    variable."""
    for plan, now, late in plans:
        if mask & plan.comp_mask:
            b = dict(binding)
            b[plan.var] = ev
            if all(check(b) is True for check in now):
                if not late:
                    return True
                suspects = {**(suspects or {}), plan.var: ev}
    return suspects


def _suspect_blocks(late: dict[str, tuple], binding: dict, suspects: dict) -> bool:
    """Does one of a complete run's ``suspects`` (negated variable → event) satisfy the predicates of its
    ``NEXT !(C c)`` that waited for a later variable (``late``: negated variable → those checks)?"""
    for var, ev in suspects.items():
        b = dict(binding)
        b[var] = ev
        if all(check(b) is True for check in late[var]):
            return True
    return False


def _at(alt: Alternative, binding: dict) -> int | None:
    """The position of ``alt`` a run with ``binding`` would be at: the binding's events in ts order must be a
    path of ``alt`` (None: they are not, e.g. another alternative's variables)."""
    position = alt.position
    if any(bound is not None and v not in position for v, bound in binding.items()):
        return None
    here = None
    for _, p in alt.path(binding):
        if not (p in alt.starts if here is None else p in alt.follow[here]):
            return None
        here = p
    return here


def scan(plan: Plan, alt: Alternative, st: AltState, ready: list, sink: Sink) -> None:
    """Feed ``ready`` (``(ts, tie, mask, event)`` in processing order) to the runs of ``alt``."""
    window = plan.window
    contiguous = plan.contiguous
    next_match = plan.strategy == NEXT_MATCH
    checks = _checks(alt)
    # skip_till_next_match: the other alternatives that may continue a run of this one (selectability): per
    # position, those that start like this one; with an automaton, every other one, checked on the run's path
    general = any(a.automaton is not None for a in plan.alternatives)
    siblings = [[(_checks(other), other.split) for other in plan.alternatives
                 if other is not alt and (general or other.vars[:p + 1] == alt.vars[:p + 1])]
                for p in range(alt.m)] if next_match and len(plan.alternatives) > 1 else None
    negs, neg_plans = st.negs, alt.negs
    final_negs = tuple(n for n in alt.negs if n.after is not None and not n.guards)
    split = alt.split
    interval = alt.interval
    follow, starts, ends = alt.follow, alt.starts, alt.ends
    automaton = alt.automaton is not None
    bounded = alt.bounds is not None or bool(alt.group_bounds)
    strict = alt.strict if not contiguous else frozenset()  # a contiguity strategy already links every step
    strict_edges = alt.strict_edges if not contiguous else frozenset()
    any_strict = bool(strict or strict_edges or alt.not_next) or any(
        a.strict or a.strict_edges for a in plan.alternatives if a is not alt)
    not_next = _not_next_plans(alt)
    late_checks = {plan.var: late for plans in not_next.values() for plan, _, late in plans}
    until = bool(alt.until)
    # an automaton's match is postponed only if its path ends on an edge with a negated end (its last event's
    # position has an ``(p, END)`` edge): the others are decided, and emitted, as soon as they complete
    postponed_ends = frozenset(p for p, q in alt.automaton.edges if q == END) if automaton else frozenset()
    emit, row = sink.emit, alt.row
    budget = sink.budget  # partial matches: runs are cloned, up to 2^n under skip_till_any_match
    over_budget = sink.check if budget is not None else None

    def complete(run: Run) -> None:
        binding = run.binding
        if automaton:
            if bounded and _beyond_bound(alt, binding, run.pos, -1):
                return  # a bounded group left after fewer than n iterations
            if not checks.completes(binding) or alt.blocked_on_edges(negs, binding, window, False):
                return
            if run.pos not in postponed_ends:
                emit(row(binding))
                if over_budget is not None:
                    over_budget()
                return
        else:
            if bounded and _beyond_bound(alt, binding, run.pos, -1):
                return  # fewer than n events of a T{n,m} v[] at the end
            if alt.kleene[run.pos]:
                for check, _ in checks.whole[run.pos]:
                    if check(binding) is not True:
                        return
            for np in final_negs:
                lo, hi = interval(np, binding, window)
                if negs[np.slot].blocked(np, binding, lo, hi):
                    return
            if run.suspects and _suspect_blocks(late_checks, binding, run.suspects):
                return  # NEXT !(C c): the event right after the position before it is such a C after all
        sink.finish(alt, binding)

    def selectable_elsewhere(run: Run, mask: int, ev: dict) -> bool:
        for other_checks, other_split in siblings[run.pos]:
            other = other_checks.alt
            here = _at(other, run.binding) if general else run.pos
            if here is None:
                continue
            positions = other_split(mask)[0]
            stopped = other.stops_at(ev) if other.until else ()
            for p in other.follow[here]:
                if p in stopped or (run.closed and p in other.loops.get(here, ())):
                    continue  # a loop with UNTIL takes no stop event, and none after one
                if p in positions and not _beyond_bound(other, run.binding, here, p) and not (
                        (p in other.strict and p != here or (here, p) in other.strict_edges)
                        and not _adjacent(run, seq)):
                    binding = _extended(other, run, p, ev)
                    if other_checks.evaluate(binding, p, here)[0] and other_checks.undecided_hold(binding, p):
                        return True
        return False

    for ts, _, mask, ev in ready:
        positions, slots = split(mask)
        for s in slots:
            negs[s].add(neg_plans[s], ts, ev)
        seq = ev.get("_seq")
        if seq is not None and seq != seq:
            seq = None
        stale_on_skip = any_strict and seq is None
        stopped = alt.stops_at(ev) if until else ()  # UNTIL: the loops this event closes (and cannot enter)
        survivors: list[Run] = []
        born: list[Run] = []
        for run in st.runs:
            if ts - run.first >= window:
                continue  # can take nothing more
            if contiguous and seq is not None and run.last_seq is not None and seq != run.last_seq + 1:
                continue  # the next event of its order is not this one
            if run.pos in not_next and _adjacent(run, seq):
                suspects = _not_next(not_next[run.pos], run.binding, mask, ev, run.suspects)
                if suspects is True:
                    continue  # NEXT !(C c): the event right after its last one is such a C
                run.suspects = suspects
            selected = False
            if ts > run.last_ts:
                for p in follow[run.pos]:
                    if p not in positions or (bounded and _beyond_bound(alt, run.binding, run.pos, p)):
                        continue
                    if stopped and p in stopped or (run.closed and p in alt.loops[run.pos]):
                        continue  # a loop with UNTIL takes no stop event, and none after one
                    if (p in strict and p != run.pos or (run.pos, p) in strict_edges) and not _adjacent(run, seq):
                        continue  # a NEXT step: only from the event right before
                    binding = _extended(alt, run, p, ev)
                    decided, grows_ok = checks.evaluate(binding, p, run.pos)
                    if decided and next_match and checks.undecided_hold(binding, p):
                        selected = True
                    if decided and grows_ok:
                        born.append(Run(p, binding, run.first, ts, seq, suspects=run.suspects))
                if not selected and siblings is not None and siblings[run.pos]:
                    selected = selectable_elsewhere(run, mask, ev)
            if not contiguous and not selected:
                if stale_on_skip:
                    run.last_seq = _STALE  # this event came after its last one
                if stopped and run.pos in stopped:
                    run.closed = True  # its loop may still be left, by a later event
                survivors.append(run)
        for p in positions:
            if p in starts and not (stopped and p in stopped):
                binding = _extended(alt, None, p, ev)
                decided, grows_ok = checks.evaluate(binding, p, -1)
                if decided and grows_ok:
                    born.append(Run(p, binding, ts, ts, seq))
        for new in born:
            if new.pos in ends:
                complete(new)
            if follow[new.pos]:
                survivors.append(new)
        st.runs = survivors
        if budget is not None and len(survivors) > budget.limit:
            budget.check_partial(len(survivors))
