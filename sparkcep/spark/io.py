"""Reading events into Spark: JSON lines, CSV or Parquet, a file or a directory, batch or streaming."""

from __future__ import annotations

import os

from sparkcep.ir.errors import CEPError

FORMATS = ("json", "csv", "parquet")


def read_events(spark, path: str, fmt: str, ts_col: str, stream: bool = False, files_per_trigger: int | None = None,
                schema: str | None = None):
    """Read events. ``schema`` is a DDL string (``"type STRING, ts TIMESTAMP, id BIGINT"``); without it, the
    schema is inferred from the files there now.  String ts become timestamps.  ``files_per_trigger`` makes
    a stream take that many files per micro-batch (default: all there are)."""
    from pyspark.sql import functions as F

    check_input(path, stream)
    options = reader_options(fmt, schema)
    schema = input_schema(spark, path, fmt, options, schema)
    df = load(spark, path, fmt, schema, options, stream, files_per_trigger)
    if ts_col in schema.fieldNames() and schema[ts_col].dataType.simpleString() == "string":
        df = df.withColumn(ts_col, F.to_timestamp(F.col(ts_col)))
    return df


def check_input(path: str, stream: bool) -> None:
    """The input exists; a stream reads a directory."""
    if not os.path.exists(path):
        raise CEPError(f"no such input: {path}")
    if stream and not os.path.isdir(path):
        raise CEPError(f"a stream reads a directory (and the files that arrive in it), not the file {path}")


def reader_options(fmt: str, ddl: str | None) -> dict:
    """Reader options of a format: CSV has a header, and its types are inferred when no schema is given."""
    return {"header": True, "inferSchema": ddl is None} if fmt == "csv" else {}


def input_schema(spark, path: str, fmt: str, options: dict, ddl: str | None):
    """The StructType of a DDL string, else the one Spark infers from the files at ``path`` now."""
    from pyspark.sql.types import StructType

    if ddl is None:
        return spark.read.format(fmt).options(**options).load(path).schema
    try:
        return StructType.fromDDL(ddl)
    except Exception as err:  # pyspark raises its own parse exception types
        raise CEPError(f"bad --schema: {str(err).splitlines()[0]}") from None


def load(spark, path: str, fmt: str, schema, options: dict, stream: bool, files_per_trigger: int | None = None):
    """``path`` read with ``schema``: a batch DataFrame, or a stream taking ``files_per_trigger`` files per
    micro-batch (default: all there are)."""
    if not stream:
        return spark.read.schema(schema).format(fmt).options(**options).load(path)
    reader = spark.readStream.schema(schema).format(fmt).options(**options)
    if files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", files_per_trigger)
    return reader.load(path)


def ts_kind_of(schema, ts_col: str) -> str | None:
    """"timestamp" or "numeric" for the ``ts`` column of a Spark schema (None without a schema)."""
    if schema is None:
        return None
    from pyspark.sql.types import NumericType, TimestampNTZType, TimestampType

    if ts_col not in schema.fieldNames():
        raise CEPError(f"the input has no ts column {ts_col!r} (columns: {', '.join(schema.fieldNames())}); "
                       "set the ts column name")
    dtype = schema[ts_col].dataType
    if isinstance(dtype, (TimestampType, TimestampNTZType)):
        return "timestamp"
    if isinstance(dtype, NumericType):
        return "numeric"
    raise CEPError(f"ts column {ts_col!r} must be a timestamp or a number, not {dtype.simpleString()}")


def check_ts_kind(schema, ts_col: str, expected: str) -> None:
    """A job compiled for ``expected`` ts ("timestamp": windows in ms; "numeric": windows in ts units)
    refuses input of the other kind: its windows would mean something else."""
    found = ts_kind_of(schema, ts_col)
    if found != expected:
        raise CEPError(f"this job was compiled for {expected} ts, but {ts_col!r} is {found}: recompile it with "
                       f"`sparkcep compile --ts {found}` (and --ts-unit for numeric ts with durations in units)")


def check_attributes(columns, required) -> None:
    """Every attribute the query reads must be a column of the input (else Spark fails deep in the plan)."""
    missing = [a for a in required if a not in columns]
    if missing:
        raise CEPError(
            f"the query reads {', '.join(repr(m) for m in missing)}, which the input does not have "
            f"(columns: {', '.join(columns)}); a stream whose first files lack an attribute needs an "
            "explicit schema (--schema DDL, or spark.readStream.schema(...))")
