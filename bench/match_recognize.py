"""MATCH_RECOGNIZE on 10^6 rows: sparkcep on Spark against plain Spark and against Apache Flink (PyFlink).

One generated CSV file (``p, ts, id, typ, price``: 100 partitions ``p`` of 10^4 rows, ``ts`` in milliseconds,
types A-D, a price random walk per partition), four statements, each counted as
``SELECT COUNT(*), SUM(a), SUM(c) FROM events MATCH_RECOGNIZE (PARTITION BY p ORDER BY ts, id
MEASURES FIRST(id) AS a, LAST(id) AS c ...)`` so that every system computes every match and returns one row:

* ``A B+ C`` and ``A B*? C`` (B undefined: an A, then the nearest C) with ``AFTER MATCH SKIP PAST LAST ROW``;
* ``(A|B){2,4} C`` (Flink refuses alternation: no Flink figure);
* the V-shape stock query (as in Flink's documentation, on prices): ``STRT DOWN+ UP``, ``DOWN AS price <
  PREV(price)``, ``UP AS price > PREV(price)``, ``AFTER MATCH SKIP TO LAST UP``.

Three ways, the answers checked equal:

(a) **plain Spark**: the best formulation without MATCH_RECOGNIZE we know, window functions over
    ``PARTITION BY p ORDER BY ts, id`` (``lag``/``lead``, ``last(..., ignorenulls)``, a running count of C's and
    a ``groupBy``), each proved equal to the statement for this pattern only (see the functions);
(b) **sparkcep**: ``sparkcep.sql(statement)`` over a temporary view of the same CSV file (batch: one shuffle by
    ``p``, a sort, one ``mapInArrow`` pass of the engine per partition; after the sort the worker gets only the
    columns the engine reads, the ``typ = 'A'`` DEFINEs as the bits of one column Spark computes, with the INT
    ``p`` in its high bits (one BIGINT column: ``id`` and it are all the worker gets); the V-shape's
    ``price < PREV(price)`` evaluated by the worker over ``price``: a ``lag`` window would cost Spark more),
    in sparkcep's local session (``local_session``: no Arrow byte limit per batch, so that Spark does not measure
    the batch after every row it writes for the worker; the plain Spark side has no Python worker);
(c) **Flink**: the same statement (``ORDER BY rt, id``, ``rt`` the event time of ``ts``) in PyFlink's batch mode,
    in its own Python (``--flink-python``, default ``.venv-flink/bin/python`` or ``SPARKCEP_FLINK_PYTHON``),
    parallelism 2: *in-process* (execute + collect in a warm JVM) and *whole-process* (a fresh Python + JVM
    running that one statement: start-up, planning and the job).

``bench/recognize_split.py`` tells where one pattern's time goes (stage CPU, the Python workers' CPU, the worker's
batches and its tail after the last one), plain Spark and sparkcep paired in one process.

``--engine`` adds the pure engine alone in this process (``runtime_udfs.recognize.run_partition`` over the rows
already read, grouped and sorted: one core, no Spark), to tell the engine's share of (b).

Spark (local[2], 2 shuffle partitions) and Flink both read the CSV file on every run.  Each Spark side times
the same things: planning its query from the file (plain Spark: ``spark.read.csv`` and the window functions;
sparkcep: ``sparkcep.sql`` over the temporary view ``events`` of that same read, registered once before the
runs, not timed: a view is a name for the read, each run reads the file again) and ``collect``. Times are wall-clock
seconds, medians of ``--repeat`` runs (8; one warm-up run of each side of each pattern first, not counted).
State the machine next to the figures (the project's reference is a 2-core VM).

**Order** (``--order rotated``, the default): a Spark side runs faster the warmer the session is (JIT, caches),
and plain Spark gains more from it, so a pattern's place in the process moved its ratio (the V-shape 1.03x
alone in a fresh process, 0.79x as the last of four).  The runs therefore go in rounds: round ``r`` runs every
pattern once, the list rotated by ``r`` (pattern ``i`` at position ``(i - r) mod k`` of ``k``), each pattern's
two sides back to back, plain Spark first in even rounds and sparkcep first in odd ones.  Over any
``lcm(k, 2)`` consecutive rounds (4 for the four patterns) every pattern runs equally often at each position and each
side goes first equally often, so with ``--repeat`` a multiple of that (8 by default) the order favours no
pattern and no side (the bench says so when it is not); it also prints each pattern's ratio by its
position in the rounds.  ``--order fixed`` is the former order: each pattern in
turn, its plain Spark warm-up and runs, then its sparkcep warm-up and runs.  Every run's answer is checked
against the warm-up's plain Spark answer.

    python bench/match_recognize.py [--rows 1000000] [--repeat 8] [--quick] [--no-flink] [--patterns abc,...]
        [--order rotated|fixed] [--engine] [--flink-whole-repeat N]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "bench" / "flink_worker.py"
COLUMNS = "p INT, ts BIGINT, id BIGINT, typ STRING, price DOUBLE"
SPARK_SCHEMA = "p INT, ts BIGINT, id BIGINT, typ STRING, price DOUBLE"
TYPES = "DEFINE A AS typ = 'A', B AS typ = 'B', C AS typ = 'C'"

#: name -> (description, the clause after MEASURES ... ONE ROW PER MATCH, Flink supports it)
PATTERNS = {
    "abc": ("A B+ C", f"AFTER MATCH SKIP PAST LAST ROW PATTERN (A B+ C) {TYPES}", True),
    "reluctant": ("A B*? C", "AFTER MATCH SKIP PAST LAST ROW PATTERN (A B*? C) DEFINE A AS typ = 'A', C AS typ = 'C'",
                  True),
    "alt": ("(A|B){2,4} C", "AFTER MATCH SKIP PAST LAST ROW PATTERN ((A | B){2,4} C) "
                            "DEFINE A AS typ = 'A', B AS typ = 'B', C AS typ = 'C'", False),
    "vshape": ("V-shape STRT DOWN+ UP", "AFTER MATCH SKIP TO LAST UP PATTERN (STRT DOWN+ UP) "
                                        "DEFINE DOWN AS price < PREV(price), UP AS price > PREV(price)", True),
}


def statement(rest: str, *, flink: bool) -> str:
    order = "rt, id" if flink else "ts, id"
    return ("SELECT COUNT(*) AS n, SUM(a) AS sa, SUM(c) AS sc FROM events MATCH_RECOGNIZE ("
            f"PARTITION BY p ORDER BY {order} MEASURES FIRST(id) AS a, LAST(id) AS c ONE ROW PER MATCH {rest}) AS m")


def write_events(path: Path, rows: int, partitions: int = 100, seed: int = 7) -> None:
    """``rows`` rows in time order: ``partitions`` keys, ts +1..1000 ms per key, types A 30% B 40% C 20% D 10%,
    a price random walk per key (cents)."""
    rnd = random.Random(seed)
    ts = [0] * partitions
    price = [10_000] * partitions
    with path.open("w") as f:
        for i in range(rows):
            p = i % partitions
            ts[p] += rnd.randint(1, 1000)
            price[p] = max(1, price[p] + rnd.randint(-50, 50))
            typ = rnd.choices("ABCD", (3, 4, 2, 1))[0]
            f.write(f"{p},{ts[p]},{i},{typ},{price[p] / 100}\n")


# ----------------------------------------------------------------------------------------------- plain Spark


def plain_spark(name: str, df):
    """The statement without MATCH_RECOGNIZE: window functions over each partition in (ts, id) order."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("p").orderBy("ts", "id")
    before = w.rowsBetween(Window.unboundedPreceding, -1)
    upto = w.rowsBetween(Window.unboundedPreceding, 0)
    if name == "abc":
        # A B+ C with disjoint A/B/C: every match is a contiguous block, so one per C whose previous row is a B
        # and whose last non-B row before it is an A (that A is FIRST(id))
        nonb = F.when(F.col("typ") != "B", F.col("typ"))
        m = (df.select("id", "typ", F.lag("typ").over(w).alias("prev"),
                       F.last(nonb, ignorenulls=True).over(before).alias("nonb"),
                       F.last(F.when(F.col("typ") != "B", F.col("id")), ignorenulls=True).over(before).alias("a"))
             .where("typ = 'C' AND prev = 'B' AND nonb = 'A'").select("a", F.col("id").alias("c")))
    elif name == "reluctant":
        # A B*? C (B any row) skipping past the C: between two C's (the second included) the first A, if any,
        # starts a match ending at that C.  An A is the first of its gap when the last A-or-C row before it is
        # not an A; a C ends a match when that row before it is an A, and the match's A is then the last
        # first-of-its-gap A before it (window functions over one sort; a groupBy per gap is slower)
        ac = F.last(F.when(F.col("typ").isin("A", "C"), F.col("typ")), ignorenulls=True).over(before)
        s = df.select("p", "ts", "id", "typ", ac.alias("ac"))
        first = (F.col("typ") == "A") & F.coalesce(F.col("ac") != "A", F.lit(True))
        m = (s.select("id", "typ", "ac", F.last(F.when(first, F.col("id")), ignorenulls=True).over(before).alias("a"))
             .where("typ = 'C' AND ac = 'A'").select("a", F.col("id").alias("c")))
    elif name == "alt":
        # (A|B){2,4} C: one match per C preceded by at least two A/B rows; it starts min(run, 4) rows back
        ab = [F.lag("typ", k).over(w).isin("A", "B") for k in (1, 2, 3, 4)]
        ids = [F.lag("id", k).over(w) for k in (2, 3, 4)]
        first = F.when(ab[2] & ab[3], ids[2]).when(ab[2], ids[1]).otherwise(ids[0])
        m = (df.select("typ", "id", ab[0].alias("ab1"), ab[1].alias("ab2"), first.alias("a"))
             .where("typ = 'C' AND ab1 AND ab2").select("a", F.col("id").alias("c")))
    elif name == "vshape":
        # STRT DOWN+ UP, skip to the UP row: one match per valley (price below both neighbours); it starts at
        # the top of the valley's strictly falling run (the last row that is not a fall)
        down = F.col("price") < F.lag("price").over(w)
        s = df.select("id", "price", down.alias("down"), F.lead("price").over(w).alias("next_price"),
                      F.lead("id").over(w).alias("c"),
                      F.last(F.when(~F.coalesce(down, F.lit(False)), F.col("id")), ignorenulls=True)
                      .over(upto).alias("a"))
        m = s.where("down AND next_price > price").select("a", "c")
    else:
        raise ValueError(name)
    return m.agg(F.count(F.lit(1)).alias("n"), F.sum("a").alias("sa"), F.sum("c").alias("sc"))


