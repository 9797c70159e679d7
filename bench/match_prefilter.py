"""The sequence-scan prefilter (``runtime_udfs.match.prefilter``) at engine level, no Spark.

SASE §5's stream (``bench/pattern_matching.py`` ``sase_stream``: 20 types, ``attr1`` uniform over V1 values,
``ts`` a counter), of which the Spark SQL filter of ``SEQ(E1 e1, E2 e2, E3 e3) WHERE [attr1] WITHIN W`` lets
the rows of the 3 query types through (~15%: 150k of 1M).  Those rows, as numpy columns with ``_mask`` as the
filter computes it, are what the batch function gets.  Per (V1, W) the script times, in CPU seconds of this
process (median of ``--repeat``):

* ``ids``: dense key ids of ``attr1`` (``np.unique``), which the prefilter takes;
* ``prefilter``: the scan itself;
* ``all rows``: the baseline: columns to Python lists, one event dict per row, split by key, the engine
  (``step`` then ``advance(inf)``) per key, as the batch adapter does;
* ``kept rows``: the same for the kept rows only, plus ``ids`` and ``prefilter``;

and prints rows kept, matches (checked equal on both paths) and the ratio all / (ids + prefilter + kept).

    python bench/match_prefilter.py [--events 1000000] [--domains 10,100,1000,10000] [--windows 400,10000]
        [--repeat 3] [--skip 10:10000] [--quick]

``--skip`` leaves out settings whose output dominates everything (V1 = 10, W = 10000 has ~60M matches).  State
the machine next to the figures (the project's reference is a 2-core VM, shared with other jobs).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pattern_matching import Table, sase_query, sase_stream, timed  # noqa: E402

import sparkcep  # noqa: E402
from sparkcep.runtime_udfs.match import engine as match_engine
from sparkcep.runtime_udfs.match.prefilter import prefilter
from sparkcep.spark.arrow import split_by

QUERY_TYPES = ("E1", "E2", "E3")


def filtered_columns(n: int, domain: int, query_types: tuple[str, ...] = QUERY_TYPES,
                     stream: list[dict] | None = None) -> dict[str, np.ndarray]:
    """The rows of ``query_types`` in SASE's stream of ``n`` events (or in ``stream``) as columns: type, ts,
    attr1, _mask (bit k: type ``query_types[k]``)."""
    events = [e for e in (sase_stream(n, domain) if stream is None else stream) if e["type"] in query_types]
    types = np.array([e["type"] for e in events])
    mask = np.zeros(len(events), dtype=np.int64)
    for k, t in enumerate(query_types):
        mask[types == t] = 1 << k
    return {"type": types, "ts": np.array([e["ts"] for e in events], dtype=np.int64),
            "attr1": np.array([e["attr1"] for e in events], dtype=np.int64), "_mask": mask}


def engine_on(spec, cols: dict[str, np.ndarray]) -> int:
    """Matches of the rows in ``cols``: lists, dicts, split by ``attr1``, the engine per key (the batch path)."""
    types, ts, keys, masks = (cols[c].tolist() for c in ("type", "ts", "attr1", "_mask"))
    events = [{"type": a, "ts": b, "attr1": c, "_mask": d} for a, b, c, d in zip(types, ts, keys, masks, strict=True)]
    found = 0
    for part in split_by(keys, events).values():
        state, _ = match_engine.step(spec, match_engine.init_state(), part)
        found += len(match_engine.advance(spec, state, math.inf)[1])
    return found


def measure(cols: dict[str, np.ndarray], window: int, repeat: int) -> tuple:
    """``(rows, kept, matches, ids s, prefilter s, all rows s, kept rows s)`` of one setting; raises if the
    match counts of the two paths differ."""
    spec = sparkcep.compile(sase_query(3, window)).spec()
    scan = prefilter(spec)
    ts = cols["ts"].astype(np.float64)
    t_ids, ids = timed(lambda: np.unique(cols["attr1"], return_inverse=True)[1], repeat)
    t_scan, keep = timed(lambda: scan(ids, ts, cols["_mask"]), repeat)
    some = {c: v[keep] for c, v in cols.items()}
    t_kept, found_kept = timed(lambda: engine_on(spec, some), repeat)
    t_all, found_all = timed(lambda: engine_on(spec, cols), repeat)
    if found_kept != found_all:
        raise SystemExit(f"W={window}: {found_kept} matches on the kept rows, {found_all} on all rows")
    return len(keep), int(keep.sum()), found_all, t_ids, t_scan, t_all, t_kept


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000, help="events of SASE's stream before the filter")
    p.add_argument("--domains", default="10,100,1000,10000", help="V1 values")
    p.add_argument("--windows", default="400,10000", help="W values")
    p.add_argument("--skip", default="10:10000", help="V1:W settings left out (comma-separated)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="100k events, one repetition (a smoke test)")
    args = p.parse_args(argv)
    if args.quick:
        args.events, args.repeat = 100_000, 1
    skip = {tuple(int(x) for x in s.split(":")) for s in args.skip.split(",") if s}
    table = Table(f"prefilter + engine on kept rows vs engine on all rows: SEQ(E1, E2, E3) WHERE [attr1] WITHIN W, "
                  f"{args.events:,} events of 20 types",
                  ["V1", "W", "rows", "kept", "kept %", "matches", "ids ms", "prefilter ms", "all rows ms",
                   "kept rows ms", "speedup"])
    for domain in (int(x) for x in args.domains.split(",")):
        cols = filtered_columns(args.events, domain)
        for window in (int(x) for x in args.windows.split(",")):
            if (domain, window) in skip:
                table.notes.append(f"V1={domain}, W={window} skipped (--skip): its output dominates")
                continue
            n, k, found, t_ids, t_scan, t_all, t_kept = measure(cols, window, args.repeat)
            with_filter = t_ids + t_scan + t_kept
            table.rows.append([domain, window, n, k, 100 * k / n, found, 1000 * t_ids, 1000 * t_scan, 1000 * t_all,
                               1000 * with_filter, t_all / with_filter])
    table.notes.append(f"CPU ms of one Python process, medians of {args.repeat}; 'kept rows ms' includes ids and "
                       "prefilter; speedup = all rows / kept rows.")
    table.print()


if __name__ == "__main__":
    main()
