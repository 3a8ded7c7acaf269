"""Frames (spec §4): u32 frameSize | payload | u32 CRC-32 | u32 frameSize,
frameSize = payload + 12, CRC over the size field and the payload."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from fmtfs.formats.base import grid_cuts
from fmtfs.formats.beats.payload import PayloadError, opaque
from fmtfs.gcpause import paused

FRAME_OVERHEAD = 12
_u32 = struct.Struct("<I")
_footer = struct.Struct("<II")


def encode_frame(payload: bytes) -> bytes:
    size = len(payload) + FRAME_OVERHEAD
    head = _u32.pack(size)
    return head + payload + _footer.pack(zlib.crc32(payload, zlib.crc32(head)), size)


# Why a walk stopped.
MORE = "more"  # a record/byte limit was reached on a frame boundary
END = "end"  # the buffer ended exactly on a frame boundary
PARTIAL = "partial"  # the buffer ends inside a frame
ZERO = "zero"  # a zero tail (size 0 and nothing but zeros after it)
BAD = "bad"  # a damaged frame at `end`


@dataclass
class Walk:
    records: list[Any] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)  # buffer offset of each frame (if asked)
    end: int = 0  # buffer offset after the last good frame
    status: str = END
    error: str = ""
    payload_errors: list[tuple[int, str]] = field(default_factory=list)  # (offset, message)


def _all_zero(view: memoryview) -> bool:
    return not bytes(view).strip(b"\0")


def walk(
    buf: memoryview,
    i: int,
    stop: int,
    decode: Callable[[memoryview], Any],
    max_records: int = 1 << 62,
    max_bytes: int = 1 << 62,
    positions: bool = False,
) -> Walk:
    """Check and decode frames of `buf[i:stop]`, stopping at a limit, at the
    end of the data or at the first damaged frame."""
    out = Walk()
    # Thousands of fresh dicts per call would trigger the cyclic GC over and
    # over (a third of the scan time); none of them can form a cycle.
    with paused():
        out.records = list(frames(buf, i, stop, decode, out, max_records, max_bytes, positions))
    return out


def frames(
    buf: memoryview,
    i: int,
    stop: int,
    decode: Callable[[memoryview], Any],
    out: Walk,
    max_records: int = 1 << 62,
    max_bytes: int = 1 << 62,
    positions: bool = False,
) -> Iterator[Any]:
    """The decoded payload of every good frame of `buf[i:stop]`, yielded as
    soon as it is decoded (a renderer dumps it at once: no chunk's worth of
    records is kept).  Once exhausted, `out` says where and why it stopped
    (end, status, error, payload errors, positions if asked); its records
    stay empty.  The caller pauses the GC (fmtfs.gcpause)."""
    byte_limit = i + max_bytes
    where = out.positions.append if positions else None
    unpack_u32 = _u32.unpack_from
    unpack_footer = _footer.unpack_from
    crc32 = zlib.crc32
    status = END
    n = 0
    while i < stop:
        if n >= max_records or i >= byte_limit:
            status = MORE
            break
        if stop - i < 4:
            status = ZERO if _all_zero(buf[i:stop]) else PARTIAL
            break
        (size,) = unpack_u32(buf, i)
        if size <= FRAME_OVERHEAD:
            if size == 0 and _all_zero(buf[i:stop]):
                status = ZERO
            else:
                status = BAD
                out.error = f"implausible frame size {size}"
            break
        nxt = i + size
        if nxt > stop:
            status = PARTIAL
            break
        crc, repeated = unpack_footer(buf, nxt - 8)
        if repeated != size:
            status, out.error = BAD, f"frame size {size} does not match its repeated size {repeated}"
            break
        if crc32(buf[i : nxt - 8]) != crc:
            status, out.error = BAD, f"frame checksum mismatch (stored {crc:#010x})"
            break
        payload = buf[i + 4 : nxt - 8]
        try:
            record = decode(payload)
        except PayloadError as exc:
            record = opaque(payload)
            out.payload_errors.append((i, str(exc)))
        if where is not None:
            where(i)
        n += 1
        i = nxt
        yield record
    out.end = i
    out.status = status


# A frame start found near a grid line is confirmed by its checksum and by
# the frames that follow it (each ending with its size repeated); searched
# for within SEARCH bytes of the line, else walked to from the last start.
CHAIN = 4
SEARCH = 64 << 10


def grid_frame_starts(buf: memoryview, i: int, stop: int, every: int, grid: int) -> Iterator[int]:
    """The first frame at or past grid lines (multiples of `grid`) about
    `every` bytes apart (base.grid_cuts), from the frame at `i` on, found
    without walking every frame: segment.chunk_bytes ends chunks at those
    frames, so each is a chunk start of every scan that reaches it.  Ends
    where neither the search nor a walk from the last start finds one."""

    def frame_at(last: int, line: int) -> int | None:
        at = _frame_near(buf, line, stop)
        return _walked_to(buf, last, line, stop) if at is None else at

    return grid_cuts(i, stop, every, grid, frame_at)


def _frame_near(buf: memoryview, line: int, stop: int) -> int | None:
    unpack_u32 = _u32.unpack_from
    for q in range(line, min(line + SEARCH, stop - FRAME_OVERHEAD)):
        (size,) = unpack_u32(buf, q)
        if FRAME_OVERHEAD < size and q + size <= stop and unpack_u32(buf, q + size - 4)[0] == size:
            if _frames_follow(buf, q, stop):
                return q
    return None


def _frames_follow(buf: memoryview, i: int, stop: int) -> bool:
    """Whether a whole frame with the right checksum starts at `i`, and
    CHAIN - 1 more (or as many as `stop` leaves room for) after it."""
    (size,) = _u32.unpack_from(buf, i)
    crc, _ = _footer.unpack_from(buf, i + size - 8)
    if zlib.crc32(buf[i : i + size - 8]) != crc:
        return False
    for _ in range(CHAIN):
        if stop - i < FRAME_OVERHEAD:
            return True
        (size,) = _u32.unpack_from(buf, i)
        if size == 0:  # the written frames end here
            return True
        if size <= FRAME_OVERHEAD or i + size > stop or _u32.unpack_from(buf, i + size - 4)[0] != size:
            return False
        i += size
    return True


def _walked_to(buf: memoryview, i: int, line: int, stop: int) -> int | None:
    """The first frame at or past `line`, walked to by the sizes from the
    frame at `i` (frames longer than SEARCH: few to walk)."""
    unpack_u32 = _u32.unpack_from
    while i < line:
        if stop - i < 4:
            return None
        (size,) = unpack_u32(buf, i)
        if size <= FRAME_OVERHEAD or i + size > stop:
            return None
        i += size
    return i if i < stop else None


def first_frame_ok(buf: bytes, complete: bool) -> bool | None:
    """Whether plaintext `buf` starts with a valid frame (None: too little
    data to tell; `complete` says no more data follows `buf`).  Used to
    confirm a key or a layout."""
    if len(buf) < 4:
        return False if complete and buf else None
    (size,) = _u32.unpack_from(buf, 0)
    if size <= FRAME_OVERHEAD:
        return False
    if size > len(buf):
        return False if complete else None
    crc, repeated = _footer.unpack_from(buf, size - 8)
    return repeated == size and zlib.crc32(buf[: size - 8]) == crc
