"""Repeated groups with the whole language inside, against the oracle (issue 4).

A repeated group compiles to an automaton over its positions (:class:`match_compile.Automaton`, the Glushkov
construction): iterations may take different ``OR`` branches, skip ``?``/``*`` components, and groups nest
(``(SEQ((SEQ(B b, C c))+, D d))+``).  A group's variables are arrays with one entry per event, in time order
(the oracle's ``_bind``); a variable a match leaves out reads NULL.  A negation inside the group applies in the
gap its derivation puts it in, and a binding derived in several ways (``((P)+)+``) is one match, blocked only
if every derivation is.

Every test compares with :mod:`sparkcep.oracles.match` on random streams with ties in ``ts``, under every selection
strategy, in one step and through random micro-batches with watermarks and state round trips
(``tests.test_match_language.agrees``).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.oracles.match import match_rows
from sparkcep.runtime_udfs.match import engine as match_engine
from sparkcep.runtime_udfs.match.engine import EngineUnsupportedError
from sparkcep.spark.results import canonical
from tests.strategies import event_streams
from tests.test_match_language import agrees, shape_queries, with_strategy
from tests.test_match_semantics import STRATEGIES, compiled, oracle_rows, run, with_seq

#: group shapes the engine refused before the automaton (OR, ?, * inside a group; a group inside a group)
SHAPES = [
    "SEQ(A a, (SEQ(B b, C c) OR D d)+, A e)",
    "SEQ(A a, (B b OR C c)+, D d)",
    "(B b OR SEQ(C c, D d))+",
    "SEQ(A a, (SEQ(B b, C? c))+, D d)",
    "SEQ(A a, (SEQ(B b, C* c[]))+, D d)",
    "SEQ(A a, (SEQ(B? b, C? c))+, D d)",
    "SEQ(A a, (SEQ(B? b, C? c))*, D d)",
    "SEQ(A a, (SEQ(B? b, !(E z)))+, D d)",
    "SEQ(A a, !(SEQ(E y, C f)), ((D? d)+)?)",
    "SEQ(((A* p[])*)?, ((A? b)+ OR (C c OR A d)))",
    "SEQ(((A p)*)*, ((A* b[] OR C c) OR (C d OR D+ g[])))",
    "SEQ(A a, (SEQ(B b, (SEQ(C c, D d))?))+)",
    "SEQ(A a, (SEQ(B b, C c) OR SEQ(C f, B g))+, D d)",
    "SEQ(A a, (SEQ(B+ b[], C c) OR D d)+)",
    "SEQ(A a, (SEQ((SEQ(B b, C c))+, D d))+)",
    "(SEQ((SEQ(A+ p[], B b))+, C c))+",
    "SEQ(A a, ((SEQ(B b, C c))+)+, D d)",
    "SEQ(A a, ((SEQ(B b, C c))*)+, D d)",
    "SEQ(A a, ((SEQ(B b, C c))+)?, D d)",
    "SEQ(A a, B? e, (SEQ(B b, C c) OR D d)+)",
    "SEQ(A a, (SEQ(B b, C c) OR D d)+) OR (SEQ(C f, D g))+",
    # negation inside
    "SEQ(A a, (SEQ(B b, !(E z), C c) OR D d)+)",
    "SEQ(A a, (SEQ(B b, !(E z)) OR C c)+, D d)",
    "SEQ(A a, (SEQ(B+ b[], !(E z)) OR C c)+, D d)",
    "SEQ(A a, ((SEQ(B b, !(E z), C c))+)+, D d)",
    "SEQ(A a, (SEQ((SEQ(B b, !(E z)))+, C c))+, D d)",
    "SEQ(A a, (SEQ(B b, C? c, !(E z)))+, D d)",
    "SEQ(A a, (SEQ(B b, C c) OR D d)+, !(E z))",
    "SEQ(!(E z), (B b OR SEQ(C c, D d))+, A e)",
    "SEQ(A a, (SEQ(B b, NOT (E z OR D y), C c) OR D d)+)",
    # several ways to match nothing, each with its negations: one automaton for the whole pattern
    "SEQ(A a, (SEQ(B? b, !(E z)) OR SEQ(!(D y), C? c))+, D d)",
    "SEQ(A a, (SEQ(!(E z), B? b) OR SEQ(B? c, !(D y))), C g)",
    # more than MAX_ALTERNATIVES alternatives: one automaton for the whole pattern
    "SEQ(A? a, B? b, (C c OR D d), C? e, (A f OR D g), B? p, D? y)",
]
#: conditions over their variables (each query draws those it can use)
CONDITIONS = [
    "[id]", "b[i].x > a.x", "b[i].x > b[i-1].x", "sum(b[].x) < 5", "count(c[].x) >= 2", "c[c.len].x > 1",
    "b[1].x <= d.x", "z.x > a.x", "NEXT(d).x > d[i].x", "max(b[].x) > min(c[].x)", "p[i].x >= p[i-1].x",
    "z.x < b[i].x", "d[i].x != a.x", "e.x >= a.x", "c[i].x > b[1].x", "count(d[].x) <= 1", "g[i].x = f[i].x",
    "y.x = a.x", "b[b.len].x >= c[1].x",
]


def queries(strategy: str):
    return shape_queries(SHAPES, CONDITIONS, strategy, max_conditions=3, windows=(3, 10))


@pytest.mark.parametrize("pattern", SHAPES)
def test_every_shape_compiles_to_an_automaton_on_runs(pattern):
    _, spec = compiled(f"PATTERN {pattern} WITHIN 5")
    assert "nfa_b_runs" in [name for _, name in match_engine.engines(spec)]


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), events=event_streams("ABCDE", min_size=3, max_size=8, max_gap=2, lacking=True))
def test_groups_with_the_whole_language_agree_with_the_oracle(strategy, data, events):
    agrees(data.draw(queries(strategy)), events, data)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("pattern", SHAPES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=event_streams("ABCDE", min_size=4, max_size=8, max_gap=2))
def test_each_shape_agrees_with_the_oracle(pattern, strategy, events):
    """Every shape under every strategy, without predicates (the random query above may not draw each)."""
    agrees(with_strategy(f"PATTERN {pattern} WITHIN 6", strategy), events)


def _events(text: str) -> list[dict]:
    """``"a0 b1 c2"`` → events of types A, B, C at ts 0, 1, 2 with ``x`` = ts."""
    return [{"type": w[0].upper(), "ts": int(w[1:]), "x": int(w[1:])} for w in text.split()]


def test_iterations_take_different_branches_and_bind_one_entry_per_event():
    """``(SEQ(B b, C c) OR D d)+`` over b1 c2 d3 b4 c5: iterations mix branches; b, c, d are arrays."""
    rows = agrees("PATTERN SEQ(A a, (SEQ(B b, C c) OR D d)+, A e) WITHIN 10 "
                  "RETURN count(b[].x) AS nb, count(d[].x) AS nd, c[c.len].ts AS lc", _events("a0 b1 c2 d3 b4 c5 a6"))
    got = sorted((r["nb"], r["nd"], r["lc"]) for r in rows)
    # b1c2 | d3 | b1c5 | b4c5 | b1c2 d3 | b1c2 b4c5 | d3 b4c5 | b1c2 d3 b4c5
    assert got == sorted([(1, 0, 2), (0, 1, None), (1, 0, 5), (1, 0, 5), (1, 1, 2), (2, 0, 5), (1, 1, 5),
                          (2, 1, 5)])


def test_a_nested_group_binds_every_inner_iteration():
    """``(SEQ((SEQ(B b, C c))+, D d))+``: b1 c2 b3 c4 d5 b6 c7 d8 has a match of two outer iterations, the
    first with two inner ones."""
    rows = agrees("PATTERN SEQ(A a, (SEQ((SEQ(B b, C c))+, D d))+) WITHIN 20 "
                  "RETURN count(b[].x) AS nb, count(d[].x) AS nd", _events("a0 b1 c2 b3 c4 d5 b6 c7 d8"))
    assert max((r["nb"], r["nd"]) for r in rows) == (3, 2)


def test_a_binding_derived_twice_is_one_match_blocked_only_if_every_derivation_is():
    """``((SEQ(B b, !(E z), C c))+)+``: b1 c3 b4 c6 is one match (inner or outer loop: the same binding); an E
    strictly between a b and its c blocks, one between c3 and b4 does not (no derivation has a negation there).
    """
    text = ("PATTERN SEQ(A a, ((SEQ(B b, !(E z), C c))+)+, D d) WITHIN 20 "
            "RETURN count(b[].x) AS n, b[1].ts AS b1, c[c.len].ts AS cl")
    rows = agrees(text, _events("a0 b1 c3 e3 b4 c6 d7"))  # e3 blocks only b1 c6
    assert sorted(tuple(r.values()) for r in rows) == [(1, 1, 3), (1, 4, 6), (2, 1, 6)]
    rows = agrees(text, _events("a0 b1 e2 c3 b4 c6 d7"))  # e2 blocks every match with b1
    assert sorted(tuple(r.values()) for r in rows) == [(1, 4, 6)]
    # (SEQ(B+ b[], !(E z)) OR C c)+: b1 b3 is one run (no negation between) or two iterations (e2 between): valid;
    # b1 alone ends its iteration before d7 with e2 in the gap: blocked
    text = "PATTERN SEQ(A a, (SEQ(B+ b[], !(E z)) OR C c)+, D d) WITHIN 20 RETURN count(b[].x) AS n, b[1].ts AS b1"
    rows = agrees(text, _events("a0 b1 e2 b3 d7"))
    assert sorted(tuple(r.values()) for r in rows) == [(1, 3), (2, 1)]


def test_a_variable_the_match_leaves_out_reads_null():
    """``(SEQ(B b, C? c))+`` without any c: ``count(c[].x)`` is 0, ``c[1].x`` is NULL: a predicate that reads it
    and a bound variable fails, one that reads only absent variables holds (the oracle's OR semantics)."""
    events = _events("a0 b1 b2 d3")
    rows = agrees("PATTERN SEQ(A a, (SEQ(B b, C? c))+, D d) WITHIN 10 RETURN count(c[].x) AS nc, "
                  "count(b[].x) AS nb", events)
    assert sorted((r["nb"], r["nc"]) for r in rows) == [(1, 0), (1, 0), (2, 0)]
    assert agrees("PATTERN SEQ(A a, (SEQ(B b, C? c))+, D d) WHERE c[1].x > a.x WITHIN 10", events) == []
    assert len(agrees("PATTERN SEQ(A a, (SEQ(B b, C? c))+, D d) WHERE c[1].x > 0 WITHIN 10", events)) == 3


@pytest.mark.parametrize("pattern", ["SEQ(A a, (SEQ(B? b, !(E z)))+, D d)", "SEQ(A a, B* b[], !(E z), D d)"])
def test_a_negation_predicate_on_an_absent_kleene_variable_holds(pattern):
    """Without any ``b``, ``z.x < b[i].x`` has no position to quantify over: it holds (the oracle), so any E
    between a and d blocks the match (it was read as NULL, and never blocked)."""
    text = f"PATTERN {pattern} WHERE z.x < b[i].x WITHIN 10 RETURN a.ts, d.ts"
    assert agrees(text, _events("a0 e1 d2")) == []
    assert agrees(text, _events("a0 d2")) == [{"a_ts": 0, "d_ts": 2}]


def test_strategies_on_a_worked_stream():
    """a1 b2 d3 c4 b5 c6 e7 under ``SEQ(A a, (SEQ(B b, C c) OR D d)+, E e)``: strict contiguity cannot take
    b2 d3 (not one iteration), skip_till_next_match takes the longest."""
    events = [{"type": t, "ts": ts} for t, ts in [("A", 1), ("B", 2), ("D", 3), ("C", 4), ("B", 5), ("C", 6),
                                                   ("E", 7)]]
    counts = {s: len(agrees(with_strategy("PATTERN SEQ(A a, (SEQ(B b, C c) OR D d)+, E e) WITHIN 10", s), events))
              for s in STRATEGIES}
    assert counts["strict_contiguity"] == 0 and counts["partition_contiguity"] == 0
    assert counts["skip_till_next_match"] == 1 and counts["skip_till_any_match"] > 4


def test_matching_nothing_is_an_alternative_of_its_own():
    """``(P)*`` is ``(P)+`` or nothing, and so is ``(P)+`` when ``P`` can match nothing (``(SEQ(B? b, C? c))+``):
    the group's automaton always selects one of its events, the empty path is a second alternative on
    sase_ssc, so a0 d1 is found once; b1 c2 as one iteration or as two (b1, then c2) is one match."""
    for pattern in ("SEQ(A a, (SEQ(B b, C c))*, D d)", "SEQ(A a, (SEQ(B? b, C? c))+, D d)",
                    "SEQ(A a, ((SEQ(B? b, C? c))+)?, D d)"):
        _, spec = compiled(f"PATTERN {pattern} WITHIN 5 RETURN a.ts, count(b[].x) AS n")
        assert [name for _, name in match_engine.engines(spec)] == ["nfa_b_runs", "sase_ssc"], pattern
        assert run(spec, _events("a0 d1")) == [{"a_ts": 0, "n": 0}], pattern
    assert len(agrees("PATTERN SEQ(A a, (SEQ(B? b, C? c))*, D d) WITHIN 5", _events("a0 b1 c2 d3"))) == 4


def test_beyond_max_alternatives_and_for_negation_only_alternatives_the_pattern_is_one_automaton():
    """Seven optional components expand to 128 alternatives (more than MAX_ALTERNATIVES): one automaton over the
    pattern instead of a refusal.  ``(SEQ(!(E z), B? b) OR SEQ(B? c, !(D y)))`` can match nothing in two ways
    with different negations: a0 e1 c2 is a match (the second way has no D), a0 e1 d2 c3 is not."""
    from sparkcep.runtime_udfs.match.conjuncts import MAX_ALTERNATIVES

    _, spec = compiled("PATTERN SEQ(A? a, B? b, C? c, D? d, E? e, A? f, B? g) WITHIN 5")
    assert 2 ** 7 - 1 > MAX_ALTERNATIVES and len(match_engine.engines(spec)) == 1
    assert len(agrees("PATTERN SEQ(A? a, B? b, C? c, D? d, E? e, A? f, B? g) WITHIN 5",
                      _events("a0 b1 c2 d3 e4 a5 b6"))) > MAX_ALTERNATIVES
    text = "PATTERN SEQ(A a, (SEQ(!(E z), B? b) OR SEQ(B? c, !(D y))), C g) WITHIN 9 RETURN a.ts, g.ts"
    _, spec = compiled(text)
    assert len(match_engine.engines(spec)) == 1  # (b), (c) and the two empty ways: one automaton
    assert agrees(text, _events("a0 e1 c2")) == [{"a_ts": 0, "g_ts": 2}]
    assert agrees(text, _events("a0 e1 d2 c3")) == []


@pytest.mark.parametrize("text", [
    "PATTERN SEQ(A a, (SEQ(B b, C c) OR D d)+, E e) WITHIN 5",
    "PATTERN SEQ(A a, (SEQ((SEQ(B b, C c))+, D d))+) WITHIN 5",
])
def test_collapsed_output_still_refuses_groups(text):
    with pytest.raises(EngineUnsupportedError, match="repeated group"):
        match_engine.check(sparkcep.compile(text, collapsed=True).spec())


# ----------------------------------------------------------------------------------------------- latency

#: automata whose paths may end on an edge with a negated end (postponed to first ts + W) or on one without
#: (emitted when complete); the last one is a whole-pattern automaton whose end edge has two variants
MIXED_ENDS = [
    "SEQ(A a, (SEQ(B b, !(E z)) OR C c)+)",
    "SEQ(A a, (SEQ(B+ b[], !(E z)) OR C c)+)",
    "(C c OR SEQ(B b, !(E z)))+",
    "SEQ(A a, (SEQ(B b, !(E z), C c) OR SEQ(D d, !(E y)))+)",
    "SEQ(A a, (SEQ(B b, !(E z)))+) OR SEQ(C c, D d)",
    "SEQ(A a, (SEQ(B b, C? c, !(E z)))+)",
    "SEQ(A a, (SEQ(!(E z), B? b) OR SEQ(B? c, !(D y))))",
]
MIXED_CONDITIONS = ["[id]", "b[i].x > a.x", "z.x > a.x", "c[i].x >= b[1].x", "y.x = a.x", "z.x < b[i].x",
                    "count(c[].x) >= 2"]


def mixed_end_queries(strategy: str):
    return shape_queries(MIXED_ENDS, MIXED_CONDITIONS, strategy, max_conditions=2, windows=(3, 10))


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), events=event_streams("ABCDE", min_size=3, max_size=8, max_gap=2, lacking=True))
def test_mixed_end_edges_agree_with_the_oracle(strategy, data, events):
    """Matches emitted when complete and matches postponed by a negated end, in one step and in random
    micro-batches with watermarks and state round trips."""
    agrees(data.draw(mixed_end_queries(strategy)), events, data)


