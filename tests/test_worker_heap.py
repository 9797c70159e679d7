"""The Python worker's heap between a stream's Spark tasks (issue 17): the stateful operator's function and the
shedding stage freeze the objects alive when their task starts, once per task, so that the full collection
PySpark's daemon runs after every task walks only that task's objects (about 47 ms of CPU per task with the
~104,000 objects of the loaded engine, paid by every state partition and the shedding stage of every
micro-batch).  Counted here without a JVM: ``gc.freeze`` calls per simulated task; the rows are the same."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import pandas as pd
from pyspark import TaskContext
from pyspark.sql.types import LongType, StringType, StructField, StructType

import sparkcep
from sparkcep.runtime_udfs.shedding.observations import SID
from sparkcep.runtime_udfs.shedding.shedder import fit_gspice
from sparkcep.spark.group_state import GroupStates
from sparkcep.spark.heap import freeze_worker_heap
from sparkcep.spark.operator import MatchOperator
from sparkcep.spark.shedding import SHED, ControlFile, stage_function

SCHEMA = StructType([StructField("type", StringType()), StructField("ts", LongType()), StructField("id", LongType())])
QUERY = "PATTERN SEQ(A a, B b) WHERE [id] WITHIN 10"


def _in_task(monkeypatch, task) -> None:
    """Run what follows as in the Spark task ``task`` (None: outside any task, as on a driver)."""
    monkeypatch.setattr(TaskContext, "get", classmethod(lambda cls: task))


def _counting_freezes(monkeypatch) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append(1))
    return calls


def _micro_batches(op: MatchOperator, tasks, monkeypatch) -> list[dict]:
    """Two micro-batches of two groups (keys 1 and 2); ``tasks``: the Spark task of each micro-batch."""
    groups, out = GroupStates(op.stream_function()), []
    batches = [[("A", 1, 1), ("A", 2, 2), ("B", 3, 1)], [("B", 4, 2), ("A", 5, 1), ("B", 6, 1)]]
    for n, (events, task) in enumerate(zip(batches, tasks, strict=True)):
        _in_task(monkeypatch, task)
        frames = {(k,): [pd.DataFrame([{"type": t, "ts": ts, "id": i} for t, ts, i in events if i == k])]
                  for k in (1, 2)}
        out += [r for f in groups.micro_batch(frames, 10**15 if n else 0) for r in f.to_dict("records")]
    return sorted(out, key=lambda r: sorted(r.items()))


def test_stream_function_freezes_the_heap_once_per_task(monkeypatch):
    """Spark calls the stateful function once per group: the heap is frozen at the first call of each task
    (two groups, one freeze), again in the next task, never outside a task; the matches are the same."""
    op = MatchOperator(sparkcep.compile(QUERY).spec(SCHEMA), SCHEMA)
    freezes = _counting_freezes(monkeypatch)
    outside = _micro_batches(op, [None, None], monkeypatch)
    assert freezes == [] and len(outside) == 4  # (1,3) (1,6) (5,6) for id 1, (2,4) for id 2
    inside = _micro_batches(op, [object(), object()], monkeypatch)
    assert len(freezes) == 2  # one per task, not one per group call (4)
    assert inside == outside


def test_freeze_worker_heap_once_per_task_context(monkeypatch):
    freezes = _counting_freezes(monkeypatch)
    first, second = object(), object()
    seen = []
    for task in (first, first, second, second, None):
        _in_task(monkeypatch, task)
        seen.append(freeze_worker_heap())
    assert seen == [True, False, True, False, False] and len(freezes) == 2


def test_shedding_stage_freezes_the_heap_in_a_task(monkeypatch, tmp_path):
    """The shedding stage (``mapInPandas``, once per task) freezes the heap in a task only; its marks do not
    depend on it (ρ 0: nothing dropped)."""
    spec = sparkcep.compile("PATTERN SEQ(A a, B b) WITHIN 10").spec()
    events = [{"type": "AB"[i % 2], "ts": i, SID: i} for i in range(60)]
    shedder = fit_gspice([(spec, 1.0)], events, pane_length=4)
    control = ControlFile(str(tmp_path / "control.json"))
    control.write(0.0)
    stage = stage_function(SimpleNamespace(value=shedder), control.path)
    pdf = pd.DataFrame([{"type": e["type"], "ts": e["ts"]} for e in events])
    freezes = _counting_freezes(monkeypatch)
    _in_task(monkeypatch, None)
    outside = pd.concat(list(stage(iter([pdf]))))
    assert freezes == []
    _in_task(monkeypatch, object())
    inside = pd.concat(list(stage(iter([pdf]))))
    assert len(freezes) == 1 and not inside[SHED].any()
    pd.testing.assert_frame_equal(inside, outside)


def test_match_recognize_stream_functions_freeze_the_heap_once_per_task(monkeypatch):
    """MATCH_RECOGNIZE's stateful functions, one statement's and statements sharing a pass, freeze at their
    first call of a task and not outside a task; the rows are the same (two calls of one group per task)."""
    import pytest

    pytest.importorskip("sparkcep.runtime_udfs.recognize")
    from sparkcep.spark import recognize as single
    from sparkcep.spark import recognize_workload as shared
    from sparkcep.spark.group_state import SimulatedGroup
    from tests.test_recognize_spark import _INPUT, _OUTPUT, SPEC, _frame, _micros

    monkeypatch.setattr(single, "output_struct", lambda spec: _OUTPUT)  # Spark's DDL parser needs a session
    functions = [single.stream_function(SPEC, _OUTPUT, _INPUT, numeric=False),
                 shared.stream_function([SPEC, SPEC], shared.tagged_struct([SPEC, SPEC]), _INPUT, numeric=False)]
    batches = [([("a", 0, 1), ("b", 2, 2)], 0.5), ([("b", 4, 3), ("a", 0, 4)], 8.0)]

    def run(fn, task) -> list[dict]:
        group, out = SimulatedGroup(), []
        _in_task(monkeypatch, task)
        for rows, watermark in batches:  # one task: the second call of the group's function freezes nothing
            group.watermark_ms = _micros(watermark) // 1000
            out += [r for f in fn(("p",), iter([_frame(rows)]), group) for r in f.to_dict("records")]
        return out

    for fn in functions:
        freezes = _counting_freezes(monkeypatch)
        outside = run(fn, None)
        assert freezes == [] and outside
        inside = run(fn, object())
        assert len(freezes) == 1 and pd.DataFrame(inside).equals(pd.DataFrame(outside))  # NaN equal to NaN
