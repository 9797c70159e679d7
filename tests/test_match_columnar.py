"""Columnar sequence construction (``runtime_udfs.match.columnar``) without a JVM, plus one Spark test.

The property: for random eligible specs (SEQ of 1–5 single or ANY components over overlapping types, ``[id]``
or not, parameterized predicates or not, windows small and large) and random streams (many ts ties, several
keys, a missing key, rows without a usable ts, integer and fractional ts), the columnar chains give the same
multiset of rows as the per-key match engine, which are the oracle's.  Ineligible specs give None, one test per
reason.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.ir.ast import Attr, Duration
from sparkcep.ir.spec import Component, MatchSpec, OutputColumn
from sparkcep.oracles.match import match_rows
from sparkcep.runtime_udfs.match.columnar import ColumnarAlternatives, columnar, ineligible
from sparkcep.runtime_udfs.match.compile import Plan
from sparkcep.spark.results import canonical
from tests.test_match_semantics import COLUMNS, compiled, oracle_rows, run

# ----------------------------------------------------------------------------------------------- helpers


def _clean(v):
    return None if isinstance(v, float) and v != v else v


def columnar_rows(spec: MatchSpec, events: list[dict], max_chains: int | None = None) -> list[dict]:
    """The columnar construction's rows for ``events``: key ids (NaN and missing as one None key), ts (int64
    when all are integers, else float64 with NaN for a missing ts), ``_mask`` as the SQL filter computes it."""
    cc = columnar(spec) if max_chains is None else columnar(spec, max_chains=max_chains)
    assert cc is not None
    plan = Plan(spec)
    ids: dict[tuple, int] = {}
    group = [ids.setdefault(tuple(_clean(e.get(a)) for a in spec.key), len(ids)) for e in events]
    raw = [e.get("ts") for e in events]
    if all(isinstance(t, int) for t in raw):
        ts = np.array(raw, dtype=np.int64)
    else:
        ts = np.array([math.nan if t is None else t for t in raw], dtype=np.float64)
    mask = np.array([plan.mask_of(e) for e in events], dtype=np.int64)

    def values(attr):
        return pa.array([e.get(attr) for e in events], from_pandas=True)

    chains = cc(np.array(group, dtype=np.int64), ts, mask, values)
    assert chains is not None and chains.dtype == np.int64 and chains.shape[1] == len(spec.components)
    return [{name: None if r[p] < 0 else _clean(events[int(r[p])].get(attr)) for name, p, attr in cc.outputs}
            for r in chains]


def engine_rows(spec: MatchSpec, events: list[dict]) -> list[dict]:
    """The per-key engine's rows, keys read as the adapters read them (NaN is the null key)."""
    return run(spec, [{k: (_clean(v) if k in spec.key else v) for k, v in e.items()} for e in events])


@st.composite
def eligible_queries(draw, predicates: bool = True) -> str:
    """SEQ of 1–5 single or ANY components over A, B, C (types overlap), ``[id]`` or not, up to two
    parameterized predicates, a window from 1 to 40."""
    n = draw(st.sampled_from([2, 3, 1, 2, 3, 3, 4, 5]))
    names = "abcde"[:n]
    comps = []
    for v in names:
        t = draw(st.sampled_from("ABC"))
        if draw(st.integers(0, 3)) == 0:
            comps.append(f"ANY({t}, {draw(st.sampled_from([x for x in 'ABCD' if x != t]))}) {v}")
        else:
            comps.append(f"{t} {v}")
    any_vars = {v for v, c in zip(names, comps, strict=True) if c.startswith("ANY")}
    conds = []
    if draw(st.integers(0, 3)):
        conds.append("[id]")
    plain = [v for v in names if v not in any_vars]
    if predicates and len(plain) >= 2:
        for _ in range(draw(st.integers(0, 2))):
            u, v = draw(st.lists(st.sampled_from(plain), min_size=2, max_size=2, unique=True))
            conds.append(draw(st.sampled_from([f"{u}.x < {v}.x", f"{u}.x + 1 >= {v}.x", f"{u}.x != {v}.x",
                                               f"({u}.x = {v}.x OR {v}.x > 2)", f"{u}.x * 2 <= {v}.x + 3",
                                               # Spark SQL calls, vectorized (expr/vector.py)
                                               f"abs({u}.x - {v}.x) <= 1", f"{u}.x IN ({v}.x, 3)",
                                               f"coalesce({u}.x, {v}.x, 9) BETWEEN 1 AND 3",
                                               f"CASE WHEN {u}.x > {v}.x THEN 1 END IS NOT NULL",
                                               f"concat({u}.x, {v}.x) LIKE '1_'"])))
    where = f" WHERE {' AND '.join(conds)}" if conds else ""
    window = draw(st.sampled_from([40, 1, 2, 3, 4, 6, 10, 16, 40, 100]))
    return f"PATTERN SEQ({', '.join(comps)}){where} WITHIN {window}"


