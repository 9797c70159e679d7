"""``T? v``: at most one event, so ``v.attr`` and ``v[1].attr`` name the same value (NULL when absent)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.compiler.errors import CEPSemanticError
from sparkcep.oracle import match_rows
from sparkcep.results import canonical
from sparkcep.runtime_udfs import match_engine
from tests.strategies import event_streams

PAIRS = [
    ("PATTERN SEQ(A a, B? b, C c) WITHIN 6 RETURN a.ts, b.ts AS bt, b.x AS bx, c.ts",
     "PATTERN SEQ(A a, B? b, C c) WITHIN 6 RETURN a.ts, b[1].ts AS bt, b[1].x AS bx, c.ts"),
    ("PATTERN SEQ(A a, B? b, C c) WHERE [id] AND b.x > a.x WITHIN 6 RETURN a.ts, b.ts + 1 AS bt1, c.ts",
     "PATTERN SEQ(A a, B? b, C c) WHERE [id] AND b[1].x > a.x WITHIN 6 RETURN a.ts, b[1].ts + 1 AS bt1, c.ts"),
    ("PATTERN SEQ(B? b, C c) USING skip_till_next_match WITHIN 4 RETURN b.ts AS bt, c.ts",
     "PATTERN SEQ(B? b, C c) USING skip_till_next_match WITHIN 4 RETURN b[1].ts AS bt, c.ts"),
]


def engine_rows(text: str, events: list[dict]) -> list[dict]:
    spec = sparkcep.compile(text).spec()
    parts: dict = {}
    for e in events:
        parts.setdefault(tuple(e.get(a) for a in spec.key), []).append(e)
    rows = []
    for part in parts.values():
        state, _ = match_engine.step(spec, match_engine.init_state(), part)
        rows += match_engine.advance(spec, state, math.inf)[1]
    return rows


def test_analysis_accepts_v_attr_and_v_first_attr_for_an_optional_variable():
    plain, indexed = PAIRS[0]
    assert sparkcep.compile(plain).spec().outputs == sparkcep.compile(indexed).spec().outputs
    # a Kleene plus variable still needs an index: v.attr would be ambiguous there
    with pytest.raises(CEPSemanticError, match="Kleene variable"):
        sparkcep.compile("PATTERN SEQ(A a, B+ b[], C c) WITHIN 6 RETURN b.ts")


@settings(max_examples=40, deadline=None)
@given(pair=st.sampled_from(PAIRS), events=event_streams("ABCD", max_size=9))
def test_optional_variable_both_spellings_equal_the_oracle(pair, events):
    plain, indexed = pair
    expected = canonical(match_rows(sparkcep.compile(indexed).query, events))
    assert canonical(match_rows(sparkcep.compile(plain).query, events)) == expected
    assert canonical(engine_rows(plain, events)) == expected
    assert canonical(engine_rows(indexed, events)) == expected
