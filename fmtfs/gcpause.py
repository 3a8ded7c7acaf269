"""The cyclic GC paused around a batch decode.

Decoding a chunk builds thousands of small dicts and lists; each batch of
~700 new containers triggers a young-generation collection that walks all
of them (and promotes them, so older collections walk them again).  None of
them can form a cycle, so reference counting frees them anyway: pausing the
collector around a chunk's decode and render made the Beats decode loop 3x
cheaper on cbor2 alone (ARCHITECTURE.md).  Pausing is process-wide; a
thread that finds it paused already leaves it to the one that paused it."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
