"""One expression semantics, Spark SQL's (docs/language.md, "Expression semantics"): a random expression over
random values gives the same value in Spark SQL (the SQL filter's form, ``to_sql_expr``), in the per-binding
evaluator (``expr.scalar``) and in the vectorized one (``expr.vector``).

The values are the corners: BIGINTs at and near the 64-bit limits, negatives, zero, NULL, DOUBLEs with NaN (as
literals and computed: attribute NaN is NULL to the engines and the readers refuse it), the infinities and -0.0,
and strings that are numbers, numbers with spaces, Java's double forms, and no numbers at all.  One Spark query
evaluates every (expression, row) pair of a hypothesis example at once (the expressions are the columns of one
SELECT over a small DataFrame), under ANSI on and off: the SQL sparkcep writes does not depend on the setting.
"""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkcep.compiler.codegen.sql import DIALECT, to_sql_expr
from sparkcep.ir.ast import Attr, BinOp, Call, Literal, Unary
from sparkcep.ir.kinds import typed
from sparkcep.runtime_udfs.expr.scalar import compile_expr
from sparkcep.runtime_udfs.expr.vector import vectorize

MIN, MAX = -(2**63), 2**63 - 1
INTS = [0, 1, -1, 2, 3, -3, 7, -7, 10, MAX, MIN, MAX - 1, MIN + 1, 2**62, -(2**62), 2**31, -(2**31) - 1,
        2**32 + 5, 2**53 + 1, 3037000500, -3037000500]
FLOATS = [0.0, -0.0, 1.5, -2.5, 0.1, 3.0, -7.0, 1e308, -1e308, math.inf, -math.inf, 2.0**63, -(2.0**63),
          2.0**53, 5e-324]
STRINGS = ["12", " 3 ", "-7", "+4", "1.5", "abc", "", "NaN", "nan", "-nan", "Infinity", "-inf", "1e2", "0x1p3",
           "9223372036854775807", "9223372036854775808", "1.5d", "1_0", "\t5\n", ".5", "a", "B",
           # for the functions: case mappings that change the length, astral characters, LIKE's own characters
           # (a pattern from a column may hold a stray escape: NULL), booleans as text
           "İx", "straße", "ΑΣ", "é😀", "a%b_", "x\\y", "\\", "a\\_", " TRUE ", "no", "0"]
#: the attributes of the one variable ``a``, with their Spark types
TYPES = {"x": "bigint", "y": "bigint", "d": "double", "e": "double", "s": "string", "t": "string"}
ARROW = {"bigint": pa.int64(), "double": pa.float64(), "string": pa.large_string()}
ARITH = ["+", "-", "*", "/", "%"]
#: LIKE patterns: wildcards, escapes of _ % \, and the stray escapes Spark rejects (NULL here)
PATTERNS = ["a%", "%", "_", "%5", "1_", "\\%", "a\\_", "%\\\\%", "", "_%_", "A%", "%e%", "\\", "a\\b", "%😀"]
#: substring positions and lengths: 1-based, 0, negative (from the end), beyond the string, beyond 32 bits
POSITIONS = [0, 1, 2, 3, -1, -2, -9, 9, 2**31 - 1, 2**31, -(2**31), MAX, MIN]
CASTS = ["BIGINT", "INT", "SMALLINT", "TINYINT", "DOUBLE", "STRING", "BOOLEAN"]
#: DOUBLEs that meet a string conversion (concat, CAST AS STRING, ...): Java 17's Double.toString, which Spark
#: uses, is not always the shortest form (1.0E23 prints as 9.999999999999999E22); the engines print the shortest
TEXT_FLOATS = [0.0, -0.0, 1.5, -2.5, 0.1, 1e7, 1.25e-4, 123456789.0, 0.001, 9999999.0, 1e21, math.inf, math.nan]
CMP = ["=", "!=", "<", "<=", ">", ">="]


def attr(name: str) -> Attr:
    return Attr("a", name)


