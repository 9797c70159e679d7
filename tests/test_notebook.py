"""``sparkcep notebook``: the CLI writes a notebook that a Jupyter kernel runs top to bottom, and its results
cell counts what the oracle finds; the ``%%sparkcep`` magic in an IPython shell (no kernel) equals the oracle."""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

import sparkcep
from sparkcep.cli import main
from sparkcep.oracles.match import match_rows
from sparkcep.spark.results import canonical, epoch_ms_rows

nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parent.parent
QUERY = """\
rising:
PATTERN SEQ(A a, B+ b[], C c)
WHERE [id] AND b[i].x >= b[i-1].x AND a.x < c.x
WITHIN 15
RETURN a.id AS id, a.ts AS a_ts, c.ts AS c_ts, count(b[].x) AS n_b
"""
COLUMNS = ["type", "ts", "id", "x"]


def small_stream(n: int = 120, seed: int = 3) -> list[dict]:
    rng = random.Random(seed)
    return [{"type": rng.choice("AABBBC"), "ts": ts, "id": rng.randrange(3), "x": rng.randrange(10)}
            for ts in range(n)]


def oracle(text: str, events: list[dict]) -> list[dict]:
    return match_rows(sparkcep.compile(text).query, events, COLUMNS)


def test_notebook_cells(tmp_path):
    """The cells a person would write: title and query, set-up, source, the job, the results."""
    path = tmp_path / "job.ipynb"
    assert main(["notebook", "-e", QUERY, "--input", "events.jsonl", "-o", str(path)]) == 0
    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert [c.cell_type for c in nb.cells][:2] == ["markdown", "markdown"]
    assert "PATTERN SEQ(A a, B+ b[], C c)" in nb.cells[0].source and "r4 := Sequence" in nb.cells[1].source
    assert "spark = local_session('local[*]')" in code[0]
    assert "INPUT = 'events.jsonl'" in code[1] and (
        "read_validated(spark, INPUT, 'json', 'type', 'ts', attributes=COLUMNS, needs=NEEDS)" in code[1])
    assert "q = sparkcep.compile(QUERY)" in code[2] and "result = q.apply(events)" in code[2]
    assert code[3].splitlines()[-1] == "result.count()"


def test_notebook_options_and_errors(tmp_path, capsys):
    path = tmp_path / "job.ipynb"
    assert main(["notebook", "-e", "PATTERN SEQ(A a, B b) WITHIN 3 seconds", "--ts-unit", "s", "--ts-col", "t",
                 "--input", "ev.csv", "-o", str(path)]) == 0
    code = [c.source for c in nbformat.read(str(path), as_version=4).cells if c.cell_type == "code"]
    assert "read_validated(spark, INPUT, 'csv', 'type', 't', attributes=COLUMNS, needs=NEEDS)" in code[1]
    assert "sparkcep.compile(QUERY, ts_col='t', ts_unit='s')" in code[2]
    assert main(["notebook", "-e", "PATTERN SEQ(A a, B b) WHERE c.x > 1 WITHIN 3", "-o", str(path)]) == 2
    assert "unknown variable" in capsys.readouterr().err


@pytest.mark.spark
@pytest.mark.slow
def test_cli_notebook_executes_top_to_bottom(tmp_path, monkeypatch):
    """The notebook ``sparkcep notebook`` writes runs in a real Jupyter kernel (its own JVM), and its results
    cell's value is the oracle's number of matches."""
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    events = small_stream()
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (tmp_path / "query.cep").write_text(QUERY)
    path = tmp_path / "job.ipynb"
    assert main(["notebook", str(tmp_path / "query.cep"), "--input", "events.jsonl", "-o", str(path)]) == 0

    paths = [str(ROOT), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))  # the kernel and its Spark workers import sparkcep
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    nb = nbformat.read(str(path), as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError on the first failing cell

    results = nb.cells[-1]
    values = [o["data"]["text/plain"] for o in results.outputs if o.output_type == "execute_result"]
    expected = oracle(QUERY, events)
    assert len(expected) > 5
    assert values == [str(len(expected))]
    shown = "".join(o.get("text", "") for o in results.outputs if o.output_type == "stream")
    assert "|id |a_ts|c_ts|n_b|" in shown  # result.show(truncate=False)


@pytest.fixture()
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "sparkcep.magic")
    yield ip
    InteractiveShell.clear_instance()


