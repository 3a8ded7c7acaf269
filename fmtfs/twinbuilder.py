"""Building a tree's Parquet twins: all of them ahead of a mount (`fmtfs
index`), or in the background of a mount, in a child process at the
lowest CPU priority (fmtfs.twins says which file a twin is and when it is
built)."""

from __future__ import annotations

import ctypes
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from fmtfs.twins import Deferred, ParquetFile
from fmtfs.views import SourceTree

log = logging.getLogger("fmtfs")

# Told after every twin build_all finishes: (twins done, twins to build).
BuildProgress = Callable[[int, int], None]

# A twin rebuilt because its view grew is rebuilt again no sooner than
# this many times its last build took (a live queue grows every second).
REBUILD_SPACING = 5.0

# Twins nobody asked for are built once the tree was not used (no view
# read or opened, no folder listed: SourceTree.used) for this long: a
# build's child process would otherwise add its memory and I/O to a `cat`
# or a Spark job reading the JSON views (a stat that needs a twin does not
# wait for this).
QUIET_SECONDS = 2.0


# What the builder's child says of each view (one line each, after a tab).
BUILT, DEFERRED = "built", "deferred"

# A Deferred rebuild (fmtfs.twins) is tried again this much later.
DEFERRED_RETRY = 60.0


# The child's pyarrow allocates with malloc: its default pool (mimalloc)
# keeps the pages it freed, 15-30 MB more at the builder's peak (measured on
# a pending.jsonl of 334,000 rows); only the environment reaches the pool
# Arrow's C++ code uses (the Parquet writer, IPC reads).
CHILD_POOL = {"ARROW_DEFAULT_MEMORY_POOL": "system"}


def twins_of(tree: SourceTree) -> list[ParquetFile]:
    return [f for f in list(tree.files.values()) if isinstance(f, ParquetFile)]


def build_all(tree: SourceTree, progress: BuildProgress | None = None) -> int:
    """Build every twin of `tree` not on disk yet (`fmtfs index`); returns
    how many were built.  `progress(done, total)` after each."""
    missing = [t for t in twins_of(tree) if not t.built()]
    built = 0
    with sharing_chunks(tree, missing):
        for done, twin in enumerate(missing, 1):
            try:
                twin.build()
                built += 1
            except Deferred as why:  # a mount's readers hold its size: its builder rebuilds it later
                log.info("%s", why)
            if progress is not None:
                progress(done, len(missing))
    return built


@contextmanager
def sharing_chunks(tree: SourceTree, twins: list[ParquetFile]) -> Iterator[None]:
    """A build round of `twins`: each chunk is decoded once for all of them
    (fmtfs.twinchunks)."""
    from fmtfs.twinchunks import ChunkArrays  # pyarrow: not in a mount that builds no twin itself

    with ChunkArrays(tree.twins.folder, [t.source for t in twins]) as chunks:
        if tree.pool is not None:  # fmtfs index: decoded on every core
            chunks.prefetch(tree.pool, [t.source for t in twins])
        tree.twins.shared = chunks
        try:
            yield
        finally:
            tree.twins.shared = None


