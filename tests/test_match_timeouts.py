"""Timed-out partial matches (Flink's TimedOutPartialMatchHandler): the engine against the oracle written from
the definition, on random queries and streams cut into micro-batches, and on Spark (batch and streaming)."""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.grammar import parse_query
from sparkcep.ir.serde import from_data, to_data
from sparkcep.ir.spec import TimeoutSpec, with_default_outputs
from sparkcep.oracles import match as match_oracle
from sparkcep.oracles import timeouts as timeouts_oracle
from sparkcep.oracles.timeouts import timed_out_rows
from sparkcep.runtime_udfs.match import timeouts
from sparkcep.runtime_udfs.match.conjuncts import EngineUnsupportedError
from sparkcep.spark.results import canonical
from tests.strategies import event_streams

STEPS = ["A a", "B b", "C c", "ANY(B, C) d"]
KLEENE = {"a": "A+ a[]", "b": "B+ b[]", "c": "C+ c[]", "d": "ANY(B, C)+ d[]"}
#: the quantifiers of a Kleene step (``?`` binds one event or none: its variable is no list)
QUANTIFIERS = ["+", "*", "{2}", "{1,2}", "{0,2}", "{2,}"]
STRATEGIES = ["skip_till_any_match", "skip_till_next_match", "partition_contiguity", "strict_contiguity"]
PREDICATES = {"a": ["a.x >= 1"], "b": ["a.x < b.x", "b.x != 2"], "c": ["c.x = a.x", "c.x > b.x"],
              "d": ["d.x >= a.x"]}
# over a Kleene step: positional (decided event by event) and over its whole sequence (decided when it closes)
SEQUENCE_PREDICATES = {v: [f"{v}[i].x >= {v}[i-1].x"] for v in "abcd"}
WHOLE_PREDICATES = {v: [f"sum({v}[].x) <= 3", f"count({v}[].ts) >= 2", f"{v}[{v}.len].x != 1"] for v in "abcd"}


@st.composite
def timeout_queries(draw, kleene: bool = False, quantifiers: bool = False, links: bool = False,
                    negation: bool = False, alternatives: bool = False, wide: bool = False) -> str:
    """A SEQ query of 2-4 steps; ``kleene``: some steps T+; ``quantifiers``: T*, T?, T{n,m} too; ``links``: a
    NEXT step, a loop with UNTIL, the contiguity strategies; ``negation``: a negated event ``!(T n)`` or
    ``NEXT !(T n)`` between two steps or at the end, with or without a predicate over a step before it;
    ``alternatives``: an OR step (``B b OR D e``) or an OR of two SEQs; ``wide``: the negation may be of a SEQ of
    two events ``!(SEQ(T n, U m))``, with or without a predicate between them."""
    n = draw(st.integers(2, 4))
    steps = draw(st.permutations(STEPS))[:n]
    names = [s.split()[-1] for s in steps]
    repeated = {v for v in names if kleene and draw(st.integers(0, 2)) == 0}
    if quantifiers:
        ops = {v: draw(st.sampled_from(QUANTIFIERS)) for v in repeated}
        steps = [f"{s.rsplit(' ', 1)[0]}? {v}" if v not in repeated and draw(st.integers(0, 3)) == 0 else s
                 for s, v in zip(steps, names, strict=True)]
        kleene_steps = {v: KLEENE[v].replace("+", ops[v]) for v in repeated}
    else:
        kleene_steps = KLEENE
    conds = ["[id]"] if draw(st.booleans()) else []
    whole = False
    for v in names:
        usable = [p for p in PREDICATES[v] if all(f"{w}." not in p or w in names for w in "abcd")]
        if v in repeated:
            usable += SEQUENCE_PREDICATES[v] + WHOLE_PREDICATES[v]
        if usable and draw(st.integers(0, 2)) == 0:
            conds.append(draw(st.sampled_from(usable)))
            whole = whole or conds[-1] in WHOLE_PREDICATES[v]
    items = (kleene_steps[v] if v in repeated else s for v, s in zip(names, steps, strict=True))
    if links:
        items = [f"{i} UNTIL {draw(st.sampled_from(['', 'ANY ']))}({v}.x > 2)"
                 if v in repeated and draw(st.integers(0, 2)) == 0 else i for i, v in zip(items, names, strict=True)]
        items = [f"NEXT {i}" if k and not any(q in i for q in ("?", "*", "{0")) and draw(st.integers(0, 2)) == 0
                 else i for k, i in enumerate(items)]  # (NEXT on a step that may take no event: refused)
    other = ""
    if alternatives:
        items = list(items)
        k = draw(st.integers(0, len(items) - 1))
        if draw(st.booleans()) and items[k] == steps[k] and "?" not in items[k]:  # a plain step: T v OR ...
            alternative = draw(st.sampled_from(["D e", "D+ e[]", "C e", "SEQ(D e, B h)", "SEQ(C e, D* h[])"]))
            items[k] = f"{items[k]} OR {alternative}"
            if draw(st.booleans()):
                conds.append(f"e.x {draw(st.sampled_from(['>', '=']))} {names[0]}.x" if k else "e.x != 1")
        else:
            other = (f" OR SEQ({draw(st.sampled_from(['D f', 'B f', 'A+ f[]']))}, "
                     f"{draw(st.sampled_from(['A g', 'D+ g[]', 'C? g', 'B g']))})")
    if negation:
        items = list(items)
        at = draw(st.integers(1, len(items)))
        before = [v for v in names[:at] if v not in repeated]
        if before and draw(st.booleans()):
            conds.append(f"n.x {draw(st.sampled_from(['=', '>', '!=']))} {draw(st.sampled_from(before))}.x")
        # NEXT !(...) follows one event, and not at the end
        single = (names[at - 1] not in repeated and "?" not in items[at - 1] and " OR " not in items[at - 1]
                  and at < len(items))
        if wide and draw(st.booleans()):  # (NEXT !(SEQ(...)): refused)
            items.insert(at, f"!(SEQ({draw(st.sampled_from('BCD'))} n, {draw(st.sampled_from('BCD'))} m))")
            if draw(st.integers(0, 3)):
                conds.append(f"m.x {draw(st.sampled_from(['=', '>']))} {draw(st.sampled_from(['n', *before]))}.x")
        else:
            link = "NEXT " if single and draw(st.booleans()) else ""
            items.insert(at, f"{link}!({draw(st.sampled_from('BCD'))} n)")
    text = f"PATTERN SEQ({', '.join(items)}){other}"
    if conds:
        text += " WHERE " + " AND ".join(conds)
    text += f" WITHIN {draw(st.integers(2, 8))}"
    strategy = draw(st.sampled_from(STRATEGIES[:4 if links else 2]))
    if strategy != "skip_till_any_match" and not (whole and strategy == "skip_till_next_match"):
        # skip_till_next_match refuses a predicate over a whole sequence
        text = text.replace(" WHERE ", f" USING {strategy} WHERE ").replace(") WITHIN ", f") USING {strategy} WITHIN ")
    if draw(st.booleans()):
        text += " RETURN " + ", ".join(f"{v}[{v}.len].ts, count({v}[].ts) AS {v}_n, {v}[1].x AS {v}_x"
                                       if v in repeated else f"{v}.ts" for v in names)
        text += f", {names[0]}.x AS first_x" if names[0] not in repeated else ""
    return text


#: over a repeated group's variables (``(SEQ(B b, C c, D e))``) and the steps around it: positional (every event
#: of each variable, or pair of them: ``b[i-1]`` reads the run, one event in a group), over a whole sequence
GROUP_PREDICATES = ("c.x >= b.x", "b.x > a.x", "b[i].x >= b[i-1].x", "b[1].x != 2", "c[1].x > b.x", "d.x >= c.x",
                    "e.x != b.x", "m.x = c.x")
GROUP_WHOLE = ("count(b[].ts) >= 2", "sum(c[].x) <= 3", "c[c.len].x != 1")


