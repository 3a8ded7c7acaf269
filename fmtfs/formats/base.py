"""The contract between a native format and the layers above it.

A format module knows native bytes and plain Python records; it knows
nothing of FUSE, SQLite or JSON text.  Everything above (index, views,
rendering, FUSE, CLI, Spark) is shared by all formats.

Vocabulary
----------
source   the folder (or single file) the user mounts.
stream   one native file whose records are read in order (a wallaby log,
         a beats segment, a kestrel writer file, a proio file, a gvfs
         journal).  A stream is scanned once into chunks; the chunk table
         is persisted by fmtfs.index so a second mount decodes nothing.
chunk    a run of consecutive records of one stream that can be decoded on
         its own from (start, state).  The scan yields, for each chunk, its
         records *partitioned by view path*: one chunk of a wallaby log
         feeds `LOG/records.jsonl` and one or more `LOG/buckets/<b>.jsonl`.
derived  a view computed from the whole source (kestrel pending, gvfs
view     metadata, beats pending ...).  It is rendered whole and cached
         keyed by the identities of all native files.
record   a dict already in the JSON shape of LAYOUT.md, keys in order
         (see fmtfs.shape for times, bytes and names).
schema   what the format declares of a record view's fields (times and
         their precision, opaque bytes, nested objects: fmtfs.formats.schema),
         so the Parquet twins and the Spark data source type them without
         guessing from the JSON text (Format.view_schema).
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

# BadRecord lives with the other error kinds (fmtfs.shape raises it too and
# sits below the formats); formats keep importing it from here
from fmtfs.errors import BadRecord, FormatError  # noqa: F401
from fmtfs.formats import options as declared
from fmtfs.formats.schema import ViewSchema

if TYPE_CHECKING:
    from fmtfs.formats.card import Card

Record = dict[str, Any]
# A decoded record and the view paths it is in (Stream.decode_iter).
Routed = tuple[Record, tuple[str, ...]]
# Opaque, JSON-serialisable decoder state (e.g. the next sequence number, a
# CTR block counter, proio metadata carried across buckets).
State = dict[str, Any]


class ReadOnlyView(Exception):
    """The view exists but cannot be written: EACCES, or EROFS when the
    whole kind of file is read-only (a legacy journal, a `-o ro` mount)."""

    def __init__(self, message: str, read_only_kind: bool = False) -> None:
        super().__init__(message)
        self.read_only_kind = read_only_kind


@dataclass(frozen=True)
class Problem:
    """One line of `_errors.jsonl`."""

    file: str
    offset: int
    error: str


@dataclass
class Chunk:
    """A decodable run of records; `records` is filled by scan() and decode()."""

    start: int  # native offset where decoding of this chunk begins
    end: int  # native offset just after its last record
    # What decode() needs besides the bytes in [start, end).  A grown stream
    # is scanned again from its last chunk's (start, state), so the state is
    # all a scan needs to resume too.
    state: State
    records: dict[str, list[Record]] = field(default_factory=dict)
    # (earliest, latest) record time in ns since the epoch (UTC), for formats
    # whose records carry a time; None when none of them does.  Kept in the
    # index so time filters and time buckets can skip whole chunks.
    times: tuple[int, int] | None = None
    # Rendered lengths (bytes of JSON Lines) of views a scan knows already,
    # because it dumped their records anyway (Beats checks every chunk with
    # one orjson pass): the index takes them instead of dumping again.
    lengths: dict[str, int] = field(default_factory=dict)
    # Records of the stream's own (first) view, for a chunk of measured():
    # its records are not kept, `lengths` holds every view's.
    count: int | None = None
    # Every view's JSON Lines bytes, for a chunk of measured(render=True);
    # views with the same bytes may share one object (kept once).
    rendered: dict[str, bytes | bytearray] | None = None


class Boundary(Chunk):
    """What a scan given `stop` yields in place of the first chunk that
    starts at or past it (Stream.scan): that chunk's start and the state a
    scan from there needs; no bytes, no records."""


def boundary(at: int, state: State) -> Boundary:
    return Boundary(at, at, state)


# Grid-cut formats (Beats plaintext segments, kestrel writer files) end a
# chunk at the first record at or past every multiple of CUT_GRID in the
# file too, wherever a scan started: that record then starts a chunk of
# every scan that reaches it, so a scan can be cut there (Stream.cuts) by
# finding the record near the line instead of walking every record before
# it.  One extra, shorter chunk per MiB at most.
CUT_GRID = 1 << 20


def grid_end(pos: int, most: int, grid: int) -> int:
    """Where a chunk starting at `pos` ends, at its first record at or past
    it: `most` bytes on, or the next grid line if that comes first."""
    return min(pos + most, (pos // grid + 1) * grid)


def grid_line(last: int, every: int, grid: int) -> int:
    """The grid line nearest `every` bytes past the cut at `last`, past it."""
    return max(last // grid + 1, (last + every + grid // 2) // grid) * grid


def grid_cuts(
    pos: int, end: int, every: int, grid: int, record_at: Callable[[int, int], int | None]
) -> Iterator[int]:
    """The cuts of a scan from the record at `pos`: the first record past
    grid lines about `every` bytes apart, before `end`, each found by
    `record_at(last cut, line)`; they end where it finds none."""
    last = pos
    while (line := grid_line(last, every, grid)) < end:
        at = record_at(last, line)
        if at is None:
            return
        yield at
        last = at


@dataclass(frozen=True)
class FileIdentity:
    """What tells an unchanged native file from a changed one."""

    path: str
    size: int
    mtime_ns: int
    inode: int

    @classmethod
    def of(cls, path: str | os.PathLike[str]) -> FileIdentity:
        st = os.stat(path)
        return cls(os.fspath(path), st.st_size, st.st_mtime_ns, st.st_ino)


class Stream(ABC):
    """One native file read record by record."""

    # Bump when the records a scan produces change shape, so persisted
    # indexes from older code are discarded rather than trusted.
    renderer_version: ClassVar[int] = 1

    def __init__(self, name: str, path: Path) -> None:
        self.name = name  # stable key inside the source, e.g. "segments/3"
        self.path = path

    @abstractmethod
    def scan(
        self, start: int | None, state: State | None, stop: int | None = None
    ) -> Iterator[Chunk | Problem]:
        """Walk the file from `start` (None: from the beginning) yielding chunks
        with records filled in, and Problems for damage met.  Stops quietly at
        a clean end (EOF, zero tail) and after reporting a torn/bad record; the
        last chunk's `end` is where a later scan of the grown file resumes.

        `stop` (given only to a stream with cuts(), one of them: the scan of a
        range that ends there) lets the scan end at the first chunk that would
        start at or past it, yielding `boundary(its start, its state)` instead
        of decoding it: the range scan needs no more to see whether the next
        range starts there, and decoding that chunk would double its cost
        (fmtfs.scanning).  Ignoring `stop` is correct, only slower."""

    def measured(
        self, start: int | None, state: State | None, render: bool = False, stop: int | None = None
    ) -> Iterator[Chunk | Problem] | None:
        """scan() as the index takes it: the same chunks and problems, each
        chunk with `count` and every view's rendered length in `lengths`
        and no records, each record measured and dropped as soon as it is
        decoded (a chunk's worth of records, kept and dumped at once, costs
        twice the time in Beats: cold caches); with `render`, each chunk
        also holds its views' bytes (`rendered`), exactly render_chunk()'s;
        `stop` as for scan().  None (the default): the index measures
        scan()'s records."""
        return None

    def cuts(self, start: int | None, state: State | None, every: int) -> Iterator[tuple[int, State]]:
        """Where a scan from (start, state) could be cut so that its ranges
        are scanned at once (fmtfs.scanning): (offset, state) pairs, in
        order, about `every` native bytes apart, each the start of a chunk
        scan(start, state) yields and the state a scan from there needs
        (the chunk's own state may hold more, learnt from its records).
        Found cheaply, decoding nothing: from length prefixes, or (Beats,
        kestrel) by looking near grid lines at which the format's chunks
        also end (grid_cuts); stop at the first thing that does not look
        right (the scan reports it).  A cut that turns out wrong costs time,
        never correctness: the scan before it then runs on to the end.  A
        stream with cuts takes `stop` in scan() and measured().  The
        default, no cuts: the stream is scanned by one job."""
        return iter(())

    @abstractmethod
    def decode(self, chunk: Chunk) -> dict[str, list[Record]]:
        """Decode one chunk previously produced by scan() (records empty)."""

    def decode_iter(self, chunk: Chunk) -> Iterator[Routed] | None:
        """decode() record by record for a renderer: each record as soon as it
        is decoded, with the views it is in (a view's records in its order),
        so that no chunk's worth of records is kept.  None (the default): this
        stream decodes whole chunks only, through decode().  Worth it where
        records are big nested values (Beats' CBOR events)."""
        return None

    def render(self, chunk: Chunk, view: str | None = None) -> dict[str, bytes] | None:
        """fmtfs.render.render_chunk() done by the stream itself, from the
        chunk's native bytes, building no records (wallaby's lines from a
        template): every view's bytes, or `view`'s alone ({} when the chunk
        has none of it).  The same bytes as rendering decode()'s records.
        None (the default): render_chunk renders the records."""
        return None

    def view_records(self, chunk: Chunk, view: str) -> Iterable[Record] | None:
        """The records of `view` alone in one chunk, in order: what a reader
        of one view needs, without routing each record to the other views
        it is in (a Beats or wallaby record's time bucket) or building
        records of views nobody asked for.  None (the default): no cheaper
        way than decode_iter() / decode() for this view."""
        return None

    def records_of(self, chunk: Chunk, view: str) -> list[Record]:
        """decode()'s records of one view, through view_records() where the
        stream has a cheaper way (a Spark task reads one view)."""
        records = self.view_records(chunk, view)
        return self.decode(chunk).get(view, []) if records is None else list(records)

    def view_paths(self) -> list[str]:
        """View paths this stream always has, even while empty (so an empty
        segment still shows `segments/<id>.jsonl`)."""
        return []


