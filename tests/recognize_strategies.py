"""Builders and hypothesis strategies for MATCH_RECOGNIZE specs and rows (shared by the recognize tests).

Builders (plain functions, no hypothesis): row patterns ``V("A")``, ``seq``, ``alt``, ``q``, ``plus``, ``star``,
``opt``, ``perm``, ``excl``, ``START``/``END``/``EMPTY``; expressions ``col``, ``lit``, ``op``, ``prev``,
``nxt``, ``first``, ``last``, ``agg``, ``classifier``; :func:`make_spec` fills in ``variables`` and
``output`` the way the front end does (ONE ROW: partition columns then measures; ALL ROWS: partition
columns, ORDER BY columns, measures, then the remaining input columns, not the hidden ``__`` ones).

Strategies: :func:`specs` (random patterns over every construct, DEFINEs over a few int columns with
PREV/NEXT/FIRST/LAST/aggregates, measures, ROWS PER MATCH, AFTER MATCH SKIP, SUBSET, WITHIN) and
:func:`partition_rows` (rows of one key with ties and NULLs, ``__ts`` set); :func:`cases` draws both.
"""

from __future__ import annotations

import functools

from hypothesis import strategies as st

from sparkcep.ir import recognize as R
from sparkcep.ir.ast import Attr, BinOp, Func, Literal, Unary

# ----------------------------------------------------------------------------------------------- row patterns


def V(name: str) -> R.PVar:  # noqa: N802 (a pattern variable reads best in capitals)
    return R.PVar(name)


def seq(*items) -> R.PConcat:
    return R.PConcat(tuple(items))


def alt(*items) -> R.PAlt:
    return R.PAlt(tuple(items))


def q(inner, lo: int, hi: int | None, greedy: bool = True) -> R.PQuant:
    return R.PQuant(inner, lo, hi, greedy)


def plus(inner, greedy: bool = True) -> R.PQuant:
    return R.PQuant(inner, 1, None, greedy)


def star(inner, greedy: bool = True) -> R.PQuant:
    return R.PQuant(inner, 0, None, greedy)


def opt(inner, greedy: bool = True) -> R.PQuant:
    return R.PQuant(inner, 0, 1, greedy)


def perm(*items) -> R.PPermute:
    return R.PPermute(tuple(items))


def excl(inner) -> R.PExclude:
    return R.PExclude(inner)


START = R.PAnchor("start")
END = R.PAnchor("end")
EMPTY = R.PEmpty()


def pattern_variables(p) -> tuple[str, ...]:
    """The primary variables of a row pattern, in order of first appearance."""
    out: list[str] = []

    def walk(n):
        if isinstance(n, R.PVar):
            if n.name not in out:
                out.append(n.name)
        elif isinstance(n, (R.PConcat, R.PPermute)):
            for i in n.items:
                walk(i)
        elif isinstance(n, R.PAlt):
            for i in n.alternatives:
                walk(i)
        elif isinstance(n, (R.PQuant, R.PExclude)):
            walk(n.inner)

    walk(p)
    return tuple(out)


def strip_exclusion(p):
    """``p`` without its ``{- -}`` (the same matches: exclusion only changes what ALL ROWS outputs)."""
    if isinstance(p, R.PExclude):
        return strip_exclusion(p.inner)
    if isinstance(p, (R.PConcat, R.PPermute)):
        return type(p)(tuple(strip_exclusion(i) for i in p.items))
    if isinstance(p, R.PAlt):
        return R.PAlt(tuple(strip_exclusion(i) for i in p.alternatives))
    if isinstance(p, R.PQuant):
        return R.PQuant(strip_exclusion(p.inner), p.min, p.max, p.greedy)
    return p


def has_exclusion(p) -> bool:
    if isinstance(p, R.PExclude):
        return True
    if isinstance(p, (R.PConcat, R.PPermute)):
        return any(has_exclusion(i) for i in p.items)
    if isinstance(p, R.PAlt):
        return any(has_exclusion(i) for i in p.alternatives)
    if isinstance(p, R.PQuant):
        return has_exclusion(p.inner)
    return False


# ----------------------------------------------------------------------------------------------- expressions


def col(name: str, var: str | None = None) -> Attr:
    return Attr(var, name)


def lit(value) -> Literal:
    return Literal(value)


def op(o: str, a, b) -> BinOp:
    return BinOp(o, a, b)


def and_(*xs):
    return functools.reduce(lambda a, b: BinOp("AND", a, b), xs)


def or_(*xs):
    return functools.reduce(lambda a, b: BinOp("OR", a, b), xs)


