"""The ``%%sparkcep`` IPython cell magic: run the cell's query on a DataFrame of the notebook.

::

    %load_ext sparkcep.magic

    %%sparkcep events --output overdoses
    PATTERN SEQ(MEDICINE-TAKEN x, MEDICINE-TAKEN y)
    WHERE [patient] AND (x.amount + y.amount) > 1000
    WITHIN 4 hours

compiles the cell's query, applies it to the DataFrame ``events`` of the user namespace (batch or
streaming) and binds the result DataFrame to ``overdoses`` (default name: ``result``); the cell's value
is that DataFrame.

A cell that starts with ``SELECT`` is a SQL:2016 ``MATCH_RECOGNIZE`` statement::

    %%sparkcep --output v
    SELECT * FROM ticker MATCH_RECOGNIZE (PARTITION BY symbol ORDER BY ts ... PATTERN (A B+ C) DEFINE ...)

Its FROM table is the DataFrame named on the line, else the DataFrame of that name in the notebook, else the
table or view of that name in the Spark session; ``--ts-unit`` is the unit of a numeric time column and
``--lateness`` the watermark delay of a stream (``--type-col`` and ``--ts-col`` are refused: the statement's
time column is its first ORDER BY column).

``%%sparkcep --stream DIR`` is a live cell: it follows the files of the directory ``DIR`` as a stream (as
``sparkcep run --stream`` does: each event's arrival is its file's modification time, a progress line per
micro-batch with its latency and backlog, bad records and late events counted), printing as it goes, until the
kernel is interrupted (the micro-batch under way commits first; a second interrupt stops at once) or, with
``--once``, the files there now are processed; then it binds the results so far (a batch DataFrame) to
``--output``::

    %%sparkcep --stream /data/incoming --output overdoses --schema "type STRING, ts TIMESTAMP, patient BIGINT"
    PATTERN SEQ(MEDICINE-TAKEN x, MEDICINE-TAKEN y) WHERE [patient] WITHIN 4 hours

``--checkpoint`` and ``--sink`` keep its checkpoint and results (JSON lines) in directories of yours, so that
the next run resumes (default: temporary directories); ``--format`` is the files' format (json, csv, parquet).
With ``WITH SHEDDING LATENCY`` the stage learns from the files there at the start.

``--explain`` prints the plan first; ``--type-col``, ``--ts-col``, ``--ts-unit`` and ``--lateness`` are the
options of :func:`sparkcep.compile`; ``--arrival-col COL`` (a stream) is ``apply``'s ``arrival_col``: each
result carries ``_arrival_ms``, the arrival of its events (docs/operations.md).  A bad query shows one message
with the line and column in the cell and a caret, not a traceback.
"""

from __future__ import annotations

import argparse
import shlex

from sparkcep.cli_sql import is_sql
from sparkcep.ir.ast import TS_UNITS_NS


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="%%sparkcep", add_help=False, exit_on_error=False)
    p.add_argument("dataframe", nargs="?",
                   help="the name of a DataFrame in the notebook's namespace (MATCH_RECOGNIZE: default its FROM table)")
    p.add_argument("--output", "-o", default="result", help="bind the result DataFrame to this name")
    p.add_argument("--explain", action="store_true", help="print the plan")
    p.add_argument("--type-col", default="type")
    p.add_argument("--ts-col", default="ts")
    p.add_argument("--ts-unit", choices=sorted(TS_UNITS_NS))
    p.add_argument("--lateness", type=float, default=0)
    p.add_argument("--arrival-col", help="a stream: the column holding each event's arrival (the rate source's "
                                         "timestamp, an ingestion time); each result then carries _arrival_ms")
    p.add_argument("--stream", metavar="DIR", help="follow the files of DIR until the kernel is interrupted")
    p.add_argument("--once", action="store_true", help="--stream: the files there now, then stop")
    p.add_argument("--format", default="json", choices=["json", "csv", "parquet"], help="--stream: the files' format")
    p.add_argument("--schema", help="--stream: the input schema as DDL (default: from the files there now)")
    p.add_argument("--checkpoint", help="--stream: the checkpoint directory (default: a temporary one)")
    p.add_argument("--sink", help="--stream: the results' directory, JSON lines (default: a temporary one)")
    return p


