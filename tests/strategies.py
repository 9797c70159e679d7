"""Reusable hypothesis strategies: small random event streams to property-test engines against the oracle.

Streams are short (the oracle enumerates every match), over few types and tiny attribute domains, so that
matches, partitions, equal timestamps and predicate hits are all frequent.

Example::

    from hypothesis import given
    from tests.strategies import event_streams

    @given(event_streams(types="ABC", max_size=7))
    def test_engine_agrees(events):
        assert sorted_rows(engine(query, events)) == sorted_rows(oracle.match_rows(query, events))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hypothesis import strategies as st

#: Default attributes and their (inclusive) integer ranges: ``x`` for predicates, ``id`` as a partition key.
DEFAULT_ATTRS: Mapping[str, tuple[int, int]] = {"x": (0, 4), "id": (0, 1)}


@st.composite
def event_streams(draw, types: Sequence[str] = "ABCDE", *, min_size: int = 0, max_size: int = 8,
                  attrs: Mapping[str, tuple[int, int]] = DEFAULT_ATTRS, ties: bool = True,
                  max_gap: int = 3, lacking: bool = False, shuffled: bool = False) -> list[dict]:
    """A list of events ``{"type", "ts", **attrs}``.

    ``ts`` starts at 0..3 and grows by 1..``max_gap`` per event, or by 0..``max_gap`` with ``ties`` (equal
    timestamps, which never follow each other in a match).  With ``lacking`` an attribute may be missing
    (the ANY lacking-attribute rule, SASE §2.2).  With ``shuffled`` the list is permuted (arrival order is
    not ``ts`` order; implementations must sort, keeping input order among equal ``ts``).
    """
    n = draw(st.integers(min_size, max_size))
    ts = draw(st.integers(0, 3))
    events = []
    for _ in range(n):
        event = {"type": draw(st.sampled_from(list(types))), "ts": ts}
        for name, (lo, hi) in attrs.items():
            if not lacking or draw(st.booleans()) or draw(st.booleans()):
                event[name] = draw(st.integers(lo, hi))
        events.append(event)
        ts += draw(st.integers(0 if ties else 1, max_gap))
    if shuffled:
        events = draw(st.permutations(events))
    return events


def strictly_increasing(events: Sequence[dict]) -> bool:
    """True if no two events share a timestamp (useful to ``assume`` away tie-order questions)."""
    stamps = [e["ts"] for e in events]
    return len(set(stamps)) == len(stamps)


@st.composite
def deliveries(draw, events: list[dict], late: int = 0):
    """A delivery plan for ``events``: ``(lateness, batches)`` with the arrival order (ts plus a jitter up to
    the lateness, or up to ``late`` more: such an event may come behind the watermark), micro-batch sizes, and
    per batch whether to advance the watermark (trailing the newest ts by the lateness) and whether to
    round-trip the state."""
    lateness = draw(st.integers(0, 3))
    jitter = [draw(st.integers(0, lateness + late)) for _ in events]
    order = sorted(range(len(events)), key=lambda i: events[i]["ts"] + jitter[i])
    batches = []
    while order:
        size = draw(st.integers(1, 4))
        batches.append(([events[i] for i in order[:size]], draw(st.booleans()), draw(st.booleans())))
        order = order[size:]
    return lateness, batches
