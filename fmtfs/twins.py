"""Parquet twins on disk: which file a twin is, when it is built, by whom.

A twin (`parquet/<view>.parquet`) is a file under `<cache-dir>/parquet`
named `<view key>-<state key>.parquet`: the view key is the source and the
view path, the state key the view's identity (cheap: from the native
files' identities, never by decoding) and fmtfs.parquet.VERSION.  A stat
of a twin whose file exists is one `stat()`.

Who builds a twin, and when:

- `build_all(tree)` builds every twin that is not on disk (for `fmtfs
  index`, ahead of a mount).
- In a mount, a TwinBuilder thread at the lowest CPU priority builds, one
  at a time, every twin whose file is missing, starting right after the
  mount and again whenever the source changes.  It holds no lock that a
  stat or a read of another view waits on.
- A stat of a twin that was never built builds that one twin at once (or
  waits for the builder if it is building that very twin): it waits for no
  other twin.
- A stat of a twin whose view changed (the source grew) while an older
  state's file exists, in a mount, keeps serving that older file, whole,
  and asks the builder for the new one; once the new file is complete it
  is renamed into place and served from the next stat on.  Readers hold
  the file open (`TwinHandle`), so an open reader keeps reading the file
  whose size it was told even after the switch.

Without a mount (`fmtfs ls/cat`) there is no builder: a stat of a changed
twin builds it."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fmtfs import parquet
from fmtfs.index import digest

if TYPE_CHECKING:
    from fmtfs.views import SourceTree, ViewFile

log = logging.getLogger("fmtfs")

# Told after every twin build_all finishes: (twins done, twins to build).
TwinProgress = Callable[[int, int], None]

# A twin rebuilt because its view grew is rebuilt again no sooner than
# this many times its last build took (a live queue grows every second).
REBUILD_SPACING = 5.0


class Twins:
    """The twins of one source: where they live, and the builder if any."""

    def __init__(self, folder: Path, source_key: str, fmt: Any) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.source_key = source_key
        self.format = fmt
        self.builder: TwinBuilder | None = None  # set in a mount
        self._building: dict[str, threading.Lock] = {}
        self._building_lock = threading.Lock()

    def twin(self, source: ViewFile, view: str) -> ParquetFile:
        return ParquetFile(self, source, view)

    def build_lock(self, target: Path) -> threading.Lock:
        """One build per target file at a time, across the threads of a mount."""
        with self._building_lock:
            return self._building.setdefault(target.name, threading.Lock())


class ParquetFile:
    """The Parquet twin of a record view (a ViewFile of the tree)."""

    def __init__(self, twins: Twins, source: ViewFile, view: str) -> None:
        self.twins, self.source, self.view = twins, source, view
        self.prefix = digest(twins.source_key, view)[:16] + "-"
        self._served: tuple[str, Path] | None = None  # (identity, file) last found whole

    # -- which file -------------------------------------------------------

    def target(self, identity: str | None = None) -> Path:
        """The file of the view's current state (it may not exist yet)."""
        identity = self.source.identity() if identity is None else identity
        return self.twins.folder / f"{self.prefix}{digest(identity, parquet.VERSION)[:24]}.parquet"

    def built(self) -> bool:
        return self.target().exists()

    def path(self) -> Path:
        """The file served now: the current state's, else (in a mount, while
        the builder makes it) the newest earlier one, else built now."""
        identity = self.source.identity()
        served = self._served
        if served is not None and served[0] == identity:
            return served[1]
        target = self.target(identity)
        if target.exists():
            self._served = (identity, target)
            return target
        builder = self.twins.builder
        if builder is not None:
            older = self._newest_older(target)
            if older is not None:
                builder.request(self)
                return older
        return self.build()

    def _newest_older(self, target: Path) -> Path | None:
        found: list[tuple[int, Path]] = []
        for path in self.twins.folder.glob(self.prefix + "*.parquet"):
            if path != target:
                try:
                    found.append((path.stat().st_mtime_ns, path))
                except FileNotFoundError:
                    continue
        return max(found)[1] if found else None

    # -- building ---------------------------------------------------------

    def build(self) -> Path:
        """Build the current state's file unless it exists; returns it."""
        fmt = self.twins.format
        from fmtfs import schemas

        schema = fmt.parquet_schema(self.view)
        keys = schemas.bytes_keys(fmt.name, self.view)
        for attempt in range(3):
            identity = self.source.identity()
            target = self.target(identity)
            with self.twins.build_lock(target):
                if not target.exists():
                    parquet.write_twin(self.source.records(), schema, target, keys)
            if self.source.identity() == identity or attempt == 2:
                break
            # the view grew while its records were read: the file may hold a
            # newer state than its name says, so it is not kept under that name
            target.unlink(missing_ok=True)
        self._served = (identity, target)
        self._remove_older(target)
        return target

    def _remove_older(self, keep: Path) -> None:
        """Drop files of earlier states (never a newer one a concurrent build
        finished first)."""
        try:
            kept = keep.stat().st_mtime_ns
        except FileNotFoundError:
            return
        for old in self.twins.folder.glob(self.prefix + "*.parquet"):
            try:
                if old != keep and old.stat().st_mtime_ns <= kept:
                    old.unlink()
            except FileNotFoundError:
                pass

    # -- the ViewFile interface -------------------------------------------

    def size(self) -> int:
        return self.path().stat().st_size

    def read(self, offset: int, size: int) -> bytes:
        with self.open() as handle:
            return handle.read(offset, size)

    def identity(self) -> str:
        return digest(self.source.identity(), parquet.VERSION, "parquet")

    def records(self):
        raise NotImplementedError

    def open(self) -> TwinHandle:
        """A handle on the file served now, for one reader (size and bytes
        of one file, whatever is built meanwhile)."""
        return TwinHandle(self.path())


