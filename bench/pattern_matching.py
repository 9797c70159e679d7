"""Pattern-matching microbenchmarks of the pure match engine (no JVM), after SASE §5 and SASE++ §6.1.

Sections (``--sections``, comma-separated; each prints one table):

``sase``    SASE's microbenchmark ``EVENT SEQ(E1, ..., EL) WHERE [attr1] WITHIN W`` over a stream of 20 event
            types with uniform attributes (SASE §5, Table 1): throughput of the engine, partitioned by
            ``attr1`` as the Spark adapter runs it, while the domain size V1 of ``attr1`` (Exp. 1), the window W
            (Exp. 2) and the sequence length L (Exp. 5) vary.
``kleene``  SASE++'s ``PATTERN SEQ(A a, B+ b[], C c)`` under skip_till_any_match with predicates of each
            consistency class (SASE++ §5.2) and growing windows, i.e. growing selectivity θ (matches per
            event): the engine (active instance stacks, postponed construction, early filters) next to a plain
            run-cloning NFA^b baseline (one run per partial match, cloned on every relevant event: SASE+),
            with both match counts checked equal.
``spark``   the SASE microbenchmark on Spark, in one session: the sparkcep job (``sparkcep.compile(q).apply(df)``,
            batch, counted: ``spark_adapters.batch_matches``, the candidates repartitioned by key and run per partition
            under ``mapInArrow``) next to the same query written as a Spark SQL self-join with range conditions (what a
            Spark user would write without sparkcep, like SASE's TelegraphCQ comparison, §5.3), for L = 2..6 on a grid
            of (V1, W) settings (``--spark-grid``: V1 varies at fixed W as in Exp. 1/6, W at fixed V1 as in Exp. 2),
            both match counts checked equal. Wall-clock time (Spark runs in other processes), median of ``--repeat``
            alternating runs after one warm-up run of each.
``baselines`` the issue's end-to-end query ``SEQ(A a, B b, C c) WHERE [id] AND a.x < c.x WITHIN 100`` on Spark over
            a Parquet folder of ``--sizes`` events (100 ids, types A-D; each size written once under ``--data-dir``
            and reused), in one session: ``sparkcep.compile(q).apply(df).count()`` next to the best plain Spark
            formulation, a self-join bucketed by ``(id, ts div W)`` (B and C rows exploded into their own and the
            previous bucket: :func:`bucketed_join_sql`; matches checked equal), a plain ``df.groupBy("id").count()``
            over that file, and the floors: of a keyed approach (every row shuffled and sorted by id,
            :func:`keyed_floor`) and of any approach (every row read, no shuffle, :func:`scan_floor`), each also
            through a do-nothing ``mapInArrow``; wall-clock and process-tree CPU medians of ``--repeat``
            alternating runs after a warm-up of each, ratios printed (the goals: ahead of the join, <= 2x the
            groupBy; ``scan / groupBy`` and ``scan+Python / groupBy`` say what any approach pays before matching).
            It prints its expected run time first (~1 min quiet for 10^5 and 10^6; 10^7 adds ~10 min).
``state``   streaming state over a long stream: the serialized engine state of every key after each
            micro-batch of ``SEQ(E1, E2, E3) WHERE [attr1] WITHIN W``, printed over time next to the bound
            (events per window), to show it stays bounded by the window.

Every figure of the engine sections (sase, kleene, state) is events per second of CPU time of one Python process
(median of ``--repeat`` runs; the engine is single-threaded), on the machine the script runs on; say which next
to the figures.  Events are fed in micro-batches of ``--batch`` events: per batch and per key, ``step`` then
``advance`` to the batch's last ts, as the streaming adapter does.  To add a section, write
``def section_x(args) -> Table`` and register it in :data:`SECTIONS`; :func:`sase_stream` and
:func:`sase_query` give its input and query text.

    python bench/pattern_matching.py [--sections sase,kleene,spark,state,baselines] [--events 60000] [--repeat 3] \
        [--quick]
    python bench/pattern_matching.py --sections baselines [--sizes 100000,1000000,10000000] [--repeat 5]
    python bench/pattern_matching.py --sections spark [--spark-grid 10:400,100:400,100:4000,1000:4000] \
        [--spark-lengths 2,3,4,5,6] [--spark-events 100000]
"""

from __future__ import annotations

import argparse
import heapq
import math
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter

import sparkcep
from sparkcep.ir.spec import MatchSpec
from sparkcep.runtime_udfs.expr.scalar import compile_expr
from sparkcep.runtime_udfs.match import engine as match_engine
from sparkcep.runtime_udfs.match.conjuncts import Conjunct

