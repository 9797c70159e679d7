"""The generated job for a workload, for load shedding and for collapsed output, run as its own process.

``sparkcep compile WORKLOAD.cep -o job.py`` writes one job running the workload's Sharon sharing plan (shared
operators and queries that run alone) into one result with a ``query`` column: batch and ``--stream --once``
give each query's oracle rows, and the same rows as the in-process ``CompiledWorkload.apply``
(``sparkcep run WORKLOAD``).  A query with ``WITH SHEDDING LATENCY`` gets the gSPICE stage: under a tight bound
it drops events, counts them, and its results are exactly the matches of the kept events.  ``--collapsed``
gives the SASE++ collapsed rows of the engine.
"""

from __future__ import annotations

import ast
import json
import os
import random
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from strategies import event_streams
from test_recovery import job_env  # the environment a job runs in: this checkout importable, local Spark

import sparkcep
from sparkcep.oracles.match import is_trend_aggregate, match_rows, trend_aggregates
from sparkcep.spark.results import canonical

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TRAFFIC = (Path(__file__).parent / "fixtures" / "workloads" / "sharon_traffic.cep").read_text()
#: The traffic workload on numeric ts (windows of 10, sliding by 2) plus a match query outside the shared
#: executor's scope, which runs alone in the same job.
WORKLOAD = (TRAFFIC.replace("10 minutes", "10").replace("1 minute", "2").rstrip() + ";\n"
            "m: PATTERN SEQ(OakSt a, MainSt b) WHERE [vehicle] AND a.speed < b.speed WITHIN 3\n"
            "   RETURN a.ts AS at, b.ts AS bt, a.vehicle AS vehicle, b.speed AS speed\n")
DDL = "type STRING, ts BIGINT, vehicle BIGINT, speed BIGINT"
COLUMNS = ["type", "ts", "vehicle", "speed"]
STREETS = ["ElmSt", "ParkAve", "OakSt", "MainSt", "WestSt", "StateSt"]
#: Last, far ahead: the watermark passes every window end (OakSt: every operator of the workload reads it).
TAIL = {"type": "OakSt", "ts": 100_000, "vehicle": 99, "speed": 0}


