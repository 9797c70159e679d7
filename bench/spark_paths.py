"""A match query on Spark: batch vs streaming, and the cost of the default 200 shuffle partitions.

Runs, in one Spark session, the same query over the same JSON-lines files: batch (``batch_matches``: repartition
by key, ``mapInArrow``) and streaming (``applyInPandasWithState``, one file per micro-batch) with the shuffle
partition count sparkcep sets for local runs, streaming with the keys hashed into ``--buckets`` Spark groups
(``sparkcep.compile(..., buckets=N)``: one engine state per key inside a group, so that Spark's per-group cost
is paid per bucket, not per key), and streaming again with Spark's default of 200 partitions (the count is
frozen into a streaming checkpoint at its first run, so each run gets a new checkpoint).
All runs must return the same matches; the script prints events/s and the ratios.

    python bench/spark_paths.py [--events 50000] [--files 10] [--keys 200] [--buckets 8]   (~8 min on 2 cores)

``--batch-paths``: instead, where the time of a *batch* match query goes (issue 4), on SASE §5's stream
(``bench/pattern_matching.py``'s ``sase_stream``, cached in memory) for ``SEQ(E1..EL) WHERE [attr1] WITHIN W``:
the Spark SQL filter alone; a do-nothing Python function under ``groupBy(bucket).applyInArrow`` and under
``repartition(key)`` + ``mapInArrow`` (Spark's machinery: shuffle, grouping, Arrow round trip); the operator
under each (``groupBy`` with 32 buckets, i.e. the former default of 16 per shuffle partition, and with 2 and 4;
``mapInArrow`` with and without ``sortWithinPartitions``, with 1k/10k/100k rows per Arrow batch); the filter
without its outer ``_mask <> 0``; the pickled size of the functions shipped per task; the Python side alone
(the collected candidates through the former per-row key split and through :meth:`MatchOperator.run_table`);
and the Spark SQL self-join.  Wall-clock medians of ``--repeat`` alternating runs after a warm-up of each, all
counting the same matches (checked).

    python bench/spark_paths.py --batch-paths [--events 1000000] [--domain 10000] [--window 10000] [--length 3]

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
from sparkcep.spark.io import read_events
from sparkcep.spark.session import DEFAULT_SHUFFLE_PARTITIONS, local_session

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


def batch_paths(args) -> None:
    """``--batch-paths``: see the module docstring."""
    import math
    import pickle
    import statistics
    import sys

    import pyarrow as pa
    import sqlglot
    from pyspark import cloudpickle
    from pyspark.sql import functions as F

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from pattern_matching import _spark_session, sase_query, sase_stream, self_join_sql

    from sparkcep.api import _candidate_schema
    from sparkcep.compiler.codegen.sql import filter_sql
    from sparkcep.runtime_udfs.match import engine as match_engine
    from sparkcep.spark.adapters import batch_matches
    from sparkcep.spark.operator import MatchOperator

    spark = _spark_session()
    text = sase_query(args.length, args.window) + " RETURN e1.ts"
    q = sparkcep.compile(text)
    with tempfile.TemporaryDirectory(prefix="sparkcep-bench-") as tmp:
        path = Path(tmp) / "events.jsonl"
        with open(path, "w") as f:
            f.writelines(json.dumps(e) + "\n" for e in sase_stream(args.events, args.domain))
        df = read_events(spark, str(path), "json", "ts").cache()
        n = df.count()
        df.createOrReplaceTempView("events")
        plan = q.plan(df.schema)
        spec = q.spec(df.schema)
        drop, schema = _candidate_schema(plan, spec, df.schema, "ts", "type")
        sql = filter_sql(plan, "events", df.columns, pretty=False, drop=drop)
        inner = sqlglot.parse_one(sql, read="spark").find(sqlglot.exp.Subquery).this.sql(dialect="spark")
        op = MatchOperator(spec, schema)
        key = [F.col(c) for c in spec.key]

        def candidates():
            return spark.sql(sql)

        def nothing_grouped(table: pa.Table) -> pa.Table:
            return op.table([])

        def nothing_mapped(batches):
            for _ in batches:
                pass
            return iter(())

        def run_group(table: pa.Table) -> pa.Table:  # a function, not the bound method: Spark counts its self
            return op.run_table(table)

        def grouped(buckets: int, fn=None):
            bucketed = MatchOperator(spec, schema, buckets=buckets)

            def run_bucket(table: pa.Table) -> pa.Table:
                return bucketed.run_table(table)

            return lambda: bucketed.grouped(candidates()).applyInArrow(fn or run_bucket, op.output_schema).count()

        def mapped(fn=None, sort: bool = False, records: int | None = None):
            def run():
                spread = candidates().repartition(*key)
                if sort:
                    spread = spread.sortWithinPartitions(*key, F.col("ts"))
                conf = "spark.sql.execution.arrow.maxRecordsPerBatch"
                before = spark.conf.get(conf)
                if records is not None:
                    spark.conf.set(conf, records)
                try:
                    return spread.mapInArrow(fn or op.partition_function(), op.output_schema).count()
                finally:
                    spark.conf.set(conf, before)
            return run

        local = candidates().toArrow()

        def python_before() -> int:  # the former Arrow path: Python lists, a per-row key split into dicts
            names, data = op._arrow_columns(local)
            found = 0
            for events in op._split_columns(names, data).values():
                state, _ = match_engine.step(spec, match_engine.init_state(), events)
                found += len(match_engine.advance(spec, state, math.inf)[1])
            return found

        runs = [
            ("Spark SQL filter alone (count)", lambda: candidates().count()),
            ("filter without the outer _mask <> 0 (count)", lambda: spark.sql(inner).count()),
            ("groupBy(32 buckets).applyInArrow, do-nothing function", grouped(32, nothing_grouped)),
            ("repartition(key) + mapInArrow, do-nothing function", mapped(nothing_mapped)),
            ("  do-nothing, with 100,000 rows per Arrow batch", mapped(nothing_mapped, records=100_000)),
            ("mapInArrow without repartition, do-nothing function", lambda: candidates().mapInArrow(
                nothing_mapped, op.output_schema).count()),
            ("groupBy(32 buckets).applyInArrow, operator", grouped(32)),
            ("groupBy(4 buckets).applyInArrow, operator", grouped(4)),
            ("groupBy(2 buckets).applyInArrow, operator", grouped(2)),
            ("repartition(key) + mapInArrow, operator (batch_matches)", lambda: batch_matches(
                candidates(), spec, schema).count()),
            ("  + sortWithinPartitions(key, ts)", mapped(sort=True)),
            ("  with 1,000 rows per Arrow batch", mapped(records=1000)),
            ("  with 100,000 rows per Arrow batch", mapped(records=100_000)),
            ("sparkcep.compile(q).apply(df).count()", lambda: q.apply(df).count()),
            ("sparkcep.compile(q).apply(df) (driver side only, no job)", lambda: q.apply(df) and matches),
            ("Spark SQL self-join", lambda: spark.sql(self_join_sql(args.length, args.window, "events"))
             .collect()[0][0]),
        ]
        matches = batch_matches(candidates(), spec, schema).count()
        results = [fn() for _, fn in runs]
        times: list[list[float]] = [[] for _ in runs]
        for _ in range(args.repeat):
            for (_, fn), spent in zip(runs, times, strict=True):
                t0 = time.perf_counter()
                fn()
                spent.append(time.perf_counter() - t0)
        cpu = {}
        unfiltered = MatchOperator(spec, schema)
        unfiltered._prefilter = None  # the vectorial split alone
        for label, fn in [("former per-row split + engine", python_before),
                          ("run_table without the prefilter", lambda: unfiltered.run_table(local).num_rows),
                          ("run_table (vectorial split, prefilter) + engine", lambda: op.run_table(local).num_rows)]:
            spent = []
            for _ in range(args.repeat):
                t0 = time.process_time()
                found = fn()
                spent.append(time.process_time() - t0)
            cpu[label] = (statistics.median(spent), found)
        df.unpersist()
    operated = [r for (label, _), r in zip(runs, results, strict=True) if "do-nothing" not in label]
    assert all(r == matches for r in operated[2:]), results
    assert all(found == matches for _, found in cpu.values()), cpu
    print(f"query: {text}")
    print(f"{n:,} events (SASE §5 stream, V1 = {args.domain}, 20 types), {len(local):,} candidates, {matches:,} "
          f"matches; local[2], 2 shuffle partitions, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    base = statistics.median(times[6])
    for (label, _), spent in zip(runs, times, strict=True):
        t = statistics.median(spent)
        print(f"{label:<58} {t * 1000:>8,.0f} ms  ({t / base:.2f}x groupBy(32 buckets) operator)")
    for label, (t, _) in cpu.items():
        print(f"Python only, {label:<46} {t * 1000:>8,.0f} ms CPU")
    sizes = {"applyInArrow function": run_group, "mapInArrow function": op.partition_function()}
    print("pickled per task: " + ", ".join(f"{k} {len(cloudpickle.dumps(v, protocol=pickle.DEFAULT_PROTOCOL)):,} B"
                                           for k, v in sizes.items()))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-paths", action="store_true", help="where a batch match query's time goes (issue 4)")
    p.add_argument("--domain", type=int, default=10_000, help="--batch-paths: V1, the domain of attr1")
    p.add_argument("--window", type=int, default=10_000, help="--batch-paths: W")
    p.add_argument("--length", type=int, default=3, help="--batch-paths: L")
    p.add_argument("--repeat", type=int, default=3, help="--batch-paths: timed runs of each")
    p.add_argument("--events", type=int, default=None, help="default 50,000 (1,000,000 with --batch-paths)")
    p.add_argument("--files", type=int, default=10)
    p.add_argument("--keys", type=int, default=200)
    p.add_argument("--buckets", type=int, default=8)
    p.add_argument("--skip-default", action="store_true", help="skip the run with 200 shuffle partitions")
    args = p.parse_args(argv)
    if args.batch_paths:
        args.events = args.events or 1_000_000
        return batch_paths(args)
    args.events = args.events or 50_000
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
