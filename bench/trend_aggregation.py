"""Throughput of the pure GRETA trend engine on a stock-like stream, next to the two-step baseline.

The stream has 10 companies in 3 sectors; each event is a trade of one company (uniform) with a
random-walk price (Gaussian steps of 0.5, rounded to cents), one event per ts unit.  Two queries:

* ``SEQ(A+, B)`` without an edge predicate (trades typed ``A`` buy / ``B`` sell, 50/50), per company;
* GRETA Q1, ``Stock S+`` with ``S.price > NEXT(S).price``, per company and sector, grouped by sector;
* optionally (``--queries seq,bounded,next``) ``SEQ(A{2,4}, B)`` and ``SEQ(A+, NEXT B)``, the ``seq`` query with a
  bounded quantifier and with a ``NEXT`` step, to compare with ``seq`` in the same process.

For each window size (events per window, all companies together) the engine is fed micro-batches of
``--batch`` events per partition (the caller's ``groupBy(key)``), the watermark following the batch's last
``ts``; the time covers ``step`` and ``advance`` only, over ``--windows`` windows' worth of events.  The
two-step baseline enumerates the trends of each window with the oracle and aggregates them; it is run on
growing windows only while one run finishes within ``--baseline-budget`` seconds (it is exponential).

    python bench/trend_aggregation.py [--sizes 10000,100000,1000000] [--slide-div 1] [--batch 100000] [--repeat 3]
    python bench/trend_aggregation.py --spark [--events 1000000 --repeat 2]   # end to end on Spark (trend_spark.py)

Each size runs ``--repeat`` times; the figures are medians, and the CPU figure (``time.process_time`` of this
process) is the one to quote on a shared machine (wall time includes waiting for other jobs' CPUs).  The last
lines give the per-event CPU cost's growth from the smallest to the largest window: linear work per event
keeps it near 1x, a quadratic blow-up would multiply it by the size ratio (100x for 10^4 → 10^6).

State the machine next to the figures (the project's reference is a 2-core VM).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import random
import statistics
import time
from collections.abc import Iterator

import sparkcep
from sparkcep.oracles.match import trend_aggregates
from sparkcep.runtime_udfs.trend import engine as trend_engine

COMPANIES = [f"C{i}" for i in range(10)]
SECTORS = {c: f"S{i % 3}" for i, c in enumerate(COMPANIES)}

QUERIES = {
    "seq": "RETURN company, COUNT(*) PATTERN SEQ(A+, B) WHERE [company] GROUP BY company "
           "WITHIN {window} SLIDE {slide}",
    "edge": "RETURN sector, COUNT(*) PATTERN Stock S+ WHERE [company, sector] AND S.price > NEXT(S).price "
            "GROUP-BY sector WITHIN {window} SLIDE {slide}",
    # SEQ(A+, B) with a bounded quantifier (4 count-indexed states for A) and with a NEXT step (every event of
    # the partition is read; the interpreter, not the generated COUNT(*) scan)
    "bounded": "RETURN company, COUNT(*) PATTERN SEQ(A{{2,4}}, B) WHERE [company] GROUP BY company "
               "WITHIN {window} SLIDE {slide}",
    "next": "RETURN company, COUNT(*) PATTERN SEQ(A+, NEXT B) WHERE [company] GROUP BY company "
            "WITHIN {window} SLIDE {slide}",
}


def stock_stream(n: int, query: str, seed: int = 7) -> Iterator[dict]:
    """``n`` trades in ts order (ts 0, 1, 2, ...): company, sector, price (a random walk per company),
    volume, and type ``A``/``B`` (buy/sell) for ``seq`` or ``Stock`` for ``edge``."""
    rnd = random.Random(seed)
    prices = {c: 100.0 for c in COMPANIES}
    for ts in range(n):
        company = rnd.choice(COMPANIES)
        prices[company] = max(1.0, prices[company] + rnd.gauss(0, 0.5))
        kind = ("A" if rnd.random() < 0.5 else "B") if query != "edge" else "Stock"
        yield {"type": kind, "ts": ts, "company": company, "sector": SECTORS[company],
               "price": round(prices[company], 2), "volume": rnd.randint(1, 1000)}


def run_engine(spec, events: Iterator[dict], batch: int) -> tuple[float, float, list[dict]]:
    """Feed ``events`` partition by partition in micro-batches; returns (engine wall-clock seconds, engine CPU
    seconds, merged rows)."""
    states: dict[tuple, trend_engine.TrendState] = {}
    buffers: dict[tuple, list[dict]] = {}
    rows: list[dict] = []
    wall = cpu = 0.0

    def feed(key: tuple, chunk: list[dict], watermark: float) -> None:
        nonlocal wall, cpu
        t0, c0 = time.perf_counter(), time.process_time()
        state = states.get(key) or trend_engine.init_state()
        state, _ = trend_engine.step(spec, state, chunk)
        state, out = trend_engine.advance(spec, state, watermark)
        states[key] = state
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
        rows.extend(out)

    for ev in events:
        key = tuple(ev[k] for k in spec.key)
        buf = buffers.setdefault(key, [])
        buf.append(ev)
        if len(buf) >= batch:
            feed(key, buf, buf[-1]["ts"])
            buffers[key] = []
    for key in list(buffers.keys() | states.keys()):
        feed(key, buffers.get(key, []), math.inf)
    return wall, cpu, trend_engine.merge_rows(spec, rows)


def _baseline(text: str, events: list[dict], out) -> None:
    query = sparkcep.compile(text).query
    t0 = time.perf_counter()
    rows = trend_aggregates(query, events)
    out.put((time.perf_counter() - t0, rows))


def run_baseline(text: str, events: list[dict], budget: float) -> tuple[float, list[dict]] | None:
    """The two-step approach in a child process; None if it does not finish within ``budget`` seconds."""
    out = multiprocessing.Queue()
    child = multiprocessing.Process(target=_baseline, args=(text, events, out), daemon=True)
    child.start()
    child.join(budget)
    if child.is_alive():
        child.terminate()
        child.join()
        return None
    return out.get()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10000,100000,1000000", help="events per window (all partitions)")
    p.add_argument("--slide-div", type=int, default=1, help="windows overlapping each event (SLIDE = W/div)")
    p.add_argument("--windows", type=float, default=2.0, help="stream length in windows")
    p.add_argument("--batch", type=int, default=100_000, help="micro-batch size per partition")
    p.add_argument("--queries", default="seq,edge")
    p.add_argument("--baseline-budget", type=float, default=60.0)
    p.add_argument("--repeat", type=int, default=3, help="runs per size (medians are printed)")
    p.add_argument("--spark", nargs=argparse.REMAINDER, default=None, metavar="ARGS",
                   help="instead: the end-to-end Spark section (bench/trend_spark.py: the GRETA job against a trivial "
                        "stateful count over the same files, batch and streaming); ARGS go to it (--events N ...)")
    args = p.parse_args(argv)
    if args.spark is not None:  # its own process: Spark's workers unpickle its functions from a real module path
        import subprocess
        import sys

        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "trend_spark.py")
        raise SystemExit(subprocess.call([sys.executable, script, *args.spark]))
    print(f"stock stream: {len(COMPANIES)} companies, 3 sectors, 1 event per ts unit; SLIDE = WITHIN / "
          f"{args.slide_div}; micro-batches of {args.batch} events per partition; medians of {args.repeat} runs; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for name in args.queries.split(","):
        print(f"\nquery {name}: {QUERIES[name].format(window='W', slide='S')}")
        largest = baseline_ladder(name, args)
        print(f"{'events/window':>14} {'events':>10} {'ev/s (wall)':>12} {'ev/s (CPU)':>12} {'CPU us/ev':>10} "
              f"{'rows':>6} {'max count bits':>15}  two-step baseline")
        per_event = {}
        for size in (int(s) for s in args.sizes.split(",")):
            text = QUERIES[name].format(window=size, slide=max(1, size // args.slide_div))
            spec = sparkcep.compile(text).spec()
            total = int(size * args.windows)
            walls, cpus = [], []
            for _ in range(args.repeat):
                wall, cpu, rows = run_engine(spec, stock_stream(total, name), args.batch)
                walls.append(wall)
                cpus.append(cpu)
            wall, cpu = statistics.median(walls), statistics.median(cpus)
            per_event[size] = cpu / total
            bits = max((r["count_all"].bit_length() for r in rows), default=0)
            note = "not run (see above)" if size > largest else ""
            print(f"{size:>14,} {total:>10,} {total / wall:>12,.0f} {total / cpu:>12,.0f} {cpu / total * 1e6:>10.2f} "
                  f"{len(rows):>6} {bits:>15,}  {note}", flush=True)
        small, large = min(per_event), max(per_event)
        if large > small:
            print(f"per-event CPU cost from {small:,} to {large:,} events/window: "
                  f"x{per_event[large] / per_event[small]:.2f} (quadratic: x{large / small:,.0f})")


def baseline_ladder(name: str, args) -> int:
    """Run the two-step baseline on windows of 8, 16, 32, ... events while it finishes within the budget,
    next to the engine on the same events (same rows checked); returns the largest window it finished."""
    print(f"two-step baseline (oracle enumeration, then aggregation), budget {args.baseline_budget:.0f} s per run:")
    size, largest = 8, 0
    while True:
        text = QUERIES[name].format(window=size, slide=max(1, size // args.slide_div))
        events = list(stock_stream(size * 2, name))
        found = run_baseline(text, events, args.baseline_budget)
        if found is None:
            print(f"{size:>14,} events/window: baseline did not finish within {args.baseline_budget:.0f} s")
            return largest
        seconds, rows = found
        wall, _, mine = run_engine(sparkcep.compile(text).spec(), iter(events), args.batch)
        assert mine == rows, (text, mine, rows)
        print(f"{size:>14,} events/window: baseline {len(events) / seconds:>10,.0f} ev/s, engine "
              f"{len(events) / wall:>10,.0f} ev/s (same rows)", flush=True)
        largest, size = size, size * 2


if __name__ == "__main__":
    main()
