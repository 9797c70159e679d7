"""``sparkcep check|explain|compile|run|notebook`` and ``%%sparkcep`` for a MATCH_RECOGNIZE statement.

The pure tests run the CLI in-process (no Spark); the Spark ones run a ``.sql`` file over a JSON directory with
``run``, and the compiled job once, against the result the Apache Flink documentation publishes for its
stock V-shape example ("Detecting Patterns", the Ticker table).
"""

from __future__ import annotations

import ast as pyast
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkcep import cli_sql
from sparkcep.cli import main

ROOT = Path(__file__).resolve().parent.parent
VSHAPE = (ROOT / "golden_plans" / "recognize_flink_vshape" / "query.sql").read_text()

#: The Ticker rows of the Flink documentation's example (2011-04-01; price, tax).
TICKER = [("10:00:00", 12, 1), ("10:00:01", 17, 2), ("10:00:02", 19, 1), ("10:00:03", 21, 3), ("10:00:04", 25, 2),
          ("10:00:05", 18, 1), ("10:00:06", 15, 1), ("10:00:07", 14, 2), ("10:00:08", 24, 2), ("10:00:09", 25, 2),
          ("10:00:10", 19, 1)]
#: Its published result: one V, from the top at 10:00:04 down to 10:00:07 and up at 10:00:08.
PUBLISHED = [{"symbol": "ACME", "start_tstamp": "2011-04-01T10:00:04.000Z",
              "bottom_tstamp": "2011-04-01T10:00:07.000Z", "end_tstamp": "2011-04-01T10:00:08.000Z"}]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture()
def vshape_file(tmp_path) -> Path:
    path = tmp_path / "vshape.sql"
    path.write_text(VSHAPE)
    return path


def test_a_statement_is_told_from_a_pattern_query():
    assert cli_sql.is_sql("PATTERN SEQ(A a) WITHIN 1", "q.sql")
    assert cli_sql.is_sql("-- stock\n/* v */ select * FROM t MATCH_RECOGNIZE (...)")
    assert not cli_sql.is_sql("PATTERN SEQ(A a, B b) WHERE a.x < 1 WITHIN 10", "selected.cep")
    assert not cli_sql.is_sql("-- SELECT\nPATTERN SEQ(A a) WITHIN 1")


def test_check_a_sql_file(capsys, vshape_file):
    status, out, err = run_cli(capsys, "check", str(vshape_file))
    assert status == 0, err
    assert out.startswith("ok  MATCH_RECOGNIZE over Ticker: 3 variables (")
    assert "AFTER MATCH SKIP TO LAST PRICE_UP; batch and streaming" in out


def test_check_says_what_streaming_refuses(capsys):
    text = "SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B $) DEFINE B AS B.x > A.x)"
    status, out, err = run_cli(capsys, "check", "-e", text)
    assert status == 0, err
    assert "; batch only (streaming: " in out


def test_check_error_is_one_positioned_message(capsys, tmp_path):
    path = tmp_path / "bad.sql"
    path.write_text(VSHAPE.replace("PRICE_UP.price > LAST", "PRICE_UP.price > LAST(NOPE.price) + LAST"))
    status, out, err = run_cli(capsys, "check", str(path))
    assert status == 2 and out == ""
    line = VSHAPE.splitlines().index(next(x for x in VSHAPE.splitlines() if "PRICE_UP.price > LAST" in x)) + 1
    assert err.startswith(f"sparkcep: line {line}, column ")
    assert "NOPE" in err and "^" in err and "Traceback" not in err


def test_explain_shows_the_clause_and_the_engine_program(capsys, vshape_file):
    from sparkcep.runtime_udfs.recognize import describe_engine, describe_program

    status, out, err = run_cli(capsys, "explain", str(vshape_file))
    assert status == 0, err
    assert "Partition[r0, keys=(symbol)]" in out
    assert "rows=ONE ROW PER MATCH, skip=TO LAST PRICE_UP" in out
    assert "pattern (START_ROW PRICE_DOWN+ PRICE_UP)" in out
    assert "define PRICE_UP: PRICE_UP.price > LAST(PRICE_DOWN.price, 1)" in out
    spec = cli_sql.plan_spec(cli_sql.statement(VSHAPE))
    program = describe_program(spec)
    assert program and all(line in out for line in program)
    assert all(f"engine: {line}" in out for line in describe_engine(spec))
    assert "GRETA" not in out