@st.composite
def streams(draw, min_size: int = 10, max_size: int = 26) -> list[dict]:
    """Events of A–D over 2 ids (sometimes missing, sometimes NaN), ``x`` in 0..4 (sometimes missing), ts steps
    0..2 (many ties), now and then a missing ts; arrival order random."""
    return _seeded_stream(draw(st.randoms(use_true_random=False)), min_size, max_size)


def _seeded_stream(rnd, min_size: int = 5, max_size: int = 28) -> list[dict]:
    """A stream from ``rnd`` (hypothesis' own draws favour tiny values; a seeded Random gives rich streams)."""
    events = []
    ts = rnd.randint(0, 3)
    for _ in range(rnd.randint(min_size, max_size)):
        e = {"type": rnd.choice("AABBCCD"), "ts": ts if rnd.randrange(14) else None}
        if rnd.randrange(13):
            e["x"] = rnd.randint(0, 4)
        key = rnd.randrange(9)
        if key < 7:
            e["id"] = key % 2
        elif key == 7:
            e["id"] = math.nan
        events.append(e)
        ts += rnd.randint(0, 2)
    rnd.shuffle(events)
    return events


def assert_same(text: str, events: list[dict], max_chains: int | None = None) -> int:
    """columnar == engine == oracle (rows with a usable ts) as multisets; returns the match count."""
    q, spec = compiled(text)
    got = canonical(columnar_rows(spec, events, max_chains))
    want = canonical(engine_rows(spec, events))
    assert got == want, text
    usable = [{k: (_clean(v) if k == "id" else v) for k, v in e.items()} for e in events if e.get("ts") is not None]
    assert want == canonical(oracle_rows(q, usable)), text
    return len(want)


# ----------------------------------------------------------------------------------------------- properties


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(eligible_queries(), streams())
def test_columnar_equals_engine_and_oracle(text, events):
    assert_same(text, events)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(eligible_queries(), streams(max_size=30), st.integers(1, 6))
def test_slicing_under_a_small_chain_budget_changes_nothing(text, events, budget):
    """``max_chains`` tiny: every extension step is processed in slices."""
    assert_same(text, events, max_chains=budget)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(eligible_queries(predicates=False), streams(), st.sampled_from([0.1, 0.3, 0.7, 1.5]),
       st.sampled_from([0.5, 1.0, 2.0, 2.5, 4.2]))
def test_fractional_ts_and_window(text, events, scale, window):
    """Float ts (multiples of ``scale``) and a fractional W: all three decide ``last.ts - first.ts < W`` by the
    same float subtraction (e.g. 4.5 - 0.3 is not below 4.2, while 4.5 - 4.2 is below 0.3: the engine pruned by
    the latter and kept such a match, found by this test)."""
    q, spec = compiled(text)
    spec = MatchSpec(spec.components, spec.predicates, window, spec.outputs, spec.strategy, spec.key, spec.pattern)
    events = [{**e, "ts": None if e["ts"] is None else e["ts"] * scale} for e in events]
    want = canonical(engine_rows(spec, events))
    assert canonical(columnar_rows(spec, events)) == want
    usable = [{k: (_clean(v) if k == "id" else v) for k, v in e.items()} for e in events if e.get("ts") is not None]
    query = dataclasses.replace(q.query, within=Duration(window))
    assert canonical(match_rows(query, usable, list(COLUMNS))) == want