# ----------------------------------------------------------------------------------------------- harness


@dataclass
class Table:
    """One section's results: a title, column names, rows of cells, and notes printed under it."""

    title: str
    columns: list[str]
    rows: list[list] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def print(self) -> None:
        cells = [[_cell(c) for c in row] for row in self.rows]
        widths = [max(len(h), *(len(r[k]) for r in cells)) if cells else len(h) for k, h in enumerate(self.columns)]
        print(f"\n## {self.title}")
        print("  ".join(h.rjust(w) for h, w in zip(self.columns, widths, strict=True)))
        for r in cells:
            print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
        for note in self.notes:
            print(note)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def timed(fn: Callable[[], int], repeat: int) -> tuple[float, int]:
    """(median CPU seconds of this process, result) of ``fn`` over ``repeat`` runs.  CPU time, not wall time:
    the engines are single-threaded, and CPU time does not count what other processes on the machine take."""
    times, result = [], 0
    for _ in range(repeat):
        t0 = time.process_time()
        result = fn()
        times.append(time.process_time() - t0)
    return statistics.median(times), result


def run_engine(spec: MatchSpec, events: list[dict], batch: int) -> int:
    """Feed ``events`` (ts order) in micro-batches, partitioned by ``spec.key``, the way the streaming adapter
    runs the engine under ``applyInPandasWithState``: per batch, only the keys with new events or whose
    event-time timeout (:func:`match_engine.wakeup`) is due get ``step`` + ``advance``; a key whose state is
    empty is dropped.  Returns the number of matches."""
    key = itemgetter(*spec.key) if spec.key else None
    states: dict = {}
    timers: list[tuple] = []  # (due, key): a heap of event-time timeouts
    found = 0
    for lo in range(0, len(events), batch):
        chunk = events[lo:lo + batch]
        watermark = chunk[-1]["ts"]
        groups: dict = {}
        if key is None:
            groups[()] = chunk
        else:
            for e in chunk:
                k = key(e)
                part = groups.get(k)
                if part is None:
                    groups[k] = [e]
                else:
                    part.append(e)
        while timers and timers[0][0] <= watermark:
            groups.setdefault(heapq.heappop(timers)[1], [])
        for k, part in groups.items():
            state = states.get(k)
            if state is None:
                state = states[k] = match_engine.init_state()
            match_engine.step(spec, state, part)
            _, rows = match_engine.advance(spec, state, watermark)
            found += len(rows)
            if match_engine.is_empty(state):
                del states[k]
            else:
                due = match_engine.wakeup(spec, state)
                if due is not None:
                    heapq.heappush(timers, (due, k))
    for state in states.values():
        found += len(match_engine.advance(spec, state, math.inf)[1])
    return found


# ----------------------------------------------------------------------------------------------- SASE §5


def sase_stream(n: int, domain: int, types: int = 20, seed: int = 1) -> list[dict]:
    """SASE §5's synthetic stream: ``types`` event types E1..ET uniformly, ``attr1`` uniform over
    ``1..domain``, ``ts`` a counter (so a window of W ts units holds W events)."""
    rnd = random.Random(seed)
    return [{"type": f"E{rnd.randint(1, types)}", "ts": t, "attr1": rnd.randint(1, domain)} for t in range(n)]


def sase_query(length: int, window: int) -> str:
    return f"EVENT SEQ({', '.join(f'E{k} e{k}' for k in range(1, length + 1))}) WHERE [attr1] WITHIN {window}"


def section_sase(args) -> Table:
    table = Table("SASE §5: SEQ(E1..EL) WHERE [attr1] WITHIN W, 20 types, partitioned by attr1",
                  ["experiment", "L", "V1", "W", "matches", "matches/event", "events/s"])
    plans = [("Exp.1 vary V1", 3, v, args.sase_window) for v in args.domains]
    plans += [("Exp.2 vary W", 3, args.sase_domain, w) for w in args.windows]
    plans += [("Exp.5 vary L", length, 100, args.sase_window) for length in args.lengths]
    for name, length, domain, window in plans:
        events = sase_stream(args.events, domain)
        spec = sparkcep.compile(sase_query(length, window)).spec()
        seconds, found = timed(lambda spec=spec, events=events: run_engine(spec, events, args.batch), args.repeat)
        table.rows.append([name, length, domain, window, found, found / len(events), len(events) / seconds])
    table.notes.append(f"{args.events:,} events per run, micro-batches of {args.batch:,}, medians of "
                       f"{args.repeat}.")
    return table


