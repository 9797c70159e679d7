"""Where a micro-batch's fixed cost goes (issue 17): the live bench's shedding stream, split per micro-batch.

A continuous ``sparkcep run --stream`` of ``bench/live_latency.py``'s quality workload (gSPICE's Q1-Q3 over DS5,
one shedding stage in front of the shared operators, ``--shedding-latency 5s``) runs in this process, in a
``local[2]`` session with Spark's UI on (its REST API), fed one file of ``--rate`` events a second for
``--duration`` seconds, then stopped as SIGTERM stops it.  Per micro-batch it prints:

* ``StreamingQueryProgress.durationMs``: latestOffset, queryPlanning, getBatch, addBatch (the plan's job and the
  ``foreachBatch`` body), walCommit, commitOffsets, triggerExecution (the whole batch);
* Spark jobs, stages and tasks per stage (REST API, the jobs whose description names the batch), the stages'
  task run time summed (``executorRunTime``; wall time of the tasks) and JVM CPU;
* the state operator's ``commitTimeMs`` (summed over its partitions);
* the Python operators' worker times (SQL metrics): the shedding stage's ``mapInPandas`` and the stateful
  ``applyInPandasWithState``, "time to start" and "time to initialize" Python workers summed over the tasks;

then the means over the batches after the first two (the first pays the workers' start and the engines'
compilation).  ``--conf KEY=VALUE`` (repeatable) sets Spark settings on the session first, for A/B runs
(e.g. ``--conf spark.sql.shuffle.partitions=2``).  ``--probe`` also times the Python workers' side of each task
(``bench/worker_probe``: the wait for the task, the function's unpickling, the task's CPU) and PySpark's garbage
collection after it, and prints their medians.  Timings on a loaded machine say little: state the load
(``uptime``) and the cores; the counts (jobs, stages, tasks) do not depend on it.

    python bench/fixed_cost.py [--rate 2000] [--duration 40] [--model hash] [--conf KEY=VALUE ...] [--probe]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

DURATIONS = ("latestOffset", "queryPlanning", "getBatch", "addBatch", "walCommit", "commitOffsets", "triggerExecution")
#: the Python operators' SQL metrics reported (summed over their tasks)
PYTHON_NODES = {"MapInPandas": "shed", "FlatMapGroupsInPandasWithState": "state"}
PYTHON_METRICS = {"time to start Python workers": "start", "time to initialize Python workers": "init",
                  "time to execute Python code": "exec"}


def millis(value: str) -> float:
    """A Spark SQL timing metric's total in ms (``'6 ms'``, ``'total (min, med, max ...)\\n1.2 s (...)'``)."""
    m = re.search(r"([\d.,]+) (ms|s|m|h)\b", value.split("\n", 1)[-1])
    if not m:
        return 0.0
    return float(m.group(1).replace(",", "")) * {"ms": 1, "s": 1e3, "m": 6e4, "h": 3.6e6}[m.group(2)]


