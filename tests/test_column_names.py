"""Column names reach Spark as quoted references (``spark.validate.quoted``), never spliced into SQL text: a
backtick, a dot or a space in a name is a name, not syntax."""

from __future__ import annotations

import datetime as dt

import pytest

from sparkcep.spark.results import epoch_ms_rows, json_lines

pytestmark = pytest.mark.spark

ODD = ["t`s", "a.b", "c d"]


def test_result_helpers_read_columns_with_odd_names(spark):
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    df = spark.createDataFrame([(when, 7, "x")], f"`{ODD[0].replace('`', '``')}` TIMESTAMP, `a.b` BIGINT, `c d` STRING")
    assert df.columns == ODD
    assert epoch_ms_rows(df) == [{"t`s": int(when.timestamp() * 1000), "a.b": 7, "c d": "x"}]
    assert json_lines(df) == ['{"t`s": "2026-01-02T03:04:05.000Z", "a.b": 7, "c d": "x"}']
