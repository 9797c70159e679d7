"""Arrival-to-result latency of a continuous ``sparkcep run --stream`` fed at a fixed rate, and (``--quality``)
the recall of load shedding at overload: gSPICE-H/M against random and type-based shedding on Q1-Q3.

1. **Capacity**: a backlog of ``--capacity-files`` files of ``--events-per-file`` events each is written first
   and drained by ``run --stream --once --files-per-trigger --capacity-batch``: large micro-batches, so that
   the micro-batch's fixed cost (planning, scheduling, the state store: ~1 s) is amortized as it is in a
   continuous run behind its input, whose micro-batch takes every file there is.  The capacity is the median
   events/s of its micro-batches after the first (which pays the Python workers' start), from the progress
   lines.  (One 2,000-event file per micro-batch measures the fixed cost instead: a run fed at "2x" that
   capacity kept up.)
2. **Per rate** (``--rates``, multiples of the capacity; default 0.5): a continuous ``run --stream`` (default
   trigger: a micro-batch takes every file there is, ``--files-per-trigger`` to limit it) follows an empty
   directory; a feeder writes one file every ``--interval`` seconds, each of ``rate × capacity × interval``
   events (the ts go on from file to file), for ``--duration`` seconds, then SIGTERM stops the run (after its
   micro-batch under way commits).  Each micro-batch's progress line gives the latency p50/p99 of its events
   from arrival (their file's modification time) to the commit of that micro-batch, which is where a result
   they complete comes out; the script reports the events-weighted p50 of the batches' p50 and p99 of their
   p99, the mean micro-batch interval (the time from the first measured batch's progress line to the last's,
   over the batches between; the run prints them polling once a second), events/s read, the largest
   backlog seen, the results per third of the run (do they keep growing?) and, with shedding, the % of the
   events shed (``run``'s report) and per type (of the events fed).
3. **Quality** (``--quality``): the workload is the gSPICE paper's Q1-Q3 (Table IV, window 250 s; the queries
   of ``bench/load_shedding.py``) run as one ``run`` of a workload file (one shedding stage in front of the
   shared operators, utilities for every query), over DS5 (Table III: A-F, exponential inter-arrival times,
   ts in ms; Q1 and Q3 read A-C).  Per rate, the same files (same seed) feed one run per shedder in
   ``--shedders`` (``hash``: gSPICE-H, ``tree``/``forest``: gSPICE-M, ``random``, ``type``: type-based;
   ``none``: unshed, to see the overload), each with ``--shedding-latency`` (default 5 s) and
   ``--shedding-model``, trained on a separate stretch of DS5 (``--training-events``); the first shedder of
   the list runs ``--main-duration`` seconds, the others ``--duration`` (``--all-main``: every one runs
   ``--main-duration``, and recall is over that whole length for each; with the default shedders and 180 s,
   ~22 min in all on a quiet 2-core machine, against ~9 min).  The ground truth is one batch
   ``run`` over the files a run was fed (batch results equal streaming results); recall = matches of the run
   also in the truth / matches of the truth, per query (each match identified by the sequence numbers of its
   events).  One table at the end (``whole``: events in files the admission control shed whole, unread,
   having waited past the expiry age; they are in ``shed%`` too).

    python bench/live_latency.py [--events-per-file 2000] [--interval 1] [--duration 60] [--rates 0.5]
                                 [--capacity EV_PER_S] [--shedding "--shedding-latency 5s"]
    python bench/live_latency.py --quality [--rates 2] [--shedders hash,tree,random,type] [--main-duration 180]
                                 [--duration 60] [--all-main] [--bound 5s] [--quick]

    python bench/live_latency.py --quality --equal-drop 0.6 --capacity-files 4 --events-per-file 3000

``--equal-drop RHO`` (pure, ~1 min): the shedders' utilities alone at one drop ratio over the same events
(:func:`equal_drop`).  ``--quick`` (for a loaded machine): short runs, smaller capacity run.  The script
prints the expected total time before it starts.  State the machine and its load next to the figures: the
project's reference is a 2-core VM.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import random
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

QUERY = """PATTERN SEQ(A a, B b, C c) WHERE [id] AND a.x < b.x AND b.x < c.x WITHIN 1000
RETURN a.id AS id, a.ts AS a_ts, c.ts AS c_ts"""
SCHEMA = "type STRING, ts BIGINT, id BIGINT, x BIGINT"

#: ``--quality``: the paper's Q1-Q3 as one workload, each match identified by the sequence numbers (``n``) of
#: its events (Q3: its A and C, and the count, first, last and sum of its Bs).
QUALITY_RETURN = {"Q1": "RETURN a.n AS a, b.n AS b, c.n AS c",
                  "Q2": "RETURN a.n AS a, b.n AS b, c.n AS c, d.n AS d, e.n AS e, f.n AS f",
                  "Q3": "RETURN a.n AS a, c.n AS c, count(b[].n) AS nb, min(b[].n) AS b0, max(b[].n) AS b1, "
                        "sum(b[].n) AS bs"}
QUALITY_SCHEMA = "type STRING, ts BIGINT, v1 BIGINT, n BIGINT"
DATASET = "DS5"

LINE = re.compile(r"^batch (\d+): read (\d+) events \(\+(\d+)\), (\d+) results.*?, (\d+) events/s"
                  r"(?:, latency p50 ([\d.]+) s p99 ([\d.]+) s)?(?:, backlog (\d+) files)?")
SHED = re.compile(r"load shedding dropped (\d+) of (\d+) events \(([\d.]+)%; per type: (.*?)\)"
                  r"(?:; (\d+) more in files shed whole, unread, past the expiry age \(per type: (.*?)\))?"
                  r"; latency bound")
FLOOR = re.compile(r"in (\d+) micro-batches the fixed cost and reading alone \(up to ([\d.]+) s\)")
FIT = re.compile(r"micro-batch cost fitted as ([\d.]+) s \+ (\d+) µs per event read \+ (\d+) µs per event kept")


class Workload:
    """What the runs compute and the events they are fed: the default query over keyed events, or (quality)
    the gSPICE workload over DS5."""

    def __init__(self, quality: bool, work: Path, keys: int, seed: int):
        self.quality, self.keys, self.seed = quality, keys, seed
        if quality:
            from load_shedding import DATASETS, QUERIES

            self.types = tuple(DATASETS[DATASET])
            self.means = DATASETS[DATASET]
            text = ";\n".join(f"{name}:\n{QUERIES[name]}\n{QUALITY_RETURN[name]}" for name in sorted(QUALITY_RETURN))
            work.mkdir(parents=True, exist_ok=True)
            self.file = work / "gspice.cep"
            self.file.write_text(text + "\n")
            self.args = [str(self.file), "--ts-unit", "ms"]
            self.schema = QUALITY_SCHEMA
        else:
            self.types = tuple("ABCD")
            self.args = ["-e", QUERY]
            self.schema = SCHEMA

    def files(self, per_file: int, count: int, seed: int) -> list[str]:
        """``count`` files of ``per_file`` events (JSON lines), the ts going on from file to file; the same
        for the same arguments."""
        rnd = random.Random(seed)
        out, ts, n = [], 0, 0
        weights = [1 / m for m in self.means.values()] if self.quality else []
        for _ in range(count):
            lines = []
            for _ in range(per_file):
                if self.quality:  # DS5: the next event of the merged per-type Poisson streams
                    t = rnd.choices(self.types, weights=weights)[0]
                    ts += int(rnd.expovariate(sum(weights)) * 1000)
                    lines.append(json.dumps({"type": t, "ts": ts, "v1": rnd.randint(1, 10), "n": n}))
                else:
                    lines.append(json.dumps({"type": rnd.choice(self.types), "ts": ts, "id": rnd.randrange(self.keys),
                                             "x": rnd.randint(0, 9)}))
                    ts += 1
                n += 1
            out.append("\n".join(lines) + "\n")
        return out


def write_file(folder: Path, k: int, text: str, arrival: float | None = None) -> None:
    """One file, written whole (a rename) so that the source never sees half a file; ``arrival``: its
    modification time (epoch s), for files written at once: the file source reads files in modification-time
    order, and files written within one millisecond tie (listing order: out of ts order, later ts read first,
    the earlier files' events then late)."""
    tmp = folder / f".events-{k:05d}.tmp"
    tmp.write_text(text)
    if arrival is not None:
        os.utime(tmp, (arrival, arrival))
    tmp.rename(folder / f"events-{k:05d}.jsonl")


def write_backlog(folder: Path, texts: list[str]) -> None:
    """Files that arrived one after the other, the last one now (1 ms apart: read in that order)."""
    now = time.time()
    for k, text in enumerate(texts):
        write_file(folder, k, text, now - (len(texts) - k) / 1000)


def command(w: Workload, inbox: Path, work: Path, once: bool, extra: list[str], stream: bool = True) -> list[str]:
    return [sys.executable, "-m", "sparkcep.cli", "run", *w.args, "--input", str(inbox),
            "--output", str(work / "out"), "--master", "local[2]",
            *(["--stream", "--checkpoint", str(work / "ck")] if stream else []),
            *(["--once"] if once else []), *extra]


class Run:
    """A ``sparkcep run`` subprocess whose progress lines are parsed as they come."""

    def __init__(self, argv: list[str]) -> None:
        self.batches: list[dict] = []
        self.empty: set[int] = set()  # ids of micro-batches that read no event (Spark's no-data batches)
        self.lines: list[str] = []
        self.proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            m = LINE.match(line)
            if m and not int(m.group(3)):
                self.empty.add(int(m.group(1)))
            if m and int(m.group(3)):
                self.batches.append({"batch": int(m.group(1)), "events": int(m.group(3)),
                                     "results": int(m.group(4)), "rate": int(m.group(5)),
                                     "p50": float(m.group(6)) if m.group(6) else None,
                                     "p99": float(m.group(7)) if m.group(7) else None,
                                     "backlog": int(m.group(8)) if m.group(8) else None, "end": time.time()})

    def wait_for_first_batch(self, timeout: float = 900) -> None:
        deadline = time.monotonic() + timeout
        while not any(line.startswith("batch ") for line in self.lines):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the run did not start:\n" + "\n".join(self.lines))
            time.sleep(0.2)

    def wait(self) -> int:
        code = self.proc.wait()
        self._reader.join(timeout=30)
        return code

    def stop(self, timeout: float = 300) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=30)
        return code

    def shedding(self) -> dict | None:
        """``run``'s shedding report: dropped (by the stage, and whole with their files, unread: ``expired``),
        of the events offered to the stage and expired, % and per type."""
        for line in self.lines:
            m = SHED.search(line)
            if m:
                per_type = collections.Counter()
                for group in (m.group(4), m.group(6) or ""):
                    per_type.update({t: int(n) for t, n in (x.split("=") for x in group.split(", ") if "=" in x)})
                expired = int(m.group(5) or 0)
                dropped, offered = int(m.group(1)) + expired, int(m.group(2)) + expired
                floor, fit = FLOOR.search(line), FIT.search(line)
                return {"dropped": dropped, "offered": offered, "percent": 100 * dropped / max(offered, 1),
                        "per_type": dict(per_type), "expired": expired,
                        "over_budget": (int(floor.group(1)), float(floor.group(2))) if floor else None,
                        "fit": tuple(float(x) for x in fit.groups()) if fit else None}
        return None