NUM_LEAF = st.one_of(
    st.sampled_from(INTS).map(Literal), st.integers(MIN, MAX).map(Literal),
    st.sampled_from(FLOATS + [math.nan]).map(Literal),
    st.sampled_from(["x", "y", "d", "e"]).map(attr), st.sampled_from(["x", "y", "d", "e"]).map(attr))
STR_LEAF = st.one_of(st.sampled_from(["s", "t"]).map(attr), st.sampled_from(STRINGS).map(Literal))


INT_LEAF = st.one_of(st.sampled_from(INTS).map(Literal), st.sampled_from(["x", "y"]).map(attr))


def call(name: str, *args, type=None):
    """A strategy for ``Call(name, args)``: each arg a strategy, or a list of strategies (a variable count)."""
    parts = [a if not isinstance(a, list) else st.tuples(*a) for a in args]

    def build(*xs):
        flat = []
        for a, x in zip(args, xs, strict=True):
            flat.extend(x if isinstance(a, list) else (x,))
        return Call(name, tuple(flat), type=type)

    return st.builds(build, *parts)


def ints(depth: int):
    """A BIGINT expression: its kind is known at every row, so a coalesce/CASE of them has Spark's type."""
    if depth == 0:
        return INT_LEAF
    sub = ints(depth - 1)
    return st.one_of(
        INT_LEAF,
        st.builds(BinOp, st.sampled_from(["+", "-", "*", "%"]), sub, sub),
        call("abs", sub), call("length", st.one_of(strs(depth - 1), sub)),
        st.sampled_from(["BIGINT", "INT", "SMALLINT", "TINYINT"]).flatmap(
            lambda t: call("cast", st.one_of(sub, STR_LEAF, nums(depth - 1), conds(depth - 1)), type=t)),
        st.integers(1, 3).flatmap(lambda k: call("coalesce", [sub] * k)),
        case(depth, sub))


#: attributes of every column type: a coalesce/CASE over several has the type Spark widens them to
MIXED_LEAF = st.sampled_from(["x", "y", "d", "e", "s", "t"]).map(attr)


def mixed(depth: int):
    """A coalesce or CASE whose values are attributes (and expressions) of different column types, with no
    constant to tell their common type: Spark gives DOUBLE over BIGINT, a string among numbers their type; the
    engines learn it from the columns' types (``ir.kinds.typed``)."""
    sub = st.one_of(MIXED_LEAF, ints(depth - 1), nums(depth - 1)) if depth > 1 else MIXED_LEAF
    return st.one_of(st.integers(2, 3).flatmap(lambda k: call("coalesce", [sub] * k)), case(depth, sub))


def case(depth: int, values):
    """``CASE WHEN c THEN v ... [ELSE d] END`` over conditions of ``depth - 1``."""
    c = conds(depth - 1)
    return st.builds(lambda pairs, default: Call("case", tuple(x for p in pairs for x in p) + default),
                     st.lists(st.tuples(c, values), min_size=1, max_size=2),
                     st.one_of(st.just(()), values.map(lambda v: (v,))))


def strs(depth: int):
    """A STRING expression: string leaves and the string functions (over numbers too, which Spark casts)."""
    if depth == 0:
        return STR_LEAF
    sub = strs(depth - 1)
    text = st.one_of(sub, ints(depth - 1), st.sampled_from(TEXT_FLOATS).map(Literal), mixed(depth))
    pos = st.one_of(st.sampled_from(POSITIONS).map(Literal), INT_LEAF)
    return st.one_of(
        STR_LEAF,
        st.sampled_from(["lower", "upper"]).flatmap(lambda f: call(f, text)),
        st.integers(1, 3).flatmap(lambda k: call("concat", [text] * k)),
        st.sampled_from(["substring", "substr"]).flatmap(
            lambda f: st.one_of(call(f, text, pos), call(f, text, pos, pos))),
        call("cast", text, type="STRING"),
        st.integers(1, 3).flatmap(lambda k: call("coalesce", [sub] * k)),
        case(depth, sub))


