"""A stream of numeric ts in epoch nanoseconds or microseconds (``--ts-unit ns|us``): its event time is scaled by
the unit, so that ts ~1.7e18 neither overflows nor becomes a dead letter, and the watermark, the timeouts of a
negated end and of a trend window and the operator's late check stay exact in ts units.  Real files through
``sparkcep run``: the stream, stopped half way and restarted from its checkpoint, gives the batch's and the
oracle's results exactly once, and an event behind the watermark is routed to ``_late``.  Without a declared
unit such ts are dead letters whose reason says to declare it.
"""

from __future__ import annotations

import json
import random
from fractions import Fraction

import pytest
from test_bad_records import read_dir, write_files

import sparkcep
from sparkcep.cli import main
from sparkcep.oracles.match import is_trend_aggregate, match_rows, trend_aggregates
from sparkcep.runtime_udfs.event_time import EventTimeScale
from sparkcep.spark.results import canonical

pytestmark = pytest.mark.spark

COLUMNS = ["type", "ts", "id", "x"]
#: A negated end (held until the watermark passes b.ts + 2 s) and a trend window (closed by the watermark).
NEGATED = ("PATTERN SEQ(A a, B b, !(C c)) WHERE [id] AND a.x <= b.x WITHIN 2 seconds "
           "RETURN a.ts AS at, b.ts AS bt, a.id AS id")
TREND = "RETURN id, COUNT(*) AS n PATTERN SEQ(A+, B) WHERE [id] GROUP-BY id WITHIN 4 seconds SLIDE 2 seconds"
UNIT_NS = {"ns": 1, "us": 1000}
EPOCH_NS = 1_764_000_000_000_000_000


