"""The drop decision (gSPICE Algorithm 1): given a utility model and a drop ratio ρ, drop each event whose
predicted utility is below the threshold for ρ.

Every shedder here has the same shape: ``utilities(codes, values)`` predicts one utility per event of a batch
(type codes and raw attribute values, in arrival order; the predecessor pane carries over between calls),
``distribution()`` is the utility distribution ``(u, O)`` over the training stream, and ``decide(codes, values,
rho)`` returns the drop mask.  :func:`fit_gspice` trains gSPICE-H (this module) or gSPICE-M (:mod:`.models`)
from a processed stream and the engine's results on it.

Example::

    >>> import sparkcep
    >>> spec = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE a.v < b.v WITHIN 10").spec()
    >>> train = [{"type": "AB"[i % 2], "ts": i, "v": (i * 7) % 10, SID: i} for i in range(200)]
    >>> sh = fit_gspice([(spec, 1.0)], train, pane_length=4, attributes=("v",))
    >>> codes, values = sh.coder.encode(train)
    >>> sh.reset(); drop = sh.decide(codes, values, rho=0.3, seed=1)
    >>> bool(0.2 < drop.mean() < 0.4)
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sparkcep.ir.errors import CEPError
from sparkcep.ir.spec import MatchSpec
from sparkcep.runtime_udfs.shedding import MODELS
from sparkcep.runtime_udfs.shedding.base import EventCoder, Shedder, Training, pattern_types
from sparkcep.runtime_udfs.shedding.models import GSpiceM
from sparkcep.runtime_udfs.shedding.observations import (
    SID,
    Binning,
    aggregate,
    contributions,
    pane_frequencies,
    pane_history,
)
from sparkcep.runtime_udfs.shedding.zobrist import UtilityTable, Zobrist

__all__ = ["MODELS", "SID", "EventCoder", "GSpiceH", "Refit", "Shedder", "TypeDrift", "fit_gspice", "fit_shedder",
           "pattern_types"]


class GSpiceH(Shedder):
    """gSPICE-H: utilities from the Zobrist-keyed utility table.

    A micro-batch is looked up whole (numpy): the pane frequencies of every event
    (:func:`~sparkcep.runtime_udfs.shedding.observations.pane_frequencies`, the pane carrying over from the
    previous batch), ``K1`` of each as the XOR of its types' numbers, ``K = K1 ⊕ K2``, and the table's
    :meth:`~sparkcep.runtime_udfs.shedding.zobrist.UtilityTable.lookup_many`.  The same utilities as the
    paper's per-event loop (Algorithm 1, lines 5-7, with the pane's ``K1`` updated incrementally by
    :class:`~sparkcep.runtime_udfs.shedding.zobrist.Pane`), at a fraction of its cost per event."""

    name = "gSPICE-H"

    def __init__(self, coder: EventCoder, table: UtilityTable, dist: tuple[np.ndarray, np.ndarray],
                 exact: bool = True):
        super().__init__(coder, exact)
        self.table, self.z, self._dist = table, table.z, dist
        self._attr_keys = [np.asarray(t, dtype=np.int64) for t in self.z.attrs]
        self._type_keys = [np.asarray(t, dtype=np.int64) for t in self.z.types]
        self._history: list[int] = []

    def reset(self) -> None:
        self._history = []

    def distribution(self):
        return self._dist

    def k2(self, values: np.ndarray) -> np.ndarray:
        """``K2`` of every event of a batch (vectorized XOR over its binned attributes)."""
        bins = self.coder.binning.bin_attributes(values)
        k2 = np.zeros(len(bins), dtype=np.int64)
        for j, keys in enumerate(self._attr_keys):
            k2 ^= keys[bins[:, j]]
        return k2

    def k1(self, codes: np.ndarray) -> np.ndarray:
        """``K1`` of every event of a batch: its predecessor pane's frequencies (binned), XORed over the types;
        the pane then holds the batch's last events."""
        n_types, length = len(self.coder.types), self.z.pane_length
        freq = pane_frequencies(codes, n_types, length, self._history) // self.z.freq_width
        k1 = np.zeros(len(codes), dtype=np.int64)
        for t, keys in enumerate(self._type_keys):
            k1 ^= keys[freq[:, t]]
        self._history = pane_history(self._history, codes, n_types, length)
        return k1

    def utilities(self, codes: np.ndarray, values: np.ndarray) -> np.ndarray:
        codes = np.asarray(codes, dtype=np.int64)
        return self.table.lookup_many(codes, self.k1(codes) ^ self.k2(values))


