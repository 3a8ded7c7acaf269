"""One wallaby log as a stream: chunks of records, cut points from its
index, records decoded as dicts (Spark, Parquet twins) or rendered as JSON
Lines by the line renderer (fmtfs.formats.wallaby.lines)."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fmtfs.formats.base import Chunk, Problem, Record, State, Stream, boundary
from fmtfs.formats.timerange import native_range
from fmtfs.formats.wallaby.card import LOG_MAGIC
from fmtfs.formats.wallaby.layout import (
    IDX_MAGIC,
    INDEX_RECORD,
    RECORD,
    Bucketer,
    index_path,
    log_header_size,
    looks_like_generation_a,
    torn,
)
from fmtfs.formats.wallaby.lines import LineRenderer
from fmtfs.shape import HOUR_HEADS, MINUTES_SECONDS, encode_name, hour_text, put_data

# A chunk: this many records, or the first record starting this many bytes
# past its start.
CHUNK_RECORDS = 4096
CHUNK_BYTES = 1 << 20


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
        self.bucket_folder = f"{self.folder}/buckets"  # of the views `<name>/buckets/<bucket>.jsonl`
        self.lines = LineRenderer(path.name, self.records_view, self.bucket_folder, self.bucketer)

    def view_paths(self) -> list[str]:
        return [self.records_view]

    def scan(
        self, start: int | None, state: State | None, stop: int | None = None
    ) -> Iterator[Chunk | Problem]:
        return self._walk(start, state, stop, measure=False, render=False)

    def measured(
        self, start: int | None, state: State | None, render: bool = False, stop: int | None = None
    ) -> Iterator[Chunk | Problem]:
        """scan()'s chunks with their lines rendered from the log's bytes
        (fmtfs.formats.wallaby.lines), no records built."""
        return self._walk(start, state, stop, measure=True, render=render)

    def render(self, chunk: Chunk, view: str | None = None) -> dict[str, bytes]:
        data = self._native(chunk)
        run = self.lines.run(
            data, 0, chunk.state["seq"], 1 << 62, CHUNK_BYTES, len(data), route=view != self.records_view
        )
        if view is None:
            return run.views
        return {view: run.views[view]} if run.views.get(view) else {}

    def _walk(
        self, start: int | None, state: State | None, stop: int | None, measure: bool, render: bool
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
                yield from self._chunks(data, start, state["seq"], stop, measure, render)

    def _first(self, data: mmap.mmap) -> tuple[int, State] | Problem:
        """Where the first record starts and its state, or why nothing does."""
        if data[:4] != LOG_MAGIC:
            return Problem(self.path.name, 0, "not a wallaby log (bad LOG signature or version)")
        if looks_like_generation_a(self.path, data):
            return Problem(self.path.name, 0, "generation A wallaby layout (April 2015) is not supported")
        return log_header_size(self.path, data), {"seq": 0}

    def _chunks(
        self, data: mmap.mmap, offset: int, seq: int, stop: int | None, measure: bool, render: bool
    ) -> Iterator[Chunk | Problem]:
        """Chunks from `offset`: with their records, or (`measure`) with
        their count and views' lengths, and (`render`) their views' bytes."""
        end = len(data)
        while True:
            if stop is not None and offset >= stop:
                yield boundary(offset, {"seq": seq})
                return
            if measure:
                run = self.lines.run(data, offset, seq, CHUNK_RECORDS, CHUNK_BYTES, end)
                count, after, problem = run.count, run.end, run.problem
                lengths = {view: len(lines) for view, lines in run.views.items()}
                rendered = run.views if render else None
                chunk = Chunk(
                    offset,
                    after,
                    {"seq": seq},
                    times=run.times,
                    lengths=lengths,
                    count=count,
                    rendered=rendered,
                )
            else:
                stamps: list[int] = []
                records, after, problem = self._decode_run(data, offset, seq, CHUNK_RECORDS, end, stamps)
                count = len(records[self.records_view])
                chunk = Chunk(offset, after, {"seq": seq}, records, times=native_range(stamps, "ns"))
            if count:
                yield chunk
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
        """Up to `limit` records from `offset` (or CHUNK_BYTES of them), as
        dicts (the readers of records: Spark, Parquet twins); their native
        times go to `stamps` when given (a scan's chunk time range).  `route`
        False: records.jsonl only, no time buckets (its reader's).  Its
        walk is LineRenderer.run's: the same records, the same problems."""
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
        bucket_folder = self.bucket_folder
        start = offset
        problem = None
        while len(lines) < limit and offset - start < CHUNK_BYTES:
            if offset + RECORD.size > end:
                problem = torn(self.path.name, data, offset, end)
                break
            size, flags, stamp = unpack(data, offset)
            if stamp == 0:
                break  # zero tail of a preallocated (mmap pre-extended) log
            body = offset + RECORD.size
            if body + size > end:
                problem = torn(self.path.name, data, offset, end, size)
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
            views[f"{bucket_folder}/{name}.jsonl"] = bucket
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
