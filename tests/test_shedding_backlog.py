"""The backlog-aware shedding controller (issue 17), pure: a simulated file source with a backlog feeds
micro-batches whose cost is fixed + per read event + per kept event; the controller sees the arrival-to-result
latency and the backlog, bounds what a batch reads and sets the drop ratio."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sparkcep.runtime_udfs.shedding.controller import Admission, BacklogController
from sparkcep.spark.validate import original_name, spark_reads

#: the simulated operator: a batch costs FIXED + READ per event read + KEEP per event kept (seconds)
FIXED, READ, KEEP = 0.2, 0.00005, 0.001
BOUND = 5.0
TYPES = ("A", "B", "C")
#: utility per type (gSPICE's utility stands for how much an event contributes to matches)
UTILITY = {"A": 3.0, "B": 2.0, "C": 1.0}


def capacity() -> float:
    """Events/s the operator processes unshed when batches are large (the fixed cost shared by many)."""
    return 1 / (READ + KEEP)


def simulate(rate: float, seconds: float = 120.0, seed: int = 0, *, overhead: float = READ,
             read_cost: float = READ, keep_cost: float = KEEP, startup: float = 0.0, controller: list | None = None,
             jitter: float = 0.0, type_cost: dict | None = None):
    """Run the controller on a source that gets ``rate`` events/s; returns per-batch records and, per kept
    event, its arrival-to-result latency.  ``read_cost``/``keep_cost``: the operator's cost per event read /
    kept (s);
    ``overhead``: the read cost the controller is told (0: it must learn it); ``startup``: extra seconds of the
    first batch, which reads one event (Spark's start-up: the feed starts when it ends, as in
    bench/live_latency.py); ``controller``: a list the controller is appended to; ``jitter``: a batch's
    duration varies from its cost by up to that share either way (uniform; a shared machine's batches do);
    ``type_cost``: the cost per kept event of each type instead of ``keep_cost`` (s)."""
    rng = np.random.default_rng(seed)
    n = int(rate * seconds)
    arrivals = np.sort(rng.uniform(startup, seconds, n))
    arrivals[0] = 0.0
    types = rng.choice(len(TYPES), n, p=[0.2, 0.3, 0.5])
    ctl = BacklogController(bound=BOUND, overhead=overhead)
    if controller is not None:
        controller.append(ctl)
    decision = Admission(0.0, None, None)
    now, head, prev_start, gone = 0.0, 0, None, 0
    batches, latencies = [], []
    dropped = dict.fromkeys(TYPES, 0)
    while now < seconds:
        arrived = int(np.searchsorted(arrivals, now, side="right"))
        if decision.expire is not None:  # the source sheds what waited past the expiry age whole, unread
            old = int(np.searchsorted(arrivals, now - decision.expire, side="left"))
            stale = slice(head, max(head, min(old, arrived - 1)))  # the newest waiting event never
            for i in types[stale]:
                dropped[TYPES[i]] += 1
            gone += stale.stop - stale.start
            head = stale.stop
        waiting = arrived - head
        if waiting == 0:
            now += 0.1  # an idle trigger
            continue
        take = waiting if decision.admit is None else min(waiting, decision.admit)
        read = slice(head, head + take)
        head += take
        t = types[read]
        util = np.array([UTILITY[TYPES[i]] for i in t]) + rng.uniform(0, 0.5, take)
        keep = np.ones(take, bool)
        n_drop = int(round(decision.rho * take))
        if n_drop:
            keep[np.argsort(util)[:n_drop]] = False  # the least useful events first
        for i in t[~keep]:
            dropped[TYPES[i]] += 1
        kept_cost = (keep_cost * int(keep.sum()) if type_cost is None
                     else sum(type_cost[TYPES[i]] * int((t[keep] == i).sum()) for i in range(len(TYPES))))
        duration = FIXED + read_cost * take + kept_cost + (startup if not batches else 0.0)
        duration *= 1.0 + (rng.uniform(-jitter, jitter) if jitter else 0.0)
        end = now + duration
        latencies.append(end - arrivals[read][keep])
        backlog = int(np.searchsorted(arrivals, end, side="right")) - head
        interval = now - prev_start if prev_start is not None else duration
        prev_start = now
        decision = ctl.on_batch(duration=duration, offered=take, kept=int(keep.sum()),
                                latency=float(np.percentile(end - arrivals[read], 99)), backlog=backlog,
                                interval=max(interval, duration), expired=gone)
        batches.append({"start": now, "end": end, "read": take, "kept": int(keep.sum()), "backlog": backlog,
                        "expired": gone, "types": t, "keep": keep})
        gone = 0
        now = end
    return batches, latencies, dropped


def test_load_that_fits_sheds_nothing_and_keeps_the_bound():
    batches, latencies, dropped = simulate(0.5 * capacity())
    assert sum(dropped.values()) == 0
    assert all(b["expired"] == 0 for b in batches)
    assert np.percentile(np.concatenate(latencies), 99) <= BOUND
    assert max(b["backlog"] for b in batches) < 0.5 * capacity() * BOUND


@pytest.mark.parametrize("overload", [1.5, 2.0])
def test_overload_keeps_the_bound_with_a_bounded_backlog(overload):
    rate = overload * capacity()
    batches, latencies, dropped = simulate(rate)
    steady = [lat for b, lat in zip(batches, latencies, strict=True) if b["start"] > 20]
    assert np.percentile(np.concatenate(steady), 99) <= BOUND
    # the backlog stays within what arrives in one bound (it does not grow without limit)
    assert max(b["backlog"] for b in batches if b["start"] > 20) < rate * BOUND
    # results keep coming: every 10 s of the run keeps events
    for lo in range(0, 120, 10):
        assert sum(b["kept"] for b in batches if lo <= b["start"] < lo + 10) > 0
    # every drop counted per type; the least useful type loses the most, the most useful the least
    total_read, expired = sum(b["read"] for b in batches), sum(b["expired"] for b in batches)
    assert sum(dropped.values()) == total_read - sum(b["kept"] for b in batches) + expired > 0
    read_per_type = {ty: sum(int((b["types"] == i).sum()) for b in batches) for i, ty in enumerate(TYPES)}
    share = {ty: dropped[ty] / read_per_type[ty] for ty in TYPES}
    assert share["C"] > share["B"] >= share["A"]
    # it sheds about what the overload asks for, not everything, and by utility: nothing expires unread
    assert 1 - 1 / overload - 0.05 < sum(dropped.values()) / (total_read + expired) < 1 - 1 / overload + 0.15
    assert expired == 0


def test_batches_that_overrun_their_cost_still_keep_the_bound():
    """A shared machine's micro-batches take up to 40 % more (or less) than their cost: planned to the fitted
    cost alone, one run at 1.5x reached a p99 of 8.7 s.  The controller leaves room for the largest overrun
    it measured (``spread``) for the events it keeps and keeps the bound, still shedding by utility and not
    much more than the overload asks for."""
    ctl: list = []
    for overload in (1.5, 2.0):
        for seed in range(4):
            batches, latencies, dropped = simulate(overload * capacity(), seed=seed, jitter=0.4, controller=ctl)
            steady = [lat for b, lat in zip(batches, latencies, strict=True) if b["start"] > 20]
            assert np.percentile(np.concatenate(steady), 99) <= BOUND, (overload, seed)
            total = sum(b["read"] + b["expired"] for b in batches)
            assert sum(dropped.values()) / total < 1 - 1 / overload + 0.15
            assert dropped["C"] > dropped["B"] > dropped["A"]
            # the margin is for the events kept, not for what is read: planned into the admission bound too,
            # one run at 2x let 47 % of its events expire, unread, instead of dropping the least useful
            assert sum(b["expired"] for b in batches) / total < 0.05, (overload, seed)
    assert all(0 < c.spread <= 0.4 / 0.6 + 1e-9 for c in ctl)  # at most (1 + 0.4) / (1 - 0.4) - 1


def test_the_read_cost_is_learnt_and_bounds_admission():
    """``run`` cannot tell the controller what reading and deciding an event costs (``overhead`` 0): it learns
    it from the batches once ρ has moved, and the admission bound follows: at 2x, reading costs 40 % of the
    machine; the controller reads everything that arrives (reading fits in half the budget) and sheds by
    utility, and once reading alone would not fit (3x) it admits only what does and lets the rest expire, the
    last resort, instead of batches that can no longer keep the bound."""
    read_cost, keep_cost = 0.0002, 0.0008  # capacity 1 000 ev/s
    for overload in (2.0, 3.0):
        ctl: list = []
        batches, latencies, dropped = simulate(overload * 1000, seconds=90, overhead=0.0, read_cost=read_cost,
                                               keep_cost=keep_cost, controller=ctl)
        c = ctl[0]
        fixed, read, per_kept = c.cost
        assert read == pytest.approx(read_cost, rel=0.2) and per_kept == pytest.approx(keep_cost, rel=0.2)
        admit = c.history[-1][3]
        budget = (c.target - c._gap()) / 2
        assert admit is not None and read_cost * admit <= (budget - FIXED) / 2 * 1.3
        steady = [lat for b, lat in zip(batches, latencies, strict=True) if b["start"] > 20]
        assert np.percentile(np.concatenate(steady), 99) <= BOUND
        expired = sum(b["expired"] for b in batches if b["start"] > 20)
        late = sum(b["read"] + b["expired"] for b in batches if b["start"] > 20)
        if overload == 2.0:  # reading everything fits: drops by utility only
            assert expired == 0
        else:  # reading everything would take 60 % of the machine: about a quarter expires, unread
            assert 0.1 < expired / late < 0.4
        for lo in range(0, 90, 10):
            assert sum(b["kept"] for b in batches if lo <= b["start"] < lo + 10) > 0


def test_kept_events_that_cost_more_as_rho_rises_keep_the_bound():
    """The events a shedder keeps are the useful ones, and here the most useful type costs 40x the least (as
    gSPICE keeps the events that build matches: 599 µs a kept event for gSPICE-H against 429 µs for random):
    the higher ρ, the more each kept event costs, so one fitted cost per kept event is too low and the fit
    moves that cost to reading from batch to batch.  The plan takes the kept events at an upper quantile of
    what they cost in recent batches, and the admission bound follows the median read cost of the last fits:
    on the old plan, at 3x, a fit that put reading back at ~0 lifted the bound, one batch read 4.9x the
    others' median and the p99 reached 7.4 s."""
    costs = {"A": 0.004, "B": 0.0005, "C": 0.0001}
    cap = 1 / (READ + sum(share * costs[t] for share, t in zip((0.2, 0.3, 0.5), TYPES, strict=True)))
    for seed in range(4):
        batches, latencies, dropped = simulate(3 * cap, seconds=60, seed=seed, type_cost=costs)
        steady = [lat for b, lat in zip(batches, latencies, strict=True) if b["start"] > 15]
        assert np.percentile(np.concatenate(steady), 99) <= BOUND, seed
        reads = [b["read"] for b in batches if b["start"] > 15]
        assert max(reads) <= 2 * np.median(reads), seed
        assert dropped["C"] > dropped["B"] > dropped["A"]


def test_the_plan_takes_kept_events_at_an_upper_quantile_of_their_recent_cost():
    """:attr:`BacklogController.kept_cost`: the 0.9 quantile of ``(duration − F − o × offered) / kept`` over
    the batches in memory that kept at least 5 % of what they read, and never below the fitted ``c``; a batch
    that kept 1 % measures noise, not its kept events."""
    ctl = BacklogController(bound=BOUND, overhead=READ)
    ctl.on_batch(duration=10.0, offered=10, kept=10, latency=12.0, backlog=0, interval=10.0)  # start-up
    for n, k, per_kept in [(2000, 2000, 0.001), (2000, 1000, 0.001), (2000, 1500, 0.001), (2000, 1200, 0.0015),
                           (2000, 20, 0.05)]:
        ctl.on_batch(duration=FIXED + READ * n + per_kept * k, offered=n, kept=k, latency=2.0, backlog=n,
                     interval=FIXED + READ * n + per_kept * k)
    fixed, read, per_kept = ctl.cost
    measured = [(FIXED + READ * n + c * k - fixed - read * n) / k
                for n, k, c in [(2000, 2000, 0.001), (2000, 1000, 0.001), (2000, 1500, 0.001), (2000, 1200, 0.0015)]]
    assert ctl.kept_cost == pytest.approx(max(per_kept, float(np.quantile(measured, 0.9))))
    assert ctl.kept_cost > per_kept and ctl.kept_cost < 0.01


def test_the_start_up_batch_sets_nothing():
    """The first micro-batch with events pays Spark's start-up (here 15 s for one event): counted as a
    measure, it made an event look like it cost 15 s and the controller dropped 99 % at the start (and
    less only by halves).  It sets nothing: load that fits sheds nothing after it, and at 1.5x the drop
    share is what the overload asks for from the start."""
    batches, latencies, dropped = simulate(0.5 * capacity(), seconds=60, startup=15.0)
    assert sum(dropped.values()) == 0
    batches, latencies, dropped = simulate(1.5 * capacity(), seconds=60, startup=15.0)
    first = [b for b in batches[1:] if b["start"] < 30]
    shed = 1 - sum(b["kept"] for b in first) / sum(b["read"] + b["expired"] for b in first)
    assert shed < 1 - 1 / 1.5 + 0.2



def test_a_fixed_cost_above_the_budget_is_reported_not_hidden():
    """Micro-batches whose fixed cost alone (3 s) exceeds the budget of a 5 s bound (2 s): no drop ratio can
    keep the bound; the controller drops what it can and says so (``over_budget``, the floor ``F + o × n``),
    which the end-of-run report prints; a fixed cost that fits sets nothing."""
    slow = BacklogController(bound=BOUND)
    for i in range(8):
        n = 2000 + 500 * (i % 3)
        kept = int(n * (1 - slow.rho))
        slow.on_batch(duration=3.0 + 0.0001 * n + 0.0005 * kept, offered=n, kept=kept, latency=7.0,
                      backlog=1000, interval=3.5)
    assert slow.over_budget >= 6 and slow.floor > 3.0
    fast = BacklogController(bound=BOUND)
    for _ in range(8):
        fast.on_batch(duration=0.5, offered=100, kept=100, latency=1.0, backlog=0, interval=1.0)
    assert fast.over_budget == 0 and fast.rho == 0.0

def test_the_backlog_raises_the_drop_ratio_when_batches_look_fast():
    """Batches that are quick (few events read) but leave a large backlog: a controller of the batch duration
    sees nothing wrong; this one sheds and bounds what the next batch reads."""
    ctl = BacklogController(bound=BOUND, overhead=READ)
    quiet = ctl.on_batch(duration=0.3, offered=100, kept=100, latency=0.4, backlog=0, interval=0.3)
    assert quiet.rho == 0.0
    for _ in range(3):
        busy = ctl.on_batch(duration=0.3, offered=100, kept=100, latency=30.0, backlog=50_000, interval=0.3)
    assert busy.rho > 0.5
    assert busy.admit is not None and busy.admit < 50_000
    assert busy.expire is not None and busy.expire < BOUND


class _Progress:
    """A streaming query's progress as the listener gets it: attributes and ``json``."""

    def __init__(self, batch, start, duration, name, offered, dropped, arrival, query="q"):
        from datetime import UTC, datetime

        class _Row(dict):
            def asDict(self):  # noqa: N802 - PySpark's name
                return dict(self)

        self.batchId, self.durationMs, self.id = batch, {"triggerExecution": int(duration * 1000)}, query
        self.timestamp = datetime.fromtimestamp(start, UTC).isoformat().replace("+00:00", "Z")
        self.observedMetrics = {name: _Row(offered=offered, dropped=dropped), "arrival": arrival}
        self.json = json.dumps({"batchId": batch, "timestamp": self.timestamp, "durationMs": self.durationMs,
                                "observedMetrics": self.observedMetrics})


def test_a_followed_directory_sheds_on_its_backlog(tmp_path):
    """The Spark stage's handle: batches that take 0.5 s each while the files waiting in the directory pile
    up.  The batch-duration controller sees fast batches and never sheds; following the directory, the
    backlog and the arrival-to-result latency raise ρ."""
    from sparkcep.runtime_udfs.shedding.controller import BatchController
    from sparkcep.spark.shedding import ControlFile, Shedding

    source = tmp_path / "in"
    source.mkdir()
    t0 = 1_700_000_000.0
    for i in range(200):  # 200 files of 1 000 events, one every 0.1 s
        f = source / f"part-{i:04d}.json"
        f.write_text("{}\n")
        os.utime(f, (t0 + 0.1 * i, t0 + 0.1 * i))

    def run(follow: bool) -> float:
        handle = Shedding("s", ("A",), BatchController(BOUND), ControlFile(str(tmp_path / f"c{follow}.json")))
        if follow:
            handle.follow_source(str(source))
        start = t0 + 0.5
        for batch in range(10):  # each batch reads one file (1 000 events) in 0.5 s
            mtime = (t0 + 0.1 * batch) * 1000
            arrival = {"arrived": 1000, "median": mtime, "p01": mtime, "oldest": mtime, "newest": mtime}
            handle.on_progress(_Progress(batch, start, 0.5, "s", 1000, 0, arrival))
            start += 0.5
        return handle.controller.rho

    assert run(follow=False) == 0.0
    assert run(follow=True) > 0.5




def test_a_followed_input_is_listed_once_a_batch_at_its_top_level(tmp_path, monkeypatch):
    """After each micro-batch the controller counts the files read and those waiting (the events per file) from
    one listing of the input (each listing stats every file: ~35 ms of CPU for 10^4 files on 2 cores); followed by
    the admission (Spark reads only its top-level files, the admission hands over no others), it is the listing
    in which the admission counts the events waiting, of the top level alone: its subdirectories (an archive of
    old files) are not walked.  Without the admission (a partitioned input) the files Spark reads are found by
    walking it, once."""
    from sparkcep.runtime_udfs.shedding.controller import BatchController
    from sparkcep.spark import progress
    from sparkcep.spark.shedding import ControlFile, Shedding, follow_input

    source = tmp_path / "in"
    (source / "archive").mkdir(parents=True)
    t0 = 1_700_000_000
    for i in range(20):
        (source / f"p-{i:02d}.json").write_text("{}\n")
        os.utime(source / f"p-{i:02d}.json", (t0 + i, t0 + i))
        (source / "archive" / f"old-{i:02d}.json").write_text("{}\n")
    walked, listed, scandir = [], [], os.scandir
    monkeypatch.setattr(progress, "spark_reads", lambda *a, **k: walked.append(a) or spark_reads(*a, **k))
    monkeypatch.setattr(os, "scandir", lambda path=".": listed.append(os.fspath(path)) or scandir(path))
    for admitted in (True, False):
        handle = Shedding("s", ("A",), BatchController(BOUND), ControlFile(str(tmp_path / "c.json")))
        if admitted:
            follow_input(handle, str(source), str(tmp_path / "staged"))
        else:
            handle.follow_source(str(source))
        for batch, (newest, offered) in enumerate([(4, 500), (9, 1000)]):  # files 0-4, then 5-9
            mtime = (t0 + newest) * 1000
            arrival = {"arrived": offered, "median": mtime, "p01": mtime, "oldest": mtime, "newest": mtime}
            listed.clear()
            handle.on_progress(_Progress(batch, t0 + 30.0 + batch, 0.5, "s", offered, 0, arrival))
            assert handle._per_file == offered / 5
            if admitted:  # one listing, its top level's (the admission's count of the events waiting)
                assert listed == [str(source)]
        assert len(walked) == (0 if admitted else 2), admitted  # else one walk a batch


def test_a_bound_stage_counts_only_its_query(tmp_path):
    """``run --stream --timeouts`` runs a second query over the same stage, reporting the same metrics: the
    stage bound to the results' query counts each drop once and feeds the controller that query's batches
    only (it counted "dropped 1252 of 1540 events" for 1 000 read)."""
    from sparkcep.runtime_udfs.shedding.controller import BatchController
    from sparkcep.spark.shedding import ControlFile, Shedding

    handle = Shedding("s", ("A",), BatchController(BOUND), ControlFile(str(tmp_path / "c.json")))
    handle.bind(type("Query", (), {"id": "results"})())
    arrival = {"arrived": 0}
    for batch in range(3):
        for query in ("results", "timeouts"):
            handle.on_progress(_Progress(batch, 1_700_000_000.0 + batch, 0.5, "s", 100, 30, arrival, query))
    assert handle.offered == 300 and sum(handle.dropped.values()) == 90 and len(handle.batches) == 3


def test_the_stage_drops_rho_of_each_batch_by_utility(tmp_path):
    """The Spark stage drops the least useful ρ of each micro-batch's frame: the controller's ρ is what is
    shed even when the live utilities are not distributed as the training stream's (by the training
    threshold, gSPICE-H dropped 32 % for ρ = 0.5 on the bench's workload); every kept event is at least as
    useful as every dropped one."""
    import pandas as pd

    import sparkcep
    from sparkcep.runtime_udfs.shedding.observations import SID
    from sparkcep.runtime_udfs.shedding.shedder import fit_gspice
    from sparkcep.spark.shedding import SHED, shed_partition

    rng = np.random.default_rng(5)
    spec = sparkcep.compile("PATTERN SEQ(A a, B b, C c) WHERE a.x < b.x AND b.x < c.x WITHIN 30").spec()

    def events(p, n):
        return [{"type": str(t), "ts": i, "x": int(x)}
                for i, (t, x) in enumerate(zip(rng.choice(TYPES, n, p=p), rng.integers(0, 10, n), strict=True))]

    train = [{**e, SID: i} for i, e in enumerate(events([0.6, 0.3, 0.1], 1500))]
    shedder = fit_gspice([(spec, 1.0)], train, attributes=["x"])
    live = pd.DataFrame(events([0.2, 0.3, 0.5], 3000))  # drifted: far more Cs than in training
    for rho in (0.3, 0.6):
        out = pd.concat(list(shed_partition(shedder, iter([live]), rho, seed=1)))
        assert abs(out[SHED].mean() - rho) < 0.02
        shedder.reset()
        codes, values = shedder.coder.encode_frame(live)
        u = shedder.utilities(codes, values)
        assert u[~out[SHED].to_numpy()].min() >= u[out[SHED].to_numpy()].max()
        shedder.reset()


def test_admission_on_real_files_bounds_the_backlog_and_counts_every_drop(tmp_path):
    """The admission control applied to a followed directory (``FileAdmission``, what ``run --stream`` with
    shedding reads through): files arrive at twice what the controller admits per micro-batch; the stream
    gets one slice per completed micro-batch, at most ``admit`` events, and files waiting longer than
    ``expire`` are shed whole: the waiting files stay bounded, and every event is either handed over or
    counted as dropped per type (and written to the dropped output)."""
    from sparkcep.runtime_udfs.shedding.controller import BatchController
    from sparkcep.spark.shedding import ControlFile, FileAdmission, Shedding

    source, staging, dropped = tmp_path / "in", tmp_path / "admitted", tmp_path / "dropped"
    source.mkdir()
    handle = Shedding("s", TYPES, BatchController(BOUND), ControlFile(str(tmp_path / "c.json")))
    handle.follow_source(str(source))
    handle.admission, handle._per_file = Admission(rho=0.5, admit=250, expire=3.0), 100
    admission = FileAdmission(str(source), str(staging), handle, dropped_output=str(dropped))
    rng = np.random.default_rng(1)
    fed: dict[str, int] = {}
    t0, k, waiting = 1_700_000_000.0, 0, []
    for step in range(40):  # one micro-batch a second; 4 files (400 events) arrive per second, 2 are admitted
        now = t0 + step
        for _ in range(4):
            types = rng.choice(TYPES, 100)
            f = source / f"part-{k:04d}.json"
            f.write_text("".join(json.dumps({"type": str(t), "ts": k}) + "\n" for t in types))
            os.utime(f, (now - 0.1, now - 0.1))
            for t in types:
                fed[str(t)] = fed.get(str(t), 0) + 1
            k += 1
        before = set(os.listdir(staging))
        admission.step(now)
        handed = set(os.listdir(staging)) - before
        assert len(handed) <= 2  # admit 250 events: two files of 100 per slice
        if handed:  # their names carry what waits behind them: files and events (100 a file), the slice's later
            # files included (oldest first)
            files, rows = admission.staged[-1][1:]
            assert (files, rows) == (len(admission.pending()), 100 * len(admission.pending()))
            names = admission.staged[-1][0]
            assert sorted(handed) == sorted(f"{n[:-5]}_backlog-{files + j}-{rows + 100 * j}.json"
                                            for j, n in enumerate(reversed(names)))
        admission.step(now + 0.1)  # the slice is not read yet: nothing more is handed over
        assert set(os.listdir(staging)) - before == handed
        handle._prev_start = admission.handed_at + 0.01  # a micro-batch started after the hand-over, completed
        waiting.append(len(admission.pending()))
    assert max(waiting) <= 4 * 4  # at most expire + 1 seconds of arrivals wait
    staged = sum(len((staging / name).read_text().splitlines()) for name in os.listdir(staging))
    assert staged == 2 * 40 * 100
    assert handle.expired == 400 * 40 - staged - 100 * len(admission.pending())
    assert handle.offered == 0 and not handle.dropped  # the stage's own counts: apart from the files shed whole
    counted = {}
    for name in os.listdir(dropped):
        for line in (dropped / name).read_text().splitlines():
            t = json.loads(line)["type"]
            counted[t] = counted.get(t, 0) + 1
    assert counted == handle.expired_per_type
    assert all(handle.expired_per_type[t] < fed[t] for t in TYPES)
    # after one long micro-batch the expiry age can be 0: the newest file still goes through, so that a batch
    # runs and the controller sees the load again (shedding everything would stop the run for good)
    handle.admission = Admission(rho=0.9, admit=None, expire=0.0)
    for j in range(3):
        (source / f"late-{j}.json").write_text(json.dumps({"type": "A", "ts": j}) + "\n")
        os.utime(source / f"late-{j}.json", (t0 + 40 + j, t0 + 40 + j))
    before = set(os.listdir(staging))
    admission.step(t0 + 45)
    assert set(os.listdir(staging)) - before == {"late-2_backlog-0-0.json"} and admission.pending() == []

def test_admission_stages_the_next_slice_once_spark_has_planned_a_batch(tmp_path):
    """With the checkpoint to watch, the next slice is handed over as soon as Spark has planned a micro-batch
    after the last hand-over (a new ``offsets/N``), while that batch runs, not once its progress has come:
    then Spark's next plan finds data instead of running a batch without (the watermark moved).  Only one
    slice waits at a time: no new plan, nothing more is handed over (until the bound passes)."""
    from sparkcep.runtime_udfs.shedding.controller import BatchController
    from sparkcep.spark.shedding import ControlFile, FileAdmission, Shedding

    source, staging, checkpoint = tmp_path / "in", tmp_path / "admitted", tmp_path / "ck"
    source.mkdir()
    handle = Shedding("s", TYPES, BatchController(BOUND), ControlFile(str(tmp_path / "c.json")))
    handle.follow_source(str(source))
    handle.admission, handle._per_file = Admission(rho=0.0, admit=1, expire=None), 1  # one event a slice
    admission = FileAdmission(str(source), str(staging), handle, checkpoint=str(checkpoint))
    t0 = 1_700_000_000.0
    for k in range(6):
        (source / f"part-{k}.json").write_text(json.dumps({"type": "A", "ts": k}) + "\n")
        os.utime(source / f"part-{k}.json", (t0 + k / 10, t0 + k / 10))
    # each staged name carries the backlog left behind its slice: files and events still waiting in the source
    staged = [f"part-{i}_backlog-{5 - i}-{5 - i}.json" for i in range(6)]
    admission.step(t0 + 1)  # no batch planned yet (no offsets/): the first slice goes
    assert sorted(os.listdir(staging)) == staged[:1]
    admission.step(t0 + 1.1)  # nothing planned since: the slice waits for a batch
    assert sorted(os.listdir(staging)) == staged[:1]
    (checkpoint / "offsets").mkdir(parents=True)
    for batch in range(3):  # Spark plans batch N (it took the slice); no progress has come from it
        (checkpoint / "offsets" / f".{batch}.tmp").write_text("")  # a log file being written: not a batch
        admission.step(t0 + 1.2 + batch / 10)
        assert len(os.listdir(staging)) == batch + 1  # nothing new planned since the last hand-over
        (checkpoint / "offsets" / str(batch)).write_text("v1")
        admission.step(t0 + 1.25 + batch / 10)
        assert sorted(os.listdir(staging)) == staged[:batch + 2]
    assert admission.staged == [([f"part-{i}.json"], 5 - i, 5 - i) for i in range(4)]
    assert handle._prev_start is None  # no micro-batch completed: the old rule would have waited



def test_what_arrives_while_a_batch_runs_goes_to_the_next_batch(tmp_path):
    """The slice the next micro-batch reads is topped up, up to the admission bound, with the files that arrive
    while a batch runs: held until Spark had planned the next batch, they went to the batch after it, and an
    event waited through three micro-batches instead of two (a p99 of ~3 batch durations, over the 5 s bound
    at 2x for every shedder).  Past the bound, files wait for the next slice; the controller is told the
    events waiting, counted exactly (files of different sizes), not files × the mean events per file."""
    from sparkcep.runtime_udfs.shedding.controller import BatchController
    from sparkcep.spark.shedding import ControlFile, FileAdmission, Shedding

    source, staging, checkpoint = tmp_path / "in", tmp_path / "admitted", tmp_path / "ck"
    source.mkdir()
    (checkpoint / "offsets").mkdir(parents=True)
    handle = Shedding("s", TYPES, BatchController(BOUND), ControlFile(str(tmp_path / "c.json")))
    handle.follow_source(str(source))
    handle.admission, handle._per_file = Admission(rho=0.0, admit=300, expire=None), 100
    admission = FileAdmission(str(source), str(staging), handle, checkpoint=str(checkpoint))
    t0 = 1_700_000_000.0

    def arrive(k: int, rows: int = 100) -> None:
        f = source / f"part-{k}.json"
        f.write_text("".join(json.dumps({"type": "A", "ts": k}) + "\n" for _ in range(rows)))
        os.utime(f, (t0 + k, t0 + k))

    arrive(0)
    admission.step(t0 + 0.1)  # the first slice
    (checkpoint / "offsets" / "0").write_text("v1")  # Spark planned batch 0: it took the slice, and runs
    arrive(1)
    admission.step(t0 + 1.1)  # a new plan: a new slice
    for k in (2, 3):  # batch 1 is not planned yet: its slice is topped up, up to 300 events
        arrive(k)
        admission.step(t0 + k + 0.1)
    arrive(4)
    admission.step(t0 + 4.1)  # past the bound: waits for the next slice
    assert sorted(original_name(n) for n in os.listdir(staging) if not n.startswith("_")) == \
        [f"part-{k}.json" for k in range(4)]
    assert [n for n, _ in admission.pending()] == ["part-4.json"]
    # the backlog the controller is told: the events not read yet, counted (batch 0 read part-0)
    arrive(5, rows=7)
    assert admission.unread(newest_ms=(t0 + 0) * 1000) == 3 * 100 + 100 + 7
    assert admission.unread(newest_ms=(t0 + 3) * 1000) == 100 + 7


WORKLOAD = ("ab: PATTERN SEQ(A a, B b) WHERE [id] WITHIN 10 RETURN a.ts AS a_ts, b.ts AS b_ts;\n"
            "bc: PATTERN SEQ(B b, C c) WHERE [id] AND b.x < c.x WITHIN 10 RETURN b.ts AS b_ts, c.ts AS c_ts")


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ABCD"), st.integers(1, 3), st.integers(0, 9)), min_size=1, max_size=60),
       st.lists(st.integers(1, 20), min_size=1, max_size=8))
