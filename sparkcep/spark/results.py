"""Collecting result DataFrames for people and for comparisons, without time-zone surprises.

``collect()`` turns TIMESTAMP values into naive Python datetimes in the *driver's* local zone; these helpers
convert on the Spark side instead (session time zone, UTC in sparkcep sessions).
"""

from __future__ import annotations

import json
from decimal import Decimal

from sparkcep.spark.validate import quoted


def _timestamp_fields(df):
    from pyspark.sql.types import TimestampNTZType, TimestampType

    return {f.name for f in df.schema.fields if isinstance(f.dataType, (TimestampType, TimestampNTZType))}


def epoch_ms_rows(df) -> list[dict]:
    """Rows as dicts, timestamp columns as epoch milliseconds (what engines and the oracle use)."""
    from pyspark.sql import functions as F

    ts = _timestamp_fields(df)
    cols = [F.unix_millis(F.col(quoted(f))).alias(f) if f in ts else F.col(quoted(f)) for f in df.columns]
    return [r.asDict(recursive=True) for r in df.select(*cols).collect()]


def json_lines(df) -> list[str]:
    """One JSON object per row, timestamps as ISO-8601 strings, sorted for a stable output."""
    from pyspark.sql import functions as F

    ts = _timestamp_fields(df)
    cols = [F.date_format(F.col(quoted(f)), "yyyy-MM-dd'T'HH:mm:ss.SSSXXX").alias(f) if f in ts
            else F.col(quoted(f)) for f in df.columns]
    return sorted(json.dumps(r.asDict(recursive=True), default=_json_value) for r in df.select(*cols).collect())


def _json_value(v):
    """Exact DECIMAL values (trend counts) as JSON numbers, whole ones as integers; anything else as text."""
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    return str(v)


def canonical(rows) -> list[tuple]:
    """Rows (dicts) as a sorted list of tuples with floats rounded: compare results as multisets."""
    def norm(v):
        return round(v, 9) if isinstance(v, float) else v

    out = [tuple(sorted((k, norm(v)) for k, v in r.items())) for r in rows]
    return sorted(out, key=repr)