# ----------------------------------------------------------------------------------------------- SASE++ §6.1

KLEENE_PREDICATES = {
    # class (SASE++ §5.2) → condition on SEQ(A a, B+ b[], C c)
    "T-value consistent": "b[i].v > max(b[..i-1].v)",
    "F-value consistent": "b[i].v > min(b[..i-1].v) AND c.v < max(b[].v)",
    "inconsistent (iterator)": "b[i].v >= b[i-1].v",
    "inconsistent (whole)": "b[b.len].v > avg(b[].v)",
}


#: Stream mixes (weights of A, B, C and noise D): with C rare, most partial matches never complete (SASE++
#: §5.1's non-viable runs); with C frequent, most do and the output dominates both algorithms.
KLEENE_MIXES = {"C rare (1:6:0.1:2)": (1, 6, 0.1, 2), "C frequent (1:4:1:2)": (1, 4, 1, 2)}


def kleene_stream(n: int, weights: tuple[float, ...], seed: int = 2) -> list[dict]:
    """A, B, C and noise D with the given weights, ``v`` uniform over 0..99, ``ts`` a counter."""
    rnd = random.Random(seed)
    return [{"type": rnd.choices("ABCD", weights=weights)[0], "ts": t, "v": rnd.randint(0, 99)}
            for t in range(n)]


def kleene_query(condition: str, window: int) -> str:
    return f"PATTERN SEQ(A a, B+ b[], C c) WHERE {condition} WITHIN {window} RETURN a.ts, c.ts, count(b[].v)"


class RunLimit(Exception):
    """The run-cloning baseline exceeded its budget of simultaneous runs."""


def run_cloning(spec: MatchSpec, events: list[dict], max_runs: int) -> int:
    """The SASE+ NFA^b baseline for ``SEQ(A a, B+ b[], C c)`` under skip_till_any_match: every partial match
    is a run; an ``a`` starts one, every ``b`` a run can take clones it (one copy takes, one skips), every
    ``c`` completes every run holding a ``b``; predicates on ``b[i]`` are checked when ``b`` is taken, the
    others when ``c`` arrives; runs leave at the window.  Returns the number of matches."""
    conjs = [Conjunct(p, frozenset({"b"}), frozenset(), frozenset({"a", "b", "c"})) for p in spec.predicates]
    on_take = [c for c in conjs if "c" not in c.vars and not c.waits]
    on_c = [c for c in conjs if c not in on_take]
    local = {c.types[0]: (c.var, compile_expr(c.local)) for c in spec.components if c.local is not None}
    window = spec.window
    runs: list[tuple[dict, list[dict]]] = []  # (a, selected b's)
    found = 0
    for e in events:
        t, kind = e["ts"], e["type"]
        runs = [r for r in runs if t - r[0]["ts"] < window]
        if kind in local and local[kind][1]({local[kind][0]: e}) is not True:
            continue
        if kind == "A":
            runs.append((e, []))
        elif kind == "B":
            clones = []
            for a, bs in runs:
                if bs and bs[-1]["ts"] >= t:
                    continue
                taken = [*bs, e]
                if _takes(on_take, {"a": a, "b": taken, "c": None}, len(taken) - 1):
                    clones.append((a, taken))
            runs += clones
            if len(runs) > max_runs:
                raise RunLimit
        elif kind == "C":
            for a, bs in runs:
                if bs and bs[-1]["ts"] < t:
                    binding = {"a": a, "b": bs, "c": e}
                    if all(c.check(binding) for c in on_c):
                        found += 1
    return found


def _takes(conjs: list[Conjunct], binding: dict, at: int) -> bool:
    """The conjuncts on ``b[i]`` hold at the new position ``at`` (``b[i-1]``, ``b[..i-1]``: from the second)."""
    for c in conjs:
        prev, _ = c.positional.get("b", (False, False))
        if prev and at < 1:
            continue
        if not (c.holds_at(binding, "b", at) if "b" in c.positional else c.check(binding)):
            return False
    return True


