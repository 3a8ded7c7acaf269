"""A view chunk (the view layer's public chunk API, fmtfs.views), apart
so that what carries chunks need not import the tree: a Spark task
unpickles its partition's chunks and reads their kept lines without the
index, SQLite or the decode pool (fmtfs.spark.plan)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from fmtfs.formats.base import Chunk, Record, State, Stream


@dataclass(frozen=True)
class ViewChunk:
    """One chunk's share of a record view, as the index knows it without
    decoding: where the chunk lies in its stream's native file (all a reader
    on another machine needs to decode it: `records(stream)`), the time
    range of its records, how many of them belong to the view and their
    rendered size.  `skip`/`take` cut the chunk's records (a view that
    starts in the middle of a chunk, a streaming micro-batch)."""

    view: str  # the stream's view these records belong to
    stream: str  # the stream's name (Format.streams())
    start: int
    end: int
    state: State
    times: tuple[int, int] | None  # earliest, latest record time of the whole chunk (ns)
    time_field: tuple[str, str] | None  # the record key `times` are of, and its unit
    size: int  # rendered bytes of the view's piece of the whole chunk
    total: int | None  # records of the view in the whole chunk (None: the index does not count them)
    skip: int = 0  # records left out at the chunk's start
    take: int | None = None  # then at most this many (None: the rest)
    seq: int = 0  # the chunk's number in its stream

    @property
    def count(self) -> int | None:
        """Records of the view this chunk contributes (None: not counted)."""
        if self.total is None:
            return self.take
        rest = max(0, self.total - self.skip)
        return rest if self.take is None else min(rest, self.take)

    def part(self, first: int, last: int | None = None) -> ViewChunk:
        """Records [first, last) of what this chunk contributes."""
        take = None if last is None else max(0, last - first)
        if self.take is not None:
            take = max(0, self.take - first) if take is None else min(take, max(0, self.take - first))
        return replace(self, skip=self.skip + first, take=take)

    def cut(self, records: list[Record]) -> list[Record]:
        """The chunk's decoded records of the view -> those it contributes."""
        if not self.skip and self.take is None:
            return records
        return records[self.skip : None if self.take is None else self.skip + self.take]

    def records(self, stream: Stream) -> list[Record]:
        """Decode the chunk from `stream` (the stream named `self.stream`,
        opened anywhere the native file is) into the view's records."""
        return self.cut(stream.records_of(Chunk(self.start, self.end, self.state, {}), self.view))
