"""The ``sparkcep`` command: check · explain · compile · run · notebook · demo.

Errors in queries or options print one message (line, column, caret) on stderr and exit with status 2;
never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import sys
import tempfile
from pathlib import Path

from sparkcep import cli_sql, preflight
from sparkcep.api import CompiledQuery, compile_workload, input_columns, report_shedding
from sparkcep.console import Clock, observed_count, progress, stream_summary, summary_line, timeouts_line
from sparkcep.ir.ast import TS_UNITS_NS, UNITS_MS
from sparkcep.ir.errors import CEPError
from sparkcep.runtime_udfs.shedding import MODELS
from sparkcep.spark.io import FORMATS, read_events
from sparkcep.spark.results import json_lines

SHEDDING_MODEL_HELP = ("shedding: the utility model, gSPICE-H hash tables (default), gSPICE-M's decision tree or "
                       "random forest, or a baseline for comparisons: random or type (type-based)")


def _add_query_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", help="a query or workload file (queries separated by ';'), or - for stdin")
    p.add_argument("-e", "--text", help="the query text itself, instead of a file")
    p.add_argument("--query", help="the name of the query to use in a workload file")


def _add_input_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--type-col", default="type", help="event type column (default: type)")
    p.add_argument("--ts-col", default="ts", help="timestamp column (default: ts)")
    p.add_argument("--ts-unit", choices=sorted(TS_UNITS_NS), help="unit of a numeric ts column")
    p.add_argument("--lateness", type=float, default=0,
                   help="streaming: allowed lateness in ts units (ms for timestamps); later events are dropped")


def _add_voice_args(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("-q", "--quiet", action="store_true", help="no notes, progress lines or summary on stderr")
    g.add_argument("-v", "--verbose", action="store_true", help="Spark's own logging too (INFO, start-up banner)")


class _Store(argparse._StoreAction):
    """``--opt=--`` stores the value "--", converted and checked as any other (Python 3.11's argparse hands it
    over as ``[]``, which no option expects: a traceback, a Java one, or a job with ``TS_COL = []``)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if values == [] and self.nargs is None:
            values = parser._get_value(self, "--")
            parser._check_value(self, values)
        super().__call__(parser, namespace, values, option_string)


