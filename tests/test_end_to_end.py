"""End to end on Spark: ``sparkcep.compile(text).apply(df)``, ``sparkcep run`` (batch and ``--stream``) and
the generated job run as its own process, each compared with the oracle."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from pyspark.sql.types import LongType, StringType, StructField, StructType

import sparkcep
from sparkcep.cli import main
from sparkcep.oracles.match import match_rows
from sparkcep.spark.results import canonical, epoch_ms_rows
from tests.strategies import event_streams
from tests.test_pipeline import seq_queries

pytestmark = pytest.mark.spark

SCHEMA = StructType([StructField("type", StringType()), StructField("ts", LongType()),
                     StructField("x", LongType()), StructField("id", LongType())])
COLUMNS = SCHEMA.fieldNames()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(text=seq_queries(), events=event_streams(types="ABCD", max_size=9, lacking=True))
def test_apply_batch_equals_oracle(spark, text, events):
    """Random queries through the real Spark SQL filter (``_mask``, the ANY lacking-attribute rule),
    the shuffle by the equivalence key and ``applyInPandas``."""
    q = sparkcep.compile(text)
    df = spark.createDataFrame([tuple(e.get(c) for c in COLUMNS) for e in events], SCHEMA)
    got = epoch_ms_rows(q.apply(df))
    assert canonical(got) == canonical(match_rows(q.query, events, COLUMNS)), text


# --------------------------------------------------------------------------------------- files and the CLI

QUERY = """\
misplaced:
EVENT SEQ(SHELF-READING x, SHELF-READING y, EXIT-READING z)
WHERE [id] AND x.shelf_id != y.shelf_id AND z.gate > 0
WITHIN 1 hour
RETURN x.id AS item, x.shelf_id AS from_shelf, y.shelf_id AS to_shelf, y.ts AS moved_at, z.ts AS left_at
"""
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
DDL = "type STRING, ts TIMESTAMP, id BIGINT, shelf_id BIGINT, gate BIGINT"


def rfid_events(n_items: int = 12) -> list[dict]:
    """A small store: items read at shelves, sometimes at the counter, then at the exit gates."""
    events = []
    for item in range(n_items):
        t = T0 + timedelta(minutes=item)
        for step in range(5):
            t += timedelta(minutes=7 + (item * 3 + step) % 11)
            kind = ["SHELF-READING", "SHELF-READING", "COUNTER-READING", "SHELF-READING", "EXIT-READING"][step]
            e = {"type": kind, "ts": t, "id": item, "shelf_id": (item + step) % 3}
            if kind == "EXIT-READING":
                e["gate"] = item % 3
            events.append(e)
    return sorted(events, key=lambda e: e["ts"])


def write_jsonl(events: list[dict], folder: Path, files: int) -> None:
    folder.mkdir(parents=True)
    per = -(-len(events) // files)
    for k in range(files):
        path = folder / f"part-{k:02d}.jsonl"
        path.write_text("".join(json.dumps({**e, "ts": e["ts"].isoformat()}) + "\n"
                                for e in events[k * per:(k + 1) * per]))
        os.utime(path, (1_000_000 + k, 1_000_000 + k))  # the file source reads in modification-time order


def expected_rows(q: sparkcep.CompiledQuery, events: list[dict]) -> list[dict]:
    as_ms = [{**e, "ts": int(e["ts"].timestamp() * 1000)} for e in events]
    return match_rows(q.query, as_ms)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    events = rfid_events()
    write_jsonl(events, root / "events", files=4)
    (root / "query.cep").write_text(QUERY)
    q = sparkcep.compile(QUERY)
    expected = expected_rows(q, events)
    assert len(expected) > 5  # the data must exercise the query
    return root, expected


def cli_rows(capsys, *args: str) -> list[dict]:
    assert main(list(args)) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def as_cli(rows: list[dict]) -> list[dict]:
    """The oracle's rows as ``sparkcep run`` prints them: timestamps as ISO-8601 UTC."""
    return [{**r, "moved_at": iso(r["moved_at"]), "left_at": iso(r["left_at"])} for r in rows]


@pytest.mark.slow
def test_run_batch_and_stream_print_the_oracle_matches(spark, store, capsys, tmp_path):
    root, expected = store
    batch = cli_rows(capsys, "run", str(root / "query.cep"), "--input", str(root / "events"))
    assert canonical(batch) == canonical(as_cli(expected))
    stream = cli_rows(capsys, "run", str(root / "query.cep"), "--input", str(root / "events"), "--stream", "--once",
                      "--files-per-trigger", "1", "--checkpoint", str(tmp_path / "ckpt"))
    assert canonical(stream) == canonical(batch)


