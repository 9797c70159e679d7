"""The ``sparkcep`` command: check · explain · compile · run · demo.

Errors in queries or options print one message (line, column, caret) on stderr and exit with status 2;
never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from sparkcep.api import CompiledQuery, compile_workload
from sparkcep.compiler.ast import UNITS_MS
from sparkcep.compiler.errors import CEPError
from sparkcep.io import FORMATS, read_events
from sparkcep.results import json_lines


def _add_query_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", help="a query or workload file (queries separated by ';'), or - for stdin")
    p.add_argument("-e", "--text", help="the query text itself, instead of a file")
    p.add_argument("--query", help="the name of the query to use in a workload file")


def _add_input_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--type-col", default="type", help="event type column (default: type)")
    p.add_argument("--ts-col", default="ts", help="timestamp column (default: ts)")
    p.add_argument("--ts-unit", choices=sorted(UNITS_MS), help="unit of a numeric ts column")
    p.add_argument("--lateness", type=float, default=0,
                   help="streaming: allowed lateness in ts units (ms for timestamps); later events are dropped")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sparkcep", description="Complex event processing on Spark.")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("check", help="parse and check queries; exit 2 on the first error")
    _add_query_args(c)

    e = sub.add_parser("explain", help="print the logical plan of each query")
    _add_query_args(e)
    e.add_argument("--sql", action="store_true", help="also print the Spark SQL filter")

    j = sub.add_parser("compile", help="write a standalone PySpark job")
    _add_query_args(j)
    j.add_argument("--ts", choices=["timestamp", "numeric"],
                   help="the kind of the ts column the job will read (default: numeric with --ts-unit, else "
                        "timestamp if the query's durations have units, else numeric)")
    j.add_argument("--ts-unit", choices=sorted(UNITS_MS), help="unit of a numeric ts column")
    j.add_argument("--ts-col", default="ts")
    j.add_argument("--type-col", default="type")
    j.add_argument("-o", "--output", required=True, help="the job file to write")

    r = sub.add_parser("run", help="run a query on a file or directory of events with local Spark")
    _add_query_args(r)
    _add_input_args(r)
    r.add_argument("--input", required=True, help="events: a file or a directory of files")
    r.add_argument("--format", choices=FORMATS, help="input format (default: from the extension, else json)")
    r.add_argument("--output", help="write results here (a Spark JSON directory) instead of stdout")
    r.add_argument("--stream", action="store_true", help="run as a Structured Streaming job over the files")
    r.add_argument("--checkpoint", help="streaming checkpoint directory (default: a temporary one)")
    r.add_argument("--files-per-trigger", type=int, help="streaming: files per micro-batch (default: all)")
    r.add_argument("--schema", help="input schema as DDL, e.g. 'type STRING, ts TIMESTAMP, id BIGINT, x DOUBLE' "
                                    "(default: inferred from the files there now)")
    r.add_argument("--master", default="local[*]")

    d = sub.add_parser("demo", help="generate events and run the example query, batch and streaming")
    d.add_argument("--dir", default="demo_out", help="where to write the events and results")
    d.add_argument("--patients", type=int, default=40)
    d.add_argument("--seed", type=int, default=7)
    return p


def _read_text(args) -> str:
    if args.text is not None:
        return args.text
    if args.file is None:
        raise CEPError("give a query file (or - for stdin), or the query text with -e")
    if args.file == "-":
        return sys.stdin.read()
    path = Path(args.file)
    if not path.is_file():
        raise CEPError(f"no such query file: {args.file}")
    return path.read_text()


def _queries(args, **options) -> list[CompiledQuery]:
    queries = compile_workload(_read_text(args), **options)
    if getattr(args, "query", None):
        chosen = [q for q in queries if q.name == args.query]
        if not chosen:
            names = ", ".join(q.name or "(unnamed)" for q in queries)
            raise CEPError(f"no query named {args.query!r} in the file (queries: {names})")
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


def cmd_explain(args) -> int:
    blocks = []
    for q in _queries(args):
        text = q.explain()
        if args.sql:
            text += "\n-- Spark SQL filter\n" + q.sql()
        blocks.append(text)
    print("\n\n".join(blocks))
    return 0


def cmd_compile(args) -> int:
    q = _one(args, ts_kind=args.ts, ts_unit=args.ts_unit, ts_col=args.ts_col, type_col=args.type_col)
    Path(args.output).write_text(q.job_source())
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


def cmd_run(args) -> int:
    from sparkcep.session import local_session

    q = _one(args, type_col=args.type_col, ts_col=args.ts_col, ts_unit=args.ts_unit, lateness=args.lateness)
    fmt = _input_format(args)
    spark = local_session(args.master)
    df = read_events(spark, args.input, fmt, args.ts_col, stream=args.stream,
                     files_per_trigger=args.files_per_trigger, schema=args.schema)
    result = q.apply(df)
    if not args.stream:
        if args.output:
            result.write.mode("overwrite").json(args.output)
        else:
            _print_lines(json_lines(result))
        return 0
    with tempfile.TemporaryDirectory(prefix="sparkcep-run-") as tmp:
        out = args.output or os.path.join(tmp, "out")
        checkpoint = args.checkpoint or os.path.join(tmp, "checkpoint")
        query = (result.writeStream.format("json").option("path", out)
                 .option("checkpointLocation", checkpoint).outputMode("append")
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        if not args.output:
            _print_lines(json_lines(spark.read.schema(result.schema).json(out)))
    return 0


def cmd_demo(args) -> int:
    from sparkcep.demo import run_demo

    return run_demo(args.dir, patients=args.patients, seed=args.seed)


COMMANDS = {"check": cmd_check, "explain": cmd_explain, "compile": cmd_compile, "run": cmd_run, "demo": cmd_demo}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except CEPError as err:
        print(f"sparkcep: {err.render()}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
