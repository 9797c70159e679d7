"""The validation stage in front of a query: good events go on, bad records become dead letters with a reason.

:func:`read_validated` reads events like :func:`sparkcep.spark.io.read_events` (JSON lines, CSV or Parquet, batch or
stream), but leniently, with an explicit schema of the columns the query reads, so that no record can stop the
job or change how the others are read:

* **only the columns the query reads** (``attributes``: the type, the ts and the attributes of its predicates,
  keys and results; every column for a match query without RETURN) are parsed; a JSON record is read as its
  line of text and parsed with ``from_json`` and that schema, so an array, an object, a key with a quote in
  it or any other attribute the query does not read is never looked at;
* **each column is parsed as text first, then cast** (``try_cast``, Spark SQL's cast rules) to the type the
  query needs (``needs``: numeric where it computes or compares in order, text where it compares with a
  string; :func:`sparkcep.ir.needs.attribute_needs`), else to the type Spark infers for that column from the
  files there when the job starts.  A value that does not cast is a dead letter of its own record:
  ``{"x": "oops"}`` never makes ``x`` a string column for every record;
* ``schema`` (a DDL string, CLI ``--schema``) overrides the types: the columns it lists are read with its
  types, the same way.

It returns two DataFrames:

* ``events``: the rows with a type and a usable ts (string ts become timestamps), ready for the query;
* ``rejected``: one row per bad record, with columns :data:`REASON` and :data:`RECORD` (the raw line of a
  JSON record, else the row as JSON).

Reasons, checked in this order:

==========================  ===========================================================================
``malformed record``        the line is not a JSON object (or not a CSV row of the header's width)
``wrong attribute type: …``  a value the query reads cannot be cast to its column's type, or is not a
                            finite number where a number is needed; names the fields
``missing type``            the type column is null or absent
``missing ts``              the ts column is null or absent
``unparseable ts``          a string ts that is not a timestamp
``ts out of range``         a numeric ts that is not finite, or (streaming) too large for the event-time
                            column; a timestamp outside the years 1678-2261 (streaming)
``unknown event type: T``   only when the stream's types are declared (``known_types``, CLI
                            ``--known-types``): a type outside that list
==========================  ===========================================================================

Conversions (not errors): the type column is always text (a numeric type ``5`` is the type ``"5"``); a JSON
string that casts (``"3"`` where a number is needed) is that value; an array or object in a column read as
text is its JSON text.

Without declared types, events of a type the query does not use are not errors: they are irrelevant to the
pattern (the Spark SQL filter drops them) and counted as ``ignored`` in the job's metrics.  Declare the
stream's vocabulary to catch misspelt or unexpected types as dead letters instead.

Example::

    events, rejected = read_validated(spark, "in/", "json", "type", "ts", stream=True)
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection, Mapping

from sparkcep.ir.errors import CEPError
from sparkcep.ir.needs import NUMERIC, TEXT
from sparkcep.runtime_udfs.event_time import EventTimeScale

#: The columns of a rejected record (dead letters, late events).
REASON, RECORD = "reason", "record"
#: Spark's column for the raw text of a record it could not parse (PERMISSIVE mode).
CORRUPT = "_corrupt_record"
#: Streaming, numeric ts without a declared unit: the largest |ts| whose event-time column (1 ts unit = 1 ms,
#: shifted by ``EVENT_TIME_OFFSET``, in microseconds) fits in 64 bits (:mod:`sparkcep.runtime_udfs.event_time`).
STREAM_TS_LIMIT = EventTimeScale.of(None).limit
#: Streaming, timestamp ts: PySpark hands timestamps to pandas as datetime64[ns], which holds these years.
STREAM_TIME_RANGE = ("1678-01-01 00:00:00", "2261-12-31 23:59:59")


def spark_lists(name: str) -> bool:
    """Whether Spark's file listing keeps a file or a directory of this name (``HadoopFSUtils.listLeafFiles``
    drops both by one rule, ``shouldFilterOutPathName``, before it tells directories from files): not one
    starting with ``.``, nor with ``_`` unless it holds ``=`` (a partition directory ``_key=v``, or a file so
    named), nor one ending in ``._COPYING_`` (a copy that ``hadoop fs -put`` is still writing); but always one
    starting with ``_metadata`` or ``_common_metadata`` (Parquet's summary files).  Such a file is then no data
    file (:func:`spark_reads_file`), while such a directory is listed like any other: the files of
    ``k=1/_metadata/`` are read with ``k=1``, as those of ``k=1/sub/`` (Spark 4.3)."""
    hidden = _hidden(name) or name.endswith("._COPYING_")
    return not hidden or name.startswith(("_metadata", "_common_metadata"))


def spark_reads_file(name: str) -> bool:
    """Whether Spark reads a file of this name in a directory it reads: its listing keeps it
    (:func:`spark_lists`) and it is a data file (``PartitioningAwareFileIndex.isDataPath``: not :func:`_hidden`,
    so not Parquet's ``_metadata`` summary files)."""
    return spark_lists(name) and not _hidden(name)


def _hidden(name: str) -> bool:
    """A name Spark's listing and its data-file test both pass over: starting with ``.``, or with ``_`` unless it
    holds ``=`` (a partition directory ``_key=v``, or a file so named)."""
    return name.startswith(".") or (name.startswith("_") and "=" not in name)


def is_sink_output(path: str) -> bool:
    """Whether the directory ``path`` is a Spark stream's file-sink output: it holds ``_spark_metadata`` (a file or
    a directory, as Spark's ``FileStreamSink.hasMetadata`` asks).  Spark then reads only the files that sink's log
    committed (``MetadataLogFileIndex``), not those an upstream micro-batch left without a commit."""
    return os.path.exists(os.path.join(path, "_spark_metadata"))


def quoted(name: str) -> str:
    """``name`` as a Spark column reference: backquoted, backquotes doubled (dots, quotes, spaces are kept)."""
    return "`" + name.replace("`", "``") + "`"


def read_validated(spark, path: str, fmt: str, type_col: str | None, ts_col: str, *, stream: bool = False,
                   files_per_trigger: int | None = None, schema: str | None = None,
                   known_types: Collection[str] | None = None, attributes: Collection[str] | None = None,
                   needs: Mapping[str, str] | None = None, ts_unit: str | None = None,
                   arrival_col: str | None = None, keep_arrival: bool = False):
    """``(events, rejected)`` from ``path`` (see the module docstring).  ``schema`` is a DDL string;
    ``files_per_trigger`` makes a stream take that many files per micro-batch; ``known_types`` declares the
    stream's event types (others become dead letters); ``attributes``: the columns the query reads besides
    type and ts (None: every column there is); ``needs``: :func:`sparkcep.ir.needs.attribute_needs`; ``ts_unit``:
    the declared unit of numeric ts, which sets the range a stream takes (:mod:`sparkcep.runtime_udfs.event_time`).

    A stream observes the arrival of its valid events (:func:`observed_arrival`): the modification time of
    each record's file, or, with ``arrival_col``, that column of the record (an ingestion time: a timestamp,
    or epoch milliseconds).  ``keep_arrival``: the events keep it as the column :data:`ARRIVAL_COL`, for the
    operator to stamp each result with the arrival of its events (:data:`RESULT_ARRIVAL`)."""
    from pyspark.sql.types import StringType, StructField, StructType

    check_input(path, stream)
    if arrival_col is not None and attributes is not None and arrival_col not in attributes:
        attributes = [*attributes, arrival_col]
    if schema is not None:
        fields = input_schema(spark, path, fmt, {}, schema)
        all_columns = [f.name for f in fields.fields if f.name != CORRUPT]
        wanted = _wanted(all_columns, type_col, ts_col, attributes)
        fields = StructType([f for f in fields.fields if f.name in wanted])
    else:
        if not has_data_files(path):
            raise CEPError(f"no input files in {followed(path)}" + (
                ": a stream that starts before its files needs --schema DDL" if stream else ""))
        inferred = spark.read.format(fmt).options(**reader_options(fmt, None)).load(path).schema
        all_columns = [n for n in inferred.fieldNames() if n != CORRUPT]
        if not all_columns:
            raise CEPError(f"no events in {followed(path)}: every record there is malformed (or the files are empty)")
        wanted = _wanted(all_columns, type_col, ts_col, attributes)
        fields = _query_schema(spark, path, fmt, inferred, wanted, type_col, ts_col, needs or {})
    text = StructType([*(StructField(f.name, StringType()) for f in fields.fields), StructField(CORRUPT, StringType())])
    if fmt == "json":
        raw = _json_lines(spark, path, text, stream, files_per_trigger)
    elif fmt == "csv":
        # CSV columns are positional: read every column of the header (as text), keep the wanted ones
        names = set(fields.fieldNames())
        by_position = StructType([*(StructField(n, StringType()) for n in all_columns),
                                  StructField(CORRUPT, StringType())])
        raw = _load(spark, path, fmt, by_position, {"header": True, "mode": "PERMISSIVE",
                                                     "columnNameOfCorruptRecord": CORRUPT}, stream, files_per_trigger)
        raw = _staged(raw.select(*[quoted(n) for n in all_columns if n in names], CORRUPT,
                                 *([_arrival_of(raw)] if stream else []), *_marks(stream, path)))
    else:
        raw = _load(spark, path, fmt, None if schema is None else fields, {}, stream, files_per_trigger)
        raw = _staged(raw.select(*[quoted(f.name) for f in fields.fields if f.name in raw.columns],
                                 *([_arrival_of(raw)] if stream else []), *_marks(stream, path)))
    if arrival_col is not None and stream and arrival_col not in fields.fieldNames():
        raise CEPError(f"the input has no arrival column {arrival_col!r} (columns: {', '.join(all_columns)})")
    return split_valid(raw, fields, type_col, ts_col, fmt, known_types, stream=stream, declared=schema is not None,
                       ts_unit=ts_unit, arrival_col=arrival_col if stream else None, keep_arrival=keep_arrival)


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


def has_data_files(path: str) -> bool:
    """A file, or a directory where Spark reads at least one file (:func:`spark_reads`; another stream's file-sink
    output: a file its log committed, :func:`sink_files`; left to Spark when that log cannot be read)."""
    found = spark_reads(path)
    if found is None and is_sink_output(path):
        committed = sink_files(path)
        return committed is None or bool(committed)
    return found is None or bool(found[0])


def log_records(path: str):
    """The records of one file of a Spark metadata log (a source's or a sink's file log): a ``v1`` line, then one
    JSON object per line (blank lines skipped).  Another version raises ValueError, an unreadable file OSError."""
    with open(path, encoding="utf-8") as f:
        if f.readline().strip() != "v1":
            raise ValueError(f"{path}: not a v1 file log")
        for line in f:
            if line.strip():
                yield json.loads(line)


def sink_files(path: str) -> list[str] | None:
    """The files another stream's file sink committed to its output ``path`` (:func:`is_sink_output`), which a
    Spark file source reads there (``MetadataLogFileIndex``: the entries of ``_spark_metadata``'s newest batch
    ``<n>`` or ``<n>.compact`` and of those back to the newest ``.compact`` before it, which holds every earlier
    one; not directories), as local paths; ``[]`` before a commit; None when the log cannot be read (then left to
    Spark)."""
    from urllib.parse import unquote, urlparse

    log = os.path.join(path, "_spark_metadata")
    try:
        batches = {}
        for name in os.listdir(log):
            stem = name[:-len(".compact")] if name.endswith(".compact") else name
            if stem.isdigit():
                batches[int(stem)] = name
        compacts = [b for b, name in batches.items() if name.endswith(".compact")]
        start = max(compacts, default=0)
        files = []
        for batch in sorted(b for b in batches if b >= start):
            files += [unquote(urlparse(r["path"]).path) for r in log_records(os.path.join(log, batches[batch]))
                      if not r.get("isDir")]
        return list(dict.fromkeys(files))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def spark_reads(path: str, limit: int | None = None) -> tuple[list[str], set[str]] | None:
    """The files a Spark file source reads at ``path`` (a file: itself), and the partition columns of the
    directories they are in; None past ``limit`` files, or for another stream's file-sink output
    (:func:`is_sink_output`: Spark reads the files that sink's log committed, :func:`sink_files`).

    Spark's rule (``InMemoryFileIndex``, ``PartitioningUtils.parsePartition``): it lists the files of every
    directory its listing keeps (:func:`spark_lists`, at any depth; their data files, :func:`spark_reads_file`); a
    directory holding them is a partition when a ``key=value`` name is on its way up to ``path`` (``k=1/j=2/``;
    ``k=1/sub/`` and ``k=1/_metadata/`` too, read with ``k=1``), its column the key unescaped (:func:`unescaped`:
    ``my%20col=1/`` is the column ``my col``).  With
    partitions, only their files are read (``a.json`` beside ``k=1/b.json`` is not); without, only the files
    directly in ``path`` (``sub/b.json`` is not).  Layouts Spark refuses (partitions beside a plain directory with
    files, or of different columns): their partitions' files here, Spark's own error at the read."""
    if os.path.isfile(path):
        return [path], set()
    if is_sink_output(path):
        return None
    top, partitioned, columns, count = [], [], set(), 0
    for root, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if spark_lists(d))
        files = [os.path.join(root, f) for f in sorted(names) if spark_reads_file(f)]
        count += len(files)
        if limit is not None and count > limit:
            return None
        keys = _partition_keys(os.path.relpath(root, path))
        if root == path:
            top = files
        elif keys and files:
            partitioned += files
            columns.update(keys)
    return (partitioned, columns) if partitioned else (top, set())


def _partition_keys(relative: str) -> list[str]:
    """The partition columns of a directory at ``relative`` below the input (``PartitioningUtils.parsePartition``):
    the keys of the ``key=value`` names from it upwards, up to the first other name above them, each unescaped
    (:func:`unescaped`; the key ends at the first ``=``)."""
    keys = []
    for name in reversed([] if relative == os.curdir else relative.split(os.sep)):
        if "=" in name:
            keys.append(unescaped(name.split("=", 1)[0]))
        elif keys:
            break
    return keys


_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")


def unescaped(name: str) -> str:
    """A partition directory's key or value as Spark reads it (``ExternalCatalogUtils.unescapePathName``, Spark
    4.3): each ``%`` followed by two hex digits is the character of that code (``%3D`` is ``=``, ``%C3`` is
    ``Ã``: no UTF-8 decoding); any other ``%`` stays.

        >>> unescaped("a%3Db%20c%zz%4")
        'a=b c%zz%4'
    """
    return _ESCAPE.sub(lambda m: chr(int(m[1], 16)), name)


#: An attribute name a query can write (the grammar's NAME): the only columns read besides type and ts.
ATTRIBUTE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _wanted(columns: list[str], type_col: str, ts_col: str, attributes: Collection[str] | None) -> list[str]:
    """The columns to read, in input order: type, ts and ``attributes`` that the input has; ``attributes`` None:
    every column whose name a query can write (a key such as ``it's`` or ``a.b`` is no attribute: not read)."""
    if attributes is None:
        attributes = [c for c in columns if ATTRIBUTE_NAME.fullmatch(c)]
    keep = {type_col, ts_col, *attributes}
    return [c for c in columns if c in keep]


def _query_schema(spark, path, fmt, inferred, wanted, type_col, ts_col, needs):
    """The StructType to read ``wanted`` with: the type column as text, the other columns by what the query
    needs of them, else by what Spark inferred for that column (text for arrays, objects and maps)."""
    from pyspark.sql.types import (
        AtomicType,
        DoubleType,
        LongType,
        NumericType,
        StringType,
        StructField,
        StructType,
        TimestampNTZType,
        TimestampType,
    )

    inferred_types = {f.name: f.dataType for f in inferred.fields}
    chosen, undecided = {}, []
    for name in wanted:
        t = inferred_types[name]
        if name == type_col:
            chosen[name] = StringType()
        elif name == ts_col:
            if isinstance(t, NumericType | TimestampType | TimestampNTZType):
                chosen[name] = t
            else:
                undecided.append(name)
        elif needs.get(name) == NUMERIC and not isinstance(t, NumericType):
            undecided.append(name)
        elif needs.get(name) == TEXT or not isinstance(t, AtomicType):
            chosen[name] = StringType()
        else:
            chosen[name] = t
    if undecided:  # one pass over the values as text: are they numbers, whole numbers (timestamps)?
        from pyspark.sql import functions as F

        text = StructType([StructField(n, StringType()) for n in undecided] + [StructField(CORRUPT, StringType())])
        if fmt == "json":
            df = _json_lines(spark, path, text, False, None)
        else:
            df = _load(spark, path, fmt, None, reader_options(fmt, "no inference"), False, None)
        aggs = []
        for n in undecided:
            c = F.col(quoted(n))
            aggs += [F.count(c), F.count(c.try_cast("double")), F.count(c.try_cast("bigint"))]
        counts = df.agg(*aggs).first()
        for k, n in enumerate(undecided):
            total, numbers, whole = counts[3 * k], counts[3 * k + 1], counts[3 * k + 2]
            if n == ts_col and numbers * 2 <= total:  # mostly not numbers: timestamps (as text, parsed)
                chosen[n] = StringType()
            else:
                chosen[n] = LongType() if numbers and whole == numbers else DoubleType()
    return StructType([StructField(n, chosen[n]) for n in wanted])


def _json_lines(spark, path: str, text_schema, stream: bool, files_per_trigger: int | None):
    """JSON lines of ``path`` parsed with ``text_schema`` (every field text, plus :data:`CORRUPT`); the line
    itself (a UTF-8 byte-order mark removed) as :data:`CORRUPT` when it is not a JSON object; blank lines
    skipped, as Spark's JSON reader does.  A stream over the staging directory of the admission control observes
    its lines as :data:`BACKLOG_METRIC` (:func:`observed_backlog`)."""
    from pyspark.sql import functions as F

    lines = _load(spark, path, "text", None, {}, stream, files_per_trigger)
    line = F.regexp_replace(F.col("value"), "^\ufeff", "")
    arrival = [_arrival_of(lines)] if stream else []
    parsed = _staged(lines.where(F.trim(line) != "").select(line.alias("_line"), *arrival, *_marks(stream, path)))
    parsed = parsed.select("_line", *(ARRIVAL_COL for _ in arrival), F.from_json(F.col("_line"), text_schema, {
        "mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}).alias("_parsed"))
    names = [f.name for f in text_schema.fields if f.name != CORRUPT]
    corrupt = F.when(F.col("_parsed").isNull() | F.col(f"_parsed.{CORRUPT}").isNotNull(), F.col("_line"))
    return parsed.select(*[F.col("_parsed").getField(n).alias(n) for n in names], F.col("_line").alias("_line"),
                         *(ARRIVAL_COL for _ in arrival), corrupt.alias(CORRUPT))


#: The arrival time of a streamed record (epoch ms): its file's modification time (Spark's ``_metadata``).
ARRIVAL_COL = "_sparkcep_arrival"

#: The observed metric of the arrival times of a micro-batch's valid events (:func:`observed_arrival`).
ARRIVAL_METRIC = "arrival"


#: The arrival of a result row (epoch ms; streaming, when the operator's input has :data:`ARRIVAL_COL`): its
#: last event's (a match of the columnar step, a MATCH_RECOGNIZE match), the newest of the events it binds (a
#: match or timed-out partial match of the per-event engine), the newest of its window's events (a trend, a
#: sharing context), else (a MATCH_RECOGNIZE row of no match; events stored before their arrival was kept) the
#: newest arrival among the rows its Spark group got in the micro-batch that emitted it (docs/operations.md, "Per
#: result row").
RESULT_ARRIVAL = "_arrival_ms"

#: The optional per-row latency column of a stream's written results: milliseconds from :data:`RESULT_ARRIVAL`
#: to the moment the micro-batch's results were computed, before they are written.
LATENCY_COL = "_latency_ms"


#: The observed metric of a stream read through the admission control
#: (:class:`~sparkcep.spark.shedding.FileAdmission`, every continuous run over a local directory): ``files`` and
#: ``rows``, the files and events waiting behind the micro-batch's newest file when it was handed over: in the
#: followed directory, neither handed over nor shed, and handed over with it but after it (oldest first).
#: ``rows`` is null when one of those files' rows cannot be counted cheaply
#: (:func:`~sparkcep.spark.shedding.count_rows`: a Parquet file's footer, a JSON lines or CSV file's lines, through
#: gzip or bzip2; another codec's are unknown).
BACKLOG_METRIC = "backlog"
#: The file that marks a directory as the admission control's staging directory (Spark's file source skips names
#: starting with ``_``): a stream over it observes :data:`BACKLOG_METRIC`.  It holds the followed directory's path
#: (:func:`followed`).
STAGING_MARK = "_sparkcep_staging"
#: How a staged file's name carries the backlog at its hand-over: ``<stem>_backlog-<files>-<rows><.ext>``
#: (``<stem>_backlog-<files><.ext>`` when the rows are unknown), at the end of the name's first part (``stem``, up
#: to its first dot).  Read as the first match, it is always the one the hand-over appended, whatever the user's
#: name holds: a ``_backlog-N-M`` of the user's stem is followed by the appended suffix (``_``), not by a dot or the
#: end, and one in the extensions comes after it.
_BACKLOG_NAME = re.compile(r"_backlog-(\d+)(?:-(\d+))?(?=\.|$)")
_BACKLOG_COLS = ("_sparkcep_backlog_files", "_sparkcep_backlog_rows")


def staged_name(name: str, files: int, rows: int | None) -> str:
    """The name a file of the followed directory gets in the staging directory: ``name`` with the backlog left
    behind it (``files`` files of ``rows`` events; None: unknown) before its extensions, which Spark reads its
    codec from.

        >>> staged_name("part-01.json.gz", 3, 1500)
        'part-01_backlog-3-1500.json.gz'
        >>> original_name('part-01_backlog-3-1500.json.gz')
        'part-01.json.gz'
        >>> staged_name("part-01.csv.zst", 3, None)
        'part-01_backlog-3.csv.zst'
    """
    stem, dot, ext = name.partition(".")
    return f"{stem}_backlog-{files}{'' if rows is None else f'-{rows}'}{dot}{ext}"


def original_name(staged: str) -> str:
    """The followed directory's name of the staged file ``staged`` (:func:`staged_name`)."""
    return _BACKLOG_NAME.sub("", staged, count=1)


def is_staging(path: str) -> bool:
    """Whether ``path`` is a local staging directory of the admission control (it holds :data:`STAGING_MARK`)."""
    return os.path.isfile(os.path.join(path, STAGING_MARK))


def followed(path: str) -> str:
    """The input directory a staging directory ``path`` is fed from (its :data:`STAGING_MARK` names it), else
    ``path``: what a message about the input names."""
    try:
        with open(os.path.join(path, STAGING_MARK)) as f:
            return f.read().strip() or path
    except OSError:
        return path


def _backlog_marks() -> list:
    """The backlog a staged record's file name carries (:func:`staged_name`), as two BIGINT columns (null for
    a file named otherwise; rows null when unknown)."""
    from pyspark.sql import functions as F

    name = F.col("_metadata.file_name")
    return [F.nullif(F.regexp_extract(name, _BACKLOG_NAME.pattern, k), F.lit("")).cast("bigint").alias(c)
            for k, c in ((1, _BACKLOG_COLS[0]), (2, _BACKLOG_COLS[1]))]


def _marks(stream: bool, path: str) -> list:
    """The backlog columns of a stream over a staging directory (:func:`_backlog_marks`), else none."""
    return _backlog_marks() if stream and is_staging(path) else []


def _staged(rows):
    """``rows`` observed as :data:`BACKLOG_METRIC` (:func:`observed_backlog`) if they carry the backlog columns,
    which are then dropped; else ``rows``."""
    if _BACKLOG_COLS[0] not in rows.columns:
        return rows
    return observed_backlog(rows).drop(*_BACKLOG_COLS)


def observed_backlog(lines):
    """``lines`` (with :data:`ARRIVAL_COL` and the backlog columns of :func:`_backlog_marks`) with the observed
    metric :data:`BACKLOG_METRIC`: the backlog carried by the micro-batch's newest staged file (the largest
    arrival; the admission hands files over oldest first, so it is in the newest slice), i.e. the files and
    events still waiting in the followed directory when that slice was handed over."""
    from pyspark.sql import functions as F

    newest = F.struct(F.col(ARRIVAL_COL), -F.col(_BACKLOG_COLS[0]))  # the same arrival: the smaller backlog
    return lines.observe(BACKLOG_METRIC, *[F.max_by(F.col(c), newest).alias(n)
                                           for c, n in zip(_BACKLOG_COLS, ("files", "rows"), strict=True)])


def _arrival_of(df):
    """The column :data:`ARRIVAL_COL` of a file source's DataFrame: the modification time of each row's file."""
    from pyspark.sql import functions as F

    return F.unix_millis(F.col("_metadata.file_modification_time")).alias(ARRIVAL_COL)


def arrival_millis(column, dtype):
    """An arrival (ingestion-time) column of Spark type ``dtype`` as epoch milliseconds (BIGINT): a timestamp
    (the ``timestamp`` of Spark's rate source), a number (epoch ms), or text holding either; null where it is
    none of these."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import NumericType, StringType, TimestampNTZType, TimestampType

    if isinstance(dtype, TimestampType | TimestampNTZType):
        return F.unix_millis(column.cast("timestamp"))
    if isinstance(dtype, NumericType):
        return column.try_cast("bigint")
    if isinstance(dtype, StringType):
        return F.coalesce(column.try_cast("bigint"), F.unix_millis(F.try_to_timestamp(column)))
    raise CEPError(f"an arrival column must be a timestamp or epoch milliseconds, not {dtype.simpleString()}")


def with_arrival(df, column: str):
    """A stream ``df`` (any source) with its arrival taken from ``column`` (:func:`arrival_millis`: Spark's rate
    source's ``timestamp``, or an ingestion-time column) as :data:`ARRIVAL_COL`, observed per micro-batch as
    :data:`ARRIVAL_METRIC` (:func:`observed_arrival`)."""
    if column not in df.columns:
        raise CEPError(f"the input has no arrival column {column!r} (columns: {', '.join(df.columns)})")
    from pyspark.sql import functions as F

    value = arrival_millis(F.col(quoted(column)), df.schema[column].dataType)
    return observed_arrival(df.withColumn(ARRIVAL_COL, value))


def observed_arrival(events):
    """``events`` with the observed metric :data:`ARRIVAL_METRIC`: per micro-batch, the oldest, 1st percentile,
    median and newest arrival time (epoch ms) of its valid events and their number
    (:mod:`sparkcep.spark.progress` turns them into latencies to the end of the micro-batch and the backlog),
    and ``latency_p50_ms`` / ``latency_p99_ms``: the events' latency from arrival to the micro-batch's start
    (its trigger time, Spark's ``current_timestamp()`` in a stream), for a reader of Spark's own metrics."""
    from pyspark.sql import functions as F

    arrival = F.col(ARRIVAL_COL)
    waited = F.unix_millis(F.current_timestamp()) - arrival
    return events.observe(ARRIVAL_METRIC, F.min(arrival).alias("oldest"),
                          F.percentile_approx(arrival, 0.01).alias("p01"),
                          F.percentile_approx(arrival, 0.5).alias("median"), F.max(arrival).alias("newest"),
                          F.count(arrival).alias("arrived"),
                          F.percentile_approx(waited, 0.5).alias("latency_p50_ms"),
                          F.percentile_approx(waited, 0.99).alias("latency_p99_ms"))


def _load(spark, path: str, fmt: str, schema, options: dict, stream: bool, files_per_trigger: int | None):
    if not stream:
        reader = spark.read.format(fmt).options(**options)
        return (reader.schema(schema) if schema is not None else reader).load(path)
    reader = spark.readStream.format(fmt).options(**options)
    if schema is not None:
        reader = reader.schema(schema)
    elif fmt == "parquet":
        reader = reader.schema(spark.read.parquet(path).schema)
    if files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", files_per_trigger)
    return reader.load(path)


def split_valid(raw, fields, type_col: str, ts_col: str, fmt: str = "json",
                known_types: Collection[str] | None = None, *, stream: bool = False, declared: bool = True,
                ts_unit: str | None = None, arrival_col: str | None = None, keep_arrival: bool = False):
    """``(events, rejected)`` of a DataFrame read with the columns of ``fields`` (a StructType) as text (JSON,
    CSV: cast here) or typed (Parquet), :data:`CORRUPT` for JSON and CSV, and a ``_line`` column for JSON
    (the raw record); with ``known_types``, a type outside it is a dead letter.  ``declared``: ``fields`` is
    the user's schema (a ts of the wrong type is then a wrong attribute type, not an unparseable ts).
    ``arrival_col``: the events' arrival is this column (:func:`arrival_millis`) instead of their file's
    modification time; ``keep_arrival``: the events keep :data:`ARRIVAL_COL`."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, FloatType, NumericType, StringType, TimestampNTZType, TimestampType

    names = fields.fieldNames()
    has_corrupt = CORRUPT in raw.columns
    ts_type = fields[ts_col].dataType if ts_col in names else None
    # a ts read as text becomes a timestamp (unparseable: its own reason), unless the user's schema says a type
    raw_types = dict(raw.dtypes)
    ts_is_string = isinstance(ts_type, StringType) or (
        not declared and isinstance(ts_type, TimestampType | TimestampNTZType) and raw_types.get(ts_col) == "string")
    typed, wrong = {}, []
    for f in fields.fields:
        src = F.col(quoted(f.name))
        if f.name not in raw.columns:
            typed[f.name] = F.lit(None).cast(f.dataType)
            continue
        if f.name == ts_col and ts_is_string:
            typed[f.name] = F.try_to_timestamp(src)
            continue
        if isinstance(f.dataType, StringType) and raw_types[f.name] != "string":
            typed[f.name] = src.cast("string")  # Parquet: a numeric type column
            continue
        as_read = raw_types[f.name] == f.dataType.simpleString()
        value = src if as_read else src.try_cast(f.dataType)
        typed[f.name] = value
        floating = isinstance(f.dataType, DoubleType | FloatType) and f.name != ts_col
        if as_read and not floating:
            continue  # read with its type (Parquet): no value of it is wrong, and no check runs on every row
        bad = src.isNotNull() & value.isNull()
        if floating:
            bad = bad | F.isnan(value) | (F.abs(value) == float("inf"))
        if f.name != ts_col or declared or not isinstance(f.dataType, NumericType):
            wrong.append(F.when(bad, F.lit(f"{f.name} (not {f.dataType.simpleString()})")))
        else:  # an inferred numeric ts: text that is no number is an unusable ts, as a string ts that is no time
            wrong.append(F.when(bad, F.lit(f"{f.name} (not a number)")))

    ts = typed.get(ts_col, F.lit(None))
    typ = typed.get(type_col, F.lit(None))
    reason = None
    if has_corrupt:
        reason = F.when(F.col(CORRUPT).isNotNull(), F.lit("malformed record" if fmt == "json" else
                                                          "malformed record (not a row of the header's width)"))
    if wrong:
        detail = F.concat_ws(", ", *wrong)
        cond, text = detail != "", F.concat(F.lit("wrong attribute type: "), detail)
        reason = F.when(cond, text) if reason is None else reason.when(cond, text)
    checks = [] if type_col is None else [(typ.isNull(), F.lit("missing type"))]  # None: events without a type
    if ts_is_string:
        checks += [(F.col(quoted(ts_col)).isNull(), F.lit("missing ts")), (ts.isNull(), F.lit("unparseable ts"))]
    else:
        checks.append((ts.isNull(), F.lit("missing ts")))
    ts_type = TimestampType() if ts_is_string else ts_type
    if isinstance(ts_type, NumericType) and (stream or isinstance(ts_type, DoubleType | FloatType)):
        # a batch takes any finite ts: a whole number or a decimal as a double always is, so only floats are checked
        limit = EventTimeScale.of(ts_unit).limit if stream else float("inf")
        numeric = ts.cast("double")
        if not stream:
            why = " (not finite)"
        elif ts_unit:
            why = f" (|ts| above {limit} {ts_unit} cannot be streamed)"
        else:  # 1 ts unit is 1 ms of event time: epoch us or ns need their unit
            why = f" (|ts| above {limit} cannot be streamed as ms: declare the ts unit, --ts-unit ns|us|ms|s)"
        checks.append((F.isnan(numeric) | ~(F.abs(numeric) < F.lit(float(limit))), F.lit("ts out of range" + why)))
    elif stream and isinstance(ts_type, TimestampType | TimestampNTZType):
        low, high = (F.lit(t).cast(ts_type) for t in STREAM_TIME_RANGE)
        checks.append(((ts < low) | (ts > high),
                       F.lit(f"ts out of range (a stream takes years {STREAM_TIME_RANGE[0][:4]} to "
                             f"{STREAM_TIME_RANGE[1][:4]})")))
    for cond, text in checks:
        reason = F.when(cond, text) if reason is None else reason.when(cond, text)
    if known_types is not None:
        unknown = F.concat(F.lit("unknown event type: "), typ.cast("string"))
        reason = reason.when(~typ.isin(*sorted(set(known_types))), unknown)

    # the dead letter's record: the raw line of a JSON record, else the row as read (values as text) as JSON
    if "_line" in raw.columns:
        record = F.col("_line")
    else:
        as_json = F.to_json(F.struct(*[F.col(quoted(n)) for n in names if n in raw.columns]))
        record = F.coalesce(F.col(CORRUPT), as_json) if has_corrupt else as_json
    # a stream's arrival: observed, then dropped (kept with keep_arrival)
    if arrival_col is not None:
        arrival = [arrival_millis(typed[arrival_col], fields[arrival_col].dataType).alias(ARRIVAL_COL)]
    else:
        arrival = [ARRIVAL_COL] if ARRIVAL_COL in raw.columns else []
    marked = raw.select(*[typed[n].alias(n) for n in names], record.alias("_sparkcep_record"),
                        reason.alias("_sparkcep_reason"), *arrival)
    events = marked.where(F.col("_sparkcep_reason").isNull())
    if arrival:
        events = observed_arrival(events)
    events = events.select(*[quoted(n) for n in names], *([ARRIVAL_COL] if arrival and keep_arrival else []))
    record = F.col("_sparkcep_record")
    rejected = (marked.where(F.col("_sparkcep_reason").isNotNull())
                .select(F.col("_sparkcep_reason").alias(REASON), record.alias(RECORD)))
    return events, rejected