class TwinHandle:
    """An open twin file: pread at any offset, the file's own size."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY)

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def read(self, offset: int, size: int) -> bytes:
        return os.pread(self.fd, max(0, min(size, self.size() - offset)), offset)

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> TwinHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def twins_of(tree: SourceTree) -> list[ParquetFile]:
    return [f for f in list(tree.files.values()) if isinstance(f, ParquetFile)]


def build_all(tree: SourceTree, progress: TwinProgress | None = None) -> int:
    """Build every twin of `tree` not on disk yet (`fmtfs index`); returns
    how many were built.  `progress(done, total)` after each."""
    missing = [t for t in twins_of(tree) if not t.built()]
    for done, twin in enumerate(missing, 1):
        twin.build()
        if progress is not None:
            progress(done, len(missing))
    return len(missing)


class TwinBuilder:
    """A background thread building missing twins of a mounted tree, one at
    a time, at the lowest CPU priority, the twins a stat asked for first."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self.wake = threading.Event()
        self.stopped = False
        self.requested: dict[str, ParquetFile] = {}  # view -> twin, asked for by a stat
        self.failed: set[str] = set()  # target names whose build raised
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

    def _run(self) -> None:
        try:  # Linux: the priority of this thread only
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except OSError:
            pass
        settled = -1  # the generation whose twins were all built or tried
        while not self.stopped:
            generation = self.tree.generation
            if generation == settled and not self.requested:
                self.wake.wait(1.0)
                self.wake.clear()
                continue
            todo = [t for t in twins_of(self.tree) if not t.built()]
            if not todo or all(t.target().name in self.failed for t in todo):
                settled = generation
            for twin in todo:
                for asked in self._take_requested():
                    self._build(asked)
                if self.stopped or self.tree.generation != generation:
                    break  # the tree changed: list again
                self._build(twin)
            for asked in self._take_requested():
                self._build(asked)
            if todo and self.tree.generation == generation:
                self.wake.wait(1.0)  # twins waiting for their rebuild spacing
                self.wake.clear()

    def _take_requested(self) -> list[ParquetFile]:
        with self.lock:
            asked, self.requested = list(self.requested.values()), {}
        return asked

    def _build(self, twin: ParquetFile) -> None:
        name = twin.target().name
        if name in self.failed or time.monotonic() < self.next_rebuild.get(twin.view, 0.0):
            return
        started = time.monotonic()
        try:
            twin.build()
        except Exception:
            log.exception("building the Parquet twin of %s failed", twin.view)
            self.failed.add(name)
            return
        took = time.monotonic() - started
        self.next_rebuild[twin.view] = time.monotonic() + REBUILD_SPACING * took
        log.info("built the Parquet twin of %s in %.1f s", twin.view, took)


def start_builder(tree: SourceTree) -> TwinBuilder:
    """Build the missing twins of a mounted tree in the background."""
    return TwinBuilder(tree).start()
