"""The files of a source's tree (fmtfs.views) other than the Parquet twins:
a view served from the chunk index (IndexedFile), a derived view made of
slices of indexed views (SlicedFile), and a view computed whole
(BytesFile: gvfs metadata, _fmtfs.json, _errors.jsonl).

Record views served from the chunk index also show their chunks
(`chunks()`: ViewChunk, with time range, record count and rendered size,
cut at any record) and a chunk's records or bytes: the Spark data source
plans partitions and decodes on executors through that API alone."""

from __future__ import annotations

import threading

from fmtfs.chunkreader import ChunkReader
from fmtfs.digest import digest
from fmtfs.entries import StreamEntry
from fmtfs.formats.base import Record, Stream
from fmtfs.pieces import Pieces
from fmtfs.render import parse_lines, render_lines
from fmtfs.viewchunk import ViewChunk
from fmtfs.viewfile import ViewFile


class IndexedFile(ViewFile):
    def __init__(self, reader: ChunkReader, entry: StreamEntry, view: str) -> None:
        self.reader, self.entry, self.view = reader, entry, view

    # -- the public chunk API (the Spark data source plans and reads by it) --

    @property
    def stream(self) -> Stream:
        return self.entry.stream

    @property
    def counted(self) -> bool:
        """Whether the index counts this view's records per chunk (the
        stream's own view, the one that grows by appending)."""
        paths = self.entry.stream.view_paths()
        return bool(paths) and paths[0] == self.view

    def record_count(self) -> int | None:
        """The view's records (None: not counted, see `counted`)."""
        return self.entry.record_count if self.counted else None

    def chunks(self, first: int = 0, last: int | None = None) -> list[ViewChunk]:
        """The chunks holding the view's records [first, last), in order.
        A view the index does not count is cut by rendering the chunks
        the cut falls in (their lines are its records)."""
        pieces = self.entry.views.get(self.view)
        if pieces is None:
            return []
        counted = self.counted
        time_field = getattr(self.entry.stream, "time_field", None)
        out: list[ViewChunk] = []
        begin = 0  # the view's records before this chunk
        for i, seq in enumerate(pieces.seqs):
            if last is not None and begin >= last:
                break
            meta = self.entry.chunks[seq]
            size = pieces.ends[i] - (pieces.ends[i - 1] if i else 0)
            chunk = ViewChunk(
                self.view,
                self.entry.stream.name,
                meta.start,
                meta.end,
                meta.state,
                meta.times,
                time_field,
                size,
                meta.count if counted else None,
                seq=seq,
            )
            if first <= begin and last is None:
                out.append(chunk)  # the common case: no decode to count
                continue
            total = chunk.total if counted else self.reader.piece(self.entry, self.view, seq).count(b"\n")
            end = begin + total
            low, high = max(first, begin), end if last is None else min(last, end)
            if low < high:
                out.append(chunk.part(low - begin, high - begin))
            begin = end
        return out

    def chunk_records(self, chunk: ViewChunk) -> list[Record]:
        """A chunk's records of this view, decoded here."""
        return chunk.records(self.entry.stream)

    def chunk_bytes(self, chunk: ViewChunk) -> bytes:
        """A chunk's JSON lines of this view, rendered through the index
        (and its cache of rendered chunks)."""
        data = self.reader.piece(self.entry, self.view, chunk.seq)
        if not chunk.skip and chunk.take is None:
            return data
        lines = data.splitlines(keepends=True)
        return b"".join(lines[chunk.skip : None if chunk.take is None else chunk.skip + chunk.take])

    def size(self) -> int:
        pieces = self.entry.views.get(self.view)
        return pieces.size if pieces else 0

    def read(self, offset: int, size: int) -> bytes:
        # no lock: the entry is an immutable snapshot (see fmtfs.entries)
        return self.reader.read(self.entry, self.view, offset, size)

    def size_known(self) -> bool:
        return True  # a sum in the index snapshot

    def read_in_memory(self, offset: int, size: int) -> bytes | None:
        return self.reader.read_in_memory(self.entry, self.view, offset, size)

    def records(self):
        return self.reader.records(self.entry, self.view)

    def identity(self) -> str:
        # the view's own state (StreamEntry.view_state), not its stream's
        # file: appending to a log leaves its earlier hour buckets' twins
        # built (a 20 MB wallaby log grown by 5 lines had all 5,195 twins
        # rebuilt, 14.6 s of CPU)
        epoch, pieces = self.entry.view_state(self.view)
        return digest(epoch, self.view, pieces.seqs if pieces else (), pieces.ends if pieces else ())

    def line_offset(self, record: int) -> int:
        """Where the view's `record`-th line starts (its size past the end).
        Renders only the chunk holding that line."""
        pieces = self.entry.views.get(self.view)
        if pieces is None or record <= 0:
            return 0
        # chunk counts are the stream's primary view's: exact for a one-view
        # stream, otherwise count lines chunk by chunk
        counted = len(self.entry.views) == 1
        before = 0
        for i, seq in enumerate(pieces.seqs):
            data = None if counted else self.reader.piece(self.entry, self.view, seq)
            count = self.entry.chunks[seq].count if counted else data.count(b"\n")
            if record < before + count:
                data = data if data is not None else self.reader.piece(self.entry, self.view, seq)
                position = 0
                for _ in range(record - before):
                    position = data.index(b"\n", position) + 1
                return (pieces.ends[i - 1] if i else 0) + position
            before += count
        return pieces.size


