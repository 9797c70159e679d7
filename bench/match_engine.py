"""Throughput of the pure SASE match engine against a naive nested-loop matcher, in one process.

The naive baseline is what one writes without a sequence operator: for every last-component event, loop
over all earlier events of the other components inside the window and test the predicates.  Both produce the
same matches (checked); the script prints events/s of each and the ratio.

    python bench/match_engine.py [--events 30000] [--windows 10,50,100] [--repeat 3]

State the machine next to the figures (the project's reference is a 2-core VM).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time

import sparkcep
from sparkcep.runtime_udfs.expr.scalar import compile_expr, holds
from sparkcep.runtime_udfs.match import engine as match_engine

QUERY = "PATTERN SEQ(A a, B b, C c) WHERE a.x < b.x AND b.x < c.x WITHIN {window} RETURN a.ts, b.ts, c.ts"


def stream(n: int, seed: int = 1, types: str = "ABCD") -> list[dict]:
    rnd = random.Random(seed)
    return [{"type": rnd.choice(types), "ts": t, "x": rnd.randint(0, 9)} for t in range(n)]


def run_engine(spec, events, batch: int = 10_000) -> int:
    state, found = match_engine.init_state(), 0
    for lo in range(0, len(events), batch):
        chunk = events[lo:lo + batch]
        state, _ = match_engine.step(spec, state, chunk)
        state, rows = match_engine.advance(spec, state, chunk[-1]["ts"])
        found += len(rows)
    state, rows = match_engine.advance(spec, state, math.inf)
    return found + len(rows)


def run_naive(spec, events) -> int:
    window = spec.window
    preds = [compile_expr(p) for p in spec.predicates]
    found = 0
    for k, c in enumerate(events):
        if c["type"] != "C":
            continue
        earlier = [e for e in events[max(0, k - int(window)):k] if c["ts"] - e["ts"] < window]
        for a in (e for e in earlier if e["type"] == "A"):
            for b in (e for e in earlier if e["type"] == "B" and a["ts"] < e["ts"] < c["ts"]):
                binding = {"a": a, "b": b, "c": c}
                if all(holds(p(binding)) for p in preds):
                    found += 1
    return found


def timed(fn, *args, repeat: int) -> tuple[float, int]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn(*args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=30_000)
    p.add_argument("--windows", default="10,50,100", help="comma-separated WITHIN values (ts units)")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    events = stream(args.events)
    print(f"query: {QUERY.format(window='W')}")
    print(f"{args.events} events, types A-D uniform, ts +1 each, x uniform 0-9; medians of {args.repeat}")
    print(f"{'W':>5} {'matches':>9} {'sase engine ev/s':>17} {'naive loops ev/s':>17} {'ratio':>6}")
    for window in (int(w) for w in args.windows.split(",")):
        spec = sparkcep.compile(QUERY.format(window=window)).spec()
        t_engine, n_engine = timed(run_engine, spec, events, repeat=args.repeat)
        t_naive, n_naive = timed(run_naive, spec, events, repeat=args.repeat)
        assert n_engine == n_naive, (n_engine, n_naive)
        print(f"{window:>5} {n_engine:>9} {args.events / t_engine:>17,.0f} {args.events / t_naive:>17,.0f} "
              f"{t_naive / t_engine:>5.1f}x")


if __name__ == "__main__":
    main()
