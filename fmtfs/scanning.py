"""Scanning one stream into what the chunk index stores.

A scan walks a stream's file (`Stream.scan`), renders every chunk to learn
the length of its piece of each view, and keeps only that: chunk bounds,
decoder state, record count, time range, view lengths, and the problems
met.  It is a pure function of the stream, so it runs where it is cheapest:
in the indexing process, or in a decode worker (fmtfs.decoders) when a
first mount scans several streams at once on every core; the result is
small and pickles cheaply, and the SQLite writes stay with fmtfs.index."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fmtfs.formats.base import Problem, State, Stream
from fmtfs.gcpause import paused
from fmtfs.render import rendered_lengths

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


@dataclass
class Scanned:
    chunks: list[ScannedChunk] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def scan_stream(stream: Stream, start: int | None, state: State | None, progress: Progress | None) -> Scanned:
    """Scan `stream` from (start, state) (None: its beginning) to its end."""
    out = Scanned()
    # the GC paused for the whole scan: each chunk's records live until
    # rendered, and young collections would walk them over and over
    with paused():
        for item in stream.scan(start, state):
            if isinstance(item, Problem):
                out.problems.append(item)
                continue
            count = len(next(iter(item.records.values()))) if item.records else 0
            lengths = rendered_lengths(item.records, item.lengths)
            item.records = {}  # freed now, not when the next chunk replaces it
            out.chunks.append(ScannedChunk(item.start, item.end, item.state, count, item.times, lengths))
            if progress is not None:
                progress(item.end - item.start, count)
    return out
