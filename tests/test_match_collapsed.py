"""SASE++ collapsed output: one row per binding of the non-Kleene variables with the Kleene candidates.

Expanding a collapsed row, per SASE++ §5.1 (Proposition 5.2), means enumerating every non-empty subset of its
candidates in ts order and keeping those the query's predicates, window and negations allow.  That is
decided here by the oracle on the row's own events (plus every event of a negated type: negation looks at
the whole stream), never from the enumerated output it is compared with: the union of the expansions must be
exactly the oracle's matches over the whole stream, and every row must expand to at least one match.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.oracle import matches
from sparkcep.runtime_udfs import match_engine
from sparkcep.runtime_udfs.match_engine import EngineUnsupportedError
from tests.strategies import event_streams
from tests.test_match_semantics import run

#: (query, its positive variables in pattern order); RETURN reads ``v.n`` of every single variable
QUERIES = [
    ("PATTERN SEQ(A a, B+ b[], C c) WITHIN 8 RETURN a.n, c.n", "abc"),
    ("PATTERN SEQ(A a, B+ b[], C c) WHERE [id] AND b[i].x >= b[i-1].x WITHIN 8 RETURN a.n, c.n, count(b[].n)",
     "abc"),
    ("PATTERN SEQ(A a, B+ b[], C c) WHERE b[b.len].x > avg(b[].x) AND a.x < c.x WITHIN 8 RETURN a.n, c.n", "abc"),
    ("PATTERN SEQ(A a, B+ b[], C c) WHERE b[i].x > a.x AND sum(b[].x) < 7 WITHIN 9 RETURN a.n, b[1].n, c.n",
     "abc"),
    ("PATTERN SEQ(A a, B+ b[], !(D d), C c) WHERE [id] AND b[i].x > b[i-1].x WITHIN 8 RETURN a.n, c.n", "abc"),
    ("PATTERN SEQ(B+ b[], C c) WHERE b[i].x <= b[i-1].x WITHIN 6 RETURN c.n", "bc"),
    ("PATTERN SEQ(A a, B+ b[], C c, D d) WHERE max(b[].x) < d.x WITHIN 8 RETURN a.n, c.n, d.n", "abcd"),
]
NEGATED_TYPES = {"D"}


def numbered(events: list[dict]) -> list[dict]:
    return [{**e, "n": k} for k, e in enumerate(events)]


def identity(binding: dict, variables: list[str]) -> tuple:
    """A match as the event numbers of its variables, in pattern order."""
    return tuple(tuple(e["n"] for e in binding[v]) if isinstance(binding[v], list) else binding[v]["n"]
                 for v in variables)


def expand(text: str, row: dict, events: list[dict], variables: list[str]) -> list[tuple]:
    """The matches a collapsed row stands for: the subsets of its candidates the oracle accepts on the row's
    own events (and the negated types' events)."""
    by_n = {e["n"]: e for e in events}
    singles = {v: by_n[row[f"{v}_n"]] for v in variables if v != "b"}
    candidates = [by_n[c["n"]] for c in row["b"]]
    negatives = [e for e in events if e["type"] in NEGATED_TYPES and "!(D" in text]
    query = sparkcep.compile(text).query
    found = []
    for size in range(1, len(candidates) + 1):
        for subset in itertools.combinations(candidates, size):
            stream = sorted([*singles.values(), *subset, *negatives], key=lambda e: (e["ts"], e["n"]))
            wanted = tuple(tuple(e["n"] for e in subset) if v == "b" else singles[v]["n"] for v in variables)
            if any(identity(m, variables) == wanted for m in matches(query, stream)):
                found.append(wanted)
    return found


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(QUERIES), events=event_streams("ABCD", max_size=11, max_gap=2))
def test_expanding_collapsed_rows_gives_exactly_the_enumerated_matches(case, events):
    text, variables = case[0], list(case[1])
    events = numbered(events)
    q = sparkcep.compile(text + ", count(b[].n) AS nb", collapsed=True)  # candidates carry n
    rows = run(q.spec(), events)
    expected = Counter(identity(m, variables) for m in matches(sparkcep.compile(text).query, events))
    got: Counter = Counter()
    keys = set()
    for row in rows:
        key = tuple(row[f"{v}_n"] for v in variables if v != "b")
        assert key not in keys  # one row per binding of the non-Kleene variables
        keys.add(key)
        assert [c["ts"] for c in row["b"]] == sorted(c["ts"] for c in row["b"])
        found = expand(text, row, events, variables)
        assert found, row  # every row stands for at least one match
        got.update(found)
    assert got == expected


