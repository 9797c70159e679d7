"""Where a MATCH_RECOGNIZE statement's time goes on Spark, paired sides in one process (default: the V-shape of
``bench/match_recognize.py`` over 10^6 rows).

Sides, run in rounds that alternate their order (one warm-up round first, not counted):

* ``plain``: plain Spark's window functions (``match_recognize.plain_spark``);
* ``streamed``: ``sparkcep.sql`` as it runs (the worker runs the partitions as the Arrow batches arrive, when the
  keys allow: ``sparkcep.spark.recognize.streamable``);
* ``gathered``: the same with ``streamable`` patched false in the driver (the worker takes the task's batches
  whole first, as before 2026-11-27);
* ``unpruned``: the same with every result column returned by the worker (``pruned_output`` patched to keep
  them all, as before 2026-11-27: the V-shape count's worker then returns ``p`` too);
* ``pysort``: a diagnostic plan, not one sparkcep makes: no Spark sort after the shuffle; the worker gets every
  engine column (the tiebreak columns and the time column too: no worker spec), sorts its task's rows with Arrow
  (``sort_indices`` by ``sort_order``) and runs them gathered.  It tells the JVM's sort against a sort in
  Python and the columns it then has to ship;
* ``unbounded``: ``streamed`` with ``spark.sql.execution.arrow.maxBytesPerBatch`` at ``2^31 - 1`` (no byte
  limit) for its runs: Spark 4 (64 MiB by default) measures the Arrow batch it builds after every row it adds
  (``ArrowWriter.sizeInBytes``), a per-row cost of the rows sent to the worker;
* ``streamed<N>`` (e.g. ``streamed4``): ``streamed`` shuffled into ``N`` Spark partitions instead of
  ``spark.sql.shuffle.partitions`` (2 here): more tasks than cores even out the rows hash(p) gives each task
  (42/58% of the V-shape's rows in 2 tasks), for more tasks' fixed cost.

``--all-rows``: the statement as ALL ROWS PER MATCH with ``MEASURES CLASSIFIER() AS cls``, counted per ``cls``
(``SELECT cls, COUNT(*), SUM(id) ... GROUP BY cls``: the outer query reads ``cls`` and ``id`` of the result's
``p, ts, id, cls, typ, price``); there is no plain Spark side then.

Per run: wall seconds; the executor CPU of the job's stages (Spark's REST API: the UI is on in this session);
the CPU of this JVM's Python worker processes (``/proc``, 10 ms ticks) and of the JVM process; with
``--instrument`` the worker's own timeline per task (its ``mapInArrow`` function wrapped in the driver): batches
and rows in, seconds until the first batch, until the last one, the tail after it (work no conversion overlaps) and
the task's CPU.  With ``--metrics`` Spark's SQL metrics of the run's operators (REST ``/sql``, summed over
tasks): the sort's time, the shuffle's write time, the rows and bytes sent to and returned from the Python
workers.  Load-robust figures are the CPU ones, the tail and the bytes; walls move with the machine's load
(print ``uptime`` with them).

    python bench/recognize_split.py [--rows 1000000] [--repeat 8] [--pattern vshape]
        [--sides plain,gathered,streamed,unpruned,pysort,streamed4] [--instrument] [--metrics] [--stages]
        [--all-rows]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import match_recognize as mr  # noqa: E402


def _session():
    from pyspark.sql import SparkSession

    from sparkcep.spark.session import quiet_java_options

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    b = SparkSession.builder.master("local[2]").config("spark.driver.extraJavaOptions", quiet_java_options())
    for k, v in {"spark.sql.shuffle.partitions": 2, "spark.default.parallelism": 2, "spark.ui.enabled": "true",
                 "spark.ui.port": str(random.randint(20000, 30000)), "spark.driver.host": "127.0.0.1",
                 "spark.ui.showConsoleProgress": "false", "spark.sql.session.timeZone": "UTC",
                 "spark.sql.execution.arrow.pyspark.enabled": "true"}.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _ticks(pid: int) -> float:
    st = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")


def _python_cpu(jvm: int) -> float:
    """CPU seconds of the processes under the JVM ``jvm`` (its Python daemon and workers)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                kids.setdefault(int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1]), []).append(
                    int(d))
            except OSError:
                continue
    total, todo = 0.0, list(kids.get(jvm, []))
    while todo:
        p = todo.pop()
        todo += kids.get(p, [])
        try:
            total += _ticks(p)
        except OSError:
            pass
    return total


