"""The SASE match engine (``runtime_udfs.match.engine``) without a JVM: hand-checked cases and a property test
against the oracle on random queries, streams, micro-batch splits and watermark advances."""

from __future__ import annotations

import math
import pickle
import random
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.compiler.plan.nodes import Sequence as SequenceNode
from sparkcep.compiler.plan.nodes import chain
from sparkcep.ir.ast import (
    Attr,
    BinOp,
    Duration,
    EquivItem,
    EquivTest,
    EventPat,
    Kleene,
    Literal,
    Not,
    Query,
    ReturnItem,
    Seq,
    and_all,
    conjuncts,
    walk,
)
from sparkcep.ir.errors import CEPError
from sparkcep.ir.naming import column_name, dedupe, default_column
from sparkcep.ir.printer import format_expr as printed
from sparkcep.ir.spec import Component, MatchSpec, OutputColumn
from sparkcep.oracles.match import match_rows
from sparkcep.runtime_udfs.expr.scalar import LACKING
from sparkcep.runtime_udfs.match.compile import Plan
from sparkcep.runtime_udfs.match.conjuncts import AggStats
from sparkcep.runtime_udfs.match.engine import (
    EngineUnsupportedError,
    MatchState,
    advance,
    check,
    init_state,
    is_empty,
    step,
    wakeup,
)
from sparkcep.runtime_udfs.match.negation import NegIndex
from tests.strategies import deliveries, event_streams

ATTRS = ("type", "ts", "x", "id")


# ----------------------------------------------------------------------------------------------- helpers


def spec_for(query: Query, columns: Sequence[str] = ATTRS) -> MatchSpec:
    """The engine spec of a flat SEQ query, as the compiler builds it: ``[attr]`` tests become the key,
    one-variable conjuncts the components' local predicates, the others the parameterized predicates."""
    items = query.pattern.items if isinstance(query.pattern, Seq) else (query.pattern,)
    local: dict[str, list] = {p.var: [] for p in items}
    key, predicates = [], []
    for c in conjuncts(query.where):
        if isinstance(c, EquivTest):
            key.extend(i.attr for i in c.items)
            continue
        names = {n.var for n in walk(c) if isinstance(n, Attr)}
        if len(names) == 1:
            local[names.pop()].append(c)
        else:
            predicates.append(c)
    components = tuple(Component(p.var, p.types, p.any_, local=and_all(local[p.var])) for p in items)
    if query.returns is not None:
        names = dedupe([column_name(r, k) for k, r in enumerate(query.returns)])
        outputs = tuple(OutputColumn(n, r.expr) for n, r in zip(names, query.returns, strict=True))
    else:
        outputs = tuple(OutputColumn(default_column(p.var, a), Attr(p.var, a)) for p in items for a in columns)
    return MatchSpec(components, tuple(predicates), query.within.value, outputs, key=tuple(key))


def seq_query(*pats: EventPat, where=None, within: float = 10, returns=None) -> Query:
    return Query(Seq(pats), Duration(within), where=where,
                 returns=None if returns is None else tuple(ReturnItem(r) for r in returns))


def ev(type_: str, ts, **attrs) -> dict:
    return {"type": type_, "ts": ts, **attrs}


def run(spec: MatchSpec, events: Sequence[dict]) -> list[dict]:
    """All matches of one partition: every event in one step, then a flush."""
    state, _ = step(spec, init_state(), events)
    state, rows = advance(spec, state, math.inf)
    assert is_empty(state)
    return rows


def canonical(rows: list[dict]) -> list[str]:
    """Rows as a sorted multiset; a lacking attribute (``expr.LACKING``, as the oracle may report it) is
    None, as the engine reports it."""
    return sorted(repr(sorted((k, None if v is LACKING else v) for k, v in r.items())) for r in rows)


def partitions(spec: MatchSpec, events: Sequence[dict]) -> dict[tuple, list[dict]]:
    """The caller's partitioning by the equivalence key (a missing attribute is the None partition)."""
    out: dict[tuple, list[dict]] = {}
    for e in events:
        out.setdefault(tuple(e.get(a) for a in spec.key), []).append(e)
    return out


