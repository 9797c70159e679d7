"""The brute-force reference for SQL:2016 ``MATCH_RECOGNIZE``: slow on purpose, written from the standard.

Kept apart from the engine (``sparkcep.runtime_udfs.recognize``, a prioritized NFA): it shares only the IR
(``ir.recognize``) and the value primitives of ``runtime_udfs.expr.scalar`` (Spark SQL's operators with the
``try_*`` behaviour), so the engine is property-tested against an independent reading of the semantics.

What it does, per partition (rows already in order, the partition's end known):

* **Candidates in preferment order.** At start row ``s`` a recursive generator walks the row pattern and
  yields every ``(end, labels)`` the pattern accepts from ``s``, most preferred first: concatenation
  lexicographic; alternation left first; a greedy quantifier prefers one more iteration to stopping, a
  reluctant one the reverse; ``PERMUTE(A, B, C)`` is ``(A B C | A C B | B A C | ...)`` (permutations in
  lexicographic order of the list); ``{- X -}`` matches like ``X`` (its rows are marked excluded); ``^`` only
  at row 0, ``$`` only at the partition end; ``()`` matches no row.  An iteration of a quantified
  sub-pattern beyond its minimum that matches zero rows is not allowed (that path dies); iterations up to
  the minimum may be empty; ``{n,m}`` counts iterations.
* **DEFINE** is checked for each row when it is labelled, under RUNNING semantics over the rows labelled so
  far (the current one included); a variable without DEFINE is true; NULL is false.  Checking while
  generating only prunes candidates that the standard's "filter all candidates" would drop anyway.
* **WITHIN w**: a candidate is a match only if ``__ts(last) - __ts(first) < w`` (empty matches always are).
* **The match** at ``s`` is the first candidate left (possibly empty).  Then ``MATCH_NUMBER`` grows by one
  and ``AFTER MATCH SKIP`` picks the next start: PAST LAST ROW the row after the match (``s + 1`` after an
  empty match), TO NEXT ROW ``s + 1``, TO FIRST/LAST v the first/last row mapped to ``v`` (a variable or a
  SUBSET), or ``s + 1`` if ``v`` has no row in the match or that row is ``s`` itself.  No match at ``s``:
  row ``s`` is unmatched and the search goes on at ``s + 1``.
* **Expressions.** ``X.c`` reads the last row mapped to ``X`` (a SUBSET: to any of its members) among the
  rows the expression sees, ``c`` alone the last of all of them (the current row in DEFINE); NULL if there
  is none.  RUNNING sees the match up to the current row, FINAL the whole match.  ``PREV/NEXT(e, k)`` move
  ``k`` rows back/forward in the partition from the row ``e`` reads (NULL off the partition, not off the
  match); ``FIRST/LAST(e, k)`` read the ``(k+1)``-th row mapped to ``e``'s variable from the first/last one
  (all rows without a variable); ``CLASSIFIER()`` is the variable of that row; aggregates run over the rows
  mapped to their variable (all rows without one), NULLs skipped, empty → NULL (``COUNT`` → 0).
* **Output** (dicts keyed by ``spec.output``): ONE ROW PER MATCH one row per match (partition columns and
  measures over the whole match; an empty match reads NULL columns, COUNT 0); ALL ROWS PER MATCH one row per
  row of the match not inside ``{- -}`` (measures RUNNING up to that row unless FINAL), an empty match one
  row (row ``s``, measures as for an empty match) unless OMIT EMPTY MATCHES; WITH UNMATCHED ROWS adds each
  row that is in no match and starts none, once, with every measure NULL.  Outputs come by match, then row.

Example: the issue's ``A B+`` over A1 B2 B3 B4 A5 B6 gives two matches::

    >>> from sparkcep.ir.ast import Attr, BinOp, Literal
    >>> from sparkcep.ir import recognize as R
    >>> pat = R.PConcat((R.PVar("A"), R.PQuant(R.PVar("B"), 1, None)))
    >>> is_ = lambda t: BinOp("=", Attr(None, "t"), Literal(t))
    >>> spec = R.RecognizeSpec(pat, ("A", "B"), (("A", is_("a")), ("B", is_("b"))), (),
    ...     (R.Measure(R.Agg("count", None), "n"),), R.ONE_ROW, R.Skip(), (), (R.OrderItem("ts"),),
    ...     ("t", "ts"), ("n",))
    >>> rows = [{"t": t, "ts": i, "__ts": i} for i, t in enumerate("abbbab", 1)]
    >>> recognize(spec, rows)
    [{'n': 4}, {'n': 2}]
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from sparkcep.ir import recognize as R
from sparkcep.ir.ast import Attr, BinOp, Func, Literal, Unary
from sparkcep.runtime_udfs.expr.scalar import _ARITH, _CMP, _and, _arith, _compare, _neg, _not, _or, _widening, holds

__all__ = ["OracleError", "attempts", "recognize", "recognize_all", "sort_rows"]

Row = dict[str, Any]
#: labels of the rows of a (partial) match, from its first row on: (variable, excluded)
Labels = tuple[tuple[str, bool], ...]


class OracleError(ValueError):
    """The spec holds something the reference gives no meaning to (the front end should have refused it)."""


# ----------------------------------------------------------------------------------------------- row order


def _cmp_values(a, b, ascending: bool, nulls_first: bool) -> int:
    if a is None or b is None:
        if a is None and b is None:
            return 0
        return (-1 if a is None else 1) * (1 if nulls_first else -1)
    if a == b:
        return 0
    if a != a or b != b:  # NaN (not equal to itself): equal to NaN, above every other value, as Spark sorts it
        if a != a and b != b:
            return 0
        return (1 if a != a else -1) * (1 if ascending else -1)
    less = a < b
    return (-1 if less else 1) * (1 if ascending else -1)


def sort_rows(spec: R.RecognizeSpec, rows: Iterable[Row]) -> list[Row]:
    """The rows of one partition in the order matching reads them: ORDER BY (Spark's defaults: ASC NULLS
    FIRST, DESC NULLS LAST), then ties broken by the remaining ``spec.columns`` in order, ascending, NULLs
    first."""
    ordered = [o.column for o in spec.order_by]
    items = [(o.column, o.ascending, o.ascending if o.nulls_first is None else o.nulls_first)
             for o in spec.order_by]
    items += [(c, True, True) for c in spec.columns if c not in ordered]

    def cmp(x: Row, y: Row) -> int:
        for col, asc, nf in items:
            c = _cmp_values(x.get(col), y.get(col), asc, nf)
            if c:
                return c
        return 0

    return sorted(rows, key=functools.cmp_to_key(cmp))


def recognize_all(spec: R.RecognizeSpec, rows: Iterable[Row]) -> list[Row]:
    """The outputs for rows in any order: partitioned by ``spec.partition_by`` (partitions in ascending
    order of their key, NULLs first), each sorted by :func:`sort_rows`, then :func:`recognize`."""
    parts: dict[tuple, list[Row]] = {}
    for row in rows:
        parts.setdefault(tuple(row.get(p) for p in spec.partition_by), []).append(row)

    def cmp(x: tuple, y: tuple) -> int:
        for a, b in zip(x, y, strict=True):
            c = _cmp_values(a, b, True, True)
            if c:
                return c
        return 0

    out: list[Row] = []
    for key in sorted(parts, key=functools.cmp_to_key(cmp)):
        out += recognize(spec, sort_rows(spec, parts[key]))
    return out


# ----------------------------------------------------------------------------------------------- expressions


class _Ctx:
    """What an expression sees: the partition, the match's start ``s`` and its labels, how many of them
    RUNNING sees (``running``; FINAL sees all), and the match number."""

    def __init__(self, spec: R.RecognizeSpec, rows: Sequence[Row], s: int, labels: Labels, running: int,
                 number: int | None):
        self.spec, self.rows, self.s, self.labels, self.running, self.number = (
            spec, rows, s, labels, running, number)
        self.subsets = dict(spec.subsets)

    def visible(self, semantics) -> int:
        return len(self.labels) if semantics == "FINAL" else self.running

    def mapped(self, var: str | None, visible: int) -> list[int]:
        """Partition indices of the visible rows mapped to ``var`` (every visible row when None)."""
        members = None if var is None else set(self.subsets.get(var, (var,)))
        return [self.s + i for i, (label, _) in enumerate(self.labels[:visible])
                if members is None or label in members]

    def last(self, var: str | None, visible: int) -> int | None:
        rows = self.mapped(var, visible)
        return rows[-1] if rows else None

    def read(self, r: int | None, column: str):
        if r is None or not 0 <= r < len(self.rows):
            return None
        return self.rows[r].get(column)


Pick = Callable[[str | None], int | None]


def _eval(e, ctx: _Ctx, pick: Pick | None = None, shift: int = 0):
    """The value of ``e``.  ``pick(var)`` is the row a column reference of ``var`` reads (by default the
    last visible row mapped to it under RUNNING); ``shift`` is the pending physical offset of PREV/NEXT."""
    if isinstance(e, Literal):
        return e.value
    if isinstance(e, (Attr, R.RowExpr)):
        var = e.var
        column = e.attr if isinstance(e, Attr) else e.column
        r = (pick or (lambda v: ctx.last(v, ctx.running)))(var)
        return ctx.read(None if r is None else r + shift, column)
    if isinstance(e, Unary):
        v = _eval(e.operand, ctx, pick, shift)
        if e.op == "NOT":
            return _not(v)
        if e.op == "-":
            return _neg(v)
        if e.op == "IS NULL":
            return v is None
        if e.op == "IS NOT NULL":
            return v is not None
        raise OracleError(f"unknown unary operator {e.op}")
    if isinstance(e, BinOp):
        x = _eval(e.left, ctx, pick, shift)
        y = _eval(e.right, ctx, pick, shift)
        if e.op == "AND":
            return _and(x, y)
        if e.op == "OR":
            return _or(x, y)
        if e.op in _CMP:
            return _compare(_CMP[e.op], x, y)
        if e.op in _ARITH:
            return _arith(_ARITH[e.op], x, y)
        raise OracleError(f"unknown operator {e.op}")
    if isinstance(e, R.Nav):
        if e.kind in ("PREV", "NEXT"):
            return _eval(e.arg, ctx, pick, shift + (-e.offset if e.kind == "PREV" else e.offset))
        if e.kind in ("FIRST", "LAST"):
            visible = ctx.visible(e.semantics)

            def logical(var):
                rows = ctx.mapped(var, visible)
                i = e.offset if e.kind == "FIRST" else len(rows) - 1 - e.offset
                return rows[i] if 0 <= i < len(rows) else None

            return _eval(e.arg, ctx, logical, shift)
        raise OracleError(f"unknown navigation {e.kind}")
    if isinstance(e, R.Classifier):
        visible = ctx.visible(e.semantics)
        r = (pick or (lambda v: ctx.last(v, visible)))(e.var)
        if r is None:
            return None
        i = r + shift - ctx.s
        return ctx.labels[i][0] if 0 <= i < visible else None
    if isinstance(e, R.MatchNumber):
        return ctx.number
    if isinstance(e, R.Agg):
        return _aggregate(e, ctx)
    if isinstance(e, Func):
        return _scalar(e, [_eval(a, ctx, pick, shift) for a in e.args])
    raise OracleError(f"cannot evaluate {type(e).__name__}")


def _aggregate(e: R.Agg, ctx: _Ctx):
    rows = ctx.mapped(e.var, ctx.visible(e.semantics))
    func = e.func.lower()
    if e.arg is None:
        if func != "count":
            raise OracleError(f"{func.upper()}(*) is not an aggregate")
        return len(rows)
    values = [_eval(e.arg, ctx, lambda v, r=r: r) for r in rows]
    values = [v for v in values if v is not None]
    if func == "count":
        return len(values)
    if not values:
        return None
    if func in ("sum", "avg"):
        total = values[0]
        for v in values[1:]:
            total = _arith(_ARITH["+"], total, v)
        return total if func == "sum" else _arith(_ARITH["/"], total, len(values))
    if func == "min":
        return functools.reduce(lambda a, b: b if _compare(_CMP["<"], b, a) else a, values)
    if func == "max":
        return functools.reduce(lambda a, b: b if _compare(_CMP[">"], b, a) else a, values)
    raise OracleError(f"unknown aggregate {func}")


def _scalar(e: Func, args: list):
    name = e.name.lower()
    if name == "abs" and len(args) == 1:
        return None if args[0] is None else _arith(lambda x, _: abs(x), args[0], 0)
    if name == "if" and len(args) == 3:  # Spark's if(cond, a, b): b when cond is false or NULL
        return args[1] if holds(args[0]) else args[2]
    if name == "double" and len(args) == 1:  # a value widened to DOUBLE, as Spark casts it
        return _widening("float")(args[0])
    if name == "coalesce":
        return next((a for a in args if a is not None), None)
    if name in ("greatest", "least"):  # Spark: NULLs skipped, NULL only when all are
        values = [a for a in args if a is not None]
        op = _CMP[">" if name == "greatest" else "<"]
        return functools.reduce(lambda a, b: b if _compare(op, b, a) else a, values) if values else None
    raise OracleError(f"the reference does not know the function {e.name}()")


# ----------------------------------------------------------------------------------------------- matching


class _Partition:
    """Matching over the rows of one partition, in order."""

    def __init__(self, spec: R.RecognizeSpec, rows: Sequence[Row]):
        self.spec, self.rows, self.n = spec, rows, len(rows)
        self.defines = dict(spec.defines)

    # -- candidates from start row s, most preferred first

    def candidates(self, s: int, number: int) -> Iterator[tuple[int, Labels]]:
        self.s, self.number = s, number
        return self._gen(self.spec.pattern, s, (), False)

    def _holds(self, var: str, labels: Labels) -> bool:
        cond = self.defines.get(var)
        if cond is None:
            return True
        ctx = _Ctx(self.spec, self.rows, self.s, labels, len(labels), self.number)
        return holds(_eval(cond, ctx))

    def _gen(self, p, i: int, labels: Labels, excl: bool) -> Iterator[tuple[int, Labels]]:
        if isinstance(p, R.PVar):
            if i < self.n:
                labelled = (*labels, (p.name, excl))
                if self._holds(p.name, labelled):
                    yield i + 1, labelled
        elif isinstance(p, R.PConcat):
            yield from self._seq(p.items, i, labels, excl)
        elif isinstance(p, R.PAlt):
            for alt in p.alternatives:
                yield from self._gen(alt, i, labels, excl)
        elif isinstance(p, R.PQuant):
            yield from self._repeat(p, 0, i, labels, excl)
        elif isinstance(p, R.PPermute):
            for order in _permutations(len(p.items)):
                yield from self._seq(tuple(p.items[k] for k in order), i, labels, excl)
        elif isinstance(p, R.PExclude):
            yield from self._gen(p.inner, i, labels, True)
        elif isinstance(p, R.PAnchor):
            if (p.kind == "start" and i == 0) or (p.kind == "end" and i == self.n):
                yield i, labels
        elif isinstance(p, R.PEmpty):
            yield i, labels
        else:
            raise OracleError(f"unknown row pattern node {type(p).__name__}")

    def _seq(self, items, i: int, labels: Labels, excl: bool):
        if not items:
            yield i, labels
            return
        for j, after in self._gen(items[0], i, labels, excl):
            yield from self._seq(items[1:], j, after, excl)

    def _repeat(self, q: R.PQuant, done: int, i: int, labels: Labels, excl: bool):
        if done < q.min:  # iterations up to the minimum may be empty
            for j, after in self._gen(q.inner, i, labels, excl):
                yield from self._repeat(q, done + 1, j, after, excl)
            return
        if not q.greedy:
            yield i, labels
        if q.max is None or done < q.max:
            for j, after in self._gen(q.inner, i, labels, excl):
                if j > i:  # an empty iteration beyond the minimum: the path dies
                    yield from self._repeat(q, done + 1, j, after, excl)
        if q.greedy:
            yield i, labels

    def within(self, s: int, end: int) -> bool:
        w = self.spec.within
        if w is None or end == s:
            return True
        col = self.spec.time_column
        gap = _arith(_ARITH["-"], self.rows[end - 1].get(col), self.rows[s].get(col))
        return holds(_compare(_CMP["<"], gap, w))

    def match_at(self, s: int, number: int) -> tuple[int, Labels] | None:
        for end, labels in self.candidates(s, number):
            if self.within(s, end):
                return end, labels
        return None


def _permutations(k: int) -> Iterator[tuple[int, ...]]:
    """Orders of ``range(k)`` in lexicographic order (PERMUTE's preferment)."""
    if k == 0:
        yield ()
        return
    for first in range(k):
        for rest in _permutations(k - 1):
            yield (first, *(r if r < first else r + 1 for r in rest))


def _next_start(spec: R.RecognizeSpec, s: int, end: int, labels: Labels) -> int:
    kind = spec.skip.kind
    if kind == R.SKIP_PAST_LAST_ROW:
        return end if end > s else s + 1
    if kind == R.SKIP_TO_NEXT_ROW:
        return s + 1
    if kind in (R.SKIP_TO_FIRST, R.SKIP_TO_LAST):
        members = set(dict(spec.subsets).get(spec.skip.var, (spec.skip.var,)))
        rows = [s + i for i, (label, _) in enumerate(labels) if label in members]
        if not rows:
            return s + 1
        r = rows[0] if kind == R.SKIP_TO_FIRST else rows[-1]
        return s + 1 if r == s else r
    raise OracleError(f"unknown AFTER MATCH SKIP {kind}")


# ----------------------------------------------------------------------------------------------- output


def recognize(spec: R.RecognizeSpec, rows: Sequence[Row]) -> list[Row]:
    """The outputs of MATCH_RECOGNIZE over one partition whose rows are in order (its end known)."""
    return [row for _, outputs in attempts(spec, rows) for row in outputs]


def attempts(spec: R.RecognizeSpec, rows: Sequence[Row]) -> Iterator[tuple[int, list[Row]]]:
    """Each start row tried, in order, with the outputs it gives (a match's rows, an unmatched row, or
    none): what :func:`recognize` concatenates.  Tests use it to know which outputs a streaming engine
    must already have emitted once a start's fate cannot change any more."""
    rows = list(rows)
    part = _Partition(spec, rows)
    measures = {m.name: m.expr for m in spec.measures}
    all_rows = spec.rows_per_match != R.ONE_ROW

    def output(r: int, ctx: _Ctx | None) -> Row:
        return {name: (None if ctx is None else _eval(measures[name], ctx)) if name in measures
                else rows[r].get(name) for name in spec.output}

    s, number, covered = 0, 0, -1  # covered: the last row of any match so far
    while s < len(rows):
        found = part.match_at(s, number + 1)
        if found is None:
            unmatched = spec.rows_per_match == R.ALL_ROWS_WITH_UNMATCHED and s > covered
            yield s, [output(s, None)] if unmatched else []
            s += 1
            continue
        number += 1
        end, labels = found
        if not all_rows:
            out = [output(s, _Ctx(spec, rows, s, labels, len(labels), number))]
        elif not labels:
            out = [] if spec.rows_per_match == R.ALL_ROWS_OMIT_EMPTY else [
                output(s, _Ctx(spec, rows, s, labels, 0, number))]
        else:
            out = [output(s + i, _Ctx(spec, rows, s, labels, i + 1, number))
                   for i, (_, excluded) in enumerate(labels) if not excluded]
        yield s, out
        covered = max(covered, end - 1)
        s = _next_start(spec, s, end, labels)
