"""``T? v``: at most one event, so ``v.attr`` and ``v[1].attr`` name the same value (NULL when absent)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.ir.errors import CEPSemanticError
from sparkcep.oracles.match import match_rows
from sparkcep.spark.results import canonical
from tests.strategies import event_streams
from tests.test_match_semantics import run

PAIRS = [
    ("PATTERN SEQ(A a, B? b, C c) WITHIN 6 RETURN a.ts, b.ts AS bt, b.x AS bx, c.ts",
     "PATTERN SEQ(A a, B? b, C c) WITHIN 6 RETURN a.ts, b[1].ts AS bt, b[1].x AS bx, c.ts"),
    ("PATTERN SEQ(A a, B? b, C c) WHERE [id] AND b.x > a.x WITHIN 6 RETURN a.ts, b.ts + 1 AS bt1, c.ts",
     "PATTERN SEQ(A a, B? b, C c) WHERE [id] AND b[1].x > a.x WITHIN 6 RETURN a.ts, b[1].ts + 1 AS bt1, c.ts"),
    ("PATTERN SEQ(B? b, C c) USING skip_till_next_match WITHIN 4 RETURN b.ts AS bt, c.ts",
     "PATTERN SEQ(B? b, C c) USING skip_till_next_match WITHIN 4 RETURN b[1].ts AS bt, c.ts"),
]


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
    assert canonical(run(sparkcep.compile(plain).spec(), events)) == expected
    assert canonical(run(sparkcep.compile(indexed).spec(), events)) == expected
