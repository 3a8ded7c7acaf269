"""Write-through: one open, writable view of a tree (fmtfs.views), whose
JSON lines are encoded into the native files as they are written."""

from __future__ import annotations

import fcntl
import os
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol

import orjson

from fmtfs.formats.base import BadRecord, Format, Record, Writer
from fmtfs.render import parse_lines
from fmtfs.snapshot import snapshot_folder


class WrittenTree(Protocol):
    """What a writer needs of its tree (fmtfs.views.SourceTree)."""

    format: Format
    write_lock: AbstractContextManager

    def wrote(self) -> None:
        """The native files changed: the tree is stale."""

    def refresh(self, force: bool = False) -> set[str]:
        """Re-index what changed; the view paths whose bytes changed."""

    def record_write_error(self, path: str, offset: int, error: str) -> None:
        """A refused write, for the log and _errors.jsonl."""


class ViewWriter:
    """One open, writable view.

    Append views encode every complete line at write().  A last line without
    its newline waits: it is encoded at a flush (any close of a descriptor,
    fsync) once it is a whole JSON object, else at the final close
    (release), so a child process closing an inherited descriptor never cuts
    a line in two.  Replace views (a whole kestrel reader document) are
    applied as soon as the written text is one whole JSON object.

    Every method returns the view paths whose bytes changed, for the FUSE
    layer to invalidate.  A write does not re-index the source: it marks the
    tree stale (SourceTree.wrote), so the next stat, listing or poll, or the
    final close, scans what was appended once.  Re-indexing after each
    128 KiB write re-decoded the stream's last chunk every time and rebuilt
    the whole tree: 85% of a `cat lines >> view` (py-spy)."""

    def __init__(self, tree: WrittenTree, path: str, writer: Writer) -> None:
        self.tree, self.path, self.writer = tree, path, writer
        self.buffer = b""
        self.offset = 0  # where the buffered bytes were written in the view
        self.applied = b""  # the replace document last applied
        self.written = False  # whether this handle changed the native files

    def write(self, data: bytes, offset: int = 0) -> set[str]:
        """Raise BadRecord (-> EINVAL) with nothing of `data` encoded."""
        pending = self.buffer + data
        start = offset - len(self.buffer)
        if self.writer.mode == "replace":
            self._refuse_if_not_an_object(pending, start)
            document = _whole_object(pending)
            changed = set()
            if document is not None and pending.strip() != self.applied.strip():
                changed = self._encode([document], start)
                self.applied = pending
            self.buffer = pending
            return changed
        cut = pending.rfind(b"\n") + 1
        # a tail that cannot begin a JSON object can never become a line
        self._refuse_if_not_an_object(pending[cut:], start + cut)
        changed = self._encode_lines(pending[:cut], start) if cut else set()
        self.buffer, self.offset = pending[cut:], start + cut
        return changed

    def flush(self) -> set[str]:
        changed = set()
        if self.writer.mode == "append" and _whole_object(self.buffer) is not None:
            data, self.buffer = self.buffer, b""
            changed = self._encode_lines(data, self.offset)
        self.writer.sync()
        return changed

    def release(self) -> set[str]:
        """The last close: whatever is left is encoded or reported (a
        release cannot fail a system call any more)."""
        changed: set[str] = set()
        try:
            if self.writer.mode == "append" and self.buffer.strip():
                data, self.buffer = self.buffer, b""
                changed = self._encode_lines(data, self.offset)
            elif self.writer.mode == "replace" and self.buffer.strip() and not self.applied:
                self._refuse("the written document is not one whole JSON object", self.offset)
        except BadRecord:
            pass  # already in the log and _errors.jsonl
        self.writer.sync()
        # the index catches up with everything this handle wrote, once
        return (changed | self.tree.refresh(force=True)) if self.written else changed

    def _refuse_if_not_an_object(self, text: bytes, offset: int) -> None:
        head = text.lstrip()[:1]
        if head and head != b"{":
            self._refuse("expected a JSON object", offset)

    def _refuse(self, reason: str, offset: int) -> None:
        self.tree.record_write_error(self.path, offset, reason)
        raise BadRecord(reason)

    def _encode_lines(self, data: bytes, offset: int) -> set[str]:
        try:
            records = parse_lines(data)
        except ValueError as exc:
            self._refuse(str(exc), offset)
        return self._encode(records, offset) if records else set()

    def _encode(self, records: list[Record], offset: int) -> set[str]:
        # one writer at a time per source, across threads and across fmtfs
        # processes: the native formats each assume a single producer
        with self.tree.write_lock, _source_lock(self.tree.format.source):
            try:
                self.writer.write(records)
            except BadRecord as exc:
                self._refuse(str(exc), offset)
        self.tree.wrote()
        self.written = True
        return {self.path}


@contextmanager
def _source_lock(source: Path):
    """An exclusive flock on the source folder (a single-file source's
    folder: a format may lock the file itself, and a second flock on it
    through another descriptor would wait for ever)."""
    fd = os.open(snapshot_folder(source)[0], os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _whole_object(text: bytes) -> Record | None:
    """`text` as one JSON object, or None while it is not (yet) one."""
    if not text.strip():
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
