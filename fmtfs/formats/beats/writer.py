"""Appending written lines to a shipped version-2 segment (spec §11).

Order of a write, so that a crash at any moment leaves a segment Beats
reads: the new frames are written after the last good frame and
fdatasync'ed; only then is the header's frame count (offset 4, plaintext)
raised.  A crash before the count update leaves frames Beats does not count
yet (it reads the counted ones; fmtfs reads all whole frames).

Encrypted segments continue the one CTR keystream at the plaintext offset
where the new bytes start.  Compressed segments get new independent LZ4
blocks in place of the old end mark, then a new end mark and an xxh32 over
the whole content, in one write; a crash inside it leaves what Beats itself
leaves after a crash (an LZ4 frame without end mark), whose old frames are
intact and counted.

Where a segment's frames end, and that none before is damaged, a walk of
every frame finds: once per segment in a process, while the segment stays
as this process's last write left it (TAILS, fmtfs.formats.writtenends)."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

from fmtfs.formats.base import BadRecord, FileIdentity, Writer
from fmtfs.formats.beats import frames as fr
from fmtfs.formats.beats import lz4stream
from fmtfs.formats.beats.keys import ctr_xor
from fmtfs.formats.beats.layout import OPT_ENCRYPTED, OPT_LZ4, new_header
from fmtfs.formats.beats.payload import encode_line
from fmtfs.formats.beats.segment import Segment
from fmtfs.formats.files import fsync_path
from fmtfs.formats.writtenends import WrittenEnds
from fmtfs.permissions import inherit

# Beats' default MaxSegmentSize; a frame above it minus the header is rejected.
MAX_SEGMENT_SIZE = 100 << 20
MAX_FRAME = MAX_SEGMENT_SIZE - 12
_u32 = struct.Struct("<I")


def _skip(payload: memoryview) -> None:
    return None


def _torn(buf: memoryview | bytes, at: int) -> bool:
    """Whether the damaged frame at `at` is the file's last: its size field
    reaches to or past the end (a write cut short), not a bad frame with
    more data behind it."""
    size = int.from_bytes(bytes(buf[at : at + 4]), "little")
    return at + size >= len(buf)


class RefusedAppend(BadRecord):
    """The segment's current bytes do not allow a safe append."""


@dataclass(frozen=True)
class _Tail:
    """Where the next frame goes (kept in TAILS with the file's identity)."""

    frames: int  # whole frames in the segment
    p: int  # plaintext offset after the last frame (linear segments)
    c: int = 0  # container offset of the LZ4 end mark / first free byte
    # LZ4 segments: xxh32 state over the whole plaintext frame stream, so an
    # append hashes only its own bytes (the frame's content checksum); never
    # updated in place: writers copy it
    checksum: Any = None


# Each segment's tail as this process's last writer walked or left it: a new
# writer per `echo line >> view` need not walk the whole segment again.
TAILS: WrittenEnds[_Tail] = WrittenEnds()


def create_segment(path: Path, options: int, key: bytes | None) -> None:
    """A new, empty shipped-v2 segment (frame count 0; the owner and mode of
    the other segments, 0600 with the folder's owner for the first one).  With LZ4
    it already holds an empty, closed LZ4 frame, so an append always
    replaces an end mark."""
    iv = os.urandom(16) if options & OPT_ENCRYPTED else None
    body = b""
    if options & OPT_LZ4:
        body = lz4stream.BEATS_HEADER + lz4stream.END_MARK + _u32.pack(lz4stream.xxh32(b""))
        if iv is not None:
            if key is None:
                raise ValueError("an encrypted segment needs the key")
            body = ctr_xor(key, iv, 0, body)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        # owner and mode of the other segments: never more readable than they are
        inherit(path, path.parent.glob("*.seg"))
        os.write(fd, new_header(options, iv) + body)
        os.fsync(fd)
    finally:
        os.close(fd)