def test_explain_says_why_matches_counted_by_group_are_not_trends(capsys):
    text = ("SELECT id, COUNT(*) AS n FROM events MATCH_RECOGNIZE (PARTITION BY id ORDER BY ts MEASURES A.ts AS ats "
            "PATTERN (A B+ C) DEFINE A AS kind = 'A', B AS kind = 'B', C AS kind = 'C') GROUP BY id")
    status, out, err = run_cli(capsys, "explain", "-e", text)
    assert status == 0, err
    assert out.rstrip().endswith("trend aggregation (GRETA) and sharing (Sharon) not used: MATCH_RECOGNIZE counts one "
                                 "preferred match per start row, GRETA every trend")


def test_explain_with_a_schema_gives_the_result_types(capsys, vshape_file):
    schema = "symbol STRING, rowtime TIMESTAMP, price BIGINT, tax BIGINT"
    status, out, err = run_cli(capsys, "explain", str(vshape_file), "--schema", schema)
    assert status == 0, err
    assert "Output[r2, columns=(symbol string, start_tstamp timestamp, bottom_tstamp timestamp, " in out
    status, _, err = run_cli(capsys, "explain", str(vshape_file), "--schema", "symbol ???")
    assert status == 2 and "not a schema" in err


def test_explain_with_a_schema_says_what_the_batch_worker_reads(capsys, tmp_path):
    query = tmp_path / "abc.sql"
    query.write_text("SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY p ORDER BY ts MEASURES LAST(C.id) AS c "
                     "PATTERN (A B+ C) DEFINE A AS typ = 'A', B AS id > PREV(id), C AS typ = 'C')")
    status, out, err = run_cli(capsys, "explain", str(query), "--schema", "p BIGINT, ts BIGINT, id BIGINT, typ STRING")
    assert status == 0, err
    assert "batch: the worker reads p, id, __mask after Spark's sort" in out
    assert ("batch: Spark computes DEFINE A as bit 0, C as bit 2 after the sort, packed into one INT column __mask "
            "(NULL: bit clear)") in out
    assert "lag(" not in out  # a window costs Spark more than shipping id (read anyway)
    assert "high bits" not in out  # a BIGINT key does not fit beside the bits
    # an INT key travels in the mask's high bits: one column less
    status, out, err = run_cli(capsys, "explain", str(query), "--schema", "p INT, ts BIGINT, id BIGINT, typ STRING")
    assert status == 0, err
    assert "batch: the worker reads id, __mask after Spark's sort" in out
    assert "packed into one BIGINT column __mask (NULL: bit clear)" in out
    assert "batch: PARTITION BY p travels in __mask's high bits" in out


def test_compile_writes_a_job_holding_the_statement(capsys, vshape_file, tmp_path):
    from sparkcep.ir.serde import from_data

    job = tmp_path / "job.py"
    status, _, err = run_cli(capsys, "compile", str(vshape_file), "-o", str(job))
    assert status == 0, err
    source = job.read_text()
    tree = pyast.parse(source)
    constants = {n.targets[0].id: n.value for n in tree.body if isinstance(n, pyast.Assign)
                 and isinstance(n.targets[0], pyast.Name)}
    baked = from_data(json.loads(pyast.literal_eval(constants["RECOGNIZE"])))
    assert baked == cli_sql.statement(VSHAPE)
    assert "TABLE, TIME_COL = 'Ticker', 'rowtime'" in source
    assert "PATTERN (START_ROW PRICE_DOWN+ PRICE_UP)" in pyast.get_docstring(tree)


def test_options_of_the_pattern_language_are_refused(capsys, vshape_file, tmp_path):
    status, _, err = run_cli(capsys, "compile", str(vshape_file), "-o", str(tmp_path / "j.py"), "--collapsed")
    assert status == 2 and "--collapsed does not apply to a MATCH_RECOGNIZE statement" in err
    status, _, err = run_cli(capsys, "run", str(vshape_file), "--input", str(tmp_path), "--ts-col", "t")
    assert status == 2 and "first ORDER BY column" in err
    status, _, err = run_cli(capsys, "run", str(vshape_file), "--input", str(tmp_path), "--table", "events")
    assert status == 2 and "FROM Ticker" in err
    status, _, err = run_cli(capsys, "run", str(vshape_file), "--input", str(tmp_path), "--timeouts")
    assert status == 2 and "--timeouts does not apply to a MATCH_RECOGNIZE statement" in err
    assert "SQL:2016 defines no partial-match output" in err  # the reason


