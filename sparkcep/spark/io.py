"""Reading events into Spark: JSON lines, CSV or Parquet, a file or a directory, batch or streaming."""

from __future__ import annotations

import os

from sparkcep.ir.errors import CEPError
from sparkcep.spark.validate import ARRIVAL_COL, ARRIVAL_METRIC, _arrival_of, observed_arrival, read_validated

FORMATS = ("json", "csv", "parquet")


def read_events(spark, path: str, fmt: str, ts_col: str, stream: bool = False, files_per_trigger: int | None = None,
                schema: str | None = None, *, type_col: str | None = None, attributes=None, needs=None):
    """The valid events at ``path``: :func:`sparkcep.spark.validate.read_validated` without its dead letters (one
    reading path: an array or object attribute, a bad value or a malformed line never stops the read nor
    retypes a column).  ``schema`` is a DDL string (``"type STRING, ts TIMESTAMP, id BIGINT"``); without it,
    the types come from the files there now and what the query needs (``attributes``: the columns read besides
    type and ts, None: every one; ``needs``: :func:`sparkcep.ir.needs.attribute_needs`).  String ts become
    timestamps.  ``files_per_trigger`` makes a stream take that many files per micro-batch (default: all).
    ``type_col``: the type column, as text, a record without a type left out (None: no type column is checked,
    every column is read as it is inferred)."""
    events, _rejected = read_validated(spark, path, fmt, type_col, ts_col, stream=stream,
                                       files_per_trigger=files_per_trigger, schema=schema, attributes=attributes,
                                       needs=needs)
    return events


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


def followed_directory(df) -> str | None:
    """The local directory a streaming DataFrame reads, when its only source is Spark's file source
    (``spark.readStream.json(DIR)``, any file format) over one; else None (another source, several, a path that
    is not a local directory, or a session without a JVM to ask)."""
    try:
        leaves = df._jdf.queryExecution().analyzed().collectLeaves()
        if leaves.size() != 1:
            return None
        leaf = leaves.head()
        if leaf.getClass().getSimpleName() != "StreamingRelation":
            return None
        path = leaf.dataSource().options().get("path")
        if not path.isDefined():
            return None
        path = str(path.get())
    except Exception:  # noqa: BLE001 - Spark Connect, another plan shape: not a followed directory
        return None
    path = path.removeprefix("file:")
    return path if os.path.isdir(path) else None


def _observes(plan, name: str) -> bool:
    """Whether the JVM logical ``plan`` holds a ``CollectMetrics`` node (``DataFrame.observe``) named ``name``:
    a walk over the plan's nodes, not a search of its text (which a literal in a filter could fool and which
    Spark abbreviates for wide plans)."""
    nodes = [plan]
    while nodes:
        node = nodes.pop()
        if node.getClass().getSimpleName() == "CollectMetrics" and node.name() == name:
            return True
        children = node.children()
        nodes.extend(children.apply(i) for i in range(children.size()))
    return False


def with_file_arrival(df):
    """A stream over a file source with its events' arrival (their file's modification time) observed per
    micro-batch (:data:`~sparkcep.spark.validate.ARRIVAL_METRIC`: what the backlog controller and the progress
    line read), unless ``df`` observes it already (``read_validated``, ``arrival_col``); the column itself is
    not kept.  None when it cannot be observed (the file's metadata is out of reach of ``df``'s plan)."""
    try:
        if _observes(df._jdf.queryExecution().logical(), ARRIVAL_METRIC):
            return df
        return observed_arrival(df.select("*", _arrival_of(df))).drop(ARRIVAL_COL)
    except Exception:  # noqa: BLE001 - no JVM to ask, no file metadata: no arrival
        return None