def test_workload_shedding_under_a_loose_bound_equals_unshed(rows, sizes):
    """One stage in front of a workload (utilities for both queries), driven by the backlog controller with a
    bound the load never approaches: every micro-batch is kept whole, so each query's matches are the
    unshed ones (the brute-force oracle on all events)."""
    import pandas as pd

    import sparkcep
    from sparkcep.oracles.match import matches as oracle_matches
    from sparkcep.runtime_udfs.shedding.observations import SID
    from sparkcep.runtime_udfs.shedding.shedder import fit_gspice
    from sparkcep.spark.shedding import SHED, shed_partition

    events = [{"type": t, "ts": i, "id": k, "x": x} for i, (t, k, x) in enumerate(rows)]
    assume(any(e["type"] != "D" for e in events))  # a sample without the queries' types is refused (below)
    queries = sparkcep.compile_workload(WORKLOAD)
    training = [{**e, SID: i} for i, e in enumerate(events)]
    shedder = fit_gspice([(q.spec(), 1.0) for q in queries], training, attributes=["x"])
    ctl = BacklogController(bound=1000.0, overhead=READ)
    kept, head, rho = [], 0, 0.0
    for size in sizes * (len(events) // sum(sizes) + 1):
        batch = events[head:head + size]
        head += size
        if not batch:
            break
        frames = list(shed_partition(shedder, iter([pd.DataFrame(batch)]), rho))
        marked = pd.concat(frames)
        kept += marked[~marked[SHED]].drop(columns=[SHED]).to_dict("records")
        n_kept = int((~marked[SHED]).sum())
        duration = FIXED + READ * len(batch) + KEEP * n_kept
        rho = ctl.on_batch(duration=duration, offered=len(batch), kept=n_kept, latency=2 * duration,
                           backlog=0, interval=duration).rho
    assert len(kept) == len(events)
    for q in queries:
        assert oracle_matches(q.query, kept) == oracle_matches(q.query, events), q.name


def test_a_training_sample_without_the_queries_types_is_refused():
    """gSPICE cannot learn utilities from a sample in which no event can be part of a match: a clear error,
    not a crash of the model fitting (nor a model that never drops)."""
    import sparkcep
    from sparkcep.ir.errors import CEPError
    from sparkcep.runtime_udfs.shedding.observations import SID
    from sparkcep.runtime_udfs.shedding.shedder import fit_gspice

    specs = [(q.spec(), 1.0) for q in sparkcep.compile_workload(WORKLOAD)]
    for kind in ("hash", "tree"):
        with pytest.raises(CEPError, match="no event of the queries' types"):
            fit_gspice(specs, [{"type": "D", "ts": 0, "id": 1, "x": 0, SID: 0}], attributes=["x"], kind=kind)


#: user file names that hold the staging suffix themselves (before an extension, at the end, in an extension)
LOOK_STAGED = ["day_backlog-7-70.json", "day_backlog-7-70", "a_backlog-7-70.b.json.gz", "x.json_backlog-7-70",
               "day_backlog-7.json"]


def test_a_users_name_that_looks_staged_is_not_misread(tmp_path):
    """Only the suffix the hand-over appends is read, whatever the user's own name holds: ``original_name`` gives
    the user's name back and a second hand-over stages nothing again."""
    from sparkcep.spark.shedding import admitted_input, hand_over
    from sparkcep.spark.validate import original_name

    source, staging = tmp_path / "in", tmp_path / "ck" / "_admitted"
    source.mkdir()
    staging.mkdir(parents=True)
    for name in LOOK_STAGED:
        (source / name).write_text(json.dumps({"type": "A", "ts": 1}) + "\n")
        hand_over(str(source), str(staging), name, (3, 30))
    # every file is staged already (a restart)
    assert admitted_input(str(source), "json", follow=True, checkpoint=str(tmp_path / "ck")) == str(staging)
    os.remove(staging / "_sparkcep_staging")
    assert sorted(original_name(n) for n in os.listdir(staging)) == sorted(LOOK_STAGED)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "7", "-", "_", ".", "_backlog-", "_backlog-7-70", "_backlog-7", ".gz"]),
                min_size=1, max_size=8).map("".join).filter(lambda n: not n.startswith(("_", "."))),
       st.integers(0, 99), st.none() | st.integers(0, 9999))
