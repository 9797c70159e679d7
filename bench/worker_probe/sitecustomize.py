"""A probe of PySpark's Python workers (``bench/fixed_cost.py --probe``): with this directory first on the
workers' ``PYTHONPATH`` and ``SPARKCEP_WORKER_PROBE`` naming a file, each worker appends a JSON line per task
(``task``: the wait for the JVM's task, the function's unpickling and the whole task, wall and CPU seconds, the
eval type) and per garbage collection of PySpark's daemon after a task (``gc``: wall, CPU, objects tracked and
frozen after it).  Python runs ``sitecustomize`` at start-up, in the driver too, where it changes nothing."""

import os

if os.environ.get("SPARKCEP_WORKER_PROBE"):
    try:
        import gc
        import json
        import time

        import pyspark.worker as worker

        def _log(**record) -> None:
            with open(os.environ["SPARKCEP_WORKER_PROBE"], "a") as out:
                out.write(json.dumps({"pid": os.getpid(), "at": time.time(), **record}) + "\n")

        def _clock() -> tuple[float, float]:
            return time.perf_counter(), time.process_time()

        _task: dict = {}
        _receiver = worker.SparkSocketMessageReceiver
        _get_init, _read_udfs, _invoke, _collect = (_receiver.get_init_message, worker.read_udfs,
                                                    worker.invoke_udf, gc.collect)

        def get_init_message(self, *args, **kwargs):
            wall, _ = _clock()
            try:
                return _get_init(self, *args, **kwargs)
            finally:
                _task["wait"] = _clock()[0] - wall

        def read_udfs(*args, **kwargs):
            wall, cpu = _clock()
            try:
                return _read_udfs(*args, **kwargs)
            finally:
                now = _clock()
                _task.update(eval=args[2] if len(args) > 2 else None, unpickle_wall=now[0] - wall,
                             unpickle_cpu=now[1] - cpu)

        def invoke_udf(*args, **kwargs):
            _task.clear()
            wall, cpu = _clock()
            try:
                return _invoke(*args, **kwargs)
            finally:
                now = _clock()
                _log(kind="task", wall=now[0] - wall, cpu=now[1] - cpu, **_task)

        def collect(*args, **kwargs):
            wall, cpu = _clock()
            found = _collect(*args, **kwargs)
            now = _clock()
            _log(kind="gc", wall=now[0] - wall, cpu=now[1] - cpu, tracked=len(gc.get_objects()),
                 frozen=gc.get_freeze_count())
            return found

        _receiver.get_init_message = get_init_message
        worker.read_udfs, worker.invoke_udf, gc.collect = read_udfs, invoke_udf, collect
    except Exception as e:  # noqa: BLE001 - a probe never breaks a worker
        print(f"sparkcep worker probe off: {e!r}")
