"""Records as JSON Lines: the one primitive every renderer shares, below
the formats (a format that renders a derived view in pieces, gvfs
metadata.jsonl, uses it as fmtfs.render does)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

# each line as orjson dumps it, newline included
LINE = orjson.OPT_APPEND_NEWLINE


def render_lines(records: Iterable[dict[str, Any]]) -> bytes:
    """One compact JSON object per line, keys in the records' own order."""
    dumps = orjson.dumps
    out = bytearray()
    for record in records:
        out += dumps(record, option=LINE)
    return bytes(out)
