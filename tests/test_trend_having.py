"""HAVING on trend-aggregate results: the grammar (after GROUP BY or last), the checks (positioned errors), the
oracle (from the definition: the aggregates over each group's trends), the engine's rows filtered after the
merge of partitions = the oracle on random queries, and Spark batch, streaming and a shared workload."""

from __future__ import annotations

import json
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.grammar import parse_query
from sparkcep.ir.errors import CEPError
from sparkcep.ir.printer import format_query
from sparkcep.ir.serde import from_data, to_data
from sparkcep.oracles.match import trend_aggregates
from sparkcep.runtime_udfs.trend.aggregates import having_filter
from sparkcep.spark.results import canonical
from tests.strategies import event_streams
from tests.test_trend_engine import AGGREGATES, oracle_rows, run

COARSE = ("RETURN sector, COUNT(*) AS n, MAX(S.price) PATTERN Stock S+ WHERE [company, sector] "
          "AND S.price > NEXT(S).price GROUP BY sector WITHIN 20 SLIDE 5 HAVING n > {k} AND MAX(S.price) >= 2")


def test_having_after_group_by_or_last_means_the_same():
    first = parse_query("RETURN g, COUNT(*) PATTERN SEQ(A a, B b) WHERE [g] GROUP BY g HAVING COUNT(*) > 1 "
                        "WITHIN 10")
    last = parse_query("PATTERN SEQ(A a, B b) WHERE [g] GROUP BY g WITHIN 10 RETURN g, COUNT(*) "
                       "HAVING COUNT(*) > 1")
    assert first.having == last.having is not None
    printed = format_query(first)
    assert "HAVING COUNT(*) > 1" in printed
    assert parse_query(printed).having == first.having


@pytest.mark.parametrize(("text", "message", "caret"), [
    ("RETURN COUNT(*) PATTERN SEQ(A a, B b) HAVING COUNT(*) > 1 WITHIN 10 HAVING COUNT(*) < 9",
     "HAVING given twice", "HAVING COUNT(*) < 9"),
    ("PATTERN SEQ(A a, B b) WITHIN 10 HAVING a.x > 1", "HAVING needs a trend-aggregate query", "a.x > 1"),
    ("RETURN COUNT(*) PATTERN SEQ(A a, B b) WITHIN 10 HAVING SUM(a.x) > 1", "RETURN does not compute it",
     "SUM(a.x)"),
    ("RETURN COUNT(*) PATTERN SEQ(A a, B b) WITHIN 10 HAVING COUNT(*) > 1 AND a.x > 1",
     "'a.x' is an attribute of one event", "a.x"),
    ("RETURN COUNT(*) PATTERN SEQ(A a, B b) WITHIN 10 HAVING g = 1", "'g' is no column of the result", "g"),
    ("RETURN COUNT(*) PATTERN SEQ(A a, B b) WITHIN 10 HAVING COUNT(*)", "expected a condition", "COUNT(*)"),
    ("RETURN COUNT(*) PATTERN SEQ(A a, B b) WITHIN 10 HAVING log(COUNT(*)) > 1", "log() in HAVING",
     "log(COUNT(*))"),
])
def test_errors_are_positioned(text, message, caret):
    with pytest.raises(CEPError) as err:
        sparkcep.compile(text).spec()
    shown = str(err.value)
    assert message in shown
    line, marks = shown.splitlines()[-2:]
    start = marks.index("^")
    assert line[start:start + len(caret)] == caret and marks.strip() == "^" * len(marks.strip()), shown


def test_having_reads_return_columns_aliases_and_window_bounds():
    spec = sparkcep.compile("RETURN g, COUNT(*) AS n, SUM(A.x) PATTERN SEQ(A+, B) WHERE [g] GROUP BY g "
                            "WITHIN 10 HAVING n > 2 AND SUM(A.x) < 7 AND g != 3 AND window_start >= 0").spec()
    rows = [{"window_start": 0, "g": 1, "n": 3, "sum_A_x": 6}, {"window_start": 0, "g": 1, "n": 2, "sum_A_x": 6},
            {"window_start": 0, "g": 1, "n": 3, "sum_A_x": 7}, {"window_start": 0, "g": 3, "n": 9, "sum_A_x": 1},
            {"window_start": 0, "g": 2, "n": 2 ** 130, "sum_A_x": None}]
    assert having_filter(spec.having)(rows) == rows[:1]
    assert from_data(to_data(spec)) == spec  # the generated job's literal carries HAVING


