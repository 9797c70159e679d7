"""Generated code never interprets query text: string literals, names, columns and file names that are hostile
(quotes of every kind, backslashes, escapes, NUL, newlines, unicode, ``${...}``) go into the job file, the
workload job and the notebook as literals that evaluate to exactly the value, into Spark SQL as literals that
Spark reads back as exactly the value, and never change the code around them.

The property tests are pure (no JVM): the generated sources compile, their code is the code of a job made
from a harmless query (every literal masked), and each value they carry round-trips.  The Spark part runs
the job file, the notebook's cells and ``CompiledQuery.apply`` on real files and compares them with the
oracle; a payload that would run a command (``touch MARKER``) if it were read as code never does.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import sqlglot
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from sqlglot import exp

import sparkcep
from sparkcep.compiler.codegen.quote import py_literal
from sparkcep.compiler.codegen.sql import DIALECT
from sparkcep.ir.errors import CEPError
from sparkcep.ir.printer import format_query
from sparkcep.ir.serde import to_data
from sparkcep.oracles.match import match_rows
from sparkcep.spark.results import canonical, epoch_ms_rows

ROOT = Path(__file__).resolve().parent.parent

#: Pieces that have broken generated code or SQL: quotes, Python/SQL/JSON escapes, Spark's ${var}, fences.
PIECES = ["'", '"', '"""', "'''", "''", "\\", "\\'", '\\"', "\\x41", "\\u00e9", "\\N", "\\0", "\\012", "\x00",
          "\x0012", "\n", "\r", "\r\n", "\t", "\x1a", "\x7f", "\u2028", "\x85", "${x}", "${spark.app.name}", "$",
          "`", "```", "{", "}", "{0}", "%s", "#", "--", "/*", "*/", ";", " OR '1'='1", "é", "€", "😀", "x", "A"]
hostile = st.lists(st.one_of(st.sampled_from(PIECES), st.characters(exclude_categories=("Cs",))),
                   max_size=8).map("".join)
#: Attribute names: the language's NAME, including words that are SQL keywords.
attribute = st.one_of(st.sampled_from(["null", "true", "false", "end", "case", "not", "from", "select", "load",
                                       "interval", "and", "x"]),
                      st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True))
type_name = st.from_regex(r"[A-Z][A-Za-z0-9_]{0,5}(-[A-Z][A-Za-z0-9_]{0,3})?", fullmatch=True)
#: Column names (--type-col, --ts-col): any text but ``${`` (refused, see below) and an empty name.
column_name = hostile.filter(lambda s: s.strip() != "" and "${" not in s)

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def cep_string(value: str) -> str:
    """``value`` as a string literal of the query language (a quote doubled)."""
    return "'" + value.replace("'", "''") + "'"


def query_text(literals: list[str], attr: str, types=("A", "B"), name: str = "q") -> str:
    cond = " OR ".join(f"a.{attr} = {cep_string(v)}" for v in literals)
    return (f"{name}: PATTERN SEQ({types[0]} a, {types[1]} b) WHERE [id] AND ({cond}) WITHIN 10 "
            f"RETURN a.id AS id, b.ts AS bts")


def compiled(text: str, **options) -> sparkcep.CompiledQuery:
    try:
        return sparkcep.compile(text, **options)
    except CEPError:  # e.g. an attribute name the grammar reads as a keyword there
        assume(False)


