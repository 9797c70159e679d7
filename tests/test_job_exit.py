"""A generated job stops its SparkSession on the way out, whatever happened, before the JVM's shutdown hooks: on a
``local-cluster`` or standalone master the application then ends cleanly (README's spark-submit example prints one
stderr line instead of ~300: executors relaunched while the hooks ran, "Master removed our application: FAILED").
``main()`` itself leaves the session alone (a caller may go on using it).  Pure: a stand-in for the active session."""

from __future__ import annotations

import sys

import pytest
from pyspark.sql import SparkSession

import sparkcep
from sparkcep.cli import main


class Session:
    stopped = 0

    def stop(self):
        Session.stopped += 1


def statement_job(tmp_path) -> str:
    (tmp_path / "q.sql").write_text("SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY id ORDER BY ts MEASURES "
                                    "FIRST(A.ts) AS a_ts PATTERN (A B) DEFINE A AS kind = 'A', B AS kind = 'B')")
    assert main(["compile", str(tmp_path / "q.sql"), "-o", str(tmp_path / "job.py")]) == 0
    return (tmp_path / "job.py").read_text()


@pytest.mark.parametrize("source", [
    lambda tmp: sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 10").job_source(),
    lambda tmp: sparkcep.compile_shared_workload("p: RETURN COUNT(*) PATTERN SEQ(A, B) WHERE [id] WITHIN 10;\n"
                                                 "q: RETURN COUNT(*) PATTERN SEQ(A, C) WHERE [id] WITHIN 10"
                                                 ).job_source(),
    statement_job,
], ids=["query", "workload", "statement"])
def test_the_entry_point_stops_the_active_session(source, monkeypatch, tmp_path):
    text = source(tmp_path)
    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: Session()))
    monkeypatch.setattr(sys, "argv", ["job.py"])  # no --input: argparse exits before any Spark work
    Session.stopped = 0
    with pytest.raises(SystemExit):
        exec(compile(text, "job.py", "exec"), {"__name__": "__main__"})  # noqa: S102 - the generated job itself
    assert Session.stopped == 1
    Session.stopped = 0
    exec(compile(text, "job.py", "exec"), {"__name__": "job"})  # noqa: S102 - imported, not run: no stop
    assert Session.stopped == 0
