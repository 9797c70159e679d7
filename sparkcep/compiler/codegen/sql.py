"""Spark SQL for the plan's Filter and Project, built as sqlglot trees (``spark`` dialect), never strings.

The filter computes ``_mask``: bit k is set iff the event passes component k's type test and its local
predicates (SASE's early filters), so one pass serves every component and the engines never re-test::

    SELECT type, ts, id, price,
           CASE WHEN type = 'A' AND price > 5 THEN 1 ELSE 0 END
         + CASE WHEN type = 'B' THEN 2 ELSE 0 END AS _mask
    FROM events
    WHERE type IN ('A', 'B')

A comparison reading an attribute of an ``ANY(...)`` component is TRUE when the attribute is missing
(SASE §2.2): ``COALESCE(cmp, TRUE)``.

Under ``strict_contiguity`` and ``partition_contiguity`` every event counts, even one that fills no
component: it breaks contiguity.  The filter then keeps every row (the type tests and constant conjuncts only
decide ``_mask``, 0 for non-components), and the engine orders each key's rows by ``ts`` and arrival and
numbers them itself.  For a batch DataFrame (``arrival=True``) it adds ``_arrival``,
``monotonically_increasing_id()`` (the input order: file splits, then rows), by which the adapter hands the
rows to the engine, so events of equal ``ts`` keep input order, as the oracle orders them (Spark refuses that
function on a stream: there, equal ``ts`` within a micro-batch keep the order Spark delivers them in)::

    SELECT type, ts, id, CASE WHEN type = 'A' THEN 1 ELSE 0 END + ... AS _mask,
           MONOTONICALLY_INCREASING_ID() AS _arrival
    FROM events
"""

from __future__ import annotations

import functools
import math
import re

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark

from sparkcep.compiler.plan.builder import MASK
from sparkcep.compiler.plan.nodes import Filter, Node, Project, Source, chain, operator_spec
from sparkcep.ir.ast import Attr, BinOp, Call, EquivTest, Expr, Func, Literal, Unary, and_all, walk
from sparkcep.ir.errors import CEPError
from sparkcep.ir.kinds import LIKE_PATTERN_VALID, like_pattern_valid, values_of
from sparkcep.ir.kinds import kind_of as _kind
from sparkcep.ir.spec import Component, reads_every_event

#: The input-order column of a filter that keeps every event (``ir.spec.reads_every_event``: a contiguity
#: strategy, NEXT steps; see the module docstring).
ARRIVAL = "_arrival"



class SparkSQL(Spark):
    """sqlglot's ``spark`` dialect, writing string literals so that Spark reads back exactly their value.

    Spark reads ``\\0`` followed by two octal digits as one octal escape (``'\\012'`` is a newline, not NUL
    then ``12``), so NUL is written ``\\u0000``; and Spark substitutes ``${name}`` anywhere in the SQL text
    before parsing it (``spark.sql.variable.substitute``, on by default: ``'${spark.app.name}'`` reads a
    config), so ``$`` is written ``\\u0024``.  Every other character is escaped as sqlglot's ``spark``
    dialect does (``\\'``, ``\\\\``, ``\\n``, octal for control characters), which Spark reads back as is.
    """


SparkSQL.ESCAPED_SEQUENCES = {**Spark.ESCAPED_SEQUENCES, "\0": "\\u0000", "$": "\\u0024"}

#: The dialect of every SQL text sparkcep generates (and of the tests that read it back).
DIALECT = SparkSQL

_CMP = {"=": exp.EQ, "!=": exp.NEQ, "<": exp.LT, "<=": exp.LTE, ">": exp.GT, ">=": exp.GTE}
#: Spark SQL's try_ arithmetic (NULL instead of an error on overflow, a zero divisor or an invalid cast):
#: docs/language.md, "Expression semantics".
_TRY = {"+": "TRY_ADD", "-": "TRY_SUBTRACT", "*": "TRY_MULTIPLY", "/": "TRY_DIVIDE", "%": "TRY_MOD"}
_INT32_MAX = 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def column(name: str) -> exp.Column:
    """A column by its name: a quoted identifier (backticks, a backtick in the name doubled) unless the name is
    a plain ASCII identifier that is not an SQL keyword (``null``, ``true``, ``end`` ... as column names are
    quoted).  A name holding ``${`` has no Spark SQL form (Spark substitutes variables inside quoted
    identifiers too): a CEPError."""
    if "${" in name:
        raise CEPError(f"the column name {name!r} holds '${{', which Spark SQL reads as a variable: rename it")
    plain = _PLAIN.fullmatch(name) is not None and name.upper() not in _KEYWORDS and _reads_back(name)
    return exp.column(name, quoted=not plain)


