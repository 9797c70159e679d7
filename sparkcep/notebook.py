"""A Jupyter notebook that runs one compiled query: what ``sparkcep notebook FILE -o job.ipynb`` writes.

The cells are the ones a person would write: a title with the query and its plan as markdown, the set-up
(a SparkSession), the source (read the events), the job (compile the query, apply it to the events) and
the results (show them, count them).  The notebook reads its input with the same reader as ``sparkcep run``
(only the columns the query reads, each as it needs it; bad records as dead letters) and runs the same plan
as the generated job (``sparkcep compile``).

    >>> import sparkcep
    >>> nb = notebook(sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 10"), input_path="events/")
    >>> [c.cell_type for c in nb.cells]
    ['markdown', 'markdown', 'code', 'markdown', 'code', 'markdown', 'code', 'markdown', 'code']
"""

from __future__ import annotations

import re

from sparkcep.api import CompiledQuery, input_columns
from sparkcep.compiler.codegen.quote import py_literal
from sparkcep.ir.errors import CEPError
from sparkcep.ir.printer import format_query


def _nbformat():
    try:
        import nbformat
    except ImportError:  # an optional extra
        raise CEPError("writing notebooks needs nbformat: pip install 'sparkcep[notebook]'") from None
    return nbformat


def _options(q: CompiledQuery) -> str:
    """The compile options that differ from the defaults, as Python keyword arguments."""
    opts = [("type_col", q.type_col, "type"), ("ts_col", q.ts_col, "ts"), ("ts_unit", q.ts_unit, None),
            ("lateness", q.lateness, 0)]
    return "".join(f", {k}={py_literal(v)}" for k, v, default in opts if v != default)


