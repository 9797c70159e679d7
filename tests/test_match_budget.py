"""The match budget (sparkcep.runtime_udfs.match.budget): a match query stops with one message once one
partition builds more matches (or holds more partial matches) than its budget, on every path that builds
them (active instance stacks, NFA^b runs, the columnar construction, the Spark operator's partitions), and
runs exactly as without a budget up to it."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import sparkcep
from sparkcep.ir.errors import CEPError
from sparkcep.oracles.match import match_rows
from sparkcep.runtime_udfs.match import columnar as match_columnar
from sparkcep.runtime_udfs.match import engine as match_engine
from sparkcep.runtime_udfs.match.budget import (
    Budget,
    MatchBudgetError,
    default_max_matches,
    raised_message,
    resolve_max_matches,
)
from sparkcep.spark.results import canonical

KLEENE = "PATTERN SEQ(A+ a[], B b) WHERE [id] WITHIN 1000 RETURN a[1].ts AS first, a[a.len].ts AS last, b.ts AS b"


def kleene_events(n: int, key: int = 1, start: int = 1) -> list[dict]:
    """n A's then a B, all of one key: 2^n - 1 matches of :data:`KLEENE`."""
    evs = [{"type": "A", "ts": start + i, "id": key, "x": i} for i in range(n)]
    return [*evs, {"type": "B", "ts": start + n, "id": key, "x": 0}]


def run(spec, events, budget=None, batches=None):
    """The engine's rows over ``events``: one flush (batch), or ``batches`` micro-batches each advanced to its
    last ts with a fresh budget (streaming)."""
    state = match_engine.init_state()
    if batches is None:
        match_engine.step(spec, state, events)
        return match_engine.advance(spec, state, math.inf, None if budget is None else Budget(budget))[1]
    rows = []
    size = math.ceil(len(events) / batches)
    for i in range(0, len(events), size):
        part = events[i:i + size]
        match_engine.step(spec, state, part)
        rows += match_engine.advance(spec, state, part[-1]["ts"], None if budget is None else Budget(budget))[1]
    return rows + match_engine.advance(spec, state, math.inf, None if budget is None else Budget(budget))[1]


@pytest.mark.parametrize("batches", [None, 3])
def test_kleene_under_any_match_stops_exactly_past_the_budget(batches):
    q = sparkcep.compile(KLEENE)
    spec, events = q.spec(), kleene_events(7)
    matches = 2**7 - 1
    assert match_engine.engines(spec)[0][1] == "sase_ssc"
    # up to the budget: every match, as the oracle has them
    got = run(spec, events, matches, batches)
    assert canonical(got) == canonical(match_rows(q.query, events))
    assert len(got) == matches
    with pytest.raises(MatchBudgetError, match=r"more than 126 matches.*collapsed.*RETURN COUNT\(\*\)"):
        run(spec, events, matches - 1, batches)


def test_the_budget_stops_before_the_matches_are_built():
    """28 A's and a B have 2^28 - 1 matches (hours and gigabytes): a budget of 1,000 stops at the 1,001st."""
    state = match_engine.init_state()
    spec = sparkcep.compile(KLEENE).spec()
    match_engine.step(spec, state, kleene_events(28))
    budget = Budget(1000)
    with pytest.raises(MatchBudgetError):
        match_engine.advance(spec, state, math.inf, budget)
    assert budget.used == 1001


def test_postponed_matches_count():
    """Matches waiting for a negated end are counted when built, not when released."""
    q = sparkcep.compile("PATTERN SEQ(A+ a[], B b, NOT C c) WHERE [id] WITHIN 1000 RETURN b.ts AS b")
    spec, events = q.spec(), kleene_events(5)
    assert canonical(run(spec, events, 31)) == canonical(match_rows(q.query, events))
    state = match_engine.init_state()
    match_engine.step(spec, state, events)
    with pytest.raises(MatchBudgetError):
        match_engine.advance(spec, state, events[-1]["ts"], Budget(30))  # built and postponed, not released


@pytest.mark.parametrize("batches", [None, 2])
def test_runs_engine_results(batches):
    """skip_till_next_match (NFA^b runs): A B A B ... give a match per pair, one live run at a time."""
    q = sparkcep.compile("PATTERN SEQ(A a, B b) USING skip_till_next_match WHERE [id] WITHIN 1000 "
                         "RETURN a.ts AS a, b.ts AS b")
    spec = q.spec()
    events = [{"type": t, "ts": i + 1, "id": 1} for i, t in enumerate("AB" * 9)]
    assert match_engine.engines(spec)[0][1] == "nfa_b_runs"
    most = 9 if batches is None else 5  # streaming: per micro-batch (4 matches in the first, 5 in the second)
    got = run(spec, events, most, batches)
    assert canonical(got) == canonical(match_rows(q.query, events))
    with pytest.raises(MatchBudgetError, match=f"more than {most - 1} matches"):
        run(spec, events, most - 1, batches)