def events_in(unit: str, n: int = 48, seed: int = 5) -> list[list[dict]]:
    """Six files of events in ``unit`` since the epoch: increasing across files, steps of a few hundred ms and of
    single units (finer than Spark's microsecond for ns), ties inside a file."""
    rnd = random.Random(seed)
    per_unit = UNIT_NS[unit]
    t, out = EPOCH_NS // per_unit, []
    for k in range(n):
        step = rnd.choice([0, 1, 7, 999, 300_000_001 // per_unit, 700_000_000 // per_unit])
        t += step or int(k % 8 == 0)  # a file never starts at its predecessor's last ts (that is the watermark)
        out.append({"type": rnd.choice("AABC"), "ts": t, "id": rnd.randrange(2), "x": rnd.randrange(5)})
    return [out[k:k + 8] for k in range(0, n, 8)]


def oracle(text: str, events: list[dict], unit: str) -> list[dict]:
    q = sparkcep.compile(text, ts_unit=unit).query
    ts_unit_ms = Fraction(UNIT_NS[unit], 10**6)
    if is_trend_aggregate(q):
        return [{k: int(v) for k, v in r.items()} for r in trend_aggregates(q, events, ts_unit_ms=ts_unit_ms)]
    return match_rows(q, events, COLUMNS, ts_unit_ms=ts_unit_ms)


def run(argv: list[str], capsys) -> None:
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err and code == 0, err


def plain(rows: list[dict]) -> list[dict]:
    """Rows as the oracle gives them: exact counts (no overflow flag), whole numbers as ints."""
    assert all(r.pop("aggregate_overflow", False) is False for r in rows)
    return [{k: int(v) if isinstance(v, float) and v == int(v) else v for k, v in r.items()} for r in rows]


@pytest.mark.slow
@pytest.mark.parametrize(("unit", "text"), [("ns", NEGATED), ("ns", TREND), ("us", NEGATED)])
def test_stream_in_epoch_units_equals_batch_and_oracle(tmp_path, capsys, unit, text):
    files = events_in(unit)
    events = [e for f in files for e in f]
    late = {"type": "A", "ts": events[0]["ts"], "id": 0, "x": 0}  # long behind the watermark when it comes
    tail = {"type": "B", "ts": events[-1]["ts"] + 100 * 10**9 // UNIT_NS[unit], "id": 9, "x": 0}
    chunks = [*files[:3], [late], *files[3:], [tail]]
    expected = oracle(text, [*events, tail], unit)
    assert expected and any(r.get("n", 0) > 1 or "bt" in r for r in expected)

    write_files(tmp_path / "all", [[*events, tail]])
    run(["run", "-e", text, "--ts-unit", unit, "--input", str(tmp_path / "all"), "--output", str(tmp_path / "b")],
        capsys)
    assert canonical(plain(read_dir(tmp_path / "b"))) == canonical(expected)

    inbox, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    argv = ["run", "-e", text, "--ts-unit", unit, "--input", str(inbox), "--stream", "--once",
            "--files-per-trigger", "1",
            "--output", str(out), "--checkpoint", str(ck)]
    write_files(inbox, chunks[:4])
    run(argv, capsys)
    write_files(inbox, chunks[4:])
    run(argv, capsys)
    assert canonical(plain(read_dir(out))) == canonical(expected)  # exactly once across the restart
    routed = read_dir(out / "_late")
    assert [json.loads(r["record"])["ts"] for r in routed] == [late["ts"]]
    assert not (out / "_dead_letters").is_dir() or not read_dir(out / "_dead_letters")


def test_undeclared_epoch_ns_is_a_dead_letter_naming_the_unit(tmp_path, capsys):
    files = events_in("ns", n=8)
    inbox, out = tmp_path / "in", tmp_path / "out"
    write_files(inbox, files)
    run(["run", "-e", NEGATED.replace("2 seconds", "2"), "--input", str(inbox), "--stream", "--once",
         "--output", str(out),
         "--checkpoint", str(tmp_path / "ck")], capsys)
    reasons = {d["reason"] for d in read_dir(out / "_dead_letters")}
    assert len(read_dir(out / "_dead_letters")) == 8
    assert reasons == {f"ts out of range (|ts| above {EventTimeScale.of(None).limit} cannot be streamed as ms: "
                       "declare the ts unit, --ts-unit ns|us|ms|s)"}


def test_event_time_scale_rounds_towards_never_late():
    """Pure: the watermark read back in ts units is at most the true one; a timeout fires no earlier than its time."""
    rnd = random.Random(1)
    for unit in ("ns", "us", "ms", "s", "min"):
        scale = EventTimeScale.of(unit)
        for _ in range(200):
            raw = 10**12 + rnd.randrange(-10**12, 10**13)
            wm = scale.watermark_ts(raw)
            exact = Fraction((raw - 10**12) * 10**6, scale.ns)
            assert wm <= exact and exact - Fraction(wm) < max(1, abs(exact) / 10**15)
            due = rnd.randrange(-10**18, 10**18) // max(1, scale.ns // 1000)
            ms = scale.timeout_ms(due)
            assert scale.watermark_ts(ms) >= due and scale.watermark_ts(ms - 1) < due


@pytest.mark.slow
def test_generated_job_streams_epoch_ns(tmp_path):
    """The job ``sparkcep compile --ts-unit ns`` writes (TS_UNIT baked in), as a subprocess, streaming."""
    import subprocess
    import sys

    from test_recovery import job_env

    files = events_in("ns")
    events = [e for f in files for e in f]
    tail = {"type": "B", "ts": events[-1]["ts"] + 100 * 10**9, "id": 9, "x": 0}
    write_files(tmp_path / "in", [*files, [tail]])
    (tmp_path / "q.cep").write_text(NEGATED)
    job, out = tmp_path / "job.py", tmp_path / "out"
    for cmd in (["-m", "sparkcep.cli", "compile", str(tmp_path / "q.cep"), "--ts-unit", "ns", "-o", str(job)],
                [str(job), "--input", str(tmp_path / "in"), "--output", str(out), "--stream", "--once",
                 "--checkpoint", str(tmp_path / "ck"), "--files-per-trigger", "2", "--shuffle-partitions", "2"]):
        done = subprocess.run([sys.executable, *cmd], env=job_env(), capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
    assert canonical(plain(read_dir(out))) == canonical(oracle(NEGATED, [*events, tail], "ns"))
    assert not (out / "_dead_letters").is_dir() or not read_dir(out / "_dead_letters")
