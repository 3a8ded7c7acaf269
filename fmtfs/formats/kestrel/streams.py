"""Streams: one per libkestrel writer file and one per legacy journal file."""

from __future__ import annotations

import mmap
import os
import re
import struct
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, NamedTuple

from fmtfs.formats.base import CUT_GRID, Chunk, Problem, Record, State, Stream, boundary, grid_cuts, grid_end
from fmtfs.formats.kestrel import legacy
from fmtfs.formats.kestrel.files import LegacyFile, WriterFile, map_file
from fmtfs.formats.kestrel.lines import PutLines
from fmtfs.formats.kestrel.records import (
    LARGEST_DATA,
    PUT_HEADER,
    PUT_HEADER_X,
    WRITER_MAGIC,
    Corrupt,
    Put,
    ReadDone,
    ReadHead,
    check_magic,
    read_record,
)
from fmtfs.formats.kestrel.shapes import (
    buckets_folder,
    journal_view,
    legacy_view,
    ms_text,
    op_record,
    put_record,
    second_text,
)
from fmtfs.formats.timerange import bucket_views, timed_bucket_views
from fmtfs.shape import put_data

TIME_KEY = "add_time"
CHUNK_RECORDS = 2000
CHUNK_BYTES = 1 << 20


def chunk_limit(pos: int) -> int:
    """The offset a chunk starting at `pos` ends at or after (its first
    record that starts there), unless CHUNK_RECORDS end it first; at the
    grid lines too, where cuts are found (base.CUT_GRID)."""
    return grid_end(pos, CHUNK_BYTES, CUT_GRID)


class ChunkFound(NamedTuple):
    """What a stream's walk makes of the records from one offset on."""

    chunk: Chunk | None  # None: no record there
    end: int  # where the next chunk starts
    skipped: list[Problem]  # records skipped on the way
    problem: Problem | None  # the damage the walk stopped at
    finished: bool  # the walk met the end of the records (a clean end or damage)


# (the mapped file, the offset, its end) -> the chunk starting there
ChunkAt = Callable[[Any, int, int], ChunkFound]


def describe_skipped(record: Any) -> str:
    """The _errors.jsonl text for a record a writer file should not hold."""
    if isinstance(record, ReadHead):
        return "READ_HEAD record in a writer file (skipped)"
    if isinstance(record, ReadDone):
        return "READ_DONE record in a writer file (skipped)"
    return f"unknown command {record.cmd} (skipped {record.size} bytes)"


