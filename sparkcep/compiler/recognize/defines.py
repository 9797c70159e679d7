"""What the batch path ships to its Python worker: :func:`worker_spec`.

After Spark's sort, the worker needs only the columns the engine reads for matching and output: the sort's
tiebreak columns and the time column (without WITHIN) are not shipped.

A DEFINE that reads only the row being labelled, made of comparisons between columns and literals of one kind
(STRING, an integer type, BOOLEAN), ``AND``/``OR``/``NOT`` and ``IS [NOT] NULL``, is the same condition in
Spark SQL (three-valued logic, NULL = false; strings compared by code point as Python does).  The batch path
then ships one BOOLEAN column per such variable to the Python worker instead of the columns only these
conditions read (a STRING column becomes a bit per row: less to convert to Arrow), and the engine reads the
variable's truth from it.  DOUBLE columns are left to the engine (NaN is ordered as a value by the row
evaluator and declined by the columnar kernel), and so is arithmetic (overflow rules).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlglot import exp

from sparkcep.compiler.codegen.sql import column, literal
from sparkcep.compiler.recognize.analysis import walk
from sparkcep.ir import recognize as rx
from sparkcep.ir.ast import Attr, BinOp, Literal, Unary

__all__ = ["WorkerSpec", "describe_worker", "worker_spec"]

_KINDS = {"string": "str", "bigint": "int", "int": "int", "smallint": "int", "tinyint": "int",
          "boolean": "bool"}
_CMP = {"=": exp.EQ, "!=": exp.NEQ, "<": exp.LT, "<=": exp.LTE, ">": exp.GT, ">=": exp.GTE}


@dataclass(frozen=True)
class WorkerSpec:
    """The spec the batch worker runs after Spark's sort: ``spec.columns`` only what it reads, each DEFINE of
    ``computed`` reading its BOOLEAN column; ``computed``: ``(variable, column, Spark SQL)`` of the conditions
    Spark evaluates after the sort (never NULL: ``COALESCE(condition, FALSE)``)."""

    spec: rx.RecognizeSpec
    computed: tuple[tuple[str, str, str], ...]


def _kind(e, types: dict[str, str]) -> str | None:
    if isinstance(e, Literal):
        v = e.value
        if isinstance(v, bool):
            return "bool"
        if isinstance(v, int):
            return "int" if -(2 ** 63) <= v < 2 ** 63 else None
        return "str" if isinstance(v, str) else None
    if isinstance(e, Attr):
        return _KINDS.get(types.get(e.attr, ""))
    return None


def _condition(e, var: str, types: dict[str, str]) -> bool:
    """Whether ``e`` (a DEFINE of ``var``) is a condition Spark computes as the engine does."""
    if isinstance(e, Attr):
        return e.index is None and e.var in (None, var) and _kind(e, types) == "bool"
    if isinstance(e, Unary):
        if e.op == "NOT":
            return _condition(e.operand, var, types)
        if e.op in ("IS NULL", "IS NOT NULL"):
            a = e.operand
            return isinstance(a, Attr) and a.index is None and a.var in (None, var) and a.attr in types
        return False
    if isinstance(e, BinOp):
        if e.op in ("AND", "OR"):
            return _condition(e.left, var, types) and _condition(e.right, var, types)
        if e.op in _CMP:
            sides = (e.left, e.right)
            if not any(isinstance(s, Attr) for s in sides):
                return False
            if any(isinstance(s, Attr) and (s.index is not None or s.var not in (None, var)) for s in sides):
                return False
            kinds = {_kind(s, types) for s in sides}
            return len(kinds) == 1 and None not in kinds
    return False


def _sql(e) -> exp.Expression:
    """A condition :func:`_condition` accepts as a sqlglot tree (Spark SQL)."""
    if isinstance(e, Literal):
        return literal(e.value)
    if isinstance(e, Attr):
        return column(e.attr)
    if isinstance(e, Unary):
        inner = _wrap(_sql(e.operand))
        if e.op == "NOT":
            return exp.Not(this=inner)
        is_null = exp.Is(this=inner, expression=exp.Null())
        return is_null if e.op == "IS NULL" else exp.Not(this=is_null)
    left, right = _wrap(_sql(e.left)), _wrap(_sql(e.right))
    if e.op == "AND":
        return exp.And(this=left, expression=right)
    if e.op == "OR":
        return exp.Or(this=left, expression=right)
    return _CMP[e.op](this=left, expression=right)


def _wrap(x: exp.Expression) -> exp.Expression:
    return x if isinstance(x, (exp.Column, exp.Literal, exp.Boolean, exp.Null, exp.Neg, exp.Cast)) else exp.paren(x)


def worker_spec(spec: rx.RecognizeSpec, schema: dict[str, str]) -> WorkerSpec | None:
    """What the batch worker runs (see the module docstring) when that spares it at least one column of
    ``spec.columns``, else None.  ``schema``: the input columns' Spark types (``simpleString``)."""
    types = {c: t.lower() for c, t in schema.items()}
    taken = {c.lower() for c in schema}
    computed: list[tuple[str, str, str]] = []
    defines = []
    for v, e in spec.defines:
        if _condition(e, v, types):
            name = f"__def{len(computed)}"
            while name.lower() in taken:
                name = "_" + name
            taken.add(name.lower())
            sql = exp.func("COALESCE", _sql(e), exp.false()).sql(dialect="spark")
            computed.append((v, name, sql))
            defines.append((v, Attr(None, name)))
        else:
            defines.append((v, e))
    rewritten = replace(spec, defines=tuple(defines))
    needed = _read(rewritten) | set(spec.partition_by) | set(spec.output)
    if spec.within is not None or spec.rows_per_match != rx.ONE_ROW:
        needed |= {o.column for o in spec.order_by}
    kept = [c for c in spec.columns if c in needed and c != spec.time_column]
    if len(kept) == len([c for c in spec.columns if c != spec.time_column]):
        return None  # every column is still read: nothing spared
    ts = (spec.time_column,) if spec.time_column in spec.columns else ()
    columns = (*kept, *(name for _, name, _ in computed), *ts)
    return WorkerSpec(replace(rewritten, columns=columns), tuple(computed))


def _read(spec: rx.RecognizeSpec) -> set[str]:
    out: set[str] = set()
    for e in [c for _, c in spec.defines] + [m.expr for m in spec.measures]:
        for node in walk(e):
            if isinstance(node, Attr):
                out.add(node.attr)
            elif isinstance(node, rx.RowExpr):
                out.add(node.column)
    return out


def describe_worker(spec: rx.RecognizeSpec, schema: dict[str, str]) -> list[str]:
    """Explain's lines on what the batch worker reads (none when it reads every column of ``spec``)."""
    w = worker_spec(spec, schema)
    if w is None:
        return []
    shown = [c for c in w.spec.columns if c != spec.time_column]
    out = [f"batch: the worker reads {', '.join(shown)} after Spark's sort (by the columns above: where every "
           "one is a number, string, boolean or time)"]
    if w.computed:
        out.append(f"batch: Spark computes DEFINE {', '.join(f'{v} as {c}' for v, c, _ in w.computed)} after "
                   "the sort, one BOOLEAN column each")
    return out
