"""Input partitions from the chunk index, and reading them on executors.

A partition is a list of pieces; a piece is one chunk of one stream (its
native start, end and decoder state, all an executor needs to decode it)
and the view whose records it contributes, maybe cut by a record offset
(`skip`, `take`: slices of a view, streaming offsets).

Partitions are packed like Spark's file splits: consecutive pieces until
about `target` rendered bytes (Spark's maxPartitionBytes rule: at most 128
MiB, at least 4 MiB, else the bytes spread over the cores), so the per-task
cost is paid per tens of megabytes, not per chunk.  Time filters drop the
chunks whose time range cannot match before packing."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from fmtfs.spark.source import Options, current_streams, format_for
from fmtfs.spark.timefilter import TimeTest, chunk_may_match

log = logging.getLogger("fmtfs.spark")

MAX_PARTITION_BYTES = 128 << 20  # spark.sql.files.maxPartitionBytes
MIN_PARTITION_BYTES = 4 << 20  # spark.sql.files.openCostInBytes


@dataclass(frozen=True)
class Piece:
    view: str
    stream: str
    start: int
    end: int
    state: dict
    skip: int = 0  # records of `view` in this chunk left out at its start
    take: int | None = None  # then at most this many records (None: all)
    size: int = 0  # rendered bytes (for packing)


class ChunkPartition(InputPartition):
    """Pieces decoded one chunk at a time, each into one Arrow batch.
    `vanish_ok`: a stream gone by the time an executor reads it (Beats
    deletes acknowledged segments) yields nothing instead of failing."""

    def __init__(self, pieces: list[Piece], vanish_ok: bool = False) -> None:
        self.pieces = pieces
        self.vanish_ok = vanish_ok


class DerivedPartition(InputPartition):
    """A derived view (computed from the whole source), read whole."""

    def __init__(self, view: str) -> None:
        self.view = view


def primary_view(entry) -> str | None:
    """The view whose record count the index keeps per chunk."""
    paths = entry.stream.view_paths()
    return paths[0] if paths else None


def view_pieces(entry, view: str, skip: int = 0, tests: list[TimeTest] | None = None) -> list[list[Piece]]:
    """The pieces of `view` fed by `entry`, from its `skip`-th record on, as
    units that must stay together (a skip into a view the index does not
    count keeps all its pieces in one unit, which drops the records)."""
    pieces = entry.views.get(view)
    if pieces is None:
        return []
    time_field = getattr(entry.stream, "time_field", None)
    name = entry.stream.name
    counted = primary_view(entry) == view
    units: list[list[Piece]] = []
    for i, seq in enumerate(pieces.seqs):
        meta = entry.chunks[seq]
        size = pieces.ends[i] - (pieces.ends[i - 1] if i else 0)
        here = 0
        if skip and counted:
            if meta.count <= skip:
                skip -= meta.count
                continue
            here, skip = skip, 0
        if tests and not (skip and not counted) and not chunk_may_match(tests, time_field, meta.times):
            continue
        units.append([Piece(view, name, meta.start, meta.end, meta.state, here, None, size)])
    if skip and not counted and units:
        first = units[0][0]
        units = [
            [Piece(first.view, name, first.start, first.end, first.state, skip, None, first.size)]
            + [u[0] for u in units[1:]]
        ]
    return units


def target_bytes(total: int, opts: Options) -> int:
    """Bytes per partition: option partitionBytes, else Spark's split rule."""
    if opts.get("partitionbytes"):
        return max(1, int(opts["partitionbytes"]))
    cores = int(opts.get("parallelism") or os.cpu_count() or 1)
    return min(MAX_PARTITION_BYTES, max(MIN_PARTITION_BYTES, -(-total // max(1, cores))))


def pack(units: list[list[Piece]], opts: Options, vanish_ok: bool = False) -> list[ChunkPartition]:
    """Consecutive units into partitions of about target_bytes (or
    `chunksPerPartition` chunks each, when that option is given)."""
    per_chunks = int(opts["chunksperpartition"]) if opts.get("chunksperpartition") else 0
    target = target_bytes(sum(p.size for u in units for p in u), opts)
    out: list[ChunkPartition] = []
    current: list[Piece] = []
    size = 0
    for unit in units:
        current += unit
        size += sum(p.size for p in unit)
        if (per_chunks and len(current) >= per_chunks) or (not per_chunks and size >= target):
            out.append(ChunkPartition(current, vanish_ok))
            current, size = [], 0
    if current:
        out.append(ChunkPartition(current, vanish_ok))
    return out


def plan_partitions(tree, views: list[str], opts: Options, tests: list[TimeTest] | None = None):
    """The input partitions of a batch read of `views`."""
    from fmtfs.views import IndexedFile, SlicedFile

    units: list[list[Piece]] = []
    derived: list[InputPartition] = []
    for view in views:
        file = tree.files[view]
        if isinstance(file, IndexedFile):
            units += view_pieces(file.entry, file.view, 0, tests)
        elif isinstance(file, SlicedFile):  # beats pending, time buckets across streams
            for part, skip in file.parts:
                units += view_pieces(part.entry, part.view, skip, tests)
        else:
            derived.append(DerivedPartition(view))
    return pack(units, opts) + derived


def partition_records(opts: Options, partition: InputPartition) -> Iterator[list[dict]]:
    """The record batches of one partition: one per chunk."""
    from fmtfs.formats.base import Chunk

    if isinstance(partition, DerivedPartition):
        produced = format_for(opts).derived_views()[partition.view]()
        if isinstance(produced, bytes):
            from fmtfs.render import parse_lines

            produced = parse_lines(produced)
        yield produced
        return
    streams = current_streams(opts)
    carry = 0  # records still to skip (a skip beyond its chunk)
    for piece in partition.pieces:
        stream = streams.get(piece.stream)
        try:
            if stream is None:
                raise FileNotFoundError(piece.stream)
            records = stream.decode(Chunk(piece.start, piece.end, piece.state, {})).get(piece.view, [])
        except FileNotFoundError:
            if partition.vanish_ok:
                log.warning("fmtfs: stream %s vanished before it was read", piece.stream)
                continue
            raise FileNotFoundError(
                f"fmtfs: stream {piece.stream} disappeared from {format_for(opts).source}"
            ) from None
        skip = piece.skip + carry
        carry = max(0, skip - len(records))
        records = records[skip:]
        if piece.take is not None:
            records = records[: piece.take]
        yield records
