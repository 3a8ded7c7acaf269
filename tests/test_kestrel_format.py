"""A libkestrel queue folder as views: discovery, order, scans, readers, pending."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest

from fmtfs.formats import detect, format_class
from fmtfs.formats.base import Chunk, Problem
from fmtfs.formats.kestrel import KestrelFormat
from fmtfs.formats.kestrel import format as kestrel_format
from fmtfs.formats.kestrel.records import WRITER_MAGIC, encode_put, encode_read_done, encode_read_head
from fmtfs.formats.kestrel.shapes import ms_text
from fmtfs.formats.kestrel.streams import CHUNK_RECORDS
from fmtfs.samples.kestrel import generate
from fmtfs.views import RENDER_AHEAD_BYTES, SourceTree
from tests.conftest import FIXTURES as FIXTURES_ROOT

FIXTURES = FIXTURES_ROOT / "kestrel"


def pending_of(views: dict, path: str) -> list[dict]:
    """A pending view's records, from the lines it renders (a piece at a time)."""
    return [orjson.loads(line) for line in views[path]().splitlines()]


def put_file(path: Path, ids, data=b"x", start: int = 0) -> bytes:
    blob = WRITER_MAGIC + b"".join(encode_put(i, start + i, data) for i in ids)
    path.write_bytes(blob)
    return blob


def scan_all(stream, start=None):
    chunks, problems = [], []
    for got in stream.scan(start, None):
        (chunks if isinstance(got, Chunk) else problems).append(got)
    return chunks, problems


def records(stream, start=None) -> list[dict]:
    return [r for c in scan_all(stream, start)[0] for r in c.records[stream.view]]


def by_view(fmt) -> dict[str, list[dict]]:
    return {s.view_paths()[0]: records(s) for s in fmt.streams()}


def test_registry_detects_and_imports(tmp_path):
    assert format_class("kestrel") is KestrelFormat
    shutil.copy(FIXTURES / "example_hello.journal", tmp_path / "jobs.1000")
    assert detect(tmp_path) == "kestrel"
    assert not KestrelFormat.detect(tmp_path / "jobs.1000")  # a folder, not a file


def test_fixture_vectors_as_a_queue(tmp_path):
    shutil.copy(FIXTURES / "spec_read_several.journal", tmp_path / "jobs.1000")
    shutil.copy(FIXTURES / "example_hello_expiry.journal", tmp_path / "mail.5")
    shutil.copy(FIXTURES / "example_head1_done34.read", tmp_path / "jobs.read.")
    fmt = KestrelFormat(tmp_path, {})
    assert by_view(fmt) == {
        "jobs/journal/1000.jsonl": [
            {"id": 100, "add_time": "1970-01-01T00:00:00.255Z", "error_count": 3, "data": "hello"},
            {"id": 101, "add_time": "1970-01-01T00:00:00.900Z", "error_count": 2, "data": "goodbye"},
        ],
        "mail/journal/5.jsonl": [
            {
                "id": 1,
                "add_time": "1970-01-01T00:00:01.000Z",
                "expire_time": "1970-01-01T00:00:02.000Z",
                "error_count": 0,
                "data": "hello",
            }
        ],
    }
    views = fmt.derived_views()
    assert views["jobs/readers/default.json"]() == b'{"reader":"","head":1,"done":[3,4]}\n'
    assert [r["id"] for r in pending_of(views, "jobs/pending/default.jsonl")] == [100, 101]


def test_files_ordered_by_first_id_and_temporaries_ignored(tmp_path):
    put_file(tmp_path / "q.300", [1, 2])  # named later but holds the oldest ids
    put_file(tmp_path / "q.100", [10, 11])
    (tmp_path / "q.500").write_bytes(WRITER_MAGIC)  # fresh after a rotation: no PUT yet
    put_file(tmp_path / "q.100~~7", [99])
    put_file(tmp_path / "q.read.x~~8", [99])
    (tmp_path / "q.read.x").write_bytes(b"\x26\x3c\x26\x03" + encode_read_head(1))
    fmt = KestrelFormat(tmp_path, {})
    assert [s.path.name for s in fmt.streams()] == ["q.300", "q.100", "q.500"]
    assert by_view(fmt)["q/journal/500.jsonl"] == []
    assert fmt.streams()[2].view_paths() == ["q/journal/500.jsonl"]
    assert [p for p in fmt.derived_views() if "~" in p] == []  # nor the temporary reader file
    pending = pending_of(fmt.derived_views(), "q/pending/x.jsonl")
    assert [r["id"] for r in pending] == [2, 10, 11]


