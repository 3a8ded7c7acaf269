"""The DataSource Spark instantiates: schema, batch reader, stream reader."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from fmtfs.spark.batch import FmtfsReader, time_columns
from fmtfs.spark.schema import Inferred, infer, spark_schema
from fmtfs.spark.source import Options, lower_options, open_tree, required_view, view_files
from fmtfs.spark.streaming import FmtfsStreamReader


class FmtfsDataSource(DataSource):
    """spark.read.format("fmtfs").option("view", ...).load(SOURCE), and
    spark.readStream the same way."""

    @classmethod
    def name(cls) -> str:
        return "fmtfs"

    def _setup(self):
        opts = lower_options(self.options)
        required_view(opts)
        tree = open_tree(opts)
        return opts, tree, view_files(tree, opts["view"])

    def _typing(self, opts: Options, tree, views: list[str]) -> Inferred | None:
        return infer(tree, views, opts) if opts.get("types", "json") == "parquet" else None

    def schema(self) -> StructType:
        opts, tree, views = self._setup()
        return spark_schema(infer(tree, views, opts), opts.get("types", "json"))

    def reader(self, schema: StructType) -> DataSourceReader:
        opts, tree, views = self._setup()
        return FmtfsReader(opts, schema, self._typing(opts, tree, views), time_columns(tree, views))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts, tree, views = self._setup()
        return FmtfsStreamReader(opts, schema, self._typing(opts, tree, views))