def skeleton(source: str) -> str:
    """The code of ``source`` with every literal value masked: what runs, whatever the values."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant):
            node.value = None
    return ast.dump(tree)


def assignments(source: str) -> dict[str, object]:
    """Module-level ``NAME = literal`` (and ``A, B = literal, literal``) of a generated source, evaluated."""
    out = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            if isinstance(target, ast.Name):
                out[target.id] = value
            elif isinstance(target, ast.Tuple):
                out.update({t.id: v for t, v in zip(target.elts, value, strict=True)})
    return out


def call_args(source: str, method: str) -> list:
    """The literal first arguments of every call of ``method(...)`` or ``x.method(...)`` in ``source``."""
    return [ast.literal_eval(n.args[0]) for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)
            and method in (getattr(n.func, "attr", None), getattr(n.func, "id", None))]


def sql_strings_and_columns(sql: str) -> tuple[set[str], set[str]]:
    tree = sqlglot.parse_one(sql, read=DIALECT)
    return ({lit.this for lit in tree.find_all(exp.Literal) if lit.is_string},
            {c.name for c in tree.find_all(exp.Column)})


@functools.cache
def reference_skeleton(kind: str):
    """The skeleton of a job, workload job or notebook made from harmless queries."""
    if kind == "job":
        return skeleton(sparkcep.compile(query_text(["x"], "s"), type_col="t", ts_col="u").job_source())
    if kind == "workload":
        text = ";\n".join(query_text(["x"], "s", name=f"q{k}") for k in range(2))
        return skeleton(sparkcep.compile_shared_workload(text).job_source(name="queries"))
    return [skeleton(c) for c in notebook_code(sparkcep.compile(query_text(["x"], "s"), ts_col="t"),
                                               input_path="events/")]


def job_of(literals, attr, types, type_col, ts_col, name) -> tuple[sparkcep.CompiledQuery, str]:
    q = compiled(query_text(literals, attr, types, name), type_col=type_col, ts_col=ts_col)
    return q, q.job_source()


# --------------------------------------------------------------------------------------------- no JVM


def test_py_literal_round_trips_and_refuses_what_has_no_literal():
    for value in ["", "\n", '"', '""', '"""', "\\", "\\\n", "a\n\x00\r\t\u2028\ud800\"", ["a", ("b",)], {"k": 1.5},
                  None, True, 3]:
        source = py_literal(value)
        assert ast.literal_eval(source) == value
        assert isinstance(ast.parse(source, mode="eval").body, (ast.Constant, ast.List, ast.Tuple, ast.Dict))
    with pytest.raises(ValueError):
        py_literal(float("inf"))
    with pytest.raises(TypeError):
        py_literal(object())


@SETTINGS
@given(value=st.one_of(hostile, st.text()))
def test_py_literal_of_any_text(value):
    source = py_literal(value)
    assert ast.literal_eval(source) == value
    assert "\x00" not in source and "\r" not in source


@SETTINGS
@given(literals=st.lists(hostile, min_size=1, max_size=3), attr=attribute, types=st.tuples(type_name, type_name),
       type_col=column_name, ts_col=column_name, name=st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True))
def test_job_carries_every_value_as_a_literal(literals, attr, types, type_col, ts_col, name):
    assume(len({type_col, ts_col, attr, "id"}) == 4 and len(set(types)) == 2)
    q, source = job_of(literals, attr, types, type_col, ts_col, name)
    compile(source, "job.py", "exec")
    assert skeleton(source) == reference_skeleton("job")  # the code is the template's, whatever the values

    doc = ast.get_docstring(ast.parse(source), clean=False)
    assert doc.splitlines()[0] == f"sparkcep job: {name}."
    assert textwrap.indent(format_query(q.query).strip(), "    ") in doc
    assert textwrap.indent(q.explain(), "    ") in doc
    values = assignments(source)
    assert json.loads(values["SPEC"]) == json.loads(json.dumps(to_data(q.spec())))
    assert (values["TYPE_COL"], values["TS_COL"]) == (type_col, ts_col)
    assert values["KEY"] == ["id"] and attr in values["ATTRIBUTES"]
    assert call_args(source, "appName") == [f"sparkcep: {name}"]

    sql = values["FILTER_SQL"]
    assert sql.strip() == q.sql().strip()
    strings, columns = sql_strings_and_columns(sql)
    assert set(literals) | set(types) <= strings
    assert {type_col, ts_col, attr, "id"} <= columns