A, B, C = EventPat(("A",), "a"), EventPat(("B",), "b"), EventPat(("C",), "c")
AB_TS = (Attr("a", "ts"), Attr("b", "ts"))


def lt(left, right) -> BinOp:
    return BinOp("<", left, right)


# ----------------------------------------------------------------------------------------------- unit cases


def test_window_is_exclusive():
    spec = spec_for(seq_query(A, B, within=10, returns=AB_TS))
    assert run(spec, [ev("A", 0), ev("B", 10)]) == []
    assert run(spec, [ev("A", 0), ev("B", 9)]) == [{"a_ts": 0, "b_ts": 9}]


def test_window_bounds_the_whole_match_not_each_step():
    spec = spec_for(seq_query(A, B, C, within=10, returns=(Attr("a", "ts"), Attr("c", "ts"))))
    assert run(spec, [ev("A", 0), ev("B", 5), ev("C", 10)]) == []
    assert run(spec, [ev("A", 1), ev("B", 5), ev("C", 10)]) == [{"a_ts": 1, "c_ts": 10}]


def test_equal_timestamps_never_follow_each_other():
    spec = spec_for(seq_query(A, B, returns=AB_TS))
    assert run(spec, [ev("A", 1), ev("B", 1)]) == []
    rows = run(spec, [ev("A", 1), ev("A", 1), ev("B", 1), ev("B", 2)])
    assert rows == [{"a_ts": 1, "b_ts": 2}, {"a_ts": 1, "b_ts": 2}]


def test_one_event_fills_two_components_but_not_twice_in_one_match():
    spec = spec_for(seq_query(EventPat(("A",), "a"), EventPat(("A",), "b"),
                              returns=(Attr("a", "x"), Attr("b", "x"))))
    rows = run(spec, [ev("A", 1, x=1), ev("A", 2, x=2), ev("A", 2, x=3), ev("A", 3, x=4)])
    assert canonical(rows) == canonical([{"a_x": a, "b_x": b}
                                         for a, b in [(1, 2), (1, 3), (1, 4), (2, 4), (3, 4)]])


def test_single_component_query():
    spec = spec_for(seq_query(A, where=BinOp(">", Attr("a", "x"), Literal(1)), returns=(Attr("a", "x"),)))
    assert run(spec, [ev("A", 1, x=1), ev("A", 2, x=2), ev("B", 3, x=3)]) == [{"a_x": 2}]


def test_any_component_and_the_lacking_attribute_rule():
    any_b = EventPat(("B", "C"), "b", any_=True)
    spec = spec_for(seq_query(A, any_b, where=lt(Attr("a", "x"), Attr("b", "y")),
                              returns=(Attr("b", "type"), Attr("b", "y"))))
    rows = run(spec, [ev("A", 1, x=5), ev("B", 2, y=9), ev("C", 3, y=1), ev("C", 4), ev("D", 5, y=9)])
    # c4 lacks y: the comparison is TRUE, and the output value is None
    assert rows == [{"b_type": "B", "b_y": 9}, {"b_type": "C", "b_y": None}]


def test_parameterized_predicates_across_non_adjacent_components():
    where = and_all([lt(Attr("a", "x"), Attr("c", "x")), BinOp("!=", Attr("b", "x"), Attr("c", "x"))])
    spec = spec_for(seq_query(A, B, C, where=where, returns=(Attr("a", "x"), Attr("b", "x"), Attr("c", "x"))))
    rows = run(spec, [ev("A", 1, x=1), ev("A", 2, x=3), ev("B", 3, x=2), ev("B", 4, x=4), ev("C", 5, x=2)])
    assert rows == [{"a_x": 1, "b_x": 4, "c_x": 2}]


def test_null_comparisons_do_not_hold():
    spec = spec_for(seq_query(A, B, where=lt(Attr("a", "x"), Attr("b", "x")), returns=AB_TS))
    assert run(spec, [ev("A", 1, x=None), ev("B", 2, x=3), ev("A", 3, x=float("nan")), ev("B", 4, x=5)]) == []


