"""The view layer without FUSE: exact sizes, random reads, the persistent
index, growth, meta files.  Wallaby is the format under test."""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from fmtfs.formats import open_source
from fmtfs.formats.wallaby import WallabyLog, WallabyWriter, create_pair
from fmtfs.samples.wallaby import START_NS, generate
from fmtfs.views import SourceTree


def tree_of(source: Path, cache: Path, **options) -> SourceTree:
    return SourceTree(open_source(source, None, {"time_bucket": "hour", **options}), cache)


def whole(tree: SourceTree, path: str) -> bytes:
    return tree.read(path, 0, 1 << 40)


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("src"), 12_000)


def test_sizes_are_exact_and_random_reads_match(sample: Path, tmp_path: Path) -> None:
    tree = tree_of(sample, tmp_path)
    rng = random.Random(7)
    jsonl = [p for p in tree.files if p.endswith(".jsonl") and not p.startswith("_")]
    assert "events.log/records.jsonl" in jsonl and len(jsonl) > 3
    for path in jsonl:
        data = whole(tree, path)
        assert tree.size(path) == len(data)
        for _ in range(20):
            offset, size = rng.randrange(len(data) + 10), rng.choice([1, 100, 4096, 1 << 17])
            assert tree.read(path, offset, size) == data[offset : offset + size]
    records = [orjson.loads(line) for line in whole(tree, "events.log/records.jsonl").splitlines()]
    assert [r["index"] for r in records] == list(range(12_000))
    # every record is in exactly one bucket, in log order
    in_buckets = [
        orjson.loads(line)
        for path in sorted(jsonl)
        if "/buckets/" in path
        for line in whole(tree, path).splitlines()
    ]
    assert sorted(in_buckets, key=lambda r: r["index"]) == records


def test_second_tree_decodes_nothing(sample: Path, tmp_path: Path, monkeypatch) -> None:
    first = tree_of(sample, tmp_path)
    sizes = {p: first.size(p) for p in first.files if not p.startswith(("parquet", "_"))}

    def forbidden(*args, **kwargs):
        raise AssertionError("the persistent index should have answered")

    for method in ("scan", "measured", "decode", "render"):
        monkeypatch.setattr(WallabyLog, method, forbidden)
    second = tree_of(sample, tmp_path)
    assert {p: second.size(p) for p in sizes} == sizes


def test_options_are_part_of_the_index_key(sample: Path, tmp_path: Path) -> None:
    hours = tree_of(sample, tmp_path)
    days = tree_of(sample, tmp_path, time_bucket="day")
    minutes = tree_of(sample, tmp_path, time_bucket="minute")
    assert "events.log/buckets/2015-05-17T22.jsonl" in hours.files
    assert "events.log/buckets/2015-05-17.jsonl" in days.files
    assert "events.log/buckets/2015-05-17T22:00.jsonl" in minutes.files


def test_growth_is_indexed_from_where_it_was(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "src").mkdir()
    source = generate(tmp_path / "src", 9_000)
    tree = tree_of(source, tmp_path / "cache")
    before = whole(tree, "events.log/records.jsonl")
    starts: list = []
    original = WallabyLog.measured  # what the index scans a wallaby log with

    def spy(self, start, state, **options):
        starts.append(start)
        return original(self, start, state, **options)

    monkeypatch.setattr(WallabyLog, "measured", spy)
    WallabyWriter(source / "events.log").write([{"time": START_NS, "data": f"new {i}"} for i in range(5)])
    changed = tree.refresh(force=True)
    assert "events.log/records.jsonl" in changed
    assert starts and starts[0] is not None and starts[0] > 16  # resumed, not rescanned
    after = whole(tree, "events.log/records.jsonl")
    assert after.startswith(before) and after.count(b"\n") == 9_005
    # identical to what a fresh index of the grown file shows
    assert after == whole(tree_of(source, tmp_path / "fresh"), "events.log/records.jsonl")


