"""Splice Parquet files: keep one file's bytes as a prefix and put another
file's row groups after them, under one new footer.

Why: a twin must never change under a reader that learnt its size before
it changed (Spark's driver lists sizes, its executors open the files
seconds later and read the footer at the listed length).  If every new
version of a twin starts with the previous version's bytes, a reader that
holds the old size reads exactly the old file, whichever version it opens.

A Parquet file is `PAR1`, column chunks, then the footer (Thrift
FileMetaData), its length and `PAR1`; the footer locates every column chunk
by its absolute offset, and readers never look between chunks.  So
`splice(base, part, out)` writes `out` = base's bytes + part's bytes up to
its footer + a footer holding part's row groups with every offset moved by
len(base) (and, with keep_base_rows, base's row groups first: a grown view
appends only its new rows).  pyarrow writes offsets from where its writer
starts and refuses to start past 0 ("Appending to file not implemented"),
and its FileMetaData cannot move offsets, so the footer is rewritten here
with a minimal Thrift compact-protocol codec (the format's spec:
parquet-format's parquet.thrift)."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path
from typing import Any

MAGIC = b"PAR1"

# Thrift compact protocol types
STOP, TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT, UUID = range(14)

# parquet.thrift field ids
FILE_NUM_ROWS, FILE_ROW_GROUPS, FILE_KEY_VALUES = 3, 4, 5
GROUP_COLUMNS, GROUP_FILE_OFFSET, GROUP_ORDINAL = 1, 5, 7
CHUNK_FILE_OFFSET, CHUNK_META, CHUNK_OFFSET_INDEX, CHUNK_COLUMN_INDEX = 2, 3, 4, 6
# ColumnMetaData: data page, index page, dictionary page, bloom filter offsets
META_OFFSETS = (9, 10, 11, 14)


class Struct(dict):
    """A decoded Thrift struct: field id -> (type, value), in wire order."""


# -- Thrift compact protocol -------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        self.pos += 1
        return self.data[self.pos - 1]

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        self.pos += n
        return self.data[self.pos - n : self.pos]

    def value(self, kind: int) -> Any:
        if kind in (TRUE, FALSE):
            return kind == TRUE
        if kind == BYTE:
            return self.byte()
        if kind in (I16, I32, I64):
            return self.zigzag()
        if kind == DOUBLE:
            return self.take(8)
        if kind == BINARY:
            return self.take(self.varint())
        if kind == UUID:
            return self.take(16)
        if kind in (LIST, SET):
            head = self.byte()
            size = head >> 4 if head >> 4 != 15 else self.varint()
            item = head & 0x0F
            values = [self.byte() == TRUE if item in (TRUE, FALSE) else self.value(item) for _ in range(size)]
            return (item, values)
        if kind == MAP:
            size = self.varint()
            types = self.byte() if size else 0
            pairs = [(self.value(types >> 4), self.value(types & 0x0F)) for _ in range(size)]
            return (types, pairs)
        if kind == STRUCT:
            return self.struct()
        raise ValueError(f"not a Parquet footer: unknown Thrift type {kind}")

    def struct(self) -> Struct:
        fields = Struct()
        last = 0
        while True:
            head = self.byte()
            kind = head & 0x0F
            if kind == STOP:
                return fields
            fid = last + (head >> 4) if head >> 4 else self.zigzag()
            fields[fid] = (kind, self.value(kind))
            last = fid


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _zigzag(n: int) -> bytes:
    return _varint((n << 1) ^ (n >> 63))


def _encode(kind: int, value: Any) -> bytes:
    if kind in (TRUE, FALSE):
        return b""  # a struct field's value lives in its header
    if kind == BYTE:
        return bytes([value])
    if kind in (I16, I32, I64):
        return _zigzag(value)
    if kind in (DOUBLE, UUID):
        return value
    if kind == BINARY:
        return _varint(len(value)) + value
    if kind in (LIST, SET):
        item, values = value
        head = (
            bytes([len(values) << 4 | item])
            if len(values) < 15
            else bytes([0xF0 | item]) + _varint(len(values))
        )
        if item in (TRUE, FALSE):
            return head + bytes(TRUE if v else FALSE for v in values)
        return head + b"".join(_encode(item, v) for v in values)
    if kind == MAP:
        types, pairs = value
        if not pairs:
            return b"\0"
        body = b"".join(_encode(types >> 4, k) + _encode(types & 0x0F, v) for k, v in pairs)
        return _varint(len(pairs)) + bytes([types]) + body
    if kind == STRUCT:
        return encode_struct(value)
    raise ValueError(f"unknown Thrift type {kind}")


def encode_struct(fields: Struct) -> bytes:
    out = bytearray()
    last = 0
    for fid in sorted(fields):
        kind, value = fields[fid]
        if kind in (TRUE, FALSE):
            kind = TRUE if value else FALSE
        if 0 < fid - last <= 15:
            out.append((fid - last) << 4 | kind)
        else:
            out.append(kind)
            out += _zigzag(fid)
        out += _encode(kind, value)
        last = fid
    out.append(STOP)
    return bytes(out)


# -- footers -----------------------------------------------------------------


def read_footer(path: Path) -> tuple[Struct, int]:
    """A Parquet file's FileMetaData and where it starts."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(size - 8)
        tail = f.read(8)
        if size < 12 or tail[4:] != MAGIC:
            raise ValueError(f"{path}: not a Parquet file")
        length = struct.unpack("<I", tail[:4])[0]
        start = size - 8 - length
        f.seek(start)
        return _Reader(f.read(length)).struct(), start