def test_binary_data_and_unknown_commands(tmp_path):
    blob = (
        WRITER_MAGIC
        + encode_put(1, 0, b"\xff\x00")
        + b"\xf3\x04\x00\x00\x00\x01\x01\x01\x01\x02\x02\x02\x02\xff\xff\xff\xff"
        + encode_put(2, 0, b"ok")
    )
    (tmp_path / "q.1").write_bytes(blob)
    (stream,) = KestrelFormat(tmp_path, {}).streams()
    chunks, problems = scan_all(stream)
    got = records(stream)
    assert got[0]["data_base64"] == "/wA=" and "data" not in got[0]
    assert [r["id"] for r in got] == [1, 2]
    assert problems == [Problem("q.1", 4 + 27, "unknown command 15 (skipped 17 bytes)")]
    assert chunks[-1].end == len(blob)


@pytest.mark.parametrize("pad", [0, 100])
def test_damage_keeps_what_precedes_and_zero_tail_is_quiet(tmp_path, pad):
    good = put_file(tmp_path / "q.1", [1, 2, 3], b"abc")
    (tmp_path / "q.1").write_bytes(good + bytes(pad))
    (stream,) = KestrelFormat(tmp_path, {}).streams()
    chunks, problems = scan_all(stream)
    assert [r["id"] for r in records(stream)] == [1, 2, 3] and problems == []
    assert chunks[-1].end == len(good)
    # a record cut at every offset: the previous ones stay, the cut is reported
    whole = good + encode_put(4, 4, b"tail")
    for cut in range(len(good) + 1, len(whole)):
        (tmp_path / "q.1").write_bytes(whole[:cut])
        chunks, problems = scan_all(stream)
        assert [r["id"] for c in chunks for r in c.records["q/journal/1.jsonl"]] == [1, 2, 3]
        assert [p.offset for p in problems] == [len(good)]
        assert chunks[-1].end == len(good)


def test_bad_magic_and_too_large(tmp_path):
    shutil.copy(FIXTURES / "spec_too_large.journal", tmp_path / "q.1")
    (stream,) = KestrelFormat(tmp_path, {}).streams()
    assert scan_all(stream) == ([], [Problem("q.1", 4, "item too large")])


def test_chunks_resume_and_decode(tmp_path):
    count = CHUNK_RECORDS * 2 + 17
    blob = put_file(tmp_path / "q.1", range(1, count + 1), b"payload")
    (stream,) = KestrelFormat(tmp_path, {}).streams()
    chunks, _ = scan_all(stream)
    assert [len(c.records["q/journal/1.jsonl"]) for c in chunks] == [CHUNK_RECORDS, CHUNK_RECORDS, 17]
    assert all(a.end == b.start for a, b in zip(chunks, chunks[1:], strict=False))
    for c in chunks:
        assert stream.decode(Chunk(c.start, c.end, c.state)) == c.records
    # the producer appends; a scan resumed at the last end sees only the new items
    with open(tmp_path / "q.1", "ab") as f:
        f.write(encode_put(count + 1, 0, b"new") + encode_put(count + 2, 0, b"newer"))
    resumed = records(stream, chunks[-1].end)
    assert [r["id"] for r in resumed] == [count + 1, count + 2]
    assert len(blob) == chunks[-1].end


def test_reader_views_and_problems(tmp_path):
    put_file(tmp_path / "q.1", range(1, 11))
    magic = b"\x26\x3c\x26\x03"
    (tmp_path / "q.read.").write_bytes(magic + encode_read_head(3) + encode_read_done([5, 7]))
    (tmp_path / "q.read.a%b.c").write_bytes(
        magic + encode_read_done([9]) + encode_read_head(8) + encode_read_done([10])
    )
    (tmp_path / "q.read.broken").write_bytes(magic + encode_read_head(3)[:5])
    (tmp_path / "q.read.alien").write_bytes(WRITER_MAGIC)
    fmt = KestrelFormat(tmp_path, {})
    views = fmt.derived_views()
    assert orjson.loads(views["q/readers/default.json"]()) == {"reader": "", "head": 3, "done": [5, 7]}
    assert [r["id"] for r in pending_of(views, "q/pending/default.jsonl")] == [4, 6, 8, 9, 10]
    assert views["q/readers/a%25b.c.json"]() == b'{"reader":"a%b.c","head":8,"done":[9,10]}\n'
    assert pending_of(views, "q/pending/a%25b.c.jsonl") == []
    assert "q/readers/broken.json" not in views and "q/readers/alien.json" not in views
    assert sorted((p.file, p.offset) for p in fmt.problems()) == [("q.read.alien", 0), ("q.read.broken", 4)]