def run_cell(line: str, cell: str, namespace: dict):
    """What ``%%sparkcep LINE`` does with ``cell`` in ``namespace``: the result DataFrame, bound there."""
    from IPython.core.error import UsageError
    from pyspark.sql import DataFrame

    import sparkcep

    try:
        args, extra = _parser().parse_known_args(shlex.split(line))
    except (argparse.ArgumentError, SystemExit) as err:
        raise UsageError(f"%%sparkcep DATAFRAME [--output NAME] [--explain] ...: {err}") from None
    if extra:
        raise UsageError(f"%%sparkcep: unknown arguments {' '.join(extra)}")
    if not args.output.isidentifier():
        raise UsageError(f"%%sparkcep: --output {args.output!r} is not a Python name")
    if args.stream is not None:
        if is_sql(cell) or args.dataframe is not None:
            raise UsageError("%%sparkcep --stream DIR: a query of the pattern language over the files of DIR "
                             "(no DataFrame name, no MATCH_RECOGNIZE statement)")
        result = _run_live(args, cell)
        namespace[args.output] = result
        return result
    if args.once or args.checkpoint or args.sink or args.schema:
        raise UsageError("%%sparkcep: --once, --checkpoint, --sink and --schema are for --stream DIR")
    if is_sql(cell):
        result = _run_statement(args, cell, namespace)
        namespace[args.output] = result
        return result
    if args.dataframe is None:
        raise UsageError("%%sparkcep DATAFRAME [--output NAME] [--explain] ...: name the DataFrame the query reads")
    df = namespace.get(args.dataframe)
    if df is None:
        raise UsageError(f"%%sparkcep: no DataFrame named {args.dataframe!r} in the notebook")
    if not isinstance(df, DataFrame):
        raise UsageError(f"%%sparkcep: {args.dataframe!r} is a {type(df).__name__}, not a Spark DataFrame")
    try:
        q = sparkcep.compile(cell, type_col=args.type_col, ts_col=args.ts_col, ts_unit=args.ts_unit,
                             lateness=args.lateness)
        if args.explain:
            print(q.explain(df.schema))
        result = q.apply(df, arrival_col=args.arrival_col)
    except sparkcep.CEPError as err:
        raise UsageError(err.render()) from None
    namespace[args.output] = result
    return result


def _run_live(args, cell: str):
    """A ``--stream DIR`` cell: the query followed over the files of DIR until the kernel is interrupted (or,
    ``--once``, the files there now are processed); the results so far, read back from the sink."""
    import os

    from IPython.core.error import UsageError
    from pyspark.sql import SparkSession

    import sparkcep
    from sparkcep.api import input_columns
    from sparkcep.live import prepare_live
    from sparkcep.spark.session import local_session

    if not os.path.isdir(args.stream):
        raise UsageError(f"%%sparkcep --stream: {args.stream!r} is not a directory")
    try:
        q = sparkcep.compile(cell, type_col=args.type_col, ts_col=args.ts_col, ts_unit=args.ts_unit,
                             lateness=args.lateness)
        # the input checked as `sparkcep run` checks it, then followed through the admission control (the backlog
        # in Spark's observed metrics; with shedding, the stage's controller counts it and bounds the admission)
        with prepare_live(args.stream, args.format, checkpoint=args.checkpoint, check=[q], ts_col=q.ts_col,
                          schema=args.schema) as live:
            spark = SparkSession.getActiveSession() or local_session()
            return _follow_cell(spark, q, args, live, *input_columns([q]))
    except sparkcep.CEPError as err:
        raise UsageError(err.render()) from None


