"""The Arrow batch path of the match adapters (``MatchOperator.run_table``, what ``batch_matches`` runs per
partition): same rows as the oracle and as the pandas conversions of the streaming path, without a JVM;
conversions of Arrow timestamps, nulls and NaN; the per-group result frames."""

from __future__ import annotations

import math

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType, TimestampType

import sparkcep
from sparkcep.ir.ast import Attr
from sparkcep.oracles.match import match_rows
from sparkcep.runtime_udfs.expr.scalar import LACKING
from sparkcep.spark.arrow import _arrow_epoch_ms
from sparkcep.spark.group_state import SimulatedGroup
from sparkcep.spark.operator import MatchOperator
from tests.test_match_engine import seq_query, spec_for
from tests.test_spark_adapters import ANY_BC, EPOCH, RETURNS, WHERE, A, C, random_events, schema_of

#: Arrow's type for a Spark TIMESTAMP column as PySpark hands it to ``applyInArrow`` (UTC session).
TS_UTC = pa.timestamp("us", tz="UTC")


def arrow_group(events: list[dict], ts_type: pa.DataType = TS_UTC) -> pa.Table:
    """One Spark group as ``applyInArrow`` gives it: ``id, type, ts, x`` (x nullable), ts as epoch ms → us."""
    return pa.table({
        "id": pa.array([e["id"] for e in events], pa.int64()),
        "type": pa.array([e["type"] for e in events], pa.string()),
        "ts": pa.array([None if e["ts"] is None else round(e["ts"] * 1000) for e in events],
                       pa.int64()).cast(ts_type),
        "x": pa.array([e.get("x") for e in events], pa.int64()),
    })


def pandas_group(events: list[dict]) -> pd.DataFrame:
    """The same group as ``applyInPandasWithState`` gives it (naive UTC wall-clock times, x float64 with NaN)."""
    pdf = pd.DataFrame({"id": [e["id"] for e in events], "type": [e["type"] for e in events],
                        "ts": [e["ts"] for e in events], "x": [e.get("x", math.nan) for e in events]})
    pdf["ts"] = pd.to_datetime(pdf["ts"], unit="ms")
    return pdf


def _value(v):
    if v is None or v is LACKING or (isinstance(v, float) and v != v):
        return None
    if isinstance(v, float):
        return int(v) if v.is_integer() else round(v, 9)
    return v


def canonical(rows: list[dict]) -> list[str]:
    """Rows as a sorted multiset of values: null, lacking and NaN alike, whole floats as ints (the pandas
    path reads a nullable integer column as floats)."""
    return sorted(repr(sorted((k, _value(v)) for k, v in r.items())) for r in rows)


def by_key(events: list[dict]) -> dict[int, list[dict]]:
    groups: dict[int, list[dict]] = {}
    for e in events:
        groups.setdefault(e["id"], []).append(e)
    return groups


def rows_ms(table: pa.Table) -> list[dict]:
    """Result rows with timestamps as epoch ms (numbers), as the oracle gives them."""
    columns = {}
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_timestamp(col.type):
            columns[name] = [None if us is None else us / 1000 for us in pc.cast(col, pa.int64()).to_pylist()]
        else:
            columns[name] = col.to_pylist()
    return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(0, 60), spread=st.sampled_from([2_000, 8_000, 30_000]),
       buckets=st.sampled_from([None, 2]))
def test_arrow_batch_equals_the_oracle_and_the_pandas_path(seed, n, spread, buckets):
    """``run_table`` on one group's Arrow table; the pandas path is the streaming function's, called once with
    a watermark past every event (so it flushes like a batch)."""
    query = seq_query(A, ANY_BC, C, where=WHERE, within=4000, returns=RETURNS)
    spec = spec_for(query)
    events = random_events(n, seed=seed, spread_ms=spread)
    op = MatchOperator(spec, schema_of(), timezone="UTC", buckets=buckets)
    arrow_fn, stream_fn = op.run_table, op.stream_function()

    def pandas_fn(pdf: pd.DataFrame) -> pd.DataFrame:
        frames = list(stream_fn((), iter([pdf]), SimulatedGroup(None, 2**62)))
        return pd.concat(frames) if frames else op.frame([])

    got, via_pandas = [], []
    if buckets:  # one Spark group holds several keys
        groups = {k % buckets: [] for k in range(4)}
        for e in events:
            groups[e["id"] % buckets].append(e)
    else:
        groups = by_key(events)
    for part in groups.values():
        table = arrow_fn(arrow_group(part))
        assert table.schema.names == op.output_schema.names
        got.extend(rows_ms(table))
        frame = pandas_fn(pandas_group(part))
        for row in frame.to_dict("records"):
            via_pandas.append({k: v.value // 1000 / 1000 if isinstance(v, pd.Timestamp) else v
                               for k, v in row.items()})
    expected = match_rows(query, events)
    assert canonical(got) == canonical(expected)
    assert canonical(got) == canonical(via_pandas)


