"""Keyless match queries on Spark: one shuffle partition (the former path) against time ranges on two.

A query without an equivalence key has nothing to partition by; the batch path splits its input into time ranges
that overlap by the window (``runtime_udfs/match/ranges.py``: ranges of ``spark.sparkcep.keylessRangeWindows``
windows, 16 by default, dealt round robin over the shuffle partitions).  This script times keyless queries
(``--queries``) over generated Parquet files of each of ``--sizes`` events on Spark ``local[2]`` in one session:

``q1``          gSPICE's Q1 shape, ``SEQ(A a, B b, C c) WHERE a.x < c.x WITHIN --window``: ts 0, 1, 2, ... (a
                window of W ts units holds W events), ``--types`` types uniform of which A, B and C are in the
                query, x uniform in 0..9;
``healthcare``  SASE's healthcare query, ``SEQ(MEDICINE-TAKEN x, MEDICINE-TAKEN y) WHERE [name = 'John'] AND
                [medicine = 'Antibiotics'] AND x.amount + y.amount > 1000 WITHIN 4 hours``: one event a second
                (ts in ms), 5 types, 10 names, 4 medicines, amount uniform in 0..999 (1 event in 200 is a
                candidate: the scan and filter, not the engine, are most of its work).

(gSPICE's Q2, an ``OR`` of two sequences, does not start with one positive event: it runs in one partition and is
not timed here.)  Each query runs with ``spark.sparkcep.keylessRanges=false`` and ``spark.sql.shuffle.partitions``
= 1 (the whole input after the filter in one task: one core) and with ``keylessRanges=true`` and 2 shuffle partitions
(the time ranges on two partitions, one per core): wall-clock medians of ``--repeat`` alternating runs after a
warm-up of each, both counting the same matches (checked); the ratio is the issue's goal (>= 1.7x on 2 cores,
quiet).  The files are written in row groups of ``--row-group`` rows, so that Spark scans them on both cores in
both runs, as it does any input of more than one row group: only the part after the filter differs.  The
``default`` column is what ``keylessRanges`` unset (``auto``) picks for that input, from its estimated size
(``spark.sparkcep.keylessRangeMinBytes``).

    python bench/keyless_parallel.py [--sizes 1000000,10000000] [--queries q1,healthcare] [--window 100]
                                      [--types 20] [--repeat 3] [--range-windows 16] [--breakdown]

Each row gives the CPU time (user + system) of the whole Spark process tree (driver, JVM, Python workers; from
``/proc``, Linux) of the same timed runs, medians of ``--repeat``: unlike wall-clock time on a machine shared with
other jobs, it does not depend on the load (two partitions can only be faster if they do not cost much more CPU).

``--breakdown`` adds where each side's CPU goes (:func:`breakdown`; medians of ``--repeat`` after a warm-up):
building the DataFrame (``q.apply(df)``, no job), then its count split into the JVM's task threads, the Python
workers and the rest (the driver: planning, adaptive re-planning, the JVM's compilers and collector).

``--breakdown`` also gives the JVM tasks' CPU per stage, in stage order (the scan and filter, then the
``mapInArrow`` stage and the count's), each stage's wall-clock time, and the bound of equal work on 2 cores: the
one-partition run with its ``mapInArrow`` stage (the only one that runs on one core) taking half its time.

Both sides' Python workers run their rows in time slices of about ``SLICE_ROWS`` rows overlapping by the window
(``MatchOperator._time_sliced``): the one-partition side its whole table, each range partition the union of its
ranges (never two adjacent; no range column is shuffled since 2026-11-27, ``runtime_udfs/match/ranges.py``).
Until 2026-11-27 the one-partition side ran its whole table (q1 at 10^7: 1.5 million rows) as one columnar pass,
which cost twice the system CPU of both range workers together (page faults on fresh memory for the larger arrays:
1.07-1.10 s against 0.52-0.61 s, fed the same Arrow batches in one process, 2 cores, load 3-4) and was part of the
speed-up reported then.

State the machine and its load next to the figures (the project's reference is a 2-core VM).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pattern_matching import _spark_session, measured, tree_cpu  # noqa: E402

import sparkcep  # noqa: E402
from sparkcep.spark.io import read_events  # noqa: E402

#: the queries (``--queries``): name -> (query text with ``{window}``, compile options)
QUERIES = {
    "q1": ("PATTERN SEQ(A a, B b, C c) WHERE a.x < c.x WITHIN {window} RETURN a.ts AS a_ts, c.ts AS c_ts", {}),
    "healthcare": ("EVENT SEQ(MEDICINE-TAKEN x, MEDICINE-TAKEN y) WHERE [name = 'John'] AND "
                   "[medicine = 'Antibiotics'] AND (x.amount + y.amount) > 1000 WITHIN 4 hours "
                   "RETURN x.ts AS x_ts, y.ts AS y_ts", {"ts_unit": "ms"}),
}


def query(window: int, name: str = "q1") -> str:
    return QUERIES[name][0].format(window=window)


def write_events(path: Path, rows: int, kinds: int, seed: int = 18, name: str = "q1",
                 row_group: int = 100_000) -> None:
    """``rows`` events of query ``name``'s shape in one Parquet file of row groups of ``row_group`` rows."""
    rng = np.random.default_rng(seed)
    if name == "healthcare":
        kinds_of = np.array(["MEDICINE-TAKEN", "CHECK-IN", "CHECK-OUT", "TEST", "VISIT"])
        table = pa.table({"type": kinds_of[rng.integers(0, 5, rows)],
                          "ts": np.arange(rows, dtype=np.int64) * 1000,
                          "name": np.array(["John", *(f"p{k}" for k in range(9))])[rng.integers(0, 10, rows)],
                          "medicine": np.array(["Antibiotics", "Insulin", "Aspirin", "Statin"])[
                              rng.integers(0, 4, rows)],
                          "amount": rng.integers(0, 1000, rows, dtype=np.int64)})
    else:
        types = np.array([chr(ord("A") + k) for k in range(kinds)])[rng.integers(0, kinds, rows)]
        table = pa.table({"type": types, "ts": np.arange(rows, dtype=np.int64),
                          "x": rng.integers(0, 10, rows, dtype=np.int64)})
    pq.write_table(table, path, row_group_size=row_group)