def test_notebook_of_a_statement(capsys, vshape_file, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    path = tmp_path / "v.ipynb"
    status, _, err = run_cli(capsys, "notebook", str(vshape_file), "--input", "ticker/", "-o", str(path))
    assert status == 0, err
    nb = nbformat.read(str(path), as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "rows.createOrReplaceTempView('Ticker')" in code and "sparkcep.sql(QUERY, spark)" in code
    pyast.parse(code)


# ----------------------------------------------------------------------------------------------- on Spark


def _ticker_dir(tmp_path: Path) -> Path:
    rows = tmp_path / "ticker"
    rows.mkdir()
    lines = [json.dumps({"symbol": "ACME", "rowtime": f"2011-04-01T{t}Z", "price": p, "tax": x}) for t, p, x in TICKER]
    # another symbol with the same prices, a minute later: its own partition, its own V
    lines += [json.dumps({"symbol": "XYZ", "rowtime": f"2011-04-01T10:01:{t[-2:]}Z", "price": p, "tax": x})
              for t, p, x in TICKER]
    (rows / "part-0.json").write_text("\n".join(lines[:13]) + "\n")
    (rows / "part-1.json").write_text("\n".join(lines[13:]) + "\n{not json\n")
    return rows


def _expected() -> list[dict]:
    other = {k: v.replace("10:00:", "10:01:") for k, v in PUBLISHED[0].items()} | {"symbol": "XYZ"}
    return [*PUBLISHED, other]


def _read_json_dir(path: Path) -> list[dict]:
    rows = [json.loads(line) for f in sorted(path.glob("part-*")) for line in f.read_text().splitlines() if line]
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))


@pytest.mark.spark
def test_run_a_sql_file_over_a_json_directory(spark, capsys, vshape_file, tmp_path):
    rows = _ticker_dir(tmp_path)
    out = tmp_path / "out"
    status, _, err = run_cli(capsys, "run", str(vshape_file), "--input", str(rows), "--table", "Ticker",
                             "--output", str(out))
    assert status == 0, err
    assert _read_json_dir(out) == _expected()
    assert "1 bad records skipped (malformed record: 1)" in err


@pytest.mark.spark
def test_run_stream_writes_the_decided_matches_the_dead_letters_and_the_late_rows(spark, capsys, vshape_file,
                                                                                   tmp_path):
    """A file per micro-batch; the third holds an ACME row older than the watermark the first two set: it goes
    to ``OUTPUT/_late`` with its record and is counted in the progress line; the results are the batch's
    without it.  ``--latency-column``: each result with its latency from its file's arrival (modification
    time), also in the progress line."""
    rows = _ticker_dir(tmp_path)
    (rows / "part-2.json").write_text(json.dumps({"symbol": "ACME", "rowtime": "2011-04-01T10:00:05Z", "price": 1,
                                                  "tax": 0}) + "\n")
    for k, name in enumerate(["part-0.json", "part-1.json", "part-2.json"]):  # the file source's order: by time
        os.utime(rows / name, (1_700_000_000 + k, 1_700_000_000 + k))
    out = tmp_path / "stream_out"
    before = time.time() * 1000
    status, _, err = run_cli(capsys, "run", str(vshape_file), "--input", str(rows), "--stream", "--once",
                             "--output", str(out), "--latency-column",
                             "--checkpoint", str(tmp_path / "ck"), "--files-per-trigger", "1")
    after = time.time() * 1000
    assert status == 0, err
    written = _read_json_dir(out)
    latencies = [r.pop("_latency_ms") for r in written]
    assert sorted(written, key=lambda r: json.dumps(r, sort_keys=True)) == _expected()
    assert all(before - 1_700_000_002_000 <= ms <= after - 1_700_000_000_000 for ms in latencies), latencies
    assert any(" result latency p50 " in line for line in err.splitlines())
    dead = [json.loads(line) for f in (out / "_dead_letters").glob("part-*") for line in f.read_text().splitlines()]
    assert [d["reason"] for d in dead] == ["malformed record"]
    late = [json.loads(line) for f in (out / "_late").glob("part-*") for line in f.read_text().splitlines()]
    assert [(d["reason"].split(" 20")[0], json.loads(d["record"])) for d in late] == [
        ("late: ts before the watermark", {"symbol": "ACME", "rowtime": "2011-04-01T10:00:05+00:00", "price": 1})]
    progress = [line for line in err.splitlines() if line.startswith("batch ")]
    assert progress and all(", 0 ignored," in line for line in progress)  # every row goes to the engine
    assert any(", 1 late," in line for line in progress)
    # the compiled job (run in this process, on the shared session) writes the same, with the same latency
    job = tmp_path / "job.py"
    assert main(["compile", str(vshape_file), "-o", str(job)]) == 0
    spec = importlib.util.spec_from_file_location("recognize_stream_job", job)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    job_out = tmp_path / "job_out"
    module.main(["--input", str(rows), "--stream", "--once", "--output", str(job_out), "--latency-column",
                 "--checkpoint", str(tmp_path / "job_ck"), "--files-per-trigger", "1", "--shuffle-partitions", "2"])
    after = time.time() * 1000
    written = _read_json_dir(job_out)
    latencies = [r.pop("_latency_ms") for r in written]
    assert sorted(written, key=lambda r: json.dumps(r, sort_keys=True)) == _expected()
    assert all(before - 1_700_000_002_000 <= ms <= after - 1_700_000_000_000 for ms in latencies), latencies
    assert any(" result latency p50 " in line for line in capsys.readouterr().err.splitlines())
    # it read them through the admission control, as run does (the backlog an observed metric of each
    # micro-batch), the latency still from each file's own arrival
    from sparkcep.spark.validate import original_name

    staged = [original_name(n) for n in os.listdir(tmp_path / "job_ck" / "_admitted") if n.endswith(".json")]
    assert sorted(staged) == ["part-0.json", "part-1.json", "part-2.json"]


