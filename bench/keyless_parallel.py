"""A keyless match query on Spark: one shuffle partition (the former path) against time ranges on two.

A query without an equivalence key has nothing to partition by; the batch path splits its input into time ranges
that overlap by the window (``runtime_udfs/match/ranges.py``: ranges of ``spark.sparkcep.keylessRangeWindows``
windows, 16 by default, dealt round robin over the shuffle partitions).  This script times the
gSPICE-like keyless query ``SEQ(A a, B b, C c) WHERE a.x < c.x WITHIN --window`` over a generated Parquet file of
``--rows`` events (ts 0, 1, 2, ..., ``--types`` types uniform, of which A, B and C are in the query, x uniform
in 0..9) on Spark ``local[2]`` in one session,
with ``spark.sparkcep.keylessRanges=true`` (the time ranges are opt-in) and ``spark.sql.shuffle.partitions`` = 1
(the whole input in one task: one core) and = 2 (the time ranges on two partitions, one per core): wall-clock
medians of ``--repeat`` alternating runs after a warm-up of each, both counting the same matches (checked), and
prints both times and the ratio (the issue's goal: >= 1.7x on 2 cores, quiet).

    python bench/keyless_parallel.py [--rows 1000000] [--window 100] [--types 20] [--repeat 3] [--cpu]
                                      [--range-windows 16]

``--cpu`` adds the CPU time (user + system) of the whole Spark process tree (driver, JVM, Python workers; from
``/proc``, Linux) of the same timed runs, medians of ``--repeat``: unlike wall-clock time on a machine shared with
other jobs, it does not depend on the load (two partitions can only be faster if they do not cost much more CPU).

``--breakdown`` adds where the two-partition time goes (medians of ``--repeat`` after a warm-up): ``q.apply(df)``
alone (no Spark job: a range is computed from each row's ts), the count of the DataFrames already built for 1
and 2 partitions, and a plain count of the file.

State the machine and its load next to the figures (the project's reference is a 2-core VM).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pattern_matching import _spark_session, measured, walls  # noqa: E402

import sparkcep  # noqa: E402
from sparkcep.spark.io import read_events  # noqa: E402


def query(window: int) -> str:
    return f"PATTERN SEQ(A a, B b, C c) WHERE a.x < c.x WITHIN {window} RETURN a.ts AS a_ts, c.ts AS c_ts"


def write_events(path: Path, rows: int, kinds: int, seed: int = 18) -> None:
    rng = np.random.default_rng(seed)
    types = np.array([chr(ord("A") + k) for k in range(kinds)])[rng.integers(0, kinds, rows)]
    pq.write_table(pa.table({"type": types, "ts": np.arange(rows, dtype=np.int64),
                             "x": rng.integers(0, 10, rows, dtype=np.int64)}), path)


def breakdown(spark, q, df, repeat: int) -> None:
    from pyspark.sql import functions as F

    def applied(partitions: int):
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
        return q.apply(df)

    built = {p: applied(p) for p in (1, 2)}
    parts = [("apply() alone, 2 partitions", lambda: applied(2) is not None and 0),
             ("count of the built DataFrame, 1 partition", built[1].count),
             ("count of the built DataFrame, 2 partitions", built[2].count),
             ("plain count of the file", lambda: df.where(F.col("type").isin("A", "B", "C")).count())]
    for (name, _), (median, _, _) in zip(parts, walls([fn for _, fn in parts], repeat), strict=True):
        print(f"  {name}: {median:.2f} s")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="events in the generated file")
    ap.add_argument("--window", type=int, default=100, help="the query's WITHIN (in ts units)")
    ap.add_argument("--types", type=int, default=20,
                    help="event types (3..26; more types: fewer A, B, C per window, fewer matches)")
    ap.add_argument("--cpu", action="store_true", help="also the CPU time of the Spark process tree per run")
    ap.add_argument("--breakdown", action="store_true", help="also time apply() and the built jobs apart")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each side (median)")
    ap.add_argument("--range-windows", type=float, default=None,
                    help="spark.sparkcep.keylessRangeWindows (the length of a time range in windows)")
    args = ap.parse_args(argv)

    spark = _spark_session()
    spark.conf.set("spark.sparkcep.keylessRanges", "true")  # the time ranges are opt-in
    if args.range_windows is not None:
        spark.conf.set("spark.sparkcep.keylessRangeWindows", str(args.range_windows))
    q = sparkcep.compile(query(args.window))
    with tempfile.TemporaryDirectory(prefix="sparkcep-bench-") as tmp:
        path = Path(tmp) / "events.parquet"
        write_events(path, args.rows, args.types)
        df = read_events(spark, str(path), "parquet", "ts")

        def on(partitions: int):
            def run() -> int:
                spark.conf.set("spark.sql.shuffle.partitions", partitions)
                return q.apply(df).count()
            return run

        spark.conf.set("spark.sql.shuffle.partitions", 2)
        print(next((line.strip() for line in q.explain(df.schema).splitlines() if "parallelism (" in line),
                   "(explain names no parallelism)"))
        sides = measured([on(1), on(2)], args.repeat)
        (one, n_one, runs_one), (two, n_two, runs_two) = [(r.median, r.result, r.wall) for r in sides]
        cpu = [r.median_cpu for r in sides] if args.cpu else None
        if args.breakdown:
            breakdown(spark, q, df, args.repeat)
    assert n_one == n_two, (n_one, n_two)
    print(f"{query(args.window)}: {args.rows:,} events, {n_one:,} matches, local[2], medians of {args.repeat}")
    print(f"  1 shuffle partition (one task): {one:.2f} s  (runs {', '.join(f'{t:.2f}' for t in runs_one)})")
    print(f"  2 shuffle partitions (time ranges): {two:.2f} s  (runs {', '.join(f'{t:.2f}' for t in runs_two)})")
    if cpu is not None:
        print(f"  CPU of the process tree per run (median): 1 partition {cpu[0]:.2f} s, 2 partitions {cpu[1]:.2f} s")
    print(f"  speed-up 1 -> 2 partitions: {one / two:.2f}x  ({args.rows / one:,.0f} -> {args.rows / two:,.0f} ev/s)")


if __name__ == "__main__":
    main()
