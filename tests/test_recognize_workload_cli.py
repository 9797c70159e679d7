"""``sparkcep check|explain|compile|run|notebook FILE.sql`` for a file of several ``;``-separated MATCH_RECOGNIZE
statements (a workload): errors positioned in the file, explain says who shares a pass, ``run`` writes one
directory per statement (batch and ``--stream``: each statement's rows as ``sparkcep.sql`` gives them alone,
late rows per statement, dead letters once), the generated job.  The workload is
``golden_plans/recognize_workload_ticker/query.sql`` (its explain and job are golden files too)."""

from __future__ import annotations

import ast as pyast
import json
import os
import time
from pathlib import Path

import pytest

from sparkcep.sql_api import split_statements
from tests.test_recognize_cli import ROOT, _ticker_dir, run_cli

WORKLOAD = (ROOT / "golden_plans" / "recognize_workload_ticker" / "query.sql").read_text()
NAMES = ["vshape", "rising", "drops"]


@pytest.fixture()
def workload_file(tmp_path) -> Path:
    path = tmp_path / "ticker.sql"
    path.write_text(WORKLOAD)
    return path


def _assigned(tree: pyast.Module, name: str) -> pyast.expr:
    """The value a module-level ``name = ...`` assigns."""
    return next(n.value for n in tree.body if isinstance(n, pyast.Assign)
                and isinstance(n.targets[0], pyast.Name) and n.targets[0].id == name)


def test_check_names_each_statement_and_says_who_shares(capsys, workload_file):
    status, out, err = run_cli(capsys, "check", str(workload_file))
    assert status == 0, err
    lines = out.splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == [f"ok  {n}" for n in NAMES]
    assert lines[3] == "-- a workload of 3 MATCH_RECOGNIZE statements (vshape, rising, drops)"
    assert lines[4].startswith("-- statements vshape, rising share one pass (FROM Ticker, PARTITION BY symbol")
    assert lines[5].startswith("-- statement drops runs alone (FROM Ticker, PARTITION BY (none)")


def test_an_error_in_a_later_statement_is_positioned_in_the_file(capsys, tmp_path):
    bad = WORKLOAD.replace("DEFINE UP AS UP.price > PREV(UP.price)", "DEFINE UP AS UP.price > PREV(NOPE.price)")
    path = tmp_path / "bad.sql"
    path.write_text(bad)
    status, out, err = run_cli(capsys, "check", str(path))
    line = bad.splitlines().index(next(x for x in bad.splitlines() if "NOPE" in x)) + 1
    column = bad.splitlines()[line - 1].index("NOPE") + 1
    assert status == 2 and out == ""
    assert err.startswith(f"sparkcep: line {line}, column {column}: ")
    assert "^^^^" in err and "Traceback" not in err


def test_statements_are_named_by_alias_else_by_position(capsys, tmp_path):
    texts = [t.strip() for t in split_statements(WORKLOAD)]
    path = tmp_path / "two.sql"
    path.write_text(texts[1].replace(" AS rising", "") + ";\n" + texts[2] + ";\n")
    status, out, err = run_cli(capsys, "check", str(path))
    assert status == 0, err
    assert [line.split(":")[0] for line in out.splitlines()[:2]] == ["ok  s1", "ok  drops"]
    path.write_text(texts[1] + ";\n" + texts[2].replace("AS drops", "AS Rising"))
    status, out, err = run_cli(capsys, "check", str(path))
    assert status == 2 and "statements 1 and 2 are both named Rising" in err and err.count("\n") >= 2


def test_explain_the_workload_then_each_statement(capsys, workload_file):
    status, out, err = run_cli(capsys, "explain", str(workload_file))
    assert status == 0, err
    assert out.startswith("-- a workload of 3 MATCH_RECOGNIZE statements")
    assert [line for line in out.splitlines() if line.startswith("-- statement ")][-3:] == [
        f"-- statement {n}" for n in NAMES]
    assert out.count("r0 := Source[table=Ticker]") == 3


def test_compile_a_workload_job_and_refuse_what_a_file_cannot_hold(capsys, workload_file, tmp_path):
    job = tmp_path / "job.py"
    status, _, err = run_cli(capsys, "compile", str(workload_file), "-o", str(job))
    assert status == 0, err
    tree = pyast.parse(job.read_text())
    assert pyast.literal_eval(_assigned(tree, "NAMES")) == NAMES
    head = "FROM {}\n    MATCH_RECOGNIZE (\n        ORDER BY"
    other = WORKLOAD.replace(head.format("Ticker"), head.format("Quotes"))
    (tmp_path / "other.sql").write_text(other)
    for command in (["check"], ["compile", "-o", str(job)]):  # what check accepts, the rest accepts
        status, _, err = run_cli(capsys, command[0], str(tmp_path / "other.sql"), *command[1:])
        assert status == 2 and "the first reads FROM Ticker, this one FROM Quotes" in err
    ordered = WORKLOAD.replace("    ) AS drops;", "    ) AS drops ORDER BY fall DESC;")
    (tmp_path / "ordered.sql").write_text(ordered)
    status, out, err = run_cli(capsys, "check", str(tmp_path / "ordered.sql"))
    assert status == 0, err
    assert out.splitlines()[2].endswith("; batch only (streaming: in a workload the query around MATCH_RECOGNIZE "
                                        "can only select and filter)")


