"""Fuzzed input records through ``python -m sparkcep.cli run``, batch and streaming (bounded, seeded).

Valid events mixed with malformed JSON, values of the wrong type (strings, arrays, objects, booleans, NaN and
overflowing literals), huge and negative numbers, numeric ts beyond a stream's event-time range, missing or
null type and ts, keys with quotes, backquotes, dots and unicode, byte-order marks, blank lines and an empty
file; CSV with ragged rows.  Every run must exit 0 with the oracle's results on the valid events, every bad
record must be one dead letter with its reason, and stderr must hold no Python traceback and no Java stack
frame.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

import sparkcep
from sparkcep.oracles.match import match_rows
from sparkcep.spark.results import canonical
from sparkcep.spark.validate import STREAM_TS_LIMIT

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
QUERY = "PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 8 RETURN a.ts AS at, b.ts AS bt, a.id AS id"
COLUMNS = ["type", "ts", "id", "x"]
TAIL = {"type": "B", "ts": 10**8, "id": 99, "x": 0}
ODD_KEYS = ["it's", "b`q", "a.b", "ü", "", " ", "x y", "\"q\"", "tags", "o"]
WRONG_X = ['"oops"', "[1, 2]", '{"a": 1}', "true", "NaN", "Infinity", "-Infinity", "1e400", '""']
JAVA_FRAME = re.compile(r"^\s+at [\w$.]+\(.*\)$", re.M)


def extra_attributes(rnd: random.Random) -> dict:
    values = [["a"], {"o": {"p": [1, None]}}, None, "it's", 1e300, -(2**70), True]
    return {rnd.choice(ODD_KEYS): rnd.choice(values) for _ in range(rnd.randrange(3))}


def bad_record(rnd: random.Random, ts: int) -> tuple[str, str, str]:
    """``(line, reason in a batch, reason in a stream)``."""
    kind = rnd.randrange(8)
    if kind == 0:
        line = json.dumps({"type": "A", "ts": ts, "id": 1, "x": 2})
        return line[:rnd.randrange(1, len(line) - 1)], "malformed record", "malformed record"
    if kind == 1:
        return rnd.choice(["[1, 2, 3]", '"just a string"', "42", "null", "{,}", "nope"]), *["malformed record"] * 2
    if kind == 2:
        line = f'{{"type": "A", "ts": {ts}, "id": 1, "x": {rnd.choice(WRONG_X)}}}'
        return line, *["wrong attribute type: x (not double)"] * 2
    if kind == 3:
        return json.dumps({"type": None, "ts": ts, "id": 1, "x": 1}), *["missing type"] * 2
    if kind == 4:
        return json.dumps({"ts": ts, "id": 1, "x": 1, **extra_attributes(rnd)}), *["missing type"] * 2
    if kind == 5:
        return json.dumps({"type": "B", "id": 1, "x": 1}), *["missing ts"] * 2
    if kind == 6:
        line = json.dumps({"type": "B", "ts": "soon", "id": 1, "x": 1})
        return line, *["wrong attribute type: ts (not a number)"] * 2
    # a ts in epoch nanoseconds: fine in a batch, beyond a stream's event-time column without a declared unit
    big = rnd.choice([1, -1]) * rnd.randrange(STREAM_TS_LIMIT + 1, 2**62)
    line = json.dumps({"type": "A", "ts": big, "id": 77, "x": 1})
    return line, "", (f"ts out of range (|ts| above {STREAM_TS_LIMIT} cannot be streamed as ms: declare the ts "
                      "unit, --ts-unit ns|us|ms|s)")


def dataset(seed: int, n: int = 240, bad: int = 80) -> tuple[list[list[str]], list[dict], list[tuple[str, str, str]]]:
    """``(files as lines, valid events, bad records)``."""
    rnd = random.Random(seed)
    stamps = rnd.sample(range(1, 500), n)
    valid = [{"type": rnd.choice("AABBC"), "ts": t, "id": rnd.randrange(3), "x": rnd.randrange(-20, 20)}
             for t in sorted(stamps)]
    # huge but finite numbers are values (x is read as a double: one is not a whole 64-bit number)
    valid += [{"type": "A", "ts": 501, "id": 5, "x": 1e20}, {"type": "B", "ts": 502, "id": 5, "x": -(2**70)}]
    bads = [bad_record(rnd, rnd.randrange(1, 500)) for _ in range(bad)]
    lines = [(json.dumps({**e, **extra_attributes(rnd)}), True) for e in valid] + [(b[0], False) for b in bads]
    rnd.shuffle(lines)
    files: list[list[str]] = [[], [], [], []]
    for k, (line, _) in enumerate(lines):
        files[k % 3].append(line)
    files[0][0] = "\ufeff" + files[0][0]  # a byte-order mark, a blank line, and an empty file (files[3])
    files[1].insert(5, "")
    return files, valid, bads


def write(folder: Path, files: list[list[str]]) -> None:
    folder.mkdir(parents=True)
    for k, lines in enumerate([*files, [json.dumps(TAIL)]]):
        path = folder / f"part-{k:02d}.jsonl"
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        os.utime(path, (1_000_000 + k, 1_000_000 + k))


def cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    return subprocess.run([sys.executable, "-m", "sparkcep.cli", "run", *args, "--master", "local[2]"], env=env,
                          capture_output=True, text=True, timeout=600)


def read_dir(folder: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(folder.glob("part-*")) for line in f.read_text().splitlines()]


def check(proc: subprocess.CompletedProcess, out: Path, valid: list[dict], bads: list, stream: bool) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert not JAVA_FRAME.search(proc.stderr), proc.stderr[-3000:]
    events = [e for e in valid if not stream or abs(e["ts"]) <= STREAM_TS_LIMIT]
    if not stream:
        events += [json.loads(line) for line, reason, _ in bads if reason == ""]
    expected = match_rows(sparkcep.compile(QUERY).query, [*events, TAIL], COLUMNS)
    assert len(expected) >= 10
    assert canonical(read_dir(out)) == canonical(expected)
    want = sorted((line, reason) for line, batch, streamed in bads
                  for reason in [streamed if stream else batch] if reason)
    got = sorted((d["record"], d["reason"]) for d in read_dir(out / "_dead_letters"))
    assert got == want


@pytest.mark.parametrize("stream", [False, True], ids=["batch", "stream"])
def test_fuzzed_records_never_kill_the_run(tmp_path, stream):
    files, valid, bads = dataset(seed=20 + stream)
    write(tmp_path / "in", files)
    out = tmp_path / "out"
    args = ["-e", QUERY, "--input", str(tmp_path / "in"), "--output", str(out)]
    if stream:
        args += ["--stream", "--once", "--files-per-trigger", "2", "--lateness", "1000",
                 "--checkpoint", str(tmp_path / "ck")]
    check(cli(*args), out, valid, bads, stream)


def test_fuzzed_csv_rows(spark, tmp_path, capsys):
    """CSV: ragged rows, wrong types, empty type or ts; the rest gives the oracle's results."""
    from sparkcep.cli import main

    rnd = random.Random(5)
    valid = [{"type": rnd.choice("AABC"), "ts": t, "id": rnd.randrange(2), "x": rnd.randrange(10)} for t in range(80)]
    rows, want = [], []
    for e in valid:
        rows.append(f"{e['type']},{e['ts']},{e['id']},{e['x']}")
        k = rnd.randrange(6)
        if k == 0:
            rows.append(rnd.choice(["A,1", "B,2,0,1,9", "C"]))
            want.append("malformed record (not a row of the header's width)")
        elif k == 1:
            rows.append(f"A,{e['ts']},0,{rnd.choice(['x', '1.5.2', 'true'])}")
            want.append("wrong attribute type: x (not bigint)")
        elif k == 2:
            rows.append(f",{e['ts']},0,1")
            want.append("missing type")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "e.csv").write_text("type,ts,id,x\n" + "\n".join(rows) + "\n")
    out = tmp_path / "out"
    assert main(["run", "-e", QUERY, "--input", str(tmp_path / "in"), "--format", "csv", "--output", str(out)]) == 0
    assert "Traceback" not in capsys.readouterr().err
    expected = match_rows(sparkcep.compile(QUERY).query, valid, COLUMNS)
    assert len(expected) >= 10 and canonical(read_dir(out)) == canonical(expected)
    assert sorted(d["reason"] for d in read_dir(out / "_dead_letters")) == sorted(want)
