"""The ``sparkcep`` command without Spark: check, explain, compile, and errors as messages, not tracebacks."""

from __future__ import annotations

import argparse
import ast as pyast
import subprocess
import sys
from pathlib import Path

import pytest

from sparkcep.cli import build_parser, main

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parent.parent
PAPER = str(FIXTURES / "paper_queries.cep")


def sparkcep(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run the real command in a fresh interpreter, as a user would."""
    return subprocess.run([sys.executable, "-m", "sparkcep.cli", *args], input=stdin, capture_output=True,
                          text=True, timeout=120)


def test_check_paper_queries(capsys):
    assert main(["check", PAPER]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 14 and all(line.startswith("ok  ") for line in lines)


def test_bad_query_exits_2_with_caret_and_no_traceback(tmp_path):
    bad = tmp_path / "bad.cep"
    bad.write_text("PATTERN SEQ(A a, B b)\nWHERE a.x < q.x\nWITHIN 10\n")
    for command in ("check", "explain", "run"):
        extra = ["--input", str(tmp_path)] if command == "run" else []
        done = sparkcep(command, str(bad), *extra)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert done.stderr.splitlines() == [
            "sparkcep: line 2, column 13: unknown variable 'q'",
            "  WHERE a.x < q.x",
            "              ^^^",
        ]


def test_syntax_error_from_stdin():
    done = sparkcep("check", "-", stdin="PATTERN SEQ(A a B b) WITHIN 10")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("sparkcep: line 1, column 17: unexpected 'B'")


def test_explain_prints_plan_lines_for_every_query(capsys):
    assert main(["explain", PAPER, "--sql"]) == 0
    out = capsys.readouterr().out
    assert out.count("r0 := Source[") == 14
    assert out.count("-- Spark SQL filter") == 14
    assert "keys=() -- no key: the operator says its parallelism" in out


def test_explain_inline_text(capsys):
    assert main(["explain", "-e", "PATTERN SEQ(A a, B b) WHERE [id] AND a.x > 1 WITHIN 5"]) == 0
    out = capsys.readouterr().out
    assert "c0 a: type = 'A' AND a.x > 1" in out and "keys=(id)" in out


@pytest.mark.parametrize("command", ["check", "explain"])
def test_the_text_dash_dash_is_a_query_text(command, capsys):
    """``--text=--``: Python 3.11's argparse gives the value "--" as an empty list (a TypeError traceback)."""
    assert main([command, "--text=--"]) == 2
    assert capsys.readouterr().err.startswith("sparkcep: line 1, column 3: unexpected end of input")


def _actions(command: str) -> list[argparse.Action]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]._actions


def _value_options() -> list[tuple[str, str]]:
    """(subcommand, option) for every option of every subcommand that takes one value."""
    return [(name, a.option_strings[-1]) for name in ("check", "explain", "compile", "run", "notebook", "demo")
            for a in _actions(name) if a.option_strings and a.nargs is None and isinstance(a, argparse._StoreAction)]


@pytest.mark.parametrize(("command", "option"), _value_options())
def test_an_option_given_dash_dash_is_that_value_or_a_usage_error(command, option, capsys):
    """``--opt=--`` (Python 3.11's argparse: ``[]``) is the value "--" as any option takes it: a string, or a
    usage error (exit 2) naming the option where "--" is no such value; never a list (a traceback from ``run``
    before or inside Spark, or a job written with ``TS_COL = []``)."""
    assert len(_value_options()) >= 40
    required = {"compile": ["-o", "job.py"], "notebook": ["-o", "n.ipynb"], "run": ["--input", "events"]}
    try:
        args = build_parser().parse_args([command, *required.get(command, []), f"{option}=--"])
    except SystemExit as stop:
        named = capsys.readouterr().err.split("error: argument ")[1].split(": ")[0]
        assert stop.code == 2 and option in named.split("/"), named
        return
    action = next(a for a in _actions(command) if option in a.option_strings)
    assert getattr(args, action.dest) == (action.type("--") if action.type else "--")  # --known-types: ["--"]


def test_compile_writes_a_valid_job(tmp_path, capsys):
    job = tmp_path / "job.py"
    assert main(["compile", "-e", "shop: PATTERN SEQ(A a, B b) WHERE [id] WITHIN 5", "-o", str(job)]) == 0
    source = job.read_text()
    pyast.parse(source)
    assert "applyInPandasWithState" in source and "KEY = ['id']" in source


