"""libkestrel record framing (spec §2): parse and encode one record at a time.

A record is a command byte `(cmd << 4) | hs`, `hs` little-endian i32 header
words and, for `cmd >= 8`, a data block whose length is the first header
word.  The parser follows libkestrel's `RecordReader.readNext` literally,
including its quirks (READ_HEAD reads its id right after the command byte
whatever `hs` says; a PUT reads the expiry iff `hs > 6`), so fmtfs sees the
same records kestrel does.  Where libkestrel would crash or loop (a negative
data size, data past the end of the buffer) we report corruption instead.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

WRITER_MAGIC = b"\x27\x64\x26\x03"  # JournalFile.HEADER_WRITER, big-endian on disk
READER_MAGIC = b"\x26\x3c\x26\x03"  # BookmarkFile.HEADER_BOOKMARK
LARGEST_DATA = 16 * 1024 * 1024

READ_HEAD = 0
PUT = 8
READ_DONE = 9

_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
PUT_HEADER = struct.Struct("<iiqq")  # data size, error_count, id, add_time
PUT_HEADER_X = struct.Struct("<iiqqq")  # ... and expire_time

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


class Corrupt(Exception):
    """A record libkestrel would reject; `offset` is the record's start."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset = offset
        self.message = message


class Put(NamedTuple):
    id: int
    error_count: int
    add_time: int
    expire_time: int | None
    data_start: int  # offsets into the parsed buffer
    data_end: int


class ReadHead(NamedTuple):
    id: int


class ReadDone(NamedTuple):
    ids: tuple[int, ...]


class Unknown(NamedTuple):
    cmd: int
    size: int  # the bytes skipped, command byte included


Record = Put | ReadHead | ReadDone | Unknown


def check_magic(buf: bytes | memoryview, magic: bytes, kind: str) -> None:
    """Raise Corrupt at 0 unless `buf` starts with `magic` (kind: journal/bookmark)."""
    if len(buf) < 4:
        raise Corrupt(0, "No header")
    if bytes(buf[:4]) != magic:
        raise Corrupt(0, f"Not a {kind} file")


def read_record(buf, pos: int, end: int) -> tuple[Record, int] | None:
    """The record at `pos` and the offset after it, or None at a clean end
    (EOF or a 0x00 command byte).  Raises Corrupt(pos, reason)."""
    if pos >= end:
        return None
    byte = buf[pos]
    if byte == 0:
        return None
    cmd = byte >> 4
    hs = byte & 0xF
    after = pos + 1
    remaining = end - after
    if remaining < 4 * hs:
        raise Corrupt(pos, f"truncated header: {remaining} left")
    if cmd == PUT and remaining >= 24:
        # The hot path: one unpack for the whole fixed header.
        if hs > 6:
            if remaining < 32:
                raise _put_corrupt(buf, pos, after, remaining, hs)
            size, err, ident, added, expire = PUT_HEADER_X.unpack_from(buf, after)
            start = after + 32
        else:
            size, err, ident, added = PUT_HEADER.unpack_from(buf, after)
            expire = None
            start = after + 24
        if size > LARGEST_DATA:
            raise Corrupt(pos, "item too large")
        if size < 0:
            raise Corrupt(pos, "corrupted PUT: negative data size")
        if remaining - 4 < size + 4 * (hs - 1):
            raise Corrupt(pos, "truncated entry")
        stop = start + size
        if stop > end:  # only reachable with an odd hs (7, or < 6)
            raise Corrupt(pos, "truncated entry")
        return Put(ident, err, added, expire, start, stop), stop
    size = 0
    if cmd >= 8:
        if remaining < 4:
            raise Corrupt(pos, f"truncated header: {remaining} left")
        (size,) = _I32.unpack_from(buf, after)
        if size > LARGEST_DATA:
            raise Corrupt(pos, "item too large")
        if size < 0:
            raise Corrupt(pos, "corrupted record: negative data size")
        if remaining - 4 < size + 4 * (hs - 1):
            raise Corrupt(pos, "truncated entry")
    if cmd == PUT:
        raise _put_corrupt(buf, pos, after, remaining, hs)
    if cmd == READ_HEAD:
        if remaining < 8:
            raise Corrupt(pos, "corrupted READ_HEAD")
        return ReadHead(_I64.unpack_from(buf, after)[0]), after + 8
    if cmd == READ_DONE:
        if size % 8:
            raise Corrupt(pos, "corrupted READ_DONE")
        start = after + 4
        if start + size > end:
            raise Corrupt(pos, "truncated entry")
        ids = struct.unpack_from(f"<{size // 8}q", buf, start)
        return ReadDone(ids), start + size
    skip = 1 + 4 * hs + size
    if pos + skip > end:
        raise Corrupt(pos, "truncated entry")
    return Unknown(cmd, skip), pos + skip


def _put_corrupt(buf, pos: int, after: int, remaining: int, hs: int) -> Corrupt:
    """The error for a PUT too short for its fixed fields, in libkestrel's order."""
    if remaining >= 4:
        (size,) = _I32.unpack_from(buf, after)
        if size > LARGEST_DATA:
            return Corrupt(pos, "item too large")
        if 0 <= size and remaining - 4 < size + 4 * (hs - 1):
            return Corrupt(pos, "truncated entry")
    else:
        return Corrupt(pos, f"truncated header: {remaining} left")
    return Corrupt(pos, "corrupted PUT")


def iter_records(buf, pos: int, end: int):
    """Every (offset, record) from `pos` to a clean end; raises Corrupt."""
    while True:
        got = read_record(buf, pos, end)
        if got is None:
            return
        record, after = got
        yield pos, record
        pos = after


# -- encoding ---------------------------------------------------------------


def put_size(data_len: int, has_expiry: bool) -> int:
    """storageSizeOf a PUT record."""
    return 1 + (32 if has_expiry else 24) + data_len


def encode_put(
    ident: int, add_time: int, data: bytes, expire_time: int | None = None, error_count: int = 0
) -> bytes:
    if expire_time is None:
        return b"\x86" + PUT_HEADER.pack(len(data), error_count, ident, add_time) + data
    return b"\x88" + PUT_HEADER_X.pack(len(data), error_count, ident, add_time, expire_time) + data


def encode_read_head(ident: int) -> bytes:
    return b"\x02" + _I64.pack(ident)


def encode_read_done(ids: list[int] | tuple[int, ...]) -> bytes:
    """READ_DONE with ids sorted ascending; the length word is a byte count."""
    ordered = sorted(ids)
    return b"\x91" + _I32.pack(8 * len(ordered)) + struct.pack(f"<{len(ordered)}q", *ordered)


def encode_reader_file(head: int, done: list[int] | tuple[int, ...]) -> bytes:
    """The whole reader file a checkpoint writes: magic, READ_HEAD, READ_DONE."""
    return READER_MAGIC + encode_read_head(head) + encode_read_done(done)
