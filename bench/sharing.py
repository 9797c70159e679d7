"""Sharon sharing: shared vs non-shared execution of route-count workloads, and the three optimizers.

Workload: ``--queries`` (default 20,40,80,120) COUNT(*) queries of length 10, each a slice of one of
``--routes`` base routes (length 16, over 40 street types; consecutive routes overlap), all
``WHERE [vehicle] WITHIN 3000 SLIDE 600`` (numeric ts; ``--window``/``--slide``).  Stream: ``--vehicles``
vehicles, each driving base routes one street per ts unit (a random route after each trip), ``--events``
events in all.  Rates for the benefit model: measured on the first quarter of the stream, per vehicle.

Execution (pure engine, one engine state per vehicle, as ``groupBy(vehicle)`` gives them; micro-batches of
one slide, the watermark following): the *same* shared executor (:mod:`sparkcep.runtime_udfs.shared.engine`)
run with the chosen sharing plan and with the Non-Shared layout (every query its own segment: A-Seq, the
baseline of Sharon §8), in the same process, alternating, median of ``--repeat`` runs.  Figures: throughput
(events/s), mean latency (wall time from a micro-batch's arrival to its rows), speed-up; the results of both
are checked equal.  ``--alone`` also times each query alone on the GRETA engine; ``--spark`` the batch job
(``CompiledWorkload.apply``) both ways on a local[2] session: each side run once to warm up (its rows checked
equal to the other side's), then ``--repeat`` runs alternating shared and non-shared, median; and the same job
on the former batch path of a workload (the baseline: tagged rows grouped by operator and grouping values,
``groupBy().applyInPandas``, each group's pandas frame turned into engine events), in the same session.

Optimizers (``--optimizer-queries``, default 4..120 queries): the time to build the Sharon graph, then on
that graph the Sharon plan finder (reduction + branch and bound over components, GWMIN after ``--budget``
seconds), the baseline it replaced in the same process (reduction + the level-wise walk of every valid plan,
Algorithms 3-4, same budget) with the time ratio, greedy GWMIN, and exhaustive search
(:func:`sparkcep.oracles.sharon.optimal_plan`, every subset; run only while the graph has at most
``--exhaustive-max`` vertices): time and plan score.

    python bench/sharing.py [--queries 20,40,80,120] [--events 8000] [--repeat 3] [--alone] [--spark]
    python bench/sharing.py --queries none --optimizer-queries 20,40,80,120     # the optimizers only
    python bench/sharing.py --queries 20,40 --events 4000 --spark --optimizer-queries none   # Spark, no optimizers

State the machine next to the figures (the reference is a 2-core VM).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import time
from dataclasses import replace

import sparkcep
from sparkcep.api import CompiledWorkload
from sparkcep.compiler.optimizer.sharing import RULES, optimize_workload
from sparkcep.compiler.optimizer.sharing.graph import sharon_graph
from sparkcep.compiler.optimizer.sharing.plan_finder import enumeration_plan, gwmin_graph, search_plan
from sparkcep.compiler.optimizer.sharing.rates import rates_from_sample
from sparkcep.compiler.optimizer.sharing.scope import sharing_query
from sparkcep.oracles import sharon as oracle_sharon
from sparkcep.runtime_udfs.shared import engine as shared_engine
from sparkcep.runtime_udfs.trend import engine as trend_engine

STREETS = [f"St{i}" for i in range(40)]
LENGTH = 10
WINDOW, SLIDE = 300, 60  # overridden by --window/--slide


def base_routes(n: int, seed: int = 1) -> list[tuple[str, ...]]:
    """``n`` routes of 16 distinct streets; each shares a run of streets with the previous one."""
    rnd = random.Random(seed)
    routes = [tuple(rnd.sample(STREETS, 16))]
    while len(routes) < n:
        prev = routes[-1]
        keep = prev[rnd.randint(0, 6):][:rnd.randint(5, 9)]
        rest = [s for s in STREETS if s not in keep]
        head = rnd.sample(rest, rnd.randint(0, 16 - len(keep)))
        tail = rnd.sample([s for s in rest if s not in head], 16 - len(keep) - len(head))
        routes.append(tuple(head) + keep + tuple(tail))
    return routes


def workload_text(n_queries: int, routes: list[tuple[str, ...]], seed: int = 2) -> str:
    rnd = random.Random(seed)
    lines = []
    for i in range(n_queries):
        r = routes[rnd.randrange(len(routes))]
        o = rnd.randint(0, len(r) - LENGTH)
        lines.append(f"q{i + 1}: RETURN COUNT(*) PATTERN SEQ({', '.join(r[o:o + LENGTH])}) "
                     f"WHERE [vehicle] WITHIN {WINDOW} SLIDE {SLIDE}")
    return ";\n".join(lines)


def route_stream(n: int, vehicles: int, routes: list[tuple[str, ...]], seed: int = 3) -> list[dict]:
    rnd = random.Random(seed)
    pos = [(rnd.randrange(len(routes)), rnd.randrange(16)) for _ in range(vehicles)]
    events = []
    ts = 0
    while len(events) < n:
        for v in range(vehicles):
            r, i = pos[v]
            events.append({"type": routes[r][i], "ts": ts, "vehicle": v})
            pos[v] = (r, i + 1) if i + 1 < 16 else (rnd.randrange(len(routes)), 0)
        ts += 1
    return events[:n]


def run_engine(spec, parts: dict, batches: list[float]) -> tuple[float, list[float], list[dict]]:
    """Feed each vehicle's events slide by slide; wall time, per-micro-batch latencies, rows."""
    states = {k: shared_engine.init_state() for k in parts}
    cursor = dict.fromkeys(parts, 0)
    rows, lat = [], []
    t0 = time.perf_counter()
    for bound in batches:
        b0 = time.perf_counter()
        for k, evs in parts.items():
            i = cursor[k]
            j = i
            while j < len(evs) and evs[j]["ts"] < bound:
                j += 1
            cursor[k] = j
            st = states[k]
            shared_engine.step(spec, st, evs[i:j])
            rows.extend(shared_engine.advance(spec, st, bound - 0.5 if bound < math.inf else bound)[1])
        lat.append(time.perf_counter() - b0)
    return time.perf_counter() - t0, lat, rows