@st.composite
def group_queries(draw, predicates: bool = False, until: bool = True) -> str:
    """A SEQ with a repeated group of two or three single events (``(SEQ(B b, C c))+``, ``*``, ``{n,m}``): steps
    before and after it (optional, Kleene, NEXT), a negation away from it, predicates over the other steps and
    over the group's variables (positional: at every event, over each variable's runs; over a whole sequence:
    decided past the group), every strategy; or the group alone, or in one alternative of an OR of SEQs.
    ``predicates``: one or two predicates over the group's variables, and a longer window (for dense streams
    whose groups iterate); ``until``: maybe a stop condition on the group ``UNTIL [ANY] (b.x > 1)``."""
    types = draw(st.lists(st.sampled_from("BCD"), min_size=2, max_size=3))
    if predicates and draw(st.integers(0, 2)):  # B, C: the dense streams' most frequent types
        types[:2] = "BC"
    inner = [f"{t} {v}" for t, v in zip(types, "bce", strict=False)]
    group = f"(SEQ({', '.join(inner)})){draw(st.sampled_from(QUANTIFIERS))}"
    if until and draw(st.booleans()):  # a stop condition on the group, reading one of its variables
        group += f" UNTIL {draw(st.sampled_from(['', 'ANY ']))}({draw(st.sampled_from('bc'))}.x > 1)"
    before = draw(st.sampled_from(["", "A a", "A? a", "A+ f[]", "A a, !(D n), C? g", "A a, !(D n)",
                                   "A a, NEXT !(B n)", "A a, !(SEQ(D n, C o))"]))
    after = draw(st.sampled_from(["", "D d", "NEXT D d", "A* h[]", "C? h", "D d, !(B m), A k", "!(A m), D d",
                                  "!(A m)", "!(SEQ(D m, A p)), D d"]))
    if "NEXT !" in before and ("*" in group or "{0" in group) and "D d" not in after:
        after = "D d"  # (NEXT !(...) before items that may all match no event: refused by check)
    items = ", ".join(i for i in (before, group, after) if i)
    if draw(st.integers(0, 4)) == 0:
        text = f"PATTERN {group}"
    elif draw(st.integers(0, 3)) == 0:
        text = f"PATTERN SEQ({items}) OR SEQ(D y, A z)"
    else:
        text = f"PATTERN SEQ({items})"
    conds = ["[id]"] if draw(st.booleans()) else []
    usable = [p for p in ("a.x >= 1", "d.x >= a.x", "n.x = a.x", "k.x != d.x", *GROUP_PREDICATES, *GROUP_WHOLE)
              if all(re.search(rf"\b{v}\b", text) for v in re.findall(r"(\w)(?:\[[^\]]*\])?\.(?:x|ts)", p))]
    for _ in range(draw(st.integers(0, 2))):
        if usable:
            conds.append(draw(st.sampled_from(usable)))
    if predicates:
        conds += draw(st.lists(st.sampled_from([p for p in usable if p in GROUP_PREDICATES + GROUP_WHOLE]),
                               min_size=1, max_size=2))
    strategy = draw(st.sampled_from(STRATEGIES))
    if strategy == "skip_till_next_match" and any(c in GROUP_WHOLE for c in conds):
        strategy = "skip_till_any_match"  # (skip_till_next_match refuses a predicate over a whole sequence)
    using = "" if strategy == "skip_till_any_match" else f" USING {strategy}"
    window = draw(st.integers(6, 10) if predicates else st.integers(2, 8))
    return text + using + (" WHERE " + " AND ".join(conds) if conds else "") + f" WITHIN {window}"


def spec_of(text: str, attributes=("type", "ts", "id", "x")) -> TimeoutSpec:
    return TimeoutSpec.of(with_default_outputs(sparkcep.compile(text).spec(), attributes))


def run(spec, events, cuts=(), watermarks=(), roundtrip=False, seed=0) -> list[dict]:
    """One engine per key, fed the micro-batches ``cuts`` delimit (each shuffled), the watermark advanced after
    each (never past an event not yet delivered), the state optionally serialized between; then flushed."""
    rnd = random.Random(seed)
    parts: dict[tuple, list[dict]] = {}
    for e in events:
        parts.setdefault(tuple(e.get(k) for k in spec.key), []).append(e)
    rows = []
    for part in parts.values():
        state = timeouts.init_state()
        bounds = [0, *sorted(min(c, len(part)) for c in cuts), len(part)]
        for k, (lo, hi) in enumerate(zip(bounds, bounds[1:], strict=False)):
            batch = part[lo:hi]
            rnd.shuffle(batch)
            state, out = timeouts.step(spec, state, batch)
            assert out == []
            if roundtrip:
                state = timeouts.TimeoutState.from_bytes(state.to_bytes())
            if k < len(watermarks):
                safe = min([e["ts"] for e in part[hi:]], default=math.inf)
                state, out = timeouts.advance(spec, state, min(watermarks[k], safe))
                rows += out
        state, out = timeouts.advance(spec, state, math.inf)
        rows += out
        assert timeouts.is_empty(state)
    return rows


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=timeout_queries(), events=event_streams(types="ABC", min_size=2, max_size=9, max_gap=2,
                                                    attrs={"x": (0, 3), "id": (0, 1)}),
       cuts=st.lists(st.integers(0, 9), max_size=3), watermarks=st.lists(st.integers(0, 30), max_size=4),
       roundtrip=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_engine_equals_the_oracle(text, events, cuts, watermarks, roundtrip, seed):
    assert_engine_equals_the_oracle(text, events, cuts, watermarks, roundtrip, seed)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=timeout_queries(kleene=True), events=event_streams(types="ABC", min_size=2, max_size=8, max_gap=2,
                                                               attrs={"x": (0, 3), "id": (0, 1)}),
       cuts=st.lists(st.integers(0, 8), max_size=3), watermarks=st.lists(st.integers(0, 30), max_size=4),
       roundtrip=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_engine_equals_the_oracle_with_kleene_steps(text, events, cuts, watermarks, roundtrip, seed):
    assert_engine_equals_the_oracle(text, events, cuts, watermarks, roundtrip, seed)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=timeout_queries(kleene=True, quantifiers=True),
       events=event_streams(types="ABC", min_size=2, max_size=9, max_gap=2, attrs={"x": (0, 3), "id": (0, 1)}),
       cuts=st.lists(st.integers(0, 9), max_size=3), watermarks=st.lists(st.integers(0, 30), max_size=4),
       roundtrip=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_engine_equals_the_oracle_with_optional_and_bounded_steps(text, events, cuts, watermarks, roundtrip, seed):
    assert_engine_equals_the_oracle(text, events, cuts, watermarks, roundtrip, seed)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=timeout_queries(kleene=True, quantifiers=True, links=True),
       events=event_streams(types="ABCD", min_size=2, max_size=9, max_gap=2, attrs={"x": (0, 3), "id": (0, 1)}),
       cuts=st.lists(st.integers(0, 9), max_size=3), watermarks=st.lists(st.integers(0, 30), max_size=4),
       roundtrip=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_engine_equals_the_oracle_with_links_and_stop_conditions(text, events, cuts, watermarks, roundtrip, seed):
    """NEXT steps, the contiguity strategies and UNTIL: an event no step takes (type D) breaks a link."""
    assert_engine_equals_the_oracle(text, events, cuts, watermarks, roundtrip, seed)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=timeout_queries(kleene=True, quantifiers=True, negation=True, wide=True),
       events=event_streams(types="ABCD", min_size=2, max_size=9, max_gap=2, attrs={"x": (0, 3), "id": (0, 1)}),
       cuts=st.lists(st.integers(0, 9), max_size=3), watermarks=st.lists(st.integers(0, 30), max_size=4),
       roundtrip=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_engine_equals_the_oracle_with_negation(text, events, cuts, watermarks, roundtrip, seed):
    """A negated event between two steps or at the end (Flink's notFollowedBy, notNext): its event kills a
    partial match, which is then no timeout.  Where the engine refuses the query, so does the oracle."""
    assert_engine_equals_the_oracle_or_both_refuse(text, events, cuts, watermarks, roundtrip, seed)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=timeout_queries(kleene=True, quantifiers=True, links=True, alternatives=True),
       events=event_streams(types="ABCD", min_size=2, max_size=9, max_gap=2, attrs={"x": (0, 3), "id": (0, 1)}),
       cuts=st.lists(st.integers(0, 9), max_size=3), watermarks=st.lists(st.integers(0, 30), max_size=4),
       roundtrip=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_engine_equals_the_oracle_with_alternatives(text, events, cuts, watermarks, roundtrip, seed):
    """An OR step or an OR of two SEQs: a partial match is one of some path; one that paths share (a prefix
    before an OR step) is one row, extended if an event extends it in one of them."""
    assert_engine_equals_the_oracle(text, events, cuts, watermarks, roundtrip, seed)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=group_queries(),
       events=event_streams(types="ABCD", min_size=2, max_size=9, max_gap=2, attrs={"x": (0, 3), "id": (0, 1)}),
       cuts=st.lists(st.integers(0, 9), max_size=3), watermarks=st.lists(st.integers(0, 30), max_size=4),
       roundtrip=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_engine_equals_the_oracle_with_repeated_groups(text, events, cuts, watermarks, roundtrip, seed):
    """A repeated group of single events: a partial match may end inside an iteration (``timeout_step`` the
    group's step it reached) or after complete ones; the group's variables are the lists of its iterations'
    events.  A negation next to the group applies between the group's last event and the step after it, or
    between the step before it and the group's first event (not between iterations)."""
    assert_engine_equals_the_oracle_or_both_refuse(text, events, cuts, watermarks, roundtrip, seed)


#: dense streams of a group's types: groups iterate within a window
GROUP_STREAMS = event_streams(types="ABBBCCCD", min_size=4, max_size=9, max_gap=1, attrs={"x": (0, 3), "id": (0, 1)})


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=group_queries(predicates=True), events=GROUP_STREAMS, cuts=st.lists(st.integers(0, 9), max_size=3),
       watermarks=st.lists(st.integers(0, 30), max_size=4), roundtrip=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_engine_equals_the_oracle_with_predicates_over_repeated_groups(text, events, cuts, watermarks, roundtrip,
                                                                        seed):
    """A predicate over a group's variables: positional ones are decided at each event taking one of them (over
    every pair of positions of the variables' runs, as in a match: a group's events are runs of one, so
    ``b[i-1]`` reads none), once the group's later steps are bound; those over a whole sequence once the run
    has gone past the group."""
    assert_engine_equals_the_oracle_or_both_refuse(text, events, cuts, watermarks, roundtrip, seed)


def refused_by_check(text: str, events: list[dict]) -> bool:
    """Does check refuse the match query ``text`` (``NEXT !(...)`` before items that may all match no event)?
    Then the timeouts oracle refuses it too."""
    try:
        sparkcep.compile(text)
    except sparkcep.CEPError as e:
        assert "before items that may all match no event" in str(e), text
        with pytest.raises(match_oracle.OracleError):
            timed_out_rows(parse_query(text), events)
        return True
    return False


