"""Trend aggregation (GRETA) on Spark end to end: batch and streaming results equal the oracle, exact
counts as DECIMAL(38, 0) with an overflow flag."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from decimal import Decimal

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.cli import main
from sparkcep.ir.printer import format_query
from sparkcep.oracles.match import trend_aggregates
from sparkcep.spark.io import read_events
from sparkcep.spark.results import canonical, epoch_ms_rows
from tests.test_golden_plans import QUERIES

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


# ------------------------------------------------------------------ groups coarser than the partition key

#: GRETA Q1 and Q2 shapes (partitioned finer than grouped) and Sharon q1 (partitioned, no GROUP BY): the
#: engine runs per partition inside a Spark group of the GROUP BY values and merges the rows of a window.
COARSE = {
    "q1": ("RETURN sector, COUNT(*), SUM(S.price), AVG(S.price), MIN(S.price), MAX(S.price) PATTERN Stock S+ "
           "WHERE [company, sector] AND S.price > NEXT(S).price GROUP-BY sector WITHIN {w} SLIDE {s}"),
    "q2": ("RETURN mapper, SUM(M.cpu), AVG(M.cpu), COUNT(M) PATTERN SEQ(Start S, Measurement M+, End E) "
           "WHERE [job, mapper] AND M.load < NEXT(M).load GROUP-BY mapper WITHIN {w} SLIDE {s}"),
    "sharon_q1": "RETURN COUNT(*) PATTERN SEQ(OakSt, MainSt, StateSt) WHERE [vehicle] WITHIN {w} SLIDE {s}",
}
COARSE_TYPES = {"q1": ["Stock"], "q2": ["Start", "Measurement", "Measurement", "End"],
                "sharon_q1": ["OakSt", "MainSt", "StateSt"]}
COARSE_SCHEMA = ("type STRING, ts BIGINT, company BIGINT, sector BIGINT, price BIGINT, job BIGINT, mapper BIGINT, "
                 "cpu DOUBLE, load BIGINT, vehicle BIGINT")


def coarse_event(name: str, ts: int, kind: int, who: int, value: int) -> dict:
    """One event for query ``name``: ``who`` picks the partition (3 partitions in 2 groups), ``value`` the
    attribute the edge predicate compares."""
    return {"type": COARSE_TYPES[name][kind % len(COARSE_TYPES[name])], "ts": ts, "company": who,
            "sector": who % 2, "price": value, "job": who, "mapper": who % 2, "cpu": value / 4, "load": value,
            "vehicle": who}


#: (ts, type shift, partition, value); types mostly follow the pattern's order over time (ts // 3)
coarse_streams = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 1), st.integers(0, 2), st.integers(0, 6)),
                          min_size=1, max_size=14)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(COARSE)), raw=coarse_streams, window=st.sampled_from([(10, 5), (12, 4), (40, 40)]))
def test_coarse_groups_batch_equal_the_oracle(spark, name, raw, window):
    events = [coarse_event(name, ts, ts // 3 + shift, who, value) for ts, shift, who, value in sorted(raw)]
    q = sparkcep.compile(COARSE[name].format(w=window[0], s=window[1]))
    expected = trend_aggregates(q.query, events)
    got = plain(epoch_ms_rows(q.apply(spark.createDataFrame(events, COARSE_SCHEMA))))
    assert canonical(got) == canonical(expected)


def coarse_stream(name: str, n: int, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    return [coarse_event(name, ts, ts // 3, rnd.randrange(3), rnd.randrange(7))
            for ts in sorted(rnd.randrange(n) for _ in range(n))]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(COARSE))
def test_coarse_groups_stream_equal_the_oracle(spark, tmp_path, name):
    """Four files, one per micro-batch; a last event far ahead closes every window (it opens its own, which
    never closes).  Each window of a group is emitted once, merged over the group's partitions."""
    events = coarse_stream(name, 48, seed=11)
    q = sparkcep.compile(COARSE[name].format(w=20, s=5))
    expected = trend_aggregates(q.query, events)
    assert len(expected) > 5
    source = tmp_path / "in"
    source.mkdir()
    tail = coarse_event(name, 100_000, 0, 2, 0)
    chunks = [events[k:k + 12] for k in range(0, len(events), 12)]
    chunks[-1] = chunks[-1] + [tail]
    for k, chunk in enumerate(chunks):
        path = source / f"e{k}.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in chunk))
        os.utime(path, (1_000_000 + k, 1_000_000 + k))  # the file source takes files in mtime order
    stream = read_events(spark, str(source), "json", "ts", stream=True, files_per_trigger=1, schema=COARSE_SCHEMA)
    result = q.apply(stream)
    (result.writeStream.format("json").option("path", str(tmp_path / "out"))
     .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start().awaitTermination())
    streamed = plain(epoch_ms_rows(spark.read.schema(result.schema).json(str(tmp_path / "out"))))
    assert canonical([r for r in streamed if r["window_end"] < 100_000]) == canonical(expected)


GRETA_Q1 = ("RETURN sector, COUNT(*) PATTERN Stock S+ WHERE [company, sector] AND S.price > NEXT(S).price "
            "GROUP-BY sector WITHIN 10 minutes SLIDE 10 seconds")


