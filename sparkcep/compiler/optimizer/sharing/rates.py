"""Event-type rates for the benefit model: ``Rate(E)`` = expected events of type ``E`` per window.

Sources, in order of preference: a statistics file (``--stats FILE``: JSON ``{"rates": {"OakSt": 120, ...}}``
or a flat ``{"OakSt": 120, ...}``), rates declared in the workload (``WITH RATES (OakSt = 120, ...)`` before
the queries), a sample of the input (:func:`rates_from_sample`), else :data:`DEFAULT_RATE` for every type.
Types missing from the source used get the default.  ``explain`` states which source was used.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

from sparkcep.ir.errors import CEPError

#: Rate of a type nobody told us about (events per window).
DEFAULT_RATE = 1.0


def load_stats(path: str | Path) -> dict[str, float]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise CEPError(f"cannot read the statistics file {path}: {err}") from None
    if isinstance(data, Mapping) and isinstance(data.get("rates"), Mapping):
        data = data["rates"]
    if not isinstance(data, Mapping) or not all(isinstance(v, int | float) and v >= 0 for v in data.values()):
        raise CEPError(f"statistics file {path}: expected {{\"rates\": {{type: events per window, ...}}}}")
    return {str(k): float(v) for k, v in data.items()}


def rates_from_sample(events: Iterable[Mapping], window: float, type_col: str = "type",
                      ts_col: str = "ts") -> dict[str, float]:
    """Events per window of each type in a sample: count / (time span / window), the span at least one
    window."""
    counts: Counter = Counter()
    lo, hi = float("inf"), float("-inf")
    for e in events:
        counts[e[type_col]] += 1
        ts = float(e[ts_col])
        lo, hi = min(lo, ts), max(hi, ts)
    if not counts:
        return {}
    windows = max((hi - lo) / window, 1.0) if window > 0 else 1.0
    return {t: n / windows for t, n in sorted(counts.items())}
