"""The outer query of a MATCH_RECOGNIZE statement as Spark reads the user's text (``sparkcep.ir.outer``): kept as
written, its view renamed in the text; where sqlglot writes it (explain, the late side channel, the results'
arrival), a bare ``current_timestamp`` stays a column-first name, ``current_date()`` a call, ``'it''s'`` it's.
On Spark, against the same outer query over a plain table:
``test_recognize_spark.test_batch_statements_equal_the_reference``."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark

from sparkcep.compiler.recognize import read_columns
from sparkcep.grammar.recognize import parse_recognize
from sparkcep.ir import recognize as rx
from sparkcep.ir.outer import one_line, outer_sql, parse_outer, renamed_view

CLAUSE = "t MATCH_RECOGNIZE (ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A))"
#: the words Spark 4.3 reads without parentheses as a column first, then the function (checked on Spark)
COLUMN_FIRST = ("current_timestamp", "current_date", "current_user", "session_user", "user", "current_time",
                "localtime")


@pytest.mark.parametrize("word", [*COLUMN_FIRST, "CURRENT_TIMESTAMP", "Current_User"])
def test_a_bare_word_stays_a_name_in_every_clause(word):
    outer = (f"SELECT {word}, m.{word} AS q, coalesce({word}, 0) AS c FROM {{}} AS m "
             f"WHERE {word} > 1 GROUP BY {word}, m.{word} ORDER BY {word}")
    q = parse_recognize(outer.format(CLAUSE))
    assert q.outer_sql == outer.format("__sparkcep_matches")  # as written
    name = word if word.lower() in ("user", "current_time", "localtime") else f"`{word}`"  # sqlglot's columns
    assert one_line(q.outer_sql) == (f"SELECT {name}, m.{word} AS q, COALESCE({name}, 0) AS c FROM "
                                     f"__sparkcep_matches AS m WHERE {name} > 1 GROUP BY {name}, m.{word} "
                                     f"ORDER BY {name}")


@pytest.mark.parametrize(("call", "written"), [
    ("current_timestamp()", "CURRENT_TIMESTAMP()"), ("current_date()", "CURRENT_DATE()"),
    ("current_user()", "CURRENT_USER()"), ("session_user()", "SESSION_USER()"), ("user()", "USER()"),
    ("current_catalog()", "CURRENT_CATALOG()"), ("localtimestamp()", "LOCALTIMESTAMP()"),
    ("localtime()", "LOCALTIME()"), ("current_time()", "CURRENT_TIME()"),
])
def test_a_call_keeps_its_parentheses(call, written):
    q = parse_recognize(f"SELECT {call} AS f FROM {CLAUSE} WHERE {call} IS NULL")
    assert q.outer_sql == f"SELECT {call} AS f FROM __sparkcep_matches WHERE {call} IS NULL"
    assert one_line(q.outer_sql) == f"SELECT {written} AS f FROM __sparkcep_matches WHERE {written} IS NULL"


def test_every_call_without_arguments_is_written_with_parentheses():
    """Each function sqlglot's Spark dialect knows, called with ``()``: written back with them (a bare name is a
    column to Spark), and read back as a call again (so every rewrite keeps it)."""
    checked = 0
    for name in sorted({*Spark.Parser.FUNCTIONS, *(t.name for t in Spark.Parser.NO_PAREN_FUNCTIONS)}):
        if not name.isidentifier():
            continue
        try:
            tree = parse_outer(f"SELECT {name}() FROM m")
        except (sqlglot.errors.SqlglotError, ValueError, TypeError):
            continue  # needs arguments
        (e,) = tree.expressions
        if not isinstance(e, exp.Func) or any(e.args.values()):
            continue
        text = outer_sql(tree)
        assert text.startswith("SELECT ") and text.endswith(") FROM m"), (name, text)
        assert isinstance(parse_outer(text).expressions[0], exp.Func), name
        checked += 1
    assert checked >= 20


@pytest.mark.parametrize("old", ["SELECT CURRENT_DATE, SESSION_USER FROM v", "SELECT `current_date` FROM v"])
def test_text_of_the_old_writing_keeps_its_meaning(old):
    """An ``outer_sql`` written before this dialect (a compiled job's) holds bare ``CURRENT_DATE``: Spark took it
    for the column first, and so does it now."""
    assert all(isinstance(e, exp.Column) for e in parse_outer(old).expressions)


def test_the_rewrites_on_spark_keep_names_and_calls():
    pytest.importorskip("pyspark")
    from sparkcep.spark import recognize as SR

    q = parse_recognize(f"SELECT current_timestamp, current_date() AS d FROM {CLAUSE} AS m WHERE current_user > 1")
    renamed = SR._renamed(q.outer_sql, q.result_view, "v_1")
    assert renamed == "SELECT current_timestamp, current_date() AS d FROM v_1 AS m WHERE current_user > 1"
    passing = SR._passing_late_rows(renamed)
    assert passing.startswith("SELECT `current_timestamp`, CURRENT_DATE() AS d, `_kind`")
    assert passing.endswith("WHERE `_kind` = 'late' OR (`current_user` > 1)")
    carried = SR._carrying_arrival(renamed)
    assert carried.startswith("SELECT `current_timestamp`, CURRENT_DATE() AS d, ") and "`current_user` > 1" in carried
    grouped = SR._carrying_arrival("SELECT current_user, COUNT(*) FROM v GROUP BY current_user")
    assert grouped.startswith("SELECT `current_user`, COUNT(*), MAX(") and grouped.endswith("GROUP BY `current_user`")


def test_a_raw_string_next_to_another_is_one_string():
    """Spark joins adjacent string literals, raw ones too (``r'a\\n' 'b'`` is ``a\\nb``); sqlglot joined plain ones
    only (a raw one followed by another was a parse error), in the outer query and in DEFINE alike."""
    assert outer_sql(parse_outer("SELECT r'a\\n' 'b' AS x, 'c' r'd' 'e' FROM m")) == (
        "SELECT CONCAT('a\\\\n', 'b') AS x, CONCAT('c', 'd', 'e') FROM m")
    q = parse_recognize("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS s = r'x\\y' 'z')")
    assert q.defines[0][1] == rx.RowExpr("s = CONCAT('x\\\\y', 'z')", "__rx0", None)


def test_pruning_keeps_a_bare_name_and_drops_a_call():
    names = ("k", "current_timestamp", "current_date", "n")
    bare = parse_recognize(f"SELECT current_timestamp, current_date() AS d, n FROM {CLAUSE}").outer_sql
    assert read_columns(bare, names) == ("current_timestamp", "n")
    assert read_columns("SELECT CURRENT_TIMESTAMP() AS t, n FROM v", names) == ("n",)


def test_a_doubled_quote_is_the_quote_in_the_outer_query_and_the_clause():
    """Spark 4 reads ``'it''s'`` as it's (sqlglot's ``spark`` dialect read two strings: CONCAT gives its); a raw
    string has no escapes."""
    q = parse_recognize("""SELECT 'it''s' AS v, s FROM t MATCH_RECOGNIZE (ORDER BY ts MEASURES LAST(A.s) AS s
                           PATTERN (A B) DEFINE A AS A.s = 'it''s', B AS upper(B.s) = "A""B" AND B.s <> 'x''')
                           WHERE s <> '''' AND s <> r'a\\'""")
    assert one_line(q.outer_sql) == r"""SELECT 'it\'s' AS v, s FROM __sparkcep_matches WHERE s <> '\'' AND s <> 'a\\'"""
    (_, a), (_, b) = q.defines
    # upper(B.s) = "A""B": Spark computes the comparison over upper(), from the string written back as Spark reads it
    assert a.right.value == "it's" and b.left == rx.RowExpr("""UPPER(s) = 'A"B'""", "__rx0", "B")
    assert b.right.right.value == "x'"


def test_the_view_is_renamed_in_the_text_only_where_it_is_the_view():
    text = ("SELECT __sparkcep_matches.a, '__sparkcep_matches' AS s, `__sparkcep_matches` AS q, "
            "/* __sparkcep_matches */ substr(b, 2) FROM __SPARKCEP_MATCHES JOIN db.__sparkcep_matches USING (a)")
    assert renamed_view(text, "__sparkcep_matches", "v_1") == (
        "SELECT v_1.a, '__sparkcep_matches' AS s, `__sparkcep_matches` AS q, "
        "/* __sparkcep_matches */ substr(b, 2) FROM v_1 JOIN db.__sparkcep_matches USING (a)")
