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
from typing import TYPE_CHECKING, NamedTuple

from sparkcep.ir.errors import CEPError, CEPSemanticError, Span

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sparkcep.ir.recognize import Recognize

__all__ = ["SharedGroup", "SqlWorkload", "apply_recognize", "apply_workload", "plan_workload", "session_functions",
           "shared_group", "split_statements", "sql", "sql_workload"]


def apply_recognize(df: DataFrame, q: Recognize, *, ts_unit: str | None = None,
                    watermark_delay: float | str | None = None, partitions: int | None = None,
                    late_rows: bool = False, arrival_col: str | None = None) -> DataFrame:
    """The result of the MATCH_RECOGNIZE statement ``q`` over ``df`` (its FROM table), the outer query
    applied: batch or streaming following ``df.isStreaming``.

    ``ts_unit``: the unit of a numeric time column (for WITHIN with units and for the stream's event time);
    ``watermark_delay``: a stream's allowed lateness, in ts units (milliseconds for a time column), or a Spark
    interval string such as ``"10 seconds"``; ``partitions``: a batch's Spark partition count (default
    ``spark.sql.shuffle.partitions``); ``late_rows``: a stream's result has the late side channel of
    ``sparkcep.spark.late`` (columns ``_kind``, ``_reason``, ``_record``; the rows older than the watermark as
    ``late`` rows) when the outer query is a plain SELECT/WHERE (``spark.recognize.apply_outer``);
    ``arrival_col`` (a stream, any source): the column holding each row's arrival (Spark's rate source:
    ``timestamp``), observed per micro-batch (the ``arrival`` metric) and carried to each result as
    ``_arrival_ms`` (a stream whose rows already carry it, as ``run --stream`` reads them, needs none).  The
    outer query keeps it as its last column: a grouped row the newest of its group's, ``MAX(_arrival_ms)``; a
    DISTINCT or set operation drops it."""
    from sparkcep.compiler.recognize import build_spec, pruned_output, worker_spec
    from sparkcep.spark import recognize as spark_recognize

    if arrival_col is not None and df.isStreaming:
        from sparkcep.spark.validate import with_arrival

        df = with_arrival(df, arrival_col)

    projected = spark_recognize.project(df, q, ts_unit)
    schema = spark_recognize.input_schema(projected)
    spec = build_spec(q, schema, ts_unit=ts_unit)
    if not df.isStreaming:  # a batch returns only the result columns the outer query reads
        spec = pruned_output(spec, q.outer_sql)
    worker = None if df.isStreaming else worker_spec(spec, schema)
    result = spark_recognize.run_recognize(projected, spec, watermark_delay=watermark_delay, ts_unit=ts_unit,
                                           partitions=partitions, late_rows=late_rows and df.isStreaming,
                                           worker=worker)
    return spark_recognize.apply_outer(result, q.outer_sql, q.result_view, q.text or None)


def sql(text: str, spark: SparkSession | None = None, *, ts_unit: str | None = None,
        watermark_delay: float | str | None = None, late_rows: bool = False,
        arrival_col: str | None = None) -> DataFrame:
    """The DataFrame of a ``SELECT ... FROM t MATCH_RECOGNIZE (...)`` statement; ``t`` is a table or (temporary)
    view of ``spark`` (default: the active session), batch or streaming.  See :func:`apply_recognize` for
    ``ts_unit``, ``watermark_delay``, ``arrival_col`` and ``late_rows`` (a stream's late rows as rows of
    ``_kind`` "late"; else they are counted in the key's state and dropped).  Functions registered in the
    session may be called in per-row DEFINE/MEASURES expressions (:func:`session_functions`)."""
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
    check_recognize(q, streaming=df.isStreaming, functions=session_functions(spark))
    return apply_recognize(df, q, ts_unit=ts_unit, watermark_delay=watermark_delay, late_rows=late_rows,
                           arrival_col=arrival_col)


def session_functions(spark: SparkSession):
    """``name -> bool``: whether ``name`` is a function of the session (a temporary function registered with
    ``spark.udf.register``, a SQL ``CREATE FUNCTION``, a catalog function), for ``check_recognize`` to accept
    it in a per-row DEFINE/MEASURES expression (Spark then computes it before the shuffle)."""
    from pyspark.errors import PySparkException

    from sparkcep.spark.recognize import quiet_analysis

    def exists(name: str) -> bool:
        try:
            with quiet_analysis():
                return bool(spark.catalog.functionExists(name))
        except (PySparkException, ValueError, TypeError):  # a name Spark cannot even parse: not a function
            return False

    return exists


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


# ----------------------------------------------------------------------------------------------- workloads