def test_a_staged_name_gives_back_the_users_name_and_the_handed_over_backlog(name, files, rows):
    """Any name (one the hand-over takes: not hidden): the first match of the pattern Spark reads the backlog
    with (``regexp_extract``) is the appended suffix, and ``original_name`` is the user's name; rows unknown
    (None): no rows in the name."""
    from sparkcep.spark.validate import _BACKLOG_NAME, original_name, staged_name

    staged = staged_name(name, files, rows)
    assert original_name(staged) == name
    assert _BACKLOG_NAME.search(staged).groups() == (str(files), None if rows is None else str(rows))


@pytest.mark.spark
def test_the_observed_backlog_reads_only_the_staged_suffix(spark, tmp_path):
    """The backlog Spark reads from a staged file's name (the columns behind the ``backlog`` observed metric) is
    the hand-over's, not the ``_backlog-7-70`` of the user's own name."""
    from sparkcep.spark.shedding import hand_over
    from sparkcep.spark.validate import _backlog_marks

    source, staging = tmp_path / "in", tmp_path / "admitted"
    source.mkdir()
    staging.mkdir()
    for k, name in enumerate(LOOK_STAGED):  # a .gz file compressed: Spark reads the codec from the last extension
        data = f"line {k}\n".encode()
        (source / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
        hand_over(str(source), str(staging), name, (k, 10 * k if k % 2 else None))  # even k: rows unknown
    got = spark.read.text(str(staging)).select("value", *_backlog_marks()).collect()
    assert sorted(tuple(r) for r in got) == [(f"line {k}", k, 10 * k if k % 2 else None)
                                             for k in range(len(LOOK_STAGED))]


@pytest.mark.spark
@pytest.mark.slow
def test_another_streams_sink_output_is_read_as_it_is_with_its_log(spark, tmp_path):
    """An input directory that a Spark stream's file sink writes (it holds ``_spark_metadata``, the sink's log) gets
    no admission: Spark reads only the files that log committed, and a staging directory has no log, so every
    file there (an aborted upstream micro-batch's too) would be read.  Read as it is, a stream over it reads only
    the committed rows.  A directory whose files Spark reads are all at its top level is followed whatever plain
    subdirectories it holds: through the staging directory the stream reads exactly what it reads from the
    directory itself (its top-level files)."""
    from sparkcep.live import prepare_live
    from sparkcep.spark.validate import read_validated

    plain = tmp_path / "plain"
    (plain / "sub").mkdir(parents=True)
    (plain / "a.json").write_text('{"type": "A", "ts": 1}\n')
    (plain / "sub" / "b.json").write_text('{"type": "B", "ts": 2}\n')
    staged = []
    with prepare_live(str(plain), "json", checkpoint=str(tmp_path / "ck-plain")) as live:
        path = live.read_from
        assert live.admit(None, str(tmp_path / "ck-plain")) is not None
        assert path == str(tmp_path / "ck-plain" / "_admitted")
        events, _ = read_validated(spark, path, "json", "type", "ts", stream=True, schema="type string, ts long")
        query = (events.writeStream.trigger(availableNow=True).option("checkpointLocation", str(tmp_path / "ck-plain"))
                 .foreachBatch(lambda batch, _: staged.extend(tuple(r) for r in batch.collect())).start())
        query.awaitTermination()
    assert staged == [("A", 1)]  # as Spark reads the directory itself (test_preflight.SPARK_READS, Spark 4.3)
    seed, up = tmp_path / "seed", tmp_path / "up"
    seed.mkdir()
    (seed / "a.json").write_text('{"type": "A", "ts": 1}\n')
    upstream = (spark.readStream.schema("type string, ts long").json(str(seed)).writeStream.format("json")
                .option("checkpointLocation", str(tmp_path / "ck-up")).trigger(availableNow=True).start(str(up)))
    upstream.awaitTermination()
    assert (up / "_spark_metadata").is_dir()
    (up / "part-uncommitted.json").write_text('{"type": "B", "ts": 2}\n')  # no commit in the sink's log
    with prepare_live(str(up), "json", checkpoint=str(tmp_path / "ck")) as live:
        path = live.read_from
        assert (path, live.admit(None, str(tmp_path / "ck"))) == (str(up), None)
        assert not (tmp_path / "ck" / "_admitted").exists()
        events, _ = read_validated(spark, path, "json", "type", "ts", stream=True, schema="type string, ts long")
        got = []
        query = (events.writeStream.trigger(availableNow=True).option("checkpointLocation", str(tmp_path / "ck"))
                 .foreachBatch(lambda batch, _: got.extend(tuple(r) for r in batch.collect())).start())
        query.awaitTermination()
    assert got == [("A", 1)]


def test_rows_are_counted_as_the_stream_reads_them_or_said_unknown(tmp_path):
    """``count_rows``: JSON lines and CSV by their non-blank lines (CSV less its header), through gzip and bzip2
    (a ``.gz`` file's raw lines would miscount), Parquet from its footer; None for a codec it cannot read."""
    import bz2

    import pandas as pd

    from sparkcep.spark.shedding import count_rows

    lines = "".join(json.dumps({"type": "A", "ts": k}) + "\n" + ("\n" if k % 2 else "") for k in range(500))
    (tmp_path / "a.json").write_text(lines)
    (tmp_path / "a.json.gz").write_bytes(gzip.compress(lines.encode()))
    (tmp_path / "a.json.bz2").write_bytes(bz2.compress(lines.encode()))
    (tmp_path / "a.csv").write_text("type,ts\n" + "".join(f"A,{k}\n" for k in range(7)) + "\n")
    (tmp_path / "a.csv.gz").write_bytes(gzip.compress(b"type,ts\nA,1\nB,2\n"))
    pd.DataFrame({"type": ["A"] * 9, "ts": range(9)}).to_parquet(tmp_path / "a.parquet")
    (tmp_path / "a.json.zst").write_bytes(b"\x28\xb5\x2f\xfd")
    assert count_rows(str(tmp_path / "a.json")) == 500
    assert count_rows(str(tmp_path / "a.json.gz")) == count_rows(str(tmp_path / "a.json.bz2")) == 500
    assert count_rows(str(tmp_path / "a.csv"), "csv") == 7 and count_rows(str(tmp_path / "a.csv.gz"), "csv") == 2
    assert count_rows(str(tmp_path / "a.parquet"), "parquet") == 9
    assert count_rows(str(tmp_path / "a.json.zst")) is None


def test_a_slice_names_each_file_with_what_waits_behind_it_and_unknown_rows_stay_unknown(tmp_path):
    """With no bound (no shedding stage) every waiting file is handed over at each step, oldest first, each named
    with the files (and their rows) after it in the slice plus those left waiting: a stream taking one file per
    micro-batch observes the backlog behind each.  A file whose rows cannot be counted makes the rows behind it
    unknown (no rows in the name), not 0."""
    from sparkcep.spark.shedding import FileAdmission
    from sparkcep.spark.validate import original_name

    source, staging = tmp_path / "in", tmp_path / "admitted"
    source.mkdir()
    for k, (name, rows) in enumerate([("p0.json", 3), ("p1.json.zst", None), ("p2.json", 2), ("p3.json", 4)]):
        (source / name).write_bytes(b"\x28\xb5\x2f\xfd" if rows is None else b'{"type": "A"}\n' * rows)
        os.utime(source / name, (1_000 + k, 1_000 + k))
    admission = FileAdmission(str(source), str(staging), None)
    admission.step()
    assert sorted(os.listdir(staging)) == sorted(["p0_backlog-3.json", "p1_backlog-2-6.json.zst",
                                                  "p2_backlog-1-4.json", "p3_backlog-0-0.json"])
    assert admission.staged == [(["p0.json", "p1.json.zst", "p2.json", "p3.json"], 0, 0)]
    assert admission.backlog(1_001_000) == (2, 6) and admission.backlog(None) == (4, None)
    (source / "p4.json").write_text('{"type": "A"}\n')
    admission.step()  # only the new file
    assert sorted(original_name(n) for n in os.listdir(staging)) == sorted(["p0.json", "p1.json.zst", "p2.json",
                                                                            "p3.json", "p4.json"])
    assert "p4_backlog-0-0.json" in os.listdir(staging)


def test_a_checkpoint_that_read_the_input_itself_is_not_switched_to_the_staging_directory(tmp_path):
    """A checkpoint a stream has run with, without a staging directory (it read the input itself, before this
    admission or over it as a non-local path), keeps reading the input: its file log holds the input's files,
    and read from the staging directory they would all be read again.  A fresh checkpoint, or one with a staging
    directory, is staged; a workload's group checkpoints count too.  An input with subdirectories is read as it
    is."""
    from sparkcep.ir.errors import CEPError
    from sparkcep.spark.shedding import admitted_input
    from sparkcep.spark.validate import read_validated

    source = tmp_path / "in"
    source.mkdir()
    (source / "p0.json").write_text('{"type": "A"}\n')
    for ck, offsets in [("old", "offsets"), ("workload", "g1/offsets")]:
        (tmp_path / ck / offsets).mkdir(parents=True)
        (tmp_path / ck / offsets / "0").write_text("v1\n")
        assert admitted_input(str(source), "json", follow=True, checkpoint=str(tmp_path / ck)) is None
    (tmp_path / "fresh" / "offsets").mkdir(parents=True)  # no batch planned yet
    staging = admitted_input(str(source), "json", follow=True, checkpoint=str(tmp_path / "fresh"))
    assert staging == str(tmp_path / "fresh" / "_admitted") and "p0_backlog-0-0.json" in os.listdir(staging)
    (tmp_path / "fresh" / "offsets" / "0").write_text("v1\n")  # it ran through the staging directory
    assert admitted_input(str(source), "json", follow=True, checkpoint=str(tmp_path / "fresh")) == staging
    assert admitted_input(str(source), "json", follow=False, checkpoint=str(tmp_path / "x")) is None  # a batch
    empty = tmp_path / "empty"  # a message about the input names the followed directory, not the staging one
    empty.mkdir()
    with pytest.raises(CEPError, match=f"no input files in {empty}: a stream that starts before its files"):
        staging = admitted_input(str(empty), "json", follow=True, checkpoint=str(tmp_path / "ck-empty"))
        read_validated(None, staging, "json", "type", "ts", stream=True)
    (source / "_spark_metadata").mkdir()  # another stream's file-sink output: read as it is, with its log
    assert admitted_input(str(source), "json", follow=True, checkpoint=str(tmp_path / "sink")) is None
    (source / "_spark_metadata").rmdir()
    (source / "day=1").mkdir()  # an empty partition: read as it is (a file there later is Spark's, not lost)
    assert admitted_input(str(source), "json", follow=True, checkpoint=str(tmp_path / "y")) is None
    (source / "day=1" / "p1.json").write_text('{"type": "A"}\n')  # a partition: read as it is (only top-level
    assert admitted_input(str(source), "json", follow=True, checkpoint=str(tmp_path / "z")) is None  # files go over)


def test_a_partition_filled_after_the_start_is_said_and_refused_at_a_restart(tmp_path, capsys):
    """An input followed without partitions is read through the staging directory, its top-level files alone.  A
    file that arrives later in a ``day=1/`` made after the start is not handed over (Spark's own stream stops with
    an error on it: the partition column changes its schema): the admission says so, once.  A restart from that
    checkpoint is refused: read as it is now (partitioned), every file would be read again.  An input holding an
    empty ``day=1/`` at the start is read as it is (no admission): its later files are Spark's to read or refuse."""
    import time

    from sparkcep.ir.errors import CEPError
    from sparkcep.spark.shedding import FileAdmission, admitted_input

    source, ck = tmp_path / "in", tmp_path / "ck"
    (source / "day=0").mkdir(parents=True)
    (source / "a.json").write_text('{"type": "A"}\n')
    assert admitted_input(str(source), "json", follow=True, checkpoint=str(tmp_path / "ck0")) is None
    (source / "day=0").rmdir()
    staging = admitted_input(str(source), "json", follow=True, checkpoint=str(ck))
    admission = FileAdmission(str(source), staging, None, poll=0.01, checkpoint=str(ck)).start()
    (source / "day=1").mkdir()
    (source / "day=1" / "b.json").write_text('{"type": "A"}\n')
    err, waited = "", time.time()
    while "partition directory" not in err and time.time() - waited < 10:
        time.sleep(0.05)
        err += capsys.readouterr().err
    time.sleep(0.1)
    admission.stop()
    err += capsys.readouterr().err
    assert err.count(f"{source / 'day=1' / 'b.json'} is in a partition directory, which this stream does not read") == 1
    assert [original_name(n) for n in os.listdir(staging) if n.endswith(".json")] == ["a.json"]
    _query_checkpoint(ck, {"0": [(os.path.join(staging, "a_backlog-0-0.json"), 0)]}, 0)
    with pytest.raises(CEPError, match=f"the checkpoint {ck} read its input through .*, but {source} is now "
                                       "partitioned"):
        admitted_input(str(source), "json", follow=True, checkpoint=str(ck))
    assert admitted_input(str(source), "json", follow=True, checkpoint=str(tmp_path / "new")) is None


def test_shedding_over_csv_or_once_follows_an_unbounded_admission_that_counts_its_backlog(tmp_path):
    """Shedding over CSV (``_shed`` reads JSON lines) or with ``--once`` (a drain of what is there): the admission has
    no bound and sheds nothing whole, but the controller's backlog is still its exact count, as the progress
    line's."""
    from sparkcep.runtime_udfs.shedding.controller import BatchController
    from sparkcep.spark.shedding import ControlFile, Shedding, admitted_input, follow_input

    source = tmp_path / "in"
    source.mkdir()
    (source / "p0.csv").write_text("type,ts\nA,1\nB,2\n")
    for fmt, once in [("csv", False), ("json", True), ("json", False)]:
        handle = Shedding("s", TYPES, BatchController(BOUND), ControlFile(str(tmp_path / "c.json")))
        staging = admitted_input(str(source), fmt, follow=True, checkpoint=str(tmp_path / f"ck-{fmt}-{once}"))
        admission = follow_input(handle, str(source), staging, checkpoint=str(tmp_path / "ck"), fmt=fmt, once=once)
        assert handle.feeder is admission and handle.source == str(source)
        assert (admission.shedding is handle) == (fmt == "json" and not once)
        assert handle.feeder.unread(None) == (2 if fmt == "csv" else 3)  # CSV less its header; JSON: its lines


def test_a_file_gone_before_its_hand_over_is_skipped_and_the_thread_keeps_going(tmp_path, monkeypatch, capsys):
    """A file removed between the listing and its hand-over is not handed over (the stream would not have read
    it) and the step goes on with the others; an error of the input in a step is said once and the admission
    thread keeps running (ended, the stream would get no more files)."""
    import threading
    import time

    from sparkcep.spark.shedding import FileAdmission

    source, staging = tmp_path / "in", tmp_path / "admitted"
    source.mkdir()
    (source / "p1.json").write_text('{"type": "A"}\n')
    admission = FileAdmission(str(source), str(staging), None)
    listed = admission.pending
    monkeypatch.setattr(admission, "pending", lambda: [("p0.json", 0.0), *listed()])  # p0 gone meanwhile
    admission.step()
    assert sorted(os.listdir(staging)) == ["p1_backlog-0-0.json"]
    monkeypatch.undo()
    steps = []

    def failing_step() -> None:
        steps.append(1)
        raise PermissionError(13, "Permission denied", str(source))

    admission.step, admission.poll = failing_step, 0.01
    worker = threading.Thread(target=admission._run, daemon=True)
    worker.start()
    started = time.monotonic()
    while len(steps) < 3 and time.monotonic() - started < 30:
        time.sleep(0.01)
    assert worker.is_alive() and len(steps) >= 3
    admission._stop.set()
    worker.join(5)
    assert capsys.readouterr().err.count("Permission denied") == 1


def test_the_controllers_backlog_counts_every_countable_file_besides_one_that_is_not(tmp_path):
    """``FileAdmission.unread`` (the shedding controller's backlog) counts an uncountable file's events as 0 but
    keeps the others' (``backlog`` says the rows are unknown)."""
    from sparkcep.spark.shedding import FileAdmission

    source = tmp_path / "in"
    source.mkdir()
    (source / "p0.json").write_text('{"type": "A"}\n' * 5)
    (source / "p1.json.zst").write_bytes(b"\x28\xb5\x2f\xfd")
    admission = FileAdmission(str(source), str(tmp_path / "admitted"), None)
    assert admission.backlog(None) == (2, None) and admission.unread(None) == 5


def test_a_name_too_long_to_carry_the_backlog_is_handed_over_as_it_is_and_no_file_twice(tmp_path, monkeypatch):
    """A file whose staged name would pass the file system's limit (255 bytes) is handed over under its own name
    (the stream reads it, without a backlog), not failing the start nor stalling every step; a slice is handed
    over oldest first, and a file handed over is never handed over again under another backlog's name (the
    stream read it twice)."""
    from sparkcep.spark.shedding import FileAdmission, admitted_input

    source, checkpoint = tmp_path / "in", tmp_path / "ck"
    source.mkdir()
    long = "L" * 240 + ".json"

    def write(name: str, at: int) -> None:
        (source / name).write_text('{"type": "A"}\n')
        os.utime(source / name, (at, at))

    write("a.json", 1_000)
    write(long, 1_001)
    staging = admitted_input(str(source), "json", follow=True, checkpoint=str(checkpoint))
    admission = FileAdmission(str(source), staging, None, checkpoint=str(checkpoint))
    linked = []
    link = os.link
    monkeypatch.setattr(os, "link", lambda src, dst: (linked.append(os.path.basename(src)), link(src, dst)))
    write("c.json", 1_002)
    write("b.json", 1_002)
    admission.step()
    for k, name in enumerate(["d.json", "e.json"]):
        write(name, 1_003 + k)
        admission.step()
    staged = [original_name(n) for n in os.listdir(staging) if not n.startswith(("_", "."))]
    assert sorted(staged) == sorted([long, "a.json", "b.json", "c.json", "d.json", "e.json"])
    assert long in os.listdir(staging)
    assert linked == ["b.json", "c.json", "d.json", "e.json"]


def test_a_poll_does_not_stat_the_files_handed_over_already(tmp_path, monkeypatch):
    """The admission polls its directory every 0.1 s: the files handed over already are skipped by name, not
    stat'ed (10,000 of them cost ~40 ms of CPU per poll, 40% of a core, on the 2-core machine)."""
    from sparkcep.spark import shedding
    from sparkcep.spark.shedding import FileAdmission

    source = tmp_path / "in"
    source.mkdir()
    for k in range(5):
        (source / f"p{k}.json").write_text('{"type": "A"}\n')
    admission = FileAdmission(str(source), str(tmp_path / "admitted"), None)
    admission.step()
    stats, scandir = [], os.scandir

    class Entry:
        def __init__(self, entry):
            self._entry, self.name, self.path = entry, entry.name, entry.path

        def is_file(self):
            return self._entry.is_file()

        def stat(self):
            stats.append(self.name)
            return self._entry.stat()

    class Listing:
        def __init__(self, path):
            self._it = scandir(path)

        def __enter__(self):
            return (Entry(e) for e in self._it)

        def __exit__(self, *exc):
            self._it.close()

    monkeypatch.setattr(shedding.os, "scandir", Listing)
    (source / "p5.json").write_text('{"type": "A"}\n')
    assert admission.pending() == [("p5.json", os.path.getmtime(source / "p5.json"))]
    assert stats == ["p5.json"]


def test_the_backlog_behind_a_slice_stats_each_waiting_file_once_and_skips_one_gone_since_the_listing(
        tmp_path, monkeypatch):
    """``FileAdmission.waiting`` (the backlog a slice's names carry), after the listing, stats each waiting file
    once (its size, the key of its counted rows), not twice (an existence check first); a file gone between the
    listing and its count is not counted, neither as a file nor as unknown rows."""
    from sparkcep.spark.shedding import FileAdmission

    source = tmp_path / "in"
    source.mkdir()
    for k in range(3):
        (source / f"p{k}.json").write_text('{"type": "A"}\n' * (k + 1))
    admission = FileAdmission(str(source), str(tmp_path / "admitted"), None)
    assert admission.waiting() == (3, 6)  # the rows counted (once per name and size)
    stats, stat = [], os.stat

    def counted(path, *args, **kwargs):
        stats.append(os.path.basename(path))
        return stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counted)  # what os.path.exists and getsize call (not a listing's entries)
    assert admission.waiting() == (3, 6) and sorted(stats) == ["p0.json", "p1.json", "p2.json"]
    listed = admission.pending()
    (source / "p1.json").unlink()
    monkeypatch.setattr(admission, "pending", lambda: listed)  # listed before it went
    assert admission.waiting() == (2, 4) and admission.waiting({"p0.json"}) == (1, 3)


