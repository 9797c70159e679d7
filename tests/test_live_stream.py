"""A live stream on Spark over real files (docs/operations.md, "Continuous runs"):

* a result comes out in the micro-batch that reads the event completing it (its output file is named after
  that batch's id), and the stream's results equal the batch run's and the oracle's;
* ``sparkcep run --stream`` (no ``--once``) follows its input directory: files written after it started are
  read, and SIGTERM stops it after the micro-batch under way has committed (exit 0, a summary line, no
  traceback), leaving no partial output; its results equal the oracle's; its progress lines give the
  latency from arrival and the backlog; with ``--timeouts`` a partial match is written to ``OUTPUT/_timeouts``
  while the run goes on, once the watermark closes its window; an input file deleted (a retention cleanup)
  loses its staged link once both queries (the results' and the ``--timeouts`` one) have committed it, never
  before, also across a restart.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
from pyspark.sql.streaming import StreamingQueryListener

import sparkcep
from sparkcep.cli import main
from sparkcep.oracles.match import match_rows
from sparkcep.spark.results import canonical
from sparkcep.spark.validate import original_name

QUERY = "PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 100 RETURN a.ts AS at, b.ts AS bt, a.id AS id"
COLUMNS = ["type", "ts", "id", "x"]


def write_file(folder: Path, k: int, events: list[dict], mtime: float | None = None) -> None:
    """``part-KK.jsonl`` in ``folder``; the file source reads files in modification-time order."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".part-{k:02d}.tmp"
    tmp.write_text("".join(json.dumps(e) + "\n" for e in events))
    if mtime is not None:
        os.utime(tmp, (mtime, mtime))
    tmp.rename(folder / f"part-{k:02d}.jsonl")  # appears whole: the source never sees a half-written file


def rows_by_batch(out: Path) -> dict[int, list[dict]]:
    """The result rows of each micro-batch, from the batch id in the sink's file names (part-bNNNNNNNN-K)."""
    got: dict[int, list[dict]] = {}
    for f in sorted(out.glob("part-b*")):
        batch = int(f.name[len("part-b"):].split("-")[0])
        got.setdefault(batch, []).extend(json.loads(line) for line in f.read_text().splitlines())
    return got


def oracle(events: list[dict]) -> list[dict]:
    return match_rows(sparkcep.compile(QUERY).query, events, COLUMNS)


#: an A no B follows (x = 9: a.x < b.x fails) and a far later C of another key, which moves the watermark
#: past A@10's window end (110): its partial match times out
TIMES_OUT = [{"type": "A", "ts": 10, "id": 1, "x": 9}, {"type": "C", "ts": 300, "id": 2, "x": 0}]
FILES = [
    [{"type": "A", "ts": 1, "id": 1, "x": 1}, {"type": "C", "ts": 2, "id": 2, "x": 0}],
    [{"type": "A", "ts": 3, "id": 2, "x": 5}, {"type": "B", "ts": 5, "id": 1, "x": 2}],  # completes (1, 5)
    [{"type": "B", "ts": 8, "id": 2, "x": 6}, {"type": "C", "ts": 9, "id": 1, "x": 0}],  # completes (3, 8)
]


def arrived(k: int, e: dict) -> int:
    """An ingestion time (epoch ms) of event ``e`` of file ``k``: files a day apart, each event its own."""
    return 1_700_000_000_000 + 86_400_000 * k + e["ts"]