def test_a_float_window_bound_is_the_subtraction():
    """The example above, pinned: 4.5 - 0.3 == 4.2 in floats, so A@0.3, B@4.5 is no match WITHIN 4.2."""
    q, spec = compiled("PATTERN SEQ(A a, B b) WITHIN 40")
    spec = MatchSpec(spec.components, spec.predicates, 4.2, spec.outputs, spec.strategy, spec.key, spec.pattern)
    assert 4.5 - 0.3 == 4.2 and 4.5 - 4.2 < 0.3
    events = [{"type": "A", "ts": 0.3}, {"type": "B", "ts": 4.5}, {"type": "B", "ts": 4.4}]
    assert [r["b_ts"] for r in engine_rows(spec, events)] == [4.4]
    assert [r["b_ts"] for r in columnar_rows(spec, events)] == [4.4]


def _random_query(rnd) -> str:
    n = rnd.choice([1, 2, 2, 3, 3, 4, 5])
    names = "abcde"[:n]
    comps = [f"ANY({t}, {rnd.choice([x for x in 'ABCD' if x != t])}) {v}" if rnd.randrange(4) == 0 else f"{t} {v}"
             for v, t in zip(names, [rnd.choice("ABC") for _ in names], strict=True)]
    plain = [v for v, c in zip(names, comps, strict=True) if not c.startswith("ANY")]
    conds = ["[id]"] if rnd.randrange(3) else []
    if len(plain) >= 2 and rnd.randrange(2):
        u, v = rnd.sample(plain, 2)
        conds.append(rnd.choice([f"{u}.x < {v}.x", f"{u}.x + 1 >= {v}.x", f"{u}.x != {v}.x", f"{u}.x * 2 <= {v}.x"]))
    where = f" WHERE {' AND '.join(conds)}" if conds else ""
    return f"PATTERN SEQ({', '.join(comps)}){where} WITHIN {rnd.choice([3, 6, 10, 20, 60])}"


def test_seeded_random_cases_with_many_matches():
    """400 seeded cases (hypothesis favours small values; this pins down a spread that is mostly non-empty):
    columnar == engine == oracle, and the cases do exercise matches and predicates."""
    import random

    with_matches = with_predicates = 0
    for seed in range(400):
        rnd = random.Random(seed)
        text = _random_query(rnd)
        events = _seeded_stream(rnd)
        found = assert_same(text, events, max_chains=rnd.choice([None, None, 3]))
        with_matches += found > 0
        with_predicates += found > 0 and ".x" in text
    assert with_matches >= 180 and with_predicates >= 30, (with_matches, with_predicates)


def _alternatives_query(pick) -> str:
    """SEQ of 1–4 components, each single, ANY, optional ``T?`` or an ``(T v OR U w)``, or two such SEQs joined
    by OR; ``[id]`` or not; up to two parameterized predicates over any two non-ANY variables (one of an absent
    variable reads NULL in that alternative); a window from 2 to 40.  ``pick(options)`` chooses."""
    letters = iter("abcdefghijklmnop")

    def seq(n: int) -> tuple[str, list[str], list[str]]:
        comps, plain, single = [], [], []
        for _ in range(n):
            v, t = next(letters), pick("ABC")
            form = pick(["single", "single", "any", "opt", "opt", "or"])
            if form == "any":
                comps.append(f"ANY({t}, {pick([x for x in 'ABCD' if x != t])}) {v}")
                continue
            if form == "opt":
                comps.append(f"{t}? {v}")
            elif form == "or":
                w = next(letters)
                comps.append(f"({t} {v} OR {pick('ABC')} {w})")
                plain.append(w)
            else:
                comps.append(f"{t} {v}")
                single.append(v)
            plain.append(v)
        return f"SEQ({', '.join(comps)})", plain, single

    text, plain, single = seq(pick([1, 2, 2, 3, 3, 4]))
    if pick([False, False, True]):
        other, more, _ = seq(pick([1, 2, 3]))
        text, plain = f"{text} OR {other}", plain + more
    conds = ["[id]"] if pick([True, True, False]) else []
    if len(plain) >= 2:
        for _ in range(pick([0, 1, 1, 2])):
            u, v = pick([(u, v) for u in plain for v in plain if u != v])
            conds.append(pick([f"{u}.x < {v}.x", f"{u}.x + 1 >= {v}.x", f"{u}.x != {v}.x",
                               f"({u}.x = {v}.x OR {v}.x > 2)", f"{u}.x * 2 <= {v}.x + 3"]))
    where = f" WHERE {' AND '.join(conds)}" if conds else ""
    return f"PATTERN {text}{where} WITHIN {pick([2, 3, 4, 6, 10, 16, 40])}"