class _Parser(argparse.ArgumentParser):
    """The CLI's parsers (the subcommands' too): an option's value is stored by :class:`_Store`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("action", None, _Store)
        self.register("action", "store", _Store)


def build_parser() -> argparse.ArgumentParser:
    from sparkcep import __version__

    p = _Parser(prog="sparkcep", description="Complex event processing on Spark.")
    p.add_argument("--version", action="version", version=f"sparkcep {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("check", help="parse and check queries; exit 2 on the first error")
    _add_query_args(c)

    e = sub.add_parser("explain", help="print the logical plan of each query")
    _add_query_args(e)
    e.add_argument("--sql", action="store_true", help="also print the Spark SQL filter")
    e.add_argument("--format", choices=["text", "dot"], default="text",
                   help="dot: the workload's Sharon graph (candidates, conflicts, chosen plan) in Graphviz DOT")
    e.add_argument("--stats", help="JSON event-type rates for the sharing benefit model: "
                                   "{\"rates\": {type: events per window}} (default: 1 per type)")
    e.add_argument("--schema", help="a MATCH_RECOGNIZE statement: the input's columns as DDL, e.g. 'sym STRING, "
                                    "ts TIMESTAMP, price DOUBLE' (the engine columns and result types)")

    j = sub.add_parser("compile", help="write a standalone PySpark job")
    _add_query_args(j)
    j.add_argument("--ts", choices=["timestamp", "numeric"],
                   help="the kind of the ts column the job will read (default: numeric with --ts-unit, else "
                        "timestamp if the query's durations have units, else numeric)")
    j.add_argument("--ts-unit", choices=sorted(TS_UNITS_NS), help="unit of a numeric ts column")
    j.add_argument("--ts-col", default="ts")
    j.add_argument("--type-col", default="type")
    j.add_argument("--collapsed", action="store_true",
                   help="SASE++ collapsed output (a match query with one Kleene variable), as run --collapsed")
    j.add_argument("--stats", help="a workload: JSON event-type rates for the sharing benefit model (as explain)")
    j.add_argument("--shedding-latency", type=_seconds, metavar="DURATION",
                   help="give the job a gSPICE load-shedding stage with this latency bound, e.g. 1s (default: "
                        "only if the file says WITH SHEDDING LATENCY ...; the job's --shedding-latency overrides it)")
    j.add_argument("--shedding-model", choices=MODELS, default="hash", help=SHEDDING_MODEL_HELP)
    j.add_argument("-o", "--output", required=True, help="the job file to write")

    r = sub.add_parser("run", help="run a query on a file or directory of events with local Spark")
    _add_query_args(r)
    _add_input_args(r)
    r.add_argument("--input", required=True, help="events: a file or a directory of files")
    r.add_argument("--format", choices=FORMATS, help="input format (default: from the extension, else json)")
    r.add_argument("--output", help="write results here (a Spark JSON directory) instead of stdout")
    r.add_argument("--stream", action="store_true",
                   help="run as a Structured Streaming job that follows the input directory until stopped (Ctrl-C "
                        "or SIGTERM: stops after the micro-batch under way has committed)")
    r.add_argument("--once", action="store_true",
                   help="streaming: process the files there now, then stop (Spark's availableNow trigger)")
    r.add_argument("--collapsed", action="store_true",
                   help="SASE++ collapsed output: one row per binding of the non-Kleene variables, with the Kleene "
                        "candidates as an array column (a match query with one Kleene variable)")
    r.add_argument("--max-matches", type=_count, metavar="N",
                   help="the match budget: stop a match query with a message once one partition produces more "
                        "than N matches (default: sized to the available memory; 0: no limit)")
    r.add_argument("--checkpoint", help="streaming checkpoint directory (default: a temporary one)")
    r.add_argument("--files-per-trigger", type=int, help="streaming: files per micro-batch (default: all)")
    r.add_argument("--arrival-col", metavar="COL",
                   help="streaming: the input column holding each event's arrival (an ingestion time: a timestamp "
                        "or epoch ms), for the latency figures (default: the modification time of its file)")
    r.add_argument("--latency-column", action="store_true",
                   help="streaming: write each result with _latency_ms, the milliseconds from the arrival of its "
                        "events to its micro-batch's results being computed")
    r.add_argument("--dead-letters", help="where bad records go (default: OUTPUT/_dead_letters)")
    r.add_argument("--known-types", type=_type_list, metavar="T1,T2,...",
                   help="the stream's event types: a record of another type is a dead letter ('unknown event "
                        "type'); default: types the query does not use are ignored and counted")
    r.add_argument("--late-events", help="streaming: where events behind the watermark go (default: OUTPUT/_late)")
    r.add_argument("--timeouts", action="store_true",
                   help="a match query: also write its timed-out partial matches (partial matches the window closed "
                        "on) to OUTPUT/_timeouts")
    r.add_argument("--schema", help="input schema as DDL, e.g. 'type STRING, ts TIMESTAMP, id BIGINT, x DOUBLE' "
                                    "(default: the columns the query reads, typed as it needs them)")
    r.add_argument("--master", default="local[*]")
    r.add_argument("--table", help="a MATCH_RECOGNIZE statement: the table the input is read as (default and only "
                                   "choice: the one its FROM names)")
    r.add_argument("--shedding-latency", type=_seconds, metavar="DURATION",
                   help="gSPICE load shedding under this latency bound, e.g. 1s or 500ms (default: off, unless the "
                        "file says WITH SHEDDING LATENCY ...)")
    r.add_argument("--shedding-model", choices=MODELS, help=SHEDDING_MODEL_HELP)
    r.add_argument("--dropped-output", help="shedding: write the dropped events here (JSON lines)")
    r.add_argument("--shedding-training", help="shedding: events to learn utilities from (default: the input files "
                                               "there at start)")
    _add_voice_args(r)

    n = sub.add_parser("notebook", help="write a Jupyter notebook that runs the query (needs sparkcep[notebook])")
    _add_query_args(n)
    n.add_argument("--input", help="the events the notebook reads: a file or a directory (default: events/)")
    n.add_argument("--format", choices=FORMATS, help="input format (default: from the extension, else json)")
    n.add_argument("--ts-unit", choices=sorted(TS_UNITS_NS), help="unit of a numeric ts column")
    n.add_argument("--ts-col", default="ts")
    n.add_argument("--type-col", default="type")
    n.add_argument("--master", default="local[*]", help="the notebook session's master (default: local[*])")
    n.add_argument("-o", "--output", required=True, help="the .ipynb file to write")

    d = sub.add_parser("demo", help="generate events and run the example query, batch and streaming")
    d.add_argument("--dir", default="demo_out", help="where to write the events and results")
    d.add_argument("--patients", type=int, default=40)
    d.add_argument("--seed", type=int, default=7)
    _add_voice_args(d)
    return p


def _type_list(text: str) -> list[str]:
    """``A,B, C`` → ``["A", "B", "C"]``."""
    types = [t.strip() for t in text.split(",") if t.strip()]
    if not types:
        raise argparse.ArgumentTypeError(f"no event types in {text!r} (e.g. A,B,C)")
    return types


def _count(text: str) -> int:
    """A number >= 0: ``1000``, ``1_000`` or ``1e6``."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        value = -1.0
    if not (value >= 0 and value.is_integer() and value < 2**63):
        raise argparse.ArgumentTypeError(f"not a whole number >= 0: {text!r}")
    return int(value)


