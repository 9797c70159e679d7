"""The shedding stage on Spark: ``mapInPandas`` before the shuffle, with the trained shedder broadcast.

    kept, shedding = install(candidates, shedder, bound=1.0)       # a streaming DataFrame in, kept rows out
    # candidates: the query's filter over watermarked(events, ...); the watermark sits before the filter
    result = grouped(with_event_time(kept, events, ...), key).applyInPandasWithState(...)
    query = result.writeStream....start()
    ...
    shedding.batches       # per micro-batch: offered, dropped (per type), latency, rho
    shedding.dropped       # total dropped per type
    shedding.detach()      # once the query has stopped: the listener removed after its last call

* The stage marks each row ``_shed`` (the decision of :meth:`Shedder.decide` with the current ρ), counts
  offered and dropped rows per event type with ``DataFrame.observe`` (the counts land in the query's
  progress, ``observedMetrics[<name>]``, for every committed micro-batch), optionally writes the dropped rows
  as JSON lines under ``dropped_output`` (written by the tasks: at-least-once if a task is retried), then
  keeps the rows not shed.
* The controller (:class:`~sparkcep.runtime_udfs.shedding.controller.BatchController`) runs on the driver in a
  ``StreamingQueryListener``: after each micro-batch it reads the batch's start, duration and counts (the
  ``observe()`` metrics) and sets ρ from the batch cost fitted as fixed + per kept event over recent batches.
  A continuous run over a file directory switches to the backlog controller (:meth:`Shedding.follow_source`,
  :class:`~sparkcep.runtime_udfs.shedding.controller.BacklogController`): ρ from the p99 arrival-to-result
  latency and the files not read yet, so a backlog that grows while each batch looks fast is shed.
  The executors read ρ from a small control file (atomically replaced; on a cluster it must be on a file
  system every executor sees).  With ρ = 0 nothing is dropped, and with shedding off the stage is not added
  at all: results are those of the unshed engine.
* The predecessor pane runs over each input partition of each micro-batch in arrival order (it restarts with
  each task: the first ``L`` events of a task see a shorter pane).
* Retraining on drift (``retrain=True``): the listener compares the type shares of the offered rows (counted
  by ``observe()`` too) with the training stream's (:class:`~sparkcep.runtime_udfs.shedding.shedder.TypeDrift`); on
  drift
  the control record names a sample directory, the tasks write a sample of their input there, the driver
  refits (:class:`~sparkcep.runtime_udfs.shedding.shedder.Refit`), pickles the model next to the control file and names
  it in the control record, and the tasks load it (:func:`current_model`) in place of the broadcast one.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import itertools
import json
import os
import pickle
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import unquote, urlparse

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.types import BooleanType, StructField, StructType

from sparkcep.ir.errors import CEPError
from sparkcep.runtime_udfs.shedding.controller import Admission, BacklogController, BatchController, admit_files
from sparkcep.runtime_udfs.shedding.shedder import Refit, Shedder, TypeDrift
from sparkcep.spark.heap import freeze_worker_heap
from sparkcep.spark.progress import arrivals, batch_latency
from sparkcep.spark.validate import (
    ARRIVAL_METRIC,
    STAGING_MARK,
    followed,
    is_sink_output,
    log_records,
    original_name,
    spark_lists,
    spark_reads,
    spark_reads_file,
    staged_name,
)

__all__ = ["SHED", "ControlFile", "FileAdmission", "Shedding", "admitted_input", "count_rows", "current_model",
           "follow_input", "hand_over", "hand_over_slice", "install", "shed_partition", "stage_function"]

#: The column the stage marks dropped rows with (removed before the stateful operator).
SHED = "_shed"
_ids = itertools.count()


class ControlFile:
    """What the driver tells the tasks: the current drop ratio and, after a retraining, the current model file
    (and, while the driver waits for one, the directory to write a training sample to)."""

    def __init__(self, path: str):
        self.path = path

    def write(self, rho: float, **extra) -> None:
        tmp = f"{self.path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "w") as f:
            json.dump({"rho": float(rho), "at": time.time(), **extra}, f)
        os.replace(tmp, self.path)

    def state(self) -> dict:
        """The whole control record (``rho`` 0 if it cannot be read)."""
        try:
            with open(self.path) as f:
                state = json.load(f)
            state["rho"] = float(state["rho"])
            return state
        except (OSError, ValueError, KeyError, TypeError):
            return {"rho": 0.0}

    def read(self) -> float:
        return self.state()["rho"]


#: Models loaded from model files by this Python worker (a retrained model is loaded once per worker).
_MODELS: dict[str, Shedder] = {}


def current_model(initial: Shedder, state: dict) -> Shedder:
    """The shedder a task uses: the retrained model the control record names, else the initial (broadcast)
    one."""
    path = state.get("model")
    if not path:
        return initial
    model = _MODELS.get(path)
    if model is None:
        with open(path, "rb") as f:
            model = _MODELS[path] = pickle.load(f)
    return model


def shed_partition(shedder: Shedder, pdfs: Iterator[pd.DataFrame], rho: float, type_col: str = "type",
                   ts_col: str = "ts", dropped_output: str | None = None,
                   seed: int | None = None, sample_output: str | None = None,
                   sample_limit: int = 5000, within: bool = True) -> Iterator[pd.DataFrame]:
    """The body of the ``mapInPandas`` stage (pure pandas, testable without a JVM): each frame with a boolean
    :data:`SHED` column, events in ``ts`` order within a frame; ``within``: the least useful ``rho`` of each
    frame are dropped (:meth:`Shedder.decide`), not those below the training stream's threshold.  With
    ``sample_output`` (the driver asked for a retraining sample), the first ``sample_limit`` offered events of
    the partition, a contiguous stretch in ``ts`` order, are also written there as JSON lines (timestamps as
    epoch ms)."""
    shedder.reset()
    rng = np.random.default_rng(seed)
    sampled = 0
    for pdf in pdfs:
        if pdf.empty:
            yield pdf.assign(**{SHED: pd.Series([], dtype=bool)})
            continue
        pdf = pdf.sort_values(ts_col, kind="stable").reset_index(drop=True)
        if sample_output and sampled < sample_limit:
            os.makedirs(sample_output, exist_ok=True)
            part = pdf.head(sample_limit - sampled)
            tmp = os.path.join(sample_output, f".part-{uuid.uuid4().hex}.tmp")
            part.to_json(tmp, orient="records", lines=True, date_format="epoch", date_unit="ms")
            os.replace(tmp, os.path.join(sample_output, f"part-{uuid.uuid4().hex}.json"))
            sampled += len(part)
        codes, values = shedder.coder.encode_frame(pdf, type_col)
        drop = shedder.decide(codes, values, rho, rng=rng, within=within)
        out = pdf.assign(**{SHED: drop})
        if dropped_output and drop.any():
            os.makedirs(dropped_output, exist_ok=True)
            path = os.path.join(dropped_output, f"part-{uuid.uuid4().hex}.json")
            out[drop].drop(columns=[SHED]).to_json(path, orient="records", lines=True, date_format="iso")
        yield out


def stage_function(model, control_path: str, type_col: str = "type", ts_col: str = "ts",
                   dropped_output: str | None = None, sample_limit: int = 5000):
    """The ``mapInPandas`` function of the stage: per task, the control record read once, then
    :func:`shed_partition` with its ρ and model (``model.value``: the broadcast shedder, unless the record names a
    retrained one).  In a Spark task the worker's heap is frozen first
    (:func:`~sparkcep.spark.heap.freeze_worker_heap`: PySpark's collection after the task then walks only this
    task's objects, not the ~10^5 of the modules loaded)."""

    def stage(pdfs: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        freeze_worker_heap()
        state = ControlFile(control_path).state()
        yield from shed_partition(current_model(model.value, state), pdfs, state["rho"], type_col, ts_col,
                                  dropped_output, sample_output=state.get("sample"), sample_limit=sample_limit)

    return stage


@dataclass
class Shedding:
    """The handle of one shedding stage: its controller, control file and what it dropped."""

    name: str
    types: tuple[str, ...]
    controller: BatchController | BacklogController
    control: ControlFile
    batches: list[dict] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    offered: int = 0
    listener: StreamingQueryListener | None = None
    #: retraining on drift (None: the stage keeps the model it started with)
    refit: Refit | None = None
    drift: TypeDrift | None = None
    control_dir: str | None = None
    min_sample: int = 1000
    retrains: int = 0
    model_path: str | None = None
    sampling: str | None = None
    columns: tuple[str, str] = ("type", "ts")
    #: the input directory of a continuous file source (:meth:`follow_source`), or None
    source: str | None = None
    #: the backlog controller's last decision (:class:`FileAdmission` applies it), or None
    admission: Admission | None = None
    #: events shed whole, unread, with their file by :class:`FileAdmission` (they waited past the expiry age:
    #: the last resort), per type; not in ``dropped`` nor ``offered``, which are the stage's
    expired_per_type: dict[str, int] = field(default_factory=dict)
    #: the query whose progress drives the controller (:meth:`bind`; None: every query's that carries the
    #: stage's metrics)
    query_id: str | None = None
    #: the admission control handing ``source``'s files over (:class:`FileAdmission`), or None
    feeder: FileAdmission | None = None
    _newest: float | None = None
    _per_file: float = 0.0
    _prev_start: float | None = None
    _expired_files: int = 0
    _expired_seen: tuple[int, int] = (0, 0)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def expired(self) -> int:
        """Events shed whole with their file, unread (:attr:`expired_per_type`)."""
        return sum(self.expired_per_type.values())

    def bind(self, query) -> None:
        """Drive the controller from ``query``'s progress only: another query over the same stage (the
        ``--timeouts`` query beside a run's) reports the same metrics, and counting them too counted every
        drop twice and mixed two queries' batches in the controller."""
        self.query_id = str(query.id)

    def count_expired(self, expired: dict[str, int]) -> None:
        """Add the events of one file shed whole, per type (the admission thread)."""
        with self._lock:
            self._expired_files += 1
            for t, n in expired.items():
                self.expired_per_type[t] = self.expired_per_type.get(t, 0) + n

    def count_dropped(self, dropped: dict[str, int], offered: int) -> None:
        """Add drops (per type) and offered events to the totals (the listener and the admission thread)."""
        with self._lock:
            self.offered += offered
            for t, n in dropped.items():
                self.dropped[t] = self.dropped.get(t, 0) + n

    def follow_source(self, directory: str, overhead: float = 0.0) -> None:
        """Drive ρ from what users feel (:class:`BacklogController`): each micro-batch's p99 arrival-to-result
        latency (the ``arrival`` observed metric of a file source, :func:`sparkcep.spark.validate.observed_arrival`)
        and the backlog, the events of ``directory`` not read yet (counted by the :class:`FileAdmission`, else
        its files not read yet times the events per file read so far);
        ``overhead``: the stage's own cost per offered event (s).  Following the directory it follows already
        keeps its controller (one per stage: ``apply(followed=)`` and :func:`follow_input` both ask)."""
        if directory == self.source and isinstance(self.controller, BacklogController):
            return
        self.source = directory
        self.controller = BacklogController(self.controller.bound, overhead=overhead, safety=self.controller.safety)

    def _backlog_rho(self, progress: dict, start: float, duration: float, offered: int, kept: int) -> float:
        arrival = (progress.get("observedMetrics") or {}).get(ARRIVAL_METRIC) or {}
        previous = self._newest
        if arrival.get("newest") is not None:
            self._newest = max(self._newest or 0, arrival["newest"])
        with self._lock:  # the files and events shed whole since the previous batch
            files, events = self._expired_files, self.expired
        gone_files, gone = files - self._expired_seen[0], events - self._expired_seen[1]
        self._expired_seen = (files, events)
        # one listing of the input per micro-batch: followed by the admission, the one that counts the events
        # waiting exactly (its top level alone: the admission stages no other files, Spark reads no others there)
        if self.feeder is not None:
            backlog = self.feeder.unread(self._newest)
            stamps = self.feeder.arrivals
        else:
            stamps = arrivals(self.source)
        waiting = 0 if self._newest is None else sum(t > self._newest for t in stamps)
        read = sum(t > (previous or 0) for t in stamps) - waiting - gone_files
        if read > 0 and offered:
            self._per_file = offered / read
        interval = start - self._prev_start if self._prev_start is not None else duration
        self._prev_start = start
        latency = batch_latency(progress)
        if self.feeder is None:
            backlog = int(waiting * self._per_file)
        self.admission = self.controller.on_batch(duration=duration, offered=offered, kept=kept,
                                                  latency=latency[1] if latency else None, backlog=backlog,
                                                  interval=max(interval, duration), expired=gone)
        return self.admission.rho

    def _control(self) -> dict:
        extra = {}
        if self.model_path:
            extra["model"] = self.model_path
        if self.sampling:
            extra["sample"] = self.sampling
        return extra

    def _retrain(self, offered_per_type: list[int]) -> None:
        """Drift detection on the driver (type shares of the offered events against the model's training
        stream); on drift the tasks are asked for a sample of the input, and once it has ``min_sample`` events
        the model is refit on it, written next to the control file, and named in the control record: the
        tasks load it instead of the broadcast model (a re-broadcast through the control file)."""
        if self.refit is None or self.drift is None:
            return
        if self.sampling is None:
            if self.drift.update_counts(offered_per_type):
                self.sampling = os.path.join(self.control_dir, f"sample-{self.retrains + 1}")
            return
        events = _read_sample(self.sampling, *self.columns)
        if len(events) < self.min_sample:
            return
        model = self.refit.fit(events)
        path = os.path.join(self.control_dir, f"{self.name}-model-{self.retrains + 1}.pkl")
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(model, f)
        os.replace(tmp, path)
        self.model_path, self.sampling, self.refit = path, None, model.refit or self.refit
        self.retrains += 1
        self.drift = TypeDrift.from_share(self.refit.reference, self.drift.threshold, self.drift.min_events)

    def on_progress(self, progress) -> None:
        if self.query_id is not None and str(getattr(progress, "id", None)) != self.query_id:
            return  # another query over the same stage (bind)
        metrics = progress.observedMetrics.get(self.name) if progress.observedMetrics else None
        if metrics is None:
            return
        row = metrics.asDict()
        offered = int(row.get("offered") or 0)
        self._retrain([int(row.get(f"offered_{i}") or 0) for i in range(len(self.types))])
        dropped = {t: int(row.get(f"dropped_{i}") or 0) for i, t in enumerate(self.types)}
        other = int(row.get("dropped") or 0) - sum(dropped.values())
        if other:
            dropped["<other>"] = other
        start = datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00")).timestamp()
        duration = progress.durationMs.get("triggerExecution", 0) / 1000
        total = sum(dropped.values())
        rho_used = self.controller.rho
        if isinstance(self.controller, BacklogController):
            rho = self._backlog_rho(json.loads(progress.json), start, duration, offered, offered - total)
            latency = self.controller.history[-1][0] if offered and self.controller.history else None
        else:
            rho = self.controller.on_batch(start, duration, offered, offered - total)
            latency = self.controller.latencies[-1] if offered else None
        self.control.write(rho, **self._control())
        self.count_dropped(dropped, offered)
        self.batches.append({"batch": progress.batchId, "offered": offered, "dropped": total,
                             "dropped_per_type": dropped, "duration": duration, "rho_used": rho_used,
                             "latency": latency, "rho_next": rho,
                             "model": self.retrains})

    def detach(self, timeout: float = 30.0) -> None:
        """Remove the stage's listener once its queries have stopped, after the last event Spark sends it:
        removed earlier, a call already on its way (Spark's listener bus runs apart from the driver's thread)
        reaches a Python process that is exiting, and the JVM prints a py4j error trace after the run's
        summary.  ``timeout``: how long to wait for the queries' terminations (a query still running)."""
        if self.listener is None:
            return
        self.listener.drained(timeout)
        self.listener.session.streams.removeListener(self.listener)
        self.listener = None

    @property
    def drop_ratio(self) -> float:
        return sum(self.dropped.values()) / self.offered if self.offered else 0.0


def hand_over(source: str, staging: str, name: str, backlog: tuple[int, int | None] = (0, 0)) -> None:
    """Put the file ``name`` of ``source`` in ``staging`` for the stream (:class:`FileAdmission`): a hard link,
    else a copy with the same modification time (its arrival), named with the ``backlog`` left behind it,
    ``(files, events)`` (:func:`~sparkcep.spark.validate.staged_name`: the stream observes it,
    :data:`BACKLOG_METRIC`), or under its own name when that one would be too long for the file system (the
    stream reads it, without a backlog).  A file gone meanwhile is not handed over (the stream would not have
    read it)."""
    src = os.path.join(source, name)
    try:
        _put(src, os.path.join(staging, staged_name(name, *backlog)), staging)
    except OSError as err:
        if err.errno != errno.ENAMETOOLONG:
            raise
        _put(src, os.path.join(staging, name), staging)


def _put(src: str, dst: str, staging: str) -> None:
    """A hard link ``dst`` to ``src``, else (another file system) a copy keeping its modification time; nothing
    if ``src`` is gone or ``dst`` is there."""
    if os.path.exists(dst):
        return
    try:
        os.link(src, dst)
    except FileNotFoundError:  # gone meanwhile
        return
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:
            raise
        tmp = os.path.join(staging, f".{uuid.uuid4().hex}.tmp")  # another file system
        try:
            shutil.copy2(src, tmp)
        except FileNotFoundError:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            return
        os.replace(tmp, dst)


def hand_over_slice(source: str, staging: str, names: list[str], rows: list[int | None],
                    behind: tuple[int, int | None] = (0, 0), done: set[str] | None = None) -> None:
    """Hand the files ``names`` of ``source`` (oldest first, of ``rows`` events each; None: unknown) over to
    ``staging`` (:func:`hand_over`), oldest first (a listing of ``staging`` meanwhile sees the oldest, as the
    writer wrote them), each named with what waits behind it: ``behind`` (the files and events left in
    ``source``) and the files of the slice after it, which the stream reads after it when it takes fewer files
    per micro-batch (``maxFilesPerTrigger``: oldest first).  Each file handed over is added to ``done`` at once:
    a slice that fails on one file is not handed over again (under names that carry another backlog, the stream
    read those files twice)."""
    files, events = behind
    backlogs = []
    for k in range(len(names) - 1, -1, -1):
        backlogs.append((files, events))
        files, events = files + 1, None if events is None or rows[k] is None else events + rows[k]
    for name, backlog in zip(names, reversed(backlogs), strict=True):
        hand_over(source, staging, name, backlog)
        if done is not None:
            done.add(name)


#: Compressed inputs whose rows :func:`count_rows` counts (Spark reads the codec from the name's extension).
_OPENERS = {".gz": "gzip", ".bz2": "bz2"}
#: Extensions of codecs whose files' rows are not counted (:func:`count_rows` says unknown).
_UNCOUNTED = (".deflate", ".lz4", ".snappy", ".zst", ".zstd", ".br", ".xz", ".lzo")


def count_rows(path: str, fmt: str = "json") -> int | None:
    """The events of an input file, as the stream reads them, where that is cheap: a Parquet file's rows from its
    footer; a JSON lines file's lines that are not blank, a CSV file's less its header (Spark's readers skip
    blank lines, and a row is a line), through gzip or bzip2 for ``.gz`` and ``.bz2``; None (unknown) for a
    file of another codec."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    suffix = os.path.splitext(path)[1].lower()
    if suffix in _UNCOUNTED:
        return None
    opener = open
    if suffix in _OPENERS:
        opener = __import__(_OPENERS[suffix]).open
    with opener(path, "rb") as f:
        lines = sum(1 for line in f if line.strip())
    return max(lines - 1, 0) if fmt == "csv" else lines


def admitted_input(path: str, fmt: str, *, follow: bool, checkpoint: str | None = None) -> str | None:
    """The staging directory a stream reads instead of ``path`` (:class:`FileAdmission` hands the input's files
    over to it, so that each micro-batch observes the backlog behind it), made next to the checkpoint
    (``CHECKPOINT/_admitted``, else a temporary directory) with the files there now handed over (the first
    micro-batch's, and the schema's; each named with the files after it, :func:`hand_over_slice`); None when
    there is no admission: not ``follow`` (a batch), not a local directory (``s3a://``, ``hdfs://``: read as
    they are), a partitioned directory (:func:`_reads_partitions`: Spark reads files in its ``key=value``
    subdirectories, and only top-level files are handed over: exactly those Spark reads otherwise), another
    stream's file-sink output (:func:`is_sink_output`: Spark reads only the files its log committed, and a staging
    directory has no such log; either refused for a ``checkpoint`` that read a staging directory), or a
    ``checkpoint`` a stream has already run with reading ``path`` itself (its file log holds ``path``'s files: read
    from elsewhere, they would all be read again).  ``fmt``: the input's format (the rows of each file are counted
    for the backlog, :func:`count_rows`)."""
    if not (follow and os.path.isdir(path)):
        return None
    if is_sink_output(path) or _reads_partitions(path):
        if checkpoint and _read_staged(checkpoint):  # read from the input now, every file would be read again
            now = "another stream's file-sink output" if is_sink_output(path) else \
                "partitioned (key=value directories holding files)"
            raise CEPError(f"the checkpoint {checkpoint} read its input through {checkpoint}{os.sep}_admitted, but "
                           f"{path} is now {now}, which a stream reads as it is: every file it read would be read "
                           "again; start from a new checkpoint")
        return None
    staging = os.path.join(checkpoint, "_admitted") if checkpoint else tempfile.mkdtemp(prefix="sparkcep-admitted-")
    if checkpoint and not os.path.isdir(staging) and _has_run(checkpoint):
        if _read_staged(checkpoint):  # read from the input, every file would be read again
            raise CEPError(f"the checkpoint {checkpoint} read its input through {staging}, which is gone: the "
                           "files it read cannot be told from new ones; restore that directory, or start from a "
                           "new checkpoint")
        return None
    os.makedirs(staging, exist_ok=True)
    before = followed(staging) if checkpoint else staging  # the input an earlier run named in its mark
    if before != staging and os.path.realpath(before) != os.path.realpath(path):
        raise CEPError(f"the checkpoint {checkpoint} followed the input {before}, not {path}: it knows the files it "
                       f"read by their names, so a file of {path} named like one of them would never be read; "
                       f"follow {before}, or start from a new checkpoint")
    with open(os.path.join(staging, STAGING_MARK), "w") as f:  # the stream observes the backlog staged names carry
        f.write(path)  # and a message about the input names it
    done = {original_name(n) for n in os.listdir(staging)}
    names = [name for name, _ in _data_files(path, done)]
    hand_over_slice(path, staging, names, [_rows_or_none(os.path.join(path, n), fmt) for n in names])
    return staging


def _reads_partitions(path: str) -> bool:
    """Whether the directory ``path`` is partitioned: Spark reads files inside its subdirectories
    (:func:`validate.spark_reads`, ``key=value`` directories holding files), or it holds a listed ``key=value``
    directory, empty yet (a file written there later would not be handed over: read as it is, Spark's stream stops
    with its error instead of losing the file quietly).  ``a.json`` beside a plain ``sub/`` is read alone, at the
    top level, and followed."""
    found = spark_reads(path)
    if found is None or found[1]:
        return True
    with os.scandir(path) as entries:
        return any(_partition_directory(e) for e in entries)


def _partition_directory(entry: os.DirEntry) -> bool:
    """Whether ``entry`` is a ``key=value`` directory Spark's listing keeps (:func:`validate.spark_lists`): a
    partition of the input it is in, holding files yet or not."""
    return "=" in entry.name and spark_lists(entry.name) and entry.is_dir()


def _checkpoints(checkpoint: str) -> list[str]:
    """``checkpoint`` and the checkpoints inside it (a workload's groups, ``CHECKPOINT/g<k>``; the ``--timeouts``
    query's), none if it is not there."""
    try:
        return [checkpoint, *(e.path for e in os.scandir(checkpoint) if e.is_dir())]
    except OSError:
        return []


def _read_staged(checkpoint: str) -> bool:
    """Whether a stream with ``checkpoint`` (or one inside it) read a staging directory: the first file of one of
    its file sources' log entries is in ``_admitted``."""
    for folder in _checkpoints(checkpoint):
        for log in glob.glob(os.path.join(folder, "sources", "*", "*")):
            try:
                with open(log) as f:
                    f.readline()  # the log's version
                    if "/_admitted/" in f.readline():
                        return True
            except (OSError, UnicodeDecodeError):
                continue
    return False


def _has_run(checkpoint: str) -> bool:
    """Whether a stream has planned a micro-batch with ``checkpoint`` (its ``offsets/`` hold one), or with one of
    the checkpoints inside it (:func:`_checkpoints`)."""
    for folder in _checkpoints(checkpoint):
        try:
            if any(n.isdigit() for n in os.listdir(os.path.join(folder, "offsets"))):
                return True
        except OSError:
            continue
    return False


def _data_files(directory: str, skip: set[str] = frozenset(),
                partitions: list[str] | None = None) -> list[tuple[str, float]]:
    """The files of ``directory`` a file source reads (:func:`validate.spark_reads_file`), besides those in ``skip``
    (not even stat'ed: the admission polls a directory of 10,000 handed-over files in a few ms, not ~40):
    ``(name, arrival s)``, oldest first (by modification time, then name).  ``partitions``: the paths of the
    listed ``key=value`` directories there are appended to it."""
    out = []
    with os.scandir(directory) as entries:
        for e in entries:
            if partitions is not None and _partition_directory(e):
                partitions.append(e.path)
            if e.name not in skip and spark_reads_file(e.name) and e.is_file():
                try:
                    out.append((e.name, e.stat().st_mtime))
                except FileNotFoundError:  # gone meanwhile
                    continue
    return sorted(out, key=lambda x: (x[1], x[0]))


def _rows_or_none(path: str, fmt: str) -> int | None:
    """:func:`count_rows`, None (unknown) for a file it cannot read (gone, or not of the format: the stream's
    dead letters will say what it holds)."""
    try:
        return count_rows(path, fmt)
    except (OSError, EOFError, ValueError):
        return None


#: How often (seconds) the admission removes the staged links no query can read again (:class:`StagedLinks`).
SWEEP_SECONDS = 10.0


def _log_entries(path: str, after: int) -> list[tuple[str, int]]:
    """The entries of the file-source log file ``path`` (Spark's ``FileStreamSourceLog``, a batch's file ``<n>``
    or a ``<n>.compact`` file holding every batch up to ``n``: a ``v1`` line, then one JSON line per file with its
    ``path`` URI and its source ``batchId``) of a batch after ``after``: ``(local path, batchId)``.  A log of
    another version or an entry that cannot be read raises ValueError (or OSError)."""
    out = []
    for entry in log_records(path):
        batch = int(entry["batchId"])
        if batch > after:
            out.append((unquote(urlparse(entry["path"]).path), batch))
    return out


def _committed_offsets(query: str) -> list[int | None] | None:
    """Per file source of the query checkpointed at ``query`` (``sources/<i>``), the source's log offset its
    newest committed micro-batch read up to (``offsets/<c>`` of the highest ``commits/<c>``: after the version
    and the batch's metadata, one ``{"logOffset":n}`` line per source; None for a source of another kind):
    ``[]`` before a commit; None when they cannot be read."""
    try:
        commits = [int(n) for n in os.listdir(os.path.join(query, "commits")) if n.isdigit()]
    except FileNotFoundError:
        return []
    except OSError:
        return None
    if not commits:
        return []
    try:
        with open(os.path.join(query, "offsets", str(max(commits))), encoding="utf-8") as f:
            lines = f.read().splitlines()
        return [None if line.strip() == "-" else int(json.loads(line)["logOffset"]) for line in lines[2:]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


class StagedLinks:
    """The staged files (links, or copies) of the admission control's ``staging`` directory that can never be
    read again, removed (:meth:`sweep`), so that a file the user deletes from ``source`` (a retention cleanup)
    frees its disk: one is removed only when both hold (anything that cannot be read keeps them all):

    - its input file is gone: ``source`` no longer holds its name (:func:`original_name`; a link's other name,
      a copy's original), so the admission can never hand it over again, not even after a restart, which lists
      ``staging`` for what was handed over (a hard link whose count of links is 1 but whose name holds another
      file now is kept: a copy's count is 1 too); and
    - every query checkpointed in ``checkpoint`` (it, and the checkpoints inside it: ``_timeouts``, a workload's
      ``g<k>``: :func:`_checkpoints`; a query's holds Spark's ``metadata``), and every query of this run
      (``queries``: their checkpoints' names inside ``checkpoint``, ``""`` for itself) even before Spark made
      its checkpoint (a workload's ``g1`` starts after ``g0`` drained the input with ``--once``; a ``--timeouts``
      or a workload's group added at a restart), has committed a micro-batch that read it: its file source's
      log (``sources/<i>/<n>``, ``<n>.compact``) lists it at a log offset up to that of the query's newest
      commit (:func:`_committed_offsets`).

    Each source log is read once, incrementally (:attr:`_logs`: what was read of it, up to which log offset),
    from its newest ``.compact`` file on (which holds every entry before it)."""

    def __init__(self, staging: str, source: str, checkpoint: str, queries: tuple[str, ...] = ()):
        self.staging, self.source, self.checkpoint = staging, source, checkpoint
        self.queries = tuple(os.path.join(checkpoint, q) if q else checkpoint for q in queries)
        self._real = os.path.realpath(staging)
        #: per source log directory: (the log offset read up to, {staged name: log offset that read it})
        self._logs: dict[str, tuple[int, dict[str, int]]] = {}

    def _queries(self) -> list[str]:
        """The checkpoints of the queries that may read ``staging``: those holding Spark's ``metadata``, and this
        run's (:attr:`queries`, which commit nothing before they start)."""
        found = [q for q in _checkpoints(self.checkpoint)
                 if os.path.realpath(q) != self._real and os.path.isfile(os.path.join(q, "metadata"))]
        return found + [q for q in self.queries if q not in found]

    def _read_log(self, folder: str) -> dict[str, int]:
        """``{staged name: log offset}`` of the source log ``folder``, its new files read (ValueError, OSError:
        one cannot be read)."""
        upto, names = self._logs.get(folder, (-1, {}))
        batches = []
        for n in os.listdir(folder):
            stem = n[:-len(".compact")] if n.endswith(".compact") else n
            if stem.isdigit() and int(stem) > upto:
                batches.append((int(stem), n))
        compacts = [b for b, n in batches if n.endswith(".compact")]
        if compacts:  # the newest compact file holds every entry up to it: the files before it (Spark deletes
            # them only 10 minutes later, spark.sql.streaming.fileSource.log.cleanupDelay) are not read
            batches = [(b, n) for b, n in batches if b >= max(compacts)]
        here: dict[str, bool] = {}  # per directory of the entries: whether it is ``staging``
        for batch, n in sorted(batches):
            for path, b in _log_entries(os.path.join(folder, n), upto):
                parent = os.path.dirname(path)
                if parent not in here:
                    here[parent] = os.path.realpath(parent) == self._real
                if here[parent]:
                    names.setdefault(os.path.basename(path), b)
            upto = batch
        self._logs[folder] = (upto, names)
        return names

    def _committed(self, query: str) -> set[str] | None:
        """The staged names the query checkpointed at ``query`` has committed a micro-batch reading; None: its
        checkpoint cannot be read."""
        offsets = _committed_offsets(query)
        if offsets is None:
            return None
        out = set()
        for i, offset in enumerate(offsets):
            folder = os.path.join(query, "sources", str(i))
            if offset is None or not os.path.isdir(folder):
                continue
            try:
                names = self._read_log(folder)
            except (OSError, ValueError, KeyError, TypeError):
                return None
            out.update(name for name, b in names.items() if b <= offset)
        return out

    def removable(self) -> list[str]:
        """The staged names no query can read again and whose input is gone (none if a checkpoint cannot be
        read, or no query has one, or ``source`` itself is not there: moved away or unmounted for a while, its
        files are not known to be gone, and a file removed then would be handed over again at a restart)."""
        queries = self._queries()
        if not queries or not os.path.isdir(self.source):
            return []
        read = None
        for query in queries:
            committed = self._committed(query)
            if committed is None:
                return []
            read = committed if read is None else read & committed
        return [name for name in sorted(read) if not os.path.lexists(os.path.join(self.source, original_name(name)))
                and os.path.lexists(os.path.join(self.staging, name))]

    def sweep(self) -> list[str]:
        """Remove the staged files :meth:`removable` says; the names removed."""
        gone = set()
        for name in self.removable():
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(self.staging, name))
                gone.add(name)
        for folder, (upto, names) in self._logs.items():  # forgotten: never listed again
            self._logs[folder] = (upto, {n: b for n, b in names.items() if n not in gone})
        return sorted(gone)


class FileAdmission:
    """Admission control of a followed directory (issue 17), applied: the stream reads ``staging``, not
    ``source``; :meth:`step` (every ``poll`` seconds in a thread, :meth:`start`/:meth:`stop`) hands the files
    that arrived in ``source`` over to it (a hard link, else a copy, keeping the modification time, which is
    the events' arrival), oldest first, each named with the backlog behind it (:func:`hand_over_slice`: the
    stream observes it, :data:`~sparkcep.spark.validate.BACKLOG_METRIC`).

    Without a shedding stage (``shedding`` None) there is no bound: every file waiting is handed over at each
    step, of any format (``fmt``; rows counted as :func:`count_rows` can), and the stream reads what it would
    read from ``source`` itself.  With one (JSON lines), one slice per micro-batch: once Spark has planned a
    micro-batch after
    the last hand-over (it took that slice: its offsets are in the ``checkpoint``'s ``offsets/``), the files
    waiting are handed over as the backlog controller's last :class:`Admission` allows
    (:func:`~sparkcep.runtime_udfs.shedding.controller.admit_files`:
    at most ``admit`` events; files that arrive while that slice waits are added to it within the bound), and
    any file waiting longer than ``expire`` is shed whole instead, its events
    counted per type in the stage's totals (``shedding.dropped``) and, with ``dropped_output``, written there
    as they were (JSON lines).  Spark's own limits (``maxFilesPerTrigger``, ``maxBytesPerTrigger``) are fixed
    when a query starts; this one follows the controller from batch to batch.  JSON lines input.

    The next slice is staged while the micro-batch that read the last one runs, so that when it ends Spark's
    next micro-batch reads data: handed over only once that batch had completed (the listener's progress, which
    comes after Spark has already planned the next batch), the slice came too late for it, and Spark ran a
    micro-batch without data in between (the watermark had moved), 1-3 s on 2 cores, which every slice then
    waited through.  Without a ``checkpoint`` the old rule stays: a micro-batch that started after the
    hand-over has completed.  A hand-over while Spark lists the directory can miss the batch being planned;
    its files go to the next one, with the next slice.  While a slice waits, the files that arrive are added
    to it within the admission bound (:meth:`_top_up`): held until the next batch was planned, they went to
    the batch after it, and an event waited through three micro-batches instead of two."""

    def __init__(self, source: str, staging: str, shedding: Shedding | None, type_col: str = "type",
                 dropped_output: str | None = None, poll: float = 0.1, checkpoint: str | None = None,
                 fmt: str = "json", queries: tuple[str, ...] = ()):
        self.source, self.staging, self.shedding = source, staging, shedding
        self.type_col, self.dropped_output, self.poll, self.fmt = type_col, dropped_output, poll, fmt
        self.offsets = os.path.join(checkpoint, "offsets") if checkpoint else None
        os.makedirs(staging, exist_ok=True)
        #: the staged files no query can read again, removed once their input is gone (:meth:`tidy`)
        #: (``queries``: the checkpoints inside ``checkpoint`` of the queries this run starts, :class:`StagedLinks`)
        self.links = StagedLinks(staging, source, checkpoint, queries) if checkpoint else None
        self.swept_at: float | None = None
        # a restart from the checkpoint: what was handed over already
        self.done = {original_name(n) for n in os.listdir(staging)}
        if shedding is not None:
            shedding.feeder = self
        #: per hand-over, ``(names, files, events)``: the backlog left behind it, which its last file's name carries
        self.staged: list[tuple[list[str], int, int | None]] = []
        # events per waiting file (name, size), counted once (None: not countable, count_rows)
        self._rows: dict[tuple[str, int], int | None] = {}
        self._counted: dict[tuple[str, int], int | None] = {}  # the same for :meth:`backlog` (other threads)
        #: the arrivals (epoch ms) of the files of ``source`` Spark reads, at the last :meth:`backlog`
        self.arrivals: list[int] = []
        self.expired: list[str] = []
        #: the ``key=value`` directories of ``source`` at the last :meth:`pending` (:meth:`partitioned`)
        self.partitions: list[str] = []
        self.handed_at = 0.0
        self.planned_at: int | None = None  # the newest micro-batch planned at the last hand-over
        self.slice_rows = 0  # the events handed over since then (the slice the next micro-batch reads)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.alive = None

    def pending(self) -> list[tuple[str, float]]:
        """The files of ``source`` neither handed over nor shed: ``(name, arrival s)``, oldest first (the
        ``key=value`` directories there noted, :meth:`partitioned`)."""
        partitions: list[str] = []
        out = _data_files(self.source, self.done, partitions)
        self.partitions = partitions
        return out

    def partitioned(self) -> str | None:
        """A file Spark would read in a ``key=value`` directory of ``source`` (at the last :meth:`pending`; in it
        at any depth, :func:`validate.spark_lists`), or None.  The admission follows an input without partitions
        (:func:`admitted_input`) and hands over its top-level files only: such a file, arrived since, is not
        read (Spark's own stream stops with an error on it: its partition column changes the schema)."""
        for directory in self.partitions:
            for root, dirs, names in os.walk(directory):
                dirs[:] = sorted(d for d in dirs if spark_lists(d))
                for name in sorted(names):
                    if spark_reads_file(name):
                        return os.path.join(root, name)
        return None

    def planned(self) -> int | None:
        """The id of the newest micro-batch Spark has planned (its offsets written; -1: none yet), or None
        without a checkpoint."""
        if self.offsets is None:
            return None
        try:
            names = os.listdir(self.offsets)
        except FileNotFoundError:
            return -1
        return max((int(n) for n in names if n.isdigit()), default=-1)

    def step(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        if self.shedding is None:  # no bound: every file waiting
            admit, expire = [name for name, _ in self.pending()], []
        else:
            admit, expire = admit_files(self.pending(), now, self.shedding.admission, self.shedding._per_file)
        for name in expire:
            self._shed(name)
        planned = self.planned()
        if self.shedding is None:
            fresh = True
        elif planned is None:  # no checkpoint to watch: a micro-batch that started after the hand-over completed
            fresh = (self.shedding._prev_start or 0.0) >= self.handed_at
        else:  # a micro-batch planned after the hand-over took the slice; the next is staged while it runs
            fresh = self.planned_at is None or planned > self.planned_at
        fresh = fresh or now - self.handed_at >= self.shedding.controller.bound
        if not fresh:  # the last slice is not read yet: it is topped up to the admission bound, so that what
            # arrives while a batch runs goes to the next batch, not (held until that one is planned) the one
            # after it, which made an event wait through three batches instead of two
            admit = self._top_up(admit)
        if not admit:
            return
        backlog = self.waiting(set(admit) | set(expire))
        counts = [self._file_rows(name) for name in admit]
        hand_over_slice(self.source, self.staging, admit, counts, backlog, self.done)
        self.done.update(admit)
        self.staged.append((admit, *backlog))
        rows = sum(n or 0 for n in counts)
        if fresh:
            self.handed_at, self.planned_at, self.slice_rows = now, planned, rows
        else:
            self.slice_rows += rows
        self._rows = {k: n for k, n in self._rows.items() if k[0] not in self.done}

    def tidy(self, now: float | None = None) -> list[str]:
        """Remove the staged files whose input is gone and which every query of the ``checkpoint`` has committed
        (:class:`StagedLinks`), at most every :data:`SWEEP_SECONDS`: the names removed (none without a
        checkpoint)."""
        now = time.time() if now is None else now
        if self.links is None or (self.swept_at is not None and now - self.swept_at < SWEEP_SECONDS):
            return []
        self.swept_at = now
        return self.links.sweep()

    def _file_rows(self, name: str, gone: int | None = None) -> int | None:
        """The events of the waiting file ``name`` (counted once per name and size; None if they cannot be
        counted, :func:`count_rows`), ``gone`` if the file is gone (one stat per call)."""
        try:
            key = (name, os.path.getsize(os.path.join(self.source, name)))
        except OSError:  # gone meanwhile
            return gone
        if key not in self._rows:
            self._rows[key] = _rows_or_none(os.path.join(self.source, name), self.fmt)
        return self._rows[key]

    def _top_up(self, admit: list[str]) -> list[str]:
        """Of the files ``admit`` (oldest first), those that fit, with the slice handed over already
        (:attr:`slice_rows` events), in the controller's admission bound (all of them without a bound)."""
        decision = self.shedding.admission
        if decision is None or decision.admit is None:
            return admit
        room, out = decision.admit - self.slice_rows, []
        for name in admit:
            room -= self._file_rows(name) or 0
            if room < 0:
                break
            out.append(name)
        return out

    def waiting(self, leaving: set[str] = frozenset()) -> tuple[int, int | None]:
        """``(files, events)`` of ``source`` neither handed over nor shed, besides those ``leaving`` (the slice
        being handed over and the files being shed): the backlog the slice's names carry (events None: one of
        them cannot be counted, :func:`count_rows`)."""
        rows = [self._file_rows(name, gone=_GONE) for name, _ in self.pending() if name not in leaving]
        rows = [n for n in rows if n != _GONE]  # gone since the listing
        return len(rows), _total(rows)

    def backlog(self, newest_ms: float | None) -> tuple[int, int | None]:
        """``(files, events)`` of ``source`` arrived after ``newest_ms`` (the newest arrival read so far; None:
        every file) and not shed whole, handed over or not, the events counted exactly (None: a file's cannot
        be, :func:`count_rows`): the backlog the progress line and :meth:`sparkcep.LiveStream.backlog` show, and
        the controller is told (:meth:`unread`)."""
        files, rows = self._unread(newest_ms)
        return files, _total(rows)

    def _unread(self, newest_ms: float | None) -> tuple[int, list[int | None]]:
        """The files of :meth:`backlog` and the events of each (None: not countable).  The listing's arrivals
        (epoch ms) of every file Spark reads there, shed ones too, are kept as :attr:`arrivals` (the controller
        counts the files read from them: one listing of ``source`` a micro-batch)."""
        shed, counted, cache = set(self.expired), {}, self._counted  # the listener's thread and the progress loop
        stamps = []
        with os.scandir(self.source) as entries:
            for e in entries:
                if not spark_reads_file(e.name) or not e.is_file():
                    continue
                try:
                    st = e.stat()
                except OSError:  # gone meanwhile
                    continue
                stamps.append(st.st_mtime_ns // 10**6)
                if e.name in shed or (newest_ms is not None and st.st_mtime_ns // 10**6 <= newest_ms):
                    continue
                key = (e.name, st.st_size)
                counted[key] = cache[key] if key in cache else _rows_or_none(e.path, self.fmt)
        self._counted, self.arrivals = counted, stamps  # the files read are forgotten
        return len(counted), list(counted.values())

    def unread(self, newest_ms: float | None) -> int:
        """The events of :meth:`backlog` (the controller's backlog), an uncounted file's as 0: one file of a codec
        :func:`count_rows` cannot read does not hide the others'."""
        return sum(n or 0 for n in self._unread(newest_ms)[1])

    def _shed(self, name: str) -> None:
        path = os.path.join(self.source, name)
        counts: dict[str, int] = {}
        records = []
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    t = json.loads(line).get(self.type_col)
                except (ValueError, AttributeError):
                    t = None  # a malformed record: shed with its file, counted as <other>
                t = "<other>" if t is None or t not in self.shedding.types else t
                counts[t] = counts.get(t, 0) + 1
                records.append(line if line.endswith("\n") else line + "\n")
        if self.dropped_output and records:
            os.makedirs(self.dropped_output, exist_ok=True)
            tmp = os.path.join(self.dropped_output, f".expired-{uuid.uuid4().hex}.tmp")
            with open(tmp, "w") as f:
                f.writelines(records)
            os.replace(tmp, os.path.join(self.dropped_output, f"expired-{uuid.uuid4().hex}.json"))
        self.shedding.count_expired(counts)
        self.done.add(name)
        self.expired.append(name)

    def _run(self) -> None:
        said = set()
        for k in itertools.count(1):
            if self._stop.wait(self.poll) or (k % 10 == 0 and self.alive is not None and not self.alive()):
                return  # stopped, or (checked once a second) the stream it feeds has ended
            try:
                self.step()
                self.tidy()
                late = self.partitioned()
                if late is not None:
                    raise OSError(f"{late} is in a partition directory, which this stream does not read: it "
                                  "started over an input without partitions and reads its top-level files; to read "
                                  "partitioned input, stop it and start a run with a new checkpoint")
            except OSError as err:  # the input changed under it: the next step lists it again (the thread must
                # not end: the stream would stop getting files); each distinct error said once
                if str(err) not in said:
                    said.add(str(err))
                    print(f"sparkcep: admission control of {self.source}: {err}", file=sys.stderr, flush=True)

    def start(self, alive=None) -> FileAdmission:
        """Hand over what is there, then every ``poll`` seconds in a thread until :meth:`stop`, or until
        ``alive()`` (a stream's ``isActive``; None: not asked) is false: a stream that failed or was stopped
        directly, not through its owner, leaves no thread polling behind it."""
        self.alive = alive
        self.step()
        self.tidy()  # a restart: what the checkpoint committed before, its input gone since
        self._thread = threading.Thread(target=self._run, name="sparkcep-admission", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)


#: :meth:`FileAdmission._file_rows` of a file gone since it was listed: a count no file has
_GONE = -1


def _total(rows: list[int | None]) -> int | None:
    """The sum of ``rows``, None (unknown) if one of them is."""
    return None if None in rows else sum(rows)


def follow_input(shedding: Shedding | None, path: str, staging: str | None, type_col: str = "type",
                 dropped_output: str | None = None, checkpoint: str | None = None,
                 fmt: str = "json", once: bool = False, queries: tuple[str, ...] = ()) -> FileAdmission | None:
    """The admission control of a stream over the directory ``path`` it follows (``run --stream``,
    :func:`sparkcep.apply_stream`, the generated jobs, the notebook), handing ``path``'s files over to its
    ``staging`` directory (:func:`admitted_input`; :class:`FileAdmission`, not started yet; the ``checkpoint``
    the stream writes), or None without one (no ``staging``).  With a shedding stage, its controller is driven
    by the latency and the backlog of ``path`` (:meth:`Shedding.follow_source`, a local directory) and, over
    JSON lines (``fmt``) and not ``once`` (a drain of the files there at the start, ``--once``), the admission is
    the stage's: bounded by it, and shedding whole files that waited past its expiry age; otherwise no bound.
    Either way the controller's backlog is the admission's count (:meth:`FileAdmission.backlog`).  ``queries``:
    the checkpoints inside ``checkpoint`` of the queries reading ``staging`` (:class:`StagedLinks`)."""
    if shedding is not None and os.path.isdir(path):
        shedding.follow_source(path)
    if staging is None:
        return None
    bounded = shedding if fmt == "json" and not once else None
    admission = FileAdmission(path, staging, bounded, type_col, dropped_output, checkpoint=checkpoint, fmt=fmt,
                              queries=queries)
    if shedding is not None:  # the controller's backlog is the admission's count, bounded or not
        shedding.feeder = admission
    return admission


def _read_sample(directory: str, type_col: str = "type", ts_col: str = "ts") -> list[dict]:
    """The retraining sample the tasks wrote (JSON lines), in engine form (see :func:`training_events`)."""
    try:
        names = sorted(f for f in os.listdir(directory) if f.endswith(".json"))
    except OSError:
        return []
    frames = [pd.read_json(os.path.join(directory, f), lines=True, convert_dates=False) for f in names]
    frames = [f for f in frames if not f.empty]
    if not frames:
        return []
    return training_events(pd.concat(frames, ignore_index=True), None, type_col=type_col, ts_col=ts_col)


class _Listener(StreamingQueryListener):
    """Feeds each micro-batch's progress to the stage's controller, and knows which of the session's queries
    are still sending it events (started, their termination not delivered yet): Spark delivers a query's
    events one after the other, the termination last, so once every query it saw start has had its
    termination delivered no call to this listener is under way or queued (:meth:`Shedding.detach`)."""

    def __init__(self, handle: Shedding, session):
        self.handle = handle
        self.session = session
        self._running: set[str] = set()
        self._changed = threading.Condition()

    def onQueryStarted(self, event):  # noqa: N802 - PySpark's names
        with self._changed:
            self._running.add(str(event.runId))

    def onQueryProgress(self, event):  # noqa: N802
        self.handle.on_progress(event.progress)

    def onQueryIdle(self, event):  # noqa: N802
        pass

    def onQueryTerminated(self, event):  # noqa: N802
        with self._changed:
            self._running.discard(str(event.runId))
            self._changed.notify_all()

    def drained(self, timeout: float) -> bool:
        """Wait (up to ``timeout`` s) until the termination of every query seen to start has been delivered."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._running, timeout)


def install(df: DataFrame, shedder: Shedder, *, bound: float, safety: float = 0.8, type_col: str = "type",
            ts_col: str = "ts", dropped_output: str | None = None, control_dir: str | None = None,
            listen: bool = True, retrain: bool = True, drift_threshold: float = 0.15,
            drift_min_events: int = 2000, sample_limit: int = 5000) -> tuple[DataFrame, Shedding]:
    """Put the shedding stage on ``df`` (the filtered events, before the shuffle).  Returns the kept rows and
    the stage's handle; with ``listen`` a ``StreamingQueryListener`` drives the controller (streaming).

    With ``retrain`` (and a shedder from :func:`~sparkcep.runtime_udfs.shedding.shedder.fit_gspice`, which knows how it
    was
    trained), the driver watches the type shares of the offered events; when they move more than
    ``drift_threshold`` (total variation, over at least ``drift_min_events`` events) from the training
    stream's, the tasks write up to ``sample_limit`` events per partition of the next batch(es), the driver
    refits the model on them and the tasks switch to it (``Shedding.retrains`` counts the refits)."""
    spark = df.sparkSession
    name = f"sparkcep_shedding_{next(_ids)}"
    control_dir = control_dir or tempfile.mkdtemp(prefix="sparkcep-shedding-")
    os.makedirs(control_dir, exist_ok=True)
    control = ControlFile(os.path.join(control_dir, f"{name}.json"))
    control.write(0.0)
    types = shedder.coder.types
    handle = Shedding(name, types, BatchController(bound, safety), control, control_dir=control_dir,
                      columns=(type_col, ts_col))
    refit = getattr(shedder, "refit", None)
    if retrain and refit is not None:
        handle.refit = refit
        handle.drift = TypeDrift.from_share(refit.reference, drift_threshold, drift_min_events)
        handle.min_sample = min(1000, sample_limit)
    model = spark.sparkContext.broadcast(shedder)
    stage = stage_function(model, control.path, type_col, ts_col, dropped_output, sample_limit)
    schema = StructType(df.schema.fields + [StructField(SHED, BooleanType(), False)])
    marked = df.mapInPandas(stage, schema)
    shed = F.col(SHED)
    counts = [F.count(F.lit(1)).alias("offered"), F.sum(shed.cast("long")).alias("dropped")]
    counts += [F.sum((shed & (F.col(type_col) == t)).cast("long")).alias(f"dropped_{i}") for i, t in enumerate(types)]
    counts += [F.sum((F.col(type_col) == t).cast("long")).alias(f"offered_{i}") for i, t in enumerate(types)]
    observed = marked.observe(name, *counts)
    kept = observed.filter(~shed).drop(SHED)
    if listen:
        handle.listener = _Listener(handle, spark)
        spark.streams.addListener(handle.listener)
    return kept, handle


def training_events(training, spec, *, ts_col: str = "ts", type_col: str = "type", limit: int = 50_000) -> list[dict]:
    """Training events for :func:`~sparkcep.runtime_udfs.shedding.shedder.fit_gspice` from a batch Spark DataFrame, a
    pandas DataFrame or a list of dicts: engine form (``type``, ``ts`` as a number, ms for timestamps), in
    ``ts`` order, with :data:`~sparkcep.runtime_udfs.shedding.observations.SID` = 0..n-1."""
    from sparkcep.runtime_udfs.shedding.observations import SID
    from sparkcep.spark.operator import MatchOperator

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