@st.composite
def alternative_queries(draw) -> str:
    return _alternatives_query(lambda options: draw(st.sampled_from(list(options))))


def _eligible_or_reject(text: str) -> bool:
    """Whether the query has a columnar construction (alternatives binding the same variables run as one
    automaton in the plan, which is not eligible; the engine refuses a few shapes)."""
    try:
        _, spec = compiled(text)
    except Exception:  # noqa: BLE001 - a shape the compiler refuses
        return False
    return columnar(spec) is not None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(alternative_queries(), streams(), st.sampled_from([None, None, 3]))
def test_alternatives_equal_engine_and_oracle(text, events, budget):
    """OR and ``T?``: the union of each alternative's chains, a missing variable's outputs null, predicates on
    an absent variable read NULL: columnar == engine == oracle as multisets (so no binding twice or missed)."""
    from hypothesis import assume

    assume(_eligible_or_reject(text))
    assert_same(text, events, max_chains=budget)


def test_seeded_alternatives_with_many_matches():
    """300 seeded OR / ``T?`` cases: columnar == engine == oracle, and they exercise several alternatives,
    matches where a variable is absent (null outputs) and predicates that read an absent variable."""
    import random

    cases = with_absent = with_nulled = 0
    for seed in range(300):
        rnd = random.Random(10_000 + seed)
        text = _alternatives_query(lambda options, rnd=rnd: rnd.choice(list(options)))
        if not _eligible_or_reject(text):
            continue
        q, spec = compiled(text)
        plan = Plan(spec)
        if len(plan.alternatives) < 2:
            continue
        events = _seeded_stream(rnd)
        found = assert_same(text, events, max_chains=rnd.choice([None, None, 3]))
        cases += 1
        rows = columnar_rows(spec, events)
        with_absent += any(v is None and k.endswith("_type") for r in rows for k, v in r.items())
        with_nulled += found > 0 and any(c.nulled for a in plan.alternatives for c in a.conjuncts)
    assert cases >= 150 and with_absent >= 50 and with_nulled >= 10, (cases, with_absent, with_nulled)


def test_optional_component_pinned():
    """A1 B2 C3 WITHIN 5: SEQ(A a, B? b, C c) gives a1 b2 c3 and a1 c3 (skip_till_any_match skips b2), the
    latter with null b columns; a predicate on b is NULL where b is absent."""
    events = [{"type": t, "ts": ts, "x": ts} for t, ts in [("A", 1), ("B", 2), ("C", 3)]]
    got = columnar_rows(compiled("PATTERN SEQ(A a, B? b, C c) WITHIN 5")[1], events)
    assert sorted(((r["a_ts"], r["b_ts"], r["b_type"], r["c_ts"]) for r in got), key=repr) == [
        (1, 2, "B", 3), (1, None, None, 3)]
    assert assert_same("PATTERN SEQ(A a, B? b, C c) WITHIN 5", events) == 2
    assert assert_same("PATTERN SEQ(A a, B? b, C c) WHERE a.x < b.x WITHIN 5", events) == 1


def test_known_matches_ties_and_window_bound():
    """A1 A2 B2 B3 C5 C6, W = 4: ties never follow each other, ``last - first < W`` strictly."""
    events = [{"type": t, "ts": ts, "x": 0, "id": 1} for t, ts in
              [("A", 1), ("A", 2), ("B", 2), ("B", 3), ("C", 5), ("C", 6)]]
    text = "PATTERN SEQ(A a, B b, C c) WITHIN 4 RETURN a.ts AS a, b.ts AS b, c.ts AS c"
    _, spec = compiled(text)
    got = [(r["a"], r["b"], r["c"]) for r in columnar_rows(spec, events)]
    # (1, 2, 5) and (1, 3, 5): 5 - 1 = 4 is not < 4; (2, 2, ...): a tie; (2, 3, 6): 6 - 2 = 4
    assert got == [(2, 3, 5)]
    assert canonical(engine_rows(spec, events)) == canonical([{"a": 2, "b": 3, "c": 5}])


