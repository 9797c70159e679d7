"""Checks of ``sparkcep run``'s input in plain Python, before the JVM starts (a Spark start costs a minute or
more on a loaded machine; a mistake about the input should not).

:func:`check_run_input` checks, in this order:

* the input path exists, and is a directory for ``--stream``;
* there are files to read (without ``--schema``);
* the columns of the input (JSON lines: the keys of the records; CSV: the header line; Parquet: the schema of
  the files' footers; ``key=value`` directory names: partition columns) hold the ts column and every attribute
  the queries read.  A missing attribute is one message with the query's line, column and caret, and a
  "did you mean" suggestion from the input's columns;
* the kind of the ts column (JSON: its values; Parquet: its type) against the queries' durations (a unit
  needs timestamps or ``--ts-unit``; a bare number on timestamps needs a unit), with the query's caret.

Only a conclusive answer fails: the check is skipped where it cannot see all the columns Spark would see
(an explicit ``--schema``, compressed files, a JSON line Python's parser refuses, JSON input larger than
:data:`JSON_SCAN_BYTES`, more than :data:`MAX_FILES` files, another stream's file-sink output); Spark's own
checks then report it as before.  The files looked at are those Spark reads
(:func:`sparkcep.spark.validate.spark_reads`: its listing and partition discovery).
Pure: no pyspark.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import os
from collections.abc import Iterable

from sparkcep.ir.ast import walk
from sparkcep.ir.errors import CEPError

#: JSON lines are scanned whole (Spark infers their schema from every record) up to this many bytes in all.
JSON_SCAN_BYTES = 64 * 1024 * 1024
#: At most this many files are looked at (CSV headers, Parquet footers, JSON lines).
MAX_FILES = 2000


def suggestion(name: str, candidates: Iterable[str], cutoff: float = 0.6) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``candidates`` to ``name`` (difflib), else ``""``."""
    candidates = list(candidates)
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=cutoff)
    if not close and name.lower() in {c.lower() for c in candidates}:
        close = [c for c in candidates if c.lower() == name.lower()][:1]
    return f"; did you mean {close[0]!r}?" if close else ""


def check_path(path: str, stream: bool) -> None:
    """The input exists; a stream reads a directory."""
    if not os.path.exists(path):
        raise CEPError(f"no such input: {path}" + _path_suggestion(path))
    if stream and not os.path.isdir(path):
        raise CEPError(f"a stream reads a directory (and the files that arrive in it), not the file {path}")


def _path_suggestion(path: str) -> str:
    parent = os.path.dirname(os.path.abspath(path))
    try:
        names = os.listdir(parent)
    except OSError:
        return ""
    return suggestion(os.path.basename(path.rstrip(os.sep)), names, cutoff=0.8)


def data_files(path: str) -> tuple[list[str], set[str]] | None:
    """The files Spark's file sources read at ``path`` and the partition columns of their ``key=value``
    directories (:func:`sparkcep.spark.validate.spark_reads`: Spark's listing and partition discovery); None past
    :data:`MAX_FILES` files, or for another stream's file-sink output (Spark reads what its log committed)."""
    from sparkcep.spark.validate import spark_reads

    return spark_reads(path, MAX_FILES)


def input_columns_of(path: str, fmt: str) -> set[str] | None:
    """The columns Spark would find at ``path`` in format ``fmt``, or None when that cannot be told cheaply
    and surely (see the module docstring).  An input without files: None (Spark's reader reports it)."""
    return scan_input(path, fmt, None)[0]


def scan_input(path: str, fmt: str, ts_col: str | None) -> tuple[set[str] | None, str | None]:
    """``(columns, ts kind)`` of the input: the columns as :func:`input_columns_of`; the kind of ``ts_col``
    ("numeric" or "timestamp") as the run will read it (``sparkcep.spark.validate``: numbers, or text that is
    mostly numbers, are numeric; other text is timestamps), None where unsure (CSV, an odd value)."""
    found = data_files(path)
    if found is None or not found[0]:
        return None, None
    files, columns = found
    if any(os.path.splitext(f)[1].lower() in (".gz", ".bz2", ".zst", ".lz4", ".snappy", ".deflate", ".xz")
           and fmt != "parquet" for f in files):
        return None, None
    try:
        if fmt == "json":
            more, kind = _json_scan(files, ts_col)
        elif fmt == "parquet":
            more, kind = _parquet_scan(files, ts_col)
        else:
            more, kind = _csv_columns(files), None
    except (OSError, ValueError, ImportError):
        return None, None
    return (None, None) if more is None else (columns | more, kind)


def _json_scan(files: list[str], ts_col: str | None) -> tuple[set[str] | None, str | None]:
    budget, columns = JSON_SCAN_BYTES, set()
    total = numbers = 0
    odd = False
    for f in files:
        budget -= os.path.getsize(f)
        if budget < 0:
            return None, None
        with open(f, "rb") as fh:
            for raw in fh:
                line = raw.decode("utf-8", "replace").lstrip("\ufeff").strip()
                if not line:
                    continue
                try:
                    record = json.loads(line)
                except ValueError:  # malformed, or a form Spark's parser takes (single quotes): not sure
                    return None, None
                for r in record if isinstance(record, list) else [record]:
                    if not isinstance(r, dict):
                        continue
                    columns.update(r)
                    value = r.get(ts_col)
                    if value is None:
                        continue
                    total += 1
                    if isinstance(value, bool) or not isinstance(value, int | float | str):
                        odd = True
                    elif not isinstance(value, str) or _is_number(value):
                        numbers += 1
    kind = None if odd or not total else ("timestamp" if numbers * 2 <= total and numbers < total else "numeric")
    return columns, kind


