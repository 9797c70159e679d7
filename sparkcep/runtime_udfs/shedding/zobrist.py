"""gSPICE-H (§III-B3): utility tables keyed by Zobrist hashing, with the incremental key update as the
predecessor pane slides.

``K1 = ⊕ R_T[F_T]`` over the types (pane frequencies, binned), ``K2 = ⊕ R_E[bin_E]`` over the attributes, and
``K = K1 ⊕ K2``; when the pane shifts by one event, ``K1`` changes by at most four XORs (the entering type's
old and new frequency, the leaving type's old and new frequency).

Example::

    >>> z = Zobrist(n_types=2, pane_length=3, attr_sizes=(11,), seed=1)
    >>> pane = Pane(z)
    >>> for t in (0, 1, 1, 0):          # A B B A: the pane keeps the last 3 → B B A
    ...     pane.push(t)
    >>> pane.k1 == z.k1((1, 2))         # F = (F_A, F_B) = (1, 2), same key as computed from scratch
    True
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np


class Zobrist:
    """The random numbers of Zobrist hashing: one per (type, binned frequency 0..L) and per (attribute, bin).

    All numbers are distinct, non-zero, 63-bit; ``seed`` fixes them (keys must agree between the driver that
    builds a table and the executors that look it up, so the table carries its :class:`Zobrist`).
    """

    def __init__(self, n_types: int, pane_length: int, attr_sizes: Sequence[int] = (), freq_width: int = 1,
                 seed: int = 0x5EED):
        self.n_types, self.pane_length, self.freq_width = n_types, pane_length, max(1, int(freq_width))
        self.attr_sizes = tuple(int(s) for s in attr_sizes)
        levels = pane_length // self.freq_width + 1
        need = n_types * levels + sum(self.attr_sizes)
        rng = np.random.default_rng(seed)
        pool: list[int] = []
        seen = {0}
        while len(pool) < need:
            for v in rng.integers(1, 2**63 - 1, size=need, dtype=np.int64).tolist():
                if v not in seen:
                    seen.add(v)
                    pool.append(v)
        self.types = [pool[t * levels:(t + 1) * levels] for t in range(n_types)]
        start = n_types * levels
        self.attrs = []
        for s in self.attr_sizes:
            self.attrs.append(pool[start:start + s])
            start += s

    def k1(self, freq: Sequence[int]) -> int:
        """``K1`` of a (raw, unbinned) type frequency vector, from scratch."""
        k = 0
        w = self.freq_width
        for t, f in enumerate(freq):
            k ^= self.types[t][int(f) // w]
        return k

    def k2(self, bins: Sequence[int]) -> int:
        """``K2`` of binned attribute values."""
        k = 0
        for table, b in zip(self.attrs, bins, strict=True):
            k ^= table[int(b)]
        return k

    def key(self, freq: Sequence[int], bins: Sequence[int]) -> int:
        return self.k1(freq) ^ self.k2(bins)


class Pane:
    """The sliding count-based predecessor pane of the next event, with ``K1`` kept up to date by XORs."""

    __slots__ = ("z", "length", "events", "counts", "k1")

    def __init__(self, z: Zobrist, history: Sequence[int] = ()):
        self.z = z
        self.length = z.pane_length
        self.events: deque[int] = deque()
        self.counts = [0] * z.n_types
        self.k1 = z.k1(self.counts)
        for t in history:
            self.push(t)

    def _set(self, t: int, new: int) -> None:
        w = self.z.freq_width
        old = self.counts[t]
        if old // w != new // w:
            row = self.z.types[t]
            self.k1 ^= row[old // w] ^ row[new // w]  # two XORs: remove the old value, add the new one
        self.counts[t] = new

    def push(self, t: int) -> None:
        """The event of type code ``t`` joins the pane (after its own utility was looked up); the oldest leaves."""
        if not 0 <= t < self.z.n_types or self.length == 0:
            return
        if len(self.events) == self.length:
            old = self.events.popleft()
            self._set(old, self.counts[old] - 1)
        self.events.append(t)
        self._set(t, self.counts[t] + 1)

    def frequencies(self) -> tuple[int, ...]:
        return tuple(self.counts)


class UtilityTable:
    """``UT[T][K] → U``: one hash table per event type (§III-B3), keyed by ``K = K1 ⊕ K2``.

    An unseen key gets ``default[T]``, the type's mean utility over the training observations (``M / O`` of
    all its observations): the paper leaves unseen combinations open; the mean keeps them comparable.
    """

    def __init__(self, z: Zobrist, agg: dict[tuple, tuple[float, int]]):
        self.z = z
        self.tables: list[dict[int, float]] = [{} for _ in range(z.n_types)]
        sums = np.zeros((z.n_types, 2))
        for (t, f, e), (m, o) in agg.items():
            self.tables[t][z.key(f, e)] = m / o
            sums[t] += (m, o)
        self.default = [float(m / o) if o else 0.0 for m, o in sums]
        # the same tables compiled for a whole batch's lookups (:meth:`lookup_many`): per type, the keys sorted
        # and their utilities
        self._sorted = []
        for table in self.tables:
            keys = np.fromiter(table.keys(), dtype=np.int64, count=len(table))
            order = np.argsort(keys)
            self._sorted.append((keys[order], np.fromiter(table.values(), dtype=np.float64, count=len(table))[order]))

    def lookup(self, t: int, key: int) -> float:
        if not 0 <= t < len(self.tables):
            return 0.0
        return self.tables[t].get(key, self.default[t])

    def lookup_many(self, types: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """:meth:`lookup` of every ``(types[i], keys[i])`` at once: a binary search per event in its type's
        sorted keys (numpy), instead of a dictionary lookup per event in Python.

            >>> z = Zobrist(n_types=2, pane_length=1, seed=1)
            >>> ut = UtilityTable(z, {(0, (1, 0), ()): (3.0, 4), (0, (0, 0), ()): (0.0, 4)})
            >>> ut.lookup_many(np.array([0, 0, 1, -1]), np.array([z.k1((1, 0)), 7, 7, 7])).tolist()
            [0.75, 0.375, 0.0, 0.0]
        """
        types, keys = np.asarray(types, dtype=np.int64), np.asarray(keys, dtype=np.int64)
        out = np.zeros(len(types), dtype=np.float64)  # other types (code -1): utility 0
        for t, (known, values) in enumerate(self._sorted):
            at = np.flatnonzero(types == t)
            if not len(at):
                continue
            if not len(known):
                out[at] = self.default[t]
                continue
            k = keys[at]
            i = np.minimum(np.searchsorted(known, k), len(known) - 1)
            out[at] = np.where(known[i] == k, values[i], self.default[t])
        return out

    def __len__(self) -> int:
        return sum(map(len, self.tables))
