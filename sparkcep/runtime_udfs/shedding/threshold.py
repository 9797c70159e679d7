"""The utility threshold for a drop ratio ρ (gSPICE §III-C, after eSPICE).

``O_u`` is the share of processed events with utility ``u``; accumulating it in ascending ``u`` gives ``O_u^c``;
the threshold ``u_th`` is the utility whose ``O_u^c`` is the lowest one ``≥ ρ``.  The paper drops every event with
``U ≤ u_th``, which overshoots ρ when many events share ``u_th`` (e.g. the many utility-0 events of a selective
query).  :class:`Threshold` also carries ``tie``: the share of events *at* ``u_th`` to drop so that the expected
drop ratio is exactly ρ (``exact=False`` gives the paper's rule, ``tie = 1``).

Example (utilities 0.33, 0.5, 0.67 seen 3, 2, 3 times — the paper's Table II)::

    >>> th = utility_threshold([0.67, 0.5, 0.33], [3, 2, 3], rho=0.5)
    >>> th.utility, round(th.tie, 3)
    (0.5, 0.5)
    >>> utility_threshold([0.67, 0.5, 0.33], [3, 2, 3], rho=0.5, exact=False).tie
    1.0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Threshold:
    """Drop events with ``U < utility``, and those with ``U == utility`` with probability ``tie``."""

    utility: float
    tie: float = 1.0

    def drops(self, u: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """The drop decision for utilities ``u`` given uniform ``draws`` in [0, 1)."""
        u = np.asarray(u, dtype=np.float64)
        return (u < self.utility) | ((u == self.utility) & (draws < self.tie))


#: Drop nothing.
KEEP_ALL = Threshold(-np.inf, 0.0)


def cumulative_occurrences(utils: Sequence[float], occurrences: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct utilities ascending and their cumulative share ``O_u^c`` (the last is 1)."""
    u = np.asarray(utils, dtype=np.float64)
    o = np.asarray(occurrences, dtype=np.float64)
    if len(u) == 0 or o.sum() <= 0:
        return np.array([]), np.array([])
    order = np.argsort(u, kind="stable")
    u, o = u[order], o[order]
    uniq, start = np.unique(u, return_index=True)
    per = np.add.reduceat(o, start)
    return uniq, np.cumsum(per) / o.sum()


def utility_threshold(utils: Sequence[float], occurrences: Sequence[float], rho: float,
                      exact: bool = True) -> Threshold:
    """The threshold dropping a share ``rho`` of events whose utilities are distributed like ``utils``
    (each seen ``occurrences`` times in the processed stream)."""
    if rho <= 0:
        return KEEP_ALL
    uniq, cum = cumulative_occurrences(utils, occurrences)
    if len(uniq) == 0:
        return KEEP_ALL
    rho = min(float(rho), 1.0)
    i = int(np.searchsorted(cum, rho - 1e-12, side="left"))
    i = min(i, len(uniq) - 1)
    if not exact:
        return Threshold(float(uniq[i]), 1.0)
    below = float(cum[i - 1]) if i > 0 else 0.0
    at = float(cum[i]) - below
    tie = 1.0 if at <= 0 else min(1.0, max(0.0, (rho - below) / at))
    return Threshold(float(uniq[i]), tie)