def _instrumented(original, log: str):
    """``partition_function`` whose function appends its task's timeline to ``log`` (a JSON line)."""

    def partition_function(*a, **k):
        fn = original(*a, **k)

        def run(batches):
            import json as j
            import time as t

            t0, c0 = t.perf_counter(), t.process_time()
            rec = {"batches": 0, "rows": 0, "first": None}

            def arriving():
                for b in batches:
                    rec["first"] = t.perf_counter() - t0 if rec["first"] is None else rec["first"]
                    rec["batches"] += 1
                    rec["rows"] += b.num_rows
                    yield b
                rec["last"] = t.perf_counter() - t0

            yield from fn(arriving())
            rec["tail"] = t.perf_counter() - t0 - rec["last"]
            rec["cpu"] = t.process_time() - c0
            with open(log, "a") as f:
                f.write(j.dumps(rec) + "\n")

        return run

    return partition_function


#: SQL metrics shown by ``--metrics``: (operator, metric) -> label.
METRICS = {("Sort", "sort time"): "sort_ms", ("Exchange", "shuffle write time"): "shuffle_write_ms",
           ("MapInArrow", "data sent to Python workers"): "to_python_mib",
           ("MapInArrow", "data returned from Python workers"): "from_python_mib",
           ("MapInArrow", "number of output rows"): "rows_back"}

_UNITS = {"ms": 1.0, "s": 1000.0, "min": 60_000.0, "h": 3_600_000.0, "B": 1 / 2 ** 20, "KiB": 1 / 2 ** 10,
          "MiB": 1.0, "GiB": 2 ** 10}


def metric_value(text: str) -> float:
    """A SQL metric's total (``"1,000"``, ``"171 ms"``, or ``"total (min, med, max ...)\n4.7 MiB (...)"``) in
    ms, MiB or a count."""
    first = text.split("\n")[-1].split(" (")[0].strip()
    number, _, unit = first.partition(" ")
    return float(number.replace(",", "")) * _UNITS.get(unit, 1.0)


def sql_metrics(execution: dict) -> dict[str, float]:
    """The :data:`METRICS` of one SQL execution (REST ``/sql/<id>?details=true``), summed over its operators."""
    out: dict[str, float] = {}
    for node in execution.get("nodes", []):
        for m in node.get("metrics", []):
            label = METRICS.get((node["nodeName"], m["name"]))
            if label:
                out[label] = out.get(label, 0.0) + metric_value(m["value"])
    return out


def stage_label(stage: dict) -> str:
    """``cpu_<kind>`` of a completed stage (REST ``stages/<id>``): ``scan`` (reads the input, writes a shuffle),
    ``sorted`` (reads a shuffle and writes one: the sort, the window or the worker, the partial aggregate) or
    ``final`` (reads a shuffle, writes none: the final aggregate)."""
    if stage.get("inputBytes", 0) or stage.get("inputRecords", 0):
        return "cpu_scan"
    return "cpu_sorted" if stage.get("shuffleWriteBytes", 0) else "cpu_final"


#: Spark SQL confs in force during a side's runs (restored after each run).
SIDE_CONF = {"unbounded": {"spark.sql.execution.arrow.maxBytesPerBatch": str(2 ** 31 - 1)}}


@contextlib.contextmanager
def session_conf(spark, conf: dict[str, str]):
    """``conf`` set in ``spark``'s session inside the block, the former values (or their absence) restored."""
    saved = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


