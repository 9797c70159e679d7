"""The gSPICE shedding stage on Spark: the mapInPandas stage drops and counts per type, the listener drives the
controller, and with shedding off (or ρ = 0) the results equal the unshed engine."""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import sparkcep
from sparkcep.runtime_udfs.shedding.controller import BacklogController
from sparkcep.runtime_udfs.shedding.observations import SID, match_keys
from sparkcep.runtime_udfs.shedding.shedder import fit_gspice
from sparkcep.spark.io import followed_directory
from sparkcep.spark.shedding import SHED, ControlFile, Shedding, current_model, shed_partition

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
    out = pd.concat(list(shed_partition(sh, iter([pdf[:500], pdf[500:]]), 0.3, dropped_output=str(tmp_path),
                                        seed=7)))  # a fixed draw: the drop share is random by design
    assert len(out) == 1000 and out[SHED].dtype == bool
    assert abs(out[SHED].mean() - 0.3) < 0.06
    written = [json.loads(line) for f in os.listdir(tmp_path) for line in open(tmp_path / f)]
    assert len(written) == int(out[SHED].sum())
    none = pd.concat(list(shed_partition(sh, iter([pdf]), 0.0)))
    assert not none[SHED].any()


def _progress(name: str, batch: int, out: pd.DataFrame, types) -> SimpleNamespace:
    """A stand-in for a StreamingQueryProgress with the stage's observe() counts of one batch."""
    row = {"offered": len(out), "dropped": int(out[SHED].sum())}
    row.update({f"dropped_{i}": int((out[SHED] & (out["type"] == t)).sum()) for i, t in enumerate(types)})
    row.update({f"offered_{i}": int((out["type"] == t).sum()) for i, t in enumerate(types)})
    return SimpleNamespace(observedMetrics={name: SimpleNamespace(asDict=lambda: row)}, batchId=batch,
                           timestamp=f"2026-01-01T00:00:{batch:02d}.000Z", durationMs={"triggerExecution": 500})


def test_driver_retrains_on_drift_and_tasks_switch_model(tmp_path):
    """The retraining loop without a JVM: the driver (Shedding.on_progress) sees the type shares move, asks the
    tasks for a sample through the control file, refits on it, and the tasks (current_model) switch to the
    written model; every drop is still counted."""
    from sparkcep.runtime_udfs.shedding.controller import BatchController
    from sparkcep.runtime_udfs.shedding.shedder import TypeDrift

    spec = sparkcep.compile(QUERY).spec()
    sh = fit_gspice([(spec, 1.0)], [{**e, SID: i} for i, e in enumerate(_events(800, 1))], pane_length=6,
                    attributes=("v",))
    assert sh.refit is not None and sh.refit.reference[0] > 0.5  # A-heavy training stream
    control = ControlFile(str(tmp_path / "control.json"))
    control.write(0.0)
    handle = Shedding("s", sh.coder.types, BatchController(0.001), control, control_dir=str(tmp_path),
                      refit=sh.refit, drift=TypeDrift.from_share(sh.refit.reference, 0.15, 500), min_sample=300)
    rng = np.random.default_rng(5)

    def batch(k: int, p) -> tuple[object, pd.DataFrame]:
        types = rng.choice(list("ABC"), size=600, p=p)
        pdf = pd.DataFrame([{"type": str(t), "ts": 10_000 * k + i, "v": int(rng.integers(1, 11))}
                            for i, t in enumerate(types)])
        state = control.state()
        model = current_model(sh, state)
        out = pd.concat(list(shed_partition(model, iter([pdf[:300], pdf[300:]]), state["rho"],
                                            sample_output=state.get("sample"), sample_limit=400)))
        handle.on_progress(_progress("s", k, out, sh.coder.types))
        return model, out

    outs = [batch(0, [0.6, 0.25, 0.15])[1]]  # as trained: no drift
    assert handle.sampling is None and "sample" not in control.state()
    model, out = batch(1, [0.2, 0.3, 0.5])  # drifted: the tasks are asked for a sample
    outs.append(out)
    assert model is sh and handle.sampling and control.state()["sample"] == handle.sampling
    model, out = batch(2, [0.2, 0.3, 0.5])  # the tasks write 400 events; the driver refits on them
    outs.append(out)
    assert model is sh and handle.retrains == 1 and handle.sampling is None
    state = control.state()
    assert state["model"] == handle.model_path and "sample" not in state
    model, out = batch(3, [0.2, 0.3, 0.5])  # the tasks now use the retrained model
    outs.append(out)
    assert model is not sh and model.refit.reference[2] > 0.35  # learnt from the C-heavy stream
    assert handle.drift.distance(model.coder.codes(out["type"].tolist())) < 0.15
    assert handle.offered == 2400 and sum(handle.dropped.values()) == sum(int(o[SHED].sum()) for o in outs) > 0


