"""Per-event component tests of an engine spec: compiled local predicates by type, and an event's _mask."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from sparkcep.ir.ast import Attr, EventPat, Kleene, Not, Seq, walk
from sparkcep.runtime_udfs.expr.scalar import compile_expr
from sparkcep.runtime_udfs.expr.vector import vectorize


def component_table(components, any_vars: frozenset[str]) -> dict[str, tuple]:
    """``type → ((k, var, compiled local predicate or None), ...)`` over the components that accept the type:
    the table :func:`component_mask` reads."""
    table: dict[str, list] = {}
    for k, c in enumerate(components):
        local = compile_expr(c.local, any_vars) if c.local is not None else None
        for t in c.types:
            table.setdefault(t, []).append((k, c.var, local))
    return {t: tuple(v) for t, v in table.items()}


def component_mask(by_type, event: dict) -> int:
    """``_mask`` for an event that arrived without one: bit k set iff the event passes component k's type
    test and local predicate.  ``by_type`` maps a type to its ``(k, var, compiled local predicate or None)``."""
    mask = 0
    for k, var, local in by_type.get(event.get("type"), ()):
        if local is None or local({var: event}) is True:
            mask |= 1 << k
    return mask



class Stop(NamedTuple):
    """A loop with a stop condition ``UNTIL`` (Flink's ``until``): the variables of its events (``loop``), and
    what a stop event is: an event of ``types`` (None: ``UNTIL ANY``, any event of the partition) for which
    ``cond``, read on it alone as ``var``, is TRUE."""

    loop: frozenset[str]
    var: str
    types: tuple[str, ...] | None
    cond: Callable
    #: ``cond`` over a column of events at once (:func:`~sparkcep.runtime_udfs.expr.vector.vectorize`), None if
    #: it has no vectorized form
    vector: Any = None


def _positive_vars(p) -> set[str]:
    if isinstance(p, EventPat):
        return {p.var}
    if isinstance(p, Not):
        return set()
    if isinstance(p, Kleene):
        return _positive_vars(p.inner)
    return set().union(*map(_positive_vars, p.items if isinstance(p, Seq) else p.alternatives))


def stop_table(pattern, components) -> tuple[Stop, ...]:
    """The loops of ``pattern`` with a stop condition, ``T+ v[] UNTIL (cond)`` or ``(P)+ UNTIL (cond)`` (whose
    condition names one of ``P``'s variables): what :func:`is_stop` reads."""
    types = {c.var: c.types for c in components}
    out = []
    for k in walk(pattern or ()):
        if isinstance(k, Kleene) and k.until is not None:
            var = k.inner.var if isinstance(k.inner, EventPat) else next(
                n.var for n in walk(k.until) if isinstance(n, Attr))
            out.append(Stop(frozenset(_positive_vars(k.inner)), var, None if k.until_any else types[var],
                            compile_expr(k.until), vectorize(k.until)))
    return tuple(out)


def is_stop(stop: Stop, event: dict) -> bool:
    """Is ``event`` a stop event of the loop ``stop``: of one of its types (any with ``UNTIL ANY``), with its
    condition TRUE (a lacking attribute is NULL: no stop)?"""
    return ((stop.types is None or event.get("type") in stop.types)
            and stop.cond({stop.var: [event]}, {stop.var: 0}) is True)


#: The Arrow types of the columns a stop condition is evaluated on vectorized (those Arrow infers from Python ints,
#: floats, strings, booleans and None)
_COLUMN_TYPES = (pa.int64(), pa.float64(), pa.string(), pa.bool_(), pa.null())
_FLOATS = {float, type(None)}


def stop_rows(stop: Stop, events: Sequence[dict], rows: Sequence[int] | None = None,
              columns: dict[str, list] | None = None) -> list[int]:
    """The positions in ``events`` of the stop events of ``stop`` (:func:`is_stop` on each, in order): the
    condition evaluated once over the columns of the events of the loop's types (:attr:`Stop.vector`, Spark SQL's
    semantics as the per-event evaluator's), or per event where it cannot be (no vectorized form; an attribute
    whose values are of several kinds, or of a kind Arrow reads differently).  ``rows``: the positions of the
    events of the loop's types, if the caller knows them (else found here); ``columns``: attribute → its values in
    ``events``, if the caller read them already (as it went over the events: a second pass over event dicts misses
    the cache on each)."""
    types = stop.types
    if rows is not None:
        pass
    elif types is None:
        rows = range(len(events))
    elif len(types) == 1:
        kind = types[0]
        rows = [i for i, ev in enumerate(events) if ev.get("type") == kind]
    else:
        rows = [i for i, ev in enumerate(events) if ev.get("type") in types]
    if not rows:
        return []
    vector = stop.vector
    if vector is not None:
        read = {}
        for var, attr in vector.reads:
            known = columns.get(attr) if columns is not None else None
            if known is None:
                values = [events[i].get(attr) for i in rows]
            else:
                values = known if len(rows) == len(events) else [known[i] for i in rows]
            try:
                column = pa.array(values, from_pandas=True)  # (NaN: NULL, as the evaluator reads it)
            except (pa.ArrowException, OverflowError):  # several kinds, an int beyond BIGINT or inexact as a double
                break
            if column.type not in _COLUMN_TYPES or (column.type == pa.float64()
                                                     and not set(map(type, values)) <= _FLOATS):
                break  # (Arrow makes ints and True doubles next to a float: BIGINT arithmetic is not DOUBLE's)
            read[var, attr] = column
        else:
            hits = vector(read, len(rows))
            return [rows[x] for x in np.flatnonzero(hits).tolist()]
    cond, var = stop.cond, stop.var
    return [i for i in rows if cond({var: [events[i]]}, {var: 0}) is True]
