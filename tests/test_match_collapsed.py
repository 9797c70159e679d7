"""SASE++ collapsed output: one row per binding of the non-Kleene variables with the Kleene candidates.

Expanding a collapsed row, per SASE++ §5.1 (Proposition 5.2), means enumerating every non-empty subset of its
candidates in ts order and keeping those the query's predicates, window and negations allow.  That is
decided here by the oracle on the row's own events (plus every event of a negated type: negation looks at
the whole stream), never from the enumerated output it is compared with: the union of the expansions must be
exactly the oracle's matches over the whole stream, and every row must expand to at least one match.

The Kleene variable may stand anywhere; last (``SEQ(A a, B+ b[])``: a match ends at any candidate), its row
waits until the watermark passes ``a.ts + W`` (like a negated end).  A negated end is collapsed where its
block is the same for every subset (first and last events single, no negation predicate on the Kleene
variable); elsewhere it is refused.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.oracles.match import matches
from sparkcep.runtime_udfs.match import engine as match_engine
from sparkcep.runtime_udfs.match.engine import EngineUnsupportedError
from tests.strategies import deliveries, event_streams
from tests.test_match_engine import stream_through_engine
from tests.test_match_semantics import partitions, run

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
    # the Kleene variable third and later
    ("PATTERN SEQ(A a, C c, B+ b[], D d) WHERE b[i].x > a.x AND b[i].x >= b[i-1].x WITHIN 8 "
     "RETURN a.n, c.n, d.n", "acbd"),
    ("PATTERN SEQ(A a, C c, D d, B+ b[], C e) WHERE count(b[].x) <= 2 WITHIN 12 RETURN a.n, c.n, d.n, e.n",
     "acdbe"),
    ("PATTERN SEQ(A a, !(D z), C c, B+ b[], D d) WHERE z.x > a.x AND b[1].x < d.x WITHIN 8 RETURN a.n, c.n, d.n",
     "acbd"),
    # the Kleene variable last: a match ends at any candidate
    ("PATTERN SEQ(A a, B+ b[]) WITHIN 6 RETURN a.n", "ab"),
    ("PATTERN SEQ(A a, B+ b[]) WHERE [id] AND b[i].x > b[i-1].x WITHIN 7 RETURN a.n", "ab"),
    ("PATTERN SEQ(A a, C c, B+ b[]) WHERE b[i].x >= a.x AND sum(b[].x) < 6 AND c.x != a.x WITHIN 7 "
     "RETURN a.n, c.n", "acb"),
    ("PATTERN SEQ(A a, !(D d), B+ b[]) WHERE b[b.len].x >= b[1].x WITHIN 6 RETURN a.n", "ab"),
    ("PATTERN SEQ(A a, B+ b[]) WHERE sum(b[].x) >= 4 WITHIN 7 RETURN a.n", "ab"),
    ("PATTERN SEQ(!(D d), B+ b[], C c) WHERE d.x > c.x AND b[i].x != b[i-1].x WITHIN 6 RETURN c.n", "bc"),
    # a negated end that blocks every subset alike
    ("PATTERN SEQ(A a, B+ b[], C c, !(D d)) WHERE d.x >= a.x AND b[i].x != b[i-1].x WITHIN 7 RETURN a.n, c.n",
     "abc"),
    ("PATTERN SEQ(A a, C c, B+ b[], C e, !(D d)) WHERE [id] WITHIN 8 RETURN a.n, c.n, e.n", "acbe"),
]
NEGATED_TYPES = {"D"}
TYPE_OF = {"a": "A", "b": "B", "c": "C", "d": "D", "e": "C"}


@st.composite
def shaped_streams(draw, variables: str) -> list[dict]:
    """Streams laid out like the pattern (a few events per variable, in pattern order, the Kleene one more),
    with stray events of any type (``D``: the negations) between: many matches and candidate subsets, ties in
    ts (steps 0..2), ``x`` in 0..4, ``id`` mostly 0."""
    types = []
    for v in variables:
        types += [TYPE_OF[v]] * draw(st.integers(1, 4 if v == "b" else 2))
        types += draw(st.lists(st.sampled_from("ABCDD"), max_size=1))
    events, ts = [], draw(st.integers(0, 2))
    for t in types:
        events.append({"type": t, "ts": ts, "x": draw(st.integers(0, 4)), "id": draw(st.sampled_from([0, 0, 0, 1]))})
        ts += draw(st.integers(0, 2))
    return events


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
    negatives = [e for e in events if e["type"] in NEGATED_TYPES and "!(D" in text
                 and e["n"] not in {s["n"] for s in singles.values()}]
    query = sparkcep.compile(text).query
    found = []
    for size in range(1, len(candidates) + 1):
        for subset in itertools.combinations(candidates, size):
            stream = sorted([*singles.values(), *subset, *negatives], key=lambda e: (e["ts"], e["n"]))
            wanted = tuple(tuple(e["n"] for e in subset) if v == "b" else singles[v]["n"] for v in variables)
            if any(identity(m, variables) == wanted for m in matches(query, stream)):
                found.append(wanted)
    return found


@settings(max_examples=300, deadline=None)
@given(case=st.sampled_from(QUERIES), data=st.data())
def test_expanding_collapsed_rows_gives_exactly_the_enumerated_matches(case, data):
    """Batch (one step, a flush) or streamed (micro-batches, a watermark trailing the newest ts, state round
    trips through bytes): the rows expand to exactly the oracle's matches, ties in ts included."""
    text, variables = case[0], list(case[1])
    shaped = st.one_of(shaped_streams(case[1]), event_streams("ABCD", max_size=11, max_gap=2))
    events = data.draw(shaped, label="events")
    events = numbered(events)
    q = sparkcep.compile(text + ", count(b[].n) AS nb", collapsed=True)  # candidates carry n
    spec = q.spec()
    if data.draw(st.booleans(), label="streamed"):
        rows = []
        for part in partitions(spec, events).values():
            lateness, batches = data.draw(deliveries(part))
            rows += stream_through_engine(spec, lateness, batches)
    else:
        rows = run(spec, events)
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


