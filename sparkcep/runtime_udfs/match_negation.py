"""Indexed lookup of negative events (SASE §3.3: the negation operator with indexing support).

Each negative component of an alternative keeps the events that may fill it (type test and the component's
own predicates already passed) in ``ts`` order, so the events inside an interval ``(lo, hi)`` are found by
binary search instead of a scan.  When one of the negation predicates (SASE P-) is an equality
``z.attr = <expression of positive variables>`` (``x.shelf_id = z.shelf_id`` in SASE's misplaced-inventory
query), the events are also bucketed by ``attr``: a lookup probes one bucket, then the interval inside it,
and evaluates only the remaining P- conjuncts on what is left.  SQL semantics are kept exactly: a missing or
NaN ``attr`` never equals anything, except on an ``ANY(...)`` component, where a lacking attribute makes the
comparison TRUE (SASE §2.2); those events sit in a bucket every probe visits.

A negated sequence ``!(SEQ(B b, C c))`` (LANGUAGE.md §4: no occurrence of the sub-sequence inside the
interval) keeps the events of all its members in one index; a lookup searches, depth first in ts order, for
events ``b < c`` (strictly increasing ts) inside the interval that fill the members in order and satisfy the
conjuncts on them, each conjunct as soon as its member variables are bound.  Negated single events inside it
(``!(SEQ(B b, !(D d), C c))``, GRETA §5's nesting as the oracle reads it) disqualify an occurrence that has
such an event (satisfying its conjuncts) strictly inside their gap: between the neighbouring members, or
between the outer interval's end and the first/last member.

The partitioned indexes of SASE §3.3 exist to drop whole partitions once they leave the window; here the
index is pruned by moving past the events at or before a horizon (see :meth:`NegIndex.prune`).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from operator import itemgetter

from sparkcep.runtime_udfs.expr import LACKING
from sparkcep.runtime_udfs.match_compile import NegPlan

__all__ = ["NegIndex"]

_ts_of = itemgetter(0)


class NegIndex:
    """The negative events of one :class:`NegPlan`: ``events`` as ``(ts, event)`` in ts order; with a keyed
    equality, ``buckets`` by attribute value and ``loose`` (lacking attribute on an ANY component, or an
    unhashable value) for events every probe must consider."""

    __slots__ = ("events", "buckets", "loose")

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.buckets: dict = {}
        self.loose: list[tuple] = []

    def __len__(self) -> int:
        return len(self.events)

    def add(self, plan: NegPlan, ts, event: dict) -> None:
        """Index ``event`` (events arrive in ts order)."""
        entry = (ts, event)
        self.events.append(entry)
        if plan.key_attr is None:
            return
        value = event.get(plan.key_attr)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            if plan.any_:  # a lacking attribute: the equality is TRUE whatever the probe
                self.loose.append(entry)
            return  # else the equality is NULL: this event never invalidates through this component
        try:
            self.buckets.setdefault(value, []).append(entry)
        except TypeError:
            self.loose.append(entry)

    def blocked(self, plan: NegPlan, binding: dict, lo, hi) -> bool:
        """True iff some indexed event lies strictly inside ``(lo, hi)`` and satisfies the negation predicates
        with ``binding`` (the positive variables) and itself as ``plan.var``."""
        if not lo < hi:
            return False
        if plan.members:
            return self._sequence(plan, binding, lo, hi)
        if plan.key_attr is None:
            return self._any(self.events, plan.checks, binding, plan.var, lo, hi)
        probe = plan.probe(binding)
        if probe is LACKING:  # the positive side lacks the attribute: the equality holds for every event
            return self._any(self.events, plan.checks, binding, plan.var, lo, hi)
        if self.loose and self._any(self.loose, plan.checks, binding, plan.var, lo, hi):
            return True
        if probe is None:
            return False
        try:
            bucket = self.buckets.get(probe)
        except TypeError:
            return self._any(self.events, plan.checks, binding, plan.var, lo, hi)
        return bucket is not None and self._any(bucket, plan.rest_checks, binding, plan.var, lo, hi)

    def _sequence(self, plan: NegPlan, binding: dict, lo, hi) -> bool:
        entries = self.events
        members, mask_of = plan.members, plan.member_mask
        masks: dict[int, int] = {}
        last = len(members) - 1
        inners = plan.inners
        touched = [var for _, var, _ in members] + [var for _, seq in inners for _, var, _ in seq]
        saved = [binding.get(var) for var in touched]
        times = [lo] * len(members)

        def mask_at(event) -> int:
            mask = masks.get(id(event))
            if mask is None:
                mask = masks[id(event)] = mask_of(event)
            return mask

        def occurs(seq: tuple, j: int, after, end, done) -> bool:
            """Events filling ``seq[j:]`` in strictly increasing ts inside ``(after, end)``, each passing the
            checks due at it, and then ``done()``."""
            bit, var, checks = seq[j]
            i = bisect_right(entries, after, key=_ts_of)
            while i < len(entries):
                ts, event = entries[i]
                if not ts < end:
                    return False
                i += 1
                if not mask_at(event) & bit:
                    continue
                binding[var] = event
                if seq is members:
                    times[j] = ts
                if all(check(binding) is True for check in checks) and (
                        occurs(seq, j + 1, ts, end, done) if j + 1 < len(seq) else done()):
                    return True
            return False

        def excluded() -> bool:
            """An inner negated sequence occurs in its gap of the occurrence bound in ``binding``/``times``."""
            for gap, seq in inners:
                if occurs(seq, 0, times[gap - 1] if gap else lo, times[gap] if gap <= last else hi, _true):
                    return True
            return False

        def valid() -> bool:
            return not (inners and excluded())

        try:
            return occurs(members, 0, lo, hi, valid)
        finally:
            for var, value in zip(touched, saved, strict=True):
                binding[var] = value

    @staticmethod
    def _any(entries: list, checks: tuple, binding: dict, var: str, lo, hi) -> bool:
        i = bisect_right(entries, lo, key=_ts_of)
        n = len(entries)
        if not checks:
            return i < n and entries[i][0] < hi
        saved = binding.get(var)
        try:
            while i < n:
                ts, event = entries[i]
                if not ts < hi:
                    return False
                binding[var] = event
                for check in checks:
                    if check(binding) is not True:
                        break
                else:
                    return True
                i += 1
            return False
        finally:
            binding[var] = saved

    def prune(self, horizon) -> None:
        """Forget the events with ``ts <= horizon``."""
        self.events = _drop(self.events, horizon)
        if self.loose:
            self.loose = _drop(self.loose, horizon)
        if self.buckets:
            for value in list(self.buckets):
                kept = _drop(self.buckets[value], horizon)
                if kept:
                    self.buckets[value] = kept
                else:
                    del self.buckets[value]

    def clear(self) -> None:
        self.events, self.buckets, self.loose = [], {}, []

    def newest(self):
        """The ts of the newest indexed event (the index is empty once the watermark passes it + W)."""
        return self.events[-1][0] if self.events else None


def _true() -> bool:
    return True


def _drop(entries: list, horizon) -> list:
    cut = bisect_right(entries, horizon, key=_ts_of)
    return entries[cut:] if cut else entries