def test_runs_engine_partial_matches():
    """A repeated group under skip_till_any_match clones runs (partial matches) without completing any: their
    number held at once is bounded too."""
    q = sparkcep.compile("PATTERN SEQ((SEQ(A a, B b))+, C c) WHERE [id] WITHIN 1000 RETURN c.ts AS c")
    spec = q.spec()
    events = [{"type": t, "ts": i + 1, "id": 1} for i, t in enumerate("ABABABAB")]
    assert match_engine.engines(spec)[0][1] == "nfa_b_runs"
    state, peak = match_engine.init_state(), 0
    for ev in events:  # one event per advance: the live runs after each
        match_engine.step(spec, state, [ev])
        match_engine.advance(spec, state, ev["ts"])
        peak = max(peak, len(state.alts[0].runs))
    assert peak > len(events)
    assert run(spec, events, peak) == [] == match_rows(q.query, events)
    with pytest.raises(MatchBudgetError, match=f"more than {peak - 1} partial matches"):
        run(spec, events, peak - 1)


def test_columnar_chains():
    q = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 1000 RETURN a.ts AS a, b.ts AS b")
    cc = match_columnar.columnar(q.spec())
    assert cc is not None
    k = 12  # k A's then k B's of one key: k^2 matches
    ts = np.arange(2 * k)
    mask = np.array([1] * k + [2] * k)
    ids = np.zeros(2 * k, dtype=np.int64)
    assert len(cc(ids, ts, mask, None, Budget(k * k))) == k * k == len(cc(ids, ts, mask))
    with pytest.raises(MatchBudgetError, match=f"more than {k * k - 1} matches"):
        cc(ids, ts, mask, None, Budget(k * k - 1))
    # sliced construction (max_chains): counted slice by slice
    small = match_columnar.columnar(q.spec(), max_chains=10)
    with pytest.raises(MatchBudgetError):
        small(ids, ts, mask, None, Budget(k * k - 1))


@pytest.mark.parametrize("text", [KLEENE, "PATTERN SEQ(A a, B b) WHERE [id] WITHIN 1000 RETURN a.ts AS a, b.ts AS b"])
def test_operator_counts_every_key_of_a_partition(text):
    """MatchOperator.run_table (engine and columnar paths): one budget for every key of the partition."""
    import pyarrow as pa
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sparkcep.spark.operator import MatchOperator

    q = sparkcep.compile(text)
    spec = q.spec()
    events = kleene_events(4, key=1) + kleene_events(4, key=2, start=100)
    per_key = len(match_rows(q.query, kleene_events(4)))
    schema = StructType([StructField("type", StringType()), StructField("ts", LongType()),
                         StructField("id", LongType()), StructField("_mask", LongType())])
    bits = {"A": 1, "B": 2}
    table = pa.table({"type": [e["type"] for e in events], "ts": [e["ts"] for e in events],
                      "id": [e["id"] for e in events], "_mask": [bits[e["type"]] for e in events]})
    got = MatchOperator(spec, schema, max_matches=2 * per_key).run_table(table).to_pylist()
    assert canonical(got) == canonical(match_rows(q.query, events))
    with pytest.raises(MatchBudgetError):
        MatchOperator(spec, schema, max_matches=2 * per_key - 1).run_table(table)
    assert len(MatchOperator(spec, schema, max_matches=0).run_table(table)) == 2 * per_key  # 0: no limit


def test_default_and_resolution():
    assert default_max_matches(8, memory=1 << 30) == (1 << 30) // 4 // (400 + 8 * 120)
    assert default_max_matches(8, memory=1 << 20) == 100_000  # never below the floor
    assert default_max_matches(8) >= 100_000  # this machine's memory
    assert resolve_max_matches(0, 3) is None
    assert resolve_max_matches(5, 3) == 5
    with pytest.raises(CEPError):
        resolve_max_matches(-1, 3)


def test_message_found_in_the_drivers_error_text():
    message = "match budget exceeded: more than 10 matches in one partition (...); use collapsed output"
    text = ("org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n  File ...\n"
            f"sparkcep.runtime_udfs.match.budget.MatchBudgetError: {message}\n SQLSTATE: 38000\n\tat org.apache")
    assert raised_message(RuntimeError(text)) == message
    assert raised_message(RuntimeError("ValueError: match budget exceeded: no")) is None
    assert raised_message(MatchBudgetError("x")) == "x"