def weighted_percentile(pairs: list[tuple[float, int]], q: float) -> float:
    """The ``q`` quantile of values given as ``(value, weight)``."""
    pairs = sorted(pairs)
    total = sum(w for _, w in pairs)
    seen = 0
    for value, weight in pairs:
        seen += weight
        if seen >= q * total:
            return value
    return pairs[-1][0]


def capacity(w: Workload, work: Path, args) -> tuple[float, int]:
    """Events/s of micro-batches of ``--capacity-batch`` files drained from a backlog (see the module doc) and
    the events per micro-batch."""
    inbox = work / "cap-in"
    inbox.mkdir(parents=True)
    write_backlog(inbox, w.files(args.events_per_file, args.capacity_files, args.seed + 1))
    run = Run(command(w, inbox, work / "cap", True, ["--files-per-trigger", str(args.capacity_batch)]))
    if run.wait() != 0:
        raise SystemExit("capacity run failed:\n" + "\n".join(run.lines))
    batches = run.batches[1:] or run.batches  # the first pays the Python workers' start
    return statistics.median(b["rate"] for b in batches), args.capacity_batch * args.events_per_file


def rows(directory: Path) -> collections.Counter:
    """The result rows a run wrote (its JSON part files), as canonical JSON strings."""
    out = collections.Counter()
    for path in glob.glob(str(directory / "part-*")):
        with open(path) as f:
            out.update(json.dumps(json.loads(line), sort_keys=True) for line in f if line.strip())
    return out


