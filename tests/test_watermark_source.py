"""Event time comes from the source: every event advances the streaming watermark, not only the query's.

The watermark sits on the events as read, before the query's Spark SQL filter (and the shedding stage), so a
match held for the watermark (a negated end, a trend window) is emitted once *any* later event shows that
event time has passed, not only the next event of the query's types.  Spark pushes a filter below an
event-time watermark when it can; :func:`~sparkcep.spark.adapters.watermarked` stops that, and
these tests fail if it ever happens again (the matches below wait forever when only the query's events move
event time).

All on Spark, over real files with a real checkpoint: ``sparkcep run --stream`` (one query and a workload,
late events routed to the side channel), and ``CompiledQuery.apply`` restarted from its checkpoint.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest

import sparkcep
from sparkcep.cli import main
from sparkcep.oracles.match import match_rows
from sparkcep.spark.results import canonical

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: a negated end: a match of `a` is only known once event time passes a.ts + 10 (no B of its id until then)
NEGATED_END = "PATTERN SEQ(A a, !(B b)) WHERE [id] WITHIN 10 RETURN a.ts AS at, a.id AS id"
LATENESS = 2


def write_files(folder: Path, files: list[list[dict]], start: int = 0) -> None:
    """One JSON-lines file per micro-batch (``--files-per-trigger 1`` takes them in modification-time order)."""
    folder.mkdir(exist_ok=True)
    now = time.time()
    for k, events in enumerate(files, start=start):
        path = folder / f"events-{k:03d}.json"
        path.write_text("".join(json.dumps(e) + "\n" for e in events))
        os.utime(path, (now - 1000 + k, now - 1000 + k))


def json_rows(folder: Path) -> list[dict]:
    """The rows of every JSON-lines part file in ``folder`` (not its hidden side directories)."""
    if not folder.is_dir():
        return []
    return [json.loads(line) for f in sorted(folder.glob("part-*")) for line in f.read_text().splitlines()
            if line.strip()]


def batches_with_rows(folder: Path) -> set[int]:
    """The micro-batches that wrote rows into ``folder`` (the sink names files ``part-b<batch>-<n>``)."""
    return {int(f.name[len("part-b"):].split("-")[0]) for f in folder.glob("part-b*") if f.stat().st_size}


def run_stream(tmp_path: Path, text: str, files: list[list[dict]]) -> Path:
    """``sparkcep run --stream`` of ``text`` over ``files`` (one micro-batch each); returns the output folder."""
    (tmp_path / "q.cep").write_text(text)
    write_files(tmp_path / "in", files)
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "q.cep"), "--input", str(tmp_path / "in"), "--stream", "--once",
                 "--files-per-trigger", "1", "--lateness", str(LATENESS), "--output", str(out),
                 "--checkpoint", str(tmp_path / "ck"), "--schema", "type STRING, ts BIGINT, id BIGINT"]) == 0
    return out


#: the query's events first; then micro-batches of other types only, which alone move event time past
#: a.ts + 10 + lateness; then a late A (ts 7 is behind that watermark) and a late C next to a far C
FILES = [
    [{"type": "A", "ts": 0, "id": 1}, {"type": "C", "ts": 1, "id": 1}, {"type": "A", "ts": 3, "id": 2},
     {"type": "B", "ts": 8, "id": 2}],
    [{"type": "C", "ts": 20, "id": 5}],
    [{"type": "C", "ts": 30, "id": 5}],
    [{"type": "A", "ts": 7, "id": 3}, {"type": "C", "ts": 6, "id": 5}, {"type": "C", "ts": 60, "id": 5}],
]


def test_a_negated_end_match_is_emitted_by_irrelevant_events(spark, tmp_path):
    """Only C events follow the last A and B: they must carry event time past 0 + 10 + lateness, so a@0
    comes out (a@3 is blocked by b@8).  The late A@7 is routed to the side channel with its record; the
    late C@6 is of no use to the query and is dropped by the filter, as before."""
    out = run_stream(tmp_path, NEGATED_END, FILES)
    on_time = [e for f in FILES[:3] for e in f]
    expected = match_rows(sparkcep.compile(NEGATED_END).query, on_time)
    assert canonical(expected) == canonical([{"at": 0, "id": 1}])
    assert canonical(json_rows(out)) == canonical(expected)
    assert 0 not in batches_with_rows(out)  # held for the watermark, which only the C batches move
    late = json_rows(out / "_late")
    assert [json.loads(r["record"]) for r in late] == [{"type": "A", "ts": 7, "id": 3}]


def test_a_workload_takes_event_time_from_every_event(spark, tmp_path):
    """The same through a workload (one stateful operator for all its queries): the negated-end match (a query
    that runs alone) and the trend window [0, 10) of ``v`` (in a Sharon shared operator with ``t`` and ``u``)
    both wait for the watermark, which only the C batches move."""
    from sparkcep.api import compile_shared_workload

    text = (f"n: {NEGATED_END};\n"
            "t: RETURN id, COUNT(*) AS n PATTERN SEQ(A, B, D) WHERE [id] GROUP-BY id WITHIN 10;\n"
            "u: RETURN id, COUNT(*) AS n PATTERN SEQ(A, B, E) WHERE [id] GROUP-BY id WITHIN 10;\n"
            "v: RETURN id, COUNT(*) AS n PATTERN SEQ(A, B) WHERE [id] GROUP-BY id WITHIN 10")
    plan = compile_shared_workload(text)
    assert [q.name for q in plan.alone()] == ["n"] and len(plan.specs()) == 1  # n alone, t, u, v shared
    out = run_stream(tmp_path, text, FILES)
    rows = json_rows(out)
    matches = [{"at": r["at"], "id": r["id"]} for r in rows if r["query"] == "n"]
    windows = [(r["window_start"], r["window_end"], r["id"], int(r["n"])) for r in rows
               if r["query"] != "n" and int(r["n"])]
    assert canonical(matches) == canonical([{"at": 0, "id": 1}])
    assert windows == [(0, 10, 2, 1)] and {r["query"] for r in rows if r["query"] != "n" and int(r["n"])} == {"v"}
    assert 0 not in batches_with_rows(out)
    late = json_rows(out / "_late")
    # read by n and by the shared operator: late in each
    assert [json.loads(r["record"]) for r in late] == [{"type": "A", "ts": 7, "id": 3}] * 2


def test_apply_resumes_from_its_checkpoint_and_irrelevant_events_flush_it(spark, tmp_path):
    """``CompiledQuery.apply`` on timestamp ts, a random stream mostly of other types, in two runs over one
    checkpoint: the first ends with matches held in the state, the second brings only other types.  Every
    match of the oracle comes out once: none lost at the restart, none repeated."""
    from sparkcep.spark.io import read_events

    text = "PATTERN SEQ(A a, !(B b)) WHERE [id] WITHIN 2 seconds RETURN a.ts AS at, a.id AS id"
    q = sparkcep.compile(text, lateness=500)
    epoch = 1_700_000_000_000
    rnd = random.Random(7)
    events = [{"type": rnd.choice("AABCCCCCCCCCCCCC"), "ts": epoch + 137 * k, "id": rnd.randint(0, 3)}
              for k in range(300)]
    relevant_end = max(e["ts"] for e in events if e["type"] in "AB")
    tail = [{"type": "C", "ts": relevant_end + 700 * k, "id": 9} for k in range(1, 6)]
    as_files = [[{**e, "ts": iso(e["ts"])} for e in chunk] for chunk in (events[:150], events[150:], tail)]
    inbox, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    schema = "type STRING, ts TIMESTAMP, id BIGINT"
    for round_, files in enumerate((as_files[:2], as_files[2:])):
        write_files(inbox, files, start=2 * round_)
        df = read_events(spark, str(inbox), "json", "ts", stream=True, schema=schema)
        result = q.apply(df)
        (result.writeStream.format("json").option("path", str(out)).option("checkpointLocation", str(ck))
         .trigger(availableNow=True).start().awaitTermination())
        if round_ == 0:
            first = len(spark.read.schema("at TIMESTAMP, id BIGINT").json(str(out)).collect())
    got = [{"at": int(r["at"].timestamp() * 1000), "id": r["id"]}
           for r in spark.read.schema("at TIMESTAMP, id BIGINT").json(str(out)).collect()]
    expected = match_rows(q.query, events)
    assert len(expected) > 5
    assert canonical(got) == canonical(expected)
    assert first < len(expected)  # some waited for the second run's events, all of another type


def iso(ms: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat()
