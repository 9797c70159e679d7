"""The streaming sink writes a micro-batch in one Spark job (``sinks.batch_writer``): the same JSON lines as
Spark's JSON writer, each kind in its own directory, a re-run batch replacing its own files."""

from __future__ import annotations

import datetime as dt
import glob
import os

import pytest

pytestmark = pytest.mark.spark


def _lines(pattern: str) -> list[str]:
    out = []
    for path in glob.glob(pattern):
        with open(path) as f:
            out += [line.rstrip("\n") for line in f if line.strip()]
    return sorted(out)


def test_batch_writer_writes_every_kind_in_one_job_as_the_json_writer_would(spark, tmp_path):
    from pyspark.sql import functions as F

    from sparkcep.spark.late import KIND, REASON, RECORD
    from sparkcep.spark.sinks import batch_writer

    t = dt.datetime(2024, 1, 2, 3, 4, 5, 678000)
    rows = [("result", "q1", 7, 1.5, t, [1, 2], None, None), ("result", None, None, None, None, None, None, None),
            ("late", None, None, None, None, None, "late: ts before the watermark 3", '{"ts": 1}'),
            ("dead_letter", None, None, None, None, None, "malformed record", "{oops"),
            ("result", "q'2\"", -3, float("nan"), t, [], None, None)]
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, 3),
                               f"{KIND} string, query string, n bigint, x double, at timestamp, xs array<bigint>, "
                               f"{REASON} string, {RECORD} string")
    out, dead, late = (str(tmp_path / d) for d in ("out", "dead", "late"))
    write = batch_writer(out, ["query", "n", "x", "at", "xs"], dead, late)
    spark.sparkContext.setJobGroup("sink-one-job", "one micro-batch")
    try:
        write(df, 7)
        write(df, 7)  # a re-run of the batch replaces its own files
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup("sink-one-job")
    assert len(jobs) == 2  # one job per write of the micro-batch

    expected = {}
    for kind, columns, folder in (("result", ["query", "n", "x", "at", "xs"], "r"),
                                  ("dead_letter", [F.col(REASON).alias("reason"), F.col(RECORD).alias("record")], "d"),
                                  ("late", [F.col(REASON).alias("reason"), F.col(RECORD).alias("record")], "l")):
        df.where(F.col(KIND) == kind).select(*columns).write.json(str(tmp_path / "expected" / folder))
        expected[kind] = _lines(str(tmp_path / "expected" / folder / "part-*"))
    assert _lines(f"{out}/part-b00000007-*.json") == expected["result"]
    assert _lines(f"{dead}/part-b00000007-*.json") == expected["dead_letter"]
    assert _lines(f"{late}/part-b00000007-*.json") == expected["late"]
    assert len(expected["result"]) == 3 and '"at":"2024-01-02T03:04:05.678Z"' in expected["result"][0] + \
        expected["result"][1] + expected["result"][2]
    assert not [n for n in os.listdir(out) if n.startswith("_staging")]