def nums(depth: int):
    """A numeric expression (BIGINT or DOUBLE); a string may be an operand beside a number (Spark casts it)."""
    if depth == 0:
        return NUM_LEAF
    sub = nums(depth - 1)
    floats = st.sampled_from(FLOATS + [math.nan]).map(Literal)
    return st.one_of(
        NUM_LEAF,
        st.builds(BinOp, st.sampled_from(ARITH), sub, sub),
        st.builds(BinOp, st.sampled_from(ARITH), STR_LEAF, sub),
        st.builds(BinOp, st.sampled_from(ARITH), sub, STR_LEAF),
        st.builds(Unary, st.just("-"), st.one_of(sub, STR_LEAF)),
        # calls: a number beside a number, BIGINTs alone or with a DOUBLE constant (Spark's type is then known)
        st.builds(BinOp, st.sampled_from(ARITH), ints(depth - 1), sub),
        call("abs", st.one_of(sub, STR_LEAF)),
        call("cast", st.one_of(sub, STR_LEAF, conds(depth - 1)), type="DOUBLE"),
        st.builds(BinOp, st.sampled_from(ARITH), mixed(depth), sub),
        st.integers(1, 2).flatmap(lambda k: call("coalesce", [sub] * k, floats)),
        case(depth, st.one_of(floats, sub)).filter(lambda c: any(
            isinstance(v, Literal) and isinstance(v.value, float) for v in c.args[1::2])))


def conds(depth: int):
    """A condition: comparisons of numbers, of strings, of a string and a number; AND, OR, NOT; NULL; the forms
    IS [NOT] NULL, IN, BETWEEN, LIKE and a CAST to BOOLEAN."""
    n = nums(min(depth, 1))
    cmp = st.one_of(
        st.builds(BinOp, st.sampled_from(CMP), n, n),
        st.builds(BinOp, st.sampled_from(CMP), STR_LEAF, STR_LEAF),
        st.builds(BinOp, st.sampled_from(CMP), STR_LEAF, n),
        st.builds(BinOp, st.sampled_from(CMP), n, STR_LEAF))
    if depth == 0:
        return cmp
    s, i = strs(depth - 1), ints(depth - 1)
    value = st.one_of(n, s, i, st.just(Literal(None)))
    forms = st.one_of(
        st.sampled_from(["isnull", "isnotnull"]).flatmap(lambda f: call(f, value)),
        st.integers(1, 3).flatmap(lambda k: st.one_of(call("in", n, [st.one_of(n, STR_LEAF)] * k),
                                                      call("in", s, [st.one_of(s, STR_LEAF, i)] * k))),
        st.one_of(call("between", n, n, n), call("between", s, s, s), call("between", STR_LEAF, i, n)),
        call("like", st.one_of(s, i), st.one_of(st.sampled_from(PATTERNS).map(Literal), STR_LEAF)),
        call("cast", st.one_of(STR_LEAF, i, n), type="BOOLEAN"))
    cmp = st.one_of(cmp, forms, forms.map(lambda f: Unary("NOT", f)),
                    st.builds(BinOp, st.sampled_from(CMP), i, st.one_of(i, n)),
                    st.builds(BinOp, st.sampled_from(CMP), s, st.one_of(s, i)))
    sub = conds(depth - 1)
    return st.one_of(cmp, st.builds(BinOp, st.sampled_from(["AND", "OR"]), sub, sub),
                     st.builds(Unary, st.just("NOT"), sub), st.sampled_from([True, False, None]).map(Literal))


def values(kind: str):
    if kind == "bigint":
        return st.one_of(st.none(), st.sampled_from(INTS), st.integers(MIN, MAX))
    if kind == "double":
        return st.one_of(st.none(), st.sampled_from(FLOATS), st.floats(allow_nan=False, width=64))
    return st.one_of(st.none(), st.sampled_from(STRINGS), st.text(st.characters(exclude_categories=["Cs"]),
                                                                      max_size=3))


ROWS = st.lists(st.fixed_dictionaries({k: values(v) for k, v in TYPES.items()}), min_size=4, max_size=8)
EXPRS = st.lists(st.one_of(nums(2), conds(2), strs(2), ints(2), mixed(2)), min_size=40, max_size=60)