def test_a_big_pending_view_is_rendered_when_read_and_kept_for_the_next_tree(tmp_path, monkeypatch):
    source = tmp_path / "src"
    source.mkdir()
    put_file(source / "q.1", range(1, 3001), data=b"y" * 500)  # 1.5 MB: above RENDER_AHEAD_BYTES
    (source / "q.read.r").write_bytes(b"\x26\x3c\x26\x03" + encode_read_head(1000))
    assert (source / "q.1").stat().st_size >= RENDER_AHEAD_BYTES
    renders = []
    real = kestrel_format.pending_pieces
    monkeypatch.setattr(kestrel_format, "pending_pieces", lambda *args: renders.append(1) or real(*args))
    path = "q/pending/r.jsonl"
    tree = SourceTree(KestrelFormat(source, {}), tmp_path / "cache", workers=2)
    tree.decode_in_workers()  # what a mount does before it serves: this view is not rendered ahead
    try:
        assert tree._to_render_ahead() == []
        lines = tree.read(path, 0, tree.size(path)).splitlines()
    finally:
        tree.close()
    assert [orjson.loads(line)["id"] for line in lines] == list(range(1001, 3001))
    assert renders == [1]
    again = SourceTree(KestrelFormat(source, {}), tmp_path / "cache")  # the next mount, `fmtfs info`
    try:
        assert again.read(path, 0, again.size(path)).splitlines() == lines
    finally:
        again.close()
    assert renders == [1]  # kept in the index, compressed


def test_pending_is_in_id_order_across_files(tmp_path):
    put_file(tmp_path / "q.1", [1, 2, 3])
    put_file(tmp_path / "q.2", [4, 6, 5])  # out of order inside a file still sorts
    (tmp_path / "q.read.r").write_bytes(b"\x26\x3c\x26\x03" + encode_read_head(2) + encode_read_done([4]))
    views = KestrelFormat(tmp_path, {}).derived_views()
    assert [r["id"] for r in pending_of(views, "q/pending/r.jsonl")] == [3, 5, 6]


def test_deterministic_records_and_odd_times(tmp_path):
    blob = WRITER_MAGIC + encode_put(1, -1, b"a", 2**63 - 1)
    (tmp_path / "q.1").write_bytes(blob)
    (stream,) = KestrelFormat(tmp_path, {}).streams()
    first = records(stream)
    assert first == records(stream)
    assert first[0]["add_time"] == "1969-12-31T23:59:59.999Z"
    assert first[0]["expire_time"] == 2**63 - 1  # beyond any calendar: the raw ms


def test_add_times_in_a_run_each_read_as_alone(tmp_path):
    """The decode loop reuses the text of the last item's second: items of
    one second, a second apart, out of order, before 1970 and beyond the
    calendar each read as ms_text reads them alone."""
    times = [1_700_000_000_000, 1_700_000_000_999, 1_700_000_001_000, 1_699_999_999_999, -1, -1000, -1001]
    times += [2**63 - 1, 1_700_000_000_500, -(2**63), 253_402_300_799_999, 253_402_300_800_000]
    (tmp_path / "q.1").write_bytes(
        WRITER_MAGIC + b"".join(encode_put(i, t, b"x") for i, t in enumerate(times))
    )
    (stream,) = KestrelFormat(tmp_path, {}).streams()
    assert [r["add_time"] for r in records(stream)] == [ms_text(t) for t in times]
    assert ms_text(-1) == "1969-12-31T23:59:59.999Z" and ms_text(253_402_300_800_000) == 253_402_300_800_000


def test_sample(tmp_path):
    root = generate(tmp_path / "s", 400)
    fmt = KestrelFormat(root, {})
    names = sorted(os.listdir(root))
    assert "jobs.read." in names and "mail.read.indexer" in names
    streams = fmt.streams()
    per_queue = {q: [s for s in streams if s.name.startswith(q + "/")] for q in ("jobs", "mail")}
    assert all(len(v) >= 3 for v in per_queue.values())  # rotated
    all_records = by_view(fmt)
    assert sum(map(len, all_records.values())) == 400
    assert all(not p for s in streams for p in scan_all(s)[1])
    views = fmt.derived_views()
    indexer = orjson.loads(views["mail/readers/indexer.json"]())
    assert indexer["done"] and indexer["head"] > 0
    pending = pending_of(views, "mail/pending/indexer.jsonl")
    assert all(r["id"] > indexer["head"] and r["id"] not in indexer["done"] for r in pending)
    assert len(pending) == 100 - indexer["head"] - len(indexer["done"])
    assert generate(tmp_path / "t", 400) and sorted(os.listdir(tmp_path / "t")) == names
    assert all((root / n).read_bytes() == (tmp_path / "t" / n).read_bytes() for n in names)