@pytest.mark.spark
def test_a_match_is_written_by_the_micro_batch_that_reads_its_last_event(spark, tmp_path, capsys):
    """One file per micro-batch, lateness 0: the match completed by file k's B is in batch k's output
    (before, it waited for the next batch's watermark), and stream = batch = oracle.  Each result carries its
    latency from the arrival of its last event (``--arrival-col``: an ingestion-time column) and each
    micro-batch's progress line the results' p50/p99, from the observed metrics."""
    for k, events in enumerate(FILES):
        write_file(tmp_path / "in", k, [{**e, "arr": arrived(k, e)} for e in events], mtime=1_000_000 + k)
    out = tmp_path / "out"
    listener = Progresses()
    spark.streams.addListener(listener)
    try:
        before = time.time() * 1000
        assert main(["run", "-e", QUERY, "--input", str(tmp_path / "in"), "--stream", "--once",
                     "--files-per-trigger", "1", "--output", str(out), "--checkpoint", str(tmp_path / "ck"),
                     "--arrival-col", "arr", "--latency-column"]) == 0
        after = time.time() * 1000
        progress = listener.wait_for(lambda got: {1, 2} <= {p["batchId"] for p in got})
    finally:
        spark.streams.removeListener(listener)
    # the results' latency p50/p99 in Spark's own observed metrics (sparkcep_output): from their arrival to
    # the start of the micro-batch that wrote them (one result per batch: p50 = p99)
    for p in progress:
        if p["batchId"] in (1, 2):
            last = arrived(p["batchId"], next(e for e in FILES[p["batchId"]] if e["type"] == "B"))
            output = p["observedMetrics"]["sparkcep_output"]
            assert before - last <= output["result_latency_p50_ms"] == output["result_latency_p99_ms"] <= after - last
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("batch ")]
    assert len([line for line in lines if " result latency p50 " in line]) == 2
    assert not [line for line in lines if " backlog " in line]  # files by modification time: another clock
    by_batch = rows_by_batch(out)
    for b, rows in by_batch.items():  # the B of file b completes its match
        last = arrived(b, next(e for e in FILES[b] if e["type"] == "B"))
        assert all(before - last <= r.pop("_latency_ms") <= after - last for r in rows), rows
    assert {b: [(r["at"], r["bt"]) for r in rows] for b, rows in by_batch.items()} == {1: [(1, 5)], 2: [(3, 8)]}
    assert main(["run", "-e", QUERY, "--input", str(tmp_path / "in"), "--quiet"]) == 0
    batch = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    streamed = [r for rows in by_batch.values() for r in rows]
    assert canonical(streamed) == canonical(batch) == canonical(oracle([e for f in FILES for e in f]))


class Progresses(StreamingQueryListener):
    """The progress dicts of every micro-batch of the session's queries, as Spark's listener bus delivers them."""

    def __init__(self) -> None:
        self.got: list[dict] = []

    def onQueryStarted(self, event):  # noqa: N802 - PySpark's names
        pass

    def onQueryProgress(self, event):  # noqa: N802
        self.got.append(json.loads(event.progress.json))

    def onQueryIdle(self, event):  # noqa: N802
        pass

    def onQueryTerminated(self, event):  # noqa: N802
        pass

    def wait_for(self, predicate, timeout: float = 60) -> list[dict]:
        """The progresses once ``predicate`` holds of them (the bus is asynchronous)."""
        deadline = time.monotonic() + timeout
        while not predicate(list(self.got)):
            assert time.monotonic() < deadline, self.got
            time.sleep(0.1)
        return list(self.got)


