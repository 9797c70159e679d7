"""Runs Flink SQL MATCH_RECOGNIZE statements with PyFlink, for the differential test and the benchmark.

Run by the Python of an environment where ``apache-flink`` is installed (it imports nothing from sparkcep):

    FLINK_PYTHON bench/flink_worker.py < job.json > results.jsonl

``job.json``: ``{"tables": [{"name": ..., "path": CSV file, "columns": "p INT, ts BIGINT, ..."}],
"queries": [{"id": ..., "sql": ...}], "repeat": 1, "parallelism": 1, "union": false}``. Each table gets a
computed event-time column ``rt AS TO_TIMESTAMP_LTZ(ts, 3)`` (``ts`` in milliseconds). Batch mode (bounded
input, the partition end known); one JVM for every query. Prints a first line ``{"setup": seconds}`` (JVM and
tables), then one JSON line per query: ``{"id", "rows": [[...], ...], "columns", "error", "seconds": [per
repetition: execute + collect]}``.

``"union": true`` runs every query in ONE Flink job (each query's rows as ``JSON_ARRAY(...)`` tagged with its
index, all of them ``UNION ALL``): the differential test's many small statements then pay the job start-up
once. Beware: Flink 2.3 takes two MATCH_RECOGNIZE clauses over the same input that differ only in WITHIN
for one (``A B+ C`` and ``A B+ C WITHIN INTERVAL '6' SECOND`` in one job both gave the rows without WITHIN;
turning ``table.optimizer.reuse-sub-plan-enabled`` off does not help): keep such statements apart. If that
job fails, the queries run one by one, so that each error is reported with its query.
"""

from __future__ import annotations

import json
import sys
import time


def _value(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if hasattr(v, "timestamp"):
        return int(round(v.timestamp() * 1000))
    return str(v)


def main() -> None:
    t0 = time.perf_counter()
    job = json.load(sys.stdin)
    from pyflink.table import EnvironmentSettings, TableEnvironment

    streaming = bool(job.get("streaming"))
    settings = EnvironmentSettings.in_streaming_mode() if streaming else EnvironmentSettings.in_batch_mode()
    env = TableEnvironment.create(settings)
    # streaming: rt is an event-time attribute; the watermark waits for the end of the (bounded) file
    watermark = ", WATERMARK FOR rt AS rt - INTERVAL '99' DAY" if streaming else ""
    env.get_config().set("parallelism.default", str(job.get("parallelism", 1)))
    env.get_config().set("table.local-time-zone", "UTC")
    for t in job["tables"]:
        path = json.dumps(t["path"])[1:-1].replace("'", "''")
        env.execute_sql(
            f"CREATE TEMPORARY TABLE {t['name']} ({t['columns']}, rt AS TO_TIMESTAMP_LTZ(ts, 3){watermark}) "
            f"WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv')"
        )
    print(json.dumps({"setup": time.perf_counter() - t0}), flush=True)
    if job.get("union") and _run_union(env, job["queries"]):
        return
    for q in job["queries"]:
        out = {"id": q["id"], "rows": None, "columns": None, "error": None, "seconds": []}
        for _ in range(int(job.get("repeat", 1))):
            t1 = time.perf_counter()
            try:
                result = env.execute_sql(q["sql"])
                with result.collect() as it:
                    rows = [[_value(v) for v in row] for row in it]
                out["columns"] = list(result.get_table_schema().get_field_names())
            except Exception as e:  # noqa: BLE001 - reported to the caller, one line
                msg = str(e)
                lines = [ln for ln in msg.splitlines() if "Exception:" in ln or "Error" in ln]
                out["error"] = (lines[-1] if lines else msg.splitlines()[0] if msg else type(e).__name__)[:2000]
                break
            out["seconds"].append(time.perf_counter() - t1)
            out["rows"] = rows
        print(json.dumps(out), flush=True)


def _run_union(env, queries) -> bool:
    t1 = time.perf_counter()
    try:
        parts, columns = [], []
        for k, q in enumerate(queries):
            names = list(env.sql_query(q["sql"]).get_schema().get_field_names())
            columns.append(names)
            items = ", ".join(f"`{n}`" for n in names)
            parts.append(f"SELECT {k} AS q__, JSON_ARRAY({items} NULL ON NULL) AS r__ FROM ({q['sql']})")
        rows: list[list] = [[] for _ in queries]
        with env.execute_sql(" UNION ALL ".join(parts)).collect() as it:
            for row in it:
                rows[row[0]].append(json.loads(row[1]))
    except Exception:  # noqa: BLE001 - the caller runs the queries one by one to report each error
        return False
    seconds = time.perf_counter() - t1
    for q, names, got in zip(queries, columns, rows, strict=True):
        print(json.dumps({"id": q["id"], "rows": got, "columns": names, "error": None, "seconds": [seconds]}),
              flush=True)
    return True


if __name__ == "__main__":
    main()
