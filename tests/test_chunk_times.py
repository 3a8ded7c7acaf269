"""Chunk.times (the index's per-chunk time range, which time filters and
buckets skip chunks by) come from the records' native integer times where
the scan has them (wallaby, gvfs), not from their rendered text."""

from __future__ import annotations

from pathlib import Path

from fmtfs.formats.base import Chunk
from fmtfs.formats.gvfs.format import GvfsFormat
from fmtfs.formats.timerange import bucket_views, native_range, text_range, timed_bucket_views
from fmtfs.formats.wallaby import WallabyLog, WallabyWriter
from fmtfs.shape import parse_time

NS = 1_000_000_000


def chunks(stream) -> list[Chunk]:
    return [c for c in stream.scan(None, None) if isinstance(c, Chunk)]


def test_wallaby_chunk_times_are_the_native_extremes(tmp_path: Path) -> None:
    from fmtfs.samples.wallaby import generate

    log = generate(tmp_path, 1) / "events.log"
    # out of order, with nanoseconds that text of a coarser unit would lose
    stamps = [1_700_000_000 * NS + 7, 5 * NS + 1, 1_600_000_000 * NS + 999_999_999, 1_650_000_000 * NS]
    WallabyWriter(log).write([{"time": t, "data": f"r{i}"} for i, t in enumerate(stamps)])
    (chunk,) = chunks(WallabyLog(log, "hour"))
    rendered = [parse_time(r["time"], "ns") for r in chunk.records["events.log/records.jsonl"]]
    assert rendered[1:] == stamps  # after the sample's own record, the same instants
    assert chunk.times == (min(rendered), max(rendered)) == (5 * NS + 1, 1_700_000_000 * NS + 7)


def test_gvfs_chunk_times_are_the_entries_native_seconds(tmp_path: Path) -> None:
    from fmtfs.samples.gvfs import generate

    source = generate(tmp_path, 400)
    fmt = GvfsFormat(source, {})
    for stream in fmt.streams():
        for chunk in chunks(stream):
            records = chunk.records[stream.view]
            seconds = [parse_time(r["time"], "s") for r in records]
            assert chunk.times == (min(seconds) * NS, max(seconds) * NS)
    assert any(chunks(s) for s in fmt.streams())


def test_a_time_beyond_the_index_range_gives_no_range() -> None:
    assert native_range([1, 2], "s") == (NS, 2 * NS)
    assert native_range([3, -(1 << 63)], "ns") == (-(1 << 63), 3)
    assert native_range([0, 10**10], "s") is None  # past 2262: not int64 nanoseconds
    assert native_range([], "ms") is None


def _timed(texts: list[object]) -> list[dict]:
    return [{"n": i, "t": text} for i, text in enumerate(texts)]


def test_a_chunk_within_one_hour_is_that_buckets_whole() -> None:
    records = _timed(["2024-05-01T10:00:00.000Z", "2024-05-01T10:59:59.999Z", "2024-05-01T10:30:00.000Z"])
    views = bucket_views(records, "t", "ms", "hour", "b")
    assert views == {"b/2024-05-01T10.jsonl": records}
    assert views["b/2024-05-01T10.jsonl"] is not records  # a list of its own, as every bucket's


def test_records_are_bucketed_in_order_whether_or_not_time_goes_back() -> None:
    texts = ["2024-05-01T10:00:00.000Z", "2024-05-01T11:00:00.000Z", "2024-05-01T10:10:00.000Z"]
    texts += [12345, "not a time", None, "2024-05-01T12:00:00.000Z", "2024-05-01T11:30:00.000Z"]
    records = _timed(texts)
    views = bucket_views(records, "t", "ms", "hour", "b")
    assert list(views) == ["b/2024-05-01T10.jsonl", "b/2024-05-01T11.jsonl", "b/2024-05-01T12.jsonl"]
    assert [[r["n"] for r in bucket] for bucket in views.values()] == [[0, 2], [1, 7], [6]]
    # one malformed time among times of one hour: the others are still that hour's
    assert bucket_views(_timed(["2024-05-01T10:00:00.000Z", "x"]), "t", "ms", "hour", "b") == {
        "b/2024-05-01T10.jsonl": _timed(["2024-05-01T10:00:00.000Z"])
    }


def test_a_time_range_skips_missing_times_and_refuses_mixed_ones() -> None:
    assert (
        text_range(["2024-05-01T10:00:00.000Z", None], "ms")
        == (parse_time("2024-05-01T10:00:00.000Z", "ns"),) * 2
    )
    assert text_range(iter(["2024-05-01T10:00:00.000Z"]), "ms") is not None
    assert text_range([None, None], "ms") is None
    assert text_range(["2024-05-01T10:00:00.000Z", 5], "ms") is None


def test_a_scans_buckets_and_range_at_once_are_the_two_taken_apart() -> None:
    one_hour = ["2024-05-01T10:00:00.000Z", "2024-05-01T10:20:00.000Z"]
    spread = ["2024-05-01T11:00:00.000Z", None, "2024-05-01T09:00:00.000Z", "2024-05-01T10:00:00.000Z"]
    for texts in (one_hour, spread, [*one_hour, "not a time"], [None], []):
        records = _timed(texts)
        views, times = timed_bucket_views(records, "t", "ms", "hour", "b")
        assert views == bucket_views(records, "t", "ms", "hour", "b")
        assert times == text_range(texts, "ms")
    assert timed_bucket_views(_timed(spread), "t", "ms", "hour", "b")[1] == (
        parse_time("2024-05-01T09:00:00.000Z", "ns"),
        parse_time("2024-05-01T11:00:00.000Z", "ns"),
    )


def test_a_kestrel_scan_gives_each_chunk_its_buckets_and_time_range(tmp_path: Path) -> None:
    from fmtfs.formats import open_source
    from fmtfs.samples.kestrel import generate

    generate(tmp_path, 3000)
    (stream, *_) = [s for s in open_source(tmp_path, None, {}).streams() if s.time_field]
    for chunk in chunks(stream):
        times = [parse_time(r["add_time"], "ns") for r in chunk.records[stream.view]]
        assert chunk.times == (min(times), max(times))
        assert chunk.records == stream.decode(chunk)  # the same views a read decodes
