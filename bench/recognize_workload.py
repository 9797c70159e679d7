"""A workload of k MATCH_RECOGNIZE statements: shared in one pass (``sparkcep.sql_workload``) against one by one
(``sparkcep.sql`` of each), k = 1, 4, 8.

The events (``p, ts, id, typ, price``: 100 partitions ``p``, ``ts`` the row number, types A-D, a random price)
are written once as a Parquet file; every statement reads it through one temporary view with ``PARTITION BY p
ORDER BY ts`` and is counted as ``SELECT COUNT(*), SUM(a), SUM(c) FROM events MATCH_RECOGNIZE (... MEASURES
FIRST(id) AS a, LAST(id) AS c ONE ROW PER MATCH ...)``, so each returns one row and computes every match.

* **one by one**: ``sparkcep.sql(statement).collect()`` for each of the k statements (k shuffles, sorts and
  ``mapInArrow`` passes);
* **shared**: ``sparkcep.sql_workload(statements)`` then ``collect()`` of each result: one shuffle, one sort
  and one ``mapInArrow`` pass running the k engines over each sorted partition, persisted and split by the
  ``query`` column (unpersisted after each run).

The answers are checked equal.  Spark local[2], 2 shuffle partitions; wall-clock seconds, medians of
``--repeat`` runs (one warm-up run first, not counted).  State the machine next to the figures.

    python bench/recognize_workload.py [--rows 1000000] [--repeat 5] [--ks 1,4,8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

#: the k statements are the first k of these (the clause after ONE ROW PER MATCH)
STATEMENTS = [
    "AFTER MATCH SKIP PAST LAST ROW PATTERN (A B+ C) DEFINE A AS typ = 'A', B AS typ = 'B', C AS typ = 'C'",
    "AFTER MATCH SKIP PAST LAST ROW PATTERN (A B*? C) DEFINE A AS typ = 'A', C AS typ = 'C'",
    "AFTER MATCH SKIP PAST LAST ROW PATTERN ((A | B){2,4} C) DEFINE A AS typ = 'A', B AS typ = 'B', C AS typ = 'C'",
    "AFTER MATCH SKIP TO LAST UP PATTERN (STRT DOWN+ UP) DEFINE DOWN AS price < PREV(price), "
    "UP AS price > PREV(price)",
    "AFTER MATCH SKIP PAST LAST ROW PATTERN (A C+) DEFINE A AS typ = 'A', C AS typ = 'C'",
    "AFTER MATCH SKIP TO NEXT ROW PATTERN (B A? C) DEFINE A AS typ = 'A', B AS typ = 'B', C AS typ = 'C'",
    "AFTER MATCH SKIP PAST LAST ROW PATTERN (D{2} B) DEFINE B AS typ = 'B', D AS typ = 'D'",
    "AFTER MATCH SKIP PAST LAST ROW PATTERN ((A B)+ C) DEFINE A AS typ = 'A', B AS typ = 'B', C AS typ = 'C'",
]


def statement(rest: str) -> str:
    first = "STRT" if "STRT" in rest else ("B" if "(B " in rest else ("D" if "(D" in rest else "A"))
    return (f"SELECT COUNT(*) AS n, SUM(a) AS sa, SUM(c) AS sc FROM events MATCH_RECOGNIZE (PARTITION BY p "
            f"ORDER BY ts MEASURES FIRST({first}.id) AS a, LAST(id) AS c ONE ROW PER MATCH {rest})")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ks", default="1,4,8")
    args = parser.parse_args(argv)
    ks = [int(k) for k in args.ks.split(",")]

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers import sparkcep as this process does
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import sparkcep

    spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "events.parquet")
        typ = F.element_at(F.array(*[F.lit(t) for t in "ABCD"]), (F.rand(7) * 4).cast("int") + 1)
        (spark.range(args.rows).select((F.col("id") % 100).cast("int").alias("p"), F.col("id").alias("ts"),
                                       F.col("id"), typ.alias("typ"), F.round(F.rand(11) * 100, 2).alias("price"))
         .write.parquet(path))
        spark.read.parquet(path).createOrReplaceTempView("events")
        print(f"{args.rows:,} rows, 100 partitions, local[2]; wall-clock seconds, medians of {args.repeat} runs")
        print(f"{'k':>3} {'one by one':>11} {'shared':>8} {'speed-up':>9}")
        for k in ks:
            texts = [statement(s) for s in STATEMENTS[:k]]

            def alone(texts=texts):
                return [tuple(sparkcep.sql(t, spark).collect()[0]) for t in texts]

            def shared(texts=texts):
                got = sparkcep.sql_workload(texts, spark)
                out = [tuple(got[i].collect()[0]) for i in range(len(texts))]
                for _, tagged in got.shared:
                    tagged.unpersist()
                return out

            times = {}
            answers = {}
            for name, fn in (("alone", alone), ("shared", shared)):
                answers[name] = fn()  # warm-up
                runs = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    fn()
                    runs.append(time.perf_counter() - t0)
                times[name] = statistics.median(runs)
            if answers["alone"] != answers["shared"]:
                raise SystemExit(f"k={k}: answers differ: {answers}")
            print(f"{k:>3} {times['alone']:>11.2f} {times['shared']:>8.2f} {times['alone'] / times['shared']:>8.2f}x",
                  flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
