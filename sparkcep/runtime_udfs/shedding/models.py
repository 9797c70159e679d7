"""gSPICE-M (§III-B4): a decision tree or random forest (scikit-learn) estimating the utility function.

The aggregated observations are the training rows (features: type code, binned pane frequencies, binned
attributes; label: ``M / O``; sample weight: ``O``).  The paper's forest has ten trees; tree depth and leaf
size bound the model's memory.
"""

from __future__ import annotations

import numpy as np

from sparkcep.runtime_udfs.shedding.base import EventCoder, Shedder, Training
from sparkcep.runtime_udfs.shedding.observations import pane_frequencies, pane_history


class GSpiceM(Shedder):
    """Utilities predicted by a fitted scikit-learn regressor over ``[type, F..., E...]``."""

    def __init__(self, coder: EventCoder, model, pane_length: int, dist, kind: str, exact: bool = True):
        super().__init__(coder, exact)
        self.model, self.pane_length, self._dist, self.kind = model, pane_length, dist, kind
        self.name = "gSPICE-M(tree)" if kind == "tree" else "gSPICE-M(forest)"
        self._history: list[int] = []

    @classmethod
    def fit(cls, coder: EventCoder, tr: Training, pane_length: int, *, kind: str = "forest", exact: bool = True,
            seed: int = 0, max_depth: int | None = 12, min_samples_leaf: int = 2, n_estimators: int = 10):
        from sklearn.ensemble import RandomForestRegressor
        from sklearn.tree import DecisionTreeRegressor

        keys = list(tr.agg)
        X = np.array([(t, *f, *e) for t, f, e in keys], dtype=np.float64)
        y = np.array([tr.agg[k][0] / tr.agg[k][1] for k in keys])
        w = np.array([tr.agg[k][1] for k in keys], dtype=np.float64)
        if kind == "tree":
            model = DecisionTreeRegressor(max_depth=max_depth, min_samples_leaf=min_samples_leaf, random_state=seed)
        elif kind == "forest":
            model = RandomForestRegressor(n_estimators=n_estimators, max_depth=max_depth,
                                          min_samples_leaf=min_samples_leaf, random_state=seed, n_jobs=1)
        else:
            raise ValueError(f"unknown gSPICE-M model {kind!r} (tree or forest)")
        model.fit(X, y, sample_weight=w)
        # the threshold distribution: the model's utilities of the training observations, weighted by O
        dist = (model.predict(X), w)
        return cls(coder, model, pane_length, dist, kind, exact)

    def reset(self) -> None:
        self._history = []

    def distribution(self):
        return self._dist

    def utilities(self, codes: np.ndarray, values: np.ndarray) -> np.ndarray:
        if len(codes) == 0:
            return np.zeros(0)
        b = self.coder.binning
        freq = b.bin_frequencies(pane_frequencies(codes, len(self.coder.types), self.pane_length, self._history))
        self._history = pane_history(self._history, codes, len(self.coder.types), self.pane_length)
        X = np.column_stack([codes, freq, b.bin_attributes(values)]).astype(np.float64)
        u = self.model.predict(X)
        return np.where(codes >= 0, u, 0.0)