def section_kleene(args) -> Table:
    table = Table("SASE++ §6.1: SEQ(A a, B+ b[], C c) under skip_till_any_match, by predicate class and window",
                  ["stream", "predicate class", "W", "matches/event", "engine ev/s", "run cloning ev/s",
                   "speed-up"])
    for mix, weights in KLEENE_MIXES.items():
        events = kleene_stream(args.kleene_events, weights)
        for name, condition in KLEENE_PREDICATES.items():
            for window in args.kleene_windows:
                spec = sparkcep.compile(kleene_query(condition, window)).spec()
                seconds, found = timed(lambda spec=spec, ev=events: run_engine(spec, ev, args.batch), args.repeat)
                try:
                    base_seconds, base_found = timed(
                        lambda spec=spec, ev=events: run_cloning(spec, ev, args.max_runs), args.repeat)
                except RunLimit:
                    base_seconds = None
                else:
                    assert base_found == found, (name, window, base_found, found)
                table.rows.append([mix, name, window, found / len(events), len(events) / seconds,
                                   len(events) / base_seconds if base_seconds else None,
                                   f"{base_seconds / seconds:.1f}x" if base_seconds else None])
    table.notes.append(f"{args.kleene_events:,} events per stream (v uniform 0..99), one partition, micro-batches "
                       f"of {args.batch:,}, medians of {args.repeat} (CPU time); '-': the baseline exceeded "
                       f"{args.max_runs:,} simultaneous runs.")
    for name, condition in KLEENE_PREDICATES.items():
        table.notes.append(f"  {name}: WHERE {condition}")
    return table


# ----------------------------------------------------------------------------------------------- Spark


def self_join_sql(length: int, window: int, table: str) -> str:
    """``SEQ(E1, ..., EL) WHERE [attr1] WITHIN W`` as the Spark SQL a user would write without sparkcep: one
    copy of the events per component, joined on ``attr1`` with range conditions on ``ts``."""
    parts = [f"(SELECT ts, attr1 FROM {table} WHERE type = 'E1') e1"]
    for k in range(2, length + 1):
        parts.append(f"JOIN (SELECT ts, attr1 FROM {table} WHERE type = 'E{k}') e{k} "
                     f"ON e{k}.attr1 = e1.attr1 AND e{k}.ts > e{k - 1}.ts AND e{k}.ts - e1.ts < {window}")
    return "SELECT COUNT(*) AS n FROM " + "\n".join(parts)


def _spark_session():
    import os
    from pathlib import Path

    from sparkcep.spark.session import local_session

    root = str(Path(__file__).resolve().parent.parent)  # the Python workers import sparkcep too
    os.environ["PYTHONPATH"] = os.pathsep.join([root, *filter(None, os.environ.get("PYTHONPATH", "").split(
        os.pathsep))])
    return local_session("local[2]", shuffle_partitions=2, app_name="sparkcep-bench-pattern-matching")


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system, with reaped children) of ``root`` and every live descendant (``/proc``, Linux):
    for a Spark driver, its JVM and the Python workers the JVM forks."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parents.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(name))
            except OSError:
                pass
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/stat") as f:
                total += sum(int(v) for v in f.read().rsplit(")", 1)[1].split()[11:15]) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
        todo += parents.get(pid, [])
    return total


@dataclass
class Runs:
    """The timed runs of one side: its result, and per run the wall-clock seconds and the CPU seconds of the whole
    process tree (:func:`tree_cpu`: driver, JVM, Python workers; unlike wall-clock time on a machine shared with
    other jobs, it does not depend much on the load)."""

    result: object
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.wall)

    @property
    def median_cpu(self) -> float:
        return statistics.median(self.cpu)


def measured(fns: list[Callable[[], object]], repeat: int, warm: bool = True) -> list[Runs]:
    """Per function, its :class:`Runs` after one warm-up run of each (unless not ``warm``: then the first run's
    result is checked against later ones only); the runs alternate between the functions, so that a change of
    load on a shared machine hits every side alike, and each run must give the warm-up's result."""
    runs = [Runs(fn()) for fn in fns] if warm else [Runs(None) for _ in fns]
    me = os.getpid()
    for _ in range(repeat):
        for fn, side in zip(fns, runs, strict=True):
            c0, t0 = tree_cpu(me), time.perf_counter()
            again = fn()
            side.wall.append(time.perf_counter() - t0)
            side.cpu.append(tree_cpu(me) - c0)
            if side.result is None:
                side.result = again
            assert again == side.result, (again, side.result)
    return runs


def walls(fns: list[Callable[[], int]], repeat: int) -> list[tuple[float, int, list[float]]]:
    """Per function, (median wall-clock seconds, result, every run's seconds) of :func:`measured`: after one
    warm-up run of each, the runs alternating.  Wall-clock time: Spark jobs run in the JVM and Python workers, so
    CPU time of this process would not count them."""
    return [(r.median, r.result, r.wall) for r in measured(fns, repeat)]


def _grid(text: str) -> list[tuple[int, int]]:
    """``"V1:W,V1:W"`` → ``[(V1, W), ...]``."""
    return [(int(v), int(w)) for v, w in (item.split(":") for item in text.split(",") if item)]