def _is_number(text: str) -> bool:
    """Does Spark's cast take ``text`` as a double (Python's float() also takes ``1_000``)?"""
    if "_" in text:
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


def _parquet_scan(files: list[str], ts_col: str | None) -> tuple[set[str], str | None]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns, kinds = set(), set()
    for f in files:
        schema = pq.read_schema(f)
        columns.update(schema.names)
        if ts_col in schema.names:
            t = schema.field(ts_col).type
            kinds.add("timestamp" if pa.types.is_timestamp(t) else
                      "numeric" if pa.types.is_integer(t) or pa.types.is_floating(t) else None)
    return columns, kinds.pop() if len(kinds) == 1 else None


def _csv_columns(files: list[str]) -> set[str]:
    columns = set()
    for f in files:
        with open(f, encoding="utf-8", errors="replace", newline="") as fh:
            header = next((line for line in fh if line.strip()), None)
        if header is not None:
            row = next(csv.reader(io.StringIO(header.lstrip("\ufeff"))), [])
            columns.update(c.strip() for c in row)
    return columns


def _span_of(queries, attribute: str):
    """The first place a query's text reads ``attribute``: ``(span, source)`` or ``(None, None)``."""
    for q in queries:
        for node in walk(q.query):
            if getattr(node, "attr", None) == attribute and getattr(node, "span", None) is not None:
                return node.span, q.source
    return None, None


def check_columns(queries, columns, *, where: str = "the input", attributes=None, hint: str = "") -> None:
    """Every attribute the compiled ``queries`` read (``attributes``, default :func:`read_attributes`) must be one
    of ``columns``: else one :class:`CEPError` at the first place a query's text reads the missing one (line,
    column, caret), with the input's columns and a near name.  ``run`` checks the files before Spark starts;
    ``CompiledQuery.apply`` a DataFrame's schema."""
    listed = ", ".join(sorted(columns))
    for a in read_attributes(queries) if attributes is None else attributes:
        if a not in columns:
            span, source = _span_of(queries, a)
            raise CEPError(f"the query reads {a!r}, which {where} does not have (columns: {listed})"
                           + suggestion(a, columns) + hint, span, source)


def read_attributes(queries) -> list[str]:
    """Every attribute the compiled queries' plans read, in order (a match query without RETURN too, whose
    results show every column: it reads these at least)."""
    from sparkcep.compiler.optimizer.prune_columns import referenced_attributes

    out: list[str] = []
    for q in queries:
        out += [a for a in referenced_attributes(q.plan()) if a not in out]
    return out


def _columns(path: str, fmt: str, stream: bool, schema: str | None, ts_col: str | None = None):
    """The path checks, then the input's columns (None: not to be checked, see the module docstring) and the
    kind of ``ts_col`` (:func:`scan_input`)."""
    check_path(path, stream)
    if schema is not None:
        return None, None
    from sparkcep.spark.validate import has_data_files, is_sink_output

    found = data_files(path)
    if found is not None:
        empty = not found[0]
    else:  # past MAX_FILES (not walked again), or another stream's file-sink output (the files its log committed)
        empty = is_sink_output(path) and not has_data_files(path)
    if empty:
        raise CEPError(f"no input files in {path}" + (
            ": a stream that starts before its files needs --schema DDL" if stream else ""))
    return scan_input(path, fmt, ts_col)


def check_run_input(queries, *, path: str, fmt: str, stream: bool, ts_col: str, schema: str | None = None) -> None:
    """Raise :class:`CEPError` for a mistake about ``sparkcep run``'s input (module docstring).  ``queries``:
    the compiled queries (:class:`sparkcep.CompiledQuery`)."""
    columns, kind = _columns(path, fmt, stream, schema, ts_col)
    if columns is None:
        return
    listed = ", ".join(sorted(columns))
    if ts_col not in columns:
        raise CEPError(f"the input has no ts column {ts_col!r} (columns: {listed}; --ts-col names it)"
                       + suggestion(ts_col, columns))
    check_columns(queries, columns, where=f"the input {path}")
    if kind is not None:  # the checks that need the ts kind (durations with or without units), as the run does
        from sparkcep.compiler.analysis import analyze

        for q in queries:
            analyze(q.query, q.source, ts_kind=kind, ts_unit=q.ts_unit)


def check_statement_input(statement, columns_named, *, path: str, fmt: str, stream: bool,
                          schema: str | None = None) -> None:
    """As :func:`check_run_input`, for a MATCH_RECOGNIZE statement (:class:`sparkcep.ir.recognize.Recognize`,
    whose FROM table is the input): ``columns_named``, the columns it names (PARTITION BY, ORDER BY, DEFINE,
    MEASURES), must be the input's; one named in DEFINE or MEASURES is shown with its line, column and caret."""
    columns = _columns(path, fmt, stream, schema)[0]
    if columns is None:
        return
    listed, lowered = ", ".join(sorted(columns)), {c.lower() for c in columns}
    for name in columns_named:
        if name.lower() not in lowered:  # SQL names are case-insensitive, as in Spark
            span = _first_span(statement, name)
            raise CEPError(f"the statement reads the column {name!r} of {statement.source}, which the input {path} "
                           f"does not have (columns: {listed})" + suggestion(name, columns),
                           span, statement.text if span is not None else None)


def _first_span(x, name: str):
    """The span of the first attribute reference ``name`` (with a span) anywhere inside ``x``, else None."""
    if getattr(x, "attr", None) == name and getattr(x, "span", None) is not None:
        return x.span
    if isinstance(x, tuple | list):
        items = x
    elif getattr(x, "__dataclass_fields__", None):
        items = [getattr(x, f) for f in x.__dataclass_fields__ if f != "span"]
    else:
        return None
    for item in items:
        span = _first_span(item, name)
        if span is not None:
            return span
    return None
