"""The LZ4 frame container of compressed segments (options bit 0x2, spec §7),
read block by block so a scan can resume at any block boundary.

Beats (pierrec/lz4 v4) writes independent 4 MB blocks, so a block decodes on
its own.  A frame with *linked* blocks (FLG bit 5 clear; not written by Beats
but legal LZ4) needs the previous 64 KiB of output as a dictionary: such a
segment is still read, but decoding resumes from the first block of the
frame (the chunk state says so), so its random reads cost a decode of the
segment up to the chunk.

The frame's content checksum (xxh32 of all its uncompressed bytes, after the
end mark) is verified once, when a scan reaches the end mark: blocks() hashes
what it decodes when it starts at the frame's first block, and a scan that
resumed mid-frame (a grown segment) hashes the frame once more from its
start (content_error)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import lz4.block
import xxhash

MAGIC = b"\x04\x22\x4d\x18"
END_MARK = b"\x00\x00\x00\x00"
RAW_BIT = 0x80000000
BLOCK_SIZES = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}
# pierrec/lz4 v4 NewWriter defaults: 4 MB independent blocks, content checksum.
BEATS_HEADER = bytes.fromhex("04224d186470b9")
BEATS_BLOCK = 4 << 20
_u32 = struct.Struct("<I")

# Reads `n` bytes of the container at container offset `c` (decrypting if needed).
ReadAt = Callable[[int, int], bytes]


class Lz4Error(ValueError):
    pass


@dataclass(frozen=True)
class Lz4Header:
    linked: bool
    block_checksum: bool
    content_checksum: bool
    content_size: bool
    max_block: int
    size: int  # header length in bytes

    def describe(self) -> dict:
        return {
            "block_max": self.max_block,
            "linked_blocks": self.linked,
            "content_checksum": self.content_checksum,
        }


def parse_header(head: bytes) -> Lz4Header:
    if len(head) < 7:
        raise Lz4Error("truncated LZ4 frame header")
    if head[:4] != MAGIC:
        raise Lz4Error(f"not an LZ4 frame (magic {head[:4].hex()})")
    flg, bd = head[4], head[5]
    if flg >> 6 != 1:
        raise Lz4Error(f"unsupported LZ4 frame version {flg >> 6}")
    if flg & 0x02 or bd & 0x8F:
        raise Lz4Error("reserved LZ4 header bits set")
    max_block = BLOCK_SIZES.get((bd >> 4) & 7)
    if max_block is None:
        raise Lz4Error(f"invalid LZ4 block size code {(bd >> 4) & 7}")
    size = 7 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if len(head) < size:
        raise Lz4Error("truncated LZ4 frame header")
    return Lz4Header(
        linked=not flg & 0x20,
        block_checksum=bool(flg & 0x10),
        content_checksum=bool(flg & 0x04),
        content_size=bool(flg & 0x08),
        max_block=max_block,
        size=size,
    )


@dataclass
class Block:
    c: int  # container offset of the block's size field
    u: int  # uncompressed offset of its first byte
    data: bytes


@dataclass
class Tail:
    """How the block sequence ended."""

    kind: str  # "end" (end mark), "eof" (no end mark yet), "bad"
    c: int  # container offset of the end mark / of the first unread byte
    error: str = ""
    trailing: int = 0  # bytes after the frame's end (kind "end")
    # xxh32 of the whole content (kind "end", a frame with a content checksum,
    # decoded from its first block); None when this pass started mid-frame.
    digest: int | None = None


def blocks(read: ReadAt, avail: int, header: Lz4Header, c: int, u: int, tail: list[Tail]) -> Iterator[Block]:
    """Decode blocks from container offset `c` (uncompressed offset `u`).
    For linked frames `c`, `u` must be the first block.  Appends one Tail
    to `tail` when the sequence stops."""
    history = b""
    extra = 4 if header.block_checksum else 0
    decompress = lz4.block.decompress
    # Hash the content only when all of it passes through here.
    hasher = xxhash.xxh32() if header.content_checksum and c == header.size and u == 0 else None
    while True:
        if c + 4 > avail:
            tail.append(Tail("eof", c))
            return
        (word,) = _u32.unpack(read(c, 4))
        if word == 0:
            after = c + 4 + (4 if header.content_checksum else 0)
            if after > avail:
                tail.append(Tail("eof", c))
            else:
                digest = hasher.intdigest() if hasher is not None else None
                tail.append(Tail("end", c, trailing=avail - after, digest=digest))
            return
        size = word & ~RAW_BIT
        if size > header.max_block:
            tail.append(Tail("bad", c, f"LZ4 block size {size} above the frame's maximum {header.max_block}"))
            return
        if c + 4 + size + extra > avail:
            tail.append(Tail("eof", c))
            return
        raw = read(c + 4, size)
        if word & RAW_BIT:
            data = bytes(raw)
        else:
            try:
                if header.linked:
                    data = decompress(raw, uncompressed_size=header.max_block, dict=history)
                else:
                    data = decompress(raw, uncompressed_size=header.max_block)
            except Exception as exc:
                tail.append(Tail("bad", c, f"LZ4 block does not decode: {exc}"))
                return
        if header.linked:
            history = (history + data)[-65536:]
        if hasher is not None:
            hasher.update(data)
        yield Block(c, u, data)
        c += 4 + size + extra
        u += len(data)


def content_error(read: ReadAt, avail: int, header: Lz4Header, end: Tail) -> str | None:
    """Why the content checksum after the end mark `end` fails, or None (it
    matches, or the frame has none).  Decodes the frame once more from its
    first block when `end` came from a pass that started mid-frame."""
    if not header.content_checksum or end.kind != "end":
        return None
    (stored,) = _u32.unpack(read(end.c + 4, 4))
    digest = end.digest
    if digest is None:
        again: list[Tail] = []
        for _ in blocks(read, avail, header, header.size, 0, again):
            pass
        if not again or again[0].kind != "end":
            return None  # the frame changed under us; the next scan sees it whole
        digest = again[0].digest
    if digest == stored:
        return None
    return f"LZ4 content checksum {stored:08x} differs from the content's xxh32 {digest:08x}"


def xxh32(data: bytes) -> int:
    """xxh32 (seed 0) of `data`: the LZ4 content checksum."""
    return xxhash.xxh32_intdigest(data)


def encode_blocks(data: bytes, max_block: int = BEATS_BLOCK) -> bytes:
    """Independent blocks for `data` (no end mark): compressed when that is
    smaller, stored raw otherwise."""
    out = bytearray()
    for i in range(0, len(data), max_block):
        piece = data[i : i + max_block]
        packed = lz4.block.compress(piece, store_size=False)
        if len(packed) < len(piece):
            out += _u32.pack(len(packed)) + packed
        else:
            out += _u32.pack(len(piece) | RAW_BIT) + piece
    return bytes(out)
