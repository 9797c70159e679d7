"""The reference of ``AFTER MATCH SKIP`` for match queries: preferment and the skip rule, from the definition.

Given every match the query's selection strategy reports in one partition (:mod:`sparkcep.oracles.match`),
this module keeps those SQL:2016 would report (docs/language.md, "Preferred matches and AFTER MATCH SKIP"):

1. The partition's events in order are rows ``0 .. n-1``; a match is its picks ``[(row, var), ...]``.  The
   attempt starts at row ``s = 0``.
2. The candidates at ``s`` are the matches whose first event is row ``s``.  The preferred one is the first by
   the **preferment order**, the order in which a backtracking matcher of the pattern tries its derivations
   (SQL:2016's order of a row pattern's matches): at each step the next move is chosen before the event it
   takes.  A greedy quantifier (of an event or of a group) tries another iteration before leaving, a reluctant
   one after; an optional component (``?``, ``*``) tries being taken before being left out when greedy, after
   when reluctant; an ``OR`` (of whole patterns, or inside a ``SEQ``) tries its left alternative first; the
   end of the match is a move too.  For the same move the earlier event comes first (the events a
   skip_till_any_match match skips before it are a reluctant filler).  ``sparkcep.oracles.match`` walks the
   pattern in that order (``_derive(..., prefer=True)``) and hands :func:`select` the first derivation from
   ``s`` that is a candidate.  A negation takes no event and adds no move: it only removes candidates.
3. No candidate: ``s + 1``.  Else the preferred match is reported and the next attempt starts at: ``PAST LAST
   EVENT``: the row after its last event; ``TO NEXT EVENT``: ``s + 1``; ``TO FIRST v`` / ``TO LAST v``: the
   first / last row of ``v`` in the match, or ``s + 1`` if ``v`` has none or it is ``s`` itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sparkcep.ir.ast import SKIP_PAST_LAST_EVENT, SKIP_TO_FIRST, SKIP_TO_LAST, SKIP_TO_NEXT_EVENT

__all__ = ["next_start", "select"]

Picks = tuple[tuple[int, str], ...]


def next_start(kind: str, var: str | None, s: int, picks: Sequence[tuple[int, str]]) -> int:
    """Where the attempt after the match ``picks`` (started at row ``s``) starts (step 3)."""
    if kind == SKIP_PAST_LAST_EVENT:
        return picks[-1][0] + 1
    if kind == SKIP_TO_NEXT_EVENT:
        return s + 1
    if kind not in (SKIP_TO_FIRST, SKIP_TO_LAST):  # pragma: no cover - the grammar has four kinds
        raise ValueError(kind)
    rows = [row for row, v in picks if v == var]
    if not rows:
        return s + 1
    target = rows[0] if kind == SKIP_TO_FIRST else rows[-1]
    return s + 1 if target == s else target


def select(kind: str, var: str | None, n_rows: int, candidates: Mapping[Picks, Any],
           first: Callable[[int, Mapping[Picks, Any]], Picks]) -> list[Any]:
    """The payloads of the reported matches of one partition of ``n_rows`` rows, in order.  ``candidates`` maps
    the picks of every match of the strategy to its payload; ``first(s, options)`` is the first of ``options``
    (the candidates starting at row ``s``) in the preferment order (step 2)."""
    by_start: dict[int, dict[Picks, Any]] = {}
    for picks, payload in candidates.items():
        by_start.setdefault(picks[0][0], {})[picks] = payload
    out = []
    s = 0
    while s < n_rows:
        options = by_start.get(s)
        if not options:
            s += 1
            continue
        picks = first(s, options)
        out.append(options[picks])
        s = next_start(kind, var, s, picks)
    return out
