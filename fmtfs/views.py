"""A source as a tree of virtual files: paths, exact sizes, read(offset, size)
and writes.  The FUSE adapter and the CLI both go through this module, so
`fmtfs cat` and `cat` over a mount give the same bytes.  The kinds of file
are in fmtfs.treefiles (and fmtfs.twins), write-through in fmtfs.viewwriter."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from fmtfs import __version__, permissions
from fmtfs.decoders import DecodePool
from fmtfs.digest import digest
from fmtfs.entries import StreamEntry
from fmtfs.formats.base import (
    Format,
    PiecedRender,
    Problem,
    ReadOnlyView,
    Record,
    Stream,
)
from fmtfs.gcpause import paused
from fmtfs.index import Index, Progress
from fmtfs.pieces import Pieces
from fmtfs.prerender import Ahead, Prerendered, rows_of
from fmtfs.render import render_document, render_lines
from fmtfs.snapshot import snapshot_folder, source_snapshot
from fmtfs.sourcewatch import SourceWatch
from fmtfs.spill import SpilledPieces
from fmtfs.treefiles import BytesFile, IndexedFile, SlicedFile
from fmtfs.twins import ParquetFile, Twins
from fmtfs.viewfile import ViewFile
from fmtfs.viewwriter import ViewWriter

log = logging.getLogger("fmtfs")

META_INFO = "_fmtfs.json"
META_ERRORS = "_errors.jsonl"
# the index's derived-cache key of the format's own problems() (no view is named so)
FORMAT_PROBLEMS = "_format_problems"
# A derived view is rendered ahead (fmtfs.prerender) only when the native
# files it reads are this big: an 11.6 MB gvfs tree renders in 2 s, a small
# one in milliseconds, and 1,000 small ones rendered ahead by a mount that
# had just started slowed the first `ls -l` of their journal views from
# about 1.2x to 1.55x the FUSE floor.
RENDER_AHEAD_BYTES = 1 << 20
PARQUET_DIR = "parquet"
# A fresh stat re-checks the native files at most this often, and spends at
# most this share of the time checking: a check lists and stats every native
# file (45-80 ms for 10,000), and one every 50 ms while the kernel looked up
# 10,000 views made that `ls -l` O(N^2) (66 s).  The poller's forced check
# every second still shows growth to open readers (and bounds the wait).
REFRESH_INTERVAL = 0.05
CHECK_SHARE = 0.1
MAX_REFRESH_INTERVAL = 1.0
# a look at the source (SourceTree.unchanged) costing more than this is left
# to a worker thread: the FUSE loop answers nothing else meanwhile
LOOK_ON_CALLER_MAX = 0.0002
# The poller's look (SourceTree.poll) while the kernel's watch of the source
# is quiet catches only what inotify cannot see (writes through a shared
# mapping, another host's on a network filesystem): it spends at most this
# share of the time, and waits no longer than the most below.  A look every
# second at 10,000 Beats segments was a third of an `ls -l` of their views
# (3.3 -> 2.2 s, 4 alternated mounts).
QUIET_CHECK_SHARE = 0.02
QUIET_CHECK_MAX_INTERVAL = 10.0
# While the mount serves requests (the tree used within this many seconds),
# a quiet look that costs the loop more than LOOK_ON_CALLER_MAX waits
# QUIET_CHECK_MAX_INTERVAL: its stats hold the GIL the loop answers with
# (0.1-0.2 s of 10,000 kestrel queues in the middle of a 4 s `ls -l`).  A
# source of a few files (gvfs, whose daemon writes through a mapping) is
# looked at as before, busy or not.
BUSY_SECONDS = 1.0


def check_interval(cost: float) -> float:
    """How long fresh stats trust the last check of the source, given what
    that check cost (seconds of CPU): CHECK_SHARE of the time at most."""
    return min(MAX_REFRESH_INTERVAL, max(REFRESH_INTERVAL, cost / CHECK_SHARE))


def _changed(before: dict[str, ViewFile], now: dict[str, ViewFile]) -> set[str]:
    """The paths whose size or bytes a rebuild changed (for the FUSE layer:
    kept pages of them must go): views gone or new, derived and meta views
    (computed from the whole source), indexed views whose pieces changed,
    and the Parquet twins of all those (a twin follows its view).  Growth
    of a stream changes only the views it reaches: an append to a log of
    26,000 hour buckets reported them all, and every twin, at every look.
    A first tree changes every path (the checks below cost a first mount
    of those 26,000 buckets 0.06 s)."""
    if not before:
        return set(now)
    changed = {p for p in before if p not in now}
    changed |= {
        p for p, f in now.items() if not isinstance(f, ParquetFile) and not _same_state(before.get(p), f)
    }
    changed |= {
        p for p, f in now.items() if isinstance(f, ParquetFile) and (p not in before or f.view in changed)
    }
    return changed


def _same_state(before: ViewFile | None, now: ViewFile) -> bool:
    """Whether an indexed view holds the same bytes as before a rebuild."""
    return (
        isinstance(before, IndexedFile)
        and isinstance(now, IndexedFile)
        and before.entry.view_state(before.view) == now.entry.view_state(now.view)
    )


class SourceTree:
    """The whole tree of one mounted source."""

    def __init__(
        self,
        fmt: Format,
        cache_dir: Path,
        readonly: bool = False,
        progress: Progress | None = None,
        workers: int = 0,
        keep_limit: int | None = None,
        while_scanning: Callable[[], object] | None = None,
        watch: bool = False,
    ) -> None:
        """`keep_limit`: disk for rendered pieces kept across mounts
        (fmtfs.keptpieces; None: the default budget, 0: none).
        `while_scanning` is run once, while the decode workers scan the
        streams that need it (Index.update_all's `meanwhile`), if any do.
        `watch`: watch_source() before the first look, which settles it."""
        self.format = fmt
        # decode worker processes (fmtfs.decoders) that scan many streams at
        # once while indexing; `fmtfs mount` and `fmtfs index` ask for them
        self.pool = DecodePool(fmt, workers) if workers else None
        self.progress = progress  # told of every chunk indexed (fmtfs index's progress bar)
        self.readonly = readonly
        self.source_key = f"{fmt.name}:{fmt.source.resolve()}"
        permissions.private_folder(cache_dir)  # it holds decoded records (derived views, Parquet)
        self.index = Index(
            cache_dir, self.source_key, f"{__version__}/{digest(fmt.options_identity())}", keep_limit
        )
        permissions.private_file(cache_dir / "index.sqlite3")  # SQLite's journals copy its mode
        self.index_dir = cache_dir
        self.parquet_dir = cache_dir / "parquet"
        self.twins = Twins(self.parquet_dir, self.source_key, fmt)
        permissions.private_folder(self.parquet_dir, ours=True)
        self.lock = threading.RLock()
        self.write_lock = threading.Lock()
        self.files: dict[str, ViewFile] = {}
        self.dirs: dict[str, list[str]] = {"": []}
        self.created: set[str] = set()  # new views opened for writing, not yet in the source
        self.write_errors: list[Problem] = []
        # the format's problems() and the source state they are of (_format_problems)
        self.format_problems: tuple[str, list[Problem]] | None = None
        self.problems_lock = threading.Lock()
        self.deps = ""  # the state of the source the tree shows (a digest of its snapshot)
        self.prerendered = Prerendered()  # whole-source files rendered in the workers (decode_in_workers)
        self.in_workers = False  # whether decode_in_workers() has run
        self.snapshot: tuple | None = None
        self.mtime_ns = 0
        self.entries: list[StreamEntry] = []
        self.index_failures: list[Problem] = []
        self.checked = 0.0
        self.interval = REFRESH_INTERVAL  # between checks of the source (CHECK_SHARE)
        self.look_cost = 0.0  # CPU seconds the last look at the source took (_look)
        self.looked = float("-inf")  # time.monotonic() the last look began
        self.last_write = float("-inf")  # time.monotonic() of the last write through the mount
        # the kernel's word that the source's folder is as last looked at
        # (watch_source: a mount's, not a one-shot `fmtfs cat`'s)
        self.watch: SourceWatch | None = None
        self.generation = 0  # bumps whenever the tree is rebuilt
        # when the tree was last used (monotonic: a view read, opened or
        # written, a folder listed): the twin builder waits for a quiet
        # tree.  A tree is opened to be used: a mount counts as busy from
        # its start (start_builder marks it again once it serves), or a
        # Spark job right after `fmtfs mount` met a builder that had started
        # on all of wallaby's 5,195 twins (12 s of CPU beside its first
        # query: 2.6x the plain folder instead of 1.4x)
        self.last_use = time.monotonic()
        self._while_scanning = while_scanning  # the first index update's alone
        if watch:
            # started after this first look, the watch would answer "changed"
            # until the poller looked again: a stat of every native file
            # (0.2 s of CPU for 10,000 kestrel queues) during the first
            # listing of a mount
            self.watch_source()
        self.refresh(force=True)

    def decode_in_workers(self) -> None:
        """Decode chunks in worker processes from now on (the mount does,
        before it serves).  If a piece of an indexed view is not kept
        (fmtfs.keptpieces), they start now, forked (this process runs no
        other thread yet): ready at once, at the cost of a fork.  Else
        they start with the first piece that must be decoded (spawned
        then, a second each, while its reader decodes it): two idle
        workers cost the mount 60 MB, and a wholly kept mount may never
        need them; workers its first index's scan started are let go.
        Once per tree: `fmtfs mount` calls it as soon as the tree is open,
        before it imports the FUSE server, and the server again."""
        if self.in_workers:
            return
        self.in_workers = True
        if self.pool is None:
            self.pool = DecodePool(self.format)
        ahead = self._to_render_ahead()
        if not self.index.all_kept() or ahead:
            self.pool.start()
        elif self.pool.started:
            self.pool.close()
        for job in ahead:
            self.prerendered.start(self.pool, job, self.deps, self._keeper(job.key, self.deps))
        self.index.reader.use_pool(self.pool)
        self.spill_evicted_pieces()

    def _native_bytes(self, path: str) -> int:
        """The size of the native files the format says a derived view reads."""
        total = 0
        for native in self.view_natives.get(path, []):
            try:
                total += native.stat().st_size
            except OSError:
                continue  # gone since: its view goes with the next refresh
        return total

    def _keeper(self, key: str, deps: str) -> Callable[[Any], None]:
        """Where a job rendered ahead keeps its result: the derived cache."""
        if key == FORMAT_PROBLEMS:
            return lambda rows: self.index.derived_put(key, deps, orjson.dumps(rows))
        return lambda blob: self.index.derived_put(key, deps, blob)

    def _to_render_ahead(self) -> list[Ahead]:
        """What fmtfs.prerender renders in the workers as the mount starts:
        each derived view rendered a piece at a time that the derived cache
        lacks (in a run per worker, if its format can cut it) and, with
        them, the format's problems() if it lacks those (the formats whose
        problems() are costly are those with such views; for the others,
        starting the workers for them would cost more).  Only views of
        RENDER_AHEAD_BYTES of native files or more.  The problems first:
        a listing of the mount's root waits for them, and they are quick
        but for a damaged source (gvfs: a check of the tree's pointers)."""
        assert self.pool is not None
        ahead = [
            Ahead.view(path, render, self.pool.workers, self.deps)
            for path, render in self.format.derived_views().items()
            if isinstance(render, PiecedRender)
            and render.ahead
            and self._native_bytes(path) >= RENDER_AHEAD_BYTES
            and not self.index.derived_has(path, self.deps)
        ]
        if ahead and not self.index.derived_has(FORMAT_PROBLEMS, self.deps):
            ahead.insert(0, Ahead.problems(FORMAT_PROBLEMS, self.deps))
        return ahead

    def spill_evicted_pieces(self) -> None:
        """Pieces the rendered LRU evicts go to a scratch file under the
        cache folder for the mount's life (fmtfs.spill; not the pieces kept
        across mounts, fmtfs.keptpieces): a page the kernel dropped is
        re-read, not re-decoded."""
        self.index.reader.spill_to(SpilledPieces(self.index_dir))

    def watch_source(self) -> None:
        """Let the kernel tell when the source's folder changes (the mount
        does, before it serves): a `stat` that finds it quiet needs no look
        at every native file (fmtfs.sourcewatch)."""
        if self.watch is None:
            self.watch = SourceWatch.of(snapshot_folder(self.format.source)[0])

    def close(self) -> None:
        self.prerendered.cancel()
        if self.pool is not None:
            self.pool.close()
        if self.watch is not None:
            self.watch.close()
        self.index.close()

    # -- change detection -------------------------------------------------

    def refresh(self, force: bool = False) -> set[str]:
        """Re-read what changed in the source; returns the paths whose size or
        content changed (for the FUSE layer to invalidate)."""
        if not force and not self.due():
            return set()
        with self.lock:
            # checked again under the lock: a caller that waited for another
            # thread's refresh returns only once that one is done (a stat
            # right after a writer's close must not see the tree before it)
            started = time.monotonic()
            if not force and (started - self.checked < self.interval or self._quiet(started)):
                return set()
            snapshot = self._look(started)
            if snapshot is None:
                return set()
            self.snapshot = snapshot
            log.debug("the source changed: re-indexing")  # tests count these
            # the newest modification time among the native files (every stat shows it)
            self.mtime_ns = max((item[2] for item in snapshot), default=0)
            before = self.files
            self._rebuild(digest(snapshot))
            self.generation += 1
            if self.watch is not None:
                self.watch.applied()
            self._checked_at(started)
            return _changed(before, self.files)

    def poll(self) -> set[str]:
        """The mount's poller's look, every second, whatever the rate limit
        of stats says (growth must reach `tail -f`): always where there is
        no watch or it saw a change; while it is quiet, at most
        QUIET_CHECK_SHARE of the time (QUIET_CHECK_MAX_INTERVAL at most,
        and that long while a costly look would slow a busy mount).
        Returns what refresh() does."""
        if self.watch is not None and not self.watch.changed() and self.last_write <= self.looked:
            now = time.monotonic()
            wait = min(QUIET_CHECK_MAX_INTERVAL, self.look_cost / QUIET_CHECK_SHARE)
            if self.look_cost > LOOK_ON_CALLER_MAX and now - self.last_use < BUSY_SECONDS:
                wait = QUIET_CHECK_MAX_INTERVAL
            if now - self.looked < wait:
                return set()
        return self.refresh(force=True)

    def unchanged(self) -> bool:
        """The look at the source that a refresh() starts with, taken by the
        caller itself, for the FUSE loop: a thread hop costs it 0.2-0.5 ms,
        which a warm `cat` paid at its first request after a pause (median
        0.56 -> 0.30 ms), while a look at a few native files costs tens of
        microseconds.  True when the look is not due, the kernel saw no
        change since the last one (watch_source), or it found the source as
        indexed (then rate-limited again as refresh() would be); False when
        refresh() must run: the source changed, another thread holds the
        tree, or the last look cost more than LOOK_ON_CALLER_MAX (a folder
        of thousands of streams)."""
        if not self.due():
            return True
        if not self.lock.acquire(blocking=False):
            return False  # another thread looks or rebuilds: wait for it in refresh()
        try:
            started = time.monotonic()
            if started - self.checked < self.interval or self._quiet(started):
                return True
            return self.look_cost <= LOOK_ON_CALLER_MAX and self._look(started) is None
        finally:
            self.lock.release()

    def _quiet(self, started: float) -> bool:
        """Whether the watch vouches that the source is as last looked at
        (then checked as of `started`): it saw no change since that look
        began, and no write through the mount came since."""
        if self.watch is None or self.last_write > self.checked or self.watch.changed():
            return False
        self.checked = started
        return True

    def _look(self, started: float) -> tuple | None:
        """Stat the source (what that cost sets the rate limit); None when it
        is as indexed, then checked as of `started`; else its new snapshot."""
        if self.watch is not None:
            self.watch.settle()  # before the stats: a change after them is news
        self.looked = started
        cpu = time.thread_time()  # the look's own cost, not the GIL waits of a loaded machine
        snapshot = source_snapshot(self.format.source)
        self.look_cost = time.thread_time() - cpu
        self.interval = check_interval(self.look_cost)
        if snapshot == self.snapshot:
            self._checked_at(started)
            return None
        if self.watch is not None:
            self.watch.mark_changed()  # not applied yet: the next look must still happen
        return snapshot

    def _checked_at(self, started: float) -> None:
        """Rate-limit refreshes from `started` on, unless a write ended after
        it (its bytes may be missing from this snapshot: stay due)."""
        if self.last_write < started:
            self.checked = started

    def wrote(self) -> None:
        """A write through the mount changed the native files: the next
        refresh() looks at them whatever the rate limit says."""
        self.checked = float("-inf")
        self.last_write = time.monotonic()
        self.used()

    def due(self) -> bool:
        """Whether a refresh() would look at the source now (else it is a no-op)."""
        return time.monotonic() - self.checked >= self.interval

    def _rebuild(self, deps: str) -> None:
        self.deps = deps
        streams = self.format.streams()
        meanwhile, self._while_scanning = self._while_scanning, None
        indexed = self.index.update_all(streams, self.progress, self.pool, meanwhile=meanwhile)
        # the GC paused (not while the scan may fork the workers, which would
        # inherit it paused): a tree is a few objects per view, none in a
        # cycle, that collections would walk over and over (wallaby's 26,000
        # hour buckets: 0.05 s of a first mount)
        with paused():
            self._build(deps, streams, indexed)

    def _build(
        self, deps: str, streams: list[Stream], indexed: list[tuple[StreamEntry, bool] | Exception]
    ) -> None:
        """The tree of the indexed streams and the format's derived views."""
        files: dict[str, ViewFile] = {}
        entries: list[StreamEntry] = []
        shares: dict[str, list[IndexedFile]] = {}
        self.index_failures: list[Problem] = []
        for stream, found in zip(streams, indexed, strict=True):
            if isinstance(found, Exception):  # a decoder bug must not take the whole mount down
                log.error("indexing %s failed", stream.path, exc_info=found)
                self.index_failures.append(Problem(stream.path.name, 0, f"cannot decode this file: {found}"))
                continue
            entry, _ = found
            entries.append(entry)
            for view in entry.views:
                shares.setdefault(view, []).append(IndexedFile(self.index.reader, entry, view))
        # a view fed by several streams (a time bucket spanning beats segments
        # or kestrel writer files) is their shares joined in stream order
        for view, parts in shares.items():
            files[view] = parts[0] if len(parts) == 1 else SlicedFile([(part, 0) for part in parts])
        self.index.forget_missing({s.name for s in streams})
        for path, render in self.format.derived_views().items():
            if isinstance(render, list):  # ViewSlices of indexed views
                parts = [
                    (files[s.view], s.skip) for s in render if isinstance(files.get(s.view), IndexedFile)
                ]
                files[path] = SlicedFile(parts)
            else:
                files[path] = BytesFile(self._persisted(path, deps, render), digest(deps, path))
        for path in [p for p in files if p.endswith(".jsonl")]:
            mirror = f"{PARQUET_DIR}/{path[: -len('.jsonl')]}.parquet"
            files[mirror] = self.twins.twin(files[path], path)
        self.entries = entries
        self._add_meta_files(files, deps)
        self.created -= set(files)
        # what a listing shows of each view besides its size, asked of the
        # format once per rebuild (it may list the source to answer): once
        # per view made `ls -l` of N streams O(N^2)
        views = [p for p in files if not p.startswith(("_", PARQUET_DIR + "/"))]
        self.writable_views = frozenset(self.format.writable_views(streams, views))
        self.view_natives = self.format.view_sources(streams)
        self.files = files
        self._index_dirs()

    def _persisted(self, path: str, deps: str, render):
        """Wrap a derived view's renderer with the SQLite cache, so a second
        mount of an unchanged source does not recompute it."""

        def cached() -> bytes | list[Record] | Pieces:
            data = self.index.derived_get(path, deps)
            if data is None:
                data = self.prerendered.result(path, deps)  # kept by the index already
            if data is not None:
                pieces = Pieces.from_blob(data)
                return data if pieces is None else pieces
            if isinstance(render, PiecedRender):
                pieces = Pieces.of(render.pieces())
                self.index.derived_put(path, deps, pieces.blob())
                return pieces
            produced = render()
            data = produced if isinstance(produced, bytes) else render_lines(produced)
            self.index.derived_put(path, deps, data)
            return produced

        return cached

    def _index_dirs(self) -> None:
        dirs: dict[str, set[str]] = {"": set()}
        for path in list(self.files) + list(self.created):
            parent, _, name = path.rpartition("/")
            # a folder already known has its parents known: the walk up
            # stops there (a tree opens with 10,000 views in one folder)
            while parent not in dirs:
                dirs[parent] = {name}
                parent, _, name = parent.rpartition("/")
            dirs[parent].add(name)
        self.dirs = {d: sorted(children) for d, children in dirs.items()}

    # -- meta files -------------------------------------------------------

    def _add_meta_files(self, files: dict[str, ViewFile], deps: str) -> None:
        stamp = digest(deps, len(self.write_errors))
        entries = self.entries
        files[META_ERRORS] = BytesFile(lambda: self._errors(entries, deps), digest(stamp, META_ERRORS))
        files[META_INFO] = BytesFile(lambda: self._info(entries, deps), digest(stamp, META_INFO))

    def _all_problems(self, entries: list[StreamEntry], deps: str) -> list[Problem]:
        problems = [p for e in entries for p in e.problems]
        return problems + self.index_failures + self._format_problems(deps) + self.write_errors

    def _format_problems(self, deps: str) -> list[Problem]:
        """The format's problems() of the source as of `deps`: asked once per
        state of the source and kept in the index across mounts.  gvfs reads
        a whole tree for them (1.1 s for an 11.6 MB store), and every mount's
        first `ls -l` of its root paid that twice, for the sizes of
        _errors.jsonl and _fmtfs.json (2.25 s)."""
        with self.problems_lock:
            if self.format_problems is not None and self.format_problems[0] == deps:
                return self.format_problems[1]
            kept = self.index.derived_get(FORMAT_PROBLEMS, deps)
            rows = orjson.loads(kept) if kept is not None else self.prerendered.result(FORMAT_PROBLEMS, deps)
            if rows is None:  # neither kept nor rendered ahead (a rendered job kept them: _keeper)
                rows = rows_of(self.format.problems())
                self._keeper(FORMAT_PROBLEMS, deps)(rows)
            found = [Problem(file, offset, error) for file, offset, error in rows]
            self.format_problems = (deps, found)
            return found

    def early_problems(self) -> list[Problem]:
        """What a command warns about before it serves or prints: the
        problems met while indexing, the format's early ones and refused
        writes, in _errors.jsonl's order.  _errors.jsonl holds them all; a
        format whose problems() reads the whole source (gvfs trees) leaves
        those to it, so a mount does not wait for that read."""
        problems = [p for e in self.entries for p in e.problems]
        return problems + self.index_failures + self.format.early_problems() + self.write_errors

    def _errors(self, entries: list[StreamEntry], deps: str) -> bytes:
        return render_lines(
            {"file": p.file, "offset": p.offset, "error": p.error} for p in self._all_problems(entries, deps)
        )

    def _info(self, entries: list[StreamEntry], deps: str) -> bytes:
        document: dict[str, Any] = {
            "format": self.format.name,
            "source": str(self.format.source.resolve()),
            "streams": len(entries),
            "records": sum(e.record_count for e in entries),
            "errors": len(self._all_problems(entries, deps)),
            "options": self.format.public_options() | {"read_only": self.readonly},
            "details": self.format.info(),
        }
        return render_document(document)

    def record_write_error(self, path: str, offset: int, error: str) -> None:
        log.error("refused write to %s: %s", path, error)
        with self.lock:
            self.write_errors.append(Problem(path, offset, f"write refused: {error}"))
            files = dict(self.files)
            self._add_meta_files(files, digest(self.snapshot))
            self.files = files

    # -- the tree ---------------------------------------------------------

    def is_dir(self, path: str) -> bool:
        return path in self.dirs

    def exists(self, path: str) -> bool:
        return path in self.dirs or path in self.files or path in self.created

    def listdir(self, path: str) -> list[str]:
        return self.dirs.get(path, [])

    def file(self, path: str) -> ViewFile | None:
        return self.files.get(path)

    def modified_ns(self, path: str) -> int:
        """A view's modification time: its own native files' newest, so a
        change to another stream leaves it alone (the kernel drops a FUSE
        file's cached pages when its mtime changes); the source's newest
        for views computed from the whole source."""
        view = self.files.get(path)
        if isinstance(view, IndexedFile):
            return view.entry.identity.mtime_ns
        if isinstance(view, SlicedFile) and view.parts:
            return max(part.entry.identity.mtime_ns for part, _ in view.parts)
        return self.mtime_ns

    def size(self, path: str) -> int:
        view = self.files.get(path)
        return view.size() if view is not None else 0

    def read(self, path: str, offset: int, size: int) -> bytes:
        view = self.files.get(path)
        if view is None:
            if path in self.created:
                return b""
            raise FileNotFoundError(path)
        self.used()
        return view.read(offset, size)

    def read_in_memory(self, path: str, offset: int, size: int) -> bytes | None:
        """read() without decoding, disk or waiting, or None (ViewFile.read_in_memory)."""
        view = self.files.get(path)
        if view is None:
            return None
        self.used()
        return view.read_in_memory(offset, size)

    def used(self) -> None:
        """A view is read or opened, a folder listed: the tree is busy."""
        self.last_use = time.monotonic()

    def native_files_of(self, path: str) -> list[Path] | None:
        """The native files a view is decoded from (fmtfs.permissions derives
        its owner and mode from them): a stream view's file, the union of a
        sliced view's streams, a Parquet twin's view's files; None (every
        native file, all_native_files) for meta files, views being created
        and derived views the format says nothing about."""
        view = self.files.get(path)
        if isinstance(view, ParquetFile):
            path, view = view.view, view.source
        if view is None or path in (META_INFO, META_ERRORS):
            return None
        declared = self.view_natives.get(path)
        if declared is not None:
            return declared
        if isinstance(view, IndexedFile):
            return [view.entry.stream.path]
        if isinstance(view, SlicedFile):
            return list(dict.fromkeys(part.entry.stream.path for part, _ in view.parts))
        return None

    def all_native_files(self) -> list[Path]:
        """Every native file some view reads: the streams' files and those
        the format names for its derived views (Beats state.dat, kestrel
        reader files, gvfs trees)."""
        found = dict.fromkeys(entry.stream.path for entry in self.entries)
        files = self.files
        for path, natives in self.view_natives.items():
            if path in files and not isinstance(files[path], (IndexedFile, ParquetFile)):
                found.update(dict.fromkeys(natives))
        return list(found)

    def writable(self, path: str) -> bool:
        """Whether the view takes writes (its mode bits say so), as the
        format answered for the whole tree at its last rebuild."""
        if self.readonly or path not in self.files:
            return path in self.created
        return path in self.writable_views

    def open_writer(self, path: str, create: bool) -> ViewWriter:
        """Raises ReadOnlyView (-> EROFS/EACCES) or FileNotFoundError."""
        if self.readonly:
            raise ReadOnlyView(f"{path}: mounted read-only", read_only_kind=True)
        if path.startswith(("_", PARQUET_DIR + "/")):
            raise ReadOnlyView(f"{path}: this view cannot be written")
        writer = self.format.writer(path, create)
        if create:
            with self.lock:
                self.created.add(path)
                self._index_dirs()
        return ViewWriter(self, path, writer)
