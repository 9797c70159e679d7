"""The per-partition state of the match engine and its compact serialization.

Everything here is plain data: the engines (:mod:`match_ais`, :mod:`match_runs`) mutate it, and
:meth:`MatchState.to_bytes` turns it into builtin types only (events stored once, as value tuples under one
shared column list; everything else refers to them by position), so that a streaming job can keep it in a
binary state column between micro-batches.
"""

from __future__ import annotations

import heapq
import itertools
import math
import pickle
from typing import TYPE_CHECKING, Any

from sparkcep.ir.errors import CEPError
from sparkcep.runtime_udfs.match.negation import NegIndex

if TYPE_CHECKING:
    from sparkcep.runtime_udfs.match.budget import Budget
    from sparkcep.runtime_udfs.match.compile import Alternative, Plan

__all__ = ["STATE_VERSION", "AltState", "MatchState", "Run", "Sink"]

#: Version tag of the serialized state (:meth:`MatchState.to_bytes`).
STATE_VERSION = 2


class Run:
    """A partial match of the run-based engine (:mod:`match_runs`): the position of its last selected event,
    its binding (variable → event, or list of events for a Kleene variable), the ts of its first and last
    events and the ``_seq`` of its last event (None: none given); ``closed`` once a stop event (``UNTIL``) came while
    it is at a position of its loop (one event's, or a repeated group's): it takes no more events there, it may
    only leave the loop; ``suspects`` (None: none) the events that came
    right after a position with a ``NEXT !(C c)`` and fill it, by negated variable, whose predicates read a
    variable bound after that position: they are decided when the run completes."""

    __slots__ = ("pos", "binding", "first", "last_ts", "last_seq", "closed", "suspects")

    def __init__(self, pos: int, binding: dict, first, last_ts, last_seq, closed: bool = False,
                 suspects: dict | None = None):
        self.pos, self.binding, self.first, self.last_ts, self.last_seq = pos, binding, first, last_ts, last_seq
        self.closed = closed
        self.suspects = suspects


class AltState:
    """The state of one alternative of the pattern.

    ``stacks``  (AIS engine) per positive position with a stack, the active instance stack: ``(ts, event,
                rip)`` in ts order, ``rip`` the absolute length of the previous stack when the event arrived;
    ``offs``    absolute index of ``stacks[k][0]`` (entries before it were physically deleted);
    ``heads``   absolute index of the first live entry of ``stacks[k]`` (entries before it are pruned);
    ``runs``    (run engine) the live :class:`Run` objects;
    ``negs``    per negative component, its :class:`NegIndex`.
    """

    __slots__ = ("stacks", "offs", "heads", "runs", "negs", "stale")

    def __init__(self, n_stacks: int, n_negs: int):
        self.stacks: list[list[tuple]] = [[] for _ in range(n_stacks)]
        self.offs = [0] * n_stacks
        self.heads = [0] * n_stacks
        self.runs: list[Run] = []
        self.negs = [NegIndex() for _ in range(n_negs)]
        self.stale = False  # loaded from bytes: the negation buckets need rebuilding (see match_engine)

    def live(self, k: int) -> list[tuple]:
        """The live entries of stack ``k``, oldest first."""
        return self.stacks[k][self.heads[k] - self.offs[k]:]

    def live_instances(self) -> int:
        """Live stack entries plus live runs (what a match could still extend)."""
        n = len(self.runs)
        for s, off, h in zip(self.stacks, self.offs, self.heads):  # noqa: B905 - same length by construction
            n += off + len(s) - h
        return n

    def stored(self) -> int:
        """Physically stored entries: stacks (including pruned, not yet compacted ones), runs, negatives."""
        return sum(len(s) for s in self.stacks) + len(self.runs) + sum(len(n) for n in self.negs)

    def newest(self):
        """The newest ts any live entry depends on (None: nothing live): once the watermark passes it by the
        window, everything is pruned."""
        times = [s[-1][0] for s, off, h in zip(self.stacks, self.offs, self.heads, strict=True)
                 if h - off < len(s)]
        times += [r.first for r in self.runs]
        times += [t for t in (n.newest() for n in self.negs) if t is not None]
        return max(times) if times else None


