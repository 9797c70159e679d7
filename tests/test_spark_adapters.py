"""The Spark adapters of the match engine: result types and data conversion (no JVM), then batch
``applyInPandas`` and streaming ``applyInPandasWithState`` runs compared with the oracle (JVM)."""

from __future__ import annotations

import json
import os
import random
import time
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout
from pyspark.sql.types import (
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import sparkcep
from sparkcep.api import CompiledQuery
from sparkcep.grammar import parse_query
from sparkcep.ir.ast import Attr, BinOp, EquivItem, EquivTest, EventPat, Func, Literal, and_all
from sparkcep.ir.errors import CEPError
from sparkcep.ir.serde import to_data
from sparkcep.ir.spec import Component, MatchSpec, OutputColumn
from sparkcep.oracles.match import match_rows, trend_aggregates
from sparkcep.runtime_udfs.match.engine import EngineUnsupportedError
from sparkcep.spark.adapters import apply_match, batch_matches
from sparkcep.spark.group_state import GroupStates
from sparkcep.spark.operator import (
    COLUMNAR_STREAM,
    PER_KEY,
    MatchOperator,
    bucket_column,
    checkpoint_grouping,
    stream_buckets,
    stream_udf,
)
from sparkcep.spark.results import canonical as canonical_rows
from sparkcep.spark.schema import EVENT_TIME_OFFSET, STATE_SCHEMA, output_schema
from tests.test_match_engine import canonical, seq_query, spec_for
from tests.test_trend_end_to_end import COARSE, coarse_event

EPOCH = 1_700_000_000_000  # ms: 2023-11-14 22:13:20 UTC


def schema_of(ts_type=None) -> StructType:
    return StructType([StructField("id", LongType()), StructField("type", StringType()),
                       StructField("ts", ts_type or TimestampType()), StructField("x", LongType())])


# The query of the Spark runs: ANY, a local predicate, a parameterized one across non-adjacent components.
A, ANY_BC, C = EventPat(("A",), "a"), EventPat(("B", "C"), "b", any_=True), EventPat(("C",), "c")
LOCAL, PARAMETERIZED = BinOp(">", Attr("b", "x"), Literal(0)), BinOp("<", Attr("a", "x"), Attr("c", "x"))
WHERE = and_all([EquivTest((EquivItem("id"),)), LOCAL, PARAMETERIZED])
RETURNS = (Attr("a", "ts"), Attr("b", "type"), Attr("c", "ts"), Attr("a", "x"),
           BinOp("+", Attr("a", "x"), Attr("c", "x")))

#: ``_mask`` as the compiler's Spark SQL filter computes it (a missing x satisfies ``b.x > 0``: ANY rule).
MASK_SQL = ("CASE WHEN type = 'A' THEN 1 ELSE 0 END"
            " + CASE WHEN type IN ('B', 'C') AND COALESCE(x > 0, TRUE) THEN 2 ELSE 0 END"
            " + CASE WHEN type = 'C' THEN 4 ELSE 0 END")


def random_events(n: int, seed: int, spread_ms: int) -> list[dict]:
    rnd = random.Random(seed)
    events = []
    for _ in range(n):
        e = {"id": rnd.randint(0, 3), "type": rnd.choice("ABCD"), "ts": EPOCH + rnd.randint(0, spread_ms)}
        if rnd.random() < 0.9:
            e["x"] = rnd.randint(0, 5)
        events.append(e)
    return events


def collect_ms(df) -> list[dict]:
    """Rows of a result DataFrame with timestamp columns as epoch ms (Python datetimes would be local time)."""
    cols = [F.expr(f"unix_millis({f.name})").alias(f.name) if isinstance(f.dataType, TimestampType)
            else F.col(f.name) for f in df.schema.fields]
    return [r.asDict() for r in df.select(*cols).collect()]


# ----------------------------------------------------------------------------------------------- no JVM


def test_output_schema_types():
    spec = MatchSpec(
        (Component("a", ("A",)), Component("b", ("B",))), (), 10,
        tuple(OutputColumn(n, e) for n, e in [
            ("ts", Attr("a", "ts")), ("id", Attr("b", "id")), ("name", Attr("a", "name")),
            ("n", Func("count", (Attr("b", "x", "all"),))), ("mean", Func("avg", (Attr("b", "x", "all"),))),
            ("sum_i", Func("sum", (Attr("b", "i", "all"),))), ("sum_x", Func("sum", (Attr("b", "x", "all"),))),
            ("sum_s", Func("sum", (Attr("b", "name", "all"),))), ("max_i", Func("max", (Attr("b", "i", "all"),))),
            ("min_s", Func("min", (Attr("b", "name", "all"),))), ("plus", BinOp("+", Attr("a", "i"), Literal(1))),
            ("ratio", BinOp("/", Attr("a", "i"), Literal(2))), ("shifted", BinOp("+", Attr("a", "x"), Literal(1))),
            ("less", BinOp("<", Attr("a", "x"), Attr("b", "x"))), ("one", Literal(1)), ("k", Literal("k")),
        ]))
    schema = StructType([StructField("ts", TimestampType()), StructField("id", LongType()),
                         StructField("name", StringType()), StructField("x", DoubleType()),
                         StructField("i", IntegerType())])
    types = {f.name: f.dataType.simpleString() for f in output_schema(json.dumps(to_data(spec)), schema)}
    assert types == {"ts": "timestamp", "id": "bigint", "name": "string", "n": "bigint", "mean": "double",
                     "sum_i": "bigint", "sum_x": "double", "sum_s": "double", "max_i": "int",
                     "min_s": "string", "plus": "bigint", "ratio": "double", "shifted": "double",
                     "less": "boolean", "one": "bigint", "k": "string"}


def test_output_schema_rejects_an_unknown_attribute():
    spec = MatchSpec((Component("a", ("A",)),), (), 10, (OutputColumn("q", Attr("a", "nope")),))
    with pytest.raises(CEPError, match="'nope' is not a column"):
        output_schema(spec, schema_of())


def test_unsupported_spec_fails_when_the_function_is_built():
    # sparkcep.compile refuses it (check is the contract); the operator refuses a spec that gets past anyway
    text = "PATTERN SEQ(A a, (SEQ(B b, C c) OR SEQ(D d, E e))+) WITHIN 10 RETURN a.ts"
    with pytest.raises(EngineUnsupportedError, match="repeated group"):
        sparkcep.compile(text, collapsed=True)
    spec = CompiledQuery(parse_query(text), text, collapsed=True).spec()
    with pytest.raises(EngineUnsupportedError, match="repeated group"):
        MatchOperator(to_data(spec), schema_of(), timezone="UTC")


def test_timestamps_convert_to_epoch_ms_in_the_session_zone_and_back():
    spec = spec_for(seq_query(A, C, returns=(Attr("a", "ts"), Attr("c", "x"))))
    op = MatchOperator(spec, schema_of(), timezone="America/New_York")
    # PySpark hands TIMESTAMP values over as naive wall-clock times of the session zone (here UTC-5)
    pdf = pd.DataFrame({"id": [1, 1], "type": ["A", "C"], "x": [1, 2], "extra": [0, 0],
                        "ts": pd.to_datetime(["2023-11-14 17:13:20.000000", "2023-11-14 17:13:20.000250"])})
    events = op.events(pdf)
    assert [e["ts"] for e in events] == [EPOCH, EPOCH + 0.25]  # sub-ms precision is kept
    assert "extra" not in events[0]  # not in the input schema
    out = op.frame([{"a_ts": EPOCH, "c_x": 2}, {"a_ts": EPOCH + 0.25, "c_x": None}])
    assert out["a_ts"].tolist() == [pd.Timestamp(EPOCH, unit="ms", tz="UTC"),
                                    pd.Timestamp(EPOCH * 1000 + 250, unit="us", tz="UTC")]
    assert op.events(pdf.iloc[:0]) == []


def test_other_column_names_reach_the_engine_as_type_and_ts():
    schema = StructType([StructField("kind", StringType()), StructField("time", LongType())])
    spec = spec_for(seq_query(A, C, returns=(Attr("a", "time"),)))
    op = MatchOperator(spec, schema, ts_col="time", type_col="kind")
    assert op.numeric_ts and op.state_schema == STATE_SCHEMA
    events = op.events(pd.DataFrame({"kind": ["A"], "time": [5]}))
    assert events == [{"kind": "A", "type": "A", "time": 5, "ts": 5}]
    table = pa.table({"kind": ["A", "C"], "time": pa.array([5, 6], pa.int64())})
    assert op.run_table(table).to_pylist() == [{"a_time": 5}]


def drive_stream(op: MatchOperator, events: list[dict], batches: int) -> list[dict]:
    """Feed ``events`` (ts ascending, distinct) to ``op.stream_function()`` the way Spark does with event-time
    timeouts and lateness 0: per micro-batch, each Spark group with rows or with a timeout the watermark has
    passed is called; the watermark is the newest ts of the earlier batches; a last batch moves it past all."""
    groups, offset = GroupStates(op.stream_function()), EVENT_TIME_OFFSET
    size = max(1, -(-len(events) // batches))
    chunks = [events[k:k + size] for k in range(0, len(events), size)] + [[]]
    watermark, out = 0, []
    for n, chunk in enumerate(chunks):
        if n == len(chunks) - 1:
            watermark = 10**15
        by_group: dict[tuple, list[dict]] = {}
        for e in chunk:
            by_group.setdefault(tuple(e[c] for c in op.group_cols), []).append(e)
        pdfs = {g: [pd.DataFrame(rows)] for g, rows in by_group.items()}
        for frame in groups.micro_batch(pdfs, watermark):
            out.extend(frame.to_dict("records"))
        if chunk:
            watermark = max(e["ts"] for e in chunk) + offset
    assert not groups  # every partition's state was dropped once its windows were emitted
    return out


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(COARSE)), data=st.data(), batches=st.integers(1, 4),
       window=st.sampled_from([(10, 5), (12, 4), (40, 40)]))
def test_nested_stream_function_equals_the_oracle(name, data, batches, window):
    """The streaming logic of groups holding several partitions (GRETA Q1/Q2 shapes, Sharon q1), without a
    JVM: micro-batches, watermarks and timeouts as Spark drives them; rows equal the oracle's."""
    stamps = sorted(data.draw(st.sets(st.integers(0, 40), min_size=1, max_size=14)))
    raw = data.draw(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 2), st.integers(0, 6)),
                             min_size=len(stamps), max_size=len(stamps)))
    events = [coarse_event(name, ts, ts // 3 + shift, who, value)
              for ts, (shift, who, value) in zip(stamps, raw, strict=True)]
    q = sparkcep.compile(COARSE[name].format(w=window[0], s=window[1]))
    columns = ("type", "ts", "company", "sector", "price", "job", "mapper", "cpu", "load", "vehicle")
    schema = StructType([StructField(c, StringType() if c == "type" else DoubleType() if c == "cpu" else LongType())
                         for c in columns])
    op = MatchOperator(q.spec(schema), schema)
    assert op.nested
    got = drive_stream(op, events, batches)
    for r in got:
        assert r.pop("aggregate_overflow") is False
    got = [{k: int(v) if isinstance(v, Decimal) else v for k, v in r.items()} for r in got]
    assert canonical_rows(got) == canonical_rows(trend_aggregates(q.query, events))


# ----------------------------------------------------------------------------------------------- Spark


@pytest.mark.spark
@pytest.mark.parametrize("variant", ["timestamp ts, mask from Spark SQL", "numeric ts, no mask"])
def test_batch_path_equals_oracle(spark, variant):
    query = seq_query(A, ANY_BC, C, where=WHERE, within=4000, returns=RETURNS)
    spec = spec_for(query)
    # and a key without any match: its group returns an empty frame
    events = random_events(400, seed=1, spread_ms=30_000) + [{"id": 7, "type": "A", "ts": EPOCH, "x": 1}]
    pdf = pd.DataFrame(events)
    if variant.startswith("timestamp"):
        pdf["ts"] = pd.to_datetime(pdf["ts"], unit="ms")
        df = spark.createDataFrame(pdf, schema_of()).withColumn("_mask", F.expr(MASK_SQL))
    else:
        df = spark.createDataFrame(pdf, schema_of(LongType()))
    result = batch_matches(df, json.dumps(to_data(spec)), df.schema)
    got = collect_ms(result)
    expected = match_rows(query, events)
    assert len(expected) > 50
    assert canonical(got) == canonical(expected)


@pytest.mark.spark
def test_apply_match_without_key_runs_one_group(spark):
    query = seq_query(A, ANY_BC, C, where=and_all([LOCAL, PARAMETERIZED]), within=1500, returns=RETURNS)
    spec = spec_for(query)
    assert spec.key == ()
    events = random_events(150, seed=3, spread_ms=20_000)
    pdf = pd.DataFrame(events).assign(ts=lambda d: pd.to_datetime(d["ts"], unit="ms"))
    result = apply_match(spark.createDataFrame(pdf, schema_of()), to_data(spec))
    expected = match_rows(query, events)
    assert len(expected) > 20
    assert canonical(collect_ms(result)) == canonical(expected)


@pytest.mark.spark
def test_bucketed_keys_give_the_same_matches(spark):
    """``buckets``: Spark groups by ``pmod(hash(key), n)`` and the operator runs one engine per key inside."""
    query = seq_query(A, ANY_BC, C, where=WHERE, within=4000, returns=RETURNS)
    spec = spec_for(query)
    events = random_events(300, seed=4, spread_ms=30_000)
    df = spark.createDataFrame(pd.DataFrame(events).assign(ts=lambda d: pd.to_datetime(d["ts"], unit="ms")),
                               schema_of()).withColumn("_mask", F.expr(MASK_SQL))
    op = MatchOperator(spec, df.schema, buckets=2)
    assert op.nested and op.group_cols == ("id",)
    expected = match_rows(query, events)
    assert len(expected) > 30
    assert canonical(collect_ms(apply_match(df, spec, buckets=2))) == canonical(expected)


def state_schema_file(checkpoint: Path, key: list[str]) -> None:
    """The key and value schemas Spark stores beside an operator's state (``state/0/0/_metadata/schema``,
    version 2: each schema's JSON after its length), keyed by ``key``."""
    path = checkpoint / "state" / "0" / "0" / "_metadata" / "schema"
    path.parent.mkdir(parents=True)
    schemas = [StructType([StructField(c, IntegerType()) for c in key]), STATE_SCHEMA]
    with path.open("wb") as f:
        f.write(b"\x00\x02v2")
        for schema in schemas:
            text = schema.json().encode()
            f.write(len(text).to_bytes(2, "big") + text)


@pytest.mark.spark
def test_stream_grouping_default_and_checkpoint(spark, tmp_path):
    """A stream's grouping (``stream_buckets``): spark.sql.shuffle.partitions buckets where the columnar step
    streams the query, else one group per key; a checkpoint holding state keeps the grouping its key schema
    records, and another one asked for is refused."""
    schema = schema_of().add("_mask", LongType())
    columnar = MatchOperator(spec_for(seq_query(A, ANY_BC, C, where=WHERE, within=4000, returns=RETURNS[:4])),
                             schema)
    engine = MatchOperator(spec_for(seq_query(A, ANY_BC, C, where=WHERE, within=4000, returns=RETURNS)), schema)
    assert columnar.bucketable and not engine.bucketable
    new = tmp_path / "new"
    assert stream_buckets(columnar, spark, checkpoint=str(new)) == int(spark.conf.get("spark.sql.shuffle.partitions"))
    assert stream_buckets(engine, spark, checkpoint=str(new)) is None
    assert stream_buckets(columnar, spark, PER_KEY) is None and stream_buckets(engine, spark, 3) == 3
    for name, key, recorded in [("per-key", ["id"], PER_KEY), ("three", [bucket_column(3)], 3),
                                ("unrecorded", ["_sparkcep_bucket"], None)]:
        state_schema_file(tmp_path / name, key)
        checkpoint = str(tmp_path / name)
        if recorded is None:  # made with buckets=N before the column recorded N: the same N must be given
            with pytest.raises(CEPError, match="without recording how many"):
                stream_buckets(columnar, spark, checkpoint=checkpoint)
            assert stream_buckets(columnar, spark, 5, checkpoint) == 5
            continue
        assert checkpoint_grouping(spark, checkpoint) == recorded
        assert stream_buckets(columnar, spark, checkpoint=checkpoint) == (recorded or None)
        assert stream_buckets(engine, spark, checkpoint=checkpoint) == (recorded or None)
        other = 2 if recorded == PER_KEY else PER_KEY
        with pytest.raises(CEPError, match="the grouping is part of a checkpoint"):
            stream_buckets(columnar, spark, other, checkpoint)


def write_lines(path: Path, events: list[dict], mtime: float) -> None:
    """A JSON-lines file; the file source takes files in modification-time order, so set it explicitly."""
    with path.open("w") as f:
        for e in events:
            iso = pd.Timestamp(e["ts"], unit="ms").isoformat()
            f.write(json.dumps({**e, "ts": iso}) + "\n")
    os.utime(path, (mtime, mtime))


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("wiring", ["stream_udf", "apply_match, one group per key", "apply_match"])
def test_streaming_with_state_equals_oracle(spark, tmp_path, wiring):
    """JSON-lines files arrive in two runs of ``availableNow`` (restarting from the checkpoint), one file
    per micro-batch, out of order within the allowed lateness; a last event far ahead moves the watermark
    past everything, so every buffered event is flushed by an event-time timeout.  By default the query
    streams through the columnar step, its keys hashed into spark.sql.shuffle.partitions buckets, its state
    round-tripping through Spark's state store.  The second run is given the checkpoint and no grouping: it
    resumes with the one the checkpoint was made with (one group per key, or the buckets), read from its
    state schema."""
    # stream_udf: a result column over two events (a.x + c.x), the per-event engine; apply_match: plain var.attr
    # results, the per-event engine with one group per key (buckets=0), else the columnar step in buckets
    query = seq_query(A, ANY_BC, C, where=WHERE, within=4000,
                      returns=RETURNS if wiring == "stream_udf" else RETURNS[:4])
    spec = spec_for(query)
    events = random_events(300, seed=2, spread_ms=40_000)
    rnd = random.Random(5)
    arrival = sorted(events, key=lambda e: e["ts"] + rnd.randint(0, 1500))  # lateness 2 s > jitter
    files = [arrival[k:k + 50] for k in range(0, len(arrival), 50)]
    late = {"id": 0, "type": "C", "ts": EPOCH, "x": 5}  # far behind the watermark by then
    files[-1] = files[-1] + [late]
    files.append([{"id": 99, "type": "Z", "ts": EPOCH + 3_600_000, "x": 0}])
    source, sink, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"
    source.mkdir()

    stream = (spark.readStream.schema(schema_of()).option("maxFilesPerTrigger", 1).json(str(source))
              .withWatermark("ts", "2 seconds")
              .withColumn("_mask", F.expr(MASK_SQL)))
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    for run, group in enumerate([files[:3], files[3:]]):
        if wiring == "stream_udf":
            result = stream.groupBy(*spec.key).applyInPandasWithState(
                stream_udf(to_data(spec), stream.schema), output_schema(spec, stream.schema), STATE_SCHEMA,
                "append", GroupStateTimeout.EventTimeTimeout)
        elif run == 0:  # one group per key asked for, or the default grouping
            result = apply_match(stream, spec, buckets=PER_KEY if "per key" in wiring else None)
        else:  # the grouping the checkpoint was made with, found in it
            assert checkpoint_grouping(spark, str(checkpoint)) == (PER_KEY if "per key" in wiring else partitions)
            result = apply_match(stream, spec, checkpoint=str(checkpoint))
        for k, batch in enumerate(group):
            write_lines(source / f"events-{run}-{k}.json", batch, mtime=time.time() - 100 + 10 * run + k)
        handle = (result.writeStream.format("parquet").option("path", str(sink))
                  .option("checkpointLocation", str(checkpoint)).outputMode("append")
                  .trigger(availableNow=True).start())
        handle.awaitTermination()
    if wiring == "apply_match":  # the micro-batches ran through the columnar construction (stream_columnar)
        assert MatchOperator(spec, stream.schema).with_buckets(partitions).stream_path == COLUMNAR_STREAM
        with pytest.raises(CEPError, match=f"made with {partitions} buckets .*, not one Spark group per key"):
            apply_match(stream, spec, buckets=PER_KEY, checkpoint=str(checkpoint))
    progress = handle.lastProgress
    got = collect_ms(spark.read.parquet(str(sink)))
    expected = match_rows(query, events)
    assert len(expected) > 50
    assert canonical(got) == canonical(expected)
    # every key's state was flushed and dropped once the watermark passed its events
    assert progress["stateOperators"][0]["numRowsTotal"] == 0