class Lines:
    """A subprocess's stderr lines, read as they come."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, predicate, timeout: float, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + timeout
        while not any(predicate(line) for line in list(self.lines)):
            if proc.poll() is not None:
                raise AssertionError(f"the run ended ({proc.returncode}):\n" + "\n".join(self.lines))
            if time.monotonic() > deadline:
                raise AssertionError("timed out; stderr so far:\n" + "\n".join(self.lines))
            time.sleep(0.2)

    def join(self) -> str:
        self._thread.join(timeout=30)
        return "\n".join(self.lines)


#: ``python -c`` program: the CLI with the admission's sweep period (``shedding.SWEEP_SECONDS``) set to argv[1]
SWEPT_CLI = ("import sys; from sparkcep.spark import shedding; shedding.SWEEP_SECONDS = float(sys.argv.pop(1)); "
             "from sparkcep.cli import main; sys.exit(main(sys.argv[1:]))")


def continuous_run(inbox: Path, out: Path, checkpoint: Path, *extra: str,
                   sweep: float | None = None) -> tuple[subprocess.Popen, Lines]:
    """A continuous ``sparkcep run --stream`` of QUERY over ``inbox`` (one file per micro-batch) in a process of its
    own with this checkout on its path, and its stderr lines as they come; ``sweep``: the admission's sweep
    period of staged links (s; None: the default)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                                        os.environ.get("PYTHONPATH", "")])}
    program = ["-m", "sparkcep.cli"] if sweep is None else ["-c", SWEPT_CLI, str(sweep)]
    proc = subprocess.Popen([sys.executable, *program, "run", "-e", QUERY, "--input", str(inbox),
                             "--stream", "--files-per-trigger", "1", "--output", str(out), "--checkpoint",
                             str(checkpoint), "--master", "local[2]", *extra],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    return proc, Lines(proc.stderr)


def staged_inputs(checkpoint: Path) -> list[str]:
    """The input files whose staged link the admission control keeps in ``CHECKPOINT/_admitted``."""
    return sorted(original_name(n) for n in os.listdir(checkpoint / "_admitted") if n.startswith("part-"))


def files_committed(query: Path) -> int:
    """How many input files the query checkpointed at ``query`` has committed, when it reads them one per
    micro-batch, one at a time: its file source's log offset in ``offsets/<c>`` of its newest commit ``c``, plus
    one (the source logs a file per micro-batch that has one); 0 before a commit."""
    commits = [int(n) for n in os.listdir(query / "commits") if n.isdigit()] if (query / "commits").is_dir() else []
    if not commits:
        return 0
    return json.loads((query / "offsets" / str(max(commits))).read_text().splitlines()[2])["logOffset"] + 1


def unlink_input(inbox: Path, checkpoint: Path, k: int) -> None:
    """Delete the input file ``part-KK.jsonl``, the k-th (from 0) that both queries (results, ``_timeouts``) read,
    and wait until its staged link goes, checking at each look that it goes only once both queries have committed
    it (the link looked at first: a commit never goes away)."""
    name = f"part-{k:02d}.jsonl"
    os.remove(inbox / name)
    deadline = time.monotonic() + 120
    while True:
        linked = name in staged_inputs(checkpoint)
        committed = [files_committed(q) for q in (checkpoint, checkpoint / "_timeouts")]
        assert linked or min(committed) > k, (name, committed)
        if not linked:
            return
        assert time.monotonic() < deadline, (name, committed)
        time.sleep(0.05)


#: a file for the restart: a match (A@400, B@410 of key 3), an A of key 4 no B follows, and a C far later (600)
#: that times its partial match out (window end 520)
RESTART = [{"type": "A", "ts": 400, "id": 3, "x": 1}, {"type": "B", "ts": 410, "id": 3, "x": 2},
           {"type": "A", "ts": 420, "id": 4, "x": 9}, {"type": "C", "ts": 600, "id": 2, "x": 0}]


@pytest.mark.spark
@pytest.mark.slow
def test_a_continuous_run_follows_its_input_and_stops_cleanly_on_sigterm(spark, tmp_path, monkeypatch):
    """``run --stream --timeouts`` runs two queries over the staged files, each with its checkpoint (the
    results' and ``CHECKPOINT/_timeouts``). An input file deleted while it runs loses its staged link only once
    both queries have committed it, within the sweep period; one deleted before a restart, as it starts; one
    deleted after the results' query read it while the ``_timeouts`` query lags keeps its link until that one
    has read and committed it too. The results and the timed-out partial matches are complete and none is
    written twice."""
    from sparkcep.spark import shedding, sinks

    inbox, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    write_file(inbox, 0, FILES[0])
    proc, err = continuous_run(inbox, out, ck, "--timeouts", "--latency-column", sweep=0.5)
    try:
        err.wait_for(lambda line: line.startswith("batch ") and "read 2 events" in line, 600, proc)
        for k in (1, 2, 3):  # written after the run started: it must pick them up
            write_file(inbox, k, (FILES + [TIMES_OUT])[k])
            err.wait_for(lambda line, n=2 * (k + 1): line.startswith("batch ") and f"read {n} events" in line,
                         300, proc)
            if k < 3:  # a retention cleanup of the file before, once the results' query read this one
                unlink_input(inbox, ck, k - 1)
        # the timed-out A@10 is written while the run goes on (before, only after the stop)
        deadline = time.monotonic() + 300
        while not any(f.stat().st_size for f in (out / "_timeouts").glob("*.json")):
            assert proc.poll() is None and time.monotonic() < deadline, "\n".join(err.lines)
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=300) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    text = err.join()
    assert "Traceback" not in text
    assert "sparkcep: stopped after" in text and "sparkcep: read 8 events, 2 results" in text
    assert "sparkcep: 1 timed-out partial match; see" in text
    assert staged_inputs(ck) == ["part-02.jsonl", "part-03.jsonl"]

    def timed_out() -> list[tuple]:
        rows = [json.loads(line) for f in (out / "_timeouts").glob("*.json") for line in f.read_text().splitlines()]
        return sorted((r["at"], r["timeout_step"]) for r in rows)

    assert timed_out() == [(10, "a")]
    # each batch with events reports their arrival-to-commit latency and the files not read yet
    assert any(" latency p50 " in line and " backlog " in line for line in text.splitlines())
    # each result's latency from its file's arrival (modification time) to its micro-batch, in the row and the line
    assert any(" result latency p50 " in line for line in text.splitlines())
    latencies = [r.pop("_latency_ms") for rows in rows_by_batch(out).values() for r in rows]
    assert len(latencies) == 2 and all(0 <= ms < 900_000 for ms in latencies), latencies
    # nothing partial: no staging directory, no empty file, every batch's rows once
    files = {f.name: f.stat().st_size for f in out.glob("part-*")}
    assert not list(out.glob("_staging*")) and all(size > 0 for size in files.values()), files
    committed = max(int(f.name) for f in (ck / "commits").iterdir() if f.name.isdigit())
    assert all(batch <= committed for batch in rows_by_batch(out)), (committed, files)

    def streamed() -> list[dict]:  # (= the batch run's: test_a_match_is_written_by_the_micro_batch_that_reads_...)
        rows = [r for rows in rows_by_batch(out).values() for r in rows]
        return [{k: v for k, v in r.items() if k != "_latency_ms"} for r in rows]

    assert canonical(streamed()) == canonical(oracle([e for f in [*FILES, TIMES_OUT] for e in f]))
    # a restart (--once, in this process): part-02's input, deleted meanwhile, loses its link as it starts; part-04,
    # new, is read by the results' query while the --timeouts query lags (its start held back here), and deleted:
    # its link stays until that query has read and committed it too (gone, that query would never see the file,
    # and A@420's timed-out partial match would never be written)
    monkeypatch.setattr(shedding, "SWEEP_SECONDS", 0.2)
    os.remove(inbox / "part-02.jsonl")
    write_file(inbox, 4, RESTART)
    start, seen = sinks.start_timeouts, []

    def lagging(*args, **kwargs):
        deadline = time.monotonic() + 300
        while files_committed(ck) < 5 and time.monotonic() < deadline:  # the results' query committed part-04
            time.sleep(0.05)
        os.remove(inbox / "part-04.jsonl")
        time.sleep(1.0)  # five sweep periods
        seen.append(staged_inputs(ck))
        return start(*args, **kwargs)

    monkeypatch.setattr(sinks, "start_timeouts", lagging)
    assert main(["run", "-e", QUERY, "--input", str(inbox), "--stream", "--once", "--files-per-trigger", "1",
                 "--output", str(out), "--checkpoint", str(ck), "--timeouts", "--latency-column"]) == 0
    assert seen == [["part-03.jsonl", "part-04.jsonl"]]
    assert timed_out() == [(10, "a"), (420, "a")]
    everything = [e for f in [*FILES, TIMES_OUT, RESTART] for e in f]
    assert canonical(streamed()) == canonical(oracle(everything)) and len(streamed()) == 3
    # both queries have committed part-04 now: its link goes (at the latest at the next sweep, a restart's)
    shedding.StagedLinks(str(ck / "_admitted"), str(inbox), str(ck)).sweep()
    assert staged_inputs(ck) == ["part-03.jsonl"]


