"""Repeated groups in the pure match engine (no JVM): what the automaton of a group costs per event.

Each query runs over the same random stream (types A-E, a key ``id`` with ``--keys`` values, ``ts`` +0..1 per
event), partitioned by ``id`` as the Spark adapter runs it, fed in micro-batches of ``--batch`` events (``step``
then ``advance`` to the batch's last ts, per key).  Printed: matches, events per second of CPU time (median of
``--repeat`` runs), and the ratio to the baseline in the same process: the flat ``SEQ(A a, B b, C c, E e)`` of
the same components under the same strategy.  Rows: the group ``(SEQ(B b, C c))+``, a group with ``OR``
(``(SEQ(B b, C c) OR D d)+``), with an optional component, nested groups, and a negation inside.

(The queries find different matches, so the ratio is the price of the richer pattern, matches included.)

    python bench/match_groups.py [--events 20000] [--keys 10] [--window 30] [--repeat 3] [--batch 500]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import sparkcep
from sparkcep.ir.spec import with_default_outputs
from sparkcep.runtime_udfs.match import engine as match_engine

BASELINE = "SEQ(A a, B b, C c, E e)"
PATTERNS = [
    "SEQ(A a, (SEQ(B b, C c))+, E e)",
    "SEQ(A a, (SEQ(B b, C c) OR D d)+, E e)",
    "SEQ(A a, (SEQ(B b, C? c))+, E e)",
    "SEQ(A a, (SEQ((SEQ(B b, C c))+, D d))+, E e)",
    "SEQ(A a, (SEQ(B b, !(D z), C c) OR D d)+, E e)",
]
STRATEGIES = ["skip_till_next_match", "skip_till_any_match"]


def stream(n: int, keys: int, seed: int = 1) -> list[dict]:
    rnd = random.Random(seed)
    out, ts = [], 0
    for _ in range(n):
        ts += rnd.randint(0, 1)
        out.append({"type": rnd.choice("ABCDE"), "ts": ts, "id": rnd.randrange(keys), "x": rnd.randint(0, 9)})
    return out


def run_once(spec, events: list[dict], batch: int) -> tuple[int, float]:
    """``(matches, CPU seconds)`` of feeding ``events`` in micro-batches, per key."""
    states: dict = {}
    matches = 0
    start = time.process_time()
    for k in range(0, len(events), batch):
        chunk = events[k:k + batch]
        by_key: dict = {}
        for e in chunk:
            by_key.setdefault(e["id"], []).append(e)
        watermark = chunk[-1]["ts"]
        for key, evs in by_key.items():
            state, _ = match_engine.step(spec, states.get(key) or match_engine.init_state(), evs)
            states[key] = state
        for state in states.values():
            matches += len(match_engine.advance(spec, state, watermark)[1])
    for state in states.values():
        matches += len(match_engine.advance(spec, state, float("inf"))[1])
    return matches, time.process_time() - start


def measure(text: str, events: list[dict], args) -> tuple[int, float]:
    spec = with_default_outputs(sparkcep.compile(text).spec(), ["ts", "x"])
    match_engine.check(spec)
    runs = [run_once(spec, events, args.batch) for _ in range(args.repeat)]
    counts = {m for m, _ in runs}
    assert len(counts) == 1, counts
    return counts.pop(), len(events) / statistics.median(t for _, t in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--window", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    events = stream(args.events, args.keys)
    print(f"{args.events} events, {args.keys} keys, WITHIN {args.window}, micro-batches of {args.batch}; events/s of "
          "CPU time, median of", args.repeat)
    for strategy in STRATEGIES:
        print(f"\n{strategy}")
        print(f"{'pattern':50} {'matches':>9} {'events/s':>10} {'vs flat':>8}")
        base = None
        for pattern in [BASELINE, *PATTERNS]:
            text = f"PATTERN {pattern} USING {strategy} WHERE [id] WITHIN {args.window}"
            matches, rate = measure(text, events, args)
            base = base or rate
            print(f"{pattern:50} {matches:>9} {rate:>10.0f} {rate / base:>8.2f}")


if __name__ == "__main__":
    main()
