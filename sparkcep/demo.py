"""``sparkcep demo``: generate a medication log, find antibiotic overdoses, batch and streaming, and check
both against the brute-force oracle.

The query is SASE's healthcare example (LANGUAGE.md §8) generalized to every patient::

    overdose:
    PATTERN SEQ(MEDICINE-TAKEN x, MEDICINE-TAKEN y)
    WHERE [patient] AND [medicine = 'Antibiotics'] AND (x.amount + y.amount) > 1000
    WITHIN 4 hours
    RETURN x.patient AS patient, x.ts AS first_dose, y.ts AS second_dose, x.amount + y.amount AS total_mg
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

DEMO_QUERY = """\
overdose:
PATTERN SEQ(MEDICINE-TAKEN x, MEDICINE-TAKEN y)
WHERE [patient] AND [medicine = 'Antibiotics'] AND (x.amount + y.amount) > 1000
WITHIN 4 hours
RETURN x.patient AS patient, x.ts AS first_dose, y.ts AS second_dose, x.amount + y.amount AS total_mg
"""

START = datetime(2026, 1, 5, 6, 0, tzinfo=timezone.utc)
FILES = 8


def generate_events(patients: int, seed: int) -> list[dict]:
    """Two days of a ward: doses every 1–5 hours per patient, nurse visits in between (noise)."""
    rnd = random.Random(seed)
    events = []
    for p in range(patients):
        patient = f"patient-{p:03d}"
        t = START + timedelta(minutes=rnd.randint(0, 120))
        while t < START + timedelta(days=2):
            medicine = rnd.choice(["Antibiotics", "Antibiotics", "Painkiller"])
            events.append({"type": "MEDICINE-TAKEN", "ts": t, "patient": patient, "medicine": medicine,
                           "amount": rnd.choice([250, 500, 750])})
            if rnd.random() < 0.5:
                visit = t + timedelta(minutes=rnd.randint(5, 50))
                events.append({"type": "NURSE-VISIT", "ts": visit, "patient": patient, "room": p % 12})
            t += timedelta(minutes=rnd.randint(60, 300))
    events.sort(key=lambda e: e["ts"])
    return events


def write_events(events: list[dict], folder: Path) -> None:
    """JSON-lines files in time order, as a collector would drop them, ISO-8601 timestamps.

    Each file's modification time is a second after the previous one's: a stream reads files in that order, and
    files written within the same millisecond would be read in any order (a later file first makes the earlier
    one's events late, and their matches lost)."""
    folder.mkdir(parents=True)
    per_file = -(-len(events) // FILES)
    first = time.time() - FILES
    for k in range(FILES):
        chunk = events[k * per_file:(k + 1) * per_file]
        path = folder / f"events-{k:02d}.jsonl"
        with open(path, "w") as f:
            for e in chunk:
                f.write(json.dumps({**e, "ts": e["ts"].isoformat()}) + "\n")
        os.utime(path, (first + k, first + k))


def run_demo(directory: str, patients: int = 40, seed: int = 7, quiet: bool = False, verbose: bool = False) -> int:
    """Prints the query, its plan, the results and a comparison; progress lines on stderr unless ``quiet``."""
    import sparkcep
    from sparkcep.console import progress
    from sparkcep.oracles.match import match_rows
    from sparkcep.spark.io import read_events
    from sparkcep.spark.results import canonical, epoch_ms_rows
    from sparkcep.spark.session import local_session

    root = Path(directory)
    shutil.rmtree(root, ignore_errors=True)
    events = generate_events(patients, seed)
    write_events(events, root / "events")
    q = sparkcep.compile(DEMO_QUERY)
    print(f"Generated {len(events)} events for {patients} patients in {root / 'events'} ({FILES} files).\n")
    print(DEMO_QUERY)
    print(q.explain(), "\n")

    spark = local_session(verbose=verbose)
    t0 = time.perf_counter()
    with progress(spark, quiet=quiet):
        batch = epoch_ms_rows(q.apply(read_events(spark, str(root / "events"), "json", "ts")))
    t_batch = time.perf_counter() - t0

    t0 = time.perf_counter()
    stream_df = q.apply(read_events(spark, str(root / "events"), "json", "ts", stream=True,
                                      files_per_trigger=1))
    query = (stream_df.writeStream.format("json").option("path", str(root / "results"))
             .option("checkpointLocation", str(root / "checkpoint")).outputMode("append")
             .trigger(availableNow=True).start())
    with progress(spark, quiet=quiet):
        query.awaitTermination()
    streamed = epoch_ms_rows(spark.read.schema(stream_df.schema).json(str(root / "results")))
    t_stream = time.perf_counter() - t0

    as_ms = [{**e, "ts": int(e["ts"].timestamp() * 1000)} for e in events]
    expected = match_rows(q.query, as_ms)

    print(f"{'patient':<13} {'first dose (UTC)':<18} {'second dose (UTC)':<18} total_mg")
    for row in sorted(batch, key=lambda r: (r["first_dose"], r["patient"]))[:10]:
        first, second = (datetime.fromtimestamp(row[k] / 1000, timezone.utc).strftime("%a %H:%M")
                         for k in ("first_dose", "second_dose"))
        print(f"{row['patient']:<13} {first:<18} {second:<18} {row['total_mg']}")
    if len(batch) > 10:
        print(f"... and {len(batch) - 10} more")
    ok = canonical(batch) == canonical(streamed) == canonical(expected)
    print(f"\n{len(batch)} overdoses found: batch in {t_batch:.1f} s, "
          f"streaming ({FILES} micro-batches) in {t_stream:.1f} s (local Spark, this machine).")
    print(f"batch == streaming == oracle: {'yes' if ok else 'NO'} "
          f"({len(batch)} / {len(streamed)} / {len(expected)} rows)")
    print(f"Results: {root / 'results'}  Checkpoint: {root / 'checkpoint'}")
    return 0 if ok else 1