def test_mask_is_trusted_and_zero_masks_are_dropped():
    spec = spec_for(seq_query(A, B, where=BinOp(">", Attr("a", "x"), Literal(3)), returns=AB_TS))
    # no mask: type and local predicate are tested by the engine
    assert run(spec, [ev("A", 1, x=1), ev("B", 2)]) == []
    # a mask says which components an event may fill, whatever its type and attributes
    assert run(spec, [ev("A", 1, x=1, _mask=1), ev("Z", 2, _mask=2)]) == [{"a_ts": 1, "b_ts": 2}]
    assert run(spec, [ev("A", 1, x=9, _mask=0), ev("B", 2, _mask=2)]) == []
    # a null or NaN mask means "not prefiltered"
    assert run(spec, [ev("A", 1, x=9, _mask=None), ev("B", 2, _mask=float("nan"))]) == [{"a_ts": 1, "b_ts": 2}]


def test_out_of_order_arrival_across_steps():
    spec = spec_for(seq_query(A, B, C, within=100, returns=(Attr("a", "ts"), Attr("b", "ts"), Attr("c", "ts"))))
    events = [ev("A", 1), ev("B", 2), ev("A", 3), ev("B", 4), ev("C", 5), ev("C", 6)]
    state = init_state()
    for e in reversed(events):
        state, rows = step(spec, state, [e])
        assert rows == []
    state, rows = advance(spec, state, 6)
    assert canonical(rows) == canonical(run(spec, events))
    assert len(rows) == 6


def test_advance_processes_only_up_to_the_watermark_and_emits_once():
    spec = spec_for(seq_query(A, B, returns=AB_TS))
    state, _ = step(spec, init_state(), [ev("B", 5), ev("A", 1), ev("B", 3), ev("B", 9)])
    state, rows = advance(spec, state, 4)
    assert rows == [{"a_ts": 1, "b_ts": 3}]
    state, rows = advance(spec, state, 4)
    assert rows == []
    state, rows = advance(spec, state, 5)
    assert rows == [{"a_ts": 1, "b_ts": 5}]
    assert wakeup(spec, state) == 9
    state, rows = advance(spec, state, 20)
    assert rows == [{"a_ts": 1, "b_ts": 9}]
    assert is_empty(state)


def test_late_and_invalid_events_are_counted_not_matched():
    """Only an event older than the processed watermark is late (LANGUAGE.md §1): B at the watermark's ts
    still matches."""
    spec = spec_for(seq_query(A, B, returns=AB_TS))
    state, _ = step(spec, init_state(), [ev("A", 1)])
    state, _ = advance(spec, state, 4)
    state, _ = step(spec, state, [ev("B", 4), ev("B", 3), ev("B", None), ev("B", float("nan")), ev("B", 6)])
    assert (state.late, state.invalid) == (1, 2)
    state, rows = advance(spec, state, math.inf)
    assert rows == [{"a_ts": 1, "b_ts": 4}, {"a_ts": 1, "b_ts": 6}]
    state, _ = step(spec, state, [ev("A", 100)])
    assert state.late == 2


def test_events_at_the_processed_watermark_are_matched_but_never_follow_its_ties():
    """Events arriving at the ts of the watermark already processed (ties straddling micro-batches, lateness
    0) are matched, after the processed events of that ts, and none of those precedes them."""
    spec = spec_for(seq_query(A, B, returns=AB_TS))
    state, _ = step(spec, init_state(), [ev("A", 1), ev("A", 2), ev("B", 2)])
    state, rows = advance(spec, state, 2)
    assert rows == [{"a_ts": 1, "b_ts": 2}]
    state, _ = step(spec, state, [ev("B", 2), ev("A", 2)])
    state, rows = advance(spec, state, 2)  # the same watermark: the new events of its ts are processed
    assert rows == [{"a_ts": 1, "b_ts": 2}] and state.late == 0
    state, _ = step(spec, state, [ev("B", 3)])
    state, rows = advance(spec, state, math.inf)
    assert sorted(r["a_ts"] for r in rows) == [1, 2, 2]


