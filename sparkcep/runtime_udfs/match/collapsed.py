"""Collapsed output of a match query: one row per (first events, last event) with the Kleene events as
lists, and the candidate/output functions of a plan."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparkcep.ir.ast import (
    Attr,
    BinOp,
    EquivTest,
    EventPat,
    Func,
    Kleene,
    Literal,
    Not,
    Or,
    Seq,
    Unary,
)
from sparkcep.ir.spec import CANDIDATES
from sparkcep.runtime_udfs.expr.scalar import LACKING, compile_expr

if TYPE_CHECKING:
    from sparkcep.runtime_udfs.match.conjuncts import Conjunct


def _unscoped_equiv(c: Conjunct) -> bool:
    """``[attr]`` over every component (not ``[v.attr]``): it binds negative components too."""
    return isinstance(c.expr, EquivTest) and any(i.var is None for i in c.expr.items)


def _negation_groups(pattern) -> dict[str, int]:
    """Variable → the id of the negation it is under (the variables of one ``NOT SEQ(...)`` share it)."""
    groups: dict[str, int] = {}

    def visit(p, group) -> None:
        if isinstance(p, EventPat):
            if group is not None:
                groups[p.var] = group
        elif isinstance(p, Not):
            visit(p.inner, id(p) if group is None else group)
        elif isinstance(p, Kleene):
            visit(p.inner, group)
        elif isinstance(p, Seq):
            for i in p.items:
                visit(i, group)
        elif isinstance(p, Or):
            for a in p.alternatives:
                visit(a, group)

    visit(pattern, None)
    return groups


def _nullify(expr, absent: frozenset[str]):
    """``expr`` with every attribute of an ``absent`` variable replaced by NULL, except inside aggregates:
    those aggregate an absent Kleene variable's (empty) sequence, as :mod:`expr` does."""
    if isinstance(expr, Attr):
        return Literal(None) if expr.var in absent else expr
    if isinstance(expr, Unary):
        return Unary(expr.op, _nullify(expr.operand, absent))
    if isinstance(expr, BinOp):
        return BinOp(expr.op, _nullify(expr.left, absent), _nullify(expr.right, absent))
    return expr


def _candidates_fn(expr: Func):
    var = expr.args[0].var
    attrs = [a.attr for a in expr.args]

    def candidates(binding: dict) -> list[dict]:
        out = []
        for ev in binding.get(var) or ():
            row = {}
            for a in attrs:
                value = ev.get(a)
                row[a] = None if isinstance(value, float) and value != value else value
            out.append(row)
        return out

    return candidates


def _output_fn(expr, singles: frozenset[str], any_vars: frozenset[str]):
    """``f(binding) -> value`` of a result column; a lacking attribute (``expr.LACKING``) reads as None.

    A plain ``v.attr`` of a non-Kleene variable (most default columns are one) reads the event directly: the
    same value as :func:`compile_expr` gives, without its generic dispatch (missing and NaN are None).
    """
    if isinstance(expr, Func) and expr.name == CANDIDATES:
        return _candidates_fn(expr)
    if isinstance(expr, Attr) and expr.var in singles and expr.index is None:
        var, attr = expr.var, expr.attr

        def column(binding: dict) -> Any:
            event = binding.get(var)
            if event is None:
                return None
            value = event.get(attr)
            return None if isinstance(value, float) and value != value else value

        return column
    fn = compile_expr(expr, any_vars)

    def value(binding: dict) -> Any:
        out = fn(binding)
        return None if out is LACKING else out

    return value