@pytest.mark.spark
@pytest.mark.slow
def test_a_shedding_run_reads_its_files_through_the_admission_control(tmp_path):
    """``run --stream`` with shedding over a JSON directory reads what the admission control hands over
    (``FileAdmission``, staged in the checkpoint): under a loose bound nothing is dropped and no file stalls;
    files written after the start are picked up one slice per micro-batch."""
    inbox, out = tmp_path / "in", tmp_path / "out"
    write_file(inbox, 0, FILES[0])
    proc, err = continuous_run(inbox, out, tmp_path / "ck", "--shedding-latency", "1h", "--dropped-output",
                               str(tmp_path / "dropped"))
    try:
        err.wait_for(lambda line: line.startswith("batch ") and "read 2 events" in line, 600, proc)
        for k in (1, 2):
            write_file(inbox, k, FILES[k])
            err.wait_for(lambda line, n=2 * (k + 1): line.startswith("batch ") and f"read {n} events" in line,
                         300, proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=300) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    text = err.join()
    # no trace at all once stopped: neither Python's nor the JVM's (the shedding listener was removed while a
    # call to it was on its way, and the JVM logged a py4j error after the summary)
    assert not [line for line in text.splitlines() if any(w in line for w in ("Traceback", "Exception", "ERROR"))], text
    assert "sparkcep: read 6 events, 2 results" in text
    # the stage sees the query's candidates (A and B events): 4 of the 6
    assert "load shedding dropped 0 of 4 events" in text and not (tmp_path / "dropped").exists()
    staged = sorted(original_name(f.name) for f in (tmp_path / "ck" / "_admitted").iterdir())
    assert staged == ["_sparkcep_staging", *(f"part-{k:02d}.jsonl" for k in range(3))]
    streamed = [r for rows in rows_by_batch(out).values() for r in rows]
    assert canonical(streamed) == canonical(oracle([e for f in FILES for e in f]))