def _emitted_at(spec, events: list[dict]) -> list[tuple]:
    """``(watermark, row)`` of every row: all events buffered, then the watermark advanced to each distinct ts
    in turn (each event is processed at the watermark of its own ts), then a flush."""
    state, _ = match_engine.step(spec, match_engine.init_state(), events)
    out = []
    for w in [*sorted({e["ts"] for e in events}), math.inf]:
        state, rows = match_engine.advance(spec, state, w)
        out += [(w, r) for r in rows]
    return out


def test_a_match_without_a_trailing_negation_is_emitted_at_its_last_event():
    """``(SEQ(B b, !(E z)) OR C c)+`` over a0 c1 b2 c3: a0 c1 and the matches ending in c3 have no negated end:
    emitted at the watermark of their last event; those ending in b2 wait for a0 + W = 10 (before, only
    postponed matches of the alternative were emitted at all, all at 10)."""
    text = ("PATTERN SEQ(A a, (SEQ(B b, !(E z)) OR C c)+) WITHIN 10 "
            "RETURN a.ts, b[b.len].ts AS lb, c[c.len].ts AS lc")
    _, spec = compiled(text)
    got = _emitted_at(spec, _events("a0 c1 b2 c3 a12"))
    assert sorted((w, r["lb"] or -1, r["lc"] or -1) for w, r in got) == [
        (1, -1, 1), (3, -1, 3), (3, -1, 3), (3, 2, 3), (3, 2, 3), (12, 2, -1), (12, 2, 1)]
    assert canonical([r for _, r in got]) == canonical(agrees(text, _events("a0 c1 b2 c3 a12")))


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=event_streams("ABCE", min_size=3, max_size=9, max_gap=2), window=st.integers(3, 8),
       pattern=st.sampled_from(MIXED_ENDS[:2]))