def canon(v):
    """A value with its kind (13 and 13.0 differ), NaN equal to NaN, -0.0 equal to 0.0."""
    if v is None:
        return None
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, int):
        return ("int", v)
    if isinstance(v, float):
        return ("float", "nan") if math.isnan(v) else ("float", v + 0.0)
    return ("str", v)


def spark_values(spark, exprs, rows, ansi: str) -> list[list]:
    """``[expression][row]`` values from ONE Spark query: the SQL filter's form of each expression as a column."""
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField(k, {"bigint": T.LongType(), "double": T.DoubleType(),
                                             "string": T.StringType()}[v]) for k, v in TYPES.items()]
                          + [T.StructField("_row", T.IntegerType())])
    df = spark.createDataFrame([tuple(r[k] for k in TYPES) + (i,) for i, r in enumerate(rows)], schema)
    cols = [f"{to_sql_expr(e, types=TYPES).sql(dialect=DIALECT)} AS c{k}" for k, e in enumerate(exprs)]
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", ansi)
    try:
        got = sorted(df.selectExpr("_row", *cols).collect(), key=lambda r: r["_row"])
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)
    return [[row[f"c{k}"] for row in got] for k in range(len(exprs))]


def scalar_values(expr, rows) -> list:
    f = compile_expr(typed(expr, TYPES))
    return [f({"a": dict(r)}) for r in rows]


def vector_values(expr, rows) -> list:
    fn = vectorize(typed(expr, TYPES))
    assert fn is not None, expr
    columns = {("a", k): pa.array([r[k] for r in rows], ARROW[v]) for k, v in TYPES.items()}
    return fn.values(columns, n=len(rows)).to_pylist()


def disagreements(spark, exprs, rows, ansi: str) -> list:
    out = []
    for expr, want in zip(exprs, spark_values(spark, exprs, rows, ansi), strict=True):
        sql = to_sql_expr(expr, types=TYPES).sql(dialect=DIALECT)
        for name, got in (("scalar", scalar_values(expr, rows)), ("vector", vector_values(expr, rows))):
            for row, w, g in zip(rows, want, got, strict=True):
                if canon(w) != canon(g):
                    out.append((name, sql, row, w, g))
    return out