def batch_of(description: str | None) -> int | None:
    m = re.search(r"batch = (\d+)", description or "")
    return int(m.group(1)) if m else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=int, default=2000, help="events per file, one file a second")
    p.add_argument("--duration", type=int, default=40, help="seconds of feeding")
    p.add_argument("--model", default="hash", help="--shedding-model (hash, tree, random, type)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting")
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--probe", action="store_true",
                   help="time the Python workers' tasks and PySpark's collections after them (bench/worker_probe)")
    args = p.parse_args()
    root = Path(__file__).resolve().parent
    sys.path[:0] = [str(root), str(root.parent)]
    first = [str(root / "worker_probe")] if args.probe else []
    os.environ["PYTHONPATH"] = os.pathsep.join([*first, str(root.parent), os.environ.get("PYTHONPATH", "")])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    import live_latency
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQueryListener

    from sparkcep.cli import main as cli

    tmp = Path(tempfile.mkdtemp(prefix="sparkcep-fixed-cost-"))
    if args.probe:
        os.environ["SPARKCEP_WORKER_PROBE"] = str(tmp / "probe.jsonl")
    w = live_latency.Workload(True, tmp, 50, args.seed)
    (tmp / "train").mkdir()
    live_latency.write_file(tmp / "train", 0, w.files(5000, 1, args.seed + 2)[0])
    files = w.files(args.rate, args.duration + 1, args.seed)
    inbox = tmp / "in"
    inbox.mkdir()
    builder = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "true")
               .config("spark.ui.showConsoleProgress", "false").config("spark.driver.host", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", 4).config("spark.default.parallelism", 4)
               .config("spark.sql.session.timeZone", "UTC").config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true"))
    for kv in args.conf:  # as run's own session would be, then the settings asked for
        key, value = kv.split("=", 1)
        builder = builder.config(key, value)
    spark = builder.getOrCreate()  # run --stream takes the active session
    spark.sparkContext.setLogLevel("ERROR")
    progress: list[dict] = []

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event):  # noqa: N802 - PySpark's names
            pass

        def onQueryProgress(self, event):  # noqa: N802
            progress.append(json.loads(event.progress.json))

        def onQueryIdle(self, event):  # noqa: N802
            pass

        def onQueryTerminated(self, event):  # noqa: N802
            pass

    spark.streams.addListener(Listener())

    def feed() -> None:
        live_latency.write_file(inbox, 0, files[0])
        while not progress:
            time.sleep(0.2)
        t0 = time.monotonic()
        for k in range(1, len(files)):
            live_latency.write_file(inbox, k, files[k])
            time.sleep(max(0.0, t0 + k - time.monotonic()))
        time.sleep(2)
        os.kill(os.getpid(), signal.SIGTERM)  # run stops between micro-batches

    threading.Thread(target=feed, daemon=True).start()
    cli(["run", str(w.file), "--ts-unit", "ms", "--input", str(inbox), "--output", str(tmp / "out"), "--stream",
         "--checkpoint", str(tmp / "ck"), "--schema", w.schema, "--shedding-training", str(tmp / "train"),
         "--shedding-latency", "5s", "--shedding-model", args.model])
    time.sleep(2)  # the last events of the listener bus
    ui, app = spark.sparkContext.uiWebUrl, spark.sparkContext.applicationId

    def rest(path: str):
        with urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/{path}") as r:
            return json.load(r)

    jobs = collections.defaultdict(list)
    for j in rest("jobs"):
        jobs[batch_of(j.get("description"))].append(j)
    stages = {s["stageId"]: s for s in rest("stages?status=complete")}
    python = collections.defaultdict(collections.Counter)
    for e in rest("sql?details=true&planDescription=false&length=1000"):
        b = batch_of(e.get("description"))
        for node in e.get("nodes", []):
            op = PYTHON_NODES.get(node["nodeName"])
            for m in node.get("metrics", []) if op else ():
                if m["name"] in PYTHON_METRICS:
                    python[b][f"{op} {PYTHON_METRICS[m['name']]}"] += millis(m["value"])
    cols = [f"{op} {what}" for op in PYTHON_NODES.values() for what in PYTHON_METRICS.values()]
    print(f"rate {args.rate} ev/s, model {args.model}, conf {args.conf or 'none'}; ms per micro-batch")
    print(f"{'batch':>5} {'rows':>6} " + " ".join(f"{k[:12]:>12}" for k in DURATIONS)
          + f" {'jobs':>4} {'stages':>6} {'tasks':<12} {'task run':>8} {'JVM cpu':>7} {'commit':>6} "
          + " ".join(f"{c:>12}" for c in cols))
    total, n = collections.Counter(), 0
    for prog in progress:
        d = prog.get("durationMs") or {}
        if "addBatch" not in d:  # waiting for data
            continue
        b = prog["batchId"]
        ids = [s for j in jobs.get(b, []) for s in j["stageIds"] if s in stages]
        tasks = [stages[s]["numTasks"] for s in ids]
        row = {**{k: d.get(k, 0) for k in DURATIONS}, "jobs": len(jobs.get(b, [])), "stages": len(ids),
               "tasks": sum(tasks), "task run": sum(stages[s]["executorRunTime"] for s in ids),
               "JVM cpu": sum(stages[s]["executorCpuTime"] for s in ids) / 1e6,
               "commit": sum(o.get("commitTimeMs") or 0 for o in prog.get("stateOperators", [])),
               **{c: python[b][c] for c in cols}}
        print(f"{b:>5} {prog['numInputRows']:>6} " + " ".join(f"{row[k]:>12}" for k in DURATIONS)
              + f" {row['jobs']:>4} {row['stages']:>6} {str(tasks):<12} {row['task run']:>8} {row['JVM cpu']:>7.0f} "
              f"{row['commit']:>6} " + " ".join(f"{row[c]:>12.0f}" for c in cols))
        if b > 1:
            n += 1
            total.update(row)
    print(f"mean over {n} batches after the first two: "
          + ", ".join(f"{k} {v / max(n, 1):.1f}" for k, v in total.items()))
    if args.probe:
        probed(tmp / "probe.jsonl")


#: PySpark's eval types of the stream's two Python operators
EVAL_TYPES = {205: "shedding stage (mapInPandas)", 208: "state (applyInPandasWithState)"}


def probed(path: Path) -> None:
    """The probe's summary (``--probe``): per Python operator, its tasks' wait for the JVM's task (what Spark
    counts as "time to initialize" in a reused worker), unpickling and whole-task CPU; then PySpark's
    collections after the tasks (what the next task waits for: Spark's "time to start")."""
    import statistics

    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    workers = {r["pid"] for r in records}
    print(f"Python workers probed: {len(workers)} processes (pids {sorted(workers)}); medians, ms")
    for code, name in EVAL_TYPES.items():
        tasks = [r for r in records if r["kind"] == "task" and r.get("eval") == code]
        if tasks:
            med = {k: 1e3 * statistics.median(r.get(k) or 0 for r in tasks)
                   for k in ("wait", "unpickle_cpu", "cpu", "wall")}
            print(f"  {name}: {len(tasks)} tasks, waiting for the task {med['wait']:.1f}, unpickling CPU "
                  f"{med['unpickle_cpu']:.2f}, task CPU {med['cpu']:.1f}, task wall {med['wall']:.1f}")
    gcs = [r for r in records if r["kind"] == "gc"]
    if gcs:
        cpu, wall = (1e3 * statistics.median(r[k] for r in gcs) for k in ("cpu", "wall"))
        print(f"  the daemon's collection after a task: {len(gcs)}, CPU {cpu:.2f} (sum {sum(r['cpu'] for r in gcs):.2f}"
              f" s), wall {wall:.2f}, objects tracked {statistics.median(r['tracked'] for r in gcs):.0f}, frozen "
              f"{min(r['frozen'] for r in gcs)}..{max(r['frozen'] for r in gcs)}")


if __name__ == "__main__":
    main()
