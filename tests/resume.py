"""What the index does with a grown stream, for the format tests: scan it
again from its last chunk's start and state (nothing else is kept)."""

from __future__ import annotations

from fmtfs.formats.base import Chunk, Stream


def rescan(stream: Stream, last: Chunk) -> list[Chunk]:
    """The chunks of a scan resumed at `last` (the index's last chunk), after
    checking the first of them starts where `last` did, with its records
    first (it may hold more: the file grew)."""
    chunks = [c for c in stream.scan(last.start, last.state) if isinstance(c, Chunk)]
    assert chunks, "a resumed scan must give the last chunk again"
    assert chunks[0].start == last.start
    for view, old in last.records.items():
        assert chunks[0].records[view][: len(old)] == old
    return chunks


def records(chunks: list[Chunk], view: str) -> list[dict]:
    return [r for c in chunks for r in c.records.get(view, [])]