def test_a_checkpoint_whose_staging_directory_is_gone_is_refused_not_read_again(tmp_path):
    """A checkpoint that read its input through ``CHECKPOINT/_admitted`` (its file log names staged files), restarted
    after that directory was removed (to free the disk its links hold), is refused with a message: read from the
    input itself, every file it read would be read again (results repeated)."""
    from sparkcep.ir.errors import CEPError
    from sparkcep.spark.shedding import admitted_input

    source, ck = tmp_path / "in", tmp_path / "ck"
    source.mkdir()
    (source / "p0.json").write_text('{"type": "A"}\n')
    for folder, path in [("ck", f"{ck}/_admitted/p0_backlog-0-0.json"), ("old", f"{source}/p0.json")]:
        (tmp_path / folder / "offsets").mkdir(parents=True)
        (tmp_path / folder / "offsets" / "0").write_text("v1\n")
        (tmp_path / folder / "sources" / "0").mkdir(parents=True)
        (tmp_path / folder / "sources" / "0" / "0").write_text(f'v1\n{{"path":"file://{path}","batchId":0}}\n')
    with pytest.raises(CEPError, match=f"the checkpoint {ck} read its input through {ck}/_admitted, which is gone"):
        admitted_input(str(source), "json", follow=True, checkpoint=str(ck))
    assert admitted_input(str(source), "json", follow=True, checkpoint=str(tmp_path / "old")) is None