def _seconds(text: str) -> float:
    """``1s``, ``1 s``, ``500ms``, ``2min`` → seconds (a bare number is seconds)."""
    import re

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-z]*)\s*", text.lower())
    unit = {"": "s", "sec": "s", "second": "s", "seconds": "s", "m": "min", "minutes": "min"}.get(
        m.group(2), m.group(2)) if m else None
    if m is None or unit not in UNITS_MS or not float(m.group(1)) > 0:
        raise argparse.ArgumentTypeError(f"not a positive duration: {text!r} (e.g. 1s, 500ms)")
    return float(m.group(1)) * UNITS_MS[unit] / 1000


def _read_text(args) -> str:
    """The query text: ``-e TEXT``, a file or stdin, decoded as UTF-8 (a byte order mark is dropped); bytes
    that are not UTF-8 are one error naming the first bad byte's offset, line and column.  Read once (stdin)."""
    if getattr(args, "read_text", None) is None:
        args.read_text = _read_text_once(args)
    return args.read_text


def _read_text_once(args) -> str:
    if args.text is not None:
        # argv bytes that are not valid in the locale's encoding arrive as surrogate escapes
        data = os.fsencode(args.text) if any("\udc80" <= c <= "\udcff" for c in args.text) else None
        return args.text if data is None else _decode(data, "the -e text")
    if args.file is None:
        raise CEPError("give a query file (or - for stdin), or the query text with -e")
    if args.file == "-":
        return _decode(sys.stdin.buffer.read(), "stdin")
    path = Path(args.file)
    if not path.is_file():
        raise CEPError(f"no such query file: {args.file}")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise CEPError(f"cannot read the query file {args.file}: {err.strerror or err}") from None
    return _decode(data, args.file)


