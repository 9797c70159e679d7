"""The face compiles once: ``CompiledQuery.plan(schema)`` (what ``apply(df)`` runs) optimizes once per ts kind and
binds each schema to that plan, with the same plan as planning with the schema known from the start."""

from __future__ import annotations

import pytest
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType, TimestampType

import sparkcep
import sparkcep.api
from sparkcep.api import _collapsed
from sparkcep.compiler.optimizer import optimize
from sparkcep.compiler.plan.builder import build_plan

QUERIES = [
    ("PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 10", {}),
    ("PATTERN SEQ(A a, !C c, B b) WHERE [id] WITHIN 10", {}),
    ("PATTERN SEQ(A a, B+ b[], C c) WHERE [id] AND b[i].x > b[i-1].x WITHIN 10", {}),
    ("PATTERN SEQ(A a, B+ b[], C c) WHERE [id] WITHIN 10", {"collapsed": True}),
    ("PATTERN SEQ(A a, B+ b[], C c) WHERE [id] WITHIN 10 RETURN a.id, count(b[].x)", {"collapsed": True}),
    ("PATTERN SEQ(A a, B b) WHERE a.x = b.x WITHIN 10 RETURN a.id AS id, b.ts AS t", {}),
    ("PATTERN SEQ(A a, (SEQ(B v, C c) OR D w)?, E e) WHERE [id] WITHIN 10", {}),
    ("RETURN COUNT(*), SUM(b.x) PATTERN SEQ(A a, B+ b) WHERE [id] WITHIN 10 SLIDE 5", {}),
]


def schema(ts_type, *names: str) -> StructType:
    return StructType([StructField("type", StringType()), StructField("ts", ts_type)]
                      + [StructField(n, DoubleType() if n == "x" else LongType()) for n in names])


SCHEMAS = [schema(LongType(), "id", "x"), schema(LongType(), "x", "id", "y"), schema(LongType(), "id", "x", "z")]


def planned_with_schema(q, s):
    """The plan as planning with the schema known from the start makes it (analysis, build, optimizer)."""
    plan = optimize(build_plan(q.resolved(s), type_col=q.type_col, ts_col=q.ts_col, attributes=tuple(s.fieldNames())))
    return _collapsed(plan) if q.collapsed else plan


@pytest.mark.parametrize(("text", "options"), QUERIES)
def test_a_bound_plan_is_the_plan_made_with_the_schema(text, options):
    q = sparkcep.compile(text, **options)
    for s in SCHEMAS:
        assert q.plan(s) == planned_with_schema(q, s), s


def test_timestamp_schemas_bind_to_the_timestamp_plan():
    q = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 10 seconds")
    s = schema(TimestampType(), "id", "x")
    assert q.plan(s) == planned_with_schema(q, s)
    assert "ts=timestamp" in q.explain(s)
    with pytest.raises(sparkcep.CEPError):  # a unit on numeric ts without ts_unit: refused as before
        q.plan(SCHEMAS[0])


@pytest.mark.parametrize(("text", "options"), QUERIES)
def test_the_optimizer_runs_once_per_ts_kind(text, options, monkeypatch):
    calls = []
    real = sparkcep.api.optimize

    def counted(plan):
        calls.append(plan)
        return real(plan)

    monkeypatch.setattr(sparkcep.api, "optimize", counted)
    q = sparkcep.compile(text, **options)
    assert len(calls) == 1  # check is the contract: compile plans once, for the declared ts kind
    kinds = {q._ts_kind(s) for s in SCHEMAS} | {q._ts_kind(None)}
    for s in SCHEMAS + SCHEMAS:  # what apply(df) asks for each DataFrame
        q.plan(s)
        q.spec(s)
    assert len(calls) == len(kinds)  # once per ts kind, not per DataFrame
    q.plan()
    q.plan()
    assert len(calls) == len(kinds)