def test_a_checkpoint_that_followed_another_input_is_refused(tmp_path):
    """The admission knows the files it handed over by their names: a run from a checkpoint that followed another
    input directory would never read a file of the new one named like one read before (``part-0.json``, where
    Spark reading the new directory itself reads it); it is refused with a message, the same input is not."""
    from sparkcep.ir.errors import CEPError
    from sparkcep.spark.shedding import admitted_input

    a, b, ck = tmp_path / "a", tmp_path / "b", tmp_path / "ck"
    for d in (a, b):
        d.mkdir()
        (d / "part-0.json").write_text('{"type": "A"}\n')
    assert admitted_input(str(a), "json", follow=True, checkpoint=str(ck)) == str(ck / "_admitted")
    with pytest.raises(CEPError, match=f"the checkpoint {ck} followed the input {a}, not {b}: .* a file of {b} named "
                                       "like one of them would never be read"):
        admitted_input(str(b), "json", follow=True, checkpoint=str(ck))
    assert admitted_input(str(a) + "/", "json", follow=True, checkpoint=str(ck)) == str(ck / "_admitted")


def test_the_admission_thread_ends_with_the_stream_it_feeds(tmp_path):
    """``apply_stream``'s admission thread ends once its stream is no longer active (failed, or stopped directly,
    not through ``LiveStream.stop()``): no thread left polling the directory, which costs CPU at every poll."""
    import time

    from sparkcep.spark.shedding import FileAdmission

    source = tmp_path / "in"
    source.mkdir()
    active = [True]
    admission = FileAdmission(str(source), str(tmp_path / "admitted"), None, poll=0.01)
    admission.start(alive=lambda: active[0])
    time.sleep(0.2)
    assert admission._thread.is_alive()
    active[0] = False
    admission._thread.join(10)
    assert not admission._thread.is_alive()