def stage_times(spark) -> dict[int, tuple[float, float | None]]:
    """Per stage so far, the CPU seconds of its tasks in the JVM (Spark's status store: the executors' task
    threads only, not the Python workers they feed, nor the driver's planning) and its wall-clock seconds from
    submission to completion (None for a stage that ran no task: skipped, or not complete)."""
    store = spark._jsc.sc().statusStore()
    gateway = spark.sparkContext._gateway
    stages = store.stageList(None, False, False, gateway.new_array(gateway.jvm.double, 0), None)

    def wall(s) -> float | None:
        if str(s.status()) != "COMPLETE" or not s.numCompleteTasks() or not s.submissionTime().isDefined() \
                or not s.completionTime().isDefined():
            return None
        return (s.completionTime().get().getTime() - s.submissionTime().get().getTime()) / 1e3

    return {int(s.stageId()): (s.executorCpuTime() / 1e9, wall(s)) for s in (stages.apply(i)
                                                                            for i in range(stages.size()))}


def worker_cpu() -> float:
    """CPU seconds of this driver's Python worker daemons and the workers they fork (:func:`tree_cpu` of each
    ``pyspark.daemon`` process descending from this one; ``/proc``, Linux)."""
    def daemon(pid: int | str) -> bool:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"pyspark.daemon" in f.read()

    def parent(pid: int) -> int:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])

    me, total = os.getpid(), 0.0
    for name in os.listdir("/proc"):
        try:
            # a worker is a fork of its daemon (the same command line): counted in the daemon's tree only
            if not name.isdigit() or not daemon(name) or daemon(parent(int(name))):
                continue
            pid = int(name)
            while pid > 1 and pid != me:
                pid = parent(pid)
        except (OSError, ValueError):
            continue
        if pid == me:
            total += tree_cpu(int(name))
    return total