def test_large_integer_ts_stay_exact():
    """Counters beyond 2^53 (int64): float64 would merge 2^60 and 2^60 + 1 into one tie run."""
    base = 2 ** 60
    events = [{"type": "A", "ts": base, "x": 0}, {"type": "B", "ts": base + 1, "x": 0},
              {"type": "B", "ts": base + 2, "x": 0}]
    _, spec = compiled("PATTERN SEQ(A a, B b) WITHIN 2 RETURN a.ts AS a, b.ts AS b")
    assert columnar_rows(spec, events) == [{"a": base, "b": base + 1}] == engine_rows(spec, events)


def test_infinite_ts_is_left_to_the_engine():
    _, spec = compiled("PATTERN SEQ(A a, B b) WITHIN 2")
    cc = columnar(spec)
    assert cc(np.zeros(2, dtype=np.int64), np.array([1.0, math.inf]), np.array([1, 2])) is None


def test_a_step_beyond_the_budget_is_sliced_and_exact():
    """V1 = 1-like: one key, every A before every B in the window; 40 x 40 chains, budget 7."""
    events = [{"type": "A", "ts": t, "x": 0} for t in range(40)] + [{"type": "B", "ts": 40 + t, "x": 0}
                                                                      for t in range(40)]
    n = assert_same("PATTERN SEQ(A a, B b) WITHIN 100", events, max_chains=7)
    assert n == 1600


# ----------------------------------------------------------------------------------------------- eligibility


@pytest.mark.parametrize("text, reason", [
    ("PATTERN SEQ(A a, B+ b[], C c) WITHIN 5", "Kleene"),
    ("PATTERN SEQ(A a, B* b[], C c) WITHIN 5", "Kleene"),
    ("PATTERN SEQ(A a, (B b OR C+ c[])) WITHIN 5", "Kleene"),
    ("PATTERN SEQ(A a, !(B b), C c) WITHIN 5", "negation"),
    ("PATTERN SEQ(A a, (SEQ(B b, C c))+) WITHIN 5", "Kleene"),
    ("PATTERN SEQ(A a, B b) USING skip_till_next_match WITHIN 5", "strategy"),
    ("PATTERN SEQ(A a, B b) USING strict_contiguity WITHIN 5", "strategy"),
    ("PATTERN SEQ(A a, B b) WITHIN 5 RETURN a.x + b.x AS s", "plain var.attr"),
    ("PATTERN SEQ(ANY(A, D) a, B b) WHERE a.x < b.x WITHIN 5", "vectorizable"),
])
def test_ineligible_specs_have_no_columnar_construction(text, reason):
    _, spec = compiled(text)
    assert columnar(spec) is None
    assert reason in ineligible(spec)


def test_collapsed_and_trend_specs_are_ineligible():
    from sparkcep.ir.spec import with_default_outputs

    spec = with_default_outputs(sparkcep.compile("PATTERN SEQ(A a, B+ b[]) WITHIN 5", collapsed=True).spec(),
                                COLUMNS)
    assert columnar(spec) is None and ineligible(spec) == "collapsed output"
    trend = sparkcep.compile("PATTERN SEQ(A a, B+ b[]) WITHIN 5 RETURN COUNT(*) AS n").spec()
    assert columnar(trend) is None and ineligible(trend) == "not a match query"


def test_eligible_specs():
    for text in ["PATTERN SEQ(A a) WITHIN 5", "PATTERN SEQ(ANY(A, B) a, B b, C c) WHERE [id] WITHIN 5",
                 "PATTERN SEQ(A a, B b) WHERE a.x < b.x AND b.x != 3 WITHIN 5 RETURN a.ts AS t, b.x AS x",
                 "PATTERN SEQ(A a, (B b OR C c)) WHERE a.x < b.x WITHIN 5", "PATTERN SEQ(A a, B? b, C c) WITHIN 5",
                 "PATTERN SEQ(A a, B b) OR SEQ(C c, A d) WITHIN 5"]:
        _, spec = compiled(text)
        assert ineligible(spec) is None and columnar(spec) is not None, text
    _, spec = compiled("PATTERN SEQ(A a, B? b, C c) WITHIN 5")
    assert isinstance(columnar(spec), ColumnarAlternatives)
    assert [p.columns for p in columnar(spec).parts] == [(0, 1, 2), (0, 2)]


