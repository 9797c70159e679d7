"""``sparkcep check|explain|compile|run|notebook`` for a SQL:2016 ``MATCH_RECOGNIZE`` statement.

A ``.sql`` file, or query text (``-e``, stdin, a file of another name) that starts with ``SELECT``, is one
statement ``SELECT ... FROM table MATCH_RECOGNIZE (...) ...`` (docs/language.md, "MATCH_RECOGNIZE"), or
several separated by ``;`` over one table (a workload, docs/sharing.md: each checked and explained, run with
one output directory per statement, compiled into one job, one notebook):

* ``check``: parse and check it (batch, and whether a stream can run it); an error names line and column;
* ``explain``: the plan, with the engine's pattern program (``--schema DDL``: the input's columns and types,
  which fix the engine columns and the result's types);
* ``compile``: a standalone PySpark job that reads ``--input`` as the table of the FROM clause;
* ``run``: that, on local Spark: ``run query.sql --input events/ [--table events] [--stream] [--output DIR]``;
* ``notebook``: the same as Jupyter cells.

The rows are read like the pattern language's events (``spark.validate.read_validated``): every column,
each parsed as text and cast to ``--schema``'s type or the one inferred from the files; the time column is the
first ORDER BY column, and a row without it, a malformed line or a value of the wrong type is a dead letter.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from sparkcep import preflight
from sparkcep.ir import recognize as rc
from sparkcep.ir.errors import CEPError, CEPSemanticError

_COMMENTS = re.compile(r"\s*(?:--[^\n]*(?:\n|$)|/\*.*?\*/)", re.S)


def is_sql(text: str, file: str | None = None) -> bool:
    """A ``.sql`` file, or text whose first word (after blanks and SQL comments) is SELECT."""
    if file and file != "-" and Path(file).suffix.lower() == ".sql":
        return True
    pos = 0
    while (m := _COMMENTS.match(text, pos)) and m.end() > pos:
        pos = m.end()
    return re.match(r"\s*select\b", text[pos:], re.I) is not None


def statement(text: str, *, streaming: bool = False, functions=None) -> rc.Recognize:
    """The parsed and checked statement (:class:`CEPError` with line, column and caret otherwise);
    ``functions``: the session's function lookup (``sparkcep.sql_api.session_functions``), if any."""
    from sparkcep.compiler.recognize import check_recognize
    from sparkcep.grammar.recognize import parse_recognize

    q = parse_recognize(text)
    check_recognize(q, streaming=streaming, functions=functions)
    return q


def statements(text: str, *, streaming: bool = False) -> list[rc.Recognize]:
    """The statements of a text holding one or several separated by ``;``, each parsed and checked (errors
    positioned in the whole text: ``sparkcep.sql_api.split_statements`` keeps every line and column)."""
    from sparkcep.sql_api import split_statements

    parts = split_statements(text)
    if len(parts) <= 1:
        return [statement(text, streaming=streaming)]
    return [statement(part, streaming=streaming) for part in parts]


