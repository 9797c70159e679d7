"""The shedding stage on Spark: ``mapInPandas`` before the shuffle, with the trained shedder broadcast.

    kept, shedding = install(candidates, shedder, bound=1.0)       # a streaming DataFrame in, kept rows out
    result = grouped(watermarked(kept, ...), key).applyInPandasWithState(...)
    query = result.writeStream....start()
    ...
    shedding.batches       # per micro-batch: offered, dropped (per type), latency, rho
    shedding.dropped       # total dropped per type

* The stage marks each row ``_shed`` (the decision of :meth:`Shedder.decide` with the current ρ), counts
  offered and dropped rows per event type with ``DataFrame.observe`` (the counts land in the query's
  progress, ``observedMetrics[<name>]``, for every committed micro-batch), optionally writes the dropped rows
  as JSON lines under ``dropped_output`` (written by the tasks: at-least-once if a task is retried), then
  keeps the rows not shed.
* The controller (:class:`~sparkcep.shedding.controller.BatchController`) runs on the driver in a
  ``StreamingQueryListener``: after each micro-batch it reads the batch's duration and counts and sets ρ.
  The executors read ρ from a small control file (atomically replaced; on a cluster it must be on a file
  system every executor sees).  With ρ = 0 nothing is dropped, and with shedding off the stage is not added
  at all: results are those of the unshed engine.
* The predecessor pane runs over each input partition of each micro-batch in arrival order (it restarts with
  each task: the first ``L`` events of a task see a shorter pane).
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.types import BooleanType, StructField, StructType

from sparkcep.shedding.controller import BatchController
from sparkcep.shedding.shedder import Shedder

__all__ = ["SHED", "ControlFile", "Shedding", "install", "shed_partition"]

#: The column the stage marks dropped rows with (removed before the stateful operator).
SHED = "_shed"
_ids = itertools.count()


class ControlFile:
    """The current drop ratio, written by the driver and read by the tasks."""

    def __init__(self, path: str):
        self.path = path
        self._cache: tuple[float, float] | None = None

    def write(self, rho: float) -> None:
        tmp = f"{self.path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "w") as f:
            json.dump({"rho": float(rho), "at": time.time()}, f)
        os.replace(tmp, self.path)

    def read(self) -> float:
        try:
            mtime = os.stat(self.path).st_mtime
            if self._cache is not None and self._cache[0] == mtime:
                return self._cache[1]
            with open(self.path) as f:
                rho = float(json.load(f)["rho"])
            self._cache = (mtime, rho)
            return rho
        except (OSError, ValueError, KeyError):
            return 0.0


def shed_partition(shedder: Shedder, pdfs: Iterator[pd.DataFrame], rho: float, type_col: str = "type",
                   ts_col: str = "ts", dropped_output: str | None = None,
                   seed: int | None = None) -> Iterator[pd.DataFrame]:
    """The body of the ``mapInPandas`` stage (pure pandas, testable without a JVM): each frame with a boolean
    :data:`SHED` column, events in ``ts`` order within a frame."""
    shedder.reset()
    rng = np.random.default_rng(seed)
    for pdf in pdfs:
        if pdf.empty:
            yield pdf.assign(**{SHED: pd.Series([], dtype=bool)})
            continue
        pdf = pdf.sort_values(ts_col, kind="stable").reset_index(drop=True)
        codes, values = shedder.coder.encode_frame(pdf, type_col)
        drop = shedder.decide(codes, values, rho, rng=rng)
        out = pdf.assign(**{SHED: drop})
        if dropped_output and drop.any():
            os.makedirs(dropped_output, exist_ok=True)
            path = os.path.join(dropped_output, f"part-{uuid.uuid4().hex}.json")
            out[drop].drop(columns=[SHED]).to_json(path, orient="records", lines=True, date_format="iso")
        yield out


@dataclass
class Shedding:
    """The handle of one shedding stage: its controller, control file and what it dropped."""

    name: str
    types: tuple[str, ...]
    controller: BatchController
    control: ControlFile
    batches: list[dict] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    offered: int = 0
    listener: StreamingQueryListener | None = None

    def on_progress(self, progress) -> None:
        metrics = progress.observedMetrics.get(self.name) if progress.observedMetrics else None
        if metrics is None:
            return
        row = metrics.asDict()
        offered = int(row.get("offered") or 0)
        dropped = {t: int(row.get(f"dropped_{i}") or 0) for i, t in enumerate(self.types)}
        other = int(row.get("dropped") or 0) - sum(dropped.values())
        if other:
            dropped["<other>"] = other
        start = datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00")).timestamp()
        duration = progress.durationMs.get("triggerExecution", 0) / 1000
        total = sum(dropped.values())
        rho_used = self.controller.rho
        rho = self.controller.on_batch(start, duration, offered, offered - total)
        self.control.write(rho)
        self.offered += offered
        for t, n in dropped.items():
            self.dropped[t] = self.dropped.get(t, 0) + n
        self.batches.append({"batch": progress.batchId, "offered": offered, "dropped": total,
                             "dropped_per_type": dropped, "duration": duration, "rho_used": rho_used,
                             "latency": self.controller.latencies[-1] if offered else None, "rho_next": rho})

    @property
    def drop_ratio(self) -> float:
        return sum(self.dropped.values()) / self.offered if self.offered else 0.0


class _Listener(StreamingQueryListener):
    def __init__(self, handle: Shedding):
        self.handle = handle

    def onQueryStarted(self, event):  # noqa: N802 - PySpark's names
        pass

    def onQueryProgress(self, event):  # noqa: N802
        self.handle.on_progress(event.progress)

    def onQueryIdle(self, event):  # noqa: N802
        pass

    def onQueryTerminated(self, event):  # noqa: N802
        pass


def install(df: DataFrame, shedder: Shedder, *, bound: float, safety: float = 0.8, type_col: str = "type",
            ts_col: str = "ts", dropped_output: str | None = None, control_dir: str | None = None,
            listen: bool = True) -> tuple[DataFrame, Shedding]:
    """Put the shedding stage on ``df`` (the filtered events, before the shuffle).  Returns the kept rows and
    the stage's handle; with ``listen`` a ``StreamingQueryListener`` drives the controller (streaming)."""
    spark = df.sparkSession
    name = f"sparkcep_shedding_{next(_ids)}"
    control_dir = control_dir or tempfile.mkdtemp(prefix="sparkcep-shedding-")
    os.makedirs(control_dir, exist_ok=True)
    control = ControlFile(os.path.join(control_dir, f"{name}.json"))
    control.write(0.0)
    types = shedder.coder.types
    handle = Shedding(name, types, BatchController(bound, safety), control)
    model = spark.sparkContext.broadcast(shedder)
    control_path = control.path

    def stage(pdfs: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        rho = ControlFile(control_path).read()
        yield from shed_partition(model.value, pdfs, rho, type_col, ts_col, dropped_output)

    schema = StructType(df.schema.fields + [StructField(SHED, BooleanType(), False)])
    marked = df.mapInPandas(stage, schema)
    shed = F.col(SHED)
    counts = [F.count(F.lit(1)).alias("offered"), F.sum(shed.cast("long")).alias("dropped")]
    counts += [F.sum((shed & (F.col(type_col) == t)).cast("long")).alias(f"dropped_{i}") for i, t in enumerate(types)]
    observed = marked.observe(name, *counts)
    kept = observed.filter(~shed).drop(SHED)
    if listen:
        handle.listener = _Listener(handle)
        spark.streams.addListener(handle.listener)
    return kept, handle


def training_events(training, spec, *, ts_col: str = "ts", type_col: str = "type", limit: int = 50_000) -> list[dict]:
    """Training events for :func:`~sparkcep.shedding.shedder.fit_gspice` from a batch Spark DataFrame, a
    pandas DataFrame or a list of dicts: engine form (``type``, ``ts`` as a number, ms for timestamps), in
    ``ts`` order, with :data:`~sparkcep.shedding.observations.SID` = 0..n-1."""
    from sparkcep.runtime_udfs.spark_adapters import MatchOperator
    from sparkcep.shedding.observations import SID

    if isinstance(training, DataFrame):
        op = MatchOperator(spec, training.schema, ts_col=ts_col, type_col=type_col)
        events = op.events(training.limit(limit).toPandas())
    elif isinstance(training, pd.DataFrame):
        training = training.head(limit).copy()
        for c in training.columns:  # timestamps are epoch ms inside the engine
            if pd.api.types.is_datetime64_any_dtype(training[c]):
                stamps = training[c].dt.tz_localize("UTC") if training[c].dt.tz is None else training[c]
                training[c] = stamps.dt.tz_convert("UTC").astype("int64") // 10**6
        events = [dict(r) for r in training.to_dict("records")]
        events = [{**e, "type": e.get(type_col), "ts": e.get(ts_col)} for e in events]
    else:
        events = [dict(e) for e in list(training)[:limit]]
    events = [e for e in events if e.get("ts") is not None]
    events.sort(key=lambda e: e["ts"])
    for i, e in enumerate(events):
        e.pop("_mask", None)
        e[SID] = i
    return events