def test_meta_files_and_torn_tail(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    create_pair(source / "a")
    WallabyWriter(source / "a").write([{"time": START_NS, "data": "x"}] * 3)
    with open(source / "a", "ab") as f:
        f.write(
            b"\x09\x00\x00\x00\x00\x00\x00\x00\x01\x02\x03\x04\x05\x06\x07\x08abc"
        )  # torn: 9 bytes announced
    tree = tree_of(source, tmp_path / "cache")
    info = orjson.loads(whole(tree, "_fmtfs.json"))
    assert info["format"] == "wallaby" and info["streams"] == 1
    assert info["records"] == 3 and info["errors"] == 1
    assert info["details"]["logs"]["a"]["header_size"] == 16
    errors = [orjson.loads(line) for line in whole(tree, "_errors.jsonl").splitlines()]
    assert errors == [{"file": "a", "offset": 16 + 3 * 17, "error": errors[0]["error"]}]
    assert "torn" in errors[0]["error"]
    assert whole(tree, "a/records.jsonl").count(b"\n") == 3


def test_parquet_twin_holds_the_same_records(sample: Path, tmp_path: Path) -> None:
    tree = tree_of(sample, tmp_path)
    data = whole(tree, "parquet/events.log/records.parquet")
    assert tree.size("parquet/events.log/records.parquet") == len(data)
    (tmp_path / "x.parquet").write_bytes(data)
    table = pq.read_table(tmp_path / "x.parquet")
    assert table.num_rows == 12_000
    assert table.column("index").to_pylist() == list(range(12_000))


def test_writes_are_refused_on_read_only_views(sample: Path, tmp_path: Path) -> None:
    from fmtfs.formats.base import ReadOnlyView

    tree = tree_of(sample, tmp_path)
    for path in (
        "_fmtfs.json",
        "parquet/events.log/records.parquet",
        "events.log/buckets/2015-05-17T22.jsonl",
    ):
        with pytest.raises(ReadOnlyView):
            tree.open_writer(path, create=False)


def test_missing_or_lagging_index_does_not_hide_records(sample: Path, tmp_path: Path) -> None:
    import shutil

    from fmtfs.formats.wallaby import index_path

    expected = whole(tree_of(sample, tmp_path / "a"), "events.log/records.jsonl")
    copy = tmp_path / "copy"
    shutil.copytree(sample, copy)
    idx = index_path(copy / "events.log")
    idx.write_bytes(idx.read_bytes()[: 16 + 24 * 100 + 7])  # lagging and partial
    assert whole(tree_of(copy, tmp_path / "b"), "events.log/records.jsonl") == expected
    idx.unlink()
    assert whole(tree_of(copy, tmp_path / "c"), "events.log/records.jsonl") == expected


def test_a_decoder_failure_is_reported_not_fatal(sample: Path, tmp_path: Path, monkeypatch) -> None:
    calls = []

    def broken(self, start, state, **options):
        calls.append(start)
        yield from []
        raise RuntimeError("decoder bug")

    monkeypatch.setattr(WallabyLog, "measured", broken)  # what the index scans a wallaby log with
    tree = tree_of(sample, tmp_path)
    errors = [orjson.loads(line) for line in whole(tree, "_errors.jsonl").splitlines()]
    assert errors == [{"file": "events.log", "offset": 0, "error": "cannot decode this file: decoder bug"}]
    assert "events.log/records.jsonl" not in tree.files and "_fmtfs.json" in tree.files
    monkeypatch.undo()
    # nothing half-scanned was kept: the next look indexes the file whole
    tree.snapshot = None
    tree.refresh(force=True)
    assert whole(tree, "events.log/records.jsonl").count(b"\n") == 12_000


def test_empty_streams_keep_their_views_when_the_index_is_reused(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    create_pair(source / "empty.log")  # a header and nothing else
    first = tree_of(source, tmp_path / "cache")
    second = tree_of(source, tmp_path / "cache")  # answered from SQLite
    assert "empty.log/records.jsonl" in first.files
    assert sorted(second.files) == sorted(first.files)
    assert second.writable("empty.log/records.jsonl")


@pytest.mark.parametrize("name", ["wallaby", "kestrel", "beats", "proio", "gvfs"])
def test_cheap_writability_answers_as_constructing_a_writer_does(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tree asks the format once per rebuild which views take writes
    (Format.writable_views, from the listing just made: `ls -l` of N streams
    stays O(N)); the answer must be the one writer() gives, view by view."""
    import importlib

    from fmtfs.formats.base import Format

    source = tmp_path / "src"
    source.mkdir()
    importlib.import_module(f"fmtfs.samples.{name}").generate(source, 200)
    fmt = open_source(source, None, {})
    asked: list[str] = []
    writer = fmt.writer
    monkeypatch.setattr(fmt, "writer", lambda path, create: asked.append(path) or writer(path, create))
    tree = SourceTree(fmt, tmp_path / "cache")
    views = [p for p in tree.files if not p.startswith(("_", "parquet/"))]
    answers = [tree.writable(p) for p in views]
    # writer() lists the source: a rebuild asks it of one view at most
    assert len(asked) <= 1 < len(views)
    assert any(answers) and not all(answers)
    assert answers == [Format.writable(fmt, p) for p in views]
    assert not any(tree.writable(p) for p in tree.files if p.startswith(("_", "parquet/")))


def test_checks_of_a_big_source_take_a_bounded_share_of_the_time() -> None:
    """A stat re-checks the source every 50 ms, or less often where a check
    costs more (listing and stat'ing 10,000 native files: 45-80 ms), so that
    the checks during a listing stay a tenth of it; never less often than
    the poller's second."""
    from fmtfs.views import MAX_REFRESH_INTERVAL, REFRESH_INTERVAL, check_interval

    assert check_interval(0.0) == check_interval(0.001) == REFRESH_INTERVAL
    assert check_interval(0.05) == pytest.approx(0.5)
    assert check_interval(0.06) > check_interval(0.05)
    assert check_interval(5.0) == MAX_REFRESH_INTERVAL == 1.0
