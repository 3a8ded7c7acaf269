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

Modules: `source` (options -> a format, a view tree), `plan` (partitions
from chunks, read on executors), `schema` (columns, sampled inference,
Arrow batches), `timefilter` (pushed time comparisons vs chunk time
ranges), `batch` and `streaming` (the two readers), `datasource` (the
DataSource Spark instantiates).

Options: format, view (required), every option the format declares under
its camelCase name (fmtfs.formats.options: key_file is keyFile), cacheDir,
types (json|parquet),
inferChunks (chunks sampled for the schema, default 8, or `all`),
partitionBytes (rendered bytes per input partition; default Spark's rule
for files: min(128 MiB, max(4 MiB, bytes / cores))), parallelism (the
cores that rule divides by; default the driver's), chunksPerPartition (a
fixed number of chunks per partition instead)."""

from fmtfs.spark.datasource import FmtfsDataSource
from fmtfs.spark.plan import partition_records, plan_partitions
from fmtfs.spark.source import open_tree, view_files

__all__ = ["FmtfsDataSource", "open_tree", "partition_records", "plan_partitions", "view_files"]
