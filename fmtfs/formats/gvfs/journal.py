"""Journal files: header, entry validation as gvfs does it, entry decoding
and encoding (spec §3)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from fmtfs.formats.gvfs.model import OP_COPY, OP_REMOVE, OP_SET, OP_SETV, OP_UNSET, Entry

JOURNAL_MAGIC = b"\xda\x1ajour"
JOURNAL_SIZE = 32768  # NEW_JOURNAL_SIZE
HEADER_SIZE = 20
FILE_SIZE_OFFSET = 12
NUM_ENTRIES_OFFSET = 16
MIN_ENTRY = 24  # REMOVE of "/"
MAX_ENTRY = JOURNAL_SIZE - HEADER_SIZE

_HEADER = struct.Struct(">6sBBIII")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_ENTRY_HEAD = struct.Struct(">IIQB")  # size, crc, mtime, op
_MALFORMED = "op {} entry payload is malformed (a string is not NUL-terminated inside the entry)"


@dataclass
class JournalHeader:
    major: int
    minor: int
    tag: int
    file_size: int
    num_entries: int


def read_header(data: bytes) -> JournalHeader | None:
    if len(data) < HEADER_SIZE or data[:6] != JOURNAL_MAGIC:
        return None
    _, major, minor, tag, file_size, num_entries = _HEADER.unpack_from(data, 0)
    return JournalHeader(major, minor, tag, file_size, num_entries)


def header_error(data: bytes, tag: int) -> str | None:
    """Why gvfs would ignore this journal for a tree with `tag`, or None."""
    header = read_header(data)
    if header is None:
        return "not a gvfs journal (size or magic)"
    if header.major != 1:
        return f"unsupported journal version {header.major}.{header.minor}"
    if header.file_size != len(data):
        return f"header file_size {header.file_size} differs from the file's size {len(data)}"
    if header.tag != tag:
        return f"journal tag {header.tag:08x} differs from the tree's tag {tag:08x}"
    return None


def verify_entry(data: bytes, off: int) -> int | str:
    """The size of the valid entry at `off`, or why gvfs rejects it."""
    n = len(data)
    if off % 4:
        return f"entry at {off} is not 4-byte aligned"
    if off + 4 > n:
        return "entry size field runs past the end of the file"
    (size,) = _U32.unpack_from(data, off)
    if size % 4:
        return f"entry size {size} is not a multiple of 4"
    if size < MIN_ENTRY:
        return f"entry size {size} is below the minimum of {MIN_ENTRY}"
    if off + size > n:
        return f"entry size {size} runs past the end of the file"
    (trailing,) = _U32.unpack_from(data, off + size - 4)
    if trailing != size:
        return f"trailing size {trailing} differs from the entry size {size}"
    (stored,) = _U32.unpack_from(data, off + 4)
    computed = zlib.crc32(data[off + 8 : off + size])
    if stored != computed:
        return f"bad CRC-32: stored {stored:08x}, computed {computed:08x}"
    return size


def decode_entry(data: bytes, off: int, size: int) -> Entry | str:
    """The entry at `off` (already verified), or why it cannot be decoded."""
    op = data[off + 16]
    (mtime,) = _U64.unpack_from(data, off + 8)
    return _decode_payload(data, off, size, op, mtime)


def _decode_payload(data: bytes, off: int, size: int, op: int, mtime: int) -> Entry | str:
    end = off + size - 4  # strings must end before the trailing size
    find = data.find
    pos = off + 17
    nul = find(b"\0", pos, end)
    if nul < 0:
        return _MALFORMED.format(op)
    entry = Entry(off, size, op, mtime, data[pos:nul])
    pos = nul + 1
    if op == OP_REMOVE:
        return entry
    if op > OP_REMOVE:
        return f"unknown op {op} (gvfs ignores it)"
    nul = find(b"\0", pos, end)
    if nul < 0:
        return _MALFORMED.format(op)
    first = data[pos:nul]
    pos = nul + 1
    if op == OP_COPY:
        entry.source = first
        return entry
    entry.key = first
    if op == OP_SET:
        nul = find(b"\0", pos, end)
        if nul < 0:
            return _MALFORMED.format(op)
        entry.value = data[pos:nul]
    elif op == OP_SETV:
        pos += -pos % 4  # entries start 4-aligned, so this is gvfs's address alignment
        if pos + 4 > end:
            return _MALFORMED.format(op)
        (count,) = _U32.unpack_from(data, pos)
        pos += 4
        if count > end - pos:
            return _MALFORMED.format(op)
        items = []
        for _ in range(count):
            nul = find(b"\0", pos, end)
            if nul < 0:
                return _MALFORMED.format(op)
            items.append(data[pos:nul])
            pos = nul + 1
        entry.value = items
    return entry


@dataclass(slots=True)
class Invalid:
    """The first invalid entry: gvfs reads nothing from here on."""

    offset: int
    index: int
    error: str


@dataclass
class Malformed:
    """A checksummed entry that cannot be applied (gvfs skips it)."""

    offset: int
    error: str


def iter_entries(data: bytes, start: int, index: int, count: int) -> Iterator[Entry | Malformed | Invalid]:
    """Entries `index`..`count`-1 starting at byte `start`; ends after an
    Invalid.  Each yielded Entry/Malformed stands for one valid entry."""
    n = len(data)
    view = memoryview(data)
    crc32 = zlib.crc32
    unpack_head = _ENTRY_HEAD.unpack_from
    unpack_u32 = _U32.unpack_from
    decode = _decode_payload
    off = start
    for i in range(index, count):
        # the checks of verify_entry, inline for speed; it explains failures
        if off + MIN_ENTRY <= n and not off & 3:
            size, crc, mtime, op = unpack_head(data, off)
            end = off + size
            if (
                size >= MIN_ENTRY
                and not size & 3
                and end <= n
                and unpack_u32(data, end - 4)[0] == size
                and crc32(view[off + 8 : end]) == crc
            ):
                entry = decode(data, off, size, op, mtime)
                yield Malformed(off, entry) if isinstance(entry, str) else entry
                off = end
                continue
        yield Invalid(off, i, str(verify_entry(data, off)))
        return


@dataclass
class JournalState:
    """A whole journal validated: the valid prefix and where it ends."""

    header: JournalHeader
    entries: list[Entry]
    end: int  # offset just after the last valid entry
    count: int  # valid entries (including malformed ones)
    invalid: Invalid | None
    malformed: list[Malformed]


def read_journal(data: bytes) -> JournalState:
    """Validate a journal whose header is known to be good."""
    header = read_header(data)
    assert header is not None
    entries: list[Entry] = []
    malformed: list[Malformed] = []
    invalid = None
    end, count = HEADER_SIZE, 0
    for item in iter_entries(data, HEADER_SIZE, 0, header.num_entries):
        if isinstance(item, Invalid):
            invalid = item
            break
        if isinstance(item, Malformed):
            malformed.append(item)
            end += _U32.unpack_from(data, item.offset)[0]
        else:
            entries.append(item)
            end += item.size
        count += 1
    return JournalState(header, entries, end, count, invalid, malformed)


def new_journal(tag: int, size: int = JOURNAL_SIZE) -> bytes:
    return _HEADER.pack(JOURNAL_MAGIC, 1, 0, tag, size, 0) + bytes(size - HEADER_SIZE)


def encode_entry(
    op: int,
    mtime: int,
    path: bytes,
    key: bytes | None = None,
    value: bytes | list[bytes] | None = None,
    source: bytes | None = None,
) -> bytes:
    """One journal entry as meta_journal_entry_new_* builds it."""
    buf = bytearray(16)
    struct.pack_into(">Q", buf, 8, mtime)
    buf.append(op)
    buf += path + b"\0"
    if op in (OP_SET, OP_SETV, OP_UNSET):
        buf += key + b"\0"
    if op == OP_SET:
        buf += value + b"\0"
    elif op == OP_SETV:
        buf += b"\0" * (-len(buf) % 4)
        buf += _U32.pack(len(value))
        for item in value:
            buf += item + b"\0"
    elif op == OP_COPY:
        buf += source + b"\0"
    buf += b"\0" * (-len(buf) % 4)
    size = len(buf) + 4
    buf += _U32.pack(size)
    _U32.pack_into(buf, 0, size)
    _U32.pack_into(buf, 4, zlib.crc32(buf[8:]))
    return bytes(buf)
