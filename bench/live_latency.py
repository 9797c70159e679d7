"""Arrival-to-result latency of a continuous ``sparkcep run --stream`` fed at a fixed rate.

1. **Capacity**: a backlog of ``--capacity-files`` files of ``--events-per-file`` events each is written first
   and drained by ``run --stream --once --files-per-trigger 1``; the capacity is the median events/s of its
   micro-batches (their events over their trigger time, from the progress lines).
2. **Per rate** (``--rates``, multiples of the capacity; default 0.5): a continuous ``run --stream`` (default
   trigger: a micro-batch takes every file there is, ``--files-per-trigger`` to limit it) follows an empty
   directory; a feeder writes one file every ``--interval`` seconds, each of ``rate × capacity × interval``
   events (the ts go on from file to file), for ``--duration`` seconds, then SIGTERM stops the run (after its
   micro-batch under way commits).  Each micro-batch's progress line gives the latency p50/p99 of its events
   from arrival (their file's modification time) to the commit of that micro-batch, which is where a result
   they complete comes out; the script reports the events-weighted p50 of the batches' p50 and p99 of their
   p99, the mean micro-batch interval (the time from the first measured batch's progress line to the last's,
   over the batches between; the run prints them polling once a second), events/s processed and the largest
   backlog seen.

    python bench/live_latency.py [--events-per-file 2000] [--interval 1] [--duration 60] [--rates 0.5]
                                 [--capacity EV_PER_S] [--shedding "--shedding-latency 5s"]

``--shedding`` passes options through to ``run`` (load shedding, for the overload rates of issue 17's bench;
this script reports latency and throughput only, not the recall of shed runs).  State the machine and its
load next to the figures: the project's reference is a 2-core VM.
"""

from __future__ import annotations

import argparse
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

LINE = re.compile(r"^batch (\d+): read (\d+) events \(\+(\d+)\).*?, (\d+) events/s"
                  r"(?:, latency p50 ([\d.]+) s p99 ([\d.]+) s)?(?:, backlog (\d+) files)?")


def write_file(folder: Path, k: int, n: int, start_ts: int, keys: int, rnd: random.Random) -> None:
    """``n`` events with ts ``start_ts``..., written whole (a rename) so that the source never sees half a file."""
    tmp = folder / f".events-{k:05d}.tmp"
    with open(tmp, "w") as f:
        for t in range(start_ts, start_ts + n):
            f.write(json.dumps({"type": rnd.choice("ABCD"), "ts": t, "id": rnd.randrange(keys),
                                "x": rnd.randint(0, 9)}) + "\n")
    tmp.rename(folder / f"events-{k:05d}.jsonl")


def command(inbox: Path, work: Path, once: bool, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "sparkcep.cli", "run", "-e", QUERY, "--input", str(inbox), "--stream",
            "--output", str(work / "out"), "--checkpoint", str(work / "ck"), "--master", "local[2]",
            *(["--once"] if once else []), *extra]


class Run:
    """A ``sparkcep run`` subprocess whose progress lines are parsed as they come."""

    def __init__(self, argv: list[str]) -> None:
        self.batches: list[dict] = []
        self.lines: list[str] = []
        self.proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            m = LINE.match(line)
            if m and int(m.group(3)):
                self.batches.append({"batch": int(m.group(1)), "events": int(m.group(3)), "rate": int(m.group(4)),
                                     "p50": float(m.group(5)) if m.group(5) else None,
                                     "p99": float(m.group(6)) if m.group(6) else None,
                                     "backlog": int(m.group(7)) if m.group(7) else None, "end": time.time()})

    def wait_for_first_batch(self, timeout: float = 900) -> None:
        deadline = time.monotonic() + timeout
        while not any(line.startswith("batch ") for line in self.lines):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the run did not start:\n" + "\n".join(self.lines))
            time.sleep(0.2)

    def stop(self, timeout: float = 300) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=30)
        return code


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


