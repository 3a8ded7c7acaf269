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

A view whose format can cut it in runs of lines (PiecedRender.part: gvfs
cuts its tree walk by path) is rendered by every worker at once, a run
each, the runs' pieces joined in order: an 11.6 MB gvfs tree's view in
about half the time of one walk.  A job checks that the source is in the
state the mount saw before and after it renders: runs rendered from two
states would not join into one view (it fails, and the view is rendered
in process when looked at).

Only the first tree of a mount is rendered ahead: a source that changes
later has its views rendered when next looked at, as before (the workers
may not be up then, and starting them costs a second)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any

from fmtfs.decoders import DecodePool, worker_format
from fmtfs.digest import digest
from fmtfs.formats.base import PiecedRender, Problem
from fmtfs.pieces import Pieces
from fmtfs.snapshot import source_snapshot

log = logging.getLogger("fmtfs")


class SourceChanged(Exception):
    """The source is no longer in the state a job was to render."""


def _check_state(deps: str) -> None:
    if digest(source_snapshot(worker_format().source)) != deps:
        raise SourceChanged(deps)


def render_part(path: str, part: int, parts: int, deps: str) -> bytes:
    """In a worker: the `part`-th of `parts` runs of the derived view
    `path` (all of it for one), as a blob of pieces (Pieces.blob, what the
    derived cache keeps), of the source in state `deps`."""
    _check_state(deps)
    render = worker_format().derived_views()[path]
    assert isinstance(render, PiecedRender)
    pieces = render.pieces() if parts == 1 or render.part is None else render.part(part, parts)
    blob = Pieces.of(pieces).blob()
    _check_state(deps)
    return blob


def rows_of(problems: list[Problem]) -> list[tuple[str, int, str]]:
    """Problems as (file, offset, error) rows: what the derived cache keeps."""
    return [(p.file, p.offset, p.error) for p in problems]


def problem_rows(deps: str) -> list[tuple[str, int, str]]:
    """In a worker: the format's problems(), as rows_of gives them, of the
    source in state `deps`."""
    _check_state(deps)
    rows = rows_of(worker_format().problems())
    _check_state(deps)
    return rows


def joined_blobs(blobs: list[bytes]) -> bytes:
    """The blobs of render_part's runs as the blob of the whole view."""
    if len(blobs) == 1:
        return blobs[0]
    return Pieces.joined([Pieces.from_blob(blob) for blob in blobs]).blob()  # type: ignore[misc]


def _only(results: list[Any]) -> Any:
    return results[0]


@dataclass(frozen=True)
class Ahead:
    """One thing a mount renders ahead: its key in the derived cache, the
    jobs that render it (module-level functions and their arguments, run
    in the workers at once) and how their results make its value."""

    key: str
    jobs: list[tuple[Callable[..., Any], tuple]]
    combine: Callable[[list[Any]], Any] = _only

    @classmethod
    def view(cls, path: str, render: PiecedRender, workers: int, deps: str) -> Ahead:
        """A derived view, in a run per worker if its format can cut it."""
        parts = workers if render.part is not None else 1
        return cls(path, [(render_part, (path, i, parts, deps)) for i in range(parts)], joined_blobs)

    @classmethod
    def problems(cls, key: str, deps: str) -> Ahead:
        return cls(key, [(problem_rows, (deps,))])

    def start(self, pool: DecodePool) -> Future:
        """Send the jobs to the workers: a future of the combined result."""
        return _gathered([pool.run(job, *args) for job, args in self.jobs], self.combine)


def _gathered(jobs: list[Future], combine: Callable[[list[Any]], Any]) -> Future:
    """A future of combine(the jobs' results), done once every job is: with
    the first error any job met; cancelling it cancels the jobs."""
    if len(jobs) == 1 and combine is _only:
        return jobs[0]
    out: Future = Future()
    left = [len(jobs)]
    lock = threading.Lock()

    def one_done(_: Future) -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        try:
            value = combine([job.result() for job in jobs])
        except Exception as exc:  # noqa: BLE001 - a job's error (or cancellation) is the whole's
            _settle(out.set_exception, exc)
        else:
            _settle(out.set_result, value)

    def cancelled(_: Future) -> None:
        if out.cancelled():
            for job in jobs:
                job.cancel()

    out.add_done_callback(cancelled)
    for job in jobs:
        job.add_done_callback(one_done)
    return out


def _settle(setter: Callable[[Any], None], value: Any) -> None:
    try:
        setter(value)
    except InvalidStateError:
        pass  # cancelled meanwhile


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

    def start(self, pool: DecodePool, ahead: Ahead, deps: str, keep: Callable[[Any], None]) -> None:
        """Render `ahead` in the workers, for the source in state `deps`."""
        key = ahead.key
        running = ahead.start(pool)
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
