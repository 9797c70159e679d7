"""Progress of a running sparkcep streaming query, from its Spark metrics.

:class:`Totals` adds up the observed metrics of :mod:`sparkcep.spark.sinks` over micro-batches; :func:`follow`
waits for a query and prints one line per micro-batch, e.g.::

    batch 3: read 25000 events (+6250), 412 results, 3 dead letters, 1 late, 11 ignored, 5830 events/s

``read`` counts every record of the input (valid events plus dead letters); ``ignored`` are valid events no
component of the query can use; ``events/s`` is the batch's records over its trigger duration.  A stream that
observes its events' arrival adds their latency (:func:`batch_latency`) and the backlog; one whose results
carry their arrival adds the results' latency (:func:`result_latency`).  Both functions take a progress dict
(``json.loads(progress.json)``), so a user's ``StreamingQueryListener`` can compute the same figures.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime

from sparkcep.spark.sinks import METRICS
from sparkcep.spark.validate import ARRIVAL_METRIC, is_sink_output, sink_files, spark_reads, spark_reads_file


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


def _idle(progress: dict) -> bool:
    """A progress report of a query waiting for data (a continuous run reports one every few seconds): no batch
    ran: offsets were looked at (``latestOffset``), no batch was added (``addBatch``), nothing was read."""
    durations = progress.get("durationMs") or {}
    return "latestOffset" in durations and "addBatch" not in durations and not progress.get("numInputRows")


def batch_end_ms(progress: dict) -> float | None:
    """When a micro-batch ended (epoch ms): its trigger's start (``timestamp``) plus its duration."""
    stamp = progress.get("timestamp")
    if not stamp:
        return None
    start = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000
    return start + ((progress.get("durationMs") or {}).get("triggerExecution") or 0)


def batch_latency(progress: dict) -> tuple[float, float] | None:
    """``(p50, p99)`` in seconds of a micro-batch's valid events from their arrival (their file's modification
    time, :func:`sparkcep.spark.validate.observed_arrival`) to the end of the micro-batch that read them (its
    output committed: a result an event completes comes out there), or None (no arrival observed)."""
    arrival = (progress.get("observedMetrics") or {}).get(ARRIVAL_METRIC) or {}
    end = batch_end_ms(progress)
    if end is None or not arrival.get("arrived") or arrival.get("median") is None:
        return None
    oldest = arrival.get("p01") if arrival.get("p01") is not None else arrival.get("oldest")
    return max(end - arrival["median"], 0) / 1000, max(end - oldest, 0) / 1000


def result_latency(progress: dict) -> tuple[float, float] | None:
    """``(p50, p99)`` in seconds of a micro-batch's results from their arrival (each result's
    :data:`~sparkcep.spark.validate.RESULT_ARRIVAL`, the arrival of its events, observed by
    :func:`sparkcep.spark.sinks.routed` as ``result_arrival_median`` and ``result_arrival_p01`` of the
    ``sparkcep_output`` metric) to the end of the micro-batch that wrote them, or None (no result with an
    arrival)."""
    output = (progress.get("observedMetrics") or {}).get(METRICS[-1]) or {}
    end = batch_end_ms(progress)
    if end is None or not output.get("results_arrived") or output.get("result_arrival_median") is None:
        return None
    oldest = output.get("result_arrival_p01", output["result_arrival_median"])
    return max(end - output["result_arrival_median"], 0) / 1000, max(end - oldest, 0) / 1000