def split_statements(text: str) -> list[str]:
    """The statements of a workload text separated by ``;`` (outside quotes and comments), each padded with
    the blanks and line breaks before it so that its error positions are the file's."""
    from sqlglot.tokens import TokenType

    from sparkcep.grammar.parser import without_bom
    from sparkcep.grammar.recognize.expressions import tokenize

    text = without_bom(text)
    tokens = tokenize(text)
    out, start, seen = [], 0, False
    for tok in [*tokens, None]:
        if tok is None or tok.token_type == TokenType.SEMICOLON:
            end = len(text) if tok is None else tok.start
            if seen:
                out.append(re.sub(r"[^\n]", " ", text[:start]) + text[start:end])
            start, seen = end + 1, False
        else:
            seen = True
    return out


def _share_key(q: Recognize) -> tuple:
    return (q.source.lower(), tuple(c.lower() for c in q.partition_by),
            tuple((o.column.lower(), o.ascending, o.ascending if o.nulls_first is None else o.nulls_first)
                  for o in q.order_by))


def group_checkpoints(qs: list[Recognize], groups: list[list[int]] | None = None) -> tuple[str, ...]:
    """The checkpoints inside a streaming workload's checkpoint of its queries, one per group sharing a pass
    (:func:`stream_workload`), in group order: ``g0``, ``g1``, ...  ``groups``: ``qs``' groups when planned
    already (:func:`plan_workload`)."""
    return tuple(f"g{g}" for g in range(len(plan_workload(qs)[0] if groups is None else groups)))


def plan_workload(qs: list[Recognize], names: list[str] | None = None) -> tuple[list[list[int]], list[str]]:
    """``(groups, lines)``: the statements (indexes) that share one pass, in order of first statement, and
    explain's lines saying who shares what and why the others run alone (statements called by ``names``,
    default by index)."""
    label = (lambda i: str(i)) if names is None else names.__getitem__
    groups: dict[tuple, list[int]] = {}
    for i, q in enumerate(qs):
        groups.setdefault(_share_key(q), []).append(i)
    order = list(groups.values())
    lines = []
    for members in order:
        q = qs[members[0]]
        where = (f"FROM {q.source}, PARTITION BY {', '.join(q.partition_by) or '(none)'}, ORDER BY "
                 + ", ".join(o.column + ("" if o.ascending else " DESC") for o in q.order_by))
        if len(members) > 1:
            lines.append(f"statements {', '.join(map(label, members))} share one pass ({where}): one projection, "
                         "one shuffle, one sort, one mapInArrow pass (batch) / one applyInPandasWithState with "
                         "their engine states per key (streaming); each statement's engine runs over the shared "
                         "sorted partition and its rows are split off by a query column")
        else:
            reason = ("no other statement reads the same source with the same PARTITION BY and ORDER BY"
                      if len(qs) > 1 else "a single statement")
            lines.append(f"statement {label(members[0])} runs alone ({where}): {reason}")
    return order, lines


class SqlWorkload(dict):
    """The DataFrames of a workload's statements by index (``sql_workload``), with :attr:`plan` (explain's
    lines) and :attr:`shared` (per group of statements sharing a pass, ``(indexes, tagged DataFrame)``: one
    result with a ``query`` column, to write in ONE streaming query)."""

    plan: list[str]
    shared: list[tuple[list[int], DataFrame]]


def sql_workload(texts: str | list[str], spark: SparkSession | None = None, *, ts_unit: str | None = None,
                 watermark_delay: float | str | None = None, cache: bool = True,
                 late_rows: bool = False) -> SqlWorkload:
    """The DataFrames of several MATCH_RECOGNIZE statements (a list, or one text with statements separated by
    ``;``), by index.  Statements reading the same source with the same PARTITION BY and ORDER BY run in one
    pass (``sparkcep.spark.recognize_workload``); each result equals :func:`sql` of its statement.  In a batch,
    ``cache`` persists the shared pass so that the statements' DataFrames read it once (else each action runs
    it again); in a stream, start ONE query on ``result.shared[k][1]`` (the tagged rows) to share the pass
    (``late_rows``: with the late side channel, a late row's ``query`` NULL)."""
    from sparkcep.compiler.recognize import check_recognize
    from sparkcep.grammar.recognize import parse_recognize

    if isinstance(texts, str):
        texts = split_statements(texts)
    if not texts or not all(isinstance(t, str) for t in texts):
        raise CEPError("sparkcep.sql_workload expects statements as a string or a list of strings")
    qs = [parse_recognize(t) for t in texts]
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            raise CEPError("sparkcep.sql_workload needs a SparkSession: start one or pass spark=")
    tables: dict[str, DataFrame] = {}
    for q in qs:
        key = q.source.lower()
        if key not in tables:
            tables[key] = _table(spark, q.source, q.text)
        check_recognize(q, streaming=tables[key].isStreaming, functions=session_functions(spark))
    return apply_workload(tables, qs, ts_unit=ts_unit, watermark_delay=watermark_delay, cache=cache,
                          late_rows=late_rows)