# ----------------------------------------------------------------------------------------------- Flink


def flink_python(arg: str | None) -> str | None:
    for exe in (arg, os.environ.get("SPARKCEP_FLINK_PYTHON"), str(ROOT / ".venv-flink" / "bin" / "python")):
        if exe and Path(exe).is_file():
            return exe
    return None


def run_flink(exe: str, csv: Path, queries: list[dict], repeat: int) -> tuple[list[dict], float]:
    job = {"tables": [{"name": "events", "path": str(csv), "columns": COLUMNS}], "queries": queries,
           "repeat": repeat, "parallelism": 2}
    t0 = time.perf_counter()
    proc = subprocess.run([exe, str(WORKER)], input=json.dumps(job), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"the Flink worker failed: {proc.stderr[-2000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if '"id"' in line], wall


# ----------------------------------------------------------------------------------------------- engine


def engine_only(csv: Path, rest: str, repeat: int) -> tuple[float, tuple]:
    """The pure engine over every partition (rows read, grouped and sorted first, not timed): seconds, answer."""
    from sparkcep.compiler.recognize import build_spec
    from sparkcep.grammar.recognize import parse_recognize
    from sparkcep.runtime_udfs import recognize as engine

    q = parse_recognize(statement(rest, flink=False))
    spec = build_spec(q, {"p": "int", "ts": "bigint", "id": "bigint", "typ": "string", "price": "double"})
    parts: dict[int, list[dict]] = {}
    with csv.open() as f:
        for line in f:
            p, ts, i, typ, price = line.rstrip("\n").split(",")
            parts.setdefault(int(p), []).append({"p": int(p), "ts": int(ts), "id": int(i), "typ": typ,
                                                 "price": float(price), "__ts": int(ts)})
    key = engine.sort_key(spec)
    parts = {p: sorted(rows, key=key) for p, rows in parts.items()}

    def run():
        return [o for rows in parts.values() for o in engine.run_partition(spec, rows)]

    times, out = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - t0)
    a = [o["a"] for o in out if o["a"] is not None]
    c = [o["c"] for o in out if o["c"] is not None]
    return statistics.median(times), (len(out), sum(a) if a else None, sum(c) if c else None)


