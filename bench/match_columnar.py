"""Columnar sequence construction (``runtime_udfs.match.columnar``) vs the per-key engine, at engine level (no
Spark), on the rows the batch path hands the construction: SASE §5's stream (``bench/pattern_matching.py``
``sase_stream``: 20 types, ``attr1`` uniform over V1 values, ``ts`` a counter), the rows of the query's types
(what the Spark SQL filter of ``SEQ(E1 e1, ..., EL eL) WHERE [attr1] WITHIN W`` lets through), then the rows the
prefilter (``runtime_udfs.match.prefilter``) keeps.  On those same kept rows, per (V1, W, L), CPU ms of this
process (median of ``--repeat``):

* ``engine``: the baseline, as the batch adapter runs it: columns to Python lists, one event dict per row,
  split by key, ``step`` + ``advance(inf)`` per key, rows as dicts of the default RETURN (every attribute of
  every component: type, ts, attr1);
* ``columnar``: the construction over all keys at once, plus the result as an Arrow table of the same columns
  (``output_table``: ``take`` per column; the engine's rows are not converted to Arrow here, which favours the
  baseline).

Both paths' match counts are checked equal.  Cells whose match count would dominate everything are left out
(``--max-engine-matches`` for the engine, ``--max-matches`` for both; the estimate is printed in the notes).

``--small`` measures the fixed cost instead, per partition as the batch path pays it:
``MatchOperator.run_table`` (key ids, prefilter, then the construction with its Arrow result, or the engine
loop with its Arrow result) on partitions of ``--sizes`` rows of ``SEQ(E1, E2, E3) WHERE [attr1] WITHIN 50``
over E1 E2 E3 runs alternating between 2 keys (the prefilter keeps every complete run), CPU ms per call
(median of ``--repeat`` loops of ``--calls`` calls), both results checked equal.  The crossover in kept
rows, if any, is where ``engine - columnar`` turns positive.

    python bench/match_columnar.py [--events 1000000] [--domains 10,100,1000,10000] [--windows 400,10000,100000]
        [--lengths 3,4,6] [--repeat 1] [--quick]
    python bench/match_columnar.py --optional ...   (E2..E(L-1) as T?: OR of 2^(L-2) flat alternatives)
    python bench/match_columnar.py --small [--sizes 1,2,5,10,20,50,100,200,500] [--calls 200] [--repeat 5]

State the machine next to the figures (the project's reference is a 2-core VM, shared with other jobs).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from match_prefilter import engine_on, filtered_columns  # noqa: E402
from pattern_matching import Table, sase_query, sase_stream, timed  # noqa: E402

import sparkcep  # noqa: E402
from sparkcep.ir.spec import with_default_outputs
from sparkcep.runtime_udfs.match.columnar import columnar, output_table
from sparkcep.runtime_udfs.match.prefilter import prefilter


def estimate(n: int, domain: int, window: int, length: int) -> float:
    """Expected matches: per E1 event, L-1 later events of given types in its key within W (20 types)."""
    per_window = window / (20 * domain)  # events of one type of one key in a window
    return n / 20 * per_window ** (length - 1) / math.factorial(length - 1)


def query(length: int, window: int, optional: bool) -> str:
    """SASE's ``SEQ(E1..EL) WHERE [attr1] WITHIN W``; ``optional``: E2..E(L-1) as ``T?`` (2^(L-2) alternatives)."""
    if not optional:
        return sase_query(length, window)
    comps = [f"E{k}{'?' if 1 < k < length else ''} e{k}" for k in range(1, length + 1)]
    return f"EVENT SEQ({', '.join(comps)}) WHERE [attr1] WITHIN {window}"


def measure(cols: dict[str, np.ndarray], window: int, length: int, repeat: int, run_engine: bool,
            optional: bool = False) -> tuple:
    """``(rows, kept, matches, engine s or None, columnar s)`` on the prefilter's kept rows."""
    spec = with_default_outputs(sparkcep.compile(query(length, window, optional)).spec(), ["type", "ts", "attr1"])
    ids = np.unique(cols["attr1"], return_inverse=True)[1].astype(np.int64)
    keep = prefilter(spec)(ids, cols["ts"], cols["_mask"])  # int64 ts, as the batch path hands them over
    some = {c: v[keep] for c, v in cols.items()}
    ids = ids[keep]
    cc = columnar(spec)
    arrow = {c: pa.array(v) for c, v in some.items()}
    schema = pa.schema([(o.name, arrow[o.expr.attr].type) for o in spec.outputs])

    def construct() -> int:
        chains = cc(ids, some["ts"], some["_mask"], arrow.get)
        return output_table(cc, chains, arrow.get, schema).num_rows

    t_col, found = timed(construct, repeat)
    t_eng = None
    if run_engine:
        t_eng, found_engine = timed(lambda: engine_on(spec, some), repeat)
        if found_engine != found:
            raise SystemExit(f"V1 W={window} L={length}: columnar {found} matches, engine {found_engine}")
    return len(keep), int(keep.sum()), found, t_eng, t_col


