"""The automaton of a match plan's alternative: fragments of the pattern, their loops and groups."""

from __future__ import annotations

from sparkcep.ir.ast import (
    EventPat,
    Kleene,
    Not,
    Or,
    Seq,
    can_be_empty,
)
from sparkcep.runtime_udfs.match.conjuncts import EngineUnsupportedError


def _group(p: Kleene, inner, dnf, component) -> list[list[tuple]]:
    """The DNF of a repeated group ``(P)+``/``(P)*``: one alternative holding a ``("group", fragment, False)``
    item, the group compiled to a :class:`Fragment` (its own ``OR``, ``?``, ``*``, nested groups and
    negations included: iterations may take different branches).  ``(B+)+`` and ``(SEQ(B+ b[], !(E e)))+``
    stay the flat ``B+``/``SEQ(B+ b[], !(E e))`` they equal (a match is a set of events, valid if one
    derivation is, and taking all of them as one iteration has the fewest negation gaps)."""
    members = inner.items if isinstance(inner, Seq) else (inner,)
    plain = [i for i in members if not isinstance(i, Not)]
    if len(plain) == 1 and isinstance(plain[0], Kleene) and plain[0].op == "+":
        one = plain[0].inner
        while isinstance(one, Seq) and len(one.items) == 1:
            one = one.items[0]
        if isinstance(one, EventPat):
            return dnf(inner) + ([[]] if p.op == "*" else [])
    plus = _fragment(inner, dnf, component).repeat("+")
    # the group item selects at least one event; matching nothing ((P)* = (P)+ or nothing, or an inner P that
    # can be empty) is an alternative of its own (sase_ssc), with the negations such an empty stretch holds, so
    # that no binding belongs to two alternatives
    empty = _minimal(plus.null + ((frozenset(),) if p.op == "*" else ()))
    plus.null = ()  # (several ways to be empty, each with negations: alternatives Plan merges into one automaton)
    return [[("group", plus, False)]] + [[plus.negs[n] for n in sorted(v)] for v in empty]


def _minimal(variants) -> tuple[frozenset, ...]:
    """The minimal sets among ``variants`` (sets of negative items that sit in one gap in some derivation): a
    gap is blocked iff every variant is, so a superset of another variant adds nothing."""
    vs = set(variants)
    return tuple(sorted((v for v in vs if not any(o < v for o in vs)), key=lambda v: (len(v), sorted(v))))


def _cross(xs, ys) -> tuple[frozenset, ...]:
    return _minimal(x | y for x in xs for y in ys)


