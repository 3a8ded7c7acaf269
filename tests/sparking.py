"""One SparkSession per test module, local or on a local cluster, and the
streaming run the streaming tests share."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[1]


def start_session(master: str, app: str, **conf: str) -> SparkSession:
    # Spark's Python workers start `python3` from PATH unless told; they find
    # fmtfs and pyspark_fmtfs (static registration) through PYTHONPATH
    os.environ["PYSPARK_PYTHON"] = sys.executable
    path = os.environ.get("PYTHONPATH", "")
    if str(REPO) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = f"{REPO}{os.pathsep}{path}" if path else str(REPO)
    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def fmtfs_session(master: str, app: str, **conf: str) -> SparkSession:
    """start_session with fmtfs's data source registered as "fmtfs"."""
    from fmtfs.spark import FmtfsDataSource

    session = start_session(master, app, **conf)
    session.dataSource.register(FmtfsDataSource)
    return session


def stream_available_now(
    spark: SparkSession, source: Path, view: str, cache: Path, sink: Path, checkpoint: Path
) -> None:
    """Run a streaming query of `view` until it has delivered everything the
    source holds now, into a JSON sink, from (and into) `checkpoint`."""
    query = (
        spark.readStream.format("fmtfs")
        .option("view", view)
        .option("cacheDir", str(cache))
        .load(str(source))
        .writeStream.format("json")
        .option("path", str(sink))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