def test_state_is_pruned_to_the_window_on_a_long_stream():
    spec = spec_for(seq_query(A, B, C, where=lt(Attr("a", "x"), Attr("c", "x")), within=50,
                              returns=(Attr("a", "ts"), Attr("c", "ts"))))
    rnd = random.Random(7)
    state, produced, live, stored = init_state(), 0, 0, 0
    for chunk in range(200):
        batch = [ev(rnd.choice("ABC"), chunk * 100 + i, x=rnd.randint(0, 9)) for i in range(100)]
        rnd.shuffle(batch)
        state, _ = step(spec, state, batch)
        state, rows = advance(spec, state, chunk * 100 + 49)
        produced += len(rows)
        live = max(live, state.live_instances())
        stored = max(stored, state.stored())
    # one event per ts unit: the last 50 ts units hold at most 50 live A/B instances; 50 events are pending
    # past the watermark; pruned entries are compacted away once they are half of a stack
    assert live <= 50
    assert stored < 4 * 100
    assert len(pickle.dumps(state)) < 20_000
    assert produced > 1000
    state, _ = advance(spec, state, math.inf)
    assert is_empty(state)


def test_wakeup_when_only_live_instances_are_left():
    spec = spec_for(seq_query(A, B, within=10, returns=AB_TS))
    state, _ = step(spec, init_state(), [ev("A", 3), ev("A", 5)])
    state, _ = advance(spec, state, 6)
    assert not is_empty(state) and wakeup(spec, state) == 15
    state, _ = advance(spec, state, 14)
    assert not is_empty(state)
    state, _ = advance(spec, state, 15)
    assert is_empty(state) and wakeup(spec, state) is None


@pytest.mark.parametrize("codec", ["to_bytes", "pickle"])
def test_state_round_trip_mid_stream_gives_identical_results(codec):
    any_b = EventPat(("B", "C"), "b", any_=True)
    spec = spec_for(seq_query(A, any_b, C, where=lt(Attr("a", "x"), Attr("c", "x")), within=30))
    rnd = random.Random(3)
    events = [ev(rnd.choice("ABC"), i // 2, x=rnd.randint(0, 5), id=rnd.choice([1, None]))
              for i in range(400)]
    for e in events[::7]:
        del e["x"]  # some events lack an attribute (and the serialized columns differ per event)

    def feed(round_trip: bool) -> list[dict]:
        state, out = init_state(), []
        for k in range(0, len(events), 40):
            batch = events[k:k + 40]
            state, _ = step(spec, state, batch[::-1])
            if round_trip:
                state = (MatchState.from_bytes(state.to_bytes()) if codec == "to_bytes"
                         else pickle.loads(pickle.dumps(state)))
            state, rows = advance(spec, state, events[k]["ts"])
            out += rows
            if round_trip:
                state = MatchState.from_bytes(state.to_bytes())
        return out + advance(spec, state, math.inf)[1]

    plain, restored = feed(False), feed(True)
    assert plain == restored
    assert canonical(plain) == canonical(match_rows(seq_query(A, any_b, C, where=spec.predicates[0],
                                                              within=30), events, ATTRS))


def test_serialized_state_rejects_another_version():
    state = init_state()
    payload = list(pickle.loads(state.to_bytes()))
    payload[0] = 999
    with pytest.raises(CEPError, match="version 999"):
        MatchState.from_bytes(pickle.dumps(tuple(payload)))


@pytest.mark.parametrize(("pattern", "strategy", "message"), [
    (Seq((A, Kleene(Seq((B, C)), "+"))), "skip_till_any_match", "Kleene closure over a sub-pattern"),
    (Seq((A, Not(Kleene(B, "+")))), "skip_till_any_match", "negation of a sub-pattern"),
    (Seq((A, EventPat(("D",), "d"))), "skip_till_next_match", "not among the spec's components"),
    (Seq((A, Not(B))), "no_such_strategy", "unknown selection strategy"),
])
def test_unsupported_specs_raise_a_clear_error(pattern, strategy, message):
    comps = (Component("a", ("A",)), Component("b", ("B",)), Component("c", ("C",)))
    spec = MatchSpec(comps, (), 10, (), strategy, pattern=pattern)
    with pytest.raises(EngineUnsupportedError, match=message) as info:
        check(spec)
    assert isinstance(info.value, CEPError) and isinstance(info.value, NotImplementedError)
    with pytest.raises(EngineUnsupportedError):
        advance(spec, init_state(), 1)


def test_predicate_on_an_unknown_variable_is_an_error():
    spec = MatchSpec((Component("a", ("A",)),), (lt(Attr("a", "x"), Attr("q", "x")),), 10, ())
    with pytest.raises(CEPError, match="unknown variable 'q'"):
        check(spec)


# ----------------------------------------------------------------------------------------------- property


TYPES = ("A", "B", "C")
OPS = ("<", "<=", ">", ">=", "=", "!=")


@st.composite
def seq_queries(draw) -> Query:
    """Random ``SEQ`` of 2–4 single (possibly ANY) components with ``[id]``, local and parameterized
    predicates, a window, and either RETURN items or the default columns."""
    n = draw(st.integers(2, 4))
    pats = []
    for k in range(n):
        types = tuple(draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=2, unique=True)))
        pats.append(EventPat(types, f"v{k}", any_=len(types) > 1))
    variables = [p.var for p in pats]
    where = []
    if draw(st.booleans()):
        where.append(EquivTest((EquivItem("id"),)))
    for var in draw(st.lists(st.sampled_from(variables), max_size=2)):
        where.append(BinOp(draw(st.sampled_from(OPS)), Attr(var, "x"), Literal(draw(st.integers(0, 4)))))
    for _ in range(draw(st.integers(0, 2))):
        left, right = draw(st.lists(st.sampled_from(variables), min_size=2, max_size=2, unique=True))
        if draw(st.booleans()):
            where.append(BinOp(draw(st.sampled_from(OPS)), Attr(left, "x"), Attr(right, "x")))
        else:
            total = BinOp("+", Attr(left, "x"), Attr(right, "x"))
            where.append(BinOp(">", total, Literal(draw(st.integers(0, 8)))))
    returns = None
    if draw(st.booleans()):
        returns = [Attr(v, draw(st.sampled_from(("ts", "x", "type")))) for v in variables]
    return seq_query(*pats, where=and_all(where), within=draw(st.integers(1, 12)), returns=returns)