def small(sizes: list[int], calls: int, repeat: int) -> Table:
    """Per-partition CPU ms of ``MatchOperator.run_table`` with the columnar construction and with the engine
    loop, on small partitions."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sparkcep.spark.operator import MatchOperator
    from sparkcep.spark.schema import MASK

    schema = StructType([StructField("type", StringType()), StructField("ts", LongType()),
                         StructField("attr1", LongType())])
    spec = sparkcep.compile(sase_query(3, 50)).spec(schema)
    table = Table("fixed cost per partition: MatchOperator.run_table, columnar construction vs engine loop, "
                  "SEQ(E1, E2, E3) WHERE [attr1] WITHIN 50, 2 keys",
                  ["rows", "kept", "matches", "engine ms", "columnar ms", "engine - columnar ms"])
    for size in sizes:
        types = [f"E{k % 3 + 1}" for k in range(size)]  # E1 E2 E3 runs, a key per run: every row in a match
        data = pa.table({"type": types, "ts": pa.array(range(size), pa.int64()),
                         "attr1": pa.array([k // 3 % 2 for k in range(size)], pa.int64()),
                         MASK: pa.array([1 << (int(t[1:]) - 1) for t in types], pa.int64())})
        fast, slow = MatchOperator(spec, schema), MatchOperator(spec, schema)
        slow._columnar = None
        keep = fast._prefiltered(data, fast.key_ids(data))
        kept = size if keep is None else int(keep.sum())
        got, want = fast.run_table(data), slow.run_table(data)
        if sorted(map(str, got.to_pylist())) != sorted(map(str, want.to_pylist())):
            raise SystemExit(f"{size} rows: columnar and engine results differ")

        def loop(op, data=data):
            return lambda: [op.run_table(data) for _ in range(calls)][-1].num_rows

        t_col, found = timed(loop(fast), repeat)
        t_eng, _ = timed(loop(slow), repeat)
        table.rows.append([size, kept, found, 1000 * t_eng / calls, 1000 * t_col / calls,
                           1000 * (t_eng - t_col) / calls])
    table.notes.append(f"CPU ms per call of one Python process, medians of {repeat} loops of {calls} calls; both "
                       "include key ids, the prefilter and the Arrow result table.")
    return table


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000, help="events of SASE's stream before the filter")
    p.add_argument("--domains", default="10,100,1000,10000", help="V1 values")
    p.add_argument("--windows", default="400,10000,100000", help="W values")
    p.add_argument("--lengths", default="3,4,6", help="L values")
    p.add_argument("--max-engine-matches", type=float, default=2e6, help="skip the engine above this estimate")
    p.add_argument("--max-matches", type=float, default=3e7, help="skip the cell above this estimate")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="100k events (a smoke test)")
    p.add_argument("--optional", action="store_true", help="E2..E(L-1) as T? (the union of alternatives)")
    p.add_argument("--small", action="store_true", help="fixed cost per partition on small partitions instead")
    p.add_argument("--sizes", default="1,2,5,10,20,50,100,200,500", help="rows per partition (--small)")
    p.add_argument("--calls", type=int, default=200, help="calls per timed loop (--small)")
    args = p.parse_args(argv)
    if args.small:
        small([int(x) for x in args.sizes.split(",")], args.calls, max(args.repeat, 5) if args.repeat == 1 else
              args.repeat).print()
        return
    if args.quick:
        args.events = 100_000
    shape = "SEQ(E1, E2?, .., E(L-1)?, EL)" if args.optional else "SEQ(E1..EL)"
    table = Table(f"columnar construction vs per-key engine on the prefilter's kept rows: {shape} WHERE [attr1] "
                  f"WITHIN W, {args.events:,} events of 20 types",
                  ["V1", "W", "L", "rows", "kept", "matches", "engine ms", "columnar ms", "speedup"])
    for domain in (int(x) for x in args.domains.split(",")):
        events = sase_stream(args.events, domain)
        for length in (int(x) for x in args.lengths.split(",")):
            cols = filtered_columns(args.events, domain, tuple(f"E{k}" for k in range(1, length + 1)), events)
            for window in (int(x) for x in args.windows.split(",")):
                guess = estimate(args.events, domain, window, length)
                if args.optional:  # every alternative: j of the L - 2 optional positions present
                    guess = sum(math.comb(length - 2, j) * estimate(args.events, domain, window, j + 2)
                                for j in range(length - 1))
                if guess > args.max_matches:
                    table.notes.append(f"V1={domain}, W={window}, L={length} skipped: ~{guess:.2g} matches")
                    continue
                n, k, found, t_eng, t_col = measure(cols, window, length, args.repeat,
                                                    guess <= args.max_engine_matches, args.optional)
                table.rows.append([domain, window, length, n, k, found,
                                   None if t_eng is None else 1000 * t_eng, 1000 * t_col,
                                   None if t_eng is None else t_eng / t_col])
    table.notes.append(f"CPU ms of one Python process, medians of {args.repeat}; columnar includes the Arrow result "
                       "table, the engine its row dicts only; '-': engine left out (estimate above "
                       f"{args.max_engine_matches:.2g} matches).")
    table.print()


if __name__ == "__main__":
    main()