def test_the_admission_lists_what_spark_lists(tmp_path):
    """The admission hands over (and counts as backlog) only the files Spark's file listing keeps
    (``HadoopFSUtils.shouldFilterOutPathName``): a ``._COPYING_`` file still being written by ``hadoop fs -put``
    is neither handed over nor waiting, while a ``_`` name holding ``=`` is read by Spark and so handed over; the
    same rule tells which subdirectories make an input be read as it is (partitions)."""
    from sparkcep.spark.shedding import FileAdmission, admitted_input
    from sparkcep.spark.validate import spark_lists

    assert [spark_lists(n) for n in ("a.json", ".a.json", "_a.json", "_x=1.json", "a.json._COPYING_")] == \
        [True, False, False, True, False]
    source, staging = tmp_path / "in", tmp_path / "admitted"
    source.mkdir()
    for name in ("a.json", "b.json._COPYING_", "_x=1.json", "_SUCCESS"):
        (source / name).write_text('{"type": "A"}\n')
    admission = FileAdmission(str(source), str(staging), None)
    assert admission.backlog(None) == (2, 2)
    admission.step()
    assert sorted(original_name(n) for n in os.listdir(staging) if spark_lists(n)) == ["_x=1.json", "a.json"]
    # the input is followed when Spark reads only its top-level files (:func:`validate.spark_reads`), whatever
    # subdirectories it holds besides: hidden ones, a plain one with files, an empty partition below a plain one;
    # the files handed over are exactly those Spark reads.  A partition holding a file (``_key=v`` too; at any
    # depth, in a ``_metadata/`` directory too), or a top-level one even empty, makes it read as it is
    for sub in ("_temporary", ".hidden", "copy._COPYING_", "archive/2025", "_metadata"):
        (source / sub).mkdir(parents=True)
        (source / sub / "old.json").write_text('{"type": "A"}\n')
    (source / "archive" / "k=0").mkdir()
    staging = admitted_input(str(source), "json", follow=True, checkpoint=str(tmp_path / "ck1"))
    assert staging is not None
    staged = sorted(original_name(n) for n in os.listdir(staging) if spark_lists(n))
    assert staged == sorted(os.path.basename(f) for f in spark_reads(str(source))[0]) == \
        ["_x=1.json", "a.json"]
    for k, sub in enumerate(("_day=1", "archive/2025/k=1", "_metadata/k=1", "day=2")):
        (source / sub).mkdir(parents=True, exist_ok=True)
        (source / sub / "p.json").write_text('{"type": "A"}\n')
        assert admitted_input(str(source), "json", follow=True, checkpoint=str(tmp_path / f"ck{k + 2}")) is None, sub
        (source / sub / "p.json").unlink()
    for name in ("_day=1", "day=2"):  # empty at the top level
        assert admitted_input(str(source), "json", follow=True, checkpoint=str(tmp_path / f"e{name}")) is None, name


