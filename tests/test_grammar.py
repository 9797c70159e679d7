"""The grammar, the parser and the printer (no Spark).

The paper queries (LANGUAGE.md §8) live in ``fixtures/paper_queries.cep``; the syntax errors and their
expected positions and messages in ``fixtures/bad_syntax.txt``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkcep.grammar import parse_query, parse_workload
from sparkcep.ir import ast
from sparkcep.ir.ast import (
    Attr,
    BinOp,
    Duration,
    EquivItem,
    EquivTest,
    EventPat,
    Func,
    Kleene,
    Literal,
    Not,
    Or,
    Query,
    ReturnItem,
    Seq,
    Unary,
)
from sparkcep.ir.errors import CEPSyntaxError
from sparkcep.ir.printer import format_query, format_workload

FIXTURES = Path(__file__).parent / "fixtures"
PAPER_TEXT = (FIXTURES / "paper_queries.cep").read_text(encoding="utf-8")


def _paper_queries() -> list[tuple[str, str]]:
    """(label, query text) for every query of the fixture; the label is the comment above it."""
    out, label = [], ""
    for chunk in PAPER_TEXT.split(";"):
        lines = [line for line in chunk.strip().splitlines() if line.strip()]
        comments = [line[2:].strip() for line in lines if line.startswith("--")]
        if comments:
            label = comments[-1]
        text = "\n".join(line for line in lines if not line.startswith("--"))
        if text:
            out.append((label, text))
    return out


PAPER = _paper_queries()
PAPER_IDS = [f"{i:02d}-{label.split(',')[0]}" for i, (label, _) in enumerate(PAPER)]


# ---------------------------------------------------------------------------------------------- paper queries


def test_paper_workload_parses_as_one_file():
    workload = parse_workload(PAPER_TEXT)
    assert len(workload.queries) == len(PAPER) == 14
    assert workload.queries == tuple(parse_query(text) for _, text in PAPER)


@pytest.mark.parametrize("text", [t for _, t in PAPER], ids=PAPER_IDS)
def test_paper_query_round_trips(text):
    q = parse_query(text)
    printed = format_query(q)
    assert parse_query(printed) == q
    assert format_query(parse_query(printed)) == printed


def test_paper_workload_round_trips():
    workload = parse_workload(PAPER_TEXT)
    assert parse_workload(format_workload(workload)) == workload


def _paper(n: int) -> Query:
    return parse_query(PAPER[n][1])


def test_sase_shoplifting_has_a_negation_in_the_middle():
    q = _paper(0)
    assert q.pattern == Seq((
        EventPat(("SHELF-READING",), "x"),
        Not(EventPat(("COUNTER-READING",), "y")),
        EventPat(("EXIT-READING",), "z"),
    ))
    assert q.where == EquivTest((EquivItem("id"),))
    assert q.within == Duration(12, "h")
    assert q.returns is None


def test_sase_misplaced_inventory_negates_an_any():
    q = _paper(1)
    assert q.pattern.items[2] == Not(EventPat(("COUNTER-READING", "SHELF-READING"), "z", any_=True))
    assert BinOp("!=", Attr("x", "shelf_id"), Attr("y", "shelf_id")) in ast.conjuncts(q.where)


def test_sase_healthcare_equivalence_with_constants():
    equiv, medicine, amount = ast.conjuncts(_paper(2).where)
    assert equiv == EquivTest((EquivItem("name", value=Literal("John")),))
    assert medicine == EquivTest((EquivItem("medicine", value=Literal("Antibiotics")),))
    assert amount == BinOp(">", BinOp("+", Attr("x", "amount"), Attr("y", "amount")), Literal(1000))


def test_hadoop_q1_returns_two_aggregates_over_the_kleene_variable():
    q = _paper(3)
    assert q.pattern.items[1] == Kleene(EventPat(("Mapper",), "b", array=True), "+")
    assert q.returns == (
        ReturnItem(Func("avg", (Attr("b", "period", "all"),))),
        ReturnItem(Func("max", (Attr("b", "period", "all"),))),
    )
    assert not q.return_first
    assert BinOp("=", Attr("a", "job_id"), Attr("b", "job_id", "cur")) in ast.conjuncts(q.where)
    assert q.within == Duration(1, "d")


def test_hadoop_q3_compares_the_last_event_with_an_aggregate():
    _, last = ast.conjuncts(_paper(4).where)
    assert last == BinOp(">", Attr("b", "period", "last"),
                         BinOp("*", Literal(2), Func("avg", (Attr("b", "period", "all"),))))


def test_hadoop_q4_and_q5_shapes():
    q4, q5 = _paper(5), _paper(6)
    assert q4.returns[1].expr == Attr("b", "ts", "last")
    assert q4.returns[2].expr == Func("sum", (Attr("b", "size", "all"),))
    assert [type(p) for p in q5.pattern.items] == [EventPat, EventPat, Kleene, EventPat, EventPat]


def test_hadoop_q6_compares_current_and_previous():
    _, trend = ast.conjuncts(_paper(7).where)
    assert trend == BinOp(">=", Attr("b", "val", "cur"), Attr("b", "val", "prev"))


def test_greta_q1():
    q = _paper(8)
    assert q.return_first
    assert q.returns == (ReturnItem(Attr(None, "sector")), ReturnItem(Func("count", star=True)))
    assert q.pattern == Kleene(EventPat(("Stock",), "S"), "+")
    assert q.group_by == (Attr(None, "sector"),)
    assert q.within == Duration(10, "min")
    assert q.slide == Duration(10, "s")
    assert q.slide.in_ms() == 10_000
    equiv, edge = ast.conjuncts(q.where)
    assert equiv == EquivTest((EquivItem("company"), EquivItem("sector")))
    assert edge == BinOp(">", Attr("S", "price"), Attr("S", "price", "next"))


def test_greta_q2_and_q3():
    q2, q3 = _paper(9), _paper(10)
    assert q2.returns[1].expr == Func("sum", (Attr("M", "cpu"),))
    assert q2.slide == Duration(30, "s")
    assert q3.pattern.items[0] == Not(EventPat(("Accident",), "A"))
    assert q3.pattern.items[1] == Kleene(EventPat(("Position",), "P"), "+")
    assert ast.conjuncts(q3.where)[0] == EquivTest((EquivItem("vehicle", "P"), EquivItem("segment")))
    assert q3.group_by == (Attr(None, "segment"),)


def test_sharon_q1_has_no_variables():
    q = _paper(11)
    assert q.pattern == Seq(tuple(EventPat((t,)) for t in ("OakSt", "MainSt", "StateSt")))
    assert q.returns == (ReturnItem(Func("count", star=True)),)


def test_gspice_q2_is_a_pattern_disjunction():
    q = _paper(13)
    assert isinstance(q.pattern, Or)
    variables = [[e.var for e in alt.items] for alt in q.pattern.alternatives]
    assert variables == [["a", "b", "c"], ["d", "e", "f"]]
    assert q.where.op == "OR"
    assert q.within.in_ms() == 250_000


# -------------------------------------------------------------------------------------------- worked examples


@pytest.mark.parametrize("strategy", ast.STRATEGIES)
def test_sase_pp_fig3_under_each_strategy(strategy):
    q = parse_query(f"PATTERN SEQ(A a, B+ b[], C c) USING {strategy} WITHIN 10")
    assert q.strategy == strategy and q.strategy_vars is None
    assert q.within == Duration(10)
    assert q.pattern.items[1] == Kleene(EventPat(("B",), "b", array=True))


def test_sase_pp_fig4():
    q = parse_query("PATTERN SEQ(A a, B+ b[], C c) WHERE [task_id] AND b[i].val >= b[i-1].val WITHIN 100")
    assert ast.conjuncts(q.where) == [
        EquivTest((EquivItem("task_id"),)),
        BinOp(">=", Attr("b", "val", "cur"), Attr("b", "val", "prev")),
    ]


def test_sase_plus_strategy_in_where():
    q = parse_query("PATTERN SEQ(A a, B+ b[], C c) WHERE skip_till_next_match(a, b[], c) { [id] } WITHIN 10")
    assert q.strategy == "skip_till_next_match"
    assert q.strategy_vars == ("a", "b", "c")
    assert q.where == EquivTest((EquivItem("id"),))
    assert "skip_till_next_match(a, b[], c) { [id] }" in format_query(q)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("A+", Kleene(EventPat(("A",)))),
        ("SEQ(A+, B)", Seq((Kleene(EventPat(("A",))), EventPat(("B",))))),
        ("(SEQ(A+, B))+", Kleene(Seq((Kleene(EventPat(("A",))), EventPat(("B",)))))),
    ],
)
def test_greta_fig6(pattern, expected):
    assert parse_query(f"RETURN COUNT(*) PATTERN {pattern} WITHIN 100").pattern == expected


def test_greta_fig12():
    q = parse_query("RETURN COUNT(*), COUNT(A), MIN(A.attr), MAX(A.attr), SUM(A.attr), AVG(A.attr) "
                    "PATTERN (SEQ(A+, B))+ WITHIN 10")
    assert [r.expr for r in q.returns] == [
        Func("count", star=True),
        Func("count", (Attr(None, "A"),)),
        *(Func(f, (Attr("A", "attr"),)) for f in ("min", "max", "sum", "avg")),
    ]


# -------------------------------------------------------------------------------------------------- spellings


@pytest.mark.parametrize(
    ("spelling", "unit"),
    [("ms", "ms"), ("millisecond", "ms"), ("milliseconds", "ms"), ("s", "s"), ("sec", "s"), ("secs", "s"),
     ("second", "s"), ("seconds", "s"), ("min", "min"), ("mins", "min"), ("minute", "min"),
     ("minutes", "min"), ("h", "h"), ("hour", "h"), ("hours", "h"), ("d", "d"), ("day", "d"), ("days", "d"),
     ("SECONDS", "s"), ("Hours", "h")],
)
def test_unit_spellings(spelling, unit):
    q = parse_query(f"PATTERN A a WITHIN 3 {spelling} SLIDE 1{spelling}")
    assert q.within == Duration(3, unit)
    assert q.slide == Duration(1, unit)


def test_durations_without_unit_and_fractional():
    q = parse_query("PATTERN A a WITHIN 10 SLIDE 2.5")
    assert q.within == Duration(10, None) and q.slide == Duration(2.5, None)
    assert isinstance(q.within.value, int)


def test_unicode_operators_are_synonyms():
    ascii_q = parse_query("PATTERN SEQ(A a, NOT B b) WHERE NOT a.x != 1 AND a.y >= 2 OR a.z <= 3 WITHIN 1")
    unicode_q = parse_query("PATTERN SEQ(A a, ¬B b) WHERE ¬ a.x ≠ 1 ∧ a.y ≥ 2 ∨ a.z ≤ 3 WITHIN 1")
    assert unicode_q == ascii_q


@pytest.mark.parametrize("op", ["!=", "<>", "≠"])
def test_not_equal_spellings(op):
    assert parse_query(f"PATTERN A a WHERE a.x {op} 1 WITHIN 1").where.op == "!="


@pytest.mark.parametrize("op", ["=", "=="])
def test_equal_spellings(op):
    assert parse_query(f"PATTERN A a WHERE a.x {op} 1 WITHIN 1").where.op == "="


@pytest.mark.parametrize("negation", ["!(B b)", "!B b", "~B b", "NOT B b", "¬B b", "not (B b)"])
def test_negation_spellings(negation):
    q = parse_query(f"PATTERN SEQ(A a, {negation}, C c) WITHIN 1")
    assert q.pattern.items[1] == Not(EventPat(("B",), "b"))


def test_negated_sub_sequence():
    q = parse_query("PATTERN SEQ(A a, NOT SEQ(C, NOT E, D), B b) WITHIN 1")
    assert q.pattern.items[1] == Not(Seq((EventPat(("C",)), Not(EventPat(("E",))), EventPat(("D",)))))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("B+ b[]", Kleene(EventPat(("B",), "b", array=True), "+")),
        ("B+ b", Kleene(EventPat(("B",), "b"), "+")),
        ("B b+", Kleene(EventPat(("B",), "b"), "+")),
        ("B* b[]", Kleene(EventPat(("B",), "b", array=True), "*")),
        ("B? b", Kleene(EventPat(("B",), "b"), "?")),
        ("(B b)+", Kleene(EventPat(("B",), "b"), "+")),
        ("ANY(B, C-D) v", EventPat(("B", "C-D"), "v", any_=True)),
        ("ANY(B, C)+ v[]", Kleene(EventPat(("B", "C"), "v", any_=True, array=True))),
        ("SEQ(A, B)+", Kleene(Seq((EventPat(("A",)), EventPat(("B",)))))),
        ("A a OR B b OR C c", Or((EventPat(("A",), "a"), EventPat(("B",), "b"), EventPat(("C",), "c")))),
    ],
)
def test_pattern_forms(text, expected):
    assert parse_query(f"PATTERN {text} WITHIN 1").pattern == expected


def test_keywords_are_case_insensitive():
    lower = parse_query("return count(*) pattern seq(a x, not b y) using strict_contiguity "
                        "where [id] and x.v > 1 or true group-by id within 1 minute slide 10 seconds")
    upper = parse_query("RETURN COUNT(*) PATTERN SEQ(a x, NOT b y) USING STRICT_CONTIGUITY "
                        "WHERE [id] AND x.v > 1 OR TRUE GROUP BY id WITHIN 1 MINUTE SLIDE 10 SECONDS")
    mixed = parse_query("Return Count(*) Pattern Seq(a x, Not b y) Using Strict_Contiguity "
                        "Where [id] And x.v > 1 Or True Group  By id Within 1 Minute Slide 10 Seconds")
    assert lower == upper == mixed
    assert lower.strategy == "strict_contiguity"


def test_type_names_keep_their_case():
    assert parse_query("EVENT stock s WITHIN 1").pattern == EventPat(("stock",), "s")


def test_dash_in_type_names_does_not_break_subtraction():
    q = parse_query("PATTERN SEQ(SHELF-READING x, EXIT-READING y) WHERE y.ts-x.ts > a-b WITHIN 1")
    assert q.where == BinOp(">", BinOp("-", Attr("y", "ts"), Attr("x", "ts")),
                            BinOp("-", Attr(None, "a"), Attr(None, "b")))


def test_context_words_stay_names_elsewhere():
    q = parse_query("PATTERN SEQ(Event i, Start s, Any2 min) WHERE i.len = s.min AND len > i[i].event "
                    "WITHIN 10 min RETURN s.d")
    assert q.pattern.items[0] == EventPat(("Event",), "i")
    assert ast.conjuncts(q.where) == [
        BinOp("=", Attr("i", "len"), Attr("s", "min")),
        BinOp(">", Attr(None, "len"), Attr("i", "event", "cur")),
    ]


@pytest.mark.parametrize(
    ("text", "index"),
    [("b.x", None), ("b[].x", "all"), ("b[i].x", "cur"), ("b[I].x", "cur"), ("b[i-1].x", "prev"),
     ("b[..i-1].x", "prefix"), ("b[b.len].x", "last"), ("b[1].x", 1), ("b[7].x", 7), ("NEXT(b).x", "next")],
)
def test_attribute_index_forms(text, index):
    assert parse_query(f"PATTERN B+ b[] WITHIN 1 RETURN {text}").returns[0].expr == Attr("b", "x", index)


def test_a_variable_called_i_can_be_indexed():
    q = parse_query("PATTERN I+ i[] WHERE i[i].x > i[i-1].x WITHIN 1 RETURN i[i.len].x")
    assert q.returns[0].expr == Attr("i", "x", "last")
    assert q.where == BinOp(">", Attr("i", "x", "cur"), Attr("i", "x", "prev"))


def test_expressions_precedence_and_literals():
    q = parse_query("PATTERN A a WHERE -a.x * 2 + 3 % 2 / 1 > -4.5 AND a.s = 'it''s' OR \"q\" = NULL "
                    "AND NOT FALSE WITHIN 1")
    left, right = q.where.left, q.where.right
    assert left == BinOp("AND",
                         BinOp(">", BinOp("+", BinOp("*", Unary("-", Attr("a", "x")), Literal(2)),
                                          BinOp("/", BinOp("%", Literal(3), Literal(2)), Literal(1))),
                               Literal(-4.5)),
                         BinOp("=", Attr("a", "s"), Literal("it's")))
    assert right == BinOp("AND", BinOp("=", Literal("q"), Literal(None)), Unary("NOT", Literal(False)))


def test_return_items_and_aliases():
    q = parse_query("PATTERN A a WITHIN 1 RETURN a.x AS x, count(*) as n, a.y + 1")
    assert [r.alias for r in q.returns] == ["x", "n", None]


def test_equivalence_test_forms():
    q = parse_query("PATTERN A a WHERE [id, a.b, c = 'k', d = -2, e = TRUE] WITHIN 1")
    assert q.where == EquivTest((
        EquivItem("id"), EquivItem("b", "a"), EquivItem("c", value=Literal("k")),
        EquivItem("d", value=Literal(-2)), EquivItem("e", value=Literal(True)),
    ))


def test_comments_names_and_trailing_semicolon():
    text = """
    -- a named query
    q1: PATTERN A a /* inline
    block comment */ WITHIN 1;  -- trailing
    q2: PATTERN B b WITHIN 2;
    """
    workload = parse_workload(text)
    assert [q.name for q in workload.queries] == ["q1", "q2"]
    assert parse_query("PATTERN A a WITHIN 1;").within == Duration(1)


def test_spans_point_at_the_source():
    text = "PATTERN SEQ(A a, B+ b[])\nWHERE b[i].v > a.v\nWITHIN 10 s"
    q = parse_query(text)
    kleene = q.pattern.items[1]
    assert text[kleene.span.start:kleene.span.end] == "B+ b[]"
    cur = q.where.left
    assert (cur.span.line, cur.span.column) == (2, 7)
    assert text[cur.span.start:cur.span.end] == "b[i].v"
    assert text[q.within.span.start:q.within.span.end] == "10 s"
    assert all(node.span is not None for node in ast.walk(q))


# ----------------------------------------------------------------------------------------------------- errors


def _bad_cases() -> list[tuple[int, int, str, str]]:
    """(line, column, message part, query text) for every case of fixtures/bad_syntax.txt."""
    text = (FIXTURES / "bad_syntax.txt").read_text(encoding="utf-8")
    cases = []
    for block in re.split(r"^### ", text, flags=re.MULTILINE)[1:]:
        header, _, body = block.partition("\n")
        position, message = header.split(" ", 1)
        line, column = position.split(":")
        cases.append((int(line), int(column), message, body))
    return cases


BAD = _bad_cases()


@pytest.mark.parametrize(("line", "column", "message", "text"), BAD, ids=[c[2][:40] for c in BAD])
def test_syntax_error_position_message_and_caret(line, column, message, text):
    with pytest.raises(CEPSyntaxError) as info:
        parse_query(text)
    err = info.value
    assert (err.line, err.column) == (line, column)
    assert message in err.message
    assert err.source == text
    head, source_line, caret = str(err).splitlines()
    assert head.startswith(f"line {line}, column {column}: ")
    assert source_line == "  " + text.splitlines()[line - 1]
    assert caret.index("^") == column + 1


def test_return_before_and_after_is_an_error_at_the_second():
    text = "RETURN COUNT(*) PATTERN A+ WITHIN 1 RETURN COUNT(*)"
    with pytest.raises(CEPSyntaxError, match="RETURN given twice") as info:
        parse_query(text)
    assert info.value.column == text.rindex("RETURN") + 1


def test_parse_query_rejects_an_empty_workload():
    with pytest.raises(CEPSyntaxError, match="expected a query"):
        parse_workload("  ")


_SOUP = st.lists(st.sampled_from(
    ["PATTERN", "SEQ", "(", ")", ",", "A", "a", "b[]", "+", "WHERE", "WITHIN", "10", "s", "RETURN", "x.y",
     "[", "]", "NOT", "!", "=", "'s'", ";", "GROUP-BY", "NEXT(a).x", "..", "i-1", "@", "{", "}", "\n", "--"]),
    max_size=14)


@settings(max_examples=300, deadline=None)
@given(_SOUP)
def test_any_text_parses_or_raises_a_syntax_error(words):
    text = " ".join(words)
    try:
        parse_workload(text)
    except CEPSyntaxError as err:
        assert err.span is not None and err.source == text
        assert 1 <= err.line <= text.count("\n") + 1


# ------------------------------------------------------------------------------------------------- round trip

_NAMES = st.sampled_from(["a", "b", "x1", "price", "S", "i", "len", "s", "min", "d", "order", "notes", "_t"])
_TYPES = st.sampled_from(["A", "B", "Stock", "SHELF-READING", "x-y_2", "Order", "i", "Event"])
_NUMBERS = (st.integers(-1000, 10**12)
            | st.floats(-1e6, 1e20, allow_nan=False, allow_infinity=False))
_STRINGS = st.text(st.characters(blacklist_categories=("Cs",)), max_size=5)
_LITERALS = st.builds(Literal, _NUMBERS | _STRINGS | st.booleans() | st.none())
_INDEXES = st.sampled_from([None, "all", "cur", "prev", "prefix", "last", "next"]) | st.integers(0, 20)
_ATTRS = st.builds(Attr, st.none(), _NAMES) | st.builds(Attr, _NAMES, _NAMES, _INDEXES)
_EQUIV = st.builds(
    EquivTest,
    st.lists(st.builds(EquivItem, _NAMES, st.none() | _NAMES, st.none() | _LITERALS), min_size=1, max_size=3)
    .map(tuple),
)
_BINOPS = st.sampled_from(["+", "-", "*", "/", "%", "=", "!=", "<", "<=", ">", ">=", "AND", "OR"])


def _is_number_literal(e: ast.Expr) -> bool:
    return isinstance(e, Literal) and isinstance(e.value, (int, float)) and not isinstance(e.value, bool)


def _compound_exprs(children):
    args = st.lists(children, min_size=1, max_size=2).map(tuple)
    aggregates = st.sampled_from(["avg", "sum", "min", "max", "count"])
    return (
        st.builds(BinOp, _BINOPS, children, children)
        | st.builds(Unary, st.just("NOT"), children)
        # the parser folds `-5` into Literal(-5), so Unary("-") never wraps a number
        | st.builds(Unary, st.just("-"), children.filter(lambda e: not _is_number_literal(e)))
        | st.builds(Func, aggregates, args)
        | st.builds(Func, aggregates, st.just(()), st.just(True))
    )


_EXPRS = st.recursive(_LITERALS | _ATTRS | _EQUIV, _compound_exprs, max_leaves=8)


def _events():
    plain = st.builds(EventPat, _TYPES.map(lambda t: (t,)), st.none() | _NAMES)
    anys = st.builds(lambda types, var: EventPat(types, var, any_=True),
                     st.lists(_TYPES, min_size=1, max_size=3).map(tuple), st.none() | _NAMES)
    arrays = st.builds(lambda types, var: EventPat((types,), var, array=True), _TYPES, _NAMES)
    return plain | anys | arrays


def _compound_patterns(children):
    return (
        st.builds(Kleene, children, st.sampled_from(["+", "*", "?"]))
        | st.builds(Seq, st.lists(children, min_size=1, max_size=3).map(tuple))
        | st.builds(Not, children)
        | st.builds(Or, st.lists(children, min_size=2, max_size=3).map(tuple))
    )


_PATTERNS = st.recursive(_events(), _compound_patterns, max_leaves=6)
_DURATIONS = st.builds(
    Duration, st.integers(0, 10**6) | st.floats(0, 1e6, allow_nan=False, allow_infinity=False),
    st.none() | st.sampled_from(sorted(ast.UNITS_MS)),
)


@st.composite
def _queries(draw):
    items = st.lists(st.builds(ReturnItem, _EXPRS, st.none() | _NAMES), min_size=1, max_size=3)
    returns = draw(st.none() | items.map(tuple))
    strategy = draw(st.none() | st.sampled_from(ast.STRATEGIES))
    strategy_vars = None
    if strategy is not None:
        strategy_vars = draw(st.none() | st.lists(_NAMES, min_size=1, max_size=3).map(tuple))
    return Query(
        pattern=draw(_PATTERNS),
        within=draw(_DURATIONS),
        name=draw(st.none() | _NAMES),
        returns=returns,
        strategy=strategy,
        strategy_vars=strategy_vars,
        where=draw(st.none() | _EXPRS),
        group_by=draw(st.lists(st.builds(Attr, st.none() | _NAMES, _NAMES), max_size=2).map(tuple)),
        slide=draw(st.none() | _DURATIONS),
        return_first=returns is not None and draw(st.booleans()),
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_queries())
def test_print_then_parse_gives_the_same_ast(q):
    printed = format_query(q)
    assert parse_query(printed) == q, printed


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_queries(), min_size=1, max_size=3))
def test_workload_print_then_parse(queries):
    workload = ast.Workload(tuple(queries))
    assert parse_workload(format_workload(workload)) == workload
