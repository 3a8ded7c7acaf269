"""Spark's static registration hook for the fmtfs data source.

PySpark looks for top-level modules named `pyspark_*` exposing
`DefaultSource` and registers it under DefaultSource.name(), so with fmtfs
installed `spark.read.format("fmtfs")` works without a register() call."""

from fmtfs.spark import FmtfsDataSource as DefaultSource

__all__ = ["DefaultSource"]
