"""Per-event component tests of an engine spec: compiled local predicates by type, and an event's _mask."""

from __future__ import annotations

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