def at_rate(w: Workload, work: Path, args, rate: float, files: list[str], extra: list[str]) -> dict:
    """One continuous run fed ``files`` (one every ``--interval`` s, as many as the duration allows)."""
    inbox = work / "in"
    inbox.mkdir(parents=True)
    # the run starts on an empty directory (a stream that starts before its files needs a schema)
    per_trigger = ["--files-per-trigger", str(args.files_per_trigger)] if args.files_per_trigger else []
    run = Run(command(w, inbox, work, False, ["--schema", w.schema, *per_trigger, *extra]))
    write_file(inbox, 0, files[0])  # the first batch pays the Python workers' start
    run.wait_for_first_batch()
    warm = len(run.batches)
    t0, fed_from = time.monotonic(), time.time()
    k = 1
    while k < len(files):
        write_file(inbox, k, files[k])
        k += 1
        time.sleep(max(0.0, t0 + k * args.interval - time.monotonic()))
    fed_until = time.time()
    time.sleep(args.interval)
    code = run.stop()
    if code != 0:
        raise SystemExit(f"the run ended with {code}:\n" + "\n".join(run.lines[-20:]))
    measured = [b for b in run.batches[warm:] if b["p50"] is not None]
    if not measured:  # e.g. every file fed waited past the expiry age while the first batch ran: a row of nan
        print("no batch after the first one read events; the run's last lines:\n" + "\n".join(run.lines[-8:]),
              file=sys.stderr)
        nan = float("nan")
        measured = [{"events": 0, "p50": nan, "p99": nan, "backlog": 0, "end": nan}]
    ends = [b["end"] for b in measured]
    events = sum(b["events"] for b in measured)
    # the lines' arrival times: lines that came in one burst (a slow poll) measure no interval
    span = ends[-1] - ends[0] if len(ends) > 1 and ends[-1] - ends[0] >= 1.0 else float("nan")
    thirds = [0, 0, 0]  # results per third of the feeding time, by when their batch's line came
    before = run.batches[warm - 1]["results"] if warm else 0
    for b in run.batches[warm:]:
        third = int(3 * (b["end"] - fed_from) / max(fed_until - fed_from, 1e-3))
        thirds[max(min(third, 2), 0)] += b["results"] - before
        before = b["results"]
    fed = collections.Counter()
    for text in files[:k]:
        fed.update(json.loads(line)["type"] for line in text.splitlines())
    shed = run.shedding()
    first = run.batches[warm]["batch"] if len(run.batches) > warm else None
    nodata = len({b for b in run.empty if first is not None and b > first} - {b["batch"] for b in run.batches})
    return {"rate": rate, "files": k, "per_file": len(files[0].splitlines()), "batches": len(measured),
            "nodata": nodata,
            "p50": weighted_percentile([(b["p50"], b["events"]) for b in measured], 0.5),
            "p99": weighted_percentile([(b["p99"], b["events"]) for b in measured], 0.99),
            "interval": span / (len(ends) - 1) if len(ends) > 1 else float("nan"),
            "events_per_s": (events - measured[0]["events"]) / span if span == span and span > 0 else float("nan"),
            "backlog": max((b["backlog"] or 0) for b in measured), "thirds": thirds, "shed": shed,
            "shed_per_type": {t: (shed["per_type"].get(t, 0) / n if shed else 0.0) for t, n in sorted(fed.items())},
            "unread": sum(fed.values()) - sum(b["events"] for b in run.batches) - (shed["expired"] if shed else 0)}


