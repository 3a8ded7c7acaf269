"""Writing one version of a Parquet twin (fmtfs.twins says which file and
when): the previous version's bytes first where a reader may still hold
its size, then either only the rows the view gained (a stream that grew by
appending, its schema unchanged) or every row.

The facts a later growth by appending needs (the Shape the schema was
learnt from, and what the twin was built from: the view's JSON length, its
native file) travel in the twin's key-value metadata.  Kept apart from
fmtfs.twins so that only a process that builds twins loads pyarrow."""

from __future__ import annotations

import base64
import bisect
import dataclasses
import math
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from fmtfs import __version__, parquet
from fmtfs.entries import ViewPieces
from fmtfs.formats.base import Record
from fmtfs.parquet_splice import splice
from fmtfs.viewfile import ViewFile

if TYPE_CHECKING:
    from fmtfs.formats.schema import ViewSchema

# A twin grown by many small appends (a live queue) has many small row
# groups; past this many times the groups a whole build would make (plus a
# few), it is rebuilt whole instead.
MAX_GROUPS_FACTOR = 2
TARGET_EXTRA_GROUPS = 16

# A whole rebuild kept after the old file's bytes makes them dead weight.
# It is Deferred (fmtfs.twins) when the old file holds more than this many
# times its live bytes (its own row groups and footer) plus DEAD_SLACK:
# the file a rebuild writes is then at most (1 + DEAD_FACTOR) x live + slack.
DEAD_FACTOR = 2
DEAD_SLACK = 16 << 20

# Key-value metadata of a twin: what its growth by appending needs.
SHAPE_KEY = "fmtfs.shape"
BUILT_FROM_KEY = "fmtfs.built_from"


# The records of a view as Arrow struct arrays, decoded once for a whole
# build round (fmtfs.twinchunks.ChunkArrays.arrays).
SharedArrays = Callable[[ViewFile], Iterable[pa.StructArray]]


def write_version(
    source: ViewFile,
    target: Path,
    base: Path | None,
    schema: ViewSchema | None,
    *,
    base_may_be_held: bool,
    shared: SharedArrays | None = None,
) -> bool:
    """The twin of `source`'s state at `target`: the bytes of `base` (the
    previous version) first where a reader may hold its size
    (`base_may_be_held`: a stat reported it lately), then only the new rows
    where the view grew by appending, else every row.  False, writing
    nothing, when a whole rebuild would keep more dead weight than the
    bound (the caller defers it: fmtfs.twins.Deferred)."""
    built_from = {"bytes": source.size(), "native": _native_of(source), "fmtfs": __version__}
    scratch = f"{target.name}.{os.getpid()}"
    part, out = target.with_name(scratch + ".part.tmp"), target.with_name(scratch + ".out.tmp")
    try:
        appended = base is not None and _append(source, base, built_from, part, schema)
        if appended:
            shape, keep_rows = appended, True
        else:
            shape, keep_rows = parquet.Shape(schema), False
            if not base_may_be_held:
                base = None  # nobody can hold the size of a version any more: no dead weight
            if base is not None and _too_dead(base):
                return False
            batches = shared(source) if shared is not None else source.records()
            parquet.write_twin(batches, schema, part, shape=shape)
        meta = {SHAPE_KEY: _shape_text(shape), BUILT_FROM_KEY: orjson.dumps(built_from).decode()}
        splice(base, part, out, keep_rows, meta)
        os.replace(out, target)
        return True
    finally:
        part.unlink(missing_ok=True)
        out.unlink(missing_ok=True)


def _too_dead(base: Path) -> bool:
    """Whether `base` as the prefix of a new version would make its dead
    weight (all of `base`) pass the bound, measured by base's own."""
    size = base.stat().st_size
    try:
        footer = pq.read_metadata(base)
    except (OSError, pa.ArrowInvalid):
        return False
    starts = [_group_start(footer.row_group(i)) for i in range(footer.num_row_groups)]
    live = size - (min(starts) - len(b"PAR1") if starts else 0)
    return size > DEAD_FACTOR * live + DEAD_SLACK


def _group_start(group: pq.RowGroupMetaData) -> int:
    """Where a row group's bytes start (its first column chunk's first page)."""
    column = group.column(0)
    offsets = [column.data_page_offset]
    if column.has_dictionary_page:
        offsets.append(column.dictionary_page_offset)
    return min(offsets)