def observe(queries: Sequence[tuple[MatchSpec, float]], events: list[dict], coder: EventCoder,
            pane_length: int) -> Training:
    """Statistics of a processed stream: pane frequencies, binned attributes, contributions, aggregation."""
    codes, values = coder.encode(events)
    n_types = len(coder.types)
    freq = coder.binning.bin_frequencies(pane_frequencies(codes, n_types, pane_length))
    bins = coder.binning.bin_attributes(values)
    m = contributions(queries, events).m
    keep = codes >= 0
    agg = aggregate(codes[keep], freq[keep], bins[keep], m[keep])
    return Training(codes[keep], freq[keep], bins[keep], m[keep], agg)


def fit_gspice(queries: Sequence[tuple[MatchSpec, float]], events: list[dict], *, pane_length: int = 10,
               attributes: Sequence[str] = (), n_bins: int = 10, freq_width: int = 1, kind: str = "hash",
               exact: bool = True, seed: int = 0x5EED, **model_options) -> Shedder:
    """Train gSPICE on ``events`` (dicts with ``type``, ``ts``, attributes and :data:`SID` = 0..n-1, in
    arrival order) and ``queries`` (``(spec, weight)``).  ``kind``: ``"hash"`` (gSPICE-H), ``"tree"`` or
    ``"forest"`` (gSPICE-M)."""
    types = pattern_types([s for s, _ in queries])
    if not any(e.get("type") in types for e in events):
        raise CEPError("load shedding learns event utilities from a sample of the input, and the sample given has "
                       f"no event of the queries' types ({', '.join(sorted(map(str, types)))})")
    binning = Binning.uniform(attributes, events, n_bins)
    binning = Binning(binning.attributes, freq_width)
    coder = EventCoder(types, binning)
    tr = observe(queries, events, coder, pane_length)
    if kind == "hash":
        z = Zobrist(len(types), pane_length, binning.sizes, freq_width, seed)
        table = UtilityTable(z, tr.agg)
        u = np.array([m / o for m, o in tr.agg.values()])
        o = np.array([o for _, o in tr.agg.values()], dtype=float)
        shedder: Shedder = GSpiceH(coder, table, (u, o), exact)
    else:
        shedder = GSpiceM.fit(coder, tr, pane_length, kind=kind, exact=exact, seed=seed, **model_options)
    counts = np.bincount(tr.codes, minlength=len(types)).astype(float)
    shedder.refit = Refit(tuple(queries), {"pane_length": pane_length, "attributes": tuple(attributes),
                                           "n_bins": n_bins, "freq_width": freq_width, "kind": kind,
                                           "exact": exact, "seed": seed, **model_options},
                          tuple(float(x) for x in counts / max(counts.sum(), 1.0)))
    return shedder



def fit_shedder(queries: Sequence[tuple[MatchSpec, float]], events: list[dict], *, kind: str = "hash",
                **options) -> Shedder:
    """A shedder of any of :data:`MODELS` for ``queries`` (``(spec, weight)``) trained on ``events`` (as for
    :func:`fit_gspice`, which the gSPICE kinds go to with ``options``): ``type`` learns one utility per type
    from the patterns and the types' shares in ``events``, ``random`` learns nothing.

    >>> import sparkcep
    >>> spec = sparkcep.compile("PATTERN SEQ(A a, B b) WITHIN 10").spec()
    >>> [fit_shedder([(spec, 1.0)], [{"type": "AB"[i % 3 == 0], "ts": i, SID: i} for i in range(30)],
    ...              kind=k).name for k in ("random", "type")]
    ['random', 'type-based']
    """
    from sparkcep.runtime_udfs.shedding.baselines import RandomShedder, TypeShedder

    if kind not in MODELS:
        raise CEPError(f"unknown shedding model {kind!r}: choose one of {', '.join(MODELS)}")
    if kind == "type":
        return TypeShedder.fit(queries, [e.get("type") for e in events])
    if kind == "random":
        return RandomShedder(EventCoder(pattern_types([s for s, _ in queries])))
    return fit_gspice(queries, events, kind=kind, **options)

@dataclass(frozen=True)
class Refit:
    """How a gSPICE model was trained (queries and options) and the type shares of its training stream: what
    a retraining on drift needs (:class:`Retraining`, and the Spark stage's driver).

    >>> import sparkcep
    >>> spec = sparkcep.compile("PATTERN SEQ(A a, B b) WITHIN 10").spec()
    >>> sh = fit_gspice([(spec, 1.0)], [{"type": "AB"[i % 3 == 0], "ts": i, SID: i} for i in range(90)])
    >>> [round(x, 2) for x in sh.refit.reference]
    [0.67, 0.33]
    >>> sh.refit.fit([{"type": "AB"[i % 2], "ts": i, SID: i} for i in range(90)]).refit.reference
    (0.5, 0.5)
    """

    queries: tuple
    options: dict
    reference: tuple[float, ...]

    def fit(self, events: list[dict]) -> Shedder:
        """A new model of the same kind from ``events`` (renumbered 0..n-1 in :data:`SID`)."""
        return fit_gspice(list(self.queries), [{**e, SID: i} for i, e in enumerate(events)], **self.options)


