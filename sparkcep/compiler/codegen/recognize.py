'''Explain text and the standalone PySpark job of a ``MATCH_RECOGNIZE`` statement (``ir.recognize.Recognize``).

The explain reads like the other plans (``r0 := …`` lines in dependency order): the table read, the per-row
Spark SQL expressions computed before the shuffle, the partition key, the row pattern recognition operator
with its clause (order, rows per match, skip, WITHIN, pattern, SUBSET, DEFINE, MEASURES) and the compiled
pattern program, then the outer query Spark runs over the matches.  The pattern program comes from the engine
(``sparkcep.runtime_udfs.recognize.describe_program``), handed in by the face: the compiler imports no engine.

The job bakes in the statement's IR as JSON data (``ir.serde``) and runs ``sparkcep.sql_api.apply_recognize``
on the input read as the table of the ``FROM`` clause, batch or streaming (the engine spec is built there, for
the columns and types the input has); every value placed in the file is a literal made by
:func:`~sparkcep.compiler.codegen.quote.py_literal`.
'''

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import replace

from sparkcep.compiler.codegen.job import RUN_IT
from sparkcep.compiler.codegen.quote import py_literal
from sparkcep.compiler.recognize.outputs import read_columns
from sparkcep.grammar.recognize import pattern_text
from sparkcep.ir import ast
from sparkcep.ir import recognize as rc
from sparkcep.ir.outer import one_line
from sparkcep.ir.serde import to_data

INDENT = " " * 8

# ----------------------------------------------------------------------------------------------- formatting

_LEVEL = {"OR": 1, "AND": 2, "=": 4, "!=": 4, "<": 4, "<=": 4, ">": 4, ">=": 4, "+": 5, "-": 5, "*": 6, "/": 6,
          "%": 6}
_NOT, _POSTFIX, _NEG, _ATOM = 3, 4, 7, 8


