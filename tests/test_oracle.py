"""The oracle reproduces every worked result of LANGUAGE.md §5 and §7, and small hand-checked cases."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings

from sparkcep.grammar import parse_query
from sparkcep.ir.ast import Attr, Duration, EquivItem, EquivTest, EventPat, Func, Query, ReturnItem, Seq
from sparkcep.oracles.match import OracleError, match_rows, matches, trend_aggregates
from sparkcep.oracles.sharon import (
    EXAMPLE7_BENEFITS,
    FIGURE4_EDGES,
    figure4_graph,
    gwmin,
    gwmin_guaranteed_weight,
    optimal_plan,
    plan_score,
)
from sparkcep.runtime_udfs.expr.scalar import compile_expr
from tests.strategies import event_streams, strictly_increasing


def stream(text: str, **attrs) -> list[dict]:
    """``"a1 b2 c2"`` → events of types A, B, C at ts 1, 2, 2; ``attrs`` maps a token to extra attributes."""
    return [{"type": tok[0].upper(), "ts": int(tok[1:]), **attrs.get(tok, {})} for tok in text.split()]


def count(pattern: str, events: list[dict], within: int = 100) -> int:
    return len(matches(parse_query(f"PATTERN {pattern} WITHIN {within}"), events))


def labels(found: list[dict], names: dict[int, str]) -> set[tuple[str, ...]]:
    """Each match as the tuple of its events' labels, in time order (``names``: id(event) → label)."""
    out = set()
    for m in found:
        evs = [e for v in m.values() for e in (v if isinstance(v, list) else [v])]
        out.add(tuple(names[id(e)] for e in sorted(evs, key=lambda e: e["ts"])))
    return out


# ------------------------------------------------------------------------------------------ GRETA Fig. 6, 8

FIG6 = stream("a1 b2 c2 a3 e3 a4 c5 d6 b7 a8 b9")


@pytest.mark.parametrize(("pattern", "expected"), [("A+", 15), ("SEQ(A+, B)", 23), ("(SEQ(A+, B))+", 43)])
def test_greta_figure6_trend_counts(pattern, expected):
    assert count(pattern, FIG6) == expected
    rows = trend_aggregates(parse_query(f"RETURN COUNT(*) PATTERN {pattern} WITHIN 100"), FIG6)
    assert rows == [{"window_start": 0, "window_end": 100, "count_all": expected}]


def test_greta_figure6d_negated_subsequence_inside_kleene():
    # GRETA Example 4: e3 breaks (c2, d6), so (c5, d6) is the only trend of NOT SEQ(C, NOT E, D); it
    # invalidates a1, a3, a4 → b7 and → b9.  Trends: (a1 b2); b7 has no valid predecessor; ending at b9 the
    # last a must be a8: any subset of {a1, a3, a4} before it (8), or (a1 b2) then any subset of {a3, a4} (4).
    assert count("(SEQ(A+, NOT SEQ(C, NOT E, D), B))+", FIG6) == 1 + 8 + 4


def test_greta_figure8_start_and_end_negation():
    # Fig. 8(a) SEQ(A+, NOT E): e3 invalidates the a's before it (a1): the trend (a1) alone is lost.
    assert count("SEQ(A+, NOT E)", FIG6) == 15 - 1
    # Fig. 8(b) SEQ(NOT E, A+): e3 invalidates the a's after it as trend starts: (a4), (a4 a8), (a8).
    assert count("SEQ(NOT E, A+)", FIG6) == 15 - 3


# ------------------------------------------------------------------------------------------ GRETA Fig. 12

FIG12 = stream("a1 b2 a3 a4 b7", a1={"attr": 5}, a3={"attr": 6}, a4={"attr": 4})


def test_greta_figure12_aggregates():
    q = parse_query("RETURN COUNT(*), COUNT(A), MIN(A.attr), MAX(A.attr), SUM(A.attr), AVG(A.attr) "
                    "PATTERN (SEQ(A+, B))+ WITHIN 100")
    [row] = trend_aggregates(q, FIG12)
    assert row == {"window_start": 0, "window_end": 100, "count_all": 11, "count_A": 20, "min_A_attr": 4,
                   "max_A_attr": 6, "sum_A_attr": 100, "avg_A_attr": 5}
    assert type(row["count_all"]) is int and type(row["sum_A_attr"]) is int


