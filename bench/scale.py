"""Growth: the time per event of a match, a Kleene and a trend query on Spark (batch) as the input grows 10x.

Over :func:`pattern_matching.keyed_events` files (``ts`` 0, 1, 2, ...; types A-D uniform; ``--ids`` ids; ``x``
uniform over 0..99; written once under ``--data-dir`` and reused), in one Spark session (``local[2]``, 2 shuffle
partitions), for each size of ``--sizes`` and each query of :data:`QUERIES`: ``sparkcep.compile(q).apply(df)
.count()`` over the files as read (not cached), wall-clock and the CPU time of the whole Spark process tree
(driver, JVM, Python workers) per run, medians of ``--repeat`` runs after one warm-up of every query at the
smallest size (Python workers started, numba's cache loaded); the runs of the queries alternate.  Per size it
prints the time per event and the growth factor per 10x (time per event at 10n / time per event at n; for sizes
not 10x apart, the ratio scaled to 10x geometrically: the goal is <= 1.3 from 10^6 to 10^7) and the peak memory of
the run's Spark stages from Spark's executor metrics (:func:`peak_memory`: the status store's per-stage
``peakExecutorMetrics``, as the REST API's ``stages`` endpoint reports them: JVM heap, and the resident memory of
the JVM and of the Python processes under it, the daemon and its workers, ``spark.executor.processTreeMetrics
.enabled``, polled every ``spark.executor.metrics.pollingInterval`` = 100 ms).  A partition is gathered into one
Arrow table in its Python worker (~30 bytes a row) and run in slices of whole keys of about 2^19 rows
(``MatchOperator.run_slices``), so the engine's working memory follows the slice; the gathered input still grows
with the input per partition.  5*10^7 events (~19M candidates per partition on 2 partitions) has not been tried.

    python bench/scale.py [--sizes 100000,1000000] [--repeat 3] [--queries match,kleene,trend]
    python bench/scale.py --sizes 100000,1000000,10000000 --repeat 5                       # the issue's sizes
    python bench/scale.py --sizes 100000,1000000,10000000,50000000 --repeat 3              # where disk allows

It prints its expected run time first (default sizes: ~1 min quiet on 2 cores; with 10^7 and ``--repeat 5``:
~10 min; with 5*10^7: ~45 min and ~0.3 GB of Parquet files (10^7: 61 MB); a guess from runs under load).  State
the machine and its load next to the figures.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pattern_matching import BASELINE_QUERY, Table, _ints, _spark_session, keyed_events, measured  # noqa: E402

import sparkcep  # noqa: E402

#: name → query over the keyed events (the match query is bench/pattern_matching.py's baselines query)
QUERIES = {
    "match": BASELINE_QUERY.format(window=100),
    "kleene": "PATTERN SEQ(A a, B+ b[], C c) WHERE [id] AND a.x < c.x WITHIN 100 RETURN a.ts, c.ts, count(b[].x) AS bs",
    "trend": "RETURN id, COUNT(*) AS trends, SUM(B.x) AS bx PATTERN SEQ(A, B+, C) WHERE [id] WITHIN 1000 SLIDE 1000",
}

#: the executor metrics :func:`peak_memory` reports (Spark's names), and their column titles
MEMORY_METRICS = {"JVMHeapMemory": "JVM heap MB", "ProcessTreeJVMRSSMemory": "JVM RSS MB",
                  "ProcessTreePythonRSSMemory": "Python RSS MB"}

#: the Spark confs that make executors report their process trees' memory, polled often enough for short tasks
METRICS_CONF = {"spark.executor.processTreeMetrics.enabled": "true",
                "spark.executor.metrics.pollingInterval": "100ms"}

#: seconds per event of each query, a guess for 2 quiet cores (for the expected run time the script prints; under
#: load 30 the CPU per event at 10^6 was 2.2, 2.4 and 8.1 µs)
COST_PER_EVENT = {"match": 2e-6, "kleene": 2e-6, "trend": 6e-6}


def session():
    """The bench's Spark session (:func:`pattern_matching._spark_session`) with :data:`METRICS_CONF` given to the
    JVM at its start (``PYSPARK_SUBMIT_ARGS``: the executor reads them when it starts)."""
    confs = " ".join(f"--conf {key}={value}" for key, value in METRICS_CONF.items())
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"{confs} {os.environ.get('PYSPARK_SUBMIT_ARGS', 'pyspark-shell')}"
    spark = _spark_session()
    for key, value in METRICS_CONF.items():
        assert spark.sparkContext.getConf().get(key) == value, (key, "not set: a session was already running")
    return spark


def peak_memory(spark, group: str) -> dict[str, float]:
    """The peak of each of :data:`MEMORY_METRICS` (bytes) over the stages of the jobs of ``group`` (a job group set
    with ``setJobGroup``): the status store's ``peakExecutorMetrics`` of each stage's last attempt, the figures the
    REST API's ``/applications/[app]/stages`` endpoint gives (the bench's session has no UI; the store is there)."""
    tracker = spark.sparkContext.statusTracker()
    store = spark.sparkContext._jsc.sc().statusStore()
    peaks = dict.fromkeys(MEMORY_METRICS, 0.0)
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info is not None else ():
            try:
                metrics = store.lastStageAttempt(stage).peakExecutorMetrics()
            except Exception:  # noqa: BLE001 - a stage skipped or not yet in the store: no figure
                continue
            if metrics.isDefined():
                for name in peaks:
                    peaks[name] = max(peaks[name], float(metrics.get().getMetricValue(name)))
    return peaks


def growth(per_event: dict[int, float], n: int) -> float | None:
    """Per-event time at ``n`` over the next smaller size's, scaled to a 10x step (None for the smallest)."""
    smaller = [m for m in per_event if m < n]
    if not smaller:
        return None
    m = max(smaller)
    return (per_event[n] / per_event[m]) ** (1 / math.log10(n / m))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=_ints, default=[100_000, 1_000_000], help="events per input, ascending")
    ap.add_argument("--queries", default=",".join(QUERIES), help=f"comma-separated, of {', '.join(QUERIES)}")
    ap.add_argument("--ids", type=int, default=100, help="id values (the equivalence key)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per size and query (median)")
    ap.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "sparkcep-bench"),
                    help="where the Parquet files are written once and reused")
    args = ap.parse_args(argv)
    names = [name for name in args.queries.split(",") if name]
    sizes = sorted(args.sizes)
    per_event = sum(COST_PER_EVENT[name] for name in names)
    expected = (sum(sizes) * args.repeat + sizes[0]) * per_event
    print(f"scale: sizes {', '.join(f'{n:,}' for n in sizes)}, queries {', '.join(names)}, {args.repeat} runs "
          f"each: expected ~{expected / 60 + 0.5:.0f} min on 2 quiet cores (plus ~{sum(sizes) * 1e-7:.0f} s to write "
          f"files not yet in {args.data_dir})", flush=True)

    spark = session()
    compiled = {name: sparkcep.compile(QUERIES[name]) for name in names}
    frames = {n: spark.read.parquet(str(keyed_events(args.data_dir, n, args.ids))) for n in sizes}
    measured([lambda q=q: q.apply(frames[sizes[0]]).count() for q in compiled.values()], 0)  # warm-up

    groups = iter(range(1 << 30))
    peaks: dict[tuple[str, int], dict[str, float]] = {}

    def run(name: str, n: int):
        def once() -> int:
            group = f"scale-{name}-{n}-{next(groups)}"
            spark.sparkContext.setJobGroup(group, group)
            try:
                return compiled[name].apply(frames[n]).count()
            finally:
                spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
                seen = peak_memory(spark, group)
                top = peaks.setdefault((name, n), dict.fromkeys(MEMORY_METRICS, 0.0))
                for metric, value in seen.items():
                    top[metric] = max(top[metric], value)
        return once

    table = Table("Growth on Spark (batch): time per event by input size",
                  ["query", "events", "rows out", "wall s", "µs/event", "growth/10x", "CPU s", "CPU µs/event",
                   "CPU growth/10x", *MEMORY_METRICS.values(), "load"])
    wall_per_event: dict[str, dict[int, float]] = {name: {} for name in names}
    cpu_per_event: dict[str, dict[int, float]] = {name: {} for name in names}
    for n in sizes:
        results = measured([run(name, n) for name in names], args.repeat, warm=False)
        for name, r in zip(names, results, strict=True):
            wall_per_event[name][n] = r.median / n
            cpu_per_event[name][n] = r.median_cpu / n
            g, gc = growth(wall_per_event[name], n), growth(cpu_per_event[name], n)
            table.rows.append([name, n, r.result, r.median, r.median / n * 1e6, f"{g:.2f}x" if g else "-",
                               r.median_cpu, r.median_cpu / n * 1e6, f"{gc:.2f}x" if gc else "-",
                               *(peaks[(name, n)][m] / 2 ** 20 for m in MEMORY_METRICS),
                               f"{os.getloadavg()[0]:.1f}"])
        print(f"  {n:,} events done (load {os.getloadavg()[0]:.1f})", flush=True)
    table.print()
    print(f"local[2], 2 shuffle partitions, {os.cpu_count()} CPUs; medians of {args.repeat} runs (queries "
          f"alternating) after a warm-up of each at {sizes[0]:,} events; 'CPU': the whole Spark process tree; "
          f"'growth/10x': µs/event over the previous size's, scaled to a 10x step; memory: the largest "
          f"peakExecutorMetrics of the run's stages (Spark's executor metrics); 'load': 1-minute load average "
          f"after the size.  Queries:")
    for name in names:
        print(f"  {name}: {QUERIES[name]}")


if __name__ == "__main__":
    main()
