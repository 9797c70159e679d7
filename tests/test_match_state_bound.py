"""The match engine's streaming state is bounded by the window, not by the length of the stream.

A long stream (200k events, 20 keys) flows through the pure engine in micro-batches as the streaming adapter
runs it: per batch and per key (also keys without new events, as event-time timeouts wake them) the state is
loaded from its bytes, stepped, advanced to the batch's watermark and stored again.  The total serialized
state must stay below a bound proportional to the events per window, at every batch.
"""

from __future__ import annotations

import random

import pytest

import sparkcep
from sparkcep.runtime_udfs.match import engine as me

QUERY = ("PATTERN SEQ(A a, B b, !(D d), C c) WHERE [id] AND a.x < c.x WITHIN {} "
         "RETURN a.ts, b.ts, c.ts")
KLEENE = "PATTERN SEQ(A a, B+ b[], C c) USING skip_till_next_match WHERE [id] AND b[i].x >= b[i-1].x WITHIN {}"
#: Serialized bytes per event of the window (measured ~13 for QUERY): a generous constant, but a state that
#: kept the stream (200k events) would exceed it by orders of magnitude.
BYTES_PER_WINDOW_EVENT = 64


def stream(n: int, keys: int = 20, seed: int = 5) -> list[dict]:
    """``ts`` a counter, so a window of W ts units holds W events (W / keys per key)."""
    rnd = random.Random(seed)
    return [{"type": rnd.choice("ABCDE"), "ts": t, "id": rnd.randrange(keys), "x": rnd.randrange(10)}
            for t in range(n)]


def state_sizes(text: str, events: list[dict], batch: int) -> tuple[list[int], int]:
    """Total serialized state after each micro-batch, and the number of matches."""
    spec = sparkcep.compile(text).spec()
    stored: dict = {}
    sizes, found = [], 0
    for lo in range(0, len(events), batch):
        chunk = events[lo:lo + batch]
        groups: dict = {}
        for e in chunk:
            groups.setdefault(e["id"], []).append(e)
        for k in set(stored) | set(groups):
            state = me.MatchState.from_bytes(stored[k]) if k in stored else me.init_state()
            me.step(spec, state, groups.get(k, []))
            _, rows = me.advance(spec, state, chunk[-1]["ts"])
            found += len(rows)
            if me.is_empty(state):
                stored.pop(k, None)
            else:
                stored[k] = state.to_bytes()
        sizes.append(sum(map(len, stored.values())))
    return sizes, found


@pytest.mark.parametrize(("text", "follows_window"), [(QUERY, True), (KLEENE, False)],
                         ids=["negation", "kleene_next_match"])
def test_state_stays_bounded_by_the_window_on_a_long_stream(text, follows_window):
    events = stream(200_000)
    small, found_small = state_sizes(text.format(500), events, batch=2_000)
    large, found_large = state_sizes(text.format(4_000), events, batch=2_000)
    assert found_small > 1_000 and found_large > found_small  # the stream exercises the query
    assert max(small) <= BYTES_PER_WINDOW_EVENT * 500, max(small)
    assert max(large) <= BYTES_PER_WINDOW_EVENT * 4_000, max(large)
    # skip_till_any_match keeps every A and B of the window: its state follows the window (the bound is not
    # a constant cap); skip_till_next_match runs end at the first C or a decreasing B, well before W
    if follows_window:
        assert max(large) > 2 * max(small)
    # and the state does not grow along the stream
    quarter = len(large) // 4
    assert max(large[-quarter:]) <= 1.5 * max(large[:quarter])
