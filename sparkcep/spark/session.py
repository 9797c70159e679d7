"""One local SparkSession with settings that suit stateful CEP jobs on a laptop.

The default 200 shuffle partitions make a stateful job ~10x slower on a 2-core machine (DESIGN.md, measured);
the partition count is frozen into a streaming checkpoint at first run, so it is set before anything runs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DEFAULT_SHUFFLE_PARTITIONS = 4

#: log4j 2 for a quiet driver start (a file of the package: spark-submit can be given it too, see README.md): warnings
#: and errors on stderr, one line each (a stack trace follows), without the start-up banner; :func:`local_session`
#: lowers it to errors once the session is up.  At WARN, the level Spark gives an interactive (Python) driver, Spark
#: prints no "Setting default log level" note.
QUIET_LOG4J2 = Path(__file__).with_name("log4j2-quiet.properties")


#: Settings :func:`local_session` gives its session where the session has none (a value given at start-up, by
#: ``--conf``, spark-defaults.conf or ``PYSPARK_SUBMIT_ARGS``, wins): ``spark.sql.execution.arrow.maxBytesPerBatch``
#: at ``2^31 - 1``, Spark's "no byte limit".  Under any other value (64 MiB by default in Spark 4) Spark measures
#: the Arrow batch it is building for a Python worker after every row it adds (``ArrowWriter.sizeInBytes``: each
#: vector's value count set, its buffers summed), which on a ``mapInArrow`` pass's input costs more JVM CPU than
#: writing the rows (the V-shape of ``bench/match_recognize.py``: ~1/3 of its sort-and-worker stage's CPU,
#: ``bench/recognize_split.py --sides streamed,unbounded --stages``).  A batch stays bounded by
#: ``spark.sql.execution.arrow.maxRecordsPerBatch`` (10,000 rows by default), as before Spark 4.
SESSION_DEFAULTS = {"spark.sql.execution.arrow.maxBytesPerBatch": str(2 ** 31 - 1)}


def with_defaults(spark):
    """``spark`` with :data:`SESSION_DEFAULTS` set where its session has no value of its own."""
    for key, value in SESSION_DEFAULTS.items():
        if spark.conf.get(key, None) is None:
            spark.conf.set(key, value)
    return spark


def quiet_java_options() -> str:
    """The driver JVM option that makes it read :data:`QUIET_LOG4J2`."""
    return f"-Dlog4j2.configurationFile=file:{QUIET_LOG4J2}" if QUIET_LOG4J2.is_file() else ""


def local_session(master: str = "local[*]", shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS,
                  app_name: str = "sparkcep", verbose: bool = False):
    """The process's SparkSession: the active one if there is one (left as it is), else a new local one, with
    :data:`SESSION_DEFAULTS` where it has no value of its own.

    Its driver logs errors only (:data:`QUIET_LOG4J2`: no start-up banner), unless ``verbose`` (Spark's default
    log4j profile, INFO from then on)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local session stays on loopback
    # PySpark's own pandas glue (not sparkcep code) warns about a pandas deprecation on every batch.
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder
    java_options = "" if verbose else quiet_java_options()
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    spark = (
        builder.master(master)
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", shuffle_partitions)
        .config("spark.default.parallelism", shuffle_partitions)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("INFO" if verbose else "ERROR")
    return with_defaults(spark)