@functools.lru_cache(maxsize=4096)
def _reads_back(name: str) -> bool:
    """Whether Spark SQL's parser reads the bare ``name`` back as that column (not, e.g., ``if`` as the start
    of a function or another construct the tokenizer's keywords do not list)."""
    try:
        tree = sqlglot.parse_one(f"SELECT {name}, 1 FROM t WHERE {name} > 1", read=DIALECT)
    except sqlglot.errors.ParseError:
        return False
    first, where = tree.expressions[0], tree.args["where"].this
    return (isinstance(first, exp.Column) and first.name == name and isinstance(where, exp.GT)
            and isinstance(where.this, exp.Column) and where.this.name == name)


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Words that are not plain column names in Spark SQL: sqlglot's keywords of the dialect (NULL, TRUE, NOT,
#: CASE, END, ...) and words sparkcep has always quoted.
_KEYWORDS = frozenset({k for k in SparkSQL.Tokenizer.KEYWORDS if _PLAIN.fullmatch(k)}
                      | {"TYPE", "TS", "ORDER", "GROUP", "SELECT", "FROM", "WHERE", "TABLE", "WINDOW", "DATE",
                         "TIME"})


def literal(value, *, bigint: bool = False) -> exp.Expression:
    """A constant as Spark SQL reads back exactly the value the engines see: an integer as BIGINT (written
    plainly where Spark's INT literal widens to BIGINT anyway, ``CAST(n AS BIGINT)`` when ``bigint`` (constants
    computed with constants only) or beyond 32 bits), an integer beyond 64 bits and a fraction as DOUBLE
    (``1.5E0``, not Spark's DECIMAL ``1.5``), NaN and the infinities as ``CAST('NaN' AS DOUBLE)`` ..."""
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int) and _INT64_MIN <= value <= _INT64_MAX:
        if not bigint and -_INT32_MAX <= value <= _INT32_MAX:
            return exp.Literal.number(value)
        return exp.cast(exp.Literal.number(value), "BIGINT")
    if isinstance(value, (int, float)):
        value = float(value)
        if math.isnan(value) or math.isinf(value):
            text = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
            return exp.cast(exp.Literal.string(text), "DOUBLE")
        text = repr(abs(value))
        number = exp.Literal.number(text if "e" in text else f"{text}E0")
        return exp.Neg(this=number) if math.copysign(1.0, value) < 0 else number
    return exp.Literal.string(str(value))


def to_sql_expr(e: Expr, *, any_vars: frozenset[str] = frozenset(), types=None) -> exp.Expression:
    """An event-local AST expression as a sqlglot expression over the event's columns, with Spark SQL's
    ``try_`` operators (an error on one event is NULL, never a failed job).  ``types`` (column name → Spark
    type name, when the input's schema is known) lets a string column meeting a number be ``TRY_CAST`` to the
    number's type, as the engines do (docs/language.md, "Expression semantics")."""
    return _to_sql(e, any_vars, types or {})