class SlicedFile(ViewFile):
    """A derived view made of slices of indexed views (formats' ViewSlice):
    its bytes are theirs, so sizes and reads come from the chunk index."""

    def __init__(self, parts: list[tuple[IndexedFile, int]]) -> None:
        self.parts = parts  # (file, records skipped at its start)
        self._layout: list[tuple[IndexedFile, int, int]] | None = None
        self._identity: str | None = None
        self._lock = threading.Lock()

    def layout(self) -> list[tuple[IndexedFile, int, int]]:
        """(file, first byte, last byte + 1) of every part."""
        with self._lock:
            if self._layout is None:
                self._layout = [(f, f.line_offset(skip), f.size()) for f, skip in self.parts]
            return self._layout

    def size(self) -> int:
        return sum(end - start for _, start, end in self.layout())

    def size_known(self) -> bool:
        return self._layout is not None  # set once, never changed: no lock needed to look

    def read(self, offset: int, size: int) -> bytes:
        out = []
        for file, start, end in self.layout():
            length = end - start
            if offset < length and size > 0:
                data = file.read(start + offset, min(size, length - offset))
                out.append(data)
                size -= len(data)
            offset = max(0, offset - length)
        return b"".join(out)

    def records(self):
        for file, skip in self.parts:
            for batch in file.records():
                if skip >= len(batch):
                    skip -= len(batch)
                    continue
                yield batch[skip:]
                skip = 0

    def identity(self) -> str:
        # asked at every open (fmtfs.fuse keeps pages per identity); the parts
        # never change, so one digest of them serves this object's life
        if self._identity is None:
            self._identity = digest(*[(f.identity(), skip) for f, skip in self.parts])
        return self._identity

    # -- the public chunk API, as IndexedFile's --

    def chunks(self) -> list[ViewChunk]:
        """The chunks of every part, in order, each part from its skip on."""
        return [chunk for file, skip in self.parts for chunk in file.chunks(skip)]

    def _part(self, chunk: ViewChunk) -> IndexedFile:
        return next(f for f, _ in self.parts if f.stream.name == chunk.stream and f.view == chunk.view)

    def chunk_records(self, chunk: ViewChunk) -> list[Record]:
        return self._part(chunk).chunk_records(chunk)

    def chunk_bytes(self, chunk: ViewChunk) -> bytes:
        return self._part(chunk).chunk_bytes(chunk)


class BytesFile(ViewFile):
    """A file rendered whole on first use (derived views, meta files); a
    PiecedRender's view is held as compressed pieces (fmtfs.pieces)."""

    def __init__(self, render, identity: str) -> None:
        self._render = render
        self._identity = identity
        self._data: bytes | Pieces | None = None
        self._records: list[Record] | None = None
        self._lock = threading.Lock()

    def data(self) -> bytes | Pieces:
        with self._lock:
            if self._data is None:
                produced = self._render()
                if isinstance(produced, (bytes, Pieces)):
                    self._data = produced
                else:
                    self._records = produced
                    self._data = render_lines(produced)
            return self._data

    def size(self) -> int:
        return len(self.data())

    def size_known(self) -> bool:
        return self._data is not None  # set once, never changed: no lock needed to look

    def read(self, offset: int, size: int) -> bytes:
        return self.data()[offset : offset + size]

    def read_in_memory(self, offset: int, size: int) -> bytes | None:
        # set once, never changed: no lock needed to look; Pieces decompress
        # a read's piece or two on the spot (lz4: ~0.1 ms, half a thread hop)
        data = self._data
        return None if data is None else data[offset : offset + size]

    def records(self):
        data = self.data()
        if isinstance(data, Pieces):
            return data.records()
        if self._records is None:  # restored from the persistent cache
            self._records = parse_lines(data)
        return [self._records]

    def identity(self) -> str:
        return self._identity
