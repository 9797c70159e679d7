"""The shared executor on Spark: one operator per sharing context gives, per query, the rows each query
gives alone (its own GRETA operator) and the oracle; batch and streaming (files, checkpoint, watermark)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import sparkcep
from sparkcep.oracle import trend_aggregates

pytestmark = pytest.mark.spark

TRAFFIC = (Path(__file__).parent / "fixtures" / "workloads" / "sharon_traffic.cep").read_text()
NUMERIC = TRAFFIC.replace("10 minutes", "10").replace("1 minute", "2")
STREETS = ["ElmSt", "ParkAve", "OakSt", "MainSt", "WestSt", "StateSt"]


def route_events(n: int = 120, seed: int = 3) -> list[dict]:
    rnd = random.Random(seed)
    return [{"type": rnd.choice(STREETS), "ts": i // 2, "vehicle": rnd.randint(1, 3)} for i in range(n)]


def _rows(df) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for r in df.collect():
        out.setdefault(r["query"], []).append((r["window_start"], r["window_end"], int(r["count_all"])))
    return {k: sorted(v) for k, v in out.items()}


def test_shared_operator_equals_each_query_alone_and_the_oracle(spark):
    events = route_events()
    df = spark.createDataFrame(events, "type STRING, ts LONG, vehicle LONG")
    w = sparkcep.compile_shared_workload(NUMERIC, stats=None, budget=None)
    # rates that make sharing pay, so the plan has shared segments
    from sparkcep.compiler.optimizer.sharing import optimize_workload

    plan = optimize_workload(w.plan.queries, {"OakSt": 6, "MainSt": 6, "ParkAve": 3, "ElmSt": 3}, budget=None)
    w = sparkcep.api.CompiledWorkload(w.queries, plan)
    assert plan.chosen
    results = w.apply(df)
    assert list(results) == ["shared_0"]
    shared = _rows(results["shared_0"])
    non_shared = _rows(w.apply(df, share=False)["shared_0"])
    for q in w.queries:
        alone = sorted((r["window_start"], r["window_end"], int(r["count_all"])) for r in q.apply(df).collect())
        oracle = sorted((r["window_start"], r["window_end"], r["count_all"]) for r in trend_aggregates(q.query, events))
        assert shared.get(q.name, []) == alone == oracle, q.name
        assert non_shared.get(q.name, []) == oracle


@pytest.mark.slow
def test_streaming_workload_from_files(spark, tmp_path):
    events = route_events(200, seed=5)
    src = tmp_path / "in"
    src.mkdir()
    for i in range(4):  # four files, read one per micro-batch
        (src / f"part{i}.json").write_text("".join(json.dumps(e) + "\n" for e in events[i * 50:(i + 1) * 50]))
    w = sparkcep.compile_shared_workload(NUMERIC, budget=None)
    stream = spark.readStream.schema("type STRING, ts LONG, vehicle LONG").option("maxFilesPerTrigger", 1).json(
        str(src))
    [(name, result)] = w.apply(stream).items()
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (result.writeStream.format("json").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .outputMode("append").trigger(availableNow=True).start())
    query.awaitTermination()
    got = _rows(spark.read.schema(result.schema).json(str(out)))
    for q in w.queries:
        oracle = sorted((r["window_start"], r["window_end"], r["count_all"]) for r in trend_aggregates(q.query, events))
        # streaming emits a window once the watermark passes its end: the last windows stay open
        closed = [r for r in oracle if r[1] <= max(e["ts"] for e in events)]
        assert [r for r in got.get(q.name, []) if r[1] <= max(e["ts"] for e in events)] == closed, q.name


def test_cli_run_on_a_workload(spark, tmp_path, capsys):
    from sparkcep.cli import main

    events = route_events(60, seed=9)
    data = tmp_path / "events.json"
    data.write_text("".join(json.dumps(e) + "\n" for e in events))
    workload = tmp_path / "w.cep"
    workload.write_text(NUMERIC)
    assert main(["run", str(workload), "--input", str(data)]) == 0
    got: dict[str, list[tuple]] = {}
    for line in capsys.readouterr().out.splitlines():
        r = json.loads(line)
        got.setdefault(r["query"], []).append((r["window_start"], r["window_end"], int(r["count_all"])))
    for q in sparkcep.compile_workload(NUMERIC):
        oracle = sorted((r["window_start"], r["window_end"], r["count_all"]) for r in trend_aggregates(q.query, events))
        assert sorted(got.get(q.name, [])) == oracle, q.name


def test_timestamp_ts_and_group_by(spark):
    """Timestamp ts (windows in ms) and GROUP BY the key: one row per vehicle, as each query alone."""
    from datetime import datetime, timedelta, timezone

    text = TRAFFIC.replace("RETURN COUNT(*)", "RETURN vehicle, COUNT(*)").replace(
        "WITHIN", "GROUP BY vehicle WITHIN")
    base = datetime(2024, 5, 1, tzinfo=timezone.utc)
    events = [dict(e, ts=base + timedelta(seconds=20 * e["ts"])) for e in route_events(150, seed=11)]
    df = spark.createDataFrame(events, "type STRING, ts TIMESTAMP, vehicle LONG")
    w = sparkcep.compile_shared_workload(text, stats=None, budget=None)
    [(name, result)] = w.apply(df).items()
    got: dict[str, list[tuple]] = {}
    for r in result.collect():
        got.setdefault(r["query"], []).append((r["window_start"], r["vehicle"], int(r["count_all"])))
    for q in w.queries:
        alone = sorted((r["window_start"], r["vehicle"], int(r["count_all"])) for r in q.apply(df).collect())
        assert sorted(got.get(q.name, [])) == alone, q.name
    assert any(got.values())


@pytest.mark.slow
def test_cli_run_stream_on_a_workload(spark, tmp_path, capsys):
    from sparkcep.cli import main

    events = route_events(80, seed=13)
    src = tmp_path / "in"
    src.mkdir()
    for i in range(2):
        (src / f"part{i}.json").write_text("".join(json.dumps(e) + "\n" for e in events[i * 40:(i + 1) * 40]))
    workload = tmp_path / "w.cep"
    workload.write_text(NUMERIC)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    assert main(["run", str(workload), "--input", str(src), "--stream", "--schema",
                 "type STRING, ts LONG, vehicle LONG", "--output", str(out), "--checkpoint", str(checkpoint)]) == 0
    got = _rows(spark.read.json(str(out / "shared_0")))
    last = max(e["ts"] for e in events)
    for q in sparkcep.compile_workload(NUMERIC):
        oracle = sorted((r["window_start"], r["window_end"], r["count_all"]) for r in trend_aggregates(q.query, events))
        assert [r for r in got.get(q.name, []) if r[1] <= last] == [r for r in oracle if r[1] <= last], q.name
