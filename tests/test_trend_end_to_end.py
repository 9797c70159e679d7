"""Trend aggregation (GRETA) on Spark end to end: batch and streaming results equal the oracle, exact
counts as DECIMAL(38, 0) with an overflow flag."""

from __future__ import annotations

import json
import random
from decimal import Decimal

import pytest

import sparkcep
from sparkcep.cli import main
from sparkcep.io import read_events
from sparkcep.oracle import trend_aggregates
from sparkcep.results import canonical, epoch_ms_rows

pytestmark = pytest.mark.spark

FIG12 = ("RETURN g, COUNT(*), COUNT(A), MIN(A.attr), MAX(A.attr), SUM(A.attr), AVG(A.attr) "
         "PATTERN (SEQ(A+, B))+ WHERE [g] WITHIN 10")
STOCKS = ("RETURN company, COUNT(*) AS trends, AVG(S.price) AS avg_price PATTERN Stock S+ "
          "WHERE [company] AND S.price > NEXT(S).price GROUP-BY company WITHIN 20 SLIDE 5")


def plain(rows: list[dict]) -> list[dict]:
    """Engine rows as Python numbers (Decimal → int), without the overflow flag (checked separately)."""
    out = []
    for r in rows:
        assert r.pop("aggregate_overflow") is False
        out.append({k: int(v) if isinstance(v, Decimal) else v for k, v in r.items()})
    return out


def write(tmp_path, events, name="in"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "e.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return folder


def stock_stream(n: int, seed: int = 5) -> list[dict]:
    rnd = random.Random(seed)
    prices = {c: 50 for c in range(4)}
    events = []
    for ts in range(n):
        c = rnd.randrange(4)
        prices[c] += rnd.choice([-2, -1, 0, 1, 2])
        events.append({"type": "Stock", "ts": ts, "company": c, "price": prices[c]})
    return events


def test_greta_figure_12_through_spark(spark, capsys, tmp_path):
    events = [{"type": t, "ts": ts, "attr": a, "g": 1} for t, ts, a in
              [("A", 1, 5), ("B", 2, None), ("A", 3, 6), ("A", 4, 4), ("B", 7, None)]]
    folder = write(tmp_path, events)
    assert main(["run", "-e", FIG12, "--input", str(folder)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows == [{"window_start": 0, "window_end": 10, "g": 1, "count_all": 11, "count_A": 20,
                     "min_A_attr": 4, "max_A_attr": 6, "sum_A_attr": 100, "avg_A_attr": 5.0,
                     "aggregate_overflow": False}]


@pytest.mark.slow
def test_stock_trends_batch_and_stream_equal_the_oracle(spark, tmp_path):
    events = stock_stream(120)
    q = sparkcep.compile(STOCKS)
    expected = trend_aggregates(q.query, events)
    assert len(expected) > 10
    batch = plain(epoch_ms_rows(q.apply(read_events(spark, str(write(tmp_path, events)), "json", "ts"))))
    assert canonical(batch) == canonical(expected)
    # streaming: windows close when the watermark passes their end; a last event far ahead closes them all
    tail = {"type": "Stock", "ts": 10_000, "company": 9, "price": 0}
    stream_in = write(tmp_path, events + [tail], "stream")
    result = q.apply(read_events(spark, str(stream_in), "json", "ts", stream=True, files_per_trigger=1))
    (result.writeStream.format("json").option("path", str(tmp_path / "out"))
     .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start().awaitTermination())
    streamed = plain(epoch_ms_rows(spark.read.schema(result.schema).json(str(tmp_path / "out"))))
    assert canonical([r for r in streamed if r["company"] != 9]) == canonical(expected)


def test_groups_coarser_than_the_partition_key_are_refused(spark):
    df = spark.createDataFrame([("Stock", 1, 1, 1, 5.0)], "type STRING, ts BIGINT, company BIGINT, sector BIGINT, "
                                                         "price DOUBLE")
    q = sparkcep.compile("RETURN sector, COUNT(*) PATTERN Stock S+ WHERE [company, sector] GROUP-BY sector "
                         "WITHIN 20")
    with pytest.raises(sparkcep.CEPError, match="merging per-partition aggregates into coarser groups"):
        q.apply(df)


def test_counts_beyond_38_digits_are_flagged(spark):
    """A+ over 130 events has 2^130 - 1 trends: no silent wrap-around, the row says so."""
    df = spark.createDataFrame([("A", t) for t in range(130)], "type STRING, ts BIGINT")
    rows = sparkcep.compile("RETURN COUNT(*) PATTERN A+ WITHIN 1000").apply(df).collect()
    assert [(r.count_all, r.aggregate_overflow) for r in rows] == [(None, True)]
    df = spark.createDataFrame([("A", t) for t in range(100)], "type STRING, ts BIGINT")
    rows = sparkcep.compile("RETURN COUNT(*) PATTERN A+ WITHIN 1000").apply(df).collect()
    assert [(r.count_all, r.aggregate_overflow) for r in rows] == [(Decimal(2**100 - 1), False)]
