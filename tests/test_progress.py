"""The progress line of a streaming run, from Spark's progress JSON (observedMetrics), without a JVM."""

from __future__ import annotations

import json

from sparkcep.spark.progress import Totals, batch_counts


def progress(batch: int, valid: int, dead: int, relevant: int, results: int, late: int, ms: int) -> dict:
    return {"batchId": batch, "durationMs": {"triggerExecution": ms},
            "observedMetrics": {"events_valid": {"events_valid": valid}, "dead_letters": {"dead_letters": dead},
                                "events_relevant": {"events_relevant": relevant},
                                "sparkcep_output": {"results": results, "late": late}}}


def test_batch_counts_read_the_observed_metrics():
    assert batch_counts(progress(0, 10, 2, 7, 3, 1, 500)) == {
        "read": 12, "valid": 10, "dead_letters": 2, "relevant": 7, "ignored": 3, "results": 3, "late": 1}
    # a batch without data reports no observed metrics
    assert batch_counts({"batchId": 5})["read"] == 0


def test_totals_add_each_batch_once():
    totals = Totals()
    assert totals.add(progress(0, 10, 2, 7, 3, 1, 500)) == (
        "batch 0: read 12 events (+12), 3 results, 2 dead letters, 1 late, 3 ignored, 24 events/s")
    assert totals.add(progress(0, 10, 2, 7, 3, 1, 500)) is None
    line = totals.add(progress(1, 4, 0, 4, 5, 0, 1000))
    assert line == "batch 1: read 16 events (+4), 8 results, 2 dead letters, 1 late, 3 ignored, 4 events/s"
    assert totals.add(progress(2, 0, 0, 0, 0, 0, 300)).endswith(", idle")
    assert totals.counts["read"] == 16


def test_a_batch_reports_its_events_latency_from_arrival_and_the_backlog(tmp_path):
    """The arrival metric (file modification times of the batch's events) and the batch's end give the
    latency p50/p99; files modified after the newest arrival read are the backlog."""
    import os

    for k, mtime in enumerate([1000, 1001, 1002]):  # seconds
        path = tmp_path / f"part-{k}.json"
        path.write_text("{}\n")
        os.utime(path, (mtime, mtime))
    (tmp_path / "_hidden").write_text("")
    p = progress(4, 10, 0, 10, 2, 0, 500)
    p["timestamp"] = "1970-01-01T00:16:43.000Z"  # 1003 s; the batch ends 0.5 s later
    p["observedMetrics"]["arrival"] = {"oldest": 999_000, "p01": 999_000, "median": 1_000_000,
                                       "newest": 1_000_000, "arrived": 10}
    totals = Totals(source=str(tmp_path))
    line = totals.add(p)
    assert line.endswith(", latency p50 3.5 s p99 4.5 s, backlog 2 files")
    assert totals.latencies == [(4, 10, 3.5, 4.5, 2)]
    # the directory is asked as the admission control is (its backlog(newest_ms); events unknown), and has none
    # before a read or when it is not a local directory
    from sparkcep.spark.progress import InputDirectory, unprocessed

    assert totals.source == InputDirectory(str(tmp_path)) and unprocessed(totals.source, 1_000_000) == (2, None)
    assert unprocessed(totals.source, None) is None and unprocessed(InputDirectory("s3a://b/in"), 1_000_000) is None
    # a pathlib.Path is a path too (follow(..., source=Path(...)))
    assert Totals(source=tmp_path).add(p).endswith(", backlog 2 files")
    # the files Spark reads are counted: a partitioned input's in its key=value directories (the top-level ones are
    # not read then); another stream's file-sink output: the files its log committed (part-1 and k=1/b1, not
    # part-2, which an aborted upstream batch left), else (its log unreadable) its top-level files
    (tmp_path / "k=1").mkdir()
    for k, mtime in enumerate([999, 1003]):
        (tmp_path / "k=1" / f"b{k}.json").write_text("{}\n")
        os.utime(tmp_path / "k=1" / f"b{k}.json", (mtime, mtime))
    assert unprocessed(InputDirectory(str(tmp_path)), 1_000_000) == (1, None)
    (tmp_path / "_spark_metadata").mkdir()
    assert unprocessed(InputDirectory(str(tmp_path)), 1_000_000) == (0, None)  # nothing committed yet
    entries = "".join(json.dumps({"path": p.as_uri(), "isDir": False, "action": "add"}) + "\n"
                      for p in (tmp_path / "part-1.json", tmp_path / "k=1" / "b1.json"))
    (tmp_path / "_spark_metadata" / "0").write_text("v1\n" + entries)
    assert unprocessed(InputDirectory(str(tmp_path)), 999_000) == (2, None)
    (tmp_path / "_spark_metadata" / "1").write_text("v2\n")
    assert unprocessed(InputDirectory(str(tmp_path)), 1_000_000) == (2, None)
    # a batch without arrival metrics (no events, or not a file source) reports none
    assert "latency" not in totals.add(progress(5, 0, 0, 0, 0, 0, 300))


def test_a_live_streams_backlog_is_what_its_admission_counts_else_the_files_newer_than_the_last_read(tmp_path):
    """``LiveStream.backlog()`` (``sparkcep.apply_stream``) and the progress line count one backlog: the input's
    files modified after the newest arrival the micro-batches read, as the admission control counts them (with
    their events: the count its controller is told), else as seen from outside (files only)."""
    import os
    from types import SimpleNamespace

    from sparkcep.api import LiveStream
    from sparkcep.spark.shedding import FileAdmission

    inbox = tmp_path / "in"
    inbox.mkdir()
    for k, mtime in enumerate((1_000, 2_000, 3_000)):
        (inbox / f"part-{k}.json").write_text("{}\n" * (k + 1))
        os.utime(inbox / f"part-{k}.json", (mtime, mtime))
    read = [SimpleNamespace(observedMetrics={"arrival": {"newest": n}}) for n in (1_000_000, None)]
    query = SimpleNamespace(recentProgress=[*read, SimpleNamespace(observedMetrics=None)])
    assert LiveStream(query, None, str(inbox)).backlog() == 2  # part-1 and part-2: after 1,000 s
    nothing = SimpleNamespace(recentProgress=[])
    assert LiveStream(nothing, None, str(inbox)).backlog() is None  # nothing read yet
    admission = FileAdmission(str(inbox), str(tmp_path / "staged"), None)
    assert admission.backlog(1_000_000) == (2, 5)  # handed over or not: part-1 (2 events) and part-2 (3)
    assert LiveStream(query, None, str(inbox), admission=admission).backlog() == 2
    p = progress(4, 10, 0, 10, 2, 0, 500)
    p["timestamp"] = "1970-01-01T00:16:43.000Z"
    p["observedMetrics"]["arrival"] = {"oldest": 999_000, "p01": 999_000, "median": 1_000_000,
                                       "newest": 1_000_000, "arrived": 10}
    assert Totals(source=admission).add(p).endswith(", backlog 2 files (5 events)")