@pytest.mark.parametrize("text", [
    "PATTERN SEQ(A a) WITHIN 5", "PATTERN SEQ(ANY(A, B) a, B b, C c) WHERE [id] WITHIN 5",
    "PATTERN SEQ(A a, B b) WHERE a.x < b.x WITHIN 5 RETURN a.ts AS t",
    "PATTERN SEQ(A a, B+ b[], C c) WITHIN 5", "PATTERN SEQ(A a, !(B b), C c) WITHIN 5",
    "PATTERN SEQ(A a, B b) USING skip_till_next_match WITHIN 5",
    "PATTERN SEQ(A a, B b) WITHIN 5 RETURN a.x + b.x AS s", "PATTERN SEQ(A a, (B b OR C c)) WITHIN 5",
    "PATTERN SEQ(A a, (B b OR C c)) WHERE a.x < b.x AND a.x != 2 WITHIN 5",
])
def test_explain_names_the_columnar_construction_exactly_for_eligible_specs(text):
    lines = [x.strip() for x in sparkcep.compile(text).explain().splitlines() if "batch construction" in x]
    _, spec = compiled(text)
    if columnar(spec) is None:
        assert lines == []
    else:
        alts = Plan(spec).alternatives
        preds = sum(len(a.conjuncts) for a in alts)
        over = (f"{len(spec.components)} position(s)" if len(alts) == 1 else
                f"{len(alts)} sequences of {'/'.join(str(len(a.comps)) for a in alts)} position(s)")
        assert lines == [f"batch construction: columnar over {over}, all keys at once in numpy"
                         + (f", {preds} predicate(s) vectorized" if preds else "")]


def test_hand_built_spec_outputs_must_be_plain_attributes():
    spec = MatchSpec((Component("a", ("A",)),), (), 5, (OutputColumn("t", Attr("a", "ts", "last")),))
    assert columnar(spec) is None


# ----------------------------------------------------------------------------------------------- Spark


@pytest.mark.spark
def test_on_spark_with_timestamps_equals_the_oracle(spark):
    """Through ``CompiledQuery.apply`` (the batch path runs the columnar construction): a TIMESTAMP ts, a null
    key, a predicate, and a RETURN of several attributes including a second timestamp and the ts."""
    import datetime
    import random

    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    from sparkcep.oracles.match import match_rows

    schema = StructType([StructField("id", LongType()), StructField("type", StringType()),
                         StructField("ts", TimestampType()), StructField("x", LongType()),
                         StructField("w", TimestampType())])
    rnd = random.Random(11)
    epoch = 1_700_000_000_000
    events = []
    for k in range(300):
        e = {"id": rnd.choice([0, 1, None]), "type": rnd.choice("AABBCC"), "ts": epoch + 200 * (k // 2),
             "x": rnd.choice([0, 1, 2, 3, None]), "w": epoch + rnd.randint(-10**6, 10**6)}
        events.append(e)
    text = ("PATTERN SEQ(A a, ANY(B, C) b, C c) WHERE [id] AND a.x < c.x WITHIN 4 seconds "
            "RETURN a.ts AS a_ts, b.type AS b_type, c.x AS c_x, b.w AS b_w, c.ts AS c_ts")
    q = sparkcep.compile(text)
    assert columnar(q.spec(schema)) is not None

    def stamp(ms):
        return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)

    df = spark.createDataFrame([(e["id"], e["type"], stamp(e["ts"]), e["x"], stamp(e["w"])) for e in events], schema)
    result = q.apply(df)
    assert [f.dataType for f in result.schema.fields] == [TimestampType(), StringType(), LongType(), TimestampType(),
                                                           TimestampType()]
    got = [r.asDict() for r in result.selectExpr("unix_millis(a_ts) AS a_ts", "b_type", "c_x",
                                                 "unix_millis(b_w) AS b_w", "unix_millis(c_ts) AS c_ts").collect()]
    want = match_rows(q.query, events)
    assert len(want) > 50
    assert canonical(got) == canonical(want)


