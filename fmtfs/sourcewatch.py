"""Whether a source's folder may have changed since the last look, told by
the kernel (Linux inotify) instead of a `stat` of every native file.

A mount answers each `stat` and lookup from the tree's snapshot once it
knows the source is as indexed.  Knowing that by looking costs a `stat` of
every native file (10-25 ms for 1,000 kestrel queues here), which a
listing of many streams paid every tenth of its time, in a worker thread
that took the GIL from the FUSE loop.  The watch turns that question into
one non-blocking read of an inotify descriptor: empty, and nothing
changed since the last look began (`settle`).

What inotify cannot see, the mount's poller still catches with its forced
look (SourceTree.poll: every second, or while the watch is quiet at most
2 % of the time, 10 s apart at most): writes through a shared mapping
(gvfs-daemon writes its journal so), and changes made by another host on
a network filesystem.
No watch (inotify missing, or out of instances or watches) means every
question answers "changed": the mount looks as it did without one."""

from __future__ import annotations

import ctypes
import logging
import os
import struct
from pathlib import Path

log = logging.getLogger("fmtfs")

# <sys/inotify.h>
IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_UNMOUNT = 0x2000
IN_IGNORED = 0x8000
# what changes a source_snapshot (fmtfs.snapshot): a file's bytes (its size
# and mtime), its mode or owner, its name or inode (a new segment, a rotation)
WATCHED = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
)
# the watch itself is gone (the folder removed, moved or unmounted): no more news
WATCH_GONE = IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT | IN_IGNORED
EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)
READ_SIZE = 64 * 1024


class SourceWatch:
    """The kernel's change events for one folder, read without blocking.

    `changed()` is asked by the FUSE loop and `settle()` by the thread
    that looks at the source: both only read the descriptor, and an event
    read before `settle()` returns was a change made before the look's
    stats began, which that look sees."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._changed = True  # until a first look settles it
        self._unapplied = False  # a look found a change its caller has not applied yet
        self._gone = False

    @classmethod
    def of(cls, folder: Path) -> SourceWatch | None:
        """A watch of `folder`, or None where the kernel gives none."""
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            log.debug("no inotify watch of %s: %s", folder, os.strerror(ctypes.get_errno()))
            return None
        if libc.inotify_add_watch(fd, os.fsencode(folder), WATCHED) < 0:
            log.debug("no inotify watch of %s: %s", folder, os.strerror(ctypes.get_errno()))
            os.close(fd)
            return None
        return cls(fd)

    def changed(self) -> bool:
        """Whether the folder may have changed since the last `settle()`."""
        self._drain()
        return self._changed or self._unapplied or self._gone

    def settle(self) -> None:
        """A look at the folder begins: what it changed so far, that look sees."""
        self._drain()
        self._changed = self._unapplied = False

    def mark_changed(self) -> None:
        """A look found a change its caller has not applied yet: the next
        question still answers "changed"."""
        self._unapplied = True

    def applied(self) -> None:
        """The change the last look found is applied: quiet again, unless
        the folder changed since that look began."""
        self._unapplied = False

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _drain(self) -> None:
        while self.fd >= 0:
            try:
                events = os.read(self.fd, READ_SIZE)
            except BlockingIOError:
                return
            except OSError as exc:
                log.debug("inotify watch lost: %s", exc)
                self._gone = True
                return
            self._changed = True
            if any(mask & WATCH_GONE for mask in _masks(events)):
                self._gone = True


def _masks(events: bytes) -> list[int]:
    masks, at = [], 0
    while at + EVENT.size <= len(events):
        _, mask, _, name_length = EVENT.unpack_from(events, at)
        masks.append(mask)
        at += EVENT.size + name_length
    return masks