def arrivals(directory: str | None) -> list[int]:
    """The modification times (epoch ms: their arrival) of the files of a local input ``directory`` that Spark
    reads (:func:`~sparkcep.spark.validate.spark_reads`: a partitioned input's in its ``key=value`` directories;
    another stream's file-sink output: the files its log committed, :func:`~sparkcep.spark.validate.sink_files`,
    else its top-level files).  None of them for a missing or non-local directory."""
    if directory is None or not os.path.isdir(directory):
        return []
    found = spark_reads(directory)
    paths = found[0] if found is not None else sink_files(directory) if is_sink_output(directory) else None
    if paths is None:  # a sink's log that cannot be read: its top level
        with os.scandir(directory) as entries:
            paths = [e.path for e in entries if e.is_file() and spark_reads_file(e.name)]
    out = []
    for path in paths:
        try:
            out.append(os.stat(path).st_mtime_ns // 10**6)
        except FileNotFoundError:  # gone meanwhile
            continue
    return out


def backlog_files(directory: str | None, newest_ms: float | None) -> int | None:
    """The files of a local input ``directory`` not read yet, as far as one can tell from outside: those Spark
    reads there (:func:`arrivals`) modified after ``newest_ms`` (the newest arrival read so far; the file source
    reads files oldest first).  None when the directory is not local or nothing has been read."""
    if directory is None or newest_ms is None or not os.path.isdir(directory):
        return None
    return sum(t > newest_ms for t in arrivals(directory))


@dataclass(frozen=True)
class InputDirectory:
    """The input directory of a stream that reads it itself (no admission control), with the admission's
    :meth:`backlog`, so that :func:`unprocessed` asks both alike."""

    path: str

    def backlog(self, newest_ms: float | None) -> tuple[int, int | None] | None:
        """``(files, None)``: :func:`backlog_files` (events unknown); None when that is None."""
        files = backlog_files(self.path, newest_ms)
        return None if files is None else (files, None)


def unprocessed(source, newest_ms: float | None) -> tuple[int, int | None] | None:
    """The backlog after a micro-batch: ``(files, events)`` of the input not read yet, as ``source`` counts it
    (its ``backlog(newest_ms)``): the admission control following the input
    (:meth:`sparkcep.spark.shedding.FileAdmission.backlog`: the one count its controller and the stream's
    observed metrics use; events None when a file's cannot be counted), else the input directory
    (:class:`InputDirectory`: events unknown).  None when nothing has been read yet or the input is not a local
    directory."""
    if newest_ms is None or source is None:
        return None
    return source.backlog(newest_ms)


@dataclass
class Totals:
    """Counts summed over the micro-batches seen (each batch id once); per micro-batch with events, its
    latency (:func:`batch_latency`) and the backlog after it (:func:`unprocessed`, when ``source`` is a local
    directory or the admission control following it)."""

    counts: dict[str, int] = field(default_factory=dict)
    batches: set[int] = field(default_factory=set)
    #: a continuous run was stopped (SIGINT/SIGTERM), :func:`follow`
    stopped: bool = False
    #: the input directory (a path, ``str`` or ``os.PathLike``: made an :class:`InputDirectory`) or the admission
    #: control following it (for the backlog, :func:`unprocessed`), or None
    source: object = None
    #: per micro-batch with events: ``(batch id, events, p50 s, p99 s, backlog files or None)``
    latencies: list[tuple] = field(default_factory=list)
    #: per micro-batch with results that carry their arrival: ``(batch id, results, p50 s, p99 s)``
    result_latencies: list[tuple] = field(default_factory=list)
    newest: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.source, str | os.PathLike):
            self.source = InputDirectory(os.fspath(self.source))

    def add(self, progress: dict) -> str | None:
        """Add one progress dict; returns its progress line (None for a batch already counted)."""
        batch = progress.get("batchId")
        if batch in self.batches or _idle(progress):
            return None
        self.batches.add(batch)
        now = batch_counts(progress)
        for k, v in now.items():
            self.counts[k] = self.counts.get(k, 0) + v
        ms = (progress.get("durationMs") or {}).get("triggerExecution") or 0
        rate = f"{now['read'] / (ms / 1000):.0f} events/s" if ms and now["read"] else "idle"
        c = self.counts
        line = (f"batch {batch}: read {c['read']} events (+{now['read']}), {c['results']} results, "
                f"{c['dead_letters']} dead letters, {c['late']} late, {c['ignored']} ignored, {rate}")
        latency = batch_latency(progress)
        if latency is not None:
            arrival = progress["observedMetrics"][ARRIVAL_METRIC]
            if arrival.get("newest") is not None:
                self.newest = max(self.newest or 0, arrival["newest"])
            backlog = unprocessed(self.source, self.newest)
            self.latencies.append((batch, int(arrival["arrived"]), *latency, backlog and backlog[0]))
            line += f", latency p50 {latency[0]:.1f} s p99 {latency[1]:.1f} s"
            if backlog is not None:
                line += f", backlog {backlog[0]} files" + ("" if backlog[1] is None else f" ({backlog[1]} events)")
        results = result_latency(progress)
        if results is not None:
            arrived = int(progress["observedMetrics"][METRICS[-1]]["results_arrived"])
            self.result_latencies.append((batch, arrived, *results))
            line += f", result latency p50 {results[0]:.1f} s p99 {results[1]:.1f} s"
        return line