@pytest.mark.spark
def test_magic_applies_the_cell_to_a_dataframe(spark, shell):
    events = small_stream()
    shell.user_ns["events"] = spark.createDataFrame([tuple(e[c] for c in COLUMNS) for e in events],
                                                    "type STRING, ts BIGINT, id BIGINT, x BIGINT")
    value = shell.run_cell_magic("sparkcep", "events --output found", QUERY)
    assert value is shell.user_ns["found"]
    expected = oracle(QUERY, events)
    assert len(expected) > 2
    assert canonical(epoch_ms_rows(shell.user_ns["found"])) == canonical(expected)


@pytest.mark.spark
def test_magic_on_a_rate_stream_stamps_results_with_their_arrival(spark, shell):
    """``--arrival-col``: a stream's results carry ``_arrival_ms`` (the arrival of their events); the hidden
    arrival column the operator gets is no attribute of the match (``t`` is: the input's own column)."""
    from pyspark.sql import functions as F

    rate = spark.readStream.format("rate").load()
    shell.user_ns["ticks"] = rate.select(F.lit("A").alias("type"), F.col("value").alias("ts"),
                                         (F.col("value") % 3).alias("id"), F.col("timestamp").alias("t"))
    value = shell.run_cell_magic("sparkcep", "ticks --output live --arrival-col t",
                                 "PATTERN SEQ(A a, A b) WHERE [id] WITHIN 5")
    assert value.isStreaming and value.columns[-1] == "_arrival_ms" and "a_t" in value.columns
    assert not [c for c in value.columns if "sparkcep" in c], value.columns


@pytest.mark.spark
def test_magic_live_cell_follows_a_directory_until_interrupted(spark, shell, tmp_path, monkeypatch):
    """``%%sparkcep --stream DIR``: the cell follows the directory, picks up a file written after it started and,
    on the kernel's interrupt (SIGINT), stops after the micro-batch under way; the results so far, bound to
    ``--output``, are the oracle's over both files.  Prepared as ``run --stream`` is (sparkcep.live): with
    shedding (a loose bound: nothing dropped), the admission control is the stage's (its controller counts the
    admission's backlog, and the admission is bounded by it), and the query is applied with its checkpoint
    (a checkpoint holding state resumes with the grouping it was made with)."""
    from sparkcep.spark import shedding as shedding_module

    admissions, applied = [], []
    made, apply = shedding_module.FileAdmission.__init__, sparkcep.CompiledQuery.apply

    def admission(self, *args, **kwargs):
        made(self, *args, **kwargs)
        admissions.append(self)

    def applying(self, *args, **kwargs):
        applied.append(kwargs.get("checkpoint"))
        return apply(self, *args, **kwargs)

    monkeypatch.setattr(shedding_module.FileAdmission, "__init__", admission)
    monkeypatch.setattr(sparkcep.CompiledQuery, "apply", applying)
    events = small_stream()
    inbox, checkpoint = tmp_path / "in", tmp_path / "ck"
    inbox.mkdir()
    halves = [events[:60], events[60:]]
    (inbox / "part0.json").write_text("".join(json.dumps(e) + "\n" for e in halves[0]))
    expected = oracle(QUERY, events)
    finished = threading.Event()

    def feed_then_interrupt() -> None:
        deadline = time.monotonic() + 600
        while not (checkpoint / "commits" / "0").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        (inbox / "part1.json").write_text("".join(json.dumps(e) + "\n" for e in halves[1]))
        while not finished.is_set() and time.monotonic() < deadline and not any(
                int(f.name) >= 1 for f in (checkpoint / "commits").iterdir() if f.name.isdigit()):
            time.sleep(0.2)
        if not finished.is_set():
            os.kill(os.getpid(), signal.SIGINT)  # the kernel's interrupt

    previous = signal.signal(signal.SIGINT, lambda *_: None)  # never pytest's own interrupt, whatever the timing
    feeder = threading.Thread(target=feed_then_interrupt, daemon=True)
    feeder.start()
    try:
        value = shell.run_cell_magic("sparkcep", f"--stream {inbox} --output live --checkpoint {checkpoint} "
                                                 "--schema 'type STRING, ts BIGINT, id BIGINT, x BIGINT'",
                                     "WITH SHEDDING LATENCY 3600 s\n" + QUERY)
    finally:
        finished.set()
        feeder.join(timeout=30)
        signal.signal(signal.SIGINT, previous)
    assert value is shell.user_ns["live"] and not value.isStreaming
    assert len(expected) > 2 and canonical(epoch_ms_rows(value)) == canonical(expected)
    assert applied == [str(checkpoint)]
    assert len(admissions) == 1 and admissions[0].shedding is not None
    assert admissions[0].shedding.feeder is admissions[0] and admissions[0].shedding.source == str(inbox)