def assert_engine_equals_the_oracle_or_both_refuse(text, events, cuts, watermarks, roundtrip, seed):
    if refused_by_check(text, events):
        return
    try:
        timeouts.check(spec_of(text))
    except EngineUnsupportedError:
        with pytest.raises(match_oracle.OracleError):
            timed_out_rows(sparkcep.compile(text).query, events)
        return
    assert_engine_equals_the_oracle(text, events, cuts, watermarks, roundtrip, seed)


def assert_engine_equals_the_oracle(text, events, cuts, watermarks, roundtrip, seed):
    # _seq: the input order of equal timestamps (which one skip_till_next_match takes), whatever the delivery's
    feed = [{**e, "_seq": rank} for rank, e in enumerate(sorted(events, key=lambda e: e["ts"]))]
    got = run(spec_of(text), feed, cuts, sorted(watermarks), roundtrip, seed)
    expected = timed_out_rows(sparkcep.compile(text).query, events, ["type", "ts", "id", "x"])
    assert canonical(got) == canonical(expected), text


def brute_force_picks(text: str, events: list[dict]) -> set:
    """The timed-out partial matches by brute force, the first oracle's way (exponential: small streams only):
    every subset of a partition's events, labelled with steps in every way whose step word is a prefix of a word
    of the pattern (a regular expression over step letters: the steps before the last at their counts, the last
    one 1 to its maximum), kept if a partial match (types, strictly increasing ts, window, the decided
    predicates; skip_till_next_match: no skipped event between two picks could have extended the picks before
    it; no event of a negation between two picks' steps lies between them, or is right after the first for
    ``NEXT !(...)``); reported if no other partial match extends it by one event, a step may follow (its word
    plus a letter is a prefix too, and no event of a negation between came in the window) and it is no match
    (the word is the pattern's, every predicate holds, no event of a negation at the end came in the window)."""
    q = sparkcep.compile(text).query
    prep = match_oracle._prepare(q, None)
    steps = timeouts_oracle._steps(prep)
    index = {s.var: k for k, s in enumerate(steps)}

    def quantified(k: int, lo: int) -> str:
        hi = "" if steps[k].hi is None else steps[k].hi
        if steps[k].group:  # a repeated group: the word of its steps, repeated
            first, last = steps[k].group
            return f"(?:{''.join(chr(97 + i) for i in range(first, last + 1))}){{{lo},{hi}}}"
        return f"{chr(97 + k)}{{{lo},{hi}}}"

    # a repeated group is one unit of the word; a prefix ends inside one of its iterations (after fewer than
    # its maximum before), or after 1 to its maximum events of a single or Kleene step
    units = [k for k, s in enumerate(steps) if not s.group or s.group[0] == k]
    whole = "".join(quantified(k, steps[k].lo) for k in units)
    prefix = "|".join(
        "".join(quantified(i, steps[i].lo) for i in units[:u])
        + (quantified(k, 1) if not steps[k].group else quantified(k, 0).rsplit("{", 1)[0]
           + f"{{0,{'' if steps[k].hi is None else steps[k].hi - 1}}}" + "".join(map(chr, range(97 + k, 98 + i))))
        for u, k in enumerate(units) for i in (range(k, steps[k].group[1] + 1) if steps[k].group else (k,)))
    prep, kept = timeouts_oracle.as_equivalence(prep, steps, events)
    out = set()
    for _, part in match_oracle._partitions(prep, match_oracle._sorted(kept)):
        evs = [e for _, e in part]

        def negated(picks, t, until, next_until, binding, runs, evs=evs) -> bool:
            """Is there an event of a negation between the last pick's step and step ``t`` after the last pick
            and before ``until`` (``NEXT !(...)``: the event right after it, if before ``next_until``)?"""
            last, k = picks[-1]
            for step in steps[k:t]:
                for neg, next_ in step.negs:
                    pool = ([evs[last + 1]] if last + 1 < len(evs) and evs[last + 1]["ts"] < next_until else []
                            ) if next_ else [e for e in evs if evs[last]["ts"] < e["ts"] < until]
                    # its events: one, or a SEQ's (any of the pool's, strictly increasing ts)
                    inner = getattr(neg.inner, "items", (neg.inner,))
                    if any(all(e["type"] in i.types for e, i in zip(chosen, inner, strict=True))
                           and all(a["ts"] < b["ts"] for a, b in itertools.pairwise(chosen))
                           and all(match_oracle._conjunct_holds(
                               c, {**binding, **{i.var: e for e, i in zip(chosen, inner, strict=True)}}, runs)
                               for c in prep.in_scope(neg.scope))
                           for chosen in itertools.combinations(pool, len(inner))):
                        return True
            return False

        def partial(picks, evs=evs) -> bool:
            word = "".join(chr(97 + s) for _, s in picks)
            chosen = [evs[j] for j, _ in picks]
            if not (re.fullmatch(prefix, word) and all(e["type"] in steps[s].types for e, (_, s) in
                                                        zip(chosen, picks, strict=True))
                    and all(a["ts"] < b["ts"] for a, b in itertools.pairwise(chosen))
                    and chosen[-1]["ts"] - chosen[0]["ts"] < prep.window):
                return False
            binding, runs = match_oracle._bind(prep, evs, tuple((j, steps[s].var) for j, s in picks))
            last = steps[picks[-1][1]]
            if any(negated(picks[:i], picks[i][1], chosen[i]["ts"], math.inf, binding, runs)
                   for i in range(1, len(picks)) if picks[i - 1][1] < picks[i][1]):
                return False
            # a sequence still open: the last step's if a Kleene step, every variable of its repeated group
            open_ = ({steps[t].var for t in range(last.group[0], last.group[1] + 1)} if last.group
                     else {last.var} if last.is_list else set())
            # decided: over steps up to the last one or bound (a group's, in an earlier iteration), reading no open
            # sequence whole
            return all(match_oracle._conjunct_holds(c, binding, runs) for c in prep.in_scope(())
                       if all(index[v] <= picks[-1][1] or v in binding for v in c.vars)
                       and not any(timeouts_oracle._reads_whole(c.expr, v) for v in open_ & c.vars))

        valid = {p for size in range(1, len(evs) + 1) for chosen in itertools.combinations(range(len(evs)), size)
                 for p in (tuple(zip(chosen, labels, strict=True))
                           for labels in itertools.product(range(len(steps)), repeat=size)) if partial(p)}
        if prep.strategy == "skip_till_next_match":
            valid = {p for p in valid if not any(partial((*p[:i], (j, s))) for i in range(1, len(p))
                                                 for j in range(p[i - 1][0] + 1, p[i][0]) for s in range(len(steps)))}
        extended = {p[:-1] for p in valid}
        for p in valid - extended:
            binding, runs = match_oracle._bind(prep, evs, tuple((j, steps[s].var) for j, s in p))
            word = "".join(chr(97 + s) for _, s in p)
            end = evs[p[0][0]]["ts"] + prep.window
            alive = any(re.fullmatch(prefix, word + chr(97 + t)) and not negated(p, t, end, end, binding, runs)
                        for t in range(len(steps)))  # a step may follow
            if alive and not (re.fullmatch(whole, word) and not negated(p, len(steps), end, end, binding, runs)
                              and all(match_oracle._conjunct_holds(c, binding, runs) for c in prep.in_scope(()))):
                out.add((tuple(part[j][0] for j, _ in p), tuple(s for _, s in p)))
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# a negated SEQ's occurrence between a and b (random streams seldom hold one)
@example(text="PATTERN SEQ(A a, !(SEQ(C n, D m)), B b, E e) WITHIN 10",
         events=[{"type": t, "ts": ts, "x": 0} for t, ts in (("A", 1), ("C", 2), ("D", 3), ("B", 4))])
@given(text=st.one_of(timeout_queries(kleene=True, quantifiers=True),
                      timeout_queries(kleene=True, quantifiers=True, negation=True, wide=True),
                      # (the brute force has no links: no NEXT, no contiguity strategy)
                      *(group_queries(p, until=False).filter(
                          lambda t: not any(w in t for w in (" OR ", "NEXT", "contiguity"))) for p in (False, True))),
       events=st.one_of(event_streams(types="ABCD", min_size=2, max_size=6, max_gap=2,
                                      attrs={"x": (0, 3), "id": (0, 1)}),
                        event_streams(types="ABBCCD", min_size=4, max_size=6, max_gap=1, attrs={"x": (0, 3)})))
def test_the_oracle_equals_the_brute_force_definition(text, events):
    """The oracle walks partial matches prefix by prefix; the brute force labels every subset of the events."""
    if refused_by_check(text, events):
        return
    q = sparkcep.compile(text).query
    prep = match_oracle._prepare(q, None)
    try:
        steps = timeouts_oracle._steps(prep)
    except match_oracle.OracleError:
        return  # outside the definition (a negation at the start, ...): the engine refuses it too
    got = timeouts_oracle.timed_out_picks(prep, [steps], events)
    index = {s.var: k for k, s in enumerate(steps)}
    got_picks = {(order, tuple(index[v] for _, v in picks)) for order, picks, _ in got}
    assert got_picks == brute_force_picks(text, events), text
    assert len(got) == len({(order, picks) for order, picks, _ in got})  # each partial match met once