def stream_through_engine(spec: MatchSpec, lateness: int, batches) -> list[dict]:
    """Feed one partition's batches like a streaming job: the watermark is Spark's, the newest ts minus the
    lateness, so an event may still come at the watermark's very ts (LANGUAGE.md §1: only an event older than
    that is late) and none is late; ``wakeup`` never asks for a watermark already passed; then a flush.

    Events carrying ``_seq`` (contiguity, skip_till_next_match) are ranked by it among equal timestamps,
    which the engine can only do for the events of one ts it has all: there the watermark stays one below."""
    ranked = any("_seq" in e for batch, _, _ in batches for e in batch)
    state, out, newest = init_state(), [], -math.inf
    for batch, move, round_trip in batches:
        state, rows = step(spec, state, batch)
        out += rows
        newest = max([newest, *(e["ts"] for e in batch)])
        if move:
            watermark = newest - lateness - (1 if ranked else 0)
            state, rows = advance(spec, state, watermark)
            out += rows
            due = wakeup(spec, state)
            assert due is None or due > watermark
        if round_trip:
            state = MatchState.from_bytes(state.to_bytes())
    state, rows = advance(spec, state, math.inf)
    assert state.late == 0 and is_empty(state)
    return out + rows


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(query=seq_queries(), events=event_streams(TYPES, max_size=9, lacking=True, shuffled=True),
       data=st.data())
def test_engine_agrees_with_oracle(query, events, data):
    spec = spec_for(query)
    got = []
    for part in partitions(spec, events).values():
        lateness, batches = data.draw(deliveries(part))
        got += stream_through_engine(spec, lateness, batches)
    assert canonical(got) == canonical(match_rows(query, events, ATTRS))


COMPILED = [
    "PATTERN SEQ(A a, B b, C c) WHERE [id] AND a.x < b.x AND a.x + b.x < c.x WITHIN 6 RETURN a.ts, c.ts",
    "PATTERN SEQ(A x, A y, ANY(B, C) z) WHERE [id] AND x.x != y.x AND z.x > 1 WITHIN 4 "
    "RETURN x.ts, z.type, x.x + y.x AS s",
]


