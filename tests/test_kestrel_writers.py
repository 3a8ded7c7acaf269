"""Writing through the mount: PUT appends with rotation, reader rewrites."""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fmtfs.formats.base import BadRecord, Chunk, ReadOnlyView
from fmtfs.formats.kestrel import KestrelFormat, writers
from fmtfs.formats.kestrel.records import READER_MAGIC, WRITER_MAGIC, encode_put, encode_reader_file, put_size
from fmtfs.formats.kestrel.writers import PutWriter
from tests.conftest import FIXTURES as FIXTURES_ROOT

FIXTURES = FIXTURES_ROOT / "kestrel"


class Clock:
    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def lines(fmt: KestrelFormat) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for stream in fmt.streams():
        out[stream.view_paths()[0]] = [
            r
            for c in stream.scan(None, None)
            if isinstance(c, Chunk)
            for r in c.records[stream.view_paths()[0]]
        ]
    return out


def test_append_encodes_byte_exact_like_the_fixture(tmp_path):
    (tmp_path / "jobs.1").write_bytes(WRITER_MAGIC)
    fmt = KestrelFormat(tmp_path, {})
    w = fmt.writer("jobs/journal/1.jsonl", False)
    w.write([{"id": 100, "add_time": 255, "error_count": 3, "data": "hello"}])
    w.write([{"add_time": "1970-01-01T00:00:00.900Z", "error_count": 2, "data_base64": "Z29vZGJ5ZQ=="}])
    w.sync()
    assert (tmp_path / "jobs.1").read_bytes() == (FIXTURES / "spec_read_several.journal").read_bytes()


def test_defaults_expiry_and_round_trip(tmp_path):
    shutil.copy(FIXTURES / "example_hello.journal", tmp_path / "q.5")
    clock = Clock()
    fmt = KestrelFormat(tmp_path, {})
    w = PutWriter(tmp_path, "q", clock=clock)
    w.write(
        [{"data": "a"}, {"data": "b", "expire_time": "2023-11-14T22:13:21.000Z"}, {"id": 10, "data": "c"}]
    )
    got = lines(fmt)["q/journal/5.jsonl"]
    assert [r["id"] for r in got] == [1, 2, 3, 10]
    assert got[1] == {"id": 2, "add_time": "2023-11-14T22:13:20.000Z", "error_count": 0, "data": "a"}
    assert got[2]["expire_time"] == "2023-11-14T22:13:21.000Z"
    # what a view shows can be written back unchanged into another queue
    (tmp_path / "r.1").write_bytes(WRITER_MAGIC)
    PutWriter(tmp_path, "r").write(got)
    assert lines(KestrelFormat(tmp_path, {}))["r/journal/1.jsonl"] == got
    assert (tmp_path / "r.1").read_bytes()[4:] == (tmp_path / "q.5").read_bytes()[4:]


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        ({"id": 1, "data": "x"}, "not above the tail"),
        ({"data": "x", "colour": 1}, "unknown field"),
        ({"id": "7", "data": "x"}, "id"),
        ({"add_time": "yesterday", "data": "x"}, "add_time"),
        ({"add_time": "2023-11-14T22:13:20.0001Z", "data": "x"}, "finer"),
        ({"error_count": 2**31, "data": "x"}, "error_count"),
        ({"data": "x", "data_base64": "eA=="}, "either"),
        ({"data_base64": "***"}, "base64"),
        ({}, "missing"),
        ("a string", "JSON object"),
        ({"id": 2**63, "data": "x"}, "64 bits"),
    ],
)
def test_bad_lines_write_nothing(tmp_path, record, reason):
    shutil.copy(FIXTURES / "example_hello.journal", tmp_path / "q.5")
    before = (tmp_path / "q.5").read_bytes()
    w = KestrelFormat(tmp_path, {}).writer("q/journal/5.jsonl", False)
    with pytest.raises(BadRecord, match=reason):
        w.write([{"data": "fine"}, record])  # the good line before it is not written either
    assert (tmp_path / "q.5").read_bytes() == before


def test_given_ids_must_increase_within_a_write(tmp_path):
    (tmp_path / "q.1").write_bytes(WRITER_MAGIC)
    w = PutWriter(tmp_path, "q")
    with pytest.raises(BadRecord, match="line 2"):
        w.write([{"id": 5, "data": "a"}, {"id": 5, "data": "b"}])
    assert (tmp_path / "q.1").read_bytes() == WRITER_MAGIC