@pytest.mark.spark
def test_a_rate_source_stream_stamps_each_result_with_its_rows_arrival(spark, tmp_path):
    """Spark's rate source, arrival = each row's ``timestamp`` (``apply(df, arrival_col=...)``): the arrival of
    each micro-batch's events is observed, and each match (A@2k, B@2k+1 of key k) carries the arrival of the
    match's own last event, B, whose time it also returns, under the default buckets (a Spark group holds
    several keys, whose rows of a micro-batch arrived at different times); its timed-out partial matches carry
    their arrival as well (the ``--timeouts`` stream writes it as ``--latency-column``'s latency, or not), and so do
    the matches of an AFTER MATCH SKIP query."""
    from pyspark.sql import functions as F

    from sparkcep.spark.sinks import timeouts_lines

    rate = spark.readStream.format("rate").option("rowsPerSecond", 20).load()
    events = rate.select(F.when(F.col("value") % 2 == 0, "A").otherwise("B").alias("type"), F.col("value").alias("ts"),
                         (F.col("value") / 2).cast("bigint").alias("id"), F.col("timestamp").alias("t"))
    q = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 10 RETURN a.ts AS at, b.ts AS bt, b.t AS b_time")
    result = q.apply(events, arrival_col="t")
    assert result.columns == ["at", "bt", "b_time", "_arrival_ms"]
    # its timed-out partial matches carry their own events' arrival too; written, as --latency-column's latency
    timed_out = ["at", "bt", "b_time", "timeout_step"]
    assert result.timeouts.columns == [*timed_out, "_arrival_ms"]
    assert timeouts_lines(result.timeouts).columns == timed_out
    assert timeouts_lines(result.timeouts, latency=True).columns == [*timed_out, "_latency_ms"]
    # an AFTER MATCH SKIP query (MATCH_RECOGNIZE's engine) carries it as well: each match its last row's
    skip = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 10 AFTER MATCH SKIP PAST LAST EVENT "
                            "RETURN a.ts AS at, b.ts AS bt")
    assert skip.apply(events, arrival_col="t").columns == ["at", "bt", "_arrival_ms"]
    query = (result.writeStream.format("memory").queryName("rate_arrival").outputMode("append")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="1 second").start())
    try:
        deadline = time.monotonic() + 300
        while spark.table("rate_arrival").count() < 10:
            assert query.isActive and time.monotonic() < deadline, query.exception()
            time.sleep(0.5)
        progress = [json.loads(p.json) for p in query.recentProgress]
    finally:
        query.stop()
    table = spark.table("rate_arrival")
    rows = table.select("at", "bt", F.unix_millis("b_time").alias("b_ms"), "_arrival_ms").collect()
    assert rows and all(r.bt == r.at + 1 and r.at % 2 == 0 for r in rows)
    assert all(r["_arrival_ms"] == r.b_ms for r in rows), rows
    arrivals = [(p["observedMetrics"]["arrival"], p["timestamp"]) for p in progress if p.get("numInputRows")]
    assert arrivals and all(a["arrived"] > 0 and a["oldest"] <= a["newest"] for a, _ in arrivals)
    # the events' latency p50/p99 in Spark's own observed metrics: from arrival to the micro-batch's start (its
    # batch timestamp, within a second of the progress' trigger start: the rate source stamps rows up to when
    # it is asked for its offsets)
    for a, started in arrivals:
        start_ms = datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp() * 1000
        assert (start_ms - a["newest"] - 1000 <= a["latency_p50_ms"] <= a["latency_p99_ms"]
                <= start_ms - a["oldest"] + 1000), (a, started)


