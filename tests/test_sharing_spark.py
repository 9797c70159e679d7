"""A workload on Spark: `CompiledWorkload.apply` and `sparkcep run WORKLOAD` run the sharing plan as its
generated job does (:func:`sparkcep.spark.workload.apply_workload`: one stateful operator, one
result with a ``query`` column); per query, the rows each query gives alone (its own GRETA operator) and the
oracle; batch and streaming (files, checkpoint, watermark, late events, dead letters), COUNT(*) and the other
aggregates (COUNT(v), SUM/AVG/MIN/MAX) of shared operators."""

from __future__ import annotations

import json
import os
import random
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from pyspark.sql.types import DecimalType, DoubleType, LongType
from test_shared_engine import aggregate_workloads, valued_streams

import sparkcep
from sparkcep.oracles.match import trend_aggregates

pytestmark = pytest.mark.spark

TRAFFIC = (Path(__file__).parent / "fixtures" / "workloads" / "sharon_traffic.cep").read_text()
NUMERIC = TRAFFIC.replace("10 minutes", "10").replace("1 minute", "2")
STREETS = ["ElmSt", "ParkAve", "OakSt", "MainSt", "WestSt", "StateSt"]
#: Aggregates other than COUNT(*) in queries sharing (A, B): exact DECIMAL counts and integer sums, DOUBLE
#: averages, MIN/MAX of the input type (BIGINT).
AGGREGATES = ("s1: RETURN COUNT(*), SUM(b.x) AS sx, MIN(a.x) AS lo PATTERN SEQ(A a, B b, C c) WHERE [id] "
              "WITHIN 6 SLIDE 3;\n"
              "s2: RETURN COUNT(b) AS nb, MAX(b.x) AS hi, AVG(d.x) AS ad PATTERN SEQ(A a, B b, D d) WHERE [id] "
              "WITHIN 6 SLIDE 3;\n"
              "s3: RETURN COUNT(*) AS n3, AVG(b.x) AS ab, SUM(a.x) AS sa PATTERN SEQ(A a, B b) WHERE [id] "
              "WITHIN 6 SLIDE 3")


