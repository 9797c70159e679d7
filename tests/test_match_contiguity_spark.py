"""strict_contiguity and partition_contiguity on Spark (batch, streaming, ``sparkcep run``) against the oracle.

Under a contiguity strategy the Spark SQL filter keeps every row (``_mask`` 0 for events that fill no
component: they still break contiguity) with ``_arrival``, the input order; strict contiguity runs as one
partition (the engine checks ``[attr]`` itself), partition contiguity by the query's own equivalence test.
Events of equal ``ts`` keep input order, as in the oracle.
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import LongType, StringType, StructField, StructType

import sparkcep
from sparkcep.cli import main
from sparkcep.oracles.match import match_rows
from sparkcep.spark.results import canonical
from tests.strategies import event_streams

pytestmark = pytest.mark.spark

SCHEMA = StructType([StructField("type", StringType()), StructField("ts", LongType()),
                     StructField("x", LongType()), StructField("id", LongType())])
CONTIGUITY = ["strict_contiguity", "partition_contiguity"]

#: SASE++ Fig. 3 / LANGUAGE.md §5: a1@1 a2@2 b1@5 b2@6 c1@7.
FIG3_QUERY = "PATTERN SEQ(A a, B+ b[], C c) USING {} WITHIN 10 RETURN a.ts, b[1].ts, b[b.len].ts, c.ts"
FIG3 = [{"type": "A", "ts": 1}, {"type": "A", "ts": 2}, {"type": "B", "ts": 5}, {"type": "B", "ts": 6},
        {"type": "C", "ts": 7}]
FIG3_COUNTS = {"strict_contiguity": 1, "partition_contiguity": 1, "skip_till_next_match": 2,
               "skip_till_any_match": 6}

QUERIES = [
    "PATTERN SEQ(A a, B b, C c) USING {} WHERE [id] WITHIN 6 RETURN a.ts, b.ts, c.ts",
    "PATTERN SEQ(A a, B+ b[], C c) USING {} WHERE [id] AND b[i].x >= b[i-1].x WITHIN 8 "
    "RETURN a.ts, b[1].ts, b[b.len].ts, count(b[].x) AS n, c.ts",
    # an equality on every component is not a partition here: under partition contiguity the partition is
    # the query's equivalence test (none), and under strict contiguity the whole input
    "PATTERN SEQ(A a, B b) USING {} WHERE a.id = b.id AND a.x <= b.x WITHIN 5 RETURN a.ts, b.ts, a.id",
    "PATTERN SEQ(A a, !(D d), B b) USING {} WHERE [id = 1] WITHIN 6 RETURN a.ts, b.ts",
    "PATTERN SEQ(ANY(A, C) a, B? b, C c) USING {} WHERE [id] AND a.x < c.x WITHIN 6 RETURN a.ts, b.ts, c.ts",
]


def frame(spark, events):
    return spark.createDataFrame([(e["type"], e["ts"], e.get("x"), e.get("id")) for e in events], SCHEMA)


def spark_rows(df) -> list[dict]:
    return [r.asDict() for r in df.collect()]


@pytest.mark.parametrize("strategy", list(FIG3_COUNTS))
def test_sase_pp_fig3_every_strategy_on_spark(spark, strategy):
    """1 / 1 / 2 / 6 matches (SASE++ Fig. 3) from the batch Spark job, equal to the oracle's rows."""
    q = sparkcep.compile(FIG3_QUERY.format(strategy))
    got = spark_rows(q.apply(frame(spark, [{**e, "x": 0, "id": 0} for e in FIG3])))
    assert len(got) == FIG3_COUNTS[strategy]
    assert canonical(got) == canonical(match_rows(q.query, FIG3))