def _to_sql(e: Expr, any_vars: frozenset[str], types, bigint: bool = False) -> exp.Expression:
    if isinstance(e, Literal):
        return literal(e.value, bigint=bigint)
    if isinstance(e, Attr):
        if e.index not in (None, "cur"):
            raise CEPError(f"no Spark SQL translation of {e.var}[{e.index}].{e.attr} in a one-event filter")
        return column(e.attr)
    if isinstance(e, Unary):
        if e.op == "NOT":
            return exp.Not(this=exp.paren(_to_sql(e.operand, any_vars, types)))
        if e.op in ("IS NULL", "IS NOT NULL"):  # MATCH_RECOGNIZE's form (the pattern language's is Call("isnull"))
            is_null = exp.Is(this=exp.paren(_to_sql(e.operand, any_vars, types)), expression=exp.Null())
            return is_null if e.op == "IS NULL" else exp.Not(this=is_null)
        v = e.operand.value if isinstance(e.operand, Literal) else None
        if type(v) is float or (type(v) is int and _INT64_MIN < v <= _INT64_MAX):
            return literal(0.0 - v if type(v) is float else -v)  # -5, not TRY_SUBTRACT(0, 5)
        if type(v) is int and v > _INT64_MAX:
            return literal(0.0 - float(v))
        inner = _to_sql(e.operand, any_vars, types, bigint=not _reads(e.operand))
        if _kind(e.operand, types) == "str":  # Spark negates a string as a DOUBLE
            inner = _try_cast(inner, "float")
        return exp.Anonymous(this="TRY_SUBTRACT", expressions=[literal(0, bigint=not _reads(e.operand)), inner])
    if isinstance(e, BinOp):
        if e.op in ("AND", "OR"):
            left = _to_sql(e.left, any_vars, types)
            right = _to_sql(e.right, any_vars, types)
            return exp.and_(left, right) if e.op == "AND" else exp.paren(exp.or_(left, right))
        const = e.op not in _CMP and not _reads(e.left) and not _reads(e.right)  # INT literals would stay INT
        left = _to_sql(e.left, any_vars, types, bigint=const)
        right = _to_sql(e.right, any_vars, types, bigint=const)
        kl, kr = _kind(e.left, types), _kind(e.right, types)
        if kl == "str" and kr in ("int", "float"):
            left = _try_cast(left, kr)
        elif kr == "str" and kl in ("int", "float"):
            right = _try_cast(right, kl)
        if e.op in _CMP:
            cmp = _CMP[e.op](this=_wrap(left), expression=_wrap(right))
            if any(isinstance(n, Attr) and n.var in any_vars for n in walk(e)):
                return exp.Coalesce(this=cmp, expressions=[exp.true()])
            return cmp
        return exp.Anonymous(this=_TRY[e.op], expressions=[left, right])
    if isinstance(e, Call):
        return _call_sql(e, any_vars, types)
    if isinstance(e, (Func, EquivTest)):
        raise CEPError(f"no Spark SQL translation of {type(e).__name__} in a one-event filter")
    raise CEPError(f"no Spark SQL translation of {type(e).__name__}")  # pragma: no cover