def test_a_partial_match_is_decided_when_event_time_reaches_its_window_end():
    spec = spec_of("PATTERN SEQ(A a, B b, C c) WHERE a.x < b.x WITHIN 10 RETURN a.ts, b.ts")
    state, _ = timeouts.step(spec, timeouts.init_state(), [
        {"type": "A", "ts": 1, "x": 1}, {"type": "B", "ts": 2, "x": 0}, {"type": "B", "ts": 3, "x": 5},
        {"type": "C", "ts": 12}])
    assert timeouts.wakeup(spec, state) == 1
    state, rows = timeouts.advance(spec, state, 10)
    assert rows == [] and timeouts.wakeup(spec, state) == 11  # an event before ts 11 may still extend a@1
    state, rows = timeouts.advance(spec, state, 11)
    # b@2 fails a.x < b.x; (a@1, b@3) is maximal: c@12 is outside the window
    assert rows == [{"a_ts": 1, "b_ts": 3, "timeout_step": "b"}]
    state, rows = timeouts.step(spec, state, [{"type": "A", "ts": 9}])  # behind the watermark: late
    assert state.late == 1


def test_skip_till_next_match_times_out_one_chain_per_first_event():
    """A1 B2 B3 (no C): skip_till_any_match has two maximal partial matches (A1 B2) and (A1 B3); under
    skip_till_next_match B2 must be taken, so only (A1 B2) times out."""
    events = [{"type": "A", "ts": 1}, {"type": "B", "ts": 2}, {"type": "B", "ts": 3}]
    for using, want in (("", [2, 3]), ("USING skip_till_next_match", [2])):
        text = f"PATTERN SEQ(A a, B b, C c) {using} WITHIN 10 RETURN a.ts, b.ts"
        rows = [{"a_ts": 1, "b_ts": b, "timeout_step": "b"} for b in want]
        assert canonical(run(spec_of(text), events)) == canonical(rows)
        assert canonical(timed_out_rows(sparkcep.compile(text).query, events, ["type", "ts"])) == canonical(rows)


def test_a_kleene_step_times_out_once_per_run_with_the_events_it_took():
    """A1 B2(x=1) B3(x=0) B4(x=3), no C, b nondecreasing in x: every run that reached b and that no later event
    extends; skip_till_next_match has one run (B3 cannot extend [B2], B4 must be taken)."""
    events = [{"type": "A", "ts": 1}, {"type": "B", "ts": 2, "x": 1}, {"type": "B", "ts": 3, "x": 0},
              {"type": "B", "ts": 4, "x": 3}]
    for using, want in (("", [(2, 4, 2), (3, 4, 2), (4, 4, 1)]), ("USING skip_till_next_match", [(2, 4, 2)])):
        text = (f"PATTERN SEQ(A a, B+ b[], C c) {using} WHERE b[i].x >= b[i-1].x WITHIN 10 "
                "RETURN a.ts, b[1].ts AS first, b[b.len].ts AS last, count(b[].ts) AS n")
        rows = [{"a_ts": 1, "first": f, "last": la, "n": n, "timeout_step": "b"} for f, la, n in want]
        assert canonical(run(spec_of(text), events)) == canonical(rows), using
        assert canonical(timed_out_rows(sparkcep.compile(text).query, events, ["type", "ts", "x"])) == canonical(rows)


def test_a_final_kleene_step_short_of_its_condition_times_out():
    """``count(b[].ts) >= 2`` is decided when b closes: (A1, [B2]) reached b but is no match; over A1 B2 B3 the
    match (A1, [B2, B3]) extends it, and the run that skipped B2, (A1, [B3]), times out."""
    text = "PATTERN SEQ(A a, B+ b[]) WHERE count(b[].ts) >= 2 WITHIN 10 RETURN a.ts, b[1].ts AS first"
    a, b2, b3 = {"type": "A", "ts": 1}, {"type": "B", "ts": 2}, {"type": "B", "ts": 3}
    for events, first in (([a, b2], 2), ([a, b2, b3], 3)):
        rows = [{"a_ts": 1, "first": first, "timeout_step": "b"}]
        assert run(spec_of(text), events) == rows
        assert timed_out_rows(sparkcep.compile(text).query, events, ["type", "ts"]) == rows


A1, B2, B3, C2 = ({"type": "A", "ts": 1}, {"type": "B", "ts": 2}, {"type": "B", "ts": 3}, {"type": "C", "ts": 2})


@pytest.mark.parametrize(("pattern", "events", "want"), [
    # a bounded step short of its minimum times out; under skip_till_any_match the run that skipped B2 too
    ("SEQ(A a, B{2,3} b[], C c)", [A1, B2], [(1, 2, 1, "b")]),
    ("SEQ(A a, B{2,3} b[], C c)", [A1, B2, B3], [(1, 2, 2, "b"), (1, 3, 1, "b")]),
    ("SEQ(A a, B{2} b[])", [A1, B2, B3], [(1, 3, 1, "b")]),  # (A1, [B2, B3]) is a match
    # a step that may take no event: passed over, or the partial match that took it
    ("SEQ(A a, B* b[], C c)", [A1, B2], [(1, 2, 1, "b")]),
    ("SEQ(A a, B* b[], C c)", [A1, C2], []),
    ("SEQ(A a, B* b[])", [A1], []),  # a match without b
    ("SEQ(A a, B? b, C c)", [A1], [(1, None, 0, "a")]),
    ("SEQ(A? a, B b, C c)", [B2, B3], [(None, 2, 1, "b"), (None, 3, 1, "b")]),
])
def test_optional_and_bounded_steps_time_out_as_worked_by_hand(pattern, events, want):
    kleene = "[]" in pattern
    text = f"PATTERN {pattern} WITHIN 10 RETURN a.ts, " + ("b[1].ts AS b, count(b[].ts) AS n" if kleene else
                                                           "b.ts AS b")
    rows = [{"a_ts": a, "b": b, **({"n": n} if kleene else {}), "timeout_step": step} for a, b, n, step in want]
    assert canonical(run(spec_of(text), events)) == canonical(rows)
    assert canonical(timed_out_rows(sparkcep.compile(text).query, events, ["type", "ts"])) == canonical(rows)


X2, X3 = {"type": "D", "ts": 2}, {"type": "D", "ts": 3}  # of no step


@pytest.mark.parametrize(("pattern", "events", "want"), [
    # NEXT B b: a run whose next event is no B is broken before the window closes, and is no timeout
    ("SEQ(A a, NEXT B b, C c)", [A1], [(1, None, "a")]),
    ("SEQ(A a, NEXT B b, C c)", [A1, X2, B3], []),
    ("SEQ(A a, NEXT B b, C c)", [A1, B2, X3], [(1, 2, "b")]),  # c is not linked
    ("SEQ(A a, NEXT B b, C c)", [A1, {"type": "D", "ts": 11}], [(1, None, "a")]),  # D@11: after the window
    ("SEQ(A a, B b, C c) USING partition_contiguity", [A1, B2, X3], []),
    ("SEQ(A a, B b, C c) USING strict_contiguity", [A1, B2], [(1, 2, "b")]),
    # a loop with UNTIL takes no stop event (x > 2) and none after one; stopped, it can still go on to c
    ("SEQ(A a, B+ b[] UNTIL (b.x > 2), C c)", [A1, {**B2, "x": 0}, {**B3, "x": 5}], [(1, 2, "b")]),
    # ... but a last step stopped short of its condition is dead before the window closes
    ("SEQ(A a, B+ b[] UNTIL (b.x > 2)) WHERE count(b[].ts) >= 2", [A1, {**B2, "x": 0}, {**B3, "x": 5}], []),
    ("SEQ(A a, B+ b[] UNTIL (b.x > 2)) WHERE count(b[].ts) >= 2", [A1, {**B2, "x": 0}], [(1, 2, "b")]),
    # UNTIL ANY: an event of any type stops the loop (D@3 here; not a stop of UNTIL, which reads B events only)
    ("SEQ(A a, B+ b[] UNTIL ANY (b.x > 2)) WHERE count(b[].ts) >= 2", [A1, {**B2, "x": 0}, {**X3, "x": 5}], []),
    ("SEQ(A a, B+ b[] UNTIL (b.x > 2)) WHERE count(b[].ts) >= 2", [A1, {**B2, "x": 0}, {**X3, "x": 5}],
     [(1, 2, "b")]),
])
def test_links_and_stop_conditions_time_out_as_worked_by_hand(pattern, events, want):
    text = f"PATTERN {pattern} WITHIN 10 RETURN a.ts, " + ("b[1].ts AS b" if "[]" in pattern else "b.ts AS b")
    rows = [{"a_ts": a, "b": b, "timeout_step": step} for a, b, step in want]
    assert canonical(run(spec_of(text), events)) == canonical(rows), pattern
    assert canonical(timed_out_rows(sparkcep.compile(text).query, events, ["type", "ts", "x"])) == canonical(rows)


C4 = {"type": "C", "ts": 4}
D4 = {"type": "D", "ts": 4}