def _decode(data: bytes, where: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        before = data[:err.start]
        line = before.count(b"\n") + 1
        column = len(before[before.rfind(b"\n") + 1:].decode("utf-8", "replace")) + 1
        raise CEPError(f"{where} is not UTF-8: byte 0x{data[err.start]:02x} at offset {err.start} "
                       f"(line {line}, column {column}) {err.reason}") from None
    return text[1:] if text.startswith("\ufeff") else text


def _queries(args, **options) -> list[CompiledQuery]:
    queries = compile_workload(_read_text(args), **options)
    if getattr(args, "query", None):
        chosen = [q for q in queries if q.name == args.query]
        if not chosen:
            names = ", ".join(q.name or "(unnamed)" for q in queries)
            raise CEPError(f"no query named {args.query!r} in the file (queries: {names})"
                           + preflight.suggestion(args.query, [q.name for q in queries if q.name]))
        return chosen
    return queries


def _one(args, **options) -> CompiledQuery:
    queries = _queries(args, **options)
    if len(queries) != 1:
        raise CEPError(f"the file holds {len(queries)} queries: choose one with --query NAME")
    return queries[0]


def cmd_check(args) -> int:
    queries = _queries(args)
    for q in queries:
        r = q.resolved()
        kinds = ", ".join(f"{p.kind}" for p in r.predicates) or "no predicates"
        n = len(r.variables)
        print(f"ok  {q.name or '(unnamed)'}: {r.mode} query, {n} variable{'s' if n != 1 else ''}, {kinds}")
    return 0


def _workload(args, **options):
    """The file's queries with their Sharon sharing plan, or None when one query is asked for or there is one."""
    from sparkcep.api import compile_shared_workload

    if getattr(args, "query", None):
        return None
    text = _read_text(args)
    if len(compile_workload(text, **options)) < 2:
        return None
    return compile_shared_workload(text, stats=getattr(args, "stats", None), **options)


def cmd_explain(args) -> int:
    if args.schema:
        raise CEPError("--schema is for a MATCH_RECOGNIZE statement (a query's input columns come from its text)")
    workload = _workload(args)
    if args.format == "dot":
        if workload is None:
            raise CEPError("--format dot draws the sharing graph of a workload: give a file of several queries")
        print(workload.explain(format="dot"))
        return 0
    blocks = []
    for q in _queries(args):
        text = q.explain()
        if args.sql:
            text += "\n-- Spark SQL filter\n" + q.sql()
        blocks.append(text)
    if workload is not None:
        blocks.append("-- sharing across the workload (Sharon)\n" + workload.explain())
    print("\n\n".join(blocks))
    return 0


def cmd_compile(args) -> int:
    """One query (or ``--query NAME`` of a file): its job.  A workload file: one job running its sharing plan."""
    options = {"ts_kind": args.ts, "ts_unit": args.ts_unit, "ts_col": args.ts_col, "type_col": args.type_col,
               **_shedding_options(args)}
    workload = _workload(args, **options)
    if workload is not None:
        if args.collapsed:
            raise CEPError("--collapsed is for one match query: choose it with --query NAME")
        name = Path(args.file).stem if args.text is None and args.file not in (None, "-") else None
        source = workload.job_source(name=name)
    else:
        source = _one(args, **options, collapsed=args.collapsed).job_source()
    Path(args.output).write_text(source)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def _input_format(args) -> str:
    if args.format:
        return args.format
    suffix = Path(args.input).suffix.lower()
    return {".csv": "csv", ".parquet": "parquet"}.get(suffix, "json")


def _print_lines(lines) -> None:
    for line in lines:
        print(line)


@contextlib.contextmanager
def _match_budget_reported():
    """A match budget exceeded inside a Spark task (the error the driver gets carries the worker's
    traceback) becomes the budget's one-line message (:func:`match_budget.raised_message`); any other
    error passes through as it is."""
    from sparkcep.runtime_udfs.match.budget import raised_message

    try:
        yield
    except CEPError:
        raise
    except Exception as err:
        message = raised_message(err)
        if message is None:
            raise
        raise CEPError(message) from None


_TASK_FAILURE_LOGGERS = ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager",
                         "org.apache.spark.sql.execution.streaming.MicroBatchExecution",
                         "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution")


def _quiet_task_failures(spark) -> None:
    """A failed task reaches the driver as an error carrying the worker's traceback, which ``run`` reports
    (a match budget: as one line); Spark's executor, scheduler and stream would log the same traceback on
    stderr first.  Best effort: a session without log4j 2 keeps its logging."""
    try:
        jvm = spark.sparkContext._jvm
        off = jvm.org.apache.logging.log4j.Level.OFF
        for name in _TASK_FAILURE_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, off)
    except Exception:  # noqa: BLE001 - logging only
        pass


@_match_budget_reported()
def cmd_run(args) -> int:
    options = {"type_col": args.type_col, "ts_col": args.ts_col, "ts_unit": args.ts_unit, "lateness": args.lateness,
               "match_budget": args.max_matches}
    # a workload runs as its generated job does, into one result (with shedding: one stage for all its queries)
    workload = _workload(args, **options, **_shedding_options(args))
    if workload is not None and args.collapsed:
        raise CEPError("--collapsed is for one match query: choose it with --query NAME")
    q = _one(args, **options, **_shedding_options(args), collapsed=args.collapsed) if workload is None else None
    if args.timeouts:
        _check_timeouts(q, args.output)
    if (args.arrival_col or args.latency_column) and not args.stream:
        raise CEPError(f"{'--arrival-col' if args.arrival_col else '--latency-column'} is for a stream (--stream): "
                       "a batch run has no arrival")
    from sparkcep.live import prepare_live

    clock = Clock()
    queries = workload.queries if q is None else [q]
    # the input's path, kind and columns, checked before the JVM starts (docs/operations.md); a stream over a local
    # directory reads what the admission control hands over (FileAdmission, with the backlog behind each file in
    # its name: Spark's observed metrics): a staging directory next to the checkpoint
    with prepare_live(args.input, _input_format(args), stream=args.stream, checkpoint=args.checkpoint, check=queries,
                      ts_col=args.ts_col, schema=args.schema) as live:
        return _run_prepared(args, workload, q, live, clock)