def capacity(work: Path, args, rnd: random.Random) -> float:
    inbox = work / "cap-in"
    inbox.mkdir(parents=True)
    for k in range(args.capacity_files):
        write_file(inbox, k, args.events_per_file, k * args.events_per_file, args.keys, rnd)
    run = Run(command(inbox, work / "cap", True, ["--files-per-trigger", "1"]))
    code = run.proc.wait()
    run._reader.join(timeout=30)
    if code != 0:
        raise SystemExit("capacity run failed:\n" + "\n".join(run.lines))
    rates = [b["rate"] for b in run.batches[1:]] or [b["rate"] for b in run.batches]  # the first pays warm-up
    return statistics.median(rates)


def at_rate(work: Path, args, rate: float, rnd: random.Random) -> dict:
    inbox = work / "in"
    inbox.mkdir(parents=True)
    # the run starts on an empty directory (a stream that starts before its files needs a schema)
    per_trigger = ["--files-per-trigger", str(args.files_per_trigger)] if args.files_per_trigger else []
    run = Run(command(inbox, work, False, ["--schema", "type STRING, ts BIGINT, id BIGINT, x BIGINT",
                                           *per_trigger, *shlex.split(args.shedding or "")]))
    per_file = max(1, round(rate * args.interval))
    write_file(inbox, 0, per_file, 0, args.keys, rnd)  # the first batch pays the Python workers' start
    run.wait_for_first_batch()
    warm = len(run.batches)
    t0 = time.monotonic()
    k = 1
    while time.monotonic() - t0 < args.duration:
        write_file(inbox, k, per_file, k * per_file, args.keys, rnd)
        k += 1
        time.sleep(max(0.0, t0 + k * args.interval - time.monotonic()))
    time.sleep(args.interval)
    code = run.stop()
    if code != 0:
        raise SystemExit(f"the run ended with {code}:\n" + "\n".join(run.lines[-20:]))
    measured = [b for b in run.batches[warm:] if b["p50"] is not None]
    if not measured:
        raise SystemExit("no batch measured:\n" + "\n".join(run.lines[-20:]))
    ends = [b["end"] for b in measured]
    events = sum(b["events"] for b in measured)
    span = ends[-1] - ends[0] if len(ends) > 1 else float("nan")
    return {"rate": rate, "files": k, "per_file": per_file, "batches": len(measured),
            "p50": weighted_percentile([(b["p50"], b["events"]) for b in measured], 0.5),
            "p99": weighted_percentile([(b["p99"], b["events"]) for b in measured], 0.99),
            "interval": span / (len(ends) - 1) if len(ends) > 1 else float("nan"),
            "events_per_s": (events - measured[0]["events"]) / span if span == span and span > 0 else float("nan"),
            "backlog": max((b["backlog"] or 0) for b in measured)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events-per-file", type=int, default=2000, help="capacity run: events per file")
    p.add_argument("--capacity-files", type=int, default=6, help="capacity run: files in the backlog")
    p.add_argument("--capacity", type=float, help="events/s: skip the capacity run")
    p.add_argument("--rates", default="0.5", help="comma-separated multiples of the capacity (e.g. 0.5,1,1.5,2)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between two files of the feeder")
    p.add_argument("--duration", type=float, default=60, help="seconds of feeding per rate")
    p.add_argument("--files-per-trigger", type=int,
                   help="live runs: files per micro-batch (default: all there are, Spark's default trigger)")
    p.add_argument("--keys", type=int, default=50)
    p.add_argument("--shedding", help="options passed to `run` as they are, e.g. \"--shedding-latency 5s\"")
    p.add_argument("--seed", type=int, default=3)
    args = p.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                                os.environ.get("PYTHONPATH", "")])
    rnd = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="sparkcep-live-") as tmp:
        cap = args.capacity or capacity(Path(tmp) / "capacity", args, rnd)
        print(f"capacity: {cap:.0f} events/s ({args.events_per_file} events per micro-batch, one file each)")
        for k, mult in enumerate(float(r) for r in args.rates.split(",")):
            r = at_rate(Path(tmp) / f"rate{k}", args, mult * cap, rnd)
            print(f"{mult:g}x capacity ({r['rate']:.0f} ev/s fed, {r['per_file']} events every {args.interval:g} s,"
                  f" {r['batches']} batches): latency p50 {r['p50']:.2f} s, p99 {r['p99']:.2f} s; micro-batch "
                  f"interval {r['interval']:.2f} s; {r['events_per_s']:.0f} events/s processed; "
                  f"largest backlog {r['backlog']} files")


if __name__ == "__main__":
    main()
