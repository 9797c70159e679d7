"""Load shedding for a workload on Spark: one gSPICE stage in front of the workload's operators, its utilities
learnt for every query; with a loose latency bound nothing is dropped and every query's results are those of
the unshed workload."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import threading
import time

import pytest
from pyspark.sql import functions as F

import sparkcep
from sparkcep.runtime_udfs.shedding.controller import BacklogController
from sparkcep.spark.validate import original_name

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
        d.pop("_arrival_ms", None)
        out.setdefault(d.pop("query"), []).append(tuple(sorted((k, v) for k, v in d.items() if v is not None)))
    return {k: sorted(v) for k, v in out.items()}


#: moves the watermark past every window
TAIL = {"type": "D", "ts": 10_000, "id": 1, "x": 0}


def write_parts(src, stream_events: list[dict], first: float = 1_000_000) -> None:
    """Three files of ``stream_events`` and one of :data:`TAIL`, in modification-time order from ``first``
    (epoch s: their arrival)."""
    src.mkdir()
    parts = [stream_events[:80], stream_events[80:160], stream_events[160:], [TAIL]]
    for i, part in enumerate(parts):
        (src / f"part{i}.json").write_text("".join(json.dumps(e) + "\n" for e in part))
        os.utime(src / f"part{i}.json", (first + i, first + i))


#: with a trend query the shared executor runs (its utilities learnt from its trends)
TREND = ";\nn: RETURN COUNT(*) PATTERN SEQ(A, B) WHERE [id] WITHIN 10"


def test_workload_shedding_with_a_loose_bound_keeps_every_result(spark, tmp_path):
    stream_events = events(240, seed=7)
    src = tmp_path / "in"
    write_parts(src, stream_events, first=time.time() - 10)  # arrived just now: the backlog controller follows them
    shed = sparkcep.compile_shared_workload(WORKLOAD + TREND, budget=None, shedding_latency=1000.0)
    stream = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(src))
              .withColumn("arrived", F.col("_metadata.file_modification_time")))
    result = shed.apply(stream, shedding_training=stream_events, arrival_col="arrived")
    # one pass over the input for every operator: one read and one shedding stage (a union of the operators'
    # filtered events held the read, validation, watermark and shedding stage under each of them)
    plan = result._jdf.queryExecution().analyzed().toString()
    assert plan.count("MapInPandas") == 1 and plan.count("StreamingRelation") == 1
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (result.writeStream.format("json").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .outputMode("append").trigger(availableNow=True).start())
    query.awaitTermination()
    written = spark.read.schema(result.schema).json(str(out))
    got = _rows(written)
    # each match row with the arrival of its last event: its file's, one file per micro-batch
    arrival = {i: os.stat(src / f"part{i}.json").st_mtime_ns // 10**6 for i in range(3)}
    stamps = [(r["_arrival_ms"], arrival[min((r["b_ts"] if r["query"] == "ab" else r["c_ts"]) // 80, 2)])
              for r in written.collect() if r["query"] != "n"]
    assert stamps and all(got_ms == want for got_ms, want in stamps), stamps
    handle = result.shedding
    spark.streams.removeListener(handle.listener)
    unshed = sparkcep.compile_shared_workload(WORKLOAD + TREND, budget=None)
    expected = _rows(unshed.apply(spark.createDataFrame(stream_events + [TAIL], SCHEMA)))
    assert got == expected and set(got) == {"ab", "bc", "n"}
    # the one stage saw every event of both queries' types (D too: it sits in front of every operator)
    assert handle.offered == len(stream_events) + 1 and sum(handle.dropped.values()) == 0
    assert set(handle.types) >= {"A", "B", "C"}
    # a directory of files: the backlog controller, fed the arrival apply() observes
    assert isinstance(handle.controller, BacklogController) and handle.source == str(src)
    assert all(b["latency"] is not None for b in handle.batches[1:] if b["offered"])



def _written_rows(out) -> int:
    """The result rows the file sink has written so far (a file being written may be cut short)."""
    n = 0
    for f in out.glob("part-*"):
        for line in f.read_text().splitlines():
            try:
                json.loads(line)
                n += 1
            except ValueError:
                pass
    return n


def _tail_committed(checkpoint) -> bool:
    """Whether the micro-batch that read ``part3.json`` (the file source's log names each batch's files, staged
    under admission control with the backlog in their names: :func:`original_name`) has committed: the tail may
    add no result row, so the rows written alone cannot tell that it was read."""
    log = checkpoint / "sources" / "0"
    batches = [f.name for f in log.iterdir() if f.name.isdigit()
               and any("part3.json" in original_name(line) for line in f.read_text().splitlines())] \
        if log.is_dir() else []
    return any((checkpoint / "commits" / b).exists() for b in batches)


def test_the_generated_workload_job_sheds_with_one_stage_and_keeps_every_result_under_a_loose_bound(
        spark, tmp_path, capsys):
    """``sparkcep compile WORKLOAD`` with shedding: the job (run in this process, on the shared session) puts one
    stage in front of the workload's operators; a continuous run over a directory of JSON lines reads what the
    admission control hands over (``CHECKPOINT/_admitted``), as ``sparkcep run --stream`` does: a file written
    after the start is picked up.  Under a loose bound it drops nothing, reports it, and its rows are the
    unshed workload's; SIGTERM stops it cleanly."""
    stream_events = events(240, seed=11)
    src, out, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    write_parts(src, stream_events, first=time.time() - 10)  # arrived just now: within the bound
    (src / "part3.json").unlink()  # the tail comes once the run is under way
    source = sparkcep.compile_shared_workload(WORKLOAD, budget=None, shedding_latency=1000.0).job_source()
    assert "SHEDDING_SPECS = " in source and "shed=shed" in source
    job = tmp_path / "job.py"
    job.write_text(source)
    spec = importlib.util.spec_from_file_location("shedding_workload_job", job)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    unshed = sparkcep.compile_shared_workload(WORKLOAD, budget=None)
    expected = _rows(unshed.apply(spark.createDataFrame(stream_events + [TAIL], SCHEMA)))

    finished = threading.Event()

    def feed_then_stop() -> None:
        deadline = time.monotonic() + 600
        while not (checkpoint / "commits" / "0").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        (src / "part3.json").write_text(json.dumps(TAIL) + "\n")  # after the start: the admission hands it over
        total = sum(map(len, expected.values()))
        while not (_tail_committed(checkpoint) and _written_rows(out) >= total) and time.monotonic() < deadline \
                and not finished.is_set():
            time.sleep(0.2)
        if not finished.is_set():
            os.kill(os.getpid(), signal.SIGTERM)  # the job's StopSignals: stop after the micro-batch under way

    previous = signal.signal(signal.SIGTERM, lambda *_: None)  # never pytest's own end, whatever the timing
    feeder = threading.Thread(target=feed_then_stop, daemon=True)
    feeder.start()
    try:
        module.main(["--input", str(src), "--output", str(out), "--schema", SCHEMA, "--stream",
                     "--checkpoint", str(checkpoint), "--shuffle-partitions", "2"])
    finally:
        finished.set()
        feeder.join(timeout=30)
        signal.signal(signal.SIGTERM, previous)
    err = capsys.readouterr().err
    assert f"load shedding dropped 0 of {len(stream_events) + 1} events" in err, err[-2000:]
    staged = sorted(original_name(f.name) for f in (checkpoint / "_admitted").iterdir())
    assert staged == ["_sparkcep_staging", *(f"part{i}.json" for i in range(4))]
    got = _rows(spark.read.schema("query STRING, a_ts LONG, b_ts LONG, c_ts LONG").json(str(out)))
    assert got == expected and set(got) == {"ab", "bc"}