@pytest.mark.spark
@pytest.mark.slow
def test_apply_stream_follows_a_directory_through_the_admission_control(spark, tmp_path, monkeypatch):
    """``sparkcep.apply_stream`` (Python) runs a shedding query as ``run --stream`` does: the stream reads what
    the admission control hands over (staged in the checkpoint), files written after the start are picked up,
    under a loose bound nothing is dropped, results = oracle; ``stop()`` ends the query and the admission
    thread.  One backlog controller, on the followed directory (``apply(followed=)``: the stage is not switched
    to the staging directory first).  Each micro-batch's backlog is in Spark's observed metrics (``backlog``:
    ``files``, ``rows``), as the admission counted it when it handed over the batch's newest file."""
    from sparkcep.spark import shedding as shedding_module

    made = []

    class Counted(shedding_module.BacklogController):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(shedding_module, "BacklogController", Counted)
    inbox, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    write_file(inbox, 0, FILES[0])
    q = sparkcep.compile(QUERY, shedding_latency=3600)
    live = sparkcep.apply_stream(str(inbox), q, checkpoint=str(ck), output=str(out), spark=spark,
                                 files_per_trigger=1)

    def read() -> int:
        return sum(p.observedMetrics["events_valid"]["events_valid"] for p in live.query.recentProgress
                   if "events_valid" in (p.observedMetrics or {}))

    files = [*FILES, TIMES_OUT]
    try:
        assert live.admission is not None and live.shedding is not None
        assert live.shedding.source == str(inbox) and len(made) == 1 and live.shedding.controller is made[0]
        wait = time.monotonic() + 300
        while read() < 2:
            assert live.query.isActive and time.monotonic() < wait, live.query.exception()
            time.sleep(0.2)
        # the test hands the slices over itself, one file each, so that files wait behind each slice
        live.admission.stop()
        monkeypatch.setattr(shedding_module, "admit_files", lambda pending, *_: ([n for n, _ in pending[:1]], []))
        monkeypatch.setattr(shedding_module.FileAdmission, "_top_up", lambda self, admit: [])  # no top-up
        for k in (1, 2, 3):  # after the start: the admission hands them over
            write_file(inbox, k, files[k])
        deadline = time.monotonic() + 300
        while read() < 8:
            assert live.query.isActive and time.monotonic() < deadline, live.query.exception()
            live.admission.step()
            time.sleep(0.2)
        assert live.backlog() == 0
        progress = [json.loads(p.json) for p in live.query.recentProgress if p.numInputRows]
    finally:
        live.stop()
    assert not live.query.isActive
    assert "sparkcep-admission" not in [t.name for t in threading.enumerate()]
    assert live.admission.staged == [([f"part-{k:02d}.jsonl"], 3 - k, 2 * (3 - k)) for k in (1, 2, 3)]
    assert sorted(f.name for f in (ck / "_admitted").iterdir() if not f.name.startswith("_")) == [
        f"part-{k:02d}_backlog-{n}-{2 * n}.jsonl" for k, n in enumerate((0, 2, 1, 0))]
    # each micro-batch's observed backlog: the marks of the newest file it read (Spark's own list of its files)
    seen = []
    for p in progress:
        span = p["sources"][0]  # the file source's log entries this batch read: (startOffset, endOffset]
        start, end = (-1 if span[k] is None else span[k]["logOffset"] for k in ("startOffset", "endOffset"))
        listed = [line for n in range(start + 1, end + 1)
                  for line in (ck / "sources" / "0" / str(n)).read_text().splitlines()[1:]]
        names = [Path(json.loads(line)["path"].removeprefix("file:")).name for line in listed]
        newest = max(names, key=lambda n: (os.stat(ck / "_admitted" / n).st_mtime, n))
        marks = newest.rsplit("_backlog-", 1)[1].split(".")[0].split("-")
        assert p["observedMetrics"]["backlog"] == {"files": int(marks[0]), "rows": int(marks[1])}, (p, names)
        seen.append(int(marks[0]))
    assert 2 in seen and 1 in seen  # the slices of files 1 and 2 left files behind
    assert sum(live.shedding.dropped.values()) == 0 and live.shedding.offered == 5  # the A and B events
    streamed = [r for rows in rows_by_batch(out).values() for r in rows]
    assert canonical(streamed) == canonical(oracle([e for f in files for e in f]))