def test_sase_pp_fig4_collapses_seven_matches_into_one_row():
    """SASE++ Fig. 4: a1 b1(6) b2(7) b3(9) c1 of one task, 7 matches, one collapsed row M = (a1, <b1..b3>, c1)."""
    text = ("PATTERN SEQ(A a, B+ b[], C c) WHERE [task_id] AND b[i].val >= b[i-1].val WITHIN 100 "
            "RETURN a.ts, c.ts, count(b[].val)")
    events = [{"type": "A", "ts": 1, "task_id": 1}, *({"type": "B", "ts": t, "task_id": 1, "val": v}
              for t, v in ((2, 6), (3, 7), (4, 9))), {"type": "C", "ts": 5, "task_id": 1}]
    assert len(run(sparkcep.compile(text).spec(), events)) == 7
    assert run(sparkcep.compile(text, collapsed=True).spec(), events) == [
        {"a_ts": 1, "c_ts": 5, "b": [{"ts": 2, "val": 6}, {"ts": 3, "val": 7}, {"ts": 4, "val": 9}]}]


def test_collapsed_output_without_return_binds_every_attribute_when_the_input_is_known():
    """Without RETURN, a generated job (no schema at compile time) binds the default columns from its input's
    columns; collapsed, that must give what compiling against the schema gives: every attribute of the
    single events, and the Kleene candidates with every attribute (not only ts)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sparkcep.runtime_udfs.spec import with_default_outputs

    text = "PATTERN SEQ(A a, B+ b[], C c) WHERE [task_id] WITHIN 100"
    columns = ("type", "ts", "task_id", "val")
    schema = StructType([StructField(c, StringType() if c == "type" else LongType()) for c in columns])
    late_bound = with_default_outputs(sparkcep.compile(text, collapsed=True).spec(), columns)
    assert late_bound == sparkcep.compile(text, collapsed=True).spec(schema)
    b = next(o for o in late_bound.outputs if o.name == "b")
    assert [a.attr for a in b.expr.args] == ["ts", "type", "task_id", "val"]
    assert {"a_task_id", "a_val", "c_ts"} <= {o.name for o in late_bound.outputs}


@pytest.mark.parametrize(("text", "message"), [
    ("PATTERN SEQ(A a, B+ b[], C c) USING skip_till_next_match WITHIN 5", "skip_till_any_match"),
    ("PATTERN SEQ(A a, B+ b[], C+ c[], D d) WITHIN 5", "exactly one Kleene variable"),
    ("PATTERN SEQ(A a, B+ b[]) WITHIN 5", "followed by a single event"),
    ("PATTERN SEQ(A a, C c, B+ b[], D d) WITHIN 5", "first or second position"),
    ("PATTERN SEQ(A a, B+ b[], C c, !(D d)) WITHIN 5", "negated end"),
])
def test_collapsed_output_refuses_what_it_cannot_collapse(text, message):
    with pytest.raises(EngineUnsupportedError, match=message):
        match_engine.check(sparkcep.compile(text, collapsed=True).spec())


@pytest.mark.spark
def test_collapsed_output_on_spark_is_an_array_column(spark):
    """Batch Spark job: the same rows as the engine, the candidates as ARRAY<STRUCT<ts, x>>."""
    from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

    text = "PATTERN SEQ(A a, B+ b[], C c) WHERE [id] AND b[i].x >= b[i-1].x WITHIN 8 RETURN a.ts, c.ts, max(b[].x)"
    events = [{"type": t, "ts": ts, "id": i, "x": x} for t, ts, i, x in [
        ("A", 1, 0, 0), ("B", 2, 0, 3), ("A", 2, 1, 0), ("B", 3, 0, 1), ("B", 4, 1, 2), ("B", 5, 0, 4),
        ("C", 6, 0, 0), ("D", 6, 1, 0), ("C", 7, 1, 0)]]
    schema = StructType([StructField("type", StringType()), StructField("ts", LongType()),
                         StructField("id", LongType()), StructField("x", LongType())])
    q = sparkcep.compile(text, collapsed=True)
    df = q.apply(spark.createDataFrame([tuple(e.values()) for e in events], schema))
    assert df.schema["b"].dataType == ArrayType(StructType([StructField("ts", LongType()),
                                                            StructField("x", LongType())]))
    got = sorted((r["a_ts"], r["c_ts"], [tuple(c) for c in r["b"]]) for r in df.collect())
    want = sorted((r["a_ts"], r["c_ts"], [(c["ts"], c["x"]) for c in r["b"]]) for r in run(q.spec(), events))
    assert got == want == [(1, 6, [(2, 3), (3, 1), (5, 4)]), (2, 7, [(4, 2)])]
