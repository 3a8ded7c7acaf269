"""Decode chunks on every core: a pool of worker PROCESSES (threads would
share one GIL) that decode and render chunks for the mount, and scan
streams for a first index.

Each worker opens the format itself from (source, format name, options), as
Spark's executors do, and is sent only (stream name, chunk start, end,
state, view); it returns the rendered bytes of that view, or, given the
mount's scratch file of rendered pieces, appends them there and returns
where they went (fmtfs.spill: the bytes do not travel back).  A scan
(fmtfs.scanning) is sent (stream name, range) and returns the range's
chunk table; its progress travels back chunk by chunk on a queue the
workers inherit.  The rendered pieces a scan keeps (fmtfs.keptpieces) the
worker appends to the store file itself: only where they went travels
back, a few numbers per piece.  The pool is used by `fmtfs mount` and
`fmtfs index` only (`fmtfs cat`, Spark and tests decode in process).

Workers are forked when the pool starts in a process that runs no other
thread: `fmtfs index`, and a mount until it serves (its first index's scan,
or the workers it starts just before it serves).  They have fmtfs and the
format imported and work at once.  Started later, from a mount serving
requests on threads (whose locks a fork would copy held), they are spawned
and import fmtfs first, about a second each; spawned children re-import the
main module, which a library user's script must guard."""

from __future__ import annotations

import gc
import multiprocessing
import os
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from fmtfs.formats.base import Chunk, Format, State, Stream
from fmtfs.heap import reuse_freed_buffers
from fmtfs.keptpieces import KeptPieces
from fmtfs.render import render_chunk
from fmtfs.scanning import Progress, Scanned, ScanRange, scan_range, scan_ranges
from fmtfs.spill import SpillAppender, Spilled

# scans a job in the calling process: (job key, tick) -> what scan_all returns for it
ScanHere = Callable[[Any, Callable[[], None]], "Scanned | BaseException"]

# this worker process's format, its streams by name, and where scans report progress
_format: Format | None = None
_streams: dict[str, Stream] = {}
_progress: Any = None
_stores: dict[Path, KeptPieces] = {}  # stores of kept pieces, by path
_spills: dict[str, SpillAppender | None] = {}  # scratch files of rendered pieces, by path (None: unusable)


def _open(
    source: Path, format_name: str, options: dict[str, Any], progress: Any, parent: int, forked: bool
) -> None:
    global _format, _progress
    # forked while the GC was paused (fmtfs.gcpause: a scan in this process
    # starts the workers once its pace says they are worth it), a worker
    # would keep it paused for good
    gc.enable()
    if forked:  # standard streams on /dev/null, as _quiet_stdio gives spawned workers
        _on_devnull((0, 1, 2))
    else:  # a forked worker inherits the mount's settings
        reuse_freed_buffers()
    # the pid the pool's process gave: it may have ended already, while this
    # worker was still importing (a mount unmounted at once)
    threading.Thread(target=_end_with, args=(parent,), daemon=True, name="fmtfs-parent-watch").start()
    from fmtfs.formats import open_source

    _format = open_source(source, format_name, options)
    _progress = progress


def _end_with(parent: int) -> None:
    """End this worker once the process that started it is gone: a mount
    ends with os._exit (no pool shutdown), and a worker waiting for work
    would otherwise wait for ever (PR_SET_PDEATHSIG follows the starting
    thread, not the process, so it would end workers with a reader thread)."""
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(0)


@contextmanager
def _quiet_stdio() -> Iterator[None]:
    """Standard streams on /dev/null while children start: a worker (and the
    resource tracker multiprocessing starts with the first pool) inherits
    them, and one holding the pipes a caller reads `fmtfs mount`'s output
    from would keep that caller waiting until the mount ends."""
    saved: dict[int, int] = {}
    for fd in (0, 1, 2):
        try:
            saved[fd] = os.dup(fd)
        except OSError:  # closed: nothing to hide, nothing to restore
            pass
    try:
        _on_devnull(saved)
        yield
    finally:
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)


