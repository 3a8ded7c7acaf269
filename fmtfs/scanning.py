"""Scanning one stream into what the chunk index stores.

A scan walks a stream's file (`Stream.scan`), renders every chunk to learn
the length of its piece of each view, and keeps only that: chunk bounds,
decoder state, record count, time range, view lengths, and the problems
met.  It is a pure function of the stream, so it runs where it is cheapest:
in the indexing process, or in a decode worker (fmtfs.decoders) when a
first mount scans on every core; the result is small and pickles cheaply,
and the SQLite writes stay with fmtfs.index.

Split scans: a stream whose format can find chunk starts cheaply
(`Stream.cuts`: length prefixes, or a record start found near a grid line
at which the format's chunks also end; no decoding) is cut into byte
ranges that are scanned at once and joined, so that one big file uses
every core too.
Each range but the last stops where the next begins; the join takes a
range's successor only if the range produced the very chunk the cut
announced there (same start, the cut's state within the chunk's state),
else that range's scan goes on to the end of the stream.  A range past
damage the cheap walk could not see (a bad checksum, a payload that does
not decode) is therefore never trusted: the joined result is, by the resume
property every format already has (a scan from a chunk's (start, state)
yields what the whole scan yields from there), the one-job scan's.

A format that can measure its records as it decodes them
(`Stream.measured`: Beats dumps each record as decoded; wallaby and
kestrel write their lines from a template) gives chunks with their counts
and view lengths and no records; the others' records are measured here,
a chunk at a time.

Given a store (fmtfs.keptpieces), a scan keeps what it renders: every
chunk's pieces, compressed, so that no later mount decodes them again.
The last chunk of a stream is kept only if the caller says the file has
settled: a stream still being written is scanned again from its last
chunk whenever it grows, and keeping that chunk at every refresh would
fill the store with copies of it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from fmtfs.formats.base import Boundary, Chunk, Problem, State, Stream
from fmtfs.gcpause import paused
from fmtfs.keptpieces import Kept, KeptPieces
from fmtfs.render import render_views, rendered_lengths

# Told of every chunk a scan produces: (native bytes, records).
Progress = Callable[[int, int], None]


@dataclass
class ScannedChunk:
    start: int
    end: int
    state: State
    count: int  # records in the stream's primary (first) view
    times: tuple[int, int] | None
    lengths: dict[str, int]  # view -> rendered bytes of this chunk's piece
    kept: dict[str, Kept] = field(default_factory=dict)  # view -> where its piece is kept


@dataclass
class Scanned:
    chunks: list[ScannedChunk] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    # a range scan (ScanRange.stop set) that met the chunk its successor
    # starts with: the successor's scan continues this one
    joins: bool = False


@dataclass(frozen=True)
class ScanRange:
    """A scan from (start, state) (None: the stream's beginning) up to the
    chunk at `stop` whose state holds `stop_state` (None: to the end)."""

    start: int | None
    state: State | None
    stop: int | None = None
    stop_state: State | None = None


def scan_ranges(stream: Stream, start: int | None, state: State | None, every: int) -> list[ScanRange]:
    """The ranges a scan of `stream` from (start, state) is cut into, about
    `every` native bytes each; one range when the format gives no cuts."""
    try:
        cuts = list(stream.cuts(start, state, every))
    except Exception:  # noqa: BLE001 - the walk is only a hint: a plain scan reports the damage
        cuts = []
    ranges = []
    for at, at_state in cuts:
        ranges.append(ScanRange(start, state, at, at_state))
        start, state = at, at_state
    ranges.append(ScanRange(start, state))
    return ranges


def _continues(chunk: Chunk, part: ScanRange) -> bool:
    """Whether `chunk` is the one the next range starts with."""
    if chunk.start != part.stop:
        return False
    stop_state = part.stop_state or {}
    return all(chunk.state.get(key) == value for key, value in stop_state.items())


def scan_stream(
    stream: Stream,
    start: int | None,
    state: State | None,
    progress: Progress | None,
    keep: KeptPieces | None = None,
    keep_last: bool = True,
) -> Scanned:
    """Scan `stream` from (start, state) (None: its beginning) to its end."""
    return scan_range(stream, ScanRange(start, state), progress, keep, keep_last)


def scan_range(
    stream: Stream,
    part: ScanRange,
    progress: Progress | None,
    keep: KeptPieces | None = None,
    keep_last: bool = True,
) -> Scanned:
    """Scan one range of `stream`: to `part.stop` if the next range continues
    there (Scanned.joins), else to the stream's end.  With `keep`, every
    chunk's rendered pieces are kept there (the stream's last chunk only
    if `keep_last`)."""
    out = Scanned()
    stop = part.stop
    since = 0  # problems met since the last chunk kept
    held = _Held(keep)  # a chunk's pieces, kept once the chunk is known not to be the last
    # the GC paused for the whole scan: each chunk's records live until
    # rendered, and young collections would walk them over and over
    with paused():
        items = _items(stream, part, render=keep is not None)
        for item in items:
            if isinstance(item, Problem):
                out.problems.append(item)
                since += 1
                continue
            if stop is not None and item.start >= stop:
                if _continues(item, part):
                    # problems of the next range's first chunk are the next range's
                    kept = out.problems[len(out.problems) - since :]
                    del out.problems[len(out.problems) - since :]
                    out.problems += [p for p in kept if p.offset < stop]
                    out.joins = True
                    items.close()
                    break
                stop = None  # the cut was wrong: this scan goes on to the end
                if isinstance(item, Boundary):
                    continue  # the chunk itself comes next, decoded (_items)
            since = 0
            rendered = None
            if item.count is not None:  # measured by the format as it decoded them
                count, lengths, rendered = item.count, item.lengths, item.rendered
            else:
                count = len(next(iter(item.records.values()))) if item.records else 0
                if keep is not None:
                    rendered = render_views(item.records)
                    lengths = {view: len(data) for view, data in rendered.items()}
                else:
                    lengths = rendered_lengths(item.records, item.lengths)
            item.records = {}  # freed now, not when the next chunk replaces it
            scanned = ScannedChunk(item.start, item.end, item.state, count, item.times, lengths)
            out.chunks.append(scanned)
            held.hold(scanned, rendered)
            # past a wrong cut, the next ranges' scans report these bytes
            if progress is not None and (part.stop is None or item.start < part.stop):
                progress(item.end - item.start, count)
        if out.joins or keep_last:
            held.hold(None, None)
    return out


def _items(stream: Stream, part: ScanRange, render: bool) -> Iterator[Chunk | Problem]:
    """The chunks and problems of a scan of `part`, measured if the format
    measures.  The format may end at `part.stop` with a boundary (Stream.scan);
    a caller that goes on past it (a wrong cut) gets the rest of the stream,
    scanned from the boundary's start and state."""
    start, state = part.start, part.state
    stop = {} if part.stop is None else {"stop": part.stop}  # formats without cuts take no `stop`
    while True:
        items = stream.measured(start, state, render=render, **stop) or stream.scan(start, state, **stop)
        last = None
        try:
            for last in items:
                yield last
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()
        if not isinstance(last, Boundary):
            return
        start, state, stop = last.start, last.state, {}


class _Held:
    """The pieces of the chunk a scan produced last, kept in `keep` once
    the next one comes (or the caller says the last may be kept too)."""

    def __init__(self, keep: KeptPieces | None) -> None:
        self.keep = keep
        self.chunk: ScannedChunk | None = None
        self.rendered: dict[str, bytes] | None = None

    def hold(self, chunk: ScannedChunk | None, rendered: dict[str, bytes] | None) -> None:
        if self.keep is not None and self.chunk is not None and self.rendered:
            self.chunk.kept = self.keep.keep(self.rendered)
        self.chunk, self.rendered = chunk, rendered


def joined(parts: list[Scanned | BaseException]) -> Scanned | BaseException:
    """The scans of a stream's ranges, in order, as one scan (or the error of
    the first range it needed that failed).  A range that did not meet its
    successor scanned to the end: the rest are not needed."""
    out = Scanned()
    for found in parts:
        if isinstance(found, BaseException):
            return found
        out.chunks += found.chunks
        out.problems += found.problems
        if not found.joins:
            break
    return out
