"""A mount's whole-source files rendered ahead of their first look, in the
decode workers (fmtfs.decoders).

A derived view that a format renders a piece at a time (PiecedRender: gvfs's
metadata.jsonl, from a walk of its tree file) has no size until it is
rendered, and the format's problems() may read the whole source too (gvfs
walks every tree for the damage gvfs would skip). Both used to be rendered
by the first `stat` that needed them, one after the other, in the mount's
own process: an 11.6 MB gvfs store's first `ls -l` waited 1.1 s for
_errors.jsonl's size, then 2 s for metadata.jsonl's. A mount that finds
them missing from the index's derived cache starts them in its workers
before it serves, one job each, so they render at once on every core
while the kernel mounts; the first look waits for its own job only.

Only the first tree of a mount is rendered ahead: a source that changes
later has its views rendered when next looked at, as before (the workers
may not be up then, and starting them costs a second)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from fmtfs.decoders import DecodePool, worker_format
from fmtfs.formats.base import PiecedRender, Problem
from fmtfs.pieces import Pieces

log = logging.getLogger("fmtfs")


def render_pieces(path: str) -> bytes:
    """In a worker: the derived view `path` rendered, as a blob of pieces
    (Pieces.blob, what the derived cache keeps)."""
    render = worker_format().derived_views()[path]
    assert isinstance(render, PiecedRender)
    return Pieces.of(render.pieces()).blob()


def rows_of(problems: list[Problem]) -> list[tuple[str, int, str]]:
    """Problems as (file, offset, error) rows: what the derived cache keeps."""
    return [(p.file, p.offset, p.error) for p in problems]


def problem_rows() -> list[tuple[str, int, str]]:
    """In a worker: the format's problems(), as rows_of gives them."""
    return rows_of(worker_format().problems())


class Prerendered:
    """The jobs started ahead, by (key, deps): a derived view's path, or
    any other key its caller names, and the state of the source it is of.
    A job's result is given to its `keep` once: as soon as the job is done,
    asked for or not (the index keeps it for the next mount), and at the
    latest before result() returns it; none after cancel()."""

    def __init__(self) -> None:
        self._jobs: dict[tuple[str, str], tuple[Future, Callable[[Any], None]]] = {}
        self._kept: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._closed = False

    def start(self, pool: DecodePool, key: str, deps: str, keep: Callable[[Any], None], job, *args) -> None:
        """Run `job(*args)` (a module-level function) in a worker for `key`."""
        running = pool.run(job, *args)
        with self._lock:
            self._jobs[key, deps] = (running, keep)
        running.add_done_callback(lambda _: self._keep((key, deps)))

    def _keep(self, at: tuple[str, str]) -> None:
        # under the lock: cancel() waits for a keep under way (the index may close next)
        with self._lock:
            found = self._jobs.get(at)
            if self._closed or found is None or at in self._kept:
                return
            job, keep = found
            if job.cancelled() or job.exception() is not None:
                return  # result() says so to whoever asks
            self._kept.add(at)
            keep(job.result())

    def result(self, key: str, deps: str) -> Any:
        """What the job for (key, deps) gave, waiting for it; None when no
        job was started for it (or it was taken already), or it failed: the
        caller renders in its own process then, and meets the error itself."""
        with self._lock:
            found = self._jobs.get((key, deps))
        if found is None:
            return None
        try:
            value = found[0].result()
        except Exception:  # noqa: BLE001 - a dead worker, a bug in the format: rendered here instead
            log.warning("rendering %s in a worker failed; rendering it here", key, exc_info=True)
            value = None
        else:
            self._keep((key, deps))
        with self._lock:
            self._jobs.pop((key, deps), None)
            self._kept.discard((key, deps))
        return value

    def cancel(self) -> None:
        """Cancel the jobs not started; keep nothing from now on."""
        with self._lock:
            self._closed = True
            jobs = [job for job, _ in self._jobs.values()]
            self._jobs.clear()
        for job in jobs:  # outside the lock: a cancelled job calls _keep at once
            job.cancel()
