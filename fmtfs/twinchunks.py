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
the round reads, and the scratch file ends with the round.

`fmtfs index` has decode worker processes (fmtfs.decoders): there the
chunks are decoded and converted by the workers, in the order the twins
will read them and a few chunks ahead, while the indexing process types
and writes the twins from what they saved: every core works.  A mount's
builder child stays one process (its memory counts against the mount's)."""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pyarrow as pa

from fmtfs.decoders import DecodePool, worker_stream
from fmtfs.entries import StreamEntry
from fmtfs.formats.base import Chunk, Record, State
from fmtfs.parquet import from_ipc, ipc_bytes, records_to_array
from fmtfs.treefiles import IndexedFile, SlicedFile
from fmtfs.viewfile import ViewFile

log = logging.getLogger("fmtfs")

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
    module docstring), in an unlinked scratch file under `folder`.  With
    `prefetch`, decode worker processes convert the chunks ahead of the
    twins that read them, on every core."""

    def __init__(self, folder: Path, views: Iterable[ViewFile]) -> None:
        # how many twins of the round read each (stream, view): one reader
        # consumes its arrays as they are made, more read them back
        self.readers: Counter[Source] = Counter(s for view in views for s in set(sources_of(view)))
        self.file = tempfile.TemporaryFile(dir=folder, prefix="chunks-", suffix=".arrow")
        self.end = 0  # of the scratch file
        self.saved: dict[tuple, dict[str, tuple[int, int]]] = {}  # chunk key -> view -> (offset, size)
        self.coming: dict[tuple, threading.Event] = {}  # chunk key -> set once the workers' arrays are saved
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def close(self) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join()
        self.file.close()

    def __enter__(self) -> ChunkArrays:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def array(self, entry: StreamEntry, seq: int, view: str) -> pa.StructArray | None:
        """The records of `view` in chunk `seq` of `entry` (None: none)."""
        meta = entry.chunks[seq]
        key = _key(entry, seq)
        coming = self.coming.get(key)
        if coming is not None:
            coming.wait()
        with self.lock:
            where = self.saved.get(key, {}).get(view)
        if where is not None:
            return self._load(*where)
        decoded = entry.stream.decode(Chunk(meta.start, meta.end, meta.state, {}))
        arrays = _convert(decoded, lambda other: other == view or self._kept((entry.stream.name, other)))
        name = entry.stream.name
        self._save(key, _blobs({v: a for v, a in arrays.items() if self._kept((name, v), v == view)}))
        return arrays.get(view)

    def arrays(self, view: ViewFile) -> Iterator[pa.StructArray]:
        """The records of `view`, in order, as Arrow struct arrays."""
        return view_arrays(view, self)

    def records(self, entry: StreamEntry, seq: int, view: str) -> list[Record]:
        """The records of `view` in chunk `seq` of `entry`, decoded again."""
        meta = entry.chunks[seq]
        return entry.stream.decode(Chunk(meta.start, meta.end, meta.state, {})).get(view, [])

    def prefetch(self, pool: DecodePool, views: list[ViewFile]) -> None:
        """Have the pool's workers decode and convert every chunk `views`
        read, in the order they read them, while twins are built from the
        arrays saved so far."""
        jobs: dict[tuple, tuple[StreamEntry, int]] = {}
        for view in views:
            for entry, seq in _chunks_of(view):
                jobs.setdefault(_key(entry, seq), (entry, seq))
        for key in jobs:
            self.coming[key] = threading.Event()
        self.thread = threading.Thread(
            target=self._prefetch, args=(pool, jobs), name="fmtfs-twin-chunks", daemon=True
        )
        self.thread.start()

    def _prefetch(self, pool: DecodePool, jobs: dict[tuple, tuple[StreamEntry, int]]) -> None:
        try:
            self._fetch(pool, jobs)
        finally:
            for event in self.coming.values():
                event.set()  # stopped or failed: whoever waits decodes in process

    def _fetch(self, pool: DecodePool, jobs: dict[tuple, tuple[StreamEntry, int]]) -> None:
        window: deque[tuple[tuple, Future]] = deque()  # bounds the arrays in transit
        todo = iter(jobs.items())
        while True:
            while len(window) < 2 * pool.workers and not self.stopped.is_set():
                job = next(todo, None)
                if job is None:
                    break
                key, (entry, seq) = job
                meta, name = entry.chunks[seq], entry.stream.name
                views = sorted(v for s, v in self.readers if s == name)
                window.append(
                    (key, pool.run(_arrays_in_worker, name, meta.start, meta.end, meta.state, views))
                )
            if not window:
                return
            key, future = window.popleft()
            try:
                self._save(key, future.result())
            except Exception:  # noqa: BLE001 - whoever reads the chunk decodes it in process
                log.warning("twin chunk %s: decoded in process", key[:3], exc_info=True)
            self.coming[key].set()

    def _kept(self, source: Source, consumed: bool = False) -> bool:
        """Whether another read of `source` will come this round."""
        return self.readers[source] > (1 if consumed else 0)

    def _save(self, key: tuple, blobs: dict[str, bytes]) -> None:
        """Append a chunk's arrays (IPC streams; views sharing one array
        share one blob) to the scratch file."""
        with self.lock:
            found = self.saved.setdefault(key, {})
            written: dict[int, tuple[int, int]] = {}
            for view, blob in blobs.items():
                if view in found:
                    continue
                if id(blob) not in written:
                    os.pwrite(self.file.fileno(), blob, self.end)
                    written[id(blob)] = (self.end, len(blob))
                    self.end += len(blob)
                found[view] = written[id(blob)]

    def _load(self, offset: int, size: int) -> pa.StructArray:
        return from_ipc(os.pread(self.file.fileno(), size, offset))


def _key(entry: StreamEntry, seq: int) -> tuple:
    meta = entry.chunks[seq]
    return (entry.stream.name, entry.identity, seq, meta.start, meta.end)


def _chunks_of(view: ViewFile) -> Iterator[tuple[StreamEntry, int]]:
    """The chunks an indexed or sliced view reads, in order."""
    parts = [view] if isinstance(view, IndexedFile) else [p for p, _ in getattr(view, "parts", [])]
    for part in parts:
        pieces = part.entry.views.get(part.view)
        for seq in pieces.seqs if pieces is not None else []:
            yield part.entry, seq


def _arrays_in_worker(stream: str, start: int, end: int, state: State, views: list[str]) -> dict[str, bytes]:
    """In a decode worker: the chunk's records of `views` as Arrow IPC
    streams."""
    decoded = worker_stream(stream).decode(Chunk(start, end, state, {}))
    arrays = _convert(decoded, set(views).__contains__)
    return _blobs(arrays)


def _blobs(arrays: dict[str, pa.StructArray]) -> dict[str, bytes]:
    """Views -> their arrays as IPC streams; views sharing an array share
    one blob (written, and pickled, once)."""
    blobs: dict[int, bytes] = {}
    for arr in arrays.values():
        if id(arr) not in blobs:
            blobs[id(arr)] = ipc_bytes(arr)
    return {view: blobs[id(arr)] for view, arr in arrays.items()}


def _convert(decoded: dict[str, list[Record]], wanted: Callable[[str], bool]) -> dict[str, pa.StructArray]:
    """The `wanted` views of a decoded chunk as Arrow; a view holding the
    same record objects as one converted already shares its array (same
    records, same inferred type)."""
    out: dict[str, pa.StructArray] = {}
    done: list[tuple[list[Record], pa.StructArray]] = []
    for name, records in decoded.items():
        if not records or not wanted(name):
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