class SharedGroup(NamedTuple):
    """Statements sharing one pass: their indexes, the statements with workload-wide RowExpr columns, their
    engine specs and the tagged result (``query`` and ``_<k>_<j>`` columns; ``spark.recognize_workload``)."""

    members: list[int]
    statements: list[Recognize]
    specs: list
    tagged: DataFrame

    def result(self, k: int, tagged: DataFrame | None = None) -> DataFrame:
        """The k-th member's result: its rows of ``tagged`` (default: the group's) with its outer query."""
        from sparkcep.spark import recognize as single
        from sparkcep.spark import recognize_workload as shared

        q = self.statements[k]
        rows = shared.split(self.tagged if tagged is None else tagged, self.specs, k)
        return single.apply_outer(rows, q.outer_sql, q.result_view, q.text or None)


def shared_group(df: DataFrame, qs: list[Recognize], members: list[int], *, ts_unit: str | None = None,
                 watermark_delay: float | str | None = None, late_rows: bool = False) -> SharedGroup:
    """The statements ``members`` of ``qs`` (same source, PARTITION BY and ORDER BY: :func:`plan_workload`) run
    over ``df`` in one pass."""
    from sparkcep.compiler.recognize import build_spec
    from sparkcep.spark import recognize_workload as shared

    renamed, own = shared.rename_row_exprs([qs[i] for i in members])
    projected = shared.project(df, renamed)
    specs = [build_spec(q, shared.statement_schema(projected, cols), ts_unit=ts_unit)
             for q, cols in zip(renamed, own, strict=True)]
    tagged = shared.run_shared(projected, specs, watermark_delay=watermark_delay, ts_unit=ts_unit,
                               late_rows=late_rows and projected.isStreaming)
    return SharedGroup(list(members), renamed, specs, tagged)


def apply_workload(tables: dict[str, DataFrame], qs: list[Recognize], *, ts_unit: str | None = None,
                   watermark_delay: float | str | None = None, cache: bool = True,
                   late_rows: bool = False) -> SqlWorkload:
    """:func:`sql_workload` over DataFrames: ``tables`` maps each statement's FROM name (lower case) to its
    DataFrame; the statements are parsed and checked."""
    groups, lines = plan_workload(qs)
    frames: dict[int, DataFrame] = {}
    tagged_groups: list[tuple[list[int], DataFrame]] = []
    for members in groups:
        df = tables[qs[members[0]].source.lower()]
        if len(members) == 1:
            (i,) = members
            frames[i] = apply_recognize(df, qs[i], ts_unit=ts_unit, watermark_delay=watermark_delay)
            continue
        group = shared_group(df, qs, members, ts_unit=ts_unit, watermark_delay=watermark_delay, late_rows=late_rows)
        if cache and not group.tagged.isStreaming:
            group = group._replace(tagged=group.tagged.persist())
        tagged_groups.append((list(members), group.tagged))
        for k, i in enumerate(members):
            frames[i] = group.result(k)
    out = SqlWorkload(sorted(frames.items()))
    out.plan, out.shared = lines, tagged_groups
    return out


# ----------------------------------------------------------------------------------------------- a workload's outputs


def statement_names(qs: list[Recognize]) -> list[str]:
    """Each statement's name in a workload's outputs: its ``MATCH_RECOGNIZE (...) AS alias`` (a plain
    identifier), else ``s<n>`` (its position, from 1).  Two statements of one name are an error."""
    names = [q.alias if q.alias and re.fullmatch(r"[A-Za-z_]\w*", q.alias, re.ASCII) else f"s{i + 1}"
             for i, q in enumerate(qs)]
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name.lower() in seen:
            raise CEPSemanticError(f"statements {seen[name.lower()] + 1} and {i + 1} are both named {name} (their "
                                   "outputs are OUTPUT/<name>/): give them distinct aliases, MATCH_RECOGNIZE (...) "
                                   "AS name", qs[i].span, qs[i].text or None)
        seen[name.lower()] = i
    return names


def workload_dirs(output: str, names: list[str], *, dead_letters: str | None = None,
                  late_events: str | None = None) -> tuple[list[str], list[str], str]:
    """``(results, late, dead letters)`` directories of a workload's statements: ``OUTPUT/<name>/``, their late
    rows in ``OUTPUT/<name>/_late/`` (or ``LATE_EVENTS/<name>/``), the dead letters once in
    ``OUTPUT/_dead_letters/`` (or ``DEAD_LETTERS``)."""
    root = output.rstrip("/")
    results = [f"{root}/{n}" for n in names]
    late = [f"{late_events.rstrip('/')}/{n}" if late_events else f"{r}/_late" for n, r in zip(names, results,
                                                                                             strict=True)]
    return results, late, dead_letters or f"{root}/_dead_letters"