@pytest.mark.spark
def test_on_spark_with_alternatives_equals_the_oracle(spark):
    """``T?`` and ``OR`` through ``CompiledQuery.apply``: the union of the alternatives' chains, null result
    columns for an absent variable (Spark types kept), a predicate that reads one."""
    import random

    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    from sparkcep.oracles.match import match_rows

    schema = StructType([StructField("id", LongType()), StructField("type", StringType()),
                         StructField("ts", LongType()), StructField("x", DoubleType())])
    rnd = random.Random(5)
    events = [{"id": rnd.choice([0, 1]), "type": rnd.choice("AABBCCD"), "ts": k // 2, "x": rnd.choice([0.0, 1.5, 3.0])}
              for k in range(240)]
    text = ("PATTERN SEQ(A a, B? b, (C c OR D d)) WHERE [id] AND (a.x <= b.x OR d.x > 1) WITHIN 4 "
            "RETURN a.ts AS a_ts, b.x AS b_x, c.ts AS c_ts, d.type AS d_type")
    q = sparkcep.compile(text)
    assert isinstance(columnar(q.spec(schema)), ColumnarAlternatives)
    df = spark.createDataFrame([(e["id"], e["type"], e["ts"], e["x"]) for e in events], schema)
    result = q.apply(df)
    assert [f.dataType for f in result.schema.fields] == [LongType(), DoubleType(), LongType(), StringType()]
    got = [r.asDict() for r in result.collect()]
    want = match_rows(q.query, events)
    assert len(want) > 20 and any(r["b_x"] is None for r in want) and any(r["d_type"] for r in want)
    assert canonical(got) == canonical(want)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from(["ms", "us", "float"]), st.booleans())
def test_run_table_columnar_equals_the_engine_loop(seed, ts_kind, optional):
    """``MatchOperator.run_table`` with the columnar construction == with the per-key engine loop (``_columnar``
    None), byte for byte as Arrow tables once sorted: timestamps (whole ms, sub-ms) or float ts with NaN and
    null, a null and a NaN key, a float attribute with NaN and null, a second timestamp attribute; with
    ``optional`` a ``B?`` and an ``OR`` (null result columns of absent variables, a predicate reading one)."""
    import random

    from pyspark.sql.types import DoubleType, StringType, StructField, StructType, TimestampType

    from sparkcep.runtime_udfs.match import columnar as match_columnar
    from sparkcep.spark.operator import MatchOperator
    from sparkcep.spark.schema import MASK

    rnd = random.Random(seed)
    n = rnd.randint(5, 90)
    ts_type = DoubleType() if ts_kind == "float" else TimestampType()
    schema = StructType([StructField("k", DoubleType()), StructField("type", StringType()),
                         StructField("ts", ts_type), StructField("y", DoubleType()),
                         StructField("w", TimestampType())])
    within = "15" if ts_kind == "float" else "10 milliseconds"
    text = f"PATTERN SEQ(A a, ANY(B, C) b, C c) WHERE [k] AND a.y <= c.y AND c.w >= a.w WITHIN {within} " \
        "RETURN a.ts, b.type, b.y, c.w, c.ts"
    if optional:
        text = f"PATTERN SEQ(A a, B? b, (C c OR D d)) WHERE [k] AND a.y <= c.y AND (b.w >= a.w OR d.y > 0.5) " \
            f"WITHIN {within} RETURN a.ts, b.type, b.y, b.w, c.w, c.ts, d.y"
    q = sparkcep.compile(text)
    spec = q.spec(schema)
    ts = [rnd.randint(0, 25) * (1.5 if ts_kind == "float" else 1) for _ in range(n)]
    if ts_kind == "us":
        ts = [t + rnd.choice([0, 0.25]) for t in ts]
    ts = [None if rnd.randrange(12) == 0 else (math.nan if ts_kind == "float" and rnd.randrange(12) == 0 else t)
          for t in ts]
    types = [rnd.choice("AABBCCD") for _ in range(n)]
    plan = Plan(spec)
    if ts_kind == "float":
        ts_col = pa.array(ts, pa.float64(), from_pandas=False)
    else:
        ts_col = pa.array([None if t is None else round(t * 1000) for t in ts], pa.int64()).cast(
            pa.timestamp("us", tz="UTC"))
    table = pa.table({
        "k": pa.array([rnd.choice([0.0, 1.0, None, math.nan]) for _ in range(n)], pa.float64(), from_pandas=False),
        "type": pa.array(types, pa.string()), "ts": ts_col,
        "y": pa.array([rnd.choice([0.5, 1.0, 2.0, None, math.nan]) for _ in range(n)], pa.float64(),
                      from_pandas=False),
        "w": pa.array([rnd.randint(-10**9, 10**9) for _ in range(n)], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        MASK: pa.array([plan.mask_of({"type": t}) for t in types], pa.int64()),
    })
    op = MatchOperator(spec, schema, timezone="UTC")
    calls = []
    real = match_columnar.arrow_matches

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(out is not None)
        return out

    match_columnar.arrow_matches = spy
    try:
        got = op.run_table(table)
    finally:
        match_columnar.arrow_matches = real
    engine_op = MatchOperator(spec, schema, timezone="UTC")
    engine_op._columnar = None
    want = engine_op.run_table(table)
    assert got.schema == want.schema
    assert calls == [True] or not want.num_rows  # the columnar construction made the result

    def rows(t):
        return sorted(tuple(repr(v) for v in r.values()) for r in t.to_pylist())

    assert rows(got) == rows(want)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from([2 ** 60, 2 ** 62 + 3, -(2 ** 62) - 5]))