def describe(mult: float, args, r: dict) -> str:
    shed = r["shed"]
    text = (f"{mult:g}x capacity ({r['rate']:.0f} ev/s fed, {r['per_file']} events every {args.interval:g} s, "
            f"{r['batches']} batches, {r['nodata']} no-data batches between them): latency p50 {r['p50']:.2f} s, "
            f"p99 {r['p99']:.2f} s; micro-batch interval "
            f"{r['interval']:.2f} s; {r['events_per_s']:.0f} events/s processed; largest backlog {r['backlog']} "
            f"files; results per third of the run {'/'.join(map(str, r['thirds']))}; {r['unread']} events unread "
            "at the stop")
    if shed:
        per_type = " ".join(f"{t} {p:.0%}" for t, p in r["shed_per_type"].items())
        text += f"; shed {shed['percent']:.1f}% ({per_type}; {shed['expired']} events in files shed whole)"
        if shed.get("over_budget"):  # the run's report: no drop ratio could keep the bound in these batches
            text += (f"; in {shed['over_budget'][0]} micro-batches the fixed cost and reading alone (up to "
                     f"{shed['over_budget'][1]:.1f} s) exceeded the budget")
        if shed.get("fit"):  # the controller's last fit: F + o x read + c x kept (o: not saved by shedding)
            text += "; cost fit {:.2f} s + {:.0f} µs/event read + {:.0f} µs/event kept".format(*shed["fit"])
    return text


