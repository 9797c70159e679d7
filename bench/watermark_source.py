"""The cost of taking event time from every event: the watermark before the query's filter vs after it.

Since issue 4's follow-up, ``CompiledQuery.apply`` on a stream puts the event-time watermark on the events as
read (``spark_adapters.watermarked``), before the Spark SQL filter, with a barrier that keeps Spark from pushing
the filter below it: every event, of any type, goes through the watermark operator and is parsed whole (the
type filter is no longer pushed into the JSON scan).  The baseline, in the same session, is the former wiring:
the filter first, the watermark on the candidates.  A stream where the query's types are rare is the worst
case for the new wiring (most events are parsed only to be dropped).

Both runs read the same JSON-lines files as a stream (``availableNow``, one file per micro-batch, a new
checkpoint each) and must count the same matches (the last events are of the query's types, so the old wiring
flushes as far as the new one); the script prints wall-clock medians, events/s and the ratio.

    python bench/watermark_source.py [--events 200000] [--files 10] [--relevant 0.05] [--repeat 3]

State the machine next to the figures (the project's reference is a 2-core VM).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import tempfile
import time
from pathlib import Path

import sparkcep
from sparkcep.spark.io import read_events
from sparkcep.spark.session import local_session

TEXT = "PATTERN SEQ(A a, !(B b)) WHERE [id] WITHIN 50 RETURN a.ts AS at, a.id AS id"
SCHEMA = "type STRING, ts BIGINT, id BIGINT, x BIGINT"


def write_stream(folder: Path, events: int, files: int, relevant: float, seed: int = 1) -> None:
    rnd = random.Random(seed)
    per_file = events // files
    for k in range(files):
        with open(folder / f"events-{k:03d}.json", "w") as f:
            for i in range(per_file):
                ts = k * per_file + i
                kind = rnd.choice("AB") if rnd.random() < relevant else rnd.choice("CDEFG")
                f.write(json.dumps({"type": kind, "ts": ts, "id": rnd.randint(0, 99), "x": rnd.randint(0, 9)}) + "\n")
    # a last file of the query's types far ahead: both wirings then see event time pass every match
    with open(folder / f"events-{files:03d}.json", "w") as f:
        f.write(json.dumps({"type": "B", "ts": events * 10, "id": 1000, "x": 0}) + "\n")


def former(q, df):
    """The wiring before: the Spark SQL filter on the source, the watermark on its candidates."""
    from pyspark.sql import functions as F

    from sparkcep.api import _view_of
    from sparkcep.compiler.codegen.sql import filter_sql
    from sparkcep.compiler.plan.nodes import operator_spec
    from sparkcep.spark.adapters import apply_match
    from sparkcep.spark.schema import EVENT_TIME, EVENT_TIME_OFFSET

    schema = df.schema
    plan = q.plan(schema)
    candidates = df.sparkSession.sql(filter_sql(plan, _view_of(df), schema.fieldNames(), pretty=False))
    event_time = F.timestamp_micros(((F.col(q.ts_col) + EVENT_TIME_OFFSET) * 1000).cast("bigint"))
    candidates = (candidates.withColumn(EVENT_TIME, event_time)
                  .withWatermark(EVENT_TIME, f"{math.ceil(q.lateness)} milliseconds"))
    return apply_match(candidates, operator_spec(plan), ts_col=q.ts_col, type_col=q.type_col)


def run(spark, q, source: Path, root: Path, wiring: str) -> tuple[float, int]:
    out, ck = tempfile.mkdtemp(dir=root), tempfile.mkdtemp(dir=root)
    df = read_events(spark, str(source), "json", "ts", stream=True, schema=SCHEMA, files_per_trigger=1)
    result = q.apply(df) if wiring == "source" else former(q, df)
    start = time.perf_counter()
    (result.writeStream.format("parquet").option("path", out).option("checkpointLocation", ck)
     .trigger(availableNow=True).start().awaitTermination())
    seconds = time.perf_counter() - start
    return seconds, spark.read.parquet(out).count()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--files", type=int, default=10)
    p.add_argument("--relevant", type=float, default=0.05, help="share of events of the query's types")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    spark = local_session("local[2]", shuffle_partitions=2, app_name="bench-watermark-source")
    q = sparkcep.compile(TEXT, lateness=5)
    with tempfile.TemporaryDirectory(prefix="sparkcep-bench-wm-") as tmp:
        root = Path(tmp)
        source = root / "in"
        source.mkdir()
        write_stream(source, args.events, args.files, args.relevant)
        times: dict[str, list[float]] = {"candidates": [], "source": []}
        counts: dict[str, set[int]] = {"candidates": set(), "source": set()}
        run(spark, q, source, root, "source")  # warm-up (Python workers, JIT)
        for _ in range(args.repeat):
            for wiring in ("candidates", "source"):  # alternating: both see the same machine load
                seconds, n = run(spark, q, source, root, wiring)
                times[wiring].append(seconds)
                counts[wiring].add(n)
        assert counts["candidates"] == counts["source"] and len(counts["source"]) == 1, counts
        events = args.events + 1
        print(f"{events} events in {args.files + 1} micro-batches, {args.relevant:.0%} of the query's types, "
              f"{counts['source'].pop()} matches; medians of {args.repeat}")
        medians = {w: statistics.median(t) for w, t in times.items()}
        for wiring, label in (("candidates", "watermark on the candidates (former)"),
                              ("source", "watermark on the source (now)")):
            print(f"  {label:40s} {medians[wiring]:6.2f} s  {events / medians[wiring]:8.0f} ev/s")
        print(f"  ratio now / former: {medians['source'] / medians['candidates']:.2f}")


if __name__ == "__main__":
    main()
