"""Rendered pieces -> Arrow: a task's chunks parsed from the JSON Lines the
index kept for them (fmtfs.keptpieces) instead of decoded from the native
records.

Every index build renders each chunk of each view once (to measure it) and
keeps the bytes, lz4-compressed, under cacheDir.  Where a task can open that
store (local mode, or a cacheDir every executor shares), a chunk's batch is
pyarrow's JSON reader (C++) over those lines with the batch's own schema:
per Beats record 2.1 us instead of 10.7 us to decode and convert it, proio
6.8 instead of 46, wallaby 0.65 instead of 2.3 (measured in one process).

Only for the JSON-typed columns (types=json: Spark's JSON types, which map
one to one onto JSON kinds) and only when it gives what decoding would.
Values the reader refuses (a value of another kind than its column: gvfs
`value`, strings and lists in one column of JSON text) are no reason to
decode: the lines are then parsed one by one (orjson) and converted exactly
as decoded records are (fmtfs.spark.schema.to_batch), still 5-10x cheaper
than decoding them.  A line count other than the index's, lines that do not
parse, a piece missing or torn, and the chunk is decoded as before.  One
difference, towards the view: a NaN or infinite float, which the view (and
spark.read.json of it) shows as null, is null here too.

A derived view (gvfs `metadata.jsonl`, computed from the whole source) is
read the same way from the bytes the index keeps of it (`rendered_view`)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pj

from fmtfs.keptpieces import Kept, KeptPieces
from fmtfs.render import parse_lines
from fmtfs.spark.source import Options

# A task whose chunks pyarrow's reader parses imports neither the
# conversion of records (fmtfs.spark.schema, fmtfs.parquet: pyarrow.compute
# and pyarrow.parquet, 0.06 s per Python worker) nor the view tree: each is
# imported where it is needed.


class RenderedPieces:
    """The store of one task's partition, and where its chunks' pieces are."""

    def __init__(self, store: KeptPieces, pieces: list[Kept | None]) -> None:
        self.store = store
        self.pieces = pieces

    @classmethod
    def open(cls, path: str | None, pieces: list[Kept | None] | None) -> RenderedPieces | None:
        """None when there is nothing to read: no piece planned, or no store
        at `path` on this machine (an executor without the driver's cacheDir)."""
        if not path or not pieces or not any(pieces) or not os.path.exists(path):
            return None
        try:
            return cls(KeptPieces(Path(path), 0), pieces)
        except OSError:
            return None

    def batch(self, i: int, chunk, schema: pa.Schema) -> pa.RecordBatch | None:
        """Chunk `i`'s records cut as the chunk says, as a batch of exactly
        `schema`; None where it must be decoded instead."""
        kept = self.pieces[i]
        data = self.store.get(kept) if kept is not None else None
        if not data:
            return None
        table = parsed(data, schema)
        if table is None or (chunk.total is not None and table.num_rows != chunk.total):
            return None
        return _batch(table.slice(chunk.skip, chunk.take), schema)

    def close(self) -> None:
        self.store.close()


def parsed(data: bytes, schema: pa.Schema) -> pa.Table | None:
    """JSON lines -> a table of exactly `schema` (None: they must be decoded
    instead): pyarrow's JSON reader, or where it refuses a value, the lines
    parsed one by one and converted as decoded records are."""
    try:
        return pj.read_json(
            pa.py_buffer(data),
            read_options=pj.ReadOptions(use_threads=False, block_size=len(data) + 1),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowException, ValueError):
        pass
    from fmtfs.spark.schema import to_batch

    try:
        records = parse_lines(data)
        return pa.Table.from_batches([to_batch(records, schema, None)]) if records else None
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        return None


def _batch(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch | None:
    if not table.num_rows or not table.schema.equals(schema):
        return None
    return table.combine_chunks().to_batches()[0]


def rendered_view(opts: Options, store: str | None, view: str, schema: pa.Schema) -> pa.RecordBatch | None:
    """A derived view's records as one batch of exactly `schema`, parsed from
    the bytes the index keeps of it (the schema step rendered them, if no
    mount did); None where the index is not on this machine (no kept store
    of the source at `store`: an executor without the driver's cacheDir) or
    the view must be computed instead."""
    if not store or not os.path.exists(store):
        return None
    from fmtfs.spark.source import tree_for
    from fmtfs.treefiles import BytesFile

    file = tree_for(opts).files.get(view)
    # its bytes, the compressed pieces (fmtfs.pieces) of a big one joined
    data = file.read(0, file.size()) if isinstance(file, BytesFile) else b""
    table = parsed(data, schema) if data else None
    return _batch(table, schema) if table is not None else None