class Fragment:
    """A sub-pattern compiled by the Glushkov construction over its *positions* (its positive components,
    each once: variables are unique), with its negative items riding on the edges.

    ``positions``  ``(component, is Kleene)`` in pattern order;
    ``negs``       its negative items ``(kind, k, extra)`` (see :func:`_alternatives`);
    ``null``       how it matches no event: variants, each the set of negative items (indices into ``negs``)
                   lying in that empty stretch; ``()`` if it cannot;
    ``first``      position → variants of the negative items before it, when it is the first event;
    ``last``       position → variants of those after it, when it is the last;
    ``follow``     ``(p, q)`` → variants of those between ``p`` and ``q`` when ``q`` directly follows ``p``
                   (a Kleene position follows itself, with no negation: the same run);
    ``strict``     the edges ``(p, q)`` of a ``NEXT`` step inside it: ``q``'s event must be the partition's event
                   right after ``p``'s.

    A match of the pattern is a path of positions, and its binding determines the path (the positions of its
    events in ts order), so paths are never duplicated even when derivations are (``((P)+)+``); a gap between
    two events is invalidated iff every variant of its edge has a negative item that occurs there (the oracle:
    a binding is a match if any derivation of it is valid).

        >>> f = Fragment.leaf(0, False).then(Fragment.leaf(1, False)).repeat("+")
        >>> sorted(f.follow), sorted(f.first), sorted(f.last)
        ([(0, 1), (1, 0)], [0], [1])
    """

    __slots__ = ("positions", "negs", "null", "first", "last", "follow", "ranges", "strict")

    def __init__(self, positions=(), negs=(), null=(frozenset(),), first=None, last=None, follow=None, ranges=(),
                 strict=frozenset()):
        self.strict = frozenset(strict)
        #: ``(first, last)`` positions of each repeated group inside (their variables are arrays)
        self.ranges = list(ranges)
        self.positions = list(positions)
        self.negs = list(negs)
        self.null = null
        self.first: dict[int, tuple] = first or {}
        self.last: dict[int, tuple] = last or {}
        self.follow: dict[tuple[int, int], tuple] = follow or {}

    @classmethod
    def leaf(cls, comp: int, kleene: bool) -> Fragment:
        one = (frozenset(),)
        return cls([(comp, kleene)], (), (), {0: one}, {0: one}, {(0, 0): one} if kleene else {})

    @classmethod
    def negation(cls, items: list) -> Fragment:
        """Negative items that sit in one gap (a ``NOT (P OR Q)`` gives one per alternative)."""
        return cls((), items, (frozenset(range(len(items))),))

    def _shifted(self, dp: int, dn: int) -> Fragment:
        def sh(vs):
            return tuple(frozenset(n + dn for n in v) for v in vs)
        return Fragment(self.positions, self.negs, sh(self.null), {p + dp: sh(v) for p, v in self.first.items()},
                        {p + dp: sh(v) for p, v in self.last.items()},
                        {(p + dp, q + dp): sh(v) for (p, q), v in self.follow.items()},
                        [(i + dp, j + dp) for i, j in self.ranges], {(p + dp, q + dp) for p, q in self.strict})

    def then(self, other: Fragment, linked: bool = False) -> Fragment:
        """``SEQ(self, other)``; ``linked``: ``NEXT other`` (its edges from ``self`` are strict)."""
        b = other._shifted(len(self.positions), len(self.negs))
        first = dict(self.first)
        for q, fv in b.first.items():
            if self.null:  # other's first positions can come first only if self can match nothing
                first[q] = _cross(self.null, fv)
        last = dict(b.last)
        for p, lv in self.last.items():
            if b.null:
                last[p] = _cross(lv, b.null)
        follow = {**self.follow, **b.follow}
        for p, lv in self.last.items():
            for q, fv in b.first.items():
                follow[(p, q)] = _cross(lv, fv)
        strict = self.strict | b.strict | ({(p, q) for p in self.last for q in b.first} if linked else set())
        return Fragment(self.positions + b.positions, self.negs + b.negs, _cross(self.null, b.null), first, last,
                        follow, self.ranges + b.ranges, strict)

    def union(self, other: Fragment) -> Fragment:
        """``self OR other``."""
        b = other._shifted(len(self.positions), len(self.negs))
        return Fragment(self.positions + b.positions, self.negs + b.negs, _minimal(self.null + b.null),
                        {**self.first, **b.first}, {**self.last, **b.last}, {**self.follow, **b.follow},
                        self.ranges + b.ranges, self.strict | b.strict)

    def repeat(self, op: str) -> Fragment:
        """``(self)+``, ``(self)*`` or ``(self)?``.  As in the oracle, an iteration that selects no event can
        only be the whole repetition."""
        null = _minimal(self.null + ((frozenset(),) if op in ("*", "?") else ()))
        follow = dict(self.follow)
        strict = set(self.strict)
        if op != "?":
            for p, lv in self.last.items():
                for q, fv in self.first.items():
                    follow[(p, q)] = _minimal(follow.get((p, q), ()) + _cross(lv, fv))
                    strict.discard((p, q))  # also the edge to the next iteration, which is not linked
        ranges = self.ranges + ([(0, len(self.positions) - 1)] if op != "?" and self.positions else [])
        return Fragment(self.positions, self.negs, null, dict(self.first), dict(self.last), follow, ranges, strict)


def _fragment(p, dnf, component) -> Fragment:
    """The :class:`Fragment` of a sub-pattern inside a repeated group."""
    if isinstance(p, EventPat):
        return Fragment.leaf(component(p), False)
    if isinstance(p, Kleene):
        inner = p.inner
        while isinstance(inner, Seq) and len(inner.items) == 1:
            inner = inner.items[0]
        if isinstance(inner, EventPat):
            f = Fragment.leaf(component(inner), p.op != "?")
            if p.op != "+":
                f.null = (frozenset(),)
            return f
        return _fragment(inner, dnf, component).repeat(p.op)
    if isinstance(p, Seq):
        out = Fragment()
        for k, item in enumerate(p.items):
            linked = bool(p.strict) and p.strict[k]
            if linked and isinstance(item, Not):
                # NEXT !(C c) after a single event: a negative item on the edges from that event, decided on the
                # event numbered right after it (Plan._alternative marks it RANKED_NEXT, see not_next_components)
                if not (isinstance(item.inner, EventPat) and k and isinstance(p.items[k - 1], EventPat)):
                    raise EngineUnsupportedError("NEXT !(...) in a repeated group negates one event right after a "
                                                 "single event T v")
                linked = False
            elif linked and all(can_be_empty(i) for i in p.items[:k]):
                raise EngineUnsupportedError("NEXT in a repeated group needs a positive item and an item before it "
                                             "that selects an event")
            out = out.then(_fragment(item, dnf, component), linked)
        return out
    if isinstance(p, Or):
        out = _fragment(p.alternatives[0], dnf, component)
        for a in p.alternatives[1:]:
            out = out.union(_fragment(a, dnf, component))
        return out
    if isinstance(p, Not):
        (items,) = dnf(p)
        return Fragment.negation(items)
    raise EngineUnsupportedError(f"unknown pattern node {type(p).__name__}")

