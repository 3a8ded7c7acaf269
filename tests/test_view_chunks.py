"""The view layer's public chunk API (what the Spark data source plans and
reads by): a view's chunks with their times and record counts, cut at any
record, and a chunk's records or bytes, equal to what the view shows."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from fmtfs.formats import open_source
from fmtfs.samples import beats, wallaby
from fmtfs.shape import parse_time
from fmtfs.treefiles import IndexedFile, SlicedFile
from fmtfs.views import SourceTree

RECORDS = "events.log/records.jsonl"


def tree_of(source: Path, cache: Path) -> SourceTree:
    return SourceTree(open_source(source, None, {"time_bucket": "hour"}), cache)


def lines(tree: SourceTree, path: str) -> list[bytes]:
    return tree.read(path, 0, 1 << 40).splitlines(keepends=True)


@pytest.fixture(scope="module")
def wal(tmp_path_factory) -> SourceTree:
    source = wallaby.generate(tmp_path_factory.mktemp("wal"), 10_000)
    return tree_of(source, tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def queue(tmp_path_factory) -> SourceTree:
    source = beats.generate(tmp_path_factory.mktemp("beats"), 9_000, segments=3)
    return tree_of(source, tmp_path_factory.mktemp("cache"))


def test_chunks_of_a_stream_view_hold_its_records_bytes_counts_and_times(wal: SourceTree) -> None:
    file = wal.files[RECORDS]
    assert isinstance(file, IndexedFile) and file.counted
    chunks = file.chunks()
    assert len(chunks) > 1  # 10,000 records span several chunks
    expected = lines(wal, RECORDS)
    assert sum(c.count for c in chunks) == file.record_count() == len(expected) == 10_000
    assert sum(c.size for c in chunks) == file.size()
    assert b"".join(file.chunk_bytes(c) for c in chunks) == b"".join(expected)
    got = [r for c in chunks for r in file.chunk_records(c)]
    assert [orjson.dumps(r) + b"\n" for r in got] == expected
    for chunk in chunks:
        assert chunk.time_field == ("time", "ns")
        times = [parse_time(r["time"]) for r in file.chunk_records(chunk)]
        assert chunk.times == (min(times), max(times))


def test_a_chunk_decodes_from_a_freshly_opened_format(wal: SourceTree) -> None:
    """What an executor does: no index, the format opened again, the
    chunk's records decoded from the native file alone."""
    file = wal.files[RECORDS]
    streams = {s.name: s for s in open_source(wal.format.source, None, {"time_bucket": "hour"}).streams()}
    for chunk in file.chunks()[:3]:
        assert chunk.records(streams[chunk.stream]) == file.chunk_records(chunk)


@pytest.mark.parametrize("first,last", [(0, 1), (5, 4100), (4095, 4097), (9_999, None), (3, 3)])
def test_chunks_cut_at_any_record(wal: SourceTree, first: int, last: int | None) -> None:
    file = wal.files[RECORDS]
    chunks = file.chunks(first, last)
    expected = lines(wal, RECORDS)[first:last]
    assert sum(c.count for c in chunks) == len(expected)
    assert b"".join(file.chunk_bytes(c) for c in chunks) == b"".join(expected)
    assert [orjson.dumps(r) + b"\n" for c in chunks for r in file.chunk_records(c)] == expected


def test_a_view_the_index_does_not_count_is_cut_by_its_lines(wal: SourceTree) -> None:
    """A bucket shares its stream's chunks; the index counts only the
    stream's own view, so the bucket's chunks have no count until cut."""
    path = max((p for p in wal.files if "/buckets/" in p and p.endswith(".jsonl")), key=lambda p: wal.size(p))
    file = wal.files[path]
    assert isinstance(file, IndexedFile) and not file.counted and file.record_count() is None
    assert all(c.count is None for c in file.chunks())
    expected = lines(wal, path)
    assert b"".join(file.chunk_bytes(c) for c in file.chunks()) == b"".join(expected)
    cut = file.chunks(7, len(expected) - 2)
    assert sum(c.count for c in cut) == len(expected) - 9
    assert [orjson.dumps(r) + b"\n" for c in cut for r in file.chunk_records(c)] == expected[7:-2]
    # a slice of it, as a derived view made of ViewSlices would be
    sliced = SlicedFile([(file, 7)])
    assert b"".join(sliced.chunk_bytes(c) for c in sliced.chunks()) == b"".join(expected[7:])


def test_a_sliced_view_is_the_chunks_of_its_parts(queue: SourceTree) -> None:
    """Beats pending.jsonl: the rest of the acknowledged segment, then the
    later segments; a time bucket across segments: their shares joined."""
    sliced = [p for p, f in queue.files.items() if isinstance(f, SlicedFile)]
    assert "pending.jsonl" in sliced
    for path in sliced:
        file = queue.files[path]
        chunks = file.chunks()
        expected = lines(queue, path)
        assert b"".join(file.chunk_bytes(c) for c in chunks) == b"".join(expected), path
        got = [orjson.dumps(r) + b"\n" for c in chunks for r in file.chunk_records(c)]
        assert got == expected, path
    pending = queue.files["pending.jsonl"]
    first = pending.chunks()[0]
    assert first.skip > 0 and first.count == first.total - first.skip  # starts mid-segment
    assert len({c.stream for c in pending.chunks()}) > 1
