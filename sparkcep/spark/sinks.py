"""The streaming sink of a sparkcep job: results, dead letters and late events, exactly once, with metrics.

One streaming query carries everything: the operator's output (results and, through its side channel, late
events; :mod:`sparkcep.spark.late`) united with the rejected records of the validation stage
(:mod:`sparkcep.spark.validate`), each row tagged by :data:`KIND`.  :func:`routed` builds that stream and puts
Spark observed metrics on it; :func:`start` writes it with ``foreachBatch``:

* results to ``output/``, dead letters to ``output/_dead_letters/``, late events to ``output/_late/`` (both
  hidden from readers of ``output/``, whose names start with ``_``; or the directories given), JSON lines;
* each micro-batch's files are named after its batch id (``part-b00000007-00000.json``).  A batch is written
  to a staging directory and then renamed into place, after removing whatever an interrupted attempt of the
  same batch left.  Spark re-runs an uncommitted batch with the same input and the same state after a crash,
  so each batch's files end up written once: no row lost, none repeated;
* the query's checkpoint holds the offsets, the state and the commits; :data:`METRICS` are the counts of
  each micro-batch in ``StreamingQueryProgress.observedMetrics`` (see :mod:`sparkcep.spark.progress`).

Filesystem work goes through Hadoop's FileSystem API, so the same code writes to a local disk, HDFS or an
object store.
"""

from __future__ import annotations

import re
import threading
import time

from sparkcep.spark.late import KIND, LATE, REASON, RECORD, RESULT
from sparkcep.spark.validate import LATENCY_COL, RESULT_ARRIVAL, quoted
from sparkcep.spark.validate import REASON as REJECT_REASON
from sparkcep.spark.validate import RECORD as REJECT_RECORD

DEAD = "dead_letter"
#: The counts a job observes per micro-batch (``StreamingQueryProgress.observedMetrics``, one set each):
#: valid events, dead letters, the valid events the query's filter keeps (the rest are ``ignored``: of a type
#: or with values no component can use), and the operator's results and late events.
METRICS = ("events_valid", "dead_letters", "events_relevant", "sparkcep_output")


def counted(df, name: str):
    """``df`` with an observer ``name`` counting its rows (a column of the same name)."""
    from pyspark.sql import functions as F

    return df.observe(name, F.count(F.lit(1)).alias(name))


def routed(operated, rejected=None):
    """One stream of the operator's output (with the late side channel) and the rejected records (None: none,
    e.g. a second query over the same input), tagged by :data:`KIND`, with the ``sparkcep_output`` observer
    (results and late events per micro-batch)."""
    from pyspark.sql import functions as F

    both = operated
    if rejected is not None:
        dead = rejected.select(*[F.lit(None).cast(f.dataType).alias(f.name) for f in operated.schema.fields
                                 if f.name not in (KIND, REASON, RECORD)],
                               F.lit(DEAD).alias(KIND), F.col(REJECT_REASON).alias(REASON),
                               F.col(REJECT_RECORD).alias(RECORD)).select(*operated.columns)
        both = operated.unionByName(dead)
    counts = [F.sum(F.when(F.col(KIND) == RESULT, 1).otherwise(0)).alias("results"),
              F.sum(F.when(F.col(KIND) == LATE, 1).otherwise(0)).alias("late")]
    if RESULT_ARRIVAL in operated.columns:  # the results' arrival: their latency per micro-batch (progress)
        arrival = F.when(F.col(KIND) == RESULT, F.col(RESULT_ARRIVAL))
        # their latency from arrival to the micro-batch's start (its batch timestamp), for readers of the metrics
        waited = F.unix_millis(F.current_timestamp()) - arrival
        counts += [F.percentile_approx(arrival, 0.01).alias("result_arrival_p01"),
                   F.percentile_approx(arrival, 0.5).alias("result_arrival_median"),
                   F.count(arrival).alias("results_arrived"),
                   F.percentile_approx(waited, 0.5).alias("result_latency_p50_ms"),
                   F.percentile_approx(waited, 0.99).alias("result_latency_p99_ms")]
    return both.observe("sparkcep_output", *counts)


