"""Writing through the mount: PUTs appended to a queue's newest writer file
(with kestrel's rotation) and whole reader files rewritten atomically.

Where the newest file's records end, and the queue's last id, a walk of
its records finds: once per file in a process, while the file stays as
this process's last write left it (TIPS, fmtfs.formats.writtenends)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fmtfs.formats.base import BadRecord, FileIdentity, Record, Writer
from fmtfs.formats.files import fsync_dir
from fmtfs.formats.kestrel.card import DEFAULT_JOURNAL_SIZE
from fmtfs.formats.kestrel.files import WriterFile, map_file, scan_folder
from fmtfs.formats.kestrel.readers import rewrite_reader, validate_state
from fmtfs.formats.kestrel.records import (
    I32_MAX,
    I32_MIN,
    I64_MAX,
    I64_MIN,
    LARGEST_DATA,
    WRITER_MAGIC,
    Corrupt,
    Put,
    encode_put,
    put_size,
    read_record,
)
from fmtfs.formats.writtenends import WrittenEnds
from fmtfs.permissions import inherit
from fmtfs.shape import parse_time, take_data

_PUT_KEYS = ("id", "add_time", "expire_time", "error_count", "data", "data_base64")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class _Tip:
    """Where the next PUT goes: the newest writer file and the id tail."""

    path: Path
    number: int
    size: int
    tail: int  # the last PUT id of the queue (0 when it has none)
    clean: bool  # the valid records end exactly at the file's end


# Each newest writer file's tip as this process's last writer walked or left
# it: a new writer per `echo line >> view` need not walk the file again.
TIPS: WrittenEnds[_Tip] = WrittenEnds()


def _walk(path: Path) -> tuple[int | None, int]:
    """(last PUT id, offset where the valid records end) of a writer file."""
    buf = map_file(path)
    last = None
    pos = 4
    try:
        end = len(buf)
        while True:
            try:
                got = read_record(buf, pos, end)
            except Corrupt:
                break
            if got is None:
                break
            rec, after = got
            if type(rec) is Put:
                last = rec.id
            pos = after
    finally:
        if not isinstance(buf, bytes):
            buf.close()
    return last, pos


def validate_put(record: Any, tail: int, clock: Callable[[], int]) -> tuple[int, int, int | None, int, bytes]:
    """(id, add_time, expire_time, error_count, data) of one written line."""
    if not isinstance(record, dict):
        raise BadRecord("expected a JSON object")
    extra = [k for k in record if k not in _PUT_KEYS]
    if extra:
        raise BadRecord(f"unknown field {extra[0]!r}")
    ident = record.get("id")
    if ident is None:
        ident = tail + 1
    elif isinstance(ident, bool) or not isinstance(ident, int):
        raise BadRecord("id: expected an integer")
    elif ident <= tail:
        raise BadRecord(f"id: {ident} is not above the tail id {tail}")
    if ident > I64_MAX:
        raise BadRecord(f"id: {ident} does not fit in 64 bits")
    added = record.get("add_time")
    added = clock() if added is None else _time(added, "add_time")
    expire = record.get("expire_time")
    expire = None if expire is None else _time(expire, "expire_time")
    errors = record.get("error_count", 0)
    if isinstance(errors, bool) or not isinstance(errors, int) or not I32_MIN <= errors <= I32_MAX:
        raise BadRecord("error_count: expected a 32-bit integer")
    data = take_data(record)
    if len(data) > LARGEST_DATA:
        raise BadRecord(f"data: {len(data)} bytes is more than kestrel's 16 MiB")
    return ident, added, expire, errors, data


def _time(value: Any, key: str) -> int:
    ms = parse_time(value, "ms", key)
    if not I64_MIN <= ms <= I64_MAX:
        raise BadRecord(f"{key}: out of range")
    return ms


class PutWriter(Writer):
    """Appends PUT lines to the newest writer file of one queue.

    The writer follows the queue, not a file: after a rotation (its own or
    the producer's) the following lines go to the new newest file."""

    mode = "append"

    def __init__(
        self,
        folder: Path,
        queue: str,
        journal_size: int = DEFAULT_JOURNAL_SIZE,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.folder = folder
        self.queue = queue
        self.journal_size = journal_size
        self.clock = clock
        self._highest = 0  # the largest <n> among the queue's writer files
        self._touched: set[Path] = set()
        self._created = False

    def write(self, records: list[Record]) -> None:
        tip = self._locate()
        items = []
        tail = tip.tail
        for number, record in enumerate(records, 1):
            try:
                item = validate_put(record, tail, self.clock)
            except BadRecord as exc:
                raise BadRecord(f"line {number}: {exc}") from None
            tail = item[0]
            items.append(item)
        if not items:
            return
        # Encode into per-file runs, rotating by kestrel's `>` rule.  A file
        # that does not end cleanly (zero tail, damage) is never appended to;
        # a fresh file (pos 4) takes any record, however large.
        pos = tip.size if tip.clean else 4
        runs: list[tuple[Path | None, int, list[bytes]]] = [(tip.path if tip.clean else None, pos, [])]
        for ident, added, expire, errors, data in items:
            size = put_size(len(data), expire is not None)
            if pos > 4 and pos + size > self.journal_size:
                pos = 4
                runs.append((None, pos, []))
            runs[-1][2].append(encode_put(ident, added, data, expire, errors))
            pos += size
        path, number = tip.path, tip.number
        for run_path, offset, blobs in runs:
            if not blobs:
                continue
            if run_path is None:
                run_path = path = self._create(self._new_number(number))
                number = int(path.name.rsplit(".", 1)[1])
            _append(run_path, offset, b"".join(blobs))
            self._touched.add(run_path)
        TIPS.put(FileIdentity.of(path), _Tip(path, number, pos, tail, True))

    def sync(self) -> None:
        for path in sorted(self._touched):
            try:
                fd = os.open(path, os.O_WRONLY)
            except OSError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        if self._created:
            fsync_dir(self.folder)
        self._touched.clear()
        self._created = False

    # -- where to write ------------------------------------------------------

    def _locate(self) -> _Tip:
        queue = scan_folder(self.folder, only=self.queue).get(self.queue)
        if queue is None or not queue.writers:
            raise FileNotFoundError(f"queue {self.queue!r} has no writer file")
        self._highest = max(self._highest, max(w.number for w in queue.writers))
        newest = queue.writers[-1]
        identity = FileIdentity.of(newest.path)
        known = TIPS.get(identity)
        if known is not None:
            return known
        last, valid_end = _walk(newest.path)
        tail = last if last is not None else _tail_before(queue.writers[:-1])
        tip = _Tip(newest.path, newest.number, identity.size, tail, valid_end == identity.size)
        TIPS.put(identity, tip)
        return tip

    def _new_number(self, previous: int) -> int:
        # kestrel names files by the clock; staying above every existing
        # number keeps name order and id order in agreement.
        return max(self.clock(), previous + 1, self._highest + 1)

    def _create(self, number: int) -> Path:
        path = create_writer_file(self.folder, self.queue, number, self.clock)
        self._highest = max(self._highest, int(path.name.rsplit(".", 1)[1]))
        self._created = True
        return path


def create_writer_file(folder: Path, queue: str, number: int, clock: Callable[[], int] = now_ms) -> Path:
    """A new `<queue>.<n>` holding only the magic (exclusive create; on a
    collision kestrel waits 1 ms and takes the next clock value)."""
    while True:
        path = folder / f"{queue}.{number}"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            break
        except FileExistsError:
            time.sleep(0.001)
            number = max(clock(), number + 1)
    try:
        # owner and mode of the queue's other files, never wider
        inherit(path, (p for p in folder.iterdir() if p.name.startswith(queue + ".")))
        os.write(fd, WRITER_MAGIC)
    finally:
        os.close(fd)
    return path


def _tail_before(writers: list[WriterFile]) -> int:
    for wf in reversed(writers):
        last, _ = _walk(wf.path)
        if last is not None:
            return last
    return 0


def _append(path: Path, offset: int, blob: bytes) -> None:
    """Write `blob` at `offset` with its first byte last, as kestrel does: a
    concurrent reader sees a 0x00 command byte (a clean end) until the run
    is complete."""
    fd = os.open(path, os.O_WRONLY)
    try:
        _pwrite_all(fd, b"\0" + blob[1:], offset)
        _pwrite_all(fd, blob[:1], offset)
    finally:
        os.close(fd)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, offset)
        view = view[done:]
        offset += done


class ReaderWriter(Writer):
    """Replaces a whole `<queue>/readers/<reader>.json`: one JSON object."""

    mode = "replace"

    def __init__(self, folder: Path, queue: str, reader: str) -> None:
        self.folder = folder
        self.queue = queue
        self.reader = reader

    def write(self, records: list[Record]) -> None:
        if len(records) != 1:
            raise BadRecord(f"a reader file is exactly one JSON object, got {len(records)}")
        head, done = validate_state(records[0], self.reader)
        rewrite_reader(self.folder, f"{self.queue}.read.{self.reader}", head, done)
