"""Bad and late input: the job keeps running, every bad record becomes a dead letter with its reason, every
event later than the allowed lateness a late event, and the counts show in the progress (Spark's observed
metrics); out-of-order input within the lateness gives the results of sorted input."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

import sparkcep
from sparkcep.cli import main
from sparkcep.oracles.match import match_rows
from sparkcep.spark.results import canonical, epoch_ms_rows
from sparkcep.spark.validate import read_validated

pytestmark = pytest.mark.spark

DDL = "type STRING, ts BIGINT, id BIGINT, x BIGINT"
COLUMNS = ["type", "ts", "id", "x"]

GOOD = [{"type": "A", "ts": 1, "id": 0, "x": 1}, {"type": "B", "ts": 2, "id": 0, "x": 2}]
#: Bad lines and the reason each must get, with the DDL schema.
BAD = [
    ('{"type": "A", "ts": 3, "id": 0', "malformed record"),
    ("not json at all", "malformed record"),
    ("[1, 2, 3]", "malformed record"),
    ('{"ts": 4, "id": 0, "x": 1}', "missing type"),
    ('{"type": "A", "id": 0, "x": 1}', "missing ts"),
    ('{"type": "A", "ts": null, "id": 0, "x": 1}', "missing ts"),
    ('{"type": "A", "ts": "soon", "id": 0, "x": 1}', "wrong attribute type: ts (not bigint)"),
    ('{"type": "B", "ts": 5, "id": 0, "x": "three"}', "wrong attribute type: x (not bigint)"),
    ('{"type": "B", "ts": 6, "id": "zero", "x": "three"}', "wrong attribute type: id (not bigint), x (not bigint)"),
]


def test_validation_gives_each_bad_record_its_reason(spark, tmp_path):
    lines = [json.dumps(e) for e in GOOD] + [line for line, _ in BAD]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "e.jsonl").write_text("\n".join(lines) + "\n")
    events, rejected = read_validated(spark, str(tmp_path / "in"), "json", "type", "ts", schema=DDL)
    assert canonical(epoch_ms_rows(events)) == canonical(GOOD)
    got = sorted((r["reason"], r["record"]) for r in rejected.collect())
    raw = {line: reason for line, reason in BAD}
    # a record Spark could not parse keeps its raw line; the others are the row as JSON
    by_reason = sorted(reason for reason, _ in got)
    assert by_reason == sorted(raw.values())
    for reason, record in got:
        if reason.startswith(("malformed", "wrong")):
            assert raw[record] == reason
        else:
            assert json.loads(record)["type" if reason == "missing ts" else "ts"] is not None


def test_parquet_columns_read_with_their_types_are_checked_only_where_a_value_can_be_wrong(spark, tmp_path):
    """Parquet columns come typed: a bigint or a string is never a wrong value, so the filter runs no check on
    every row for them (bench/keyless_parallel.py: the check was a per-row CASE); a double can still be NaN or
    infinite (a dead letter), and so can a double ts (a batch takes any finite ts)."""
    import math

    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"type": ["A", "B", None, "A", "B"], "ts": pa.array([1, 2, 3, None, 5], pa.int64()),
                             "n": [1, 2, 3, 4, 5], "x": [0.5, math.nan, 1.0, 2.0, math.inf]}), tmp_path / "e.parquet")
    path = str(tmp_path / "e.parquet")
    events, rejected = read_validated(spark, path, "parquet", "type", "ts")
    assert sorted(r["n"] for r in events.collect()) == [1]
    assert sorted(r["reason"] for r in rejected.collect()) == [
        "missing ts", "missing type", "wrong attribute type: x (not double)", "wrong attribute type: x (not double)"]
    events, _ = read_validated(spark, path, "parquet", "type", "ts", attributes=["n"])
    plan = events._jdf.queryExecution().optimizedPlan().toString()
    checks = [line for line in plan.splitlines() if "Filter" in line]  # only the null checks of type and ts
    assert len(checks) == 1 and not any(w in checks[0] for w in ("concat_ws", "isnan", "Infinity", "n#")), plan
    assert sorted(r["n"] for r in events.collect()) == [1, 2, 5]
    pq.write_table(pa.table({"type": ["A", "A", "A"], "ts": [1.5, math.nan, -math.inf]}), tmp_path / "f.parquet")
    events, rejected = read_validated(spark, str(tmp_path / "f.parquet"), "parquet", "type", "ts")
    assert [r["ts"] for r in events.collect()] == [1.5]
    assert [r["reason"] for r in rejected.collect()] == ["ts out of range (not finite)"] * 2


def test_declared_types_make_unknown_types_dead_letters(spark, tmp_path):
    """With the stream's types declared, a misspelt type is a dead letter; without, it is just irrelevant."""
    lines = [json.dumps(e) for e in GOOD] + ['{"type": "b", "ts": 7, "id": 0, "x": 1}', '{"ts": 8, "id": 0}']
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "e.jsonl").write_text("\n".join(lines) + "\n")
    path = str(tmp_path / "in")
    events, rejected = read_validated(spark, path, "json", "type", "ts", schema=DDL, known_types=["A", "B"])
    assert canonical(epoch_ms_rows(events)) == canonical(GOOD)
    got = sorted((r["reason"], json.loads(r["record"])["ts"]) for r in rejected.collect())
    assert got == [("missing type", 8), ("unknown event type: b", 7)]
    events, rejected = read_validated(spark, path, "json", "type", "ts", schema=DDL)
    assert len(epoch_ms_rows(events)) == 3 and [r["reason"] for r in rejected.collect()] == ["missing type"]


