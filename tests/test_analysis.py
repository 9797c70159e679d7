"""Analysis: variable resolution, predicate classes, and the errors of LANGUAGE.md §9 (no JVM)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import sparkcep
from sparkcep.compiler.analysis import analyze
from sparkcep.compiler.ast import Attr
from sparkcep.compiler.errors import CEPError
from sparkcep.grammar import parse_query, parse_workload

FIXTURES = Path(__file__).parent / "fixtures"


def load_bad_queries():
    cases, pending, options, header, body = [], {}, {}, None, []
    for line in (FIXTURES / "bad_queries.txt").read_text().splitlines() + ["### end"]:
        if line.startswith("### "):
            if header is not None:
                cases.append((header, options, "\n".join(body).strip()))
            header, body, options, pending = line[4:], [], pending, {}
        elif line.startswith("#! "):
            pending = dict(kv.split("=") for kv in line[3:].split())
        elif line.startswith("#") and header is None:
            continue
        elif header is not None:
            body.append(line)
    return [pytest.param(h, o, t, id=h.split(" ", 1)[1][:40]) for h, o, t in cases]


BAD = load_bad_queries()


def check(text: str, **options):
    return analyze(parse_query(text), text, **options)


def test_fixture_has_every_error_class():
    assert len(BAD) >= 15


@pytest.mark.parametrize("header,options,text", BAD)
def test_bad_query_message_position_and_caret(header, options, text):
    position, expected = header.split(" ", 1)
    line, column = map(int, position.split(":"))
    with pytest.raises(CEPError) as info:
        check(text, **options)
    err = info.value
    assert expected in err.message, err.render()
    assert (err.line, err.column) == (line, column), err.render()
    rendered = err.render().splitlines()
    assert rendered[0].startswith(f"line {line}, column {column}: ")
    assert rendered[1] == "  " + text.splitlines()[line - 1]
    caret = rendered[2]
    assert re.fullmatch(rf" {{{column + 1}}}\^+", caret), rendered


def test_paper_queries_analyze():
    text = (FIXTURES / "paper_queries.cep").read_text()
    modes = [analyze(q, text).mode for q in parse_workload(text).queries]
    assert modes.count("aggregate") == 4 and modes.count("match") == 10


@pytest.mark.parametrize(
    "text,expected",
    [
        ("PATTERN SEQ(A a, B b) WHERE [id] AND a.x > 5 AND a.x < b.x WITHIN 10",
         [("equivalence", ()), ("local", ("a",)), ("parameterized", ("a", "b"))]),
        ("PATTERN SEQ(A a, B+ b[], C c) WHERE b[i].v >= b[i-1].v AND b[i].v > 3 WITHIN 10",
         [("edge", ("b",)), ("local", ("b",))]),
        ("PATTERN SEQ(A a, B+ b[]) WHERE b[b.len].p > 2 * avg(b[].p) WITHIN 10", [("aggregate", ("b",))]),
        ("PATTERN SEQ(A x, !(C z), D y) WHERE x.s = z.s AND z.k = 1 WITHIN 10",
         [("negation", ("x", "z")), ("negation", ("z",))]),
        ("RETURN COUNT(*) PATTERN S+ WHERE S.price > NEXT(S).price WITHIN 10", [("edge", ("S",))]),
        ("PATTERN SEQ(A a, B b) WHERE 1 < 2 WITHIN 10", [("constant", ())]),
    ],
)
def test_predicate_classes(text, expected):
    assert [(p.kind, p.vars) for p in check(text).predicates] == expected


def test_implicit_variables_and_type_references():
    r = check("RETURN COUNT(*), COUNT(A), SUM(A.attr) PATTERN (SEQ(A+, B))+ WITHIN 10")
    assert [v.name for v in r.variables] == ["A", "B"]
    assert all(v.implicit and v.kleene for v in r.variables)
    assert [(a.func, a.var, a.attr) for a in r.aggregates] == [("count", None, None), ("count", "A", None),
                                                                ("sum", "A", "attr")]


def test_repeated_type_gets_numbered_variables():
    r = check("RETURN COUNT(*) PATTERN SEQ(A, B, A) WITHIN 10")
    assert [v.name for v in r.variables] == ["A", "B", "A_2"]


def test_group_by_and_partition_attributes_are_returnable():
    r = check("RETURN sector, COUNT(*) PATTERN Stock S+ WHERE [company, sector] AND S.price > NEXT(S).price "
              "GROUP-BY sector WITHIN 10 minutes SLIDE 10 seconds")
    assert r.mode == "aggregate" and r.group_by == ("sector",)
    assert [i.attr for i in r.partition] == ["company", "sector"]
    assert (r.window, r.slide) == (600_000, 10_000)


def test_numeric_ts_with_declared_unit():
    r = check("PATTERN SEQ(A a, B b) WITHIN 2 minutes", ts_kind="numeric", ts_unit="s")
    assert r.window == 120


def test_bare_attribute_in_single_variable_where_binds_it():
    r = check("PATTERN A a WHERE price > 3 WITHIN 10")
    assert r.predicates[0].expr.left == Attr("a", "price")


def test_returned_equivalence_attributes_are_trend_groups():
    q = sparkcep.compile("RETURN g, COUNT(*) PATTERN A+ WHERE [g] WITHIN 10")
    assert [c.name for c in q.plan().columns] == ["window_start", "window_end", "g", "count_all", "aggregate_overflow"]
    assert q.spec().group_by == ("g",)


def test_declared_ts_kind_and_unit_without_schema():
    text = "PATTERN SEQ(A a, B b) WITHIN 2 minutes"
    assert sparkcep.compile(text, ts_unit="s").spec().window == 120
    assert sparkcep.compile(text).spec().window == 120_000  # units and no declaration: timestamp ts (ms)
    with pytest.raises(CEPError, match="needs the unit of the numeric ts column"):
        sparkcep.compile(text, ts_kind="numeric").spec()