def test_magic_errors_are_one_message(shell):
    from IPython.core.error import UsageError

    shell.user_ns["events"] = [1, 2]
    with pytest.raises(UsageError, match="no DataFrame named 'nothing'"):
        shell.run_cell_magic("sparkcep", "nothing", QUERY)
    with pytest.raises(UsageError, match="is a list, not a Spark DataFrame"):
        shell.run_cell_magic("sparkcep", "events", QUERY)
    with pytest.raises(UsageError, match="unknown arguments --bogus"):
        shell.run_cell_magic("sparkcep", "events --bogus", QUERY)
    with pytest.raises(UsageError, match="--once, --checkpoint, --sink and --schema are for --stream DIR"):
        shell.run_cell_magic("sparkcep", "events --once", QUERY)
    with pytest.raises(UsageError, match="'nowhere' is not a directory"):
        shell.run_cell_magic("sparkcep", "--stream nowhere", QUERY)


def test_magic_live_cell_checks_its_input_before_staging_it(shell, tmp_path):
    """``%%sparkcep --stream DIR`` checks the directory's columns as ``sparkcep run --stream`` does
    (sparkcep.live, :func:`sparkcep.preflight.check_run_input`), before anything is staged or Spark is asked:
    one message with the caret in the cell, and no staging directory in the checkpoint, which would bind it to
    that input (a corrected cell over another directory would be refused)."""
    from IPython.core.error import UsageError

    inbox, checkpoint = tmp_path / "in", tmp_path / "ck"
    inbox.mkdir()
    (inbox / "part0.json").write_text(json.dumps({"type": "A", "ts": 1, "id": 1}) + "\n")  # no x
    with pytest.raises(UsageError) as err:
        shell.run_cell_magic("sparkcep", f"--stream {inbox} --checkpoint {checkpoint}", QUERY)
    assert f"the input {inbox}" in str(err.value) and "^" in str(err.value), str(err.value)
    assert not (checkpoint / "_admitted").exists()


@pytest.mark.spark
def test_magic_query_error_points_into_the_cell(spark, shell):
    from IPython.core.error import UsageError

    shell.user_ns["events"] = spark.createDataFrame([("A", 1, 1, 1)], "type STRING, ts BIGINT, id BIGINT, x BIGINT")
    with pytest.raises(UsageError) as err:
        shell.run_cell_magic("sparkcep", "events", "PATTERN SEQ(A a, B b)\nWHERE a.x < d.x\nWITHIN 10")
    message = str(err.value)
    assert "line 2" in message and "^" in message and "d" in message
