"""``sparkcep.live``: the one preparation of every live run (``run --stream``, ``apply_stream``, the
``%%sparkcep --stream`` cell, ``MATCH_RECOGNIZE`` runs, the generated jobs), in plain Python (no JVM)."""

from __future__ import annotations

import os
import threading
import time

import pytest

import sparkcep
from sparkcep.ir.errors import CEPError
from sparkcep.live import prepare_live
from sparkcep.spark.validate import original_name


def staged(directory: str) -> list[str]:
    return sorted(original_name(n) for n in os.listdir(directory) if n.endswith(".json"))


def test_a_run_without_a_checkpoint_stages_apart_sweeps_with_its_temporary_checkpoint_and_cleans_up(tmp_path):
    """Without the user's checkpoint the staging directory is temporary; the admission watches the run's own
    (temporary) checkpoint, so its staged links are swept while it runs, as ``run --stream`` without
    ``--checkpoint`` does (the cell and ``MATCH_RECOGNIZE`` runs too); a file that arrives is handed over;
    ``close`` stops the thread and removes the staging directory (twice: nothing more)."""
    inbox, ck = tmp_path / "in", tmp_path / "run-ck"
    inbox.mkdir()
    (inbox / "a.json").write_text('{"type": "A", "ts": 1}\n')
    live = prepare_live(str(inbox), "json")
    assert live.temporary and live.read_from == live.staging and staged(live.staging) == ["a.json"]
    with live:
        admission = live.admit(None, str(ck))
        assert admission is live.admission and admission.shedding is None
        assert admission.links is not None and admission.links.checkpoint == str(ck)
        (inbox / "b.json").write_text('{"type": "B", "ts": 2}\n')
        deadline = time.monotonic() + 10
        while staged(live.staging) != ["a.json", "b.json"]:
            assert time.monotonic() < deadline, staged(live.staging)
            time.sleep(0.05)
    live.close()
    assert not os.path.exists(live.staging)
    assert not [t for t in threading.enumerate() if t is admission._thread and t.is_alive()]


def test_the_input_is_checked_before_anything_is_staged(tmp_path):
    """A mistake about the input (here an attribute the query reads that it lacks) is one message with the
    query's caret, and the user's checkpoint gets no staging directory naming that input."""
    inbox, ck = tmp_path / "in", tmp_path / "ck"
    inbox.mkdir()
    (inbox / "a.json").write_text('{"type": "A", "ts": 1, "id": 1}\n')
    q = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 10")
    with pytest.raises(CEPError, match="reads 'x', which the input"):
        prepare_live(str(inbox), "json", checkpoint=str(ck), check=[q])
    assert not (ck / "_admitted").exists()
    with prepare_live(str(inbox), "json", checkpoint=str(ck), check=[sparkcep.compile("PATTERN SEQ(A a) WITHIN 10")]
                      ) as live:
        assert not live.temporary and live.staging == str(ck / "_admitted")


def test_a_batch_reads_its_input_as_it_is_and_a_watched_admission_ends_with_its_query(tmp_path):
    inbox, ck = tmp_path / "in", tmp_path / "ck"
    inbox.mkdir()
    (inbox / "a.json").write_text('{"type": "A", "ts": 1}\n')
    batch = prepare_live(str(inbox), "json", stream=False, checkpoint=str(ck))
    assert (batch.staging, batch.read_from, batch.admit(None, str(ck))) == (None, str(inbox), None)

    class Query:
        id, isActive = "q1", True

    class Stage:
        def bind(self, query):
            self.query = query

    stage, query = Stage(), Query()
    with prepare_live(str(inbox), "json", checkpoint=str(ck)) as live:
        live.admit(None, str(ck))
        live.started(query, stage, watch=True)
        assert stage.query is query and live.admission.alive()
        query.isActive = False
        assert not live.admission.alive()
