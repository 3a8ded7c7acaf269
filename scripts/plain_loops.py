"""The benchmark's baselines: decode + render native files the plainest way.

Each loop reads one native file and returns the JSON Lines bytes its record
view shows, single-threaded, each record dumped as soon as it is decoded
(no list of dicts kept) and its line appended to one buffer (no list of
lines kept: orjson 3.12+ returns each line in an allocation of at least
4 KiB, so 100 MB of Beats held 1.5 GB of lines, and the loop ran 7-19 %
slower at 20-100 MB and 2.2x slower at 1 GB than appending each line to
a bytearray), with the cyclic GC paused, and with nothing of
fmtfs in it (only the byte layouts of `/work/shared/specs`, struct, zlib,
cbor2 and orjson).  They are what "as tight as a plain loop" means in
`scripts/bench.py`: fmtfs's own decode is measured against them, so they
must not share its code (a slow helper would slow both sides alike).

Formats whose records need a real schema machinery to decode (proio's
protobuf entries, gvfs's tree replay) have no loop here; the bench measures
them against fmtfs's in-process single-thread decode instead and says so.

The bench's process keeps the heap memory it frees (keep_freed_heap): a
loop then runs at its best speed from its first pass, whichever format ran
before it.
"""

from __future__ import annotations

import base64
import gc
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import cbor2
import orjson

LINE = orjson.OPT_APPEND_NEWLINE
_HOURS: dict[int, str] = {}  # whole hour -> "YYYY-MM-DDTHH:"
_MINUTES_SECONDS = [f"{s // 60:02d}:{s % 60:02d}" for s in range(3600)]


def _second_text(seconds: int) -> str:
    """ "YYYY-MM-DDTHH:MM:SS": the hour memoised, minutes and seconds from a
    table (records a minute apart share no second, but an hour)."""
    hour, of_hour = divmod(seconds, 3600)
    head = _HOURS.get(hour)
    if head is None:
        tm = time.gmtime(hour * 3600)
        head = _HOURS[hour] = f"{tm.tm_year:04d}-{tm.tm_mon:02d}-{tm.tm_mday:02d}T{tm.tm_hour:02d}:"
    return head + _MINUTES_SECONDS[of_hour]


def rfc3339_ns(ns: int) -> str:
    seconds, fraction = divmod(ns, 1_000_000_000)
    return f"{_second_text(seconds)}.{str(fraction + 1_000_000_000)[1:]}Z"  # faster than :09d


def rfc3339_ms(ms: int) -> str:
    seconds, fraction = divmod(ms, 1000)
    return f"{_second_text(seconds)}.{str(fraction + 1000)[1:]}Z"


def _data(record: dict, payload: bytes) -> dict:
    try:
        record["data"] = payload.decode("utf-8")
    except UnicodeDecodeError:
        record["data_base64"] = base64.b64encode(payload).decode("ascii")
    return record


# glibc's mallopt: heap memory freed at its top is returned to the kernel past
# this much (M_TRIM_THRESHOLD; 128 KiB, raised by glibc itself as buffers over
# it are freed).  A pass of a loop frees hundreds of MB of records and lines
# at a time: returned, then faulted in again by the next pass (130,000 page
# faults per 20 MB of kestrel, 200,000 of wallaby), the same loop ran up to
# 2.4x slower in a fresh process than after another format's 25 MB buffers
# had raised the threshold, and every baseline depended on which format ran
# before it.  Kept (and faulted in once, by a pass that is not timed), the
# loops run at their best: kestrel 0.58 -> 0.23 s, wallaby 0.95 -> 0.60 s,
# Beats 0.61 -> 0.47 s per 20 MB.
M_TRIM_THRESHOLD = -1
KEPT_HEAP = 1 << 30