def _run_prepared(args, workload, q: CompiledQuery | None, live, clock: Clock) -> int:
    """:func:`cmd_run` once its input is checked and, for a stream, staged (``live``,
    :class:`sparkcep.live.LiveRun`): the session, the validated input, the result; then the batch's writes or
    the stream's query."""
    if not args.quiet:
        print(f"starting Spark ({args.master})...", file=sys.stderr, flush=True)
    # after the checks: pyspark and pandas take seconds to import
    from sparkcep.spark.session import local_session
    from sparkcep.spark.sinks import counted
    from sparkcep.spark.validate import read_validated

    spark = local_session(args.master, verbose=args.verbose)
    _quiet_task_failures(spark)
    if args.max_matches is not None:  # a workload's operators read it from the session (a query has match_budget)
        from sparkcep.spark.operator import MAX_MATCHES_CONF

        spark.conf.set(MAX_MATCHES_CONF, str(args.max_matches))
    fmt = live.fmt
    # only the columns the queries read, each with the type they need; malformed records, no type or ts,
    # values of the wrong type: dead letters (docs/operations.md)
    queries = workload.queries if q is None else [q]
    attributes, needs = input_columns(queries)
    df, rejected = read_validated(spark, live.read_from, fmt, args.type_col, args.ts_col, stream=args.stream,
                                  files_per_trigger=args.files_per_trigger, schema=args.schema,
                                  known_types=args.known_types, attributes=attributes, needs=needs,
                                  ts_unit=args.ts_unit, arrival_col=args.arrival_col,
                                  keep_arrival=args.stream)
    if not args.stream:
        return _run_batch(args, spark, workload, q, df, rejected, clock)
    df, rejected = counted(df, "events_valid"), counted(rejected, "dead_letters")  # per micro-batch, in its progress
    training = None
    if any(x.shedding_latency for x in queries):  # a batch has no latency to keep: only streams
        path = getattr(args, "shedding_training", None) or args.input
        training = read_events(spark, path, fmt, args.ts_col, schema=args.schema, type_col=args.type_col,
                               attributes=attributes, needs=needs)
    if q is None:  # every operator of the sharing plan, one result with a "query" column
        result = workload.apply(df, side_channel=True, shedding_training=training, followed=args.input)
    else:
        # a checkpoint holding state resumes with the grouping it was made with (docs/operations.md)
        result = q.apply(df, shedding_training=training, side_channel=True, checkpoint=args.checkpoint,
                         followed=args.input)
    return _run_stream(args, spark, result, rejected, live, clock)


def _run_batch(args, spark, workload, q: CompiledQuery | None, df, rejected, clock: Clock) -> int:
    """A batch ``run``: the results written to ``--output`` (else printed), the dead letters, ``--timeouts``'
    partial matches; a summary line."""
    from sparkcep.spark.sinks import write_timeouts

    count_events = None
    if not args.quiet:  # the events read, counted as the job computes them (no extra pass)
        df, count_events = observed_count(df, "sparkcep_events")
    result = workload.apply(df) if q is None else q.apply(df)
    # before any wrapping of the result; a batch result builds its timeouts only when read: not without --timeouts
    timeouts = getattr(result, "timeouts", None) if args.timeouts else None
    with progress(spark, quiet=args.quiet):
        if args.output:
            result, count_results = observed_count(result, "sparkcep_results")
            result.write.mode("overwrite").json(args.output)
            results = count_results() if not args.quiet else None
        else:
            lines = json_lines(result)
            results = len(lines)
            _print_lines(lines)
        dead = _report_rejected(rejected, args.output, args.dead_letters)
        if args.timeouts:
            n = write_timeouts(timeouts, args.output)
            if not args.quiet:
                _said_timeouts(n, args.output)
    if not args.quiet:
        valid = count_events() if count_events is not None else None
        print(summary_line(read=None if valid is None else valid + dead, results=results, dead_letters=dead,
                           seconds=clock.seconds(), output=args.output), file=sys.stderr)
    return 0


