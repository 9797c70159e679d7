"""A trend-aggregate job on Spark end to end, next to a trivial stateful count job over the same files.

Writes ``--events`` stock-like trades (10 companies in 3 sectors, random-walk prices, one event per ts unit)
to ``--files`` JSON-lines files, then, in one Spark session, times over those files:

* the *count job*: ``groupBy(company)`` and a pandas function that counts rows per key (``applyInPandas`` in
  batch; ``applyInPandasWithState`` keeping the running count in state, streaming), the stateful job with the
  least work per event that Spark can run, the baseline of DESIGN.md's measurement table;
* the *trend job*: ``sparkcep.compile(QUERY).apply(df)`` (GRETA Q1: trends of falling prices per company,
  counted per sector), written to a parquet sink.

Batch reads the folder; streaming reads it with ``maxFilesPerTrigger`` 1 (one micro-batch per file) and an
``availableNow`` trigger, with a checkpoint.  Each job runs ``--repeat`` times (medians); a small warm-up run
of both starts the Python workers first.  Prints events/s of each and the ratio trend/count (time), the
figure that counts.  The trend results are checked against the pure engine run in this process on the same
events (``--check``, default on up to 200,000 events).

    python bench/trend_spark.py [--events 1000000] [--files 10] [--window 1000] [--slide 1000] [--repeat 1]

State the machine next to the figures (the project's reference is a 2-core VM).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

import sparkcep
from sparkcep.runtime_udfs.trend import engine as trend_engine
from sparkcep.spark.io import read_events
from sparkcep.spark.session import DEFAULT_SHUFFLE_PARTITIONS, local_session

COMPANIES = [f"C{i}" for i in range(10)]
SECTORS = {c: f"S{i % 3}" for i, c in enumerate(COMPANIES)}
QUERY = ("RETURN sector, COUNT(*) AS trends PATTERN Stock S+ "
         "WHERE [company, sector] AND S.price > NEXT(S).price GROUP-BY sector WITHIN {window} SLIDE {slide}")
SCHEMA = "type STRING, ts BIGINT, company STRING, sector STRING, price DOUBLE, volume BIGINT"


def trades(n: int, seed: int = 7) -> Iterator[dict]:
    rnd = random.Random(seed)
    prices = {c: 100.0 for c in COMPANIES}
    for ts in range(n):
        company = rnd.choice(COMPANIES)
        prices[company] = max(1.0, prices[company] + rnd.gauss(0, 0.5))
        yield {"type": "Stock", "ts": ts, "company": company, "sector": SECTORS[company],
               "price": round(prices[company], 2), "volume": rnd.randint(1, 1000)}


def write_events(folder: Path, n: int, files: int) -> None:
    """``n`` trades in ``files`` JSON-lines files of consecutive ts ranges, modification times in that order
    (the file source takes files in modification-time order)."""
    folder.mkdir(parents=True)
    per = math.ceil(n / files)
    events = trades(n)
    now = time.time()
    for k in range(files):
        path = folder / f"trades-{k:03d}.jsonl"
        with open(path, "w") as f:
            for _ in range(min(per, n - k * per)):
                f.write(json.dumps(next(events)) + "\n")
        os.utime(path, (now - 1000 + k, now - 1000 + k))


# ----------------------------------------------------------------------------------------------- jobs


def count_batch(pdf: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"company": [pdf["company"].iloc[0]], "n": [len(pdf)]})


def count_stream(key, pdfs, state):
    n = state.get[0] if state.exists else 0
    for pdf in pdfs:
        n += len(pdf)
    state.update((n,))
    yield pd.DataFrame({"company": [key[0]], "n": [n]})


def count_job(df):
    from pyspark.sql.streaming.state import GroupStateTimeout

    grouped = df.groupBy("company")
    if not df.isStreaming:
        return grouped.applyInPandas(count_batch, "company STRING, n BIGINT")
    return grouped.applyInPandasWithState(count_stream, "company STRING, n BIGINT", "n BIGINT", "append",
                                          GroupStateTimeout.NoTimeout)


def run(spark, job, events_dir: Path, work: Path, name: str, stream: bool) -> float:
    """Seconds from reading the files to the last result row written."""
    t0 = time.perf_counter()
    df = read_events(spark, str(events_dir), "json", "ts", stream=stream, files_per_trigger=1 if stream else None,
                     schema=SCHEMA)
    result = job(df)
    out = work / name
    if stream:
        handle = (result.writeStream.format("parquet").option("path", str(out))
                  .option("checkpointLocation", str(work / f"{name}-ckpt")).trigger(availableNow=True).start())
        handle.awaitTermination()
        progress = handle.recentProgress
        state = [op for p in progress[-1:] for op in p["stateOperators"]]
        add_batch = sum(p["durationMs"].get("addBatch", 0) for p in progress) / 1000
        print(f"    {name}: {len(progress)} micro-batches, addBatch {add_batch:.1f} s, "
              f"state rows {state[0]['numRowsTotal'] if state else 0}, "
              f"state memory {state[0]['memoryUsedBytes'] / 1e6 if state else 0:.1f} MB", flush=True)
    else:
        result.write.mode("overwrite").parquet(str(out))
    return time.perf_counter() - t0


def engine_rows(spec, n: int) -> list[dict]:
    """The trend rows of the pure engine, one partition per company, flushed at the end (batch semantics)."""
    parts: dict[tuple, list[dict]] = {}
    for ev in trades(n):
        parts.setdefault((ev["company"], ev["sector"]), []).append(ev)
    rows = []
    for events in parts.values():
        state, _ = trend_engine.step(spec, trend_engine.init_state(), events)
        rows.extend(trend_engine.advance(spec, state, math.inf)[1])
    return trend_engine.merge_rows(spec, rows)


def same_rows(spark, out: Path, expected: list[dict], closed_before: float) -> bool:
    got = spark.read.parquet(str(out)).toPandas()
    got = got[got["window_end"] <= closed_before]
    want = [r for r in expected if r["window_end"] <= closed_before]

    def norm(rows):
        return sorted((r["window_start"], r["sector"], None if r["trends"] is None or r["trends"] >= 10**38
                       else int(r["trends"])) for r in rows)

    return norm(got.to_dict("records")) == norm(want)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--files", type=int, default=10)
    p.add_argument("--window", type=int, default=1000, help="WITHIN, in ts units (one event per unit)")
    p.add_argument("--slide", type=int, default=1000, help="SLIDE, in ts units")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--modes", default="batch,stream")
    p.add_argument("--check", type=int, default=200_000, help="check results against the engine up to this size")
    p.add_argument("--arrow-batch", type=int, default=None, help="spark.sql.execution.arrow.maxRecordsPerBatch")
    args = p.parse_args(argv)
    spark = local_session()
    if args.arrow_batch:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", args.arrow_batch)
    text = QUERY.format(window=args.window, slide=args.slide)
    q = sparkcep.compile(text)
    jobs = {"count": count_job, "trend": q.apply}
    figures: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="sparkcep-bench-") as tmp:
        work = Path(tmp)
        write_events(work / "warmup-events", 20_000, 2)
        write_events(work / "events", args.events, args.files)
        for name, job in jobs.items():
            run(spark, job, work / "warmup-events", work, f"warmup-{name}", stream=False)
        for mode in args.modes.split(","):
            stream = mode == "stream"
            for r in range(args.repeat):
                for name, job in jobs.items():
                    seconds = run(spark, job, work / "events", work, f"{mode}-{name}-{r}", stream)
                    figures.setdefault((mode, name), []).append(seconds)
                    print(f"  {mode:<6} {name:<5} run {r}: {seconds:6.1f} s", flush=True)
            if args.events <= args.check:
                expected = engine_rows(q.spec(), args.events)
                closed = args.events - 1 if stream else math.inf  # streaming: windows the watermark passed
                assert same_rows(spark, work / f"{mode}-trend-0", expected, closed), f"{mode}: rows differ"
                print(f"  {mode}: trend rows equal the pure engine's", flush=True)
    print(f"\nquery: {text}")
    print(f"{args.events:,} events in {args.files} JSON-lines files; local[*] on {os.cpu_count()} cores, "
          f"{DEFAULT_SHUFFLE_PARTITIONS} shuffle partitions; streaming: 1 file per micro-batch, availableNow; "
          f"medians of {args.repeat}; load average {os.getloadavg()[0]:.1f}")
    for mode in args.modes.split(","):
        count = statistics.median(figures[(mode, "count")])
        trend = statistics.median(figures[(mode, "trend")])
        print(f"{mode:<6}  count job {args.events / count:>9,.0f} ev/s ({count:6.1f} s)   trend job "
              f"{args.events / trend:>9,.0f} ev/s ({trend:6.1f} s)   ratio {trend / count:.2f}x (target <= 1.5)")


if __name__ == "__main__":
    main()
