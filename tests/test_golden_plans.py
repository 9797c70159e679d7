"""Golden plans: the explain text, Spark SQL filter and generated job of every LANGUAGE.md §8 query.

A change to a golden file is reviewed like code: ``pytest tests/test_golden_plans.py --update-golden``
(or ``make golden``) rewrites them from the current compiler.
"""

from __future__ import annotations

import ast as pyast
from pathlib import Path

import pytest

import sparkcep
from sparkcep.ir.printer import format_query

ROOT = Path(__file__).resolve().parent.parent / "golden_plans"
WORKLOAD = (ROOT / "queries.cep").read_text()
QUERIES = sparkcep.compile_workload(WORKLOAD)


def artifacts(q: sparkcep.CompiledQuery) -> dict[str, str]:
    return {
        "query.cep": format_query(q.query) + "\n",
        "explain.txt": q.explain() + "\n",
        "filter.sql": q.sql() + "\n",
        "job.py": q.job_source(),
    }


def test_every_paper_query_has_a_golden_case():
    assert len(QUERIES) == 14 and all(q.name for q in QUERIES)
    stale = {p.name for p in ROOT.iterdir() if p.is_dir()} - {q.name for q in QUERIES} - set(WORKLOADS) - set(RECOGNIZE)
    assert not stale, f"golden cases without a query: {stale}"


@pytest.mark.parametrize("q", QUERIES, ids=[q.name for q in QUERIES])
def test_golden_plan(q, update_golden):
    case = ROOT / q.name
    for filename, text in artifacts(q).items():
        path = case / filename
        if update_golden:
            case.mkdir(exist_ok=True)
            path.write_text(text)
            continue
        assert path.exists(), f"{path} missing: run `make golden`"
        assert path.read_text() == text, f"{path} differs from the compiler's output: review, then `make golden`"


#: Multi-query workloads (Sharon sharing): golden_plans/<case>/ holds the workload, its sharing explain and DOT,
#: and the generated workload job (``sparkcep compile WORKLOAD.cep -o job.py``).
WORKLOADS = {"workload_sharon_traffic": "sharon_traffic.cep", "workload_sharon_ecommerce": "sharon_ecommerce.cep"}


@pytest.mark.parametrize("case", sorted(WORKLOADS))
def test_golden_workload_plan(case, update_golden):
    text = (Path(__file__).parent / "fixtures" / "workloads" / WORKLOADS[case]).read_text()
    w = sparkcep.compile_shared_workload(text, budget=None)
    files = {"workload.cep": text, "explain.txt": w.explain() + "\n", "sharon.dot": w.explain(format="dot") + "\n",
             "job.py": w.job_source()}
    for filename, content in files.items():
        path = ROOT / case / filename
        if update_golden:
            path.parent.mkdir(exist_ok=True)
            path.write_text(content)
            continue
        assert path.exists(), f"{path} missing: run `make golden`"
        assert path.read_text() == content, f"{path} differs from the compiler's output: review, then `make golden`"


#: MATCH_RECOGNIZE statements: golden_plans/<case>/query.sql is the statement; its explain text and generated job
#: (``sparkcep explain/compile QUERY.sql``) are regenerated and diffed.
RECOGNIZE = sorted(p.parent.name for p in ROOT.glob("recognize_*/query.sql"))


def recognize_artifacts(case: str) -> dict[str, str]:
    from sparkcep.cli_sql import explain_all, job_of, statements

    qs = statements((ROOT / case / "query.sql").read_text())  # one statement, or several (a workload)
    return {"explain.txt": explain_all(qs) + "\n", "job.py": job_of(qs)}


@pytest.mark.parametrize("case", RECOGNIZE)
def test_golden_recognize_plan(case, update_golden):
    assert len(RECOGNIZE) >= 4
    for filename, content in recognize_artifacts(case).items():
        path = ROOT / case / filename
        if update_golden:
            path.write_text(content)
            continue
        assert path.exists(), f"{path} missing: run `make golden`"
        assert path.read_text() == content, f"{path} differs from the compiler's output: review, then `make golden`"
        if filename == "job.py":
            pyast.parse(content)


@pytest.mark.parametrize("q", QUERIES, ids=[q.name for q in QUERIES])
def test_generated_job_is_valid_python(q):
    pyast.parse(q.job_source())