def test_validation_with_an_inferred_schema_and_string_ts(spark, tmp_path):
    """Without a schema, ts strings become timestamps; one that is not a timestamp is a dead letter."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "e.jsonl").write_text(
        '{"type": "A", "ts": "2026-01-01T00:00:01Z", "x": 1}\n'
        '{"type": "A", "ts": "yesterday", "x": 2}\n'
        '{"type": "B", "x": 3}\n'
        '{oops\n')
    events, rejected = read_validated(spark, str(tmp_path / "in"), "json", "type", "ts")
    assert [r["x"] for r in epoch_ms_rows(events)] == [1]
    assert dict(events.dtypes)["ts"] == "timestamp"
    assert sorted(r["reason"] for r in rejected.collect()) == ["malformed record", "missing ts", "unparseable ts"]


def test_csv_rows_that_do_not_fit_are_dead_letters(spark, tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "e.csv").write_text("type,ts,id,x\nA,1,0,1\nB,2,0,two\n,3,0,1\nB,4\nB,5,0,1,9\n")
    events, rejected = read_validated(spark, str(tmp_path / "in"), "csv", "type", "ts", schema=DDL)
    assert [r["ts"] for r in events.collect()] == [1]
    ragged = "malformed record (not a row of the header's width)"
    assert sorted(r["reason"] for r in rejected.collect()) == sorted(
        ["wrong attribute type: x (not bigint)", "missing type", ragged, ragged])


# ------------------------------------------------------------------------------------------ a stream, end to end

QUERY = "PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 8 RETURN a.ts AS at, b.ts AS bt, a.id AS id"
LATENESS = 3


def shuffled_within(events: list[dict], lateness: int, seed: int) -> list[dict]:
    """``events`` in an arrival order where none is ``lateness`` or more behind the newest before it."""
    rnd = random.Random(seed)
    keyed = sorted(events, key=lambda e: e["ts"] + rnd.randrange(lateness))
    newest = -1
    for e in keyed:
        assert e["ts"] > newest - lateness
        newest = max(newest, e["ts"])
    return keyed


def write_files(folder: Path, chunks: list[list]) -> None:
    folder.mkdir(parents=True)
    for k, chunk in enumerate(chunks):
        path = folder / f"part-{k:02d}.jsonl"
        path.write_text("".join((e if isinstance(e, str) else json.dumps(e)) + "\n" for e in chunk))
        os.utime(path, (1_000_000 + k, 1_000_000 + k))  # the file source reads in modification-time order


def same_record(text: str) -> str:
    """A record as comparable text: a JSON object without its nulls, re-serialized (the dead letter of a
    parsed row is the row as JSON), anything else as it is (the raw line of a record Spark could not read)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if not isinstance(value, dict):
        return text
    return json.dumps({k: v for k, v in value.items() if v is not None}, sort_keys=True)