class Writer(ABC):
    """Encodes records written into a view into the native files.

    mode "append": each complete JSON line is a record appended in order.
    mode "replace": the whole written file is one JSON document applied on
    close (kestrel `readers/<reader>.json`)."""

    mode: ClassVar[str] = "append"

    @abstractmethod
    def write(self, records: list[Record]) -> None:
        """Validate *all* records first (raise BadRecord, writing nothing),
        then encode and write them, flushed to the OS.  fmtfs calls this once
        per write() with the complete lines it carried."""

    def sync(self) -> None:  # noqa: B027 - optional hook
        """fsync the native files (called on fsync() and close())."""


# A derived view renders to records (for `.jsonl` views, which also get a
# Parquet twin) or to finished bytes (`.json`, `.txt`).
DerivedRender = Callable[[], "list[Record] | bytes"]


class PiecedRender:
    """A DerivedRender of a big `.jsonl` view that renders its lines a
    piece at a time (jsonlines.render_pieces: a few thousand whole lines
    each): called, it
    returns them all as bytes; the view tree takes `pieces()` instead and
    keeps them compressed (fmtfs.pieces), so neither the rendering nor the
    mount holds the view's records or its whole text, and the derived
    cache keeps them across mounts."""

    def __init__(
        self,
        pieces: Callable[[], Iterator[bytes]],
        part: Callable[[int, int], Iterator[bytes]] | None = None,
        ahead: bool = True,
    ) -> None:
        self.pieces = pieces
        # part(i, n): the pieces of the i-th of n runs of the view's lines,
        # which in order are pieces()'s lines; a format that can cut its
        # view so has it rendered by n processes at once (fmtfs.prerender)
        self.part = part
        # whether a mount renders it in its workers as it starts (the view a
        # user of the format looks at first), or only once it is looked at
        self.ahead = ahead

    def __call__(self) -> bytes:
        return b"".join(self.pieces())