def test_the_default_reader_is_shown_as_default_and_a_reader_named_default_is_encoded(tmp_path):
    put_file(tmp_path / "q.1", [1, 2, 3])
    magic = b"\x26\x3c\x26\x03"
    (tmp_path / "q.read.").write_bytes(magic + encode_read_head(1))
    (tmp_path / "q.read.default").write_bytes(magic + encode_read_head(2))
    fmt = KestrelFormat(tmp_path, {})
    views = fmt.derived_views()
    assert orjson.loads(views["q/readers/default.json"]()) == {"reader": "", "head": 1, "done": []}
    assert [r["id"] for r in pending_of(views, "q/pending/default.jsonl")] == [2, 3]
    assert orjson.loads(views["q/readers/%64efault.json"]())["reader"] == "default"
    assert [r["id"] for r in pending_of(views, "q/pending/%64efault.jsonl")] == [3]
    assert fmt.writer("q/readers/%64efault.json", False).reader == "default"
    assert fmt.writer("q/readers/default.json", False).reader == ""


def test_a_queue_named_with_a_leading_dot_is_shown_encoded(tmp_path: Path) -> None:
    (tmp_path / ".hidden.5").write_bytes(WRITER_MAGIC + encode_put(1, 1000, b"hi"))
    (tmp_path / ".hidden.read.r").write_bytes(b"\x26\x3c\x26\x03" + encode_read_head(0))
    assert detect(tmp_path) == "kestrel"
    fmt = KestrelFormat(tmp_path, {})
    views = {v for s in fmt.streams() for v in s.view_paths()} | set(fmt.derived_views())
    assert "%2Ehidden/journal/5.jsonl" in views
    assert "%2Ehidden/readers/r.json" in views
    assert not any(v.startswith(".") for v in views)


def test_a_rebuild_reads_each_unchanged_file_once_and_a_changed_one_again(tmp_path, monkeypatch):
    """The queues are asked for four times per rebuild: a file's head and
    first PUT are read once while its inode, size and mtime hold (a second
    mount of 10,000 queues read 100,000 heads: 8.4 s), and again when the
    file is replaced by one whose first PUT differs."""
    from fmtfs.formats.kestrel import files

    put_file(tmp_path / "q.1", [5, 6])
    put_file(tmp_path / "q.2", [1, 2])
    (tmp_path / "q.read.").write_bytes(b"")
    fmt = KestrelFormat(tmp_path, {})
    reads: list[str] = []
    real = files.read_prefix
    monkeypatch.setattr(files, "read_prefix", lambda path, n: reads.append(path.name) or real(path, n))
    assert [w.path.name for w in fmt._queues()["q"].writers] == ["q.2", "q.1"]
    assert sorted(reads) == ["q.1", "q.2"]
    reads.clear()
    assert [w.first_id for w in fmt._queues()["q"].writers] == [1, 5]
    assert reads == []
    put_file(tmp_path / "q.2", [7, 8, 9])  # a new file under the old name: first PUT 7
    assert [(w.path.name, w.first_id) for w in fmt._queues()["q"].writers] == [("q.1", 5), ("q.2", 7)]
    assert reads == ["q.2"]
    (tmp_path / "q.2").unlink()
    assert [w.path.name for w in fmt._queues()["q"].writers] == ["q.1"]
    assert set(fmt._file_facts) == {"q.1"}


def test_detection_answers_at_the_first_writer_file_and_falls_back_to_the_whole_scan(tmp_path):
    from fmtfs.formats.kestrel.card import detect as kestrel_detect
    from fmtfs.formats.kestrel.files import has_writer_file

    (tmp_path / "q.1").write_bytes(b"\x00" * 8)  # a writer name without the magic
    assert not has_writer_file(tmp_path)
    put_file(tmp_path / "r.3", [1])
    assert has_writer_file(tmp_path) and kestrel_detect(tmp_path)
    readers_only = tmp_path / "readers"
    readers_only.mkdir()
    shutil.copy(FIXTURES / "spec_readhead_511.read", readers_only / "q.read.x")
    assert not has_writer_file(readers_only)
    assert kestrel_detect(readers_only)  # a reader file's magic, found by the whole scan
    assert not kestrel_detect(tmp_path / "readers" / "q.read.x")  # not a folder
