"""Thin Spark adapter around :mod:`sparkcep.runtime_udfs.shared_engine`: one stateful operator per sharing
context (the queries sharing a partition key and windows), grouped by that key.

Spark groups by the GROUP BY columns (one group without GROUP BY: parallelism 1, as for a single trend query
partitioned finer than its groups); inside a group, one engine state per partition key.

The operator's result is **one DataFrame with a ``query`` column**: ``query, window_start, window_end,
<GROUP BY columns>, count_all, aggregate_overflow`` (``count_all`` is each query's COUNT(*), exact as
DECIMAL(38, 0); a count beyond 38 digits is null and flags ``aggregate_overflow``, as for single trend
queries).  Batch: ``groupBy(key).applyInPandas``.  Streaming: an event-time watermark on ts and
``groupBy(key).applyInPandasWithState`` with event-time timeouts, the engine state pickled in the group
state, late rows counted by the engine.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    IntegralType,
    LongType,
    NumericType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from sparkcep.compiler.errors import CEPError
from sparkcep.runtime_udfs import shared_engine
from sparkcep.runtime_udfs.shared_engine import SharedSpec, SharedState
from sparkcep.runtime_udfs.spark_adapters import (
    EVENT_TIME_OFFSET,
    STATE_SCHEMA,
    _epoch_ms,
    _from_ms,
    _session_timezone,
    grouped,
    watermarked,
)

__all__ = ["SharedOperator", "apply_shared"]

EXACT = DecimalType(38, 0)
_EXACT_LIMIT = 10**38
COUNT = "count_all"
OVERFLOW = "aggregate_overflow"


class SharedOperator:
    """The shared engine of one spec and input schema, as Spark pandas functions."""

    def __init__(self, spec: SharedSpec, input_schema: StructType, *, ts_col: str = "ts", type_col: str = "type",
                 timezone: str | None = None):
        shared_engine.check(spec)
        self.spec = spec
        fields = {f.name: f.dataType for f in input_schema.fields}
        for c in (ts_col, type_col, *spec.key, *spec.group_by):
            if c not in fields:
                raise CEPError(f"the input has no column {c!r}")
        ts = fields[ts_col]
        self.timestamp = isinstance(ts, (TimestampType, TimestampNTZType))
        self.aware = isinstance(ts, TimestampType)
        self.zone = (timezone or _session_timezone()) if isinstance(ts, TimestampType) else None
        if not self.timestamp and not isinstance(ts, NumericType):
            raise CEPError(f"the ts column {ts_col!r} must be a timestamp or a number")
        if self.timestamp:
            bound: DataType = ts
        elif isinstance(ts, IntegralType) and float(spec.window).is_integer() and float(spec.slide).is_integer():
            bound = LongType()
        else:
            bound = DoubleType()
        cols = [StructField("query", StringType()), StructField("window_start", bound),
                StructField("window_end", bound)]
        cols += [StructField(g, fields[g]) for g in spec.group_by]
        cols += [StructField(COUNT, EXACT), StructField(OVERFLOW, BooleanType())]
        self.output_schema = StructType(cols)
        self.ts_col, self.type_col = ts_col, type_col
        self.columns = [ts_col, type_col, *dict.fromkeys((*spec.key, *spec.group_by))]
        self._outputs = {q.name: q.output for q in spec.queries}
        #: Spark groups are the GROUP BY groups (one constant group without GROUP BY); each holds one engine
        #: state per partition key, whose rows of a window are summed (the key is finer than the groups)
        self.group_cols = tuple(spec.group_by)
        self.nested = set(spec.key) != set(spec.group_by)

    def events(self, pdf: pd.DataFrame) -> list[dict]:
        if pdf.empty:
            return []
        ts = _epoch_ms(pdf[self.ts_col], self.zone) if self.timestamp else pdf[self.ts_col].tolist()
        types = pdf[self.type_col].tolist()
        extra = {g: pdf[g].tolist() for g in dict.fromkeys((*self.spec.key, *self.spec.group_by))}
        out = []
        for i, (t, tp) in enumerate(zip(ts, types, strict=True)):
            ev = {"ts": t, "type": tp}
            for g, values in extra.items():
                ev[g] = values[i]
            out.append(ev)
        return out

    def frame(self, rows: list[dict]) -> pd.DataFrame:
        names = self.output_schema.names
        data: dict[str, Any] = {n: [] for n in names}
        for r in rows:
            count = r[self._outputs[r["query"]]]
            overflow = abs(count) >= _EXACT_LIMIT
            for n in names:
                if n == COUNT:
                    data[n].append(None if overflow else Decimal(count))
                elif n == OVERFLOW:
                    data[n].append(overflow)
                else:
                    data[n].append(r[n])
        if not rows:
            return pd.DataFrame({n: pd.Series([], dtype=object) for n in names}, columns=names)
        if self.timestamp:
            for n in ("window_start", "window_end"):
                data[n] = _from_ms(data[n], self.aware)
        return pd.DataFrame(data, columns=names)

    def _split(self, events: list[dict]) -> dict[tuple, list[dict]]:
        parts: dict[tuple, list[dict]] = {}
        for ev in events:
            parts.setdefault(tuple(ev.get(c) for c in self.spec.key), []).append(ev)
        return parts

    def _finish(self, rows: list[dict]) -> list[dict]:
        return shared_engine.merge_rows(self.spec, rows) if self.nested and rows else rows

    def batch_function(self):
        spec = self.spec

        def shared_batch(pdf: pd.DataFrame) -> pd.DataFrame:
            rows = []
            for events in self._split(self.events(pdf)).values():
                state, _ = shared_engine.step(spec, shared_engine.init_state(), events)
                rows.extend(shared_engine.advance(spec, state, math.inf)[1])
            return self.frame(self._finish(rows))

        return shared_batch

    def stream_function(self):
        """``fn(key, pdfs, state)`` for ``applyInPandasWithState``: the group's state is a pickled dict of one
        engine state per partition key; every partition is advanced to the watermark, rows merged."""
        spec = self.spec
        offset = 0 if self.timestamp else EVENT_TIME_OFFSET

        def shared_stream(key: Any, pdfs: Iterator[pd.DataFrame], group: GroupState) -> Iterator[pd.DataFrame]:
            states: dict[tuple, SharedState] = pickle.loads(group.get[0]) if group.exists else {}
            for pdf in pdfs:
                for k, events in self._split(self.events(pdf)).items():
                    state = states.get(k)
                    if state is None:
                        state = states[k] = shared_engine.init_state()
                    shared_engine.step(spec, state, events)
            raw = group.getCurrentWatermarkMs()
            rows: list[dict] = []
            due = math.inf
            for k in list(states):
                state, out = shared_engine.advance(spec, states[k], raw - offset)
                rows.extend(out)
                if shared_engine.is_empty(state):
                    del states[k]
                else:
                    wake = shared_engine.wakeup(spec, state)
                    if wake is not None:
                        due = min(due, wake)
            if not states:
                group.remove()
            else:
                group.update((pickle.dumps(states, protocol=pickle.HIGHEST_PROTOCOL),))
                if math.isfinite(due):
                    group.setTimeoutTimestamp(max(math.ceil(due + offset) - 1, raw, 1))
            if rows:
                yield self.frame(self._finish(rows))

        return shared_stream


def apply_shared(df: DataFrame, spec: SharedSpec, *, ts_col: str = "ts", type_col: str = "type",
                 lateness: float = 0) -> DataFrame:
    """The shared operator on a batch or streaming DataFrame of events (only the columns it needs and the
    event types of its segments are kept, before the shuffle)."""
    op = SharedOperator(spec, df.schema, ts_col=ts_col, type_col=type_col)
    types = sorted({t for _, pattern in spec.segments for t in pattern})
    candidates = df.where(F.col(type_col).isin(types)).select(*op.columns)
    if not df.isStreaming:
        return grouped(candidates, op.group_cols).applyInPandas(op.batch_function(), schema=op.output_schema)
    return grouped(watermarked(candidates, ts_col, lateness), op.group_cols).applyInPandasWithState(
        op.stream_function(), outputStructType=op.output_schema, stateStructType=STATE_SCHEMA,
        outputMode="append", timeoutConf=GroupStateTimeout.EventTimeTimeout)
