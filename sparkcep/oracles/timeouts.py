"""The reference for timed-out partial matches (docs/language.md, "Timed-out partial matches"), from the
definition, by brute force: every set of events, labelled with steps in every way the definition allows
(a Kleene step ``T+ v[]`` takes one event or more), kept when it is a partial match (skip_till_next_match: each
event the first that could extend the events before it), then those no event extends and that are no match.

    >>> from sparkcep.grammar import parse_query
    >>> q = parse_query("PATTERN SEQ(A a, B b, C c) WITHIN 10 RETURN a.ts, b.ts")
    >>> timed_out_rows(q, [{"type": "A", "ts": 1}, {"type": "B", "ts": 2}, {"type": "C", "ts": 3},
    ...                    {"type": "A", "ts": 5}])
    [{'a_ts': 5, 'b_ts': None, 'timeout_step': 'a'}]
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sparkcep.ir.ast import Attr, BinOp, Query, walk
from sparkcep.ir.naming import column_name, dedupe, default_column
from sparkcep.ir.spec import TIMEOUT_STEP
from sparkcep.oracles.match import (
    DEFAULT_STRATEGY,
    OracleError,
    _conjunct_holds,
    _Ev,
    _partitions,
    _prepare,
    _Rep,
    _resolve,
    _Seq,
    _sorted,
    _value,
    is_trend_aggregate,
)
from sparkcep.runtime_udfs.expr.scalar import compile_expr

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
    kleene = [isinstance(s, _Rep) and s.lo == 1 and s.hi is None and isinstance(s.inner, _Ev) for s in steps]
    steps = [s.inner if k else s for s, k in zip(steps, kleene, strict=True)]
    if (not all(isinstance(s, _Ev) for s in steps) or prep.stops or any(prep.root.strict if isinstance(prep.root, _Seq)
                                                                          else ())
            or prep.strategy not in (DEFAULT_STRATEGY, NEXT_MATCH)):
        raise OracleError("timed-out partial matches are defined for a SEQ of single events and T+ v[] steps "
                          "under skip_till_any_match and skip_till_next_match")
    names = [s.var for s in steps]
    if columns is None:
        columns = list(dict.fromkeys(k for e in events for k in e))
    if query.returns is not None:
        any_vars = frozenset(v for v, info in prep.vars.items() if info.any_)
        only = next(iter(prep.vars)) if len(prep.vars) == 1 else None
        titles = dedupe([column_name(item, k) for k, item in enumerate(query.returns)])
        fns = [compile_expr(_resolve(item.expr, prep.vars, only), any_vars) for item in query.returns]
    shared = _shared_attributes(prep, names)
    if shared:  # as [attr]: the events of a partial match share it too, and one without it is in no match
        prep = replace(prep, key=(*prep.key, *(a for a in shared if a not in prep.key)))
        events = [e for e in events if all(e.get(a) is not None for a in shared)]
    sd = _Steps(prep, steps, kleene)
    found = []
    for _, part in _partitions(prep, _sorted(events)):
        evs = [e for _, e in part]
        valid = {p for size in range(1, len(evs) + 1) for chosen in itertools.combinations(range(len(evs)), size)
                 for p in sd.labellings(chosen) if sd.partial(evs, p)}
        if prep.strategy == NEXT_MATCH:
            valid = {p for p in valid if sd.takes_the_first(evs, p)}
        extended = {p[:-1] for p in valid}
        for p in valid:
            if p not in extended and not sd.complete(evs, p):
                found.append((tuple(part[j][0] for j, _ in p), sd.binding(evs, p)))
    found.sort(key=lambda f: f[0])
    rows = []
    for _, binding in found:
        if query.returns is not None:
            row = {n: _value(fn(binding)) for n, fn in zip(titles, fns, strict=True)}
        else:
            last = {v: b[-1] if isinstance(b, list) else b for v, b in binding.items()}  # a sequence: its last
            row = {default_column(v, a): None if v not in last else last[v].get(a) for v in names for a in columns}
        row[TIMEOUT_STEP] = names[max(names.index(v) for v in binding)]
        rows.append(row)
    return rows


def _shared_attributes(prep, names: list[str]) -> list[str]:
    """The attributes ``attr`` whose equalities ``u.attr = v.attr`` (``v[i].attr`` for a Kleene step: each of its
    events) connect every step, none an ``ANY(...)`` step: they say what the equivalence test ``[attr]`` says."""
    if any(prep.vars[v].any_ for v in names):
        return []
    edges: dict[str, list[tuple[str, str]]] = {}
    for c in prep.conjuncts:
        e = c.expr
        if (isinstance(e, BinOp) and e.op == "=" and isinstance(e.left, Attr) and isinstance(e.right, Attr)
                and e.left.attr == e.right.attr and e.left.var != e.right.var
                and e.left.index in (None, "cur") and e.right.index in (None, "cur")):
            edges.setdefault(e.left.attr, []).append((e.left.var, e.right.var))
    out = []
    for attr, pairs in edges.items():
        reached, grew = {names[0]}, True
        while grew:
            grew = False
            for u, v in pairs:
                if (u in reached) != (v in reached):
                    reached |= {u, v}
                    grew = True
        if reached == set(names):
            out.append(attr)
    return out


class _Steps:
    """The steps of the pattern and the definition's tests on labelled picks ``((position, step), ...)``."""

    def __init__(self, prep, steps, kleene):
        self.prep, self.steps, self.kleene = prep, steps, kleene
        self.names = [s.var for s in steps]

    def labellings(self, chosen: tuple[int, ...]):
        """Every labelling of ``chosen`` (positions, in order) with steps: the first event takes the first step,
        each next one the same step (a Kleene step) or the step after it."""
        def label(i: int, step: int):
            if i == len(chosen):
                yield ()
                return
            for nxt in ((step,) if self.kleene[step] else ()) + ((step + 1,) if step + 1 < len(self.steps) else ()):
                for rest in label(i + 1, nxt):
                    yield ((chosen[i], nxt), *rest)
        for rest in label(1, 0):
            yield ((chosen[0], 0), *rest)

    def binding(self, evs, picks) -> dict:
        out: dict = {}
        for j, step in picks:
            if self.kleene[step]:
                out.setdefault(self.names[step], []).append(evs[j])
            else:
                out[self.names[step]] = evs[j]
        return out

    def _holds(self, c, binding) -> bool:
        runs = {v: [b] for v, b in binding.items() if isinstance(b, list)}
        return _conjunct_holds(c, binding, runs)

    def partial(self, evs, picks) -> bool:
        """A partial match: each event of its step's type, strictly increasing ts, within the window, every
        predicate over the bound steps holding but those reading the open last step's whole sequence."""
        chosen = [evs[j] for j, _ in picks]
        if not (all(evs[j]["type"] in self.steps[s].types for j, s in picks)
                and all(a["ts"] < b["ts"] for a, b in itertools.pairwise(chosen))
                and chosen[-1]["ts"] - chosen[0]["ts"] < self.prep.window):
            return False
        binding = self.binding(evs, picks)
        last = picks[-1][1]
        open_ = self.names[last] if self.kleene[last] else None
        return all(self._holds(c, binding) for c in self.prep.conjuncts
                   if c.vars <= binding.keys() and not (open_ in c.vars and _reads_whole(c.expr, open_)))

    def complete(self, evs, picks) -> bool:
        """A match: every step bound, every predicate holding."""
        binding = self.binding(evs, picks)
        return picks[-1][1] == len(self.steps) - 1 and all(self._holds(c, binding) for c in self.prep.conjuncts)

    def takes_the_first(self, evs, picks) -> bool:
        """skip_till_next_match (LANGUAGE.md §5: an event that can be taken must be): no event between two picks
        could have extended the picks before it."""
        return not any(self.partial(evs, (*picks[:i], (j, s)))
                       for i in range(1, len(picks)) for j in range(picks[i - 1][0] + 1, picks[i][0])
                       for s in {picks[i - 1][1], picks[i - 1][1] + 1}
                       if s < len(self.steps) and (s > picks[i - 1][1] or self.kleene[s]))


def _reads_whole(e, var: str) -> bool:
    """Does ``e`` read the sequence ``var`` beyond its events so far: its last (``v[v.len]``), all of it
    (``v[]``), or an event ``v[k]`` with ``k >= 2`` (absent from a shorter prefix)?"""
    return any(isinstance(n, Attr) and n.var == var
               and (n.index in ("last", "all") or (isinstance(n.index, int) and n.index >= 2)) for n in walk(e))