def _call_sql(e: Call, any_vars, types) -> exp.Expression:
    """A scalar function or special form (ast.Call) in Spark SQL; CAST as TRY_CAST and ``abs`` of a BIGINT as
    ``IF(x < 0, TRY_SUBTRACT(0, x), x)`` (ANSI's abs overflows on the smallest BIGINT): an error is NULL."""
    name = e.name
    if name in ("in", "between") and _mixed(e.args, types):
        # a string meets a number: as the comparisons they mean, which TRY_CAST the string (ANSI's implicit
        # cast raises CAST_INVALID_INPUT)
        x, *rest = e.args
        if name == "in":
            return exp.paren(_to_sql(or_all([BinOp("=", x, v) for v in rest]), any_vars, types))
        return _to_sql(BinOp("AND", BinOp(">=", x, rest[0]), BinOp("<=", x, rest[1])), any_vars, types)
    args = [_to_sql(a, any_vars, types) for a in e.args]
    if name in ("coalesce", "case"):  # a string among numbers is cast to their type, as ANSI's coercion does
        kind = _kind(e, types)
        values = {id(v) for v in values_of(e)}
        if kind in ("int", "float"):
            args = [_try_cast(sql, kind) if id(a) in values and _kind(a, types) == "str" else sql
                    for a, sql in zip(e.args, args, strict=True)]
    if name in ("substring", "substr") and len(args) in (2, 3):  # INT positions: NULL beyond 32 bits
        args = [args[0], *(sql if isinstance(a, Literal) and type(a.value) is int and abs(a.value) <= _INT32_MAX
                           else exp.TryCast(this=sql, to=exp.DataType.build("INT"), safe=True)
                           for a, sql in zip(e.args[1:], args[1:], strict=True))]
    if name == "isnull" and len(args) == 1:
        return exp.Is(this=_wrap(args[0]), expression=exp.Null())
    if name == "in" and len(args) >= 2:
        return exp.In(this=_wrap(args[0]), expressions=args[1:])
    if name == "between" and len(args) == 3:
        return exp.Between(this=_wrap(args[0]), low=_wrap(args[1]), high=_wrap(args[2]))
    if name == "like" and len(args) == 2:
        like = exp.Like(this=_wrap(args[0]), expression=_wrap(args[1]))
        pattern = e.args[1]
        if isinstance(pattern, Literal):
            return like if not isinstance(pattern.value, str) or like_pattern_valid(pattern.value) else exp.Null()
        # Spark raises on a pattern with a stray escape: NULL instead, as the engines give it
        valid = exp.RegexpLike(this=args[1], expression=exp.Literal.string(LIKE_PATTERN_VALID))
        return exp.Case(ifs=[exp.If(this=valid, true=like)])
    if name == "case" and len(args) >= 2:
        # Spark refuses an untyped NULL as a condition (DATATYPE_MISMATCH): a BOOLEAN NULL
        ifs = [exp.If(this=exp.cast(args[k], "BOOLEAN") if isinstance(args[k], exp.Null) else args[k],
                      true=args[k + 1]) for k in range(0, len(args) - 1, 2)]
        return exp.Case(ifs=ifs, default=args[-1] if len(args) % 2 else None)
    if name == "cast" and len(args) == 1 and e.type:
        try:
            to = exp.DataType.build(e.type, dialect=DIALECT)
        except Exception as err:  # noqa: BLE001 - sqlglot's parse errors
            raise CEPError(f"unknown type {e.type} in CAST") from err
        return exp.TryCast(this=args[0], to=to, safe=True)
    if name == "abs" and len(args) == 1 and _kind(e.args[0], types) == "str":  # Spark's abs of a string: DOUBLE
        return exp.Anonymous(this="ABS", expressions=[_try_cast(args[0], "float")])
    if name == "abs" and len(args) == 1 and _kind(e.args[0], types) == "int":
        x = args[0]
        return exp.If(this=exp.LT(this=_wrap(x), expression=exp.Literal.number(0)),
                      true=exp.Anonymous(this="TRY_SUBTRACT", expressions=[exp.Literal.number(0), x]), false=x)
    return exp.Anonymous(this=name.upper(), expressions=args)


def _mixed(args, types) -> bool:
    kinds = {_kind(a, types) for a in args}
    return "str" in kinds and bool(kinds & {"int", "float"})


def or_all(exprs) -> Expr:
    out = None
    for e in exprs:
        out = e if out is None else BinOp("OR", out, e)
    return out


def _reads(e: Expr) -> bool:
    return any(isinstance(n, Attr) for n in walk(e))


def _try_cast(x: exp.Expression, kind: str) -> exp.Expression:
    return exp.TryCast(this=x, to=exp.DataType.build("BIGINT" if kind == "int" else "DOUBLE"), safe=True)


def _wrap(x: exp.Expression) -> exp.Expression:
    return exp.paren(x) if isinstance(x, (exp.Binary, exp.Not)) and not isinstance(x, exp.Paren) else x


def type_test(type_col: str, types) -> exp.Expression:
    col = column(type_col)
    if len(types) == 1:
        return exp.EQ(this=col, expression=literal(types[0]))
    return exp.In(this=col, expressions=[literal(t) for t in types])


def component_test(c: Component, type_col: str, types=None) -> exp.Expression:
    test = type_test(type_col, c.types)
    if c.local is None:
        return test
    any_vars = frozenset({c.var}) if c.any_ else frozenset()
    return exp.and_(test, to_sql_expr(c.local, any_vars=any_vars, types=types))


