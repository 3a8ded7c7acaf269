"""What the index knows of one stream (fmtfs.index): its chunk table and,
per view it feeds, where each chunk's rendered piece ends.

A StreamEntry is a snapshot, never changed once published: the index
builds a new one when its file grows and swaps it in whole, so readers in
any thread (fmtfs.chunkreader) use the entry they hold without a lock."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from fmtfs.formats.base import FileIdentity, Problem, State, Stream
from fmtfs.keptpieces import Kept


@dataclass
class ChunkMeta:
    start: int
    end: int
    state: State
    count: int  # records in the stream's primary (first) view
    times: tuple[int, int] | None = None  # Chunk.times: earliest, latest record time (ns)


@dataclass
class ViewPieces:
    """Where one view's bytes come from: per contributing chunk, its rendered end."""

    seqs: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)

    @property
    def size(self) -> int:
        return self.ends[-1] if self.ends else 0

    def add(self, seq: int, length: int) -> None:
        if length:
            self.seqs.append(seq)
            self.ends.append(self.size + length)

    def before(self, seq: int) -> ViewPieces:
        """A copy holding only the pieces of chunks < seq."""
        cut = bisect.bisect_left(self.seqs, seq)
        return ViewPieces(self.seqs[:cut], self.ends[:cut])


@dataclass
class StreamEntry:
    stream: Stream
    row_id: int
    identity: FileIdentity
    chunks: list[ChunkMeta] = field(default_factory=list)
    views: dict[str, ViewPieces] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    kept: dict[tuple[str, int], Kept] = field(default_factory=dict)  # (view, seq) -> its kept piece

    @property
    def record_count(self) -> int:
        return sum(c.count for c in self.chunks)
