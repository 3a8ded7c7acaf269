"""Records -> deterministic JSON Lines bytes (LAYOUT.md §2)."""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from fmtfs.formats.base import Record


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