@pytest.mark.spark
def test_a_stream_without_shedding_observes_its_backlog_and_restarts_exactly_once(spark, tmp_path, monkeypatch):
    """Without shedding, ``sparkcep.apply_stream`` follows a local directory through the admission control with
    no bound: each micro-batch's ``backlog`` observed metric (Spark's own progress) is the files and events
    still waiting behind the newest file it read (one file per micro-batch here: 2, 1, then 0 files of 2 events
    each).  Nothing else changes: the arrival is the user file's modification time, a dead letter is its raw
    record (no file name at all), and a restart from the checkpoint reads only the file written since (no
    result lost or repeated).  An input file deleted after its micro-batch committed (a retention cleanup) has
    its staged link removed: when the admission starts again, and while it runs within its sweep period."""
    from sparkcep.spark import shedding as shedding_module

    monkeypatch.setattr(shedding_module, "SWEEP_SECONDS", 0.5)
    inbox, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    for k in range(3):
        write_file(inbox, k, FILES[k], mtime=1_000_000 + k)

    def staged() -> list[str]:
        return sorted(original_name(n) for n in os.listdir(ck / "_admitted") if n.startswith("part-"))

    def run(until: int, delete: str | None = None) -> tuple[sparkcep.LiveStream, list[dict]]:
        live = sparkcep.apply_stream(str(inbox), QUERY, checkpoint=str(ck), output=str(out), spark=spark,
                                     files_per_trigger=1)
        try:
            deadline = time.monotonic() + 300
            while sum(p.observedMetrics["events_valid"]["events_valid"] for p in live.query.recentProgress
                      if "events_valid" in (p.observedMetrics or {})) < until:
                assert live.query.isActive and time.monotonic() < deadline, live.query.exception()
                time.sleep(0.2)
            assert live.backlog() == 0
            if delete is not None:  # committed before: its link goes within the sweep period once it is gone
                assert staged() == [delete, "part-03.jsonl"]  # the two others. went already
                os.remove(inbox / delete)
                gone_by = time.monotonic() + 10
                while delete in staged():
                    assert time.monotonic() < gone_by, staged()
                    time.sleep(0.1)
            return live, [json.loads(p.json) for p in live.query.recentProgress if p.numInputRows]
        finally:
            live.stop()

    live, progress = run(6)
    assert live.admission is not None and live.shedding is None
    metrics = [p["observedMetrics"] for p in progress]
    assert [m["backlog"] for m in metrics] == [{"files": n, "rows": 2 * n} for n in (2, 1, 0)]
    assert [m["arrival"]["newest"] for m in metrics] == [(1_000_000 + k) * 1000 for k in range(3)]
    # a restart: the file written since, with a bad record, is the only one read; the first two files, deleted
    # meanwhile, lose their links as it starts, the third while it runs
    assert staged() == [f"part-0{k}.jsonl" for k in range(3)]
    for k in range(2):
        os.remove(inbox / f"part-0{k}.jsonl")
    write_file(inbox, 3, TIMES_OUT)
    with open(inbox / "part-03.jsonl", "a") as f:
        f.write("not json\n")
    _, progress = run(2, delete="part-02.jsonl")
    assert staged() == ["part-03.jsonl"]
    assert [p["observedMetrics"]["backlog"] for p in progress] == [{"files": 0, "rows": 0}]
    assert sum(p["observedMetrics"]["dead_letters"]["dead_letters"] for p in progress) == 1
    dead = [json.loads(line) for f in (out / "_dead_letters").rglob("*.json") for line in f.read_text().splitlines()]
    assert dead == [{"reason": "malformed record", "record": "not json"}]
    streamed = [r for rows in rows_by_batch(out).values() for r in rows]
    assert canonical(streamed) == canonical(oracle([e for f in [*FILES, TIMES_OUT] for e in f]))
    assert len(streamed) == 2