@pytest.mark.parametrize(("pattern", "events", "want"), [
    # Flink's notFollowedBy: a C after A@1 kills the run (A@1), which is then no timeout
    ("SEQ(A a, !(C n), B b, D d)", [A1], [(1, None, "a")]),
    ("SEQ(A a, !(C n), B b, D d)", [A1, C2], []),
    ("SEQ(A a, !(C n), B b, D d)", [A1, C2, B3], []),  # (A@1, B@3) is no partial match: C@2 lies between
    ("SEQ(A a, !(C n), B b, D d)", [A1, B3, C4], [(1, 3, "b")]),  # C@4 lies after b: not between a and b
    ("SEQ(A a, !(C n), B b, D d) WHERE n.x = a.x", [{**A1, "x": 1}, {**C2, "x": 2}], [(1, None, "a")]),
    # at the end: killed, no match; a Kleene step still open could have grown: a timeout
    ("SEQ(A a, B b, !(C n))", [A1, B3, C4], []),
    ("SEQ(A a, B+ b[], !(C n))", [A1, B3, C4], [(1, 3, "b")]),
    # Flink's notNext: only the event right after a
    ("SEQ(A a, NEXT !(C n), B b, D d)", [A1, C2], []),
    ("SEQ(A a, NEXT !(C n), B b, D d)", [A1, X2, C4], [(1, None, "a")]),
    ("SEQ(A a, NEXT !(C n), B b, D d)", [A1, {"type": "C", "ts": 11}], [(1, None, "a")]),  # after the window
    # a negation of a SEQ: its events in order, strictly increasing ts, between the steps, kill the run
    ("SEQ(A a, !(SEQ(C n, D m)), B b, D d)", [A1, C2], [(1, None, "a")]),
    ("SEQ(A a, !(SEQ(C n, D m)), B b, D d)", [A1, C2, D4], []),
    ("SEQ(A a, !(SEQ(C n, D m)), B b, D d)", [A1, {"type": "D", "ts": 2}, C4], [(1, None, "a")]),
    ("SEQ(A a, !(SEQ(C n, D m)), B b, D d)", [A1, C2, {"type": "D", "ts": 2}], [(1, None, "a")]),
    ("SEQ(A a, !(SEQ(C n, D m)), B b, E e)", [A1, C2, B3, D4], [(1, 3, "b")]),  # D@4 after b: no occurrence
    ("SEQ(A a, !(SEQ(C n, D m)), B b, D d) WHERE m.x > n.x", [A1, {**C2, "x": 2}, {**D4, "x": 1}],
     [(1, None, "a")]),
    ("SEQ(A a, B+ b[], !(SEQ(C n, D m)))", [A1, B3, C4, {"type": "D", "ts": 5}], [(1, 3, "b")]),
])
def test_negations_time_out_as_worked_by_hand(pattern, events, want):
    text = f"PATTERN {pattern} WITHIN 10 RETURN a.ts, " + ("b[1].ts AS b" if "[]" in pattern else "b.ts AS b")
    rows = [{"a_ts": a, "b": b, "timeout_step": step} for a, b, step in want]
    assert canonical(run(spec_of(text), events)) == canonical(rows), pattern
    assert canonical(timed_out_rows(sparkcep.compile(text).query, events, ["type", "ts", "x"])) == canonical(rows)


@pytest.mark.parametrize(("pattern", "events", "want"), [
    # an OR step: (A@1) is a partial match of both paths, one row; extended by B@2 (or C@2) in one of them
    ("SEQ(A a, B b OR C c, D d)", [A1], [(1, None, None, "a")]),
    ("SEQ(A a, B b OR C c, D d)", [A1, B2], [(1, 2, None, "b")]),
    ("SEQ(A a, B b OR C c, D d)", [A1, C2, B3], [(1, None, 2, "c"), (1, 3, None, "b")]),
    ("SEQ(A a, B b OR C c, D d) USING skip_till_next_match", [A1, C2, B3], [(1, None, 2, "c")]),  # C@2 first
    ("SEQ(A a, B b OR C c, D d)", [A1, C2, D4], []),
    # an OR of SEQs: each alternative is a run of its own (A@1 as c is a match; as a, a run of the first)
    ("SEQ(A a, B b) OR SEQ(A c)", [A1], [(1, None, None, "a")]),
    ("SEQ(A a, B b) OR SEQ(C c, D d)", [A1, C2], [(1, None, None, "a"), (None, None, 2, "c")]),
    # an OR step with a SEQ alternative: its steps are the path's, a partial match may end inside it
    ("SEQ(A a, SEQ(B b, C c) OR D d, E e)", [A1, B2], [(1, 2, None, "b")]),
    ("SEQ(A a, SEQ(B b, C c) OR D d, E e)", [A1, B2, {"type": "C", "ts": 3}], [(1, 2, 3, "c")]),
    ("SEQ(A a, SEQ(B b, C c) OR D d, E e)", [A1, B2, D4], [(1, 2, None, "b"), (1, None, None, "d")]),
    # the OR step linked to a: so is the SEQ alternative's first step (F@2 breaks the run)
    ("SEQ(A a, NEXT (SEQ(B b, C c) OR D d), E e)", [A1, B2], [(1, 2, None, "b")]),
    ("SEQ(A a, NEXT (SEQ(B b, C c) OR D d), E e)", [A1, {"type": "F", "ts": 2}, B3], []),
])
def test_alternatives_time_out_as_worked_by_hand(pattern, events, want):
    text = f"PATTERN {pattern} WITHIN 10 RETURN a.ts, b.ts, c.ts"
    rows = [{"a_ts": a, "b_ts": b, "c_ts": c, "timeout_step": step} for a, b, c, step in want]
    assert canonical(run(spec_of(text), events)) == canonical(rows), pattern
    assert canonical(timed_out_rows(sparkcep.compile(text).query, events, ["type", "ts"])) == canonical(rows)


def _typed(word: str) -> list[dict]:
    """Events of the types ``word`` spells, at ts 1, 2, ..."""
    return [{"type": t, "ts": k} for k, t in enumerate(word, 1)]


@pytest.mark.parametrize(("pattern", "word", "want"), [
    # inside an iteration (B@2 without its C): the events so far, timeout_step the group's step reached
    ("SEQ(A a, (SEQ(B b, C c))+, D d)", "AB", [(1, [2], [], "b")]),
    # after a complete iteration: on to D or into another one; B@4 starts the second (A@1 B@4 skips B@2 too)
    ("SEQ(A a, (SEQ(B b, C c))+, D d)", "ABC", [(1, [2], [3], "c")]),
    ("SEQ(A a, (SEQ(B b, C c))+, D d)", "ABCB", [(1, [2, 4], [3], "b"), (1, [4], [], "b")]),
    # {2}: one iteration is short of its minimum; two reach the maximum, D alone may follow (no third: B@6 is in
    # a second iteration after each first one)
    ("SEQ(A a, (SEQ(B b, C c)){2}, D d)", "ABC", [(1, [2], [3], "c")]),
    ("SEQ(A a, (SEQ(B b, C c)){2}, D d)", "ABCBCB", [(1, [2, 4], [3, 5], "c"), (1, [2, 6], [3], "b"),
                                                   (1, [2, 6], [5], "b"), (1, [4, 6], [5], "b"),
                                                   (1, [6], [], "b")]),
    # *: the group may take no event (A@1 then D: a match); A@1 alone is extended by B@2
    ("SEQ(A a, (SEQ(B b, C c))*, D d)", "AB", [(1, [2], [], "b")]),
    ("SEQ(A a, (SEQ(B b, C c))*, D d)", "ACD", []),
    # skip_till_next_match: B@2 is taken, then C@3, then B@4
    ("SEQ(A a, (SEQ(B b, C c))+, D d) USING skip_till_next_match", "ABBCB", [(1, [2, 5], [4], "b")]),
    # strict_contiguity: X@3 breaks the link inside the iteration (no timeout), A@4 B@5 times out
    ("SEQ(A a, (SEQ(B b, C c))+, D d) USING strict_contiguity", "ABXAB", [(4, [5], [], "b")]),
    # a negation after the group: E@4 closes the way on to D, not another iteration (B@5 takes it); with {1}
    # the way to D is the only one, so E@4 kills the run
    ("SEQ(A a, (SEQ(B b, C c))+, !(E e), D d)", "ABCEB", [(1, [2, 5], [3], "b"), (1, [5], [], "b")]),
    ("SEQ(A a, (SEQ(B b, C c))+, !(E e), D d)", "ABCE", [(1, [2], [3], "c")]),
    ("SEQ(A a, (SEQ(B b, C c)){1}, !(E e), D d)", "ABCE", []),
    ("SEQ(A a, (SEQ(B b, C c)){1}, !(E e), D d)", "ABC", [(1, [2], [3], "c")]),
    # a negation before it: E@2 between A@1 and the group's first B kills (A@1); E@4 between two iterations
    # does not, but it bars B@5 from being the first B after A@1
    ("SEQ(A a, !(E e), (SEQ(B b, C c))+, D d)", "AEB", []),
    ("SEQ(A a, !(E e), (SEQ(B b, C c))+, D d)", "ABCEB", [(1, [2, 5], [3], "b")]),
])
def test_repeated_groups_time_out_as_worked_by_hand(pattern, word, want):
    text = f"PATTERN {pattern} WITHIN 10 RETURN a.ts AS a, b[1].ts AS b1, b[2].ts AS b2, c[1].ts AS c1, c[2].ts AS c2"
    events = _typed(word)
    rows = [{"a": a, "b1": b[0], "b2": (b + [None])[1], "c1": (c + [None])[0], "c2": (c + [None, None])[1],
             "timeout_step": step} for a, b, c, step in want]
    assert canonical(run(spec_of(text), events)) == canonical(rows), pattern
    assert canonical(timed_out_rows(sparkcep.compile(text).query, events, ["type", "ts"])) == canonical(rows)


def assert_group_rows(pattern: str, word: str, xs: str, want: list[tuple]) -> None:
    """The engine's and the oracle's timeouts of ``pattern`` over events of the types ``word`` spells at ts 1,
    2, ... with the values ``xs`` of ``x``: ``want`` ``(a, [b...], [c...], timeout_step)``."""
    text = f"PATTERN {pattern} WITHIN 10 RETURN a.ts AS a, b[1].ts AS b1, b[2].ts AS b2, c[1].ts AS c1, c[2].ts AS c2"
    events = [{**e, "x": int(x)} for e, x in zip(_typed(word), xs, strict=True)]
    rows = [{"a": a, "b1": b[0], "b2": (b + [None])[1], "c1": (c + [None])[0], "c2": (c + [None, None])[1],
             "timeout_step": step} for a, b, c, step in want]
    assert canonical(run(spec_of(text), events)) == canonical(rows), pattern
    assert canonical(timed_out_rows(sparkcep.compile(text).query, events, ["type", "ts", "x"])) == canonical(rows)