def _on_devnull(fds: Iterable[int]) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in fds:
        os.dup2(null, fd)
    os.close(null)


def _stream(name: str) -> Stream:
    stream = _streams.get(name)
    if stream is None:  # a stream new since the last listing: list again
        assert _format is not None
        _streams.update((s.name, s) for s in _format.streams())
        stream = _streams[name]
    return stream


def worker_format() -> Format:
    """In a worker: the worker's format, open on the pool's source (for
    functions other modules run in the pool with DecodePool.run)."""
    assert _format is not None
    return _format


def worker_stream(name: str) -> Stream:
    """In a worker: the stream `name` of the worker's source (for functions
    other modules run in the pool with DecodePool.run)."""
    return _stream(name)


def _render_chunk(
    name: str, start: int, end: int, state: State, view: str | None, spill: tuple[str, int] | None
) -> dict[str, bytes | Spilled]:
    rendered: dict[str, bytes | Spilled] = {}
    rendered.update(render_chunk(_stream(name), Chunk(start, end, state, {}), view))
    appender = _spill_appender(*spill) if spill is not None else None
    if appender is not None:
        for each, data in rendered.items():
            if data:  # at the file's limit: the bytes themselves
                rendered[each] = appender.append(data) or data
    return rendered


def _spill_appender(path: str, limit: int) -> SpillAppender | None:
    """This worker's appending end of the scratch file at `path`, opened once;
    None if it cannot be opened (the pieces then travel back as bytes)."""
    if path not in _spills:
        try:
            _spills[path] = SpillAppender(path, limit)
        except OSError:
            _spills[path] = None
    return _spills[path]


def _scan(name: str, part: ScanRange, keep: tuple[Path, int] | None, keep_last: bool) -> Scanned:
    store = None
    if keep is not None:  # the indexing process's store of kept pieces, opened here once
        store = _stores.get(keep[0])
        if store is None:
            store = _stores[keep[0]] = KeptPieces(*keep)
    return scan_range(_stream(name), part, lambda size, count: _progress.put((size, count)), store, keep_last)


def _cut(name: str, start: int | None, state: State | None, every: int) -> list[ScanRange]:
    return scan_ranges(_stream(name), start, state, every)


def _ready() -> None:
    """A no-op: submitted once per worker so they start before they are needed."""


# Jobs queued for each worker before scan_all's `meanwhile` runs: nothing
# hands them more until it returns, and `fmtfs mount`'s import of its
# server (0.13 s) outlasts a range's scan (16 ranges in all: 20 MB of
# wallaby is 45 ms a range).
MEANWHILE_AHEAD = 3

# How long a worker takes to be ready, by start method: a spawned one
# imports fmtfs and the format (about a second); a forked one has them.
START_SECONDS = {"spawn": 1.0, "fork": 0.05}


def _forkable() -> bool:
    """Whether workers may be forked from this process now: it runs no other
    thread, whose locks a fork would copy held (a mount serving requests
    does; `fmtfs index`, and a mount until it serves, do not)."""
    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