def test_sase_pp_fig3_through_sparkcep_run(spark, capsys, tmp_path):
    """The four strategies through the CLI on a file; noise (D) between b1 and b2 breaks contiguity only."""
    path = tmp_path / "fig3.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in FIG3))
    noisy = tmp_path / "fig3_noise.jsonl"
    noisy.write_text("".join(json.dumps(e) + "\n" for e in FIG3[:3] + [{"type": "D", "ts": 5}] + FIG3[3:]))
    for strategy, count in FIG3_COUNTS.items():
        text = FIG3_QUERY.format(strategy)
        assert main(["run", "-e", text, "--input", str(path)]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert len(rows) == count, strategy
        assert canonical(rows) == canonical(match_rows(sparkcep.compile(text).query, FIG3))
        assert main(["run", "-e", text, "--input", str(noisy)]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        expected = match_rows(sparkcep.compile(text).query, FIG3[:3] + [{"type": "D", "ts": 5}] + FIG3[3:])
        assert canonical(rows) == canonical(expected)
        # D@5 sits between b1 and b2 in the input: no contiguous A, B+, C remains
        assert len(rows) == (0 if "contiguity" in strategy else count), strategy


@settings(max_examples=12, deadline=None)
@given(strategy=st.sampled_from(CONTIGUITY), text=st.sampled_from(QUERIES),
       events=event_streams("ABCD", max_size=10, max_gap=2))
def test_contiguity_on_spark_equals_oracle(spark, strategy, text, events):
    """Random streams with ties, noise types and two keys: the batch job's rows are the oracle's."""
    q = sparkcep.compile(text.format(strategy))
    got = spark_rows(q.apply(frame(spark, events)))
    assert canonical(got) == canonical(match_rows(q.query, events))


def write_files(events: list[dict], folder, files: int) -> None:
    """``events`` (ts order) in ``files`` JSON-lines files read in this order, cut where ``ts`` changes (an
    event with the ts of an earlier micro-batch would be behind the watermark, i.e. late)."""
    folder.mkdir(parents=True)
    cuts = [k for k in range(1, len(events)) if events[k]["ts"] != events[k - 1]["ts"]]
    step = max(1, len(cuts) // files)
    bounds = [0, *cuts[step - 1::step][:files - 1], len(events)]
    for k, (lo, hi) in enumerate(zip(bounds, bounds[1:], strict=False)):
        path = folder / f"part-{k:02d}.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in events[lo:hi]))
        os.utime(path, (1_000_000 + k, 1_000_000 + k))  # the file source reads in modification-time order


@pytest.mark.slow
@pytest.mark.parametrize("strategy", CONTIGUITY)
def test_contiguity_streaming_in_micro_batches_equals_oracle(spark, tmp_path, strategy):
    """Streaming (one file per micro-batch, checkpointed): the same rows as the oracle over the whole input."""
    import random

    from sparkcep.spark.io import read_events

    rnd = random.Random(11)
    events, ts = [], 0
    for _ in range(60):  # noise events, and chunks A B+ C of one id that an interleaved key may break
        kinds = rnd.choice(["D", "A", "B", "ABC", "ABBC", "ABBBC"])
        key = rnd.randint(0, 1)
        for kind in kinds:
            ts += rnd.choice([0, 1, 1, 2])
            events.append({"type": kind, "ts": ts, "x": rnd.randint(0, 3), "id": key})
    write_files(events, tmp_path / "in", files=4)
    text = QUERIES[1].format(strategy)
    q = sparkcep.compile(text)
    df = read_events(spark, str(tmp_path / "in"), "json", "ts", stream=True, files_per_trigger=1,
                     schema="type STRING, ts BIGINT, x BIGINT, id BIGINT")
    result = q.apply(df)
    (result.writeStream.format("json").option("path", str(tmp_path / "out"))
     .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start().awaitTermination())
    got = spark_rows(spark.read.schema(result.schema).json(str(tmp_path / "out")))
    expected = match_rows(q.query, events)
    assert len(expected) >= 3  # the stream must exercise the query
    assert canonical(got) == canonical(expected)
