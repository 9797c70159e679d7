"""What the production streaming path costs: validation, late-event side channel, metrics, exactly-once sink.

Runs, in one Spark session, the same match query over the same JSON-lines files (one file per micro-batch):

* baseline: ``read_events`` → ``q.apply`` → Spark's JSON file sink (no dead letters, late rows dropped by
  Spark, no metrics);
* sparkcep: ``read_validated`` (PERMISSIVE, dead letters) → ``q.apply(side_channel=True)`` (late events routed)
  → ``sinks.start`` (``foreachBatch``, per-batch files replaced as a whole, observed metrics).

Both must return the same results; the script runs them alternately ``--repeat`` times (the first run of a
session also pays Python-worker start-up) and prints the best events/s of each and the ratio.

    python bench/streaming_sink.py [--events 20000] [--files 8] [--keys 50] [--repeat 2]

State the machine next to the figures (the project's reference is a 2-core VM).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from spark_paths import QUERY, write_events  # the same query and stream (bench/ is the script's path)

import sparkcep
from sparkcep.spark.io import read_events
from sparkcep.spark.progress import follow
from sparkcep.spark.session import local_session
from sparkcep.spark.sinks import counted, routed, start
from sparkcep.spark.validate import read_validated

DDL = "type STRING, ts BIGINT, id BIGINT, x BIGINT"


def baseline(spark, q, events: Path, work: Path) -> tuple[float, int]:
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    df = read_events(spark, str(events), "json", "ts", stream=True, files_per_trigger=1, schema=DDL)
    (q.apply(df).writeStream.format("json").option("path", str(work / "base"))
     .option("checkpointLocation", str(work / "base-ck")).trigger(availableNow=True).start().awaitTermination())
    elapsed = time.perf_counter() - t0
    return elapsed, spark.read.schema("id BIGINT, a_ts BIGINT, c_ts BIGINT").json(str(work / "base")).count()


def production(spark, q, events: Path, work: Path) -> tuple[float, int]:
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    df, rejected = read_validated(spark, str(events), "json", "type", "ts", stream=True, files_per_trigger=1,
                                  schema=DDL)
    df, rejected = counted(df, "events_valid"), counted(rejected, "dead_letters")
    result = q.apply(df, side_channel=True)
    query = start(routed(result, rejected), str(work / "prod"), str(work / "prod-ck"),
                  result_columns=["id", "a_ts", "c_ts"], once=True)
    totals = follow(query, out=open("/dev/null", "w"))  # noqa: SIM115 - progress lines not wanted here
    elapsed = time.perf_counter() - t0
    assert totals.counts["dead_letters"] == 0 and totals.counts["late"] == 0
    return elapsed, spark.read.schema("id BIGINT, a_ts BIGINT, c_ts BIGINT").json(str(work / "prod")).count()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=20_000)
    p.add_argument("--files", type=int, default=8)
    p.add_argument("--keys", type=int, default=50)
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args()
    spark = local_session("local[2]", shuffle_partitions=2)
    q = sparkcep.compile(QUERY)
    with tempfile.TemporaryDirectory(prefix="sparkcep-bench-") as tmp:
        work = Path(tmp)
        write_events(work / "events", args.events, args.files, args.keys)
        base, prod = [], []
        for k in range(args.repeat):
            base.append(baseline(spark, q, work / "events", work / f"run{k}"))
            prod.append(production(spark, q, work / "events", work / f"run{k}"))
    assert len({n for _, n in base + prod}) == 1, (base, prod)
    base_s, base_n = min(base)
    prod_s, _ = min(prod)
    n = args.events
    print(f"{n} events in {args.files} micro-batches, {args.keys} keys, {base_n} matches, best of {args.repeat} "
          "(2-core machine)")
    print(f"baseline  read_events + apply + file sink        {base_s:7.1f} s  {n / base_s:8.0f} events/s")
    print(f"sparkcep  validate + late channel + exactly-once {prod_s:7.1f} s  {n / prod_s:8.0f} events/s")
    print(f"ratio sparkcep / baseline time: {prod_s / base_s:.2f}")


if __name__ == "__main__":
    main()
