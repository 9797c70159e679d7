"""Each optimizer rule on its own: a fixture file per rule with (query, plan before, plan after) cases.

The plan *before* is the naive plan with every earlier rule of ``RULES`` applied, so each rule is tested on
the input it really gets.  ``pytest tests/test_optimizer.py --update-golden`` rewrites the fixtures from
the current rules (review the diff like code).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import sparkcep
from sparkcep.compiler.codegen.explain import explain_plan
from sparkcep.compiler.optimizer import RULES
from sparkcep.compiler.plan.builder import build_plan
from sparkcep.runtime_udfs.describe import describe

FIXTURES = Path(__file__).parent / "fixtures" / "optimizer"

CASES = {
    "push_local_predicates": [
        "PATTERN SEQ(A a, B b) WHERE a.x > 5 AND a.y < b.y AND b.name = 'n' WITHIN 10",
        "PATTERN SEQ(A a, B+ b[], C c) WHERE b[i].v > 3 AND b[i].v >= b[i-1].v WITHIN 10",
        "PATTERN SEQ(A x, !(C z), D y) WHERE x.s = z.s AND z.k = 1 WITHIN 10",
        "PATTERN SEQ(ANY(A, B) a, C c) WHERE a.x > 1 AND 1 < 2 WITHIN 10",
    ],
    "equalities_to_equivalence": [
        "PATTERN SEQ(JobStart a, Mapper+ b[], JobEnd c) WHERE a.job_id = b[i].job_id AND a.job_id = c.job_id "
        "WITHIN 1 day RETURN avg(b[].period)",
        "PATTERN SEQ(A a, !(C z), B b) WHERE a.id = b.id WITHIN 10",
        "PATTERN SEQ(A a, B b) WHERE a.x = b.y WITHIN 10",
        "PATTERN SEQ(A a, C? c, B b) WHERE a.id = b.id AND c.id = a.id WITHIN 10",
        "PATTERN SEQ(A? a, B b) WHERE a.id = b.id WITHIN 10",
        "PATTERN SEQ(A a, !(C z)) WHERE z.id = a.id WITHIN 10",
    ],
    "partition_by_equivalence": [
        "PATTERN SEQ(A a, B b) WHERE [id] AND [zone = 'north'] AND a.x < b.x WITHIN 10",
        "RETURN segment, COUNT(*) PATTERN SEQ(NOT Accident A, Position P+) WHERE [P.vehicle, segment] "
        "GROUP BY segment WITHIN 5 minutes SLIDE 1 minute",
    ],
    "project_event_expressions": [
        "PATTERN SEQ(A a, B b) WHERE lower(a.name) = lower(b.name) AND abs(a.x - b.x) < 5 AND a.k IN (1, 2) "
        "WITHIN 10 RETURN upper(substring(b.name, 1, 2)) AS p, coalesce(a.y, b.y) AS y",
        "PATTERN SEQ(A a, B+ b[]) WHERE CAST(b[i].s AS DOUBLE) > length(a.name) AND upper(b[1].name) = a.name "
        "WITHIN 10",
        "PATTERN SEQ(ANY(A, C) a, B b) WHERE lower(a.name) = b.name WITHIN 10",
    ],
    "push_window": [
        "PATTERN SEQ(A a, B b) WITHIN 10 seconds",
    ],
    "prune_columns": [
        "PATTERN SEQ(A a, B b) WHERE [id] AND a.x > 1 WITHIN 10 RETURN b.y AS y",
        "PATTERN SEQ(A a, B b) WHERE [id] AND a.x > 1 WITHIN 10",
        "RETURN mapper, SUM(M.cpu) PATTERN SEQ(Start S, Measurement M+, End E) WHERE [job, mapper] "
        "AND M.load < NEXT(M).load GROUP-BY mapper WITHIN 1 minute SLIDE 30 seconds",
    ],
}


def render(rule) -> str:
    index = RULES.index(rule)
    blocks = []
    for text in CASES[rule.__name__]:
        plan = build_plan(sparkcep.compile(text).resolved())
        for earlier in RULES[:index]:
            plan = earlier(plan)
        before, after = explain_plan(plan, describe=describe), explain_plan(rule(plan), describe=describe)
        blocks.append(f"### {text}\n--- before\n{before}\n--- after\n{after}\n")
    return "\n".join(blocks)


def test_every_rule_has_cases():
    assert [r.__name__ for r in RULES] == list(CASES)


@pytest.mark.parametrize("rule", RULES, ids=[r.__name__ for r in RULES])
def test_rule_fixture(rule, update_golden):
    path = FIXTURES / f"{rule.__name__}.txt"
    text = render(rule)
    if update_golden:
        path.write_text(text)
    assert path.read_text() == text, f"{path}: the rule's output changed; review, then --update-golden"


@pytest.mark.parametrize("rule", RULES, ids=[r.__name__ for r in RULES])
def test_rule_is_idempotent(rule):
    for text in CASES[rule.__name__]:
        plan = build_plan(sparkcep.compile(text).resolved())
        for r in RULES[:RULES.index(rule) + 1]:
            plan = r(plan)
        assert rule(plan) == plan
