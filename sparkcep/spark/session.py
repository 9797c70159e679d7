"""One local SparkSession with settings that suit stateful CEP jobs on a laptop.

The default 200 shuffle partitions make a stateful job ~10x slower on a 2-core machine (DESIGN.md, measured);
the partition count is frozen into a streaming checkpoint at first run, so it is set before anything runs.
"""

from __future__ import annotations

import os
import sys

DEFAULT_SHUFFLE_PARTITIONS = 4


def local_session(master: str = "local[*]", shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS,
                  app_name: str = "sparkcep"):
    """The process's SparkSession: the active one if there is one (left as it is), else a new local one."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local session stays on loopback
    # PySpark's own pandas glue (not sparkcep code) warns about a pandas deprecation on every batch.
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    spark = (
        SparkSession.builder.master(master)
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
    spark.sparkContext.setLogLevel("ERROR")
    return spark
