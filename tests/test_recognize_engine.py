"""The MATCH_RECOGNIZE engine (``sparkcep.runtime_udfs.recognize``), pure: hand-made cases whose answers follow
from the standard's rules (worked out in the comments), the pattern program, the streaming shape (micro-batches
with the state through JSON, the watermark with WITHIN) and the guards.  The equivalence with the brute-force
reference over random queries is the oracle's property test."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import pytest

from sparkcep.ir import recognize as R
from sparkcep.ir.ast import Attr, BinOp, Literal, Unary
from sparkcep.ir.errors import CEPError
from sparkcep.runtime_udfs import recognize as engine
from sparkcep.runtime_udfs.recognize import (
    ProgramTooLarge,
    RecognizeBudgetError,
    advance,
    describe_program,
    init_state,
    run_partition,
    sort_key,
    state_from_json,
    state_to_json,
    step,
    wakeup,
)

x = Attr(None, "x")


def V(name):
    return R.PVar(name)


def seq(*items):
    return R.PConcat(tuple(items))


def q(inner, lo, hi=None, greedy=True):
    return R.PQuant(inner, lo, hi, greedy)


def is_(letter):
    return BinOp("=", Attr(None, "t"), Literal(letter))


def spec(pattern, defines=None, measures=None, rows=R.ONE_ROW, skip=None, within=None, subsets=(),
         variables=None, output=None):
    defines = defines if defines is not None else {}
    skip = skip or R.Skip()
    variables = variables or tuple(sorted(_vars(pattern) | set(defines)))
    measures = measures or {"first": R.Nav("FIRST", x, 0), "last": R.Nav("LAST", x, 0),
                            "n": R.Agg("count", None)}
    ms = tuple(R.Measure(e, name) for name, e in measures.items())
    if output is None:
        output = (("t", "x") if rows != R.ONE_ROW else ()) + tuple(measures)
    return R.RecognizeSpec(pattern, variables, tuple(defines.items()), tuple(subsets), ms, rows, skip, (),
                           (R.OrderItem("ts"),), ("t", "x", "ts"), output, within=within)


def _vars(p) -> set[str]:
    if isinstance(p, R.PVar):
        return {p.name}
    kids = getattr(p, "items", None) or getattr(p, "alternatives", None) or (
        (p.inner,) if hasattr(p, "inner") else ())
    return set().union(*(_vars(k) for k in kids)) if kids else set()


def data(letters: str, xs=None, ts=None):
    xs = xs or list(range(1, len(letters) + 1))
    ts = ts or list(range(len(letters)))
    return [{"t": t, "x": v, "ts": s, "__ts": s} for t, v, s in zip(letters, xs, ts, strict=True)]


def spans(out):
    return [(r["first"], r["last"]) for r in out]


LETTERS = {"A": is_("a"), "B": is_("b"), "C": is_("c")}


# ----------------------------------------------------------------------------------------------- matching


def test_greedy_past_last_row_gives_the_issue_two_matches():
    # A B+ over A1 B2 B3 B4 A5 B6: B+ takes B2..B4, then the search resumes at A5
    out = run_partition(spec(seq(V("A"), q(V("B"), 1)), LETTERS), data("abbbab"))
    assert spans(out) == [(1, 4), (5, 6)]
    assert [r["n"] for r in out] == [4, 2]


def test_reluctant_quantifier_prefers_fewer_rows():
    out = run_partition(spec(seq(V("A"), q(V("B"), 1, None, greedy=False)), LETTERS), data("abbbab"))
    assert spans(out) == [(1, 2), (5, 6)]
    # A B*? C: B*? takes as few rows as a C allows; B undefined (true) so it crosses the second a
    out = run_partition(spec(seq(V("A"), q(V("B"), 0, None, greedy=False), V("C")),
                             {"A": is_("a"), "C": is_("c")}), data("abacbc"))
    assert spans(out) == [(1, 4)]


def test_bounded_alternation_backtracks_to_fewer_iterations():
    # (A|B){2,4} C over a b a b a c: from row 1 the 4 iterations a b a b leave row 5 = a, not c; 3 and 2
    # iterations fail too: no match at row 1.  From row 2: b a b a, then c: the match is rows 2..6.
    p = seq(q(R.PAlt((V("A"), V("B"))), 2, 4), V("C"))
    out = run_partition(spec(p, LETTERS), data("ababac"))
    assert spans(out) == [(2, 6)]
    assert out[0]["n"] == 5


def test_v_shape():
    # A B+ C+: B falls, C rises; the first V is 10 8 6 7 9 (C+ greedy takes 7 and 9), the second 5 4 6
    down = BinOp("<", x, R.Nav("PREV", x, 1))
    up = BinOp(">", x, R.Nav("PREV", x, 1))
    measures = {"top": Attr("A", "x"), "bottom": R.Nav("LAST", Attr("B", "x"), 0),
                "end": R.Nav("LAST", Attr("C", "x"), 0)}
    s = spec(seq(V("A"), q(V("B"), 1), q(V("C"), 1)), {"B": down, "C": up}, measures)
    out = run_partition(s, data("x" * 8, xs=[10, 8, 6, 7, 9, 5, 4, 6]))
    assert [(r["top"], r["bottom"], r["end"]) for r in out] == [(10, 6, 9), (5, 4, 6)]


def test_permute_prefers_the_order_of_its_list():
    # PERMUTE(A, B) with A and B always true: A B is tried first, so row 1 is A
    s = spec(R.PPermute((V("A"), V("B"))), {}, {"c1": R.Classifier(), "n": R.Agg("count", None)},
             rows=R.ALL_ROWS)
    out = run_partition(s, data("zz"))
    assert [r["c1"] for r in out] == ["A", "B"]
    # with B true only on 'b' rows, the order B A is the one that matches b a
    s = spec(R.PPermute((V("A"), V("B"))), {"A": is_("a"), "B": is_("b")}, {"c1": R.Classifier()},
             rows=R.ALL_ROWS)
    assert [r["c1"] for r in run_partition(s, data("ba"))] == ["B", "A"]


def test_empty_iteration_beyond_the_minimum_dies():
    # (A??){0,2}: the greedy {0,2} prefers an iteration, whose reluctant A?? prefers no row; that empty
    # iteration is not allowed, so the iteration takes a row: both a's are matched (not an empty match)
    s = spec(q(q(V("A"), 0, 1, greedy=False), 0, 2), LETTERS)
    assert [r["n"] for r in run_partition(s, data("aa"))] == [2]
    s = spec(q(q(V("A"), 0, 1, greedy=False), 0, None), LETTERS)
    assert [r["n"] for r in run_partition(s, data("aaa"))] == [3]


def test_anchors():
    s = spec(seq(q(V("A"), 1), R.PAnchor("end")), LETTERS)
    assert spans(run_partition(s, data("aaba"))) == [(4, 4)]
    s = spec(seq(R.PAnchor("start"), q(V("A"), 1)), LETTERS)
    assert spans(run_partition(s, data("aaba"))) == [(1, 2)]


# ----------------------------------------------------------------------------------------------- AFTER MATCH SKIP


def test_skip_options():
    # A B+ C, A true, over a b b c b c: the first match is rows 1..4 (a b b c)
    p = seq(V("A"), q(V("B"), 1), V("C"))
    d = {"B": is_("b"), "C": is_("c")}
    rows = data("abbcbc")

    def run(skip):
        return spans(run_partition(spec(p, d, skip=skip), rows))

    assert run(R.Skip()) == [(1, 4)]  # resumes at row 5 (b c: no match)
    # row 2 (b b c), row 3 (b c: no B after), row 4 (c b c)
    assert run(R.Skip(R.SKIP_TO_NEXT_ROW)) == [(1, 4), (2, 4), (4, 6)]
    assert run(R.Skip(R.SKIP_TO_LAST, "B")) == [(1, 4), (4, 6)]  # resumes at row 3, the last B
    assert run(R.Skip(R.SKIP_TO_FIRST, "C")) == [(1, 4), (4, 6)]
    # A+ B+ C over a a b b c: TO FIRST B resumes at row 3 (no A there), TO NEXT ROW at row 2 (a b b c)
    p2 = seq(q(V("A"), 1), q(V("B"), 1), V("C"))
    rows2 = data("aabbc")
    assert spans(run_partition(spec(p2, LETTERS, skip=R.Skip(R.SKIP_TO_FIRST, "B")), rows2)) == [(1, 5)]
    assert spans(run_partition(spec(p2, LETTERS, skip=R.Skip(R.SKIP_TO_NEXT_ROW)), rows2)) == [(1, 5), (2, 5)]


def test_skip_to_the_start_row_resumes_at_the_next_row():
    # A B, both true: SKIP TO FIRST A would resume at the match's own first row; it resumes at the next one
    s = spec(seq(V("A"), V("B")), skip=R.Skip(R.SKIP_TO_FIRST, "A"))
    assert spans(run_partition(s, data("zzz"))) == [(1, 2), (2, 3)]


def test_skip_to_a_subset():
    s = spec(seq(V("A"), q(V("B"), 1), V("C")), {"B": is_("b"), "C": is_("c")},
             skip=R.Skip(R.SKIP_TO_LAST, "S"), subsets=(("S", ("A", "B")),))
    assert spans(run_partition(s, data("abbcbc"))) == [(1, 4), (4, 6)]


# ----------------------------------------------------------------------------------------------- output


def test_all_rows_running_and_final_measures():
    measures = {"cls": R.Classifier(), "run_b": R.Nav("LAST", Attr("B", "x"), 0),
                "fin_b": R.Nav("LAST", Attr("B", "x"), 0, "FINAL"), "n": R.Agg("count", None),
                "mn": R.MatchNumber()}
    s = spec(seq(V("A"), q(V("B"), 1)), LETTERS, measures, rows=R.ALL_ROWS)
    out = run_partition(s, data("abbbab"))
    assert [(r["t"], r["cls"], r["run_b"], r["fin_b"], r["n"], r["mn"]) for r in out] == [
        ("a", "A", None, 4, 1, 1), ("b", "B", 2, 4, 2, 1), ("b", "B", 3, 4, 3, 1), ("b", "B", 4, 4, 4, 1),
        ("a", "A", None, 6, 1, 2), ("b", "B", 6, 6, 2, 2)]


def test_exclusion_hides_rows_but_keeps_them_in_the_match():
    s = spec(seq(V("A"), R.PExclude(q(V("B"), 1)), V("C")), LETTERS, {"n": R.Agg("count", None)},
             rows=R.ALL_ROWS)
    assert [(r["t"], r["n"]) for r in run_partition(s, data("abbc"))] == [("a", 1), ("c", 4)]


@pytest.mark.parametrize(("rows", "expected"), [
    # A* over b a b: an empty match at row 1, the match a, an empty match at row 3
    (R.ONE_ROW, [(None, 0, 1), ("A", 1, 2), (None, 0, 3)]),
    (R.ALL_ROWS, [(None, 0, 1), ("A", 1, 2), (None, 0, 3)]),
    (R.ALL_ROWS_OMIT_EMPTY, [("A", 1, 2)]),
    (R.ALL_ROWS_WITH_UNMATCHED, [(None, 0, 1), ("A", 1, 2), (None, 0, 3)]),
])
def test_empty_matches(rows, expected):
    s = spec(q(V("A"), 0), LETTERS, {"cls": R.Classifier(), "n": R.Agg("count", None), "mn": R.MatchNumber()},
             rows=rows)
    assert [(r["cls"], r["n"], r["mn"]) for r in run_partition(s, data("bab"))] == expected


def test_with_unmatched_rows():
    # A+ over b a b: rows 1 and 3 are in no match: output once with every measure NULL
    s = spec(q(V("A"), 1), LETTERS, {"n": R.Agg("count", None), "mn": R.MatchNumber()},
             rows=R.ALL_ROWS_WITH_UNMATCHED)
    out = run_partition(s, data("bab"))
    assert [(r["t"], r["n"], r["mn"]) for r in out] == [("b", None, None), ("a", 1, 1), ("b", None, None)]
    # TO NEXT ROW: row 2 starts no match but is in the first one: not output as unmatched
    s = spec(seq(V("A"), V("B")), {"B": is_("b")}, {"n": R.Agg("count", None)},
             rows=R.ALL_ROWS_WITH_UNMATCHED, skip=R.Skip(R.SKIP_TO_NEXT_ROW))
    assert [(r["t"], r["n"]) for r in run_partition(s, data("abc"))] == [("a", 1), ("b", 2), ("c", None)]


def test_aggregates_per_variable_and_subset():
    measures = {"sa": R.Agg("sum", Attr("A", "x"), "A"), "avg_s": R.Agg("avg", Attr("S", "x"), "S"),
                "mx": R.Agg("max", x), "cb": R.Agg("count", None, "B")}
    s = spec(seq(q(V("A"), 1), q(V("B"), 1), V("C")), LETTERS, measures, subsets=(("S", ("A", "C")),))
    (out,) = run_partition(s, data("aabbc", xs=[1, 2, 10, 20, 4]))
    assert (out["sa"], out["avg_s"], out["mx"], out["cb"]) == (3, 7 / 3, 20, 2)


def test_define_reading_other_variables_and_running_aggregates():
    # A+ B with A: AVG(A.x) < 15 (running, the row being labelled included); B true
    d = {"A": BinOp("<", R.Agg("avg", Attr("A", "x"), "A"), Literal(15))}
    s = spec(seq(q(V("A"), 1), V("B")), d, {"avg": R.Agg("avg", Attr("A", "x"), "A")})
    out = run_partition(s, data("x" * 6, xs=[12, 17, 13, 16, 25, 30]))
    assert [r["avg"] for r in out] == [14.5]  # A = 12 17 13 16, B = 25; then 30 alone: no B after it
    # B's DEFINE reads A's row: B.x > A.x
    d = {"B": BinOp(">", x, Attr("A", "x"))}
    s = spec(seq(V("A"), q(V("B"), 1)), d)
    assert spans(run_partition(s, data("x" * 5, xs=[3, 5, 4, 2, 6]))) == [(3, 4), (2, 6)]


def test_a_bad_value_never_raises():
    # a string where a number is expected, a division by zero: NULL, so the DEFINE is false
    d = {"A": BinOp(">", BinOp("/", x, Literal(0)), Literal(1)), "B": BinOp(">", BinOp("+", x, Literal(1)),
                                                                             Literal(0))}
    s = spec(seq(q(V("A"), 0), V("B")), d)
    out = run_partition(s, data("zzz", xs=["oops", 2, None]))
    assert spans(out) == [(2, 2)]
    s = spec(V("A"), {"A": Unary("IS NULL", x)})
    assert spans(run_partition(s, data("zz", xs=[None, 1]))) == [(None, None)]


# ----------------------------------------------------------------------------------------------- WITHIN, streaming


def test_within_limits_the_span_of_a_match():
    # A B+ with B true, WITHIN 3 over ts 0..5: the greedy B+ stops at ts 2
    s = spec(seq(V("A"), q(V("B"), 1)), within=3)
    assert spans(run_partition(s, data("z" * 6))) == [(1, 3), (4, 6)]


def test_watermark_decides_a_match_once_within_has_passed():
    s = spec(seq(V("A"), q(V("B"), 1)), within=3)
    st = init_state(s)
    st, out = step(s, st, data("zzz"))
    assert out == []  # B+ could still take a row with ts 2
    assert wakeup(s, st) == 3
    st, out = advance(s, st, 2)
    assert out == []  # a row at ts 2 may still come
    st, out = advance(s, st, 3)
    assert spans(out) == [(1, 3)]
    assert wakeup(s, st) is None


def test_streaming_keeps_only_the_rows_that_can_matter():
    # A B with B: x > PREV(x): after many rows, the state holds the undecided start and PREV's reach only
    s = spec(seq(V("A"), V("B")), {"A": is_("a"), "B": BinOp(">", x, R.Nav("PREV", x, 1))})
    st = init_state(s)
    for k in range(50):
        st, _ = step(s, st, [{"t": "b", "x": k, "ts": k, "__ts": k}])
    assert len(st.rows) <= 2


SPECS = [
    spec(seq(V("A"), q(V("B"), 1)), LETTERS),
    spec(seq(V("A"), q(V("B"), 0, None, False), V("C")), {"A": is_("a"), "C": is_("c")}, rows=R.ALL_ROWS),
    spec(seq(q(R.PAlt((V("A"), V("B"))), 2, 4), V("C")), LETTERS, skip=R.Skip(R.SKIP_TO_NEXT_ROW)),
    spec(seq(V("A"), q(V("B"), 1), V("C")), {"B": BinOp(">=", x, Attr("A", "x")), "C": is_("c")},
         rows=R.ALL_ROWS_WITH_UNMATCHED, skip=R.Skip(R.SKIP_TO_LAST, "B")),
    spec(seq(V("A"), R.PExclude(q(V("B"), 0)), V("C")), {"A": is_("a"), "B": BinOp("<", x, R.Nav("PREV", x, 2))},
         rows=R.ALL_ROWS_OMIT_EMPTY, within=4),
    spec(q(V("A"), 0, 2, greedy=False), LETTERS, rows=R.ALL_ROWS),
]


@pytest.mark.parametrize("k", range(len(SPECS)))
def test_micro_batches_with_state_through_json_equal_one_pass(k):
    s = SPECS[k]
    rng = random.Random(k)
    for _ in range(25):
        n = rng.randint(0, 14)
        ts = sorted(rng.randint(0, 10) for _ in range(n))
        rows = data("".join(rng.choice("abc") for _ in range(n)), [rng.randint(0, 5) for _ in range(n)], ts)
        want = run_partition(s, rows)
        st, got, i = init_state(s), [], 0
        while i < n:
            j = i + rng.randint(1, 4)
            st, out = step(s, state_from_json(state_to_json(st)), rows[i:j])
            got += out
            if j < n:  # a watermark the next rows respect
                st, out = advance(s, st, rows[j]["__ts"])
                got += out
            i = j
        st, out = advance(s, state_from_json(state_to_json(st)), None, final=True)
        assert got + out == want


def test_state_json_keeps_values_json_lacks():
    s = spec(seq(V("A"), q(V("B"), 1)), LETTERS, {"n": R.Agg("count", None), "fx": R.Nav("FIRST", x, 0)})
    when = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    rows = [{"t": "a", "x": Decimal("1.5"), "ts": when, "__ts": 0, "d": dt.date(2024, 1, 2)},
            {"t": "b", "x": float("inf"), "ts": when, "__ts": 1, "d": None}]
    st, _ = step(s, init_state(s), rows)
    back = state_from_json(state_to_json(st))
    assert back.rows == rows
    _, out = advance(s, back, None, final=True)
    assert out == [{"n": 2, "fx": Decimal("1.5")}]


# ----------------------------------------------------------------------------------------------- program, guards


def test_describe_program():
    s = spec(seq(V("A"), q(V("B"), 1, None, greedy=False)))
    assert describe_program(s) == ["0: CHAR A", "1: CHAR B", "2: SPLIT 7, 3", "3: ITER 0", "4: CHAR B",
                                   "5: ITER_END 0", "6: JMP 2", "7: MATCH"]
    s = spec(seq(V("A"), R.PExclude(V("B")), R.PAnchor("end")))
    assert describe_program(s) == ["0: CHAR A", "1: CHAR B (excluded)", "2: ANCHOR $", "3: MATCH"]


def test_a_too_large_program_is_refused():
    s = spec(q(q(V("A"), 100), 101))
    with pytest.raises(ProgramTooLarge, match="more than 10,000 instructions"):
        run_partition(s, [])
    assert issubclass(ProgramTooLarge, ValueError)


def test_thread_budget(monkeypatch):
    # (A|B)* C where A and B both hold and read the match (COUNT): every row doubles the partial matches
    monkeypatch.setattr(engine.engine, "MAX_THREADS", 100)
    hist = BinOp(">=", R.Agg("count", None), Literal(0))
    s = spec(seq(q(R.PAlt((V("A"), V("B"))), 0), V("C")), {"A": hist, "B": hist, "C": is_("c")})
    with pytest.raises(RecognizeBudgetError, match="partial matches") as err:
        run_partition(s, data("z" * 12))
    assert isinstance(err.value, CEPError)


def test_sort_key_orders_ties_by_the_other_columns():
    s = spec(V("A"))
    rows = [{"t": "b", "x": 1, "ts": 2}, {"t": None, "x": 1, "ts": 2}, {"t": "a", "x": 9, "ts": 1},
            {"t": "a", "x": None, "ts": 2}]
    assert [(r["ts"], r["t"], r["x"]) for r in sorted(rows, key=sort_key(s))] == [
        (1, "a", 9), (2, None, 1), (2, "a", None), (2, "b", 1)]


def test_later_starts_at_the_same_instruction_are_merged_under_past_last_row():
    # A B+ C with B true and no C yet: every a starts a thread that could live forever; under PAST LAST ROW a
    # later start at the same instruction as the earliest one is skipped whatever happens: one thread per
    # instruction, not one per a (which made long runs quadratic)
    s = spec(seq(V("A"), q(V("B"), 1), V("C")), {"A": is_("a"), "C": is_("c")})
    st, _ = step(s, init_state(s), data("ab" * 100))
    assert len(st.threads) <= 3
    st, out = step(s, st, data("c", ts=[200]))
    assert out == []  # B+ (true on c too) may still take more rows
    st, out = advance(s, st, None, final=True)
    assert [r["n"] for r in out] == [201]


class _CountingRow(dict):
    reads = 0

    def get(self, key, default=None):
        if key == "x":
            _CountingRow.reads += 1
        return super().get(key, default)


def test_running_aggregates_in_define_are_incremental():
    # A+ with A: SUM(A.x) >= 0 and AVG(A.x) < 10 over 600 rows: each row labelled reads x O(1) times, not once
    # per row of the match so far (quadratic); the measures' aggregates likewise once per row
    d = {"A": BinOp("AND", BinOp(">=", R.Agg("sum", Attr("A", "x"), "A"), Literal(0)),
                    BinOp("<", R.Agg("avg", Attr("A", "x"), "A"), Literal(10)))}
    s = spec(q(V("A"), 1), d, {"n": R.Agg("count", x), "s": R.Agg("sum", x)}, rows=R.ALL_ROWS)
    rows = [_CountingRow(r) for r in data("z" * 600, xs=[k % 7 for k in range(600)])]
    _CountingRow.reads = 0
    out = run_partition(s, rows)
    assert [r["n"] for r in out] == list(range(1, 601))
    assert out[-1]["s"] == sum(k % 7 for k in range(600))
    assert _CountingRow.reads < 10 * 600


def test_describe_engine_says_how_threads_are_kept():
    merged = engine.describe_engine(spec(seq(V("A"), q(V("B"), 1)), LETTERS))
    assert any("merged" in line for line in merged)
    apart = engine.describe_engine(spec(seq(V("A"), q(V("B"), 1)), {"B": BinOp(">", x, Attr("A", "x"))},
                                        within=5))
    assert any("kept apart" in line for line in apart)
    assert any("WITHIN (5)" in line for line in apart)
    # which path a batch takes: the columnar kernel, or the row engine and why
    assert any(line.startswith("batch: columnar kernel: DEFINE as one mask") for line in merged)
    assert any(line.startswith("batch: columnar kernel: no (a DEFINE reads rows") for line in apart)


def test_epsilon_closure_does_not_walk_every_path():
    # (A?|B?){40}: 2^40 paths through the empty branches, each state of the closure walked once.  Over a b:
    # from row 1 the first iteration takes a, and an iteration's empty A? is preferred to its B?, so every
    # later iteration is empty: a alone; from row 2 every iteration is empty: an empty match
    p = q(R.PAlt((q(V("A"), 0, 1), q(V("B"), 0, 1))), 40, 40)
    s = spec(p, LETTERS, {"n": R.Agg("count", None)})
    assert [r["n"] for r in run_partition(s, data("ab"))] == [1, 0]


def test_reading_another_variable_skips_runs():
    # B+ with B: B.x > A.x over a run of 60,000 B rows: finding A's row from the row being labelled jumps over
    # the run of B in one step (a walk row by row would be quadratic: minutes)
    import time

    s = spec(seq(V("A"), q(V("B"), 1)), {"B": BinOp(">", x, Attr("A", "x"))})
    n = 60_000
    rows = data("z" * n, xs=list(range(n)))
    began = time.process_time()
    assert spans(run_partition(s, rows)) == [(0, n - 1)]
    assert time.process_time() - began < 10


def test_first_is_kept_on_the_chain():
    # A+ with A: A.x >= FIRST(A.x) over 30,000 rows, ALL ROWS with FIRST(x) per output row: the first row is
    # kept on the chain, not searched for from the last row each time (quadratic: minutes)
    import time

    s = spec(q(V("A"), 1), {"A": BinOp(">=", x, R.Nav("FIRST", Attr("A", "x"), 0))},
             {"f": R.Nav("FIRST", x, 0), "f1": R.Nav("FIRST", x, 1)}, rows=R.ALL_ROWS)
    n = 30_000
    rows = data("z" * n, xs=list(range(n)))
    began = time.process_time()
    out = run_partition(s, rows)
    assert len(out) == n and {r["f"] for r in out} == {0} and [r["f1"] for r in out[:3]] == [None, 1, 1]
    assert time.process_time() - began < 10


def test_next_reads_across_chunks_of_one_partition():
    # a whole partition given in chunks (batch): NEXT(x, 2) in DEFINE and NEXT(x) in MEASURES read the rows
    # after the chunk, as run_partition does; the last rows wait for them
    d = {"B": BinOp("<", x, R.Nav("NEXT", x, 2))}
    s = spec(seq(V("A"), q(V("B"), 1)), d, {"n": R.Agg("count", None), "after": R.Nav("NEXT", x, 1)})
    rows = data("z" * 12, xs=[5, 1, 2, 3, 4, 0, 9, 1, 2, 8, 3, 4])
    want = run_partition(s, rows)
    # B holds at rows 2 3 5 6 8 9 (1-based): matches rows 1-3, 4-6, 7-9, each followed by x = 3, 9, 8
    assert want == [{"n": 3, "after": 3}, {"n": 3, "after": 9}, {"n": 3, "after": 8}]
    for size in (1, 2, 5):
        st, got = init_state(s), []
        for i in range(0, len(rows), size):
            st, out = step(s, st, rows[i:i + size])
            got += out
        st, out = advance(s, st, None, final=True)
        assert got + out == want


def test_compiled_comparisons_follow_spark_for_every_operand_pair():
    # DEFINE comparisons take a shortcut for two strings, two BIGINTs, two non-NaN DOUBLEs: every pair of values
    # of different kinds (and NaN, NULL, booleans) must still compare as runtime_udfs.expr.scalar._compare does
    from sparkcep.runtime_udfs.expr.scalar import _CMP, _compare
    from sparkcep.runtime_udfs.recognize.evaluate import Ctx, compile_expr

    nan = float("nan")
    values = [None, 1, 2, 1.0, 2.5, nan, "1", "2.5", "a", "b", "", True, False, -(2**63), 2**63 - 1]
    ctx = Ctx([{"x": None, "y": None}])
    head = (0, 0, 0, None, None, None)
    exprs = {op: (compile_expr(BinOp(op, x, Attr(None, "y")), {"A": frozenset((0,))}, ("A",), define=0),
                  [compile_expr(BinOp(op, x, Literal(v)), {"A": frozenset((0,))}, ("A",), define=0)
                   for v in values]) for op in _CMP}
    for op, (both, literal) in exprs.items():
        for a in values:
            for j, b in enumerate(values):
                ctx.rows[0] = {"x": a, "y": b}
                want = _compare(_CMP[op], a, b)
                assert both(ctx, head, head) == want and type(both(ctx, head, head)) is type(want), (a, op, b)
                got = literal[j](ctx, head, head)
                assert got == want and type(got) is type(want), (a, op, b)
