"""Every match query of LANGUAGE.md §8 runs on Spark (batch) and returns the oracle's rows."""

from __future__ import annotations

import random
from datetime import datetime, timezone
from decimal import Decimal

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

import sparkcep
from sparkcep.oracles.match import match_rows
from sparkcep.spark.results import canonical, epoch_ms_rows
from tests.test_golden_plans import QUERIES

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ATTRS = ["id", "shelf_id", "amount", "job_id", "task_id", "period", "size", "val", "v1"]
STRINGS = {"name": ["John", "Mary"], "medicine": ["Antibiotics", "Aspirin"]}
SCHEMA = StructType([StructField("type", StringType()), StructField("ts", TimestampType())]
                    + [StructField(a, LongType()) for a in ATTRS]
                    + [StructField(a, StringType()) for a in STRINGS])
MATCH_QUERIES = [q for q in QUERIES if q.resolved().mode == "match"]
SEEDS = 3


def types_in_order(q: sparkcep.CompiledQuery) -> list[str]:
    return [c.types[0] for c in q.spec().components]


def stream(q: sparkcep.CompiledQuery, seed: int, n: int = 16) -> list[dict]:
    """Events of the query's types, up to a minute apart (every window of §8 holds several), small domains."""
    rnd = random.Random(seed)
    order = types_in_order(q)
    events, ms, step = [], 1_700_000_000_000, 0
    for _ in range(n):
        ms += rnd.randint(0, 60) * 1000
        # mostly walk the pattern's components in order (so matches happen), sometimes any of its types
        if rnd.random() < 0.7:
            kind, step = order[step % len(order)], step + 1
        else:
            kind = rnd.choice(order)
        e = {"type": kind, "ts": ms}
        e.update({a: rnd.randint(0, 1) for a in ("id", "shelf_id", "job_id", "task_id")})
        e.update({a: rnd.randint(0, 700) for a in ("amount", "period", "size", "val", "v1")})
        e.update({a: rnd.choice(v) for a, v in STRINGS.items()})
        events.append(e)
    return events


@pytest.mark.parametrize("q", MATCH_QUERIES, ids=[q.name for q in MATCH_QUERIES])
def test_paper_match_query_on_spark_equals_oracle(spark, q):
    found = 0
    for seed in range(SEEDS):
        events = stream(q, seed)
        rows = [(e["type"], datetime.fromtimestamp(e["ts"] / 1000, timezone.utc), *(e[a] for a in ATTRS),
                 *(e[a] for a in STRINGS)) for e in events]
        got = epoch_ms_rows(q.apply(spark.createDataFrame(rows, SCHEMA)))
        got = [{k: float(v) if isinstance(v, Decimal) else v for k, v in r.items()} for r in got]
        expected = match_rows(q.query, events, SCHEMA.fieldNames())
        assert canonical(got) == canonical(expected), (q.name, seed)
        found += len(expected)
    assert found > 0, f"{q.name}: the streams never match; the test would prove nothing"