def test_trend_aggregates_equal_aggregates_over_matches():
    # LANGUAGE.md §6: one semantics — COUNT(*) is the number of skip_till_any_match matches.
    q = parse_query("RETURN COUNT(*) AS n, SUM(A.attr) AS s PATTERN (SEQ(A+, B))+ WITHIN 100")
    found = matches(q, FIG12)
    [row] = trend_aggregates(q, FIG12)
    assert row["n"] == len(found)
    assert row["s"] == sum(a["attr"] for m in found for a in m["A"])


# ------------------------------------------------------------------------------------------ SASE++ Fig. 3

FIG3 = stream("a1 a2 b5 b6 c7")
FIG3_NAMES = {id(e): n for e, n in zip(FIG3, ["a1", "a2", "b1", "b2", "c1"], strict=True)}


@pytest.mark.parametrize(("strategy", "expected"), [
    ("strict_contiguity", {("a2", "b1", "b2", "c1")}),
    ("partition_contiguity", {("a2", "b1", "b2", "c1")}),
    ("skip_till_next_match", {("a1", "b1", "b2", "c1"), ("a2", "b1", "b2", "c1")}),
    ("skip_till_any_match", {("a1", "b1", "c1"), ("a1", "b1", "b2", "c1"), ("a1", "b2", "c1"),
                             ("a2", "b1", "c1"), ("a2", "b1", "b2", "c1"), ("a2", "b2", "c1")}),
])
def test_sase_plus_figure3_strategies(strategy, expected):
    q = parse_query(f"PATTERN SEQ(A a, B+ b[], C c) USING {strategy} WITHIN 10")
    found = matches(q, FIG3)
    assert len(found) == len(expected)
    assert labels(found, FIG3_NAMES) == expected


def test_default_strategy_is_skip_till_any_match():
    assert count("SEQ(A a, B+ b[], C c)", FIG3, within=10) == 6


def test_sase_plus_form_of_the_strategy():
    q = parse_query("PATTERN SEQ(A a, B+ b[], C c) WHERE skip_till_next_match(a, b[], c) { a.ts > 0 } "
                    "WITHIN 10")
    assert len(matches(q, FIG3)) == 2


# ------------------------------------------------------------------------------------------ SASE++ Fig. 4

def test_sase_plus_figure4_postponed_kleene_matches():
    events = [{"type": "A", "ts": 1, "task_id": 7},
              *({"type": "B", "ts": t, "task_id": 7, "val": v} for t, v in [(2, 6), (3, 7), (4, 9)]),
              {"type": "C", "ts": 5, "task_id": 7}]
    q = parse_query("PATTERN SEQ(A a, B+ b[], C c) WHERE [task_id] AND b[i].val >= b[i-1].val WITHIN 100")
    found = matches(q, events)
    assert len(found) == 7  # every non-empty subset of b1 b2 b3 (values increase)
    assert sorted(tuple(b["val"] for b in m["b"]) for m in found) == [
        (6,), (6, 7), (6, 7, 9), (6, 9), (7,), (7, 9), (9,)]


def test_sase_plus_query6_next_match_versus_any_match():
    # SASE++ §2.1: load std values (0.1, 0.2, 0.15, 0.19, 0.25): skip till next match finds only
    # (0.1, 0.2, 0.25); skip till any match also (0.1, 0.15, 0.19, 0.25).
    values = [0.1, 0.2, 0.15, 0.19, 0.25]
    events = [{"type": "ReducerStart", "ts": 0},
              *({"type": "LoadStd", "ts": t, "val": v} for t, v in enumerate(values, start=1)),
              {"type": "ReducerEnd", "ts": 6}]
    text = ("PATTERN SEQ(ReducerStart a, LoadStd+ b[], ReducerEnd c) USING {} "
            "WHERE b[i].val >= b[i-1].val WITHIN 100")
    nxt = matches(parse_query(text.format("skip_till_next_match")), events)
    assert [tuple(b["val"] for b in m["b"]) for m in nxt] == [(0.1, 0.2, 0.25)]
    anym = matches(parse_query(text.format("skip_till_any_match")), events)
    assert (0.1, 0.15, 0.19, 0.25) in {tuple(b["val"] for b in m["b"]) for m in anym}