#: the pseudo positions of an automaton's edges from its start and to its end (see :class:`Automaton`)
START, END = -1, -2


class Automaton:
    """An alternative with a repeated group (or the whole pattern, see :data:`MAX_ALTERNATIVES`), compiled to
    one :class:`Fragment` over all its items: ``items``, the flat items :meth:`Plan._alternative` reads (the
    positions in pattern order, after the last position of each repeated group a ``loop`` marker giving the
    range its variables are arrays in, then every negative item with its gap left open: the edges say where
    it applies), and the automaton:

    ``starts``/``ends``  the positions a match may begin/end at;
    ``follow``           per position, the positions that may come next;
    ``edges``            ``(p, q)`` → variants (tuples of negative slots) of the negations in that gap, only for
                         the gaps that some negation can invalidate; ``(START, q)`` is the gap before a match's
                         first event (from its last event − W), ``(p, END)`` the one after its last event (up
                         to its first event + W: a negated end, postponed).
    """

    __slots__ = ("items", "starts", "ends", "follow", "edges", "trailing_slots", "strict")

    def __init__(self, items: list, linked: list[bool] | None = None):
        whole = Fragment()
        for item, strict in zip(items, linked or [False] * len(items), strict=True):
            kind, k, extra = item
            if kind == "pos":
                f = Fragment.leaf(k, extra)
            elif kind == "group":
                f = k
            else:
                f = Fragment.negation([item])
            whole = whole.then(f, strict)
        flat: list[tuple] = []
        for p, (comp, kl) in enumerate(whole.positions):
            flat.append(("pos", comp, kl))
            flat += [("loop", j - i + 1, False) for i, j in whole.ranges if j == p]
        guard = frozenset({"edges"})
        flat += [(kind, k, extra, None, None, guard) for kind, k, extra in whole.negs]
        self.items = flat
        m = len(whole.positions)
        self.starts = tuple(sorted(whole.first))
        self.ends = tuple(sorted(whole.last))
        self.follow = tuple(tuple(sorted(q for (p2, q) in whole.follow if p2 == p)) for p in range(m))
        edges = {}
        for key, vs in ([((START, q), v) for q, v in whole.first.items()]
                        + [((p, END), v) for p, v in whole.last.items()] + list(whole.follow.items())):
            if vs and all(vs):  # some derivation with no negation in the gap: never invalidated
                edges[key] = tuple(tuple(sorted(v)) for v in vs)
        self.edges = edges
        self.trailing_slots = tuple(sorted({s for (_, q), vs in edges.items() if q == END for v in vs for s in v}))
        #: the edges ``(p, q)`` of NEXT steps (:attr:`Fragment.strict`), inside a group or into an item written
        #: ``NEXT`` (``linked``: per item, its edges from the items before are strict)
        self.strict = whole.strict


def not_next_components(p, component) -> frozenset[int]:
    """The components of the negated events written ``NEXT !(C c)`` anywhere in pattern ``p`` (outside
    negations): in an automaton their negative items are decided on the event right after the one before."""
    out: set[int] = set()
    if isinstance(p, Seq):
        for item, strict in zip(p.items, p.strict or (False,) * len(p.items), strict=True):
            if strict and isinstance(item, Not) and isinstance(item.inner, EventPat):
                out.add(component(item.inner))
            elif not isinstance(item, Not):
                out |= not_next_components(item, component)
    elif isinstance(p, Kleene):
        out |= not_next_components(p.inner, component)
    elif isinstance(p, Or):
        for a in p.alternatives:
            out |= not_next_components(a, component)
    return frozenset(out)


def _loops(items: list) -> list[tuple[int, int]]:
    """``(first, last)`` positive positions of each repeated group of an alternative's items."""
    out, seen = [], 0
    for kind, k, *_ in items:
        if kind == "pos":
            seen += 1
        elif kind == "loop":
            out.append((seen - k, seen - 1))
    return out
