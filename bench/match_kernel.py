"""The columnar MATCH_RECOGNIZE kernel against the row engine, in one process, on the rows of
``bench/match_recognize.py`` (10^6 rows, 100 partitions, the same four statements).

Both run the whole file, partition after partition, from what the Spark layer hands them: the kernel one Arrow
table sorted by (p, ts, id) with the partition bounds (``kernel.run_chunk``), the engine Python dicts
(``run_partition`` per partition; the Arrow-to-dict conversion the Spark layer does for it is timed apart).
The answers (every output row) are checked equal.  Figures are CPU seconds (``time.process_time``, medians of
``--repeat``), rows/s and the ratio engine / kernel.  The kernel's one-off cost is printed too: loading the
compiled functions from numba's cache (first call in a process), and with ``--cold`` compiling them (an empty
cache directory).  State the machine and its load next to the figures.

``--nfa`` times only the numba NFA (``_nfa.match``) over the DEFINE bits, no engine, CPU nanoseconds per row:
with a node per consumed row (``track``, what a CLASSIFIER or a variable's measure needs) and with the least the
statement's measures need (the kernel's choice), alternating in this process; their events are checked equal.
With ``--merge`` it times instead the kernel's choice against the same with no later start's thread dropped for
the earliest undecided start's (``engine.merge_leaves`` off: the baseline), alternating, and counts the drops.

``--split`` times the kernel's three parts apart, no engine, CPU milliseconds per run (medians of ``--repeat``):
the DEFINE masks (``_masks``), the NFA (``_nfa_match``), the output (``_output``), and ``run_chunk`` whole.

    python bench/match_kernel.py [--rows 1000000] [--repeat 3] [--patterns abc,reluctant,alt,vshape] [--cold]
        [--nfa [--merge] | --split]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from match_recognize import PATTERNS, statement, write_events  # noqa: E402


def cpu(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.process_time()
        out = fn()
        times.append(time.process_time() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--patterns", default=",".join(PATTERNS))
    ap.add_argument("--cold", action="store_true", help="compile the kernel into an empty numba cache first")
    ap.add_argument("--nfa", action="store_true", help="time the NFA alone, CPU ns per row")
    ap.add_argument("--merge", action="store_true",
                    help="with --nfa: the NFA with later starts merged against without, CPU ns per row")
    ap.add_argument("--split", action="store_true", help="time masks, NFA and output apart, CPU ms per run")
    args = ap.parse_args()
    if args.cold:
        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="numba-cold-")

    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pcsv

    from sparkcep.compiler.recognize import build_spec
    from sparkcep.grammar.recognize import parse_recognize
    from sparkcep.runtime_udfs import recognize as engine
    from sparkcep.runtime_udfs.recognize import kernel

    with tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "events.csv"
        write_events(csv, args.rows)
        table = pcsv.read_csv(csv, read_options=pcsv.ReadOptions(column_names=["p", "ts", "id", "typ", "price"]),
                              convert_options=pcsv.ConvertOptions(column_types={
                                  "p": pa.int32(), "ts": pa.int64(), "id": pa.int64(), "typ": pa.string(),
                                  "price": pa.float64()}))
    table = table.append_column("__ts", table.column("ts")).sort_by([("p", "ascending"), ("ts", "ascending"),
                                                                     ("id", "ascending")])
    p = table.column("p").to_numpy()
    bounds = [0, *(np.flatnonzero(np.diff(p)) + 1).tolist(), table.num_rows]
    if args.nfa:
        nfa_only(table, bounds, args)
        return
    if args.split:
        split(table, bounds, args)
        return
    t0 = time.process_time()
    columns = [table.column(c).to_pylist() for c in table.column_names]
    rows = [dict(zip(table.column_names, values, strict=True)) for values in zip(*columns, strict=True)]
    convert = time.process_time() - t0
    parts = [rows[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    types = {"p": "int", "ts": "bigint", "id": "bigint", "typ": "string", "price": "double"}
    print(f"{args.rows:,} rows, {len(parts)} partitions; Arrow -> dicts for the engine {convert:.2f} s CPU "
          f"({args.rows / convert:,.0f} rows/s)")
    first = True
    for name in args.patterns.split(","):
        desc, rest, _ = PATTERNS[name]
        spec = build_spec(parse_recognize(statement(rest, flink=False)), types)
        assert kernel.eligibility(spec).ok, kernel.eligibility(spec).reason
        if first:
            t0 = time.perf_counter()
            kernel.run_chunk(spec, table.slice(0, bounds[1]), [0, bounds[1]])
            print(f"kernel first call in this process ({'compiling' if args.cold else 'from the cache'}): "
                  f"{time.perf_counter() - t0:.2f} s wall")
            first = False
        t_engine, want = cpu(lambda spec=spec: [o for part in parts for o in engine.run_partition(spec, part)],
                             args.repeat)
        t_kernel, got = cpu(lambda spec=spec: kernel.run_chunk(spec, table, bounds), args.repeat)
        assert got.to_pylist() == want, f"{name}: the kernel's rows differ from the engine's"
        print(f"  {desc:24s} {len(want):7,} matches  engine {t_engine:6.2f} s ({args.rows / t_engine:11,.0f} rows/s)"
              f"  kernel {t_kernel:6.3f} s ({args.rows / t_kernel:12,.0f} rows/s)  ratio {t_engine / t_kernel:5.1f}x",
              flush=True)


def _plans(table, bounds, args, what: str):
    """``(description, spec, plan, bounds array, rows)`` per statement of ``--patterns``, after a header line."""
    import numpy as np

    from sparkcep.compiler.recognize import build_spec
    from sparkcep.grammar.recognize import parse_recognize
    from sparkcep.runtime_udfs.recognize import kernel

    types = {"p": "int", "ts": "bigint", "id": "bigint", "typ": "string", "price": "double"}
    b = np.asarray(bounds, dtype=np.int64)
    print(f"{table.num_rows:,} rows, {len(bounds) - 1} partitions; {what}, median of {args.repeat}")
    for name in args.patterns.split(","):
        desc, rest, _ = PATTERNS[name]
        spec = build_spec(parse_recognize(statement(rest, flink=False)), types)
        yield desc, spec, kernel._plan(spec), b, table.num_rows


def nfa_only(table, bounds, args) -> None:
    from sparkcep.runtime_udfs.recognize import kernel

    for desc, _, plan, b, n in _plans(table, bounds, args, "the NFA alone, CPU ns per row"):
        bits = kernel._masks(plan, table, b, n)
        ts, ts_ok = kernel._times(plan, table, n)
        if args.merge:
            merge_pair(desc, plan, bits, b, ts, ts_ok, n, args.repeat)
            continue
        runs: dict[bool, list[float]] = {True: [], False: []}
        out = {}
        for _ in range(args.repeat + 1):  # the first round loads (or compiles) the function: not counted
            for track in (True, plan.track):
                t0 = time.process_time()
                out[track] = kernel._nfa_match(plan, bits, b, ts, ts_ok, track)
                runs[track].append(time.process_time() - t0)
        assert (out[True][0] == out[plan.track][0]).all(), f"{desc}: the events differ"
        t_nodes = statistics.median(runs[True][1:]) / n * 1e9
        t_least = statistics.median(runs[plan.track][1:]) / n * 1e9
        print(f"  {desc:24s} {len(out[True][0]):7,} matches  nodes {t_nodes:6.1f} ns/row  "
              f"{'nodes' if plan.track else 'nodeless'} (kernel) {t_least:6.1f} ns/row  "
              f"ratio {t_nodes / t_least:4.2f}x", flush=True)


def merge_pair(desc, plan, bits, b, ts, ts_ok, n, repeat) -> None:
    import numpy as np

    from sparkcep.runtime_udfs.recognize import kernel

    merge_ok = plan.merge_ok
    runs: dict[bool, list[float]] = {True: [], False: []}
    out, merged = {}, 0
    for _ in range(repeat + 1):  # the first round loads (or compiles) the function: not counted
        for on in (True, False):
            plan.merge_ok = merge_ok if on else np.zeros_like(merge_ok)
            before = plan.merged
            t0 = time.process_time()
            out[on] = kernel._nfa_match(plan, bits, b, ts, ts_ok, plan.track)
            runs[on].append(time.process_time() - t0)
            if on:
                merged = plan.merged - before
    plan.merge_ok = merge_ok
    assert all((x == y).all() for x, y in zip(out[True][:3], out[False][:3], strict=True)), f"{desc}: they differ"
    t_on, t_off = (statistics.median(runs[k][1:]) / n * 1e9 for k in (True, False))
    print(f"  {desc:24s} {len(out[True][0]):7,} matches  merged {t_on:6.1f} ns/row ({merged:,} threads dropped)  "
          f"not merged {t_off:6.1f} ns/row  ratio {t_off / t_on:4.2f}x", flush=True)


def split(table, bounds, args) -> None:
    from sparkcep.runtime_udfs.recognize import kernel

    for desc, spec, plan, b, n in _plans(table, bounds, args, "the kernel's parts, CPU ms per run"):
        kernel.run_chunk(spec, table, bounds)  # loads the compiled functions: not counted
        parts: dict[str, list[float]] = {"masks": [], "NFA": [], "output": [], "run_chunk": []}
        for _ in range(args.repeat):
            t0 = time.process_time()
            bits = kernel._masks(plan, table, b, n)
            ts, ts_ok = kernel._times(plan, table, n)
            t1 = time.process_time()
            ev, flat, fexcl, _ = kernel._nfa_match(plan, bits, b, ts, ts_ok, plan.track)
            t2 = time.process_time()
            kernel._output(plan, table, b, ev, flat, fexcl)
            t3 = time.process_time()
            kernel.run_chunk(spec, table, bounds)
            t4 = time.process_time()
            for key, t in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                parts[key].append(t * 1e3)
        print(f"  {desc:24s} {len(ev):7,} matches  " + "  ".join(
            f"{key} {statistics.median(v):6.1f}" for key, v in parts.items()), flush=True)


if __name__ == "__main__":
    main()
