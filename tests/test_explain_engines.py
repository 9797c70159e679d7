"""``explain`` says what runs a match query (issue 4): the engine per alternative, as ``match_engine.advance``
dispatches, and negated variables inside a repeated group are single events (``!z``, not ``!z+``). No JVM."""

from __future__ import annotations

import math

import pytest

import sparkcep
from sparkcep.api import CompiledQuery
from sparkcep.compiler.plan.builder import components_of
from sparkcep.grammar import parse_query
from sparkcep.ir.ast import conjuncts
from sparkcep.ir.errors import CEPError
from sparkcep.ir.printer import format_pattern_as_written as _pattern
from sparkcep.runtime_udfs.match import engine as match_engine
from sparkcep.runtime_udfs.match import negation as match_negation
from sparkcep.runtime_udfs.match.compile import _flat_pattern
from sparkcep.runtime_udfs.match.negation import _outermost_negations
from tests.test_match_semantics import STRATEGIES, compiled, with_seq

QUERIES = [
    "PATTERN SEQ(A a, B+ b[], C c) WITHIN 10",
    "PATTERN SEQ(A a, (SEQ(B b, C c))+, D d) WITHIN 10",
    "PATTERN SEQ(A a, (SEQ(B b, C c))*, D d) WITHIN 10",
    "PATTERN SEQ(A a, (SEQ(B b, C c))+, D d) OR SEQ(C f, D g) WITHIN 10",
    "PATTERN SEQ(A a, (SEQ(B b, !(E z), C c))+, D d) WITHIN 10",
    "PATTERN SEQ(A a, B? b, C c) OR SEQ(D d, E e) WITHIN 10",
]
#: negations that run the general existence search (tests/test_match_negation_general.py has their semantics)
GENERAL_TEXTS = [
    "PATTERN SEQ(A a, !((SEQ(B b, C c))+), D d) WITHIN 6",
    "PATTERN SEQ(A a, !(SEQ(B b, !(SEQ(C c, !(E e), D d)), F f)), A g) WITHIN 7",
    "PATTERN SEQ(A a, NOT B+ b[], C c) WHERE sum(b[].x) > 2 WITHIN 7",
    "PATTERN SEQ(A a, NOT B+ b[], C c) WHERE avg(b[].x) > 2 WITHIN 7",
    "PATTERN SEQ(!((SEQ(B b, C c))+), A a, !(E e), D d, NOT F+ f[]) WHERE f[1].x < f[f.len].x WITHIN 6",
    "PATTERN SEQ(A a, (SEQ(B b, !(E+ z[]), C c))+) WHERE sum(z[].x) > 1 WITHIN 8",
    "PATTERN SEQ(A a, !((SEQ(B b, C c))+), D d) OR SEQ(E e, !(SEQ(B f, !(SEQ(C g, !(D h), A i)), F j))) WITHIN 6",
]
#: negations on a fast path
FAST_TEXTS = [
    "PATTERN SEQ(A a, !(B b), C c) WITHIN 5",
    "PATTERN SEQ(A a, !(SEQ(B b, !(SEQ(C y, D z)), E e)), A f) WITHIN 7",
    "PATTERN SEQ(A a, !(B+ b[]), C c) WHERE b[i].x > a.x WITHIN 6",
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
    # sparkcep.compile refuses the query itself (check is the contract); explain of the plan still says why
    text = "PATTERN SEQ(A a, B+ b[], C+ c[]) WITHIN 10"
    with pytest.raises(CEPError, match="collapsed output needs exactly one Kleene variable"):
        sparkcep.compile(text, collapsed=True)
    lines = CompiledQuery(parse_query(text), text, collapsed=True).explain().splitlines()
    seq = lines[next(i for i, line in enumerate(lines) if " := Sequence[" in line):]
    assert seq[0].endswith("engine=none]")
    assert seq[2].startswith("        refused by the match engine: collapsed output needs exactly one Kleene variable")


def test_negated_variable_inside_a_group_is_one_event():
    text = "PATTERN SEQ(A a, (SEQ(B b, !(E z), C c))+, NOT F+ f[], D d) WITHIN 10"
    comps = {c.var: c for c in components_of(sparkcep.compile(text).resolved())}
    assert (comps["z"].kleene, comps["z"].negated) == (None, True)
    assert (comps["f"].kleene, comps["f"].negated) == ("+", True)
    assert (comps["b"].kleene, comps["c"].kleene) == ("+", "+")
    filt = sparkcep.compile(text).explain()
    assert "c2 !z: type = 'E'" in filt and "c4 !f+: type = 'F'" in filt and "c1 b+: type = 'B'" in filt


GENERAL = " general search over the gap (exponential in the worst case)"


def _selected(spec) -> list[str]:
    """The explain lines expected for the negations :func:`match_negation.general_negations` selects (outermost
    negations in pattern order, with the conjuncts of WHERE), independently of the compiled plan."""
    pattern = spec.pattern if spec.pattern is not None else _flat_pattern(spec.components)
    kleene_vars = frozenset(c.var for c in spec.components if c.kleene in ("+", "*"))
    general, _ = match_negation.general_negations(pattern, [p for e in spec.predicates for p in conjuncts(e)],
                                                  kleene_vars)
    return [f"        negation {_pattern(n)}:{GENERAL}" for n in _outermost_negations(pattern) if n in general]


@pytest.mark.parametrize("text", [*GENERAL_TEXTS, *FAST_TEXTS, *QUERIES])
def test_explain_marks_exactly_the_general_negations(text):
    _, spec = compiled(text)
    marked = [line for line in sequence_line(text) if line.endswith(GENERAL)]
    assert marked == _selected(spec), text
    assert [f"        negation {_pattern(n)}:{GENERAL}" for n in match_engine.general_negations(spec)] == marked


def test_general_search_lines_name_the_negated_sub_patterns():
    """Stated answers, so the comparison above cannot pass on two empty lists."""
    seq = sequence_line("PATTERN SEQ(A a, NOT (SEQ(B b, C c))+, D d, NOT B+ e[]) WHERE sum(e[].x) > 2 WITHIN 10")
    assert [line.strip() for line in seq if line.endswith(GENERAL)] == [
        f"negation NOT (SEQ(B b, C c))+:{GENERAL}", f"negation NOT B+ e[]:{GENERAL}"]
    for text in FAST_TEXTS:
        assert not any(line.endswith(GENERAL) for line in sequence_line(text)), text
    for text in GENERAL_TEXTS:
        assert any(line.endswith(GENERAL) for line in sequence_line(text)), text
