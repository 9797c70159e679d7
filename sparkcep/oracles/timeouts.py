"""The reference for timed-out partial matches (docs/language.md, "Timed-out partial matches"), from the
definition, by brute force: every choice of events for the first ``k`` steps (skip_till_next_match: each the
first event that could take its step), then those no event extends.

    >>> from sparkcep.grammar import parse_query
    >>> q = parse_query("PATTERN SEQ(A a, B b, C c) WITHIN 10 RETURN a.ts, b.ts")
    >>> timed_out_rows(q, [{"type": "A", "ts": 1}, {"type": "B", "ts": 2}, {"type": "C", "ts": 3},
    ...                    {"type": "A", "ts": 5}])
    [{'a_ts': 5, 'b_ts': None, 'timeout_step': 'a'}]
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from sparkcep.ir.ast import Query
from sparkcep.ir.naming import column_name, dedupe, default_column
from sparkcep.ir.spec import TIMEOUT_STEP
from sparkcep.oracles.match import (
    DEFAULT_STRATEGY,
    OracleError,
    _Ev,
    _partitions,
    _prepare,
    _resolve,
    _Seq,
    _sorted,
    _value,
    is_trend_aggregate,
)
from sparkcep.runtime_udfs.expr.scalar import compile_expr, holds

__all__ = ["timed_out_rows"]

NEXT_MATCH = "skip_till_next_match"

Event = dict[str, Any]


def timed_out_rows(query: Query, events: Sequence[Event], columns: Sequence[str] | None = None, *,
                   ts_unit_ms: float | None = None) -> list[dict[str, Any]]:
    """One row per timed-out partial match of ``query`` over ``events``: the columns :func:`match_rows
    <sparkcep.oracles.match.match_rows>` gives (RETURN, or ``<var>_<attr>``), over the partial binding, and
    ``timeout_step``, the variable of its last bound step; ordered by the input positions of its events."""
    if is_trend_aggregate(query):
        raise OracleError("a trend-aggregate query has no partial matches")
    prep = _prepare(query, ts_unit_ms)
    steps = prep.root.items if isinstance(prep.root, _Seq) else (prep.root,)
    if not all(isinstance(s, _Ev) for s in steps) or prep.strategy not in (DEFAULT_STRATEGY, NEXT_MATCH):
        raise OracleError("timed-out partial matches are defined for a SEQ of single events under "
                          "skip_till_any_match and skip_till_next_match")
    names = [s.var for s in steps]
    if columns is None:
        columns = list(dict.fromkeys(k for e in events for k in e))
    if query.returns is not None:
        any_vars = frozenset(v for v, info in prep.vars.items() if info.any_)
        only = next(iter(prep.vars)) if len(prep.vars) == 1 else None
        titles = dedupe([column_name(item, k) for k, item in enumerate(query.returns)])
        fns = [compile_expr(_resolve(item.expr, prep.vars, only), any_vars) for item in query.returns]
    found = []
    for _, part in _partitions(prep, _sorted(events)):
        evs = [e for _, e in part]

        valid = {k: [p for p in itertools.combinations(range(len(evs)), k) if _partial(prep, steps, evs, p)
                     and (prep.strategy != NEXT_MATCH or _takes_the_first(prep, steps, evs, p))]
                 for k in range(1, len(steps) + 1)}
        for k in range(1, len(steps)):
            extended = {p[:k] for p in valid[k + 1]}
            for p in valid[k]:
                if p not in extended:
                    found.append((tuple(part[j][0] for j in p), dict(zip(names, (evs[j] for j in p), strict=False))))
    found.sort(key=lambda f: f[0])
    rows = []
    for _, binding in found:
        if query.returns is not None:
            row = {n: _value(fn(binding)) for n, fn in zip(titles, fns, strict=True)}
        else:
            row = {default_column(v, a): None if v not in binding else binding[v].get(a) for v in names
                   for a in columns}
        row[TIMEOUT_STEP] = names[len(binding) - 1]
        rows.append(row)
    return rows


def _takes_the_first(prep, steps, evs: list[Event], picks: tuple[int, ...]) -> bool:
    """skip_till_next_match (LANGUAGE.md §5: an event that can be taken must be): each pick after the first is the
    first event after the previous pick that could take its step."""
    return not any(_partial(prep, steps, evs, (*picks[:i], j))
                   for i in range(1, len(picks)) for j in range(picks[i - 1] + 1, picks[i]))


def _partial(prep, steps, evs: list[Event], picks: tuple[int, ...]) -> bool:
    """``picks`` (positions in ``evs``) bind the first ``len(picks)`` steps as the definition says: each event
    of its step's type, strictly increasing ts, inside the window, every predicate over those steps holding."""
    chosen = [evs[j] for j in picks]
    names = [s.var for s in steps]
    bound = set(names[:len(picks)])
    binding = dict(zip(names, chosen, strict=False))
    return (all(e["type"] in s.types for e, s in zip(chosen, steps, strict=False))
            and all(a["ts"] < b["ts"] for a, b in itertools.pairwise(chosen))
            and chosen[-1]["ts"] - chosen[0]["ts"] < prep.window
            and all(holds(c.fn(binding)) for c in prep.conjuncts if c.vars <= bound))