def test_notebook_of_a_workload(capsys, workload_file, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    path = tmp_path / "w.ipynb"
    status, _, err = run_cli(capsys, "notebook", str(workload_file), "--input", "ticker/", "-o", str(path))
    assert status == 0, err
    nb = nbformat.read(str(path), as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "rows.createOrReplaceTempView('Ticker')" in code and "sparkcep.sql_workload(" in code
    tree = pyast.parse(code)
    assert list(pyast.literal_eval(_assigned(tree, "STATEMENTS"))) == NAMES
    assert "statements vshape, rising share one pass" in nb.cells[1].source


# ----------------------------------------------------------------------------------------------- on Spark


def _alone(spark, rows: Path, schema: str, view: str, texts: list[str]) -> list[list[dict]]:
    """Each statement run alone by ``sparkcep.sql`` over the valid rows of ``rows``, as JSON objects."""
    import sparkcep
    from sparkcep.spark.results import json_lines

    spark.read.schema(schema).option("mode", "DROPMALFORMED").json(str(rows)).createOrReplaceTempView(view)
    return [sorted((json.loads(line) for line in json_lines(sparkcep.sql(t, spark))), key=json.dumps)
            for t in texts]


def _by_statement(out: str, names: list[str]) -> list[list[dict]]:
    got: dict[str, list[dict]] = {n: [] for n in names}
    for line in out.splitlines():
        row = json.loads(line)
        got[row.pop("statement")].append(row)
    return [sorted(got[n], key=json.dumps) for n in names]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(path.glob("part-*")) for line in f.read_text().splitlines() if line]


@pytest.mark.spark
def test_run_a_workload_file_gives_each_statement_what_it_gives_alone(spark, capsys, workload_file, tmp_path):
    """``--output OUT``: statement ``name``'s rows in ``OUT/name/`` (the JSON of Spark's writer), the dead
    letters once in ``OUT/_dead_letters``; each statement's rows are those ``sparkcep.sql`` gives it alone."""
    rows = _ticker_dir(tmp_path)
    status, _, err = run_cli(capsys, "run", str(workload_file), "--input", str(rows), "--output",
                             str(tmp_path / "out"), "--table", "ticker")
    assert status == 0, err
    assert "1 bad records skipped (malformed record: 1)" in err
    got = [sorted(_lines(tmp_path / "out" / n), key=json.dumps) for n in NAMES]
    want = _alone(spark, rows, "symbol string, rowtime timestamp, price bigint, tax bigint", "Ticker",
                  split_statements(WORKLOAD))
    assert got == want and len(want[0]) == 2 and all(want)  # the Flink V, once per symbol
    assert [d["reason"] for d in _lines(tmp_path / "out" / "_dead_letters")] == ["malformed record"]


#: Two statements sharing a pass over numeric times; the files straddle equal times (file 1 ends with rows at
#: ts 2, file 2 starts with one), the last file holds a row behind the watermark.
TIES = """
SELECT * FROM ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
    MEASURES FIRST(A.ts) AS a_ts, LAST(B.ts) AS b_ts, COUNT(B.*) AS n, SUM(B.v) AS total
    PATTERN (A B+) DEFINE A AS v = 0, B AS v > 0) AS runs;
SELECT * FROM ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
    MEASURES FIRST(B.ts) AS first_ts, SUM(B.v) AS pair
    PATTERN (B{2}) DEFINE B AS v > 0) AS pairs
"""
TIE_FILES = [[("p", 1, 0), ("q", 1, 0), ("p", 2, 1), ("q", 2, 4)],
             [("p", 2, 2), ("q", 2, 3), ("p", 3, 5), ("q", 3, 0)],
             [("p", 3, 7), ("p", 4, 1), ("q", 4, 6), ("p", 9, 0), ("q", 9, 0)],
             [("p", 20, 0), ("q", 20, 0)],
             [("p", 5, 9)]]  # behind the watermark 20 of its key: late for both statements


@pytest.mark.spark
@pytest.mark.slow
def test_workload_stream_with_ties_across_files_equals_batch_and_each_statement_alone(spark, capsys, tmp_path,
                                                                                    monkeypatch):
    """One file per micro-batch, lateness 0: rows at the newest time seen so far (ts 2 in files 1 and 2, ts 3
    in files 2 and 3) are on time and matched as in a batch, by the shared stream as by each statement alone;
    the row behind the watermark goes to each statement's ``_late``, the bad line once to ``_dead_letters``.
    The admission control is told the checkpoints of the groups' queries as Spark makes them (a staged file
    is removed only once each has committed it: with ``--once`` a later group starts after the first drained)."""
    from sparkcep.spark import shedding

    told = []
    follow_input = shedding.follow_input
    monkeypatch.setattr(shedding, "follow_input",
                        lambda *a, **k: told.append(k.get("queries")) or follow_input(*a, **k))
    on_time, late = tmp_path / "on_time", tmp_path / "all"
    for d in (on_time, late):
        d.mkdir()
    for k, rows in enumerate(TIE_FILES):
        text = "".join(json.dumps({"k": a, "ts": b, "v": c}) + "\n" for a, b, c in rows)
        if k == 1:
            text += "{oops\n"
        for d in (on_time, late) if k < len(TIE_FILES) - 1 else (late,):
            (d / f"part-{k}.json").write_text(text)
            os.utime(d / f"part-{k}.json", (1_700_000_000 + k, 1_700_000_000 + k))  # the file source's order
    sql = tmp_path / "ties.sql"
    sql.write_text(TIES)
    names = ["runs", "pairs"]
    status, out, err = run_cli(capsys, "run", str(sql), "--input", str(on_time), "-q")
    assert status == 0, err
    batch = _by_statement(out, names)
    alone = _alone(spark, on_time, "k string, ts bigint, v bigint", "ev", split_statements(TIES))
    assert batch == alone
    assert [r["n"] for r in batch[0] if r["k"] == "p"] == [5]  # A@1 and every B of p, the ties at 2 and 3 too
    before = time.time() * 1000
    status, _, err = run_cli(capsys, "run", str(sql), "--input", str(late), "--stream", "--once",
                             "--files-per-trigger", "1", "--output", str(tmp_path / "out"), "--checkpoint",
                             str(tmp_path / "ck"), "-q", "--latency-column")
    after = time.time() * 1000
    assert status == 0, err
    written = [_lines(tmp_path / "out" / n) for n in names]
    # --latency-column: each result with its latency from its files' arrival (their modification times)
    latencies = [r.pop("_latency_ms") for rows in written for r in rows]
    assert all(before - 1_700_000_004_000 <= ms <= after - 1_700_000_000_000 for ms in latencies), latencies
    assert [sorted(rows, key=json.dumps) for rows in written] == batch
    for n in names:
        assert [json.loads(d["record"]) for d in _lines(tmp_path / "out" / n / "_late")] == [
            {"k": "p", "ts": 5, "v": 9}]
    assert [d["reason"] for d in _lines(tmp_path / "out" / "_dead_letters")] == ["malformed record"]
    made = sorted(p.name for p in (tmp_path / "ck").iterdir() if (p / "metadata").is_file())
    assert told[-1] == tuple(made) == ("g0",)


LIVE = """
SELECT * FROM ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
    MEASURES FIRST(A.ts) AS a_ts, LAST(B.ts) AS b_ts PATTERN (A B) DEFINE A AS v = 0, B AS v > 0) AS pairs;
SELECT * FROM ev MATCH_RECOGNIZE (ORDER BY ts MEASURES B.ts AS b_ts PATTERN (B) DEFINE B AS v > 5) AS big
"""
LIVE_FILES = [[{"k": "p", "ts": 1, "v": 0}, {"k": "q", "ts": 1, "v": 0}],
              [{"k": "p", "ts": 2, "v": 3}, {"k": "q", "ts": 2, "v": 7}],
              [{"k": "p", "ts": 20, "v": 0}, {"k": "q", "ts": 20, "v": 0}]]


@pytest.mark.spark
@pytest.mark.slow
def test_a_workload_stream_follows_its_input_until_sigterm(spark, capsys, tmp_path):
    """``run WORKLOAD.sql --stream`` without ``--once``: its two groups (two streaming queries) read files
    written after it started, SIGTERM stops both between micro-batches (exit 0, no traceback), and each
    statement's committed output equals the batch run's."""
    import signal
    import subprocess
    import sys

    from tests.test_live_stream import Lines, write_file

    inbox, out, sql = tmp_path / "in", tmp_path / "out", tmp_path / "live.sql"
    sql.write_text(LIVE)
    write_file(inbox, 0, LIVE_FILES[0])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "sparkcep.cli", "run", str(sql), "--input", str(inbox),
                             "--stream", "--files-per-trigger", "1", "--output", str(out), "--checkpoint",
                             str(tmp_path / "ck"), "--master", "local[2]"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    err = Lines(proc.stderr)

    def read_by_both(n: int):
        return lambda line: line.startswith("g1 batch ") and f"read {n} events" in line

    try:
        err.wait_for(read_by_both(2), 600, proc)
        for k in (1, 2):  # written after the run started: both groups must pick them up
            write_file(inbox, k, LIVE_FILES[k])
            err.wait_for(read_by_both(2 * (k + 1)), 300, proc)
        err.wait_for(lambda line: line.startswith("g0 batch ") and "read 6 events" in line, 300, proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=300) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    text = err.join()
    assert "Traceback" not in text and "sparkcep: stopped between micro-batches" in text, text
    assert not list(out.glob("*/_staging*"))
    status, batch, errors = run_cli(capsys, "run", str(sql), "--input", str(inbox), "-q")
    assert status == 0, errors
    expected = _by_statement(batch, ["pairs", "big"])
    assert [sorted(_lines(out / n), key=json.dumps) for n in ("pairs", "big")] == expected
    assert [len(rows) for rows in expected] == [2, 1]
