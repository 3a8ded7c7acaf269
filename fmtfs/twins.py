"""Parquet twins on disk: which file a twin is, when it is built, by whom.

A twin (`parquet/<view>.parquet`) is a file
`<cache-dir>/parquet/<view key>/<state key>.parquet`: the view key is the
source and the view path, the state key the view's identity (cheap: from
the native files' identities, never by decoding) and VERSION.  A stat of a
twin whose file exists is one `stat()`.  Each view has a folder of its own
(its versions, its build lock, its last-reported marker), so finding a
view's older versions lists that small folder, not every twin of the
source (with thousands of views, one glob of the shared folder per build
was a third of the builder's time).

Who builds a twin, and when:

- `build_all(tree)` (fmtfs.twinbuilder) builds every twin that is not on disk (for `fmtfs
  index`, ahead of a mount).
- In a mount, a TwinBuilder thread at the lowest CPU priority builds, one
  at a time, every twin whose file is missing, starting right after the
  mount and again whenever the source changes.  It holds no lock that a
  stat or a read of another view waits on.
- A stat of a twin that was never built builds that one twin at once (or
  waits for the builder if it is building that very twin): it waits for no
  other twin.  In a mount, the twin of a big view is built by a child
  process for that stat, so the mount's memory stays small.
- A stat of a twin whose view changed (the source grew) while an older
  state's file exists, in a mount, keeps serving that older file, whole,
  and asks the builder for the new one; once the new file is complete it
  is renamed into place and served from the next stat on.  A mount opens
  the file for each reader (`TwinHandle`), so an open reader keeps reading
  the one whole file it opened even after the switch.

Versions are prefixes of each other.  A reader may learn a twin's size
before a switch and open it after (Spark's driver lists sizes, its
executors open the files seconds later and read the footer at the listed
length; the kernel even re-asks the size at the open).  So a new version
starts with the previous version's bytes (fmtfs.parquet_splice): reading
the old size of the new file reads exactly the old file.

- A grown view whose earlier records are unchanged (a stream that grew,
  the same native file) with a schema the new records do not change gets
  only its new rows written, as new row groups after the old file's bytes,
  under a footer listing the old row groups and the new ones: nothing is
  wasted and the old records are not decoded again.  What the schema
  depends on (fmtfs.parquet.Shape) and what the twin was built from (the
  view's JSON length, its native file) travel in the twin's key-value
  metadata.
- Otherwise (the schema changes, a derived view such as pending.jsonl
  that loses records at its start) the twin is rebuilt whole, and written
  after the old file's bytes if a stat reported a version of the twin
  within GRACE_SECONDS (the old bytes are then dead weight: no footer
  points at them); a twin nobody stat'd for that long is rebuilt without
  them.  Dead weight is bounded: a rebuild that would keep more than
  fmtfs.twinwrite.DEAD_FACTOR times the live bytes (plus DEAD_SLACK) is
  Deferred while the twin is stat'd, and the previous version, whole,
  stays served until a GRACE_SECONDS pause in stats lets the rebuild drop
  the old bytes.  A twin's file is thus at most (1 + DEAD_FACTOR) times
  its live bytes plus DEAD_SLACK, at the cost of a stale twin for a view
  rebuilt whole again and again while readers never pause.  (Any version
  counts: each is a prefix of the next, so keeping the newest file keeps
  every earlier one.  The time of the last report is a
  marker file's, so a builder child started before it knows.)

Without a mount (`fmtfs ls/cat`) there is no builder: a stat of a changed
twin builds it."""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from fmtfs.digest import digest
from fmtfs.viewfile import ViewFile

if TYPE_CHECKING:
    import pyarrow as pa

    from fmtfs.formats.schema import ViewSchema

log = logging.getLogger("fmtfs")

# In a mount, the twin of a view with more JSON bytes than this that a stat
# needs at once is built by a child process too (the mount stays small);
# smaller ones are built in the mount (no process start for each).
IN_PROCESS_LIMIT = 32 << 20