def truth(w: Workload, work: Path, files: list[str]) -> collections.Counter:
    """The unshed results over ``files``: one batch run (a batch's results are the stream's)."""
    inbox = work / "truth" / "in"
    inbox.mkdir(parents=True)
    write_backlog(inbox, files)
    run = Run(command(w, inbox, work / "truth", False, ["--schema", w.schema], stream=False))
    if run.wait() != 0:
        raise SystemExit("the batch run failed:\n" + "\n".join(run.lines[-20:]))
    return rows(work / "truth" / "out")


def recall(got: collections.Counter, want: collections.Counter) -> dict[str, float]:
    """Per query (and ``all``): the share of the truth's matches the run produced."""
    out = {}
    by_query = collections.defaultdict(lambda: [0, 0])
    for row, n in want.items():
        q = json.loads(row).get("query", "all")
        by_query[q][0] += n
        by_query[q][1] += min(n, got.get(row, 0))
    for q, (total, found) in sorted(by_query.items()):
        out[q] = found / total if total else float("nan")
    total = sum(want.values())
    out["all"] = sum(min(n, got.get(row, 0)) for row, n in want.items()) / total if total else float("nan")
    return out


STARTUP = 30  # s per run: the JVM, the Python workers, the models' training (quiet 2-core machine: ~20 s)


def run_durations(args, n: int) -> list[float]:
    """Seconds of feeding of each of ``n`` shedders' runs: ``--main-duration`` for the first (every one with
    ``--all-main``), ``--duration`` for the others."""
    return [args.main_duration if i == 0 or args.all_main else args.duration for i in range(n)]


def quality_plan(args, cap: float | None) -> tuple[list[str], float]:
    """The shedders and the expected seconds of the ``--quality`` runs (``cap`` None: before the capacity
    run, which then counts too)."""
    shedders = [s.strip() for s in args.shedders.split(",") if s.strip()]
    rates = [float(r) for r in args.rates.split(",")]
    durations = run_durations(args, len(shedders))
    runs = sum(STARTUP + d for d in durations)
    # the truth: a batch over the compared stretch, at about the capacity (guessed 1000 ev/s before it is known)
    truth_s = sum(STARTUP + r * min(durations) for r in rates)
    expected = len(rates) * runs + truth_s
    if cap is None:
        expected += 2 * STARTUP + args.capacity_files * args.events_per_file / 1000
    return shedders, expected


def quality(w: Workload, work: Path, args, cap: float) -> None:
    """Per rate: one run per shedder over the same files, recall against one batch run (see the module doc)."""
    shedders, expected = quality_plan(args, cap)
    print(f"expected time from here: ~{expected / 60:.0f} min", flush=True)
    names = {"hash": "gSPICE-H", "tree": "gSPICE-M tree", "forest": "gSPICE-M forest", "random": "random",
             "type": "type-based", "none": "unshed"}
    table = []
    for k, mult in enumerate(float(r) for r in args.rates.split(",")):
        per_file = max(1, round(mult * cap * args.interval))
        durations = run_durations(args, len(shedders))
        counts = [int(d / args.interval) + 1 for d in durations]
        files = w.files(per_file, max(counts), args.seed)
        # recall over the stretch every run was fed (the first run's longer tail is not compared): a match
        # depends only on its own events (skip-till-any-match, no negation), so the batch over these files
        # holds every match the runs can find in them
        compared = min(counts)
        want = truth(w, work / f"rate{k}", files[:compared])
        for i, (name, count) in enumerate(zip(shedders, counts, strict=True)):
            extra = ["--shedding-training", str(work / "train")] if name != "none" else []
            if name != "none":
                extra += ["--shedding-latency", args.bound, "--shedding-model", name]
            folder = work / f"rate{k}-{i}-{name}"
            r = at_rate(w, folder, args, mult * cap, files[:count], extra)
            r["recall"] = recall(rows(folder / "out"), want)
            print(f"[{names.get(name, name)}, {durations[i]:g} s] " + describe(mult, args, r) + "; recall " +
                  " ".join(f"{q} {x:.1%}" for q, x in r["recall"].items()), flush=True)
            table.append((mult, names.get(name, name), durations[i], r))
        compared_s = (compared - 1) * args.interval
    print(f"\nbound {args.bound}; capacity {cap:.0f} ev/s; Q1-Q3 over {DATASET} as one workload; recall: of the "
          f"matches of a batch run over the first {compared_s:g} s of files, those the run produced")
    queries = sorted(QUALITY_RETURN)
    print(f"{'rate':>4} {'shedder':<15} {'run s':>5} {'ev/s fed':>8} {'ev/s read':>9} {'p50 s':>6} {'p99 s':>6} "
          f"{'backlog':>7} {'shed%':>6} {'whole':>6} {'shed per type':<34} " + " ".join(f"{q:>6}" for q in queries)
          + f" {'recall':>6} {'results/third':>15}")
    for mult, name, duration, r in table:
        shed = r["shed"]["percent"] if r["shed"] else 0.0
        whole = r["shed"]["expired"] if r["shed"] else 0
        per_type = " ".join(f"{t}{p:.0%}" for t, p in r["shed_per_type"].items())
        print(f"{mult:>3g}x {name:<15} {duration:>5g} {r['rate']:>8.0f} {r['events_per_s']:>9.0f} "
              f"{r['p50']:>6.2f} {r['p99']:>6.2f} {r['backlog']:>7} {shed:>6.1f} {whole:>6} {per_type:<34} "
              + " ".join(f"{r['recall'].get(q, float('nan')):>6.1%}" for q in queries)
              + f" {r['recall']['all']:>6.1%} {'/'.join(map(str, r['thirds'])):>15}")