def is_null(e) -> Unary:
    return Unary("IS NULL", e)


def not_(e) -> Unary:
    return Unary("NOT", e)


def prev(e, k: int = 1) -> R.Nav:
    return R.Nav("PREV", e, k)


def nxt(e, k: int = 1) -> R.Nav:
    return R.Nav("NEXT", e, k)


def first(e, k: int = 0, sem: str | None = None) -> R.Nav:
    return R.Nav("FIRST", e, k, sem)


def last(e, k: int = 0, sem: str | None = None) -> R.Nav:
    return R.Nav("LAST", e, k, sem)


def agg(func: str, arg=None, var: str | None = None, sem: str | None = None) -> R.Agg:
    return R.Agg(func, arg, var, sem)


def classifier(var: str | None = None, sem: str | None = None) -> R.Classifier:
    return R.Classifier(var, sem)


def func(name: str, *args) -> Func:
    return Func(name, tuple(args))


# ----------------------------------------------------------------------------------------------- specs


def make_spec(pattern, *, columns, defines=(), measures=(), rows_per_match=R.ONE_ROW, skip=None,
              partition_by=(), order_by=("ts",), subsets=(), within=None) -> R.RecognizeSpec:
    """A spec as the front end would build it; ``measures`` are ``(name, expr)`` pairs, ``order_by`` column
    names or :class:`OrderItem`; ``columns`` the input columns in source order (without ``__ts``)."""
    order = tuple(o if isinstance(o, R.OrderItem) else R.OrderItem(o) for o in order_by)
    ms = tuple(R.Measure(e, n) for n, e in measures)
    names = [m.name for m in ms]
    if rows_per_match == R.ONE_ROW:
        output = (*partition_by, *names)
    else:
        lead = [*partition_by, *(o.column for o in order if o.column not in partition_by)]
        output = (*lead, *names, *(c for c in columns if c not in lead and c not in names
                                    and not c.startswith("__")))
    return R.RecognizeSpec(
        pattern=pattern, variables=pattern_variables(pattern), defines=tuple(defines),
        subsets=tuple((n, tuple(m)) for n, m in subsets), measures=ms, rows_per_match=rows_per_match,
        skip=skip or R.Skip(), partition_by=tuple(partition_by), order_by=order, columns=tuple(columns),
        output=tuple(output), within=within)


def with_rows_per_match(spec: R.RecognizeSpec, rows_per_match: str) -> R.RecognizeSpec:
    """``spec`` with another ROWS PER MATCH option (and the output columns that go with it)."""
    return make_spec(spec.pattern, columns=spec.columns, defines=spec.defines,
                     measures=[(m.name, m.expr) for m in spec.measures], rows_per_match=rows_per_match,
                     skip=spec.skip, partition_by=spec.partition_by, order_by=spec.order_by,
                     subsets=spec.subsets, within=spec.within)


# ----------------------------------------------------------------------------------------------- strategies

VARS = ("A", "B", "C")
#: the per-row column Spark would compute for a RowExpr (here ``x + y``)
RX = "__rx0"
INT_COLS = ("x", "y")
#: columns of the random rows: a partition key, the time column, two int attributes
COLUMNS = ("k", "t", "x", "y", RX)


def _leaf(variables):
    return st.sampled_from(variables).map(V)


def row_patterns(variables=VARS, max_leaves: int = 4, streaming: bool = False):
    """Random row patterns over ``variables`` with every construct: concatenation, alternation, greedy and
    reluctant quantifiers (``* + ?`` and bounded), PERMUTE, exclusion, anchors and the empty pattern
    (``streaming``: no ``$``, which streaming refuses)."""
    specials = (START, EMPTY) if streaming else (START, END, EMPTY)
    leaves = st.one_of(*[_leaf(variables)] * 8, st.sampled_from(specials))

    def extend(children):
        bounds = st.sampled_from(((0, None), (1, None), (0, 1), (2, 2), (1, 3), (0, 2), (2, None)))
        lists = st.lists(children, min_size=2, max_size=3)
        quant = st.tuples(children, bounds, st.booleans()).map(lambda a: q(a[0], a[1][0], a[1][1], a[2]))
        return st.one_of(
            lists.map(lambda xs: seq(*xs)), lists.map(lambda xs: seq(*xs)), lists.map(lambda xs: seq(*xs)),
            lists.map(lambda xs: alt(*xs)), lists.map(lambda xs: alt(*xs)),
            quant, quant, quant,
            lists.map(lambda xs: perm(*xs)),
            children.map(excl),
        )

    return st.recursive(leaves, extend, max_leaves=max_leaves)