def side_dirs(output: str, dead_letters: str | None = None, late: str | None = None) -> tuple[str, str]:
    """The dead-letter and late-event directories: the ones given, else hidden ones inside ``output``."""
    root = output.rstrip("/")
    return dead_letters or f"{root}/_dead_letters", late or f"{root}/_late"


def _jvm_fs(spark, path: str):
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return jvm, hpath, hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())


def write_batch(df, path: str, batch_id: int, rows: int | None = None) -> int:
    """Write ``df`` as JSON lines into ``path`` as the files of micro-batch ``batch_id``, replacing what an
    earlier attempt of that batch wrote; ``rows`` is ``df``'s row count if known.  Returns the number of
    files."""
    spark = df.sparkSession
    jvm, root, fs = _jvm_fs(spark, path)
    Path = jvm.org.apache.hadoop.fs.Path
    prefix = _clear_batch(fs, Path, [path], batch_id)
    staging = Path(root, f"_staging-b{batch_id:08d}")
    fs.delete(staging, True)
    if rows == 0 or (rows is None and df.isEmpty()):
        return 0
    df.write.mode("overwrite").json(staging.toString())
    moved = _move_parts(fs, Path, staging, path, prefix, keep_suffix=True)
    fs.delete(staging, True)
    return moved


def _clear_batch(fs, Path, paths, batch_id: int) -> str:
    """Delete what an earlier attempt of micro-batch ``batch_id`` wrote into each of ``paths``; the file name
    prefix of that batch's files."""
    prefix = f"part-b{batch_id:08d}-"
    for path in paths:
        for status in fs.globStatus(Path(Path(path), prefix + "*")) or []:
            fs.delete(status.getPath(), False)
    return prefix


def _move_parts(fs, Path, folder, path: str, prefix: str, keep_suffix: bool) -> int:
    """Rename the non-empty ``part-`` files Spark wrote into ``folder`` to ``path/<prefix>KKKKK`` + their own
    suffix (``keep_suffix``) or ``.json``; the number moved.  An empty Spark partition may leave an empty part
    file: not moved (plain JSON readers fail on it)."""
    parts = sorted((s.getPath() for s in fs.listStatus(folder)
                    if s.getPath().getName().startswith("part-") and s.getLen() > 0), key=lambda p: p.getName())
    if parts:
        fs.mkdirs(Path(path))
    for k, part in enumerate(parts):
        name = part.getName()
        suffix = (name[name.index("."):] if "." in name else "") if keep_suffix else ".json"
        if not fs.rename(part, Path(Path(path), f"{prefix}{k:05d}{suffix}")):
            raise OSError(f"could not move {part.toString()} into {path}")
    return len(parts)


def write_kinds(df, targets: dict[str, str], batch_id: int) -> int:
    """Write the micro-batch ``batch_id`` of ``df`` (columns :data:`KIND` and ``value``, a JSON line) in **one**
    Spark job: each kind's lines into ``targets[kind]`` as that batch's files (``part-bN-K.json``), replacing
    what an earlier attempt of the batch wrote.  The lines are written partitioned by kind into a staging
    directory of the first target (the results'), then each kind's non-empty files are renamed into place.
    The number of files."""
    spark = df.sparkSession
    jvm, root, fs = _jvm_fs(spark, next(iter(targets.values())))
    Path = jvm.org.apache.hadoop.fs.Path
    prefix = _clear_batch(fs, Path, targets.values(), batch_id)
    staging = Path(root, f"_staging-b{batch_id:08d}")
    fs.delete(staging, True)
    df.write.mode("overwrite").partitionBy(KIND).text(staging.toString())
    moved = 0
    for kind, path in targets.items():
        folder = Path(staging, f"{KIND}={kind}")
        if fs.exists(folder):
            moved += _move_parts(fs, Path, folder, path, prefix, keep_suffix=False)
    fs.delete(staging, True)
    return moved


def _one_file_system(spark, paths) -> bool:
    """Whether every path is on the file system of the first (a rename moves between them)."""
    uris = {str(_jvm_fs(spark, p)[2].getUri()) for p in paths}
    return len(uris) == 1


