"""Match construction for flat sequences of single positive events: SASE's sequence scan and construction.

This engine is pure Python and knows nothing about Spark.  It runs one partition of the equivalence key (the
caller partitions, as SASE's PAIS does) under ``skip_till_any_match``:

* **Sequence scan.**  Events are processed in ``ts`` order.  Component ``k`` owns an *active instance stack*
  of entries ``(ts, event, rip)``; ``rip`` ("most recent instance in the previous stack") is the absolute
  length of stack ``k-1`` when the event arrived, so stack ``k-1``'s entries below ``rip`` are exactly the
  events that may precede this one.  Events of equal ``ts`` are scanned as one group whose RIPs are all
  taken before any of them is pushed, which makes timestamps strictly increasing within every match.  An
  event that can fill component ``k > 0`` but has no live predecessor is dropped (transition filtering).
* **Sequence construction.**  An event that fills the last component starts a depth-first walk back over the
  RIP pointers.  Each parameterized predicate is checked at the level where its last variable gets bound
  (dynamic filtering), so a failing prefix cuts its whole subtree.
* **Window pushdown.**  Before each ``ts`` group, entries with ``ts <= group ts - window`` are pruned from the
  stacks, and so is every entry whose predecessors are all pruned.  Both conditions hold for a prefix of a
  stack (stacks are in ``ts`` order and RIPs never decrease), so pruning moves a head pointer; every entry the
  walk sees is within the window of the event that completes the match.  After an :func:`advance` the same
  pruning against the watermark keeps the state bounded by the window.

Events are dicts with ``type``, ``ts`` (a number) and optionally ``_mask`` (bit ``k`` set ⇔ the event may fill
component ``k``; absent or ``None`` ⇒ the engine tests type and local predicate itself), plus attributes.

Example::

    >>> from sparkcep.compiler.ast import Attr
    >>> from sparkcep.runtime_udfs.spec import Component, MatchSpec, OutputColumn
    >>> spec = MatchSpec(components=(Component("a", ("A",)), Component("b", ("B",))), predicates=(),
    ...                  window=10, outputs=(OutputColumn("a_ts", Attr("a", "ts")),
    ...                                      OutputColumn("b_ts", Attr("b", "ts"))))
    >>> state = init_state()
    >>> state, _ = step(spec, state, [{"type": "B", "ts": 5}, {"type": "A", "ts": 1}, {"type": "A", "ts": 3}])
    >>> state, rows = advance(spec, state, 5)
    >>> rows
    [{'a_ts': 3, 'b_ts': 5}, {'a_ts': 1, 'b_ts': 5}]
"""

from __future__ import annotations

import math
import pickle
from bisect import bisect_right
from collections.abc import Iterable
from functools import lru_cache
from operator import itemgetter
from typing import Any

from sparkcep.compiler.ast import Attr, EquivTest, walk
from sparkcep.compiler.errors import CEPError
from sparkcep.runtime_udfs.expr import LACKING, compile_expr
from sparkcep.runtime_udfs.spec import MatchSpec

__all__ = [
    "EngineUnsupportedError",
    "MatchState",
    "advance",
    "check",
    "init_state",
    "is_empty",
    "step",
    "wakeup",
]

#: Version tag of the serialized state (:meth:`MatchState.to_bytes`).
STATE_VERSION = 1

_ts_of = itemgetter(0)


class EngineUnsupportedError(CEPError, NotImplementedError):
    """The spec uses a feature this engine does not implement (yet): Kleene, negation, another strategy."""


# --------------------------------------------------------------------------------------------- compiled spec