def _literal(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def _ref(var: str | None, name: str) -> str:
    return name if var is None else f"{var}.{name}"


def _expr(e) -> tuple[str, int]:
    """The text of a MATCH_RECOGNIZE expression and the binding strength of its outermost operator."""
    if isinstance(e, ast.BinOp):
        level = _LEVEL.get(e.op, 4)
        # an AND inside an OR is parenthesized for the reader; comparisons do not chain; the rest is left-associative
        lmin, rmin = (3, 3) if e.op == "OR" else (5, 5) if level == 4 else (level, level + 1)
        return f"{_operand(e.left, lmin)} {e.op} {_operand(e.right, rmin)}", level
    if isinstance(e, ast.Unary):
        if e.op == "NOT":
            return "NOT " + _operand(e.operand, _NOT), _NOT
        if e.op in ("IS NULL", "IS NOT NULL"):
            return f"{_operand(e.operand, _POSTFIX + 1)} {e.op}", _POSTFIX
        return "-" + _operand(e.operand, _ATOM), _NEG
    if isinstance(e, ast.Literal):
        return _literal(e.value), _ATOM
    if isinstance(e, ast.Attr):
        return _ref(e.var, e.attr), _ATOM
    if isinstance(e, ast.Func):
        args = "*" if e.star else ", ".join(format_expr(a) for a in e.args)
        return f"{e.name}({args})", _ATOM
    if isinstance(e, rc.RowExpr):
        return _ref(e.var, e.column), _ATOM
    if isinstance(e, rc.Nav):
        default = 1 if e.kind in ("PREV", "NEXT") else 0
        offset = f", {e.offset}" if e.offset != default else ""
        return _semantics(e.semantics) + f"{e.kind}({format_expr(e.arg)}{offset})", _ATOM
    if isinstance(e, rc.Classifier):
        return _semantics(e.semantics) + f"CLASSIFIER({e.var or ''})", _ATOM
    if isinstance(e, rc.MatchNumber):
        return "MATCH_NUMBER()", _ATOM
    if isinstance(e, rc.Agg):
        if e.arg is None:
            arg = "*" if e.var is None else f"{e.var}.*"
        else:
            arg = format_expr(e.arg)
        return _semantics(e.semantics) + f"{e.func.upper()}({arg})", _ATOM
    return repr(e), _ATOM


def _semantics(s: str | None) -> str:
    return f"{s} " if s else ""


def _operand(e, minimum: int) -> str:
    text, level = _expr(e)
    return f"({text})" if level < minimum else text


def format_expr(e) -> str:
    """A DEFINE condition or MEASURES expression as MATCH_RECOGNIZE text (``RowExpr``: its column)."""
    return _expr(e)[0]


def row_exprs(q: rc.Recognize) -> dict[str, str]:
    """``column -> Spark SQL`` of every per-row expression of the statement, in order of appearance."""
    found: dict[str, str] = {}

    def walk(x) -> None:
        if isinstance(x, rc.RowExpr):
            found.setdefault(x.column, x.sql)
            return
        if isinstance(x, (tuple, list)):
            for item in x:
                walk(item)
            return
        fields = getattr(x, "__dataclass_fields__", None)
        if fields:
            for name in fields:
                if name != "span":
                    walk(getattr(x, name))

    walk((q.defines, q.measures))
    return found


def _duration(d: ast.Duration) -> str:
    value = int(d.value) if float(d.value).is_integer() else d.value
    return f"{value} {d.unit}" if d.unit else f"{value} (time column units)"


def _order(item: rc.OrderItem) -> str:
    text = item.column + ("" if item.ascending else " DESC")
    if item.nulls_first is not None:
        text += " NULLS FIRST" if item.nulls_first else " NULLS LAST"
    return text


def _skip(s: rc.Skip) -> str:
    return f"{s.kind} {s.var}" if s.var else s.kind


def explain_text(q: rc.Recognize, *, program: list[str] | None = None, spec: rc.RecognizeSpec | None = None,
                 engine: list[str] | None = None) -> str:
    """The plan of ``q`` as ``r0 := …`` lines.  ``spec`` (the engine spec for a known input schema) adds the
    columns the engine reads and the result columns; ``program`` is the engine's pattern program and ``engine``
    how the engine runs it (``describe_program``, ``describe_engine`` of ``sparkcep.runtime_udfs.recognize``)."""
    lines = ["-- MATCH_RECOGNIZE: SQL:2016 row pattern recognition (preferment order, AFTER MATCH SKIP)"]
    lines.append(f"r0 := Source[table={q.source}]")
    ref = "r0"
    exprs = row_exprs(q)
    n = 1
    if exprs:
        lines.append(f"r{n} := Project[{ref}, per-row Spark SQL computed before the shuffle]")
        lines += [f"{INDENT}{column} := {sql}" for column, sql in exprs.items()]
        ref, n = f"r{n}", n + 1
    keys = ", ".join(q.partition_by) if q.partition_by else "<none: one partition>"
    lines.append(f"r{n} := Partition[{ref}, keys=({keys})]")
    ref, n = f"r{n}", n + 1
    order = ", ".join(_order(o) for o in q.order_by)
    head = f"r{n} := Recognize[{ref}, order=({order}), rows={q.rows_per_match}, skip={_skip(q.skip)}"
    if q.within is not None:
        head += f", within={_duration(q.within)}"
    lines.append(head + "]")
    body = ["ties after ORDER BY: the other engine columns, ascending, NULLs first",
            f"pattern ({pattern_text(q.pattern)})"]
    body += [f"subset {name} = ({', '.join(members)})" for name, members in q.subsets]
    defined = dict(q.defines)
    body += [f"define {var}: {format_expr(cond)}" for var, cond in q.defines]
    if spec is not None:
        undefined = [v for v in spec.variables if v not in defined]
        if undefined:
            body.append(f"always true (no DEFINE): {', '.join(undefined)}")
    body += [f"measure {m.name} := {format_expr(m.expr)}" for m in q.measures]
    if spec is not None:
        body.append(f"engine columns ({', '.join(spec.columns)})")
    body += _window_lines(q)
    lines += [INDENT + line for line in body]
    lines += [INDENT + "engine: " + line for line in engine or ()]
    if program:
        lines.append(INDENT + "program (prioritized NFA, threads in preferment order):")
        lines += [INDENT + "  " + p for p in program]
    ref, n = f"r{n}", n + 1
    if spec is not None:
        columns = ", ".join(f"{c} {t}" for c, t in zip(spec.output, spec.output_types, strict=False)) \
            if spec.output_types else ", ".join(spec.output)
        lines.append(f"r{n} := Output[{ref}, columns=({columns})]")
    else:
        lines.append(f"r{n} := Output[{ref}, columns=<partition columns, "
                     + ("order columns, measures, the other input columns>" if q.rows_per_match != rc.ONE_ROW
                        else "measures>") + "]")
    lines += _pruned_lines(q, spec)
    ref, n = f"r{n}", n + 1
    lines.append(f"r{n} := Query[{ref} as {q.result_view}]")
    lines.append(INDENT + one_line(q.outer_sql))
    if _aggregates(q.outer_sql):
        lines.append(INDENT + "aggregates the matches in Spark SQL; trend aggregation (GRETA) and sharing (Sharon) "
                              "not used: MATCH_RECOGNIZE counts one preferred match per start row, GRETA every trend")
    return "\n".join(lines)


def _pruned_lines(q: rc.Recognize, spec: rc.RecognizeSpec | None) -> list[str]:
    """The line saying which result columns a batch returns, when the outer query reads only some
    (``compiler.recognize.outputs``); none when the columns are not known (ALL ROWS PER MATCH without a schema)."""
    if spec is not None:
        names = list(spec.output)
    elif q.rows_per_match == rc.ONE_ROW:
        names = [*q.partition_by, *(m.name for m in q.measures)]
    else:
        return []
    kept = read_columns(q.outer_sql, names)
    if len(kept) == len(names):
        return []
    dropped = [c for c in names if c not in kept]
    return [f"{INDENT}batch: the worker returns {', '.join(kept)} only (the outer query reads no other column; "
            f"{', '.join(dropped)} not built)"]


def _window_lines(q: rc.Recognize) -> list[str]:
    """How a negation at the start or the end gets its window counts (``Recognize.windows``)."""
    if not q.windows:
        return []
    names = ", ".join(f"{w.name} ({w.kind} of {'|'.join(w.types)})" for w in q.windows)
    kinds = {w.kind for w in q.windows}
    wait = (", a candidate match held until the watermark reaches its first row's ts + WITHIN"
            if "after_within" in kinds else " as its rows arrive")
    if "earliest_after" in kinds:  # the nearest negated event after a row with its values: known at ts + WITHIN
        wait += ", each row held until the watermark reaches its ts + WITHIN"
    return [f"window counts {names}: Spark window functions in a batch; on a stream counted by the engine{wait}"]


def _aggregates(outer_sql: str) -> bool:
    """Whether the outer query groups or aggregates the matches (``GROUP BY ... COUNT(*)``)."""
    import sqlglot
    from sqlglot import exp

    from sparkcep.ir.outer import parse_outer

    try:
        tree = parse_outer(outer_sql)
    except sqlglot.errors.SqlglotError:
        return False
    return tree.find(exp.Group) is not None or tree.find(exp.AggFunc) is not None


# ----------------------------------------------------------------------------------------------- the job

_DOCSTRING = '''\
sparkcep job: MATCH_RECOGNIZE over {source}.

Generated by `sparkcep compile` from this statement:

{query}

Plan:

{explain}

{run_it}

Input: the rows of the table {source!r} as JSON lines (or --format csv/parquet); {time_col!r}, the first
ORDER BY column, must be a timestamp (or an ISO-8601 string) or a number.
Output: JSON lines with the columns of the statement's SELECT.  Records that are malformed, lack {time_col!r}
or hold a value of the wrong type go to RESULTS_DIR/_dead_letters as JSON lines with a reason and the record;
a stream prints its counts per micro-batch on stderr (docs/operations.md).
'''

#: The options check, the session and the validated rows: the same in a statement's job and a workload's.
_SESSION_AND_ROWS = '''\
    args = p.parse_args(argv)
    if args.stream and not args.checkpoint:
        p.error("--stream needs --checkpoint")
    if args.latency_column and not args.stream:
        p.error("--latency-column is for a stream (--stream): a batch run has no arrival")

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # spark.pyspark.python, if set, wins
    spark = (SparkSession.builder.appName({app_name})
             .config("spark.sql.shuffle.partitions", args.shuffle_partitions)
             .config("spark.ui.showConsoleProgress", "false")  # sparkcep prints its own progress
             .getOrCreate())
    with_defaults(spark)  # no Arrow byte limit per batch unless one was given (sparkcep.spark.session)
    # a stream over a local directory follows it through the admission control, as `sparkcep run` does: each
    # micro-batch observes the backlog behind it (CHECKPOINT/_admitted); the admission stops with the run
    with prepare_live(args.input, args.format, stream=args.stream, checkpoint=args.checkpoint) as live:
        run(spark, args, live)


def run(spark, args, live) -> None:
    """The job once its session is up: ``live`` (sparkcep.live.LiveRun) reads ``--input``, or the staging
    directory its admission control fills from it (started before the query, ``live.admit``)."""
    # every column, parsed as text and cast to --schema's types, else to those of the files there now; ISO-string
    # times become timestamps; malformed lines, rows without TIME_COL and values of the wrong type are rejected
    rows, rejected = read_validated(spark, live.read_from, args.format, None, TIME_COL, stream=args.stream,
                                    files_per_trigger=args.files_per_trigger, schema=args.schema, ts_unit=TS_UNIT,
                                    keep_arrival=args.stream)'''

#: The command-line options: the same in a statement's job and a workload's, but for what RESULTS_DIR holds.
_OPTIONS = '''\
    p.add_argument("--input", required=True, help="the rows of TABLE: a file or a directory")
    p.add_argument("--output", required=True{output_help})
    p.add_argument("--format", default="json", choices=["json", "csv", "parquet"])
    p.add_argument("--stream", action="store_true")
    p.add_argument("--checkpoint", help="checkpoint directory (streaming{checkpoint_help})")
    p.add_argument("--lateness", type=float, default=0,
                   help="streaming: the watermark delay, in time column units (milliseconds for a timestamp)")
    p.add_argument("--once", action="store_true", help="streaming: process what is there, then stop")
    p.add_argument("--schema", help="input schema as DDL (default: inferred from the files there now)")
    p.add_argument("--shuffle-partitions", type=int, default=4)
    p.add_argument("--files-per-trigger", type=int, help="streaming: files per micro-batch (default: all)")
    p.add_argument("--dead-letters", help="bad records (default: {results}/_dead_letters)")
    p.add_argument("--latency-column", action="store_true",
                   help="streaming: write each result with _latency_ms, the milliseconds from the arrival of its "
                        "events to its micro-batch's results being computed")'''

_TEMPLATE = '''\
{docstring}

from __future__ import annotations

import argparse
import json
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sparkcep import CEPError
from sparkcep.ir.serde import from_data
from sparkcep.live import prepare_live
from sparkcep.spark.late import KIND, REASON, RECORD, RESULT
from sparkcep.spark.progress import StopSignals, follow
from sparkcep.spark.session import with_defaults
from sparkcep.sql_api import apply_recognize
from sparkcep.spark.sinks import counted, routed, side_dirs, start
from sparkcep.spark.validate import RESULT_ARRIVAL, read_validated

#: The statement, parsed and checked at compile time: a sparkcep.ir.recognize.Recognize as sparkcep.ir.serde JSON.
RECOGNIZE = {recognize}

#: The table the statement reads (FROM) and its time column (the first ORDER BY column).
TABLE, TIME_COL = {table}, {time_col}
#: The unit of a numeric time column (WITHIN and --lateness are in it; None: WITHIN has no unit or the column
#: is a timestamp).
TS_UNIT = {ts_unit}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
{options}
{session_and_rows}{event_columns}
    if args.stream:  # per micro-batch counts in the query's progress (observedMetrics); every valid row is relevant
        rows = counted(counted(rows, "events_valid"), "events_relevant")
        rejected = counted(rejected, "dead_letters")
    # the row pattern recognition: per-row expressions and the key shuffle in Spark, the engine per partition
    # (batch: one mapInArrow pass; streaming: state per key, matches emitted once decided), then the outer query
    result = apply_recognize(rows, from_data(json.loads(RECOGNIZE)), ts_unit=TS_UNIT,
                             watermark_delay=args.lateness if args.stream else None, late_rows=args.stream)
    dead_letters, late_events = side_dirs(args.output, args.dead_letters)
    if not args.stream:
        result.write.mode("overwrite").json(args.output)
        rejected.write.mode("overwrite").json(dead_letters)
        return
    columns = [c for c in result.columns if c not in (KIND, REASON, RECORD, RESULT_ARRIVAL)]
    # rows older than the watermark come with the results as "late" rows (a plain SELECT/WHERE outer query)
    tagged = result if KIND in result.columns else result.select(
        "*", F.lit(RESULT).alias(KIND), F.lit(None).cast("string").alias(REASON),
        F.lit(None).cast("string").alias(RECORD))
    # results, dead letters and late rows: one query, each micro-batch's files written exactly once; it follows the
    # input until Ctrl-C or SIGTERM, which stop it after the micro-batch under way has committed (--once: until
    # the files there now are processed); the admission control, started before it, hands the files over
    live.admit(None, args.checkpoint)
    with StopSignals() as signals:
        query = start(routed(tagged, rejected), args.output, args.checkpoint, result_columns=columns,
                      dead_letters=dead_letters, late=late_events, once=args.once, latency=args.latency_column)
        follow(query, signals=signals, source=live.admission or args.input)  # a progress line per micro-batch


if __name__ == "__main__":
    try:
        main()
    except CEPError as err:
        sys.exit(f"sparkcep job: {{err.render()}}")
    finally:  # stopped before the JVM's shutdown hooks run: on a cluster the application ends cleanly, not FAILED
        if SparkSession.getActiveSession() is not None:
            SparkSession.getActiveSession().stop()
'''


def time_column(q: rc.Recognize) -> str:
    """The column the rows are read with as their time: the first ORDER BY column."""
    return q.order_by[0].column


#: The Spark SQL functions of one event an AFTER MATCH SKIP query reads as columns, computed before the engine.
_EVENT_COLUMNS = '''
    # the Spark SQL functions of one event the statement reads as columns: computed by Spark, before the engine
    rows = rows.select("*", *[F.expr(sql).alias(name) for name, sql in {columns}])'''
#: As :data:`_EVENT_COLUMNS` with the window counts of a negation at the start or the end: a stream has no window
#: functions, its engine counts them (``RecognizeSpec.windows``).
_EVENT_AND_WINDOW_COLUMNS = '''
    # the Spark SQL functions of one event the statement reads as columns: computed by Spark, before the engine;
    # the window counts of a negation at the start or the end too in a batch (a stream's engine counts them)
    windows = {windows} if args.stream else []
    rows = rows.select("*", *[F.expr(sql).alias(name) for name, sql in {columns} if name not in windows])'''


def job_source(q: rc.Recognize, *, explain: str, ts_unit: str | None = None,
               event_columns: list[tuple[str, str]] = ()) -> str:
    """The standalone PySpark job of ``q`` (see the module docstring); ``event_columns``: ``(column, Spark SQL)``
    the rows gain before the engine runs (an AFTER MATCH SKIP query's functions of one event)."""
    docstring = _DOCSTRING.format(run_it=RUN_IT, source=q.source, query=textwrap.indent(q.text.strip(), "    "),
                                  explain=textwrap.indent(explain, "    "), time_col=time_column(q))
    return _TEMPLATE.format(
        docstring=py_literal(docstring),
        recognize=py_literal("\n" + json.dumps(to_data(q), indent=1) + "\n"),
        table=py_literal(q.source),
        time_col=py_literal(time_column(q)),
        ts_unit=py_literal(ts_unit),
        options=_OPTIONS.format(output_help="", checkpoint_help="", results="OUTPUT"),
        session_and_rows=_SESSION_AND_ROWS.format(app_name=py_literal(f"sparkcep: MATCH_RECOGNIZE over {q.source}")),
        event_columns=_event_columns(q, event_columns),
    )


def _event_columns(q: rc.Recognize, event_columns: list[tuple[str, str]]) -> str:
    if not event_columns:
        return ""
    columns = py_literal([list(c) for c in event_columns])
    if not q.windows:
        return _EVENT_COLUMNS.format(columns=columns)
    return _EVENT_AND_WINDOW_COLUMNS.format(columns=columns, windows=py_literal([w.name for w in q.windows]))


# ----------------------------------------------------------------------------------------------- a workload's job

_WORKLOAD_DOCSTRING = '''\
sparkcep job: {n} MATCH_RECOGNIZE statements over {source} ({names}).

Generated by `sparkcep compile` from these statements:

{query}

Plan:

{explain}

{run_it}

Input: the rows of the table {source!r} as JSON lines (or --format csv/parquet); {time_col!r}, the first
ORDER BY column, must be a timestamp (or an ISO-8601 string) or a number.
Output: per statement, JSON lines with the columns of its SELECT in RESULTS_DIR/<name>/ ({names}); records
that are malformed, lack {time_col!r} or hold a value of the wrong type go to RESULTS_DIR/_dead_letters; a
stream's rows older than the watermark go to RESULTS_DIR/<name>/_late (or --late-events DIR/<name>), and it
prints its counts per micro-batch on stderr (docs/operations.md).  Statements with the same PARTITION BY and
ORDER BY run in one pass: one shuffle, one sort, one engine pass (one streaming query per such group).
'''

_WORKLOAD_TEMPLATE = '''\
{docstring}

from __future__ import annotations

import argparse
import json
import os
import sys

from pyspark.sql import SparkSession

from sparkcep import CEPError
from sparkcep.ir.serde import from_data
from sparkcep.live import prepare_live
from sparkcep.spark.progress import StopSignals, follow
from sparkcep.spark.session import with_defaults
from sparkcep.spark.sinks import counted
from sparkcep.spark.validate import read_validated
from sparkcep.sql_api import apply_workload, follow_workload, group_checkpoints, stream_workload, workload_dirs

#: The statements, parsed and checked at compile time: sparkcep.ir.recognize.Recognize as sparkcep.ir.serde JSON.
STATEMENTS = {statements}

#: Each statement's name: its output directory is RESULTS_DIR/<name>/.
NAMES = {names}

#: The table the statements read (FROM) and its time column (the first ORDER BY column).
TABLE, TIME_COL = {table}, {time_col}
#: The unit of a numeric time column (WITHIN and --lateness are in it; None: WITHIN has no unit or the column
#: is a timestamp).
TS_UNIT = {ts_unit}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
{options}
    p.add_argument("--late-events", help="streaming: late rows, DIR/<name> (default: RESULTS_DIR/<name>/_late)")
{session_and_rows}
    statements = [from_data(json.loads(s)) for s in STATEMENTS]
    if not args.stream:
        # per group of statements sharing a pass: one shuffle, one sort, one mapInArrow pass, read once (cached)
        frames = apply_workload({{TABLE.lower(): rows}}, statements, ts_unit=TS_UNIT)
        results, _, dead_letters = workload_dirs(args.output, NAMES, dead_letters=args.dead_letters)
        for path, i in zip(results, sorted(frames), strict=True):
            frames[i].write.mode("overwrite").json(path)
        rejected.write.mode("overwrite").json(dead_letters)
        return
    # per micro-batch counts in the queries' progress (observedMetrics); every valid row is relevant
    rows = counted(counted(rows, "events_valid"), "events_relevant")
    rejected = counted(rejected, "dead_letters")
    # one streaming query per group sharing a pass (state per key: one engine state per statement); results,
    # late rows and dead letters of each micro-batch written exactly once; they follow the input until Ctrl-C or
    # SIGTERM, which stop each after the micro-batch under way has committed (--once: until the files there now
    # are processed, one group after the other); a progress line per micro-batch on stderr; the admission control,
    # started before them, keeps a staged file until each group's query has committed it
    live.admit(None, args.checkpoint, queries=group_checkpoints(statements))
    with StopSignals() as signals:
        queries, _ = stream_workload(rows, rejected, statements, NAMES, args.output, args.checkpoint,
                                     ts_unit=TS_UNIT, watermark_delay=args.lateness, dead_letters=args.dead_letters,
                                     late_events=args.late_events, once=args.once, latency=args.latency_column,
                                     wait=lambda query: follow(query, signals=signals,
                                                               source=live.admission or args.input))
        if not args.once:
            follow_workload(spark, queries, statements, NAMES, args.output, args.checkpoint,
                            dead_letters=args.dead_letters, late_events=args.late_events, signals=signals,
                            source=live.admission or args.input)


if __name__ == "__main__":
    try:
        main()
    except CEPError as err:
        sys.exit(f"sparkcep job: {{err.render()}}")
'''


def workload_job_source(qs: list[rc.Recognize], names: list[str], *, plan: list[str], explains: list[str],
                        ts_unit: str | None = None) -> str:
    """The standalone PySpark job of several statements over one table (``names``: their output directories;
    ``plan``: the workload's explain lines, ``explains``: each statement's)."""
    texts = "\n\n".join(textwrap.indent(f"-- {name}\n{q.text.strip()}", "    ") for name, q in zip(names, qs,
                                                                                                strict=True))
    plans = "\n\n".join(["\n".join(plan), *(f"-- statement {name}\n{e}" for name, e in zip(names, explains,
                                                                                         strict=True))])
    docstring = _WORKLOAD_DOCSTRING.format(
        run_it=RUN_IT, n=len(qs), source=qs[0].source, names=", ".join(names), query=texts,
        explain=textwrap.indent(plans, "    "), time_col=time_column(qs[0]))
    return _WORKLOAD_TEMPLATE.format(
        docstring=py_literal(docstring),
        statements=py_literal(["\n" + json.dumps(to_data(_unpadded(q)), indent=1) + "\n" for q in qs]),
        names=py_literal(list(names)),
        table=py_literal(qs[0].source),
        time_col=py_literal(time_column(qs[0])),
        ts_unit=py_literal(ts_unit),
        options=_OPTIONS.format(output_help=', help="RESULTS_DIR: one directory per statement in it"',
                                checkpoint_help="; one per group of statements in it", results="RESULTS_DIR"),
        session_and_rows=_SESSION_AND_ROWS.format(
            app_name=py_literal(f"sparkcep: {len(qs)} MATCH_RECOGNIZE statements over {qs[0].source}")),
    )


def _unpadded(q: rc.Recognize) -> rc.Recognize:
    """``q`` with the blanks that stand for the statements before it in its file (``split_statements``) cut from
    its text, its line breaks kept: an error's line and column (all a rendered error reads) stay right."""
    return replace(q, text=re.sub(r"(?m)^ +$", "", q.text))