def test_only_matches_ending_on_a_negated_end_wait(strategy, events, window, pattern):
    """Every oracle row is emitted exactly at the watermark it can be decided at: a path that ends in ``c`` (no
    negation after it) at its last event's ts, one that ends in ``b`` (``!(E z)`` after it) at the first
    watermark at or after ``a.ts + W``."""
    text = with_strategy(f"PATTERN {pattern} WITHIN {window} RETURN a.ts, b[b.len].ts AS lb, c[c.len].ts AS lc",
                         strategy)
    q, spec = compiled(text)
    feed = events if strategy == "skip_till_any_match" else with_seq(spec, events)
    marks = [*sorted({e["ts"] for e in events}), math.inf]
    expected = []
    for r in oracle_rows(q, events):
        lb, lc = r["lb"], r["lc"]
        if lc is not None and (lb is None or lc > lb):
            due = lc
        else:
            due = next(w for w in marks if w >= r["a_ts"] + window)
        expected.append({"due": due, **r})
    got = [{"due": w, **r} for w, r in _emitted_at(spec, feed)]
    assert canonical(got) == canonical(expected), text


# ----------------------------------------------------------------------------------------------- Spark


@pytest.mark.spark
def test_a_group_with_or_and_a_nested_group_on_spark_equal_the_oracle(spark):
    """``compile(q).apply(df)``: the filter keeps every component of the group, the batch job gives the
    oracle's rows."""
    import random

    from pyspark.sql.types import LongType, StringType, StructField, StructType

    rnd = random.Random(11)
    events, ts = [], 0
    for _ in range(90):
        ts += rnd.randint(0, 1)
        events.append({"type": rnd.choice("AABBCCDE"), "ts": ts, "id": rnd.randint(0, 1), "x": rnd.randint(0, 3)})
    schema = StructType([StructField("type", StringType()), StructField("ts", LongType()),
                         StructField("id", LongType()), StructField("x", LongType())])
    df = spark.createDataFrame([(e["type"], e["ts"], e["id"], e["x"]) for e in events], schema)
    for text in [
        "PATTERN SEQ(A a, (SEQ(B b, !(E z), C c) OR D d)+, A e) WHERE [id] AND b[i].x >= a.x WITHIN 8 "
        "RETURN a.ts, e.ts, count(b[].x) AS nb, count(d[].x) AS nd",
        "PATTERN SEQ(A a, (SEQ((SEQ(B b, C c))+, D d))+) USING skip_till_next_match WHERE [id] WITHIN 10 "
        "RETURN a.ts, count(d[].x) AS nd, c[c.len].ts AS last_c",
    ]:
        q = sparkcep.compile(text)
        got = [r.asDict() for r in q.apply(df).collect()]
        expected = match_rows(q.query, events)
        assert expected and canonical(got) == canonical(expected), text
