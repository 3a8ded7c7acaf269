"""A PySpark data source reading native files directly (no mount).

    spark.dataSource.register(FmtfsDataSource)        # or: pip install fmtfs (pyspark_fmtfs)
    df = (spark.read.format("fmtfs")
          .option("format", "wallaby")                 # optional: detected from the files
          .option("view", "events.log/records.jsonl")  # a record view, or a folder of them
          .load("/shared/wal"))
    stream = spark.readStream.format("fmtfs").option("view", "segments").load("/shared/queue")

The driver indexes the source (the same SQLite chunk index a mount uses,
under option `cacheDir`, default ~/.cache/fmtfs) and plans input
partitions from the chunk table; each executor opens the native files
itself and decodes its chunks into Arrow batches, so a cluster reads a
source on shared storage with no FUSE mount anywhere.

Modules: `source` (options -> a format, a view tree kept by each worker
for its next query), `listing` (the views and chunks the schema step saw,
handed to the planning step inside the pickled DataSource, so the first
query opens the tree once), `plan` (partitions from chunks, read on executors),
`schema` (columns, inference from a sample of the kept lines or decoded
chunks, Arrow batches), `timefilter` (pushed time comparisons vs chunk
time ranges), `pieces` (a chunk, or a derived view, parsed from the JSON
lines the index kept of it, instead of decoded), `kept` (decoded chunks'
Arrow batches kept for the next query), `batch` and `streaming` (the two
readers), `datasource` (the DataSource Spark instantiates), `trace`
(timestamps of each step, for profiling: FMTFS_SPARK_TRACE).

Each step of a query runs in a Python worker of its own (the schema, the
planning, every task), and a fresh worker imports what it unpickles: the
modules import what their step needs only (pyarrow is for the schema and
the tasks, not the planning; a task whose chunks all parse from their
kept lines opens no format and loads no conversion of records: a proio
task imports no protobuf, nor pyarrow.compute, nor the view tree and its
index; nor does a planning step handed the schema step's listing), and this package loads its
names on first use, so unpickling `FmtfsDataSource` imports `datasource`
alone.  Spark keeps its Python workers between queries, so these imports
are paid at a session's first query (and after the workers idled out).

Options: format, view (required), every option the format declares under
its camelCase name (fmtfs.formats.options: key_file is keyFile), cacheDir,
types (json|parquet),
inferChunks (chunks sampled for the schema, default 8, or `all`),
partitionBytes (rendered bytes per input partition; default Spark's rule
for files: min(128 MiB, max(4 MiB, bytes / cores))), parallelism (the
cores that rule divides by; default the driver's), chunksPerPartition (a
fixed number of chunks per partition instead), keptBytes (the cap on the
decoded chunks' Arrow batches kept under cacheDir for the next query,
default 2 GiB, 0: none; `kept`)."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "FmtfsDataSource": "fmtfs.spark.datasource",
    "open_tree": "fmtfs.spark.source",
    "view_files": "fmtfs.spark.source",
    "partition_records": "fmtfs.spark.plan",
    "plan_partitions": "fmtfs.spark.plan",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:  # PEP 562: `from fmtfs.spark import X` loads X's module only
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