@pytest.mark.slow
def test_streaming_resumes_from_its_checkpoint(spark, tmp_path):
    """Two runs over one checkpoint: the second sees only the new files, and no match is lost or repeated."""
    from sparkcep.spark.io import read_events

    events = rfid_events(16)
    half = len(events) // 2
    q = sparkcep.compile(QUERY)
    out, ckpt, inbox = tmp_path / "out", tmp_path / "ckpt", tmp_path / "in"
    write_jsonl(events[:half], tmp_path / "first", files=2)
    write_jsonl(events[half:], tmp_path / "second", files=2)
    inbox.mkdir()
    for round_ in ("first", "second"):
        for f in sorted((tmp_path / round_).iterdir()):
            f.rename(inbox / f"{round_}-{f.name}")
        # the first files hold no EXIT-READING, hence no `gate`: a stream states its schema
        df = read_events(spark, str(inbox), "json", "ts", stream=True, schema=DDL)
        result = q.apply(df)
        (result.writeStream.format("json").option("path", str(out)).option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True).start().awaitTermination())
    got = epoch_ms_rows(spark.read.schema(result.schema).json(str(out)))
    assert canonical(got) == canonical(expected_rows(q, events))


def test_missing_attribute_is_a_clear_error(spark):
    df = spark.createDataFrame([("SHELF-READING", 1, 1)], "type STRING, ts BIGINT, id BIGINT")
    # the first attribute missing, at its place in the query (line, column, caret), as `sparkcep run` says it
    with pytest.raises(sparkcep.CEPError, match=r"line \d+, column \d+: the query reads '(gate|shelf_id)', which the "
                                                r"input does not have \(columns: id, ts, type\)"):
        sparkcep.compile(QUERY.replace("1 hour", "10")).apply(df)


def json_rows(folder: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(folder.glob("part-*.json")) for line in f.read_text().splitlines()]


def to_second(rows: list[dict], *columns: str) -> list[dict]:
    """``columns`` (timestamps as ISO-8601 text, or None: absent from a JSON line) cut to the second."""
    return [{**r, **{c: r.get(c) and r[c][:19] for c in columns}} for r in rows]