def _write(path, events):
    with open(path, "w") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")


def _file_stream(spark, source, files):
    """One JSON file per micro-batch in ``source`` (modification times in order) and the stream reading it."""
    for k, batch in enumerate(files):
        _write(source / f"events-{k:02d}.json", batch)
        os.utime(source / f"events-{k:02d}.json", (time.time() - 100 + k, time.time() - 100 + k))
    return (spark.readStream.schema("type STRING, ts LONG, v LONG").option("maxFilesPerTrigger", 1)
            .json(str(source)))


def _run_stream(spark, tmp_path, name: str, q, training, files) -> tuple[list[dict], object]:
    source, sink, checkpoint = tmp_path / f"in-{name}", tmp_path / f"out-{name}", tmp_path / f"cp-{name}"
    source.mkdir()
    stream = _file_stream(spark, source, files)
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
    # another source than a directory of files: the batch-duration controller
    assert followed_directory(spark.readStream.format("rate").load()) is None

    # a bound below any batch's latency: the controller sheds from the second batch on, every drop counted
    dropped_dir = tmp_path / "dropped"
    tight = sparkcep.compile(QUERY, shedding_latency=0.01, dropped_output=str(dropped_dir))
    shed, handle = _run_stream(spark, tmp_path, "tight", tight, training, files)
    assert handle.offered == len(events)
    # a file source over a local directory: the backlog controller (the first micro-batch is Spark's start-up,
    # it sets nothing), fed the arrival apply() observes (the files' modification times, 100 s ago)
    assert isinstance(handle.controller, BacklogController) and handle.source == str(tmp_path / "in-tight")
    assert handle.batches[0]["rho_next"] == 0 and handle.batches[1]["dropped"] == 0
    assert handle.batches[1]["rho_next"] > 0.5 and handle.batches[1]["latency"] > 90
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


@pytest.mark.spark
@pytest.mark.slow
def test_streaming_stage_retrains_on_drift(spark, tmp_path):
    """On Spark: the stream turns from A-heavy (as trained) to C-heavy; the driver detects it from the observe()
    counts, the tasks write a sample, the model is refit and named in the control file; with a loose bound
    nothing is dropped and every offered row reaches the sink."""
    from sparkcep.spark.shedding import install

    spec = sparkcep.compile(QUERY).spec()
    sh = fit_gspice([(spec, 1.0)], [{**e, SID: i} for i, e in enumerate(_events(800, 1))], pane_length=6,
                    attributes=("v",))
    rng = np.random.default_rng(8)
    files = []
    for k in range(12):
        p = [0.6, 0.25, 0.15] if k < 3 else [0.15, 0.25, 0.6]
        types = rng.choice(list("ABC"), size=300, p=p)
        files.append([{"type": str(t), "ts": 300 * k + i, "v": int(rng.integers(1, 11))} for i, t in enumerate(types)])
    source, sink = tmp_path / "in", tmp_path / "out"
    source.mkdir()
    stream = _file_stream(spark, source, files)
    kept, handle = install(stream, sh, bound=3600, control_dir=str(tmp_path / "control"), drift_min_events=500,
                           sample_limit=400)
    query = (kept.writeStream.format("json").option("path", str(sink))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination()
    deadline = time.time() + 60  # the listener is asynchronous (and refits on the driver)
    while len(handle.batches) < len(files) and time.time() < deadline:
        time.sleep(0.2)
    spark.streams.removeListener(handle.listener)
    assert handle.offered == 3600 and handle.drop_ratio == 0
    assert handle.retrains >= 1 and handle.batches[0]["model"] == 0 and handle.batches[-1]["model"] >= 1
    assert os.path.exists(handle.model_path)
    assert json.loads(open(handle.control.path).read())["model"] == handle.model_path
    assert handle.refit.reference[2] > 0.4  # the refit learnt the C-heavy stream
    assert spark.read.schema("type STRING, ts LONG, v LONG").json(str(sink)).count() == 3600
