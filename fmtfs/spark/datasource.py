"""The DataSource Spark instantiates: schema, batch reader, stream reader.

Spark unpickles this class in each of its Python workers; the readers'
modules are imported by the methods that need them, so a worker only
planning a read loads no pyarrow (fmtfs.spark's docstring)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from fmtfs.spark.source import Options, lower_options, required_view, tree_for, view_files
from fmtfs.spark.trace import step

if TYPE_CHECKING:
    from fmtfs.spark.schema import Inferred


class FmtfsDataSource(DataSource):
    """spark.read.format("fmtfs").option("view", ...).load(SOURCE), and
    spark.readStream the same way."""

    @classmethod
    def name(cls) -> str:
        return "fmtfs"

    def _setup(self):
        opts = lower_options(self.options)
        required_view(opts)
        tree = tree_for(opts)
        return opts, tree, view_files(tree, opts["view"])

    def _typing(self, opts: Options, tree, views: list[str]) -> Inferred | None:
        if opts.get("types", "json") != "parquet":
            return None
        from fmtfs.spark.schema import infer

        return infer(tree, views, opts)

    def schema(self) -> StructType:
        from fmtfs.spark.schema import infer, spark_schema

        with step("schema"):
            opts, tree, views = self._setup()
            types = opts.get("types", "json")
            return spark_schema(infer(tree, views, opts, typed=types == "parquet"), types)

    def reader(self, schema: StructType) -> DataSourceReader:
        from fmtfs.spark.batch import FmtfsReader, time_columns

        with step("reader"):
            opts, tree, views = self._setup()
            return FmtfsReader(opts, schema, self._typing(opts, tree, views), time_columns(tree, views))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from fmtfs.spark.streaming import FmtfsStreamReader

        opts, tree, views = self._setup()
        return FmtfsStreamReader(opts, schema, self._typing(opts, tree, views))