class _Compiled:
    """Everything the engine needs from a :class:`MatchSpec`, compiled once (closures, lookup tables)."""

    __slots__ = ("n", "vars", "window", "full", "by_type", "level_preds", "outputs", "_bits")

    def __init__(self, spec: MatchSpec):
        comps = spec.components
        if not comps:
            raise EngineUnsupportedError("a match query needs at least one component")
        for c in comps:
            if c.negated:
                raise EngineUnsupportedError(
                    f"negated component '{c.var}' is not supported by the match engine yet")
            if c.kleene is not None:
                raise EngineUnsupportedError(
                    f"Kleene component '{c.var}{c.kleene}' is not supported by the match engine yet")
        if spec.strategy not in (None, "skip_till_any_match"):
            raise EngineUnsupportedError(
                f"selection strategy {spec.strategy} is not supported by the match engine yet "
                "(only skip_till_any_match)")
        if not spec.window > 0:
            raise CEPError(f"the window must be positive, got {spec.window}")
        self.n = len(comps)
        self.vars = tuple(c.var for c in comps)
        self.window = spec.window
        self.full = (1 << self.n) - 1
        any_vars = frozenset(c.var for c in comps if c.any_)
        by_type: dict[str, list] = {}
        for k, c in enumerate(comps):
            local = compile_expr(c.local, any_vars) if c.local is not None else None
            for t in c.types:
                by_type.setdefault(t, []).append((k, c.var, local))
        self.by_type = {t: tuple(v) for t, v in by_type.items()}
        levels: list[list] = [[] for _ in comps]
        position = {v: k for k, v in enumerate(self.vars)}
        for pred in spec.predicates:
            levels[_anchor(pred, position, self.n)].append(compile_expr(pred, any_vars))
        self.level_preds = tuple(tuple(p) for p in levels)
        self.outputs = tuple((o.name, _output_fn(o.expr, position, any_vars)) for o in spec.outputs)
        self._bits: dict[int, tuple[int, ...]] = {}

    def components_of(self, mask: int) -> tuple[int, ...]:
        """The component indices whose bit is set in ``mask``, ascending (memoized per mask)."""
        out = self._bits.get(mask)
        if out is None:
            out = self._bits[mask] = tuple(k for k in range(self.n) if mask >> k & 1)
        return out

    def mask_of(self, event: dict) -> int:
        """Type test and local predicates, for an event that arrived without a ``_mask``."""
        mask = 0
        for k, var, local in self.by_type.get(event.get("type"), ()):
            if local is None or local({var: event}) is True:
                mask |= 1 << k
        return mask


def _anchor(pred, position: dict[str, int], n: int) -> int:
    """The construction level at which all of ``pred``'s variables are bound.

    Construction binds components from the last to the first, so that is the smallest component index the
    predicate reads.  Bare attributes and equivalence tests read every variable: level 0.  A predicate that
    reads no variable is checked first, at the last level.
    """
    level = n - 1
    for node in walk(pred):
        if isinstance(node, EquivTest) or (isinstance(node, Attr) and node.var is None):
            return 0
        if isinstance(node, Attr):
            if node.var not in position:
                raise CEPError(f"predicate refers to unknown variable '{node.var}'")
            level = min(level, position[node.var])
    return level


def _output_fn(expr, position: dict[str, int], any_vars: frozenset[str]):
    """``f(binding) -> value`` of a result column; a lacking attribute (``expr.LACKING``) reads as None.

    A plain ``v.attr`` (every default column is one) reads the event directly: the same value as
    :func:`compile_expr` gives, without its generic dispatch (missing and NaN are None).
    """
    if isinstance(expr, Attr) and expr.var in position and expr.index is None:
        var, attr = expr.var, expr.attr

        def column(binding: dict) -> Any:
            value = binding[var].get(attr)
            return None if isinstance(value, float) and value != value else value

        return column
    fn = compile_expr(expr, any_vars)

    def value(binding: dict) -> Any:
        out = fn(binding)
        return None if out is LACKING else out

    return value


@lru_cache(maxsize=64)
def _compiled(spec: MatchSpec) -> _Compiled:
    return _Compiled(spec)


def check(spec: MatchSpec) -> None:
    """Raise :class:`EngineUnsupportedError` (or :class:`CEPError`) if this engine cannot run ``spec``."""
    _compiled(spec)


# ----------------------------------------------------------------------------------------------- state