def batch_writer(output: str, result_columns: list[str], dead_letters: str, late: str, latency: bool = False):
    """The ``foreachBatch`` function: a micro-batch of :func:`routed`, each row a JSON line of its kind's
    columns (results: ``result_columns``; dead letters and late events: ``reason``, ``record``), written by
    :func:`write_kinds` in one Spark job: the micro-batch is computed once, not cached, nothing counted first.
    ``latency``: each result gets :data:`LATENCY_COL`, the milliseconds from its arrival
    (:data:`RESULT_ARRIVAL`) to the moment the micro-batch's rows have been computed, before they are written
    (null for a result without an arrival): the rows are then cached and counted first, and each kind is
    written by :func:`write_batch`; so too when the side outputs are on another file system than ``output``."""
    from pyspark.sql import functions as F

    results = [F.col(quoted(c)) for c in result_columns]
    side = [F.col(REASON).alias(REJECT_REASON), F.col(RECORD).alias(REJECT_RECORD)]
    targets = {RESULT: output, DEAD: dead_letters, LATE: late}
    line = F.when(F.col(KIND) == RESULT, F.to_json(F.struct(*results))).otherwise(F.to_json(F.struct(*side)))
    one_job = None

    def write(df, batch_id: int) -> None:
        nonlocal one_job
        if one_job is None:
            one_job = not latency and _one_file_system(df.sparkSession, targets.values())
        if one_job:
            write_kinds(df.select(F.col(KIND), line.alias("value")), targets, batch_id)
            return
        df.persist()
        try:
            counts = {row[0]: row[1] for row in df.groupBy(KIND).count().collect()}
            # the rows are computed (cached) now: the results' latency up to this moment
            extra = [result_latency(df.columns)] if latency else []
            parts = ((RESULT, output, results + extra), (DEAD, dead_letters, side), (LATE, late, side))
            for kind, path, columns in parts:
                write_batch(df.where(F.col(KIND) == kind).select(*columns), path, batch_id, counts.get(kind, 0))
        finally:
            df.unpersist()

    return write


def result_latency(columns: list[str]):
    """The column :data:`LATENCY_COL`: the milliseconds from each result's arrival (:data:`RESULT_ARRIVAL`, null
    where ``columns`` has none) to now, called once the micro-batch's rows have been computed (cached)."""
    from pyspark.sql import functions as F

    arrival = F.col(RESULT_ARRIVAL) if RESULT_ARRIVAL in columns else F.lit(None)
    return (F.lit(int(time.time() * 1000)) - arrival).cast("bigint").alias(LATENCY_COL)


def last_committed(spark, checkpoint: str) -> int | None:
    """The id of the last micro-batch the query of ``checkpoint`` committed (its ``commits/`` log), or None."""
    jvm, root, fs = _jvm_fs(spark, checkpoint.rstrip("/") + "/commits")
    if not fs.exists(root):
        return None
    ids = [int(s.getPath().getName()) for s in fs.listStatus(root) if s.getPath().getName().isdigit()]
    return max(ids, default=None)


def discard_uncommitted(spark, checkpoint: str, output: str, dead_letters: str | None = None,
                        late: str | None = None) -> int:
    """Remove the files of micro-batches after the last committed one from ``output`` and the side outputs:
    a stopped query may have been stopped while such a batch wrote (a stop that could not wait, a second
    Ctrl-C).  The checkpoint re-runs that batch on a restart and writes them again.  The number of files
    removed."""
    done = last_committed(spark, checkpoint)
    jvm, _, fs = _jvm_fs(spark, output)
    Path = jvm.org.apache.hadoop.fs.Path
    removed = 0
    for folder in (output, *side_dirs(output, dead_letters, late)):
        root = Path(folder)
        if not fs.exists(root):
            continue
        for status in fs.listStatus(root):
            name = status.getPath().getName()
            m = _BATCH_FILE.match(name)
            if m and (done is None or int(m.group(1)) > done):
                fs.delete(status.getPath(), True)
                removed += 1
    return removed


#: A file (or staging directory) of one micro-batch in an output, :func:`write_batch`: its batch id.
_BATCH_FILE = re.compile(r"^(?:part-|_staging-)b(\d{8})")


