"""Progress of a running sparkcep streaming query, from its Spark metrics.

:class:`Totals` adds up the observed metrics of :mod:`sparkcep.spark.sinks` over micro-batches; :func:`follow`
waits for a query and prints one line per micro-batch, e.g.::

    batch 3: read 25000 events (+6250), 412 results, 3 dead letters, 1 late, 11 ignored, 5830 events/s

``read`` counts every record of the input (valid events plus dead letters); ``ignored`` are valid events no
component of the query can use; ``events/s`` is the batch's records over its trigger duration.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field

from sparkcep.spark.sinks import METRICS


def batch_counts(progress: dict) -> dict[str, int]:
    """The counts of one ``StreamingQueryProgress`` (its JSON dict): read, valid, dead_letters, relevant,
    ignored, results, late (0 where a metric is absent)."""
    observed = progress.get("observedMetrics") or {}

    def get(name: str, column: str | None = None) -> int:
        row = observed.get(name) or {}
        value = row.get(column or name)
        return int(value) if value is not None else 0

    valid, dead = get("events_valid"), get("dead_letters")
    relevant = get("events_relevant")
    return {"read": valid + dead, "valid": valid, "dead_letters": dead, "relevant": relevant,
            "ignored": max(valid - relevant, 0), "results": get(METRICS[-1], "results"),
            "late": get(METRICS[-1], "late")}


@dataclass
class Totals:
    """Counts summed over the micro-batches seen (each batch id once)."""

    counts: dict[str, int] = field(default_factory=dict)
    batches: set[int] = field(default_factory=set)

    def add(self, progress: dict) -> str | None:
        """Add one progress dict; returns its progress line (None for a batch already counted)."""
        batch = progress.get("batchId")
        if batch in self.batches:
            return None
        self.batches.add(batch)
        now = batch_counts(progress)
        for k, v in now.items():
            self.counts[k] = self.counts.get(k, 0) + v
        ms = (progress.get("durationMs") or {}).get("triggerExecution") or 0
        rate = f"{now['read'] / (ms / 1000):.0f} events/s" if ms and now["read"] else "idle"
        c = self.counts
        return (f"batch {batch}: read {c['read']} events (+{now['read']}), {c['results']} results, "
                f"{c['dead_letters']} dead letters, {c['late']} late, {c['ignored']} ignored, {rate}")


def follow(query, out=None, poll: float = 1.0) -> Totals:
    """Wait for ``query`` to end, printing a line per micro-batch to ``out`` (default: the ``sys.stderr`` of the
    moment, not of import time); the totals at the end.  Raises the query's exception if it failed."""
    totals = Totals()
    out = sys.stderr if out is None else out

    def drain() -> None:
        for p in query.recentProgress:
            line = totals.add(json.loads(p.json) if hasattr(p, "json") else p)
            if line is not None:
                print(line, file=out, flush=True)

    while not query.awaitTermination(poll):
        drain()
        time.sleep(0)
    drain()
    return totals