def schema_of_ddl(ddl: str) -> dict[str, str]:
    """``'sym STRING, ts TIMESTAMP, price DOUBLE'`` → ``{"sym": "string", "ts": "timestamp", "price": "double"}``
    (Spark ``simpleString`` types), without a JVM."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(f"CREATE TABLE t ({ddl})", read="spark")
        columns = [c for c in tree.this.expressions if isinstance(c, exp.ColumnDef)]
    except (sqlglot.errors.ParseError, AttributeError):
        columns = []
    if not columns or any(c.args.get("kind") is None for c in columns):
        raise CEPError(f"not a schema: {ddl!r} (e.g. 'sym STRING, ts TIMESTAMP, price DOUBLE')")
    return {c.name: c.args["kind"].sql("spark").lower() for c in columns}


def explain(q: rc.Recognize, schema: dict[str, str] | None = None, *, ts_unit: str | None = None) -> str:
    """The explain text of ``q``: with the engine spec and its pattern program for ``schema`` (the input's
    columns and Spark types; None: the columns the statement names)."""
    from sparkcep.compiler.codegen.recognize import explain_text
    from sparkcep.runtime_udfs.recognize import describe_engine, describe_program

    spec = plan_spec(q, schema, ts_unit=ts_unit)
    try:
        program, engine = describe_program(spec), describe_engine(spec)
    except ValueError as err:  # a program the engine cannot run (check refuses those first): one message
        raise CEPError(f"the engine cannot run this pattern: {err}") from None
    if schema is not None:
        from sparkcep.compiler.recognize import describe_worker, pruned_output

        engine += describe_worker(pruned_output(spec, q.outer_sql), schema)  # a batch's worker
    return explain_text(q, program=program, spec=spec if schema is not None else None, engine=engine)


def named_columns(q: rc.Recognize) -> list[str]:
    """The input columns the statement names (partition, order, DEFINE/MEASURES references), in order."""
    from sparkcep.ir import ast

    out: dict[str, None] = dict.fromkeys([*q.partition_by, *(o.column for o in q.order_by)])

    def walk(x) -> None:
        if isinstance(x, ast.Attr):
            out.setdefault(x.attr)
        elif isinstance(x, rc.RowExpr):
            return
        elif isinstance(x, (tuple, list)):
            for item in x:
                walk(item)
        elif getattr(x, "__dataclass_fields__", None):
            for name in x.__dataclass_fields__:
                if name != "span":
                    walk(getattr(x, name))

    walk((q.defines, q.measures))
    return list(out)


def plan_spec(q: rc.Recognize, schema: dict[str, str] | None = None, *, ts_unit: str | None = None):
    """The engine spec of ``q`` for ``schema``; without one, for the columns the statement names, typed as a
    timestamp (the time column) or a double."""
    from sparkcep.compiler.codegen.recognize import time_column
    from sparkcep.compiler.recognize import build_spec

    if schema is None:
        time = time_column(q)
        schema = {c: "timestamp" if c == time else "double" for c in named_columns(q)}
        schema |= {column: _sql_type(sql, schema) for column, sql in _row_exprs(q).items()}
    return build_spec(q, schema, ts_unit=ts_unit)


def _row_exprs(q: rc.Recognize) -> dict[str, str]:
    from sparkcep.compiler.codegen.recognize import row_exprs

    return row_exprs(q)


def _sql_type(sql: str, schema: dict[str, str]) -> str:
    """The type sqlglot gives the Spark SQL expression ``sql`` over ``schema`` (``double`` if it cannot tell)."""
    import sqlglot
    from sqlglot.optimizer.annotate_types import annotate_types

    try:
        tree = sqlglot.parse_one(f"SELECT {sql} FROM t", read="spark")
        typed = annotate_types(tree, schema={"t": schema}, dialect="spark").selects[0].type
    except (sqlglot.errors.SqlglotError, ValueError, KeyError):
        return "double"
    if typed is None or typed.is_type(sqlglot.exp.DataType.Type.UNKNOWN, sqlglot.exp.DataType.Type.NULL):
        return "double"
    return typed.sql("spark").lower()


# ----------------------------------------------------------------------------------------------- commands


def _refuse(args, options: dict[str, object]) -> None:
    """Options of the pattern language that mean nothing for a statement: refused, never ignored."""
    from sparkcep.api import TIMEOUTS_RECOGNIZE

    for name, default in options.items():
        value = getattr(args, name.lstrip("-").replace("-", "_"), default)
        if value != default:
            raise CEPError(f"{name} does not apply to a MATCH_RECOGNIZE statement"
                           + (" (its time column is the first ORDER BY column)" if name in ("--ts-col", "--ts")
                              else " (it has no event type column)" if name == "--type-col"
                              else f" ({TIMEOUTS_RECOGNIZE})" if name == "--timeouts" else ""))


def _input_format(args) -> str:
    if args.format:
        return args.format
    return {".csv": "csv", ".parquet": "parquet"}.get(Path(args.input).suffix.lower(), "json")


def _check_line(q: rc.Recognize, *, workload: bool = False) -> str:
    from sparkcep.spark.recognize import _passing_late_rows

    try:
        from sparkcep.compiler.recognize import check_recognize

        check_recognize(q, streaming=True)
        stream = "batch and streaming"
        if workload and _passing_late_rows(q.outer_sql) is None:
            stream = ("batch only (streaming: in a workload the query around MATCH_RECOGNIZE can only select and "
                      "filter)")
    except CEPSemanticError as err:
        stream = f"batch only (streaming: {err.message})"
    variables = plan_spec(q).variables
    n = len(variables)
    return (f"MATCH_RECOGNIZE over {q.source}: {n} variable{'s' if n != 1 else ''} ({', '.join(variables)}), "
            f"{q.rows_per_match}, AFTER MATCH SKIP {q.skip.kind}{' ' + q.skip.var if q.skip.var else ''}; {stream}")


def _workload_lines(qs: list[rc.Recognize], names: list[str]) -> list[str]:
    from sparkcep.sql_api import plan_workload

    return [f"-- a workload of {len(qs)} MATCH_RECOGNIZE statements ({', '.join(names)})",
            *("-- " + line for line in plan_workload(qs, names)[1])]


def cmd_check(args, text: str, cli=None) -> int:
    from sparkcep.sql_api import statement_names

    _refuse(args, {"--query": None})
    qs = statements(text)
    if len(qs) == 1:
        print("ok  " + _check_line(qs[0]))
        return 0
    names = statement_names(qs)
    _one_source(qs)
    for name, q in zip(names, qs, strict=True):
        print(f"ok  {name}: {_check_line(q, workload=True)}")
    print("\n".join(_workload_lines(qs, names)))
    return 0


def explain_all(qs: list[rc.Recognize], schema: dict[str, str] | None = None, *, ts_unit: str | None = None) -> str:
    """explain's text of one statement, or of a workload: who shares a pass, then each statement's plan."""
    from sparkcep.sql_api import statement_names

    if len(qs) == 1:
        return explain(qs[0], schema, ts_unit=ts_unit)
    names = statement_names(qs)
    _one_source(qs)
    parts = ["\n".join(_workload_lines(qs, names))]
    parts += [f"-- statement {name}\n" + explain(q, schema, ts_unit=ts_unit) for name, q in zip(names, qs, strict=True)]
    return "\n\n".join(parts)


def job_of(qs: list[rc.Recognize], *, ts_unit: str | None = None) -> str:
    """The generated job of one statement, or of a workload of statements over one table."""
    from sparkcep.compiler.codegen.recognize import job_source, workload_job_source
    from sparkcep.sql_api import statement_names

    if len(qs) == 1:
        return job_source(qs[0], explain=explain(qs[0], ts_unit=ts_unit), ts_unit=ts_unit)
    names = statement_names(qs)
    _one_source(qs)
    return workload_job_source(qs, names, plan=_workload_lines(qs, names),
                               explains=[explain(q, ts_unit=ts_unit) for q in qs], ts_unit=ts_unit)


def cmd_explain(args, text: str, cli=None) -> int:
    _refuse(args, {"--query": None, "--sql": False, "--format": "text", "--stats": None})
    schema = schema_of_ddl(args.schema) if getattr(args, "schema", None) else None
    print(explain_all(statements(text), schema, ts_unit=getattr(args, "ts_unit", None)))
    return 0


def cmd_compile(args, text: str, cli=None) -> int:
    _refuse(args, {"--query": None, "--ts": None, "--ts-col": "ts", "--type-col": "type", "--collapsed": False,
                   "--stats": None, "--shedding-latency": None})
    Path(args.output).write_text(job_of(statements(text), ts_unit=args.ts_unit))
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def cmd_notebook(args, text: str, cli=None) -> int:
    from sparkcep.notebook import write_recognize_notebook

    _refuse(args, {"--query": None, "--ts-col": "ts", "--type-col": "type"})
    qs = statements(text)
    names = None
    if len(qs) > 1:
        from sparkcep.sql_api import statement_names

        names = statement_names(qs)
        _one_source(qs)
    fmt = args.format or (_input_format(args) if args.input else "json")
    write_recognize_notebook(qs if names else qs[0], args.output, explain=explain_all(qs, ts_unit=args.ts_unit),
                             input_path=args.input, fmt=fmt, master=args.master, ts_unit=args.ts_unit, names=names)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def _one_source(qs: list[rc.Recognize]) -> None:
    """The statements of a file run over one input: they must read one table."""
    for q in qs[1:]:
        if q.source.lower() != qs[0].source.lower():
            raise CEPSemanticError(f"the statements of a file read one input, as one table: the first reads FROM "
                                   f"{qs[0].source}, this one FROM {q.source}", q.span, q.text or None)


def _table(args, q: rc.Recognize) -> None:
    table = getattr(args, "table", None)
    if table is not None and table.lower() != q.source.lower():
        raise CEPError(f"--table {table} names the table the input is read as, but the statement reads FROM "
                       f"{q.source}")


def cmd_run(args, text: str, cli) -> int:
    """``cli``: the ``sparkcep.cli`` module, whose helpers the run shares (passed in, not imported: no cycle)."""
    import os
    import tempfile

    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    from sparkcep.compiler.codegen.recognize import time_column
    from sparkcep.live import prepare_live
    from sparkcep.spark.late import KIND, REASON, RECORD, RESULT
    from sparkcep.spark.results import json_lines
    from sparkcep.spark.session import local_session
    from sparkcep.spark.sinks import counted, routed
    from sparkcep.spark.validate import LATENCY_COL, RESULT_ARRIVAL, read_validated
    from sparkcep.sql_api import apply_recognize

    _refuse(args, {"--query": None, "--ts-col": "ts", "--type-col": "type", "--collapsed": False,
                   "--max-matches": None, "--known-types": None, "--shedding-latency": None,
                   "--dropped-output": None, "--shedding-training": None, "--timeouts": False})
    qs = statements(text, streaming=args.stream)
    if len(qs) > 1:
        return _run_workload(args, qs, cli)
    q = qs[0]
    _table(args, q)
    preflight.check_statement_input(q, named_columns(q), path=args.input, fmt=_input_format(args),
                                    stream=args.stream, schema=args.schema)  # before the JVM starts
    if not args.quiet:
        print(f"starting Spark ({args.master})...", file=sys.stderr, flush=True)
    spark = local_session(args.master)
    cli._quiet_task_failures(spark)
    # a stream over a local directory follows it through the admission control (the backlog in the observed metrics)
    with prepare_live(args.input, _input_format(args), stream=args.stream, checkpoint=args.checkpoint) as live:
        # a stream's rows keep their arrival: each result is stamped with it (_arrival_ms, --latency-column)
        rows, rejected = read_validated(spark, live.read_from, _input_format(args), None, time_column(q),
                                        stream=args.stream, files_per_trigger=args.files_per_trigger,
                                        schema=args.schema, ts_unit=args.ts_unit, arrival_col=args.arrival_col,
                                        keep_arrival=args.stream)
        if args.stream:  # every valid row goes to the engine: valid = relevant (nothing "ignored" in the progress)
            rows = counted(counted(rows, "events_valid"), "events_relevant")
            rejected = counted(rejected, "dead_letters")
        result = apply_recognize(rows, q, ts_unit=args.ts_unit, watermark_delay=args.lateness if args.stream else None,
                                 late_rows=args.stream)
        if not args.stream:
            if args.output:
                result.write.mode("overwrite").json(args.output)
            else:
                cli._print_lines(json_lines(result))
            cli._report_rejected(rejected, args.output, args.dead_letters)
            return 0
        # the admission (live) stops before the temporary checkpoint goes
        with tempfile.TemporaryDirectory(prefix="sparkcep-run-") as tmp, live:
            out = args.output or os.path.join(tmp, "out")
            checkpoint = args.checkpoint or os.path.join(tmp, "checkpoint")
            fields = [f for f in result.schema.fields if f.name not in (KIND, REASON, RECORD, RESULT_ARRIVAL)]
            tagged = result if KIND in result.columns else result.select(
                "*", F.lit(RESULT).alias(KIND), F.lit(None).cast("string").alias(REASON),
                F.lit(None).cast("string").alias(RECORD))
            live.admit(None, checkpoint)  # before the query: its first micro-batch lists every file there
            cli.follow_stream(routed(tagged, rejected), out, checkpoint, args, [f.name for f in fields],
                              admission=live.admission)
            if not args.output and os.path.isdir(out):
                if args.latency_column:
                    fields.append(StructField(LATENCY_COL, LongType()))
                cli._print_lines(json_lines(spark.read.schema(StructType(fields)).json(out)))
        return 0


def _run_workload(args, qs: list[rc.Recognize], cli) -> int:
    """``run`` of several statements over one input: the groups sharing a pass (``sparkcep.sql_api``), each
    statement's result in ``OUTPUT/<name>/`` (stdout without --output: its rows with a ``statement`` key
    first), dead letters once, a stream's late rows per statement (``sql_api.workload_dirs``)."""
    import io
    import json
    import os
    import tempfile

    from pyspark.sql.types import StructType

    from sparkcep.compiler.codegen.recognize import time_column
    from sparkcep.live import prepare_live
    from sparkcep.spark.progress import StopSignals, follow
    from sparkcep.spark.results import json_lines
    from sparkcep.spark.session import local_session
    from sparkcep.spark.sinks import counted
    from sparkcep.spark.validate import read_validated
    from sparkcep.sql_api import (
        apply_workload,
        follow_workload,
        group_checkpoints,
        statement_names,
        stream_workload,
        workload_dirs,
    )

    names = statement_names(qs)
    _one_source(qs)
    for q in qs:
        _table(args, q)
    for q in qs:  # before the JVM starts
        preflight.check_statement_input(q, named_columns(q), path=args.input, fmt=_input_format(args),
                                        stream=args.stream, schema=args.schema)
    if not args.quiet:
        print(f"starting Spark ({args.master})...", file=sys.stderr, flush=True)
    spark = local_session(args.master)
    cli._quiet_task_failures(spark)
    with prepare_live(args.input, _input_format(args), stream=args.stream, checkpoint=args.checkpoint) as live:
        rows, rejected = read_validated(spark, live.read_from, _input_format(args), None, time_column(qs[0]),
                                        stream=args.stream, files_per_trigger=args.files_per_trigger,
                                        schema=args.schema, ts_unit=args.ts_unit, arrival_col=args.arrival_col,
                                        keep_arrival=args.stream)
        if not args.stream:
            frames = apply_workload({qs[0].source.lower(): rows}, qs, ts_unit=args.ts_unit)
            if args.output:
                for path, (_, frame) in zip(workload_dirs(args.output, names)[0], sorted(frames.items()), strict=True):
                    frame.write.mode("overwrite").json(path)
            else:
                for name, (_, frame) in zip(names, sorted(frames.items()), strict=True):
                    cli._print_lines(json.dumps({"statement": name, **json.loads(line)}) for line in json_lines(frame))
            cli._report_rejected(rejected, args.output, args.dead_letters)
            return 0
        rows, rejected = counted(counted(rows, "events_valid"), "events_relevant"), counted(rejected, "dead_letters")
        # the admission (live) stops before the temporary checkpoint goes
        with tempfile.TemporaryDirectory(prefix="sparkcep-run-") as tmp, live:
            out = args.output or os.path.join(tmp, "out")
            checkpoint = args.checkpoint or os.path.join(tmp, "checkpoint")
            progress = io.StringIO() if args.quiet else None
            # before the groups' queries; each (CHECKPOINT/g<k>) reads the staged files: with --once g1 starts
            # once g0 has drained them
            admission = live.admit(None, checkpoint, queries=group_checkpoints(qs))
            with StopSignals() as signals:  # --once: each group drains what is there, else all follow until stopped
                queries, schemas = stream_workload(
                    rows, rejected, qs, names, out, checkpoint, ts_unit=args.ts_unit, watermark_delay=args.lateness,
                    dead_letters=args.dead_letters, late_events=args.late_events, once=args.once,
                    wait=lambda query: follow(query, out=progress, signals=signals, source=admission or args.input),
                    latency=args.latency_column)
                if not args.once:
                    totals = follow_workload(spark, queries, qs, names, out, checkpoint, dead_letters=args.dead_letters,
                                             late_events=args.late_events, signals=signals, out=progress,
                                             source=admission or args.input)
                    if any(t.stopped for t in totals) and not args.quiet:
                        print("sparkcep: stopped between micro-batches, each committed", file=sys.stderr)
            if not args.output:
                for i, (name, path) in enumerate(zip(names, workload_dirs(out, names)[0], strict=True)):
                    if os.path.isdir(path):
                        result = spark.read.schema(StructType(schemas[i].fields)).json(path)
                        cli._print_lines(json.dumps({"statement": name, **json.loads(line)})
                                         for line in json_lines(result))
        return 0


COMMANDS = {"check": cmd_check, "explain": cmd_explain, "compile": cmd_compile, "run": cmd_run,
            "notebook": cmd_notebook}
