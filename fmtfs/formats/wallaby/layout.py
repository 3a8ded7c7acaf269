"""The wallaby write-ahead log's bytes (specs/wallaby-log.md, generation B,
little-endian):

  file header   "LOG"|"IDX", u8 version 1, u32 flags, [i64 ttl_ns]   (log: 8 or 16 bytes; idx: 16)
  log record    u32 size, u32 flags, i64 time_ns, payload[size]
  index record  i64 time_ns, u64 seq, i64 offset-of-log-record

Constants, the header-size and generation checks, the encoders, and the
UTC time-bucket names (Bucketer)."""

from __future__ import annotations

import mmap
import struct
import time
from pathlib import Path

from fmtfs.formats.base import BadRecord, Problem
from fmtfs.formats.files import read_prefix
from fmtfs.formats.wallaby.card import LOG_MAGIC

IDX_MAGIC = b"IDX\x01"
HEADER_16 = struct.Struct("<3sBIq")
RECORD = struct.Struct("<IIq")
INDEX_RECORD = struct.Struct("<qQq")
MAX_PAYLOAD = 64 * 1024  # v1.Create's maxSize: what a real reader accepts

BUCKET_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}
BUCKET_PATTERN = {"minute": "%Y-%m-%dT%H:%M", "hour": "%Y-%m-%dT%H", "day": "%Y-%m-%d"}


def torn(
    file: str, data: bytes | mmap.mmap, offset: int, end: int, size: int | None = None
) -> Problem | None:
    """What a record at `offset` that does not fit before `end` is: a torn
    header (None for a zero tail: a preallocated log), or (its `size`
    read) a torn payload."""
    if size is None:
        if offset < end and any(data[offset:end]):
            return Problem(file, offset, "torn record header at end of log")
        return None
    return Problem(file, offset, f"torn record: size {size} runs past end of log")


def index_path(log: Path) -> Path:
    return log.with_name(log.name + ".idx")


def chain_ends_cleanly(data: bytes | mmap.mmap, header: int) -> bool:
    """Does the record chain from `header` reach EOF or a zero tail with every
    size in bounds?  (Deciding the log header size, spec §2.)"""
    offset, end = header, len(data)
    while offset + RECORD.size <= end:
        size, _, stamp = RECORD.unpack_from(data, offset)
        if stamp == 0:
            return not any(data[offset:end])
        if size > MAX_PAYLOAD or offset + RECORD.size + size > end:
            return False
        offset += RECORD.size + size
    return offset == end or not any(data[offset:end])


def log_header_size(log: Path, data: bytes | mmap.mmap) -> int:
    """8 (as wal.go writes) or 16 (as the document draws it)."""
    idx = read_prefix(index_path(log), 16 + INDEX_RECORD.size)
    if len(idx) == 16 + INDEX_RECORD.size and idx[:4] == IDX_MAGIC:
        _, _, first = INDEX_RECORD.unpack_from(idx, 16)
        if first in (8, 16):
            return first
    if len(data) <= 16:
        return 16 if len(data) == 16 or len(data) < 8 else 8
    if chain_ends_cleanly(data, 16):
        return 16
    if chain_ends_cleanly(data, 8):
        return 8
    return 16


def looks_like_generation_a(log: Path, data: bytes | mmap.mmap) -> bool:
    """April-2015 files (8-byte headers, 24-byte log and 32-byte index
    records) share the version byte; no build wrote them well-formed, so
    they are reported, not decoded (spec §8)."""
    idx_size = index_path(log).stat().st_size if index_path(log).exists() else 0
    geometry_a = idx_size > 8 and (idx_size - 8) % 32 == 0 and (idx_size - 16) % 24 != 0
    return geometry_a and not chain_ends_cleanly(data, 16) and not chain_ends_cleanly(data, 8)


class Bucketer:
    """UTC time bucket names, memoised per bucket (a log has few buckets)."""

    def __init__(self, unit: str) -> None:
        self.seconds = BUCKET_SECONDS[unit]
        self.pattern = BUCKET_PATTERN[unit]
        self.names: dict[int, str] = {}

    def name(self, time_ns: int) -> str:
        bucket = time_ns // 1_000_000_000 // self.seconds
        name = self.names.get(bucket)
        if name is None:
            name = time.strftime(self.pattern, time.gmtime(bucket * self.seconds))
            self.names[bucket] = name
        return name

    def span(self, time_ns: int) -> tuple[str, int, int]:
        """name(time_ns), and where its bucket starts and ends (ns, the end
        excluded): a run's records, in time order, fall in one bucket after
        another, so a decoder asks again only past the end."""
        width = self.seconds * 1_000_000_000
        start = time_ns // width * width
        return self.name(time_ns), start, start + width


def encode_record(payload: bytes, time_ns: int, flags: int = 0) -> bytes:
    if len(payload) > MAX_PAYLOAD:
        raise BadRecord(f"payload of {len(payload)} bytes exceeds wallaby's {MAX_PAYLOAD}")
    return RECORD.pack(len(payload), flags, time_ns) + payload


def encode_index_record(time_ns: int, seq: int, offset: int) -> bytes:
    return INDEX_RECORD.pack(time_ns, seq, offset)


def encode_header(magic: bytes, flags: int = 0, ttl_ns: int = 0) -> bytes:
    return HEADER_16.pack(magic[:3], 1, flags, ttl_ns)


def create_pair(log: Path, flags: int = 0, ttl_ns: int = 0) -> None:
    """A new log and index, both with the 16-byte header the document draws."""
    log.write_bytes(encode_header(LOG_MAGIC, flags, ttl_ns))
    index_path(log).write_bytes(encode_header(IDX_MAGIC, flags, ttl_ns))