def _number_exprs(draw, variables, subsets, streaming=False):
    """An int-valued expression over one row reference: a column of the current row, of a variable, a
    PREV/NEXT/FIRST/LAST navigation, an aggregate, or a constant."""
    refs = [None, *variables, *(n for n, _ in subsets)]
    var = draw(st.sampled_from(refs))
    c = draw(st.sampled_from(INT_COLS))
    kinds = ["col", "col", "prev", "first", "last", "agg", "count", "lit", "arith", "func", "rowexpr"]
    if not streaming:
        kinds.append("next")
    kind = draw(st.sampled_from(kinds))
    if kind == "col":
        return col(c, var)
    if kind == "prev":
        return prev(col(c, var), draw(st.integers(1, 2)))
    if kind == "next":
        return nxt(col(c, var), draw(st.integers(1, 2)))
    if kind == "first":
        return first(col(c, var), draw(st.integers(0, 1)))
    if kind == "last":
        return last(col(c, var), draw(st.integers(0, 1)))
    if kind == "agg":
        f = draw(st.sampled_from(("sum", "min", "max", "avg", "count")))
        return agg(f, col(c, var), var)
    if kind == "count":
        return agg("count", None, var)
    if kind == "func":
        f = draw(st.sampled_from(("abs", "coalesce", "greatest", "least", "if")))
        other = col(draw(st.sampled_from(INT_COLS)), draw(st.sampled_from(refs)))
        if f == "abs":
            return func("abs", op("-", col(c, var), lit(2)))
        if f == "if":
            return func("if", op(">", col(c, var), other), col(c, var), lit(draw(st.integers(0, 3))))
        return func(f, col(c, var), other)
    if kind == "rowexpr":
        return R.RowExpr("x + y", RX, var)
    if kind == "arith":
        # / and % by 0 are NULL (try_divide), / is a double: the reference and the engine share scalar's ops
        return op(draw(st.sampled_from(("+", "-", "+", "-", "*", "/", "%"))), col(c, var),
                  lit(draw(st.integers(-2, 2))))
    return lit(draw(st.integers(-1, 4)))


@st.composite
def conditions(draw, variables=VARS, subsets=(), streaming=False):
    """A random DEFINE condition: comparisons of the expressions above, combined with AND/OR/NOT,
    sometimes about CLASSIFIER() or IS NULL."""
    def atom():
        kind = draw(st.sampled_from(("cmp", "cmp", "cmp", "null", "class")))
        if kind == "null":
            return is_null(_number_exprs(draw, variables, subsets, streaming))
        if kind == "class":
            return op("=", prev(classifier()), lit(draw(st.sampled_from(variables))))
        return op(draw(st.sampled_from(("<", "<=", ">", ">=", "=", "!="))),
                  _number_exprs(draw, variables, subsets, streaming),
                  _number_exprs(draw, variables, subsets, streaming))

    cond = atom()
    for _ in range(draw(st.integers(0, 1))):
        cond = op(draw(st.sampled_from(("AND", "OR"))), cond, atom())
    if draw(st.integers(0, 4)) == 0:
        cond = not_(cond)
    return cond


@st.composite
def simple_conditions(draw, variables=VARS):
    """A selective DEFINE of the usual kind: the current row's column against a constant, the previous row
    or another variable's last row (``x >= 2``, ``x < PREV(x)``, ``y = A.y``)."""
    c = draw(st.sampled_from(INT_COLS))
    other = draw(st.sampled_from(("lit", "lit", "prev", "var")))
    rhs = (lit(draw(st.integers(0, 3))) if other == "lit" else prev(col(c)) if other == "prev"
           else col(c, draw(st.sampled_from(variables))))
    return op(draw(st.sampled_from(("<", "<=", ">", ">=", "=", "!="))), col(c), rhs)