@pytest.mark.spark
def test_apply_budget_option_and_spark_conf(spark):
    """``compile(..., match_budget=N)`` and the session's ``spark.sparkcep.maxMatches`` (what a generated job
    gets from ``spark-submit --conf``) bound a partition's matches on Spark; the driver's error names it."""
    from sparkcep.spark.operator import MAX_MATCHES_CONF
    from sparkcep.spark.results import epoch_ms_rows

    events = kleene_events(4)  # 15 matches
    df = spark.createDataFrame(events)
    q = sparkcep.compile(KLEENE, match_budget=15)
    assert canonical(epoch_ms_rows(q.apply(df))) == canonical(match_rows(q.query, events))
    with pytest.raises(Exception) as err:  # noqa: PT011 - whatever PySpark wraps the task's error in
        sparkcep.compile(KLEENE, match_budget=14).apply(df).collect()
    assert raised_message(err.value).startswith("match budget exceeded: more than 14 matches")
    spark.conf.set(MAX_MATCHES_CONF, "14")
    try:
        with pytest.raises(Exception) as err:  # noqa: PT011
            sparkcep.compile(KLEENE).apply(df).collect()
        assert raised_message(err.value).startswith("match budget exceeded: more than 14 matches")
        assert len(sparkcep.compile(KLEENE, match_budget=0).apply(df).collect()) == 15  # given: the conf is not read
    finally:
        spark.conf.unset(MAX_MATCHES_CONF)


@pytest.mark.spark
@pytest.mark.slow
def test_cli_run_stops_with_one_line(tmp_path):
    """`sparkcep run` over 20 A's and a B (about a million matches) with --max-matches 1000: exit status 2, one
    line naming the way out, no Python or Java traceback."""
    import json

    path = tmp_path / "events.json"
    path.write_text("".join(json.dumps(e) + "\n" for e in kleene_events(20)))
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "sparkcep.cli", "run", "-e", "PATTERN SEQ(A+ a[], B b) WHERE [id] WITHIN 1000",
         "--input", str(path), "--max-matches", "1000", "--master", "local[1]"],
        capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stdout == ""
    # progress lines ("sparkcep: job 2, stage 2/2: ...") come when a stage runs long: only the error counts
    ours = [line for line in proc.stderr.splitlines()
            if line.startswith("sparkcep:") and not line.startswith("sparkcep: job ")]
    assert len(ours) == 1 and "more than 1,000 matches" in ours[0] and "--collapsed" in ours[0], proc.stderr
    assert "Traceback" not in proc.stderr and "\tat " not in proc.stderr and "Exception" not in proc.stderr


@pytest.mark.parametrize("text, warned, collapsible", [
    ("PATTERN SEQ(A+ a[], B b) WHERE [id] WITHIN 1000", ["A+ a[]"], True),
    ("PATTERN SEQ(A a, B* b[], C c) WITHIN 10", ["B* b[]"], False),  # the alternative without B has no Kleene
    ("PATTERN SEQ(A a, B+ b[], C+ c[]) WITHIN 10", ["B+ b[]", "C+ c[]"], False),
    ("PATTERN SEQ(A a, (SEQ(B b, C c))+, D d) WITHIN 10", ["(SEQ(B b, C c))+"], False),
    ("PATTERN SEQ(A+ a[], B b) USING skip_till_next_match WITHIN 10", [], False),
    ("PATTERN SEQ(A a, NOT B+ b[], C c) WITHIN 10", [], False),
    ("PATTERN SEQ(A a, B? b, C c) WITHIN 10", [], False),
    ("RETURN COUNT(*) PATTERN SEQ(A+, B) WITHIN 10", [], False),
])
def test_explain_warns_where_a_pattern_can_explode(text, warned, collapsible):
    explained = [line.strip() for line in sparkcep.compile(text).explain().splitlines()]
    lines = [line + " " + explained[k + 1] for k, line in enumerate(explained) if line.startswith("warning:")]
    assert [line.split(" under ")[0].removeprefix("warning: ") for line in lines] == warned
    for line in lines:
        assert "2^n matches" in line and "RETURN COUNT(*)" in line
        assert ("--collapsed" in line) == collapsible
    if warned and collapsible:  # the way out named: collapsed output has no warning
        assert "warning:" not in sparkcep.compile(text, collapsed=True).explain()


@pytest.mark.spark
def test_generated_job_max_matches(spark, tmp_path):
    """The generated job's ``--max-matches`` sets the budget (through the session's conf); its ``__main__`` turns
    the task's error into the budget's one line."""
    import importlib.util
    import json

    from sparkcep.spark.operator import MAX_MATCHES_CONF

    path = tmp_path / "job.py"
    path.write_text(sparkcep.compile(KLEENE).job_source())
    source = path.read_text()
    assert "raised_message(err)" in source.split('if __name__ == "__main__":')[1]
    events = tmp_path / "events.json"
    events.write_text("".join(json.dumps(e) + "\n" for e in kleene_events(4)))  # 15 matches
    spec = importlib.util.spec_from_file_location("budget_job", path)
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        job.main(["--input", str(events), "--output", str(tmp_path / "ok"), "--max-matches", "15"])
        assert len(spark.read.json(str(tmp_path / "ok")).collect()) == 15
        with pytest.raises(Exception) as err:  # noqa: PT011 - whatever PySpark wraps the task's error in
            job.main(["--input", str(events), "--output", str(tmp_path / "out"), "--max-matches", "14"])
        assert raised_message(err.value).startswith("match budget exceeded: more than 14 matches")
    finally:
        spark.conf.unset(MAX_MATCHES_CONF)
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
