"""The gSPICE shedding stage on Spark: the mapInPandas stage drops and counts per type, the listener drives the
controller, and with shedding off (or ρ = 0) the results equal the unshed engine."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pandas as pd
import pytest

import sparkcep
from sparkcep.shedding.observations import SID, match_keys
from sparkcep.shedding.shedder import fit_gspice
from sparkcep.shedding.spark import SHED, shed_partition

QUERY = "PATTERN SEQ(A a, B b, C c) WHERE a.v < b.v AND a.v + b.v < c.v WITHIN 40"


def _events(n: int, seed: int, start: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    types = rng.choice(list("ABC"), size=n, p=[0.6, 0.25, 0.15])
    return [{"type": str(t), "ts": start + i, "v": int(rng.integers(1, 11))} for i, t in enumerate(types)]


def _keys(rows: list[dict]) -> set[tuple]:
    return {(r["a_ts"], r["b_ts"], r["c_ts"]) for r in rows}


def test_shed_partition_marks_and_writes_dropped(tmp_path):
    """The stage body without a JVM: a SHED column, ρ of the rows dropped, the dropped rows written."""
    spec = sparkcep.compile(QUERY).spec()
    train = [{**e, SID: i} for i, e in enumerate(_events(800, 1))]
    sh = fit_gspice([(spec, 1.0)], train, pane_length=6, attributes=("v",))
    pdf = pd.DataFrame(_events(1000, 2))
    out = pd.concat(list(shed_partition(sh, iter([pdf[:500], pdf[500:]]), 0.3, dropped_output=str(tmp_path))))
    assert len(out) == 1000 and out[SHED].dtype == bool
    assert abs(out[SHED].mean() - 0.3) < 0.06
    written = [json.loads(line) for f in os.listdir(tmp_path) for line in open(tmp_path / f)]
    assert len(written) == int(out[SHED].sum())
    none = pd.concat(list(shed_partition(sh, iter([pdf]), 0.0)))
    assert not none[SHED].any()


def _write(path, events):
    with open(path, "w") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")


def _run_stream(spark, tmp_path, name: str, q, training, files) -> tuple[list[dict], object]:
    source, sink, checkpoint = tmp_path / f"in-{name}", tmp_path / f"out-{name}", tmp_path / f"cp-{name}"
    source.mkdir()
    for k, batch in enumerate(files):
        _write(source / f"events-{k:02d}.json", batch)
        os.utime(source / f"events-{k:02d}.json", (time.time() - 100 + k, time.time() - 100 + k))
    stream = (spark.readStream.schema("type STRING, ts LONG, v LONG").option("maxFilesPerTrigger", 1)
              .json(str(source)))
    result = q.apply(stream, shedding_training=training)
    handle = (result.writeStream.format("json").option("path", str(sink))
              .option("checkpointLocation", str(checkpoint)).outputMode("append")
              .trigger(availableNow=True).start())
    handle.awaitTermination()
    shedding = getattr(result, "shedding", None)
    if shedding is not None:  # the listener is asynchronous: wait for the last batch's progress
        deadline = time.time() + 30
        while len(shedding.batches) < len(files) and time.time() < deadline:
            time.sleep(0.2)
        spark.streams.removeListener(shedding.listener)
    rows = [r.asDict() for r in spark.read.schema("a_ts LONG, b_ts LONG, c_ts LONG").json(str(sink)).collect()]
    return rows, shedding


@pytest.mark.spark
@pytest.mark.slow
def test_streaming_stage_drops_counts_and_never_adds(spark, tmp_path):
    events = _events(1200, 3)
    files = [events[k:k + 200] for k in range(0, len(events), 200)]
    training = pd.DataFrame(_events(800, 4))
    everything = match_keys(sparkcep.compile(QUERY).spec(), [{**e, SID: e["ts"]} for e in events])
    truth = {tuple(ids[0] for ids in k) for k in everything}  # SID = ts here
    assert len(truth) > 100

    # shedding off: the unshed engine's results, no stage
    off, none = _run_stream(spark, tmp_path, "off", sparkcep.compile(QUERY), training, files)
    assert none is None and _keys(off) == truth

    # shedding on with a bound far above the batch latency: the stage is there, drops nothing, same results
    loose = sparkcep.compile(QUERY, shedding_latency=3600)
    same, handle = _run_stream(spark, tmp_path, "loose", loose, training, files)
    assert _keys(same) == truth
    assert handle.offered == len(events) and handle.drop_ratio == 0

    # a bound below any batch's latency: the controller sheds from the second batch on, every drop counted
    dropped_dir = tmp_path / "dropped"
    tight = sparkcep.compile(QUERY, shedding_latency=0.01, dropped_output=str(dropped_dir))
    shed, handle = _run_stream(spark, tmp_path, "tight", tight, training, files)
    assert handle.offered == len(events)
    assert handle.batches[0]["dropped"] == 0 and handle.batches[0]["rho_next"] > 0.5
    total = sum(handle.dropped.values())
    assert total == sum(b["dropped"] for b in handle.batches) > 300
    assert set(handle.dropped) <= {"A", "B", "C"}
    written = [json.loads(line) for f in os.listdir(dropped_dir) for line in open(dropped_dir / f)]
    assert len(written) == total  # no retries in this local run: the side output has every dropped event
    kept_ts = {e["ts"] for e in events} - {w["ts"] for w in written}
    assert _keys(shed) <= truth  # shedding loses complex events, never invents them (no negation here)
    expected = {k for k in truth if set(k) <= kept_ts}
    assert _keys(shed) == expected  # exactly the matches of the kept events
    # every batch with events has a measured latency (a no-data batch, which only moves the watermark, has none)
    assert all(b["latency"] is not None for b in handle.batches if b["offered"])
