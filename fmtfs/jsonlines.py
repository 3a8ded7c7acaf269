"""Records as JSON Lines: the one primitive every renderer shares, below
the formats (a format that renders a derived view in pieces, gvfs
metadata.jsonl or kestrel's pending views, uses it as fmtfs.render does)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

import orjson

from fmtfs.gcpause import paused

# each line as orjson dumps it, newline included
LINE = orjson.OPT_APPEND_NEWLINE

# Lines in one piece of a derived view rendered a piece at a time
# (formats.base.PiecedRender): about 250 KB of JSON.
PIECE_LINES = 2000


def render_lines(records: Iterable[dict[str, Any]]) -> bytes:
    """One compact JSON object per line, keys in the records' own order."""
    dumps = orjson.dumps
    out = bytearray()
    for record in records:
        out += dumps(record, option=LINE)
    return bytes(out)


def render_pieces(records: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    """render_lines of PIECE_LINES records at a time, as they come: what a
    PiecedRender's pieces() yields.  The GC is paused while a piece's
    records are made and dumped (many small objects, none in a cycle)."""
    records = iter(records)
    while True:
        with paused():
            piece = render_lines(islice(records, PIECE_LINES))
        if not piece:
            return
        yield piece
