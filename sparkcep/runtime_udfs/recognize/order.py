"""The row order of a MATCH_RECOGNIZE partition: ORDER BY (Spark's defaults: ASC NULLS FIRST, DESC NULLS
LAST; NaN above every number, as in Spark), then ties broken by the remaining ``spec.columns`` in order,
ascending, NULLs first, so that the order (and the matches) never depend on the order rows arrive in.

Example::

    >>> from sparkcep.ir import recognize as R
    >>> spec = R.RecognizeSpec(R.PVar("A"), ("A",), (), (), (), R.ONE_ROW, R.Skip(), (),
    ...     (R.OrderItem("ts", ascending=False),), ("ts", "x"), ())
    >>> rows = [{"ts": 1, "x": 2}, {"ts": None, "x": 0}, {"ts": 3, "x": 1}, {"ts": 1, "x": None}]
    >>> [(r["ts"], r["x"]) for r in sorted(rows, key=sort_key(spec))]
    [(3, 1), (1, None), (1, 2), (None, 0)]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import total_ordering

from sparkcep.ir import recognize as R

__all__ = ["sort_key"]


@total_ordering
class _Desc:
    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v

    def __eq__(self, other) -> bool:
        return self.v == other.v

    def __lt__(self, other) -> bool:
        return other.v < self.v

    def __hash__(self) -> int:  # pragma: no cover
        return hash(self.v)


def _item(column: str, ascending: bool, nulls_first: bool) -> Callable:
    null = (0,) if nulls_first else (2,)
    if ascending:
        def key(row):
            v = row.get(column)
            if v is None:
                return null
            if v != v and isinstance(v, float) and math.isnan(v):
                return (1, 1, 0)
            return (1, 0, v)
    else:
        def key(row):
            v = row.get(column)
            if v is None:
                return null
            if v != v and isinstance(v, float) and math.isnan(v):
                return (1, 0, 0)
            return (1, 1, _Desc(v))
    return key


def sort_key(spec: R.RecognizeSpec) -> Callable[[dict], tuple]:
    """``key(row)`` ordering the rows of one partition as MATCH_RECOGNIZE reads them."""
    ordered = [o.column for o in spec.order_by]
    items = [_item(o.column, o.ascending, o.ascending if o.nulls_first is None else o.nulls_first)
             for o in spec.order_by]
    items += [_item(col, True, True) for col in spec.columns
              if col not in ordered and col != spec.time_column]
    if len(items) == 1:
        (only,) = items
        return only
    return lambda row: tuple(k(row) for k in items)