def greta_q1_trades(tmp_path) -> tuple[list[dict], object]:
    """40 timestamped trades of 4 companies in 2 sectors, 7 s apart: as engine events and as a JSON folder."""
    rnd = random.Random(3)
    base = 1_700_000_000_000
    events = [{"type": "Stock", "ts": base + 7_000 * k, "company": c, "sector": c % 2, "price": rnd.randrange(20)}
              for k, c in enumerate(rnd.randrange(4) for _ in range(40))]
    lines = [{**e, "ts": pd.Timestamp(e["ts"], unit="ms", tz="UTC").isoformat()} for e in events]
    return events, write(tmp_path, lines)


def iso_rows(rows: list[dict]) -> list[dict]:
    """Result rows of the CLI or a job (ISO window bounds) as engine rows (epoch ms), overflow flag checked."""
    for row in rows:
        assert row.pop("aggregate_overflow") is False
        for bound in ("window_start", "window_end"):
            row[bound] = int(pd.Timestamp(row[bound]).timestamp() * 1000)
    return rows


@pytest.mark.slow
def test_greta_q1_runs_through_sparkcep_run(spark, capsys, tmp_path):
    """LANGUAGE.md §8 GRETA Q1 as written (10-minute windows sliding by 10 s) on timestamped trades."""
    events, folder = greta_q1_trades(tmp_path)
    assert main(["run", "-e", GRETA_Q1, "--input", str(folder)]) == 0
    got = iso_rows([json.loads(line) for line in capsys.readouterr().out.splitlines()])
    expected = trend_aggregates(sparkcep.compile(GRETA_Q1).query, events)
    assert len(expected) > 30 and {r["sector"] for r in expected} == {0, 1}
    assert canonical(got) == canonical(expected)


@pytest.mark.slow
def test_greta_q1_generated_job_runs_standalone(tmp_path):
    """``sparkcep compile`` output for GRETA Q1 (grouped by sector, partitioned by company) in a fresh process:
    batch, then streaming (``--once``; the open windows of the last events stay open, as the watermark says)."""
    events, folder = greta_q1_trades(tmp_path)
    job = tmp_path / "job.py"
    assert main(["compile", "-e", GRETA_Q1, "-o", str(job)]) == 0
    assert "GROUP = ['sector']" in job.read_text()
    expected = trend_aggregates(sparkcep.compile(GRETA_Q1).query, events)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONWARNINGS": "ignore::FutureWarning"}
    for mode, extra in (("batch", []), ("stream", ["--stream", "--once", "--checkpoint", str(tmp_path / "ck")])):
        done = subprocess.run([sys.executable, str(job), "--input", str(folder), "--output", str(tmp_path / mode),
                               *extra], capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        got = iso_rows([json.loads(line) for f in sorted((tmp_path / mode).glob("part-*.json"))
                        for line in f.read_text().splitlines()])
        if mode == "stream":  # windows whose end the watermark (the last event's ts) has not passed stay open
            last = max(e["ts"] for e in events)
            want = [r for r in expected if r["window_end"] <= last]
        else:
            want = expected
        assert len(want) > 20 and canonical(got) == canonical(want), mode


PAPER_TRENDS = [q for q in QUERIES if q.resolved().mode != "match"]


@pytest.mark.slow
@pytest.mark.parametrize("q", PAPER_TRENDS, ids=[q.name for q in PAPER_TRENDS])
def test_paper_trend_queries_run_through_sparkcep_run(capsys, spark, tmp_path, q):
    """The trend queries of LANGUAGE.md §8 (GRETA Q1–Q3, Sharon q1) as written, through ``sparkcep run``, on
    timestamped events 3–9 s apart whose types mostly follow the pattern: the oracle's rows exactly."""
    rnd = random.Random(len(q.name))
    types = sorted({t for c in q.spec().components for t in getattr(c, "types", ())} or {"Stock"})
    order = [t for c in q.spec().components for t in getattr(c, "types", ())] or types
    events, ms = [], 1_700_000_000_000
    for k in range(18):
        ms += rnd.randint(3, 9) * 1000
        kind = order[k % len(order)] if rnd.random() < 0.8 else rnd.choice(types)
        who = rnd.randrange(3)
        events.append({"type": kind, "ts": ms, "company": who, "sector": who % 2, "price": rnd.randrange(9),
                       "job": who, "mapper": who % 2, "cpu": rnd.randrange(9) / 4, "load": rnd.randrange(9),
                       "vehicle": who, "segment": who % 2, "speed": rnd.randrange(9)})
    expected = trend_aggregates(q.query, events)
    assert expected, q.name
    lines = [{**e, "ts": pd.Timestamp(e["ts"], unit="ms", tz="UTC").isoformat()} for e in events]
    assert main(["run", "-e", format_query(q.query), "--input", str(write(tmp_path, lines))]) == 0
    got = iso_rows([json.loads(line) for line in capsys.readouterr().out.splitlines()])
    assert canonical(got) == canonical(expected)


def test_counts_beyond_38_digits_are_flagged(spark):
    """A+ over 130 events has 2^130 - 1 trends: no silent wrap-around, the row says so."""
    df = spark.createDataFrame([("A", t) for t in range(130)], "type STRING, ts BIGINT")
    rows = sparkcep.compile("RETURN COUNT(*) PATTERN A+ WITHIN 1000").apply(df).collect()
    assert [(r.count_all, r.aggregate_overflow) for r in rows] == [(None, True)]
    df = spark.createDataFrame([("A", t) for t in range(100)], "type STRING, ts BIGINT")
    rows = sparkcep.compile("RETURN COUNT(*) PATTERN A+ WITHIN 1000").apply(df).collect()
    assert [(r.count_all, r.aggregate_overflow) for r in rows] == [(Decimal(2**100 - 1), False)]