@pytest.mark.parametrize(("pattern", "word", "xs", "want"), [
    # c.x >= b.x at every pair of the lists' events (as in a match): B@4 (x 2) cannot start a second iteration
    # after C@3 (x 1), so (A@1, [B@2], [C@3]) is not extended; C@5 ends the other runs' first iterations
    ("SEQ(A a, (SEQ(B b, C c))+, D d) WHERE c.x >= b.x", "ABCBC", "00123",
     [(1, [2], [3], "c"), (1, [2], [5], "c"), (1, [4], [5], "c")]),
    # b[i-1] reads the run of b, one event in a group: it never fails, B@4 (x 1) after B@2 (x 2) is taken
    ("SEQ(A a, (SEQ(B b, C c)){2}, D d) WHERE b[i].x >= b[i-1].x", "ABCBC", "02010",
     [(1, [2, 4], [3, 5], "c"), (1, [2], [5], "c"), (1, [4], [5], "c")]),
    # c[1] is NULL before the first C: decided once c is bound (B@2 is taken, then C@3 passes or fails it)
    ("SEQ(A a, (SEQ(B b, C c))+, D d) WHERE c[1].x >= b.x", "ABC", "001", [(1, [2], [3], "c")]),
    ("SEQ(A a, (SEQ(B b, C c))+, D d) WHERE c[1].x > b.x", "ABC", "011", [(1, [2], [], "b")]),
    # a whole sequence is decided past the group: (A@1, [B@2], [C@3]) is no match and D@4 cannot end it
    ("SEQ(A a, (SEQ(B b, C c))+, D d) WHERE count(b[].ts) >= 2", "ABCD", "0000", [(1, [2], [3], "c")]),
    ("SEQ(A a, (SEQ(B b, C c))+, D d) WHERE count(b[].ts) >= 2", "ABCBCD", "000000",
     [(1, [2], [5], "c"), (1, [4], [5], "c")]),
    # a negation's predicate over a group's variable: E@4 (x = c.x) kills the run, E@4 (x 2) does not
    ("SEQ(A a, (SEQ(B b, C c)){1}, !(E m), D d) WHERE m.x = c.x", "ABCE", "0011", []),
    ("SEQ(A a, (SEQ(B b, C c)){1}, !(E m), D d) WHERE m.x = c.x", "ABCE", "0012", [(1, [2], [3], "c")]),
])
def test_predicates_over_a_group_time_out_as_worked_by_hand(pattern, word, xs, want):
    """A predicate over a repeated group's variables means what it means in a match (the match oracle: a
    positional one holds at every position of each variable's runs, a group's single events runs of one); a
    partial match is one while every predicate it can decide holds, so one that a later event could never make
    a match again is no timeout."""
    assert_group_rows(pattern, word, xs, want)


@pytest.mark.parametrize(("pattern", "word", "xs", "want"), [
    # a stop event (a B with x > 1) after a complete iteration closes the way into another one, not the way on
    # to d: (A@1, [B@2], [C@3]) times out; B@4 starts no iteration and no run (the loop takes no stop event)
    ("SEQ(A a, (SEQ(B b, C c))+ UNTIL (b.x > 1), D d)", "ABCB", "0002", [(1, [2], [3], "c")]),
    ("SEQ(A a, (SEQ(B b, C c))+, D d)", "ABCB", "0002", [(1, [2, 4], [3], "b"), (1, [4], [], "b")]),
    # inside an iteration the only way is the loop's: B@3 stops it, so (A@1, [B@2]) is discarded
    ("SEQ(A a, (SEQ(B b, C c))+ UNTIL (b.x > 1), D d)", "ABB", "002", []),
    ("SEQ(A a, (SEQ(B b, C c))+, D d)", "ABB", "002", [(1, [2], [], "b"), (1, [3], [], "b")]),
    # UNTIL ANY: an event of any type stops it (E@4); a loop that begins after it (at B@5) is not stopped
    ("SEQ(A a, (SEQ(B b, C c))+ UNTIL ANY (c.x > 1), D d)", "ABCEB", "00020",
     [(1, [2], [3], "c"), (1, [5], [], "b")]),
])
def test_a_stop_condition_on_a_group_times_out_as_worked_by_hand(pattern, word, xs, want):
    """``(P)+ UNTIL (cond)`` (Flink's until on a looping group): as in a match, the loop takes no stop event and
    none after one since its first event; a stop event after a partial match's last event closes the ways that
    stay in the loop (the iteration's next step, another iteration), not the way on past the group."""
    assert_group_rows(pattern, word, xs, want)


def test_an_equality_over_an_optional_step_is_no_equivalence():
    """``c.x = a.x`` with ``C? c`` is NULL when ``c`` takes no event, so (A1) alone is no match: it times out,
    and C2 (another x) cannot complete it.  Read as the key ``[x]`` it would be a match that never times out."""
    text = "PATTERN SEQ(A a, C? c) WHERE c.x = a.x WITHIN 10 RETURN a.ts, c.ts"
    for events in ([{**A1, "x": 1}], [{**A1, "x": 1}, {**C2, "x": 2}]):
        rows = [{"a_ts": 1, "c_ts": None, "timeout_step": "a"}]
        assert run(spec_of(text), events) == rows
        assert timed_out_rows(sparkcep.compile(text).query, events, ["type", "ts", "x"]) == rows


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(group_queries(), group_queries(predicates=True)),
       events=st.one_of(event_streams(types="ABCD", min_size=2, max_size=9, max_gap=2,
                                      attrs={"x": (0, 3), "id": (0, 1)}), GROUP_STREAMS))
def test_a_group_run_is_a_match_or_a_timeout_never_both(text, events):
    """The match oracle (which the match engines equal) and the timeouts oracle never both claim a run: no
    timed-out partial match binds exactly the events of a match (each event told apart by its input rank ``n``),
    on patterns with a repeated group, and predicates over its variables."""
    events = [{**e, "n": n} for n, e in enumerate(events)]
    query = sparkcep.compile(text).query

    def run_of(binding: dict) -> frozenset:
        return frozenset((v, e["n"]) for v, b in binding.items() for e in (b if isinstance(b, list) else [b])
                         if e is not None)

    matched = {run_of(b) for b in match_oracle.matches(query, events)}
    prep = match_oracle._prepare(query, None)
    try:
        paths = timeouts_oracle._paths(prep)
    except match_oracle.OracleError:
        return  # outside the definition (a negation that can be at the start)
    timed_out = {run_of(b) for _, _, b in timeouts_oracle.timed_out_picks(prep, paths, events)}
    assert not matched & timed_out, text


def test_a_prefix_of_a_complete_match_never_times_out():
    spec = spec_of("PATTERN SEQ(A a, B b) WITHIN 5 RETURN a.ts")
    state, _ = timeouts.step(spec, timeouts.init_state(), [{"type": "A", "ts": 1}, {"type": "B", "ts": 2},
                                                          {"type": "A", "ts": 3}])
    assert timeouts.advance(spec, state, math.inf)[1] == [{"a_ts": 3, "timeout_step": "a"}]


@pytest.mark.parametrize(("text", "message"), [
    ("PATTERN SEQ(A a, (SEQ(B b, NEXT C c))+) WITHIN 5", "not a repeated group of anything but single events"),
    ("PATTERN SEQ(A a, (SEQ(B b, C+ c[]))+) WITHIN 5", "not a repeated group of anything but single events"),
    ("PATTERN SEQ(A a, NEXT (SEQ(B b, C c))+, D d) WITHIN 5", "not a repeated group written NEXT"),
    # next to a group that may take no event: a negation that can be at the start, a NEXT !(...) with nothing
    # required after it (refused by check in every match query: the match would read an event after the window)
    ("PATTERN SEQ((SEQ(B b, C c))*, !(E e), D d) WITHIN 5", "not a negation at the start"),
    ("PATTERN SEQ(A a, NEXT !(B n), (SEQ(B b, C c)){0,2}) WITHIN 5", "before items that may all match no event"),
    ("PATTERN SEQ(!(C c), A a, B b) WITHIN 5", "not a negation at the start"),
    ("PATTERN SEQ(A? a, !(C c), B b) WITHIN 5", "not a negation at the start"),
    ("PATTERN SEQ(A a, !(SEQ(C c, NEXT D d)), B b) WITHIN 5", "not a negation of anything but one event or a SEQ"),
    ("PATTERN SEQ(A a, !(SEQ(C c, D d)), B b) WHERE d.x = b.x WITHIN 5", "not a negation predicate over a later"),
    ("PATTERN SEQ(A a, NEXT !(C c), B? b) WITHIN 5", "before items that may all match no event"),
    ("PATTERN SEQ(A a, !(C c), B b) WHERE c.x = b.x WITHIN 5", "not a negation predicate over a later step"),
    ("PATTERN SEQ(A a, SEQ(B b, !(E e), C c) OR D d) WITHIN 5", "not an OR step with an alternative other than"),
    ("PATTERN SEQ(A a, SEQ(B b, C c) OR (SEQ(D d, E e))+) WITHIN 5", "not an OR step with an alternative other"),
    ("PATTERN SEQ(A a, B+ b[], C c) USING skip_till_next_match WHERE sum(b[].x) < 3 WITHIN 5", "whole Kleene"),
])
def test_out_of_scope_is_refused(text, message):
    with pytest.raises(sparkcep.CEPError, match=message):
        timeouts.check(spec_of(text))


