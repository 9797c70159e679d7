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
