"""The batch reader: partitions planned on the driver, records decoded on
executors, time filters pushed down to skip chunks."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property, partial
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from fmtfs.spark.listing import Listing
from fmtfs.spark.plan import DerivedPartition, chunk_records, partition_records, plan
from fmtfs.spark.source import Options, current_streams, format_for
from fmtfs.spark.timefilter import TimeTest, time_tests
from fmtfs.spark.trace import step

if TYPE_CHECKING:  # the schema module (pyarrow) is imported by the tasks, not by planning
    from fmtfs.spark.schema import Inferred


@dataclass
class _Tally:
    """What a task did, for its trace line."""

    rows: int = 0
    decode: float = 0.0  # seconds decoding native records
    arrow: float = 0.0  # seconds converting them to Arrow
    kept: int = 0  # chunks whose batch was kept from an earlier read
    pieces: int = 0  # chunks parsed from their kept rendered lines


def read_batches(
    opts: Options, schema: StructType, inferred: Inferred | None, partition: InputPartition, keep: bool = True
):
    """Arrow batches of one partition, of exactly `schema` (executors);
    `keep`: load and keep chunks' batches (fmtfs.spark.kept)."""
    if isinstance(partition, DerivedPartition) and partition.view == "":
        return  # a view with no records at all
    with step("read", chunks=len(getattr(partition, "chunks", ()))) as facts:
        from pyspark.sql.pandas.types import to_arrow_schema

        expected = to_arrow_schema(schema, timezone="UTC")
        tally = _Tally()
        if isinstance(partition, DerivedPartition):  # computed whole: one batch
            batch = _derived_batch(opts, partition, expected, inferred, tally)
            if batch is not None:
                yield batch
        else:
            yield from _chunk_batches(opts, partition, expected, inferred, tally, keep)
        facts.update(
            rows=tally.rows,
            decode=f"{tally.decode:.3f}",
            arrow=f"{tally.arrow:.3f}",
            kept=tally.kept,
            pieces=tally.pieces,
        )


def _derived_batch(
    opts: Options, partition: DerivedPartition, expected, inferred: Inferred | None, tally: _Tally
):
    """A derived view's one batch: parsed from the bytes the index keeps of
    it (JSON-typed columns, the index on this machine), else computed."""
    if inferred is None:
        from fmtfs.spark.pieces import rendered_view

        began = time.perf_counter()
        batch = rendered_view(opts, partition.store, partition.view, expected)
        if batch is not None:
            tally.pieces += 1
            tally.rows += batch.num_rows
            tally.arrow += time.perf_counter() - began
            return batch
    return _converted(partial(next, partition_records(opts, partition), None), expected, inferred, tally)


def _chunk_batches(opts: Options, partition, expected, inferred: Inferred | None, tally: _Tally, keep: bool):
    """Each chunk's batch: parsed from the lines the index kept for it
    (fmtfs.spark.pieces: 3-7x cheaper than decoding, nothing more to keep),
    else a batch kept by an earlier read, else decoded (and kept)."""
    from fmtfs.spark.pieces import RenderedPieces

    decoding = _Decoding(opts, expected, inferred, keep)
    # JSON-typed columns only: typed ones (types=parquet) follow the records' plan
    pieces = RenderedPieces.open(partition.store, partition.pieces) if inferred is None else None
    try:
        for i, chunk in enumerate(partition.chunks):
            batch = _from_piece(pieces, i, chunk, expected, tally) if pieces is not None else None
            if batch is None:  # no piece: a batch kept by an earlier read, else decoded (and kept)
                batch = decoding.batch(chunk, partition.vanish_ok, tally)
            if batch is not None:
                yield batch
    finally:
        if pieces is not None:
            pieces.close()


class _Decoding:
    """What a chunk without kept lines needs: the source's streams and the
    kept batches, opened at the first such chunk, so a task whose chunks
    all parse from their kept lines opens no format (proio's, with its
    protobuf modules: 0.05-0.1 s of imports in every Python worker)."""

    def __init__(self, opts: Options, expected, inferred: Inferred | None, keep: bool) -> None:
        self.opts = opts
        self.expected = expected
        self.inferred = inferred
        self.keep = keep

    @cached_property
    def streams(self) -> dict:
        return current_streams(self.opts)

    @cached_property
    def kept(self):
        from fmtfs.spark.kept import KeptBatches

        return KeptBatches(self.opts, format_for(self.opts), self.expected, self.inferred, self.keep)

    def batch(self, chunk, vanish_ok: bool, tally: _Tally):
        """`chunk`'s batch kept by an earlier read, else decoded (and kept)."""
        stream = self.streams.get(chunk.stream)
        key = self.kept.key(stream, chunk) if stream is not None else None
        batch = self.kept.load(key)
        if batch is not None:
            tally.kept += 1
            tally.rows += batch.num_rows
            return batch
        decode = partial(chunk_records, self.opts, self.streams, chunk, vanish_ok)
        batch = _converted(decode, self.expected, self.inferred, tally)
        if batch is not None:
            self.kept.store(key, batch)
        return batch


def _from_piece(pieces, i: int, chunk, expected, tally: _Tally):
    """Chunk `i`'s batch parsed from its kept rendered lines (None: none)."""
    began = time.perf_counter()
    batch = pieces.batch(i, chunk, expected)
    if batch is not None:
        tally.pieces += 1
        tally.rows += batch.num_rows
        tally.arrow += time.perf_counter() - began
    return batch


def _converted(decode, expected, inferred: Inferred | None, tally: _Tally):
    """decode()'s records as one Arrow batch (None: no records)."""
    from fmtfs.spark.schema import to_batch

    # A chunk's records are thousands of fresh dicts that cannot form a
    # cycle: with the cyclic GC on, a collection after every decode walks
    # them all (py-spy: a tenth of a Spark task).  Paused while they live,
    # and freed before it resumes, they are never scanned.
    gc.disable()
    try:
        began = time.perf_counter()
        records = decode()
        decoded = time.perf_counter()
        batch = to_batch(records, expected, inferred) if records else None
        tally.rows += len(records) if records else 0
        del records
        tally.arrow += time.perf_counter() - decoded
        tally.decode += decoded - began
    finally:
        gc.enable()
    return batch


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
        self, opts: Options, schema: StructType, inferred: Inferred | None, listing: Listing
    ) -> None:
        self.opts = opts
        self.schema = schema
        self.inferred = inferred  # set for types=parquet: the typing plan
        self.listing = listing  # what the partitions are planned from (the driver's alone)
        self.columns = listing.time_columns()  # the time columns a filter may skip chunks by
        self.tests: list[TimeTest] = []

    def __getstate__(self) -> dict:
        # Spark pickles the reader into every task's command: the listing
        # (every chunk of the read) is the planning's, the partitions carry
        # each task's chunks
        return {k: v for k, v in vars(self).items() if k != "listing"}

    def push_time_filters(self, filters: list) -> Iterable:
        """Keep the time comparisons to skip chunks by; return every filter,
        so Spark still filters the rows of the chunks that are read."""
        self.tests = time_tests(filters, self.columns)
        return list(filters)

    pushFilters = _OptionalPushdown()

    def partitions(self) -> list[InputPartition]:
        with step("partitions") as facts:
            from fmtfs.spark.kept import trim

            trim(self.opts)  # the kept batches within their limit before tasks add more
            planned = plan(self.listing, self.opts, self.tests) or [DerivedPartition("")]
            facts["count"] = len(planned)
            return planned

    def read(self, partition: InputPartition):
        return read_batches(self.opts, self.schema, self.inferred, partition)