class TypeDrift:
    """Detects a change of the input distribution: the total variation distance between the type shares of
    recent events and those of the training stream exceeds ``threshold`` (over at least ``min_events``)."""

    def __init__(self, train_codes: np.ndarray, n_types: int, threshold: float = 0.15, min_events: int = 500):
        self.n_types, self.threshold, self.min_events = n_types, threshold, min_events
        self.reference = self._share(np.asarray(train_codes))
        self._recent = np.zeros(n_types)

    @classmethod
    def from_share(cls, share, threshold: float = 0.15, min_events: int = 500) -> TypeDrift:
        """A detector whose reference is the type shares ``share`` (e.g. :attr:`Refit.reference`)."""
        d = cls(np.zeros(0, dtype=np.int64), len(share), threshold, min_events)
        d.reference = np.asarray(share, dtype=float)
        return d

    def _share(self, codes: np.ndarray) -> np.ndarray:
        counts = np.bincount(codes[codes >= 0], minlength=self.n_types).astype(float)
        return counts / max(counts.sum(), 1.0)

    def distance(self, codes: np.ndarray) -> float:
        return 0.5 * float(np.abs(self._share(np.asarray(codes)) - self.reference).sum())

    def update(self, codes: np.ndarray) -> bool:
        """Add a batch; True once the accumulated recent events have drifted (then the window restarts)."""
        codes = np.asarray(codes)
        return self.update_counts(np.bincount(codes[codes >= 0], minlength=self.n_types))

    def update_counts(self, counts) -> bool:
        """The same from the number of arriving events per type (the Spark stage's ``observe()`` counts)."""
        self._recent += np.asarray(counts, dtype=float)[:self.n_types]
        total = self._recent.sum()
        if total < self.min_events:
            return False
        share = self._recent / total
        self._recent = np.zeros(self.n_types)
        return 0.5 * float(np.abs(share - self.reference).sum()) > self.threshold


class Retraining(Shedder):
    """A shedder that is retrained when the input distribution drifts (gSPICE §III-B2: "recomputed ... when
    the distribution of events in the input event stream changes by a certain threshold").

    It delegates decisions to the current shedder, watches the type distribution of arriving events with
    :class:`TypeDrift`, keeps the last ``buffer`` events passed to :meth:`processed`, and on
    drift refits with ``fit(events)`` (events renumbered 0..n-1 in :data:`SID`) on them.  ``retrains`` counts
    the refits.
    """

    def __init__(self, shedder: Shedder, fit, *, buffer: int = 5000, threshold: float = 0.15,
                 min_events: int = 1000, train_codes: np.ndarray | None = None):
        super().__init__(shedder.coder, shedder.exact)
        self.inner, self.fit, self.buffer = shedder, fit, buffer
        self.drift_threshold, self.min_events = threshold, min_events
        codes = train_codes if train_codes is not None else np.zeros(0, dtype=np.int64)
        self.drift = TypeDrift(codes, len(shedder.coder.types), threshold, min_events)
        self.recent: list[dict] = []
        self.retrains = 0
        self._since: int | None = None
        self.name = f"{shedder.name}+retrain"

    def reset(self) -> None:
        self.inner.reset()

    def distribution(self):
        return self.inner.distribution()

    def threshold(self, rho: float):
        return self.inner.threshold(rho)

    def utilities(self, codes, values):
        if self.drift.update(codes) and self._since is None:
            self._since = 0  # drifted: learn from the events processed from now on
        return self.inner.utilities(codes, values)

    def processed(self, events: list[dict]) -> None:
        """Events whose statistics a retraining learns from: the offered events (a sample of the input, as the
        Spark stage's tasks write it; the kept events alone under-represent what the shedder drops).  After a
        drift, the model is refit once ``min_events`` events of the new distribution are there."""
        self.recent.extend(events)
        if len(self.recent) > self.buffer:
            del self.recent[:len(self.recent) - self.buffer]
        if self._since is not None:
            self._since += len(events)
            if self._since >= self.min_events:
                self._refit(self.recent[-min(self._since, self.buffer):])

    def _refit(self, recent: list[dict]) -> None:
        events = [{**e, SID: i} for i, e in enumerate(recent)]
        self.inner = self.fit(events)
        self.coder = self.inner.coder
        codes, _ = self.coder.encode(events)
        self.drift = TypeDrift(codes, len(self.coder.types), self.drift_threshold, self.min_events)
        self.retrains += 1
        self._since = None
