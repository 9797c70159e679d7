"""Variable resolution: which variables a pattern binds, of which types, Kleene or negated, and where.

Unnamed components get an implicit variable named after their type (``SEQ(OakSt, MainSt)`` binds ``OakSt``
and ``MainSt``; GRETA writes ``SUM(A.attr)`` over ``(SEQ(A+, B))+``), suffixed ``_2``, ``_3`` ... when a
type occurs more than once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sparkcep.ir.ast import (
    Attr,
    EquivTest,
    EventPat,
    Func,
    Kleene,
    Not,
    Or,
    Pattern,
    Seq,
    can_be_empty,
    count_anchor,
    linked_first,
    walk,
)
from sparkcep.ir.errors import CEPSemanticError, Span
from sparkcep.ir.naming import implicit_namer


@dataclass(frozen=True)
class VarInfo:
    """What a variable is bound to."""

    name: str
    types: tuple[str, ...]
    any_: bool
    kleene: bool
    negated: bool
    implicit: bool
    span: Span | None = None
    #: bound by ``T? v`` or inside ``(P)?``: at most one event, so ``v.attr`` means ``v[1].attr`` (as the
    #: oracle reads it)
    optional: bool = False
    #: bound to a sequence of events: under ``+``/``*`` within its own positive or negated sub-pattern (the
    #: oracle's lists). Only these have ``v[i-1]``, ``NEXT(v)``, ``v[..i-1]`` and ``v[k]`` for ``k > 1``;
    #: ``T? v`` and a negated ``E e`` inside ``(SEQ(B b, !(E e), C c))+`` bind one event each.
    repeated: bool = False


def name_variables(pattern: Pattern, source: str | None) -> tuple[Pattern, dict[str, VarInfo]]:
    """Give every component a variable and collect them; a variable bound twice is an error."""
    explicit: dict[str, Span | None] = {}
    for pat, _, _ in _components(pattern):
        if pat.var is not None:
            if pat.var in explicit:
                raise CEPSemanticError(f"variable '{pat.var}' is bound twice", pat.span, source)
            explicit[pat.var] = pat.span
    taken = set(explicit)
    infos: dict[str, VarInfo] = {}

    fresh = implicit_namer(taken)

    def visit(p: Pattern, kleene: bool, negated: bool, optional: bool = False, repeated: bool = False) -> Pattern:
        if isinstance(p, EventPat):
            implicit = p.var is None
            var = fresh(p.types[0] if len(p.types) == 1 else "any") if implicit else p.var
            infos[var] = VarInfo(var, p.types, p.any_, kleene, negated, implicit, p.span, optional, repeated)
            return replace(p, var=var) if implicit else p
        if isinstance(p, Kleene):
            many = repeated or p.op != "?"
            return replace(p, inner=visit(p.inner, True, negated, not many, many))
        if isinstance(p, Not):  # a negated sub-pattern is matched on its own: its variables start single
            return replace(p, inner=visit(p.inner, kleene, True))
        if isinstance(p, Seq):
            return replace(p, items=tuple(visit(i, kleene, negated, optional, repeated) for i in p.items))
        return replace(p, alternatives=tuple(visit(a, kleene, negated, optional, repeated)
                                             for a in p.alternatives))

    named = visit(pattern, False, False)
    return named, infos


def _components(p: Pattern, kleene: bool = False, negated: bool = False):
    if isinstance(p, EventPat):
        yield p, kleene, negated
    elif isinstance(p, Kleene):
        yield from _components(p.inner, True, negated)
    elif isinstance(p, Not):
        yield from _components(p.inner, kleene, True)
    elif isinstance(p, Seq):
        for i in p.items:
            yield from _components(i, kleene, negated)
    elif isinstance(p, Or):
        for a in p.alternatives:
            yield from _components(a, kleene, negated)


def check_pattern_shape(p: Pattern, source: str | None) -> None:
    """Negation must not be the whole pattern (LANGUAGE.md §9), nor every item of a SEQ."""
    if isinstance(p, Not):
        raise CEPSemanticError("negation cannot be the whole pattern", p.span, source)
    if isinstance(p, Seq):
        if all(isinstance(i, Not) for i in p.items):
            raise CEPSemanticError("a SEQ needs at least one positive component", p.span, source)
        for i in p.items:
            check_pattern_shape(i.inner if isinstance(i, Not) else i, source)
    elif isinstance(p, Kleene):
        check_pattern_shape(p.inner, source)
    elif isinstance(p, Or):
        for a in p.alternatives:
            check_pattern_shape(a, source)


#: A bounded quantifier in a trend-aggregate query becomes one GRETA template state per iteration (up to
#: ``max(n, m)``) and event of its group (count-indexed states): an event costs O(states) per window.
MAX_BOUNDED_STATES = 256


def check_bounds(p: Pattern, mode: str, source: str | None) -> None:
    """Where a bounded quantifier ``P{n,m}`` runs: not inside a negation nor inside another repetition, on a
    group only if one event of every iteration counts it (:func:`ir.ast.count_anchor`); in a trend-aggregate
    query unrolled into at most :data:`MAX_BOUNDED_STATES` template states."""

    def visit(p: Pattern, repeated: bool, negated: bool) -> None:
        if isinstance(p, Kleene):
            if p.bounds is not None:
                states = max(b for b in p.bounds if b is not None) * sum(
                    isinstance(n, EventPat) for n in walk(p.inner))
                if mode == "aggregate" and states > MAX_BOUNDED_STATES:
                    raise CEPSemanticError(
                        f"a bounded quantifier in a trend-aggregate query unrolls into one template state per "
                        f"iteration and event of the group ({states} here): at most {MAX_BOUNDED_STATES}; "
                        "write + with a predicate, or return the matches", p.span, source)
                if negated:
                    raise CEPSemanticError("a bounded quantifier {n,m} inside a negation is not supported: "
                                           "negate the events written out, e.g. NOT SEQ(B x, B y)", p.span, source)
                if repeated:
                    raise CEPSemanticError("a bounded quantifier {n,m} inside a repetition (+, *, {n,m}) is not "
                                           "supported: its count would be per iteration of the outer one",
                                           p.span, source)
                if count_anchor(p) is None:
                    raise CEPSemanticError(
                        "a bounded group (P){n,m} needs a single event that every iteration takes exactly once "
                        "(SEQ(B b, C+ c[]) counts b), so that a match's events say how many iterations it has: "
                        "(B+ b[]){2,} is B{2,} b[]", p.span, source)
            visit(p.inner, repeated or p.op != "?", negated)
        elif isinstance(p, Not):
            visit(p.inner, repeated, True)
        elif isinstance(p, Seq):
            for i in p.items:
                visit(i, repeated, negated)
        elif isinstance(p, Or):
            for a in p.alternatives:
                visit(a, repeated, negated)

    visit(p, False, False)


def check_strict_steps(p: Pattern, mode: str, source: str | None) -> None:
    """Where ``NEXT P`` (a strict step inside a SEQ) runs: on a positive item that selects at least one event
    and has an item before it; inside a repetition (each iteration's step linked to the event before it in that
    iteration) in a match query, where an item before it in its SEQ selects an event; inside a negation of a
    match query (the negated sub-pattern's step linked to the event before it in the occurrence, its first item
    to the match's event right before the gap: ``!(NEXT C c)``, ``NOT SEQ(B b, NEXT C c)``), unless nothing can
    come before the negation; ``NEXT !(C c)`` (notNext) after a single event with an item after it (:func:`_not_next`;
    inside a repetition per iteration, inside a negation of a match query :func:`_not_next_inside`; in a
    trend-aggregate query :func:`_not_next_trend`)."""

    def visit(p: Pattern, inside: str | None, repeated: bool, before: bool, head: bool, after: bool) -> None:
        # before: an item before this node (in an enclosing SEQ, or an earlier iteration) may select an event;
        # head: this node is the sub-pattern of a negation (its first item may link to the event before the gap);
        # after: an item after this node in an enclosing SEQ must take an event (the match goes on past it)
        if isinstance(p, Seq):
            for k, (item, strict) in enumerate(zip(p.items, p.strict or (False,) * len(p.items), strict=True)):
                if mode == "aggregate" and k and not inside and isinstance(item, Not) and linked_first(item):
                    why = _not_next_trend(p.items, k)  # !(NEXT C c): as NEXT !(C c), the C also inside the gap
                    if why is not None:
                        raise CEPSemanticError(f"NEXT {why} is not supported", item.span or p.span, source)
                    continue
                if strict:
                    why = ("at the start of a negation in a trend-aggregate query, but on its first event "
                           "followed by an unlinked item (NOT SEQ(NEXT B y, C z, ...))"
                           if inside and mode == "aggregate" and k == 0 and head and not _linked_negation(p) else
                           "at the start of a negation that starts the pattern (no event comes before it)"
                           if k == 0 and head and not before else
                           None if inside and mode == "aggregate" and k == 0 and head else
                           f"inside {inside} in a trend-aggregate query after items that may all match no event"
                           if inside and mode == "aggregate" and not isinstance(item, Not)
                           and all(can_be_empty(i) for i in p.items[:k]) else
                           _not_next_inside(p.items, k) if inside and isinstance(item, Not) else
                           "at the start of a negation that starts the pattern (no event comes before it)"
                           if k == 0 and head and not before else
                           "on the first item of a SEQ: it links a step to the one before it" if k == 0 and not head
                           else
                           _not_next_trend(p.items, k) if mode == "aggregate" and isinstance(item, Not) else
                           _not_next(p.items, k, repeated, after) if isinstance(item, Not) else
                           "on an item that can match no event (?, *, {0,m})" if can_be_empty(item) else
                           "inside a repetition after items that may all match no event (the step before it "
                           "would lie outside the iteration)" if repeated and all(can_be_empty(i) for i in p.items[:k])
                           and not (k == 0 and head) else None)
                    if why is not None:
                        raise CEPSemanticError(f"NEXT {why} is not supported", item.span or p.span, source)
                visit(item, inside, repeated, before or any(not isinstance(i, Not) for i in p.items[:k]), False,
                      after or not all(can_be_empty(i) for i in p.items[k + 1:]))
        elif isinstance(p, Kleene):
            visit(p.inner, inside, repeated or p.op != "?", before or p.op != "?", False, after)
        elif isinstance(p, Not):
            visit(p.inner, "a negation", repeated, before, True, False)
        elif isinstance(p, Or):
            for a in p.alternatives:
                visit(a, inside, repeated, before, head, after)

    visit(p, None, False, False, False, False)


def _linked_negation(p: Seq) -> bool:
    """Is ``p`` (a negated sub-pattern) ``SEQ(NEXT B y, C z, ...)``: its first item one event linked to the pick
    right before the gap, the second not linked to it (trend aggregates run it)?"""
    return (len(p.items) > 1 and isinstance(p.items[0], EventPat)
            and not (len(p.strict) > 1 and p.strict[1]))


def check_until(p: Pattern, mode: str, source: str | None) -> None:
    """Where a stop condition ``UNTIL [ANY] (cond)`` runs: in a match or trend-aggregate query (``mode``), on a loop
    (``+``, ``*``, ``{n,}``, ``{n,m}`` with ``m > 1``) of one named event ``T+ v[]`` or of a group ``(P)+``, not
    inside a repetition or a negation; ``cond`` reads the candidate stop event only, as ``v.attr`` (``v`` the
    loop's variable, or one of the group's).  With AFTER MATCH SKIP, what the translation to MATCH_RECOGNIZE
    takes is decided by ``compiler.recognize.from_pattern.check_skip_query``."""

    def visit(p: Pattern, inside: str | None) -> None:
        if isinstance(p, Kleene):
            if p.until is not None:
                _check_until(p, inside, source)
            visit(p.inner, inside or ("a repetition" if p.op != "?" else None))
        elif isinstance(p, Not):
            visit(p.inner, "a negation")
        elif isinstance(p, (Seq, Or)):
            for i in p.items if isinstance(p, Seq) else p.alternatives:
                visit(i, inside)

    visit(p, None)


def _check_until(p: Kleene, inside: str | None, source: str | None) -> None:
    where = p.until.span or p.span
    why = (f"inside {inside}" if inside else
           "on a quantifier that takes at most one event (?, {1}, {0,1})" if p.repeat[1] == 1 else None)
    if why is not None:
        raise CEPSemanticError(f"UNTIL {why} is not supported" + (": there is no loop to stop (Flink's until "
                                                                   "applies to looping patterns)"
                                                                   if p.repeat[1] == 1 else ""), where, source)
    if isinstance(p.inner, EventPat):
        var, whose = p.inner.var, f"the loop's variable is {p.inner.var}"
    else:
        group = sorted({n.var for n in walk(p.inner) if isinstance(n, EventPat)} - {
            n.var for neg in walk(p.inner) if isinstance(neg, Not) for n in walk(neg.inner)
            if isinstance(n, EventPat)})
        read = [n for n in walk(p.until) if isinstance(n, Attr)]
        var = read[0].var if read else None
        whose = f"one of the group's variables {', '.join(group)}"
        if var not in group:
            raise CEPSemanticError(f"UNTIL on a group reads the event that may stop the loop as v.attr, v {whose}",
                                   (read[0].span if read else None) or where, source)
    for n in walk(p.until):
        if isinstance(n, Attr):
            if n.var != var or n.index is not None:
                raise CEPSemanticError(
                    f"UNTIL reads only the event that may stop the loop, as {var}.attr"
                    + (f" ({whose})" if n.var != var else
                       f" (not {var}[...]: the stop event is not one of the loop's)"), n.span or where, source)
        elif isinstance(n, (Func, EquivTest)):
            raise CEPSemanticError("UNTIL is a condition on one event: no aggregate nor equivalence test",
                                   n.span or where, source)


def _not_next(items: tuple, k: int, repeated: bool = False, after: bool = False) -> str | None:
    """Why ``NEXT !(...)`` at item ``k`` (Flink's notNext) does not run, or None: it negates one event, right
    after a single event (``T v``, no quantifier), with an item after it that must take an event (at the end, or
    before items that may all match no event, it would wait for an event that may never come: the oracle reads
    the partition's next event even after the window).  Inside a repetition it is decided per iteration, after
    that iteration's event.  At the end of a repeated or nested SEQ it runs when an item after that SEQ must
    take an event (``after``: the event right after the last pick then comes before the match ends)."""
    if not isinstance(items[k].inner, EventPat):
        return "before a negation of more than one event (NEXT !(C c) negates the next event)"
    if not isinstance(items[k - 1], EventPat):
        return "before a negation after anything but a single event T v (NEXT !(C c) follows one event)"
    if not after and all(can_be_empty(i) for i in items[k + 1:]):
        return ("before a negation at the end of a repeated sequence with no item after the group that must take "
                "an event" if repeated else
                "before a negation at the end of the pattern (or of a SEQ with no item after it that must take an "
                "event)" if k == len(items) - 1 else
                "before items that may all match no event, with no item after them that must take one (the match "
                "without them would wait for the partition's next event, which may come after its window or never)")
    return None


def _not_next_inside(items: tuple, k: int) -> str | None:
    """Why ``NEXT !(...)`` at item ``k`` of a SEQ inside a negation of a match query does not run, or None: as
    :func:`_not_next`, and an item after it inside the negation must take an event, so that the event right
    after its pick lies in the negation's gap (the negated sub-pattern occurs there only if that event is no
    such ``C``)."""
    if k == 0:
        return "at the start of a negation (NEXT !(C c) follows a pick of the negated sub-pattern)"
    if all(can_be_empty(i) for i in items[k + 1:]):
        return ("before a negation inside a negation with no item after it that must take an event (the event "
                "right after its pick could lie outside the gap)")
    return _not_next(items, k)


def _not_next_trend(items: tuple, k: int) -> str | None:
    """Why ``NEXT !(...)`` at item ``k`` of a trend-aggregate query does not run, or None: it negates one event,
    after a positive item (the edge from that item's last event is valid only if the partition's next event is
    no such event: GRETA's graph knows it one event late); next to a negation (``NOT E e``) the edge is also
    guarded by that negation, as any edge across one.  Where a trend may end right
    after it, a trend ending there counts once its next event has come and is no such event, or in a window that
    ends before one came (the oracle reads the window's events only); ``!(NEXT C c)`` is refused there."""
    if not isinstance(items[k].inner, EventPat) and not linked_first(items[k]):
        return "before a negation of more than one event (NEXT !(C c) negates the next event)"
    if any(isinstance(i, Not) for i in items[k + 1:]) and all(can_be_empty(i) for i in items[k + 1:]):
        return ("before a negation after which a trend may end and another negation, in a trend-aggregate query "
                "(a held END vertex with a negated end)")
    if linked_first(items[k]) and all(can_be_empty(i) for i in items[k + 1:]):
        return ("inside a negation after which a trend may end, in a trend-aggregate query (!(NEXT C c) there is a "
                "negated end: write NEXT !(C c))")
    return None


def is_flat_sequence(p: Pattern) -> bool:
    """True for ``T v`` or ``SEQ`` of single events, Kleene-plus single events and negated single events."""
    items = p.items if isinstance(p, Seq) else (p,)
    for i in items:
        inner = i.inner if isinstance(i, (Not, Kleene)) else i
        if not isinstance(inner, EventPat):
            return False
        if isinstance(i, Kleene) and i.op != "+":
            return False
    return True