def test_skip_till_next_match_ignores_irrelevant_events():
    # x=9 is not selectable after a (predicate false), so it may be skipped; b2 (x=1) may not.
    events = stream("a1 b2 b3 b4", a1={"x": 5}, b2={"x": 9}, b3={"x": 1}, b4={"x": 2})
    q = parse_query("PATTERN SEQ(A a, B b) USING skip_till_next_match WHERE a.x > b.x WITHIN 10")
    assert [m["b"]["ts"] for m in matches(q, events)] == [3]


# ------------------------------------------------------------------------------------------ Sharon

def test_sharon_figure4_graph_and_plans():
    g = figure4_graph()
    assert {frozenset(e) for e in g.edges()} == FIGURE4_EDGES
    assert {v: g.nodes[v]["weight"] for v in g} == EXAMPLE7_BENEFITS
    assert gwmin_guaranteed_weight(g) == pytest.approx(25 / 6 + 9 / 4 + 12 / 5 + 15 / 4 + 20 / 5 + 8 / 2 + 18)
    assert round(gwmin_guaranteed_weight(g), 2) == 38.57
    greedy = gwmin(g)
    assert greedy == {"p1", "p7"} and plan_score(g, greedy) == 43
    assert optimal_plan(g) == ({"p2", "p4", "p6", "p7"}, 50)
    # Example 7: the best plan containing p3 scores 38 < 38.57, so p3 is conflict-ridden.
    assert plan_score(g, set(g) - set(g.neighbors("p3"))) == 38


# ------------------------------------------------------------------------------------------ negation

def test_middle_negation_with_negation_predicate():
    q = parse_query("PATTERN SEQ(A a, !(B b), C c) WHERE b.x = a.x WITHIN 10")
    assert len(matches(q, stream("a1 b2 c3", a1={"x": 1}, b2={"x": 2}))) == 1  # b does not satisfy P-
    assert matches(q, stream("a1 b2 c3", a1={"x": 1}, b2={"x": 1})) == []
    # the interval is open: b at the same ts as a or c does not lie between them
    assert len(matches(q, stream("a1 b1 c3 b3", a1={"x": 1}, b1={"x": 1}, b3={"x": 1}))) == 1


def test_start_negation_interval_is_last_minus_window_to_first():
    q = parse_query("PATTERN SEQ(!(B b), C c) WITHIN 5")
    assert len(matches(q, stream("b1 c6"))) == 1  # b1 not in (6 - 5, 6)
    assert matches(q, stream("b2 c6")) == []


def test_end_negation_interval_is_last_to_first_plus_window():
    q = parse_query("PATTERN SEQ(A a, !(B b)) WITHIN 5")
    assert len(matches(q, stream("a1 b6"))) == 1  # b6 not in (1, 1 + 5)
    assert matches(q, stream("a1 b5")) == []
    q2 = parse_query("PATTERN SEQ(A a, C c, !(B b)) WITHIN 5")
    assert matches(q2, stream("a1 c2 b4")) == []  # (c.ts, a.ts + 5)
    assert len(matches(q2, stream("a1 b2 c3"))) == 1


def test_negated_subsequence_and_nested_negation():
    q = parse_query("PATTERN SEQ(A a, NOT SEQ(C c, D d), B b) WITHIN 10")
    assert matches(q, stream("a1 c2 d3 b4")) == []
    assert len(matches(q, stream("a1 d2 c3 b4"))) == 1  # no C-then-D between a and b
    assert len(matches(q, stream("c0 a1 d2 b4"))) == 1  # the C-D trend must lie after a
    nested = parse_query("PATTERN SEQ(A a, NOT SEQ(C c, NOT E e, D d), B b) WITHIN 10")
    assert len(matches(nested, stream("a1 c2 e3 d4 b5"))) == 1  # e3 breaks (c2, d4)
    assert matches(nested, stream("a1 c2 d4 b5")) == []
    assert matches(nested, stream("a1 c2 e3 c4 d5 b6")) == []  # (c4, d5) is a trend of the negation