class SegmentWriter(Writer):
    def __init__(self, path: Path, key: bytes | None) -> None:
        self.path = path
        self.key = key
        seg = Segment.open(path, key)
        if not seg.header.writable:
            raise ValueError(
                f"{path.name}: version {seg.header.version} ({seg.header.layout}) segments are read-only"
            )
        self.header = seg.header
        self._lz = self._lz4_header(seg) if seg.header.lz4_stream else None

    def _lz4_header(self, seg: Segment) -> lz4stream.Lz4Header:
        if seg.avail == 0:  # a header-only segment: its LZ4 frame starts with our first append
            return lz4stream.parse_header(lz4stream.BEATS_HEADER)
        lz = lz4stream.parse_header(bytes(seg.read(0, min(seg.avail, 19))))
        if lz.block_checksum or lz.content_size:
            raise ValueError(
                f"{self.path.name}: LZ4 frame with block checksums or a content size cannot be appended to"
            )
        return lz

    # -- where to append -------------------------------------------------------

    def _find_tail(self) -> _Tail:
        identity = FileIdentity.of(self.path)
        known = TAILS.get(identity)
        if known is not None:
            return known
        seg = Segment.open(self.path, self.key)
        name = self.path.name
        counted = seg.header.frame_count or 0
        if self._lz is not None and seg.avail == 0:
            tail = _Tail(0, 0, 0, xxhash.xxh32())  # c == 0: no LZ4 frame header yet
        elif self._lz is not None:
            lz = self._lz
            stop: list[lz4stream.Tail] = []
            content = b"".join(b.data for b in lz4stream.blocks(seg.read, seg.avail, lz, lz.size, 0, stop))
            if stop[0].kind == "bad":
                raise RefusedAppend(f"{name}: damaged LZ4 data ({stop[0].error}); refusing to append")
            w = fr.walk(memoryview(content), 0, len(content), _skip)
            if w.status != fr.END:
                raise RefusedAppend(
                    f"{name}: the compressed frame stream ends inside a frame; refusing to append"
                )
            if len(w.records) < counted:
                raise RefusedAppend(f"{name}: fewer whole frames than the header counts; refusing to append")
            tail = _Tail(len(w.records), len(content), stop[0].c, xxhash.xxh32(content))
        else:
            buf = seg.data[seg.header.data_offset :] if seg.header.iv is None else seg.read(0, seg.avail)
            w = fr.walk(buf, 0, len(buf), _skip)
            if w.status == fr.BAD and not _torn(buf, w.end):
                raise RefusedAppend(
                    f"{name}: damaged frame at plaintext offset {w.end} ({w.error}); refusing to append"
                )
            if len(w.records) < counted:
                raise RefusedAppend(f"{name}: fewer whole frames than the header counts; refusing to append")
            # A torn tail (the last frame, cut or garbled by a crash) after the
            # counted frames is replaced below; damage with data after it is not.
            tail = _Tail(len(w.records), w.end)
        TAILS.put(identity, tail)
        return tail

    # -- writing ---------------------------------------------------------------

    def write(self, records: list) -> None:
        proto = self.header.protobuf
        payloads = [encode_line(r, proto) for r in records]
        for payload in payloads:
            if len(payload) + fr.FRAME_OVERHEAD > MAX_FRAME:
                raise BadRecord(f"event of {len(payload)} bytes is larger than a segment may hold")
        if not payloads:
            return
        tail = self._find_tail()
        new = b"".join(fr.encode_frame(p) for p in payloads)
        h = self.header
        lz = self._lz
        checksum = None
        if lz is not None:
            frame_header = lz4stream.BEATS_HEADER if tail.c == 0 else b""
            body = frame_header + lz4stream.encode_blocks(new, lz.max_block) + lz4stream.END_MARK
            checksum = tail.checksum.copy()
            checksum.update(new)
            if lz.content_checksum:
                body += _u32.pack(checksum.intdigest())
            at = tail.c
        else:
            body = new
            at = tail.p
        if h.iv is not None:
            body = ctr_xor(self.key, h.iv, at, body)
        count = tail.frames + len(payloads)
        fd = os.open(self.path, os.O_RDWR)
        try:
            end = h.data_offset + at + len(body)
            os.pwrite(fd, body, h.data_offset + at)
            if os.fstat(fd).st_size > end:
                os.ftruncate(fd, end)  # a torn tail after the last whole frame
            os.fdatasync(fd)
            os.pwrite(fd, _u32.pack(count), 4)
        finally:
            os.close(fd)
        if lz is not None:
            end_mark = at + len(body) - 4 - (4 if lz.content_checksum else 0)
            left = _Tail(count, tail.p + len(new), end_mark, checksum)
        else:
            left = _Tail(count, at + len(new))
        TAILS.put(FileIdentity.of(self.path), left)

    def sync(self) -> None:
        fsync_path(self.path)
