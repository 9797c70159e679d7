"""AFTER MATCH SKIP queries of the pattern language in the MATCH_RECOGNIZE engine (pure, no JVM): what the
translation costs next to the MATCH_RECOGNIZE statement a user would write by hand.

Both run on the same random rows (types A-C, a key ``id`` with ``--keys`` values, ``ts`` +1 per row, so no two
rows share a time), partitioned by ``id`` and sorted, through ``runtime_udfs.recognize.engine.run_partition``:

* the pattern query ``PATTERN SEQ(A a, B+ b[], C c) USING <strategy> WHERE [id] WITHIN w AFTER MATCH SKIP PAST
  LAST EVENT`` compiled by ``compiler.recognize.from_pattern`` (its DEFINEs test the type; ``ts`` strictly
  increasing is spelled with ``PREV(ts)`` and split variables, so partial matches are merged as in the other);
  (a budget error of the engine, 200,000 partial matches per partition, is printed instead of a figure);
* the hand-written statement ``PATTERN (A B+ C)`` (contiguity) or ``PATTERN (A ({- X*? -} B)+ {- X*? -} C)``
  (skip_till_any_match), DEFINE by type only (the same matches only when no two rows share a time).

Printed per strategy: the matches of each (equal, checked), rows per second of CPU time (median of
``--repeat``), and the ratio hand-written / pattern query (the price of the translation's generality).

    python bench/skip_queries.py [--rows 20000] [--keys 20] [--window 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from sparkcep.compiler.recognize import build_spec
from sparkcep.compiler.recognize.from_pattern import to_recognize
from sparkcep.grammar.parser import parse_query
from sparkcep.ir import recognize as rx
from sparkcep.ir.ast import Attr, BinOp, Literal
from sparkcep.runtime_udfs.recognize import engine
from sparkcep.runtime_udfs.recognize.engine import RecognizeBudgetError

SCHEMA = {"type": "string", "ts": "bigint", "id": "bigint"}


def rows(n: int, keys: int, seed: int = 1) -> dict[int, list[dict]]:
    rnd = random.Random(seed)
    parts: dict[int, list[dict]] = {}
    for t in range(n):
        k = rnd.randrange(keys)
        parts.setdefault(k, []).append({"type": rnd.choice("AABBBC"), "ts": t, "id": k, "__ts": t})
    return parts


def by_hand(pattern_spec: rx.RecognizeSpec, filler: bool) -> rx.RecognizeSpec:
    """The statement a user would write: the same measures, DEFINE by type only."""
    def is_type(v: str, t: str):
        return BinOp("=", Attr(v, "type"), Literal(t))

    gap = rx.PExclude(rx.PQuant(rx.PVar("X"), 0, None, greedy=False))
    a, b, c = rx.PVar("a"), rx.PVar("b"), rx.PVar("c")
    if filler:
        pattern = rx.PConcat((a, rx.PQuant(rx.PConcat((gap, b)), 1, None), gap, c))
    else:
        pattern = rx.PConcat((a, rx.PQuant(b, 1, None), c))
    from dataclasses import replace

    return replace(pattern_spec, pattern=pattern, variables=("a", "b", "c", "X") if filler else ("a", "b", "c"),
                   defines=(("a", is_type("a", "A")), ("b", is_type("b", "B")), ("c", is_type("c", "C"))),
                   subsets=())


def run(spec: rx.RecognizeSpec, parts: dict[int, list[dict]]) -> tuple[int, float]:
    start = time.process_time()
    n = sum(len(engine.run_partition(spec, part)) for part in parts.values())
    return n, time.process_time() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--keys", type=int, default=20)
    ap.add_argument("--window", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    parts = rows(args.rows, args.keys)
    print(f"{args.rows} rows, {args.keys} keys, WITHIN {args.window} rows; CPU seconds, median of {args.repeat}")
    for strategy in ("partition_contiguity", "skip_till_any_match"):
        text = (f"PATTERN SEQ(A a, B+ b[], C c) USING {strategy} WHERE [id] WITHIN {args.window} "
                "AFTER MATCH SKIP PAST LAST EVENT RETURN a.ts AS a_ts, b[b.len].ts AS b_ts, c.ts AS c_ts")
        spec = build_spec(to_recognize(parse_query(text), text), SCHEMA)
        hand = by_hand(spec, strategy == "skip_till_any_match")
        try:
            ours = [run(spec, parts) for _ in range(args.repeat)]
        except RecognizeBudgetError as err:
            print(f"{strategy:22s} pattern query: {err.message[:90]}...")
            continue
        theirs = [run(hand, parts) for _ in range(args.repeat)]
        assert ours[0][0] == theirs[0][0], (ours[0][0], theirs[0][0])
        t_ours = statistics.median(t for _, t in ours)
        t_hand = statistics.median(t for _, t in theirs)
        print(f"{strategy:22s} matches {ours[0][0]:6d}  pattern query {args.rows / t_ours:9.0f} rows/s  "
              f"hand-written {args.rows / t_hand:9.0f} rows/s  ratio {t_ours / t_hand:.2f}x")


if __name__ == "__main__":
    main()
