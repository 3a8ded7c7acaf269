"""The wallaby write-ahead log: `<name>` LOG files with `<name>.idx` indexes.

Layout (specs/wallaby-log.md, generation B, little-endian):
  file header   "LOG"|"IDX", u8 version 1, u32 flags, [i64 ttl_ns]   (log: 8 or 16 bytes; idx: 16)
  log record    u32 size, u32 flags, i64 time_ns, payload[size]
  index record  i64 time_ns, u64 seq, i64 offset-of-log-record
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fmtfs.formats.base import (
    BadRecord,
    Chunk,
    Format,
    Problem,
    ReadOnlyView,
    Record,
    State,
    Stream,
    Writer,
    boundary,
)
from fmtfs.formats.files import fsync_path, read_prefix
from fmtfs.formats.schema import Field, Kind, ViewSchema
from fmtfs.formats.timerange import native_range
from fmtfs.formats.wallaby_card import CARD, LOG_MAGIC, is_log
from fmtfs.shape import (
    HOUR_HEADS,
    MINUTES_SECONDS,
    encode_name,
    hour_text,
    parse_time,
    put_data,
    take_data,
)

IDX_MAGIC = b"IDX\x01"
HEADER_16 = struct.Struct("<3sBIq")
RECORD = struct.Struct("<IIq")
INDEX_RECORD = struct.Struct("<qQq")
MAX_PAYLOAD = 64 * 1024  # v1.Create's maxSize: what a real reader accepts
CHUNK_RECORDS = 4096
CHUNK_BYTES = 1 << 20

# Every view (`<name>/records.jsonl`, `<name>/buckets/<b>.jsonl`) holds record lines.
RECORD_SCHEMA = ViewSchema(
    Field("index", Kind.INT), Field.time("time", "ns"), Field("flags", Kind.INT), Field("data", Kind.BYTES)
)

BUCKET_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}
BUCKET_PATTERN = {"minute": "%Y-%m-%dT%H:%M", "hour": "%Y-%m-%dT%H", "day": "%Y-%m-%d"}


class _IndexOffsets:
    """A log's index file as the offsets of its records (section 4 of the
    spec: record i at 16 + 24 * i), mapped, for cuts(): a few looked up per
    chunk.  Only a hint: a cut it gives wrong costs time, never correctness
    (fmtfs.scanning checks every join)."""

    def __init__(self, mapped: mmap.mmap) -> None:
        self.mapped = mapped
        self.count = (len(mapped) - 16) // INDEX_RECORD.size  # a partial last record is not one

    @classmethod
    @contextmanager
    def of(cls, path: Path) -> Iterator[_IndexOffsets | None]:
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size > 16 else None
        except (OSError, ValueError):
            mapped = None
        if mapped is None or mapped[:4] != IDX_MAGIC:
            yield None
        else:
            with mapped:
                yield cls(mapped)

    def offset(self, i: int) -> int | None:
        """Where record i's header starts in the log, or None when the index
        does not hold it (or holds another sequence number there)."""
        if not 0 <= i < self.count:
            return None
        _, seq, offset = INDEX_RECORD.unpack_from(self.mapped, 16 + INDEX_RECORD.size * i)
        return offset if seq == i else None


def _cuts_by_index(
    data: mmap.mmap, index: _IndexOffsets, offset: int, seq: int, every: int
) -> Iterator[tuple[int, State]]:
    """cuts() from `index`: a chunk from record `seq` at `offset` ends after
    CHUNK_RECORDS records, or at the first record starting CHUNK_BYTES or
    more past it (found by bisection: offsets grow); each cut is checked to
    be a whole record of the log."""
    end, head, last = len(data), RECORD.size, offset
    while True:
        # the chunk's last possible end the index knows of
        after = min(seq + CHUNK_RECORDS, index.count - 1)
        at = index.offset(after)
        if at is None or after <= seq:
            return  # the index ends (or lags, or lies) here: the last range scans the rest
        if at - offset >= CHUNK_BYTES:
            low, high = seq + 1, after  # the first record starting CHUNK_BYTES past is in (seq, after]
            while low < high:
                middle = (low + high) // 2
                found = index.offset(middle)
                if found is None:
                    return
                if found - offset >= CHUNK_BYTES:
                    high = middle
                else:
                    low = middle + 1
            after, at = low, index.offset(low)
        elif after < seq + CHUNK_RECORDS:
            return  # the index ends inside the chunk: where it ends is not known
        if at is None or not offset < at <= end - head:
            return
        size, _, stamp = RECORD.unpack_from(data, at)
        if stamp == 0 or at + head + size > end:
            return
        offset, seq = at, after
        if offset - last >= every:
            yield offset, {"seq": seq}
            last = offset


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


class WallabyLog(Stream):
    """One log file; records are scanned from the log itself, which is the
    truth: a missing or lagging .idx only matters to the writer."""

    renderer_version = 2
    time_field = ("time", "ns")  # the time column and its unit (time filters)

    def __init__(self, path: Path, time_bucket: str) -> None:
        self.folder = encode_name(path.name)
        super().__init__(self.folder, path)
        self.bucketer = Bucketer(time_bucket)
        self.records_view = f"{self.folder}/records.jsonl"

    def view_paths(self) -> list[str]:
        return [self.records_view]

    def scan(
        self, start: int | None, state: State | None, stop: int | None = None
    ) -> Iterator[Chunk | Problem]:
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                if start is None:
                    first = self._first(data)
                    if isinstance(first, Problem):
                        yield first
                        return
                    start, state = first
                assert state is not None
                yield from self._chunks(data, start, state["seq"], stop)

    def _first(self, data: mmap.mmap) -> tuple[int, State] | Problem:
        """Where the first record starts and its state, or why nothing does."""
        if data[:4] != LOG_MAGIC:
            return Problem(self.path.name, 0, "not a wallaby log (bad LOG signature or version)")
        if looks_like_generation_a(self.path, data):
            return Problem(self.path.name, 0, "generation A wallaby layout (April 2015) is not supported")
        return log_header_size(self.path, data), {"seq": 0}

    def _chunks(self, data: mmap.mmap, offset: int, seq: int, stop: int | None) -> Iterator[Chunk | Problem]:
        end = len(data)
        while True:
            if stop is not None and offset >= stop:
                yield boundary(offset, {"seq": seq})
                return
            stamps: list[int] = []
            records, after, problem = self._decode_run(data, offset, seq, CHUNK_RECORDS, end, stamps)
            count = len(records[self.records_view])
            if count:
                times = native_range(stamps, "ns")
                yield Chunk(offset, after, {"seq": seq}, records, times=times)
            if problem is not None:
                yield problem
                return
            if count < CHUNK_RECORDS and after - offset < CHUNK_BYTES:
                return  # the end of the records, not a chunk's limit
            offset, seq = after, seq + count

    def cuts(self, start: int | None, state: State | None, every: int) -> Iterator[tuple[int, State]]:
        """Chunk starts (_decode_run's limits) from the index's record
        offsets, a few looked up per chunk, when the index agrees with the
        log where the scan starts; else from the record sizes, walking every
        record header (0.11 s per 20 MB)."""
        with open(self.path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                first = self._first(data) if start is None else (start, state or {"seq": 0})
                if isinstance(first, Problem):
                    return
                offset, seq = first[0], first[1]["seq"]
                with _IndexOffsets.of(index_path(self.path)) as index:
                    if index is not None and index.offset(seq) == offset:
                        yield from _cuts_by_index(data, index, offset, seq, every)
                        return
                end = len(data)
                unpack = RECORD.unpack_from
                head = RECORD.size
                last = offset
                while True:
                    chunk, n = offset, 0
                    while n < CHUNK_RECORDS and offset - chunk < CHUNK_BYTES:
                        if offset + head > end:
                            return
                        size, _, stamp = unpack(data, offset)
                        if stamp == 0 or offset + head + size > end:
                            return
                        offset += head + size
                        n += 1
                    seq += n
                    if offset - last >= every and offset + head <= end:
                        yield offset, {"seq": seq}
                        last = offset

    def _decode_run(
        self,
        data: bytes | mmap.mmap,
        offset: int,
        seq: int,
        limit: int,
        end: int,
        stamps: list[int] | None = None,
        route: bool = True,
    ) -> tuple[dict[str, list[Record]], int, Problem | None]:
        """Up to `limit` records from `offset` (or CHUNK_BYTES of them); their
        native times go to `stamps` when given (a scan's chunk time range).
        `route` False: records.jsonl only, no time buckets (its reader's)."""
        keep_stamp = stamps.append if stamps is not None else None
        unpack = RECORD.unpack_from
        lines: list[Record] = []
        buckets: dict[str, list[Record]] = {}
        bucket: list[Record] = []
        since = until = 0  # the current bucket's span (ns): none yet
        # format_time(stamp) inlined (a third of this loop was its call): the
        # text up to the hour is looked up when the hour changes
        head, head_hour = "", None
        mm_ss = MINUTES_SECONDS
        folder = self.folder
        start = offset
        problem = None
        while len(lines) < limit and offset - start < CHUNK_BYTES:
            if offset + RECORD.size > end:
                if offset < end and any(data[offset:end]):
                    problem = Problem(self.path.name, offset, "torn record header at end of log")
                break
            size, flags, stamp = unpack(data, offset)
            if stamp == 0:
                break  # zero tail of a preallocated (mmap pre-extended) log
            body = offset + RECORD.size
            if body + size > end:
                problem = Problem(self.path.name, offset, f"torn record: size {size} runs past end of log")
                break
            seconds, fraction = divmod(stamp, 1_000_000_000)
            hour, of_hour = divmod(seconds, 3600)
            if hour != head_hour:
                head, head_hour = HOUR_HEADS.get(hour) or hour_text(hour), hour
            record = {
                "index": seq,
                "time": f"{head}{mm_ss[of_hour]}.{str(fraction + 1_000_000_000)[1:]}Z",
                "flags": flags,
            }
            payload = data[body : body + size]
            try:  # put_data's common case inlined: a call per record is a tenth of the decode
                record["data"] = payload.decode("utf-8")
            except UnicodeDecodeError:
                put_data(record, payload)
            lines.append(record)
            if keep_stamp is not None:
                keep_stamp(stamp)
            if route:
                if not since <= stamp < until:
                    name, since, until = self.bucketer.span(stamp)
                    bucket = buckets.setdefault(name, [])
                bucket.append(record)
            seq += 1
            offset = body + size
        views = {self.records_view: lines}
        for name, bucket in buckets.items():
            views[f"{folder}/buckets/{name}.jsonl"] = bucket
        return views, offset, problem

    def decode(self, chunk: Chunk) -> dict[str, list[Record]]:
        data = self._native(chunk)
        views, _, _ = self._decode_run(data, 0, chunk.state["seq"], 1 << 62, len(data))
        return views

    def view_records(self, chunk: Chunk, view: str) -> list[Record] | None:
        if view != self.records_view:
            return None
        data = self._native(chunk)
        views, _, _ = self._decode_run(data, 0, chunk.state["seq"], 1 << 62, len(data), route=False)
        return views[self.records_view]

    def _native(self, chunk: Chunk) -> bytes:
        with open(self.path, "rb") as f:
            f.seek(chunk.start)
            return f.read(chunk.end - chunk.start)


class WallabyFormat(Format, card=CARD):
    def logs(self) -> list[Path]:
        if self.source.is_file():
            return [self.source]
        return sorted(p for p in self.source.iterdir() if is_log(p))

    def streams(self) -> list[Stream]:
        bucket = self.options["time_bucket"]
        return [WallabyLog(p, bucket) for p in self.logs()]

    def writable_views(self, streams: list[Stream], views: Collection[str]) -> set[str]:
        # every log's records.jsonl (writer() looks for the log among all)
        return {s.records_view for s in streams if isinstance(s, WallabyLog)} & set(views)

    def view_schema(self, view_path: str) -> ViewSchema | None:
        return RECORD_SCHEMA if view_path.endswith(".jsonl") else None

    def info(self) -> dict[str, Any]:
        details = {}
        for log in self.logs():
            with open(log, "rb") as f:
                head = f.read(16)
                data = head + f.read(1 << 16)
            header = log_header_size(log, data)
            _, version, flags, ttl = HEADER_16.unpack_from(head.ljust(16, b"\0"))
            idx = index_path(log)
            details[encode_name(log.name)] = {
                "version": version,
                "header_size": header,
                "flags": flags,
                "ttl_ns": ttl if header == 16 else 0,
                "index": idx.name if idx.exists() else None,
                "index_records": max(0, (idx.stat().st_size - 16) // INDEX_RECORD.size)
                if idx.exists()
                else 0,
            }
        return {"logs": details}

    def writer(self, view_path: str, create: bool) -> Writer:
        for log in self.logs():
            if view_path == f"{encode_name(log.name)}/records.jsonl":
                if create:
                    raise FileExistsError(view_path)
                return WallabyWriter(log)
        raise ReadOnlyView(f"{view_path}: only <name>/records.jsonl takes appended records")


def _mapped(path: Path) -> bytes | mmap.mmap:
    """A file's bytes, mapped (b"" when it is empty: mmap refuses those)."""
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(f.fileno()).st_size else b""


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


class WallabyWriter(Writer):
    """Appends log records, then their index records (spec §7)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.idx = index_path(log)

    def _prepare(self) -> tuple[int, int, int]:
        """Bring the index in line with the log and cut a zero tail.
        Returns (log end, next seq, header flags).  Both files are mapped,
        not read: fmtfs calls this once per write() (a `cat >>` through a
        mount makes one every 128 KiB), and reading the whole index each
        time made appending to a 300,000-record log O(index size) per write."""
        data = _mapped(self.log)
        idx: bytes | mmap.mmap = b""
        try:
            if data[:4] != LOG_MAGIC:
                raise BadRecord(f"{self.log.name}: not a wallaby log")
            header = log_header_size(self.log, data)
            flags = struct.unpack_from("<I", data, 4)[0] if len(data) >= 8 else 0
            if not self.idx.exists():
                self.idx.write_bytes(encode_header(IDX_MAGIC, flags))
            idx = _mapped(self.idx)
            valid = self._trusted_index_records(data, idx)
            if valid:
                stamp, _, at = INDEX_RECORD.unpack_from(idx, 16 + (valid - 1) * INDEX_RECORD.size)
                offset = at + RECORD.size + RECORD.unpack_from(data, at)[0]
            else:
                offset = header
            # scan only what the index does not cover yet (spec §6.3)
            missing = []
            seq = valid
            while offset + RECORD.size <= len(data):
                size, _, stamp = RECORD.unpack_from(data, offset)
                if stamp == 0 or offset + RECORD.size + size > len(data):
                    break
                missing.append(encode_index_record(stamp, seq, offset))
                seq += 1
                offset += RECORD.size + size
            if any(data[offset:]):
                raise BadRecord(
                    f"{self.log.name} ends in a torn record at offset {offset}; refusing to append after it"
                )
            log_size = len(data)
        finally:
            for mapped in (data, idx):
                if isinstance(mapped, mmap.mmap):
                    mapped.close()
        if offset < log_size:
            os.truncate(self.log, offset)  # zero tail of a preallocated log
        with open(self.idx, "r+b") as f:
            f.truncate(16 + valid * INDEX_RECORD.size)
            f.seek(0, os.SEEK_END)
            f.write(b"".join(missing))
        return offset, seq, flags

    @staticmethod
    def _trusted_index_records(log: bytes | mmap.mmap, idx: bytes | mmap.mmap) -> int:
        """How many leading index records agree with the log.  Records are
        dense and written in order, so checking the last complete one (and
        bisecting back when it disagrees) avoids walking the whole log."""

        def agrees(i: int) -> bool:
            stamp, seq, at = INDEX_RECORD.unpack_from(idx, 16 + i * INDEX_RECORD.size)
            if seq != i or at < 8 or at + RECORD.size > len(log):
                return False
            size, _, logged = RECORD.unpack_from(log, at)
            return logged == stamp and at + RECORD.size + size <= len(log)

        low, high = 0, max(0, (len(idx) - 16) // INDEX_RECORD.size)
        if high and agrees(high - 1):
            return high
        while low < high:  # the first record that disagrees
            middle = (low + high) // 2
            if agrees(middle):
                low = middle + 1
            else:
                high = middle
        return low

    def write(self, records: list[Record]) -> None:
        encoded = []
        now = time.time_ns()
        for number, record in enumerate(records, 1):
            try:
                unknown = set(record) - {"index", "time", "flags", "data", "data_base64"}
                if unknown:
                    raise BadRecord(f"unknown field(s) {', '.join(sorted(unknown))}")
                payload = take_data(record)
                stamp = parse_time(record["time"], "ns") if record.get("time") is not None else now
                if stamp <= 0 or stamp >= 1 << 63:
                    raise BadRecord("time: must be after 1970 and fit in an i64 of nanoseconds")
                flags = record.get("flags")
                if flags is not None and (type(flags) is not int or not 0 <= flags < 1 << 32):
                    raise BadRecord("flags: expected an integer from 0 to 2^32-1")
                encoded.append((payload, stamp, flags, record.get("index")))
                if len(payload) > MAX_PAYLOAD:
                    raise BadRecord(f"payload of {len(payload)} bytes exceeds wallaby's {MAX_PAYLOAD}")
            except BadRecord as exc:
                raise BadRecord(f"record {number}: {exc}") from None
        # wallaby has one writer; an exclusive lock on the log keeps two
        # fmtfs mounts of the same source from interleaving records
        with open(self.log, "ab") as log:
            fcntl.flock(log, fcntl.LOCK_EX)
            log_end, seq, header_flags = self._prepare()
            log_bytes, idx_bytes = [], []
            offset = log_end
            for i, (payload, stamp, flags, given) in enumerate(encoded):
                if given is not None and given != seq + i:
                    raise BadRecord(f"record {i + 1}: index {given} given, but the next index is {seq + i}")
                log_bytes.append(encode_record(payload, stamp, header_flags if flags is None else flags))
                idx_bytes.append(encode_index_record(stamp, seq + i, offset))
                offset += RECORD.size + len(payload)
            # The log record lands before its index record: a crash between the
            # two leaves a lagging index, which readers complete from the log.
            log.write(b"".join(log_bytes))
            log.flush()
            with open(self.idx, "ab") as idx:
                idx.write(b"".join(idx_bytes))

    def sync(self) -> None:
        fsync_path(self.log)
        fsync_path(self.idx)