def _run_stream(args, spark, result, rejected, live, clock: Clock) -> int:
    """A ``run --stream``: the query (and ``--timeouts``' beside it) followed until stopped (``--once``: drained),
    the input handed over by ``live``'s admission control (with shedding: on latency and backlog, bounded)."""
    from pyspark.sql.types import LongType, StructField, StructType

    from sparkcep.spark.late import KIND, REASON, RECORD
    from sparkcep.spark.sinks import routed, start_timeouts, stream_queries, timeouts_written
    from sparkcep.spark.validate import LATENCY_COL, RESULT_ARRIVAL

    shedding = getattr(result, "shedding", None)
    timeouts = getattr(result, "timeouts", None) if args.timeouts else None
    with tempfile.TemporaryDirectory(prefix="sparkcep-run-") as tmp:
        out = args.output or os.path.join(tmp, "out")
        checkpoint = args.checkpoint or os.path.join(tmp, "checkpoint")
        columns = [f for f in result.schema.fields if f.name not in (KIND, REASON, RECORD, RESULT_ARRIVAL)]
        # the timed-out partial matches: a second query beside the results', each micro-batch written as the
        # watermark closes windows (a continuous run: while it runs, not after the stop)
        beside = [lambda: start_timeouts(timeouts, args.output, checkpoint, once=args.once,
                                         latency=args.latency_column)] if args.timeouts else []
        live.admit(shedding, checkpoint, type_col=args.type_col, dropped_output=args.dropped_output, once=args.once,
                   queries=stream_queries(args.timeouts))
        try:  # the shedding controller follows the results' query only (not the --timeouts query beside it)
            query, totals = follow_stream(routed(result, rejected), out, checkpoint, args, [f.name for f in columns],
                                          beside=beside, started=lambda query: live.started(query, shedding),
                                          admission=live.admission)
        finally:  # before the temporary checkpoint goes
            live.close()
        report_shedding(shedding, query)
        if args.timeouts and not args.quiet:
            _said_timeouts(timeouts_written(timeouts, args.output), args.output)
        if not args.output and os.path.isdir(out):
            if args.latency_column:
                columns.append(StructField(LATENCY_COL, LongType()))
            _print_lines(json_lines(spark.read.schema(StructType(columns)).json(out)))
    if not args.quiet:
        print(stream_summary(totals.counts, clock.seconds(), args.output), file=sys.stderr)
    return 0


def follow_stream(stream, out: str, checkpoint: str, args, result_columns: list[str], beside=(), started=None,
                  admission=None):
    """Start ``stream`` (:func:`sparkcep.spark.sinks.routed`) into ``out`` and follow it, a line per micro-batch
    (not with ``--quiet``): with ``--once`` until the files there at the start are processed, else until
    SIGINT or SIGTERM, which stop it between micro-batches (the one under way commits first; a second signal
    stops at once).  ``beside``: functions starting queries that run beside it (``--timeouts``), each ended with
    it (``--once``: when it has drained too; a stop: between its micro-batches); ``started``: called with the
    query once it has started, before those; ``admission``: the admission control following the input
    (:class:`sparkcep.spark.shedding.FileAdmission`), which counts the backlog.  ``(query, totals)``
    (:class:`sparkcep.spark.progress.Totals`)."""
    from sparkcep.spark.progress import StopSignals, follow_with
    from sparkcep.spark.sinks import discard_uncommitted, start

    with StopSignals() as signals:
        query = start(stream, out, checkpoint, result_columns=result_columns, dead_letters=args.dead_letters,
                      late=args.late_events, once=args.once, latency=getattr(args, "latency_column", False))
        if started is not None:
            started(query)
        # the backlog: files modified after the newest arrival read (not with an arrival column: other clocks)
        source = None if getattr(args, "arrival_col", None) else admission or args.input
        totals = follow_with(query, [begin() for begin in beside], out=io.StringIO() if args.quiet else None,
                             signals=signals, source=source)
        if totals.stopped:  # nothing of a micro-batch the stop interrupted stays (it re-runs on a restart)
            discard_uncommitted(stream.sparkSession, checkpoint, out, args.dead_letters, args.late_events)
    if totals.stopped and not args.quiet:
        print(f"sparkcep: stopped after {len(totals.batches)} micro-batches, each committed", file=sys.stderr)
    return query, totals