def test_rotation_follows_kestrels_greater_than_rule(tmp_path):
    (tmp_path / "q.1").write_bytes(WRITER_MAGIC)
    clock = Clock(1000)
    data = "d" * (500 - put_size(0, False))  # 500-byte records, as in the spec's example
    w = PutWriter(tmp_path, "q", journal_size=1004, clock=clock)
    w.write([{"data": data}, {"data": data}])  # 4 + 500 + 500 = 1004 fits exactly
    assert sorted(os.listdir(tmp_path)) == ["q.1"] and (tmp_path / "q.1").stat().st_size == 1004
    w.write([{"data": data}])  # a third one rotates to q.<now>
    assert sorted(os.listdir(tmp_path)) == ["q.1", "q.1000"]
    assert (tmp_path / "q.1000").read_bytes()[:4] == WRITER_MAGIC
    clock.now = 1000  # the same millisecond again: the name must still be new
    w.write([{"data": data}, {"data": data}, {"data": data}])
    assert sorted(os.listdir(tmp_path)) == ["q.1", "q.1000", "q.1001"]
    fmt = KestrelFormat(tmp_path, {})
    assert {v: [r["id"] for r in rs] for v, rs in lines(fmt).items()} == {
        "q/journal/1.jsonl": [1, 2],
        "q/journal/1000.jsonl": [3, 4],
        "q/journal/1001.jsonl": [5, 6],
    }
    # only the newest file's view takes lines; older ones are history
    with pytest.raises(ReadOnlyView):
        fmt.writer("q/journal/1000.jsonl", False)
    assert isinstance(fmt.writer("q/journal/1001.jsonl", False), PutWriter)
    # an oversized record still goes into a file of its own
    w.write([{"data": "z" * 3000}])
    assert lines(KestrelFormat(tmp_path, {}))["q/journal/1002.jsonl"][0]["id"] == 7


def test_default_journal_size_option(tmp_path):
    (tmp_path / "q.1").write_bytes(WRITER_MAGIC)
    fmt = KestrelFormat(tmp_path, {"kestrel_journal_size": 100})
    w = fmt.writer("q/journal/1.jsonl", False)
    w.write([{"data": "x" * 50}, {"data": "y" * 50}])
    assert len([n for n in os.listdir(tmp_path) if n.startswith("q.")]) == 2
    assert KestrelFormat(tmp_path, {}).info()["journal_size"] == 16 * 1024 * 1024


@pytest.mark.parametrize("tail", [bytes(64), b"\x86\x05\x00"])
def test_zero_tail_or_damage_starts_a_new_file(tmp_path, tail):
    good = WRITER_MAGIC + encode_put(7, 0, b"kept")
    (tmp_path / "q.1").write_bytes(good + tail)
    w = PutWriter(tmp_path, "q", clock=Clock(50))
    w.write([{"data": "next"}])
    assert (tmp_path / "q.1").read_bytes() == good + tail  # never touched
    assert (tmp_path / "q.50").read_bytes() == WRITER_MAGIC + encode_put(8, 50, b"next")


def test_the_next_writer_skips_the_walk_until_the_file_changes(tmp_path, monkeypatch):
    # each `echo line >> view` opens a new writer: only the first walks the file
    (tmp_path / "q.1").write_bytes(WRITER_MAGIC + encode_put(7, 0, b"kept"))
    walks = []
    real_walk = writers._walk
    monkeypatch.setattr(writers, "_walk", lambda path: walks.append(path) or real_walk(path))
    PutWriter(tmp_path, "q", clock=Clock(50)).write([{"data": "a"}])
    PutWriter(tmp_path, "q", clock=Clock(50)).write([{"data": "b"}])
    assert len(walks) == 1
    # kestrel itself appends a PUT: the next writer walks again and follows its id
    with open(tmp_path / "q.1", "ab") as f:
        f.write(encode_put(20, 0, b"by kestrel"))
    PutWriter(tmp_path, "q", clock=Clock(50)).write([{"data": "c"}])
    assert len(walks) == 2
    assert [r["id"] for r in lines(KestrelFormat(tmp_path, {}))["q/journal/1.jsonl"]] == [7, 8, 9, 20, 21]


def test_writer_follows_a_producer_rotation(tmp_path):
    (tmp_path / "q.1").write_bytes(WRITER_MAGIC)
    w = PutWriter(tmp_path, "q")
    w.write([{"data": "a"}])
    (tmp_path / "q.9").write_bytes(WRITER_MAGIC + encode_put(2, 0, b"by kestrel"))
    w.write([{"data": "b"}])
    assert (tmp_path / "q.9").read_bytes().endswith(b"b")
    assert [r["id"] for r in lines(KestrelFormat(tmp_path, {}))["q/journal/9.jsonl"]] == [2, 3]


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=12), st.integers(60, 700))
def test_rotation_property(tmp_path_factory, payloads, limit):
    folder = tmp_path_factory.mktemp("rot")
    (folder / "q.1").write_bytes(WRITER_MAGIC)
    w = PutWriter(folder, "q", journal_size=limit, clock=Clock(10))
    for p in payloads:
        w.write([{"data_base64": base64.b64encode(p).decode()}])
    files = sorted((f for f in folder.iterdir()), key=lambda f: int(f.name.split(".")[1]))
    for f in files:
        size = f.stat().st_size
        assert size <= limit or size - 4 == put_size(len(payloads[0]), False) or _single(f)
    got = [r for rs in lines(KestrelFormat(folder, {})).values() for r in rs]
    assert [r["id"] for r in got] == list(range(1, len(payloads) + 1))


