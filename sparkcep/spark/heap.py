"""The Python worker's heap between Spark tasks: :func:`freeze_worker_heap`.

PySpark's daemon runs ``gc.collect()`` in a reused Python worker after every task (``pyspark/daemon.py``): a
full collection, which walks every object the worker holds.  With the MATCH_RECOGNIZE engine loaded (numba,
sqlglot, pyarrow, pandas: about 120,000 tracked objects) that is about 50 ms of CPU per task, more than the
columnar kernel spends on 10^5 rows; a ``mapInArrow`` stage pays it once per task.  Every batch operator's
partition function calls :func:`freeze_worker_heap` when its task starts: MATCH_RECOGNIZE's
(``spark/recognize.py``) and its shared workload's (``spark/recognize_workload.py``), a match or trend query's
(``MatchOperator.partition_function``) and a workload's (``spark/workload.py``); every stream's stateful
function (``MatchOperator.stream_function``, MATCH_RECOGNIZE's one statement and shared ``stream_function``) and
the shedding stage wrap themselves in :func:`freezing`.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import Any

__all__ = ["freeze_worker_heap", "freezing"]

#: the task context of the task whose heap was frozen last (a worker runs one task at a time)
_frozen_in: list[Any] = [None]


def freeze_worker_heap() -> bool:
    """In a Spark task's Python worker, move the objects alive now into the permanent generation
    (``gc.freeze``), so that the collection the daemon runs after the task walks only what the task made;
    whether it did.  Called when a task's function starts: the daemon collected the previous task's garbage just
    before, so what is frozen is live (modules, compiled kernels, caches).  Once per task: a function Spark
    calls per group (``applyInPandasWithState``) freezes at its first call of the task only, not the garbage
    of the groups before.  A frozen object is still freed when its last reference goes (reference counting);
    only a reference cycle among frozen objects would never be collected.  Outside a Spark task (a driver, a
    test process, where garbage may be waiting) it does nothing."""
    from pyspark import TaskContext

    task = TaskContext.get()
    if task is None or task is _frozen_in[0]:
        return False
    _frozen_in[0] = task
    gc.freeze()
    return True


def freezing(fn: Callable) -> Callable:
    """``fn`` (a function Spark calls in a task: per partition or per group) freezing the worker's heap first
    (:func:`freeze_worker_heap`).  A stream pays the daemon's collection for every task of every micro-batch: the
    shedding stage's and each state partition's (about 104,000 tracked objects in the live bench's workers, 45 ms
    of CPU per task), and the worker takes its next task only once it is done: Spark counts that wait as the
    task's "time to start Python workers"."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        freeze_worker_heap()
        return fn(*args, **kwargs)

    return call