# ----------------------------------------------------------------------------------------------- main


#: The two Spark sides of a pattern.
SIDES = ("plain", "sparkcep")


def schedule(names: list[str], repeat: int, order: str = "rotated") -> list[tuple[str, str, bool]]:
    """The runs in their order, ``(pattern, side, counted)`` (``counted`` false: a warm-up).

    ``rotated``: one warm-up of each side of each pattern, then ``repeat`` rounds; round ``r`` runs the patterns
    rotated by ``r``, each pattern's sides back to back, plain Spark first when ``r`` is even.  ``fixed``: each
    pattern in turn, its plain Spark warm-up and runs, then its sparkcep warm-up and runs."""
    if order == "fixed":
        return [(n, side, counted) for n in names for side in SIDES
                for counted in (False, *[True] * repeat)]
    if order != "rotated":
        raise ValueError(f"order: rotated or fixed, not {order!r}")
    runs = [(n, side, False) for n in names for side in SIDES]
    k = len(names)
    for r in range(repeat):
        sides = SIDES if r % 2 == 0 else SIDES[::-1]
        runs += [(n, side, True) for n in names[r % k:] + names[:r % k] for side in sides]
    return runs


def balanced(k: int, repeat: int) -> bool:
    """Whether ``repeat`` rotated rounds of ``k`` patterns put every pattern at each position, and each side
    first, equally often: ``repeat`` a multiple of ``lcm(k, 2)``."""
    return repeat % math.lcm(k, 2) == 0


