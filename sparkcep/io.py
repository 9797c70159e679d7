"""Reading events into Spark: JSON lines, CSV or Parquet, a file or a directory, batch or streaming."""

from __future__ import annotations

import os

from sparkcep.compiler.errors import CEPError

FORMATS = ("json", "csv", "parquet")


def read_events(spark, path: str, fmt: str, ts_col: str, stream: bool = False, files_per_trigger: int | None = None,
                schema: str | None = None):
    """Read events. ``schema`` is a DDL string (``"type STRING, ts TIMESTAMP, id BIGINT"``); without it, the
    schema is inferred from the files there now.  String ts become timestamps.  ``files_per_trigger`` makes
    a stream take that many files per micro-batch (default: all there are)."""
    from pyspark.sql import functions as F

    if not os.path.exists(path):
        raise CEPError(f"no such input: {path}")
    options = {"header": True, "inferSchema": schema is None} if fmt == "csv" else {}
    if schema is not None:
        from pyspark.sql.types import StructType

        try:
            schema = StructType.fromDDL(schema)
        except Exception as err:  # pyspark raises its own parse exception types
            raise CEPError(f"bad --schema: {str(err).splitlines()[0]}") from None
        static = spark.read.schema(schema).format(fmt).options(**options).load(path)
    else:
        static = spark.read.format(fmt).options(**options).load(path)
        schema = static.schema
    if stream:
        reader = spark.readStream.schema(schema).format(fmt).options(**options)
        if files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", files_per_trigger)
        df = reader.load(path)
    else:
        df = static
    if ts_col in schema.fieldNames() and schema[ts_col].dataType.simpleString() == "string":
        df = df.withColumn(ts_col, F.to_timestamp(F.col(ts_col)))
    return df