class StopSignals:
    """While entered, SIGINT (Ctrl-C) and SIGTERM ask a continuous run to stop instead of killing it: the first
    sets :attr:`asked` (the run stops between micro-batches, :func:`follow`), a second one makes the stop
    immediate (:attr:`urgent`).  Outside the main thread (where Python cannot take signals) it does nothing."""

    SIGNALS = ("SIGINT", "SIGTERM")

    def __init__(self) -> None:
        self.asked = self.urgent = False
        self._previous: dict = {}

    def _handle(self, signum, frame) -> None:  # noqa: ARG002 - signal's signature
        self.urgent, self.asked = self.asked, True

    def __enter__(self) -> StopSignals:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                number = getattr(signal, name)
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        import signal

        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()


def stop_between_batches(query, signals: StopSignals | None = None, poll: float = 0.01) -> None:
    """Stop ``query`` once no micro-batch is running (no trigger active: between two, or waiting for data),
    so that the last one has committed (its output written, its offsets and state in the checkpoint).  A second
    signal (``signals.urgent``) stops it at once; the checkpoint then re-runs the interrupted batch on a
    restart (and :func:`sparkcep.spark.sinks.discard_uncommitted` removes what it wrote meanwhile)."""
    while query.isActive and not (signals is not None and signals.urgent):
        if not query.status.get("isTriggerActive"):
            break
        time.sleep(poll)
    query.stop()


def follow(query, out=None, poll: float = 1.0, signals: StopSignals | None = None, source=None) -> Totals:
    """Wait for ``query`` to end, printing a line per micro-batch to ``out`` (default: the ``sys.stderr`` of the
    moment, not of import time); the totals at the end.  Raises the query's exception if it failed.
    ``signals`` (a continuous run): once it is asked to stop, the query is stopped between micro-batches
    (:func:`stop_between_batches`) and :attr:`Totals.stopped` is set.  ``source``: the input directory or the
    admission control following it, for the backlog (:func:`unprocessed`)."""
    return follow_all([query], out, poll, signals, source)[0]


def follow_with(query, beside: list, out=None, signals: StopSignals | None = None,
                source=None) -> Totals:
    """:func:`follow` ``query`` with the started queries ``beside`` it (the timed-out partial matches'), each
    ended with it: after it has drained if it ends by itself (``--once``), between their micro-batches if a
    signal stopped it; any still active (``query`` failed) is stopped."""
    try:
        totals = follow(query, out=out, signals=signals, source=source)
        for other in beside:
            if totals.stopped:
                stop_between_batches(other, signals)
            else:
                other.awaitTermination()
    finally:
        for other in beside:
            if other.isActive:
                other.stop()
    return totals


def follow_all(queries: list, out=None, poll: float = 1.0, signals: StopSignals | None = None,
               source=None) -> list[Totals]:
    """:func:`follow` for queries that run together (a workload's groups, each its own query): until all end,
    a line per micro-batch (prefixed ``g<k>`` with several), the totals of each; a stop signal stops each
    between its micro-batches."""
    totals = [Totals(source=source) for _ in queries]
    out = sys.stderr if out is None else out

    def drain() -> None:
        for k, (query, total) in enumerate(zip(queries, totals, strict=True)):
            for p in query.recentProgress:
                line = total.add(json.loads(p.json) if hasattr(p, "json") else p)
                if line is not None:
                    print(f"g{k} {line}" if len(queries) > 1 else line, file=out, flush=True)

    while not all([q.awaitTermination(poll / len(queries)) for q in queries]):  # each: a failure raises
        drain()
        if signals is not None and signals.asked:
            for query, total in zip(queries, totals, strict=True):
                stop_between_batches(query, signals)
                total.stopped = True
        time.sleep(0)
    drain()
    return totals
