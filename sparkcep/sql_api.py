"""``sparkcep.sql``: a SQL:2016 ``MATCH_RECOGNIZE`` statement run on Spark, batch or streaming.

    >>> events.createOrReplaceTempView("ticks")                           # doctest: +SKIP
    >>> sparkcep.sql('''
    ...     SELECT * FROM ticks MATCH_RECOGNIZE (
    ...         PARTITION BY symbol ORDER BY ts
    ...         MEASURES FIRST(A.price) AS start_price, LAST(B.price) AS bottom
    ...         PATTERN (A B+) DEFINE B AS B.price < PREV(B.price))''').show()  # doctest: +SKIP

:func:`sql` parses the statement (``sparkcep.grammar.recognize``), checks it (``sparkcep.compiler.recognize``;
streaming if the table is a streaming view), reads the FROM table or view from the session's catalog and runs
:func:`apply_recognize`: the Spark projection of per-row expressions, the engine spec built from the projected
schema, the engine (``sparkcep.spark.recognize``: one ``mapInArrow`` pass in batch, ``applyInPandasWithState``
in streaming) and the outer query on the matches.  Every error is a :class:`~sparkcep.ir.errors.CEPError`,
positioned in the statement where it has a place.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sparkcep.ir.errors import CEPError, CEPSemanticError, Span

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sparkcep.ir.recognize import Recognize

__all__ = ["apply_recognize", "sql"]


def apply_recognize(df: DataFrame, q: Recognize, *, ts_unit: str | None = None,
                    watermark_delay: float | str | None = None, partitions: int | None = None,
                    late_rows: bool = False) -> DataFrame:
    """The result of the MATCH_RECOGNIZE statement ``q`` over ``df`` (its FROM table), the outer query
    applied: batch or streaming following ``df.isStreaming``.

    ``ts_unit``: the unit of a numeric time column (for WITHIN with units and for the stream's event time);
    ``watermark_delay``: a stream's allowed lateness, in ts units (milliseconds for a time column), or a Spark
    interval string such as ``"10 seconds"``; ``partitions``: a batch's Spark partition count (default
    ``spark.sql.shuffle.partitions``); ``late_rows``: a stream's result has the late side channel of
    ``sparkcep.spark.late`` (columns ``_kind``, ``_reason``, ``_record``; the rows older than the watermark as
    ``late`` rows) when the outer query is a plain SELECT/WHERE (``spark.recognize.apply_outer``)."""
    from sparkcep.compiler.recognize import build_spec
    from sparkcep.spark import recognize as spark_recognize

    projected = spark_recognize.project(df, q, ts_unit)
    spec = build_spec(q, spark_recognize.input_schema(projected), ts_unit=ts_unit)
    result = spark_recognize.run_recognize(projected, spec, watermark_delay=watermark_delay, ts_unit=ts_unit,
                                           partitions=partitions, late_rows=late_rows and df.isStreaming)
    return spark_recognize.apply_outer(result, q.outer_sql, q.result_view, q.text or None)


def sql(text: str, spark: SparkSession | None = None, *, ts_unit: str | None = None,
        watermark_delay: float | str | None = None) -> DataFrame:
    """The DataFrame of a ``SELECT ... FROM t MATCH_RECOGNIZE (...)`` statement; ``t`` is a table or (temporary)
    view of ``spark`` (default: the active session), batch or streaming.  See :func:`apply_recognize` for
    ``ts_unit`` and ``watermark_delay``."""
    from sparkcep.compiler.recognize import check_recognize
    from sparkcep.grammar.recognize import parse_recognize

    if not isinstance(text, str):
        raise CEPError(f"sparkcep.sql expects the statement as a string, got {type(text).__name__}")
    q = parse_recognize(text)
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            raise CEPError("sparkcep.sql needs a SparkSession: start one or pass spark=")
    df = _table(spark, q.source, text)
    check_recognize(q, streaming=df.isStreaming)
    return apply_recognize(df, q, ts_unit=ts_unit, watermark_delay=watermark_delay)


def _table(spark: SparkSession, name: str, text: str) -> DataFrame:
    """The table or view ``name`` of the session's catalog; an unknown one is an error at its place in ``text``."""
    from pyspark.errors import AnalysisException, ParseException

    from sparkcep.spark.recognize import quiet_analysis

    try:
        with quiet_analysis():
            return spark.table(name)
    except (AnalysisException, ParseException):
        raise CEPSemanticError(f"no table or view {name!r} in the Spark session", _span_of(text, name),
                               text) from None


def _span_of(text: str, name: str) -> Span | None:
    """Where ``name`` follows ``FROM`` in ``text`` (case-insensitive, quoted or not), or None."""
    parts = [re.escape(p) for p in name.split(".")]
    part = r"[`\"]?{}[`\"]?"
    pattern = r"\bFROM\s+(" + r"\s*\.\s*".join(part.format(p) for p in parts) + r")"
    m = re.search(pattern, text, flags=re.IGNORECASE)
    if m is None:
        return None
    start, end = m.span(1)
    line = text.count("\n", 0, start) + 1
    column = start - (text.rfind("\n", 0, start) + 1) + 1
    end_line = text.count("\n", 0, end) + 1
    end_column = end - (text.rfind("\n", 0, end) + 1) + 1
    return Span(line, column, end_line, end_column, start, end)
