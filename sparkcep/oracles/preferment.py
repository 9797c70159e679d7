"""The reference of ``AFTER MATCH SKIP`` for match queries: preferment and the skip rule, from the definition.

Given every match the query's selection strategy reports in one partition (:mod:`sparkcep.oracles.match`),
this module keeps those SQL:2016 would report (docs/language.md, "Preferred matches and AFTER MATCH SKIP"):

1. The partition's events in order are rows ``0 .. n-1``; a match is its picks ``[(row, var), ...]``.  The
   attempt starts at row ``s = 0``.
2. The candidates at ``s`` are the matches whose first event is row ``s``.  The preferred one is the least by
   the **preferment order**: two candidates agree up to some step and then differ; at that step both are in the
   same place of the pattern (after the ``n``-th event of component ``k``), whose next moves are ranked by
   :func:`choices` (a greedy quantifier ranks another iteration before leaving the component, a reluctant one
   after; an optional component (``?``, ``*``) ranks being taken before being left out when greedy, after when
   reluctant; the end of the match is a move too).  The candidate whose move ranks first is preferred; for the
   same move, the one that takes the earlier event (the events a skip_till_any_match match skips before it are
   a reluctant filler: the earliest next event is preferred).
3. No candidate: ``s + 1``.  Else the preferred match is reported and the next attempt starts at: ``PAST LAST
   EVENT``: the row after its last event; ``TO NEXT EVENT``: ``s + 1``; ``TO FIRST v`` / ``TO LAST v``: the
   first / last row of ``v`` in the match, or ``s + 1`` if ``v`` has none or it is ``s`` itself.

The patterns are a ``SEQ`` (or one component) of events, Kleene events and negations whose first component takes
an event, or an OR of such patterns: a match binds one alternative, and the alternatives rank left to right
before any other move (SQL:2016's alternation ``P1 | P2``: a candidate of ``P1`` is preferred to every one of
``P2`` at the same start).  A negation takes no event and adds no move: it only removes candidates (a match of
the strategy already has no negated event where the negation forbids one), so the components ranked here are
the positive ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sparkcep.ir.ast import SKIP_PAST_LAST_EVENT, SKIP_TO_FIRST, SKIP_TO_LAST, SKIP_TO_NEXT_EVENT

__all__ = ["Comp", "END", "choices", "select"]

#: the move "the match ends here"
END = -1


@dataclass(frozen=True)
class Comp:
    var: str
    lo: int
    hi: int | None
    greedy: bool


def _entering(comps: Sequence[Comp], j: int) -> list[int]:
    """The moves that take the next event in component ``j`` or later (skipping optional ones), ranked."""
    if j == len(comps):
        return [END]
    c = comps[j]
    if c.lo >= 1:
        return [j]
    rest = _entering(comps, j + 1)
    return [j, *rest] if c.greedy else [*rest, j]


def choices(comps: Sequence[Comp], k: int, n: int) -> list[int]:
    """After the ``n``-th event of component ``k``: the next moves (a component index, or END), best first."""
    c = comps[k]
    again = [k] if c.hi is None or n < c.hi else []
    if n < c.lo:
        return again
    leave = _entering(comps, k + 1)
    return again + leave if c.greedy else leave + again


def _key(comps: Sequence[Comp], picks: Sequence[tuple[int, str]]) -> tuple:
    """The preferment key of a match: per move after the first event, (rank of the move, row); then the end."""
    index = {c.var: k for k, c in enumerate(comps)}
    key = []
    k, n = 0, 1
    for row, var in picks[1:]:
        j = index[var]
        key.append((choices(comps, k, n).index(j), row))
        k, n = j, (n + 1 if j == k else 1)
    key.append((choices(comps, k, n).index(END), 0))
    return tuple(key)


def _next_start(kind: str, var: str | None, s: int, picks: Sequence[tuple[int, str]]) -> int:
    if kind == SKIP_PAST_LAST_EVENT:
        return picks[-1][0] + 1
    if kind == SKIP_TO_NEXT_EVENT:
        return s + 1
    rows = [row for row, v in picks if v == var]
    if not rows:
        return s + 1
    target = rows[0] if kind == SKIP_TO_FIRST else rows[-1]
    if kind not in (SKIP_TO_FIRST, SKIP_TO_LAST):  # pragma: no cover - the grammar has four kinds
        raise ValueError(kind)
    return s + 1 if target == s else target


def select(alternatives: Sequence[Sequence[Comp]], kind: str, var: str | None, n_rows: int,
           candidates: Sequence[tuple[Sequence[tuple[int, str]], Any]]) -> list[Any]:
    """The payloads of the reported matches of one partition of ``n_rows`` rows, in order; ``candidates`` are
    ``(picks, payload)`` for every match of the strategy; ``alternatives``: the components of each alternative
    of an OR of patterns (one for a pattern without OR), the first move of a match (before its first event)
    ranking them left to right."""
    branch = {c.var: (k, comps) for k, comps in enumerate(alternatives) for c in comps}
    by_start: dict[int, list] = {}
    for picks, payload in candidates:
        k, comps = branch[picks[0][1]]
        by_start.setdefault(picks[0][0], []).append(((k, _key(comps, picks)), picks, payload))
    out = []
    s = 0
    while s < n_rows:
        options = by_start.get(s)
        if not options:
            s += 1
            continue
        _, picks, payload = min(options, key=lambda o: o[0])
        out.append(payload)
        s = _next_start(kind, var, s, picks)
    return out
