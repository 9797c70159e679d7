"""Per-event component tests of an engine spec: compiled local predicates by type, and an event's _mask."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from sparkcep.ir.ast import Attr, EventPat, Kleene, Not, Seq, walk
from sparkcep.runtime_udfs.expr.scalar import compile_expr


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
                            compile_expr(k.until)))
    return tuple(out)


def is_stop(stop: Stop, event: dict) -> bool:
    """Is ``event`` a stop event of the loop ``stop``: of one of its types (any with ``UNTIL ANY``), with its
    condition TRUE (a lacking attribute is NULL: no stop)?"""
    return ((stop.types is None or event.get("type") in stop.types)
            and stop.cond({stop.var: [event]}, {stop.var: 0}) is True)
