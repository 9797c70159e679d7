"""A match query on Spark: batch vs streaming, and the cost of the default 200 shuffle partitions.

Runs, in one Spark session, the same query over the same JSON-lines files:
batch (``applyInPandas``) and streaming (``applyInPandasWithState``, one file per micro-batch) with the
shuffle partition count sparkcep sets for local runs, streaming with the keys hashed into ``--buckets`` Spark
groups (``sparkcep.compile(..., buckets=N)``: one engine state per key inside a group, so that Spark's per-group
cost is paid per bucket, not per key), and streaming again with Spark's default of 200 partitions (the count is
frozen into a streaming checkpoint at its first run, so each run gets a new checkpoint).
All runs must return the same matches; the script prints events/s and the ratios.

    python bench/spark_paths.py [--events 50000] [--files 10] [--keys 200] [--buckets 8]   (~8 min on 2 cores)

State the machine next to the figures (the project's reference is a 2-core VM).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

import sparkcep
from sparkcep.io import read_events
from sparkcep.session import DEFAULT_SHUFFLE_PARTITIONS, local_session

QUERY = """PATTERN SEQ(A a, B b, C c) WHERE [id] AND a.x < b.x AND b.x < c.x WITHIN 1000
RETURN a.id AS id, a.ts AS a_ts, c.ts AS c_ts"""


def write_events(folder: Path, n: int, files: int, keys: int, seed: int = 3) -> None:
    rnd = random.Random(seed)
    folder.mkdir(parents=True)
    per = n // files
    for k in range(files):
        with open(folder / f"events-{k:03d}.jsonl", "w") as f:
            for t in range(k * per, (k + 1) * per):
                f.write(json.dumps({"type": rnd.choice("ABCD"), "ts": t, "id": rnd.randrange(keys),
                                    "x": rnd.randint(0, 9)}) + "\n")


def run(spark, q, events_dir: Path, work: Path, name: str, stream: bool, partitions: int) -> tuple[float, int]:
    spark.conf.set("spark.sql.shuffle.partitions", partitions)
    t0 = time.perf_counter()
    df = read_events(spark, str(events_dir), "json", "ts", stream=stream, files_per_trigger=1 if stream else None)
    result = q.apply(df)
    if stream:
        out = work / name
        (result.writeStream.format("parquet").option("path", str(out))
         .option("checkpointLocation", str(work / f"{name}-ckpt")).trigger(availableNow=True)
         .start().awaitTermination())
        n = spark.read.parquet(str(out)).count()
    else:
        n = result.count()
    return time.perf_counter() - t0, n


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=50_000)
    p.add_argument("--files", type=int, default=10)
    p.add_argument("--keys", type=int, default=200)
    p.add_argument("--buckets", type=int, default=8)
    p.add_argument("--skip-default", action="store_true", help="skip the run with 200 shuffle partitions")
    args = p.parse_args(argv)
    spark = local_session()
    q = sparkcep.compile(QUERY)
    bucketed = sparkcep.compile(QUERY, buckets=args.buckets)
    with tempfile.TemporaryDirectory(prefix="sparkcep-bench-") as tmp:
        work = Path(tmp)
        write_events(work / "events", args.events, args.files, args.keys)
        run(spark, q, work / "events", work, "warmup", stream=False, partitions=DEFAULT_SHUFFLE_PARTITIONS)
        runs = [
            (f"batch, {DEFAULT_SHUFFLE_PARTITIONS} shuffle partitions", q, False, DEFAULT_SHUFFLE_PARTITIONS),
            (f"streaming, {DEFAULT_SHUFFLE_PARTITIONS} shuffle partitions", q, True, DEFAULT_SHUFFLE_PARTITIONS),
            (f"streaming, {DEFAULT_SHUFFLE_PARTITIONS} partitions, keys in {args.buckets} buckets", bucketed, True,
             DEFAULT_SHUFFLE_PARTITIONS),
            ("streaming, 200 shuffle partitions (Spark default)", q, True, 200),
        ]
        if args.skip_default:
            runs.pop()
        results = []
        for k, (label, query, stream, partitions) in enumerate(runs):
            seconds, n = run(spark, query, work / "events", work, f"run{k}", stream, partitions)
            results.append((label, seconds, n))
    counts = {n for _, _, n in results}
    assert len(counts) == 1, results
    print(f"query: {' '.join(QUERY.split())}")
    print(f"{args.events} events in {args.files} JSON-lines files, {args.keys} keys, {counts.pop()} matches; "
          f"local[*] on {os.cpu_count()} cores")
    base = results[0][1]
    for label, seconds, _ in results:
        print(f"{label:<52} {args.events / seconds:>9,.0f} events/s  {seconds:6.1f} s  ({seconds / base:.1f}x batch)")
    print(f"streaming: keys in {args.buckets} buckets vs one group per key: "
          f"{results[1][1] / results[2][1]:.1f}x faster")
    if not args.skip_default:
        print(f"streaming: default 200 partitions vs {DEFAULT_SHUFFLE_PARTITIONS}: "
              f"{results[3][1] / results[1][1]:.1f}x slower")


if __name__ == "__main__":
    main()