class _ChunkedStream(Stream):
    """Shared scan/decode; subclasses decode a run of records with `_run`."""

    view: str

    def _first(self, buf) -> int:
        """The offset of the first record, after checking any magic."""
        return 0

    def _run(
        self, buf, pos: int, end: int, max_records: int, limit: int, out: list[Record], skipped: list[Problem]
    ) -> tuple[int, bool, Problem | None]:
        """Decode records from `pos` into `out` until `max_records` or the
        offset `limit`; notes on skipped records go to `skipped`.  Returns
        (next offset, finished, the Problem that stopped it)."""
        raise NotImplementedError

    def view_paths(self) -> list[str]:
        return [self.view]

    def scan(
        self, start: int | None, state: State | None, stop: int | None = None
    ) -> Iterator[Chunk | Problem]:
        return self._walk(start, stop, self._decoded_chunk)

    def _walk(self, start: int | None, stop: int | None, chunk_at: ChunkAt) -> Iterator[Chunk | Problem]:
        """The chunks `chunk_at` makes of the file from `start` (None: its
        first record) on, and the problems met."""
        try:
            buf = map_file(self.path)
        except OSError as exc:
            yield Problem(self.path.name, 0, f"cannot read: {exc.strerror}")
            return
        try:
            yield from self._chunks(buf, start, stop, chunk_at)
        finally:
            if isinstance(buf, mmap.mmap):
                buf.close()

    def _chunks(
        self, buf, start: int | None, stop: int | None, chunk_at: ChunkAt
    ) -> Iterator[Chunk | Problem]:
        end = len(buf)
        if start is None:
            try:
                pos = self._first(buf)
            except Corrupt as exc:
                yield Problem(self.path.name, exc.offset, exc.message)
                return
        else:
            pos = start
        while True:
            if stop is not None and pos >= stop:
                yield boundary(pos, {})
                return
            found = chunk_at(buf, pos, end)
            if found.chunk is not None:
                yield found.chunk
            yield from found.skipped
            if found.problem is not None:
                yield found.problem
            if found.finished:
                return
            pos = found.end

    def _decoded_chunk(self, buf, pos: int, end: int) -> ChunkFound:
        """The chunk starting at `pos`, with its records."""
        out: list[Record] = []
        skipped: list[Problem] = []
        after, finished, failure = self._run(buf, pos, end, CHUNK_RECORDS, chunk_limit(pos), out, skipped)
        chunk = None
        if after > pos:
            views, times = self._timed_views(out)
            chunk = Chunk(pos, after, {}, views, times=times)
        return ChunkFound(chunk, after, skipped, failure, finished)

    def decode(self, chunk: Chunk) -> dict[str, list[Record]]:
        return self._views(self._records(chunk))

    def view_records(self, chunk: Chunk, view: str) -> list[Record] | None:
        # the stream's own view alone: no hour buckets
        return self._records(chunk) if view == self.view else None

    def _native(self, chunk: Chunk) -> bytes:
        """The bytes of one chunk's records."""
        with open(self.path, "rb") as f:
            return os.pread(f.fileno(), chunk.end - chunk.start, chunk.start)

    def _records(self, chunk: Chunk) -> list[Record]:
        buf = self._native(chunk)
        out: list[Record] = []
        self._run(buf, 0, len(buf), len(buf) + 1, len(buf) + 1, out, [])
        return out

    def _views(self, records: list[Record]) -> dict[str, list[Record]]:
        """The views a run of records feeds, the stream's own view first."""
        return {self.view: records}

    def _timed_views(self, records: list[Record]) -> tuple[dict[str, list[Record]], tuple[int, int] | None]:
        """_views(), and the run's time range (None: not known) for the index."""
        return self._views(records), None


