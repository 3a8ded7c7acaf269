"""The persistent chunk index (SQLite under --cache-dir).

For every stream it keeps the chunk table (native start/end and decoder
state) and, per view fed by the stream, the rendered length of each chunk's
piece.  With it a view's exact size is a sum, a read at any offset is a
bisect plus one chunk decode, a second mount of an unchanged source decodes
nothing, and a grown file is scanned from its last chunk on.

Threading: a StreamEntry is a snapshot, never changed once published
(fmtfs.entries).  `update()` (one refresh at a time, under `Index.lock`,
which also owns the SQLite connection) builds a new entry when a file
grows and swaps it into `entries` whole, so readers in any thread use the
entry they hold without a lock.  Reading the views' bytes is the index's
ChunkReader's job (`Index.reader`, fmtfs.chunkreader)."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import orjson

from fmtfs.chunkreader import ChunkReader
from fmtfs.decoders import DecodePool
from fmtfs.digest import digest
from fmtfs.entries import ChunkMeta, StreamEntry, ViewPieces
from fmtfs.formats.base import FileIdentity, Problem, State, Stream
from fmtfs.gcpause import paused
from fmtfs.keptpieces import Kept, KeptPieces, default_limit
from fmtfs.scanning import (
    Progress,
    Scanned,
    ScannedChunk,
    ScanRange,
    joined,
    scan_range,
    scan_ranges,
    scan_stream,
)

log = logging.getLogger("fmtfs")

SCHEMA = """
CREATE TABLE IF NOT EXISTS streams (
    id INTEGER PRIMARY KEY,
    source TEXT NOT NULL,
    name TEXT NOT NULL,
    version TEXT NOT NULL,
    inode INTEGER NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    epoch TEXT NOT NULL,  -- StreamEntry.epoch
    UNIQUE (source, name)
);
CREATE TABLE IF NOT EXISTS chunks (
    stream INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    start INTEGER NOT NULL,
    end_ INTEGER NOT NULL,
    state BLOB NOT NULL,
    count INTEGER NOT NULL,
    tmin INTEGER,
    tmax INTEGER,
    -- the chunk's piece of each view it feeds, as JSON: [[view, length], ...],
    -- with where a kept one is after its length (_piece_entry, _kept_of)
    pieces BLOB NOT NULL,
    -- the store its kept pieces are in (fmtfs.keptpieces: one per chunk,
    -- kept at once), and their compressed bytes (a piece views share: once)
    kept_file INTEGER,
    kept_bytes INTEGER NOT NULL,
    PRIMARY KEY (stream, seq)
);
CREATE TABLE IF NOT EXISTS problems (
    stream INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    file TEXT NOT NULL,
    error TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS derived (
    source TEXT NOT NULL,
    path TEXT NOT NULL,
    deps TEXT NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (source, path)
);
"""

# Bump when the tables change shape: an older cache is dropped and rebuilt.
# 4: kept pieces name their store by its id, not its inode; 5: streams' epoch;
# 6: a chunk's pieces in its row (a table of a row per piece took 0.19 s of
# a 3.4 s first mount of wallaby's 26,713 pieces)
SCHEMA_VERSION = 6

# Scans of this many bytes in all start the decode workers at once when
# update_all() is given a pool; smaller ones start them only once this
# process's own pace says it would need longer alone than a worker takes to
# start (DecodePool.start_seconds: a second spawned, next to nothing forked;
# the cost of a byte differs 30-fold between formats, so bytes alone cannot
# say).
PARALLEL_SCAN_BYTES = 64 << 20

# Streams the format can cut (Stream.cuts) are scanned in about this many
# ranges in all, so that this process and the workers end together (a
# format's cost per byte varies 30-fold: bytes say little of a range's
# time), each within these bounds: a range's round trip must cost nothing
# beside its scan.
SCAN_RANGES = 16
MIN_RANGE_BYTES = 256 << 10
MAX_RANGE_BYTES = 4 << 20

# Derived views larger than this are recomputed on a new mount, not stored.
DERIVED_STORE_LIMIT = 16 << 20

# A file unchanged for this long has settled: its last chunk is kept too
# (fmtfs.scanning: a file still being written is scanned again from its
# last chunk at every refresh, and would fill the store with copies of it).
SETTLED_NS = 60 * 10**9

# On open, a store of kept pieces more than half dead (pieces of streams
# since forgotten) and bigger than this is rewritten with its live ones.
COMPACT_DEAD_BYTES = 16 << 20


def _start_workers(pool: DecodePool) -> None:
    if not pool.started:
        pool.start()
        log.info("started %d worker processes (%s) to scan at once", pool.workers, pool.method)


@dataclass
class _ScanJob:
    """A scan update() must run: the entry it fills (rows already cut to
    `start`), where the scan starts, and the file identity it is for."""

    entry: StreamEntry
    start: int | None
    state: State | None
    identity: FileIdentity


def _chunk_row(stream: int, seq: int, chunk: ScannedChunk, pieces: list[list]) -> tuple:
    """The chunks table's row of a scanned chunk, given its `pieces`' entries."""
    tmin, tmax = chunk.times or (None, None)
    kept = set(chunk.kept.values())  # a piece views share: once
    kept_file = next(iter(kept)).file if kept else None
    state, listed = orjson.dumps(chunk.state), orjson.dumps(pieces)
    kept_bytes = sum(each.length for each in kept)
    return (
        stream,
        seq,
        chunk.start,
        chunk.end,
        state,
        chunk.count,
        tmin,
        tmax,
        listed,
        kept_file,
        kept_bytes,
    )


def _piece_entry(view: str, length: int, kept: Kept | None) -> list:
    """A piece's entry in its chunk's pieces (the chunks table's JSON):
    [view, length], and where it is kept after them when it is."""
    if kept is None:
        return [view, length]
    return [view, length, kept.at, kept.length, kept.check, kept.file]


def _kept_of(piece: list) -> Kept | None:
    """Where a piece is kept, from its _piece_entry (None: it is not)."""
    return Kept(piece[2], piece[3], piece[1], piece[4], piece[5]) if len(piece) > 2 else None


class Index:
    """Chunk tables of one source's streams, persisted in SQLite."""

    def __init__(self, cache_dir: Path, source_key: str, version: str, keep_limit: int | None = None) -> None:
        """`keep_limit`: bytes of disk for kept rendered pieces
        (fmtfs.keptpieces; None: the default budget, 0: none kept)."""
        cache_dir.mkdir(parents=True, exist_ok=True)
        self.source_key = source_key
        self.version = version
        self.db = sqlite3.connect(cache_dir / "index.sqlite3", check_same_thread=False, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self._migrate()
        self.lock = threading.RLock()
        self.entries: dict[str, StreamEntry] = {}
        self.kept: KeptPieces | None = None
        if keep_limit != 0:
            path = cache_dir / "rendered" / f"{digest(source_key)}.lz4"
            try:
                self.kept = KeptPieces(path, default_limit(cache_dir) if keep_limit is None else keep_limit)
                self._compact()
            except OSError as exc:  # keeping is an optimisation: every read then decodes
                log.warning("cannot keep rendered pieces in %s: %s", path, exc.strerror or exc)
        self.reader = ChunkReader(self.kept)  # the views' bytes

    def _compact(self) -> None:
        """Rewrite the store of kept pieces with its live ones when most of
        it is dead (pieces of streams forgotten since: rotated segments,
        replaced files).  Rows are moved only once the new file is in
        place; a crash in between leaves them pointing at the old file,
        which no longer matches: those pieces are decoded again."""
        assert self.kept is not None
        store = self.kept.file
        # the live bytes summed by SQLite, from a column per chunk: a second
        # mount of wallaby's 26,713 pieces would spend 0.1 s reading them
        (live,) = self.db.execute(
            "SELECT coalesce(sum(kept_bytes), 0) FROM chunks c JOIN streams s ON c.stream = s.id"
            " WHERE s.source=? AND kept_file=?",
            (self.source_key, store),
        ).fetchone()
        dead = self.kept.size() - live
        if dead < COMPACT_DEAD_BYTES or dead < self.kept.size() // 2:
            return
        rows = self.db.execute(
            "SELECT c.rowid, c.pieces FROM chunks c JOIN streams s ON c.stream = s.id"
            " WHERE s.source=? AND kept_file=?",
            (self.source_key, store),
        ).fetchall()
        pieces = {rowid: orjson.loads(blob) for rowid, blob in rows}
        old = {
            (rowid, i): kept
            for rowid, chunk in pieces.items()
            for i, piece in enumerate(chunk)
            if (kept := _kept_of(piece)) is not None
        }
        moved = self.kept.compacted(old.values())
        if moved is None:
            return
        log.info("rewrote the kept pieces of %s without %d dead bytes", self.source_key, dead)
        for (rowid, i), kept in old.items():
            view, length = pieces[rowid][i][:2]
            pieces[rowid][i] = _piece_entry(view, length, moved[kept])
        with self.db:  # every piece moved: the chunks' pieces are in the new file
            self.db.executemany(
                "UPDATE chunks SET pieces=?, kept_file=? WHERE rowid=?",
                [(orjson.dumps(chunk), self.kept.file, rowid) for rowid, chunk in pieces.items()],
            )

    def close(self) -> None:
        self.reader.close()
        if self.kept is not None:
            self.kept.close()

    def _tail_to_keep(self, entry: StreamEntry) -> bool:
        """Whether a stream loaded from the index has a last chunk its scan
        did not keep (the file was still being written then) that can be
        kept now: the file has settled and the store has room for it."""
        if self.kept is None or not entry.chunks or not self._settled(entry.identity):
            return False
        last = len(entry.chunks) - 1
        sizes = [
            (view, pieces.ends[-1] - (pieces.ends[-2] if len(pieces.ends) > 1 else 0))
            for view, pieces in entry.views.items()
            if pieces.seqs and pieces.seqs[-1] == last
        ]
        if all((view, last) in entry.kept for view, _ in sizes):
            return False
        # rendered bytes bound the compressed ones: a store too full to take
        # them is not asked at every mount
        return self.kept.limit - self.kept.size() > sum(size for _, size in sizes)

    def all_kept(self) -> bool:
        """Whether every piece of every indexed view is kept: reading them
        decodes nothing."""
        with self.lock:
            entries = list(self.entries.values())
        return all(
            (view, seq) in entry.kept
            for entry in entries
            for view, pieces in entry.views.items()
            for seq in pieces.seqs
        )

    def _settled(self, identity: FileIdentity) -> bool:
        """Whether a file has not changed for a while: its scan keeps its last chunk too."""
        return time.time_ns() - identity.mtime_ns > SETTLED_NS

    def _migrate(self) -> None:
        """Tables of an older shape are dropped: the index is a cache."""
        with self.db:
            if self.db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                for table in ("streams", "chunks", "pieces", "problems", "derived"):
                    self.db.execute(f"DROP TABLE IF EXISTS {table}")
            self.db.executescript(SCHEMA)
            self.db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    # -- indexing ---------------------------------------------------------

    def update(self, stream: Stream, progress: Progress | None = None) -> tuple[StreamEntry, bool]:
        """The index of `stream`, brought up to date with its file.
        Returns (entry, changed).  `progress` is told of every chunk scanned."""
        with self.lock:
            job = self._plan(stream)
            if isinstance(job, tuple):
                return job
            try:
                return self._finish(job, self._scan_here(job, progress)), True
            except BaseException:
                self._abandon(stream.name)
                raise

    def update_all(
        self,
        streams: list[Stream],
        progress: Progress | None = None,
        pool: DecodePool | None = None,
        parallel_bytes: int = PARALLEL_SCAN_BYTES,
        meanwhile: Callable[[], object] | None = None,
    ) -> list[tuple[StreamEntry, bool] | Exception]:
        """update() of every stream, in order; a stream that fails gives its
        exception in its place (the others are indexed).  With `pool`, and
        scans of `parallel_bytes` in all, the scans run in its worker
        processes and in this process at once: a stream the format can cut
        is scanned in ranges, joined after (fmtfs.scanning); this process
        takes ranges from the end of the list while the workers start, and
        they take them from the front once up; their progress reaches
        `progress` chunk by chunk; the SQLite writes stay here.  A scan a
        worker could not finish is done again in this process.  Given
        `meanwhile`, scans in more than one range start the workers at
        once and run it while they scan (DecodePool.scan_all); it is not
        run if nothing is scanned in the pool, as for scans of less than a
        range in all (MIN_RANGE_BYTES), which always run here."""
        with self.lock:
            jobs: dict[int, _ScanJob] = {}
            results: list[tuple[StreamEntry, bool] | Exception | None] = []
            for i, stream in enumerate(streams):
                try:
                    job = self._plan(stream)
                except Exception as exc:  # noqa: BLE001 - reported in the stream's place
                    results.append(exc)
                    continue
                results.append(job if isinstance(job, tuple) else None)
                if not isinstance(job, tuple):
                    jobs[i] = job
            self.db.commit()  # a failing scan's rollback must not undo the others' plans
            to_scan = sum(job.identity.size - (job.start or 0) for job in jobs.values())
            scanned: dict[int, Scanned | BaseException] = {}
            failed_here: set[int] = set()  # streams this process saw a scan of fail: not run again
            # a scan of less than a range is over before workers would be up
            # (gvfs journals: a first mount is then its imports, which forked
            # workers only contend with)
            if pool is not None and jobs and to_scan >= MIN_RANGE_BYTES:
                if to_scan >= parallel_bytes:
                    _start_workers(pool)  # they start while the streams are cut
                every = min(max(to_scan // SCAN_RANGES, MIN_RANGE_BYTES), MAX_RANGE_BYTES)
                cut = self._cut(pool, jobs, every)
                parts = {(i, n): part for i in jobs for n, part in enumerate(cut[i])}
                if len(parts) >= 2:
                    if meanwhile is not None:
                        _start_workers(pool)  # forked: they scan while meanwhile() runs here
                    scanned = self._scan_in_pool(pool, jobs, parts, progress, failed_here, to_scan, meanwhile)
            for i, job in jobs.items():
                found = scanned.get(i)
                try:
                    if i in failed_here:
                        assert isinstance(found, BaseException)
                        raise found
                    if not isinstance(found, Scanned):
                        if found is not None:
                            log.warning(
                                "a worker could not scan %s (%s); scanning here", job.entry.stream.path, found
                            )
                        found = self._scan_here(job, progress)
                    results[i] = (self._finish(job, found), True)
                except Exception as exc:  # noqa: BLE001 - reported in the stream's place
                    self._abandon(job.entry.stream.name)
                    results[i] = exc
            return results  # type: ignore[return-value]

    @staticmethod
    def _cut(pool: DecodePool, jobs: dict[int, _ScanJob], every: int) -> dict[int, list[ScanRange]]:
        """Each job's scan cut in ranges of about `every` bytes: in the
        workers too, those that are up (none before the pool starts)."""

        def here(i: int) -> list[ScanRange]:
            job = jobs[i]
            return scan_ranges(job.entry.stream, job.start, job.state, every)

        return pool.cut_all(
            {i: (job.entry.stream.name, job.start, job.state, every) for i, job in jobs.items()}, here
        )

    def _scan_here(self, job: _ScanJob, progress: Progress | None) -> Scanned:
        return scan_stream(
            job.entry.stream, job.start, job.state, progress, self.kept, self._settled(job.identity)
        )

    def _scan_in_pool(
        self,
        pool: DecodePool,
        jobs: dict[int, _ScanJob],
        parts: dict[tuple[int, int], ScanRange],
        progress: Progress | None,
        failed_here: set[int],
        to_scan: int,
        meanwhile: Callable[[], object] | None,
    ) -> dict[int, Scanned | BaseException]:
        """Scan the ranges `parts` ((job, n) -> range) here and in `pool`
        (started once this process alone would need longer for the
        `to_scan` bytes than they take to start); the scans of each job's
        ranges joined."""
        failed: set[tuple[int, int]] = set()  # ranges whose scan here failed
        began = time.monotonic()
        done = 0  # bytes scanned here

        def here(key: tuple[int, int], tick: Callable[[], None]) -> Scanned | BaseException:
            def told(size: int, count: int) -> None:
                nonlocal done
                if progress is not None:
                    progress(size, count)
                done += size
                if (
                    not pool.started
                    and (time.monotonic() - began) / done * (to_scan - done) > pool.start_seconds
                ):
                    _start_workers(pool)
                tick()

            job = jobs[key[0]]
            try:
                return scan_range(job.entry.stream, parts[key], told, self.kept, self._settled(job.identity))
            except Exception as exc:  # noqa: BLE001 - reported in the stream's place
                failed.add(key)
                return exc

        log.info(
            "scanning %d ranges of %d streams here and in up to %d worker processes",
            len(parts),
            len(jobs),
            pool.workers,
        )
        keep = self.kept.spec if self.kept is not None else None
        found = pool.scan_all(
            {
                key: (jobs[key[0]].entry.stream.name, part, keep, self._settled(jobs[key[0]].identity))
                for key, part in parts.items()
            },
            progress,
            here,
            meanwhile,
        )
        ranges: dict[int, list[Scanned | BaseException]] = {i: [] for i in jobs}
        for key in sorted(parts):  # each job's ranges in order
            ranges[key[0]].append(found[key])
        out = {i: joined(scans) for i, scans in ranges.items()}
        # a failure seen here, where the join needed it, is not retried here
        failed_here.update(key[0] for key in failed if out[key[0]] is found[key])
        return out

    def _plan(self, stream: Stream) -> tuple[StreamEntry, bool] | _ScanJob:
        """(entry, changed) when `stream` needs no scan, else the scan to run
        (its rows already cut to where the scan starts).  Under the lock."""
        identity = FileIdentity.of(stream.path)
        entry = self.entries.get(stream.name)
        if entry is None:
            entry = self._load(stream, identity)
            if entry is not None and entry.identity == identity:
                if self._tail_to_keep(entry):
                    # settled since its scan: its last chunk is scanned again, and kept
                    return self._resume(replace(entry, stream=stream), identity)
                self._add_fixed_views(entry)
                self.entries[stream.name] = entry
                return entry, True
        elif entry.identity == identity:
            if entry.stream is not stream:
                entry = self.entries[stream.name] = replace(entry, stream=stream)
            return entry, False
        grown = (
            entry is not None
            and entry.identity.inode == identity.inode
            and entry.identity.size <= identity.size
        )
        try:
            if grown:
                return self._resume(replace(entry, stream=stream), identity)
            return self._rescan(stream, identity)
        except BaseException:
            self._abandon(stream.name)
            raise

    def _finish(self, job: _ScanJob, scanned: Scanned) -> StreamEntry:
        """Store what a scan found and publish the new entry."""
        # the GC paused: a few objects per piece, none in a cycle (wallaby's
        # 26,713 pieces: 0.17-0.22 -> 0.12-0.14 s)
        with paused():
            self._store(job.entry, scanned, job.identity)
        self.entries[job.entry.stream.name] = job.entry
        self.reader.forget_stream(job.entry.stream.name)
        return job.entry

    def _abandon(self, name: str) -> None:
        """A half-scanned entry must not be trusted later: start over next time."""
        self.db.rollback()
        self.entries.pop(name, None)
        row = self.db.execute(
            "SELECT id FROM streams WHERE source=? AND name=?", (self.source_key, name)
        ).fetchone()
        if row is not None:
            self._delete_rows(row[0])
            self.db.commit()

    def forget_missing(self, names: set[str]) -> list[str]:
        """Drop streams whose files disappeared; returns their names.  Rows
        of streams this process never loaded go too (a segment deleted
        while nothing was mounted): their kept pieces are dead."""
        with self.lock:
            gone = [n for n in self.entries if n not in names]
            for name in gone:
                self._delete_rows(self.entries.pop(name).row_id)
                self.reader.forget_stream(name)
            for row_id, name in self.db.execute(
                "SELECT id, name FROM streams WHERE source=?", (self.source_key,)
            ).fetchall():
                if name not in names:
                    self._delete_rows(row_id)
            self.db.commit()
            return gone

    def _load(self, stream: Stream, identity: FileIdentity) -> StreamEntry | None:
        row = self.db.execute(
            "SELECT id, version, inode, size, mtime_ns, epoch FROM streams WHERE source=? AND name=?",
            (self.source_key, stream.name),
        ).fetchone()
        if row is None or row[1] != self._version(stream):
            return None
        row_id = row[0]
        identity = FileIdentity(str(stream.path), row[3], row[4], row[2])
        entry = StreamEntry(stream, row_id, identity, row[5])
        store = self.kept.file if self.kept is not None else None
        for seq, start, end, state, count, tmin, tmax, pieces in self.db.execute(
            "SELECT seq, start, end_, state, count, tmin, tmax, pieces FROM chunks"
            " WHERE stream=? ORDER BY seq",
            (row_id,),
        ):
            times = (tmin, tmax) if tmin is not None else None
            entry.chunks.append(ChunkMeta(start, end, orjson.loads(state), count, times))
            for piece in orjson.loads(pieces):
                view, length = piece[0], piece[1]
                entry.views.setdefault(view, ViewPieces()).add(seq, length)
                kept = _kept_of(piece)
                if kept is not None and kept.file == store:
                    entry.kept[view, seq] = kept
        entry.problems = [
            Problem(file, offset, error)
            for offset, file, error in self.db.execute(
                "SELECT offset, file, error FROM problems WHERE stream=? ORDER BY rowid", (row_id,)
            )
        ]
        return entry

    def _version(self, stream: Stream) -> str:
        return f"{self.version}/{type(stream).__qualname__}/{stream.renderer_version}"

    def _rescan(self, stream: Stream, identity: FileIdentity) -> _ScanJob:
        cur = self.db.execute(
            "SELECT id FROM streams WHERE source=? AND name=?", (self.source_key, stream.name)
        ).fetchone()
        if cur is not None:
            self._delete_rows(cur[0])
        # the file as this scan from its start finds it: a file rewritten in
        # place (another size or time) may give a view the very pieces it had,
        # not the same bytes; the same file scanned again gives the same bytes
        epoch = digest(identity)
        row_id = self.db.execute(
            "INSERT INTO streams (source, name, version, inode, size, mtime_ns, epoch)"
            " VALUES (?,?,?,?,?,?,?)",
            (self.source_key, stream.name, self._version(stream), identity.inode, 0, 0, epoch),
        ).lastrowid
        return _ScanJob(StreamEntry(stream, row_id, identity, epoch), None, None, identity)

    def _resume(self, old: StreamEntry, identity: FileIdentity) -> _ScanJob:
        """A new entry, to be re-scanned from the start of the last chunk, so
        a slowly growing file keeps full-sized chunks and a torn tail that
        completed is re-read.  `old` is left as it was: readers may hold it."""
        start: int | None = None
        state: State | None = None
        entry = replace(
            old,
            chunks=list(old.chunks),
            views=dict(old.views),
            problems=list(old.problems),
            kept=dict(old.kept),
        )
        if entry.chunks:
            last = entry.chunks.pop()
            start, state = last.start, last.state
            seq = len(entry.chunks)
            entry.views = {view: pieces.before(seq) for view, pieces in entry.views.items()}
            entry.kept = {at: kept for at, kept in old.kept.items() if at[1] < seq}
            self.db.execute("DELETE FROM chunks WHERE stream=? AND seq>=?", (entry.row_id, seq))
        # problems are re-reported by the scan; those before `start` stay
        keep_before = start if start is not None else 0
        entry.problems = [p for p in entry.problems if p.offset < keep_before]
        self.db.execute("DELETE FROM problems WHERE stream=? AND offset>=?", (entry.row_id, keep_before))
        return _ScanJob(entry, start, state, identity)

    def _store(self, entry: StreamEntry, scanned: Scanned, identity: FileIdentity) -> None:
        chunk_rows = []
        problem_rows = []
        # a resumed entry shares its ViewPieces with the entry readers hold
        # (StreamEntry): each view this scan adds to is copied first, once
        grown: dict[str, ViewPieces] = {}
        for problem in scanned.problems:
            entry.problems.append(problem)
            problem_rows.append((entry.row_id, problem.offset, problem.file, problem.error))
        for item in scanned.chunks:
            seq = len(entry.chunks)
            entry.chunks.append(ChunkMeta(item.start, item.end, item.state, item.count, item.times))
            piece_list: list[list] = []
            for view, length in item.lengths.items():
                if not length:
                    entry.views.setdefault(view, ViewPieces())
                    continue
                pieces = grown.get(view)
                if pieces is None:
                    shared = entry.views.get(view)
                    pieces = grown[view] = entry.views[view] = shared.copy() if shared else ViewPieces()
                pieces.add(seq, length)
                kept = item.kept.get(view)
                if kept is not None:
                    entry.kept[view, seq] = kept
                piece_list.append(_piece_entry(view, length, kept))
            chunk_rows.append(_chunk_row(entry.row_id, seq, item, piece_list))
        self._add_fixed_views(entry)
        entry.identity = identity
        with self.db:
            self.db.executemany("INSERT INTO chunks VALUES (?,?,?,?,?,?,?,?,?,?,?)", chunk_rows)
            self.db.executemany("INSERT INTO problems VALUES (?,?,?,?)", problem_rows)
            self.db.execute(
                "UPDATE streams SET inode=?, size=?, mtime_ns=? WHERE id=?",
                (identity.inode, identity.size, identity.mtime_ns, entry.row_id),
            )

    @staticmethod
    def _add_fixed_views(entry: StreamEntry) -> None:
        """Views a stream has even while empty (no pieces are stored for them)."""
        for view in entry.stream.view_paths():
            entry.views.setdefault(view, ViewPieces())

    def _delete_rows(self, row_id: int) -> None:
        for table in ("chunks", "problems"):
            self.db.execute(f"DELETE FROM {table} WHERE stream=?", (row_id,))
        self.db.execute("DELETE FROM streams WHERE id=?", (row_id,))

    # -- derived views ----------------------------------------------------

    def derived_get(self, path: str, deps: str) -> bytes | None:
        with self.lock:
            row = self.db.execute(
                "SELECT deps, data FROM derived WHERE source=? AND path=?", (self.source_key, path)
            ).fetchone()
        return bytes(row[1]) if row is not None and row[0] == deps else None

    def derived_has(self, path: str, deps: str) -> bool:
        """Whether derived_get(path, deps) would find it (its bytes unread)."""
        with self.lock:
            row = self.db.execute(
                "SELECT deps FROM derived WHERE source=? AND path=?", (self.source_key, path)
            ).fetchone()
        return row is not None and row[0] == deps

    def derived_put(self, path: str, deps: str, data: bytes) -> None:
        if len(data) > DERIVED_STORE_LIMIT:
            return
        with self.lock, self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO derived VALUES (?,?,?,?)", (self.source_key, path, deps, data)
            )