# A whole rebuild keeps the old file's bytes as its prefix if a stat
# reported the old file's size less than this long ago: a reader (a Spark
# job) may still read at that size.
GRACE_SECONDS = 600.0
NOTE_SECONDS = 30.0

# Part of every twin's file name: a change of fmtfs.parquet's typing rules
# or of the twins' layout rebuilds them (defined here, not in fmtfs.parquet:
# a mount names twins without loading pyarrow).
VERSION = 3


class Builder(Protocol):
    """What a twin asks of a mount's builder (fmtfs.twinbuilder.TwinBuilder)."""

    def request(self, twin: ParquetFile) -> None:
        """Build `twin` soon, in the background."""

    def build_now(self, views: list[str]) -> None:
        """Build the twins of `views` in a child process, returning when done."""


class Deferred(Exception):
    """A whole rebuild that would keep more dead weight than the bound
    (fmtfs.twinwrite.DEAD_FACTOR) while a reader may hold an older size:
    the previous version stays served until nobody stat'd the twin for
    GRACE_SECONDS."""


class SharedChunks(Protocol):
    """Chunks decoded once for every twin of a build round
    (fmtfs.twinchunks.ChunkArrays)."""

    def arrays(self, view: ViewFile) -> Iterable[pa.StructArray]:
        """The records of `view`, in order, as Arrow struct arrays."""