def equal_drop(w: Workload, args) -> None:
    """``--equal-drop RHO`` (pure, no JVM): the quality workload's shedders at the same drop ratio, each file
    one frame of the Spark stage's body (:func:`~sparkcep.spark.shedding.shed_partition`), recall against the
    unshed matches of the same events (the match engine) and the engine's CPU per kept event; gSPICE also with
    the sequence number ``n`` that RETURN reads as a feature (the features before they were restricted to the
    attributes that decide matches).  What the utilities are worth, apart from the controller."""
    import pandas as pd
    import pyspark.sql.types as T

    from sparkcep.api import compile_shared_workload
    from sparkcep.runtime_udfs.shedding.observations import SID, match_keys
    from sparkcep.runtime_udfs.shedding.shedder import fit_shedder
    from sparkcep.spark.shedding import shed_partition

    schema = T.StructType([T.StructField(c, T.StringType() if c == "type" else T.LongType())
                           for c in ("type", "ts", "v1", "n")])
    workload = compile_shared_workload(w.file.read_text(), ts_unit="ms", shedding_latency=5.0)
    weighted = workload._shedding_parts(schema)[0]
    train = [{**json.loads(x), SID: i} for i, x in enumerate(w.files(args.training_events, 1, args.seed + 2)[0]
                                                              .splitlines())]
    events = [{**json.loads(x), SID: i} for i, x in enumerate(
        x for text in w.files(args.events_per_file, args.capacity_files, args.seed) for x in text.splitlines())]
    frames = [pd.DataFrame(events[i:i + args.events_per_file]) for i in range(0, len(events), args.events_per_file)]

    def matches(evs):
        t0 = time.process_time()
        return [match_keys(spec, evs) for spec, _ in weighted], time.process_time() - t0

    truth, _ = matches(events)
    print(f"equal drop {args.equal_drop:g}: {len(events)} events in {len(frames)} frames, "
          f"{sum(map(len, truth))} matches unshed (Q1-Q3: {'/'.join(str(len(t)) for t in truth)})")
    for kind, attributes in (("random", ["v1"]), ("type", ["v1"]), ("hash", ["v1"]), ("hash", ["v1", "n"]),
                             ("tree", ["v1"]), ("tree", ["v1", "n"])):
        sh = fit_shedder(weighted, train, kind=kind, attributes=attributes)
        kept = {i for f in shed_partition(sh, iter(frames), args.equal_drop, seed=args.seed)
                for i, shed in zip(f[SID], f["_shed"], strict=True) if not shed}
        got, cpu = matches([e for e in events if e[SID] in kept])
        found = [len(g & t) for g, t in zip(got, truth, strict=True)]
        print(f"{sh.name:<16} features {'+'.join(attributes):<5} kept {len(kept) / len(events):6.1%} recall "
              f"{sum(found) / max(sum(map(len, truth)), 1):6.1%} (" + "/".join(
                  f"{f / max(len(t), 1):.1%}" for f, t in zip(found, truth, strict=True))
              + f"), engine CPU {cpu / max(len(kept), 1) * 1e6:.0f} us per kept event", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events-per-file", type=int, default=2000, help="capacity run: events per file")
    p.add_argument("--capacity-files", type=int, default=24, help="capacity run: files in the backlog")
    p.add_argument("--capacity-batch", type=int, default=8, help="capacity run: files per micro-batch")
    p.add_argument("--capacity", type=float, help="events/s: skip the capacity run")
    p.add_argument("--rates", help="comma-separated multiples of the capacity (default 0.5; --quality: 2)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between two files of the feeder")
    p.add_argument("--duration", type=float,
                   help="seconds of feeding per run (default 60; --quality: 40, the runs after the first)")
    p.add_argument("--files-per-trigger", type=int,
                   help="live runs: files per micro-batch (default: all there are, Spark's default trigger)")
    p.add_argument("--keys", type=int, default=50)
    p.add_argument("--shedding", help="options passed to `run` as they are, e.g. \"--shedding-latency 5s\"")
    p.add_argument("--quality", action="store_true", help="recall of shedders on the gSPICE workload (see above)")
    p.add_argument("--shedders", default="hash,tree,random,type",
                   help="--quality: shedding models, one run each (hash, tree, forest, random, type; none: unshed)")
    p.add_argument("--main-duration", type=float, default=180, help="--quality: seconds of the first shedder's run")
    p.add_argument("--all-main", action="store_true",
                   help="--quality: every shedder runs --main-duration, recall over the same whole run (default "
                        "shedders and duration: ~22 min on a quiet 2-core machine, against ~9 min)")
    p.add_argument("--bound", default="5s", help="--quality: the latency bound (--shedding-latency)")
    p.add_argument("--training-events", type=int, default=5000, help="--quality: events to train the shedders on")
    p.add_argument("--equal-drop", type=float, metavar="RHO",
                   help="--quality: only compare the shedders' utilities at this drop ratio, no Spark (pure; "
                        "--capacity-files files of --events-per-file events)")
    p.add_argument("--quick", action="store_true", help="short runs for a loaded machine (figures: trends only)")
    p.add_argument("--seed", type=int, default=3)
    args = p.parse_args()
    args.duration = args.duration or (40 if args.quality else 60)
    if args.quick:
        args.duration, args.main_duration = min(args.duration, 20), min(args.main_duration, 30)
        args.capacity_files, args.capacity_batch = min(args.capacity_files, 9), min(args.capacity_batch, 3)
    args.rates = args.rates or ("2" if args.quality else "0.5")
    root = str(Path(__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    rates = args.rates.split(",")
    if args.quality:
        expected = quality_plan(args, args.capacity)[1]
    else:
        expected = len(rates) * (args.duration + STARTUP)
        expected += 0 if args.capacity else 2 * STARTUP + args.capacity_files * args.events_per_file / 1000
    if args.equal_drop is None:
        print(f"expected total time: ~{expected / 60:.0f} min (quiet 2-core machine)", flush=True)
    with tempfile.TemporaryDirectory(prefix="sparkcep-live-") as tmp:
        w = Workload(args.quality, Path(tmp), args.keys, args.seed)
        if args.quality and args.equal_drop is not None:
            equal_drop(w, args)
            return
        if args.quality:
            (Path(tmp) / "train").mkdir()
            write_file(Path(tmp) / "train", 0, w.files(args.training_events, 1, args.seed + 2)[0])
        if args.capacity:
            cap = args.capacity
        else:
            cap, per_batch = capacity(w, Path(tmp) / "capacity", args)
            print(f"capacity: {cap:.0f} events/s (micro-batches of {per_batch} events drained from a backlog)",
                  flush=True)
        if args.quality:
            quality(w, Path(tmp), args, cap)
            return
        for k, mult in enumerate(float(r) for r in rates):
            per_file = max(1, round(mult * cap * args.interval))
            files = w.files(per_file, int(args.duration / args.interval) + 1, args.seed)
            r = at_rate(w, Path(tmp) / f"rate{k}", args, mult * cap, files, shlex.split(args.shedding or ""))
            print(describe(mult, args, r), flush=True)


if __name__ == "__main__":
    main()