def by_position(i: int, k: int, plain: list[float], mine: list[float]) -> list[tuple[int, float]]:
    """``(position, median plain/sparkcep)`` of pattern ``i`` of ``k`` over its rotated rounds (round ``r``'s
    runs ``plain[r]``, ``mine[r]``; the pattern at position ``(i - r) mod k``), by position."""
    ratios: dict[int, list[float]] = {}
    for r, (a, b) in enumerate(zip(plain, mine, strict=True)):
        ratios.setdefault((i - r) % k, []).append(a / b)
    return [(pos, statistics.median(v)) for pos, v in sorted(ratios.items())]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="10^5 rows, 1 repetition")
    ap.add_argument("--patterns", default=",".join(PATTERNS), help="comma-separated: " + ",".join(PATTERNS))
    ap.add_argument("--order", choices=("rotated", "fixed"), default="rotated",
                    help="rotated: rounds with the patterns and the sides rotated (default); fixed: the former order")
    ap.add_argument("--no-flink", action="store_true")
    ap.add_argument("--flink-python", default=None, help="a Python with apache-flink installed")
    ap.add_argument("--flink-whole-repeat", type=int, default=None, help="fresh Flink processes (default --repeat)")
    ap.add_argument("--engine", action="store_true", help="also time the pure engine alone, in this process")
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.repeat = 100_000, 1
    names = [n for n in args.patterns.split(",") if n]
    flink = None if args.no_flink else flink_python(args.flink_python)

    import sparkcep
    from sparkcep.spark.session import local_session

    spark = local_session("local[2]", shuffle_partitions=2, app_name="bench-match-recognize")
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory(prefix="sparkcep-bench-mr-") as tmp:
        csv = Path(tmp) / "events.csv"
        write_events(csv, args.rows)
        fair = args.order == "fixed" or balanced(len(names), args.repeat)
        print(f"{args.rows:,} rows, 100 partitions, local[2]; wall-clock seconds, medians of {args.repeat} "
              f"(after a warm-up run); {args.order} order"
              + ("" if fair else f" (not balanced: --repeat is not a multiple of {math.lcm(len(names), 2)})")
              + f"; nproc={os.cpu_count()}, load {os.getloadavg()[0]:.1f} at start")

        def frame():
            return spark.read.csv(str(csv), schema=SPARK_SCHEMA)

        frame().createOrReplaceTempView("events")
        sides = {name: {"plain": lambda n=name: plain_spark(n, frame()).collect()[0],
                        "sparkcep": lambda rest=PATTERNS[name][1]: sparkcep.sql(statement(rest, flink=False),
                                                                                spark).collect()[0]}
                 for name in names}
        times: dict[str, dict[str, list[float]]] = {n: {side: [] for side in SIDES} for n in names}
        answers: dict[str, tuple] = {}
        for name, side, counted in schedule(names, args.repeat, args.order):
            t0 = time.perf_counter()
            got = tuple(sides[name][side]())
            if counted:
                times[name][side].append(time.perf_counter() - t0)
            want = answers.setdefault(name, got)
            assert got == want, f"{name}: {side} {got} != {want}"
        results = {}
        for name in names:
            desc, rest, _ = PATTERNS[name]
            got, t_plain, t_mine = answers[name], *(statistics.median(times[name][side]) for side in SIDES)
            results[name] = {"desc": desc, "n": got[0], "plain": t_plain, "sparkcep": t_mine,
                             "plain_runs": times[name]["plain"], "sparkcep_runs": times[name]["sparkcep"],
                             "answer": got}
            print(f"  {desc}: {got[0]:,} matches; plain Spark {t_plain:.2f} s, sparkcep {t_mine:.2f} s", flush=True)
            if args.engine:
                t_engine, answer = engine_only(csv, rest, args.repeat)
                assert answer == got, f"{name}: engine {answer} != sparkcep on Spark {got}"
                results[name]["engine"] = t_engine
                print(f"  {desc}: the engine alone (one core) {t_engine:.2f} s", flush=True)
        if flink:
            for name in names:
                desc, rest, supported = PATTERNS[name]
                if not supported:
                    continue
                sql = statement(rest, flink=True)
                (rec,), _ = run_flink(flink, csv, [{"id": name, "sql": sql}], args.repeat + 1)
                if rec["error"]:
                    raise RuntimeError(f"Flink: {name}: {rec['error']}")
                answer = tuple(rec["rows"][0])
                assert answer == results[name]["answer"], f"{name}: Flink {answer} != {results[name]['answer']}"
                walls = []
                for _ in range(args.flink_whole_repeat or args.repeat):
                    _, wall = run_flink(flink, csv, [{"id": name, "sql": sql}], 1)
                    walls.append(wall)
                results[name]["flink_in"] = statistics.median(rec["seconds"][1:])
                results[name]["flink_whole"] = statistics.median(walls)
                print(f"  {desc}: Flink in-process {results[name]['flink_in']:.2f} s, "
                      f"whole-process {results[name]['flink_whole']:.2f} s", flush=True)
    print()
    head = (f"{'pattern':<24}{'matches':>9}{'plain Spark':>13}{'sparkcep':>10}{'plain/sparkcep':>16}"
            f"{'Flink in':>10}{'Flink whole':>13}{'Flink in/sparkcep':>19}")
    print(head)
    for name in names:
        r = results[name]
        line = (f"{r['desc']:<24}{r['n']:>9,}{r['plain']:>12.2f}s{r['sparkcep']:>9.2f}s"
                f"{r['plain'] / r['sparkcep']:>15.2f}x")
        if "flink_in" in r:
            line += f"{r['flink_in']:>9.2f}s{r['flink_whole']:>12.2f}s{r['flink_in'] / r['sparkcep']:>18.2f}x"
        else:
            line += f"{'n/a':>10}{'n/a':>13}{'':>19}" if flink else ""
        print(line)
    if args.engine:
        print("the engine alone, one core, no Spark: " + ", ".join(
            f"{results[n]['desc']} {results[n]['engine']:.2f} s ({args.rows / results[n]['engine']:,.0f} rows/s)"
            for n in names))
    print("\nratios > 1: sparkcep is faster. Runs (s): " + "; ".join(
        f"{n}: plain {[round(t, 2) for t in results[n]['plain_runs']]}, "
        f"sparkcep {[round(t, 2) for t in results[n]['sparkcep_runs']]}" for n in names))
    if args.order == "rotated":
        print("plain/sparkcep by the pattern's position in its rounds (0: first), medians: " + "; ".join(
            f"{n}: " + ", ".join(f"{pos} {ratio:.2f}x" for pos, ratio in by_position(
                i, len(names), results[n]["plain_runs"], results[n]["sparkcep_runs"]))
            for i, n in enumerate(names)))
    if not flink and not args.no_flink:
        print("no Flink: pass --flink-python or set SPARKCEP_FLINK_PYTHON (make flink-diff creates .venv-flink)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