def _single(path: Path) -> bool:
    """A file above the limit holds one record (it could not fit anywhere)."""
    data = path.read_bytes()
    return len(data) == 4 + 25 + int.from_bytes(data[5:9], "little")


# -- reader files ------------------------------------------------------------------


def test_reader_rewrite_is_byte_exact_and_atomic(tmp_path):
    shutil.copy(FIXTURES / "example_hello.journal", tmp_path / "q.1")
    shutil.copy(FIXTURES / "spec_whole_read_file.read", tmp_path / "q.read.")
    fmt = KestrelFormat(tmp_path, {})
    w = fmt.writer("q/readers/default.json", False)
    assert w.mode == "replace"
    inode = (tmp_path / "q.read.").stat().st_ino
    w.write([{"reader": "", "head": 1, "done": [4, 3, 4]}])
    assert (tmp_path / "q.read.").read_bytes() == (FIXTURES / "example_head1_done34.read").read_bytes()
    assert (tmp_path / "q.read.").stat().st_ino != inode  # renamed over, not rewritten in place
    assert sorted(os.listdir(tmp_path)) == ["q.1", "q.read."]  # no ~~ temporary left
    views = KestrelFormat(tmp_path, {}).derived_views()
    assert views["q/readers/default.json"]() == b'{"reader":"","head":1,"done":[3,4]}\n'


def test_new_reader_and_round_trip_of_the_view(tmp_path):
    shutil.copy(FIXTURES / "spec_read_several.journal", tmp_path / "q.1")
    fmt = KestrelFormat(tmp_path, {})
    with pytest.raises(FileNotFoundError):
        fmt.writer("q/readers/a%2Fb.json", True)  # '/' cannot be in a reader file's name
    fmt.writer("q/readers/indexer.json", True).write([{"head": 100, "done": []}])
    assert (tmp_path / "q.read.indexer").read_bytes() == encode_reader_file(100, [])
    views = KestrelFormat(tmp_path, {}).derived_views()
    assert [orjson.loads(line)["id"] for line in views["q/pending/indexer.jsonl"]().splitlines()] == [101]
    again = orjson.loads(views["q/readers/indexer.json"]())
    fmt.writer("q/readers/indexer.json", False).write([again])
    assert (tmp_path / "q.read.indexer").read_bytes() == encode_reader_file(100, [])


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        ({"done": [1]}, "head"),
        ({"head": -1}, "range"),
        ({"head": 5, "done": [5]}, "not above head"),
        ({"head": 5, "done": "6"}, "list"),
        ({"head": 5, "done": [True]}, "integer"),
        ({"head": 5, "reader": "other"}, "does not match"),
        ({"head": 5, "extra": 1}, "unknown field"),
        ([5], "one JSON object"),
    ],
)
def test_bad_reader_objects_change_nothing(tmp_path, obj, reason):
    shutil.copy(FIXTURES / "example_hello.journal", tmp_path / "q.1")
    shutil.copy(FIXTURES / "example_head1_done34.read", tmp_path / "q.read.x")
    w = KestrelFormat(tmp_path, {}).writer("q/readers/x.json", False)
    with pytest.raises(BadRecord, match=reason):
        w.write([obj])
    with pytest.raises(BadRecord):
        w.write([{"head": 1}, {"head": 2}])
    assert (tmp_path / "q.read.x").read_bytes() == (FIXTURES / "example_head1_done34.read").read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["q.1", "q.read.x"]


def test_unwritable_and_unknown_paths(tmp_path):
    shutil.copy(FIXTURES / "example_hello.journal", tmp_path / "q.1")
    (tmp_path / "q.read.r").write_bytes(READER_MAGIC + b"\x02" + bytes(8))
    fmt = KestrelFormat(tmp_path, {})
    with pytest.raises(ReadOnlyView):
        fmt.writer("q/pending/r.jsonl", False)
    for path in ("nope/journal/1.jsonl", "q/journal/2.jsonl", "q/other/x.json", "q/readers/a~~b.json", "q"):
        with pytest.raises(FileNotFoundError):
            fmt.writer(path, True)
