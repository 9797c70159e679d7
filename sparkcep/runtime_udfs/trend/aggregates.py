"""Aggregate algebra of the trend engine: exact counts (Python ints, GMP above BIG_BITS bits), sums,
MIN/MAX and the count and vector algebras the propagation runs in."""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from operator import add

try:  # GMP integers: big-count additions 2-3x faster than Python ints (exact either way)
    from gmpy2 import mpz as _mpz
except ImportError:  # pragma: no cover - gmpy2 is a dependency; the engine stays exact without it
    _mpz = None

#: Prefix of the columns that carry exact SUM/AVG partials for :func:`merge_rows` (only when the partition key
#: is finer than the groups).
PARTIAL = "_partial_"

_INF = math.inf

#: Running counts longer than this many bits become GMP integers (below it Python ints add faster).
BIG_BITS = 1500

#: Events per call of the generated scan between two checks for counts to promote to GMP integers.
SCAN_CHUNK = 4096


# ----------------------------------------------------------------------------------------------- aggregates


def _exact(v):
    """A SUM operand kept exact: ints as they are, finite floats as fractions; inf/NaN stay floats."""
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return Fraction(v) if math.isfinite(v) else v
    if isinstance(v, (Decimal, Fraction)):
        return Fraction(v) if not isinstance(v, Decimal) or v.is_finite() else float(v)
    raise TypeError(f"SUM/AVG over a non-numeric value {v!r}")


def _fold(f):
    def fold(a, b):
        if a is None:
            return b
        if b is None:
            return a
        return f(a, b)

    return fold


@_fold
def _sum_add(a, b):
    if type(a) is float or type(b) is float:  # an infinity or NaN absorbs every finite part
        return (a if type(a) is float else 0.0) + (b if type(b) is float else 0.0)
    return a + b

_MIN, _MAX = _fold(min), _fold(max)


class _CountAlgebra:
    """COUNT(*) only: an aggregate is the trend count itself, 0 is "no trend"."""

    zero = 0
    add = staticmethod(add)
    vector = False

    @staticmethod
    def lift(pred, start: int, values) -> int:
        return pred + start


class _VectorAlgebra:
    """Theorem 9.1: an aggregate is ``[count, measure...]``; None is "no trend".

    Measures: ``("n", target, attr)`` number of target events (with a non-null ``attr``) in the trends,
    ``("s", ...)`` the sum of ``attr``, ``("min", ...)``/``("max", ...)``.  ``values`` of an event are, per
    measure, None if the event does not contribute, else 1 (``n``), its exact value (``s``) or its value.
    """

    zero = None
    vector = True

    def __init__(self, kinds: tuple[str, ...]):
        self.kinds = kinds
        combine = {"n": add, "s": _sum_add, "min": _MIN, "max": _MAX}
        self._ops = tuple(combine[k] for k in kinds)

    def add(self, a, b):
        if a is None:
            return b
        if b is None:
            return a
        out = [a[0] + b[0]]
        for i, op in enumerate(self._ops, 1):
            out.append(op(a[i], b[i]))
        return out

    def lift(self, pred, start: int, values):
        c = start + (pred[0] if pred is not None else 0)
        if not c:
            return None
        out = [c]
        for i, kind in enumerate(self.kinds, 1):
            p = pred[i] if pred is not None else (0 if kind == "n" else None)
            v = values[i - 1]
            if v is None:
                out.append(p)
            elif kind == "n":
                out.append(p + c)
            elif kind == "s":
                part = v if type(v) is float else v * c  # e.sum = e.attr * e.count + Σ p.sum
                out.append(part if p is None else _sum_add(p, part))
            elif kind == "min":
                out.append(v if p is None or v < p else p)
            else:
                out.append(v if p is None or v > p else p)
        return out


def _final_sum(v):
    return float(v) if isinstance(v, Fraction) else v


def _final_avg(v, n: int):
    if type(v) is float:  # inf or NaN
        return v
    return float(v / n) if isinstance(v, Fraction) else v / n


# ----------------------------------------------------------------------------------------------- HAVING


def having_filter(having) -> Callable[[list[dict]], list[dict]]:
    """``rows -> the rows where HAVING holds``: ``having`` is a condition over a trend row's columns (each
    ``Attr(None, column)``, see ``compiler.analysis``), evaluated with the language's expression semantics on
    the exact values (a count beyond DECIMAL(38, 0) compares as the number it is).  Applied to final rows only:
    after :func:`~sparkcep.runtime_udfs.trend.engine.merge_rows`, since a partition's partial count says
    nothing about its group's.

        >>> from sparkcep.ir.ast import Attr, BinOp, Literal
        >>> keep = having_filter(BinOp(">", Attr(None, "n"), Literal(1)))
        >>> keep([{"n": 1}, {"n": 2**70}, {"n": None}])
        [{'n': 1180591620717411303424}]
    """
    from sparkcep.runtime_udfs.expr.scalar import compile_expr, holds

    test = compile_expr(having)
    return lambda rows: [r for r in rows if holds(test({"": r}))]