class MatchState:
    """The state of one partition.  Mutated in place by ``step`` and ``advance``, which return it.

    ``frontier``   the watermark processed so far: events with ``ts < frontier`` are late;
    ``pending``    buffered ``(ts, tie, mask, event)``, all with ``ts >= frontier``; ``tie`` orders equal
                   timestamps (the event's ``_seq``, else its arrival number);
    ``arrivals``   events buffered so far (the next arrival number);
    ``alts``       per alternative of the pattern, its :class:`AltState` (created by the first ``advance``);
    ``postponed``  a heap of matches waiting for a negated end: ``(deadline, number, alternative, binding)``,
                   released once the watermark reaches ``deadline`` = first ts + W (SASE §3.3);
    ``late``       events dropped because ``ts < frontier`` when they arrived;
    ``invalid``    events dropped because their ``ts`` was null or NaN;
    ``ranked``     per partition of the equivalence test, the next number of an event, when a negation with a
                   ``NEXT`` step numbers them (``engine._ranked``).
    """

    __slots__ = ("frontier", "pending", "arrivals", "alts", "postponed", "late", "invalid", "ranked")

    def __init__(self) -> None:
        self.frontier: float = -math.inf
        self.pending: list[tuple[Any, Any, int, dict]] = []
        self.arrivals = 0
        self.alts: list[AltState] = []
        self.postponed: list[tuple] = []
        self.late = 0
        self.invalid = 0
        self.ranked: dict[tuple, int] = {}

    def live_instances(self) -> int:
        """Live stack entries, runs and postponed matches over all alternatives."""
        return sum(a.live_instances() for a in self.alts) + len(self.postponed)

    def stored(self) -> int:
        """Everything physically held: pending events, stack entries, runs, negative events, postponed."""
        return len(self.pending) + sum(a.stored() for a in self.alts) + len(self.postponed)

    def to_bytes(self) -> bytes:
        """A compact serialization (builtin types only, pickled): events are stored once as value tuples under
        one shared column list, everything else refers to them by position, and RIPs are made relative to the
        live head of the previous stack so that the loaded state starts with all offsets at 0.
        """
        cols: list[str] = []
        col_pos: dict[str, int] = {}
        rows: list[tuple] = []
        row_of: dict[int, int] = {}

        def ref(ev: dict) -> int:
            i = row_of.get(id(ev))
            if i is None:
                for c in ev:
                    if c not in col_pos:
                        col_pos[c] = len(cols)
                        cols.append(c)
                i = row_of[id(ev)] = len(rows)
                rows.append(tuple(ev.get(c) for c in cols))
            return i

        def encode(binding: dict) -> dict:
            return {v: [ref(e) for e in b] if isinstance(b, list) else ref(b)
                    for v, b in binding.items() if b is not None}

        pending = [(ref(ev), mask, tie) for _, tie, mask, ev in self.pending]
        alts = []
        for a in self.alts:
            stacks = []
            for k in range(len(a.stacks)):
                base = a.heads[k - 1] if k else 0
                flat: list[int] = []
                for _, ev, rip in a.live(k):
                    flat.append(ref(ev))
                    flat.append(rip - base if k else 0)
                stacks.append(flat)
            runs = [(r.pos, r.first, r.last_ts, r.last_seq, encode(r.binding), r.closed,
                     encode(r.suspects) if r.suspects else None) for r in a.runs]
            negs = [[ref(ev) for _, ev in n.events] for n in a.negs]
            alts.append((stacks, runs, negs))
        postponed = [(deadline, alt, encode(binding)) for deadline, _, alt, binding in self.postponed]
        payload = (STATE_VERSION, self.frontier, self.late, self.invalid, self.arrivals, cols, rows, pending,
                   alts, postponed, self.ranked)
        return pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def from_bytes(cls, data: bytes) -> MatchState:
        """Inverse of :meth:`to_bytes`."""
        payload = pickle.loads(data)
        if payload[0] != STATE_VERSION:
            raise CEPError(f"match engine state version {payload[0]} is not supported "
                           f"(expected {STATE_VERSION})")
        # (a state written before ``ranked`` existed has ten items)
        _, frontier, late, invalid, arrivals, cols, rows, pending, alts, postponed, *ranked = payload
        # rows of events seen before a later event added columns are shorter: those keys are missing
        events = [dict(zip(cols, row, strict=False)) for row in rows]

        def decode(encoded: dict) -> dict:
            return {v: [events[i] for i in r] if isinstance(r, list) else events[r] for v, r in encoded.items()}

        state = cls()
        state.frontier, state.late, state.invalid, state.arrivals = frontier, late, invalid, arrivals
        state.ranked = ranked[0] if ranked else {}
        state.pending = [(events[i]["ts"], tie, mask, events[i]) for i, mask, tie in pending]
        for stacks, runs, negs in alts:
            a = AltState(len(stacks), len(negs))
            for k, flat in enumerate(stacks):
                a.stacks[k] = [(events[flat[j]]["ts"], events[flat[j]], flat[j + 1])
                               for j in range(0, len(flat), 2)]
            # (a state written before runs carried ``closed`` and ``suspects`` has five items per run)
            a.runs = [Run(pos, decode(b), first, last_ts, last_seq, *rest[:1],
                          suspects=decode(rest[1]) if rest[1:] and rest[1] else None)
                      for pos, first, last_ts, last_seq, b, *rest in runs]
            for index, refs in zip(a.negs, negs, strict=True):
                index.events = [(events[i]["ts"], events[i]) for i in refs]
            a.stale = any(negs)
            state.alts.append(a)
        # negative numbers, increasing along the heap array: the heap order is kept and never collides with
        # the (non-negative) numbers of matches postponed later
        state.postponed = [(deadline, k - len(postponed), alt, decode(b))
                           for k, (deadline, alt, b) in enumerate(postponed)]
        return state

    def __reduce__(self):
        return (MatchState.from_bytes, (self.to_bytes(),))


