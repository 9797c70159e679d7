"""The limits of query text are messages, never tracebacks (issue 20; docs/language.md, Limits): nesting up to
the documented depth compiles, deeper is one positioned error naming the limit; huge and non-finite numbers,
non-UTF-8 input, a byte order mark, misspelt keywords and internal token names."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import sparkcep
from sparkcep.cli import main
from sparkcep.grammar.parser import _WORDS, _describe, _parser
from sparkcep.ir.errors import CEPError
from sparkcep.ir.limits import MAX_DEPTH, MAX_INT_DIGITS
from tests.test_check_contract import run_engine

EVENTS = [{"type": "A", "ts": 1, "x": 1, "id": 0}, {"type": "B", "ts": 2, "x": 1, "id": 0}]

DEEP = {
    "500 nested SEQ(": "PATTERN " + "SEQ(" * 500 + "A a, B b" + ")" * 500 + " WITHIN 10",
    "1,000 NOT": "PATTERN SEQ(A a, B b) WHERE " + "NOT " * 1000 + "a.x = 1 WITHIN 10",
    "1,000 +": "PATTERN SEQ(A a, B b) WHERE a.x = b.x" + " + 1" * 1000 + " WITHIN 10",
    "1,000 AND": "PATTERN SEQ(A a, B b) WHERE " + " AND ".join(["a.x < b.x"] * 1000) + " WITHIN 10",
    "1,000 parentheses": "PATTERN SEQ(A a, B b) WHERE " + "(" * 1000 + "a.x = b.x" + ")" * 1000 + " WITHIN 10",
}


@pytest.mark.parametrize("text", DEEP.values(), ids=DEEP.keys())
def test_deep_queries_compile_explain_and_run(text):
    assert MAX_DEPTH >= 1000
    q = sparkcep.compile(text)
    assert q.explain()
    assert run_engine(q, EVENTS) is not None  # the engines' expression compiler recurses too


def test_a_deep_query_through_the_cli(capsys):
    assert main(["check", "-e", DEEP["1,000 NOT"]]) == 0
    assert "ok" in capsys.readouterr().out


@pytest.mark.parametrize("text", [
    "PATTERN SEQ(A a, B b) WHERE " + "NOT " * (MAX_DEPTH + 5) + "a.x = 1 WITHIN 10",
    "PATTERN SEQ(A a, B b) WHERE a.x = 1" + " + 1" * (MAX_DEPTH + 5) + " WITHIN 10",
    "PATTERN " + "SEQ(" * (MAX_DEPTH + 5) + "A a" + ")" * (MAX_DEPTH + 5) + " WITHIN 10",
], ids=["NOT", "+", "SEQ"])
def test_deeper_than_the_limit_is_one_positioned_error(text, capsys):
    with pytest.raises(CEPError) as info:
        sparkcep.compile(text)
    assert f"{MAX_DEPTH:,} levels" in info.value.message and info.value.span is not None
    assert main(["check", "-e", text]) == 2
    err = capsys.readouterr().err
    assert "nested too deeply" in err and "Traceback" not in err and "RecursionError" not in err


def test_integer_literals_up_to_the_limit_and_a_message_beyond():
    sparkcep.compile(f"PATTERN SEQ(A a, B b) WHERE a.x < {'9' * 40} WITHIN 10")
    text = f"PATTERN SEQ(A a, B b) WHERE a.x = {'9' * (MAX_INT_DIGITS + 1)} WITHIN 10"
    with pytest.raises(CEPError, match=f"{MAX_INT_DIGITS + 1:,} digits: the limit is {MAX_INT_DIGITS:,}") as info:
        sparkcep.compile(text)
    assert (info.value.line, info.value.column) == (1, text.index("999") + 1)


@pytest.mark.parametrize("literal", ["1e999", "-1e999", "1.5E400", "9" * 400 + ".0"])
def test_non_finite_numbers_are_refused(literal):
    text = f"PATTERN SEQ(A a, B b) WHERE a.x < {literal} WITHIN 10"
    with pytest.raises(CEPError, match="not a finite double") as info:
        sparkcep.compile(text)
    assert info.value.span is not None


@pytest.mark.parametrize("where", ["a.x < {n}", "(a.x + b.x) > {n}", "a.x = -{n}"])
def test_an_integer_beyond_the_doubles_is_refused_at_the_literal(where):
    """An integer beyond 64 bits is a DOUBLE (docs/language.md): one beyond the finite doubles (309 digits and
    more, far under the 4,300-digit limit) is refused like 1e999, not an OverflowError in check or explain."""
    text = "PATTERN SEQ(A a, B b) WHERE " + where.format(n="9" * 309) + " WITHIN 10"
    with pytest.raises(CEPError, match="not a finite double") as info:
        sparkcep.compile(text)
    assert info.value.column == text.index("999") + 1
    sparkcep.compile(text.replace("9" * 309, "9" * 308)).explain()  # the largest such integers still compile


@pytest.mark.parametrize(("text", "big", "at"), [
    ("PATTERN SEQ(A a, B b) WITHIN {n} days", "9" * 305, "{n}"),
    ("PATTERN SEQ(A a, B b) WITHIN {n} days", "1e305", "{n}"),
    ("RETURN COUNT(*) PATTERN SEQ(A, B) WITHIN 1 ms SLIDE {n} h", "9" * 305, "{n}"),
    ("WITH SHEDDING LATENCY {n} days PATTERN SEQ(A a, B b) WITHIN 1 ms", "1e305", "WITH"),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B) DEFINE B AS B.x > 1 WITHIN INTERVAL '{n}' DAY)",
     "9" * 305, "WITHIN"),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B) DEFINE B AS B.x > 1 WITHIN {n})", "9" * 400,
     "WITHIN"),
])
def test_a_duration_too_long_to_hold_is_refused_at_the_duration(text, big, at, tmp_path, capsys):
    """A duration is carried as a double in ts units, nanoseconds at the finest: one longer than that is refused
    where it is written, not an OverflowError in check or explain nor a window of ``inf``."""
    ts = "TIMESTAMP" if "INTERVAL" in text else "BIGINT"
    schema = ["--schema", f"ts {ts}, x DOUBLE"] if text.startswith("SELECT") else []
    column = text.index(at) + 1
    text, fine = text.format(n=big), text.format(n="1e290" if "e" in big else "9" * 290)
    for argv in (["check", "-e", text], ["explain", *schema, "-e", text],
                 ["compile", "-e", text, "-o", str(tmp_path / "job.py")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"sparkcep: line 1, column {column}: the duration is too large"), err
        assert "Traceback" not in err
    assert main(["explain", *schema, "-e", fine]) == 0  # a long one that holds
    capsys.readouterr()


def test_the_largest_double_is_a_number_not_inf_in_sql():
    sql = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE a.x < 1e308 WITHIN 10").sql()
    assert "inf" not in sql.lower()


def test_a_byte_order_mark_is_accepted(tmp_path, capsys):
    text = "PATTERN SEQ(A a, B b) WHERE [id] WITHIN 10"
    sparkcep.compile("\ufeff" + text)
    path = tmp_path / "q.cep"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert main(["check", str(path)]) == 0
    assert main(["check", "-e", "\ufeff" + text]) == 0
    # positions stay where an editor shows them
    with pytest.raises(CEPError) as info:
        sparkcep.compile("\ufeffPATTERN SEQ(A a, B b) WHERE q.x > 1 WITHIN 10")
    assert info.value.column == 29


def test_a_query_file_that_is_not_utf8_is_one_message(tmp_path, capsys):
    path = tmp_path / "latin1.cep"
    path.write_bytes("PATTERN SEQ(A a, B b)\nWHERE a.s = 'caf\u00e9' WITHIN 10".encode("latin-1"))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not UTF-8: byte 0xe9 at offset 38 (line 2, column 17)" in err


def test_invalid_bytes_in_dash_e_are_one_message(capsys):
    text = os.fsdecode(b"PATTERN SEQ(A a, B b) WHERE a.s = '\xff' WITHIN 10")  # what argv gives Python
    assert main(["check", "-e", text]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the -e text is not UTF-8: byte 0xff at offset 35" in err


@pytest.mark.parametrize(("text", "word", "keyword"), [
    ("PATERN SEQ(A a, B b) WITHIN 1", "PATERN", "PATTERN"),
    ("PATTERN SEQ(A a, B b) WHER a.x > 1 WITHIN 1", "WHER", "WHERE"),
    ("PATTERN SEQ(A a, B b) WITHN 1", "WITHN", "WITHIN"),
    ("RETRUN a.x PATTERN SEQ(A a, B b) WITHIN 1", "RETRUN", "RETURN"),
])
def test_a_misspelt_keyword_is_named(text, word, keyword):
    with pytest.raises(CEPError) as info:
        sparkcep.compile(text)
    assert info.value.message == f"unknown keyword {word}, did you mean {keyword}?"
    assert info.value.column == text.index(word) + 1


def test_every_terminal_has_user_facing_words():
    names = {t.name for t in _parser().terminals}
    assert names - set(_WORDS) == set()
    described = _describe(names | {"$END"})
    assert not re.search(r"\b_[A-Z]|[A-Z]+_[A-Z]", described), described


@pytest.mark.parametrize("text", ["WITH PATTERN A a WITHIN 1", "WITH SHEDDING PATTERN A a WITHIN 1",
                                  "WITH RATES PATTERN A a WITHIN 1", "WITH SHEDDING LATENCY 1 PATTERN A WITHIN 1"])
def test_messages_never_show_internal_token_names(text):
    with pytest.raises(CEPError) as info:
        sparkcep.compile(text)
    assert not re.search(r"\b_[A-Z]", info.value.message), info.value.message


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.strip() == f"sparkcep {sparkcep.__version__}"


def test_a_closed_pipe_is_not_a_traceback():
    """``sparkcep explain ... | head -3``: the reader goes away; no BrokenPipeError traceback."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "sparkcep.cli", "explain", "-e",
                               "PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 10"],
                              stdout=write, stderr=subprocess.PIPE, timeout=120, check=False)
    finally:
        os.close(write)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr.decode()