def _append(
    source: ViewFile,
    base: Path,
    built_from: dict[str, Any],
    part: Path,
    schema: ViewSchema | None,
) -> parquet.Shape | None:
    """Write only the rows the view gained since `base` was built into
    `part`, typed as the whole view; their Shape, or None when the view
    did not grow by appending or its schema changes."""
    try:
        footer = pq.read_metadata(base)
        meta = footer.metadata or {}
        before = orjson.loads(meta[BUILT_FROM_KEY.encode()])
        shape = _shape_of(meta[SHAPE_KEY.encode()], schema)
    except (OSError, KeyError, ValueError, pa.ArrowInvalid):
        return None  # an older twin without the facts: rebuilt whole
    if not _grew_by_appending(before, built_from):
        return None
    wanted = math.ceil(shape.rows / parquet.group_rows(shape.rows, shape.nbytes))
    if footer.num_row_groups > MAX_GROUPS_FACTOR * wanted + TARGET_EXTRA_GROUPS:
        return None  # many small appends: rewritten whole into full-sized row groups
    batches = _records_past(source, before["bytes"])
    if batches is None:
        return None
    try:
        parquet.write_twin(batches, schema, part, shape=shape, expect=pq.read_schema(base))
    except parquet.SchemaChanged:
        return None
    return shape


# -- growth by appending -------------------------------------------------------


def _native_of(view: Any) -> list[Any] | None:
    """The native file a stream view is decoded from (path, inode, size), or
    None for views made of several streams or computed from the source."""
    entry = getattr(view, "entry", None)  # an IndexedFile (fmtfs.views)
    if entry is None:
        return None
    return [entry.identity.path, entry.identity.inode, entry.identity.size]


def _grew_by_appending(before: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether the view's records when `before` was built are the first
    records of the view now: the same native file, grown (the chunk index
    keeps the chunks of a grown file: fmtfs.index), the same fmtfs."""
    old, new = before.get("native"), now["native"]
    return (
        old is not None
        and new is not None
        and old[:2] == new[:2]
        and old[2] <= new[2]
        and before["bytes"] <= now["bytes"]
        and before.get("fmtfs") == now["fmtfs"]
    )


def _records_past(view: Any, done: int) -> Iterable[list[Record]] | None:
    """The record batches of a stream view past its first `done` bytes of
    JSON, decoding only the chunks from the one holding byte `done`; None
    if `done` is not the end of a line there."""
    pieces: ViewPieces = view.entry.views.get(view.view, ViewPieces())
    first = bisect.bisect_right(pieces.ends, done)  # the first piece ending past `done`
    if first == len(pieces.seqs):
        return []
    start = pieces.ends[first - 1] if first else 0
    skip = 0
    if done > start:
        rendered = view.reader.piece(view.entry, view.view, pieces.seqs[first])
        if rendered[done - start - 1 : done - start] != b"\n":
            return None
        skip = rendered[: done - start].count(b"\n")
    rest = ViewPieces(pieces.seqs[first:], pieces.ends[first:])
    entry = dataclasses.replace(view.entry, views={view.view: rest})
    batches = iter(view.reader.records(entry, view.view))
    return _skipping(batches, skip)


def _skipping(batches: Iterator[list[Record]], skip: int) -> Iterator[list[Record]]:
    for n, batch in enumerate(batches):
        yield batch[skip:] if n == 0 else batch


def _shape_text(shape: parquet.Shape) -> str:
    """A Shape as text for a twin's key-value metadata (its declaration is
    the format's: not stored)."""
    schema = pa.schema(list(shape.type)).serialize().to_pybytes()
    return orjson.dumps(
        {
            "type": base64.b64encode(schema).decode(),
            "not_times": [list(path) for path in shape.not_times],
            "rows": shape.rows,
            "nbytes": shape.nbytes,
        }
    ).decode()


def _shape_of(text: bytes, declared: ViewSchema | None) -> parquet.Shape:
    document = orjson.loads(text)
    shape = parquet.Shape(declared)
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(document["type"])))
    shape.type = pa.struct(list(schema))
    shape.not_times = {tuple(path) for path in document["not_times"]}
    shape.rows, shape.nbytes = document["rows"], document["nbytes"]
    return shape