def start(stream, output: str, checkpoint: str, *, result_columns: list[str], dead_letters: str | None = None,
          late: str | None = None, once: bool = False, latency: bool = False):
    """Start the query writing :func:`routed` ``stream``: results to ``output``, side outputs to
    :func:`side_dirs`; ``once`` processes what is there and stops (``availableNow``); ``latency``: each result
    with its :data:`LATENCY_COL` (:func:`batch_writer`)."""
    dead_dir, late_dir = side_dirs(output, dead_letters, late)
    writer = (stream.writeStream.foreachBatch(batch_writer(output, result_columns, dead_dir, late_dir, latency))
              .option("checkpointLocation", checkpoint).outputMode("append"))
    return (writer.trigger(availableNow=True) if once else writer).start()


def timeouts_dir(output: str) -> str:
    """Where ``--timeouts`` writes the timed-out partial matches (``result.timeouts``): ``output/_timeouts``."""
    return output.rstrip("/") + "/_timeouts"


def observed_count(df, name: str):
    """``df`` with a row count observed as it is computed, and a function giving that count after an action
    (None if it is not there within ``timeout`` seconds: a plan that did not compute ``df``)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation(name)
    observed = df.observe(observation, F.count(F.lit(1)).alias("n"))

    def count(timeout: float = 5.0) -> int | None:
        box: list[int] = []

        def get() -> None:
            try:
                box.append(int(observation.get["n"]))
            except Exception:  # noqa: BLE001 - a count is a courtesy
                pass

        t = threading.Thread(target=get, daemon=True)
        t.start()
        t.join(timeout)
        return box[0] if box else None

    return observed, count


def write_timeouts(timeouts, output: str) -> int:
    """Batch: the timed-out partial matches into :func:`timeouts_dir`, JSON lines; their number (counted as the
    write computes them)."""
    timeouts, count = observed_count(timeouts, "sparkcep_timeouts")
    timeouts.write.mode("overwrite").json(timeouts_dir(output))
    return count()


#: The checkpoint of the ``--timeouts`` query, inside the run's checkpoint (:func:`start_timeouts`).
TIMEOUTS_CHECKPOINT = "_timeouts"


def stream_queries(timeouts: bool) -> tuple[str, ...]:
    """The checkpoints inside a match run's checkpoint of the queries it starts: the results' (``""``, the
    checkpoint itself) and, with ``--timeouts``, :data:`TIMEOUTS_CHECKPOINT` (a staged input file stays until each
    has committed it, even one not started yet: :class:`sparkcep.spark.shedding.StagedLinks`)."""
    return ("", TIMEOUTS_CHECKPOINT) if timeouts else ("",)


def start_timeouts(timeouts, output: str, checkpoint: str, *, once: bool = False, latency: bool = False):
    """A stream: the query writing the timed-out partial matches into :func:`timeouts_dir` (checkpoint
    ``checkpoint/_timeouts``), each micro-batch's as its watermark closes windows; ``once``: up to the end of the
    available input.  It runs beside :func:`start`'s query (:func:`sparkcep.spark.progress.follow_with`).
    ``latency``: each row with :data:`LATENCY_COL` (:func:`timeouts_lines`)."""
    writer = (timeouts_lines(timeouts, latency).writeStream.format("json").option("path", timeouts_dir(output))
              .option("checkpointLocation", checkpoint.rstrip("/") + "/" + TIMEOUTS_CHECKPOINT))
    return (writer.trigger(availableNow=True) if once else writer).start()


def timeouts_lines(timeouts, latency: bool = False):
    """The timed-out partial matches as a stream writes them: without their arrival (:data:`RESULT_ARRIVAL`, which
    they carry when the stream's rows do); with ``latency``, :data:`LATENCY_COL`, the milliseconds from it to the
    start of the micro-batch that closed their window (its batch timestamp; a stream's ``json`` sink has no later
    moment to take, unlike the results' :func:`batch_writer`)."""
    from pyspark.sql import functions as F

    if RESULT_ARRIVAL not in timeouts.columns:
        return timeouts
    if latency:
        waited = (F.unix_millis(F.current_timestamp()) - F.col(RESULT_ARRIVAL)).cast("bigint")
        timeouts = timeouts.withColumn(LATENCY_COL, waited)
    return timeouts.drop(RESULT_ARRIVAL)


def timeouts_written(timeouts, output: str) -> int:
    """A stream: the number of timed-out partial matches :func:`start_timeouts` has written."""
    return timeouts.sparkSession.read.schema(timeouts.schema).json(timeouts_dir(output)).count()