def run_alone(queries, parts: dict) -> float:
    t0 = time.perf_counter()
    for q in queries:
        spec = q.spec()
        for evs in parts.values():
            st, _ = trend_engine.step(spec, trend_engine.init_state(), evs)
            trend_engine.advance(spec, st, math.inf)
    return time.perf_counter() - t0


def canon(rows):
    return sorted((r["query"], r["window_start"], r["count_all"], ) for r in shared_engine.merge_rows(
        _SPEC_FOR_MERGE[0], rows)) if rows else []


_SPEC_FOR_MERGE: list = []


def optimizers(queries, rates, budget: float, exhaustive_max: int) -> list[tuple[str, float, float, str]]:
    """(optimizer, seconds, score, note): building the Sharon graph, then on that graph the Sharon plan
    search (reduction + plan finder, GWMIN after ``budget``), greedy GWMIN, and exhaustive search."""
    out = []
    t0 = time.perf_counter()
    graph_plan = optimize_workload(queries, rates, budget=budget, resolve=False, rules=RULES[:5])
    g = sharon_graph(graph_plan)
    out.append(("Sharon graph (candidates, BValue, conflicts)", time.perf_counter() - t0, math.nan,
                f"{len(graph_plan.candidates)} candidates, {len(g)} beneficial, {g.number_of_edges()} conflicts"))
    t0 = time.perf_counter()
    _, score, method = search_plan(g, budget)
    finder = time.perf_counter() - t0
    out.append(("Sharon plan finder", finder, score, method))
    t0 = time.perf_counter()
    _, escore, emethod = enumeration_plan(g, budget)
    enum = time.perf_counter() - t0
    out.append(("baseline: Algorithms 3-4 valid-space walk", enum, escore,
                f"{emethod}; {enum / max(finder, 1e-9):.0f}x the plan finder's time"))
    t0 = time.perf_counter()
    _, gscore = gwmin_graph(g)
    out.append(("greedy GWMIN", time.perf_counter() - t0, gscore, ""))
    if len(g) <= exhaustive_max:
        t0 = time.perf_counter()
        _, escore = oracle_sharon.optimal_plan(g)
        out.append(("exhaustive (every subset)", time.perf_counter() - t0, escore, ""))
    else:
        out.append(("exhaustive (every subset)", math.nan, math.nan, f"not run: 2^{len(g)} subsets"))
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queries", default="20,40,80,120")
    p.add_argument("--routes", type=int, default=4)
    p.add_argument("--events", type=int, default=8000)
    p.add_argument("--vehicles", type=int, default=1)
    p.add_argument("--window", type=int, default=3000)
    p.add_argument("--slide", type=int, default=600)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--budget", type=float, default=2.0, help="plan finder time budget (s)")
    p.add_argument("--exhaustive-max", type=int, default=22, help="largest graph for exhaustive search")
    p.add_argument("--optimizer-queries", default="4,6,8,10,20,40,80,120")
    p.add_argument("--alone", action="store_true", help="also time each query alone on the GRETA engine")
    p.add_argument("--spark", action="store_true", help="also time the Spark batch job, shared vs non-shared")
    p.add_argument("--greedy", action="store_true",
                   help="also run the executor with GWMIN's plan (the optimal plan's speed-up over it)")
    args = p.parse_args(argv)
    global WINDOW, SLIDE
    WINDOW, SLIDE = args.window, args.slide

    routes = base_routes(args.routes)
    events = route_stream(args.events, args.vehicles, routes)
    parts: dict[int, list[dict]] = {}
    for e in events:
        parts.setdefault(e["vehicle"], []).append(e)
    last = max(e["ts"] for e in events)
    batches = [float(b) for b in range(SLIDE, int(last) + SLIDE + 1, SLIDE)] + [math.inf]
    rates = rates_from_sample(events[: len(events) // 4], WINDOW)
    rates = {t: r / args.vehicles for t, r in rates.items()}  # per partition (vehicle), as the engine sees them
    print(f"{len(events)} events, {args.vehicles} vehicles, {len(routes)} base routes, window {WINDOW} slide "
          f"{SLIDE}; pure engine, median of {args.repeat}; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    header = (f"{'queries':>7} {'shared segs':>11} {'non-shared':>10} {'shared ev/s':>11} {'non-sh ev/s':>11} "
              f"{'speed-up':>8} {'lat shared ms':>13} {'lat non-sh ms':>13}" + ("  alone ev/s" if args.alone else "")
              + ("  GWMIN-plan ev/s (optimal plan's speed-up)" if args.greedy else ""))
    sizes = [int(x) for x in args.queries.split(",") if x.strip() not in ("", "none")]
    if sizes:
        print(header)
    spark_rows = []
    for n in sizes:
        text = workload_text(n, routes)
        queries = sparkcep.compile_workload(text)
        sq = [sharing_query(q.name, q.spec()) for q in queries]
        plan = optimize_workload(sq, rates, rates_source="a sample of the stream", budget=args.budget, resolve=False)
        w = CompiledWorkload(tuple(queries), plan)
        [shared], [baseline] = w.specs(), w.specs(share=False)
        _SPEC_FOR_MERGE[:] = [shared]
        runs = [("shared", shared), ("non", baseline)]
        if args.greedy:
            [greedy] = CompiledWorkload(tuple(queries), replace(plan, chosen=plan.greedy)).specs()
            runs.append(("greedy", greedy))
        times = {name: [] for name, _ in runs}
        lats = {name: [] for name, _ in runs}
        results = {}
        for _ in range(args.repeat):
            for name, spec in runs:
                t, lat, rows = run_engine(spec, parts, batches)
                times[name].append(t)
                lats[name].append(statistics.mean(lat))
                results[name] = rows
        assert canon(results["shared"]) == canon(results["non"]), "shared and non-shared results differ"
        ts, tn = statistics.median(times["shared"]), statistics.median(times["non"])
        line = (f"{n:>7} {len(shared.segments):>11} {len(baseline.segments):>10} {len(events) / ts:>11.0f} "
                f"{len(events) / tn:>11.0f} {tn / ts:>7.2f}x {1000 * statistics.median(lats['shared']):>13.2f} "
                f"{1000 * statistics.median(lats['non']):>13.2f}")
        if args.alone:
            line += f"  {len(events) / run_alone(queries, parts):>10.0f}"
        if args.greedy:
            assert canon(results["greedy"]) == canon(results["non"]), "GWMIN-plan and non-shared results differ"
            tg = statistics.median(times["greedy"])
            same = " (same plan)" if set(plan.greedy) == set(plan.chosen) else ""
            line += f"  {len(events) / tg:>15.0f} ({tg / ts:.2f}x){same}"
        print(line, flush=True)
        if args.spark:
            spark_rows.append((n, spark_times(w, events, args.repeat)))

    optimizer_sizes = [int(x) for x in args.optimizer_queries.split(",") if x.strip() not in ("", "none")]
    if optimizer_sizes:
        print_optimizers(optimizer_sizes, routes, rates, args)
    if spark_rows:
        print(f"\nSpark batch job (local[2] session, CompiledWorkload.apply + count), seconds: each side warmed up "
              f"once, then {args.repeat} runs alternating shared / non-shared / the same two on the former "
              f"groupBy().applyInPandas path, median; 2-core machine, shared with other jobs ({os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.1f} at the end)")
        for n, t in spark_rows:
            runs = " ".join(f"{a:.2f}/{b:.2f}" for a, b in zip(t[True, "arrow"], t[False, "arrow"], strict=True))
            ms, mn = statistics.median(t[True, "arrow"]), statistics.median(t[False, "arrow"])
            ps, pn = statistics.median(t[True, "pandas"]), statistics.median(t[False, "pandas"])
            print(f"{n:>7} queries: shared {ms:.2f} s, non-shared {mn:.2f} s, speed-up {mn / ms:.2f}x "
                  f"(runs shared/non-shared: {runs}); former applyInPandas path: shared {ps:.2f} s "
                  f"({ps / ms:.2f}x the mapInArrow path), non-shared {pn:.2f} s ({pn / mn:.2f}x)")


def print_optimizers(sizes: list[int], routes, rates, args) -> None:
    print("\noptimizers (rates from a sample of the stream; no conflict resolution; a baseline that runs out of "
          "its budget is stopped there, so its ratio is a lower bound):")
    print(f"{'queries':>7}  {'step':<45} {'time s':>9} {'score':>12}  note")
    for n in sizes:
        queries = sparkcep.compile_workload(workload_text(n, routes))
        sq = [sharing_query(q.name, q.spec()) for q in queries]
        for name, secs, score, note in optimizers(sq, rates, args.budget, args.exhaustive_max):
            print(f"{n:>7}  {name:<45} {secs:>9.4f} {score:>12.1f}  {note}", flush=True)


def pandas_groups_apply(w: CompiledWorkload, df, share: bool):
    """The baseline: the former batch path of ``CompiledWorkload.apply`` for a workload of one shared operator
    (the route workloads here): its candidates tagged and grouped by ``(operator, grouping values as JSON)``,
    ``groupBy().applyInPandas``, each group's pandas frame converted to engine events, one engine per key."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from sparkcep.spark.adapters import unread_columns
    from sparkcep.spark.operator import MatchOperator
    from sparkcep.spark.workload import BRANCH, GROUP, load_workload

    data, _ = w.job_plan(share, df.schema)
    [spec], alone = load_workload(data)
    assert not alone
    unread = set(unread_columns(spec, df.columns))
    columns = [c for c in df.columns if c not in unread]
    op = MatchOperator(spec, StructType([df.schema[c] for c in columns]))
    types = sorted({t for _, pattern in spec.segments for t in pattern})
    group = F.to_json(F.struct(*op.group_cols)) if op.group_cols else F.lit("")
    tagged = df.where(F.col("type").isin(types)).select(F.lit(0).alias(BRANCH), group.alias(GROUP), *columns)

    def run_group(pdf):
        engine, rows = op.engine, []
        for events in op._split_columns(*op._columns_of(pdf[columns])).values():
            state, _ = engine.step(op.spec, engine.init_state(), events)
            rows.extend(engine.advance(op.spec, state, math.inf)[1])
        return op.frame(op._finish(rows))

    return tagged.groupBy(BRANCH, GROUP).applyInPandas(run_group, op.output_schema)


def spark_times(w: CompiledWorkload, events: list[dict], repeat: int) -> dict[tuple[bool, str], list[float]]:
    """Seconds of ``repeat`` runs of the batch job, shared and non-shared, on the batch path (``arrow``) and on
    the former one (``pandas``, :func:`pandas_groups_apply`), alternating, after one warm-up run of each (whose
    rows are checked equal)."""
    from sparkcep.spark.session import local_session

    spark = local_session("local[2]", shuffle_partitions=2, app_name="bench-sharing")
    df = spark.createDataFrame(events, "type STRING, ts LONG, vehicle LONG").cache()
    df.count()
    runs = {(share, path): (lambda share=share, path=path: w.apply(df, share=share) if path == "arrow"
                            else pandas_groups_apply(w, df, share))
            for share in (True, False) for path in ("arrow", "pandas")}
    warm = {k: sorted((r["query"], r["window_start"], r["count_all"]) for r in run().collect())
            for k, run in runs.items()}
    assert len({repr(v) for v in warm.values()}) == 1, "shared and non-shared Spark results differ"
    out: dict[tuple[bool, str], list[float]] = {k: [] for k in runs}
    for _ in range(repeat):
        for k, run in runs.items():
            t0 = time.perf_counter()
            run().count()
            out[k].append(time.perf_counter() - t0)
    return out


if __name__ == "__main__":
    main()
