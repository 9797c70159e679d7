"""One fixture file per Sharon sharing rule (tests/fixtures/sharing/<rule>.txt): for each workload case, the
workload plan right before the rule and right after it, printed compactly.  ``pytest
tests/test_sharing_rules.py --update-golden`` rewrites the fixtures from the current rules (review the diff
like code)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkcep.compiler.optimizer.sharing import RULES, SharingQuery, WorkloadPlan

FIXTURES = Path(__file__).parent / "fixtures" / "sharing"

#: name -> (queries as "name: T1 T2 ...", rates per type (events per window; others 1))
CASES = {
    "sharon_fig1": (["q1: OakSt MainSt StateSt", "q2: OakSt MainSt WestSt", "q3: ParkAve OakSt MainSt",
                     "q4: ParkAve OakSt MainSt WestSt", "q5: MainSt StateSt", "q6: ElmSt ParkAve",
                     "q7: ElmSt ParkAve"], {}),
    "sharon_fig1_measured_rates": (["q1: OakSt MainSt StateSt", "q2: OakSt MainSt WestSt",
                                    "q3: ParkAve OakSt MainSt", "q4: ParkAve OakSt MainSt WestSt",
                                    "q5: MainSt StateSt", "q6: ElmSt ParkAve", "q7: ElmSt ParkAve"],
                                   {"OakSt": 2, "MainSt": 3, "ParkAve": 0.5, "ElmSt": 0.5}),
    "ecommerce": (["q8: Laptop Case Adapter", "q9: Laptop Case KeyboardProtector",
                   "q10: Laptop Case Adapter KeyboardProtector", "q11: Laptop Case iPhone ScreenProtector"], {}),
    "repeated_types": (["a: A B A B", "b: A B", "c: B A B C"], {}),
    "two_contexts": (["a: X Y Z", "b: X Y Z", "c@other: X Y Z", "d@other: X Y W"], {}),
}


def workload(case: str) -> WorkloadPlan:
    lines, rates = CASES[case]
    queries = []
    for line in lines:
        name, types = line.split(":")
        name, _, key = name.partition("@")
        queries.append(SharingQuery(name, tuple(types.split()), key=(key or "id",), window=10, slide=5))
    return WorkloadPlan(tuple(queries), rates=tuple(sorted(rates.items())), budget=None)


def show(plan: WorkloadPlan) -> str:
    lines = []
    for c in plan.candidates:
        origin = f" <- {c.origin}" if c.origin else ""
        lines.append(f"{c.name} ({', '.join(c.pattern)}) {{{', '.join(sorted(c.queries))}}} "
                     f"BValue {c.benefit:g}{origin}")
    lines += [f"conflict {a} -- {b}" for a, b in plan.conflicts]
    lines += [f"pruned {p.name}: {p.reason}" for p in plan.pruned]
    if plan.guaranteed is not None:
        lines.append(f"guaranteed weight {plan.guaranteed:.4f}; conflict-free {', '.join(plan.conflict_free)}")
    if plan.method:
        lines.append(f"chosen {', '.join(plan.chosen)} score {plan.score:g}; greedy {', '.join(plan.greedy)} "
                     f"score {plan.greedy_score:g}")
    return "\n".join(lines) or "(empty)"


def render(rule) -> str:
    k = RULES.index(rule)
    blocks = []
    for case in CASES:
        plan = workload(case)
        for earlier in RULES[:k]:
            plan = earlier(plan)
        blocks.append(f"### {case}\n--- before\n{show(plan)}\n--- after\n{show(rule(plan))}\n")
    return "\n".join(blocks)


@pytest.mark.parametrize("rule", RULES, ids=[r.__name__ for r in RULES])
def test_rule_fixture(rule, update_golden):
    path = FIXTURES / f"{rule.__name__}.txt"
    text = render(rule)
    if update_golden:
        path.write_text(text)
        return
    assert path.exists(), f"{path} missing: run with --update-golden"
    assert path.read_text() == text, f"{path} differs from the rule's output: review, then --update-golden"


@pytest.mark.parametrize("rule", RULES, ids=[r.__name__ for r in RULES])
def test_rules_are_pure(rule):
    for case in CASES:
        plan = workload(case)
        for earlier in RULES[:RULES.index(rule)]:
            plan = earlier(plan)
        assert rule(plan) == rule(plan)  # deterministic, and the input is a frozen value