def route_events(n: int = 120, seed: int = 3) -> list[dict]:
    rnd = random.Random(seed)
    return [{"type": rnd.choice(STREETS), "ts": i // 2, "vehicle": rnd.randint(1, 3)} for i in range(n)]


def abcd_events(n: int, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    return [{"type": rnd.choice("ABCD"), "ts": i // 2, "id": rnd.randrange(2), "x": rnd.randrange(-3, 9)}
            for i in range(n)]


def _rows(df) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for r in df.collect():
        out.setdefault(r["query"], []).append((r["window_start"], r["window_end"], int(r["count_all"])))
    return {k: sorted(v) for k, v in out.items()}


def _plain(row: dict) -> dict:
    """A result row as the oracle gives it: no nulls, no overflow flag, exact DECIMALs as ints."""
    return {k: int(v) if isinstance(v, Decimal) else v for k, v in row.items()
            if v is not None and k != "aggregate_overflow"}


def per_query(rows) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        r = _plain(r)
        out.setdefault(r.pop("query"), []).append(r)
    return {k: sorted(v, key=lambda r: (r["window_start"], r.get("id", 0))) for k, v in out.items()}


def oracle(q, events) -> list[dict]:
    return sorted((_plain(r) for r in trend_aggregates(q.query, events)),
                  key=lambda r: (r["window_start"], r.get("id", 0)))


def _sharing(text: str, rates: dict):
    """The workload with a plan made for ``rates`` (rates that make sharing pay)."""
    from sparkcep.compiler.optimizer.sharing import optimize_workload

    w = sparkcep.compile_shared_workload(text, budget=None)
    plan = optimize_workload(w.plan.queries, rates, budget=None)
    return sparkcep.api.CompiledWorkload(w.queries, plan)


def test_shared_operator_equals_each_query_alone_and_the_oracle(spark):
    events = route_events()
    df = spark.createDataFrame(events, "type STRING, ts LONG, vehicle LONG")
    w = _sharing(NUMERIC, {"OakSt": 6, "MainSt": 6, "ParkAve": 3, "ElmSt": 3})
    assert w.plan.chosen and not w.alone()
    result = w.apply(df)
    assert result.columns == ["query", "window_start", "window_end", "count_all", "aggregate_overflow"]
    shared = _rows(result)
    non_shared = _rows(w.apply(df, share=False))
    for q in w.queries:
        alone = sorted((r["window_start"], r["window_end"], int(r["count_all"])) for r in q.apply(df).collect())
        expected = sorted((r["window_start"], r["window_end"], r["count_all"])
                          for r in trend_aggregates(q.query, events))
        assert shared.get(q.name, []) == alone == expected, q.name
        assert non_shared.get(q.name, []) == expected


def test_aggregates_of_shared_operators_have_their_types_and_the_oracle_rows(spark):
    """COUNT(v), SUM/AVG/MIN/MAX(v.x) in a shared operator: one column per aggregate with the trend adapter's
    type; each query's rows are its oracle's and those of the query alone; the queries share (A, B)."""
    events = abcd_events(90, seed=4)
    df = spark.createDataFrame(events, "type STRING, ts BIGINT, id BIGINT, x BIGINT")
    w = _sharing(AGGREGATES, {"A": 6, "B": 6, "C": 2, "D": 2})
    assert not w.alone() and w.plan.chosen
    [spec] = w.specs()
    assert sum(len(q.segments) > 1 for q in spec.queries) >= 2  # (A, B) shared, then C / D
    result = w.apply(df)
    types = {f.name: f.dataType for f in result.schema.fields}
    assert types["count_all"] == types["nb"] == types["n3"] == types["sx"] == types["sa"] == DecimalType(38, 0)
    assert types["lo"] == types["hi"] == LongType() and types["ad"] == types["ab"] == DoubleType()
    got = per_query(r.asDict() for r in result.collect())
    for q in w.queries:
        expected = oracle(q, events)
        assert expected, q.name
        assert got.get(q.name, []) == expected, q.name
        assert per_query({**r.asDict(), "query": q.name} for r in q.apply(df).collect())[q.name] == expected


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                 HealthCheck.function_scoped_fixture])
@given(aggregate_workloads(), valued_streams())
def test_aggregate_workloads_on_spark_equal_the_oracle(spark, workload, events):
    """Random workloads mixing COUNT(*), COUNT(v), SUM/AVG/MIN/MAX(v.x) (x DOUBLE, sometimes null), shared by
    the plan the workload's rates give: each query's Spark rows are its oracle's."""
    text, rates = workload
    w = _sharing(text, rates)
    assert not w.alone()
    events = [{**e, "x": float(e["x"])} if "x" in e else e for e in events]
    df = spark.createDataFrame([{"x": None, **e} for e in events], "type STRING, ts BIGINT, id BIGINT, x DOUBLE")
    got = per_query(r.asDict() for r in w.apply(df).collect())
    for q in w.queries:
        assert got.get(q.name, []) == oracle(q, events), q.name


@pytest.mark.slow
def test_streaming_workload_from_files(spark, tmp_path):
    events = route_events(200, seed=5)
    src = tmp_path / "in"
    src.mkdir()
    for i in range(4):  # four files, read one per micro-batch, in modification-time order (in ts order)
        (src / f"part{i}.json").write_text("".join(json.dumps(e) + "\n" for e in events[i * 50:(i + 1) * 50]))
        os.utime(src / f"part{i}.json", (1_000_000 + i, 1_000_000 + i))
    w = sparkcep.compile_shared_workload(NUMERIC, budget=None)
    stream = spark.readStream.schema("type STRING, ts LONG, vehicle LONG").option("maxFilesPerTrigger", 1).json(
        str(src))
    result = w.apply(stream)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (result.writeStream.format("json").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .outputMode("append").trigger(availableNow=True).start())
    query.awaitTermination()
    got = _rows(spark.read.schema(result.schema).json(str(out)))
    last = max(e["ts"] for e in events)
    for q in w.queries:
        expected = sorted((r["window_start"], r["window_end"], r["count_all"])
                          for r in trend_aggregates(q.query, events))
        # streaming emits a window once the watermark passes its end: the last windows stay open
        assert [r for r in got.get(q.name, []) if r[1] <= last] == [r for r in expected if r[1] <= last], q.name


def test_cli_run_on_a_workload(spark, tmp_path, capsys):
    from sparkcep.cli import main

    events = route_events(60, seed=9)
    data = tmp_path / "events.json"
    data.write_text("".join(json.dumps(e) + "\n" for e in events) + "{not json\n")
    workload = tmp_path / "w.cep"
    workload.write_text(NUMERIC)
    assert main(["run", str(workload), "--input", str(data)]) == 0
    captured = capsys.readouterr()
    got: dict[str, list[tuple]] = {}
    for line in captured.out.splitlines():
        r = json.loads(line)
        got.setdefault(r["query"], []).append((r["window_start"], r["window_end"], int(r["count_all"])))
    for q in sparkcep.compile_workload(NUMERIC):
        expected = sorted((r["window_start"], r["window_end"], r["count_all"])
                          for r in trend_aggregates(q.query, events))
        assert sorted(got.get(q.name, [])) == expected, q.name
    assert "1 bad records skipped (malformed record: 1)" in captured.err  # validated as a single query's run


def test_timestamp_ts_and_group_by(spark):
    """Timestamp ts (windows in ms) and GROUP BY the key: one row per vehicle, as each query alone."""
    from datetime import datetime, timedelta, timezone

    text = TRAFFIC.replace("RETURN COUNT(*)", "RETURN vehicle, COUNT(*)").replace(
        "WITHIN", "GROUP BY vehicle WITHIN")
    base = datetime(2024, 5, 1, tzinfo=timezone.utc)
    events = [dict(e, ts=base + timedelta(seconds=20 * e["ts"])) for e in route_events(150, seed=11)]
    df = spark.createDataFrame(events, "type STRING, ts TIMESTAMP, vehicle LONG")
    w = sparkcep.compile_shared_workload(text, stats=None, budget=None)
    result = w.apply(df)
    got: dict[str, list[tuple]] = {}
    for r in result.collect():
        got.setdefault(r["query"], []).append((r["window_start"], r["vehicle"], int(r["count_all"])))
    for q in w.queries:
        alone = sorted((r["window_start"], r["vehicle"], int(r["count_all"])) for r in q.apply(df).collect())
        assert sorted(got.get(q.name, [])) == alone, q.name
    assert any(got.values())


def _write_files(folder: Path, chunks: list[list[dict]], extra: dict[int, str] | None = None) -> None:
    """One JSON-lines file per chunk (``extra[i]``: raw text appended to file i), read in this order (the file
    source reads in modification-time order)."""
    folder.mkdir()
    for i, chunk in enumerate(chunks):
        path = folder / f"part{i}.json"
        path.write_text("".join(json.dumps(e) + "\n" for e in chunk) + (extra or {}).get(i, ""))
        os.utime(path, (1_000_000 + i, 1_000_000 + i))


def _read_parts(folder: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(folder.glob("part-*")) for line in f.read_text().splitlines()
            if line.strip()]


@pytest.mark.slow
def test_cli_run_stream_on_a_workload(spark, tmp_path, capsys):
    """`run WORKLOAD --stream`: one output with a `query` column (the generated job's layout), the oracle's
    rows of every query on the on-time events, late events and dead letters in their side outputs, progress."""
    from sparkcep.cli import main

    events = route_events(80, seed=13)
    tail = {"type": "OakSt", "ts": 10_000, "vehicle": 9}  # closes every window; part of no trend
    late = {"type": "MainSt", "ts": 1, "vehicle": 1}
    src = tmp_path / "in"
    _write_files(src, [events[:40], events[40:], [late], [tail]], {2: "{not json\n"})
    workload = tmp_path / "w.cep"
    workload.write_text(NUMERIC)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    assert main(["run", str(workload), "--input", str(src), "--stream", "--once", "--schema",
                 "type STRING, ts LONG, vehicle LONG", "--files-per-trigger", "1", "--output", str(out),
                 "--checkpoint", str(checkpoint), "--latency-column"]) == 0
    rows = _read_parts(out)
    # rows with their latency from their events' arrival (a window closed by event time elsewhere has none: a
    # null, which the JSON lines leave out)
    latencies = [r.pop("_latency_ms", None) for r in rows]
    assert any(ms is not None for ms in latencies) and all(ms is None or ms >= 0 for ms in latencies), latencies
    got = per_query(rows)
    for q in sparkcep.compile_workload(NUMERIC):
        assert got.get(q.name, []) == oracle(q, events + [tail]), q.name
    assert [json.loads(r["record"])["type"] for r in _read_parts(out / "_late")] == ["MainSt"]
    assert [d["reason"] for d in _read_parts(out / "_dead_letters")] == ["malformed record"]
    progress = [line for line in capsys.readouterr().err.splitlines() if line.startswith("batch ")]
    assert len(progress) >= 4 and "1 dead letters, 1 late" in progress[-1], progress


@pytest.mark.slow
def test_cli_run_stream_with_aggregates_and_known_types(spark, tmp_path, capsys):
    """Streaming, aggregates other than COUNT(*) in the shared operator, --known-types (a record of another
    type is a dead letter) and --late-events / --dead-letters elsewhere: each query's oracle rows."""
    from sparkcep.cli import main

    events = abcd_events(80, seed=21)
    tail = {"type": "A", "ts": 10_000, "id": 9, "x": 0}
    src = tmp_path / "in"
    _write_files(src, [events[:40], events[40:] + [{"type": "Z", "ts": 50, "id": 0, "x": 1}], [tail]])
    workload = tmp_path / "w.cep"
    workload.write_text(AGGREGATES)
    out, dead, late = tmp_path / "out", tmp_path / "dead", tmp_path / "late"
    assert main(["run", str(workload), "--input", str(src), "--stream", "--once", "--schema",
                 "type STRING, ts BIGINT, id BIGINT, x BIGINT", "--files-per-trigger", "1", "--output", str(out),
                 "--checkpoint", str(tmp_path / "ck"), "--known-types", "A,B,C,D", "--dead-letters", str(dead),
                 "--late-events", str(late)]) == 0
    got = per_query(_read_parts(out))
    for q in sparkcep.compile_workload(AGGREGATES):
        expected = oracle(q, events + [tail])
        assert expected and got.get(q.name, []) == expected, q.name
    assert [d["reason"] for d in _read_parts(dead)] == ["unknown event type: Z"]
    assert not _read_parts(late)


def test_min_max_of_a_timestamp_and_group_by_on_timestamp_ts(spark):
    """Timestamp ts, GROUP BY the key, MIN/MAX of a timestamp attribute (TIMESTAMP columns, as the query alone
    gives them) and AVG in a shared operator: each query's rows are those of the query alone."""
    from datetime import datetime, timedelta, timezone

    from pyspark.sql.types import TimestampType

    text = ("t1: RETURN id, MIN(a.ts) AS first_a, MAX(c.ts) AS last_c, COUNT(*) AS n PATTERN SEQ(A a, B b, C c) "
            "WHERE [id] GROUP BY id WITHIN 6 seconds SLIDE 3 seconds;\n"
            "t2: RETURN id, MAX(b.ts) AS last_b, AVG(b.x) AS ab PATTERN SEQ(A a, B b) WHERE [id] GROUP BY id "
            "WITHIN 6 seconds SLIDE 3 seconds")
    base = datetime(2024, 5, 1, tzinfo=timezone.utc)
    events = [dict(e, ts=base + timedelta(seconds=e["ts"])) for e in abcd_events(80, seed=8)]
    df = spark.createDataFrame(events, "type STRING, ts TIMESTAMP, id BIGINT, x BIGINT")
    w = _sharing(text, {"A": 6, "B": 6, "C": 1})
    assert not w.alone() and w.plan.chosen
    result = w.apply(df)
    types = {f.name: f.dataType for f in result.schema.fields}
    assert types["first_a"] == types["last_c"] == types["last_b"] == TimestampType()
    got = per_query(r.asDict() for r in result.collect())
    for q in w.queries:
        alone = per_query({**r.asDict(), "query": q.name} for r in q.apply(df).collect())[q.name]
        assert alone and got.get(q.name, []) == alone, q.name


def test_window_bounds_take_the_type_of_the_named_ts_column():
    """A trend query alone and a sharing context type their window bounds by ``ts_col`` (a bug fixed: the trend
    schema read a column named ``ts`` whatever the ts column was, so bounds on ``time`` were DOUBLE alone and
    TIMESTAMP_NTZ shared, and a workload uniting them failed)."""
    from pyspark.sql.types import StringType, StructField, StructType, TimestampNTZType

    from sparkcep.spark.operator import MatchOperator

    schema = StructType([StructField("type", StringType()), StructField("time", TimestampNTZType()),
                         StructField("id", LongType()), StructField("x", LongType())])
    w = _sharing(AGGREGATES, {"A": 6, "B": 6, "C": 2, "D": 2})
    [shared] = w.specs()
    for spec in (shared, w.queries[0].spec()):
        op = MatchOperator(spec, schema, ts_col="time")
        assert op.output_schema["window_start"].dataType == op.output_schema["window_end"].dataType \
            == TimestampNTZType()