def test_arrow_epoch_ms_keeps_sub_ms_precision_and_nulls():
    col = pa.array([EPOCH * 1000, None, EPOCH * 1000 + 250], pa.int64()).cast(TS_UTC)
    assert _arrow_epoch_ms(col) == [EPOCH, None, EPOCH + 0.25]
    whole = pa.chunked_array([pa.array([EPOCH * 1000, None], pa.int64()).cast(pa.timestamp("us"))])
    assert _arrow_epoch_ms(whole) == [EPOCH, None]
    assert all(isinstance(v, int) for v in _arrow_epoch_ms(whole) if v is not None)
    seconds = pa.array([EPOCH // 1000], pa.int64()).cast(pa.timestamp("s", tz="America/New_York"))
    assert _arrow_epoch_ms(seconds) == [EPOCH]  # the instant, whatever the zone attached


def test_result_timestamps_and_types_in_arrow():
    spec = spec_for(seq_query(A, C, returns=(Attr("a", "ts"), Attr("c", "x"))))
    op = MatchOperator(spec, schema_of(), timezone="America/New_York")
    table = op.table([{"a_ts": EPOCH, "c_x": 2}, {"a_ts": EPOCH + 0.25, "c_x": None}, {"a_ts": None, "c_x": 1.0}])
    assert table.schema.field("a_ts").type == pa.timestamp("us", tz="America/New_York")
    assert pc.cast(table.column("a_ts"), pa.int64()).to_pylist() == [EPOCH * 1000, EPOCH * 1000 + 250, None]
    assert table.column("c_x").to_pylist() == [2, None, 1]
    assert op.table([]).num_rows == 0 and op.table([]).schema == table.schema


def test_nan_and_null_float_keys_are_one_partition():
    schema = StructType([StructField("k", DoubleType()), StructField("type", StringType()),
                         StructField("ts", LongType())])
    q = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [k] WITHIN 10 RETURN a.ts, b.ts")
    op = MatchOperator(q.spec(schema), schema, buckets=1)
    table = pa.table({"k": pa.array([float("nan"), None, 1.0], pa.float64()), "type": ["A", "B", "B"],
                      "ts": pa.array([1, 2, 3], pa.int64())})
    assert op.run_table(table).to_pylist() == [{"a_ts": 1, "b_ts": 2}]


def test_an_empty_result_frame_is_built_once_and_typed():
    spec = spec_for(seq_query(A, C, returns=(Attr("a", "ts"), Attr("c", "x"))))
    op = MatchOperator(spec, StructType([*schema_of().fields, StructField("y", TimestampType())]), timezone="UTC")
    empty = op.frame([])
    assert empty is op.frame([]) and list(empty.columns) == ["a_ts", "c_x"] and empty.empty
    assert str(empty["a_ts"].dtype).startswith("datetime64")
    assert op.frame([{"a_ts": EPOCH, "c_x": 1}])["c_x"].tolist() == [1]


@pytest.mark.parametrize("n", [0, 1])
def test_groups_without_rows_give_empty_tables(n):
    spec = spec_for(seq_query(A, C, returns=(Attr("a", "ts"),)))
    op = MatchOperator(spec, schema_of(), timezone="UTC")
    events = [{"id": 1, "type": "A", "ts": EPOCH, "x": 1}][:n]
    assert op.run_table(arrow_group(events)).num_rows == 0


@pytest.mark.parametrize(("query", "columns", "unread"), [
    ("EVENT SEQ(E1 e1, E2 e2, E3 e3) WHERE [attr1] WITHIN 400 RETURN e1.ts",
     ["type", "ts", "attr1", "x", "_mask"], ["type", "x"]),
    ("EVENT SEQ(E1 e1, E2 e2) WHERE [attr1] WITHIN 400 RETURN e1.ts", ["type", "ts", "attr1"], []),  # no _mask
    ("PATTERN SEQ(A a, ANY(B, C) b, C c) WHERE [id] AND b.x > 0 AND a.y < c.y WITHIN 10 RETURN a.ts, b.type",
     ["type", "ts", "id", "x", "y", "z", "_mask", "_arrival"], ["z"]),
    ("EVENT SEQ(A a, !(B b), C c) WHERE [id] WITHIN 10 RETURN a.ts", ["type", "ts", "id", "x", "_mask"], ["x"]),
    ("EVENT SEQ(A a, C c) WHERE a.z > 1 WITHIN 10 RETURN c.ts", ["type", "ts", "z", "w", "_mask"], ["type", "w"]),
    # without RETURN, every attribute of every positive component is a result column
    ("EVENT SEQ(A a, C c) WHERE a.z > 1 WITHIN 10", ["type", "ts", "z", "w", "_mask"], []),
])
def test_unread_columns_are_what_the_engine_never_reads(query, columns, unread):
    from sparkcep.spark.adapters import unread_columns

    schema = StructType([StructField(c, StringType() if c == "type" else LongType()) for c in columns])
    assert unread_columns(sparkcep.compile(query).spec(schema), columns) == unread
