"""Load shedding under a latency bound (gSPICE): QoR of gSPICE-H, gSPICE-M, type-based and random shedding.

    .venv/bin/python bench/load_shedding.py                      # Q1 and Q3 on DS1, 120%..200%, LB 0.25 s
    .venv/bin/python bench/load_shedding.py --queries Q1 Q2 Q3 --rates 1.4 2.0 --datasets DS1 DS5
    .venv/bin/python bench/load_shedding.py --grid --no-m --bounds 2 --rates 1.2 2.0   # DS1-DS8 x Q1-Q3
    .venv/bin/python bench/load_shedding.py --no-latency --equal-drop --pane-reset 100 1000   # models alone
    .venv/bin/python bench/load_shedding.py --no-latency --drift  # DS1 -> DS3: static vs retrained gSPICE-H
    .venv/bin/python bench/load_shedding.py --no-latency --decision-cost --queries Q1 Q2 Q3   # us/event per shedder
    .venv/bin/python bench/load_shedding.py --spark              # + a Spark streaming run (latency per batch)

**Part 1 — pure-engine overload simulation** (as in the paper's own evaluation, §IV): the synthetic datasets
DS1–DS8 of Table III (exponential inter-arrival times per type, attribute V1 uniform in 1..10) and the queries
Q1–Q3 of Table IV (window 250 s).  gSPICE is trained on a first stretch of the stream, processed unshed.  The
operator's maximum throughput μ is measured on the test stretch (real engine, chunks of events); then the
test stretch is replayed at 120 %–200 % of μ: events arrive with the dataset's own relative timing scaled to
that rate, the shedder decides per event with the current ρ, the kept events are processed by the *real*
engine chunk by chunk, and a single-server queue in virtual time advances by the *measured* CPU time of each
chunk (shedding overhead included; CPU time of this process, so that other jobs on the machine do not
distort the queue).  The latency of a chunk is its finish time minus its first arrival; the
controller (:class:`~sparkcep.runtime_udfs.shedding.controller.DampedController`, safety bound 80 %, its margin seeded
with interval costs of the training stretch; ``--controller fluid``: the per-interval ``LatencyController``)
sets ρ after every chunk from the arrived and kept counts and the measured work.  False negatives / positives
are counted against the unshed results of the same stretch, each complex event identified by the ids of its
events.

**Part 2 — Spark streaming run** (``--spark``): the same query as a real Structured Streaming job reading JSON
files that a producer writes at 2x the measured maximum throughput, with the shedding stage before the
shuffle, the ``StreamingQueryListener``-driven controller, per-type drop counts from ``observe()``; prints
the latency of every micro-batch against the bound.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sparkcep  # noqa: E402
from sparkcep.runtime_udfs.match import engine as match_engine
from sparkcep.runtime_udfs.shedding.baselines import RandomShedder, TypeShedder
from sparkcep.runtime_udfs.shedding.controller import DampedController, LatencyController
from sparkcep.runtime_udfs.shedding.observations import SID, traced_spec
from sparkcep.runtime_udfs.shedding.shedder import fit_gspice, pattern_types

#: Table III: mean inter-arrival time (seconds) per type.
DATASETS = {
    "DS1": {"A": 2.5, "B": 15, "C": 40},
    "DS2": {"A": 2.8, "B": 15, "C": 15},
    "DS3": {"A": 4, "B": 6, "C": 12},
    "DS4": {"A": 6, "B": 6, "C": 6},
    "DS5": {"A": 2.5, "B": 15, "C": 40, "D": 2.5, "E": 15, "F": 40},
    "DS6": {"A": 2.8, "B": 15, "C": 15, "D": 2.8, "E": 15, "F": 15},
    "DS7": {"A": 4, "B": 6, "C": 12, "D": 4, "E": 6, "F": 12},
    "DS8": {"A": 6, "B": 6, "C": 6, "D": 6, "E": 6, "F": 6},
}

#: Table IV, synthetic queries (ts in ms).
QUERIES = {
    "Q1": "PATTERN SEQ(A a, B b, C c) WHERE a.v1 < b.v1 AND a.v1 + b.v1 < c.v1 WITHIN 250 seconds",
    "Q2": "PATTERN SEQ(A a, B b, C c) OR SEQ(D d, E e, F f) "
          "WHERE (a.v1 < b.v1 AND a.v1 + b.v1 < c.v1) OR (d.v1 < e.v1 AND d.v1 + e.v1 < f.v1) WITHIN 250 seconds",
    "Q3": "PATTERN SEQ(A a, B+ b[], C c) WHERE a.v1 + sum(b[..i-1].v1) < b[i].v1 AND a.v1 + sum(b[].v1) < c.v1 "
          "WITHIN 250 seconds",
}
DEFAULT_DATASET = {"Q1": "DS1", "Q2": "DS5", "Q3": "DS1"}


def generate(dataset: str, seconds: float, seed: int) -> list[dict]:
    """Events of ``dataset`` over ``seconds`` of event time: per type, exponential inter-arrival times."""
    rng = np.random.default_rng(seed)
    stamps = []
    for t, mu in DATASETS[dataset].items():
        ts = np.cumsum(rng.exponential(mu, int(seconds / mu * 1.3) + 20))
        stamps += [(x, t) for x in ts[ts < seconds]]
    stamps.sort()
    v1 = rng.integers(1, 11, size=len(stamps))
    return [{"type": t, "ts": int(x * 1000), "v1": int(v), SID: i}
            for i, ((x, t), v) in enumerate(zip(stamps, v1, strict=True))]


def run_chunks(spec, chunks) -> tuple[set, list[float]]:
    """Run the traced spec over ``chunks`` of events (each advanced to its last ts); the match ids and the
    measured CPU seconds per chunk."""
    state = match_engine.init_state()
    names = [o.name for o in spec.outputs]
    found, costs = set(), []
    gc.collect()
    gc.disable()  # as in simulate(): no GC pauses of the bench's bookkeeping
    for chunk in chunks:
        t0 = time.process_time()
        out = []
        if chunk:
            match_engine.step(spec, state, chunk)
            state, out = match_engine.advance(spec, state, chunk[-1]["ts"])
        costs.append(time.process_time() - t0)
        found.update(tuple(r[n] for n in names) for r in out)
    _, out = match_engine.advance(spec, state, math.inf)
    gc.enable()
    found.update(tuple(r[n] for n in names) for r in out)
    return found, costs


def interval_costs(traced, events, mu: float, dt: float) -> list[float]:
    """CPU seconds of the engine per interval ``dt`` when events arrive at its maximum throughput ``mu`` (the
    pre-overload phase: what one interval's work can spike to)."""
    n = max(1, int(mu * dt))
    return run_chunks(traced, [events[i:i + n] for i in range(0, len(events), n)])[1]


def _throughput(traced, test) -> tuple[set, float]:
    chunks = [test[i:i + 1000] for i in range(0, len(test), 1000)]
    runs = [run_chunks(traced, chunks) for _ in range(3)]
    return runs[0][0], len(test) / float(np.median([sum(c) for _, c in runs]))


def simulate(spec, test, shedder, rate: float, bound: float, dt: float, seed: int, controller: str = "damped",
             prime=()) -> dict:
    """Replay ``test`` at ``rate`` events/s through ``shedder`` and the engine; see the module doc.  ``prime``:
    interval costs measured before the overload (seeds the damped controller's safety margin)."""
    span = (test[-1]["ts"] - test[0]["ts"]) or 1
    duration = len(test) / rate
    arrival = np.array([(e["ts"] - test[0]["ts"]) / span * duration for e in test])
    bounds = np.searchsorted(arrival, np.arange(0, duration + dt, dt), side="left")
    ctl = DampedController(bound) if controller == "damped" else LatencyController(bound)
    if isinstance(ctl, DampedController):
        ctl.prime(prime)
    rng = np.random.default_rng(seed)
    state = match_engine.init_state()
    names = [o.name for o in spec.outputs]
    found: set[tuple] = set()
    gc.collect()
    gc.disable()  # a collection of the bench's own bookkeeping is no operator cost: no GC pauses in the queue
    free_at = 0.0
    latencies, dropped, shed_cost = [], 0, 0.0
    if shedder is not None:
        shedder.reset()
    for j in range(len(bounds) - 1):
        chunk = test[bounds[j]:bounds[j + 1]]
        if not chunk:
            continue
        t0 = time.process_time()
        if shedder is not None:
            codes, values = shedder.coder.encode(chunk)
            drop = shedder.decide(codes, values, ctl.rho, rng=rng)
            kept = [e for e, d in zip(chunk, drop, strict=True) if not d]
        else:
            kept = chunk
        t1 = time.process_time()
        if kept:
            match_engine.step(spec, state, kept)
            state, out = match_engine.advance(spec, state, chunk[-1]["ts"])
        else:
            out = []
        cost = time.process_time() - t0
        if hasattr(shedder, "processed"):  # retraining sees a sample of the input and refits off the operator's
            shedder.processed(chunk)       # path (on Spark: the tasks write a sample, the driver refits)
        found.update(tuple(r[n] for n in names) for r in out)
        shed_cost += t1 - t0
        dropped += len(chunk) - len(kept)
        start = max(free_at, arrival[bounds[j + 1] - 1])  # the server takes the chunk once it has arrived
        free_at = start + cost
        latency = free_at - arrival[bounds[j]]
        latencies.append(latency)
        if isinstance(ctl, DampedController):
            ctl.update(latency, len(chunk), len(kept), cost, dt, overhead=t1 - t0)
        else:
            ctl.update(latency, len(chunk) / dt, len(kept) / max(cost - (t1 - t0), 1e-6), dt,
                       overhead=(t1 - t0) / len(chunk))
    _, out = match_engine.advance(spec, state, math.inf)
    gc.enable()
    found.update(tuple(r[n] for n in names) for r in out)
    lat = np.array(latencies)
    return {"matches": found, "drop": dropped / len(test),
            "max_latency": float(lat.max()), "p99": float(np.percentile(lat, 99)),
            "shed_us": shed_cost / len(test) * 1e6, "trace": ctl.history}


def bench_query(name: str, dataset: str, rates, bound: float, train_s: float, test_events: int, pane: int,
                seed: int, with_m: bool, controller: str = "damped", bounds: float = 8) -> list[dict]:
    q = sparkcep.compile(QUERIES[name], ts_unit="ms")
    spec = q.spec()
    traced = traced_spec(spec)
    events = generate(dataset, train_s * 20, seed)  # long enough; cut below
    read = set(pattern_types([spec]))  # the Spark SQL filter before the shedder: only the types the query reads
    events = [{**e, SID: i} for i, e in enumerate(e for e in events if e["type"] in read)]
    train = [e for e in events if e["ts"] < train_s * 1000]
    test = events[len(train):len(train) + (test_events or len(events))]
    for i, e in enumerate(test):
        e[SID] = i
    queries = [(spec, 1.0)]
    t0 = time.process_time()
    shedders = {"gSPICE-H": fit_gspice(queries, train, pane_length=pane, attributes=("v1",))}
    fit_s = time.process_time() - t0
    if with_m:
        shedders["gSPICE-M(tree)"] = fit_gspice(queries, train, pane_length=pane, attributes=("v1",), kind="tree")
        shedders["gSPICE-M(forest)"] = fit_gspice(queries, train, pane_length=pane, attributes=("v1",),
                                                  kind="forest")
    shedders["type-based"] = TypeShedder.fit(queries, [e["type"] for e in train])
    shedders["random"] = RandomShedder(shedders["gSPICE-H"].coder)
    # the operator's maximum throughput: unshed, in chunks of ~1000 events (median of 3 runs); the test
    # stretch then lasts about 8 latency bounds at the highest rate (unless --test-events is given)
    probe = test[:4000]
    mu = _throughput(traced, probe)[1]
    if not test_events:
        test = test[:max(2000, int(max(rates) * mu * bound * bounds))]
        mu = None
    truth, mu2 = _throughput(traced, test)
    mu = mu2 if mu is None else mu2
    prime = interval_costs(traced, train[-4000:], mu, bound / 20)  # the pre-overload phase, on training data
    print(f"\n== {name} on {dataset}: train {len(train)} events ({train_s:.0f} s event time; gSPICE-H fit "
          f"{fit_s:.1f} s, {len(shedders['gSPICE-H'].table)} table entries), test {len(test)} events, "
          f"{len(truth)} complex events unshed; max throughput mu = {mu:,.0f} ev/s; latency bound {bound} s")
    print(f"{'rate':>5} {'shedder':<17} {'bound':>5} {'max lat':>8} {'p99':>6} {'drop%':>6} {'FN%':>6} {'FP%':>6} "
          f"{'shed us/ev':>10}")
    out = []
    for k in rates:
        for sname, sh in shedders.items():
            r = simulate(traced, test, sh, k * mu, bound, dt=bound / 20, seed=seed, controller=controller,
                         prime=prime)
            fn = len(truth - r["matches"]) / max(len(truth), 1) * 100
            fp = len(r["matches"] - truth) / max(len(truth), 1) * 100
            kept = r["max_latency"] <= bound
            r.pop("trace")
            out.append({"query": name, "dataset": dataset, "rate": k, "shedder": sname, "fn": fn, "fp": fp,
                        "kept": kept, **r})
            print(f"{k * 100:4.0f}% {sname:<17} {'kept' if kept else 'MISS':>5} {r['max_latency']:8.3f} "
                  f"{r['p99']:6.3f} {r['drop'] * 100:6.1f} {fn:6.1f} {fp:6.1f} {r['shed_us']:10.1f}")
    return out


def bench_drift(rate: float, bound: float, train_s: float, pane: int, seed: int, controller: str = "damped") -> None:
    """Q1 trained on DS1; the test stream turns from DS1 to DS3 halfway: static gSPICE-H against gSPICE-H
    retrained on drift (type distribution moved by more than 0.15 in total variation)."""
    from sparkcep.runtime_udfs.shedding.shedder import Retraining

    spec = sparkcep.compile(QUERIES["Q1"], ts_unit="ms").spec()
    traced = traced_spec(spec)
    events = generate("DS1", train_s * 2, seed)
    train = [e for e in events if e["ts"] < train_s * 1000]
    first = events[len(train):]
    second = generate("DS3", train_s, seed + 1)
    offset = first[-1]["ts"] + 1
    test = first + [{**e, "ts": e["ts"] + offset} for e in second]
    mu = _throughput(traced, test[:4000])[1]
    half = max(1000, int(rate * mu * bound * 4))
    test = first[:half] + [{**e, "ts": e["ts"] + offset} for e in second[:half]]
    for i, e in enumerate(test):
        e[SID] = i
    truth, mu = _throughput(traced, test)
    queries = [(spec, 1.0)]
    prime = interval_costs(traced, train[-4000:], mu, bound / 20)
    static = fit_gspice(queries, train, pane_length=pane, attributes=("v1",))
    fit = lambda evs: fit_gspice(queries, evs, pane_length=pane, attributes=("v1",))  # noqa: E731
    adaptive = Retraining(fit_gspice(queries, train, pane_length=pane, attributes=("v1",)), fit, buffer=20_000,
                          min_events=1000, train_codes=static.coder.encode(train)[0])
    print(f"\n== drift: Q1, DS1 then DS3 ({len(test)} events, {len(truth)} complex events unshed), "
          f"{rate:.0%} of mu = {mu:,.0f} ev/s, latency bound {bound} s")
    for name, sh in (("gSPICE-H", static), ("gSPICE-H+retrain", adaptive), ("random", RandomShedder(static.coder))):
        r = simulate(traced, test, sh, rate * mu, bound, dt=bound / 20, seed=seed, controller=controller,
                     prime=prime)
        fn = len(truth - r["matches"]) / max(len(truth), 1) * 100
        extra = f", retrained {sh.retrains}x" if isinstance(sh, Retraining) else ""
        print(f"{name:<17} {'kept' if r['max_latency'] <= bound else 'MISS'} max latency {r['max_latency']:.3f} s, "
              f"drop {r['drop'] * 100:.1f}%, FN {fn:.1f}%{extra}")


def bench_equal_drop(name: str, dataset: str, rates, train_s: float, test_events: int, pane: int, seed: int,
                     with_m: bool, pane_resets=()) -> None:
    """The utility models alone: every shedder drops the same share ρ = 1 − 1/rate of the test stretch (no
    latency control, no costs), and the false negatives are counted.  ``pane_resets``: also gSPICE-H with its
    predecessor pane restarted every N events, as on Spark, where the pane restarts with each task."""
    spec = sparkcep.compile(QUERIES[name], ts_unit="ms").spec()
    traced = traced_spec(spec)
    events = generate(dataset, train_s * 20, seed)
    read = set(pattern_types([spec]))
    events = [{**e, SID: i} for i, e in enumerate(e for e in events if e["type"] in read)]
    train = [e for e in events if e["ts"] < train_s * 1000]
    test = events[len(train):len(train) + test_events]
    for i, e in enumerate(test):
        e[SID] = i
    queries = [(spec, 1.0)]
    shedders = {"gSPICE-H": fit_gspice(queries, train, pane_length=pane, attributes=("v1",))}
    for n in pane_resets:
        shedders[f"gSPICE-H reset/{n}"] = shedders["gSPICE-H"]
    if with_m:
        for kind in ("tree", "forest"):
            shedders[f"gSPICE-M({kind})"] = fit_gspice(queries, train, pane_length=pane, attributes=("v1",),
                                                       kind=kind)
    shedders["type-based"] = TypeShedder.fit(queries, [e["type"] for e in train])
    shedders["random"] = RandomShedder(shedders["gSPICE-H"].coder)
    truth = run_chunks(traced, [test])[0]
    print(f"\n== {name} on {dataset}, equal drop ratio rho = 1 - 1/rate (utility models only): {len(test)} events, "
          f"{len(truth)} complex events unshed; FN% (drop%)")
    print(f"{'shedder':<20}" + "".join(f"{f'rho {1 - 1 / k:.2f}':>16}" for k in rates))
    for sname, sh in shedders.items():
        every = int(sname.split("/")[1]) if "reset/" in sname else len(test)
        cells = []
        for k in rates:
            drop = np.zeros(len(test), dtype=bool)
            rng = np.random.default_rng(seed)
            for i in range(0, len(test), every):  # a new task: the pane starts empty
                sh.reset()
                codes, values = sh.coder.encode(test[i:i + every])
                drop[i:i + every] = sh.decide(codes, values, 1 - 1 / k, rng=rng)
            kept = [e for e, d in zip(test, drop, strict=True) if not d]
            found = run_chunks(traced, [kept])[0]
            cells.append(f"{len(truth - found) / max(len(truth), 1) * 100:7.1f} ({drop.mean() * 100:4.1f})")
        print(f"{sname:<20}" + "".join(f"{c:>16}" for c in cells))


def bench_decision_cost(name: str, dataset: str, train_s: float, pane: int, seed: int, frame: int = 3000,
                        frames: int = 20) -> None:
    """CPU per event of the Spark stage's body (:func:`~sparkcep.spark.shedding.shed_partition`: ts sort,
    encoding, utilities, the drop decision at ρ = 0.5) per shedder, over pandas frames of ``frame`` events,
    as a micro-batch's partition arrives (median of 3 passes): what a shedder adds to the cost per event read
    that shedding does not save (the backlog controller's ``o``)."""
    import pandas as pd

    from sparkcep.spark.shedding import shed_partition

    spec = sparkcep.compile(QUERIES[name], ts_unit="ms").spec()
    read = set(pattern_types([spec]))
    events = [e for e in generate(dataset, train_s * 20, seed) if e["type"] in read]
    train = [{**e, SID: i} for i, e in enumerate(e for e in events if e["ts"] < train_s * 1000)]
    test = events[len(train):len(train) + frame * frames]
    chunks = [pd.DataFrame(test[i:i + frame]).drop(columns=[SID]) for i in range(0, len(test), frame)]
    queries = [(spec, 1.0)]
    shedders = [fit_gspice(queries, train, pane_length=pane, attributes=("v1",), kind=k) for k in ("hash", "tree")]
    shedders += [TypeShedder.fit(queries, [e["type"] for e in train]), RandomShedder(shedders[0].coder)]
    print(f"\n== decision cost, {name} on {dataset}: {len(test)} events in frames of {frame}, CPU per event of the "
          f"stage's body (median of 3)")
    for sh in shedders:
        times = []
        for _ in range(3):
            t0 = time.process_time()
            for _ in shed_partition(sh, iter(chunks), 0.5, seed=seed):
                pass
            times.append((time.process_time() - t0) / len(test) * 1e6)
        print(f"{sh.name:<17} {float(np.median(times)):6.2f} us/event")


def summary(results: list[dict]) -> None:
    """Per query and dataset, per shedder: FN% at every rate, then means of FP% and drop%, and in how many
    runs the bound was kept; the last column says whether gSPICE-H lost fewer complex events than both
    baselines at every rate."""
    rates = sorted({r["rate"] for r in results})
    print("\n== summary: FN% per rate (lower is better), mean FP% and drop%, bound kept")
    print(f"{'query':<5} {'data':<4} {'shedder':<17}" + "".join(f"{f'FN@{k:.0%}':>9}" for k in rates)
          + f"{'FP%':>6}{'drop%':>7}{'bound':>7}")
    by: dict[tuple, list] = {}
    for r in results:
        by.setdefault((r["query"], r["dataset"], r["shedder"]), []).append(r)
    wins: dict[tuple, bool] = {}
    for (q, d, s), rs in by.items():
        if s == "gSPICE-H":
            base = [by.get((q, d, b), []) for b in ("type-based", "random")]
            wins[(q, d)] = all(h["fn"] < b["fn"] or h["fn"] == b["fn"] == 0 for bs in base
                               for h, b in zip(rs, bs, strict=True))
    for (q, d, s), rs in sorted(by.items()):
        fn = {r["rate"]: r["fn"] for r in rs}
        mark = ("  gSPICE-H best at every rate" if wins.get((q, d)) else "  not best everywhere") \
            if s == "gSPICE-H" else ""
        print(f"{q:<5} {d:<4} {s:<17}" + "".join(f"{fn[k]:9.1f}" if k in fn else f"{'-':>9}" for k in rates)
              + f"{np.mean([r['fp'] for r in rs]):6.1f}{np.mean([r['drop'] for r in rs]) * 100:7.1f}"
              + f"{sum(r['kept'] for r in rs):>4}/{len(rs)}" + mark)


#: The full grid: Q1 and Q3 read A, B, C (on DS5–DS8 the D, E, F events are filtered out before the
#: operator, as the Spark SQL filter would); Q2 needs D, E, F: DS5–DS8 only.
GRID = {"Q1": [f"DS{i}" for i in range(1, 9)], "Q2": [f"DS{i}" for i in range(5, 9)],
        "Q3": [f"DS{i}" for i in range(1, 9)]}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queries", nargs="+", default=["Q1", "Q3"])
    p.add_argument("--datasets", nargs="+", help="default: DS1 for Q1/Q3, DS5 for Q2 (as in the paper)")
    p.add_argument("--rates", nargs="+", type=float, default=[1.2, 1.4, 1.6, 1.8, 2.0])
    p.add_argument("--bound", type=float, default=0.25,
                   help="latency bound, seconds (the paper's is 1 s; the test stretch scales with it)")
    p.add_argument("--train-seconds", type=float, default=20000, help="event time of the training stretch")
    p.add_argument("--test-events", type=int, default=0, help="default: --bounds bounds at the highest rate")
    p.add_argument("--bounds", type=float, default=8, help="length of the test stretch, in latency bounds at the "
                   "highest rate (default 8)")
    p.add_argument("--grid", action="store_true", help="Q1-Q3 over DS1-DS8 (Q2: DS5-DS8); try --bounds 4 --no-m")
    p.add_argument("--pane", type=int, default=10)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--no-m", action="store_true", help="skip gSPICE-M (decision tree, random forest)")
    p.add_argument("--controller", choices=("damped", "fluid"), default="damped",
                   help="damped: overload over 20 intervals, margin from the cost spread (default); "
                        "fluid: the per-interval LatencyController")
    p.add_argument("--spark", action="store_true", help="also run the Spark streaming latency demo")
    p.add_argument("--equal-drop", action="store_true",
                   help="also compare the utility models at equal drop ratios (no latency control)")
    p.add_argument("--pane-reset", type=int, nargs="*", default=[],
                   help="with --equal-drop: also gSPICE-H with its pane restarted every N events (Spark tasks)")
    p.add_argument("--no-latency", action="store_true", help="skip the latency-controlled runs (with --equal-drop)")
    p.add_argument("--drift", action="store_true", help="also run the drift scenario (DS1 then DS3, 200%%)")
    p.add_argument("--decision-cost", action="store_true",
                   help="also the CPU per event of each shedder's decision in the Spark stage's body (no JVM)")
    args = p.parse_args(argv)
    print(f"load shedding bench ({os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}); "
          "part 1: pure-engine overload simulation")
    results = []
    pairs = [(q, d) for q in ("Q1", "Q2", "Q3") for d in GRID[q]] if args.grid else \
        [(q, d) for q in args.queries for d in args.datasets or [DEFAULT_DATASET[q]]]
    for name, ds in [] if args.no_latency else pairs:
        results += bench_query(name, ds, args.rates, args.bound, args.train_seconds, args.test_events,
                               args.pane, args.seed, not args.no_m, args.controller, args.bounds)
    if results:
        summary(results)
    if args.equal_drop:
        for name in args.queries:
            for ds in args.datasets or [DEFAULT_DATASET[name]]:
                bench_equal_drop(name, ds, args.rates, args.train_seconds, args.test_events or 20_000, args.pane,
                                 args.seed, not args.no_m, args.pane_reset)
    if args.decision_cost:
        for name in args.queries:
            for ds in args.datasets or [DEFAULT_DATASET[name]]:
                bench_decision_cost(name, ds, args.train_seconds, args.pane, args.seed)
    if args.drift:
        bench_drift(2.0, args.bound, args.train_seconds, args.pane, args.seed, args.controller)
    if args.spark:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from load_shedding_spark import main as spark_main

        spark_main([])  # its own bound: a few micro-batch costs


if __name__ == "__main__":
    main()