@st.composite
def measure_lists(draw, variables, subsets, rows_per_match, streaming=False):
    """A few measures: navigation, aggregates (RUNNING/FINAL), CLASSIFIER, MATCH_NUMBER."""
    refs = [None, *variables, *(n for n, _ in subsets)]
    sems = (None, "FINAL", "RUNNING") if rows_per_match != R.ONE_ROW else (None, "FINAL")
    out = [("mn", R.MatchNumber()), ("cls", classifier(draw(st.sampled_from(refs)), draw(st.sampled_from(sems))))]
    for i in range(draw(st.integers(1, 3))):
        var = draw(st.sampled_from(refs))
        c = draw(st.sampled_from(INT_COLS))
        sem = draw(st.sampled_from(sems))
        kinds = ("col", "first", "last", "agg", "count", "prev", *(() if streaming else ("next",)))
        kind = draw(st.sampled_from(kinds))
        if kind == "col":
            e = col(c, var)
        elif kind == "first":
            e = first(col(c, var), draw(st.integers(0, 1)), sem)
        elif kind == "last":
            e = last(col(c, var), draw(st.integers(0, 1)), sem)
        elif kind == "agg":
            e = agg(draw(st.sampled_from(("sum", "min", "max", "avg", "count"))), col(c, var), var, sem)
        elif kind == "count":
            e = agg("count", None, var, sem)
        elif kind == "next":
            e = nxt(first(col(c, var), 0, sem), draw(st.integers(1, 2)))
        else:
            e = prev(last(col(c, var), 0, sem), draw(st.integers(1, 2)))
        out.append((f"m{i}", e))
    return out


@st.composite
def specs(draw, max_leaves: int = 4, within: bool = True, streaming: bool = False, descending: bool = False):
    """A random spec over ``COLUMNS`` (partition key ``k``, time ``t``, ints ``x``, ``y``); ``streaming``:
    none of what streaming refuses (``$``, NEXT). Half of the specs have only selective DEFINEs of the
    usual kind (:func:`simple_conditions`), the others any (:func:`conditions`). ``descending``: the time
    column is sometimes ordered DESC (batch only; the rows must then be put in :func:`sort_rows` order)."""
    pattern = draw(row_patterns(VARS, max_leaves, streaming))
    variables = pattern_variables(pattern)
    if not variables:
        pattern = seq(pattern, V("A"))
        variables = ("A",)
    subsets = ()
    if len(variables) >= 2 and draw(st.booleans()):
        subsets = (("U", tuple(draw(st.lists(st.sampled_from(variables), min_size=1, max_size=2,
                                                 unique=True)))),)
    cond = simple_conditions(variables) if draw(st.booleans()) else conditions(variables, subsets, streaming)
    defines = tuple((v, draw(cond)) for v in variables if draw(st.integers(0, 2)))
    rows_per_match = draw(st.sampled_from(R.ROWS_PER_MATCH))
    if rows_per_match == R.ALL_ROWS_WITH_UNMATCHED:
        pattern = strip_exclusion(pattern)  # the standard refuses exclusion WITH UNMATCHED ROWS
    kind = draw(st.sampled_from((R.SKIP_PAST_LAST_ROW, R.SKIP_TO_NEXT_ROW, R.SKIP_TO_FIRST, R.SKIP_TO_LAST)))
    skip = R.Skip(kind)
    if kind in (R.SKIP_TO_FIRST, R.SKIP_TO_LAST):
        skip = R.Skip(kind, draw(st.sampled_from([*variables, *(n for n, _ in subsets)])))
    measures = draw(measure_lists(variables, subsets, rows_per_match, streaming))
    w = draw(st.one_of(st.none(), st.integers(1, 6))) if within else None
    return make_spec(pattern, columns=COLUMNS, defines=defines, measures=measures,
                     rows_per_match=rows_per_match, skip=skip, partition_by=("k",),
                     order_by=(R.OrderItem("t", ascending=not (descending and draw(st.booleans()))),),
                     subsets=subsets, within=w)


def _row(k, t, x, y):
    return {"k": k, "t": t, "x": x, "y": y, RX: None if x is None or y is None else x + y, "__ts": t}


@st.composite
def partition_rows(draw, key: int = 0, max_rows: int = 8):
    """Rows of one partition in the engine's order (``t`` ascending, ties by ``x`` then ``y``, NULLs
    first): ties on ``t`` and NULL ``x``/``y`` are common."""
    n = draw(st.one_of(st.integers(0, max_rows), st.integers(max_rows // 2, max_rows)))
    ts = sorted(draw(st.lists(st.integers(0, 8), min_size=n, max_size=n)))
    vals = st.sampled_from((0, 1, 2, 3, None, 1, 2))
    return order_rows([_row(key, t, draw(vals), draw(vals)) for t in ts])


def order_rows(rows):
    """``rows`` in the partition order of :func:`make_spec` specs over ``COLUMNS`` (independent of the
    engine's and the reference's ``sort`` functions): ``t``, then ``x``, ``y`` ascending, NULLs first."""
    return sorted(rows, key=lambda r: (r["t"], r["x"] is not None, r["x"] or 0, r["y"] is not None, r["y"] or 0))
