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
inode, bounds and view, so a kept piece stays right for a grown stream."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path

# at most this much disk, and at most a quarter of what is free
LIMIT = 4 << 30


class SpilledPieces:
    """Pieces on disk: key -> (offset, length) in one scratch file."""

    def __init__(self, folder: Path, limit: int | None = None) -> None:
        self._file = tempfile.TemporaryFile(dir=folder, prefix="rendered-")
        self._fd = self._file.fileno()
        self.limit = limit if limit is not None else min(LIMIT, shutil.disk_usage(folder).free // 4)
        self._end = 0
        self._where: dict[tuple, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self.served = 0  # pieces read back from disk (tests count them)

    def put(self, key: tuple, data: bytes) -> None:
        with self._lock:
            if key in self._where or self._end + len(data) > self.limit:
                return
            at = self._end
            self._end += len(data)
        os.pwrite(self._fd, data, at)
        with self._lock:  # published only once written
            self._where[key] = (at, len(data))

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
        at, length = found
        end = length if end is None else min(end, length)
        return os.pread(self._fd, max(0, end - start), at + start)

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
        self._file.close()