def breakdown(spark, q, df, repeat: int) -> None:
    """Where each side's CPU and time go (medians of ``repeat`` alternating runs after a warm-up): ``q.apply(df)``
    alone (building the DataFrame: no job), then the count of the built DataFrame split into the JVM's task threads
    (:func:`stage_times`), the Python workers (:func:`worker_cpu`) and the rest of the process tree (the driver:
    planning, adaptive re-planning between stages, the JVM's compilers and garbage collector); then the wall-clock
    time of apply(), of each stage that ran tasks (submission to completion: the scan and filter, the ``mapInArrow``
    stage, and with ranges the count's final stage) and of the rest of the count (job start, between stages).  Last,
    the bound that equal work sets on 2 cores: the one-partition run with its ``mapInArrow`` stage (one task, all
    rows) taking half its time, everything else as it is (the scan runs on both cores either way)."""
    def applied(partitions: int):
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
        spark.conf.set("spark.sparkcep.keylessRanges", str(partitions > 1).lower())
        return q.apply(df)

    me = os.getpid()
    split: dict[int, list[tuple[float, ...]]] = {1: [], 2: []}
    per_stage: dict[int, list[tuple[float, ...]]] = {1: [], 2: []}
    walls: dict[int, list[tuple[float, ...]]] = {1: [], 2: []}
    for run in range(repeat + 1):
        for partitions in (1, 2):
            c0, t0 = tree_cpu(me), time.perf_counter()
            built = applied(partitions)
            c1, w1, stages, t1 = tree_cpu(me), worker_cpu(), stage_times(spark), time.perf_counter()
            built.count()
            t2, c2, w2 = time.perf_counter(), tree_cpu(me), worker_cpu()
            ran = sorted((k, v) for k, v in stage_times(spark).items() if k not in stages)
            tasks = sum(cpu for _, (cpu, _) in ran)
            if run:
                split[partitions].append((c1 - c0, c2 - c1, tasks, w2 - w1, c2 - c1 - tasks - (w2 - w1)))
                per_stage[partitions].append(tuple(cpu for _, (cpu, _) in ran))
                timed = [w for _, (_, w) in ran if w is not None]
                walls[partitions].append((t1 - t0, t2 - t1, t2 - t1 - sum(timed), *timed))
    medians = {}
    for partitions, runs in split.items():
        built, count, tasks, workers, rest = (statistics.median(v) for v in zip(*runs, strict=True))
        side = "1 partition" if partitions == 1 else "ranges     "
        stage = ([f"{statistics.median(v):.2f}" for v in zip(*per_stage[partitions], strict=True)]
                 if len({len(r) for r in per_stage[partitions]}) == 1 else ["(stages differ between runs)"])
        print(f"  CPU, {side}: apply() {built:.2f} s; count {count:.2f} s = JVM tasks {tasks:.2f} (per stage, in "
              f"order: {' + '.join(stage)}) + Python workers {workers:.2f} + driver and the rest {rest:.2f}")
        if len({len(r) for r in walls[partitions]}) == 1:
            medians[partitions] = [statistics.median(v) for v in zip(*walls[partitions], strict=True)]
            built, count, rest, *timed = medians[partitions]
            spans = " + ".join(f"{w:.2f}" for w in timed)
            print(f"  wall, {side} (medians of each): apply() {built:.2f} s; count {count:.2f} s: stages {spans}, "
                  f"the rest {rest:.2f}")
    if 1 in medians and len(medians[1]) >= 5:
        built, count, _, _, mia = medians[1][:5]
        whole = built + count
        print(f"  bound of equal work on 2 cores: 1 partition {whole:.2f} s with its mapInArrow stage halved: "
              f"{whole - mia / 2:.2f} s, {whole / (whole - mia / 2):.2f}x")