def test_kleene_last_row_keeps_a_candidate_of_its_first_match_ts():
    """``SEQ(A a, B+ b[])``: b1 and b2 share ts 2; b1 alone is no match, b2 alone is, so the row starts at b2,
    yet b1 (which cannot precede b2) is a candidate of it: {b1, b3} is a match.  The row waits for the
    watermark to pass a.ts + W = 8 (streaming: nothing at 7, the row at 8), and survives a state round trip."""
    from sparkcep.runtime_udfs.match.engine import MatchState, advance, init_state, step, wakeup

    text = "PATTERN SEQ(A a, B+ b[]) WHERE sum(b[].x) >= 4 WITHIN 7 RETURN a.ts, max(b[].x)"
    spec = sparkcep.compile(text, collapsed=True).spec()
    events = [{"type": "A", "ts": 1, "x": 0}, {"type": "B", "ts": 2, "x": 1}, {"type": "B", "ts": 2, "x": 4},
              {"type": "B", "ts": 5, "x": 3}]
    row = {"a_ts": 1, "b": [{"ts": 2, "x": 1}, {"ts": 2, "x": 4}, {"ts": 5, "x": 3}]}
    assert run(spec, events) == [row]
    state, _ = step(spec, init_state(), events)
    state, rows = advance(spec, state, 5)
    assert rows == [] and wakeup(spec, state) == 8
    state = MatchState.from_bytes(state.to_bytes())
    state, _ = step(spec, state, [{"type": "B", "ts": 8, "x": 4}])  # outside a's window
    state, rows = advance(spec, state, 7)
    assert rows == []
    state, rows = advance(spec, state, 8)
    assert rows == [row]


def test_collapsed_output_without_return_binds_every_attribute_when_the_input_is_known():
    """Without RETURN, a generated job (no schema at compile time) binds the default columns from its input's
    columns; collapsed, that must give what compiling against the schema gives: every attribute of the
    single events, and the Kleene candidates with every attribute (not only ts)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sparkcep.ir.spec import with_default_outputs

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
    ("PATTERN SEQ(A a, B* b[], C c) WITHIN 5", "exactly one Kleene variable"),
    ("PATTERN SEQ(A a, (SEQ(B b, C c))+, D d) WITHIN 5", "repeated group"),
    ("PATTERN B+ b[] WITHIN 5", "single"),
    ("PATTERN SEQ(A a, B+ b[], !(D d)) WITHIN 5", r"negated end.*last event"),
    ("PATTERN SEQ(B+ b[], C c, !(D d)) WITHIN 5", r"negated end.*b\[1\]\.ts \+ W"),
    ("PATTERN SEQ(A a, B+ b[], C c, !(D d)) WHERE d.x > b[i].x WITHIN 5", r"negated end.*reads the Kleene"),
    ("PATTERN SEQ(!(D d), A a, B+ b[]) WITHIN 5", "negated start"),
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


@pytest.mark.spark
@pytest.mark.slow
def test_collapsed_kleene_last_on_streaming_spark_waits_for_the_window(spark, tmp_path):
    """``SEQ(A a, B+ b[])`` collapsed through ``applyInPandasWithState`` (JSON files as micro-batches, a
    checkpoint, a 1 s watermark): each row waits until the watermark passes ``a.ts + W``, then carries every
    candidate of its window; the rows equal the pure engine's (proven exact above) and no state is left."""
    import random

    from tests.test_match_semantics import stream_on_spark

    text = ("PATTERN SEQ(A a, B+ b[]) WHERE [id] AND b[i].x >= b[i-1].x WITHIN 2 seconds "
            "RETURN a.ts, a.x, max(b[].x)")
    q = sparkcep.compile(text, collapsed=True)
    epoch = 1_700_000_000_000
    rnd = random.Random(7)
    events = [{"id": rnd.randint(0, 2), "type": rnd.choice("ABBBC"), "ts": epoch + 250 * k, "x": rnd.randint(0, 4)}
              for k in range(120)]
    files = [events[k:k + 40] for k in range(0, len(events), 40)]
    files.append([{"id": 99, "type": "C", "ts": epoch + 3_600_000, "x": 0}])  # moves the watermark past all
    got, handle = stream_on_spark(spark, tmp_path, q.spec(), files,
                                  ["unix_millis(a_ts) AS a_ts", "a_x", "transform(b, c -> c.ts) AS b_ts",
                                   "transform(b, c -> c.x) AS b_x"])
    expected = [{"a_ts": r["a_ts"], "a_x": r["a_x"], "b_ts": [c["ts"] for c in r["b"]], "b_x": [c["x"] for c in r["b"]]}
                for r in run(q.spec(), events)]
    assert len(expected) > 10 and max(len(r["b_ts"]) for r in expected) >= 4

    def key(r):
        return r["a_ts"], r["a_x"], tuple(r["b_ts"]), tuple(r["b_x"])

    assert sorted(map(key, got)) == sorted(map(key, expected))
    assert handle.lastProgress["stateOperators"][0]["numRowsTotal"] == 0
