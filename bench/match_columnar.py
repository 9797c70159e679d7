"""Columnar sequence construction (``runtime_udfs.match_columnar``) vs the per-key engine, at engine level (no
Spark), on the rows the batch path hands the construction: SASE §5's stream (``bench/pattern_matching.py``
``sase_stream``: 20 types, ``attr1`` uniform over V1 values, ``ts`` a counter), the rows of the query's types
(what the Spark SQL filter of ``SEQ(E1 e1, ..., EL eL) WHERE [attr1] WITHIN W`` lets through), then the rows the
prefilter (``runtime_udfs.match_prefilter``) keeps.  On those same kept rows, per (V1, W, L), CPU ms of this
process (median of ``--repeat``):

* ``engine``: the baseline, as the batch adapter runs it: columns to Python lists, one event dict per row,
  split by key, ``step`` + ``advance(inf)`` per key, rows as dicts of the default RETURN (every attribute of
  every component: type, ts, attr1);
* ``columnar``: the construction over all keys at once, plus the result as an Arrow table of the same columns
  (``output_table``: ``take`` per column; the engine's rows are not converted to Arrow here, which favours the
  baseline).

Both paths' match counts are checked equal.  Cells whose match count would dominate everything are left out
(``--max-engine-matches`` for the engine, ``--max-matches`` for both; the estimate is printed in the notes).

    python bench/match_columnar.py [--events 1000000] [--domains 10,100,1000,10000] [--windows 400,10000,100000]
        [--lengths 3,4,6] [--repeat 1] [--quick]

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
from sparkcep.runtime_udfs.match_columnar import columnar, output_table  # noqa: E402
from sparkcep.runtime_udfs.match_prefilter import prefilter  # noqa: E402
from sparkcep.runtime_udfs.spec import with_default_outputs  # noqa: E402


def estimate(n: int, domain: int, window: int, length: int) -> float:
    """Expected matches: per E1 event, L-1 later events of given types in its key within W (20 types)."""
    per_window = window / (20 * domain)  # events of one type of one key in a window
    return n / 20 * per_window ** (length - 1) / math.factorial(length - 1)


def measure(cols: dict[str, np.ndarray], window: int, length: int, repeat: int, run_engine: bool) -> tuple:
    """``(rows, kept, matches, engine s or None, columnar s)`` on the prefilter's kept rows."""
    spec = with_default_outputs(sparkcep.compile(sase_query(length, window)).spec(), ["type", "ts", "attr1"])
    ids = np.unique(cols["attr1"], return_inverse=True)[1].astype(np.int64)
    keep = prefilter(spec)(ids, cols["ts"].astype(np.float64), cols["_mask"])
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
    args = p.parse_args(argv)
    if args.quick:
        args.events = 100_000
    table = Table(f"columnar construction vs per-key engine on the prefilter's kept rows: SEQ(E1..EL) WHERE [attr1] "
                  f"WITHIN W, {args.events:,} events of 20 types",
                  ["V1", "W", "L", "rows", "kept", "matches", "engine ms", "columnar ms", "speedup"])
    for domain in (int(x) for x in args.domains.split(",")):
        events = sase_stream(args.events, domain)
        for length in (int(x) for x in args.lengths.split(",")):
            cols = filtered_columns(args.events, domain, tuple(f"E{k}" for k in range(1, length + 1)), events)
            for window in (int(x) for x in args.windows.split(",")):
                guess = estimate(args.events, domain, window, length)
                if guess > args.max_matches:
                    table.notes.append(f"V1={domain}, W={window}, L={length} skipped: ~{guess:.2g} matches")
                    continue
                n, k, found, t_eng, t_col = measure(cols, window, length, args.repeat,
                                                    guess <= args.max_engine_matches)
                table.rows.append([domain, window, length, n, k, found,
                                   None if t_eng is None else 1000 * t_eng, 1000 * t_col,
                                   None if t_eng is None else t_eng / t_col])
    table.notes.append(f"CPU ms of one Python process, medians of {args.repeat}; columnar includes the Arrow result "
                       "table, the engine its row dicts only; '-': engine left out (estimate above "
                       f"{args.max_engine_matches:.2g} matches).")
    table.print()


if __name__ == "__main__":
    main()
