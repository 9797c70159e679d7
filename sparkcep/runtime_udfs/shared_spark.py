"""Thin Spark adapter around :mod:`sparkcep.runtime_udfs.shared_engine`: one stateful operator per sharing
context (the queries sharing a partition key and windows), grouped by that key.

Spark groups by the GROUP BY columns (one group without GROUP BY: parallelism 1, as for a single trend query
partitioned finer than its groups); inside a group, one engine state per partition key.

The operator's result is **one DataFrame with a ``query`` column**: ``query, window_start, window_end,
<GROUP BY columns>, <aggregates>, aggregate_overflow``, one column per aggregate name of its queries (a
query's row has its own aggregates, the others' null), typed as for a single trend query: COUNT(*),
COUNT(v) and SUM of integers exact as DECIMAL(38, 0) (a value beyond 38 digits is null and flags
``aggregate_overflow``), other SUMs and AVG DOUBLE, MIN/MAX the attribute's type.  The operator's group
functions (batch for ``groupBy(key).applyInPandas``, streaming for ``applyInPandasWithState`` with
event-time timeouts, the engine state pickled in the group state) are run by
:func:`sparkcep.runtime_udfs.workload_spark.apply_workload`, which unites them with the workload's other
operators.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pandas as pd
from pyspark.sql.streaming.state import GroupState
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
    _epoch_ms,
    _from_ms,
    _session_timezone,
)

__all__ = ["SharedOperator"]

EXACT = DecimalType(38, 0)
_EXACT_LIMIT = 10**38
OVERFLOW = "aggregate_overflow"


def _aggregate_fields(spec: SharedSpec, fields: dict[str, DataType]) -> dict[str, StructField]:
    """One output column per aggregate name of the spec's queries, typed as the trend adapter types them
    (``spark_adapters._trend_schema``): COUNT(*), COUNT(v) and SUM of integers exact (DECIMAL(38, 0)), other
    SUMs and AVG DOUBLE, MIN/MAX the attribute's type.  Two queries may share a name only with one type."""
    out: dict[str, StructField] = {}
    for q in spec.queries:
        typed: list[tuple[str, DataType]] = [(q.output, EXACT)] if q.output is not None else []
        for a in q.aggregates:
            func = a.func.lower()
            arg = fields.get(a.attr) if a.attr is not None else None
            if a.attr is not None and arg is None:
                raise CEPError(f"the input has no column {a.attr!r}")
            if func == "count" or (func == "sum" and isinstance(arg, IntegralType)):
                typed.append((a.name, EXACT))
            elif func in ("min", "max"):
                typed.append((a.name, arg))
            else:
                typed.append((a.name, DoubleType()))
        for name, dtype in typed:
            if name in out and out[name].dataType != dtype:
                raise CEPError(f"column {name!r} is {out[name].dataType.simpleString()} in one query and "
                               f"{dtype.simpleString()} in {q.name}: give one of them another name (AS ...)")
            out.setdefault(name, StructField(name, dtype))
    return out


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
        aggregates = _aggregate_fields(spec, fields)
        cols += [*aggregates.values(), StructField(OVERFLOW, BooleanType())]
        self.output_schema = StructType(cols)
        self.ts_col, self.type_col = ts_col, type_col
        #: the measured attributes (SUM/AVG/MIN/MAX); timestamps go to the engine as epoch ms
        self.attrs = list(dict.fromkeys(a.attr for q in spec.queries for a in q.aggregates if a.attr is not None))
        for a in self.attrs:
            if a not in fields:
                raise CEPError(f"the input has no column {a!r}")
        self.columns = list(dict.fromkeys((ts_col, type_col, *spec.key, *spec.group_by, *self.attrs)))
        self._times = {n: f.dataType for n, f in aggregates.items()
                       if isinstance(f.dataType, (TimestampType, TimestampNTZType))}
        self._attr_zones = {a: (timezone or _session_timezone()) if isinstance(fields[a], TimestampType) else None
                            for a in self.attrs if isinstance(fields[a], (TimestampType, TimestampNTZType))}
        self._exact = [n for n, f in aggregates.items() if f.dataType == EXACT]
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
        for a in self.attrs:
            if a in self._attr_zones:
                extra[a] = _epoch_ms(pdf[a], self._attr_zones[a])
            elif pdf[a].dtype.kind == "f" and pdf[a].isna().any():
                extra[a] = [None if v != v else v for v in pdf[a].tolist()]  # Spark's null (NaN in pandas)
            else:
                extra[a] = pdf[a].tolist()
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
            overflow = False
            for n in self._exact:  # exact counts and integer sums: DECIMAL(38, 0), null beyond 38 digits
                v = r.get(n)
                if v is not None:
                    big = abs(v) >= _EXACT_LIMIT
                    overflow = overflow or big
                    r = {**r, n: None if big else Decimal(v)}
            for n in names:
                data[n].append(overflow if n == OVERFLOW else r.get(n))
        if not rows:
            return pd.DataFrame({n: pd.Series([], dtype=object) for n in names}, columns=names)
        if self.timestamp:
            for n in ("window_start", "window_end"):
                data[n] = _from_ms(data[n], self.aware)
        for n, dtype in self._times.items():  # MIN/MAX of a timestamp attribute
            data[n] = _from_ms(data[n], isinstance(dtype, TimestampType))
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

