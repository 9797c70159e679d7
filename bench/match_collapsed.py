"""SASE++ collapsed output (``sparkcep.compile(text, collapsed=True)``) against enumerating every match, at
engine level, no Spark.

A random stream of one partition (types A, B, C, D with weights 1:6:1:1, ``x`` uniform 0..9, ``ts`` a counter)
through the pure engine (``step`` then ``advance`` per micro-batch of 1000 events, the state round-tripped
through bytes after each, as a streaming adapter keeps it).  Per query shape and window, the script times, in
CPU seconds of this process (median of ``--repeat``), the enumerated run (the baseline) and the collapsed run,
and prints rows, the matches the collapsed rows stand for (the enumerated row count) and the ratio
enumerated / collapsed.  The Kleene variable in the middle (``SEQ(A a, B+ b[], C c)``), third
(``SEQ(A a, C c, B+ b[], D d)``) and last (``SEQ(A a, B+ b[])``: rows wait for ``a.ts + W``).

    python bench/match_collapsed.py [--events 20000] [--windows 8,12] [--repeat 3]

State the machine next to the figures (the project's reference is a 2-core VM, shared with other jobs).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pattern_matching import timed  # noqa: E402  (median CPU seconds and the result)

import sparkcep  # noqa: E402
from sparkcep.runtime_udfs.match.engine import MatchState, advance, init_state, step

SHAPES = {
    "middle": "PATTERN SEQ(A a, B+ b[], C c) WHERE b[i].x >= b[i-1].x WITHIN {w} RETURN a.ts, c.ts, max(b[].x)",
    "third": "PATTERN SEQ(A a, C c, B+ b[], D d) WHERE b[i].x > a.x WITHIN {w} RETURN a.ts, c.ts, d.ts, count(b[].x)",
    "last": "PATTERN SEQ(A a, B+ b[]) WHERE b[i].x >= b[i-1].x WITHIN {w} RETURN a.ts, max(b[].x)",
}


def stream(n: int, seed: int = 1) -> list[dict]:
    rnd = random.Random(seed)
    return [{"type": rnd.choices("ABCD", (1, 6, 1, 1))[0], "ts": k, "x": rnd.randint(0, 9)} for k in range(n)]


def run(spec, events: list[dict], batch: int = 1000) -> int:
    state, rows = init_state(), 0
    for k in range(0, len(events), batch):
        state, _ = step(spec, state, events[k:k + batch])
        state, out = advance(spec, state, events[min(k + batch, len(events)) - 1]["ts"])
        rows += len(out)
        state = MatchState.from_bytes(state.to_bytes())
    state, out = advance(spec, state, float("inf"))
    return rows + len(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--windows", default="8,12")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    events = stream(args.events)
    print(f"{args.events} events, one partition, micro-batches of 1000 with state round trips; CPU s, median of "
          f"{args.repeat}")
    print(f"{'shape':8} {'W':>4} {'matches':>10} {'enum s':>8} {'rows':>8} {'coll s':>8} {'ratio':>7}")
    for name, text in SHAPES.items():
        for w in (int(x) for x in args.windows.split(",")):
            q = text.format(w=w)
            enum_spec, coll_spec = sparkcep.compile(q).spec(), sparkcep.compile(q, collapsed=True).spec()
            t_enum, n_enum = timed(lambda s=enum_spec: run(s, events), args.repeat)
            t_coll, n_coll = timed(lambda s=coll_spec: run(s, events), args.repeat)
            print(f"{name:8} {w:>4} {n_enum:>10} {t_enum:>8.3f} {n_coll:>8} {t_coll:>8.3f} {t_enum / t_coll:>6.1f}x")


if __name__ == "__main__":
    main()