def test_oracle_having_computes_aggregates_from_the_definition():
    """The oracle evaluates HAVING's aggregates over each group's trends itself, even one RETURN lacks."""
    events = [{"type": t, "ts": ts, "x": x} for t, ts, x in [("A", 1, 1), ("A", 2, 5), ("B", 3, 0), ("A", 11, 1),
                                                              ("B", 12, 0)]]
    base = parse_query("RETURN COUNT(*) PATTERN SEQ(A+ a, B b) WITHIN 10")
    assert trend_aggregates(base, events) == [{"window_start": 0, "window_end": 10, "count_all": 3},
                                              {"window_start": 10, "window_end": 20, "count_all": 1}]
    having = parse_query("RETURN COUNT(*) PATTERN SEQ(A+ a, B b) WITHIN 10 HAVING MAX(a.x) > 1")
    assert trend_aggregates(having, events) == [{"window_start": 0, "window_end": 10, "count_all": 3}]


#: Patterns dense enough on streams of A, B, C that windows hold trends (and the HAVING thresholds cut them).
HAVING_SHAPES = ["A+ a", "SEQ(A+ a, B b)", "(SEQ(A+ a, B b))+", "SEQ(A a, B b)", "SEQ(A a, B? b, C c)",
                 "SEQ(A+ a, NOT C n, B b)", "SEQ(ANY(A, B)+ a, C c)"]


@st.composite
def having_queries(draw) -> str:
    """A random trend query with HAVING over its RETURN aggregates, aliases and group column."""
    aggs = draw(st.lists(st.sampled_from(AGGREGATES), min_size=1, max_size=3, unique=True))
    names = [f"{a} AS v{k}" if draw(st.booleans()) else a for k, a in enumerate(aggs)]
    grouped = draw(st.booleans())
    text = (f"RETURN {'id, ' if grouped else ''}{', '.join(names)} PATTERN {draw(st.sampled_from(HAVING_SHAPES))}"
            f" WHERE [id] AND a.x >= 0{' GROUP BY id' if grouped else ''}"
            f" WITHIN {draw(st.integers(3, 8))} SLIDE {draw(st.integers(1, 3))}")
    refs = [f"v{k}" if " AS " in n else a for k, (a, n) in enumerate(zip(aggs, names, strict=True))]
    refs += ["id"] if grouped else []
    conds = []
    for ref in draw(st.lists(st.sampled_from(refs), min_size=1, max_size=2)):
        op = draw(st.sampled_from([">", ">=", "<", "=", "!="]))
        conds.append(f"{ref} {op} {draw(st.integers(0, 6))}")
    return text + " HAVING " + draw(st.sampled_from([" AND ", " OR "])).join(conds)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=having_queries(), events=event_streams(types="AABBC", min_size=5, max_size=12, max_gap=2,
                                                   attrs={"x": (0, 4), "id": (0, 1)}),
       cuts=st.lists(st.integers(0, 12), max_size=2), watermarks=st.lists(st.integers(0, 30), max_size=3),
       seed=st.integers(0, 2 ** 16))
def test_engine_rows_with_having_equal_the_oracle(text, events, cuts, watermarks, seed):
    spec = sparkcep.compile(text).spec()
    got = having_filter(spec.having)(run(spec, events, cuts, sorted(watermarks), False, seed))
    assert canonical(got) == canonical(oracle_rows(text, events)), text


# ----------------------------------------------------------------------------------------------- Spark


def stock_events(n: int, seed: int) -> list[dict]:
    """Trades of 4 companies in 2 sectors (a sector's count is the sum of its companies')."""
    rnd = random.Random(seed)
    return [{"type": "Stock", "ts": ts, "company": c, "sector": c % 2, "price": rnd.randrange(6)}
            for ts, c in enumerate(rnd.randrange(4) for _ in range(n))]


FINE = ("RETURN company, COUNT(*) AS n, MAX(S.price) PATTERN Stock S+ WHERE [company] AND S.price > NEXT(S).price "
        "GROUP BY company WITHIN 20 SLIDE 5 HAVING n > {k} AND MAX(S.price) >= 2")


def threshold(events, text: str) -> int:
    """A HAVING threshold ``k`` (for ``n > k``) that keeps some rows and drops others; for a query grouped
    coarser than its partitions (``COARSE``) one that keeps a row no partition (company) alone reaches: a
    filter applied before the merge of the companies' rows would drop it."""
    q = sparkcep.compile(text.format(k=0).split(" HAVING")[0])
    merged = trend_aggregates(q.query, events)
    group = "sector" if "GROUP BY sector" in text else "company"
    best = {(r["window_start"], r[group]): 0 for r in merged}
    for c in range(4):
        for r in trend_aggregates(q.query, [e for e in events if e["company"] == c]):
            best[r["window_start"], r[group]] = max(best[r["window_start"], r[group]], r["n"])
    for k in sorted({r["n"] for r in merged}):
        kept = [r for r in merged if r["n"] > k and r["max_S_price"] >= 2]
        if kept and len(kept) < len(merged) and (group == "company" or any(
                best[r["window_start"], r[group]] <= k for r in kept)):
            return k
    raise AssertionError("no threshold separates the rows")  # pragma: no cover - the seed is fixed