def section_spark(args) -> Table:
    import json
    from pathlib import Path

    from sparkcep.spark.io import read_events

    table = Table("SASE §5 on Spark: SEQ(E1..EL) WHERE [attr1] WITHIN W, 20 types: sparkcep vs a Spark SQL self-join",
                  ["V1", "W", "L", "matches", "matches/event", "sparkcep ev/s", "self-join ev/s",
                   "sparkcep / self-join", "run by run", "load"])
    spark = _spark_session()
    with tempfile.TemporaryDirectory() as tmp:
        frames: dict[int, object] = {}
        for domain, window in args.spark_grid:
            if domain not in frames:  # one file per domain size, read once and cached
                for df in frames.values():
                    df.unpersist()
                frames.clear()
                path = Path(tmp) / f"events_{domain}.jsonl"
                with open(path, "w") as f:
                    f.writelines(json.dumps(e) + "\n" for e in sase_stream(args.spark_events, domain))
                frames[domain] = read_events(spark, str(path), "json", "ts").cache()
            df = frames[domain]
            n = df.count()
            view = f"sase_events_{domain}"
            df.createOrReplaceTempView(view)
            for length in args.spark_lengths:
                q = sparkcep.compile(sase_query(length, window) + " RETURN e1.ts")
                sql = self_join_sql(length, window, view)
                sides = [lambda q=q, df=df: q.apply(df).count(), lambda sql=sql: spark.sql(sql).collect()[0][0]]
                (ours, found, our_runs), (theirs, joined, their_runs) = walls(sides, args.repeat)
                assert joined == found, (domain, window, length, joined, found)
                paired = sorted(t / o for o, t in zip(our_runs, their_runs, strict=True))
                table.rows.append([domain, window, length, found, found / n, n / ours, n / theirs,
                                   f"{theirs / ours:.2f}x", f"{paired[0]:.2f}-{paired[-1]:.2f}x",
                                   f"{os.getloadavg()[0]:.1f}"])
        for df in frames.values():
            df.unpersist()
    table.notes.append(f"{args.spark_events:,} events (ts a counter: W ts units hold W events) in one JSON-lines file "
                       f"per V1, read once and cached; local[2], 2 shuffle partitions; {os.cpu_count()} CPUs, 'load': "
                       f"1-minute load average after the row.  Wall-clock medians of {args.repeat} alternating runs "
                       f"after a warm-up run of each ('run by run': the lowest and highest ratio of a self-join "
                       f"run to the sparkcep run right before it); both sides build their query inside the timing "
                       f"(sparkcep.compile(q).apply(df).count() vs spark.sql(join).collect()) and count the same "
                       f"matches (checked).  The self-join (L = 3):")
    table.notes.append("  " + self_join_sql(3, "W", "events").replace("\n", "\n  "))
    return table


# ----------------------------------------------------------------------------------------------- baselines

#: the issue's end-to-end query: an equivalence key, a predicate across events, a short window
BASELINE_QUERY = "PATTERN SEQ(A a, B b, C c) WHERE [id] AND a.x < c.x WITHIN {window} RETURN a.ts, c.ts"

#: rows per Parquet file of :func:`keyed_events` (a bigger input is more files: Spark reads them in parallel)
ROWS_PER_FILE = 1_000_000