@pytest.mark.spark
@pytest.mark.slow
def test_the_compiled_job_gives_what_run_gives(vshape_file, tmp_path):
    rows = _ticker_dir(tmp_path)
    job = tmp_path / "job.py"
    assert main(["compile", str(vshape_file), "-o", str(job)]) == 0
    out = tmp_path / "job_out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(job), "--input", str(rows), "--output", str(out),
                           "--shuffle-partitions", "2"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _read_json_dir(out) == _expected()
    dead = [json.loads(line) for f in (out / "_dead_letters").glob("part-*") for line in f.read_text().splitlines()]
    assert [d["reason"] for d in dead] == ["malformed record"]


@pytest.fixture()
def shell():
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "sparkcep.magic")
    yield ip
    InteractiveShell.clear_instance()


def test_magic_statement_errors_are_one_message(shell):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError) as err:
        shell.run_cell_magic("sparkcep", "", "SELECT * FROM t MATCH_RECOGNIZE (\n  ORDER BY ts\n  PATTERN (A B+)\n"
                                             "  DEFINE B AS B.x > Q.x)")
    assert str(err.value).startswith("line 4, column ") and "^" in str(err.value)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()  # another test's session may hold a view of that name
    if active is not None:
        active.catalog.dropTempView("Ticker")
    with pytest.raises(UsageError, match="no DataFrame named 'Ticker' in the notebook"):
        shell.run_cell_magic("sparkcep", "", VSHAPE)


def test_magic_refuses_the_pattern_language_options_for_a_statement(shell):
    from IPython.core.error import UsageError

    for line, why in (("--ts-col rowtime", "its time column is the first ORDER BY column"),
                      ("--type-col kind", "it has no event type column")):
        with pytest.raises(UsageError) as err:
            shell.run_cell_magic("sparkcep", line, VSHAPE)
        assert str(err.value) == f"{line.split()[0]} does not apply to a MATCH_RECOGNIZE statement ({why})"


@pytest.mark.spark
def test_magic_runs_a_statement_on_its_from_dataframe(spark, shell):
    rows = [("ACME", f"2011-04-01 {t}", p, x) for t, p, x in TICKER]
    shell.user_ns["Ticker"] = spark.createDataFrame(rows, "symbol STRING, rowtime STRING, price BIGINT, tax BIGINT") \
        .selectExpr("symbol", "CAST(rowtime AS TIMESTAMP) AS rowtime", "price", "tax")
    value = shell.run_cell_magic("sparkcep", "--output v", VSHAPE)
    assert value is shell.user_ns["v"]
    got = [{k: (v.strftime("%Y-%m-%dT%H:%M:%S.000Z") if hasattr(v, "strftime") else v) for k, v in r.asDict().items()}
           for r in value.collect()]
    assert got == PUBLISHED


@pytest.mark.spark
def test_magic_accepts_a_function_registered_in_the_session(spark, shell):
    """``%%sparkcep`` checks a statement against the active session's functions: a registered UDF in a
    per-row DEFINE runs (Spark computes it before the shuffle)."""
    spark.udf.register("cents", lambda p: None if p is None else 100 * p, "bigint")
    rows = [("ACME", f"2011-04-01 {t}", p, x) for t, p, x in TICKER]
    shell.user_ns["Ticker"] = spark.createDataFrame(rows, "symbol STRING, rowtime STRING, price BIGINT, tax BIGINT") \
        .selectExpr("symbol", "CAST(rowtime AS TIMESTAMP) AS rowtime", "price", "tax")
    value = shell.run_cell_magic("sparkcep", "--output v", VSHAPE.replace(
        "PRICE_UP.price > LAST(PRICE_DOWN.price, 1)", "cents(PRICE_UP.price) > 100 * LAST(PRICE_DOWN.price, 1)"))
    got = [{k: (v.strftime("%Y-%m-%dT%H:%M:%S.000Z") if hasattr(v, "strftime") else v) for k, v in r.asDict().items()}
           for r in value.collect()]
    assert got == PUBLISHED
