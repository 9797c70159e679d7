"""DEFINE and MEASURES expressions of MATCH_RECOGNIZE, compiled once into closures over a match context.

A (partial) match is a chain of *nodes* ``(row, var, excluded, parent, aggregates, run)``, newest first:
``row`` is the row's absolute position in the partition, ``var`` the index of the variable it is mapped to,
``parent`` the node of the row before it in the match (None for the first), ``aggregates`` the running
aggregates kept on the chain (:class:`Slots`) or None, ``run`` the nearest earlier node mapped to another
variable (a search for ``X``'s last row skips a run of ``Y`` rows in one step: ``B AS B.x > A.x`` stays linear
over a long run of B).  Threads of the engine share their common prefixes, so
labelling a row costs one tuple, never a copy of the history.

A compiled expression is ``f(ctx, head, full)``: ``ctx`` holds the partition's buffered rows (``rows``, the
first at absolute position ``base``) and the match number ``mnum``; ``head`` is the last row RUNNING sees
(in DEFINE the row being labelled, in MEASURES the output row; None for an empty match), ``full`` the last
row of the whole match (FINAL).  The semantics are those of docs/language.md (MATCH_RECOGNIZE):

* ``X.c``: column ``c`` of the last row mapped to ``X`` (a SUBSET: to any of its members) that RUNNING sees;
  ``c`` alone: of the last row RUNNING sees; NULL if none.
* ``PREV/NEXT(e, k)``: ``k`` rows before/after (in the partition, not the match) the row ``e`` reads; NULL
  off the partition.  ``FIRST/LAST(e, k)``: the ``(k+1)``-th row mapped to ``e``'s variable from the first /
  the last (every row without a variable).  ``CLASSIFIER()``: the variable of that row.  Aggregates over the
  rows mapped to their variable (every row without one), NULLs skipped, empty -> NULL (COUNT -> 0).
* Operators are Spark SQL's with the ``try_*`` behaviour, through ``runtime_udfs.expr.scalar``'s primitives.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from sparkcep.ir import recognize as R
from sparkcep.ir.ast import Attr, BinOp, Func, Literal, Unary
from sparkcep.runtime_udfs.expr.scalar import _ARITH, _CMP, _and, _arith, _compare, _neg, _not, _or, _widening

__all__ = ["Ctx", "Slots", "children", "compile_expr", "history_free", "next_reach", "node", "prev_reach", "uses_next"]

Compiled = Callable[[Any, Any, Any], Any]
#: var -> (ctx, head, full) -> the absolute row it reads, or None
Locator = Callable[[str | None], Callable[[Any, Any, Any], int | None]]

FINAL = "FINAL"


class Ctx:
    """The rows an expression may read (``rows[i - base]`` is the row at absolute position ``i``) and the
    current match number."""

    __slots__ = ("base", "mnum", "rows")

    def __init__(self, rows: list, base: int = 0, mnum: int | None = None):
        self.rows, self.base, self.mnum = rows, base, mnum


class Slots:
    """Running aggregates kept incrementally on the nodes of a chain (``node[4]``, a tuple with one
    ``(count, value)`` per aggregate): labelling a row costs O(1) per aggregate instead of a walk over the
    match, which keeps ``DEFINE A AS AVG(A.price) < 15`` linear in the match length.  An aggregate whose
    argument reads more than its own row (FIRST/LAST, CLASSIFIER, a nested aggregate) is walked instead.

    The fold is the reference's, step by step: the first non-NULL value, then ``+`` (``try_`` arithmetic)
    for SUM/AVG, ``<``/``>`` for MIN/MAX; AVG divides at the end.  ``FIRST(X.c, k)`` keeps the position of
    the (k+1)-th row mapped to X the same way."""

    def __init__(self, members: dict[str, frozenset[int]], variables: tuple[str, ...]):
        self.members, self.variables = members, variables
        self.keys: dict[tuple, int] = {}
        self.items: list[tuple] = []
        self.empty: tuple = ()

    def register(self, e: R.Agg) -> int | None:
        if e.arg is not None and not _row_local(e.arg):
            return None
        func = e.func.lower()
        key = (func, e.arg, e.var)
        k = self.keys.get(key)
        if k is None:
            mset = None if e.var is None else _Compiler(self.members, self.variables).member_set(e.var)
            cell = [None]
            arg = None
            if e.arg is not None:
                arg = _Compiler(self.members, self.variables).compile(e.arg, lambda var: (lambda c, h, f: cell[0]), 0)
            k = self.keys[key] = len(self.items)
            self.items.append((mset, func, arg, cell))
            self.empty = ((0, None),) * len(self.items)
        return k

    def register_first(self, var: str | None, k: int) -> int:
        """A slot holding the (k+1)-th row mapped to ``var`` (every row if None): ``FIRST(var.c, k)``."""
        key = ("first", var, k)
        got = self.keys.get(key)
        if got is None:
            mset = None if var is None else _Compiler(self.members, self.variables).member_set(var)
            got = self.keys[key] = len(self.items)
            self.items.append((mset, "first", k + 1, None))
            self.empty = ((0, None),) * len(self.items)
        return got

    def extend(self, ctx, row: int, var: int, acc: tuple | None) -> tuple:
        """The aggregates after the row at ``row`` is mapped to ``var`` (``acc``: those before, None: none)."""
        if acc is None:
            acc = self.empty
        out = []
        for (mset, func, arg, cell), (count, value) in zip(self.items, acc, strict=True):
            if mset is None or var in mset:
                if func == "first":  # arg: the position wanted, 1-based
                    count += 1
                    if count == arg:
                        value = row
                elif arg is None:
                    count += 1
                else:
                    cell[0] = row
                    v = arg(ctx, None, None)
                    if v is not None:
                        if count == 0:
                            value = v
                        elif func == "sum" or func == "avg":
                            value = _arith(_ADD, value, v)
                        elif func == "min":
                            if _compare(_LT, v, value):
                                value = v
                        elif func == "max":
                            if _compare(_GT, v, value):
                                value = v
                        count += 1
            out.append((count, value))
        return tuple(out)

    def rebuild(self, ctx, last):
        """The chain ending at ``last`` again, its nodes carrying these aggregates."""
        chain = []
        while last is not None:
            chain.append(last)
            last = last[3]
        new = None
        for n in reversed(chain):
            new = node(n[0], n[1], n[2], new, self.extend(ctx, n[0], n[1], None if new is None else new[4]))
        return new


def node(row: int, var: int, excluded: int, parent, aggregates) -> tuple:
    """A new node of a chain (the engine builds the same tuple inline)."""
    return (row, var, excluded, parent, aggregates,
            None if parent is None else parent if parent[1] != var else parent[5])


_ADD, _LT, _GT = _ARITH["+"], _CMP["<"], _CMP[">"]


def _row_local(e) -> bool:
    """Does ``e`` (an aggregate's argument) read only its own row (and rows PREV/NEXT of it)?"""
    if isinstance(e, (R.Agg, R.Classifier, R.MatchNumber)):
        return False
    if isinstance(e, R.Nav) and e.kind in ("FIRST", "LAST"):
        return False
    return all(_row_local(c) for c in children(e))


def compile_expr(e, members: dict[str, frozenset[int]], variables: tuple[str, ...], *,
                 define: int | None = None, slots: Slots | None = None) -> Compiled:
    """Compile ``e`` (``members`` maps each variable and SUBSET name to the indexes of its variables).
    ``define``: the index of the variable whose DEFINE ``e`` is; it is evaluated with ``head`` the row being
    labelled (never None), so references to that row (``c``, ``X.c`` with X that variable or a SUBSET holding
    it) read it directly.  ``slots``: where running aggregates are kept on the nodes (see :class:`Slots`)."""
    return _Compiler(members, variables, define, slots).compile(e, None, 0)


class _Compiler:
    def __init__(self, members: dict[str, frozenset[int]], variables: tuple[str, ...], define: int | None = None,
                 slots: Slots | None = None):
        self.members, self.variables, self.define, self.slots = members, variables, define, slots

    def current(self, var: str | None) -> bool:
        """In a DEFINE, does a RUNNING reference to ``var`` read the row being labelled?"""
        return self.define is not None and (var is None or self.define in self.member_set(var))

    def member_set(self, var: str) -> frozenset[int]:
        got = self.members.get(var)
        if got is None:
            raise ValueError(f"unknown row pattern variable {var}")
        return got

    # -- locators: which row a reference reads

    def last_row(self, var: str | None, final: bool):
        pick = 2 if final else 1  # argument position of the chain: full or head
        if var is None:
            if final:
                return lambda ctx, h, f: None if f is None else f[0]
            return lambda ctx, h, f: None if h is None else h[0]
        mset = self.member_set(var)

        def last(ctx, h, f):
            n = f if pick == 2 else h
            while n is not None:
                if n[1] in mset:
                    return n[0]
                n = n[5]  # past the rows mapped to n's variable just before it: none is a member
            return None

        return last

    def logical(self, kind: str, k: int, final: bool) -> Locator:
        def loc(var: str | None):
            mset = None if var is None else self.member_set(var)
            if kind == "FIRST" and self.slots is not None:
                slot = self.slots.register_first(var, k)

                def first(ctx, h, f):
                    n = f if final else h
                    return None if n is None else n[4][slot][1]

                return first

            def nth(ctx, h, f):
                n = f if final else h
                if kind == "LAST":
                    count = k
                    while n is not None:
                        if mset is None or n[1] in mset:
                            if count == 0:
                                return n[0]
                            count -= 1
                            n = n[3]
                        else:
                            n = n[5]
                    return None
                rows = []
                while n is not None:
                    if mset is None or n[1] in mset:
                        rows.append(n[0])
                        n = n[3]
                    else:
                        n = n[5]
                return rows[-1 - k] if k < len(rows) else None

            return nth

        return loc

    # -- expressions

    def compile(self, e, loc: Locator | None, shift: int) -> Compiled:
        if isinstance(e, Literal):
            value = e.value
            return lambda ctx, h, f: value
        if isinstance(e, (Attr, R.RowExpr)):
            column = e.attr if isinstance(e, Attr) else e.column
            if loc is None and self.current(e.var):
                return _current_reader(column, shift)
            where = self.last_row(e.var, False) if loc is None else loc(e.var)
            return _reader(where, column, shift)
        if isinstance(e, Unary):
            inner = self.compile(e.operand, loc, shift)
            if e.op == "NOT":
                return lambda ctx, h, f: _not(inner(ctx, h, f))
            if e.op == "-":
                return lambda ctx, h, f: _neg(inner(ctx, h, f))
            if e.op == "IS NULL":
                return lambda ctx, h, f: inner(ctx, h, f) is None
            if e.op == "IS NOT NULL":
                return lambda ctx, h, f: inner(ctx, h, f) is not None
            raise ValueError(f"unknown unary operator {e.op}")
        if isinstance(e, BinOp):
            x = self.compile(e.left, loc, shift)
            y = self.compile(e.right, loc, shift)
            # three-valued AND/OR; the right side is not evaluated when the left decides (no side effects)
            if e.op == "AND":
                def and_(ctx, h, f):
                    a = x(ctx, h, f)
                    return False if a is False else _and(a, y(ctx, h, f))

                return and_
            if e.op == "OR":
                def or_(ctx, h, f):
                    a = x(ctx, h, f)
                    return True if a is True else _or(a, y(ctx, h, f))

                return or_
            if e.op in _CMP:
                return _comparison(_CMP[e.op], x, y, e.right.value if isinstance(e.right, Literal) else _NO_LITERAL)
            if e.op in _ARITH:
                op = _ARITH[e.op]
                return lambda ctx, h, f: _arith(op, x(ctx, h, f), y(ctx, h, f))
            raise ValueError(f"unknown operator {e.op}")
        if isinstance(e, R.Nav):
            if e.kind == "PREV":
                return self.compile(e.arg, loc, shift - e.offset)
            if e.kind == "NEXT":
                return self.compile(e.arg, loc, shift + e.offset)
            if e.kind in ("FIRST", "LAST"):
                return self.compile(e.arg, self.logical(e.kind, e.offset, e.semantics == FINAL), shift)
            raise ValueError(f"unknown navigation {e.kind}")
        if isinstance(e, R.Classifier):
            return self.classifier(e, loc, shift)
        if isinstance(e, R.MatchNumber):
            return lambda ctx, h, f: ctx.mnum
        if isinstance(e, R.Agg):
            return self.aggregate(e)
        if isinstance(e, Func):
            return self.scalar(e, [self.compile(a, loc, shift) for a in e.args])
        raise ValueError(f"cannot evaluate {type(e).__name__} in MATCH_RECOGNIZE")

    def classifier(self, e: R.Classifier, loc: Locator | None, shift: int) -> Compiled:
        final = e.semantics == FINAL
        where = self.last_row(e.var, final) if loc is None else loc(e.var)
        names = self.variables

        def classifier(ctx, h, f):
            r = where(ctx, h, f)
            if r is None:
                return None
            r += shift
            n = f if final else h
            while n is not None and n[0] > r:
                n = n[3]
            return names[n[1]] if n is not None and n[0] == r else None

        return classifier

    def aggregate(self, e: R.Agg) -> Compiled:
        func = e.func.lower()
        final = e.semantics == FINAL
        mset = None if e.var is None else self.member_set(e.var)

        def rows_of(h, f):
            n = f if final else h
            rows = []
            while n is not None:
                if mset is None or n[1] in mset:
                    rows.append(n[0])
                    n = n[3]
                else:
                    n = n[5]
            rows.reverse()
            return rows

        if func not in ("count", "sum", "avg", "min", "max") or (e.arg is None and func != "count"):
            raise ValueError(f"unknown aggregate {func}" if e.arg is not None else
                             f"{func.upper()}(*) is not an aggregate")
        k = None if self.slots is None else self.slots.register(e)
        if k is not None:
            return _slot_reader(k, func, final)
        if e.arg is None:
            return lambda ctx, h, f: len(rows_of(h, f))
        cell = [None]
        arg = self.compile(e.arg, lambda var: (lambda ctx, h, f: cell[0]), 0)
        add = _ARITH["+"]

        def aggregate(ctx, h, f):
            values = []
            for r in rows_of(h, f):
                cell[0] = r
                v = arg(ctx, h, f)
                if v is not None:
                    values.append(v)
            if func == "count":
                return len(values)
            if not values:
                return None
            if func in ("sum", "avg"):
                total = values[0]
                for v in values[1:]:
                    total = _arith(add, total, v)
                return total if func == "sum" else _arith(_ARITH["/"], total, len(values))
            op = _CMP["<" if func == "min" else ">"]
            return functools.reduce(lambda a, b: b if _compare(op, b, a) else a, values)

        return aggregate

    def scalar(self, e: Func, args: list[Compiled]) -> Compiled:
        name = e.name.lower()
        if name == "abs" and len(args) == 1:
            (a,) = args

            def absolute(ctx, h, f):
                v = a(ctx, h, f)
                return None if v is None else _arith(lambda x, _: abs(x), v, 0)

            return absolute
        if name == "if" and len(args) == 3:  # Spark's if(cond, a, b): b when cond is false or NULL
            cond, then, other = args
            return lambda ctx, h, f: then(ctx, h, f) if cond(ctx, h, f) is True else other(ctx, h, f)
        if name == "double" and len(args) == 1:  # a value widened to DOUBLE (compiler.recognize.spec.widened)
            (a,) = args
            widen = _widening("float")
            return lambda ctx, h, f: widen(a(ctx, h, f))
        if name == "coalesce":
            def coalesce(ctx, h, f):
                for a in args:
                    v = a(ctx, h, f)
                    if v is not None:
                        return v
                return None

            return coalesce
        if name in ("greatest", "least"):
            op = _CMP[">" if name == "greatest" else "<"]

            def extreme(ctx, h, f):  # Spark: NULLs skipped, NULL only when all are
                values = [v for v in (a(ctx, h, f) for a in args) if v is not None]
                return functools.reduce(lambda p, q: q if _compare(op, q, p) else p, values) if values else None

            return extreme
        raise ValueError(f"the MATCH_RECOGNIZE engine does not know the function {e.name}()")


def _slot_reader(k: int, func: str, final: bool) -> Compiled:
    div = _ARITH["/"]

    def read(ctx, h, f):
        n = f if final else h
        if n is None:
            return 0 if func == "count" else None
        count, value = n[4][k]
        if func == "count":
            return count
        if count == 0:
            return None
        return _arith(div, value, count) if func == "avg" else value

    return read


_NO_LITERAL = object()


def _comparison(cmp, x: Compiled, y: Compiled, literal) -> Compiled:
    """``x cmp y`` as :func:`_compare`, with a shortcut for the common operand pairs where it is the plain
    Python comparison (two strings, two BIGINTs, two non-NaN DOUBLEs); ``literal``: ``y``'s constant value."""
    if literal is not _NO_LITERAL:
        kind = type(literal)
        if kind is str or kind is int:
            def cmp_literal(ctx, h, f):
                a = x(ctx, h, f)
                return cmp(a, literal) if type(a) is kind else _compare(cmp, a, literal)

            return cmp_literal
        return lambda ctx, h, f: _compare(cmp, x(ctx, h, f), literal)

    def cmp_values(ctx, h, f):
        a = x(ctx, h, f)
        b = y(ctx, h, f)
        kind = type(a)
        if kind is type(b) and (kind is str or kind is int or (kind is float and a == a and b == b)):
            return cmp(a, b)
        return _compare(cmp, a, b)

    return cmp_values


def _current_reader(column: str, shift: int) -> Compiled:
    """A column of the row being labelled (``shift`` 0) or of a row ``shift`` rows from it (PREV/NEXT)."""
    if shift == 0:
        return lambda ctx, h, f: ctx.rows[h[0] - ctx.base].get(column)

    def read(ctx, h, f):
        r = h[0] + shift - ctx.base
        if r < 0 or r >= len(ctx.rows) or h[0] + shift < 0:
            return None
        return ctx.rows[r].get(column)

    return read


def _reader(where, column: str, shift: int) -> Compiled:
    def read(ctx, h, f):
        r = where(ctx, h, f)
        if r is None:
            return None
        r += shift - ctx.base
        if r < 0 or r >= len(ctx.rows):
            return None
        return ctx.rows[r].get(column)

    return read


# ----------------------------------------------------------------------------------------------- analysis


def children(e) -> tuple:
    """The direct subexpressions of ``e`` (none for a leaf)."""
    if isinstance(e, Unary):
        return (e.operand,)
    if isinstance(e, BinOp):
        return (e.left, e.right)
    if isinstance(e, Func):
        return tuple(e.args)
    if isinstance(e, (R.Nav,)):
        return (e.arg,)
    if isinstance(e, R.Agg):
        return () if e.arg is None else (e.arg,)
    return ()


def history_free(e, var: int, members: dict[str, frozenset[int]]) -> bool:
    """True if ``e``, the DEFINE of the variable numbered ``var``, reads only the row being labelled and its
    physical neighbours (PREV/NEXT), never the rest of the match: then threads at the same instruction have
    the same future, and the engine keeps only the preferred one."""
    if isinstance(e, (Attr, R.RowExpr)):
        return e.var is None or var in members.get(e.var, frozenset())
    if isinstance(e, (R.Agg, R.Classifier, R.MatchNumber)):
        return False
    if isinstance(e, R.Nav) and e.kind in ("FIRST", "LAST"):
        return False
    return all(history_free(c, var, members) for c in children(e))


def prev_reach(e) -> int:
    """How many rows before the rows of a match ``e`` may read (PREV offsets, nested ones added up)."""
    own = e.offset if isinstance(e, R.Nav) and e.kind == "PREV" else 0
    return own + max((prev_reach(c) for c in children(e)), default=0)


def next_reach(e) -> int:
    """How many rows after the row it is evaluated at ``e`` may read (NEXT offsets, nested ones added up)."""
    own = e.offset if isinstance(e, R.Nav) and e.kind == "NEXT" else 0
    return own + max((next_reach(c) for c in children(e)), default=0)


def uses_next(e) -> bool:
    """True if ``e`` reads rows after the current one (NEXT)."""
    if isinstance(e, R.Nav) and e.kind == "NEXT":
        return True
    return any(uses_next(c) for c in children(e))
