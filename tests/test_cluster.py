"""The generated job, unchanged, on a multi-executor Spark cluster: a standalone master and two workers started
from the PySpark distribution on 127.0.0.1, the job submitted with ``spark-submit --master spark://...``.
Batch and streaming results equal the same job's run on ``local[*]`` and the oracle.

``SPARKCEP_TEST_MASTER=local-cluster[2,1,1024]`` (or the URL of a running cluster) submits to that master
instead of starting one.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import pytest

import sparkcep
from sparkcep.cli import main
from sparkcep.oracles.match import match_rows
from sparkcep.spark.results import canonical

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
SPARK_BIN = Path(pyspark.__file__).resolve().parent / "bin"
QUERY = ("runs: PATTERN SEQ(A a, B+ b[], C c) WHERE [id] AND b[i].x >= b[i-1].x WITHIN 15 "
         "RETURN a.id AS id, a.ts AS a_ts, c.ts AS c_ts, count(b[].x) AS n_b, avg(b[].x) AS avg_b")
COLUMNS = ["type", "ts", "id", "x"]
N_WORKERS = 2


def _env() -> dict:
    """The executors' Python workers use this interpreter (sparkcep installed, or this checkout on the path)."""
    paths = [str(ROOT), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join(paths), "PYTHONWARNINGS": "ignore::FutureWarning",
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}


def _daemon(args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen([str(SPARK_BIN / "spark-class"), *args], stdout=out, stderr=subprocess.STDOUT,
                                env=_env(), start_new_session=True)


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen, timeout: float = 120) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text()) if log.exists() else None
        if found:
            return found
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise RuntimeError(f"{log.name}: no {pattern!r} within {timeout} s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A standalone Spark cluster on loopback: one master, two workers of 1 core and 1 GiB each; the master URL.

    Ports are chosen by the OS (``--port 0``), the web UIs and the REST submission server are off, the
    workers' scratch space is a temporary directory; all three JVMs are stopped at the end of the module.
    """
    if os.environ.get("SPARKCEP_TEST_MASTER"):
        yield os.environ["SPARKCEP_TEST_MASTER"]
        return
    logs = tmp_path_factory.mktemp("cluster")
    procs = []
    try:
        master = _daemon(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
                          "--webui-port", "0"], logs / "master.log")
        procs.append(master)
        url = _wait_for(logs / "master.log", r"Starting Spark master at (spark://127\.0\.0\.1:\d+)", master)[1]
        for i in range(N_WORKERS):
            log = logs / f"worker{i}.log"
            worker = _daemon(["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", "0",
                              "--webui-port", "0", "--cores", "1", "--memory", "1g",
                              "--work-dir", str(logs / f"work{i}"), url], log)
            procs.append(worker)
            _wait_for(log, r"Successfully registered with master", worker)
        yield url
    finally:
        for proc in reversed(procs):
            _stop(proc)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Events of 4 keys in three JSON files, the compiled job, and the oracle's rows."""
    root = tmp_path_factory.mktemp("store")
    rng = random.Random(7)
    events = [{"type": rng.choice("AABBBC"), "ts": ts, "id": rng.randrange(4), "x": rng.randrange(10)}
              for ts in range(240)]
    (root / "events").mkdir()
    for i in range(3):
        (root / "events" / f"part-{i}.json").write_text(
            "".join(json.dumps(e) + "\n" for e in events[i * 80:(i + 1) * 80]))
    (root / "query.cep").write_text(QUERY)
    assert main(["compile", str(root / "query.cep"), "-o", str(root / "job.py")]) == 0
    expected = match_rows(sparkcep.compile(QUERY).query, events, COLUMNS)
    # enough matches, over several keys, to notice a lost or a doubled one
    assert len(expected) > 20 and len({r['id'] for r in expected}) > 1
    return root, expected


def submit(master: str, job: Path, *args: str) -> subprocess.CompletedProcess:
    """``spark-submit --master MASTER job.py ARGS``, the way a user runs it."""
    done = subprocess.run([str(SPARK_BIN / "spark-submit"), "--master", master, str(job), *args],
                          capture_output=True, text=True, timeout=600, env=_env())
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def results(out: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(out.glob("part-*.json")) for line in f.read_text().splitlines()]


def executors_that_ran_tasks(log: str) -> set[str]:
    return set(re.findall(r"Finished task \S+ in stage \S+ \(TID \d+\) in \d+ ms on \S+ \(executor (\d+)\)", log))


def test_generated_job_on_a_cluster_equals_local(cluster, store, tmp_path):
    root, expected = store
    job, events = root / "job.py", str(root / "events")
    submit("local[*]", job, "--input", events, "--output", str(tmp_path / "local"))
    batch = submit(cluster, job, "--input", events, "--output", str(tmp_path / "batch"))
    submit(cluster, job, "--input", events, "--output", str(tmp_path / "stream"),
           "--stream", "--once", "--checkpoint", str(tmp_path / "checkpoint"))

    local = canonical(results(tmp_path / "local"))
    assert local == canonical(expected)
    assert canonical(results(tmp_path / "batch")) == local
    assert canonical(results(tmp_path / "stream")) == local
    if cluster.startswith(("spark://", "local-cluster")):
        assert len(executors_that_ran_tasks(batch.stderr)) == N_WORKERS, "both executors ran tasks"