def route_events(n: int = 160, seed: int = 3) -> list[dict]:
    rnd = random.Random(seed)
    return [{"type": rnd.choice(STREETS), "ts": i // 2, "vehicle": rnd.randint(1, 3), "speed": rnd.randrange(10)}
            for i in range(n)]


def write_files(folder: Path, chunks: list[list[dict]]) -> None:
    folder.mkdir(parents=True)
    for k, chunk in enumerate(chunks):
        path = folder / f"part-{k:02d}.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in chunk))
        os.utime(path, (1_000_000 + k, 1_000_000 + k))  # the file source reads in modification-time order


def run(*cmd: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, *cmd], env=job_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def compile_job(tmp_path: Path, text: str, *options: str) -> Path:
    source, job = tmp_path / "query.cep", tmp_path / "job.py"
    source.write_text(text)
    run("-m", "sparkcep.cli", "compile", str(source), "-o", str(job), *options)
    return job


def run_job(job: Path, inbox: Path, out: Path, *extra: str, stream: bool = False) -> subprocess.CompletedProcess:
    args = ["--input", str(inbox), "--output", str(out), "--schema", DDL, "--shuffle-partitions", "2"]
    if stream:
        args += ["--stream", "--once", "--checkpoint", str(out) + "-ck", "--files-per-trigger", "1"]
    return run(str(job), *args, *extra)


def read_output(out: Path) -> list[dict]:
    """The result rows as a plain reader reads them (every ``part-*`` file), exact counts as ints."""
    rows = [json.loads(line) for f in sorted(out.glob("part-*")) for line in f.read_text().splitlines()
            if line.strip()]
    for r in rows:
        if "aggregate_overflow" in r:
            assert r.pop("aggregate_overflow") is False
    return rows


def oracle_rows(text: str, events: list[dict], columns=COLUMNS) -> list[dict]:
    """Each query's oracle rows (trend aggregates or matches), with its name in ``query``."""
    out = []
    for q in sparkcep.compile_workload(text):
        if is_trend_aggregate(q.query):
            rows = [{k: int(v) if isinstance(v, Decimal) else v for k, v in r.items()}
                    for r in trend_aggregates(q.query, events)]
        else:
            rows = match_rows(q.query, events, columns)
        out += [{"query": q.name, **r} for r in rows]
    return out


SMALL = ("a: RETURN COUNT(*) PATTERN SEQ(A, B, C) WHERE [id] WITHIN 6 SLIDE 3;\n"
         "b: RETURN COUNT(*) PATTERN SEQ(A, B, D) WHERE [id] WITHIN 6 SLIDE 3;\n"
         "c: RETURN COUNT(*) PATTERN SEQ(B, D) WHERE [id] WITHIN 6 SLIDE 3;\n"
         "m: PATTERN SEQ(A a, D d) WHERE [id] AND a.x <= d.x WITHIN 6 RETURN a.ts AS at, d.ts AS dt, a.id AS id")


@settings(max_examples=8, deadline=None)
@given(events=event_streams("ABCD", min_size=6, max_size=16, max_gap=2))
def test_apply_workload_equals_the_oracle(spark, events):
    """The workload job's operator (one Spark operator for the shared segment (B, D) of b and c, the rest of
    a and b, and the match query m alone) on random small streams: each query's oracle rows."""
    from sparkcep.spark.workload import apply_workload

    data, _ = sparkcep.compile_shared_workload(SMALL, budget=None).job_plan()
    assert any(len(s["queries"]) > 1 for s in data["shared"]) and [a["name"] for a in data["alone"]] == ["m"]
    df = spark.createDataFrame(events, "type STRING, ts BIGINT, x BIGINT, id BIGINT")
    got = [{k: int(v) if isinstance(v, Decimal) else v for k, v in r.asDict().items()
            if v is not None and k != "aggregate_overflow"} for r in apply_workload(df, data).collect()]
    assert canonical(got) == canonical(oracle_rows(SMALL, events, ["type", "ts", "x", "id"]))


def test_workload_job_batch_and_stream_equal_the_oracle_and_the_api(spark, tmp_path):
    events = route_events()
    expected = oracle_rows(WORKLOAD, events + [TAIL])
    assert {r["query"] for r in expected} == {"q1", "q2", "q3", "q4", "q5", "q6", "q7", "m"}
    job = compile_job(tmp_path, WORKLOAD)
    source = job.read_text()
    # one job: the sharing plan baked in, shared segments and the query that runs alone
    plan = json.loads(next(ast.literal_eval(n.value) for n in ast.parse(source).body  # the WORKLOAD literal
                           if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "WORKLOAD"))
    assert [a["name"] for a in plan["alone"]] == ["m"] and len(plan["shared"]) == 1
    assert len(plan["shared"][0]["segments"]) < 7  # some segments shared by several queries
    assert "chosen plan:" in source and "applyInPandasWithState" not in source

    inbox = tmp_path / "events"
    write_files(inbox, [events[:60], events[60:120], events[120:], [TAIL]])
    run_job(job, inbox, tmp_path / "batch")
    batch = read_output(tmp_path / "batch")
    assert canonical(batch) == canonical(expected)

    streamed = run_job(job, inbox, tmp_path / "stream", stream=True)
    assert canonical(read_output(tmp_path / "stream")) == canonical(expected)
    progress = [line for line in streamed.stderr.splitlines() if line.startswith("batch ")]
    assert progress and "0 dead letters, 0 late" in progress[-1], streamed.stderr[-2000:]

    # the same layout and rows as the workload applied in-process (what `sparkcep run WORKLOAD` runs)
    df = spark.createDataFrame(events + [TAIL], DDL)
    result = sparkcep.compile_shared_workload(WORKLOAD).apply(df)
    assert result.columns[0] == "query"
    api_rows = [{k: int(v) if isinstance(v, Decimal) else v for k, v in r.asDict().items()
                 if v is not None and k != "aggregate_overflow"} for r in result.collect()]
    assert canonical(api_rows) == canonical(batch)


def test_workload_job_routes_late_events_and_dead_letters(tmp_path):
    """Streaming: an event behind the watermark goes to _late (shared and alone operators), a malformed line
    to _dead_letters; the results are the oracle's on the on-time events."""
    events = route_events(80, seed=5)
    late = [{"type": "MainSt", "ts": 1, "vehicle": 1, "speed": 9}, {"type": "ElmSt", "ts": 2, "vehicle": 2, "speed": 1}]
    job = compile_job(tmp_path, WORKLOAD)
    inbox = tmp_path / "events"
    write_files(inbox, [events, late, [TAIL]])
    with open(inbox / "part-01.jsonl", "a") as f:
        f.write("{not json\n")
    run_job(job, inbox, tmp_path / "out", stream=True)
    assert canonical(read_output(tmp_path / "out")) == canonical(oracle_rows(WORKLOAD, events + [TAIL]))
    late_rows = [json.loads(line) for f in (tmp_path / "out" / "_late").glob("part-*")
                 for line in f.read_text().splitlines()]
    # MainSt is read by the shared operator and by m: late in both; ElmSt only by the shared operator
    assert sorted(json.loads(r["record"])["type"] for r in late_rows) == ["ElmSt", "MainSt", "MainSt"]
    dead = [json.loads(line) for f in (tmp_path / "out" / "_dead_letters").glob("part-*")
            for line in f.read_text().splitlines()]
    assert [d["reason"] for d in dead] == ["malformed record"]


SHED_QUERY = ("WITH SHEDDING LATENCY 10 ms\n"
              "shed: PATTERN SEQ(A a, B b, C c) WHERE a.v < b.v AND a.v + b.v < c.v WITHIN 40\n"
              "RETURN a.ts AS a_ts, b.ts AS b_ts, c.ts AS c_ts")
SHED_DDL = "type STRING, ts BIGINT, v BIGINT"


def abc_events(n: int, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    return [{"type": rnd.choices("ABC", weights=[0.6, 0.25, 0.15])[0], "ts": i, "v": rnd.randint(1, 10)}
            for i in range(n)]


def test_job_with_shedding_drops_counts_and_keeps_exact_matches(tmp_path):
    """WITH SHEDDING LATENCY 10 ms: the streaming job sheds from its second micro-batch on, reports the drops
    per type, writes every dropped event to --dropped-output, and its results are exactly the oracle's matches
    of the kept events."""
    events = abc_events(1200, 3)
    job = compile_job(tmp_path, SHED_QUERY)
    source = job.read_text()
    assert "SHEDDING_LATENCY = 0.01" in source and "shedding_stage(" in source
    inbox, training, dropped = tmp_path / "events", tmp_path / "training", tmp_path / "dropped"
    write_files(inbox, [events[k:k + 200] for k in range(0, len(events), 200)])
    write_files(training, [abc_events(800, 4)])
    out = tmp_path / "out"
    done = run(str(job), "--input", str(inbox), "--output", str(out), "--schema", SHED_DDL, "--stream", "--once",
               "--checkpoint", str(tmp_path / "ck"), "--files-per-trigger", "1", "--shuffle-partitions", "2",
               "--shedding-training", str(training), "--dropped-output", str(dropped))
    report = re.search(r"load shedding dropped (\d+) of (\d+) events \(.*per type: ([^)]*)\)", done.stderr)
    assert report, done.stderr[-2000:]
    total, offered = int(report.group(1)), int(report.group(2))
    assert offered == len(events) and total > 100
    per_type = dict(item.split("=") for item in report.group(3).split(", "))
    assert set(per_type) <= {"A", "B", "C"} and sum(int(n) for n in per_type.values()) == total
    written = [json.loads(line) for f in dropped.glob("*.json") for line in f.read_text().splitlines()]
    assert len(written) == total  # every drop counted and written (no task retries in a local run)
    gone = {w["ts"] for w in written}
    kept = [e for e in events if e["ts"] not in gone]
    q = sparkcep.compile(SHED_QUERY)
    expected = match_rows(q.query, kept, ["type", "ts", "v"])
    assert len(match_rows(q.query, events, ["type", "ts", "v"])) > len(expected) > 0
    assert canonical(read_output(out)) == canonical(expected)


def test_collapsed_job_gives_the_collapsed_rows(spark, tmp_path):
    """`sparkcep compile --collapsed`: the job's rows are those of `compile(..., collapsed=True).apply`."""
    text = "PATTERN SEQ(A a, B+ b[], C c) WHERE [id] WITHIN 10 RETURN a.ts AS at, c.ts AS ct"
    rnd = random.Random(5)
    events = [{"type": rnd.choice("ABBC"), "ts": i, "id": rnd.randrange(2)} for i in range(60)]
    job = compile_job(tmp_path, text, "--collapsed")
    inbox = tmp_path / "events"
    write_files(inbox, [events])
    run(str(job), "--input", str(inbox), "--output", str(tmp_path / "out"), "--schema",
        "type STRING, ts BIGINT, id BIGINT", "--shuffle-partitions", "2")
    df = spark.createDataFrame(events, "type STRING, ts BIGINT, id BIGINT")
    expected = [r.asDict(recursive=True) for r in sparkcep.compile(text, collapsed=True).apply(df).collect()]
    assert expected and any(len(r["b"]) > 1 for r in expected)  # the Kleene candidates as one array column

    def flat(rows):
        return canonical([{k: json.dumps(v, sort_keys=True) if isinstance(v, list) else v for k, v in r.items()}
                          for r in rows])

    assert flat(read_output(tmp_path / "out")) == flat(expected)
