"""Equal timestamps straddling micro-batches (LANGUAGE.md §1: only an event *older* than the newest seen minus
the allowed lateness is late): real files through ``sparkcep run --stream --files-per-trigger 1`` at lateness
0, where a file starts at its predecessor's last ts, give the batch's and the oracle's results, for a match
query and a trend query; nothing goes to ``_late``.  The issue's repro first, then small generated streams.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bad_records import read_dir, write_files

import sparkcep
from sparkcep.cli import main
from sparkcep.oracles.match import is_trend_aggregate, match_rows, trend_aggregates
from sparkcep.spark.results import canonical

pytestmark = pytest.mark.spark

COLUMNS = ["type", "ts", "id", "x"]
MATCH = "PATTERN SEQ(A a, B b) WHERE [id] WITHIN 10 RETURN a.ts AS at, b.ts AS bt, a.id AS id"
TREND = "RETURN id, COUNT(*) AS n PATTERN SEQ(A+, B) WHERE [id] GROUP-BY id WITHIN 10"
#: an event of no query's type far ahead: it moves event time past every window (a trend row is emitted once
#: the watermark passes its window's end)
TAIL = {"type": "Z", "ts": 100, "id": 0, "x": 0}


def oracle(text: str, events: list[dict]) -> list[dict]:
    q = sparkcep.compile(text).query
    if is_trend_aggregate(q):
        return [{k: int(v) for k, v in r.items()} for r in trend_aggregates(q, events)]
    return match_rows(q, events, COLUMNS)


def plain(rows: list[dict]) -> list[dict]:
    assert all(r.pop("aggregate_overflow", False) is False for r in rows)
    return [{k: int(v) if isinstance(v, float) and v == int(v) else v for k, v in r.items()} for r in rows]


def batch_and_stream(tmp_path, capsys, text: str, files: list[list[dict]]) -> tuple[list[dict], list[dict]]:
    """``(batch rows, stream rows)`` of ``text`` over ``files``; the stream reads one file per micro-batch and
    routes nothing to ``_late``."""
    write_files(tmp_path / "in", files)
    streaming = ["--stream", "--once", "--files-per-trigger", "1", "--checkpoint", str(tmp_path / "ck")]
    for out, extra in ((tmp_path / "b", []), (tmp_path / "s", streaming)):
        code = main(["run", "-e", text, "--input", str(tmp_path / "in"), "--output", str(out), *extra])
        err = capsys.readouterr().err
        assert code == 0 and "Traceback" not in err, err
    late = tmp_path / "s" / "_late"
    assert not late.is_dir() or read_dir(late) == []
    return plain(read_dir(tmp_path / "b")), plain(read_dir(tmp_path / "s"))


@pytest.mark.parametrize(("text", "files", "count"), [
    # file 1 = A@1, B@2, file 2 = B@2, B@3: 3 matches (streaming lost the second B@2 to _late)
    (MATCH, [[("A", 1), ("B", 2)], [("B", 2), ("B", 3)]], 3),
    # file 1 = A@1, A@2, file 2 = A@2, B@3: COUNT(*) 5 (streaming counted 3 without the second A@2)
    (TREND, [[("A", 1), ("A", 2)], [("A", 2), ("B", 3)]], 5),
], ids=["match", "trend"])
def test_issue_repro_ties_across_files_batch_equals_stream_equals_oracle(spark, tmp_path, capsys, text, files,
                                                                         count):
    files = [[{"type": t, "ts": ts, "id": 1, "x": 0} for t, ts in f] for f in files]
    files.append([TAIL])
    events = [e for f in files for e in f]
    expected = oracle(text, events)
    assert (len(expected) if text == MATCH else expected[0]["n"]) == count
    batch, stream = batch_and_stream(tmp_path, capsys, text, files)
    assert canonical(batch) == canonical(stream) == canonical(expected)


@st.composite
def tied_files(draw):
    """Three to four small files of increasing ts, each starting at its predecessor's last ts (ties straddle
    every file boundary), then the tail."""
    files, ts = [], 0
    for _ in range(draw(st.integers(3, 4))):
        f = []
        for k in range(draw(st.integers(1, 3))):
            ts += 0 if not k else draw(st.integers(0, 1))
            f.append({"type": draw(st.sampled_from("AAB")), "ts": ts, "id": draw(st.integers(0, 1)), "x": 0})
        files.append(f)
    return [*files, [TAIL]]


@pytest.mark.slow
@pytest.mark.parametrize("text", [MATCH, TREND], ids=["match", "trend"])
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.function_scoped_fixture])
@given(files=tied_files())
def test_generated_ties_across_files_batch_equals_stream_equals_oracle(spark, tmp_path_factory, capsys, text,
                                                                       files):
    events = [e for f in files for e in f]
    batch, stream = batch_and_stream(tmp_path_factory.mktemp("ties"), capsys, text, files)
    assert canonical(batch) == canonical(stream) == canonical(oracle(text, events))


def test_apply_without_side_channel_keeps_ties_across_a_restart(spark, tmp_path):
    """``CompiledQuery.apply`` on a stream without the late side channel, where Spark itself drops the rows
    it calls late before the operator (a row at or before the previous batch's watermark): file 1, then a
    restart from the checkpoint with file 2, so that the previous batch (the last of the first run) has the
    watermark 2 already.  The second B@2 is at that watermark, not before it, and must be matched."""
    from sparkcep.spark.io import read_events

    files = [[{"type": t, "ts": ts, "id": 1, "x": 0} for t, ts in f]
             for f in ([("A", 1), ("B", 2)], [("B", 2), ("B", 3)])]
    query = sparkcep.compile(MATCH)
    for f in files:
        write_files(tmp_path / "in", [f])
        result = query.apply(read_events(spark, str(tmp_path / "in"), "json", "ts", stream=True,
                                         schema="type STRING, ts BIGINT, id BIGINT"))
        (result.writeStream.format("json").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start().awaitTermination())
    got = sorted(tuple(r) for r in spark.read.schema(result.schema).json(str(tmp_path / "out")).collect())
    assert got == [(1, 2, 1), (1, 2, 1), (1, 3, 1)]
