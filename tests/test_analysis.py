"""Analysis: variable resolution, predicate classes, and the errors of LANGUAGE.md §9 (no JVM)."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

import sparkcep
from sparkcep.compiler.analysis import analyze
from sparkcep.grammar import parse_query, parse_workload
from sparkcep.ir.ast import Attr
from sparkcep.ir.errors import CEPError
from sparkcep.runtime_udfs.match import engine as match_engine
from sparkcep.spark.results import canonical
from tests.strategies import event_streams
from tests.test_match_semantics import compiled, oracle_rows, run

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


# ----------------------------------------------------------------------------------------------- single events
# A variable bound to at most one event (``T? v``, a variable inside ``(P)?``, a negated ``E e`` inside a
# repeated group) has no previous, next or k-th (k > 1) event: analysis refuses those references with a
# position, and everything it accepts evaluates in the oracle and the engine alike (no EvalError at run time).

SINGLE_PATTERNS = ["SEQ(A a, B? v, C c)", "SEQ(A a, (SEQ(B v, C c))?, D d)", "SEQ(A a, (SEQ(B v, C c) OR D w)?, E e)",
                   "SEQ(A a, (SEQ(B b, !(E v), C c))+, D d)", "SEQ(A a, !(B? v), C c)"]
SINGLE_WHERE = ["v[i-1].x < a.x", "NEXT(v).x > a.x", "v[2].x < a.x", "v[i].x > avg(v[..i-1].x)", "v[i].x < a.x",
                "v[1].x < a.x", "v[v.len].x < a.x", "v.x < a.x", "avg(v[].x) < a.x", "count(v[].x) >= 1"]
SINGLE_RETURN = ["v[2].x", "v[i].x", "v[1].x", "v.x", "v[v.len].x", "sum(v[].x)", "count(v[].x)"]
REFUSED = ("v[i-1]", "NEXT(v)", "v[2]", "v[..i-1]")


def single_event_queries():
    for p in SINGLE_PATTERNS:
        for w in SINGLE_WHERE:
            yield f"PATTERN {p} WHERE {w} WITHIN 6"
        for r in SINGLE_RETURN:
            yield f"PATTERN {p} WITHIN 6 RETURN a.ts, {r} AS out"


def test_single_event_variable_refuses_sequence_references_at_compile_time():
    refused = 0
    for text in single_event_queries():
        if not any(f in text for f in REFUSED):
            continue
        with pytest.raises(CEPError) as info:
            check(text)
        err = info.value
        assert err.span is not None and "^" in err.render(), err.render()
        assert text[err.span.start:err.span.end].startswith(("v[", "NEXT(v)")), err.render()
        refused += 1
    assert refused == len(SINGLE_PATTERNS) * 5


def expected_refusal(text: str) -> bool:
    """A sequence reference, ``v[i]`` in RETURN, or returning a negated variable: refused on purpose."""
    returns_negated = " RETURN " in text and ("!(E v)" in text or "!(B? v)" in text)
    return any(f in text for f in REFUSED) or "RETURN a.ts, v[i]" in text or returns_negated


@functools.cache
def accepted_single_event_queries() -> tuple:
    out = []
    for text in single_event_queries():
        try:
            q, spec = compiled(text)
        except CEPError:
            assert expected_refusal(text), text
            continue
        assert not expected_refusal(text), text
        try:
            match_engine.check(spec)
        except CEPError:
            continue  # a documented refusal of the engine (NOT T+ ...), not a run-time traceback
        out.append((text, q, spec))
    return tuple(out)


def test_single_event_queries_accepted_as_documented():
    assert len(accepted_single_event_queries()) >= 3 * len(SINGLE_PATTERNS)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=event_streams("ABCDE", min_size=2, max_size=7, max_gap=2))
def test_accepted_single_event_references_run_like_the_oracle(events):
    for text, q, spec in accepted_single_event_queries():
        assert canonical(run(spec, events)) == canonical(oracle_rows(q, events)), text


def test_cli_prints_single_event_error_with_caret_and_exits_2(tmp_path):
    import subprocess
    import sys

    text = "PATTERN SEQ(A a, (SEQ(B b, C c))?, D d) WHERE a.x < b[2].x WITHIN 10"
    (tmp_path / "in.jsonl").write_text('{"type": "A", "ts": 1, "x": 1}\n')
    for command in ("check", "run"):
        extra = ["--input", str(tmp_path / "in.jsonl")] if command == "run" else []
        done = subprocess.run([sys.executable, "-m", "sparkcep.cli", command, "-e", text, *extra],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert done.stderr.splitlines() == [
            "sparkcep: line 1, column 53: b[2] needs a Kleene variable (T+ or T*): 'b' is not one, it binds at most "
            "one event (T? or inside (P)?); write b[1]",
            "  " + text,
            " " * 54 + "^" * 6,
        ]