class WriterStream(_ChunkedStream):
    """A libkestrel writer file `<queue>.<n>`: PUT records, in its journal
    view and in its share of the queue's `buckets/<bucket>.jsonl` by
    add_time (the view layer joins the shares of the writer files in queue
    order)."""

    renderer_version = 2
    time_field = (TIME_KEY, "ms")  # the time column and its unit (time filters)

    def __init__(self, wf: WriterFile, time_bucket: str = "hour") -> None:
        self.view = journal_view(wf.queue, wf.number)
        super().__init__(self.view[: -len(".jsonl")], wf.path)
        self.file = wf
        self.time_bucket = time_bucket
        self.buckets = buckets_folder(wf.queue)
        self.lines = PutLines(self._run, self.buckets, time_bucket)

    def measured(
        self, start: int | None, state: State | None, render: bool = False, stop: int | None = None
    ) -> Iterator[Chunk | Problem]:
        """scan()'s chunks with their lines written from the file's bytes
        (fmtfs.formats.kestrel.lines), no records built."""
        return self._walk(start, stop, partial(self._measured_chunk, render=render))

    def _measured_chunk(self, buf, pos: int, end: int, render: bool) -> ChunkFound:
        run = self.lines.run(buf, pos, end, CHUNK_RECORDS, chunk_limit(pos))
        chunk = None
        if run.end > pos:
            chunk = Chunk(
                pos,
                run.end,
                {},
                times=run.times,
                lengths=run.buckets.lengths(self.view, len(run.lines)),
                count=run.count,
                rendered=run.buckets.views(self.view, run.lines) if render else None,
            )
        return ChunkFound(chunk, run.end, run.skipped, run.problem, run.finished)

    def render(self, chunk: Chunk, view: str | None = None) -> dict[str, bytes]:
        buf = self._native(chunk)
        run = self.lines.run(buf, 0, len(buf), len(buf) + 1, len(buf) + 1)
        lines = bytes(run.lines)
        if view == self.view:
            return {view: lines} if lines else {}
        views = run.buckets.views(self.view, lines)
        if view is None:
            return views
        return {view: views[view]} if views.get(view) else {}

    def _views(self, records: list[Record]) -> dict[str, list[Record]]:
        return {self.view: records, **bucket_views(records, TIME_KEY, "ms", self.time_bucket, self.buckets)}

    def _timed_views(self, records: list[Record]) -> tuple[dict[str, list[Record]], tuple[int, int] | None]:
        # the time texts taken once, for the buckets and the range
        buckets, times = timed_bucket_views(records, TIME_KEY, "ms", self.time_bucket, self.buckets)
        return {self.view: records, **buckets}, times

    def _first(self, buf) -> int:
        check_magic(buf, WRITER_MAGIC, "journal")
        return 4

    def cuts(self, start: int | None, state: State | None, every: int) -> Iterator[tuple[int, State]]:
        """The first PUT at or past grid lines about `every` bytes apart
        (chunk_limit: each starts a chunk), each recognised by the run of
        whole PUT headers that starts there; the scan checks it (a wrong
        one costs time only, fmtfs.scanning)."""
        try:
            buf = map_file(self.path)
        except OSError:
            return
        try:
            yield from _grid_cuts(buf, self._first(buf) if start is None else start, every)
        except Corrupt:
            return
        finally:
            if isinstance(buf, mmap.mmap):
                buf.close()

    def _run(self, buf, pos, end, max_records, limit, out, skipped):
        # The common PUT (0x86 / 0x88, in bounds) is decoded inline: this loop
        # is the hot path of a first mount.  Anything else goes through
        # read_record, which applies every rule and reports damage.
        name = self.path.name
        unpack6 = PUT_HEADER.unpack_from
        unpack8 = PUT_HEADER_X.unpack_from
        when = ms_text
        # ms_text inlined for the common PUT: the text up to the second is
        # looked up when the second changes (items arrive many per second)
        last_second, head = None, None
        append = out.append
        n = 0
        while n < max_records and pos < limit:
            if pos >= end:
                return pos, True, None
            command = buf[pos]
            if command == 0x86 and end - pos >= 25:
                size, errors, ident, added = unpack6(buf, pos + 1)
                start = pos + 25
                stop = start + size
                if 0 <= size <= LARGEST_DATA and stop <= end:
                    seconds, millis = divmod(added, 1000)
                    if seconds != last_second:
                        last_second, head = seconds, second_text(seconds)
                    record = {
                        "id": ident,
                        "add_time": added if head is None else f"{head}.{str(millis + 1000)[1:]}Z",
                        "error_count": errors,
                    }
                    data = buf[start:stop]
                    try:
                        record["data"] = data.decode()
                    except UnicodeDecodeError:
                        put_data(record, data)
                    append(record)
                    n += 1
                    pos = stop
                    continue
            elif command == 0x88 and end - pos >= 33:
                size, errors, ident, added, expire = unpack8(buf, pos + 1)
                start = pos + 33
                stop = start + size
                if 0 <= size <= LARGEST_DATA and stop <= end:
                    record = {
                        "id": ident,
                        "add_time": when(added),
                        "expire_time": when(expire),
                        "error_count": errors,
                    }
                    data = buf[start:stop]
                    try:
                        record["data"] = data.decode()
                    except UnicodeDecodeError:
                        put_data(record, data)
                    append(record)
                    n += 1
                    pos = stop
                    continue
            try:
                got = read_record(buf, pos, end)
            except Corrupt as exc:
                return pos, True, Problem(name, exc.offset, exc.message)
            if got is None:
                return pos, True, None
            rec, after = got
            if type(rec) is Put:
                data = bytes(buf[rec.data_start : rec.data_end])
                append(put_record(rec.id, rec.add_time, rec.expire_time, rec.error_count, data))
                n += 1
            else:
                skipped.append(Problem(name, pos, describe_skipped(rec)))
            pos = after
        return pos, pos >= end, None


# A PUT's command byte and data size; its header's length by command byte.
_COMMAND_SIZE = struct.Struct("<Bi")
_PUT_HEADS = {0x86: 1 + PUT_HEADER.size, 0x88: 1 + PUT_HEADER_X.size}
_LONGEST_HEAD = max(_PUT_HEADS.values())