@pytest.mark.spark
@settings(max_examples=4, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(EXPRS, ROWS, st.sampled_from(["true", "false"]))
def test_spark_sql_scalar_and_vector_agree(spark, exprs, rows, ansi):
    bad = disagreements(spark, exprs, rows, ansi)
    assert not bad, f"{len(bad)} disagreements, e.g. {bad[:3]}"


@settings(max_examples=10, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(EXPRS, ROWS)
def test_scalar_and_vector_agree(exprs, rows):
    """The two engine evaluators alone (no JVM), on more draws than the Spark test affords."""
    for expr in exprs:
        assert list(map(canon, scalar_values(expr, rows))) == list(map(canon, vector_values(expr, rows))), expr


def test_a_double_column_as_text():
    """Several rows of one column through a string rule (evaluated once per distinct value): -0.0 and 0.0 are
    distinct texts, as Java prints them."""
    expr = Call("concat", (Call("cast", (attr("d"),), type="STRING"), attr("s")))
    rows = [{**dict.fromkeys(TYPES), "d": d, "s": "|"} for d in (0.0, -0.0, 1e7, 1.5, 0.0, None, 1e-4)]
    want = ["0.0|", "-0.0|", "1.0E7|", "1.5|", "0.0|", None, "1.0E-4|"]
    assert scalar_values(expr, rows) == want
    assert vector_values(expr, rows) == want


CORNERS = [  # (expression, row, Spark's value): each a rule of docs/language.md, "Expression semantics"
    (BinOp("%", BinOp("-", attr("x"), attr("y")), Literal(3)), {"x": 1, "y": 3}, -2),  # truncates, not floors
    (BinOp("/", attr("x"), attr("y")), {"x": 7, "y": 0}, None),  # x / 0: NULL, never DIVIDE_BY_ZERO
    (BinOp("%", attr("d"), Literal(0)), {"d": 2.5}, None),
    (BinOp("/", attr("x"), Literal(2)), {"x": -7}, -3.5),  # BIGINT / BIGINT is DOUBLE
    (BinOp("*", attr("x"), Literal(4611686018427387904)), {"x": 2}, None),  # overflow: NULL
    (Unary("-", attr("x")), {"x": MIN}, None),
    (BinOp("%", attr("x"), Literal(-1)), {"x": MIN}, 0),
    (BinOp("!=", attr("s"), Literal(1)), {"s": "abc"}, None),  # an invalid cast: NULL, never CAST_INVALID_INPUT
    (BinOp("=", attr("s"), Literal(12)), {"s": " 12 "}, True),  # a string meets a number as the number's type
    (BinOp("=", attr("s"), Literal(1.5)), {"s": "1.5"}, True),
    (BinOp("=", attr("s"), Literal(1)), {"s": "1.5"}, None),  # not a BIGINT
    (BinOp("=", attr("x"), Literal(9007199254740992.0)), {"x": 2**53 + 1}, True),  # BIGINT vs DOUBLE: as DOUBLE
    (BinOp("=", Literal(math.nan), Literal(math.nan)), {}, True),  # NaN = NaN
    (BinOp(">", Literal(math.nan), Literal(math.inf)), {}, True),  # NaN above every number
    # functions and forms (each was answered otherwise by an evaluator before)
    (Call("cast", (Literal(math.nan),), type="BOOLEAN"), {}, True),  # NaN != 0, as Java's
    (Call("cast", (attr("d"),), type="STRING"), {"d": 1e7}, "1.0E7"),  # Java's Double.toString
    (Call("concat", (attr("s"), Literal(1.25e-4))), {"s": "v"}, "v1.25E-4"),
    (Call("like", (attr("s"), attr("t"))), {"s": "ab", "t": "a\\b"}, None),  # a stray escape: NULL, never an error
    (Call("like", (attr("s"), Literal("a\\b"))), {"s": "ab"}, None),
    (Call("like", (attr("s"), Literal("a\\_%"))), {"s": "a_\n"}, True),
    (Call("substring", (attr("s"), attr("x"))), {"s": "hello", "x": 2**31}, None),  # positions are INTs
    (Call("substring", (attr("s"), Literal(-7), Literal(4))), {"s": "hello"}, "he"),
    (Call("coalesce", (attr("x"), Literal(1.5))), {"x": 3}, 3.0),  # Spark's type for the whole: DOUBLE
    (BinOp("+", Call("coalesce", (attr("x"), Literal(1.5))), Literal(1)), {"x": MAX}, 9.223372036854776e18),
    (Call("case", (BinOp(">", attr("x"), Literal(0)), attr("x"), Literal(2.5))), {"x": 4}, 4.0),
    (Call("case", (Literal(None), Literal(1), Literal(2))), {}, 2),  # an untyped NULL condition
    # values of columns of different types: the type Spark widens them to, told by the columns (kinds.typed)
    (Call("coalesce", (attr("x"), attr("d"))), {"x": 3, "d": 1.5}, 3.0),
    (BinOp("+", Call("coalesce", (attr("x"), attr("d"))), attr("y")), {"x": MAX, "y": 1}, 9.223372036854776e18),
    (Call("concat", (Call("case", (BinOp(">", attr("x"), Literal(0)), attr("x"), attr("e"))), attr("s"))),
     {"x": 7, "e": 0.5, "s": "|"}, "7.0|"),
    (Call("cast", (attr("e"),), type="BIGINT"), {"e": -(2.0**63)}, MIN),
    (Call("abs", (attr("x"),)), {"x": MIN}, None),  # ANSI's abs overflows: NULL
    (Call("in", (attr("x"), Literal(1), Literal(None))), {"x": 2}, None),  # no item equal, one NULL
    (Call("in", (attr("s"), Literal(1), Literal("b"))), {"s": " 1"}, True),  # as the comparisons it means
    (Call("upper", (attr("s"),)), {"s": "straße"}, "STRASSE"),  # full case mapping, as Java's
    (Call("length", (attr("s"),)), {"s": "é😀"}, 2),  # characters
]
#: Spark refuses these before running (an analysis error); the engines give NULL
REFUSED = [(BinOp("+", attr("s"), attr("t")), {"s": "1", "t": "2"}, None),  # no arithmetic on two strings
           (Unary("NOT", attr("x")), {"x": 0}, None)]


@pytest.mark.parametrize("expr, row, want", CORNERS + REFUSED, ids=[str(k) for k in range(len(CORNERS + REFUSED))])
def test_corners_as_spark(expr, row, want):
    """The corners the issue names, pure (no JVM): each evaluator gives Spark's value (checked against Spark by
    the property test above and by ``test_corners_in_spark``)."""
    full = {k: row.get(k) for k in TYPES}
    assert canon(scalar_values(expr, [full])[0]) == canon(want)
    assert canon(vector_values(expr, [full])[0]) == canon(want)


@pytest.mark.spark
def test_corners_in_spark(spark):
    rows = [{k: row.get(k) for k in TYPES} for _, row, _ in CORNERS]
    exprs = [e for e, _, _ in CORNERS]
    for ansi in ("true", "false"):
        got = spark_values(spark, exprs, rows, ansi)
        assert [canon(got[k][k]) for k in range(len(CORNERS))] == [canon(w) for _, _, w in CORNERS]


# ------------------------------------------------------------------------------------------ real files, a stream
#: ``x / y`` in a local predicate (b's, in the SQL filter) and in a parameterized one (a and b, in the engine),
#: ``%`` with a negative left side in the local one; events with ``y = 0`` in every file.
ZERO_QUERY = ("PATTERN SEQ(A a, B b) WHERE [id] AND (b.x / b.y > 1 OR (b.x - b.y) % 3 = -2) AND a.x / b.y < 5 "
              "WITHIN 10 RETURN a.ts AS at, b.ts AS bt, a.id AS id")
ZERO_COLUMNS = ["type", "ts", "id", "x", "y"]
ZERO_FILES = [
    [{"type": "A", "ts": 1, "id": 0, "x": 4, "y": 1}, {"type": "B", "ts": 2, "id": 0, "x": 3, "y": 0},
     {"type": "B", "ts": 3, "id": 0, "x": 6, "y": 2},  # 6 / 2 > 1, 4 / 2 < 5: a match
     {"type": "A", "ts": 4, "id": 1, "x": 0, "y": 0},
     {"type": "B", "ts": 5, "id": 1, "x": 1, "y": 3}],  # (1 - 3) % 3 = -2 as Spark truncates (floor: 1): a match
    [{"type": "B", "ts": 6, "id": 1, "x": 5, "y": 0}, {"type": "A", "ts": 7, "id": 2, "x": 10, "y": 0},
     {"type": "B", "ts": 8, "id": 2, "x": 8, "y": -3}, {"type": "B", "ts": 9, "id": 2, "x": -1, "y": 1},
     {"type": "A", "ts": 10, "id": 3, "x": 1, "y": 0}, {"type": "B", "ts": 11, "id": 3, "x": 2, "y": 0},
     {"type": "B", "ts": 12, "id": 3, "x": 9, "y": 4},  # a match
     {"type": "B", "ts": 13, "id": 3, "x": -2, "y": 0}],  # local TRUE by %, then a.x / 0 in the engine: NULL
    [{"type": "B", "ts": 1000, "id": 9, "x": 0, "y": 0}],  # far ahead: every window closes
]


def _write(folder, chunks) -> None:
    import json
    import os

    folder.mkdir(parents=True)
    for k, chunk in enumerate(chunks):
        path = folder / f"part-{k:02d}.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in chunk))
        os.utime(path, (1_000_000 + k, 1_000_000 + k))  # the file source reads in modification-time order


def _zero_run(tmp_path, capsys, extra: list[str]) -> list[dict]:
    import json

    from sparkcep.cli import main

    _write(tmp_path / "in", ZERO_FILES)
    out = tmp_path / "out"
    code = main(["run", "-e", ZERO_QUERY, "--input", str(tmp_path / "in"), "--output", str(out), *extra])
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err and "DIVIDE_BY_ZERO" not in err, err
    return [json.loads(line) for f in sorted(out.glob("part-*")) for line in f.read_text().splitlines()]


def _zero_expected() -> list[dict]:
    import sparkcep
    from sparkcep.oracles.match import match_rows

    rows = [e for chunk in ZERO_FILES for e in chunk]
    return match_rows(sparkcep.compile(ZERO_QUERY).query, rows, ZERO_COLUMNS)


@pytest.mark.spark
def test_division_by_zero_runs_to_the_end_in_a_batch(spark, tmp_path, capsys):
    from sparkcep.spark.results import canonical

    want = _zero_expected()
    assert {(r["at"], r["bt"]) for r in want} == {(1, 3), (4, 5), (10, 12)}
    assert canonical(_zero_run(tmp_path, capsys, [])) == canonical(want)


@pytest.mark.spark
@pytest.mark.slow
def test_division_by_zero_runs_to_the_end_in_a_stream(spark, tmp_path, capsys):
    from sparkcep.spark.results import canonical

    got = _zero_run(tmp_path, capsys, ["--stream", "--once", "--files-per-trigger", "1", "--lateness", "10",
                                       "--checkpoint", str(tmp_path / "ck")])
    assert canonical(got) == canonical(_zero_expected())


STRING_QUERY = ("PATTERN SEQ(A a, B b) WHERE b.s != 1 AND a.x < b.x WITHIN 10 "
                "RETURN a.ts AS at, b.ts AS bt, coalesce(b.s, a.x) AS cs")
STRING_EVENTS = [("A", 1, 1, "0"), ("B", 2, 2, "abc"), ("B", 3, 3, " 1 "), ("B", 4, 4, "2"), ("B", 5, 5, "1.5"),
                 ("B", 6, 6, "-7")]


@pytest.mark.spark
def test_string_column_against_a_number_in_apply(spark):
    """``b.s != 1`` on a STRING column of a DataFrame (typed by the user, not by the reader): Spark's ANSI
    comparison raised CAST_INVALID_INPUT on ``'abc'``; the filter now casts with TRY_CAST as the engines do.
    ``coalesce(b.s, a.x)`` of a STRING and a BIGINT column is a BIGINT, as Spark (ANSI) types it."""
    import sparkcep
    from sparkcep.oracles.match import match_rows
    from sparkcep.spark.results import canonical

    df = spark.createDataFrame(STRING_EVENTS, "type string, ts bigint, x bigint, s string")
    q = sparkcep.compile(STRING_QUERY)
    got = [r.asDict() for r in q.apply(df).collect()]
    rows = [dict(zip(["type", "ts", "x", "s"], e, strict=True)) for e in STRING_EVENTS]
    want = match_rows(q.query, rows, ["type", "ts", "x", "s"], types={"x": "bigint", "s": "string"})
    assert {(r["at"], r["bt"], r["cs"]) for r in want} == {(1, 4, 2), (1, 6, -7)}  # 'abc', '1.5': NULL; ' 1 ' = 1
    assert canonical(got) == canonical(want)


def test_the_match_recognize_is_null_form_is_written_as_is_null():
    """MATCH_RECOGNIZE's front end parses ``x IS [NOT] NULL`` as ``Unary("IS NULL", x)``; the one SQL writer must
    not read that unary as a negation (it wrote ``TRY_SUBTRACT(0, x)``)."""
    assert to_sql_expr(Unary("IS NULL", attr("x"))).sql(dialect=DIALECT) == "(x) IS NULL"
    assert to_sql_expr(Unary("IS NOT NULL", attr("x"))).sql(dialect=DIALECT) == "NOT (x) IS NULL"