def test_any_component_lacking_an_attribute():
    # SASE misplaced inventory: a counter reading has no shelf_id, so x.shelf_id = z.shelf_id is TRUE.
    q = parse_query("EVENT SEQ(SHELF-READING x, SHELF-READING y, !(ANY(COUNTER-READING, SHELF-READING) z)) "
                    "WHERE [id] AND x.shelf_id != y.shelf_id AND x.shelf_id = z.shelf_id WITHIN 10")

    def run(*extra):
        evs = [{"type": "SHELF-READING", "ts": 1, "id": 1, "shelf_id": 1},
               {"type": "SHELF-READING", "ts": 2, "id": 1, "shelf_id": 2}, *extra]
        return sorted((m["x"]["ts"], m["y"]["ts"]) for m in matches(q, evs))

    assert run() == [(1, 2)]
    assert run({"type": "COUNTER-READING", "ts": 3, "id": 1}) == []
    # back at shelf 1 cancels (1, 2); the move shelf 2 → shelf 1 is itself a misplacement
    assert run({"type": "SHELF-READING", "ts": 3, "id": 1, "shelf_id": 1}) == [(2, 3)]
    # a reading at shelf 3 does not cancel (1, 2) (x.shelf_id = z.shelf_id is false)
    assert run({"type": "SHELF-READING", "ts": 3, "id": 1, "shelf_id": 3}) == [(1, 2), (1, 3), (2, 3)]
    assert run({"type": "COUNTER-READING", "ts": 3, "id": 2}) == [(1, 2)]  # another item
    # a positive ANY component: the comparison on the lacking attribute holds
    q2 = parse_query("PATTERN SEQ(ANY(A, B) v, C c) WHERE v.x < c.x WITHIN 10")
    assert len(matches(q2, stream("a1 b2 c3", a1={"x": 5}, c3={"x": 1}))) == 1  # only (b2, c3)
    q3 = parse_query("PATTERN SEQ(ANY(A, B) v, C c) WHERE v.x < c.x WITHIN 10 RETURN v.x, v.type")
    assert match_rows(q3, stream("a1 b2 c3", a1={"x": 5}, c3={"x": 1})) == [{"v_x": None, "v_type": "B"}]


# ------------------------------------------------------------------------------------------ patterns

def test_or_of_patterns_gspice_q2():
    q = parse_query("PATTERN SEQ(A a, B b, C c) OR SEQ(D d, E e, F f) "
                    "WHERE (a.v1 < b.v1 AND a.v1 + b.v1 < c.v1) OR (d.v1 < e.v1 AND d.v1 + e.v1 < f.v1) "
                    "WITHIN 250")
    events = stream("a1 d2 b3 e4 c5 f6", a1={"v1": 1}, b3={"v1": 2}, c5={"v1": 9},
                    d2={"v1": 5}, e4={"v1": 4}, f6={"v1": 100})
    found = matches(q, events)
    assert [sorted(m) for m in found] == [["a", "b", "c"]]  # d.v1 < e.v1 fails
    rows = match_rows(q, events, columns=["v1"])
    assert rows == [{"a_v1": 1, "b_v1": 2, "c_v1": 9, "d_v1": None, "e_v1": None, "f_v1": None}]


def test_kleene_star_and_optional_are_sugar():
    assert count("SEQ(A a, B* b[], C c)", stream("a1 b2 c3")) == 2  # (a c), (a b c)
    assert count("SEQ(A a, B? b, C c)", stream("a1 b2 b3 c4")) == 3
    assert count("SEQ(A a, B+ b[], C c)", stream("a1 b2 c3")) == 1


def test_next_relates_adjacent_events_of_a_trend_only():
    # (SEQ(A+, B))+ with A.attr < NEXT(A).attr: a1 and a3 are separated by b2, so they are not adjacent.
    events = stream("a1 b2 a3 b4", a1={"attr": 5}, a3={"attr": 1})
    q = parse_query("PATTERN (SEQ(A+, B))+ WHERE A.attr < NEXT(A).attr WITHIN 100")
    # (a1 b2) (a1 b4) (a3 b4) (a1 a3 b4) (a1 b2 a3 b4); only (a1 a3 b4) violates 5 < 1
    assert count("(SEQ(A+, B))+", events) == 5
    assert len(matches(q, events)) == 4