def keyed_events(folder, n: int, ids: int = 100, types: int = 4, seed: int = 18):
    """The folder of Parquet files holding ``n`` events (``ts`` 0, 1, 2, ...: a window of W ts units holds W
    events; ``type`` uniform over the first ``types`` letters; ``id`` uniform over 0..ids-1; ``x`` uniform over
    0..99), written under ``folder`` once and reused by later runs (its name says n, ids, types and seed; a
    ``_SUCCESS`` file marks it complete).  Written in files of :data:`ROWS_PER_FILE` rows, so memory stays
    small however big ``n`` is."""
    import shutil
    from pathlib import Path

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(folder) / f"keyed_n{n}_ids{ids}_types{types}_seed{seed}"
    if (path / "_SUCCESS").exists():
        return path
    partial = path.with_name(path.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    letters = pa.array([chr(ord("A") + k) for k in range(types)])
    for part, lo in enumerate(range(0, n, ROWS_PER_FILE)):
        rows = min(ROWS_PER_FILE, n - lo)
        pq.write_table(pa.table({
            "type": letters.take(pa.array(rng.integers(0, types, rows))),
            "ts": np.arange(lo, lo + rows, dtype=np.int64),
            "id": rng.integers(0, ids, rows, dtype=np.int64),
            "x": rng.integers(0, 100, rows, dtype=np.int64),
        }), partial / f"part-{part:05d}.parquet")
    (partial / "_SUCCESS").touch()
    shutil.rmtree(path, ignore_errors=True)
    partial.rename(path)
    return path


def bucketed_join_sql(window: int, table: str) -> str:
    """:data:`BASELINE_QUERY` as the best plain Spark SQL formulation: an equi-join on ``(id, bucket)`` with
    ``bucket = floor(ts / W)``.  A match's b and c lie in a's bucket or the next one (``c.ts - a.ts < W``), so the B
    and C rows are exploded into their own bucket and the previous one: each (a, b, c) meets exactly once, and the
    range conditions keep the matches."""
    own = f"FLOOR(ts / {window})"
    return (f"SELECT COUNT(*) AS n\n"
            f"FROM (SELECT id, ts, x, {own} AS bucket FROM {table} WHERE type = 'A') a\n"
            f"JOIN (SELECT id, ts, EXPLODE(ARRAY({own}, {own} - 1)) AS bucket FROM {table} WHERE type = 'B') b\n"
            f"  ON b.id = a.id AND b.bucket = a.bucket AND b.ts > a.ts AND b.ts - a.ts < {window}\n"
            f"JOIN (SELECT id, ts, x, EXPLODE(ARRAY({own}, {own} - 1)) AS bucket FROM {table} WHERE type = 'C') c\n"
            f"  ON c.id = a.id AND c.bucket = a.bucket AND c.ts > b.ts AND c.ts - a.ts < {window} AND a.x < c.x")


def keyed_floor(df, python: bool) -> None:
    """The floor of any keyed approach over ``df``: every row shuffled by ``id`` into the shuffle partitions and
    sorted by ``(id, ts)`` within them, written to Spark's ``noop`` sink (nothing kept, nothing optimized away);
    with ``python``, the sorted rows also go through a ``mapInArrow`` that reads every batch and returns none."""
    n = int(df.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    rows = df.repartition(n, "id").sortWithinPartitions("id", "ts")
    if python:
        rows = rows.mapInArrow(_read_all, "n long")
    rows.write.format("noop").mode("overwrite").save()


def scan_floor(df, python: bool) -> None:
    """The floor of any approach at all over ``df``, with no shuffle: every row of the file read and written to
    Spark's ``noop`` sink; with ``python``, the rows of the query's types (A, B, C: what sparkcep hands over) go
    from the scan straight through a ``mapInArrow`` that reads every batch and returns none (the Arrow transfer
    to a Python worker, no shuffle, no sort, no matching)."""
    rows = df.where(df.type.isin("A", "B", "C")).mapInArrow(_read_all, "n long") if python else df
    rows.write.format("noop").mode("overwrite").save()


def _read_all(batches):
    """A ``mapInArrow`` function that takes every batch and yields nothing."""
    for _ in batches:
        pass
    return iter(())


#: seconds per event of each side of the baselines section, quiet on 2 cores (for the expected run time it prints)
BASELINE_COST = 4e-6


def join_plan(spark, sql: str) -> str:
    """The joins Spark's adaptive execution chose for ``sql``, run once more after the timed runs (untimed): a
    broadcast hash join at small sizes, a sort-merge join (both sides shuffled) at large ones."""
    df = spark.sql(sql)
    df.collect()
    plan = df._jdf.queryExecution().executedPlan().toString()  # the final adaptive plan, once executed
    kinds = {"BroadcastHashJoin": "broadcast", "SortMergeJoin": "sort-merge", "ShuffledHashJoin": "shuffled hash"}
    return "+".join(name for node, name in kinds.items() if node in plan) or "?"


def section_baselines(args) -> Table:
    from pyspark.sql import functions as F

    window = args.baseline_window
    query = BASELINE_QUERY.format(window=window)
    table = Table(f"{query} on Spark, {args.baseline_ids} ids, {args.baseline_types} types: sparkcep vs the "
                  f"bucketed self-join and a plain groupBy(id).count()",
                  ["events", "matches", "sparkcep s", "bucketed join s", "groupBy s", "floor s", "floor+Python s",
                   "scan s", "scan+Python s", "join / sparkcep", "join plan", "sparkcep / groupBy",
                   "scan / groupBy", "scan+Python / groupBy", "sparkcep / floor", "run by run",
                   "CPU sparkcep s", "CPU join s", "CPU groupBy s", "CPU floor s", "CPU floor+Python s",
                   "CPU scan s", "CPU scan+Python s", "load"])
    runs = sum(args.sizes) * 6 * (args.repeat + 1)
    print(f"baselines: {len(args.sizes)} sizes, {args.repeat} timed runs + a warm-up of each of 7 sides: expected "
          f"~{runs * BASELINE_COST / 60:.0f} min on 2 quiet cores (plus ~{sum(args.sizes) * 1e-7:.0f} s to write "
          f"files not yet in {args.data_dir})", flush=True)
    spark = _spark_session()
    q = sparkcep.compile(query)
    for n in args.sizes:
        path = keyed_events(args.data_dir, n, args.baseline_ids, args.baseline_types)
        df = spark.read.parquet(str(path))
        view = f"keyed_events_{n}"
        df.createOrReplaceTempView(view)
        sql = bucketed_join_sql(window, view)
        sides = [lambda df=df: q.apply(df).count(),
                 lambda sql=sql: spark.sql(sql).collect()[0][0],
                 lambda df=df: df.groupBy("id").agg(F.count(F.lit(1)).alias("n")).agg(F.sum("n")).collect()[0][0],
                 lambda df=df: keyed_floor(df, python=False),
                 lambda df=df: keyed_floor(df, python=True),
                 lambda df=df: scan_floor(df, python=False),
                 lambda df=df: scan_floor(df, python=True)]
        ours, joined, grouped, floor, floor_py, scan, scan_py = measured(sides, args.repeat)
        assert joined.result == ours.result, (n, joined.result, ours.result)
        assert grouped.result == n, (n, grouped.result)
        paired = sorted(t / o for o, t in zip(ours.wall, joined.wall, strict=True))
        table.rows.append([n, ours.result, ours.median, joined.median, grouped.median, floor.median, floor_py.median,
                           scan.median, scan_py.median, f"{joined.median / ours.median:.2f}x", join_plan(spark, sql),
                           f"{ours.median / grouped.median:.2f}x", f"{scan.median / grouped.median:.2f}x",
                           f"{scan_py.median / grouped.median:.2f}x",
                           f"{ours.median / floor.median:.2f}x", f"{paired[0]:.2f}-{paired[-1]:.2f}x",
                           ours.median_cpu, joined.median_cpu, grouped.median_cpu, floor.median_cpu,
                           floor_py.median_cpu, scan.median_cpu, scan_py.median_cpu, f"{os.getloadavg()[0]:.1f}"])
    table.notes.append(
        f"Each size is a folder of Parquet files (ts a counter, so W = {window} ts units hold {window} events; type "
        f"uniform over {args.baseline_types} letters, id over {args.baseline_ids} values, x over 0..99), written once "
        f"under {args.data_dir} and reused, read by every side (not cached).  local[2], 2 shuffle partitions, "
        f"{os.cpu_count()} CPUs; 'load': 1-minute load average after the row.  Wall-clock medians of {args.repeat} "
        f"alternating runs after a warm-up run of each ('run by run': the lowest and highest ratio of a join run to "
        f"the sparkcep run right before it; 'join plan': the joins adaptive execution chose, in one more untimed "
        f"run; 'CPU': median CPU seconds of the whole Spark process tree per run).  "
        f"sparkcep.compile(q).apply(df).count() and the join count the same matches (checked); groupBy: "
        f"df.groupBy('id').count() summed on the driver (= the events, checked).  'floor': what any keyed approach "
        f"pays, df.repartition(2, 'id').sortWithinPartitions('id', 'ts') written to Spark's no-op sink (every row "
        f"shuffled and sorted, nothing kept); 'floor+Python': the same rows, after the sort, through a do-nothing "
        f"mapInArrow (the Arrow transfer to and from a Python worker).  'scan': the floor of any approach at all, "
        f"no shuffle: every row of the files read and written to the no-op sink; 'scan+Python': the rows of types "
        f"A, B, C straight from the scan through the do-nothing mapInArrow (what any engine in a Python worker "
        f"pays before it matches anything).  The bucketed self-join:")
    table.notes.append("  " + bucketed_join_sql(window, "events").replace("\n", "\n  "))
    return table


# ----------------------------------------------------------------------------------------------- state


def section_state(args) -> Table:
    """Serialized state of all keys while a long stream flows through the engine in micro-batches."""
    window, domain = args.state_window, args.state_domain
    spec = sparkcep.compile(sase_query(3, window)).spec()
    events = sase_stream(args.state_events, domain)
    table = Table(f"Streaming state over {len(events):,} events: SEQ(E1, E2, E3) WHERE [attr1] "
                  f"WITHIN {window}, V1 = {domain}, micro-batches of {args.batch:,}",
                  ["events in", "keys with state", "state bytes", "bytes / event in window", "matches so far"])
    states: dict = {}
    key = itemgetter(*spec.key)
    found = 0
    checkpoints = max(1, len(events) // args.batch // 10)
    for n_batch, lo in enumerate(range(0, len(events), args.batch)):
        chunk = events[lo:lo + args.batch]
        watermark = chunk[-1]["ts"]
        groups: dict = {}
        for e in chunk:
            groups.setdefault(key(e), []).append(e)
        for k in list(states) + [k for k in groups if k not in states]:
            state = match_engine.MatchState.from_bytes(states[k]) if k in states else match_engine.init_state()
            match_engine.step(spec, state, groups.get(k, []))
            _, rows = match_engine.advance(spec, state, watermark)
            found += len(rows)
            if match_engine.is_empty(state):
                states.pop(k, None)
            else:
                states[k] = state.to_bytes()
        if n_batch % checkpoints == 0 or lo + args.batch >= len(events):
            size = sum(map(len, states.values()))
            table.rows.append([lo + len(chunk), len(states), size, size / window, found])
    table.notes.append(f"ts is a counter, so a window holds {window:,} events; every key is stepped in every "
                       f"micro-batch (as with event-time timeouts); state bytes = sum of MatchState.to_bytes().")
    return table


#: Section name → function building its table.
SECTIONS: dict[str, Callable[[argparse.Namespace], Table]] = {
    "sase": section_sase,
    "kleene": section_kleene,
    "spark": section_spark,
    "state": section_state,
    "baselines": section_baselines,
}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sections", default=",".join(SECTIONS))
    p.add_argument("--events", type=int, default=60_000, help="events per run of the sase section")
    p.add_argument("--domains", type=_ints, default=[10, 100, 1000, 10000], help="V1 values (Exp. 1)")
    p.add_argument("--windows", type=_ints, default=[100, 1000, 10000], help="W values (Exp. 2)")
    p.add_argument("--lengths", type=_ints, default=[2, 3, 4, 5, 6], help="L values (Exp. 5)")
    p.add_argument("--sase-window", type=int, default=1000, help="W of Exp. 1 and 5")
    p.add_argument("--sase-domain", type=int, default=1000, help="V1 of Exp. 2")
    p.add_argument("--kleene-events", type=int, default=20_000)
    p.add_argument("--kleene-windows", type=_ints, default=[8, 16, 24])
    p.add_argument("--max-runs", type=int, default=200_000, help="budget of the run-cloning baseline")
    p.add_argument("--spark-events", type=int, default=100_000, help="events of the spark section")
    p.add_argument("--spark-lengths", type=_ints, default=[2, 3, 4, 5, 6], help="L values of the spark section")
    p.add_argument("--spark-grid", type=_grid, default=_grid("10:400,100:400,100:4000,1000:4000"),
                   help="V1:W settings of the spark section, each run for every L")
    p.add_argument("--sizes", type=_ints, default=[100_000, 1_000_000],
                   help="events of the baselines section (e.g. 100000,1000000,10000000; 10^7 adds ~10 min quiet)")
    p.add_argument("--baseline-window", type=int, default=100, help="W of the baselines section")
    p.add_argument("--baseline-ids", type=int, default=100, help="id values of the baselines section")
    p.add_argument("--baseline-types", type=int, default=4, help="event types of the baselines section (A, B, C, ...)")
    p.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "sparkcep-bench"),
                   help="where the baselines' Parquet files are written once and reused")
    p.add_argument("--state-events", type=int, default=200_000, help="events of the state section")
    p.add_argument("--state-window", type=int, default=1000, help="W of the state section")
    p.add_argument("--state-domain", type=int, default=50, help="V1 of the state section")
    p.add_argument("--batch", type=int, default=10_000, help="events per micro-batch")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="small sizes, one repetition (a smoke test)")
    args = p.parse_args(argv)
    if args.quick:
        args.events, args.kleene_events, args.repeat = 5_000, 2_000, 1
        args.domains, args.windows, args.lengths = [10, 1000], [100, 1000], [2, 4]
        args.kleene_windows = [8, 16]
        args.spark_events, args.state_events = 20_000, 20_000
        args.spark_grid, args.spark_lengths = [(10, 400)], [2, 4]
        args.sizes = [20_000]
    for name in args.sections.split(","):
        SECTIONS[name](args).print()


if __name__ == "__main__":
    main()
