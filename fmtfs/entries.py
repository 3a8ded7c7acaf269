"""What the index knows of one stream (fmtfs.index): its chunk table and,
per view it feeds, where each chunk's rendered piece ends.

A StreamEntry is a snapshot, never changed once published: the index
builds a new one when its file grows and swaps it in whole, so readers in
any thread (fmtfs.chunkreader) use the entry they hold without a lock.
The new entry shares the ViewPieces of the views the growth did not reach
with the old one; the index copies a ViewPieces before it adds to it."""

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
        """The pieces of chunks < seq: this very object when it has no
        other (an entry resumed from a chunk shares the views it does not
        reach with the entry before it), else a copy."""
        if not self.seqs or self.seqs[-1] < seq:
            return self
        cut = bisect.bisect_left(self.seqs, seq)
        return ViewPieces(self.seqs[:cut], self.ends[:cut])

    def copy(self) -> ViewPieces:
        return ViewPieces(list(self.seqs), list(self.ends))


@dataclass
class StreamEntry:
    stream: Stream
    row_id: int
    identity: FileIdentity
    # the stream's identity when its scan last began at the start of the
    # file (fmtfs.index: an entry resumed from its last chunk, the file
    # having grown, keeps it): a view's identity is its epoch and its own
    # pieces, so growth that does not reach a view (an earlier hour bucket)
    # leaves its identity, its Parquet twin and its kept pages as they were
    epoch: str
    chunks: list[ChunkMeta] = field(default_factory=list)
    views: dict[str, ViewPieces] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    kept: dict[tuple[str, int], Kept] = field(default_factory=dict)  # (view, seq) -> its kept piece

    def view_state(self, view: str) -> tuple[str, ViewPieces | None]:
        """What a view's bytes depend on: equal states, equal bytes."""
        return self.epoch, self.views.get(view)

    @property
    def record_count(self) -> int:
        return sum(c.count for c in self.chunks)
