"""The validation stage in front of a query: good events go on, bad records become dead letters with a reason.

:func:`read_validated` reads events like :func:`sparkcep.io.read_events` (JSON lines, CSV or Parquet, batch or
stream), but leniently: JSON and CSV are read ``PERMISSIVE`` with a ``_corrupt_record`` column, so that a
malformed line or a value that does not fit the schema never stops the job.  It returns two DataFrames:

* ``events``: the rows with a type and a usable ts (string ts become timestamps), ready for the query;
* ``rejected``: one row per bad record, with columns :data:`REASON` and :data:`RECORD` (the raw line, or
  the row as JSON when there is no raw line).

Reasons, checked in this order:

==========================  ===========================================================================
``malformed record``        the line is not a JSON object (or not a CSV row of the header's width)
``wrong attribute type: …``  well-formed, but a value cannot be read as its column's type (the schema is
                            the DDL given, else the one inferred when the job started); names the fields
``missing type``            the type column is null or absent
``missing ts``              the ts column is null or absent
``unparseable ts``          a string ts that is not a timestamp
``unknown event type: T``   only when the stream's types are declared (``known_types``, CLI
                            ``--known-types``): a type outside that list
==========================  ===========================================================================

Without declared types, events of a type the query does not use are not errors: they are irrelevant to the
pattern (the Spark SQL filter drops them) and counted as ``ignored`` in the job's metrics.  Declare the
stream's vocabulary to catch misspelt or unexpected types as dead letters instead.

Example::

    events, rejected = read_validated(spark, "in/", "json", "type", "ts", stream=True)
"""

from __future__ import annotations

from collections.abc import Collection

from sparkcep.io import check_input, input_schema, load, reader_options

#: The columns of a rejected record (dead letters, late events).
REASON, RECORD = "reason", "record"
#: Spark's column for the raw text of a record it could not parse (PERMISSIVE mode).
CORRUPT = "_corrupt_record"


def read_validated(spark, path: str, fmt: str, type_col: str, ts_col: str, *, stream: bool = False,
                   files_per_trigger: int | None = None, schema: str | None = None,
                   known_types: Collection[str] | None = None):
    """``(events, rejected)`` from ``path`` (see the module docstring).  ``schema`` is a DDL string;
    ``files_per_trigger`` makes a stream take that many files per micro-batch; ``known_types`` declares the
    stream's event types (others become dead letters)."""
    from pyspark.sql.types import StringType, StructField, StructType

    check_input(path, stream)
    options = reader_options(fmt, schema)
    # the schema to read with, without the corrupt-record column (added for reading)
    fields = input_schema(spark, path, fmt, options, schema)
    fields = StructType([f for f in fields.fields if f.name != CORRUPT])
    if fmt in ("json", "csv"):  # lenient: a bad record becomes a dead letter, never stops the job
        options = {**options, "mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
        read_schema = StructType([*fields.fields, StructField(CORRUPT, StringType())])
    else:
        read_schema = fields
    raw = load(spark, path, fmt, read_schema, options, stream, files_per_trigger)
    return split_valid(raw, fields, type_col, ts_col, fmt, known_types)


def split_valid(raw, fields, type_col: str, ts_col: str, fmt: str = "json",
                known_types: Collection[str] | None = None):
    """``(events, rejected)`` of a DataFrame read with :data:`CORRUPT` (if ``fmt`` is json or csv) and the
    columns ``fields`` (a StructType); with ``known_types``, a type outside it is a dead letter."""
    from pyspark.sql import functions as F

    names = fields.fieldNames()
    has_corrupt = CORRUPT in raw.columns
    ts_is_string = ts_col in names and fields[ts_col].dataType.simpleString() == "string"
    ts = F.try_to_timestamp(F.col(ts_col)) if ts_is_string else (F.col(ts_col) if ts_col in names else F.lit(None))
    typ = F.col(type_col) if type_col in names else F.lit(None)

    reason = None
    if has_corrupt:
        corrupt = F.col(CORRUPT)
        if fmt == "json":
            wrong = [F.when(F.get_json_object(corrupt, f"$.{f.name}").isNotNull()
                            & F.expr(f"try_cast(get_json_object(`{CORRUPT}`, '$.{f.name}') AS "
                                     f"{f.dataType.simpleString()})").isNull(),
                            F.lit(f"{f.name} (not {f.dataType.simpleString()})"))
                     for f in fields.fields if f.dataType.simpleString() != "string"]
            detail = F.concat_ws(", ", *wrong) if wrong else F.lit("")
            well_formed = F.get_json_object(corrupt, "$").isNotNull() & corrupt.startswith("{")
            corrupt_reason = F.when(~well_formed, F.lit("malformed record")).otherwise(
                F.concat(F.lit("wrong attribute type: "),
                         F.when(detail == "", F.lit("a value does not fit the schema")).otherwise(detail)))
        else:
            corrupt_reason = F.lit("malformed record or wrong attribute type")
        reason = F.when(corrupt.isNotNull(), corrupt_reason)
    checks = [(typ.isNull(), "missing type")]
    if ts_is_string:
        checks += [(F.col(ts_col).isNull(), "missing ts"), (ts.isNull(), "unparseable ts")]
    else:
        checks.append((ts.isNull(), "missing ts"))
    for cond, text in checks:
        reason = F.when(cond, F.lit(text)) if reason is None else reason.when(cond, F.lit(text))
    if known_types is not None:
        unknown = F.concat(F.lit("unknown event type: "), typ.cast("string"))
        reason = reason.when(~typ.isin(*sorted(set(known_types))), unknown)

    marked = raw.withColumn("_sparkcep_reason", reason)
    good = marked.where(F.col("_sparkcep_reason").isNull())
    if ts_is_string:
        good = good.withColumn(ts_col, ts)
    events = good.select(*names)
    as_json = F.to_json(F.struct(*[F.col(f"`{n}`") for n in names]))
    record = F.coalesce(F.col(CORRUPT), as_json) if has_corrupt else as_json
    rejected = (marked.where(F.col("_sparkcep_reason").isNotNull())
                .select(F.col("_sparkcep_reason").alias(REASON), record.alias(RECORD)))
    return events, rejected