def _query_checkpoint(folder, logs: dict[str, list[tuple[str, int]]], committed: int | None):
    """A query's checkpoint as Spark writes it: ``metadata``; its file source's log ``sources/0/<file>`` (each
    ``(path, log offset)`` entry a JSON line after ``v1``); and, with ``committed`` (the source's log offset the
    newest committed micro-batch read up to), ``offsets/<c>`` and ``commits/<c>`` of one micro-batch more
    (c = committed + 1: a micro-batch without new files reads no new log offset) and the planned micro-batch
    after it, not committed."""
    from urllib.parse import quote

    (folder / "sources" / "0").mkdir(parents=True, exist_ok=True)
    (folder / "metadata").write_text('{"id":"q"}\n')
    for name, entries in logs.items():
        lines = [json.dumps({"path": "file://" + quote(str(p)), "timestamp": 0, "batchId": b}) for p, b in entries]
        (folder / "sources" / "0" / name).write_text("v1\n" + "".join(line + "\n" for line in lines))
    if committed is not None:
        (folder / "offsets").mkdir(exist_ok=True)
        (folder / "commits").mkdir(exist_ok=True)
        c = committed + 1
        for batch, offset in [(c, committed), (c + 1, committed + 1)]:
            (folder / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{{"logOffset":{offset}}}\n')
        (folder / "commits" / str(c)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')


def test_a_staged_link_is_removed_once_its_input_is_gone_and_every_query_committed_it(tmp_path):
    """A staged file is removed (:meth:`FileAdmission.tidy`, at most every ``SWEEP_SECONDS``) only when its input
    file is gone (the admission can never hand it over again) and every query of the checkpoint (the results',
    ``_timeouts``) has committed a micro-batch that read it (its file-source log, a ``.compact`` one too, lists
    it at a log offset up to its newest commit's): not a file whose batch is only planned, nor one whose input
    is still there, nor one a second query has not committed yet."""
    from sparkcep.spark import shedding
    from sparkcep.spark.shedding import FileAdmission

    source, ck = tmp_path / "in", tmp_path / "ck"
    source.mkdir()
    names = ["a 0.json", "b.json", "c.json", "d.json"]
    for k, name in enumerate(names):
        (source / name).write_text('{"type": "A"}\n')
        os.utime(source / name, (1_000_000 + k, 1_000_000 + k))
    staging = ck / "_admitted"
    admission = FileAdmission(str(source), str(staging), None, checkpoint=str(ck))
    admission.step()
    staged = {original_name(n): n for n in os.listdir(staging) if n.endswith(".json")}
    assert sorted(staged) == names

    def at(name):
        return staging / staged[name]

    # the results' query committed log offsets 0 (a) and 1 (b); offset 2 (c) is planned, not committed
    _query_checkpoint(ck, {"0": [(at("a 0.json"), 0)], "1": [(at("b.json"), 1)], "2": [(at("c.json"), 2)]}, 1)
    # the timeouts query: a in its compact log, committed; b logged, not committed yet
    _query_checkpoint(ck / "_timeouts", {"0.compact": [(at("a 0.json"), 0)], "1": [(at("b.json"), 1)]}, 0)
    for name in ("a 0.json", "b.json", "c.json"):
        os.remove(source / name)
    assert admission.tidy(now=100.0) == [staged["a 0.json"]]
    assert not at("a 0.json").exists() and at("b.json").exists() and at("c.json").exists()
    # the timeouts query commits b: removed at the next sweep, not before SWEEP_SECONDS
    _query_checkpoint(ck / "_timeouts", {}, 1)
    assert admission.tidy(now=100.0 + shedding.SWEEP_SECONDS / 2) == []
    assert admission.tidy(now=100.0 + shedding.SWEEP_SECONDS) == [staged["b.json"]]
    # c's micro-batch commits, and d's, whose input is still there: c removed, d kept
    _query_checkpoint(ck, {"3": [(at("d.json"), 3)]}, 3)
    _query_checkpoint(ck / "_timeouts", {"2": [(at("c.json"), 2)], "3": [(at("d.json"), 3)]}, 3)
    assert admission.tidy(now=200.0) == [staged["c.json"]]
    assert sorted(original_name(n) for n in os.listdir(staging) if n.endswith(".json")) == ["d.json"]
    # each log file was read once: the results' log up to offset 3, nothing of it kept for the removed files
    assert admission.links._logs[str(ck / "sources" / "0")] == (3, {staged["d.json"]: 3})
    # a restart hands nothing over again (the inputs are gone) and removes nothing more
    again = FileAdmission(str(source), str(staging), None, checkpoint=str(ck))
    again.step()
    assert again.tidy(now=300.0) == [] and os.listdir(staging) == [staged["d.json"]]


def test_a_staged_link_waits_for_every_query_of_the_run_even_one_not_started_yet(tmp_path):
    """A workload's ``g1`` query starts only once ``g0`` has drained the input (``--once``), and a ``--timeouts``
    query or a workload's group added at a restart has no checkpoint yet: a staged file that ``g0`` committed and
    whose input is gone is kept until every query the run names (``queries``) has committed it, else the query
    starting later never read it (results lost)."""
    from sparkcep.spark.shedding import FileAdmission

    source, ck = tmp_path / "in", tmp_path / "ck"
    source.mkdir()
    (source / "a.json").write_text('{"type": "A"}\n')
    admission = FileAdmission(str(source), str(ck / "_admitted"), None, checkpoint=str(ck), queries=("g0", "g1"))
    admission.step()
    (staged,) = [n for n in os.listdir(ck / "_admitted") if n.endswith(".json")]
    os.remove(source / "a.json")
    _query_checkpoint(ck / "g0", {"0": [(ck / "_admitted" / staged, 0)]}, 0)
    assert admission.tidy(now=100.0) == [] and (ck / "_admitted" / staged).exists()
    (ck / "g1").mkdir()  # started: Spark made its checkpoint, no micro-batch committed yet
    (ck / "g1" / "metadata").write_text('{"id":"q"}\n')
    assert admission.tidy(now=200.0) == []
    _query_checkpoint(ck / "g1", {"0": [(ck / "_admitted" / staged, 0)]}, 0)
    assert admission.tidy(now=300.0) == [staged] and not (ck / "_admitted" / staged).exists()


def test_a_followed_directory_moved_away_keeps_its_staged_links(tmp_path):
    """The followed directory itself gone for a while (moved away, a mount point unmounted) does not mean its
    files are: their staged links stay (removed, a restart after the directory is back would hand the files over
    again under names carrying the backlog of the moment, read twice); once it is back, a file deleted from it
    frees its link."""
    from sparkcep.spark.shedding import FileAdmission

    source, ck = tmp_path / "in", tmp_path / "ck"
    source.mkdir()
    for name in ("a.json", "b.json"):
        (source / name).write_text('{"type": "A"}\n')
    admission = FileAdmission(str(source), str(ck / "_admitted"), None, checkpoint=str(ck))
    admission.step()
    staged = sorted(n for n in os.listdir(ck / "_admitted") if n.endswith(".json"))
    _query_checkpoint(ck, {"0": [(ck / "_admitted" / n, 0) for n in staged]}, 0)
    source.rename(tmp_path / "away")
    assert admission.tidy(now=0.0) == []
    (tmp_path / "away").rename(source)
    (source / "c.json").write_text('{"type": "A"}\n')  # arrived meanwhile: a and b would carry a new backlog
    os.utime(source / "c.json", (2e9, 2e9))
    again = FileAdmission(str(source), str(ck / "_admitted"), None, checkpoint=str(ck))
    again.step()  # a restart: a and b not handed over again (under new names the stream read them twice)
    assert sorted(n for n in os.listdir(ck / "_admitted") if n.endswith(".json") and not n.startswith("c")) == staged
    os.remove(source / "a.json")
    assert again.tidy(now=0.0) == [staged[0]]


def test_the_source_log_is_read_from_its_newest_compact_file_on(tmp_path, monkeypatch):
    """A restart reads a query's source log from its newest ``<n>.compact`` file on (it holds every entry up to
    ``n``), not the older compact and batch files Spark keeps for 10 minutes: each compact file holds the whole
    history, so reading them all costs the square of it."""
    from sparkcep.spark import shedding
    from sparkcep.spark.shedding import FileAdmission

    source, ck = tmp_path / "in", tmp_path / "ck"
    source.mkdir()
    staging = ck / "_admitted"
    staging.mkdir(parents=True)
    files = [staging / f"p{k}.json" for k in range(4)]
    for f in files:
        f.write_text('{"type": "A"}\n')
    logs = {"0": [(files[0], 0)], "1.compact": [(files[0], 0), (files[1], 1)], "2": [(files[2], 2)],
            "3.compact": [(f, k) for k, f in enumerate(files)]}
    _query_checkpoint(ck, logs, 3)
    read = []
    entries = shedding._log_entries
    monkeypatch.setattr(shedding, "_log_entries", lambda path, after: read.append(os.path.basename(path))
                        or entries(path, after))
    admission = FileAdmission(str(source), str(staging), None, checkpoint=str(ck))
    assert admission.tidy(now=0.0) == [f.name for f in files] and read == ["3.compact"]


def test_a_checkpoint_that_cannot_be_read_keeps_every_staged_link(tmp_path):
    """A source log line, or the newest commit's offsets, that cannot be read (of one query, another one's can)
    keeps every staged file; and without a query checkpoint at all (none started yet) nothing is removed."""
    from sparkcep.spark.shedding import FileAdmission

    source, ck = tmp_path / "in", tmp_path / "ck"
    source.mkdir()
    (source / "a.json").write_text('{"type": "A"}\n')
    admission = FileAdmission(str(source), str(ck / "_admitted"), None, checkpoint=str(ck))
    admission.step()
    (staged,) = [n for n in os.listdir(ck / "_admitted") if n.endswith(".json")]
    os.remove(source / "a.json")
    assert admission.links.removable() == []  # no query yet
    for query in (ck, ck / "_timeouts"):  # the timeouts query can be read: the results' one cannot
        _query_checkpoint(query, {"0": [(ck / "_admitted" / staged, 0)]}, 0)
    good = (ck / "sources" / "0" / "0").read_text()
    (ck / "sources" / "0" / "0").write_text(good + "{not json\n")
    assert admission.links.removable() == []
    (ck / "sources" / "0" / "0").write_text(good)
    offsets = (ck / "offsets" / "1").read_text()
    (ck / "offsets" / "1").write_text("v1\n")  # no source's offset
    assert admission.links.removable() == []
    (ck / "offsets" / "1").write_text(offsets.replace("logOffset", "offset"))
    assert admission.links.removable() == []
    (ck / "offsets" / "1").write_text(offsets)
    assert admission.tidy() == [staged] and not (ck / "_admitted" / staged).exists()


def test_a_restart_of_a_match_recognize_or_notebook_stream_removes_what_its_checkpoint_committed(tmp_path):
    """The admission of the runs without a shedding stage (``MATCH_RECOGNIZE`` statements, the ``%%sparkcep`` cell
    without shedding: :func:`sparkcep.live.prepare_live`) knows their checkpoint: restarted after an input file
    that its queries committed was deleted, it removes that file's staged link as it starts, and keeps the one of a
    file still there."""
    from sparkcep.live import prepare_live

    source, ck = tmp_path / "in", tmp_path / "ck"
    source.mkdir()
    for k, name in enumerate(["a.json", "b.json"]):
        (source / name).write_text('{"type": "A"}\n')
        os.utime(source / name, (1_000_000 + k, 1_000_000 + k))
    with prepare_live(str(source), "json", checkpoint=str(ck)) as live:
        live.admit(None, str(ck), queries=("g0", "g1"))
        staged = {original_name(n): n for n in os.listdir(live.read_from) if n.endswith(".json")}
    entries = [(ck / "_admitted" / staged["a.json"], 0), (ck / "_admitted" / staged["b.json"], 0)]
    for query in (ck / "g0", ck / "g1"):  # a workload's groups
        _query_checkpoint(query, {"0": entries}, 0)
    os.remove(source / "a.json")
    with prepare_live(str(source), "json", checkpoint=str(ck)) as live:
        live.admit(None, str(ck), queries=("g0", "g1"))
        assert sorted(n for n in os.listdir(live.read_from) if n.endswith(".json")) == [staged["b.json"]]