def test_compile_a_workload_file_writes_one_job(tmp_path, capsys):
    job = tmp_path / "j.py"
    assert main(["compile", PAPER, "-o", str(job)]) == 0
    source = job.read_text()
    pyast.parse(source)
    assert 'WORKLOAD = """' in source and "apply_workload(events, WORKLOAD" in source
    assert source.count('"name": "') >= 14 and "-- sharing across the workload (Sharon)" in source
    assert main(["compile", PAPER, "--query", "nope", "-o", str(job)]) == 2
    assert "no query named 'nope'" in capsys.readouterr().err
    assert main(["compile", str(ROOT / "golden_plans" / "queries.cep"), "--query", "greta_q1", "-o", str(job)]) == 0
    assert 'SPEC = """' in job.read_text() and "WORKLOAD" not in job.read_text()


@pytest.mark.parametrize("text,options,message", [
    ("a: PATTERN SEQ(A x, B y) WITHIN 10 s; b: PATTERN SEQ(A x, C y) WITHIN 10", [], "need one ts kind"),
    ("a: PATTERN SEQ(A x, B y) WITHIN 10; b: PATTERN SEQ(A x, C y) WITHIN 10", ["--collapsed"],
     "--collapsed is for one match query"),
    ("WITH SHEDDING LATENCY 1 s a: PATTERN SEQ(A x, B y) WITHIN 10; b: RETURN COUNT(*) PATTERN SEQ(A x, C+ y) "
     "WITHIN 10", [], "query 'b' aggregates Kleene trends, which are not enumerated"),
    ("RETURN COUNT(*) PATTERN SEQ(A+, B) WITHIN 10", ["--collapsed"], "collapsed output is for match queries"),
])
def test_compile_refuses_clearly(tmp_path, capsys, text, options, message):
    assert main(["compile", "-e", text, *options, "-o", str(tmp_path / "j.py")]) == 2
    assert message in capsys.readouterr().err


def test_notebook_refuses_a_workload_clearly(tmp_path, capsys):
    assert main(["notebook", PAPER, "-o", str(tmp_path / "n.ipynb")]) == 2
    err = capsys.readouterr().err
    assert "a notebook runs one query and the file holds 14" in err and "sparkcep compile WORKLOAD.cep" in err


def test_compile_shedding_and_collapsed_options(tmp_path, capsys):
    job = tmp_path / "j.py"
    text = "PATTERN SEQ(A a, B+ b[], C c) WHERE [id] WITHIN 10"
    assert main(["compile", "-e", text, "-o", str(job)]) == 0
    source = job.read_text()  # no clause, no option: no shedding stage (the admission follows the input anyway)
    assert "shedding_stage(" not in source and "SHEDDING_LATENCY" not in source and "live.admit(None, " in source
    assert main(["compile", "-e", text, "--shedding-latency", "250ms", "--shedding-model", "tree", "-o", str(job)]) == 0
    source = job.read_text()
    assert "SHEDDING_LATENCY = 0.25" in source and "SHEDDING_MODEL = 'tree'" in source
    assert main(["compile", "-e", "WITH SHEDDING LATENCY 2 s " + text, "-o", str(job)]) == 0
    assert "SHEDDING_LATENCY = 2.0" in job.read_text()
    assert main(["compile", "-e", text, "--collapsed", "-o", str(job)]) == 0
    assert '"collapsed": true' in job.read_text()


@pytest.mark.parametrize("args,message", [
    (["check", "/no/such/file.cep"], "no such query file"),
    (["check"], "give a query file"),
])
def test_usage_errors(args, message, capsys):
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_job_refuses_input_of_the_other_ts_kind():
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    from sparkcep import CEPError
    from sparkcep.spark.io import check_ts_kind

    numeric = StructType([StructField("type", StringType()), StructField("ts", LongType())])
    stamped = StructType([StructField("type", StringType()), StructField("ts", TimestampType())])
    check_ts_kind(numeric, "ts", "numeric")
    check_ts_kind(stamped, "ts", "timestamp")
    with pytest.raises(CEPError, match="compiled for timestamp ts, but 'ts' is numeric"):
        check_ts_kind(numeric, "ts", "timestamp")


def test_compile_declares_the_ts_kind(tmp_path, capsys):
    job = tmp_path / "job.py"
    assert main(["compile", "-e", "p: PATTERN SEQ(A a, B b) WITHIN 10 seconds", "--ts-unit", "s", "-o", str(job)]) == 0
    source = job.read_text()
    assert "TS_KIND = 'numeric'" in source and '"window": 10' in source
    assert main(["compile", "-e", "p: PATTERN SEQ(A a, B b) WITHIN 10 seconds", "-o", str(job)]) == 0
    assert "TS_KIND = 'timestamp'" in job.read_text() and '"window": 10000' in job.read_text()


def test_explain_hides_implicit_variables(capsys):
    assert main(["explain", "-e", "RETURN COUNT(*) PATTERN SEQ(ANY(B, C), A+, B, A) WITHIN 5"]) == 0
    assert "pattern SEQ(ANY(B, C), A+, B, A)" in capsys.readouterr().out
