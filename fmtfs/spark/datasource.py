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

    def _options(self) -> Options:
        opts = lower_options(self.options)
        required_view(opts)
        return opts

    def _setup(self):
        opts = self._options()
        tree = tree_for(opts)
        return opts, tree, view_files(tree, opts["view"])

    def _typing(self, opts: Options, tree, views: list[str]) -> Inferred | None:
        if opts.get("types", "json") != "parquet":
            return None
        from fmtfs.spark.schema import infer

        return infer(tree, views, opts)

    def schema(self) -> StructType:
        from fmtfs.spark.listing import Listing
        from fmtfs.spark.schema import infer, spark_schema

        with step("schema"):
            opts, tree, views = self._setup()
            types = opts.get("types", "json")
            inferred = infer(tree, views, opts, typed=types == "parquet")
            # Spark pickles this object on to the planning step: what it
            # plans from, so it need not open the tree again (fmtfs.spark.listing)
            self._seen = (Listing.of(tree, views), inferred if types == "parquet" else None)
            return spark_schema(inferred, types)

    def _seen_current(self) -> tuple | None:
        """The schema step's listing and typing if the source has not
        changed since (else None); taken off this object, which Spark then
        pickles into every task's command."""
        seen = self.__dict__.pop("_seen", None)
        return seen if seen is not None and seen[0].current() else None

    def reader(self, schema: StructType) -> DataSourceReader:
        from fmtfs.spark.batch import FmtfsReader
        from fmtfs.spark.listing import Listing

        with step("reader") as facts:
            seen = self._seen_current()
            facts["listing"] = "schema-step" if seen is not None else "tree"
            if seen is None:
                opts, tree, views = self._setup()
                seen = Listing.of(tree, views), self._typing(opts, tree, views)
            else:
                opts = self._options()
            return FmtfsReader(opts, schema, seen[1], seen[0])

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from fmtfs.spark.streaming import FmtfsStreamReader

        self.__dict__.pop("_seen", None)  # micro-batches plan from the tree
        opts, tree, views = self._setup()
        return FmtfsStreamReader(opts, schema, self._typing(opts, tree, views))