def test_kleene_predicates_and_aggregates_per_position():
    q = parse_query("PATTERN SEQ(A a, B+ b[]) WHERE b[i].x > avg(b[..i-1].x) WITHIN 100")
    events = stream("a0 b1 b2 b3", b1={"x": 1}, b2={"x": 3}, b3={"x": 2})
    # like b[i-1], the prefix b[..i-1] is defined from the second position on
    assert sorted(tuple(e["x"] for e in m["b"]) for m in matches(q, events)) == [
        (1,), (1, 2), (1, 3), (2,), (3,)]
    q2 = parse_query("PATTERN SEQ(A a, B+ b[]) WHERE b[b.len].x >= 2 * b[1].x WITHIN 100")
    assert sorted(tuple(e["x"] for e in m["b"]) for m in matches(q2, events)) == [(1, 2), (1, 3), (1, 3, 2)]


def test_window_boundary_is_exclusive():
    assert count("SEQ(A a, B b)", stream("a0 b5"), within=5) == 0
    assert count("SEQ(A a, B b)", stream("a0 b4"), within=5) == 1


def test_time_units():
    q = parse_query("PATTERN SEQ(A a, B b) WITHIN 10 seconds")
    assert len(matches(q, stream("a0 b9999"))) == 1  # ts in milliseconds by default
    assert matches(q, stream("a0 b10000")) == []
    assert len(matches(q, stream("a0 b9"), ts_unit_ms=1000)) == 1
    assert matches(q, stream("a0 b10"), ts_unit_ms=1000) == []


def test_equal_timestamps_never_follow_each_other():
    assert count("SEQ(A a, B b)", stream("a1 b1")) == 0
    assert count("A+", stream("a1 a1 a2")) == 5  # (a1), (a1'), (a2), (a1 a2), (a1' a2)
    assert count("A+", stream("a1 a1")) == 2


def test_equivalence_tests_partition():
    ids = {"a1": {"id": 1}, "a2": {"id": 2}, "b3": {"id": 1}, "b4": {"id": 2}}
    events = stream("a1 a2 b3 b4", **ids)
    assert count("SEQ(A a, B b)", events) == 4
    q = parse_query("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 100")
    assert sorted((m["a"]["id"], m["b"]["id"]) for m in matches(q, events)) == [(1, 1), (2, 2)]
    # strict contiguity looks at the whole input, partition contiguity at the partition
    strict = parse_query("PATTERN SEQ(A a, B b) USING strict_contiguity WHERE [id] WITHIN 100")
    part = parse_query("PATTERN SEQ(A a, B b) USING partition_contiguity WHERE [id] WITHIN 100")
    assert matches(strict, events) == []
    assert len(matches(part, events)) == 2
    # a constant test filters; [v.attr] constrains only v
    const = parse_query("PATTERN SEQ(A a, B b) WHERE [id = 2] WITHIN 100")
    assert [(m["a"]["ts"], m["b"]["ts"]) for m in matches(const, events)] == [(2, 4)]
    local = parse_query("PATTERN SEQ(A a, B+ b[]) WHERE [b.id] WITHIN 100")
    assert len(matches(local, events)) == 2 * 2  # a1/a2 × (b3) or (b4); (b3 b4) differ in id


def test_equivalence_test_applies_to_negative_components():
    q = parse_query("PATTERN SEQ(A a, !(B b), C c) WHERE [id] WITHIN 100")
    events = stream("a1 b2 c3", a1={"id": 1}, b2={"id": 2}, c3={"id": 1})
    assert len(matches(q, events)) == 1
    events[1]["id"] = 1
    assert matches(q, events) == []


