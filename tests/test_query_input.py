"""Every reader of a query's input reads it as ``sparkcep run`` does: only the columns the query reads, each cast
to the type the query needs, bad records as dead letters.  The generated job (one query and a workload, run as
a subprocess), the notebook's cells and ``read_events`` (shedding training, the demo) on real files holding a
value ``"oops"`` in a compared attribute and an array attribute: the oracle's results and the dead letters.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from test_bad_records import GOOD, read_dir, write_files
from test_recovery import job_env

import sparkcep
from sparkcep.oracles.match import match_rows
from sparkcep.spark.io import read_events
from sparkcep.spark.results import canonical

pytestmark = pytest.mark.spark

QUERY = "PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 8 RETURN a.ts AS at, b.ts AS bt, a.id AS id"
WORKLOAD = (f"lt: {QUERY};\n"
            "plus: PATTERN SEQ(A a, B b) WHERE [id] AND a.x + 1 < b.x WITHIN 8 RETURN a.ts AS at, b.ts AS bt")
COLUMNS = ["type", "ts", "id", "x"]
#: One value that is no number in the compared x (it once made x a string column: "9" < "10" is false) and an
#: array in an attribute the query never reads.
BAD = ['{"type": "A", "ts": 6, "id": 0, "x": "oops"}',
       {"type": "A", "ts": 6, "id": 1, "x": 0, "tags": ["a", {"b": 1}]}]
REASONS = ["wrong attribute type: x (not bigint)"]


def oracle(text: str, events: list) -> list[dict]:
    rows = [e for e in events if isinstance(e, dict)]
    return match_rows(sparkcep.compile(text).query, rows, COLUMNS)


def run(*cmd: str) -> None:
    done = subprocess.run([sys.executable, *cmd], env=job_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["query", "workload"])
def test_generated_job_reads_what_the_query_needs(tmp_path, kind):
    write_files(tmp_path / "in", [GOOD + BAD])
    source, job, out = tmp_path / "q.cep", tmp_path / "job.py", tmp_path / "out"
    source.write_text(QUERY if kind == "query" else WORKLOAD)
    run("-m", "sparkcep.cli", "compile", str(source), "-o", str(job))
    run(str(job), "--input", str(tmp_path / "in"), "--output", str(out), "--shuffle-partitions", "2")
    events = GOOD + BAD
    if kind == "query":
        expected = oracle(QUERY, events)
    else:
        expected = [{"query": name, **r} for name, text in (("lt", QUERY), ("plus", WORKLOAD.split(";\n")[1][6:]))
                    for r in oracle(text, events)]
    assert any(r["at"] == 1 and r["bt"] == 2 for r in expected)  # 9 < 10: only if x is compared as a number
    assert canonical(read_dir(out)) == canonical(expected)
    assert [d["reason"] for d in read_dir(out / "_dead_letters")] == REASONS


def test_notebook_reads_what_the_query_needs(spark, tmp_path):
    """The notebook's code cells, run in this process on the test's session: results and dead letters."""
    pytest.importorskip("nbformat")
    from sparkcep.notebook import notebook

    write_files(tmp_path / "in", [GOOD + BAD])
    cells = [c.source for c in notebook(sparkcep.compile(QUERY), input_path=str(tmp_path / "in")).cells
             if c.cell_type == "code"]
    namespace: dict = {}
    for cell in cells[:-1]:  # the last one shows the results
        exec(compile(cell, "cell", "exec"), namespace)  # noqa: S102 - the point: run the notebook's code
    got = [r.asDict() for r in namespace["result"].collect()]
    assert canonical(got) == canonical(oracle(QUERY, GOOD + BAD))
    assert [r["reason"] for r in namespace["rejected"].collect()] == REASONS


def test_read_events_is_the_validated_read(spark, tmp_path):
    """``read_events`` (shedding training, the demo): an array attribute and a bad value neither stop it nor
    retype a column; with the query's needs, x is numeric and the bad record is left out."""
    write_files(tmp_path / "in", [GOOD + BAD])
    events = read_events(spark, str(tmp_path / "in"), "json", "ts", attributes=["id", "x"], needs={"x": "numeric"})
    assert dict(events.dtypes)["x"] == "bigint" and "tags" not in events.columns
    assert sorted(r.ts for r in events.collect()) == sorted(e["ts"] for e in GOOD + BAD[1:])
    everything = read_events(spark, str(tmp_path / "in"), "json", "ts")
    assert dict(everything.dtypes)["tags"] == "string" and everything.count() == len(GOOD) + len(BAD)
