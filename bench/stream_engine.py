"""The streaming operator's paths against the batch path, per event, in one process (no JVM): issue 18's "streaming
engine at batch speed".

A stream of ``--events`` events (types A, B, C uniformly, ``id`` uniform over ``--ids`` values, ``x`` over 0..9,
``ts`` a counter, so a window of W ts units holds W events), with ``_mask`` as the query's Spark SQL filter
computes it, through the query ``SEQ(A a, B b, C c) WHERE [id] WITHIN W`` (``--windows``), CPU µs per event of:

* ``batch``: the batch path on the whole stream as one partition (``MatchOperator.run_table``: key ids, the
  prefilter, the columnar construction, the Arrow result);
* ``engine``: the streaming function on the per-event engine (``MatchOperator.stream_function()`` forced to it),
  fed micro-batches of ``--batches`` events the way Spark calls it (``sparkcep.spark.group_state``): per micro-batch,
  one call per Spark group with rows (pandas frames prepared beforehand, not timed) or whose event-time timeout
  the watermark has passed, the group state stored as bytes between calls, Spark's watermark the newest ts of the
  earlier micro-batches (no lateness), a last empty micro-batch far ahead flushes;
* ``columnar``: the same streaming function on the streaming columnar step (``runtime_udfs.match.stream_columnar``,
  what ``stream_path`` ``columnar micro-batches`` runs).

Groups: ``N buckets`` (``--buckets N``, default 4: sparkcep's local session's ``spark.sql.shuffle.partitions``,
the default grouping of a streaming match query the columnar step streams, ``stream_buckets``: Spark groups by
``pmod(hash(id), N)``, one state per group holding its keys) and ``key`` (``buckets=0``: Spark groups by ``id``,
one call per id with rows; a checkpoint made before buckets were the default).
A path marked ``*`` is not the one ``MatchOperator.stream_path`` picks for that grouping (forced here: the
columnar step with one group per key, the engine with buckets).
Every path's match count is checked equal.  ``ratio`` columns: the path's µs per event over the batch path's.

    python bench/stream_engine.py [--events 100000] [--ids 100] [--windows 100,1000] [--batches 1000,10000,100000]
        [--buckets 4] [--repeat 3] [--quick] [--where "a.x < c.x"]

CPU time of this process (medians of ``--repeat``); state the machine and its load next to the figures.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pattern_matching import timed  # noqa: E402
from pyspark.sql.types import LongType, StringType, StructField, StructType  # noqa: E402

import sparkcep  # noqa: E402
from sparkcep.spark.group_state import GroupStates  # noqa: E402
from sparkcep.spark.operator import COLUMNAR_STREAM, MatchOperator  # noqa: E402
from sparkcep.spark.schema import EVENT_TIME_OFFSET, MASK  # noqa: E402
from sparkcep.spark.session import DEFAULT_SHUFFLE_PARTITIONS  # noqa: E402

SCHEMA = StructType([StructField("type", StringType()), StructField("ts", LongType()),
                     StructField("id", LongType()), StructField("x", LongType()), StructField(MASK, LongType())])


def query(window: int, where: str | None) -> str:
    cond = f" AND {where}" if where else ""
    return f"PATTERN SEQ(A a, B b, C c) WHERE [id]{cond} WITHIN {window} RETURN a.id AS id, a.ts, b.ts, c.ts"


def stream(n: int, ids: int, seed: int = 1) -> pd.DataFrame:
    rnd = random.Random(seed)
    types = [rnd.choice("ABC") for _ in range(n)]
    return pd.DataFrame({"type": types, "ts": np.arange(n, dtype=np.int64),
                         "id": np.array([rnd.randrange(ids) for _ in range(n)], dtype=np.int64),
                         "x": np.array([rnd.randrange(10) for _ in range(n)], dtype=np.int64),
                         MASK: np.array([1 << "ABC".index(t) for t in types], dtype=np.int64)})


def plan_calls(events: pd.DataFrame, batch: int, group_of) -> list[tuple[int, dict]]:
    """Per micro-batch, ``(Spark's watermark ms, {group: frame})``, the frames cut beforehand (Spark's work)."""
    out = []
    newest = None
    for lo in range(0, len(events), batch):
        chunk = events.iloc[lo:lo + batch]
        raw = 0 if newest is None else int(newest) + EVENT_TIME_OFFSET
        groups = {g: frame.reset_index(drop=True) for g, frame in chunk.groupby(group_of(chunk), sort=False)}
        out.append((raw, groups))
        newest = chunk["ts"].max()
    out.append((10**15, {}))  # far ahead: every timeout fires
    return out


def run_stream(fn, calls: list[tuple[int, dict]]) -> int:
    """Matches of the stream function over the planned calls, as Spark calls it (``GroupStates``)."""
    groups = GroupStates(fn)
    found = 0
    for raw, frames in calls:
        for frame in groups.micro_batch({g: [f] for g, f in frames.items()}, raw):
            found += len(frame)
    if groups:
        raise SystemExit(f"{len(groups)} group states left after the flush")
    return found


def measure(events: pd.DataFrame, window: int, where: str | None, batches: list[int], buckets: int | None,
            repeat: int) -> list[list]:
    spec = sparkcep.compile(query(window, where)).spec(SCHEMA)
    n = len(events)
    table = pa.Table.from_pandas(events, preserve_index=False)
    batch_op = MatchOperator(spec, SCHEMA, watermark_delay_ms=0)
    t_batch, want = timed(lambda: batch_op.run_table(table).num_rows, repeat)
    rows = [[window, "whole stream", "-", "batch", want, 1e6 * t_batch / n, 1.0]]
    groupings = [("key", None)] + ([(f"{buckets} buckets", buckets)] if buckets else [])
    for size in batches:
        for label, b in groupings:
            for path in ("engine", "columnar"):
                op = MatchOperator(spec, SCHEMA, watermark_delay_ms=0, buckets=b)
                chosen = op.stream_path == COLUMNAR_STREAM
                if path == "columnar" and not chosen and b is not None:
                    raise SystemExit(f"not eligible: {op.stream_path}")
                op.stream_path = COLUMNAR_STREAM if path == "columnar" else "per-event engine (forced)"
                group_of = (lambda c: c["id"]) if b is None else (lambda c, b=b: c["id"] % b)
                calls = plan_calls(events, size, group_of)
                t, got = timed(lambda op=op, calls=calls: run_stream(op.stream_function(), calls), repeat)
                if got != want:
                    raise SystemExit(f"W={window} batch {size} {label} {path}: {got} matches, batch path {want}")
                rows.append([window, f"{size:,}", label, path + ("" if chosen == (path == "columnar") else " *"),
                             got, 1e6 * t / n, t / t_batch])
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--ids", type=int, default=100)
    p.add_argument("--windows", default="100,1000")
    p.add_argument("--batches", default="1000,10000,100000", help="events per micro-batch")
    p.add_argument("--buckets", type=int, default=DEFAULT_SHUFFLE_PARTITIONS,
                   help="also group by pmod(hash(id), N) (0: not); default: the local session's shuffle partitions")
    p.add_argument("--where", default=None, help="a parameterized predicate to add, e.g. 'a.x < c.x'")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="20k events, one run (a smoke test)")
    args = p.parse_args(argv)
    if args.quick:
        args.events, args.repeat, args.batches = 20_000, 1, "1000,10000"
    events = stream(args.events, args.ids)
    header = ["W", "micro-batch", "groups", "path", "matches", "µs/event", "x batch"]
    print(f"## SEQ(A a, B b, C c) WHERE [id]{' AND ' + args.where if args.where else ''} WITHIN W, "
          f"{args.events:,} events, {args.ids} ids: CPU µs per event, medians of {args.repeat}")
    print("  ".join(f"{h:>12}" for h in header))
    for window in (int(w) for w in args.windows.split(",")):
        for row in measure(events, window, args.where, [int(b) for b in args.batches.split(",")],
                           args.buckets or None, args.repeat):
            cells = [f"{c:,.2f}" if isinstance(c, float) else f"{c:,}" if isinstance(c, int) else str(c)
                     for c in row]
            print("  ".join(f"{c:>12}" for c in cells))


if __name__ == "__main__":
    main()
