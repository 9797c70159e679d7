"""A record never kills a job, nor changes how the others are read (issue: one record kills the whole run).

Each dataset is real files run through ``sparkcep run``, batch and streaming: attributes the query does not read
(arrays, objects, keys with quotes or backquotes) are never parsed; one value of the wrong type is a dead letter
and does not retype its column for every record (``"9" < "10"`` is false as text); a numeric type column is
text; numeric ts beyond what a stream's event-time column holds, and timestamps outside what a stream can hand
to pandas, are dead letters in a stream and fine in a batch; extreme and sub-millisecond ISO timestamps run in
a batch; an empty input directory is one line, exit 2.  The stream also restarts from its checkpoint with such
records in it, results exactly once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import sparkcep
from sparkcep.cli import main
from sparkcep.oracles.match import match_rows
from sparkcep.spark.results import canonical
from sparkcep.spark.validate import STREAM_TS_LIMIT

pytestmark = pytest.mark.spark

QUERY = "PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 8 RETURN a.ts AS at, b.ts AS bt, a.id AS id"
COLUMNS = ["type", "ts", "id", "x"]
#: A 9 before a 10 (a match only if x is compared as a number), a 10 before a 9 (a match only as text).
GOOD = [{"type": "A", "ts": 1, "id": 0, "x": 9}, {"type": "B", "ts": 2, "id": 0, "x": 10},
        {"type": "A", "ts": 3, "id": 1, "x": 10}, {"type": "B", "ts": 4, "id": 1, "x": 9},
        {"type": "A", "ts": 5, "id": 1, "x": 1}, {"type": "B", "ts": 7, "id": 1, "x": 2}]
#: Far ahead: the stream's watermark passes every window (a key with no match).
TAIL = {"type": "B", "ts": 100_000, "id": 9, "x": 0}

#: name -> (lines added to the good events, their dead-letter reasons in a batch, in a stream); an event given
#: as a dict is valid (it joins the oracle's input), a string is a raw line.
CASES = {
    "unread-array-and-object": ([{"type": "A", "ts": 6, "id": 1, "x": 0, "tags": ["a", "b"]},
                                 {"type": "C", "ts": 6, "id": 1, "x": 0, "o": {"p": {"q": [1, {"r": None}]}}}],
                                [], []),
    "odd-keys": ([{"type": "A", "ts": 6, "id": 1, "x": 0, "it's": 1, "b`q": "2", "a.b": [3], "'": {}}], [], []),
    "one-bad-value": (['{"type": "A", "ts": 6, "id": 0, "x": "oops"}'],
                      ["wrong attribute type: x (not bigint)"], ["wrong attribute type: x (not bigint)"]),
    "numeric-type-value": ([{"type": 7, "ts": 6, "id": 0, "x": 0}], [], []),
    "epoch-ns-ts": ([{"type": "A", "ts": 1_764_000_000_000_000_000, "id": 5, "x": 1},
                     {"type": "B", "ts": -10**16, "id": 6, "x": 1}],
                    [], [f"ts out of range (|ts| above {STREAM_TS_LIMIT} cannot be streamed as ms: "
                          "declare the ts unit, --ts-unit ns|us|ms|s)"] * 2),
}


def lines_of(events: list) -> list[str]:
    return [e if isinstance(e, str) else json.dumps(e) for e in events]


def write_files(folder: Path, chunks: list[list]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    start = len(list(folder.glob("part-*")))
    for k, chunk in enumerate(chunks, start):
        path = folder / f"part-{k:02d}.jsonl"
        path.write_text("".join(line + "\n" for line in lines_of(chunk)))
        os.utime(path, (1_000_000 + k, 1_000_000 + k))  # the file source reads in modification-time order


def valid(events: list) -> list[dict]:
    return [e for e in events if isinstance(e, dict) and abs(e["ts"]) < 10**15]


def expected(events: list) -> list[dict]:
    rows = [dict(e, type=str(e["type"])) for e in valid(events)]
    return match_rows(sparkcep.compile(QUERY).query, rows, COLUMNS)


def read_dir(folder: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(folder.glob("part-*")) for line in f.read_text().splitlines()]


def run(argv: list[str], capsys) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err and "\tat " not in err, err
    assert code == 0, err
    return err


#: A batch took these two before (a numeric type among text ones is inferred as text; a batch has no event-time
#: column): they are in the stream test, where they failed.
BATCH_CASES = [name for name in CASES if name not in ("numeric-type-value", "epoch-ns-ts")]


@pytest.mark.parametrize("name", BATCH_CASES)
def test_batch_survives_each_bad_dataset(spark, tmp_path, capsys, name):
    extra, batch_reasons, _ = CASES[name]
    events = GOOD + extra
    write_files(tmp_path / "in", [events])
    out = tmp_path / "out"
    run(["run", "-e", QUERY, "--input", str(tmp_path / "in"), "--output", str(out)], capsys)
    got = [json.loads(line) for f in sorted(out.glob("part-*")) for line in f.read_text().splitlines()]
    assert canonical(got) == canonical(expected(events))
    assert any(r["at"] == 1 and r["bt"] == 2 for r in got)  # 9 < 10 as numbers: x was not retyped as text
    dead = read_dir(out / "_dead_letters") if (out / "_dead_letters").is_dir() else []
    assert sorted(d["reason"] for d in dead) == sorted(batch_reasons)


def test_numeric_type_column_is_text(spark, tmp_path, capsys):
    """Every type a number: the query's type filter compares text, no cast error; nothing matches."""
    write_files(tmp_path / "in", [[{"type": k % 3, "ts": k, "id": 0, "x": k} for k in range(6)]])
    err = run(["run", "-e", QUERY, "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")], capsys)
    assert not list((tmp_path / "out").glob("part-*.json")) or not read_dir(tmp_path / "out")
    assert "bad records" not in err


