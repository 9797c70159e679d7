"""What every shedder shares: the event coder (type codes, binned attributes), the :class:`Shedder` base
class (utilities, distribution, the drop decision), the training observations and a workload's pattern types.
gSPICE-H (:mod:`.shedder`), gSPICE-M (:mod:`.models`) and the baselines build on it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from sparkcep.ir.ast import Attr, EquivItem, walk
from sparkcep.ir.spec import MatchSpec
from sparkcep.runtime_udfs.shedding.observations import (
    Binning,
    attribute_matrix,
)
from sparkcep.runtime_udfs.shedding.threshold import Threshold, utility_threshold

if TYPE_CHECKING:
    from sparkcep.runtime_udfs.shedding.shedder import Refit


def pattern_types(specs: Sequence[MatchSpec]) -> tuple[str, ...]:
    """The event types the queries read, in first-seen order (the shedder's type codes)."""
    out: list[str] = []
    for spec in specs:
        for c in spec.components:
            for t in c.types:
                if t not in out:
                    out.append(t)
    return tuple(out)


def condition_attributes(specs: Sequence[MatchSpec]) -> tuple[str, ...]:
    """The attributes that decide the queries' matches, in first-seen order: read by a component's own
    condition, a predicate, the pattern (a loop's ``UNTIL``) or a key.  These are gSPICE's event attributes
    ``E_e`` (§III-B: "a CEP pattern usually correlates events that contain attributes that fulfill specific
    conditions"); an attribute that only RETURN reads cannot change whether an event contributes to a match,
    and as a feature it only splits the observations (one that grows like a sequence number or a time puts
    every live event in the training range's last bin).

    >>> import sparkcep
    >>> condition_attributes([sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] AND a.v < b.v WITHIN 5 "
    ...                                         "RETURN a.n AS n, b.w AS w").spec()])
    ('id', 'v')
    """
    out: list[str] = []
    for spec in specs:
        out += [k for k in spec.key if k not in out]
        roots = [c.local for c in spec.components if c.local is not None] + list(spec.predicates)
        for root in [*roots, spec.pattern]:
            for n in walk(root) if root is not None else ():
                if isinstance(n, (Attr, EquivItem)) and n.attr not in out:
                    out.append(n.attr)
    return tuple(out)


@dataclass(frozen=True)
class EventCoder:
    """Type names → codes ``0..T-1`` (``-1`` for other types) and the attribute binning."""

    types: tuple[str, ...]
    binning: Binning = field(default_factory=Binning)

    def codes(self, type_values) -> np.ndarray:
        index = {t: i for i, t in enumerate(self.types)}
        return np.fromiter((index.get(t, -1) for t in type_values), dtype=np.int64, count=len(type_values))

    def encode(self, events: list[dict]) -> tuple[np.ndarray, np.ndarray]:
        """``(type codes, raw attribute matrix)`` of event dicts."""
        return self.codes([e.get("type") for e in events]), attribute_matrix(events, self.binning.names)

    def encode_frame(self, pdf, type_col: str = "type") -> tuple[np.ndarray, np.ndarray]:
        """The same from a pandas frame (missing attribute columns read as NaN)."""
        codes = self.codes(pdf[type_col].tolist())
        values = np.full((len(pdf), len(self.binning.names)), np.nan)
        for j, name in enumerate(self.binning.names):
            if name in pdf.columns:
                values[:, j] = np.asarray(pdf[name].to_numpy(dtype=np.float64, na_value=np.nan), dtype=np.float64)
        return codes, values


class Shedder:
    """Base of all shedders: a utility per event, a training utility distribution, a threshold per ρ."""

    name = "shedder"

    def __init__(self, coder: EventCoder, exact: bool = True):
        self.coder = coder
        self.exact = exact
        self._thresholds: dict[float, Threshold] = {}
        self.refit: Refit | None = None  # set by fit_gspice: how to retrain this model on drift

    def reset(self) -> None:
        """Forget the predecessor pane (a new, unrelated stream follows)."""

    def utilities(self, codes: np.ndarray, values: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def distribution(self) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - abstract
        raise NotImplementedError

    def threshold(self, rho: float) -> Threshold:
        rho = round(float(rho), 4)
        th = self._thresholds.get(rho)
        if th is None:
            u, o = self.distribution()
            th = self._thresholds[rho] = utility_threshold(u, o, rho, exact=self.exact)
        return th

    def decide(self, codes: np.ndarray, values: np.ndarray, rho: float, seed: int | None = None,
               rng: np.random.Generator | None = None, within: bool = False) -> np.ndarray:
        """Algorithm 1: the boolean drop mask of a batch for drop ratio ``rho`` (no drop when ``rho <= 0``; the
        pane still advances so that later batches see the right predecessors).  The threshold is the one for
        ``rho`` over the training stream's utilities (§III-C), or, ``within``, over this batch's own: a
        micro-batch is seen whole before anything is decided, so the least useful ``rho`` of *it* go (in
        expectation exactly, ties drawn), whatever the live utilities' distribution (a model's utilities of
        live data need not be distributed as its training stream's; the controller's ρ is then what is shed).

            >>> sh = Shedder(EventCoder(("A",)))
            >>> sh.utilities = lambda codes, values: np.array([0.9, 0.1, 0.5, 0.7])
            >>> sh.decide(np.zeros(4, dtype=np.int64), np.zeros((4, 0)), 0.5, seed=0, within=True).tolist()
            [False, True, True, False]
        """
        u = self.utilities(codes, values)
        if rho <= 0:
            return np.zeros(len(codes), dtype=bool)
        rng = rng if rng is not None else np.random.default_rng(seed)
        threshold = utility_threshold(u, np.ones(len(u)), rho) if within else self.threshold(rho)
        return threshold.drops(u, rng.random(len(codes)))


@dataclass
class Training:
    """What a gSPICE model is trained from: features and contributions of a processed stream."""

    codes: np.ndarray
    freq: np.ndarray
    bins: np.ndarray
    m: np.ndarray
    agg: dict

    @property
    def matches(self) -> float:
        return float(self.m.sum())
