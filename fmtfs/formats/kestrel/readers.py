"""libkestrel reader (bookmark) files: parse, validate a written state, and
rewrite atomically the way `Journal.Reader.checkpoint` does (spec §5)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fmtfs.formats.base import BadRecord
from fmtfs.formats.files import fsync_dir
from fmtfs.formats.kestrel.files import map_file
from fmtfs.formats.kestrel.records import (
    I64_MAX,
    READER_MAGIC,
    ReadDone,
    ReadHead,
    check_magic,
    encode_reader_file,
    iter_records,
)
from fmtfs.permissions import inherit


@dataclass
class ReaderState:
    head: int = 0
    done: set[int] = field(default_factory=set)
    notes: list[tuple[int, str]] = field(default_factory=list)  # (offset, skipped record)

    def as_json(self, reader: str) -> dict[str, Any]:
        return {"reader": reader, "head": self.head, "done": sorted(self.done)}


def parse_reader(buf) -> ReaderState:
    """Records in any order: the last READ_HEAD wins, READ_DONE ids are
    unioned.  Raises records.Corrupt when the file does not parse."""
    check_magic(buf, READER_MAGIC, "bookmark")
    state = ReaderState()
    for offset, record in iter_records(buf, 4, len(buf)):
        if type(record) is ReadHead:
            state.head = record.id
        elif type(record) is ReadDone:
            state.done.update(record.ids)
        else:
            name = f"command {record.cmd}" if hasattr(record, "cmd") else "PUT"
            state.notes.append((offset, f"unknown entry ({name}) in a reader file (skipped)"))
    return state


def read_reader_file(path: Path) -> ReaderState:
    buf = map_file(path)
    try:
        return parse_reader(buf)
    finally:
        if not isinstance(buf, bytes):
            buf.close()


_READER_KEYS = ("reader", "head", "done")


def validate_state(obj: Any, reader: str) -> tuple[int, list[int]]:
    """(head, sorted done ids) of a reader JSON object written into the mount."""
    if not isinstance(obj, dict):
        raise BadRecord("a reader file is one JSON object")
    extra = [k for k in obj if k not in _READER_KEYS]
    if extra:
        raise BadRecord(f"unknown field {extra[0]!r} (a reader has reader, head, done)")
    if "reader" in obj:
        given = obj["reader"]
        if given != reader:
            raise BadRecord(f"reader: {given!r} does not match the file name (reader {reader!r})")
    head = _id(obj.get("head", None), "head", allow_zero=True)
    done_in = obj.get("done", [])
    if not isinstance(done_in, list):
        raise BadRecord("done: expected a list of ids")
    done = sorted({_id(v, "done", allow_zero=False) for v in done_in})
    if done and done[0] <= head:
        raise BadRecord(f"done: id {done[0]} is not above head {head}")
    return head, done


def _id(value: Any, key: str, allow_zero: bool) -> int:
    if value is None:
        raise BadRecord(f"missing field {key!r}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRecord(f"{key}: expected an integer id")
    if value < (0 if allow_zero else 1) or value > I64_MAX:
        raise BadRecord(f"{key}: {value} is out of range")
    return value


def rewrite_reader(folder: Path, file_name: str, head: int, done: list[int]) -> Path:
    """Write `<q>.read.<name>` as a checkpoint does: `~~<ms>` temporary made
    exclusively, magic + READ_HEAD + READ_DONE, data fsync, rename over."""
    blob = encode_reader_file(head, done)
    target = folder / file_name
    stamp = time.time_ns() // 1_000_000
    while True:
        temp = folder / f"{file_name}~~{stamp}"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            break
        except FileExistsError:
            stamp += 1
    try:
        # the replaced reader file's owner and mode (a new reader: the queue's files')
        queue_prefix = file_name.partition(".read.")[0] + "."
        like = (
            [target] if target.exists() else [p for p in folder.iterdir() if p.name.startswith(queue_prefix)]
        )
        inherit(temp, like)
        try:
            view = memoryview(blob)
            while view:
                view = view[os.write(fd, view) :]
            os.fdatasync(fd)
        finally:
            os.close(fd)
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(folder)  # beyond what kestrel does: the rename survives a crash
    return target
