"""Records -> deterministic JSON Lines bytes (LAYOUT.md §2).

A chunk is rendered the way a plain loop would: each record dumped as soon
as its stream decodes it (`Stream.decode_iter`), the cyclic GC paused, so
what is kept per chunk is its lines, not a list of dicts (keeping ~2,000
nested dicts alive until rendering made the Beats decode 1.6x slower than
the same loop dumping at once: fresh memory for every dict, and a cold
cache when they are freed).  Streams that decode whole chunks only are
rendered from `Stream.decode`.

Lines are appended to one growing buffer per view as soon as they are
dumped, never kept as a list of lines: orjson (3.12+) returns each line in
a buffer of at least 4 KiB that it does not shrink, so a list of 50,000
short lines held 200 MB (a gvfs metadata view), and joining 2,000 of them
took 6x longer than appending them to a bytearray one by one."""

from __future__ import annotations

import operator
from collections.abc import Iterable

import orjson

from fmtfs.formats.base import Chunk, Record, Routed, Stream
from fmtfs.gcpause import paused
from fmtfs.jsonlines import LINE, render_lines


def render_views(records_by_view: dict[str, list[Record]]) -> dict[str, bytes]:
    """Render every view of a decoded chunk.  Each record is dumped once,
    for the first view it is in: a later view whose records are a run of
    that view's very records (a wallaby or Beats time bucket: a chunk's
    records in time order, cut by hour) is a slice of its bytes, and the
    same bytes object when the run is all of them (a chunk within one
    bucket: a store of kept pieces keeps it once).  Other views are dumped
    on their own (measured 3x faster than remembering each record's line)."""
    out: dict[str, bytes] = {}
    first: _Rendered | None = None
    for view, records in records_by_view.items():
        if first is None:
            first = _Rendered(records)
            out[view] = first.data
        else:
            run = first.run_of(records)
            out[view] = run if run is not None else render_lines(records)
    return out


class _Rendered:
    """A view's records dumped, with where each record's line ends."""

    def __init__(self, records: list[Record]) -> None:
        dumps = orjson.dumps
        buffer = bytearray()
        ends = []
        for record in records:
            buffer += dumps(record, option=LINE)
            ends.append(len(buffer))
        self.records = records
        self.data = bytes(buffer)
        self.ends = ends
        self._at: dict[int, int] | None = None  # id(record) -> its index, made when first needed
        self._next = 0  # where the last run found ended: the next run starts there, mostly

    def run_of(self, records: list[Record]) -> bytes | None:
        """The bytes of `records` if they are a run of this view's very records."""
        if not records:
            return b""
        i = self._next
        # runs come in order (time buckets of time-ordered records): the
        # index of every record is built only when one does not
        if i >= len(self.records) or self.records[i] is not records[0]:
            if self._at is None:
                self._at = {id(record): n for n, record in enumerate(self.records)}
            i = self._at.get(id(records[0]), -1)
        if i < 0 or i + len(records) > len(self.records):
            return None
        if not all(map(operator.is_, self.records[i : i + len(records)], records)):
            return None
        self._next = i + len(records)
        if i == 0 and len(records) == len(self.records):
            return self.data
        return self.data[self.ends[i - 1] if i else 0 : self.ends[i + len(records) - 1]]


def rendered_lengths(
    records_by_view: dict[str, list[Record]], known: dict[str, int] | None = None
) -> dict[str, int]:
    """len() of every view's render_views() bytes, without keeping them.
    One orjson call per view: `[a,b,c]` is as long as `a\nb\nc\n` plus one
    (two brackets and n-1 commas for n newlines), and dumping a list at once
    is much cheaper than dumping its records one by one.  `known`: lengths
    the scan learnt already (Chunk.lengths), not dumped again."""
    # lists measured so far, with their lengths
    done = [
        (records_by_view[view], length) for view, length in (known or {}).items() if view in records_by_view
    ]
    return {view: _length(records, done) if records else 0 for view, records in records_by_view.items()}


def _length(records: list[Record], done: list[tuple[list[Record], int]]) -> int:
    # a bucket holding every record of its chunk (the usual case: a chunk
    # within one hour) is the same objects as the stream's view: dump once
    for other, length in done:
        if len(other) == len(records) and all(map(operator.is_, other, records)):
            return length
    length = len(orjson.dumps(records)) - 1
    done.append((records, length))
    return length


def render_chunk(stream: Stream, chunk: Chunk, view: str | None = None) -> dict[str, bytes]:
    """Decode and render one chunk of `stream`: its bytes for every view it
    feeds, or for `view` only (what a decode worker is asked for: rendering,
    sending and caching the other views too cost a reader of one view
    twice the bytes of it)."""
    with paused():
        rendered = stream.render(chunk, view)
        if rendered is not None:
            return rendered
        if view is not None:
            records = stream.view_records(chunk, view)
            if records is not None:
                out = render_lines(records)
                return {view: out} if out else {}
        routed = stream.decode_iter(chunk)
        if routed is None:
            decoded = stream.decode(chunk)
            if view is not None:
                decoded = {view: decoded[view]} if view in decoded else {}
            return render_views(decoded)
        if view is not None:
            return render_one(routed, view)
        return render_routed(routed)


def render_one(routed: Iterable[Routed], view: str) -> dict[str, bytes]:
    """render_routed() of `view` alone: records not in it are not dumped."""
    dumps = orjson.dumps
    out = bytearray()
    for record, views in routed:
        if view in views:
            out += dumps(record, option=LINE)
    return {view: bytes(out)} if out else {}


def render_routed(routed: Iterable[Routed]) -> dict[str, bytes]:
    """Records as they are decoded, each with its views -> every view's
    bytes.  A record in several views is dumped once; views come in the
    order their first record did."""
    dumps = orjson.dumps
    buffers: dict[str, bytearray] = {}
    # a view tuple -> the buffers of its views (streams reuse the tuples)
    targets_of: dict[tuple[str, ...], list[bytearray]] = {}
    for record, views in routed:
        line = dumps(record, option=LINE)
        targets = targets_of.get(views)
        if targets is None:
            targets = targets_of[views] = [buffers.setdefault(view, bytearray()) for view in views]
        for target in targets:
            target += line
    return {view: bytes(buf) for view, buf in buffers.items()}


def render_document(document: object) -> bytes:
    """A single JSON document (`_fmtfs.json`, a kestrel reader) plus newline."""
    return orjson.dumps(document) + b"\n"


def parse_lines(data: bytes) -> list[Record]:
    """Complete lines written into a view -> records.  Raises ValueError
    naming the line (1 = the first line of `data`) and what is wrong with it
    in a user's words, never the parser's."""
    records: list[Record] = []
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ValueError(
                f"line {number} is not valid JSON (column {exc.colno}): {_excerpt(line)}"
            ) from None
        if not isinstance(value, dict):
            raise ValueError(f"line {number} is JSON but not an object ({{...}}): {_excerpt(line)}")
        records.append(value)
    return records


def _excerpt(line: bytes, limit: int = 60) -> str:
    text = line.strip().decode("utf-8", "replace")
    return text if len(text) <= limit else text[:limit] + "..."
