"""Several MATCH_RECOGNIZE statements over one partition: the shared per-partition runner of a workload.

Statements that read the same source with the same PARTITION BY and ORDER BY see the same row pattern
partitions in the same order, up to ties: each orders rows that tie on ORDER BY by its own remaining
``spec.columns`` (:func:`~sparkcep.runtime_udfs.recognize.sort_key`).  The Spark layer sorts a partition once,
by ORDER BY then :func:`shared_tiebreak` (the longest statement tiebreak); a statement whose tiebreak is a
prefix of it (:func:`presorted`) reads the rows as they come (rows tied on all its columns are the same rows
to it), any other sorts them again by its own key (stable, nearly sorted input).  Each statement keeps its
own engine state; the combined state of a key is the list of them (:func:`states_to_json`).

Pure Python (no pyspark).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sparkcep.ir import recognize as R
from sparkcep.runtime_udfs.recognize.engine import RecognizeState, advance, init_state, run_partition, step, wakeup
from sparkcep.runtime_udfs.recognize.order import sort_key
from sparkcep.runtime_udfs.recognize.serde import state_from_json, state_to_json

__all__ = ["advance_all", "check_shareable", "init_states", "presorted", "run_shared_partition",
           "shared_tiebreak", "states_from_json", "states_to_json", "step_all", "tiebreak", "wakeup_all"]

Row = dict[str, Any]

#: Version tag of a combined state.
VERSION = 1


def _order(spec: R.RecognizeSpec) -> tuple:
    return tuple((o.column, o.ascending, o.ascending if o.nulls_first is None else o.nulls_first)
                 for o in spec.order_by)


def check_shareable(specs: Sequence[R.RecognizeSpec]) -> None:
    """ValueError unless every spec has the PARTITION BY, ORDER BY and time column of the first."""
    if not specs:
        raise ValueError("a shared MATCH_RECOGNIZE run needs at least one statement")
    first = specs[0]
    for i, spec in enumerate(specs[1:], 1):
        if (spec.partition_by, _order(spec), spec.time_column) != (first.partition_by, _order(first),
                                                                   first.time_column):
            raise ValueError(f"statement {i} has another PARTITION BY or ORDER BY than statement 0: they cannot "
                             "share one sorted partition")


def tiebreak(spec: R.RecognizeSpec) -> tuple[str, ...]:
    """The columns ``sort_key(spec)`` orders by after the ORDER BY items, in order."""
    ordered = {o.column for o in spec.order_by}
    return tuple(c for c in spec.columns if c not in ordered and c != spec.time_column)


def shared_tiebreak(specs: Sequence[R.RecognizeSpec]) -> tuple[str, ...]:
    """The tiebreak of the shared sort: the longest statement tiebreak (the first of the longest)."""
    return max((tiebreak(s) for s in specs), key=len, default=())


def presorted(specs: Sequence[R.RecognizeSpec], order: Sequence[str]) -> list[bool]:
    """Per spec: whether rows sorted by ORDER BY then ``order`` (ascending, NULLs first) are in its own order
    (its tiebreak is a prefix of ``order``)."""
    order = tuple(order)
    return [order[:len(t)] == t for t in map(tiebreak, specs)]


def _rows_for(spec: R.RecognizeSpec, rows: Sequence[Row], ready: bool) -> Sequence[Row]:
    return rows if ready else sorted(rows, key=sort_key(spec))


def _flags(specs, ready, rows: Sequence[Row] = ()) -> list[bool]:
    """``ready``, with every spec ready when no two of ``rows`` (in the shared order) tie on ORDER BY: then
    every spec's order is the rows' order whatever its tiebreak."""
    flags = [False] * len(specs) if ready is None else list(ready)
    if ready is not None and not all(flags) and len(rows) > 1:
        key = sort_key(replace(specs[0], columns=()))
        keys = [key(r) for r in rows]
        if all(a < b for a, b in itertools.pairwise(keys)):
            return [True] * len(specs)
    return flags


def run_shared_partition(specs: Sequence[R.RecognizeSpec], rows: Sequence[Row], *,
                         ready: Sequence[bool] | None = None) -> list[list[Row]]:
    """Each spec's outputs over one whole partition: ``rows`` in the shared order (or any order where
    ``ready`` is not given: every spec sorts them); ``ready[i]``: ``rows`` are already in spec i's order
    (:func:`presorted`)."""
    flags = _flags(specs, ready, rows)
    return [run_partition(spec, _rows_for(spec, rows, ok)) for spec, ok in zip(specs, flags, strict=True)]


def init_states(specs: Sequence[R.RecognizeSpec]) -> list[RecognizeState]:
    check_shareable(specs)
    return [init_state(spec) for spec in specs]


def step_all(specs: Sequence[R.RecognizeSpec], states: list[RecognizeState], rows: Sequence[Row], *,
             ready: Sequence[bool] | None = None) -> tuple[list[RecognizeState], list[list[Row]]]:
    """:func:`~sparkcep.runtime_udfs.recognize.step` of every spec over the next rows of the partition (all
    rows that tie on ORDER BY in one call, as a stream's settled rows are)."""
    out = []
    for k, (spec, ok) in enumerate(zip(specs, _flags(specs, ready, rows), strict=True)):
        states[k], got = step(spec, states[k], _rows_for(spec, rows, ok))
        out.append(got)
    return states, out


def advance_all(specs: Sequence[R.RecognizeSpec], states: list[RecognizeState], watermark: float | None, *,
                final: bool = False) -> tuple[list[RecognizeState], list[list[Row]]]:
    out = []
    for k, spec in enumerate(specs):
        states[k], got = advance(spec, states[k], watermark, final=final)
        out.append(got)
    return states, out


def wakeup_all(specs: Sequence[R.RecognizeSpec], states: list[RecognizeState]) -> float | None:
    """The smallest watermark at which some spec's :func:`advance` decides something without new rows."""
    dues = [d for d in (wakeup(spec, st) for spec, st in zip(specs, states, strict=True)) if d is not None]
    return min(dues) if dues else None


def states_to_json(states: Sequence[RecognizeState]) -> str:
    return json.dumps({"v": VERSION, "states": [state_to_json(s) for s in states]}, separators=(",", ":"))


def states_from_json(text: str) -> list[RecognizeState]:
    d = json.loads(text)
    if d.get("v") != VERSION:
        raise ValueError(f"shared MATCH_RECOGNIZE state version {d.get('v')} is not supported")
    return [state_from_json(s) for s in d["states"]]
