"""Streaming through the columnar construction: a micro-batch of a group, every key of it at once, in numpy,
with the rows that may still begin a match carried in state (issue 18: the streaming engine at batch speed).

The per-event engine (:mod:`match_engine`) turns every row into a dict and steps active instance stacks event by
event.  For the queries the batch path builds column-wise (:func:`match_columnar.columnar`: flat sequences of
single events under skip_till_any_match, vectorizable predicates, plain ``var.attr`` results) a match is a chain
of rows of one key with strictly increasing ts and ``last.ts - first.ts < W`` (LANGUAGE.md §1–§3), so a
micro-batch runs as a small batch over the rows the window still joins to it::

    sc = stream_columnar(spec)                        # None: not eligible (ineligible(spec) says why)
    state = init_state()
    state, _ = step(sc, state, columns)               # buffer a batch: {engine attribute: numpy array}
    state, (carried, chains) = advance(sc, state, watermark)
    columns = outputs(sc, carried, chains)            # {result name: numpy array} of this advance's matches
    rows = last_rows(sc, carried, chains)             # each match's last event, a row of carried

``carry`` (:func:`stream_columnar`) names columns the rows keep without the construction reading them (the
stream's arrival): ``carried[name][last_rows(...)]`` is each match's last event's value.

**The same contract as** :func:`match_engine.step` / :func:`match_engine.advance` **, the same results.**
``step`` counts rows without a usable ts (``invalid``) and rows with ``ts`` below the processed watermark
(``late``), drops them and the rows no component takes, and buffers the rest.  ``advance(w)`` processes the
buffered rows with ``ts <= w`` (the *ready* rows) and returns every match whose last event is one of them: the
matches the engine completes in that same call.  A watermark below the processed one is a no-op; ``frontier``
becomes ``w``.  Why the construction over *carried + ready* rows finds exactly those: every other event of such
a match has a smaller ts, so it is on time and either ready now or processed earlier; a processed row is dropped
from the carried rows only once ``w' - ts >= W`` at a processed watermark ``w'`` (every later last event is at or
after ``w'``, so the row can no longer be first) or when it fills only the last position of every alternative
(it can only end a match, and its matches were emitted when it was processed).  The construction's last
position takes ready rows only (:meth:`match_columnar.ColumnarConstruction.__call__` ``last``), so no match is
emitted twice; matches with an earlier last event were emitted by the advance that processed it.

**State** (:class:`StreamState`): the processed watermark, the carried rows (processed ones first, then the
pending rows after the watermark) as numpy columns, and the two counters; :meth:`StreamState.to_bytes` pickles
builtins and numpy arrays under :data:`STATE_TAG`, so that a stored state of another engine is told apart
(:func:`is_state`).  The carried rows are bounded by the window: per key, the rows of the last ``W`` ts units
that fill a position before the last, plus the rows the watermark has not reached.

``wakeup`` is the earliest pending ts (it becomes processable) or, without pending rows, the newest carried ts
plus ``W`` (the state can then be dropped); ``is_empty`` is true when no row is carried.  The state may outlive the
per-event engine's (which drops an event no predecessor leads to), so a row older than a group's processed
watermark that reaches a group whose engine state was dropped would be on time for the engine and is late here;
Spark never delivers such rows (they are behind its watermark: dropped, or routed by ``late_rows``).

Example::

    >>> import numpy as np
    >>> from sparkcep.ir.ast import Attr
    >>> from sparkcep.ir.spec import Component, MatchSpec, OutputColumn
    >>> spec = MatchSpec((Component("a", ("A",)), Component("b", ("B",))), (), 10,
    ...                  (OutputColumn("a_ts", Attr("a", "ts")), OutputColumn("b_ts", Attr("b", "ts"))))
    >>> sc = stream_columnar(spec)
    >>> state, _ = step(sc, init_state(), {"ts": np.array([1, 3]), "_mask": np.array([1, 1])})
    >>> state, found = advance(sc, state, 3)
    >>> state, _ = step(sc, state, {"ts": np.array([5, 20]), "_mask": np.array([2, 2])})
    >>> state, found = advance(sc, state, 5)
    >>> sorted(zip(*(column.tolist() for column in outputs(sc, *found).values())))
    [(1, 5), (3, 5)]
    >>> wakeup(sc, state), is_empty(advance(sc, state, 20)[0])
    (20, True)
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Mapping

import numpy as np

from sparkcep.ir.errors import CEPError
from sparkcep.ir.spec import INTERNAL_COLUMNS, MatchSpec, TimeoutSpec
from sparkcep.runtime_udfs.match.budget import Budget
from sparkcep.runtime_udfs.match.columnar import (
    ColumnarAlternatives,
    ColumnarConstruction,
    columnar,
    key_ids,
)
from sparkcep.runtime_udfs.match.columnar import ineligible as columnar_ineligible
from sparkcep.runtime_udfs.match.prefilter import within

__all__ = ["STATE_TAG", "StreamColumnar", "StreamState", "advance", "ineligible", "init_state", "is_empty",
           "is_state", "last_rows", "outputs", "step", "stream_columnar", "wakeup"]

#: The first item of a pickled :class:`StreamState` (another engine's state starts otherwise).
STATE_TAG = "sparkcep.stream_columnar"
#: Version of the layout after the tag.
STATE_VERSION = 1

MASK = INTERNAL_COLUMNS[0]


class StreamColumnar:
    """What the streaming step of one spec needs: the ``construction``, the key columns the rows of a state are
    told apart by (``key``: empty when every state holds one partition), the component bits any position takes
    (``bits``) and those of positions before some alternative's last (``prefix``), the window, ``reads``: the
    engine attributes the columns must hold (ts, ``_mask``, the key, what predicates and results read, then the
    ``carry`` columns the rows keep unread), and ``single``: every alternative is one event."""

    __slots__ = ("construction", "key", "bits", "prefix", "window", "reads", "single")

    def __init__(self, construction: ColumnarConstruction | ColumnarAlternatives, key: tuple[str, ...],
                 carry: tuple[str, ...] = ()):
        self.construction, self.key = construction, key
        parts = getattr(construction, "parts", (construction,))
        self.bits = sum({b for part in parts for b in part.bits})
        self.prefix = sum({b for part in parts for b in part.bits[:-1]})
        self.window = construction.window
        #: every alternative is one event (a match is one row, whatever its ts)
        self.single = all(len(part.bits) == 1 for part in parts)
        attrs = {attr for part in parts for checks in part.checks for _, reads in checks for _, attr, _ in reads}
        attrs |= {attr for _, _, attr in construction.outputs}
        self.reads = tuple(dict.fromkeys(("ts", MASK, *key, *sorted(attrs), *carry)))

    def __repr__(self) -> str:
        return f"StreamColumnar({self.construction!r}, key={self.key})"


def ineligible(spec) -> str | None:
    """Why ``spec`` streams through the per-event engine instead (a short phrase), or None."""
    if isinstance(spec, TimeoutSpec):
        return "timed-out partial matches"
    return columnar_ineligible(spec) if isinstance(spec, MatchSpec) else "not a match query"


def stream_columnar(spec, key: tuple[str, ...] | None = None, carry: tuple[str, ...] = ()) -> StreamColumnar | None:
    """The streaming step of ``spec``, or None when it is not eligible (:func:`ineligible`).  ``key``: the
    columns that tell partitions apart inside one state (default ``spec.key``; ``()`` when the caller gives
    every state one partition).  ``carry``: columns the rows keep without the construction reading them (a
    stream's arrival: each match's last event's, :func:`last_rows`)."""
    if ineligible(spec) is not None:
        return None
    construction = columnar(spec)
    return StreamColumnar(construction, tuple(spec.key) if key is None else tuple(key), tuple(carry))


class StreamState:
    """The state of one group.  ``frontier`` the processed watermark; ``columns`` the carried rows (engine
    attribute → numpy array, all of one length; None: none), the first ``done`` of them processed, the others
    pending (ts after the watermark); ``new`` the batches buffered by :func:`step` since; ``late`` and
    ``invalid`` the rows dropped as :func:`match_engine.step` counts them."""

    __slots__ = ("frontier", "columns", "done", "new", "late", "invalid")

    def __init__(self) -> None:
        self.frontier: float = -math.inf
        self.columns: dict[str, np.ndarray] | None = None
        self.done = 0
        self.new: list[dict[str, np.ndarray]] = []
        self.late = 0
        self.invalid = 0

    def rows(self) -> int:
        """Rows held: carried and buffered."""
        return _length(self.columns) + sum(map(_length, self.new))

    def to_bytes(self) -> bytes:
        """The state as a pickle of builtins and numpy arrays, tagged :data:`STATE_TAG`."""
        columns, done = _merged(self)
        return pickle.dumps((STATE_TAG, STATE_VERSION, self.frontier, done, self.late, self.invalid, columns),
                            protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def from_bytes(cls, data: bytes) -> StreamState:
        """The state :meth:`to_bytes` stored; :class:`CEPError` for another engine's state or version."""
        if not is_state(data):
            raise CEPError("this group state belongs to another match engine")
        _, version, *rest = pickle.loads(data)
        if version != STATE_VERSION:
            raise CEPError(f"stream state version {version} is not supported (expected {STATE_VERSION})")
        state = cls()
        state.frontier, state.done, state.late, state.invalid, state.columns = rest
        return state


def is_state(data: bytes) -> bool:
    """Was ``data`` stored by :meth:`StreamState.to_bytes` (and not by another engine)?"""
    return STATE_TAG.encode() in data[:64]


def init_state() -> StreamState:
    """A fresh, empty state."""
    return StreamState()


def is_empty(state: StreamState) -> bool:
    """True when no row is carried or buffered (the caller may drop the state)."""
    return state.rows() == 0


def wakeup(sc: StreamColumnar, state: StreamState) -> float | None:
    """The smallest watermark at which :func:`advance` has work without new rows: the earliest pending ts, else
    the newest carried ts plus the window (every carried row is then dropped); None when nothing is held."""
    columns, done = _merged(state)
    if columns is None:
        return None
    ts = columns["ts"]
    if done < len(ts):
        return ts[done:].min().item()
    return ts.max().item() + sc.window


def step(sc: StreamColumnar, state: StreamState, columns: Mapping[str, np.ndarray]) -> tuple[StreamState, list]:
    """Buffer a batch of rows (any order): ``columns`` maps engine attributes to numpy arrays of one length
    (``ts`` as the engine compares it, :func:`match_columnar.engine_ts`'s values; ``_mask``; a missing attribute
    is null).  Rows without a usable ts are counted ``invalid``, rows with ``ts < frontier`` ``late``; those and
    the rows no component takes are dropped, as :func:`match_engine.step` does.  Returns ``(state, [])``."""
    ts = _ts_array(columns["ts"])
    n = len(ts)
    if not n:
        return state, []
    valid = ~np.isnan(ts) if ts.dtype.kind == "f" else np.ones(n, dtype=bool)
    state.invalid += int(n - valid.sum())
    late = valid & (ts < state.frontier)
    state.late += int(late.sum())
    mask = np.asarray(columns[MASK])
    mask = (np.nan_to_num(mask, nan=0).astype(np.int64) if mask.dtype.kind == "f" else mask.astype(np.int64))
    keep = valid & ~late & ((mask & sc.bits) != 0)
    if not keep.any():
        return state, []
    batch = {"ts": ts, MASK: mask}
    for name in sc.reads:
        if name not in batch:
            values = columns.get(name)
            batch[name] = np.full(n, None, dtype=object) if values is None else np.asarray(values)
    if not keep.all():
        batch = {name: values[keep] for name, values in batch.items()}
    state.new.append(batch)
    return state, []


def advance(sc: StreamColumnar, state: StreamState, watermark: float,
            budget: Budget | None = None) -> tuple[StreamState, tuple[dict[str, np.ndarray] | None, np.ndarray]]:
    """Process the buffered rows with ``ts <= watermark``; returns ``(state, (columns, chains))``: the matches
    whose last event is one of them, as rows of ``columns`` (int64 ``(matches, components)``, -1 for a variable
    the match's alternative lacks; :func:`outputs` reads them).  ``budget`` counts the matches
    (:class:`~sparkcep.runtime_udfs.match.budget.MatchBudgetError` beyond it)."""
    width = sc.construction.width
    none = np.zeros((0, width), dtype=np.int64)
    columns, done = _merged(state)
    state.columns, state.new = columns, []
    if columns is None:
        state.frontier = max(state.frontier, watermark)
        return state, (None, none)
    ts = columns["ts"]
    n = len(ts)
    if watermark < state.frontier or (watermark == state.frontier and done == n):
        return state, (None, none)
    ready = np.zeros(n, dtype=bool)
    ready[done:] = ts[done:] <= watermark
    state.frontier = watermark
    chains = none
    if ready.any():
        use = np.flatnonzero(ready | (np.arange(n) < done))  # the carried processed rows and the ready ones
        t = ts[use]
        if t.dtype.kind == "f" and not np.isfinite(t).all():
            # an infinite ts is in no match of two or more events (the window test fails on it); a single event
            # is a match whatever its ts, as in the engine
            finite = np.isfinite(t)
            if sc.single:
                t = np.where(finite, t, 0.0)
            else:
                use, t = use[finite], t[finite]
        part = {name: values[use] for name, values in columns.items()}
        ids = key_ids([part[c] for c in sc.key], len(use))
        found = sc.construction(ids, t, part[MASK], part.get, budget, last=ready[use])
        chains = np.where(found >= 0, use[np.maximum(found, 0)], -1) if len(found) else none
    matched = {name: values for name, values in columns.items()}  # the rows the chains index, before pruning
    _prune(sc, state, columns, ready, watermark)
    return state, (matched, chains)


def outputs(sc: StreamColumnar, columns: dict[str, np.ndarray] | None, chains: np.ndarray) -> dict[str, np.ndarray]:
    """The result columns of ``chains`` (rows of ``columns``, from :func:`advance`): per output of the spec, its
    attribute's values at its variable's rows (None where the match's alternative lacks the variable; an
    attribute the input lacks is None throughout)."""
    out: dict[str, np.ndarray] = {}
    for name, p, attr in sc.construction.outputs:
        rows = chains[:, p]
        values = None if columns is None else columns.get(attr)
        if values is None:
            out[name] = np.full(len(rows), None, dtype=object)
            continue
        absent = rows < 0
        taken = values[np.maximum(rows, 0)]
        if absent.any():
            taken = taken.astype(object)
            taken[absent] = None
        out[name] = taken
    return out


def last_rows(sc: StreamColumnar, columns: dict[str, np.ndarray] | None, chains: np.ndarray) -> np.ndarray:
    """Each match's last event (the row of ``columns`` with the largest ts among its chain's, from
    :func:`advance`): ts strictly increase along a match, so it is the event that completed it."""
    best = np.full(len(chains), -1, dtype=np.int64)
    if columns is None or not len(chains):
        return best
    ts = columns["ts"]
    for p in range(chains.shape[1]):
        rows = chains[:, p]
        present = rows >= 0
        later = present & ((best < 0) | (ts[np.maximum(rows, 0)] > ts[np.maximum(best, 0)]))
        best = np.where(later, rows, best)
    return best


def _prune(sc: StreamColumnar, state: StreamState, columns: dict[str, np.ndarray], ready: np.ndarray,
           watermark: float) -> None:
    """Keep the processed rows that may still begin or continue a match (a position before the last, ts within
    the window of ``watermark``) first, then the pending ones."""
    ts = columns["ts"]
    n = len(ts)
    processed = np.arange(n) < state.done
    processed |= ready
    # watermark - ts < W exactly as the engine decides a window (integers exact, floats by the subtraction)
    young = _within(ts, watermark, sc.window)
    carry = processed & young & ((columns[MASK] & sc.prefix) != 0)
    pending = ~processed
    order = np.concatenate([np.flatnonzero(carry), np.flatnonzero(pending)])
    state.done = int(carry.sum())
    if not len(order):
        state.columns = None
    elif len(order) < n or not np.array_equal(order, np.arange(n)):
        state.columns = {name: values[order] for name, values in columns.items()}


def _within(ts: np.ndarray, watermark: float, window: float) -> np.ndarray:
    """``watermark - ts < window`` per row at or before the watermark, as the engine decides a window: integer ts
    exactly (:func:`match_prefilter.within`), else by the float subtraction."""
    if ts.dtype.kind in "iu" and float(watermark).is_integer():
        try:
            later = np.full(len(ts), int(watermark), dtype=ts.dtype)
        except OverflowError:
            pass
        else:
            return within(later, ts, window)
    return (watermark - ts.astype(np.float64)) < window


def _merged(state: StreamState) -> tuple[dict[str, np.ndarray] | None, int]:
    """``(columns, done)``: the carried rows followed by the buffered batches (pending, unprocessed), as one set
    of columns (a value type that differs between batches becomes object), and how many are processed."""
    parts = ([state.columns] if state.columns is not None else []) + state.new
    if not parts:
        return None, state.done
    if len(parts) == 1:
        return parts[0], state.done
    names = list(dict.fromkeys(name for p in parts for name in p))
    merged = {}
    for name in names:
        arrays = [p[name] if name in p else np.full(_length(p), None, dtype=object) for p in parts]
        merged[name] = _concatenate(arrays)
    return merged, state.done


def _concatenate(arrays: list[np.ndarray]) -> np.ndarray:
    kinds = {a.dtype.kind for a in arrays}
    if len(kinds) > 1 and not kinds <= set("iuf"):
        arrays = [a.astype(object) for a in arrays]  # e.g. strings and an all-null batch
    return np.concatenate(arrays)


def _ts_array(ts) -> np.ndarray:
    """``ts`` as int64 (uint64 kept) or float64 (None: NaN)."""
    ts = np.asarray(ts)
    if ts.dtype.kind in "iu":
        return ts if ts.dtype.kind == "u" and ts.dtype.itemsize == 8 else ts.astype(np.int64, copy=False)
    if ts.dtype.kind == "O":
        ts = np.array([math.nan if v is None else v for v in ts], dtype=np.float64)
    return ts.astype(np.float64, copy=False)


def _length(columns: Mapping[str, np.ndarray] | None) -> int:
    return 0 if not columns else len(next(iter(columns.values())))
