"""The cost of a stop condition (``UNTIL``) in the pure GRETA trend engine, against the same query without it.

The stream is :mod:`trend_aggregation`'s stock stream (10 companies, trades typed ``A``/``B`` 50/50, one event per
ts unit, a random-walk price that never falls below 1, a uniform volume in 1..1000).  Each query runs three ways,
one after the other in this process, ``--repeat`` times each (the order rotates between repetitions):

* ``plain``   without ``UNTIL``;
* ``never``   ``A+ a[] UNTIL (a.price < 0)``: a stop condition read on every ``A`` that never holds;
* ``sometimes`` ``A+ a[] UNTIL (a.volume > 990)``: about 1% of the ``A`` events stop the loop.

Two queries: ``count``, ``RETURN company, COUNT(*) PATTERN SEQ(A+ a[], B) ...`` (the generated COUNT(*) scan), and
``sum``, the same with ``SUM(a.volume)`` added (the template interpreter).  Per query and variant the engine's CPU
time per event (``time.process_time``, ``step`` and ``advance`` only, micro-batches of ``--batch`` events per
partition as a Spark group would feed them, the watermark after each), the median over the repetitions, and the
ratio of the median to the plain query's in the same process.  The rows are checked: ``never`` must give the plain
query's rows.

    python bench/trend_until.py [--events 100000] [--window 10000] [--batch 10000] [--repeat 5] [--queries count,sum]

The figures to quote are the ratios (load-robust: the variants alternate in one process); state the machine (the
project's reference is a 2-core VM) and the load, which the script prints.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from trend_aggregation import run_engine, stock_stream  # noqa: E402

import sparkcep  # noqa: E402

QUERIES = {
    "count": "RETURN company, COUNT(*) PATTERN SEQ(A+ a[]{until}, B) WHERE [company] GROUP BY company "
             "WITHIN {window} SLIDE {window}",
    "sum": "RETURN company, COUNT(*), SUM(a.volume) PATTERN SEQ(A+ a[]{until}, B) WHERE [company] GROUP BY company "
           "WITHIN {window} SLIDE {window}",
}
VARIANTS = {"plain": "", "never": " UNTIL (a.price < 0)", "sometimes": " UNTIL (a.volume > 990)"}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--window", type=int, default=10_000, help="WITHIN (= SLIDE), in ts units (events)")
    p.add_argument("--batch", type=int, default=10_000, help="micro-batch size per partition")
    p.add_argument("--repeat", type=int, default=5, help="runs per variant (medians are printed)")
    p.add_argument("--queries", default="count,sum")
    args = p.parse_args(argv)
    print(f"stock stream: {args.events:,} events, 10 companies, WITHIN {args.window} SLIDE {args.window}; "
          f"micro-batches of {args.batch:,} events per partition; medians of {args.repeat} runs; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (the reference machine: 2 cores)")
    events = list(stock_stream(args.events, "seq"))
    stops = sum(1 for e in events if e["type"] == "A" and e["volume"] > 990)
    print(f"'sometimes': {stops} stop events among {sum(e['type'] == 'A' for e in events):,} A events")
    for name in args.queries.split(","):
        print(f"\nquery {name}: {QUERIES[name].format(until='', window='W')}")
        specs = {v: sparkcep.compile(QUERIES[name].format(until=u, window=args.window)).spec()
                 for v, u in VARIANTS.items()}
        cpus: dict[str, list[float]] = {v: [] for v in VARIANTS}
        rows: dict[str, list[dict]] = {}
        order = list(VARIANTS)
        for v in order:  # a warm-up run each (the process's first Arrow calls load their kernels)
            run_engine(specs[v], iter(events[:2000]), args.batch)
        for r in range(args.repeat):
            for v in order[r % len(order):] + order[:r % len(order)]:
                _, cpu, out = run_engine(specs[v], iter(events), args.batch)
                cpus[v].append(cpu)
                rows[v] = out
        assert rows["never"] == rows["plain"], "a stop that never fires changed the rows"
        base = statistics.median(cpus["plain"])
        print(f"{'variant':>10} {'CPU us/ev':>10} {'x plain':>8} {'runs (us/ev)':>30}  rows' first count")
        for v in VARIANTS:
            med = statistics.median(cpus[v])
            runs = " ".join(f"{c / args.events * 1e6:.2f}" for c in cpus[v])
            first = rows[v][0]["count_all"] if rows[v] else 0
            print(f"{v:>10} {med / args.events * 1e6:>10.2f} {med / base:>8.2f} {runs:>30}  "
                  f"{first.bit_length()} bits", flush=True)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
