"""Baselines for comparison (gSPICE §IV-A): random shedding and type-based shedding (the paper's BL, after He et
al. and Tatbul et al.'s weighted sampling).

* :class:`RandomShedder` drops every event with probability ρ.
* :class:`TypeShedder` gives each event type one utility, proportional to how often the type repeats in the
  patterns (weighted by the pattern weights) and inversely proportional to how often it repeats in a window
  (its share of the training stream): a rare type that the patterns need is precious, a flood type is cheap.
  It drops the lowest-utility types first and samples uniformly within the type at the threshold.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sparkcep.ir.spec import MatchSpec
from sparkcep.runtime_udfs.shedding.base import EventCoder, Shedder, pattern_types
from sparkcep.runtime_udfs.shedding.threshold import Threshold


class RandomShedder(Shedder):
    """Drop each event with probability ρ, whatever it is."""

    name = "random"

    def __init__(self, coder: EventCoder):
        super().__init__(coder, exact=True)

    def utilities(self, codes, values):
        return np.zeros(len(codes))

    def distribution(self):
        return np.zeros(1), np.ones(1)

    def threshold(self, rho: float) -> Threshold:
        return Threshold(0.0, min(max(float(rho), 0.0), 1.0))  # every event ties at 0: drop with probability ρ


class TypeShedder(Shedder):
    """BL: one utility per event type, from pattern repetition and type frequency (see module doc)."""

    name = "type-based"

    def __init__(self, coder: EventCoder, type_utility: np.ndarray, type_share: np.ndarray):
        super().__init__(coder, exact=True)
        self.type_utility, self.type_share = type_utility, type_share

    @classmethod
    def fit(cls, queries: Sequence[tuple[MatchSpec, float]], train_types: Sequence[str]) -> TypeShedder:
        types = pattern_types([s for s, _ in queries])
        coder = EventCoder(types)
        codes = coder.codes(list(train_types))
        counts = np.bincount(codes[codes >= 0], minlength=len(types)).astype(float)
        share = counts / max(counts.sum(), 1.0)
        repeat = np.zeros(len(types))
        for spec, w in queries:
            for c in spec.components:
                for t in c.types:
                    repeat[types.index(t)] += w
        utility = np.where(share > 0, repeat / np.maximum(share, 1e-12), repeat.max(initial=0) * 1e6)
        return cls(coder, utility, share)

    def utilities(self, codes, values):
        codes = np.asarray(codes)
        return np.where(codes >= 0, self.type_utility[np.clip(codes, 0, None)], 0.0)

    def distribution(self):
        return self.type_utility, self.type_share