@settings(SETTINGS, max_examples=50)
@given(literals=st.lists(hostile, min_size=2, max_size=2), file_stem=hostile.filter(bool), type_col=column_name)
def test_workload_job_carries_every_value_as_a_literal(literals, file_stem, type_col):
    assume(type_col not in ("ts", "id", "s"))
    text = ";\n".join(query_text([v], "s", name=f"q{k}") for k, v in enumerate(literals))
    w = sparkcep.compile_shared_workload(text, type_col=type_col)
    source = w.job_source(name=file_stem)
    compile(source, "job.py", "exec")
    assert skeleton(source) == reference_skeleton("workload")

    assert ast.get_docstring(ast.parse(source), clean=False).startswith(f"sparkcep job: {file_stem}.\n")
    values = assignments(source)
    workload = json.loads(values["WORKLOAD"])
    assert workload == json.loads(json.dumps(w.job_plan()[0]))
    assert values["TYPE_COL"] == type_col
    assert call_args(source, "appName") == [f"sparkcep: {file_stem}"]
    for alone in workload["alone"]:
        strings, columns = sql_strings_and_columns(alone["filter_sql"])
        assert strings & set(literals) and type_col in columns


def notebook_code(q: sparkcep.CompiledQuery, **options) -> list[str]:
    from sparkcep.notebook import notebook

    pytest.importorskip("nbformat")
    return [c.source for c in notebook(q, **options).cells if c.cell_type == "code"]


@SETTINGS
@given(literals=st.lists(hostile, min_size=1, max_size=3), attr=attribute, ts_col=column_name, input_path=hostile,
       master=hostile)
def test_notebook_cells_carry_every_value_as_a_literal(literals, attr, ts_col, input_path, master):
    assume(ts_col not in ("ts", "type", "id", attr) and input_path)
    q = compiled(query_text(literals, attr), ts_col=ts_col)
    cells = notebook_code(q, input_path=input_path, master=master)
    for cell in cells:
        compile(cell, "cell", "exec")
    assert [skeleton(c) for c in cells] == reference_skeleton("notebook")

    values = assignments("\n".join(cells))
    assert values["INPUT"] == input_path
    assert format_query(sparkcep.compile(values["QUERY"]).query) == format_query(q.query)
    assert call_args(cells[0], "local_session") == [master]
    compile_call = next(n for n in ast.walk(ast.parse(cells[2])) if isinstance(n, ast.Call)
                        and isinstance(n.func, ast.Attribute) and n.func.attr == "compile")
    assert {k.arg: ast.literal_eval(k.value) for k in compile_call.keywords} == {"ts_col": ts_col}


def test_the_notebook_payload_runs_nothing(tmp_path):
    """The issue's payload: a literal that closes ``QUERY = \"\"\"...\"\"\"`` and calls ``os.system``.  Executing the
    QUERY cell (the Spark calls stubbed) only binds QUERY, to the query text."""
    marker = tmp_path / "MARKER"
    payload = '\"\"\"+str(__import__("os").system("touch ' + str(marker) + '"))+\"\"\"'
    q = sparkcep.compile(query_text([payload], "s"))
    cell = notebook_code(q)[2]
    stub = SimpleNamespace(compile=lambda text, **options: SimpleNamespace(
        apply=lambda events: SimpleNamespace(printSchema=lambda: None)))
    namespace = {"sparkcep": stub, "events": None}
    exec(compile(cell, "cell", "exec"), namespace)  # noqa: S102 - the point: run the notebook's code
    assert not marker.exists()
    assert format_query(sparkcep.compile(namespace["QUERY"]).query) == format_query(q.query)


