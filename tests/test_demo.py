"""``sparkcep demo``'s input files (the demo itself runs in tests/test_docs_examples.py, docs/README.md's block)."""

from __future__ import annotations

import json

from sparkcep.demo import FILES, generate_events, write_events


def test_files_are_read_in_time_order(tmp_path):
    """A stream reads files by modification time (milliseconds): the demo's files, written within a millisecond
    or two, get times a second apart in the order of their events, so that no file's events come after a later
    file's (late: their matches lost, and the demo's streaming run then disagreed with its batch run)."""
    write_events(generate_events(5, 1), tmp_path / "events")
    files = sorted((tmp_path / "events").iterdir())
    assert len(files) == FILES
    mtimes_ms = [int(f.stat().st_mtime * 1000) for f in files]
    assert all(b - a >= 1000 for a, b in zip(mtimes_ms, mtimes_ms[1:], strict=False)), mtimes_ms
    last_ts = [max(json.loads(line)["ts"] for line in f.read_text().splitlines()) for f in files]
    first_ts = [min(json.loads(line)["ts"] for line in f.read_text().splitlines()) for f in files]
    assert all(last <= first for last, first in zip(last_ts, first_ts[1:], strict=False))