@contextlib.contextmanager
def patched(*changes):
    """``(module, attribute, value)`` changes in force inside the block (a side's variant of the plan)."""
    saved = [(m, a, getattr(m, a)) for m, a, _ in changes]
    for m, a, v in changes:
        setattr(m, a, v)
    try:
        yield
    finally:
        for m, a, v in saved:
            setattr(m, a, v)


def pysort_changes(SR) -> list[tuple]:
    """The changes of ``sparkcep.spark.recognize`` (``SR``) that make the ``pysort`` side (module docstring)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    batch_recognize, partition_function = SR.batch_recognize, SR.partition_function
    order: list = []

    def whole_worker(projected, spec, *, partitions=None, worker=None):
        return batch_recognize(projected, spec, partitions=partitions, worker=None)

    def unsorted(df, columns, by, select=None, windows=()):
        order[:] = by
        return df.select(*[df[SR.quoted(c)] for c in columns])

    def sorting_worker(spec, struct, **kw):
        fn = partition_function(spec, struct, **{**kw, "streamed": False})
        keys = [(c, "ascending" if up else "descending", "at_start" if first else "at_end") for c, up, first in order]

        def run(batches):
            t = pa.Table.from_batches(list(batches))
            yield from fn(iter(t.take(pc.sort_indices(t, sort_keys=keys)).to_batches()))

        return run

    return [(SR, "batch_recognize", whole_worker), (SR, "_sorted", unsorted),
            (SR, "partition_function", sorting_worker)]


def all_rows(sql: str) -> str:
    """``sql`` (a counted ONE ROW PER MATCH statement of ``match_recognize``) as ALL ROWS PER MATCH with the
    classifier, counted per label."""
    sql = sql.replace("MEASURES FIRST(id) AS a, LAST(id) AS c ONE ROW PER MATCH",
                      "MEASURES CLASSIFIER() AS cls ALL ROWS PER MATCH")
    return sql.replace("SELECT COUNT(*) AS n, SUM(a) AS sa, SUM(c) AS sc", "SELECT cls, COUNT(*) AS n, SUM(id) AS s") \
        + " GROUP BY cls"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=8)
    ap.add_argument("--pattern", default="vshape", choices=list(mr.PATTERNS))
    ap.add_argument("--sides", default="plain,gathered,streamed")
    ap.add_argument("--instrument", action="store_true")
    ap.add_argument("--metrics", action="store_true", help="Spark's SQL metrics of each run's operators")
    ap.add_argument("--stages", action="store_true",
                    help="the executor CPU of each stage kind (stage_label): scan, shuffle read, final")
    ap.add_argument("--all-rows", action="store_true", help="ALL ROWS PER MATCH, counted per CLASSIFIER()")
    args = ap.parse_args(argv)

    import sparkcep
    import sparkcep.compiler.recognize as CR
    import sparkcep.spark.recognize as SR

    spark = _session()
    sc = spark.sparkContext
    jvm = int(sc._jvm.java.lang.ProcessHandle.current().pid())

    def rest(path: str):
        with urllib.request.urlopen(f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/{path}") as r:
            return json.load(r)

    with tempfile.TemporaryDirectory(prefix="sparkcep-split-") as tmp:
        csv, log = Path(tmp) / "events.csv", str(Path(tmp) / "worker.log")
        mr.write_events(csv, args.rows)
        spark.read.csv(str(csv), schema=mr.SPARK_SCHEMA).createOrReplaceTempView("events")
        if args.instrument:
            SR.partition_function = _instrumented(SR.partition_function, log)
        sql = mr.statement(mr.PATTERNS[args.pattern][1], flink=False)
        if args.all_rows:
            sql = all_rows(sql)
        variants = {"plain": None, "streamed": [], "unbounded": [], "gathered": [(SR, "streamable", lambda *a: False)],
                    "unpruned": [(CR, "pruned_output", lambda spec, outer: spec)], "pysort": pysort_changes(SR)}

        def shuffled_into(n: int) -> list[tuple]:
            batch_recognize = SR.batch_recognize

            def spread(projected, spec, *, partitions=None, worker=None):
                return batch_recognize(projected, spec, partitions=n, worker=worker)

            return [(SR, "batch_recognize", spread)]

        def side(name: str):
            if name == "plain" and args.all_rows:
                raise SystemExit("--all-rows has no plain Spark side")
            if name not in variants and name.startswith("streamed") and name[8:].isdigit():
                variants[name] = shuffled_into(int(name[8:]))
            if variants[name] is None:
                return [tuple(mr.plain_spark(args.pattern, spark.read.csv(str(csv), schema=mr.SPARK_SCHEMA))
                              .collect()[0])]
            with patched(*variants[name]), session_conf(spark, SIDE_CONF.get(name, {})):
                return sorted(tuple(r) for r in sparkcep.sql(sql, spark).collect())

        names = args.sides.split(",")
        print(f"{args.rows:,} rows, {mr.PATTERNS[args.pattern][0]}, local[2], nproc={os.cpu_count()}, "
              f"load {os.getloadavg()[0]:.1f} at start")
        got: dict[str, list[dict]] = {n: [] for n in names}
        answer = None
        for r in range(args.repeat + 1):
            for name in names if r % 2 == 0 else names[::-1]:
                if os.path.exists(log):
                    os.remove(log)
                group = f"{name}-{r}"
                sc.setJobGroup(group, name)
                py0, jvm0 = _python_cpu(jvm), _ticks(jvm)
                t0 = time.perf_counter()
                row = tuple(side(name))
                wall = time.perf_counter() - t0
                time.sleep(0.3)  # the workers' last ticks
                answer = answer or row
                assert row == answer, f"{name}: {row} != {answer}"
                cpu = run = 0.0
                jobs = [job for job in rest("jobs") if job.get("jobGroup") == group]
                metrics: dict[str, float] = {}
                if args.metrics:
                    ids = {j["jobId"] for j in jobs}
                    for ex in rest("sql?details=true&length=1000"):
                        if ids & set(ex.get("successJobIds", []) + ex.get("failedJobIds", [])):
                            for k, v in sql_metrics(ex).items():
                                metrics[k] = metrics.get(k, 0.0) + v
                stages: dict[str, float] = {}
                for job in jobs:
                    for sid in job["stageIds"]:
                        for st in rest(f"stages/{sid}"):
                            cpu += st["executorCpuTime"] / 1e9
                            run += st["executorRunTime"] / 1e3
                            if args.stages and st.get("status") == "COMPLETE":
                                label = stage_label(st)
                                stages[label] = stages.get(label, 0.0) + st["executorCpuTime"] / 1e9
                tasks = [json.loads(x) for x in open(log)] if os.path.exists(log) else []
                if r:
                    got[name].append({"wall": wall, "stage_cpu": cpu, "stage_run": run,
                                      "python_cpu": _python_cpu(jvm) - py0, "jvm_cpu": _ticks(jvm) - jvm0,
                                      **({"tail": max(x["tail"] for x in tasks),
                                          "task_cpu": sum(x["cpu"] for x in tasks)} if tasks else {}),
                                      **metrics, **stages})
                    for x in tasks:
                        print(f"  {name} task: {x['batches']} batches, {x['rows']:,} rows, first batch at "
                              f"{x['first']:.3f} s, last at {x['last']:.3f} s, tail {x['tail']:.3f} s, "
                              f"CPU {x['cpu']:.3f} s")
        print(f"answer {answer}; medians of {args.repeat} (seconds), load {os.getloadavg()[0]:.1f} at the end")
        for name in names:
            keys = got[name][0].keys()
            print(f"{name:>9}: " + ", ".join(f"{k} {statistics.median(x[k] for x in got[name]):.3f}" for k in keys))


if __name__ == "__main__":
    main()