class Twins:
    """The twins of one source: where they live, and the builder if any."""

    def __init__(self, folder: Path, source_key: str, fmt: Any) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.source_key = source_key
        self.format = fmt
        self.builder: Builder | None = None  # set in a mount (fmtfs.twinbuilder)
        self.shared: SharedChunks | None = None  # set for a build round (fmtfs.twinbuilder)
        self.noted: dict[Path, float] = {}  # view folder -> monotonic time its marker was last touched
        self._remove_leftovers()

    def note_reported(self, home: Path) -> None:
        """A stat reported the size of a version of the twin in `home`: the
        modification time of a marker file says when, to this process and
        to a builder child started before (touched at most every
        NOTE_SECONDS, so a stat stays a stat)."""
        now = time.monotonic()
        if now - self.noted.get(home, -NOTE_SECONDS) >= NOTE_SECONDS:
            self.noted[home] = now
            home.mkdir(exist_ok=True)
            (home / "reported").touch()

    def reported_lately(self, home: Path) -> bool:
        """Whether a stat reported a version of the twin in `home` within
        GRACE_SECONDS."""
        try:
            return (home / "reported").stat().st_mtime >= time.time() - GRACE_SECONDS
        except FileNotFoundError:
            return False

    def _remove_leftovers(self) -> None:
        """Scratch files of builds whose process died (an unmount mid-build):
        their names carry the builder's pid (fmtfs.parquet.write_twin).
        Also the files of the flat layout of VERSION 2 and before."""
        for flat in self.folder.glob("*-*"):
            if flat.is_file():
                flat.unlink(missing_ok=True)
        for scratch in [*self.folder.glob("*/*.tmp"), *self.folder.glob("*/*.spill")]:
            pid = scratch.name.split(".")[-3]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                scratch.unlink(missing_ok=True)

    def twin(self, source: ViewFile, view: str) -> ParquetFile:
        return ParquetFile(self, source, view)

    @contextmanager
    def build_lock(self, home: Path) -> Iterator[None]:
        """One build of a view's twin at a time, across the threads of a
        mount and the builder's process (an flock per view: a bounded number
        of lock files, one per view, never deleted)."""
        home.mkdir(exist_ok=True)
        fd = os.open(home / "building.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


# looks for a twin's file, should the builder remove each version found
CURRENT_TRIES = 3

T = TypeVar("T")


class ParquetFile(ViewFile):
    """The Parquet twin of a record view (a ViewFile of the tree)."""

    def __init__(self, twins: Twins, source: ViewFile, view: str) -> None:
        self.twins, self.source, self.view = twins, source, view
        self._served: tuple[str, Path] | None = None  # (identity, file) last found whole

    @cached_property
    def home(self) -> Path:
        """The folder of this view's versions.  Found at first use: a tree
        makes a twin object per record view (wallaby's 5,194 hour buckets),
        and the data source opening it uses none of them."""
        return self.twins.folder / digest(self.twins.source_key, self.view)[:16]

    # -- which file -------------------------------------------------------

    def target(self, identity: str | None = None) -> Path:
        """The file of the view's current state (it may not exist yet)."""
        identity = self.source.identity() if identity is None else identity
        return self.home / f"{digest(identity, VERSION)[:24]}.parquet"

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
            if self.source.size() > IN_PROCESS_LIMIT:
                # decoding a big view would swell the mount: a child builds it
                builder.build_now([self.view])
                if target.exists():
                    self._served = (identity, target)
                    return target
        try:
            return self.build()
        except Deferred:  # no mount's builder to retry it: the previous version, whole
            older = self._newest_older(target)
            if older is None:
                raise
            return older

    def _newest_older(self, target: Path) -> Path | None:
        found: list[tuple[int, Path]] = []
        for path in self.home.glob("*.parquet"):
            if path != target:
                try:
                    found.append((path.stat().st_mtime_ns, path))
                except FileNotFoundError:
                    continue
        return max(found)[1] if found else None

    # -- building ---------------------------------------------------------

    def build(self) -> Path:
        """Build the current state's file unless it exists; returns it."""
        schema = self.twins.format.view_schema(self.view)
        for attempt in range(3):
            identity = self.source.identity()
            target = self.target(identity)
            with self.twins.build_lock(self.home):
                if not target.exists():
                    self._write(target, schema)
            if self.source.identity() == identity or attempt == 2:
                break
            # the view grew while its records were read: the file may hold a
            # newer state than its name says, so it is not kept under that name
            target.unlink(missing_ok=True)
        self._served = (identity, target)
        self._remove_older(target)
        return target

    def _write(self, target: Path, schema: ViewSchema | None) -> None:
        # imported here: pyarrow is loaded only by a process that builds a
        # twin, not by a mount that serves twins built by its builder child
        # (nor by the decode workers it spawns), about 60 MB of RSS each
        from fmtfs import twinwrite

        base = self._newest_older(target)
        shared = self.twins.shared
        written = twinwrite.write_version(
            self.source,
            target,
            base,
            schema,
            base_may_be_held=self.twins.reported_lately(self.home),
            shared=shared.arrays if shared is not None else None,
        )
        if not written and base is not None:
            raise Deferred(f"{self.view}: {base.stat().st_size:,} bytes of earlier versions kept already")

    def _remove_older(self, keep: Path) -> None:
        """Drop files of earlier states (never a newer one a concurrent build
        finished first)."""
        try:
            kept = keep.stat().st_mtime_ns
        except FileNotFoundError:
            return
        for old in self.home.glob("*.parquet"):
            try:
                if old != keep and old.stat().st_mtime_ns <= kept:
                    old.unlink()
            except FileNotFoundError:
                pass

    # -- the ViewFile interface -------------------------------------------

    def size(self) -> int:
        self.twins.note_reported(self.home)
        return self._on_current(lambda path: path.stat().st_size)

    def read(self, offset: int, size: int) -> bytes:
        with self.open() as handle:
            return handle.read(offset, size)

    def identity(self) -> str:
        return digest(self.source.identity(), VERSION, "parquet")

    def records(self):
        raise NotImplementedError

    def open(self) -> TwinHandle:
        """A handle on the file served now, for one reader (size and bytes
        of one file, whatever is built meanwhile)."""
        return self._on_current(TwinHandle)

    def _on_current(self, use: Callable[[Path], T]) -> T:
        """use(the file served now).  The builder may remove the version
        path() named (a newer one just switched in) before `use` reaches
        it: it looks again, instead of telling the kernel the twin does
        not exist."""
        for _ in range(CURRENT_TRIES - 1):
            try:
                return use(self.path())
            except FileNotFoundError:
                self._served = None
        return use(self.path())


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