@pytest.mark.spark
def test_apply_stream_starts_the_admission_before_its_query_and_stops_it_if_the_start_fails(spark, tmp_path,
                                                                                         monkeypatch):
    """``sparkcep.apply_stream`` starts its admission control before its query (sparkcep.live, as ``run
    --stream`` does): a file that arrives after the input was staged and before the query starts is handed
    over by then, so that the query's first micro-batch lists it (started after the query, the admission
    raced that first listing).  A start that fails leaves no admission thread polling behind it."""
    from sparkcep.spark import sinks

    inbox, ck = tmp_path / "in", tmp_path / "ck"
    write_file(inbox, 0, FILES[0])
    seen = {}

    def staged() -> list[str]:
        return sorted(original_name(n) for n in os.listdir(ck / "_admitted") if n.startswith("part-"))

    def failing_start(*args, **kwargs):
        write_file(inbox, 1, FILES[1])  # after the staging, before the query starts
        deadline = time.monotonic() + 10
        while len(staged()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        seen["staged"] = staged()
        raise RuntimeError("the query did not start")

    before = set(threading.enumerate())
    monkeypatch.setattr(sinks, "start", failing_start)
    with pytest.raises(RuntimeError, match="did not start"):
        sparkcep.apply_stream(str(inbox), QUERY, checkpoint=str(ck), output=str(tmp_path / "out"), spark=spark)
    assert seen["staged"] == ["part-00.jsonl", "part-01.jsonl"]
    assert not [t for t in set(threading.enumerate()) - before if t.name == "sparkcep-admission" and t.is_alive()]