def test_the_spec_round_trips_as_a_job_literal():
    spec = spec_of("PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 5")
    assert from_data(to_data(spec)) == spec and isinstance(from_data(to_data(spec)), TimeoutSpec)


# ----------------------------------------------------------------------------------------------- Spark

QUERY = "PATTERN SEQ(A a, B b, C c) WHERE [id] AND a.x < b.x WITHIN 6"
KLEENE_QUERY = ("PATTERN SEQ(A a, B+ b[], C c) WHERE [id] AND b[i].x >= b[i-1].x WITHIN 6 "
                "RETURN a.ts, a.id, b[1].ts AS b_first, b[b.len].ts AS b_last, count(b[].ts) AS n, c.ts")
# every event of a key reaches the engine (under partition_contiguity any event breaks a run); T*, T?, UNTIL, an
# OR of SEQs, an OR step with a SEQ alternative (a partial match may end inside it: timeout_step f)
STREAM_QUERY = ("PATTERN SEQ(A a, B* b[] UNTIL (b.x > 2), C? c, B d) OR SEQ(C e, SEQ(A f, B i) OR B j, C g) "
                "USING partition_contiguity WHERE [id] AND b[i].x >= b[i-1].x WITHIN 8 "
                "RETURN a.ts, a.id, b[1].ts AS b_first, b[b.len].ts AS b_last, count(b[].ts) AS n, c.ts, d.ts, "
                "e.ts, f.ts, i.ts, j.ts")
LINKS_QUERY = ("PATTERN SEQ(A a, NEXT B{1,3} b[] UNTIL (b.x > 2), C c) WHERE [id] WITHIN 6 "
               "RETURN a.ts, a.id, b[1].ts AS b_first, count(b[].ts) AS n, c.ts")
# T*, T? and a contiguity strategy (a run ends when the next event comes and does not extend it: sparse events)
OPTIONAL_QUERY = ("PATTERN SEQ(A a, B* b[], C? c, B d) USING {} WITHIN 6 "
                  "RETURN a.ts, a.id, count(b[].ts) AS n, c.ts, d.ts")
NEGATION_QUERY = "PATTERN SEQ(A a, !(C n), B b, C c) WHERE [id] AND n.x = a.x WITHIN 6 RETURN a.ts, a.id, b.ts, c.ts"
# a negated event and a negated SEQ of events, each of which kills some runs of the streaming test's events
NEGATION_STREAM_QUERY = ("PATTERN SEQ(A a, !(C n), B b, !(SEQ(A p, A q)), C c) WHERE [id] AND n.x = a.x "
                         "AND q.x >= p.x WITHIN 12 RETURN a.ts, a.id, b.ts, c.ts")
# an OR step with a SEQ alternative (a partial match may end inside it: timeout_step b) in an OR of SEQs
OR_QUERY = ("PATTERN SEQ(A a, SEQ(B b, A h) OR C c, B d) OR SEQ(C e, A f) WHERE [id] WITHIN 6 "
            "RETURN a.ts, a.id, b.ts, h.ts, c.ts, d.ts, e.ts")
# a repeated group with a negated event right before and right after it (each kills runs of the batch test's
# events; with {1} the way past the group is a run's only one after its C)
# the streaming test's group query: a negated event before a repeated group, a negated SEQ after it (with {1,2}
# the way past the group is a run's only one after its second iteration), a predicate over its variables and a
# stop condition on it
GROUP_STREAM_QUERY = ("PATTERN SEQ(A a, !(C n), (SEQ(B b, C c)){1,2} UNTIL (b.x > 2), !(SEQ(A p, A q)), B d) "
                      "WHERE [id] AND n.x = a.x AND q.x >= p.x AND c.x >= b.x WITHIN 12 "
                      "RETURN a.ts, a.id, b[1].ts AS b_first, count(b[].ts) AS nb, c[c.len].ts AS c_last, d.ts")
GROUP_QUERY = ("PATTERN SEQ(A a, !(C m), (SEQ(B b, C c)){1}, !(A n), B d) WHERE [id] WITHIN 8 "
               "RETURN a.ts, a.id, b[1].ts AS b_first, count(b[].ts) AS n, c[c.len].ts AS c_last, d.ts")
SCHEMA = "type STRING, ts BIGINT, id BIGINT, x BIGINT"