#: Tie-breakers of postponed matches with equal deadlines (a heap never compares their bindings).
_numbers = itertools.count()


class Sink:
    """Where complete bindings go: a result row now, or, when the alternative ends with a negation, the heap
    of postponed matches (SASE §3.3: "postponed by T"), to be released once the watermark reaches
    ``first ts + W``.

    ``budget`` (a :class:`~sparkcep.runtime_udfs.match.budget.Budget`, or None): ``room`` is what is left of
    it for this call (None: no limit); every row emitted and every match postponed counts (``postponed_n``),
    and :meth:`check` raises once they exceed ``room``.  ``emit`` is ``rows.append`` itself: the engines'
    hot loops compare ``len(rows)`` with what is left after each emit (``match_ais``) or call :meth:`check`;
    :meth:`settle` charges the budget with this call's matches at the end.
    """

    __slots__ = ("plan", "state", "rows", "budget", "room", "postponed_n", "emit")

    def __init__(self, plan: Plan, state: MatchState, rows: list[dict], budget: Budget | None = None):
        self.plan, self.state, self.rows = plan, state, rows
        self.budget = budget if budget is not None and budget.limit is not None else None
        self.room = self.budget.room() if self.budget is not None else None
        self.postponed_n = 0
        self.emit = rows.append

    def check(self) -> None:
        """Raise once the matches of this call exceed what is left of the budget."""
        if self.room is not None and len(self.rows) + self.postponed_n > self.room:
            self.budget.charge(len(self.rows) + self.postponed_n)  # raises

    def settle(self) -> None:
        """Charge the budget with this call's matches (before rows that are not new matches join ``rows``)."""
        if self.budget is not None:
            self.budget.charge(len(self.rows) + self.postponed_n)

    def finish(self, alt: Alternative, binding: dict) -> None:
        if alt.trailing:
            deadline = alt.span(binding)[0] + self.plan.window
            snapshot = {v: list(b) if isinstance(b, list) else b for v, b in binding.items()
                        if b is not None and v not in alt.neg_vars}
            heapq.heappush(self.state.postponed, (deadline, next(_numbers), alt.index, snapshot))
            self.postponed_n += 1
        else:
            self.rows.append(alt.row(binding))
        if self.room is not None:
            self.check()
