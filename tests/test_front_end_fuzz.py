"""Malformed query text never gets a traceback (the bar's "bad input gets a clear error"): the valid query texts of
the repository (the golden plans' pattern queries and MATCH_RECOGNIZE statements, examples/, the docs' examples)
mutated token by token — a token dropped, duplicated or swapped, the text cut anywhere, a keyword, punctuation, a
huge or negative number, unicode, an unmatched quote or parenthesis or a comment opener inserted — go through
both front ends.

* the Python API (``sparkcep.compile_workload``; a statement's parse and check, ``cli_sql.statements``) accepts
  the text or raises :class:`CEPError` positioned in it (line and column inside the text);
* what it accepts, ``sparkcep explain`` (a statement: with and without ``--schema``) explains or refuses with one
  message, exit 2;
* any other exception (``AttributeError``, ``OverflowError``, a Lark or sqlglot exception, an ``assert``) fails.

A long local run (``FUZZ_EXAMPLES=5000 pytest tests/test_front_end_fuzz.py``) is how the defects pinned below
were found; CI runs a fixed, small number of examples.
"""

from __future__ import annotations

import io
import os
import re
from contextlib import redirect_stderr, redirect_stdout
from functools import cache
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep import cli_sql
from sparkcep.cli import main
from sparkcep.ir.errors import CEPError
from tests.test_recognize_front import FLINK_AGGREGATES, FLINK_VSHAPE, FLINK_WITHIN, TRINO_ORDERS

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))

#: a token: blanks, a word (type names may hold '-'), a number, a quoted string or name, one other character
TOKEN = re.compile(r"\s+|[A-Za-z_][\w-]*|\d+(?:\.\d+)?|'(?:[^']|'')*'|\"[^\"]*\"|`[^`]*`|.", re.S)
INSERTS = [
    # keywords of both front ends
    "SELECT", "FROM", "MATCH_RECOGNIZE (", "PARTITION BY", "ORDER BY", "MEASURES", "DEFINE", "PATTERN", "SUBSET",
    "AFTER MATCH SKIP TO LAST", "PAST LAST ROW", "ONE ROW PER MATCH", "ALL ROWS PER MATCH WITH UNMATCHED ROWS",
    "WITHIN", "INTERVAL '1' SECOND", "PREV(", "NEXT(", "FIRST(", "LAST(", "CLASSIFIER()", "MATCH_NUMBER()",
    "RUNNING", "FINAL", "COUNT(*)", "PERMUTE(", "{-", "-}", "{2,1}", "^", "$", "|", "*?", "UNION", "CASE WHEN",
    "CAST(", "IS NULL", "AND", "OR", "NOT", "SEQ(", "ANY(", "WHERE", "GROUP BY", "SLIDE", "RETURN", "EVENT",
    "USING", "skip_till_next_match", "HAVING", "WITH RATES (A = 1)", "WITH SHEDDING LATENCY 1 s", "NEXT",
    "[]", "[i-1]", "b.len", "[attr = 'x']", "v[v.len].x",
    # punctuation, quotes, comments
    "(", ")", "[", "]", "{", "}", ",", ";", ":", ".", "+", "*", "?", "-", "!", "~", "¬", "≠", "=", "<>", "'", '"',
    "`", "'it''s'", "--", "/*", "*/", "\\", "\n", "\t",
    # numbers
    "9" * 400, "9" * 5000, "-1", "0", "1e999", "1e308", "2147483648", "9223372036854775808", "{99999999999}",
    "PREV(B.x, 99999999999999999999)", "LAST(B.x, -1)", "v[99999999999999999999].x",
    # unicode and control characters
    "é", "名前", "\ufeff", "\u202e", "\x00", "\udcff",
]
NUMBERS = ["0", "-1", "9" * 30, "9" * 309, "1e999", "1e305", "2147483648", "00", "1.5e308", "-0", "0.0000001"]


