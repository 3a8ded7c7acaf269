"""A derived view held as lz4-compressed pieces (formats' PiecedRender).

A derived view is rendered whole (its exact size needs every line), but it
need not be held whole: a format that can give its lines a piece at a time
(gvfs `metadata.jsonl`, from a walk of the tree file) has each piece
compressed as soon as it is rendered, so the view costs about a sixth of
its bytes in memory (JSON compresses 6-8x) and a rendering never holds
more than one piece of lines.  A read decompresses the pieces it spans
(2-4 GB/s; the last one stays decompressed for the next read, as `cat`
reads on), and the Parquet twin takes the records a piece at a time.

The same pieces, as one blob (`blob()`, `from_blob()`), are what the
SQLite cache of derived views keeps, so a second mount of an unchanged
source neither renders the view nor holds more than its compressed bytes."""

from __future__ import annotations

import bisect
import struct
import threading
from collections.abc import Iterable, Iterator

import lz4.block

from fmtfs.formats.base import Record
from fmtfs.render import parse_lines

# What a blob of pieces starts with: a byte no rendered view starts with
# (JSON Lines, text), so the derived-view cache tells the two kinds apart.
MAGIC = b"\0fmtfs-pieces\n"
_U32 = struct.Struct("<I")
_PIECE = struct.Struct("<QI")  # where a piece ends in the view, its compressed length


class Pieces:
    """A view's bytes as compressed pieces, read like `bytes` (`len`, slices)."""

    def __init__(self, packed: list[bytes], ends: list[int]) -> None:
        self._packed = packed  # each piece, compressed
        self._ends = ends  # where each piece ends in the view
        self._last: tuple[int, bytes] | None = None  # the last piece decompressed
        self._lock = threading.Lock()

    @classmethod
    def of(cls, pieces: Iterable[bytes]) -> Pieces:
        packed: list[bytes] = []
        ends: list[int] = []
        size = 0
        for piece in pieces:
            if piece:
                packed.append(lz4.block.compress(piece, store_size=False))
                size += len(piece)
                ends.append(size)
        return cls(packed, ends)

    @classmethod
    def joined(cls, runs: list[Pieces]) -> Pieces:
        """The pieces of consecutive runs of a view's lines, as one view."""
        packed: list[bytes] = []
        ends: list[int] = []
        for run in runs:
            size = ends[-1] if ends else 0
            packed += run._packed
            ends += [size + end for end in run._ends]
        return cls(packed, ends)

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __getitem__(self, span: slice) -> bytes:
        """The view's bytes [start:stop] (slices with no step, as reads make)."""
        start, stop, _ = span.indices(len(self))
        if start >= stop:
            return b""
        out = []
        i = bisect.bisect_right(self._ends, start)
        while start < stop:
            first = self._ends[i - 1] if i else 0
            piece = self.piece(i)
            out.append(piece[start - first : stop - first])
            start = self._ends[i]
            i += 1
        return b"".join(out)

    def piece(self, i: int) -> bytes:
        last = self._last  # read once: another thread may replace it
        if last is not None and last[0] == i:
            return last[1]
        size = self._ends[i] - (self._ends[i - 1] if i else 0)
        data = lz4.block.decompress(self._packed[i], uncompressed_size=size)
        with self._lock:
            self._last = (i, data)
        return data

    def records(self) -> Iterator[list[Record]]:
        """The view's records, a piece at a time."""
        for i in range(len(self._packed)):
            yield parse_lines(self.piece(i))

    def blob(self) -> bytes:
        head = [MAGIC, _U32.pack(len(self._packed))]
        head += [_PIECE.pack(end, len(packed)) for end, packed in zip(self._ends, self._packed, strict=True)]
        return b"".join(head + self._packed)

    @classmethod
    def from_blob(cls, blob: bytes) -> Pieces | None:
        """The pieces of blob(), or None when `blob` is not one (a whole view)."""
        if not blob.startswith(MAGIC):
            return None
        at = len(MAGIC)
        (count,) = _U32.unpack_from(blob, at)
        at += 4
        ends, lengths = [], []
        for _ in range(count):
            end, length = _PIECE.unpack_from(blob, at)
            ends.append(end)
            lengths.append(length)
            at += _PIECE.size
        packed = []
        for length in lengths:
            packed.append(blob[at : at + length])
            at += length
        return cls(packed, ends)
