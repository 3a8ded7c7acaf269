"""Records -> deterministic JSON Lines bytes (LAYOUT.md §2).

A chunk is rendered the way a plain loop would: each record dumped as soon
as its stream decodes it (`Stream.decode_iter`), the cyclic GC paused, so
what is kept per chunk is its lines, not a list of dicts (keeping ~2,000
nested dicts alive until rendering made the Beats decode 1.6x slower than
the same loop dumping at once: fresh memory for every dict, and a cold
cache when they are freed).  Streams that decode whole chunks only are
rendered from `Stream.decode`."""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from fmtfs.formats.base import Chunk, Record, Routed, Stream
from fmtfs.gcpause import paused


def render_lines(records: Iterable[Record]) -> bytes:
    """One compact JSON object per line, keys in the records' own order.

    orjson renders a batch at hundreds of MB/s; joining once avoids a copy
    per line."""
    dumped = list(map(orjson.dumps, records))
    if not dumped:
        return b""
    dumped.append(b"")
    return b"\n".join(dumped)


def render_views(records_by_view: dict[str, list[Record]]) -> dict[str, bytes]:
    """Render every view of a decoded chunk.  A record shared by several
    views (a wallaby record is in records.jsonl and in its bucket) is dumped
    once."""
    dumps = orjson.dumps
    if len(records_by_view) == 1:  # nothing shared: skip the identity memo
        ((view, records),) = records_by_view.items()
        return {view: render_lines(records)}
    done: dict[int, bytes] = {}
    out = {}
    for view, records in records_by_view.items():
        lines = []
        for record in records:
            key = id(record)
            line = done.get(key)
            if line is None:
                line = done[key] = dumps(record)
            lines.append(line)
        if lines:
            lines.append(b"")
        out[view] = b"\n".join(lines)
    return out


def render_chunk(stream: Stream, chunk: Chunk) -> dict[str, bytes]:
    """Decode and render one chunk of `stream`: its bytes for every view it feeds."""
    with paused():
        routed = stream.decode_iter(chunk)
        if routed is None:
            return render_views(stream.decode(chunk))
        return render_routed(routed)


def render_routed(routed: Iterable[Routed]) -> dict[str, bytes]:
    """Records as they are decoded, each with its views -> every view's
    bytes.  A record in several views is dumped once; views come in the
    order their first record did."""
    dumps = orjson.dumps
    lines: dict[str, list[bytes]] = {}
    # a view tuple -> the line lists of its views (streams reuse the tuples)
    targets_of: dict[tuple[str, ...], list[list[bytes]]] = {}
    for record, views in routed:
        line = dumps(record)
        targets = targets_of.get(views)
        if targets is None:
            targets = targets_of[views] = [lines.setdefault(view, []) for view in views]
        for target in targets:
            target.append(line)
    out = {}
    for view, view_lines in lines.items():
        view_lines.append(b"")
        out[view] = b"\n".join(view_lines)
    return out


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