def test_sase_shoplifting_on_a_tiny_rfid_stream():
    q = parse_query("EVENT SEQ(SHELF-READING x, !(COUNTER-READING y), EXIT-READING z) WHERE [id] "
                    "WITHIN 12 hours")
    hour = 3_600_000
    events = [
        {"type": "SHELF-READING", "ts": 0, "id": "paid"},
        {"type": "SHELF-READING", "ts": 0, "id": "stolen"},
        {"type": "SHELF-READING", "ts": 0, "id": "late"},
        {"type": "COUNTER-READING", "ts": 1 * hour, "id": "paid"},
        {"type": "EXIT-READING", "ts": 2 * hour, "id": "paid"},
        {"type": "EXIT-READING", "ts": 3 * hour, "id": "stolen"},
        {"type": "EXIT-READING", "ts": 12 * hour, "id": "late"},
    ]
    assert [(m["x"]["id"], m["z"]["ts"]) for m in matches(q, events)] == [("stolen", 3 * hour)]
    in_hours = [{**e, "ts": e["ts"] // hour} for e in events]
    assert len(matches(q, in_hours, ts_unit_ms=hour)) == 1


# ------------------------------------------------------------------------------------------ rows, windows

def test_match_rows_default_columns_and_return_items():
    events = stream("a1 b2 b3 c4", b2={"period": 4}, b3={"period": 8})
    q = parse_query("PATTERN SEQ(A a, B+ b[], C c) WITHIN 10")
    rows = match_rows(q, events)  # ordered by the input positions of their events: b2 b3, b2, b3
    assert rows[1] == {"a_type": "A", "a_ts": 1, "a_period": None, "b_type": "B", "b_ts": 2, "b_period": 4,
                       "c_type": "C", "c_ts": 4, "c_period": None}
    assert [r["b_ts"] for r in rows] == [3, 2, 3]  # a Kleene variable shows its last event
    q2 = parse_query("PATTERN SEQ(A a, B+ b[], C c) WITHIN 10 "
                     "RETURN avg(b[].period), max(b[].period) AS top, b[b.len].ts, a.ts + 1")
    assert match_rows(q2, events) == [
        {"avg_b_period": 6, "top": 8, "b_last_ts": 3, "col3": 2},
        {"avg_b_period": 4, "top": 4, "b_last_ts": 2, "col3": 2},
        {"avg_b_period": 8, "top": 8, "b_last_ts": 3, "col3": 2},
    ]


def test_sliding_windows_and_groups():
    q = parse_query("RETURN COUNT(*) PATTERN SEQ(A, B) WITHIN 4 SLIDE 2")
    # windows holding an event: [-2, 2) [0, 4) [2, 6) [4, 8); only [0, 4) holds a trend (a1 b3)
    assert trend_aggregates(q, stream("a1 b3 b5")) == [{"window_start": 0, "window_end": 4, "count_all": 1}]
    q1 = parse_query("RETURN sector, COUNT(*) PATTERN Stock S+ WHERE [company, sector] AND "
                     "S.price > NEXT(S).price GROUP-BY sector WITHIN 10 SLIDE 10")
    events = [{"type": "Stock", "ts": t, "company": c, "sector": s, "price": p} for t, c, s, p in [
        (1, "c1", "s1", 5), (2, "c2", "s1", 3), (3, "c1", "s1", 4), (4, "c3", "s2", 1), (5, "c1", "s1", 6),
        (12, "c3", "s2", 1)]]
    assert trend_aggregates(q1, events) == [
        {"window_start": 0, "window_end": 10, "sector": "s1", "count_all": 4 + 1},  # c1: 5 4 6 (5,4); c2: 3
        {"window_start": 0, "window_end": 10, "sector": "s2", "count_all": 1},
        {"window_start": 10, "window_end": 20, "sector": "s2", "count_all": 1},
    ]


def test_equivalence_attributes_in_return_are_implicit_groups():
    events = stream("a1 b2 a3 b4", a1={"id": 1}, b2={"id": 1}, a3={"id": 2}, b4={"id": 2})
    q = parse_query("RETURN id, COUNT(*) PATTERN SEQ(A, B) WHERE [id] WITHIN 10")
    assert trend_aggregates(q, events) == [
        {"window_start": 0, "window_end": 10, "id": 1, "count_all": 1},
        {"window_start": 0, "window_end": 10, "id": 2, "count_all": 1},
    ]
    total = parse_query("RETURN COUNT(*) PATTERN SEQ(A, B) WHERE [id] WITHIN 10")
    assert trend_aggregates(total, events) == [{"window_start": 0, "window_end": 10, "count_all": 2}]
    with pytest.raises(OracleError):
        trend_aggregates(parse_query("RETURN x, COUNT(*) PATTERN SEQ(A, B) WITHIN 10"), events)


def test_count_of_a_resolved_type_reference():
    # analysis rewrites COUNT(A) to COUNT(<var>.*); both spellings count the events of A
    q = parse_query("RETURN COUNT(A) AS n PATTERN (SEQ(A+, B))+ WITHIN 100")
    resolved = replace(q, returns=(ReturnItem(Func("count", (Attr("A", "*"),)), "n"),))
    assert trend_aggregates(q, FIG12) == trend_aggregates(resolved, FIG12) == [
        {"window_start": 0, "window_end": 100, "n": 20}]


def test_equivalence_test_tolerates_unbound_variables():
    # regression: expr.compile_expr crashed on a binding holding None for a variable (another OR branch)
    f = compile_expr(EquivTest((EquivItem("id"),)))
    assert f({"a": {"id": 1}, "d": None}) is True
    assert f({"a": {"id": 1}, "b": {"id": 2}, "d": None}) is False


def test_negation_in_aggregate_mode_is_bounded_by_the_window():
    q = parse_query("RETURN COUNT(*) PATTERN SEQ(NOT E, A+) WITHIN 10")
    # a match query would drop (a11): e9 lies in (11 - 10, 11).  The trend lies in window [10, 20), which
    # does not hold e9, so it counts there (GRETA §5 case 3: N between the window start and the trend).
    assert trend_aggregates(q, stream("e9 a11")) == [{"window_start": 10, "window_end": 20, "count_all": 1}]
    assert trend_aggregates(q, stream("e11 a12")) == []


def test_query_built_by_hand_without_parser():
    q = Query(Seq((EventPat(("A",), "a"), EventPat(("B",), "b"))), Duration(10))
    assert [(m["a"]["ts"], m["b"]["ts"]) for m in matches(q, stream("a1 b1 a2 b3"))] == [(1, 3), (2, 3)]


def test_wrong_mode_is_an_error():
    with pytest.raises(OracleError):
        match_rows(parse_query("RETURN COUNT(*) PATTERN A+ WITHIN 5"), [])
    with pytest.raises(OracleError):
        trend_aggregates(parse_query("PATTERN A+ WITHIN 5"), [])


# ------------------------------------------------------------------------------------------ properties

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(event_streams(types="ABC", max_size=7))
def test_strategies_select_subsets_of_all_matches(events):
    def keys(strategy):
        q = parse_query(f"PATTERN SEQ(A a, B+ b[], C c) USING {strategy} WHERE [id] WITHIN 8")
        return [tuple(sorted((k, id(e)) for k, v in m.items() for e in (v if isinstance(v, list) else [v])))
                for m in matches(q, events)]

    everything = keys("skip_till_any_match")
    assert len(set(everything)) == len(everything)
    for strategy in ("strict_contiguity", "partition_contiguity", "skip_till_next_match"):
        assert set(keys(strategy)) <= set(everything)
    assert set(keys("strict_contiguity")) <= set(keys("partition_contiguity"))


@FAST
@given(event_streams(types="AB", max_size=8))
def test_count_star_is_the_number_of_matches(events):
    q = parse_query("RETURN COUNT(*) AS n, SUM(A.x) AS s PATTERN (SEQ(A+, B))+ WHERE [id] WITHIN 1000")
    found = matches(q, events)
    rows = trend_aggregates(q, events)
    assert sum(r["n"] for r in rows) == len(found)
    assert sum(r["s"] or 0 for r in rows) == sum(a["x"] for m in found for a in m["A"])


@FAST
@given(event_streams(types="ABC", max_size=7, shuffled=True))
def test_arrival_order_does_not_matter_without_ties(events):
    assume(strictly_increasing(events))
    q = parse_query("PATTERN SEQ(A a, !(C c), B b) WHERE a.x <= b.x AND c.x = a.x WITHIN 6")
    ordered = sorted(events, key=lambda e: e["ts"])
    assert match_rows(q, events) == match_rows(q, ordered)


@pytest.mark.parametrize("text", [
    "PATTERN SEQ(A a, B* v[], C c) WHERE v[2].x > 0 OR a.x > 0 WITHIN 10 RETURN a.ts, v[2].x AS v2",
    "PATTERN SEQ(A a, (SEQ(B v, C w))*, D d) WITHIN 10 RETURN a.ts, v[2].x AS v2",
])
def test_an_absent_repeated_variable_reads_null_at_any_index(text):
    """``v[2]`` of a ``T*`` / ``(P)*`` that matched nothing is NULL (as in the engine), not an error."""
    from sparkcep import compile as compile_query
    from tests.test_match_semantics import run

    events = [{"type": "A", "ts": 1, "x": 1}, {"type": "C", "ts": 2, "x": 2}, {"type": "D", "ts": 3, "x": 3}]
    rows = match_rows(parse_query(text), events)
    assert rows and all(r["v2"] is None for r in rows)
    assert sorted(map(str, rows)) == sorted(map(str, run(compile_query(text).spec(), events)))