def _shift(fields: Struct, fid: int, delta: int) -> None:
    if fid in fields:
        kind, value = fields[fid]
        fields[fid] = (kind, value + delta)


def _moved_groups(meta: Struct, delta: int, ordinal_base: int) -> list[Struct]:
    """meta's row groups with every file offset moved by `delta`."""
    groups = meta.get(FILE_ROW_GROUPS, (LIST, (STRUCT, [])))[1][1]
    for n, group in enumerate(groups):
        _shift(group, GROUP_FILE_OFFSET, delta)
        if GROUP_ORDINAL in group:
            group[GROUP_ORDINAL] = (I16, ordinal_base + n)
        for chunk in group[GROUP_COLUMNS][1][1]:
            for fid in (CHUNK_FILE_OFFSET, CHUNK_OFFSET_INDEX, CHUNK_COLUMN_INDEX):
                _shift(chunk, fid, delta)
            if CHUNK_META in chunk:
                for fid in META_OFFSETS:
                    _shift(chunk[CHUNK_META][1], fid, delta)
    return groups


def key_values(meta: Struct) -> dict[bytes, bytes]:
    pairs = meta.get(FILE_KEY_VALUES, (LIST, (STRUCT, [])))[1][1]
    return {kv[1][1]: kv.get(2, (BINARY, b""))[1] for kv in pairs}


def splice(base: Path | None, part: Path, out: Path, keep_base_rows: bool, extra: dict[str, str]) -> None:
    """out = base's bytes (if any) + part's row groups + one footer: part's
    schema, part's row groups (after base's with keep_base_rows, whose
    schema must then be part's), and part's key-values plus `extra`.
    Without a base, part itself is renamed to out."""
    meta, part_end = read_footer(part)
    prefix = 0
    groups: list[Struct] = []
    rows = 0
    if base is not None:
        base_meta, _ = read_footer(base)
        prefix = base.stat().st_size
        if keep_base_rows:
            groups = _moved_groups(base_meta, 0, 0)
            rows = base_meta[FILE_NUM_ROWS][1]
    groups += _moved_groups(meta, prefix, len(groups))
    meta[FILE_ROW_GROUPS] = (LIST, (STRUCT, groups))
    meta[FILE_NUM_ROWS] = (I64, rows + meta[FILE_NUM_ROWS][1])
    kv = key_values(meta) | {k.encode(): v.encode() for k, v in extra.items()}
    meta[FILE_KEY_VALUES] = (
        LIST,
        (STRUCT, [Struct({1: (BINARY, k), 2: (BINARY, v)}) for k, v in kv.items()]),
    )
    tail = encode_struct(meta)
    tail += struct.pack("<I", len(tail)) + MAGIC
    if base is None:  # part becomes out: only its footer changes
        with open(part, "r+b") as f:
            f.truncate(part_end)
            f.seek(part_end)
            f.write(tail)
        os.replace(part, out)
        return
    shutil.copyfile(base, out)
    with open(out, "ab") as dst, open(part, "rb") as src:
        shutil.copyfileobj(_Limited(src, part_end), dst, 1 << 20)
        dst.write(tail)


class _Limited:
    """The first `limit` bytes of a file, for copyfileobj."""

    def __init__(self, f: Any, limit: int) -> None:
        self.f, self.left = f, limit

    def read(self, n: int) -> bytes:
        data = self.f.read(min(n, self.left))
        self.left -= len(data)
        return data