def keep_freed_heap() -> None:
    """Make this process keep KEPT_HEAP of freed heap (the baselines run
    here): each loop then runs as fast as it can from its first pass."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").mallopt(M_TRIM_THRESHOLD, KEPT_HEAP)
    except (OSError, AttributeError):  # not glibc: its own allocator's defaults
        pass


@contextmanager
def gc_paused() -> Iterator[None]:
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def beats_segment(path: Path) -> bytes:
    """A plaintext version-2 segment (12-byte header): frame walk, CRC-32,
    cbor2, RFC 3339 nanoseconds, orjson."""
    data = path.read_bytes()
    view = memoryview(data)
    unpack_u32 = struct.Struct("<I").unpack_from
    unpack_footer = struct.Struct("<II").unpack_from
    crc32, loads, dumps = zlib.crc32, cbor2.loads, orjson.dumps
    out = bytearray()
    offset, end = 12, len(data)
    with gc_paused():
        while offset + 4 <= end:
            (size,) = unpack_u32(data, offset)
            if size <= 12 or offset + size > end:
                break
            crc, repeated = unpack_footer(data, offset + size - 8)
            if repeated != size or crc != crc32(view[offset : offset + size - 8]):
                break
            event = loads(view[offset + 4 : offset + size - 8])
            event["timestamp"] = rfc3339_ns(event["timestamp"])
            out += dumps(event, option=LINE)
            offset += size
        return bytes(out)


def wallaby_log(path: Path) -> bytes:
    """A wallaby log (header size from its index's first record):
    {"index", "time", "flags", "data"|"data_base64"} per record."""
    data = path.read_bytes()
    idx = path.with_name(path.name + ".idx").read_bytes()
    offset = int.from_bytes(idx[32:40], "little") if len(idx) >= 40 else 16
    unpack = struct.Struct("<IIq").unpack_from
    dumps = orjson.dumps
    out = bytearray()
    end, seq = len(data), 0
    with gc_paused():
        while offset + 16 <= end:
            size, flags, stamp = unpack(data, offset)
            if stamp == 0 or offset + 16 + size > end:
                break
            body = offset + 16
            record = {"index": seq, "time": rfc3339_ns(stamp), "flags": flags}
            out += dumps(_data(record, data[body : body + size]), option=LINE)
            seq += 1
            offset = body + size
        return bytes(out)


def kestrel_writer_file(path: Path) -> bytes:
    """A kestrel 3 writer file: its PUT records as
    {"id", "add_time", ["expire_time"], "error_count", "data"|"data_base64"}."""
    data = path.read_bytes()
    put = struct.Struct("<iiqq").unpack_from
    expiry = struct.Struct("<q").unpack_from
    word = struct.Struct("<i").unpack_from
    dumps = orjson.dumps
    out = bytearray()
    pos, end = 4, len(data)
    with gc_paused():
        while pos < end and data[pos]:
            cmd, hs = data[pos] >> 4, data[pos] & 0xF
            if cmd == 8:
                size, errors, ident, added = put(data, pos + 1)
                record = {"id": ident, "add_time": rfc3339_ms(added)}
                if hs > 6:
                    record["expire_time"] = rfc3339_ms(expiry(data, pos + 25)[0])
                record["error_count"] = errors
                start = pos + 1 + 4 * hs
                out += dumps(_data(record, data[start : start + size]), option=LINE)
                pos = start + size
            else:
                size = word(data, pos + 1)[0] if cmd >= 8 else 0
                pos += 1 + 4 * hs + size
        return bytes(out)


# format -> (the native files of a source its loop reads, the loop)
PLAIN_LOOPS: dict[str, tuple[Callable[[Path], list[Path]], Callable[[Path], bytes]]] = {
    "beats": (lambda source: sorted(source.glob("*.seg")), beats_segment),
    "wallaby": (
        lambda source: sorted(p.with_suffix("") for p in source.glob("*.idx")),
        wallaby_log,
    ),
    "kestrel": (
        lambda source: sorted(
            p for p in source.iterdir() if p.suffix[1:].isdigit() and ".read." not in p.name
        ),
        kestrel_writer_file,
    ),
}
