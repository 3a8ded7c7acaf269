"""A view's records as Arrow struct arrays, chunk by chunk, for its Parquet
twin: each chunk is decoded once per build round, whatever the number of
twins that need it.

A Beats chunk feeds its segment view, an hour bucket and `pending.jsonl`;
a wallaby chunk its log view and hour buckets.  Built one twin after the
other from `view.records()`, every chunk was decoded once per twin (six
times for a Beats queue's twins: 75 % of `fmtfs index`, cProfile), and a
cache of decoded chunks big enough to help would hold thousands of Python
dicts per chunk.  Instead a build round (`fmtfs index`, one run of the
mount's builder child) opens a ChunkArrays: the first twin that needs a
chunk decodes it, converts every view of it that a twin of the round
still needs to Arrow (C++ memory, a fraction of the dicts') and appends
them to an unlinked scratch file; later twins read the arrays back.
Views of a chunk holding the very same records (a bucket covering the
whole chunk) share one conversion.  Nothing is kept that no other twin of
the round reads, and the scratch file ends with the round."""

from __future__ import annotations

import tempfile
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from fmtfs.formats.base import Chunk, Record
from fmtfs.index import StreamEntry
from fmtfs.parquet import records_to_array
from fmtfs.viewfile import ViewFile
from fmtfs.views import IndexedFile, SlicedFile

# (stream, view) pairs a round's twins draw records from
Source = tuple[str, str]


def sources_of(view: ViewFile) -> list[Source]:
    """The (stream, view) pairs `view`'s records come from (none for a view
    computed from the whole source)."""
    if isinstance(view, IndexedFile):
        return [(view.entry.stream.name, view.view)]
    if isinstance(view, SlicedFile):
        return [(part.entry.stream.name, part.view) for part, _ in view.parts]
    return []


class ChunkArrays:
    """The Arrow arrays of chunks decoded for one build round (see the
    module docstring), in an unlinked scratch file under `folder`."""

    def __init__(self, folder: Path, views: Iterable[ViewFile]) -> None:
        # how many twins of the round read each (stream, view): one reader
        # consumes its arrays as they are made, more read them back
        self.readers: Counter[Source] = Counter(s for view in views for s in set(sources_of(view)))
        self.file = tempfile.TemporaryFile(dir=folder, prefix="chunks-", suffix=".arrow")
        self.saved: dict[tuple, dict[str, tuple[int, int]]] = {}  # chunk key -> view -> (offset, size)
        self.lock = threading.Lock()

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> ChunkArrays:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def array(self, entry: StreamEntry, seq: int, view: str) -> pa.StructArray | None:
        """The records of `view` in chunk `seq` of `entry` (None: none)."""
        meta = entry.chunks[seq]
        key = (entry.stream.name, entry.identity, seq, meta.start, meta.end)
        with self.lock:
            saved = self.saved.get(key)
            where = saved.get(view) if saved is not None else None
            if where is not None:
                return self._load(*where)
        decoded = entry.stream.decode(Chunk(meta.start, meta.end, meta.state, {}))
        arrays = _convert(decoded, view, lambda other: self._kept((entry.stream.name, other), other == view))
        with self.lock:
            found = self.saved.setdefault(key, {})
            for other, arr in arrays.items():
                if other not in found and self._kept((entry.stream.name, other), other == view):
                    found[other] = self._save(arr)
        return arrays.get(view)

    def arrays(self, view: ViewFile) -> Iterator[pa.StructArray]:
        """The records of `view`, in order, as Arrow struct arrays."""
        return view_arrays(view, self)

    def records(self, entry: StreamEntry, seq: int, view: str) -> list[Record]:
        """The records of `view` in chunk `seq` of `entry`, decoded again."""
        meta = entry.chunks[seq]
        return entry.stream.decode(Chunk(meta.start, meta.end, meta.state, {})).get(view, [])

    def _kept(self, source: Source, consumed: bool) -> bool:
        """Whether another read of `source` will come this round."""
        return self.readers[source] > (1 if consumed else 0)

    def _save(self, arr: pa.StructArray) -> tuple[int, int]:
        batch = pa.RecordBatch.from_struct_array(arr)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        data = sink.getvalue()
        offset = self.file.seek(0, 2)
        self.file.write(data)
        return offset, data.size

    def _load(self, offset: int, size: int) -> pa.StructArray:
        self.file.seek(offset)
        data = self.file.read(size)
        return pa.ipc.open_stream(data).read_next_batch().to_struct_array()


def _convert(decoded: dict[str, list[Record]], view: str, wanted: Any) -> dict[str, pa.StructArray]:
    """The views of a decoded chunk that are `view` or `wanted`, as Arrow;
    a view holding the same record objects as one converted already shares
    its array (same records, same inferred type)."""
    out: dict[str, pa.StructArray] = {}
    done: list[tuple[list[Record], pa.StructArray]] = []
    for name, records in decoded.items():
        if not records or (name != view and not wanted(name)):
            continue
        arr = next((a for r, a in done if _same(r, records)), None)
        if arr is None:
            arr = records_to_array(records)
            done.append((records, arr))
        out[name] = arr
    return out


def _same(a: list[Record], b: list[Record]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def view_arrays(view: ViewFile, chunks: ChunkArrays | None) -> Iterator[pa.StructArray]:
    """The records of `view`, in order, as Arrow struct arrays (a chunk at
    a time for indexed views); through `chunks` when a round shares them."""
    if chunks is not None and isinstance(view, IndexedFile):
        yield from _indexed_arrays(view, 0, chunks)
    elif chunks is not None and isinstance(view, SlicedFile):
        for part, skip in view.parts:
            yield from _indexed_arrays(part, skip, chunks)
    else:
        for batch in view.records():
            if batch:
                yield records_to_array(batch)


def _indexed_arrays(view: IndexedFile, skip: int, chunks: ChunkArrays) -> Iterator[pa.StructArray]:
    """The arrays of an indexed view past its first `skip` records.  The
    chunk where `skip` falls is converted from its remaining records, as
    `view.records()` would give them: the type of a slice of the whole
    chunk's array could hold a field only the skipped records have."""
    pieces = view.entry.views.get(view.view)
    for seq in list(pieces.seqs) if pieces is not None else []:
        arr = chunks.array(view.entry, seq, view.view)
        if arr is None or skip >= len(arr):
            skip -= len(arr) if arr is not None else 0
            continue
        if skip:
            arr = records_to_array(chunks.records(view.entry, seq, view.view)[skip:])
            skip = 0
        yield arr
