"""Cost of the general negation check (``match_negation.GeneralNeg``) of the pure match engine, in one process.

1. On queries a fast path checks exactly (a negated sequence with a negated event inside, ``NOT T+`` with a
   ``v[i]`` predicate), the engine as compiled (fast path) against the same engine forced to run the general
   check on every negation: same matches (checked); events/s of each and the ratio.
2. ``SEQ(A a, NOT B+ b[], C c)`` over repeated ``A B^n C`` with every ``x = 1``, where no subset of the ``n``
   B's blocks: ``WHERE sum(b[].x) > n`` (a monotone aggregate: false on all the gap's B's, so on every subset,
   decided before any search) and ``WHERE avg(b[].x) > 1`` (decided on single events, since some subset's
   average is above 1 iff some single value is: ``match_negation._avg_threshold``), against ``WHERE b[i].x > n``
   (the fast path, ``NOT B``) on the same stream; and ``avg(b[].x) > 1`` with that rule switched off (the search
   tries all 2^n - 1 subsets, the worst case), the baseline of the rule.

    python bench/negation_general.py [--events 30000] [--gaps 4,8,12,16] [--repeat 3]

State the machine next to the figures (the project's reference is a 2-core VM).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import match_engine as match_engine_bench  # noqa: E402  (bench/match_engine.py: the stream and the feed loop)

import sparkcep  # noqa: E402
from sparkcep.runtime_udfs.match import engine as match_engine
from sparkcep.runtime_udfs.match import negation as match_negation

FAST_PATH_QUERIES = [
    "PATTERN SEQ(A a, !(SEQ(B b, !(D z), C c)), E e) WHERE c.x > b.x WITHIN 12 RETURN a.ts, e.ts",
    "PATTERN SEQ(A a, !(B+ b[]), C c) WHERE b[i].x > a.x WITHIN 12 RETURN a.ts, c.ts",
    "PATTERN SEQ(A a, C c, !(SEQ(B b, !(D z), E e))) WHERE e.x > b.x WITHIN 12 RETURN a.ts, c.ts",
]


def stream(n: int, seed: int = 1) -> list[dict]:
    return match_engine_bench.stream(n, seed, types="ABCDE")


def run_engine(spec, events, batch: int = 5_000) -> int:
    return match_engine_bench.run_engine(spec, events, batch)


def everything_general(pattern, exprs, kleene_vars):
    """``general_negations`` that sends every negation to the general check."""
    nots = frozenset(match_negation._outermost_negations(pattern))
    return nots, frozenset(v for n in nots for v in match_negation._is_listed(n))


def fresh() -> None:
    match_engine._compile.cache_clear()
    match_engine._last = (None, None)


def timed(spec, events, repeat: int, general: bool, subsets: bool = False) -> tuple[float, int]:
    """Median time and match count; ``subsets``: without the single-event rule for ``avg`` thresholds."""
    times, found = [], None
    with mock.patch.object(match_negation, "general_negations",
                           everything_general if general else match_negation.general_negations), \
            mock.patch.object(match_negation, "_avg_threshold",
                              (lambda *_: None) if subsets else match_negation._avg_threshold):
        fresh()
        plan = match_engine._plan(spec)
        assert all((n.general is not None) == general for a in plan.alternatives for n in a.negs)
        for _ in range(repeat):
            start = time.perf_counter()
            found = run_engine(spec, events)
            times.append(time.perf_counter() - start)
    fresh()
    return statistics.median(times), found


def worst_case_stream(gap: int, blocks: int) -> list[dict]:
    events, ts = [], 0
    for _ in range(blocks):
        for t in ["A"] + ["B"] * gap + ["C"]:
            events.append({"type": t, "ts": ts, "x": 1})
            ts += 1
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--gaps", default="4,8,12,16")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    events = stream(args.events)
    print(f"1. fast path vs general check, {args.events} events (types A-E uniform), median of {args.repeat}")
    for text in FAST_PATH_QUERIES:
        spec = sparkcep.compile(text).spec()
        fast, n_fast = timed(spec, events, args.repeat, general=False)
        general, n_general = timed(spec, events, args.repeat, general=True)
        assert n_fast == n_general, (text, n_fast, n_general)
        print(f"  {text}\n    {n_fast} matches; fast path {len(events) / fast:,.0f} ev/s, general "
              f"{len(events) / general:,.0f} ev/s; general / fast time = {general / fast:.2f}x")

    print("2. SEQ(A a, NOT B+ b[], C c) over A B^n C blocks, x = 1 (no subset blocks); time per match")
    for gap in (int(g) for g in args.gaps.split(",")):
        blocks = max(3, 2_000 // 2 ** min(gap, 11))
        events = worst_case_stream(gap, blocks)
        times = {}
        for name, where, general, subsets in (("sum(b[].x) > n", f"sum(b[].x) > {gap}", True, False),
                                              ("avg(b[].x) > 1", "avg(b[].x) > 1", True, False),
                                              ("avg, subset search", "avg(b[].x) > 1", True, True),
                                              ("b[i].x > n", f"b[i].x > {gap}", False, False)):
            spec = sparkcep.compile(f"PATTERN SEQ(A a, NOT B+ b[], C c) WHERE {where} WITHIN {gap + 3} "
                                    "RETURN a.ts").spec()
            t, found = timed(spec, events, args.repeat, general, subsets)
            assert found == blocks, (where, found, blocks)
            times[name] = t / blocks
        fast = times["b[i].x > n"]
        print(f"  n = {gap:2d}, {blocks} matches: " + "; ".join(
            f"{name} {t * 1e3:.3f} ms ({t / fast:.1f}x)" for name, t in times.items()))
        print(f"    avg single-event rule vs subset search: "
              f"{times['avg, subset search'] / times['avg(b[].x) > 1']:.0f}x less time")


if __name__ == "__main__":
    main()