def read_dir(folder: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(folder.glob("part-*")) for line in f.read_text().splitlines()]


@pytest.mark.slow
def test_stream_routes_bad_and_late_input_and_counts_it(spark, tmp_path, capsys):
    rnd = random.Random(13)
    events = [{"type": rnd.choice("AABC"), "ts": t, "id": rnd.randrange(2), "x": rnd.randrange(5)}
              for t in range(48)]
    expected = match_rows(sparkcep.compile(QUERY).query, events, COLUMNS)
    assert len(expected) >= 10
    arrival = shuffled_within(events, LATENESS, seed=5)
    late_event = {"type": "A", "ts": 2, "id": 0, "x": 0}  # arrives when the newest ts is ~35: far behind
    unknown = {"type": "Q", "ts": 30, "id": 1, "x": 1}  # a type the query does not use: ignored, not an error
    chunks = [arrival[0:12], arrival[12:24] + [line for line, _ in BAD[:5]],
              arrival[24:36] + [unknown], [late_event] + arrival[36:48] + [line for line, _ in BAD[5:]],
              [{"type": "B", "ts": 1_000, "id": 9, "x": 0}]]
    write_files(tmp_path / "in", chunks)
    out = tmp_path / "out"
    assert main(["run", "-e", QUERY, "--input", str(tmp_path / "in"), "--stream", "--once", "--schema", DDL,
                 "--files-per-trigger", "1", "--lateness", str(LATENESS), "--output", str(out),
                 "--checkpoint", str(tmp_path / "ck")]) == 0
    err = capsys.readouterr().err
    # out of order within the lateness: the results of sorted input; the bad and late records left out
    assert canonical(read_dir(out)) == canonical(expected)
    dead = read_dir(out / "_dead_letters")
    assert sorted((same_record(d["record"]), d["reason"]) for d in dead) == sorted(
        (same_record(line), reason) for line, reason in BAD)
    late = read_dir(out / "_late")
    assert [json.loads(r["record"]) for r in late] == [late_event]
    assert late[0]["reason"].startswith("late: ts before the watermark")
    # the counts, from the query's observed metrics, one progress line per micro-batch
    progress = [line for line in err.splitlines() if line.startswith("batch ")]
    assert len(progress) >= len(chunks)
    total = len(events) + 2 + len(BAD) + 1  # + the late and the unknown event, + the tail
    assert progress[-1].startswith(f"batch {len(progress) - 1}: read {total} events")
    assert f"{len(expected)} results, {len(BAD)} dead letters, 1 late, " in progress[-1]
    ignored = sum(1 for e in events if e["type"] == "C") + 1  # C events and the unknown type
    assert f", {ignored} ignored, " in progress[-1]


def test_file_arrival_is_observed_once_found_by_plan_node_not_by_plan_text(spark, tmp_path):
    """``with_file_arrival`` adds the arrival metric unless the plan already has that observation node: a
    filter whose literal reads like the node's text is no observation (it fooled a search of the plan's
    text), and an observed DataFrame is returned as it is (no second metric of the same name)."""
    from pyspark.sql import functions as F

    from sparkcep.spark.io import with_file_arrival
    from sparkcep.spark.validate import ARRIVAL_METRIC

    (tmp_path / "e.json").write_text('{"type": "A", "ts": 1, "id": 1}\n')
    df = spark.read.json(str(tmp_path)).where(F.col("type") != f"CollectMetrics {ARRIVAL_METRIC}, x")
    observed = with_file_arrival(df)
    assert observed is not None and observed is not df
    assert f"CollectMetrics {ARRIVAL_METRIC}," in observed._jdf.queryExecution().logical().toString()
    assert with_file_arrival(observed) is observed
