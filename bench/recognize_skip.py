"""AFTER MATCH SKIP TO NEXT ROW against PAST LAST ROW in the pure MATCH_RECOGNIZE engine: the cost per row as a
run of rows that can all start (and continue) a match grows.

Under TO NEXT ROW every row is a start row whose own preferred match is reported, so a run of ``n`` rows that
each can begin and extend a match (``A+ B`` over ``n`` A's, then one B) keeps ``n`` partial matches alive at
once: the engine's work is quadratic in the run (``n (n + 1) / 2`` thread steps), and the output of ALL ROWS
PER MATCH is too. PAST LAST ROW merges the threads of later starts into the earliest one's (same instruction,
history-free DEFINE), so it stays linear. ``WITHIN`` bounds a run: the work is then ``O(n x rows within the
window)``. One partition, ONE ROW PER MATCH, ``COUNT(*)`` as the measure; CPU seconds (``time.process_time``),
medians of ``--repeat`` runs, and the cost per row relative to the smallest ``n``.

    python bench/recognize_skip.py [--sizes 250,500,1000,2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

STATEMENT = ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP {skip} "
             "PATTERN (A+ B) DEFINE A AS typ = 'A', B AS typ = 'B'{within})")
CASES = (("PAST LAST ROW", "PAST LAST ROW", ""), ("TO NEXT ROW", "TO NEXT ROW", ""),
         ("TO NEXT ROW, WITHIN 100 rows", "TO NEXT ROW", " WITHIN INTERVAL '100' SECOND"))


def spec_of(skip: str, within: str):
    from sparkcep.compiler.recognize import build_spec
    from sparkcep.grammar.recognize import parse_recognize

    q = parse_recognize(STATEMENT.format(skip=skip, within=within))
    return build_spec(q, {"ts": "bigint", "typ": "string"}, ts_unit="s")


def rows_of(n: int) -> list[dict]:
    """``n`` A rows then one B, one second apart."""
    return [{"ts": i, "typ": "A" if i < n else "B", "__ts": i} for i in range(n + 1)]


def cpu(spec, rows: list[dict], repeat: int) -> tuple[float, int]:
    from sparkcep.runtime_udfs import recognize as engine

    times, out = [], []
    for _ in range(repeat):
        t0 = time.process_time()
        out = engine.run_partition(spec, rows)
        times.append(time.process_time() - t0)
    return statistics.median(times), len(out)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="250,500,1000,2000", help="run lengths n (rows that can all start a match)")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    print(f"{'case':<30} {'n':>6} {'matches':>8} {'CPU s':>8} {'us/row':>8} {'per-row x':>9}")
    for label, skip, within in CASES:
        spec = spec_of(skip, within)
        first = None
        for n in sizes:
            seconds, matches = cpu(spec, rows_of(n), args.repeat)
            per_row = seconds / (n + 1) * 1e6
            first = first or per_row
            print(f"{label:<30} {n:>6} {matches:>8} {seconds:>8.3f} {per_row:>8.1f} {per_row / first:>8.1f}x")


if __name__ == "__main__":
    main()