@dataclass(frozen=True)
class ViewSlice:
    """An indexed view from its `skip`-th record on.  A derived view given as
    a list of slices (beats pending: the rest of one segment, then whole
    later segments) is served from the chunk index: exact size without
    decoding, random reads that render one chunk, nothing held in memory."""

    view: str
    skip: int = 0


class Format(ABC):
    """One native format bound to one source."""

    name: ClassVar[str]
    # its options: every front end (flags, -o, Spark, _fmtfs.json) spells
    # them from here (fmtfs.formats.options)
    declared_options: ClassVar[tuple[declared.Option, ...]] = ()
    # what detection looks for, for the error when nothing is found
    # ("wallaby LOG/IDX files")
    looks_for: ClassVar[str] = "its files"
    # a title for `fmtfs --help` ("the wallaby write-ahead log")
    title: ClassVar[str] = ""
    # environment variables the format reads: (name, what for), for --help
    environment: ClassVar[tuple[tuple[str, str], ...]] = ()

    def __init_subclass__(cls, card: Card | None = None, **kwargs: Any) -> None:
        """`class BeatsFormat(Format, card=CARD)`: the facts above (and
        detect) from the format's card, which the command line reads without
        importing the format (fmtfs.formats.card)."""
        super().__init_subclass__(**kwargs)
        if card is not None:
            cls.name, cls.title, cls.looks_for = card.name, card.title, card.looks_for
            cls.declared_options, cls.environment = card.declared_options, card.environment
            cls.detect = classmethod(lambda _cls, source: card.detect(source))  # type: ignore[method-assign]

    def __init__(self, source: Path, options: dict[str, Any]) -> None:
        self.source = source
        # option name -> parsed value; declared options missing get their default
        self.options = declared.values(self.declared_options, options)

    def public_options(self) -> dict[str, Any]:
        """The options in force as `_fmtfs.json` shows them: never a secret."""
        return declared.public(self.declared_options, self.options)

    def options_identity(self) -> dict[str, Any]:
        """The options as the chunk index is keyed by them: public options as
        they are, anything else (a secret, a key a format resolved) by a
        digest of it, so a changed key never reuses records decoded with the
        old one."""
        shown = self.public_options()
        return shown | {
            name: hashlib.sha256(repr(value).encode()).hexdigest()[:16]
            for name, value in sorted(self.options.items())
            if name not in shown
        }

    @classmethod
    @abstractmethod
    def detect(cls, source: Path) -> bool:
        """True when `source` looks like this format (by magic bytes)."""

    @abstractmethod
    def streams(self) -> list[Stream]:
        """The streams the source holds now (re-called when it changes)."""

    def derived_views(self) -> dict[str, DerivedRender | PiecedRender | list[ViewSlice]]:
        """View paths computed from the whole source -> a function rendering
        their records or bytes, or the list of ViewSlices they consist of.
        Called again when any native file changes: keep it cheap."""
        return {}

    def info(self) -> dict[str, Any]:
        """Per-stream details (versions, options, ...) for `_fmtfs.json`."""
        return {}

    def problems(self) -> list[Problem]:
        """Problems not tied to a stream scan (an unparsable reader file)."""
        return []

    def early_problems(self) -> list[Problem]:
        """The problems() a command warns about before it serves (all of
        them, by default).  A format whose problems() must read the whole
        source returns the cheap part here: the rest is listed in
        _errors.jsonl and `fmtfs info`, computed when they are read."""
        return self.problems()

    def writer(self, view_path: str, create: bool) -> Writer:
        """A writer for `view_path`.  `create` is True when the view does not
        exist yet (a new beats segment, a new kestrel reader).  Raise
        ReadOnlyView for views that cannot be written, FileNotFoundError for
        paths that cannot be created."""
        raise ReadOnlyView(view_path)

    def writable(self, view_path: str) -> bool:
        """Whether `view_path` takes writes: whether writer() gives a writer
        for it.  The reference answer, one view at a time; a listing asks
        writable_views() instead."""
        try:
            self.writer(view_path, create=False)
        except (ReadOnlyView, FileNotFoundError, FormatError, BadRecord, OSError):
            return False
        return True

    def writable_views(self, streams: list[Stream], views: Collection[str]) -> set[str]:
        """Which of `views` (every view of one listing of the source, made
        of `streams`) take writes: their mode bits.  The view tree asks once
        per rebuild and keeps the answer, so that `ls -l` of N streams costs
        O(N).  The default asks writable() of each view; a format whose
        writer() lists the source answers from `streams` (the listing just
        made) in one pass instead, with writable()'s answers."""
        return {view for view in views if self.writable(view)}

    # -- record schemas (fmtfs.formats.schema) --------------------------------

    def view_schema(self, view_path: str) -> ViewSchema | None:
        """The declared kinds of the fields of a record view's lines (times
        and their precision, bytes, nested objects), which the Parquet twins
        and the Spark data source's typed batches follow.  None: every key
        is inferred from its JSON kind."""
        return None

    def view_sources(self, streams: list[Stream]) -> dict[str, list[Path]]:
        """The native files of views that read more than their own stream's
        file (derived views, a stream view whose writes rewrite another
        file), for one listing of the source made of `streams`: a view's
        owner and mode are the most restrictive of theirs
        (fmtfs.permissions).  Asked once per rebuild of the view tree, like
        writable_views().  A view left out is its stream's file if it has
        one, else every native file of the source: the safe default."""
        return {}