class _Shared:
    """Jobs shared out between the workers that are up, which take them
    from the front of the list, one each at a time, and this process,
    which takes them from the back (DecodePool.scan_all and cut_all)."""

    def __init__(
        self,
        submit: Callable[..., Future],
        fn: Callable[..., Any],
        jobs: dict[Any, tuple],
        failed: Callable[[Any, BaseException], Any],
    ) -> None:
        """`fn(*jobs[key])` runs a job in a worker; `failed(key, error)` is
        what a job the worker failed gives."""
        self.submit, self.fn, self.jobs, self.failed = submit, fn, jobs, failed
        self.todo = deque(jobs)
        self.running: dict[Future, Any] = {}
        self.out: dict[Any, Any] = {}

    def tick(self, slots: int) -> None:
        """Collect what the workers finished, and hand them jobs up to
        `slots` held at once."""
        for future in [f for f in self.running if f.done()]:
            key = self.running.pop(future)
            error = future.exception()
            self.out[key] = future.result() if error is None else self.failed(key, error)
        while self.todo and len(self.running) < slots:
            key = self.todo.popleft()
            self.running[self.submit(self.fn, *self.jobs[key])] = key

    def run(self, here: Callable[[Any], Any] | None, tick: Callable[[], None]) -> dict[Any, Any]:
        """Every job's result, key -> what it gave: `here(key)` (if given)
        runs them in this process meanwhile, tick() between them."""
        while self.todo or self.running:
            if self.todo and here is not None:
                key = self.todo.pop()
                self.out[key] = here(key)
            elif self.running:
                wait(self.running, timeout=0.1, return_when=FIRST_COMPLETED)
            tick()
        return self.out