def test_deep_runs_on_its_own_thread_once_and_passes_errors_through():
    import threading

    from sparkcep.ir.limits import deep

    assert deep(lambda: deep(lambda: threading.current_thread().name)) == "sparkcep-deep"
    with pytest.raises(ZeroDivisionError):
        deep(lambda: 1 / 0)
    assert sys.getrecursionlimit() >= MAX_DEPTH * 10


@pytest.mark.parametrize("api", ["compile", "compile_workload", "compile_shared_workload"])
@pytest.mark.parametrize("text", [None, 5, b"PATTERN SEQ(A a, B b) WITHIN 10", ["PATTERN SEQ(A a, B b) WITHIN 10"]])
def test_query_text_that_is_not_a_string_is_one_message(api, text):
    """Was an AttributeError ('NoneType' object has no attribute 'startswith') or a TypeError (bytes)."""
    with pytest.raises(CEPError, match=f"the query text must be a string, got {type(text).__name__}"):
        getattr(sparkcep, api)(text)


@pytest.mark.parametrize("text", [None, b"SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A))"])
def test_statement_text_that_is_not_a_string_is_one_message(text):
    from sparkcep.grammar.recognize import parse_recognize
    from sparkcep.sql_api import split_statements

    for parse in (parse_recognize, split_statements):
        with pytest.raises(CEPError, match=f"the query text must be a string, got {type(text).__name__}"):
            parse(text)
