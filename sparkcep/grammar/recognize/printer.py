"""A parsed ``MATCH_RECOGNIZE`` statement printed back as SQL (explain shows it; ``parse_recognize`` reads it back
to an equal IR when the clauses were written in the standard's order).

Expressions are printed fully parenthesized; per-row sub-expressions (``RowExpr``) get their qualifier back;
identifiers are quoted with backticks only when they need it; the statement around the clause is the user's, as
written (``outer_sql``).  The text is for reading, never given to Spark (Spark runs ``outer_sql`` and the
sqlglot-generated ``RowExpr.sql``).

Example::

    >>> from sparkcep.grammar.recognize import parse_recognize
    >>> q = parse_recognize("select * from t match_recognize (order by ts pattern (a b+) "
    ...                     "define b as b.x > prev(b.x))")
    >>> print(recognize_text(q))
    select * from t MATCH_RECOGNIZE (
      ORDER BY ts
      ONE ROW PER MATCH
      AFTER MATCH SKIP PAST LAST ROW
      PATTERN (a b+)
      DEFINE
        b AS (b.x > PREV(b.x, 1))
    )
"""

from __future__ import annotations

import re

from sqlglot import exp

from sparkcep.grammar.recognize.expressions import parse_sql
from sparkcep.grammar.recognize.pattern import pattern_text
from sparkcep.ir import recognize as rx
from sparkcep.ir.ast import Attr, BinOp, Func, Literal, Unary
from sparkcep.ir.limits import deeply

__all__ = ["recognize_text", "expression_text"]

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_UNITS = {"ms": "MILLISECOND", "s": "SECOND", "min": "MINUTE", "h": "HOUR", "d": "DAY"}


def _name(name: str) -> str:
    return name if _PLAIN.match(name) else "`" + name.replace("`", "``") + "`"


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return exp.Literal.string(value).sql(dialect="spark")
    return repr(value)


@deeply
def expression_text(e: object) -> str:
    """An IR expression of MATCH_RECOGNIZE as Spark SQL text."""
    if isinstance(e, Literal):
        return _literal(e.value)
    if isinstance(e, Attr):
        return _name(e.attr) if e.var is None else f"{_name(e.var)}.{_name(e.attr)}"
    if isinstance(e, Unary):
        inner = expression_text(e.operand)
        if e.op in ("IS NULL", "IS NOT NULL"):
            return f"({inner} {e.op})"
        return f"(NOT {inner})" if e.op == "NOT" else f"(-{inner})"
    if isinstance(e, BinOp):
        return f"({expression_text(e.left)} {e.op} {expression_text(e.right)})"
    if isinstance(e, Func):
        return f"{e.name}({', '.join(expression_text(a) for a in e.args)})"
    prefix = f"{e.semantics} " if getattr(e, "semantics", None) else ""
    if isinstance(e, rx.Nav):
        return f"{prefix}{e.kind}({expression_text(e.arg)}, {e.offset})"
    if isinstance(e, rx.Classifier):
        return f"{prefix}CLASSIFIER({'' if e.var is None else _name(e.var)})"
    if isinstance(e, rx.MatchNumber):
        return "MATCH_NUMBER()"
    if isinstance(e, rx.Agg):
        if e.arg is None:
            return f"{prefix}COUNT({'*' if e.var is None else _name(e.var) + '.*'})"
        return f"{prefix}{e.func.upper()}({expression_text(e.arg)})"
    if isinstance(e, rx.RowExpr):
        (tree,) = parse_sql(e.sql)
        if e.var is not None:
            for column in tree.find_all(exp.Column):
                column.set("table", exp.to_identifier(e.var))
        return f"({tree.sql(dialect='spark')})"
    raise TypeError(f"not a MATCH_RECOGNIZE expression: {e!r}")


def _within(w) -> str:
    if w.unit is None:
        return f"WITHIN {w.value}"
    return f"WITHIN INTERVAL '{w.value}' {_UNITS[w.unit]}"


def _listed(items) -> list[str]:
    items = list(items)
    return [f"  {item}," for item in items[:-1]] + [f"  {items[-1]}"]


def clause_text(q: rx.Recognize) -> list[str]:
    """The lines of ``MATCH_RECOGNIZE ( ... )``, clauses in the standard's order."""
    lines = []
    if q.partition_by:
        lines.append("PARTITION BY " + ", ".join(_name(c) for c in q.partition_by))
    if q.order_by:
        items = []
        for o in q.order_by:
            item = _name(o.column) + ("" if o.ascending else " DESC")
            if o.nulls_first is not None:
                item += " NULLS FIRST" if o.nulls_first else " NULLS LAST"
            items.append(item)
        lines.append("ORDER BY " + ", ".join(items))
    if q.measures:
        lines += ["MEASURES", *_listed(f"{expression_text(m.expr)} AS {_name(m.name)}" for m in q.measures)]
    lines.append(q.rows_per_match)
    skip = q.skip
    target = "" if skip.var is None else f" {_name(skip.var)}"
    lines.append(f"AFTER MATCH SKIP {skip.kind}{target}")
    lines.append(f"PATTERN ({pattern_text(q.pattern)})")
    if q.subsets:
        lines.append("SUBSET " + ", ".join(f"{_name(u)} = ({', '.join(_name(m) for m in members)})"
                                           for u, members in q.subsets))
    if q.defines:
        lines += ["DEFINE", *_listed(f"{_name(v)} AS {expression_text(c)}" for v, c in q.defines)]
    if q.within is not None:
        lines.append(_within(q.within))
    return lines


def recognize_text(q: rx.Recognize) -> str:
    """The statement: the outer query with its result view replaced by ``source MATCH_RECOGNIZE (...)``."""
    clause = "MATCH_RECOGNIZE (\n" + "".join(f"  {line}\n" for line in clause_text(q)) + ")"
    if q.alias:
        clause += f" AS {_name(q.alias)}"
    view = re.escape(q.result_view)
    alias = "" if not q.alias else rf"\s+AS\s+`?{re.escape(q.alias)}`?"
    outer, n = re.subn(rf"\b{view}{alias}(?![\w`])", lambda _m: f"{q.source} {clause}", q.outer_sql, count=1)
    return outer if n else f"SELECT * FROM {q.source} {clause}"