def _follow_cell(spark, q, args, live, attributes, needs):
    """:func:`_run_live` over ``live`` (:class:`sparkcep.live.LiveRun`: the followed directory, or the staging
    directory its admission fills from it): the results so far."""
    import os
    import tempfile

    from pyspark.sql.types import StructType

    from sparkcep.api import report_shedding
    from sparkcep.cli import follow_stream
    from sparkcep.spark.io import read_events
    from sparkcep.spark.late import KIND, REASON, RECORD
    from sparkcep.spark.sinks import counted, routed
    from sparkcep.spark.validate import RESULT_ARRIVAL, read_validated

    df, rejected = read_validated(spark, live.read_from, args.format, q.type_col, q.ts_col, stream=True,
                                  schema=args.schema, attributes=attributes, needs=needs, ts_unit=q.ts_unit,
                                  arrival_col=args.arrival_col, keep_arrival=True)
    df, rejected = counted(df, "events_valid"), counted(rejected, "dead_letters")
    if args.explain:
        print(q.explain(df.schema))
    training = None if not q.shedding_latency else read_events(
        spark, args.stream, args.format, q.ts_col, schema=args.schema, type_col=q.type_col,
        attributes=attributes, needs=needs)
    # a checkpoint holding state resumes with the grouping it was made with
    result = q.apply(df, shedding_training=training, side_channel=True, checkpoint=args.checkpoint,
                     followed=args.stream)
    shedding = getattr(result, "shedding", None)
    fields = [f for f in result.schema.fields if f.name not in (KIND, REASON, RECORD, RESULT_ARRIVAL)]
    with tempfile.TemporaryDirectory(prefix="sparkcep-cell-") as tmp:
        sink = args.sink or os.path.join(tmp, "out")
        checkpoint = args.checkpoint or os.path.join(tmp, "ck")
        run = argparse.Namespace(dead_letters=None, late_events=None, once=args.once, latency_column=False,
                                 arrival_col=args.arrival_col, input=args.stream, quiet=False)
        live.admit(shedding, checkpoint, type_col=q.type_col, dropped_output=q.dropped_output, once=args.once)
        try:
            query, _ = follow_stream(routed(result, rejected), sink, checkpoint, run, [f.name for f in fields],
                                     started=lambda query: live.started(query, shedding), admission=live.admission)
        finally:  # before the temporary checkpoint goes
            live.close()
        report_shedding(shedding, query)
        schema = StructType(fields)
        if not os.path.isdir(sink):  # no micro-batch wrote
            return spark.createDataFrame([], schema)
        results = spark.read.schema(schema).json(sink)
        return results if args.sink else results.localCheckpoint()  # the temporary sink goes with the cell


def _run_statement(args, cell: str, namespace: dict):
    """A ``MATCH_RECOGNIZE`` cell: the result DataFrame of the statement on its table."""
    from IPython.core.error import UsageError
    from pyspark.sql import DataFrame, SparkSession

    import sparkcep
    from sparkcep.cli_sql import _refuse, explain, statement
    from sparkcep.sql_api import apply_recognize, session_functions

    try:
        # options of the pattern language: never ignored
        _refuse(args, {"--ts-col": "ts", "--type-col": "type", "--arrival-col": None})
        spark = SparkSession.getActiveSession()
        functions = session_functions(spark) if spark is not None else None  # its registered UDFs pass
        q = statement(cell, functions=functions)
        name = args.dataframe or q.source
        df = namespace.get(name)
        if df is None and args.dataframe is None:
            if spark is not None and spark.catalog.tableExists(q.source):
                df = spark.table(q.source)
        if df is None:
            raise UsageError(f"%%sparkcep: no DataFrame named {name!r} in the notebook"
                             + ("" if args.dataframe else " and no such table in the Spark session"))
        if not isinstance(df, DataFrame):
            raise UsageError(f"%%sparkcep: {name!r} is a {type(df).__name__}, not a Spark DataFrame")
        if df.isStreaming:
            statement(cell, streaming=True, functions=functions)
        if args.explain:
            print(explain(q, ts_unit=args.ts_unit))
        return apply_recognize(df, q, ts_unit=args.ts_unit,
                               watermark_delay=args.lateness if df.isStreaming else None)
    except sparkcep.CEPError as err:
        raise UsageError(err.render()) from None


def load_ipython_extension(ipython) -> None:
    """``%load_ext sparkcep.magic`` registers ``%%sparkcep``."""

    def sparkcep_magic(line, cell):
        return run_cell(line, cell, ipython.user_ns)

    sparkcep_magic.__doc__ = __doc__
    ipython.register_magic_function(sparkcep_magic, magic_kind="cell", magic_name="sparkcep")
