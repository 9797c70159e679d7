"""Vectorized conditions (``expr_arrow.vectorize``) agree row for row with the per-binding evaluator
(``expr.compile_expr``), on numpy and on Arrow columns, over random expression trees and random rows with NULLs,
NaN, infinities, int64 extremes and strings."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkcep.ir.ast import Attr, BinOp, EquivItem, EquivTest, Func, Literal, Unary
from sparkcep.runtime_udfs.expr.scalar import compile_expr
from sparkcep.runtime_udfs.expr.vector import vectorize

VARS = ("a", "b", "c")
#: attribute → (Arrow type, the values a row may hold).  ``m`` is never in the columns: an attribute the events
#: lack.  Small pools (one cheap draw per value) leave hypothesis room for deep expressions.
INTS = [None, *range(-4, 5), 2**53, 2**53 + 1, -(2**53) - 1, 2**62, 2**63 - 1, -(2**63)]
FLOATS = [None, 0.0, -0.0, 0.5, 2.0, -3.5, 1.25, 3.0, -1.0, math.nan, math.inf, -math.inf, 2.0**53, 2.0**63,
          -(2.0**63), 9007199254740994.0, 1e308, 5e-324]
STRINGS = [None, "", "a", "b", "ab", "é", "Z", "10"]
ATTRS = {"i": (pa.int64(), INTS), "f": (pa.float64(), FLOATS), "s": (pa.string(), STRINGS),
         "t": (pa.bool_(), [None, True, False])}
LITERALS = st.one_of(st.integers(-2, 3), st.just(2**63 - 1), st.sampled_from([0.0, 1.5, -0.0]),
                     st.sampled_from(["a", ""]), st.booleans(), st.none()).map(Literal)
LEAVES = st.one_of(st.builds(Attr, st.sampled_from(VARS), st.sampled_from([*ATTRS, "m"])), LITERALS)
OPS = ("+", "-", "*", "/", "=", "!=", "<", "<=", ">", ">=", "AND", "OR")


def depth(e) -> int:
    """Height of an expression tree (a leaf is 0)."""
    if isinstance(e, BinOp):
        return 1 + max(depth(e.left), depth(e.right))
    return 1 + depth(e.operand) if isinstance(e, Unary) else 0


def exprs(max_depth: int = 4, leaves=LEAVES, ops=OPS, unary=("-", "NOT")):
    """Expression trees of height at most ``max_depth`` over the supported subset."""

    def extend(sub):
        inner = [st.builds(BinOp, st.sampled_from(ops), sub, sub)]
        return st.one_of(*inner, *([st.builds(Unary, st.sampled_from(unary), sub)] if unary else []))

    return st.recursive(leaves, extend, max_leaves=10).filter(lambda e: depth(e) <= max_depth)


NUMERIC = st.one_of(st.builds(Attr, st.sampled_from(VARS), st.sampled_from(["i", "f", "t", "m"])),
                    st.one_of(st.integers(-2, 3), st.sampled_from([0.0, 1.5, 2**63 - 1])).map(Literal))
TEXT = st.one_of(st.builds(Attr, st.sampled_from(VARS), st.just("s")), st.sampled_from(["a", "", "b"]).map(Literal))
CMP = ("=", "!=", "<", "<=", ">", ">=")


def conditions(depth: int = 3):
    """Well-typed conditions (AND/OR/NOT over comparisons of arithmetic or of strings): TRUE often enough to
    test the rows where a condition holds, not only NULL and FALSE."""
    numeric = exprs(2, NUMERIC, ("+", "-", "*", "/"), ("-",))
    text = exprs(1, TEXT, ("+",), ())
    comparison = st.one_of(st.builds(BinOp, st.sampled_from(CMP), numeric, numeric),
                           st.builds(BinOp, st.sampled_from(CMP), text, text))
    return exprs(depth, comparison, ("AND", "OR"), ("NOT",))


@st.composite
def tables(draw) -> dict[tuple[str, str], list]:
    """Rows as columns: {(var, attr): values}, None for NULL."""
    n = draw(st.integers(1, 8))
    return {(v, a): draw(st.lists(st.sampled_from(values), min_size=n, max_size=n))
            for v in VARS for a, (_, values) in ATTRS.items()}


def bindings(table: dict) -> list[dict]:
    """What the engine binds: per variable an event dict (NULLs as None, NaN as NaN, as ``to_pylist`` gives)."""
    n = len(next(iter(table.values())))
    return [{v: {a: table[v, a][r] for (w, a) in table if w == v} for v in VARS} for r in range(n)]


def numpy_columns(table: dict) -> dict:
    """Typed numpy arrays where there is no NULL (NaN for a NULL float), object arrays with None otherwise."""
    out = {}
    for (v, a), values in table.items():
        if a == "f":
            out[v, a] = np.array([math.nan if x is None else x for x in values], dtype=np.float64)
        elif None in values:
            out[v, a] = np.array(values, dtype=object)
        else:
            out[v, a] = np.array(values, dtype={"i": np.int64, "s": np.str_, "t": np.bool_}[a])
    return out


def arrow_columns(table: dict, chunked: bool) -> dict:
    out = {}
    for (v, a), values in table.items():
        arr = pa.array(values, ATTRS[a][0])
        out[v, a] = pa.chunked_array([arr[:1], arr[1:]]) if chunked else arr
    return out


def reference(expr, rows: list[dict]) -> list[bool] | type:
    """``compile_expr`` per row: holds or not, or the exception class a row raised."""
    f = compile_expr(expr)
    out = []
    for row in rows:
        try:
            out.append(f(row) is True)
        except (TypeError, OverflowError, MemoryError) as exc:  # e.g. -'a', 'ab' * 2**62
            return type(exc)
    return out


def check(expr, table: dict) -> None:
    fn = vectorize(expr)
    assert fn is not None
    expected = reference(expr, bindings(table))
    for columns in (numpy_columns(table), arrow_columns(table, False), arrow_columns(table, True)):
        if isinstance(expected, type):
            with pytest.raises((TypeError, OverflowError, MemoryError)):
                fn(columns)
            continue
        got = fn(columns)
        assert got.dtype == np.bool_
        assert got.tolist() == expected, (expr, columns)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exprs(), tables())
def test_random_expressions_agree_with_compile_expr(expr, table):
    check(expr, table)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conditions(), tables())
def test_random_conditions_agree_with_compile_expr(expr, table):
    check(expr, table)


COMPARABLE = st.builds(Attr, st.sampled_from(VARS), st.sampled_from(["i", "f"]))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["=", "!=", "<", "<=", ">", ">="]),
       st.one_of(COMPARABLE, st.builds(BinOp, st.sampled_from(["+", "-", "*", "/"]), COMPARABLE, COMPARABLE)),
       st.one_of(COMPARABLE, LITERALS), tables())
def test_numeric_comparisons_agree(op, left, right, table):
    """Comparisons of (sums, products, quotients of) ints and floats: the predicates batch matching meets."""
    check(BinOp(op, left, right), table)


@pytest.mark.parametrize("typed", ["bool", "int", "float", "str"])
def test_three_valued_logic_exhaustively(typed):
    """Every pair of TRUE/FALSE/NULL (and Python-truthy non-bools) under AND, OR and NOT: NULL must survive
    into NOT, where it differs from FALSE."""
    values = {"bool": [True, False, None], "int": [0, 1, None], "float": [0.0, 2.5, None], "str": ["", "a", None]}
    xs = [True, False, None]
    ys = values[typed]
    table = {("a", "t"): [x for x in xs for _ in ys], ("b", "t"): [y for _ in xs for y in ys]}
    x, y = Attr("a", "t"), Attr("b", "t")
    arrow_type = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "str": pa.string()}[typed]
    columns = {("a", "t"): pa.array(table["a", "t"], pa.bool_()), ("b", "t"): pa.array(table["b", "t"], arrow_type)}
    rows = [{"a": {"t": u}, "b": {"t": v}} for u, v in zip(table["a", "t"], table["b", "t"], strict=True)]
    for op in ("AND", "OR"):
        for e in (BinOp(op, x, y), BinOp(op, y, x), Unary("NOT", BinOp(op, x, y)), Unary("NOT", BinOp(op, y, x))):
            assert vectorize(e)(columns).tolist() == reference(e, rows), e
    for e in (Unary("NOT", y), Unary("NOT", Unary("NOT", y))):
        assert vectorize(e)(columns).tolist() == reference(e, rows), e


def test_the_tasks_example_and_missing_attributes():
    e = BinOp("AND", BinOp("<", Attr("a", "x"), Attr("b", "x")),
              BinOp(">=", BinOp("*", Attr("b", "price"), Literal(2)), Attr("c", "price")))
    fn = vectorize(e)
    assert fn.reads == {("a", "x"), ("b", "x"), ("b", "price"), ("c", "price")}
    cols = {("a", "x"): np.array([1, 5, 1, 1]), ("b", "x"): pa.array([2, 2, 2, None]),
            ("b", "price"): np.array([3.0, 3.0, np.nan, 9.0]), ("c", "price"): np.array([6, 6, 1, 1])}
    assert fn(cols).tolist() == [True, False, False, False]
    del cols["c", "price"]  # lacked: NULL, so the AND is never TRUE
    assert fn(cols).tolist() == [False] * 4
    assert vectorize(BinOp("OR", Attr("z", "q"), Literal(True)))({}, n=3).tolist() == [True] * 3
    with pytest.raises(ValueError):
        vectorize(Literal(True))({})


def test_exact_corners():
    """Spark SQL's rules (docs/language.md, "Expression semantics"), each corner the former Python rules got
    otherwise: BIGINT and DOUBLE compare as DOUBLE, BIGINT overflow is NULL, ``/`` is DOUBLE division of the
    operands as DOUBLE, ``%`` truncates, two strings never add."""
    i = np.array([2**53 + 1, 2**63 - 1, -(2**63), 7, 2**62])
    cols = {("a", "i"): i, ("a", "f"): np.array([2.0**53, 2.0**63, -(2.0**63), 0.0, 2.0])}
    gt = vectorize(BinOp(">", Attr("a", "i"), Attr("a", "f")))
    assert gt(cols).tolist() == [False, False, False, True, True]  # float64(2**53 + 1) == 2**53
    eq = vectorize(BinOp("=", Attr("a", "i"), Attr("a", "f")))
    assert eq(cols).tolist() == [True, True, True, False, False]
    div = vectorize(BinOp("/", Attr("a", "i"), Attr("a", "f")))
    assert div.values(cols).to_pylist()[3] is None  # 7 / 0.0: NULL, not inf
    big = BinOp("*", Attr("a", "i"), Literal(4))  # overflow: NULL (try_multiply), never a wrap-around
    assert vectorize(big).values(cols).to_pylist() == [4 * (2**53 + 1), None, None, 28, None]
    assert vectorize(BinOp(">", big, Literal(0)))(cols).tolist() == [True, False, False, True, False]
    quot = vectorize(BinOp("/", Attr("a", "i"), Literal(3)))
    assert quot.values(cols).to_pylist() == [float(int(x)) / 3.0 for x in i]
    mod = vectorize(BinOp("%", Unary("-", Attr("a", "i")), Literal(3)))
    assert mod.values(cols).to_pylist() == [0, -1, None, -1, -1]  # -(-2**63) overflows: NULL
    assert vectorize(BinOp("+", Literal("a"), Literal("b"))).values({}, n=1).to_pylist() == [None]
    for expr in (gt, eq, div, quot, mod):
        want = [compile_expr(expr.expr)({"a": {"i": int(x), "f": float(f)}})
                for x, f in zip(i, cols["a", "f"], strict=True)]
        assert expr.values(cols).to_pylist() == want


@pytest.mark.parametrize("expr", [
    BinOp("<", Func("avg", (Attr("b", "x", "all"),)), Literal(1)),
    EquivTest((EquivItem("id"),)),
    BinOp("<", Attr("b", "x", "cur"), Attr("b", "x", "prev")),
    BinOp("<", Attr("b", "x", "next"), Literal(1)),
    BinOp("<", Attr(None, "x"), Literal(1)),
    BinOp("<", Attr("z", "x"), Literal(1)),  # z is an ANY component
    Literal((1, 2)),
    Unary("~", Literal(1)),
], ids=["aggregate", "equivalence", "kleene-index", "next", "bare-attr", "any-var", "literal", "unary"])
def test_unsupported_nodes_are_refused(expr):
    assert vectorize(expr, any_vars=frozenset({"z"})) is None
    assert vectorize(BinOp("AND", Literal(True), expr), any_vars=frozenset({"z"})) is None


def test_unsupported_columns_and_lengths():
    fn = vectorize(BinOp("=", Attr("a", "x"), Attr("b", "x")))
    with pytest.raises(TypeError):
        fn({("a", "x"): pa.array([1], pa.timestamp("ms")), ("b", "x"): np.array([1])})
    with pytest.raises(ValueError):
        fn({("a", "x"): np.array([1, 2]), ("b", "x"): np.array([1])})