def _fence(text: str) -> str:
    """A Markdown code fence longer than any run of backticks in ``text`` (so the text cannot close it)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _code_span(text: str) -> str:
    """``text`` as Markdown inline code, whatever backticks it holds."""
    ticks = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    return f"{ticks} {text} {ticks}" if text.startswith("`") or text.endswith("`") else f"{ticks}{text}{ticks}"


def notebook(q: CompiledQuery, input_path: str | None = None, fmt: str = "json", master: str = "local[*]"):
    """The notebook (an ``nbformat`` v4 node) that runs ``q`` on the events at ``input_path``."""
    nbf = _nbformat()
    title = q.name or "query"
    columns, needs = input_columns([q])
    text = format_query(q.query)
    explain = q.explain()
    cells = [
        nbf.v4.new_markdown_cell(
            f"# sparkcep: {title}\n\n"
            "This notebook finds the matches of a complex-event query in a file of events, with Spark. "
            "It was written by `sparkcep notebook`; `sparkcep compile` writes the same job as a standalone "
            "PySpark script (`spark-submit job.py ...`).\n\n"
            f"The query ({q.resolved().mode} query):\n\n{_fence(text)}\n{text}\n{_fence(text)}"),
        nbf.v4.new_markdown_cell(
            "How sparkcep runs it: a Spark SQL filter keeps the events that can take part in a match, a "
            "shuffle by the partition key (the equivalence tests) brings each key's events together, and a "
            "stateful pandas UDF runs the sequence (or trend) engine per key:\n\n"
            f"{_fence(explain)}\n{explain}\n{_fence(explain)}"),
        _session_cell(nbf, master),
        nbf.v4.new_markdown_cell(f"## The events\n\nColumns {_code_span(q.type_col)} (event type), "
                                 f"{_code_span(q.ts_col)} (event time) and the attributes the query reads, each "
                                 "read as the query needs it: a record that is malformed, lacks a type or ts or "
                                 "has a value of the wrong type is a dead letter (`rejected`, with the reason), "
                                 "and attributes the query does not read are never parsed."),
        nbf.v4.new_code_cell(
            f"INPUT = {py_literal(input_path or 'events/')}  # a file or a directory of events\n"
            "# the columns the query reads besides type and ts (None: every one) and the type it needs of each\n"
            f"COLUMNS = {py_literal(columns)}\n"
            f"NEEDS = {py_literal(dict(sorted(needs.items())))}\n"
            f"events, rejected = read_validated(spark, INPUT, {py_literal(fmt)}, {py_literal(q.type_col)}, "
            f"{py_literal(q.ts_col)}, attributes=COLUMNS, needs=NEEDS)\n"
            "events.printSchema()\n"
            "events.show(5, truncate=False)\n"
            "rejected.show(5, truncate=False)  # dead letters: reason, record"),
        nbf.v4.new_markdown_cell(
            "## The job\n\n`sparkcep.compile` parses and checks the query (an error names the line and column); "
            "`apply` builds the Spark job on the events. The same code runs on a streaming DataFrame "
            "(`read_validated(..., stream=True)`), writing with `result.writeStream` and a checkpoint."),
        nbf.v4.new_code_cell(
            f"QUERY = {py_literal(chr(10) + text + chr(10))}\n\n"
            f"q = sparkcep.compile(QUERY{_options(q)})\n"
            "result = q.apply(events)\n"
            "result.printSchema()"),
        nbf.v4.new_markdown_cell("## Results"),
        nbf.v4.new_code_cell("result.show(20, truncate=False)\nresult.count()"),
    ]
    nb = nbf.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def write_notebook(q: CompiledQuery, path: str, **options) -> None:
    """Write :func:`notebook` to ``path`` (validated against the nbformat schema)."""
    nbf = _nbformat()
    nb = notebook(q, **options)
    nbf.validate(nb)
    nbf.write(nb, path)


def recognize_notebook(q, *, explain: str, input_path: str | None = None, fmt: str = "json",
                       master: str = "local[*]", ts_unit: str | None = None, names: list[str] | None = None):
    """The notebook that runs the ``MATCH_RECOGNIZE`` statement ``q`` (``ir.recognize.Recognize``) on the rows
    at ``input_path``, read as the table its FROM names (``sparkcep.sql`` finds it in the session's catalog).
    ``q`` may be a list of statements over one table, called ``names`` (a workload: ``sparkcep.sql_workload``
    runs them, sharing a pass where it can)."""
    from sparkcep.compiler.codegen.recognize import time_column

    nbf = _nbformat()
    qs = list(q) if isinstance(q, (list, tuple)) else [q]
    q = qs[0]
    texts = [x.text.strip() for x in qs]
    text = "\n\n".join(texts if len(qs) == 1 else [f"-- {n}\n{t}" for n, t in zip(names, texts, strict=True)])
    one = len(qs) == 1
    what = (f"MATCH_RECOGNIZE over {_code_span(q.source)}" if one
            else f"{len(qs)} MATCH_RECOGNIZE statements over {_code_span(q.source)}")
    runs = ("a SQL:2016 row pattern recognition statement" if one
            else "SQL:2016 row pattern recognition statements")
    if one:
        job = ("## The job\n\n`sparkcep.sql` parses and checks the statement (an error names the line and column) "
               "and runs it on the table of its FROM clause, batch or streaming as that table is.")
        code = (f"QUERY = {py_literal(chr(10) + text + chr(10))}\n\n"
                f"result = sparkcep.sql(QUERY, spark{f', ts_unit={py_literal(ts_unit)}' if ts_unit else ''})\n"
                "result.printSchema()")
        show = "result.show(20, truncate=False)\nresult.count()"
    else:
        job = ("## The job\n\n`sparkcep.sql_workload` parses and checks each statement (an error names the line "
               "and column) and runs them on the table of their FROM clause, those with the same PARTITION BY and "
               "ORDER BY in one pass; `result[i]` is statement i's DataFrame, `result.plan` says who shares.")
        statements = {n: t + "\n" for n, t in zip(names, texts, strict=True)}
        code = (f"STATEMENTS = {py_literal(statements)}\n\n"
                "result = sparkcep.sql_workload(list(STATEMENTS.values()), spark"
                f"{f', ts_unit={py_literal(ts_unit)}' if ts_unit else ''})\n"
                'print("\\n".join(result.plan))')
        show = ("for i, name in enumerate(STATEMENTS):\n"
                "    print(name)\n"
                "    result[i].show(20, truncate=False)")
    cells = [
        nbf.v4.new_markdown_cell(
            f"# sparkcep: {what}\n\n"
            f"This notebook runs {runs} "
            "on a file of rows, with Spark. It was written by `sparkcep notebook`; `sparkcep compile` writes the "
            f"same job as a standalone PySpark script.\n\nThe statement{'' if one else 's'}:\n\n"
            f"{_fence(text)}sql\n{text}\n{_fence(text)}"),
        nbf.v4.new_markdown_cell(
            "How sparkcep runs it: Spark computes the per-row expressions and shuffles the rows by the PARTITION "
            "BY key; the row pattern engine runs each partition in ORDER BY order (batch: one pass per partition; "
            "streaming: state per key), then Spark runs the outer query over the matches:\n\n"
            f"{_fence(explain)}\n{explain}\n{_fence(explain)}"),
        _session_cell(nbf, master),
        nbf.v4.new_markdown_cell(
            f"## The table {_code_span(q.source)}\n\nEvery column, parsed as text and cast to the type inferred "
            f"from the files; {_code_span(time_column(q))} (the first ORDER BY column) is the time. A record that "
            "is malformed, lacks the time or has a value of the wrong type is a dead letter (`rejected`, with "
            "the reason)."),
        nbf.v4.new_code_cell(
            f"INPUT = {py_literal(input_path or 'events/')}  # a file or a directory of rows\n"
            f"rows, rejected = read_validated(spark, INPUT, {py_literal(fmt)}, None, {py_literal(time_column(q))}, "
            f"ts_unit={py_literal(ts_unit)})\n"
            f"rows.createOrReplaceTempView({py_literal(q.source)})\n"
            "rows.printSchema()\n"
            "rows.show(5, truncate=False)\n"
            "rejected.show(5, truncate=False)  # dead letters: reason, record"),
        nbf.v4.new_markdown_cell(job),
        nbf.v4.new_code_cell(code),
        nbf.v4.new_markdown_cell("## Results"),
        nbf.v4.new_code_cell(show),
    ]
    nb = nbf.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def write_recognize_notebook(q, path: str, **options) -> None:
    """Write :func:`recognize_notebook` to ``path`` (validated against the nbformat schema)."""
    nbf = _nbformat()
    nb = recognize_notebook(q, **options)
    nbf.validate(nb)
    nbf.write(nb, path)


def _session_cell(nbf, master: str):
    """The code cell that imports sparkcep and takes the notebook's SparkSession (a pattern query's notebook
    and a MATCH_RECOGNIZE statement's)."""
    return nbf.v4.new_code_cell(
        "import sparkcep\n"
        "from sparkcep.spark.session import local_session\n"
        "from sparkcep.spark.validate import read_validated\n\n"
        "# the notebook's SparkSession: the active one if there is one, else a local one (UTC, 4 shuffle "
        "partitions)\n"
        f"spark = local_session({py_literal(master)})")