def test_run_table_with_large_integer_ts_equals_the_oracle(seed, offset):
    """A BIGINT ts beyond 2^53 through ``MatchOperator.run_table`` (prefilter, then the columnar construction or
    the per-key engine loop): both equal the oracle.  The prefilter reads the ts as int64 (float64 would merge
    ts 256 apart at 2^60 into one tie run and drop the matches before the construction sees them)."""
    import random

    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sparkcep.spark.operator import MatchOperator
    from sparkcep.spark.schema import MASK

    rnd = random.Random(seed)
    n = rnd.randint(5, 60)
    schema = StructType([StructField("k", LongType()), StructField("type", StringType()),
                         StructField("ts", LongType()), StructField("x", LongType())])
    text = ("PATTERN SEQ(A a, ANY(B, C) b, C c) WHERE [k] AND a.x <= c.x WITHIN 6 "
            "RETURN a.ts AS a_ts, b.ts AS b_ts, c.ts AS c_ts, c.x AS c_x")
    q = sparkcep.compile(text)
    spec = q.spec(schema)
    plan = Plan(spec)
    events = [{"k": rnd.choice([0, 1, None]), "type": rnd.choice("AABBCCD"),
               "ts": None if rnd.randrange(15) == 0 else offset + rnd.randint(0, 30), "x": rnd.choice([0, 1, 2, None])}
              for _ in range(n)]
    table = pa.table({"k": pa.array([e["k"] for e in events], pa.int64()),
                      "type": pa.array([e["type"] for e in events], pa.string()),
                      "ts": pa.array([e["ts"] for e in events], pa.int64()),
                      "x": pa.array([e["x"] for e in events], pa.int64()),
                      MASK: pa.array([plan.mask_of({"type": e["type"]}) for e in events], pa.int64())})
    want = canonical(match_rows(q.query, [e for e in events if e["ts"] is not None]))
    for use_columnar in (True, False):
        op = MatchOperator(spec, schema, timezone="UTC")
        if not use_columnar:
            op._columnar = None
        assert canonical(op.run_table(table).to_pylist()) == want, use_columnar


def test_run_table_with_large_integer_ts_pinned():
    """A@2^60, B@2^60+1, C@2^60+2 WITHIN 6: one match, though float64 reads all three ts as one tie."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sparkcep.spark.operator import MatchOperator
    from sparkcep.spark.schema import MASK

    schema = StructType([StructField("type", StringType()), StructField("ts", LongType())])
    q = sparkcep.compile("PATTERN SEQ(A a, B b, C c) WITHIN 6 RETURN a.ts AS a, c.ts AS c")
    spec = q.spec(schema)
    base = 2 ** 60
    assert float(base) == float(base + 2)
    table = pa.table({"type": ["A", "B", "C"], "ts": pa.array([base, base + 1, base + 2], pa.int64()),
                      MASK: pa.array([1, 2, 4], pa.int64())})
    for use_columnar in (True, False):
        op = MatchOperator(spec, schema, timezone="UTC")
        if not use_columnar:
            op._columnar = None
        assert op.run_table(table).to_pylist() == [{"a": base, "c": base + 2}]