@pytest.mark.slow
def test_stream_with_every_bad_dataset_restarts_exactly_once(spark, tmp_path, capsys):
    """All the datasets in one stream, read one file per micro-batch and stopped half way; restarted on the same
    checkpoint with the rest: every result once, every bad record one dead letter."""
    chunks = [GOOD[:3], GOOD[3:]] + [CASES[name][0] for name in CASES] + [[TAIL]]
    inbox, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    argv = ["run", "-e", QUERY, "--input", str(inbox), "--stream", "--once", "--files-per-trigger", "1",
            "--lateness", "10",
            "--output", str(out), "--checkpoint", str(ck)]
    write_files(inbox, chunks[:4])
    run(argv, capsys)
    write_files(inbox, chunks[4:])
    run(argv, capsys)
    events = [e for chunk in chunks for e in chunk]
    assert canonical(read_dir(out)) == canonical(expected(events))
    reasons = sorted(r for name in CASES for r in CASES[name][2])
    assert sorted(d["reason"] for d in read_dir(out / "_dead_letters")) == reasons


ISO = [{"type": "A", "ts": "2026-01-01T00:00:00.000001Z", "id": 1, "x": 1},
       {"type": "B", "ts": "2026-01-01T00:00:01.500002Z", "id": 1, "x": 2},
       {"type": "A", "ts": "0001-01-01T00:00:00Z", "id": 2, "x": 1},
       {"type": "B", "ts": "0001-01-01T00:00:02Z", "id": 2, "x": 2},
       {"type": "A", "ts": "9999-12-31T23:59:50Z", "id": 3, "x": 1},
       {"type": "B", "ts": "9999-12-31T23:59:55Z", "id": 3, "x": 2}]
ISO_QUERY = "PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 10 seconds RETURN a.id AS id, b.x AS bx"


def test_extreme_and_sub_millisecond_timestamps_in_a_batch(spark, tmp_path, capsys):
    write_files(tmp_path / "in", [ISO])
    out = tmp_path / "out"
    run(["run", "-e", ISO_QUERY, "--input", str(tmp_path / "in"), "--output", str(out)], capsys)
    assert canonical(read_dir(out)) == canonical([{"id": 1, "bx": 2}, {"id": 2, "bx": 2}, {"id": 3, "bx": 2}])


@pytest.mark.slow
def test_extreme_timestamps_in_a_stream_are_dead_letters(spark, tmp_path, capsys):
    tail = {"type": "B", "ts": "2027-01-01T00:00:00Z", "id": 9, "x": 0}
    write_files(tmp_path / "in", [ISO, [tail]])
    out = tmp_path / "out"
    run(["run", "-e", ISO_QUERY, "--input", str(tmp_path / "in"), "--stream", "--once", "--files-per-trigger", "1",
         "--output", str(out), "--checkpoint", str(tmp_path / "ck")], capsys)
    assert canonical(read_dir(out)) == canonical([{"id": 1, "bx": 2}])
    dead = read_dir(out / "_dead_letters")
    assert sorted(json.loads(d["record"])["id"] for d in dead) == [2, 2, 3, 3]
    assert {d["reason"] for d in dead} == {"ts out of range (a stream takes years 1678 to 2261)"}


@pytest.mark.parametrize("stream", [False, True], ids=["batch", "stream"])
def test_empty_input_directory_is_one_line(spark, tmp_path, capsys, stream):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "_SUCCESS").write_text("")
    argv = ["run", "-e", QUERY, "--input", str(tmp_path / "in"), "--checkpoint", str(tmp_path / "ck")]
    assert main(argv + (["--stream"] if stream else [])) == 2
    err = capsys.readouterr().err
    assert err.startswith("sparkcep: no input files in ") and err.count("\n") == 1, err


def test_odd_keys_with_a_query_that_returns_every_attribute(spark, tmp_path, capsys):
    """A match query without RETURN shows every attribute: keys no query could name (``it's``, ``b`q``,
    ``a.b``) are not attributes, so they are not read (and not shown); the rest are."""
    odd = {"it's": 1, "b`q": [2], "a.b": {"c": 3}, "ü": 4}
    write_files(tmp_path / "in", [[{**e, **odd} for e in GOOD]])
    out = tmp_path / "out"
    text = "PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 8"
    run(["run", "-e", text, "--input", str(tmp_path / "in"), "--output", str(out)], capsys)
    want = match_rows(sparkcep.compile(text).query, GOOD, COLUMNS)
    assert len(want) == 2 and canonical(read_dir(out)) == canonical(want)