def _check_timeouts(q: CompiledQuery | None, output: str | None) -> None:
    """``--timeouts`` needs one match query whose timed-out partial matches are defined, and ``--output``."""
    from sparkcep.api import TIMEOUTS_ONE_QUERY, TIMEOUTS_RECOGNIZE, checked_timeout_spec

    if q is None:
        raise CEPError(TIMEOUTS_ONE_QUERY)
    if q.query.skip is not None:
        raise CEPError(f"--timeouts: an AFTER MATCH SKIP query runs as MATCH_RECOGNIZE: {TIMEOUTS_RECOGNIZE}")
    checked_timeout_spec(q.spec())
    if not output:
        raise CEPError("--timeouts writes OUTPUT/_timeouts: give --output")


def _said_timeouts(n: int, output: str) -> None:
    from sparkcep.spark.sinks import timeouts_dir

    print(timeouts_line(n, timeouts_dir(output)), file=sys.stderr)


def _report_rejected(rejected, output: str | None, dead_letters: str | None = None) -> int:
    """Batch: the dead letters into ``dead_letters`` (default: OUTPUT/_dead_letters, if there is an OUTPUT),
    counted by reason on stderr; their number."""
    from sparkcep.spark.sinks import side_dirs
    from sparkcep.spark.validate import REASON as REJECT_REASON

    rejected = rejected.persist()
    counts = sorted((r[0], r[1]) for r in rejected.groupBy(REJECT_REASON).count().collect())
    if counts:
        target = side_dirs(output, dead_letters)[0] if output else dead_letters
        if target:
            rejected.write.mode("overwrite").json(target)
        text = ", ".join(f"{reason}: {n}" for reason, n in counts)
        print(f"sparkcep: {sum(n for _, n in counts)} bad records skipped ({text})"
              + (f"; see {target}" if target else ""), file=sys.stderr)
    rejected.unpersist()
    return sum(n for _, n in counts)


def _shedding_options(args) -> dict:
    out = {}
    if getattr(args, "shedding_latency", None):
        out["shedding_latency"] = args.shedding_latency
    if getattr(args, "dropped_output", None):
        out["dropped_output"] = args.dropped_output
    if getattr(args, "shedding_model", None):
        out["shedding_model"] = args.shedding_model
    return out


def cmd_notebook(args) -> int:
    from sparkcep.notebook import write_notebook

    queries = _queries(args, ts_unit=args.ts_unit, ts_col=args.ts_col, type_col=args.type_col)
    if len(queries) != 1:
        raise CEPError(f"a notebook runs one query and the file holds {len(queries)}: choose one with --query NAME "
                       "(a whole workload runs as one job: sparkcep compile WORKLOAD.cep -o job.py)")
    q = queries[0]
    fmt = args.format or (_input_format(args) if args.input else "json")
    write_notebook(q, args.output, input_path=args.input, fmt=fmt, master=args.master)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def cmd_demo(args) -> int:
    from sparkcep.demo import run_demo

    return run_demo(args.dir, patients=args.patients, seed=args.seed, quiet=args.quiet, verbose=args.verbose)


COMMANDS = {"check": cmd_check, "explain": cmd_explain, "compile": cmd_compile, "run": cmd_run,
            "notebook": cmd_notebook, "demo": cmd_demo}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        command = COMMANDS[args.command]
        if args.command in cli_sql.COMMANDS and cli_sql.is_sql(_read_text(args), args.file):  # MATCH_RECOGNIZE
            command = functools.partial(cli_sql.COMMANDS[args.command], text=_read_text(args),
                                        cli=sys.modules[__name__])
        status = command(args)
        sys.stdout.flush()  # inside the try: a reader that has gone shows here, not at exit
        return status
    except CEPError as err:
        print(f"sparkcep: {err.render()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C before a stream runs (a running stream stops cleanly, follow_stream)
        print("sparkcep: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `sparkcep explain ... | head -3`: the reader has gone, which is not an error
        _quiet_stdout()
        return 0


def _quiet_stdout() -> None:
    """After EPIPE: point stdout at /dev/null so that the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout without a file descriptor (captured in tests)
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