def mask_expr(components, type_col: str, also: exp.Expression | None = None, types=None) -> exp.Expression:
    """``CASE WHEN test_0 THEN 1 ELSE 0 END + CASE WHEN test_1 THEN 2 ELSE 0 END + ...`` (each test AND
    ``also`` if given)."""
    def test(c):
        t = component_test(c, type_col, types)
        return t if also is None else exp.and_(t, also)

    terms = [exp.Case(ifs=[exp.If(this=test(c), true=exp.Literal.number(1 << k))],
                      default=exp.Literal.number(0))
             for k, c in enumerate(components)]
    out = terms[0]
    for t in terms[1:]:
        out = exp.Add(this=out, expression=t)
    return out


def filter_columns(plan: Node, attributes=None) -> list[str] | None:
    """The input columns :func:`filter_select` passes on (before ``_mask`` and ``_arrival``), or None for all
    (``SELECT *``: Project keeps every column and ``attributes`` are not known)."""
    nodes = chain(plan)
    source = next(n for n in nodes if isinstance(n, Source))
    proj = next(n for n in nodes if isinstance(n, Project))
    keep = proj.columns if proj.columns is not None else attributes
    if keep is None:
        return None
    return [source.type_col, source.ts_col] + [c for c in keep if c not in (source.type_col, source.ts_col)]


def filter_select(plan: Node, table: str = "events", attributes=None, arrival: bool = False,
                  drop: tuple[str, ...] = (), types=None, carry: tuple[str, ...] = ()) -> exp.Select:
    """The SELECT of the plan's Source → Filter → Project: events that may fill a component, with
    ``_mask``; ``attributes`` are the input's columns when Project keeps them all.  Under a contiguity
    strategy: every event, and with ``arrival`` (batch input only) the ``_arrival`` column.

    For a batch run (:meth:`sparkcep.api.CompiledQuery.apply`), in the same SELECT, so that Spark analyses
    one query instead of two: ``drop`` leaves out input columns the engine never reads.  ``types``: the input's
    column types where known (:func:`to_sql_expr`).  ``carry``: input columns passed on as they are whatever
    the query reads (a stream's arrival column, which the operator stamps its results with)."""
    nodes = chain(plan)
    source = next(n for n in nodes if isinstance(n, Source))
    filt = next(n for n in nodes if isinstance(n, Filter))
    cols = filter_columns(plan, attributes)
    if cols is not None:
        cols = [c for c in cols if c not in drop] + [c for c in carry if c not in cols]
    select = exp.select(*[column(c) for c in cols]) if cols is not None else exp.select(exp.Star())
    proj = next(n for n in nodes if isinstance(n, Project))
    for name, expr in proj.computed:  # one-event sub-expressions (project_event_expressions), as hidden columns
        select = select.select(exp.alias_(to_sql_expr(expr, types=types), name, quoted=False))
    residual = and_all(filt.residual)
    if reads_every_event(operator_spec(plan)):
        also = to_sql_expr(residual, types=types) if residual is not None else None
        mask = mask_expr(filt.components, source.type_col, exp.paren(also) if also is not None else None, types)
        select = select.select(exp.alias_(mask, MASK, quoted=False))
        if arrival:
            select = select.select(exp.alias_(exp.Anonymous(this="MONOTONICALLY_INCREASING_ID", expressions=[]),
                                              ARRIVAL, quoted=False))
        return select.from_(table)
    select = select.select(exp.alias_(mask_expr(filt.components, source.type_col, types=types), MASK, quoted=False))
    all_types = sorted({t for c in filt.components for t in c.types})
    cond = type_test(source.type_col, all_types)
    if residual is not None:
        cond = exp.and_(cond, to_sql_expr(residual, types=types))
    inner = select.from_(table).where(cond)
    return exp.select(exp.Star()).from_(exp.paren(inner).as_("candidates", quoted=False)).where(
        exp.NEQ(this=column(MASK), expression=exp.Literal.number(0)))


def filter_sql(plan: Node, table: str = "events", attributes=None, pretty: bool = True,
               arrival: bool = False, drop: tuple[str, ...] = (), types=None, carry: tuple[str, ...] = ()) -> str:
    return filter_select(plan, table, attributes, arrival, drop, types, carry).sql(dialect=DIALECT, pretty=pretty)