class MatchState:
    """The state of one partition.  Mutated in place by :func:`step` and :func:`advance`, which return it.

    ``frontier``  the watermark processed so far: events with ``ts <= frontier`` are late.
    ``pending``   buffered ``(ts, mask, event)`` in arrival order, all with ``ts > frontier``.
    ``stacks``    per component but the last, the active instance stack: ``(ts, event, rip)`` in ts order.
    ``offs``      absolute index of ``stacks[k][0]`` (entries before it were physically deleted).
    ``heads``     absolute index of the first live entry of ``stacks[k]`` (entries before it are pruned).
    ``late``      events dropped because ``ts <= frontier`` when they arrived.
    ``invalid``   events dropped because their ``ts`` was null or NaN.
    """

    __slots__ = ("frontier", "pending", "stacks", "offs", "heads", "late", "invalid")

    def __init__(self) -> None:
        self.frontier: float = -math.inf
        self.pending: list[tuple[Any, int, dict]] = []
        self.stacks: list[list[tuple[Any, dict, int]]] = []
        self.offs: list[int] = []
        self.heads: list[int] = []
        self.late = 0
        self.invalid = 0

    def live(self, k: int) -> list[tuple[Any, dict, int]]:
        """The live entries of stack ``k``, oldest first."""
        return self.stacks[k][self.heads[k] - self.offs[k]:]

    def to_bytes(self) -> bytes:
        """A compact serialization (builtin types only, pickled): events are stored once as value tuples under
        one shared column list, stack entries refer to them by position, and RIPs are made relative to the
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

        pending = [(ref(ev), mask) for _, mask, ev in self.pending]
        stacks = []
        for k in range(len(self.stacks)):
            base = self.heads[k - 1] if k else 0
            flat: list[int] = []
            for _, ev, rip in self.live(k):
                flat.append(ref(ev))
                flat.append(rip - base if k else 0)
            stacks.append(flat)
        payload = (STATE_VERSION, self.frontier, self.late, self.invalid, cols, rows, pending, stacks)
        return pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def from_bytes(cls, data: bytes) -> MatchState:
        """Inverse of :meth:`to_bytes`."""
        version, frontier, late, invalid, cols, rows, pending, stacks = pickle.loads(data)
        if version != STATE_VERSION:
            raise CEPError(f"match engine state version {version} is not supported "
                           f"(expected {STATE_VERSION})")
        # rows of events seen before a later event added columns are shorter: those keys are missing
        events = [dict(zip(cols, row, strict=False)) for row in rows]
        state = cls()
        state.frontier, state.late, state.invalid = frontier, late, invalid
        state.pending = [(events[i]["ts"], mask, events[i]) for i, mask in pending]
        for k, flat in enumerate(stacks):
            entries = []
            for j in range(0, len(flat), 2):
                ev = events[flat[j]]
                entries.append((ev["ts"], ev, flat[j + 1] if k else None))
            state.stacks.append(entries)
        state.offs = [0] * len(stacks)
        state.heads = [0] * len(stacks)
        return state

    def __reduce__(self):
        return (MatchState.from_bytes, (self.to_bytes(),))


def init_state() -> MatchState:
    """A fresh, empty partition state."""
    return MatchState()


def is_empty(state: MatchState) -> bool:
    """True when nothing is buffered and no live instance is left (the caller may drop the state)."""
    if state.pending:
        return False
    return all(state.heads[k] - state.offs[k] >= len(s) for k, s in enumerate(state.stacks))


def wakeup(spec: MatchSpec, state: MatchState) -> float | None:
    """The smallest watermark at which :func:`advance` has work to do without new events, or None.

    That is the earliest buffered ``ts`` (it becomes processable), or else the time at which every live
    instance has left the window (the state can then be dropped).
    """
    times = [ts for ts, _, _ in state.pending]
    newest = [s[-1][0] for k, s in enumerate(state.stacks) if state.heads[k] - state.offs[k] < len(s)]
    if newest:
        times.append(max(newest) + _compiled(spec).window)
    return min(times) if times else None


# -------------------------------------------------------------------------------------------- step / advance


def step(spec: MatchSpec, state: MatchState, events: Iterable[dict]) -> tuple[MatchState, list[dict]]:
    """Buffer ``events`` (any order).  Returns ``(state, [])``: rows are only produced by :func:`advance`.

    Events with ``ts <= state.frontier`` are late and counted in ``state.late``; events without a usable
    ``ts`` are counted in ``state.invalid``; events that can fill no component are dropped.
    """
    cs = _compiled(spec)
    frontier = state.frontier
    full = cs.full
    pending = state.pending
    for ev in events:
        ts = ev.get("ts")
        if ts is None or ts != ts:
            state.invalid += 1
            continue
        if ts <= frontier:
            state.late += 1
            continue
        mask = ev.get("_mask")
        mask = cs.mask_of(ev) if mask is None or mask != mask else int(mask) & full
        if mask:
            pending.append((ts, mask, ev))
    return state, []


def advance(spec: MatchSpec, state: MatchState, watermark: float) -> tuple[MatchState, list[dict]]:
    """Process the buffered events with ``ts <= watermark`` in ``ts`` order and return the completed matches.

    Each match is emitted exactly once, as a dict ``output name → value``.  ``advance(spec, state, inf)``
    flushes everything (batch).  A watermark at or below the frontier is a no-op.
    """
    if not watermark > state.frontier:
        return state, []
    cs = _compiled(spec)
    while len(state.stacks) < cs.n - 1:
        state.stacks.append([])
        state.offs.append(0)
        state.heads.append(0)
    pending = state.pending
    pending.sort(key=_ts_of)
    cut = bisect_right(pending, watermark, key=_ts_of)
    ready, state.pending = pending[:cut], pending[cut:]
    state.frontier = watermark
    rows: list[dict] = []
    if ready:
        _scan(cs, state, ready, rows)
    _prune(state, watermark - cs.window)
    return state, rows


def _prune(state: MatchState, horizon: float) -> None:
    """Move each stack's head past entries with ``ts <= horizon`` or without live predecessors; compact lists
    once more than half of an array is dead."""
    stacks, offs, heads = state.stacks, state.offs, state.heads
    prev_head = 0
    for k, stack in enumerate(stacks):
        off = offs[k]
        h = heads[k]
        end = off + len(stack)
        while h < end:
            ts, _, rip = stack[h - off]
            if ts <= horizon or (k and rip <= prev_head):
                h += 1
            else:
                break
        heads[k] = prev_head = h
        dead = h - off
        if dead > 32 and 2 * dead > len(stack):
            del stack[:dead]
            offs[k] = h


def _scan(cs: _Compiled, state: MatchState, ready: list, rows: list[dict]) -> None:
    """Sequence scan over ``ready`` (sorted by ts), constructing matches as the last component is filled."""
    n, window = cs.n, cs.window
    last = n - 1
    stacks, offs, heads = state.stacks, state.offs, state.heads
    construct = _constructor(cs, state, rows)
    i, total = 0, len(ready)
    while i < total:
        t = ready[i][0]
        j = i + 1
        while j < total and ready[j][0] == t:
            j += 1
        _prune(state, t - window)
        ends = [offs[k] + len(stacks[k]) for k in range(last)]
        for _, mask, ev in ready[i:j]:
            for k in cs.components_of(mask):
                if k == 0:
                    if last == 0:
                        construct(ev, 0)
                    else:
                        stacks[0].append((t, ev, None))
                    continue
                rip = ends[k - 1]
                if rip <= heads[k - 1]:
                    continue
                if k == last:
                    construct(ev, rip)
                else:
                    stacks[k].append((t, ev, rip))
        i = j


def _constructor(cs: _Compiled, state: MatchState, rows: list[dict]):
    """Build ``construct(event, rip)``: all matches the event completes as the last component, appended to
    ``rows``.  The walk goes back over the live part of each stack, newest first."""
    stacks, offs, heads = state.stacks, state.offs, state.heads
    vars_, level_preds, outputs = cs.vars, cs.level_preds, cs.outputs
    last = cs.n - 1
    binding: dict[str, Any] = dict.fromkeys(vars_)

    def emit() -> None:
        rows.append({name: fn(binding) for name, fn in outputs})

    def down(k: int, rip: int) -> None:
        stack, off, var, preds = stacks[k], offs[k], vars_[k], level_preds[k]
        for a in range(rip - 1 - off, heads[k] - 1 - off, -1):
            _, ev, prev_rip = stack[a]
            binding[var] = ev
            for p in preds:
                if p(binding) is not True:
                    break
            else:
                if k:
                    down(k - 1, prev_rip)
                else:
                    emit()
        binding[var] = None

    def construct(ev: dict, rip: int) -> None:
        binding[vars_[last]] = ev
        for p in level_preds[last]:
            if p(binding) is not True:
                break
        else:
            if last:
                down(last - 1, rip)
            else:
                emit()
        binding[vars_[last]] = None

    return construct
