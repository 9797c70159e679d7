"""Exactly-once recovery of the generated streaming job: ``kill -9`` mid-batch, restart on the same checkpoint.

For a match query, a trend aggregate whose windows stay open across micro-batches, and a query with trailing
negation (a match waits for an event-time timer), the generated job runs as its own process over files read
one per micro-batch.  It is killed (SIGKILL to its process group: Python driver, JVM and workers) while a
batch is under way (its offsets are logged, its commit is not), restarted with the same checkpoint and
``--once``, and its final output must equal an uninterrupted run's and the oracle's: no row lost, none
repeated.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

import sparkcep
from sparkcep.oracles.match import match_rows, trend_aggregates
from sparkcep.spark.results import canonical

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
DDL = "type STRING, ts BIGINT, id BIGINT, x BIGINT"
COLUMNS = ["type", "ts", "id", "x"]
FILES = 4

MATCH = "PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 10 RETURN a.ts AS at, b.ts AS bt, a.id AS id, b.x AS bx"
TREND = "RETURN id, COUNT(*) AS n, SUM(A.x) AS sx PATTERN SEQ(A+, B) WHERE [id] GROUP-BY id WITHIN 8 SLIDE 4"
TRAILING = "PATTERN SEQ(A a, B b, !(C c)) WHERE [id] WITHIN 5 RETURN a.ts AS at, b.ts AS bt, a.id AS id"


def stream_events(n: int = 144, seed: int = 3) -> list[dict]:
    """``n`` events with strictly increasing ts (so no event is late with lateness 0)."""
    rnd = random.Random(seed)
    return [{"type": rnd.choice("AABC"), "ts": t, "id": rnd.randrange(2), "x": rnd.randrange(10)} for t in range(n)]


#: A last file with an event far ahead: the watermark passes every window end and negation timer.  It is of a
#: type the queries use (the watermark runs on the events the query's filter keeps) and of a key no match has.
TAIL = {"type": "B", "ts": 100_000, "id": 9, "x": 0}


def write_files(folder: Path, events: list[dict], files: int = FILES) -> None:
    folder.mkdir(parents=True)
    per = -(-len(events) // files)
    chunks = [events[k * per:(k + 1) * per] for k in range(files)] + [[TAIL]]
    for k, chunk in enumerate(chunks):
        path = folder / f"part-{k:02d}.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in chunk))
        os.utime(path, (1_000_000 + k, 1_000_000 + k))  # the file source reads in modification-time order


def job_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    env["PYSPARK_PYTHON"] = sys.executable
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def job_command(job: Path, inbox: Path, out: Path, ckpt: Path, once: bool) -> list[str]:
    return [sys.executable, str(job), "--input", str(inbox), "--output", str(out), "--stream",
            "--checkpoint", str(ckpt), "--schema", DDL, "--files-per-trigger", "1", "--shuffle-partitions", "2",
            *(["--once"] if once else [])]


def _batches(folder: Path) -> set[int]:
    return {int(p.name) for p in folder.glob("*") if p.name.isdigit()} if folder.is_dir() else set()


def kill_mid_batch(proc: subprocess.Popen, ckpt: Path, after: int = 2, timeout: float = 600) -> int:
    """SIGKILL ``proc``'s process group once ``after`` batches are committed and the next one is under way
    (its offsets logged, its commit not).  Returns the batch it was killed in."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the job ended before it could be killed mid-stream"
        commits, offsets = _batches(ckpt / "commits"), _batches(ckpt / "offsets")
        running = offsets - commits
        if len(commits) >= after and running:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return min(running)
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    raise AssertionError("no batch was under way in time")


def read_output(out: Path) -> list[dict]:
    """The result rows, read as a plain reader reads them: every ``part-*`` file, no metadata needed."""
    files = sorted(out.glob("part-*"))
    assert files, f"no output in {out}"
    rows = [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]
    for r in rows:
        if "aggregate_overflow" in r:
            assert r.pop("aggregate_overflow") is False
    return rows


def expected_rows(q, events: list[dict]) -> list[dict]:
    if "COUNT(" in q.source:
        rows = trend_aggregates(q.query, events)
        return [{k: int(v) if isinstance(v, Decimal) else v for k, v in r.items()} for r in rows]
    return match_rows(q.query, events, COLUMNS)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=job_env(), capture_output=True, text=True, timeout=900, **kw)


@pytest.mark.parametrize("text", [MATCH, TREND, TRAILING], ids=["match", "trend-open-windows", "trailing-negation"])
def test_killed_job_resumes_exactly_once(tmp_path, text):
    events = stream_events()
    q = sparkcep.compile(text)
    expected = expected_rows(q, events)
    assert len(expected) >= 10, "too few results to tell a lost or repeated one"
    job = tmp_path / "job.py"
    job.write_text(q.job_source())
    inbox = tmp_path / "events"
    write_files(inbox, events)

    # the uninterrupted run and the run to be killed, side by side
    ref_log = tmp_path / "ref.log"
    with open(ref_log, "w") as log:  # a file, not a pipe: a full pipe would stall the run
        reference = subprocess.Popen(job_command(job, inbox, tmp_path / "ref", tmp_path / "ref-ck", once=True),
                                     env=job_env(), stdout=subprocess.DEVNULL, stderr=log)
    ckpt, out = tmp_path / "ck", tmp_path / "out"
    victim = subprocess.Popen(job_command(job, inbox, out, ckpt, once=False), env=job_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    killed_in = kill_mid_batch(victim, ckpt)
    assert killed_in >= 2 and killed_in not in _batches(ckpt / "commits")

    resumed = run(job_command(job, inbox, out, ckpt, once=True))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert reference.wait(timeout=900) == 0, ref_log.read_text()[-3000:]
    # every input file was read once in all: the restart did not start over
    assert len(_batches(ckpt / "commits")) >= FILES + 1

    got, ref = read_output(out), read_output(tmp_path / "ref")
    assert canonical(ref) == canonical(expected)
    assert canonical(got) == canonical(expected), f"killed in batch {killed_in}"
    # the resumed run printed its progress per micro-batch; sorted, well-formed input: nothing late or dead
    progress = [line for line in resumed.stderr.splitlines() if line.startswith("batch ")]
    assert progress and "0 dead letters, 0 late" in progress[-1], resumed.stderr[-2000:]
    assert not list((out / "_late").glob("part-*")) and not list((out / "_dead_letters").glob("part-*"))