def plain(rows) -> list[dict]:
    from decimal import Decimal

    out = []
    for r in rows:
        r = dict(r)
        assert r.pop("aggregate_overflow") is False
        out.append({k: int(v) if isinstance(v, Decimal) else v for k, v in r.items()})
    return out


@pytest.mark.spark
def test_batch_having_after_merging_partitions_equals_the_oracle(spark):
    from sparkcep.spark.results import epoch_ms_rows

    events = stock_events(40, seed=2)
    q = sparkcep.compile(COARSE.format(k=threshold(events, COARSE)))
    expected = trend_aggregates(q.query, events)
    df = spark.createDataFrame(events, "type STRING, ts BIGINT, company BIGINT, sector BIGINT, price BIGINT")
    assert canonical(plain(epoch_ms_rows(q.apply(df)))) == canonical(expected)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("text", [COARSE, FINE], ids=["groups_coarser_than_partitions", "group_is_partition"])
def test_stream_having_from_files_equals_the_oracle(spark, tmp_path, text):
    """Three files, one per micro-batch; a last event far ahead closes every window of the data.  Both
    streaming paths: one engine state per Spark group, and several (merged) per GROUP BY group."""
    from sparkcep.spark.io import read_events
    from sparkcep.spark.results import epoch_ms_rows

    events = stock_events(36, seed=2)
    q = sparkcep.compile(text.format(k=threshold(events, text)))
    expected = trend_aggregates(q.query, events)
    source = tmp_path / "in"
    source.mkdir()
    chunks = [events[k:k + 12] for k in range(0, len(events), 12)]
    chunks[-1] = [*chunks[-1], {"type": "Stock", "ts": 100_000, "company": 0, "sector": 0, "price": 0}]
    for k, chunk in enumerate(chunks):
        path = source / f"e{k}.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in chunk))
        os.utime(path, (1_000_000 + k, 1_000_000 + k))  # the file source takes files in mtime order
    schema = "type STRING, ts BIGINT, company BIGINT, sector BIGINT, price BIGINT"
    result = q.apply(read_events(spark, str(source), "json", "ts", stream=True, files_per_trigger=1, schema=schema))
    (result.writeStream.format("json").option("path", str(tmp_path / "out"))
     .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start().awaitTermination())
    streamed = plain(epoch_ms_rows(spark.read.schema(result.schema).json(str(tmp_path / "out"))))
    assert canonical([r for r in streamed if r["window_end"] < 100_000]) == canonical(expected)


WORKLOAD = ("s1: RETURN COUNT(*), SUM(b.x) AS sx PATTERN SEQ(A a, B b, C c) WHERE [id] WITHIN 6 SLIDE 3 "
            "HAVING COUNT(*) >= 2;\n"
            "s2: RETURN COUNT(*) AS n2 PATTERN SEQ(A a, B b) WHERE [id] WITHIN 6 SLIDE 3 HAVING n2 > 1 AND n2 < 4")


@pytest.mark.spark
def test_shared_workload_having_per_query_equals_the_oracle(spark):
    """Two queries sharing (A, B) in one Sharon operator, each with its own HAVING on its own rows."""
    from sparkcep.compiler.optimizer.sharing import optimize_workload
    from sparkcep.spark.workload import load_workload, workload_data

    rnd = random.Random(4)
    events = [{"type": rnd.choice("ABCD"), "ts": i // 2, "id": rnd.randrange(2), "x": rnd.randrange(-3, 9)}
              for i in range(90)]
    w = sparkcep.compile_shared_workload(WORKLOAD, budget=None)
    w = sparkcep.api.CompiledWorkload(w.queries, optimize_workload(w.plan.queries, {"A": 6, "B": 6, "C": 2},
                                                                   budget=None))
    [spec] = w.specs()
    assert not w.alone() and all(q.having is not None for q in spec.queries)
    assert load_workload(json.dumps(workload_data([spec], [])))[0] == [spec]  # the workload job's literal
    df = spark.createDataFrame(events, "type STRING, ts BIGINT, id BIGINT, x BIGINT")
    got: dict[str, list] = {}
    for r in w.apply(df).collect():
        row = {k: v for k, v in r.asDict().items() if v is not None and k != "query"}
        got.setdefault(r["query"], []).append(row)
    for q in w.queries:
        expected = trend_aggregates(q.query, events)
        unfiltered = trend_aggregates(q.query.__class__(**{**q.query.__dict__, "having": None}), events)
        assert 0 < len(expected) < len(unfiltered), q.name
        assert canonical(plain(got.get(q.name, []))) == canonical(expected), q.name
