"""Decode chunks on every core: a pool of worker PROCESSES (threads would
share one GIL) that decode and render chunks for the mount.

Each worker opens the format itself from (source, format name, options), as
Spark's executors do, and is sent only (stream name, chunk start, end,
state); it returns the rendered bytes of every view the chunk feeds.  The
pool is started on first use, in the mount process only (`fmtfs cat` and
tests decode in process), with the "spawn" start method because the mount
process already runs threads."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from fmtfs.formats.base import Chunk, Format, State, Stream
from fmtfs.render import render_chunk

# this worker process's format and its streams by name
_format: Format | None = None
_streams: dict[str, Stream] = {}


def _open(source: Path, format_name: str, options: dict[str, Any]) -> None:
    global _format
    from fmtfs.formats import open_source

    _format = open_source(source, format_name, options)


def _render_chunk(name: str, start: int, end: int, state: State) -> dict[str, bytes]:
    stream = _streams.get(name)
    if stream is None:  # a stream new since the last listing: list again
        assert _format is not None
        _streams.update((s.name, s) for s in _format.streams())
        stream = _streams[name]
    return render_chunk(stream, Chunk(start, end, state, {}))


class DecodePool:
    """Worker processes decoding chunks of one source."""

    def __init__(self, fmt: Format, workers: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        self._args = (fmt.source, fmt.name, fmt.options)
        self._pool: ProcessPoolExecutor | None = None

    def submit(self, stream: str, start: int, end: int, state: State) -> Future[dict[str, bytes]]:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_open,
                initargs=self._args,
            )
        return self._pool.submit(_render_chunk, stream, start, end, state)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