def ranged_by_default(spark, q, df) -> bool:
    """Whether ``q.apply(df)`` runs in time ranges with ``keylessRanges`` unset (its plan has the generator of the
    ranges' copies; no job runs)."""
    from sparkcep.spark.adapters import RANGES_CONF

    spark.conf.unset(RANGES_CONF)
    spark.conf.set("spark.sql.shuffle.partitions", 2)
    return "explode(" in q.apply(df)._jdf.queryExecution().optimizedPlan().toString()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000000,10000000", help="events of the generated files, comma-separated")
    ap.add_argument("--queries", default="q1,healthcare", help=f"comma-separated, of {', '.join(QUERIES)}")
    ap.add_argument("--window", type=int, default=100, help="q1's WITHIN (in ts units)")
    ap.add_argument("--types", type=int, default=20,
                    help="q1's event types (3..26; more types: fewer A, B, C per window, fewer matches)")
    ap.add_argument("--row-group", type=int, default=100_000, help="rows per Parquet row group")
    ap.add_argument("--breakdown", action="store_true", help="also time apply() and the built jobs apart")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each side (median)")
    ap.add_argument("--range-windows", type=float, default=None,
                    help="spark.sparkcep.keylessRangeWindows (the length of a time range in windows)")
    args = ap.parse_args(argv)

    spark = _spark_session()
    if args.range_windows is not None:
        spark.conf.set("spark.sparkcep.keylessRangeWindows", str(args.range_windows))
    rows = []
    with tempfile.TemporaryDirectory(prefix="sparkcep-bench-") as tmp:
        for name in args.queries.split(","):
            text, options = QUERIES[name]
            q = sparkcep.compile(text.format(window=args.window), **options)
            for n in (int(v) for v in args.sizes.split(",")):
                path = Path(tmp) / f"{name}-{n}.parquet"
                write_events(path, n, args.types, name=name, row_group=args.row_group)
                df = read_events(spark, str(path), "parquet", "ts")

                def on(partitions: int, q=q, df=df):
                    def run() -> int:
                        spark.conf.set("spark.sql.shuffle.partitions", partitions)
                        spark.conf.set("spark.sparkcep.keylessRanges", str(partitions > 1).lower())
                        return q.apply(df).count()
                    return run

                one, two = measured([on(1), on(2)], args.repeat)
                assert one.result == two.result, (one.result, two.result)
                default = "ranges" if ranged_by_default(spark, q, df) else "1 partition"
                rows.append((name, n, one.result, one, two, default, os.getloadavg()[0]))
                print(f"{name} {n:,}: 1 partition {one.median:.2f} s, ranges {two.median:.2f} s, "
                      f"{one.median / two.median:.2f}x (load {os.getloadavg()[0]:.1f})", flush=True)
                if args.breakdown:
                    breakdown(spark, q, df, args.repeat)
                spark.conf.unset("spark.sparkcep.keylessRanges")
                path.unlink()
    print(f"\nKeyless queries, local[2] ({os.cpu_count()} CPUs), medians of {args.repeat} alternating runs after a "
          f"warm-up; 'CPU': the Spark process tree per run; 'load': 1-minute load average after the row")
    print(f"{'query':<11} {'events':>11} {'matches':>10} {'1 part. s':>9} {'ranges s':>9} {'speed-up':>8} "
          f"{'CPU 1 s':>8} {'CPU 2 s':>8} {'default':>12} {'load':>5}")
    for name, n, matches, one, two, default, load in rows:
        print(f"{name:<11} {n:>11,} {matches:>10,} {one.median:>9.2f} {two.median:>9.2f} "
              f"{one.median / two.median:>7.2f}x {one.median_cpu:>8.2f} {two.median_cpu:>8.2f} {default:>12} "
              f"{load:>5.1f}")
    for name in dict.fromkeys(r[0] for r in rows):
        print(f"  {name}: {query(args.window, name)}")


if __name__ == "__main__":
    main()
