"""Rendered pieces the in-memory LRU evicts, kept in one scratch file under
--cache-dir, so that reading one again is a `pread`, not a chunk decode.

Why: the kernel does not keep a FUSE view's pages for long on these VMs.
A DAMON kdamond (`/sys/kernel/mm/damon/admin/kdamonds/0`: physical
addresses, action `pageout`, unmapped file pages allowed, anonymous pages
not) evicts page cache in the memory regions it finds cold, a few seconds
after the pages were filled; regular files lose pages at the same rate.
A regular file refills such a hole with a disk read; a view refilled it
with a decode of the whole chunk (thousands of records for a 4 KiB hole)
once the chunk had left the LRU, so a second `cat` of a view bigger than
the LRU decoded most of it again.

The file is unlinked from the start (it goes with the mount, even after a
crash) and grows to at most `limit` bytes; pieces past that are not kept
(decoding still serves them).  Keys are the LRU's: a chunk's stream,
inode, bounds and view, so a kept piece stays right for a grown stream.

The mount's decode workers append the pieces they render to the same file
(SpillAppender, reopening it by its /proc path) and send back where they
went (a Spilled), not the bytes: piping each ~0.5 MB piece back through
the pool's result queue cost the mount process more CPU than serving it
(measured: 0.38-0.45 s of 100 MB of kestrel's pieces received, 0.16-0.18 s
read back from the file, and a pool of two 1.2-1.4 s -> 0.84-0.96 s).
Every writer appends (O_APPEND, each on its own open file description), so
the mount's own evictions and the workers' pieces never overlap."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import NamedTuple

# at most this much disk, and at most a quarter of what is free
LIMIT = 4 << 30


class Spilled(NamedTuple):
    """Where a piece went in the scratch file."""

    at: int
    length: int


class SpillAppender:
    """A process's appending end of a scratch file (a decode worker's):
    pieces go at the file's end, whoever else appends."""

    def __init__(self, path: str, limit: int) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        self.limit = limit

    def append(self, data: bytes) -> Spilled | None:
        """Where `data` went, or None once the file holds its limit (or the
        disk is full): the caller keeps the bytes itself then."""
        if os.fstat(self._fd).st_size + len(data) > self.limit:
            return None
        try:
            written = os.write(self._fd, data)
        except OSError:
            return None
        end = os.lseek(self._fd, 0, os.SEEK_CUR)  # this description's offset: the end of its write
        return Spilled(end - written, written) if written == len(data) else None

    def close(self) -> None:
        os.close(self._fd)


class SpilledPieces:
    """Pieces on disk: key -> (offset, length) in one scratch file."""

    def __init__(self, folder: Path, limit: int | None = None) -> None:
        self._file = tempfile.TemporaryFile(dir=folder, prefix="rendered-")
        self._fd = self._file.fileno()
        self.limit = limit if limit is not None else min(LIMIT, shutil.disk_usage(folder).free // 4)
        self._where: dict[tuple, Spilled] = {}
        self._lock = threading.Lock()
        # this process's own appends (evicted pieces): its threads share the
        # appender's file offset, which tells each write where it went
        self._appender = SpillAppender(self.shared_path, self.limit)
        self._appending = threading.Lock()
        self.served = 0  # pieces read back from disk (tests count them)

    @property
    def shared_path(self) -> str:
        """A path other processes of this user open the file by while this
        one lives (it has no name of its own): the decode workers append
        their pieces there (SpillAppender), then record() says where."""
        return f"/proc/{os.getpid()}/fd/{self._fd}"

    @property
    def for_workers(self) -> tuple[str, int]:
        """What a decode worker appends by: (shared_path, limit)."""
        return self.shared_path, self.limit

    def put(self, key: tuple, data: bytes) -> None:
        if key in self:
            return
        with self._appending:
            where = self._appender.append(data)
        if where is not None:
            self.record(key, where)  # published only once written

    def record(self, key: tuple, where: Spilled) -> None:
        """A piece another process appended (SpillAppender) is `key`'s."""
        with self._lock:
            self._where.setdefault(key, where)

    def __contains__(self, key: tuple) -> bool:
        with self._lock:
            return key in self._where

    def get(self, key: tuple, start: int = 0, end: int | None = None) -> bytes | None:
        """The piece's bytes [start, end) (all of it by default): a FUSE
        request wants at most 1 MiB of a piece, so only that is read."""
        with self._lock:
            found = self._where.get(key)
            if found is None:
                return None
            self.served += 1
        return self.read(found, start, end)

    def read(self, where: Spilled, start: int = 0, end: int | None = None) -> bytes:
        """Bytes [start, end) of the piece at `where` (a worker's, just appended)."""
        end = where.length if end is None else min(end, where.length)
        return os.pread(self._fd, max(0, end - start), where.at + start)

    def get_cached(self, key: tuple, start: int, end: int) -> bytes | None:
        """get(), but only if every byte is in the page cache (RWF_NOWAIT):
        the FUSE loop answers with it itself, never waiting for the disk.
        A warm `cat` meets holes where the kernel dropped a view's pages;
        each one handed to a thread cost more than the pread."""
        with self._lock:
            found = self._where.get(key)
        if found is None:
            return None
        at, length = found
        wanted = max(0, min(end, length) - start)
        buffer = bytearray(wanted)
        try:
            got = os.preadv(self._fd, [buffer], at + start, os.RWF_NOWAIT)
        except (BlockingIOError, OSError):
            return None  # not cached (EAGAIN), or RWF_NOWAIT unsupported here
        if got != wanted:
            return None  # partly cached: the thread reads it
        with self._lock:
            self.served += 1
        return bytes(buffer)

    def drop_stream(self, name: str) -> None:
        """Forget a stream's pieces (its file was replaced); their bytes stay
        in the file until the mount ends."""
        with self._lock:
            for key in [k for k in self._where if k[0] == name]:
                del self._where[key]

    def close(self) -> None:
        self._appender.close()
        self._file.close()
