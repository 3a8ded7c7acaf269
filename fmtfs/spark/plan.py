"""Input partitions from the chunk index, and reading them on executors.

A partition is a list of view chunks (fmtfs.viewchunk.ViewChunk, the view
layer's public chunk API): one chunk of one stream, with its native start,
end and decoder state (all an executor needs to decode it), its time range
and the records it contributes to the view (maybe cut by record offsets:
a view that starts mid-chunk, streaming offsets).

Partitions are packed like Spark's file splits: consecutive chunks until
about `target` rendered bytes (Spark's maxPartitionBytes rule: at most 128
MiB, at least 4 MiB, else the bytes spread over the cores), so the per-task
cost is paid per tens of megabytes, not per chunk.  Time filters drop the
chunks whose time range cannot match before packing."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import InputPartition

from fmtfs.spark.listing import Listing
from fmtfs.spark.source import Options, current_streams, format_for
from fmtfs.spark.timefilter import TimeTest, chunk_may_match

log = logging.getLogger("fmtfs.spark")

MAX_PARTITION_BYTES = 128 << 20  # spark.sql.files.maxPartitionBytes
MIN_PARTITION_BYTES = 4 << 20  # spark.sql.files.openCostInBytes


class ChunkPartition(InputPartition):
    """View chunks (fmtfs.viewchunk.ViewChunk) decoded one at a time, each into
    one Arrow batch.  `vanish_ok`: a stream gone by the time an executor
    reads it (Beats deletes acknowledged segments) yields nothing instead
    of failing."""

    def __init__(self, chunks: list, vanish_ok: bool = False) -> None:
        self.chunks = chunks
        self.vanish_ok = vanish_ok
        # where the index kept each chunk's rendered lines (fmtfs.spark.pieces):
        # the store file's path and one Kept (or None) per chunk
        self.store: str | None = None
        self.pieces: list | None = None


class DerivedPartition(InputPartition):
    """A derived view (computed from the whole source), read whole; `store`:
    the source's kept pieces where the driver indexed it (a task that sees
    it reads the view's bytes the index keeps: fmtfs.spark.pieces)."""

    def __init__(self, view: str, store: str | None = None) -> None:
        self.view = view
        self.store = store


def target_bytes(total: int, opts: Options) -> int:
    """Bytes per partition: option partitionBytes, else Spark's split rule."""
    if opts.get("partitionbytes"):
        return max(1, int(opts["partitionbytes"]))
    cores = int(opts.get("parallelism") or os.cpu_count() or 1)
    return min(MAX_PARTITION_BYTES, max(MIN_PARTITION_BYTES, -(-total // max(1, cores))))


def pack(chunks: list, opts: Options, vanish_ok: bool = False) -> list[ChunkPartition]:
    """Consecutive chunks into partitions of about target_bytes (or
    `chunksPerPartition` chunks each, when that option is given)."""
    per_chunks = int(opts["chunksperpartition"]) if opts.get("chunksperpartition") else 0
    target = target_bytes(sum(c.size for c in chunks), opts)
    out: list[ChunkPartition] = []
    current: list = []
    size = 0
    for chunk in chunks:
        current.append(chunk)
        size += chunk.size
        if (per_chunks and len(current) >= per_chunks) or (not per_chunks and size >= target):
            out.append(ChunkPartition(current, vanish_ok))
            current, size = [], 0
    if current:
        out.append(ChunkPartition(current, vanish_ok))
    return out


def plan_partitions(tree, views: list[str], opts: Options, tests: list[TimeTest] | None = None):
    """The input partitions of a batch read of `views` in `tree` (plan)."""
    return plan(Listing.of(tree, views), opts, tests)


def plan(listing: Listing, opts: Options, tests: list[TimeTest] | None = None) -> list[InputPartition]:
    """The input partitions of a batch read of the listed views: the chunks
    of the chunked views (those a time filter cannot rule out) packed, each
    partition with where the index kept its chunks' lines, and one
    partition per derived view."""
    chunks: list = []
    pieces: list = []  # each chunk's kept piece, in order
    derived: list[InputPartition] = []
    for view in listing.views:
        if view not in listing.chunked:
            derived.append(DerivedPartition(view, listing.store))
            continue
        for chunk, kept in listing.chunked[view]:
            if not tests or chunk_may_match(tests, chunk.time_field, chunk.times):
                chunks.append(chunk)
                pieces.append(kept)
    packed = pack(chunks, opts)
    done = 0
    for partition in packed if listing.store is not None else ():
        partition.store = listing.store
        partition.pieces = pieces[done : done + len(partition.chunks)]
        done += len(partition.chunks)
    return packed + derived


def partition_records(opts: Options, partition: InputPartition) -> Iterator[list[dict]]:
    """The record batches of one partition: one per chunk."""
    if isinstance(partition, DerivedPartition):
        produced = format_for(opts).derived_views()[partition.view]()
        if isinstance(produced, bytes):
            from fmtfs.render import parse_lines

            produced = parse_lines(produced)
        yield produced
        return
    streams = current_streams(opts)
    for chunk in partition.chunks:
        records = chunk_records(opts, streams, chunk, partition.vanish_ok)
        if records is not None:
            yield records


def chunk_records(opts: Options, streams: dict[str, Any], chunk, vanish_ok: bool) -> list[dict] | None:
    """One chunk's records of its view, decoded from the stream it names
    (None: the stream vanished and the partition allows it)."""
    stream = streams.get(chunk.stream)
    try:
        if stream is None:
            raise FileNotFoundError(chunk.stream)
        return chunk.records(stream)
    except FileNotFoundError:
        if vanish_ok:
            log.warning("fmtfs: stream %s vanished before it was read", chunk.stream)
            return None
        raise FileNotFoundError(
            f"fmtfs: stream {chunk.stream} disappeared from {format_for(opts).source}"
        ) from None
