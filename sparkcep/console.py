"""What ``sparkcep run``, ``sparkcep demo`` and a generated batch job tell the user while Spark works.

* :class:`StageProgress`: every few seconds, one line per running Spark stage, from Spark's status tracker::

      sparkcep: job 2, stage 3/5: 120/200 tasks

* :func:`summary_line`: the closing line of a run::

      sparkcep: read 5000 events, 12 results, 3 dead letters in 4.2 s, wrote out/

The formatting is pure (a status tracker is any object with PySpark's ``StatusTracker`` methods).
"""

from __future__ import annotations

import sys
import threading
import time


def _plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else (words or word + 's')}"


def observed_count(df, name: str):
    """:func:`sparkcep.spark.sinks.observed_count` (the face's name for it; imported when called, so that
    importing the console does not import pyspark)."""
    from sparkcep.spark.sinks import observed_count as observed

    return observed(df, name)


def summary_line(*, read: int | None, results: int | None, dead_letters: int | None, seconds: float,
                 output: str | None = None, late: int | None = None) -> str:
    """``sparkcep: read N events, M results, D dead letters[, L late] in X s[, wrote DIR]`` (a count that is
    not known, None, is left out; ``late`` only for a stream)."""
    parts = []
    if read is not None:
        parts.append("read " + _plural(read, "event"))
    if results is not None:
        parts.append(_plural(results, "result"))
    if dead_letters is not None:
        parts.append(_plural(dead_letters, "dead letter"))
    if late is not None:
        parts.append(f"{late} late")
    text = "sparkcep: " + (", ".join(parts) + " " if parts else "done ") + f"in {seconds:.1f} s"
    return text + (f", wrote {output}" if output else "")


def timeouts_line(n: int, target: str) -> str:
    """The line on stderr of a run with ``--timeouts``: how many timed-out partial matches, and where."""
    return f"sparkcep: {_plural(n, 'timed-out partial match', 'timed-out partial matches')}; see {target}"


def stream_summary(counts: dict[str, int], seconds: float, output: str | None = None) -> str:
    """:func:`summary_line` of a stream from its totals' ``counts`` (``sparkcep.spark.progress.Totals``)."""
    return summary_line(read=counts.get("read", 0), results=counts.get("results", 0),
                        dead_letters=counts.get("dead_letters", 0), late=counts.get("late", 0), seconds=seconds,
                        output=output)


def stage_lines(tracker) -> dict[int, str]:
    """The running stages' lines, by stage id: ``job J, stage I/N: DONE/TOTAL tasks`` (I: the stage's place
    among its job's stages, N: their number; failed tasks counted when there are any)."""
    lines: dict[int, str] = {}
    for job_id in sorted(tracker.getActiveJobsIds()):
        job = tracker.getJobInfo(job_id)
        if job is None:
            continue
        stages = sorted(job.stageIds)
        for stage_id in stages:
            if stage_id in lines:
                continue
            info = tracker.getStageInfo(stage_id)
            if info is None or info.numTasks == 0 or info.numCompletedTasks >= info.numTasks:
                continue
            if info.numActiveTasks == 0 and info.numCompletedTasks == 0:
                continue  # waiting for an earlier stage
            failed = f", {info.numFailedTasks} failed" if info.numFailedTasks else ""
            lines[stage_id] = (f"job {job_id}, stage {stages.index(stage_id) + 1}/{len(stages)}: "
                               f"{info.numCompletedTasks}/{info.numTasks} tasks{failed}")
    return lines


class StageProgress:
    """Prints :func:`stage_lines` every ``interval`` seconds (a line only when it changed) on ``out`` (default:
    the ``sys.stderr`` of the moment) from a daemon thread, while the ``with`` block runs."""

    def __init__(self, tracker, out=None, interval: float = 3.0):
        self.tracker, self.interval = tracker, interval
        self.out = out
        self._shown: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> list[str]:
        """One look at the tracker: the lines that changed since the last look (printed)."""
        try:
            now = stage_lines(self.tracker)
        except Exception:  # noqa: BLE001 - a tracker that fails (session stopping) only ends the progress
            return []
        changed = [line for sid, line in now.items() if self._shown.get(sid) != line]
        self._shown = now
        out = sys.stderr if self.out is None else self.out
        for line in changed:
            print(f"sparkcep: {line}", file=out, flush=True)
        return changed

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def __enter__(self) -> StageProgress:
        self._thread = threading.Thread(target=self._loop, name="sparkcep-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 1)


class _Silent:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


def progress(spark, quiet: bool = False, interval: float = 3.0):
    """A :class:`StageProgress` over ``spark``'s status tracker (nothing when ``quiet``)."""
    if quiet:
        return _Silent()
    return StageProgress(spark.sparkContext.statusTracker(), interval=interval)


class Clock:
    """Seconds since it was made."""

    def __init__(self, now=time.perf_counter):
        self._now, self._t0 = now, now()

    def seconds(self) -> float:
        return self._now() - self._t0