# A byte that may start a PUT, and how many whole PUT headers in a row make
# an offset a record start: a PUT's data is free bytes, so a lone header-like
# run inside it is possible, but a run of CHAIN that ends where the next
# begins, and the scan's check, both have to be fooled to cost even time.
_PUT_BYTE = re.compile(b"[\x86\x88]")
CHAIN = 16


def _grid_cuts(buf, pos: int, every: int) -> Iterator[tuple[int, State]]:
    """Cuts of a scan from `pos`: the first PUT at or past grid lines
    (CUT_GRID) about `every` bytes apart (base.grid_cuts), while one is
    found."""
    end = len(buf)
    for at in grid_cuts(pos, end, every, CUT_GRID, lambda _, line: _put_at_or_after(buf, line, end)):
        yield at, {}


def _put_at_or_after(buf, line: int, end: int) -> int | None:
    """The first offset from `line` on (within the longest PUT) where CHAIN
    whole PUT headers follow one another (fewer if the file ends first);
    None if there is none."""
    for found in _PUT_BYTE.finditer(buf, line, min(end, line + _LONGEST_HEAD + LARGEST_DATA)):
        at = found.start()
        if _puts_follow(buf, at, end):
            return at
    return None


def _puts_follow(buf, pos: int, end: int) -> bool:
    """Whether CHAIN whole PUTs start at `pos` one after the other, or as
    many as there are before the file's end (at least one)."""
    unpack = _COMMAND_SIZE.unpack_from
    heads = _PUT_HEADS
    for n in range(CHAIN):
        if end - pos < _LONGEST_HEAD:
            return n > 0 and pos <= end
        command, size = unpack(buf, pos)
        head = heads.get(command)
        if head is None or not 0 <= size <= LARGEST_DATA or pos + head + size > end:
            return False
        pos += head + size
    return True


class LegacyStream(_ChunkedStream):
    """A kestrel 0.8-2.x journal file: one line per operation (read-only)."""

    def __init__(self, lf: LegacyFile) -> None:
        self.view = legacy_view(lf.queue, lf.path.name)
        super().__init__(self.view[: -len(".jsonl")], lf.path)
        self.file = lf

    def _run(self, buf, pos, end, max_records, limit, out, skipped):
        read = legacy.read_op
        append = out.append
        n = 0
        while n < max_records and pos < limit:
            try:
                got = read(buf, pos, end)
            except legacy.BrokenItem as exc:
                return pos, True, Problem(self.path.name, exc.offset, exc.message)
            if got is None:
                return pos, True, None
            op, pos = got
            append(op_record(op))
            n += 1
        return pos, pos >= end, None


def iter_puts(wf: WriterFile, keep: Callable[[int], bool] | None = None) -> Iterator[tuple[Put, bytes]]:
    """The PUTs of a writer file whose id `keep` accepts, with their data, up
    to the clean end or the first damage (which the stream's scan reports)."""
    try:
        buf = map_file(wf.path)
    except OSError:
        return
    try:
        if bytes(buf[:4]) != WRITER_MAGIC:
            return
        pos, end = 4, len(buf)
        while True:
            try:
                got = read_record(buf, pos, end)
            except Corrupt:
                return
            if got is None:
                return
            rec, pos = got
            if type(rec) is Put and (keep is None or keep(rec.id)):
                yield rec, bytes(buf[rec.data_start : rec.data_end])
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()


def _ops(lf: LegacyFile) -> Iterator[legacy.Op]:
    """The operations of one legacy file up to its end or first damage."""
    try:
        buf = map_file(lf.path)
    except OSError:
        return
    try:
        pos, end = 0, len(buf)
        while True:
            try:
                got = legacy.read_op(buf, pos, end)
            except legacy.BrokenItem:
                return
            if got is None:
                return
            op, pos = got
            yield op
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()


def replay_files(files: list[LegacyFile]) -> list[legacy.Item]:
    """Queue contents after replaying `files` in order; a damaged file's
    replay stops at the damage and the next file goes on."""
    state = legacy.Replay()
    for lf in files:
        # Opcode 3 marks a file written by 0.8-1.x, whose xid rule differs.
        state.legacy_counter = any(op.code == legacy.REMOVE_TENTATIVE for op in _ops(lf))
        for op in _ops(lf):
            state.apply(op)
    return state.finish()