def test_cli_compile_and_notebook_with_hostile_names(tmp_path):
    """Through the CLI: a workload file whose name holds quotes, a --type-col with a triple quote, a notebook
    --input with quotes and a backslash: the files written compile and carry the values."""
    from sparkcep.cli import main

    pytest.importorskip("nbformat")
    import nbformat

    source = tmp_path / 'shop """ it\'s.cep'
    source.write_text(query_text(["x"], "s", name="a") + ";\n" + query_text(['q"""q'], "s", name="b"))
    job = tmp_path / "job.py"
    assert main(["compile", str(source), "--type-col", 'ty"""pe', "-o", str(job)]) == 0
    text = job.read_text()
    compile(text, "job.py", "exec")
    assert ast.get_docstring(ast.parse(text)).startswith('sparkcep job: shop """ it\'s.\n')
    assert assignments(text)["TYPE_COL"] == 'ty"""pe'

    nb, inbox = tmp_path / "job.ipynb", 'in """\\ it\'s/'
    assert main(["notebook", "-e", query_text(['"""+str(1)+"""'], "s"), "--input", inbox, "-o", str(nb)]) == 0
    cells = [c.source for c in nbformat.read(str(nb), as_version=4).cells if c.cell_type == "code"]
    values = assignments("\n".join(cells))
    assert values["INPUT"] == inbox and "'\"\"\"+str(1)+\"\"\"'" in values["QUERY"]


def test_a_column_name_spark_would_substitute_is_refused():
    with pytest.raises(CEPError, match="variable"):
        sparkcep.compile(query_text(["x"], "s"), type_col="t${x}").job_source()


# ------------------------------------------------------------------------------------------ Spark, real files

#: Literals that broke the job (SQL injection, wrong results, invalid Python) or the notebook (a command run).
def crafted(marker: Path) -> list[str]:
    return ["x' OR '1'='1", "it's", "a\\b", "\\x41", "\\u00e9", 'q"""q', "\\N", "nul\x00012", "'''",
            '"""+str(__import__("os").system("touch ' + str(marker) + '"))+"""', "${spark.app.name}", "é\n€"]


def hostile_events(literals: list[str]) -> list[dict]:
    """Per literal k: an A carrying it and a B with key k (one match each); then A's carrying what a wrongly
    escaped literal reads as (each with its own B), which must not match."""
    decoys = ["x", "it", "ab", "A", "é", "N", "nul", "nul\n", "pyspark-shell", "", "a\b", "q", "é\\n€"]
    events = []
    for k, s in enumerate(literals + decoys):
        events += [{"type": "A", "ts": 3 * k, "id": k, "null": s}, {"type": "B", "ts": 3 * k + 1, "id": k}]
    return events


def job_env() -> dict:
    paths = [str(ROOT), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "PYSPARK_PYTHON": sys.executable}


@pytest.mark.spark
@pytest.mark.slow
def test_hostile_literals_give_the_oracle_rows_everywhere(spark, tmp_path):
    """One query ORing a dozen hostile literals (on an attribute named ``null``): the job file (its own process),
    the notebook's cells (executed here) and ``CompiledQuery.apply`` each give exactly the oracle's rows, and
    the notebook payload's marker file never appears."""
    marker = tmp_path / "MARKER"
    literals = crafted(marker)
    events = hostile_events(literals)
    inbox = tmp_path / "in's \"dir\""
    inbox.mkdir()
    (inbox / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    text = query_text(literals, "null")
    q = sparkcep.compile(text)
    expected = match_rows(q.query, events, ["type", "ts", "id", "null"])
    assert sorted(r["id"] for r in expected) == list(range(len(literals)))

    df = spark.read.schema("type STRING, ts BIGINT, id BIGINT, `null` STRING").json(str(inbox))
    assert canonical(epoch_ms_rows(q.apply(df))) == canonical(expected)

    job, out = tmp_path / "job.py", tmp_path / "out"
    job.write_text(q.job_source())
    done = subprocess.run([sys.executable, str(job), "--input", str(inbox), "--output", str(out),
                           "--shuffle-partitions", "2"], env=job_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for f in sorted(out.glob("part-*")) for line in f.read_text().splitlines() if line]
    assert canonical(rows) == canonical(expected)

    namespace: dict = {}
    for cell in notebook_code(q, input_path=str(inbox)):
        exec(compile(cell, "cell", "exec"), namespace)  # noqa: S102 - the point: run the notebook's code
    assert canonical(epoch_ms_rows(namespace["result"])) == canonical(expected)
    assert not marker.exists()
