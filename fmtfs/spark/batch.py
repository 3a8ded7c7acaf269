"""The batch reader: partitions planned on the driver, records decoded on
executors, time filters pushed down to skip chunks."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from fmtfs.spark.plan import DerivedPartition, is_chunked, partition_records, plan_partitions
from fmtfs.spark.source import Options, open_tree, view_files
from fmtfs.spark.timefilter import TimeTest, time_tests
from fmtfs.spark.trace import step

if TYPE_CHECKING:  # the schema module (pyarrow) is imported by the tasks, not by planning
    from fmtfs.spark.schema import Inferred


def time_columns(tree, views: list[str]) -> set[str]:
    """The time columns of the views' chunks (their streams' `time_field`)."""
    files = [tree.files[v] for v in views]
    return {c.time_field[0] for f in files if is_chunked(f) for c in f.chunks() if c.time_field}


def read_batches(opts: Options, schema: StructType, inferred: Inferred | None, partition: InputPartition):
    """Arrow batches of one partition, of exactly `schema` (executors)."""
    if isinstance(partition, DerivedPartition) and partition.view == "":
        return  # a view with no records at all
    with step("read", chunks=len(getattr(partition, "chunks", ()))) as facts:
        from pyspark.sql.pandas.types import to_arrow_schema

        from fmtfs.spark.schema import to_batch

        expected = to_arrow_schema(schema, timezone="UTC")
        chunks = partition_records(opts, partition)
        decoding = converting = 0.0
        rows = 0
        while True:
            # A chunk's records are thousands of fresh dicts that cannot form a
            # cycle: with the cyclic GC on, a collection after every decode
            # walks them all (py-spy: a tenth of a Spark task).  Paused while
            # they live, and freed before it resumes, they are never scanned.
            gc.disable()
            try:
                began = time.perf_counter()
                records = next(chunks, None)
                if records is None:
                    break
                decoded = time.perf_counter()
                batch = to_batch(records, expected, inferred) if records else None
                rows += len(records)
                del records
                converting += time.perf_counter() - decoded
                decoding += decoded - began
            finally:
                gc.enable()
            if batch is not None:
                yield batch
        facts.update(rows=rows, decode=f"{decoding:.3f}", arrow=f"{converting:.3f}")


class _PushFilters:
    """`reader.pushFilters` as Spark sees it.  Spark refuses to plan a reader
    that implements pushFilters while spark.sql.python.filterPushdown.enabled
    is false (it checks the method's `__func__`), rather than not calling it;
    showing the base method's `__func__` keeps one reader working both ways:
    with the setting on, Spark calls this and chunks are skipped."""

    __func__ = staticmethod(DataSourceReader.pushFilters)  # read as the plain function

    def __init__(self, reader: FmtfsReader) -> None:
        self.reader = reader

    def __call__(self, filters: list) -> Iterable:
        return self.reader.push_time_filters(filters)


class _OptionalPushdown:
    def __get__(self, reader, owner=None):
        return self if reader is None else _PushFilters(reader)


class FmtfsReader(DataSourceReader):
    def __init__(
        self, opts: Options, schema: StructType, inferred: Inferred | None, columns: set[str]
    ) -> None:
        self.opts = opts
        self.schema = schema
        self.inferred = inferred  # set for types=parquet: the typing plan
        self.columns = columns  # the time columns a filter may skip chunks by
        self.tests: list[TimeTest] = []

    def push_time_filters(self, filters: list) -> Iterable:
        """Keep the time comparisons to skip chunks by; return every filter,
        so Spark still filters the rows of the chunks that are read."""
        self.tests = time_tests(filters, self.columns)
        return list(filters)

    pushFilters = _OptionalPushdown()

    def partitions(self) -> list[InputPartition]:
        with step("partitions") as facts:
            tree = open_tree(self.opts)
            views = view_files(tree, self.opts["view"])
            planned = plan_partitions(tree, views, self.opts, self.tests) or [DerivedPartition("")]
            facts["count"] = len(planned)
            return planned

    def read(self, partition: InputPartition):
        return read_batches(self.opts, self.schema, self.inferred, partition)