@pytest.mark.slow
def test_generated_job_runs_standalone(spark, store, tmp_path, capsys):
    """``sparkcep compile`` output run by a fresh Python process (its own JVM), batch then streaming, with
    ``--timeouts``: its OUTPUT/_timeouts rows are the oracle's and those of ``sparkcep run --timeouts``."""
    from sparkcep.oracles.timeouts import timed_out_rows

    root, expected = store
    job = tmp_path / "job.py"
    assert main(["compile", str(root / "query.cep"), "-o", str(job)]) == 0
    # the store's events and, last, one the query ignores a day later: the stream's watermark closes every window
    events = tmp_path / "events"
    shutil.copytree(root / "events", events)
    closer = events / "part-99.jsonl"
    closer.write_text(json.dumps({"type": "COUNTER-READING", "ts": (T0 + timedelta(days=1)).isoformat(), "id": 0,
                                  "shelf_id": 0}) + "\n")
    os.utime(closer, (1_000_100, 1_000_100))
    as_ms = [{**e, "ts": int(e["ts"].timestamp() * 1000)} for e in rfid_events()]
    timed_out = timed_out_rows(sparkcep.compile(QUERY).query, as_ms)
    assert len(timed_out) > 5  # the data must exercise them
    assert main(["run", str(root / "query.cep"), "--input", str(events), "--output", str(tmp_path / "run"),
                 "--timeouts", "--quiet"]) == 0
    by_run = [{c: r.get(c) for c in timed_out[0]} for r in json_rows(tmp_path / "run" / "_timeouts")]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONWARNINGS": "ignore::FutureWarning"}
    for mode, extra in (("batch", []), ("stream", ["--stream", "--once", "--checkpoint", str(tmp_path / "ck")])):
        done = subprocess.run([sys.executable, str(job), "--input", str(events), "--output", str(tmp_path / mode),
                               "--timeouts", *extra], capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        rows = json_rows(tmp_path / mode)
        assert canonical(to_second(rows, "moved_at", "left_at")) \
            == canonical([{**r, "moved_at": iso(r["moved_at"])[:19], "left_at": iso(r["left_at"])[:19]}
                          for r in expected]), mode
        got = json_rows(tmp_path / mode / "_timeouts")
        assert f"{len(timed_out)} timed-out partial matches; see {tmp_path / mode}/_timeouts" in done.stderr, mode
        got = [{c: r.get(c) for c in timed_out[0]} for r in got]  # JSON lines leave out a None
        assert canonical(to_second(got, "moved_at", "left_at")) == canonical(
            [{**r, "moved_at": r["moved_at"] and iso(r["moved_at"])[:19],
              "left_at": r["left_at"] and iso(r["left_at"])[:19]} for r in timed_out]), mode
        assert canonical(got) == canonical(by_run), mode


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_run_reads_csv_and_parquet(spark, store, capsys, tmp_path, fmt):
    root, expected = store
    path = str(tmp_path / f"events.{fmt}")
    df = spark.read.schema(DDL).json(str(root / "events"))
    df.write.option("header", True).format(fmt).save(path)
    rows = cli_rows(capsys, "run", str(root / "query.cep"), "--input", path, "--format", fmt)
    assert canonical(rows) == canonical(as_cli(expected))


def test_run_numeric_ts_with_a_unit(spark, capsys, tmp_path):
    """Numeric ts in seconds: ``WITHIN 3 seconds`` needs --ts-unit; without it, one clear error."""
    events = [{"type": t, "ts": ts, "id": 1} for t, ts in [("A", 1), ("B", 2), ("A", 5), ("B", 9)]]
    (tmp_path / "e.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    text = "PATTERN SEQ(A a, B b) WHERE [id] WITHIN 3 seconds RETURN a.ts AS a_ts, b.ts AS b_ts"
    rows = cli_rows(capsys, "run", "-e", text, "--input", str(tmp_path / "e.jsonl"), "--ts-unit", "s")
    assert rows == [{"a_ts": 1, "b_ts": 2}]
    assert main(["run", "-e", text, "--input", str(tmp_path / "e.jsonl")]) == 2
    assert "needs the unit of the numeric ts column" in capsys.readouterr().err


def test_unsupported_patterns_are_refused_not_mismatched(spark, capsys, tmp_path):
    """What the engines cannot run yet gets one clear message and exit 2, never a wrong answer."""
    (tmp_path / "e.jsonl").write_text('{"type": "A", "ts": 1}\n{"type": "B", "ts": 2}\n')
    for text, message in [
        ("PATTERN SEQ(A a, (SEQ(B b, C c) OR SEQ(D d, E e))+) WITHIN 10", "repeated group"),  # collapsed
    ]:
        assert main(["run", "-e", text, "--input", str(tmp_path / "e.jsonl"), "--collapsed"]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


@pytest.mark.slow
def test_streaming_without_partition_key_and_renamed_columns(spark, tmp_path):
    """No equivalence test (one group), type/ts columns with other names, numeric ts, streaming."""
    from sparkcep.spark.io import read_events

    events = [{"kind": k, "time": t, "x": x} for t, (k, x) in enumerate(
        [("A", 1), ("B", 3), ("A", 5), ("C", 0), ("B", 7), ("B", 2), ("C", 9)], start=1)]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "e.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    text = "PATTERN SEQ(A a, B b) WHERE a.x < b.x WITHIN 4 RETURN a.time AS a_t, b.time AS b_t"
    q = sparkcep.compile(text, type_col="kind", ts_col="time")
    df = read_events(spark, str(tmp_path / "in"), "json", "time", stream=True)
    (q.apply(df).writeStream.format("json").option("path", str(tmp_path / "out"))
     .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start().awaitTermination())
    got = [r.asDict() for r in spark.read.schema("a_t BIGINT, b_t BIGINT").json(str(tmp_path / "out")).collect()]
    oracle_events = [{"type": e["kind"], "ts": e["time"], "x": e["x"]} for e in events]
    expected = match_rows(sparkcep.compile(text.replace("time", "ts")).query, oracle_events)
    assert canonical(got) == canonical(expected)
    assert got and len(got) == 2


def test_stream_input_must_be_a_directory(spark, capsys, tmp_path):
    (tmp_path / "e.jsonl").write_text('{"type": "A", "ts": 1}\n')
    assert main(["run", "-e", "PATTERN SEQ(A a, B b) WITHIN 5", "--input", str(tmp_path / "e.jsonl"),
                 "--stream"]) == 2
    assert "a stream reads a directory" in capsys.readouterr().err


@pytest.mark.slow
def test_streaming_keeps_events_at_ts_zero(spark, tmp_path):
    """Spark's watermark starts at 0 and drops rows at or before it: numeric ts 0 must not be lost."""
    from sparkcep.spark.io import read_events

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "e.jsonl").write_text(
        '{"type":"A","ts":0}\n{"type":"B","ts":1}\n{"type":"A","ts":2}\n{"type":"B","ts":3}\n')
    q = sparkcep.compile("PATTERN SEQ(A a, B b) WITHIN 5 RETURN a.ts AS at, b.ts AS bt")
    result = q.apply(read_events(spark, str(tmp_path / "in"), "json", "ts", stream=True))
    (result.writeStream.format("json").option("path", str(tmp_path / "out"))
     .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start().awaitTermination())
    got = sorted(tuple(r) for r in spark.read.schema(result.schema).json(str(tmp_path / "out")).collect())
    assert got == [(0, 1), (0, 3), (2, 3)]
