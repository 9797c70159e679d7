"""Load shedding for a workload on Spark: one gSPICE stage in front of the workload's operators, its utilities
learnt for every query; with a loose latency bound nothing is dropped and every query's results are those of
the unshed workload."""

from __future__ import annotations

import json
import os
import random

import pytest

import sparkcep

pytestmark = pytest.mark.spark

WORKLOAD = ("ab: PATTERN SEQ(A a, B b) WHERE [id] WITHIN 10 RETURN a.ts AS a_ts, b.ts AS b_ts;\n"
            "bc: PATTERN SEQ(B b, C c) WHERE [id] AND b.x < c.x WITHIN 10 RETURN b.ts AS b_ts, c.ts AS c_ts")
SCHEMA = "type STRING, ts LONG, id LONG, x LONG"


def events(n: int, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    return [{"type": rnd.choice("ABCD"), "ts": i, "id": rnd.randint(1, 3), "x": rnd.randint(0, 9)} for i in range(n)]


def _rows(df) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in df.collect():
        d = r.asDict()
        out.setdefault(d.pop("query"), []).append(tuple(sorted((k, v) for k, v in d.items() if v is not None)))
    return {k: sorted(v) for k, v in out.items()}


def test_workload_shedding_with_a_loose_bound_keeps_every_result(spark, tmp_path):
    stream_events = events(240, seed=7)
    tail = {"type": "D", "ts": 10_000, "id": 1, "x": 0}  # moves the watermark past every window
    src = tmp_path / "in"
    src.mkdir()
    parts = [stream_events[:80], stream_events[80:160], stream_events[160:], [tail]]
    for i, part in enumerate(parts):
        (src / f"part{i}.json").write_text("".join(json.dumps(e) + "\n" for e in part))
        os.utime(src / f"part{i}.json", (1_000_000 + i, 1_000_000 + i))
    shed = sparkcep.compile_shared_workload(WORKLOAD, budget=None, shedding_latency=1000.0)
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(src))
    result = shed.apply(stream, shedding_training=stream_events)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (result.writeStream.format("json").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .outputMode("append").trigger(availableNow=True).start())
    query.awaitTermination()
    got = _rows(spark.read.schema(result.schema).json(str(out)))
    handle = result.shedding
    spark.streams.removeListener(handle.listener)
    unshed = sparkcep.compile_shared_workload(WORKLOAD, budget=None)
    expected = _rows(unshed.apply(spark.createDataFrame(stream_events + [tail], SCHEMA)))
    assert got == expected and set(got) == {"ab", "bc"}
    # the one stage saw every event of both queries' types (D too: it sits in front of every operator)
    assert handle.offered == len(stream_events) + 1 and sum(handle.dropped.values()) == 0
    assert set(handle.types) >= {"A", "B", "C"}