def stream_workload(rows: DataFrame, rejected: DataFrame, qs: list[Recognize], names: list[str], output: str,
                    checkpoint: str, *, ts_unit: str | None = None, watermark_delay: float | str | None = None,
                    dead_letters: str | None = None, late_events: str | None = None, once: bool = False,
                    wait=None, latency: bool = False) -> tuple[list, dict[int, object]]:
    """Run the statements ``qs`` over the stream ``rows`` (their FROM table; ``rejected``: its dead letters):
    one streaming query per group sharing a pass (:func:`plan_workload`; checkpoint ``CHECKPOINT/g<k>``), each
    writing its statements' results, late rows and (the first) the dead letters (:func:`workload_dirs`)
    exactly once.  ``once``: process what is there and stop, one query after the other, ``wait(query)``
    called on each; else all start at once.  Rows with the stream's arrival (``read_validated(...,
    keep_arrival=True)``) stamp each result with it (observed per micro-batch; ``latency``: each result written
    with ``_latency_ms``, ``group_writer``).  Returns the queries and each statement's written schema (by
    index).  A statement whose outer query is more than
    a plain SELECT/WHERE (it would run per micro-batch) is refused."""
    from pyspark.sql.types import LongType, StructField, StructType

    from sparkcep.spark.recognize import _passing_late_rows
    from sparkcep.spark.recognize_workload import group_writer
    from sparkcep.spark.sinks import routed
    from sparkcep.spark.validate import LATENCY_COL, RESULT_ARRIVAL

    for q, name in zip(qs, names, strict=True):
        if _passing_late_rows(q.outer_sql) is None:
            raise CEPSemanticError(f"statement {name}: in a streaming workload the query around MATCH_RECOGNIZE "
                                   "can only select and filter (no aggregation, DISTINCT, ORDER BY or LIMIT): run "
                                   "it alone", q.span, q.text or None)
    results, late, dead = workload_dirs(output, names, dead_letters=dead_letters, late_events=late_events)
    groups, _ = plan_workload(qs)
    queries, schemas = [], {}
    for g, (members, name) in enumerate(zip(groups, group_checkpoints(qs, groups), strict=True)):
        group = shared_group(rows, qs, members, ts_unit=ts_unit, watermark_delay=watermark_delay, late_rows=True)
        for k, i in enumerate(members):
            written = [f for f in group.result(k).schema.fields if f.name != RESULT_ARRIVAL]
            schemas[i] = StructType(written + ([StructField(LATENCY_COL, LongType())] if latency else []))
        stream = routed(group.tagged, rejected if g == 0 else None)  # the dead letters once
        writer = group_writer(group.result, [results[i] for i in members], [late[i] for i in members],
                              dead if g == 0 else None, latency=latency)
        query = (stream.writeStream.foreachBatch(writer)
                 .option("checkpointLocation", f"{checkpoint.rstrip('/')}/{name}")
                 .outputMode("append"))
        query = (query.trigger(availableNow=True) if once else query).start()
        queries.append(query)
        if once and wait is not None:
            wait(query)
    return queries, schemas


def follow_workload(spark, queries: list, qs: list[Recognize], names: list[str], output: str, checkpoint: str, *,
                    dead_letters: str | None = None, late_events: str | None = None, signals=None, out=None,
                    source: str | None = None) -> list:
    """Follow the continuous queries of :func:`stream_workload` (``once=False``) until they end or ``signals``
    (:class:`sparkcep.spark.progress.StopSignals`) asks them to stop: each then stops between micro-batches,
    and nothing of a micro-batch a stop interrupted stays in the statements' outputs (it re-runs on a
    restart).  Each group's :class:`sparkcep.spark.progress.Totals`."""
    from sparkcep.spark.progress import follow_all
    from sparkcep.spark.sinks import discard_uncommitted

    totals = follow_all(queries, out=out, signals=signals, source=source)
    if any(t.stopped for t in totals):
        results, late, dead = workload_dirs(output, names, dead_letters=dead_letters, late_events=late_events)
        groups, _ = plan_workload(qs)
        for g, (members, name) in enumerate(zip(groups, group_checkpoints(qs, groups), strict=True)):
            group_checkpoint = f"{checkpoint.rstrip('/')}/{name}"
            for i in members:
                discard_uncommitted(spark, group_checkpoint, results[i], late=late[i])
            if g == 0:
                discard_uncommitted(spark, group_checkpoint, dead)
    return totals