class DecodePool:
    """Worker processes decoding chunks of one source, each with the
    source's format open: a chunk or a scan range is sent to one of them.
    Forked when started from a process running no other thread (ready at
    once, fmtfs imported), else spawned (about a second each)."""

    def __init__(self, fmt: Format, workers: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        self._args = (fmt.source, fmt.name, fmt.options)
        self.method: str | None = None  # "fork" or "spawn" once started
        self._pool: ProcessPoolExecutor | None = None
        self._progress: Any = None  # the queue scans report chunks on
        self._warmups: list[Future] = []  # one no-op per worker: all done once every worker is up
        self._starting = threading.Lock()  # reader threads may start the pool together

    @property
    def start_seconds(self) -> float:
        """About how long the workers would take to be ready if started now."""
        return START_SECONDS["fork" if _forkable() else "spawn"]

    def _executor(self) -> ProcessPoolExecutor:
        with self._starting:
            return self._pool or self._start()

    def _start(self) -> ProcessPoolExecutor:
        # chosen at every start: a pool restarted after a worker died may
        # find threads running that did not run at first
        self.method = "fork" if _forkable() else "spawn"
        forked = self.method == "fork"
        context = multiprocessing.get_context(self.method)
        sys.stdout.flush()
        sys.stderr.flush()
        # a forked worker quiets its own streams: it would inherit the copies
        # _quiet_stdio keeps of them (a caller's pipes)
        with nullcontext() if forked else _quiet_stdio():
            self._progress = context.SimpleQueue()  # a spawning one starts the resource tracker
            self._pool = ProcessPoolExecutor(
                self.workers,
                mp_context=context,
                initializer=_open,
                initargs=(*self._args, self._progress, os.getpid(), forked),
            )
            # every worker starts now (on the quiet streams)
            self._warmups = [self._pool.submit(_ready) for _ in range(self.workers)]
        return self._pool

    def _submit(self, fn, *args) -> Future:
        try:
            return self._executor().submit(fn, *args)
        except BrokenProcessPool:  # a worker died (killed, out of memory): start afresh
            self.close()
            return self._executor().submit(fn, *args)

    def start(self) -> None:
        """Start every worker now, so that work sent later does not wait for them."""
        self._executor()

    def run(self, fn, *args) -> Future:
        """Run `fn(*args)` in a worker (a module-level function; the Parquet
        twins' builder decodes chunks into Arrow this way, fmtfs.twinchunks)."""
        return self._submit(fn, *args)

    def submit(
        self,
        stream: str,
        start: int,
        end: int,
        state: State,
        view: str | None = None,
        spill: tuple[str, int] | None = None,
    ) -> Future[dict[str, bytes | Spilled]]:
        """A chunk's rendered bytes of `view` (None: of every view it feeds);
        with `spill` (a scratch file's shared path and limit: SpilledPieces),
        appended to that file, and where each went instead of the bytes."""
        return self._submit(_render_chunk, stream, start, end, state, view, spill)

    @property
    def started(self) -> bool:
        """Whether start() (or a job) has started the workers."""
        return self._pool is not None

    @property
    def ready(self) -> bool:
        """Whether every worker has started (imported fmtfs, opened the
        source): until then a job sent waits for a worker."""
        return self._pool is not None and all(future.done() for future in self._warmups)

    def wait_ready(self) -> None:
        """Start the workers if need be and wait until every one is up."""
        self._executor()
        for future in self._warmups:
            future.result()

    def workers_up(self) -> int:
        """How many workers have started, about (each ran a warm-up no-op;
        a quick one may have run two); 0 before start()."""
        return sum(future.done() for future in self._warmups) if self._pool is not None else 0

    def scan_all(
        self,
        jobs: dict[Any, tuple[str, ScanRange, tuple[Path, int] | None, bool]],
        progress: Progress | None,
        here: ScanHere | None = None,
        meanwhile: Callable[[], object] | None = None,
    ) -> dict[Any, Scanned | BaseException]:
        """Scan ranges of streams at once: key -> (stream name, range, the
        store of kept pieces to keep them in (its spec), whether the
        stream's last chunk is kept too) in,
        key -> what the scan found (or why it failed) out.  `progress` is
        told of every chunk, in this thread, as the workers report them.
        Workers take jobs from the front, one each at a time, once they are
        up; `here(key, tick)`, if given, scans a job in this process, taking
        them from the back and calling tick() between chunks (tick hands
        freed workers their next job and reports their progress): this
        process scans while the workers start instead of waiting for them,
        and a job is not promised to a worker still starting while this
        process could take it.  With `here`, the workers are started by
        the caller (start()), when they are worth it; without, at once.
        `meanwhile()` is run in this process once the workers are up and
        have their first jobs (MEANWHILE_AHEAD each), before any scan here:
        work this process must do anyway (fmtfs mount imports its FUSE
        server) runs beside the workers' scans instead of before them."""
        shared = _Shared(self._submit, _scan, jobs, lambda _, error: error)
        if here is None:
            self._executor()

        def tick(ahead: int = 1) -> None:
            # a worker reports a chunk before it returns its scan, so what is
            # queued now covers every scan found done below
            self.report(progress)
            shared.tick((self.workers if here is None else self.workers_up()) * ahead)

        tick()
        if meanwhile is not None:
            self.wait_ready()  # forked: a few milliseconds
            tick(MEANWHILE_AHEAD)  # no tick() comes while meanwhile() runs
            meanwhile()
        return shared.run(None if here is None else lambda key: here(key, tick), tick)

    def cut_all(
        self,
        jobs: dict[Any, tuple[str, int | None, State | None, int]],
        here: Callable[[Any], list[ScanRange]],
    ) -> dict[Any, list[ScanRange]]:
        """The ranges of streams, key -> (stream name, start, state, range
        bytes) in, key -> scan_ranges() of it out: the workers that are up
        cut from the front, one stream each at a time, while `here(key)`
        cuts in this process from the back.  A cut walks every record's
        length prefix (kestrel 100 MB: 0.17 s in this process alone), and
        the workers, started for the scan, would wait for it.  A worker
        that fails to cut leaves its stream to `here`."""
        shared = _Shared(self._submit, _cut, jobs, lambda key, _: here(key))

        def tick() -> None:  # only to workers already up: a spawned one takes a second to start
            shared.tick(self.workers_up())

        tick()
        return shared.run(here, tick)

    def report(self, progress: Progress | None) -> None:
        """Tell `progress` of the chunks the workers scanned since the last report."""
        while self._progress is not None and not self._progress.empty():
            try:
                size, count = self._progress.get()
            except (EOFError, OSError, queue.Empty):
                return
            if progress is not None:
                progress(size, count)

    def close(self) -> None:
        if self._pool is not None:
            # waits for the chunks being decoded (not the queued ones): a
            # process that ends leaves no worker writing its cache folder
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