@pytest.mark.parametrize("text", COMPILED)
@settings(max_examples=100, deadline=None)
@given(events=event_streams(TYPES, max_size=9, lacking=True, shuffled=True))
def test_spec_from_the_compiler_agrees_with_oracle(text, events):
    """The contract with the compiler: the MatchSpec of ``sparkcep.compile(text).plan()`` runs here."""
    compiled = sparkcep.compile(text)
    spec = next(n for n in chain(compiled.plan()) if isinstance(n, SequenceNode)).spec
    got = [row for part in partitions(spec, events).values() for row in run(spec, part)]
    assert canonical(got) == canonical(match_rows(compiled.query, events))


# ----------------------------------------------------------------------------------------------- internals


def test_kleene_predicates_are_classified_by_consistency():
    """SASE++ §5.2: each conjunct on ``b`` lands in the class that decides it earliest."""
    spec = sparkcep.compile(
        "PATTERN SEQ(A a, B+ b[], C c) WHERE b[i].x > a.x AND b[i].x > max(b[..i-1].x) "
        "AND b[i].x > min(b[..i-1].x) AND b[i].x >= b[i-1].x AND c.x < max(b[].x) "
        "AND b[b.len].x > avg(b[].x) AND b[1].x < c.x AND b[i].x > avg(b[..i-1].x) WITHIN 10").spec()
    kc = Plan(spec).alternatives[0].schedule("ais").kleene[1]
    text = {id(c): printed(c.expr) for c in (*kc.elem, *kc.first, *kc.whole, *(e[0] for e in kc.each),
                                             *(m.conj for m in kc.prefix))}

    def names(conjs):
        return sorted(text[id(c)] for c in conjs)

    assert names(kc.elem) == ["b[i].x > a.x"]
    assert names(kc.first) == ["b[1].x < c.x"]
    assert names(e[0] for e in kc.each) == ["b[i].x > AVG(b[..i-1].x)", "b[i].x >= b[i-1].x"]
    assert names(kc.whole) == ["b[b.len].x > AVG(b[].x)", "c.x < MAX(b[].x)"]
    stats = {"x": AggStats()}
    for value in (1, 2):
        stats["x"].add(value)
    polarity = {text[id(m.conj)]: m.polarity(stats) for m in kc.prefix}
    assert polarity == {"b[i].x > MAX(b[..i-1].x)": -1, "b[i].x > MIN(b[..i-1].x)": 1}
    assert [printed(c.expr) for c in kc.whole_mono] == ["c.x < MAX(b[].x)"]
    assert next(iter(kc.whole_mono.values())).polarity(stats) == 1


def test_negation_index_probes_one_bucket_and_keeps_sql_semantics():
    """P- ``z.k = a.k`` makes ``k`` the index key; ``z.y > a.y`` is evaluated on what the probe finds.  A
    NaN or missing ``k`` on the ANY component is *lacking* (TRUE against any probe, SASE §2.2); an unhashable
    value is compared, not hashed."""
    spec = sparkcep.compile("PATTERN SEQ(A a, !(ANY(B, D) z), C c) WHERE z.k = a.k AND z.y > a.y "
                            "WITHIN 100").spec()
    plan = Plan(spec).alternatives[0].negs[0]
    assert plan.key_attr == "k" and [printed(c.expr) for c in plan.rest] == ["z.y > a.y"]
    index = NegIndex()
    for e in [ev("B", 2, k=1, y=5), ev("B", 3, k=2, y=0), ev("D", 4, y=5), ev("B", 5, k=float("nan"), y=0),
              ev("B", 6, k=[1], y=5)]:
        index.add(plan, e["ts"], e)
    assert sorted(index.buckets) == [1, 2] and [t for t, _ in index.loose] == [4, 5, 6]

    def blocked(k, lo, hi):
        return index.blocked(plan, {"a": {"k": k, "y": 1}, "z": None, "c": None}, lo, hi)

    assert blocked(1, 1, 3) and not blocked(1, 2, 3)  # the interval is open
    assert not blocked(2, 1, 4)  # b3 has k = 2 but y = 0
    assert blocked(2, 1, 5)  # d4 lacks k: the equality is TRUE
    assert blocked(None, 3.5, 4.5) and not blocked(None, 1, 3.5)  # a NULL probe meets only lacking events
    assert not blocked(7, 5.5, 7) and blocked([1], 5.5, 7)
    index.prune(4)
    assert [t for t, _ in index.events] == [5, 6] and not index.buckets and len(index.loose) == 2
