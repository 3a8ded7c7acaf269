"""glibc malloc settings for the processes that serve a mount: its server
and its decode workers.

A mount's reads move 1 MiB buffers: a worker renders a chunk's lines, the
server reads them back from the spill file and joins a request's pieces.
glibc's defaults serve a buffer past its mmap threshold (128 KiB at first,
raised only as such buffers are freed) from fresh pages, return freed
memory at the heap's top past its trim threshold, and give each reader
thread an arena of its own: buffers were faulted in and zeroed anew.  A
cold `cat` of 146 MB of kestrel views over a mount that decodes every
chunk (three alternated pairs of two mounts): the server's system time
0.20-0.30 -> 0.12-0.15 s, the workers' 0.07-0.11 -> 0.05-0.07 s.

The mmap threshold is glibc's own dynamic ceiling (setting any of these
turns the dynamic one off): at 4 MiB, every read of an 11.6 MB gvfs tree
by a write through the mount was mapped and faulted in again: `cat` of
20,000 lines `>>` its `journal.jsonl` took 0.56-1.27 s (four runs)
against 0.73-0.99 s with the defaults and 0.54-0.92 s with these.  One
arena is enough: every thread holds the GIL while it allocates.  What is
kept is bounded: at most TRIM_THRESHOLD of free heap at its top."""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("fmtfs")

# mallopt(3) parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

MMAP_THRESHOLD = 32 << 20  # 1 MiB request buffers and whole source files (a gvfs tree) fit below
TRIM_THRESHOLD = 64 << 20  # twice the largest buffer kept for the next one, as glibc's dynamic rule
ARENAS = 1


def reuse_freed_buffers() -> None:
    """Apply the settings above to this process (no-op where libc is not
    glibc).  Call it before the process starts threads: an arena made
    before stays."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc: its allocator's defaults
        return
    for parameter, value in (
        (M_ARENA_MAX, ARENAS),
        (M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        (M_TRIM_THRESHOLD, TRIM_THRESHOLD),
    ):
        if mallopt(parameter, value) != 1:
            log.debug("mallopt(%d, %d) refused", parameter, value)
