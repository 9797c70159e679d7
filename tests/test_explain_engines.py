"""``explain`` says what runs a match query (issue 4): the engine per alternative, as ``match_engine.advance``
dispatches, and negated variables inside a repeated group are single events (``!z``, not ``!z+``). No JVM."""

from __future__ import annotations

import math

import pytest

import sparkcep
from sparkcep.compiler.plan.builder import components_of
from sparkcep.runtime_udfs import match_engine
from tests.test_match_semantics import STRATEGIES, compiled, with_seq

QUERIES = [
    "PATTERN SEQ(A a, B+ b[], C c) WITHIN 10",
    "PATTERN SEQ(A a, (SEQ(B b, C c))+, D d) WITHIN 10",
    "PATTERN SEQ(A a, (SEQ(B b, C c))*, D d) WITHIN 10",
    "PATTERN SEQ(A a, (SEQ(B b, C c))+, D d) OR SEQ(C f, D g) WITHIN 10",
    "PATTERN SEQ(A a, (SEQ(B b, !(E z), C c))+, D d) WITHIN 10",
    "PATTERN SEQ(A a, B? b, C c) OR SEQ(D d, E e) WITHIN 10",
]
EVENTS = [{"type": t, "ts": k, "x": k % 3} for k, t in enumerate("ABCBECDABCDEABCD")]


def with_strategy(text: str, strategy: str) -> str:
    head, rest = text.split(" WITHIN ", 1)
    return f"{head} USING {strategy} WITHIN {rest}"


def sequence_line(text: str) -> list[str]:
    lines = sparkcep.compile(text).explain().splitlines()
    k = next(i for i, line in enumerate(lines) if " := Sequence[" in line)
    return lines[k:]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("text", QUERIES)
def test_explained_engine_is_the_one_that_runs(text, strategy, monkeypatch):
    text = with_strategy(text, strategy)
    _, spec = compiled(text)
    ran: dict[int, set[str]] = {}
    for name, module in match_engine.ENGINES.items():
        original = module.scan

        def spy(plan, alt, st, ready, sink, name=name, original=original):
            ran.setdefault(alt.index, set()).add(name)
            return original(plan, alt, st, ready, sink)

        monkeypatch.setattr(module, "scan", spy)
    state, _ = match_engine.step(spec, match_engine.init_state(), with_seq(spec, EVENTS))
    match_engine.advance(spec, state, math.inf)

    declared = match_engine.engines(spec)
    assert ran == {k: {name} for k, (_, name) in enumerate(declared)}, text
    names = {name for _, name in declared}
    seq = sequence_line(text)
    if len(names) == 1:
        assert seq[0].endswith(f"engine={names.pop()}]"), seq
        assert not any("alternative" in line for line in seq), seq
    else:
        assert seq[0].endswith("engine=per alternative]"), seq
        for k, (variables, name) in enumerate(declared):
            assert f"        alternative {k} ({', '.join(variables)}): {name}" in seq, seq


def test_repeated_group_is_explained_as_nfa_b_runs_and_star_per_alternative():
    assert sequence_line("PATTERN SEQ(A a, (SEQ(B b, C c))+, D d) WITHIN 10")[0].endswith("engine=nfa_b_runs]")
    assert sequence_line("PATTERN SEQ(A a, B+ b[], C c) WITHIN 10")[0].endswith("engine=sase_ssc]")
    seq = sequence_line("PATTERN SEQ(A a, (SEQ(B b, C c))*, D d) WITHIN 10")
    assert seq[0].endswith("engine=per alternative]")
    assert seq[2:4] == ["        alternative 0 (a, b, c, d): nfa_b_runs", "        alternative 1 (a, d): sase_ssc"]
    seq = sequence_line("PATTERN SEQ(A a, B+ b[], C c) USING skip_till_next_match WITHIN 10")
    assert seq[0].endswith("engine=nfa_b_runs]")


def test_refused_pattern_is_explained_with_the_reason():
    lines = sparkcep.compile("PATTERN SEQ(A a, B+ b[]) WITHIN 10", collapsed=True).explain().splitlines()
    seq = lines[next(i for i, line in enumerate(lines) if " := Sequence[" in line):]
    assert seq[0].endswith("engine=none]")
    assert seq[2].startswith("        refused by the match engine: collapsed output supports a Kleene variable")


def test_negated_variable_inside_a_group_is_one_event():
    text = "PATTERN SEQ(A a, (SEQ(B b, !(E z), C c))+, NOT F+ f[], D d) WITHIN 10"
    comps = {c.var: c for c in components_of(sparkcep.compile(text).resolved())}
    assert (comps["z"].kleene, comps["z"].negated) == (None, True)
    assert (comps["f"].kleene, comps["f"].negated) == ("+", True)
    assert (comps["b"].kleene, comps["c"].kleene) == ("+", "+")
    filt = sparkcep.compile(text).explain()
    assert "c2 !z: type = 'E'" in filt and "c4 !f+: type = 'F'" in filt and "c1 b+: type = 'B'" in filt