class TwinBuilder:
    """Builds the missing twins of a mounted tree in the background: a
    thread of the mount hands the views to build (the ones a stat asked for
    first) to a child process at the lowest CPU priority, one round at a
    time.  The decoding, its memory and the GIL are the child's: the mount
    keeps serving at its own pace and size."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self.wake = threading.Event()
        self.stopped = False
        self.requested: dict[str, ParquetFile] = {}  # view -> twin, asked for by a stat
        self.failed: set[str] = set()  # target names whose build failed
        self.next_rebuild: dict[str, float] = {}  # view -> earliest monotonic time
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="fmtfs-twins", daemon=True)

    def start(self) -> TwinBuilder:
        self.tree.twins.builder = self
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped = True
        self.wake.set()

    def request(self, twin: ParquetFile) -> None:
        with self.lock:
            self.requested[twin.view] = twin
        self.wake.set()

    def build_now(self, views: list[str]) -> None:
        build_in_child(self.tree, views)

    def _run(self) -> None:
        settled = -1  # a generation whose twins are all built or failed
        while not self.stopped:
            if not self.requested and self._busy():
                self.wake.wait(QUIET_SECONDS)
                self.wake.clear()
                continue
            generation = self.tree.generation
            if generation != settled or self.requested:
                todo = self._todo()
                if todo:
                    self._build(todo)
                    continue
                if not self.requested and not self._waiting():
                    settled = generation
            self.wake.wait(1.0)
            self.wake.clear()

    def _busy(self) -> bool:
        """Whether the tree's views are being used (SourceTree.used)."""
        return time.monotonic() - self.tree.last_use < QUIET_SECONDS

    def _todo(self) -> list[ParquetFile]:
        """Twins to build now, the ones asked for first."""
        with self.lock:
            asked, self.requested = list(self.requested.values()), {}
        now = time.monotonic()
        seen: set[str] = set()
        todo = []
        for twin in [*asked, *twins_of(self.tree)]:
            if twin.view in seen or now < self.next_rebuild.get(twin.view, 0.0):
                continue
            seen.add(twin.view)
            if twin.target().name not in self.failed and not twin.built():
                todo.append(twin)
        return todo

    def _waiting(self) -> bool:
        """Whether a twin waits for its rebuild spacing."""
        now = time.monotonic()
        return any(when > now for when in self.next_rebuild.values())

    def _build(self, todo: list[ParquetFile]) -> None:
        started = time.monotonic()
        done = build_in_child(self.tree, [t.view for t in todo])
        took = time.monotonic() - started
        for twin in todo:
            if done.get(twin.view) == BUILT:
                self.next_rebuild[twin.view] = time.monotonic() + REBUILD_SPACING * took / len(todo)
            elif done.get(twin.view) == DEFERRED:  # tried again once stats may have paused
                self.next_rebuild[twin.view] = time.monotonic() + DEFERRED_RETRY
            else:
                self.failed.add(twin.target().name)
        log.info("built %d Parquet twins in %.1f s", len(done), took)


def start_builder(tree: SourceTree) -> TwinBuilder:
    """Build the missing twins of a mounted tree in the background, once
    the tree has been quiet for QUIET_SECONDS since the mount began to
    serve: a first mount's index build outlasts that quiet time (2.4 s for
    100 MB of wallaby), and a builder that looked at all 26,000 twins of
    such a log at once made `cat` of 20,000 lines >> its view take
    0.84-1.37 s instead of 0.24-0.40 s."""
    tree.used()
    return TwinBuilder(tree).start()


def build_in_child(tree: SourceTree, views: list[str]) -> dict[str, str]:
    """Build the twins of `views` in a child process; returns view -> BUILT
    or DEFERRED for the views it did not fail.  The job (options, key included) travels on the child's stdin,
    never on its command line."""
    fmt = tree.format
    job = {
        "source": fmt.source,
        "format": fmt.name,
        "options": fmt.options,
        "cache_dir": tree.index_dir,
        "views": views,
        "parent": os.getpid(),
    }
    done = subprocess.run(
        [sys.executable, "-c", "from fmtfs.twinbuilder import child_main; child_main()"],
        input=pickle.dumps(job),
        env={**os.environ, **CHILD_POOL},
        capture_output=True,
        check=False,
    )
    for line in done.stderr.decode(errors="replace").splitlines():
        log.warning("twin builder: %s", line)
    outcomes = (line.rpartition("\t") for line in done.stdout.decode().splitlines())
    return {view: outcome for view, _, outcome in outcomes}


def child_main() -> None:
    """The builder's child process: build the twins of a job read from stdin,
    printing each view with what became of its twin; exits when its mount is gone."""
    from fmtfs.formats import open_source

    os.nice(19)
    job = pickle.loads(sys.stdin.buffer.read())
    _die_with_parent(job["parent"])
    parent = job["parent"]
    tree = SourceTree(open_source(job["source"], job["format"], job["options"]), job["cache_dir"])
    by_view = {twin.view: twin for twin in twins_of(tree)}
    todo = [by_view[view] for view in job["views"] if view in by_view]  # others left the source
    with sharing_chunks(tree, todo):
        for twin in todo:
            if os.getppid() != parent:
                return  # the mount ended
            try:
                twin.build()
            except Deferred:
                print(f"{twin.view}\t{DEFERRED}", flush=True)
                continue
            except Exception as exc:  # noqa: BLE001 - one bad view must not stop the others
                print(f"{twin.view}: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            print(f"{twin.view}\t{BUILT}", flush=True)


def _die_with_parent(parent: int) -> None:
    """Linux: the kernel kills this process when the mount's ends (an
    unmount mid-build must not leave a builder writing into the cache)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        sys.exit(0)  # it ended before the line above