def _blocks(path: Path) -> list[str]:
    return re.findall(r"```[a-z]*\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def _ok(text: str) -> bool:
    try:
        _front(text)
    except CEPError:
        return False
    return True


@cache
def pattern_seeds() -> tuple[str, ...]:
    """The golden plans' queries (the papers' queries), examples/queries.cep and the docs' pattern examples that
    compile; a workload file whole too."""
    texts = []
    for path in (ROOT / "golden_plans" / "queries.cep", ROOT / "examples" / "queries.cep"):
        text = path.read_text(encoding="utf-8")
        body = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
        texts += [text, *(q.strip() for q in body.split(";") if q.strip())]
    for path in (ROOT / "README.md", *sorted(ROOT.glob("docs/*.md"))):
        texts += [b for b in _blocks(path) if re.match(r"\s*(\w+:\s*)?(PATTERN|EVENT|RETURN)\b", b)]
    return tuple(t for t in dict.fromkeys(texts) if _ok(t))


@cache
def sql_seeds() -> tuple[str, ...]:
    """The MATCH_RECOGNIZE statements of the golden plans, examples/query.sql, the tests' published examples
    and the docs that parse and check."""
    texts = [FLINK_AGGREGATES, FLINK_VSHAPE, FLINK_WITHIN, TRINO_ORDERS, (ROOT / "examples" / "query.sql").read_text()]
    texts += [p.read_text(encoding="utf-8") for p in sorted(ROOT.glob("golden_plans/recognize_*/query.sql"))]
    for path in (ROOT / "README.md", *sorted(ROOT.glob("docs/*.md"))):
        texts += [b for b in _blocks(path) if "MATCH_RECOGNIZE" in b and cli_sql.is_sql(b)]
    return tuple(t for t in dict.fromkeys(texts) if _ok(t))


def _front(text: str) -> list:
    """The Python API's parse and check of ``text``: a statement's (or several's), else the pattern language's."""
    if cli_sql.is_sql(text):
        return cli_sql.statements(text)
    return sparkcep.compile_workload(text)


@st.composite
def mutated(draw, seeds) -> str:
    tokens = TOKEN.findall(draw(st.sampled_from(seeds())))
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(tokens)))
        kind = draw(st.sampled_from(["drop", "duplicate", "swap", "truncate", "insert", "number"]))
        if kind == "drop":
            del tokens[i:i + draw(st.integers(1, 3))]
        elif kind == "duplicate" and i < len(tokens):
            tokens.insert(i, tokens[i])
        elif kind == "swap" and tokens:
            j = draw(st.integers(0, len(tokens) - 1))
            tokens[min(i, len(tokens) - 1)], tokens[j] = tokens[j], tokens[min(i, len(tokens) - 1)]
        elif kind == "truncate":
            text = "".join(tokens)
            tokens = [text[:draw(st.integers(0, len(text)))]]
        elif kind == "insert":
            tokens.insert(i, draw(st.sampled_from(["", " "])) + draw(st.sampled_from(INSERTS)) + " ")
        elif kind == "number":
            numbers = [k for k, t in enumerate(tokens) if re.fullmatch(r"\d+(\.\d+)?", t)]
            if numbers:
                tokens[draw(st.sampled_from(numbers))] = draw(st.sampled_from(NUMBERS))
    return "".join(tokens)


def _schema(text: str) -> str:
    """A DDL naming the words of ``text`` as columns of assorted types (a statement's ``--schema``)."""
    words = sorted(set(re.findall(r"\b[A-Za-z_]\w*\b", text)))[:30]
    types = ["DOUBLE", "STRING", "BIGINT", "TIMESTAMP", "INT", "BOOLEAN", "DATE"]
    return ", ".join(f"`{w}` {types[k % len(types)]}" for k, w in enumerate(words))


def _explain(argv: list[str]) -> int:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main(argv)
    assert status in (0, 2), (argv, status)
    text = err.getvalue()
    assert status == 0 or (text.startswith("sparkcep: ") and text.count("sparkcep: ") == 1), text
    return status


def check_text(text: str) -> None:
    """The property: a positioned CEPError or an accepted text that explain explains or refuses in one message."""
    try:
        _front(text)
    except CEPError as err:
        assert err.span is not None, f"no position: {err.message!r}"
        lines = text.splitlines() or [""]
        assert 1 <= err.line <= len(lines) + 1 and 1 <= err.column, (err.line, err.column)
        assert err.line > len(lines) or err.column <= len(lines[err.line - 1]) + 2, (err.line, err.column)
        err.render()
        return
    _explain(["explain", "--text=" + text])
    if cli_sql.is_sql(text) and _schema(text):
        _explain(["explain", "--schema", _schema(text), "--text=" + text])


FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(mutated(pattern_seeds))
@example(f"PATTERN SEQ(A a, B b) WHERE (a.x + b.x) > {'9' * 309} WITHIN 10")  # OverflowError in check
@example(f"PATTERN SEQ(A a, B b) WITHIN {'9' * 305} days")  # OverflowError in explain
def test_mutated_pattern_queries(text):
    check_text(text)


@FUZZ
@given(mutated(sql_seeds))
@example(f"SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B) DEFINE B AS B.x > 1 "
         f"WITHIN INTERVAL '{'9' * 305}' DAY)")  # OverflowError in explain
@example("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS A.x > 1)WHERE x > 1")  # ParseError
def test_mutated_match_recognize_statements(text):
    check_text(text)


def test_the_seeds_are_the_repositorys_queries():
    assert len(pattern_seeds()) >= 20 and len(sql_seeds()) >= 10