def abc_events(n: int, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    return [{"type": rnd.choice("AABC"), "ts": i // 2, "id": rnd.randrange(2), "x": rnd.randrange(4)}
            for i in range(n)]


def sparse_events(n: int, seed: int) -> list[dict]:
    """``abc_events`` with distinct ts 1, 2 or 7 apart: under a contiguity strategy a run then often outlives
    its window."""
    gaps = random.Random(seed)
    return [{**e, "ts": ts} for e, ts in zip(abc_events(n, seed), itertools.accumulate(
        gaps.choice([1, 1, 2, 7]) for _ in range(n)), strict=True)]


@pytest.mark.spark
def test_batch_timeouts_dataframe_equals_the_oracle(spark):
    from sparkcep.spark.results import epoch_ms_rows

    ties = abc_events(30, seed=1)
    # skip_till_next_match takes the first of equal-ts events: distinct ts there (Spark's order of ties in a
    # group is not the input's)
    distinct = [{**e, "ts": k} for k, e in enumerate(ties)]
    kleene = abc_events(40, seed=3)  # ~20 events a key
    links = [{**e, "ts": k} for k, e in enumerate(abc_events(40, seed=4))]  # which event is right after: no ties
    for text, events in ((QUERY, ties), (QUERY.replace(" WHERE ", " USING skip_till_next_match WHERE "), distinct),
                         (KLEENE_QUERY, kleene), (LINKS_QUERY, links),
                         (OPTIONAL_QUERY.format("strict_contiguity"), sparse_events(45, seed=5)),
                         (NEGATION_QUERY, links), (OR_QUERY, links), (NEGATION_STREAM_QUERY, links),
                         (GROUP_QUERY, links)):
        q = sparkcep.compile(text)
        result = q.apply(spark.createDataFrame(events, SCHEMA))
        expected = timed_out_rows(q.query, events, ["type", "ts", "id", "x"])
        assert len(expected) > 3 and (text != KLEENE_QUERY or any(r["n"] > 1 for r in expected))
        assert len({r["timeout_step"] for r in expected}) > 1 or text == QUERY, text
        assert text != OR_QUERY or {"b", "h"} <= {r["timeout_step"] for r in expected}
        if text == NEGATION_STREAM_QUERY:  # the negated SEQ kills runs here: without it the rows differ
            weaker = sparkcep.compile(text.replace("!(SEQ(A p, A q)), ", "").replace(" AND q.x >= p.x", ""))
            assert canonical(timed_out_rows(weaker.query, events, ["type", "ts", "id", "x"])) != canonical(expected)
        for weaker in (text.replace("!(C m), ", ""), text.replace("!(A n), ", "")) if text == GROUP_QUERY else ():
            weaker_rows = timed_out_rows(sparkcep.compile(weaker).query, events, ["type", "ts", "id", "x"])
            assert canonical(weaker_rows) != canonical(expected), weaker
        assert result.timeouts.columns == [*result.columns, "timeout_step"]
        assert canonical(epoch_ms_rows(result.timeouts)) == canonical(expected), text


@pytest.mark.spark
def test_batch_timeouts_are_built_when_first_read(spark, monkeypatch):
    """Building a DataFrame costs the driver an analysis of its plan: a batch result builds its timed-out partial
    matches' DataFrame only when ``result.timeouts`` is read, once."""
    from pyspark.sql import DataFrame

    from sparkcep.spark import adapters

    built = []
    real = adapters.batch_matches
    monkeypatch.setattr(adapters, "batch_matches", lambda *a, **k: built.append(a[1]) or real(*a, **k))
    result = sparkcep.compile(QUERY).apply(spark.createDataFrame(abc_events(10, seed=1), SCHEMA))
    assert len(built) == 1 and isinstance(result, DataFrame)
    timeouts_df = result.timeouts
    assert isinstance(built[1], TimeoutSpec) and result.timeouts is timeouts_df and len(built) == 2
    assert timeouts_df.columns == [*result.columns, "timeout_step"]
    assert result.select("*").columns == result.columns


@pytest.mark.spark
@pytest.mark.slow
def test_stream_timeouts_from_files_equal_the_oracle(spark, tmp_path):
    """T* (with UNTIL) and T? under partition_contiguity, in an OR of two SEQs (one with an OR step whose
    alternative is a SEQ), and, in a second streaming query
    run at the same time (Spark runs one state operator of this kind per query, and under contiguity a gap
    holds no event to negate), a repeated group with a negated event before it and a negated SEQ of events after
    it; three files, one per micro-batch; a last event far ahead moves the watermark past every window.  The
    group query's timeouts from the stream equal those of a batch run over the same events and the oracle's."""
    from sparkcep.spark.io import read_events
    from sparkcep.spark.results import epoch_ms_rows

    # ~22 events a key; distinct ts: which event is right after another must not hang on Spark's order of ties
    events = sparse_events(45, seed=11)
    # a key whose partial match ends inside the SEQ alternative after its second event (timeout_step i), then a
    # match through it
    events += [{"type": t, "ts": ts, "id": 2, "x": 0} for t, ts in zip("CABCABC", (200, 201, 202, 300, 301, 302, 303),
                                                                        strict=True)]
    # a key where the group iterates twice: A@500's run with two iterations is killed by A@505 A@506 (the negated
    # SEQ: its only way on is past the group), A@600's times out inside its second iteration; A@700's cannot
    # iterate twice (c.x >= b.x for every b and c: B@703's x 2 above C@702's x 1)
    events += [{"type": t, "ts": ts, "id": 3, "x": x} for t, ts, x in (
        ("A", 500, 1), ("B", 501, 0), ("C", 502, 0), ("B", 503, 0), ("C", 504, 0), ("A", 505, 0), ("A", 506, 1),
        ("A", 600, 0), ("B", 601, 0), ("C", 602, 0), ("B", 603, 0),
        ("A", 700, 0), ("B", 701, 0), ("C", 702, 1), ("B", 703, 2), ("C", 704, 3))]
    q = sparkcep.compile(STREAM_QUERY)
    expected = timed_out_rows(q.query, events, ["type", "ts", "id", "x"])
    assert len(expected) > 5 and any(r["n"] > 1 for r in expected)
    assert {r["timeout_step"] for r in expected} == {"a", "b", "c", "e", "f", "i", "j"}  # f, i: in the alternative
    group = sparkcep.compile(GROUP_STREAM_QUERY)
    grouped = timed_out_rows(group.query, events, ["type", "ts", "id", "x"])
    # inside and after an iteration, and a second one
    assert {"b", "c"} <= {r["timeout_step"] for r in grouped} and any(r["nb"] > 1 for r in grouped)
    assert [r["nb"] for r in grouped if r["a_ts"] == 700] == [1, 1]  # (without c.x >= b.x: 2, 1, 1)
    # each negation kills runs here, and so do the group's predicate and stop: without one of them the rows differ
    for weaker in (GROUP_STREAM_QUERY.replace("!(C n), ", "").replace("n.x = a.x AND ", ""),
                   GROUP_STREAM_QUERY.replace("!(SEQ(A p, A q)), ", "").replace(" AND q.x >= p.x", ""),
                   GROUP_STREAM_QUERY.replace(" AND c.x >= b.x", ""),
                   GROUP_STREAM_QUERY.replace(" UNTIL (b.x > 2)", "")):
        assert canonical(timed_out_rows(sparkcep.compile(weaker).query, events, ["type", "ts", "id", "x"])) != \
            canonical(grouped)
    batch = group.apply(spark.createDataFrame(events, SCHEMA)).timeouts
    assert canonical(epoch_ms_rows(batch)) == canonical(grouped)
    source = tmp_path / "in"
    source.mkdir()
    # three files; the last one starts with A@505 A@506, which kill a run of the file before
    chunks = [events[:30], events[30:57], events[57:]]
    assert chunks[2][0]["ts"] == 505
    chunks[-1] = [*chunks[-1], {"type": "B", "ts": 100_000, "id": 0, "x": 0}]
    for k, chunk in enumerate(chunks):
        path = source / f"e{k}.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in chunk))
        os.utime(path, (1_000_000 + k, 1_000_000 + k))  # the file source takes files in mtime order
    runs = []
    for name, compiled in (("or", q), ("group", group)):
        stream = read_events(spark, str(source), "json", "ts", stream=True, files_per_trigger=1, schema=SCHEMA)
        timed_out = compiled.apply(stream).timeouts
        runs.append((name, timed_out, timed_out.writeStream.format("json").option("path", str(tmp_path / name))
                     .option("checkpointLocation", str(tmp_path / f"ck_{name}")).trigger(availableNow=True).start()))
    for name, timed_out, run_ in runs:
        run_.awaitTermination()
        streamed = epoch_ms_rows(spark.read.schema(timed_out.schema).json(str(tmp_path / name)))
        assert canonical(streamed) == canonical(expected if name == "or" else grouped), name


@pytest.mark.parametrize(("args", "message"), [
    (["-e", "PATTERN SEQ(A a, B b) WITHIN 5", "--timeouts"], "give --output"),
    (["-e", "PATTERN SEQ(!(C c), A a, B b) WITHIN 5", "--timeouts", "--output", "o"], "not a negation at the start"),
    (["-e", "PATTERN SEQ(A a, B b) WITHIN 5 AFTER MATCH SKIP PAST LAST ROW", "--timeouts", "--output", "o"],
     "runs as MATCH_RECOGNIZE: SQL:2016 defines no partial-match output"),
    (["-e", "RETURN COUNT(*) PATTERN SEQ(A a, B b) WITHIN 5", "--timeouts", "--output", "o"],
     "a trend-aggregate query has no partial matches"),
    (["-e", "q1: PATTERN SEQ(A a, B b) WITHIN 5; q2: PATTERN SEQ(A a, C c) WITHIN 5", "--timeouts", "--output", "o"],
     "choose it with --query NAME"),
])
def test_cli_timeouts_refused_before_spark_starts(args, message, capsys, tmp_path):
    from sparkcep.cli import main

    events = tmp_path / "e.jsonl"
    events.write_text('{"type": "A", "ts": 1}\n')
    assert main(["run", *args, "--input", str(events)]) == 2
    err = capsys.readouterr().err
    assert message in err and "starting Spark" not in err and "Traceback" not in err


@pytest.mark.parametrize(("text", "message"), [
    ("PATTERN SEQ(!(C c), A a, B b) WITHIN 5", "not a negation at the start"),
    ("RETURN COUNT(*) PATTERN SEQ(A a, B b) WITHIN 5", "a trend-aggregate query has no partial matches"),
    ("q1: PATTERN SEQ(A a, B b) WITHIN 5; q2: PATTERN SEQ(A a, C c) WITHIN 5", "choose it with --query NAME"),
])
def test_generated_job_refuses_timeouts_as_run_does(text, message):
    """A generated job's ``--timeouts``, where they are not defined: ``run --timeouts``' refusal, before Spark."""
    from sparkcep.api import compile_shared_workload

    source = sparkcep.compile(text).job_source() if ";" not in text else compile_shared_workload(text).job_source()
    job: dict = {"__name__": "job"}
    exec(compile(source, "job.py", "exec"), job)  # noqa: S102 - the generated job, run as a module would be
    with pytest.raises(sparkcep.CEPError, match=message):
        job["main"](["--input", "in", "--output", "out", "--timeouts"])


@pytest.mark.spark
def test_cli_run_writes_timeouts_beside_the_output(spark, tmp_path, capsys):
    from sparkcep.cli import main

    events = abc_events(30, seed=3)
    (tmp_path / "e.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    out = tmp_path / "out"
    assert main(["run", "-e", QUERY, "--input", str(tmp_path / "e.jsonl"), "--output", str(out), "--timeouts"]) == 0
    expected = timed_out_rows(sparkcep.compile(QUERY).query, events, ["type", "ts", "id", "x"])
    assert f"{len(expected)} timed-out partial matches; see {out}/_timeouts" in capsys.readouterr().err
    got = [json.loads(line) for f in sorted((out / "_timeouts").glob("*.json")) for line in f.read_text().splitlines()]
    assert canonical([{k: r.get(k) for k in expected[0]} for r in got]) == canonical(expected)


@pytest.mark.parametrize(("text", "shedding"), [
    ("PATTERN SEQ(A a, B b) WITHIN 5", False),
    ("PATTERN SEQ(A a, B b) WITHIN 5", True),
    ("q1: PATTERN SEQ(A a, B b) WITHIN 5; q2: PATTERN SEQ(A a, C c) WITHIN 5", True),
])
def test_a_generated_jobs_admission_keeps_staged_files_for_its_timeouts_query(text, shedding, monkeypatch):
    """A generated job's admission names the queries the run starts (``stream_queries``: the results' and, with
    ``--timeouts``, ``_timeouts``), as ``run`` does: a staged input file stays until both committed it, even when
    ``--timeouts`` is added at a restart (its query has no checkpoint yet; :class:`StagedLinks`).  Every
    admission of the job (``live.admit``, with and without shedding, a workload's too) passes them;
    ``stream_queries`` names the checkpoint ``start_timeouts`` writes to.  With shedding, the stage's controller
    follows the results' query only (``live.started(query, shedding)``: the ``--timeouts`` query beside it reports
    the same stage's metrics, which counted each drop twice), as ``run`` does."""
    import ast

    from sparkcep.api import compile_shared_workload
    from sparkcep.spark import sinks

    options = {"shedding_latency": 2.0} if shedding else {}
    compiled = compile_shared_workload(text, **options) if ";" in text else sparkcep.compile(text, **options)
    source = compiled.job_source()
    calls = {name: [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
                    and ast.unparse(node.func) == name] for name in ("live.admit", "live.started", "follow_input")}
    assert calls["live.admit"] and all(ast.unparse(next(k.value for k in c.keywords if k.arg == "queries"))
                                       == "stream_queries(args.timeouts)" for c in calls["live.admit"])
    assert not calls["follow_input"]  # every admission is sparkcep.live's
    if shedding:
        assert [ast.unparse(c) for c in calls["live.started"]] == ["live.started(query, shedding)"]
    assert sinks.stream_queries(False) == ("",)
    assert sinks.stream_queries(True) == ("", sinks.TIMEOUTS_CHECKPOINT)

    written = {}

    class Writer:
        def format(self, _fmt):
            return self

        def option(self, key, value):
            written[key] = value
            return self

        def start(self):
            return "query"

    monkeypatch.setattr(sinks, "timeouts_lines", lambda *_a: type("T", (), {"writeStream": Writer()})())
    assert sinks.start_timeouts(None, "out", "ck/") == "query"
    assert written["checkpointLocation"] == "ck/" + sinks.stream_queries(True)[1]
