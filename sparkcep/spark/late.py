"""Late events as a side channel of the stateful streaming operator.

Spark's watermark for a micro-batch is ``max event time of the earlier batches - allowed lateness``.  An event
*older* than it (LANGUAGE.md §1) is *late*: the engine may already have emitted what it would have changed (a
window's aggregate, a trailing-negation match).  An event at the watermark's very ts is not: no result
decided so far depends on it (a match ends at it or later, a window holding it has not ended), so equal
timestamps straddling micro-batches give the batch result.  With ``late_rows=True`` the adapter does not let
a late event vanish: its output carries three more columns, :data:`KIND` (``"result"`` or ``"late"``),
:data:`REASON` and :data:`RECORD` (the event as JSON), and the job routes ``late`` rows to a late-events
output.

For Spark itself not to drop these rows before the state function sees them, the watermark must sit on a
column the grouped input has with null values (the watermark is on the events before the filter,
:func:`sparkcep.spark.adapters.watermarked`, and
:func:`~sparkcep.spark.adapters.with_event_time` with ``keep_late=True`` gives the candidates the
column back, nulled); the global watermark, ``getCurrentWatermarkMs()`` and event-time timeouts are unchanged.

An event within the allowed lateness (at most that far behind the newest event seen before it) is never late:
its ts is at or above the watermark of its batch, so out-of-order input within the lateness gives the results
of sorted input.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
from pyspark.sql.types import StringType, StructField, StructType

#: The side-channel columns of the operator's output.
KIND, REASON, RECORD = "_kind", "_reason", "_record"
RESULT, LATE = "result", "late"


def with_side_columns(schema: StructType) -> StructType:
    """``schema`` plus :data:`KIND`, :data:`REASON`, :data:`RECORD`."""
    return StructType([*schema.fields, StructField(KIND, StringType()), StructField(REASON, StringType()),
                       StructField(RECORD, StringType())])


def _plain(v):
    """A JSON-able Python value (numpy scalars unwrapped, NaN/NaT as null)."""
    if v is None:
        return None
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def late_split(pdf: pd.DataFrame, ts_values: list, watermark: float) -> tuple[pd.DataFrame, list[int]]:
    """``(on_time_rows, late_positions)``: rows with ``ts < watermark`` (ts in engine units) are late."""
    if abs(watermark) < 2**53:
        stamps = np.asarray(ts_values, dtype="float64")  # None → NaN, never late (the engine counts it invalid)
        behind = stamps < watermark
    else:  # beyond float64's whole numbers (epoch ns): compared exactly, as Python numbers
        behind = np.array([t is not None and t == t and t < watermark for t in ts_values], dtype=bool)
    if not behind.any():
        return pdf, []
    return pdf[~behind], np.flatnonzero(behind).tolist()


def late_records(pdf: pd.DataFrame, positions: list[int], columns: list[str], times: dict[str, list],
                 watermark: float, watermark_text: str) -> list[dict]:
    """Side-channel rows (:data:`KIND` = ``late``) for the rows at ``positions`` of ``pdf``: the event's
    ``columns`` as a JSON object (timestamp columns from ``times``, epoch ms, as ISO-8601 UTC)."""
    rows = []
    for i in positions:
        event = {}
        for c in columns:
            if c in times:
                ms = times[c][i]
                event[c] = None if ms is None else pd.Timestamp(ms, unit="ms", tz="UTC").isoformat()
            else:
                event[c] = _plain(pdf[c].iloc[i])
        rows.append({KIND: LATE, REASON: f"late: ts before the watermark {watermark_text}",
                     RECORD: json.dumps(event, default=str)})
    return rows
