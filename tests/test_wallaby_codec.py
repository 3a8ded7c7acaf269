"""The wallaby LOG/IDX codec against the spec's vectors and crash shapes."""

from __future__ import annotations

import base64
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmtfs.formats.base import BadRecord, Chunk, Problem
from fmtfs.formats.wallaby import (
    IDX_MAGIC,
    LOG_MAGIC,
    Bucketer,
    WallabyFormat,
    WallabyLog,
    WallabyWriter,
    create_pair,
    encode_header,
    encode_index_record,
    encode_record,
    index_path,
    log_header_size,
)
from fmtfs.shape import format_time, parse_time, take_data

T = 1431900000123456789  # the spec's example time


def scan_all(path: Path, bucket: str = "hour") -> tuple[list[dict], list[Problem]]:
    stream = WallabyLog(path, bucket)
    records, problems = [], []
    for item in stream.scan(None, None):
        if isinstance(item, Problem):
            problems.append(item)
        else:
            records.extend(item.records[stream.records_view])
            # decode() of every chunk must give what the scan gave
            again = stream.decode(Chunk(item.start, item.end, item.state))
            assert again == item.records
    return records, problems


def test_spec_vectors_section_9() -> None:
    assert encode_header(IDX_MAGIC, 0, 3600 * 10**9) == bytes.fromhex("4944580100000000 00a0b83046030000")
    assert encode_header(LOG_MAGIC, 0, 3600 * 10**9) == bytes.fromhex("4c4f470100000000 00a0b83046030000")
    assert encode_record(b"hello", T) == bytes.fromhex("0500000000000000158d3dad7621df1368656c6c6f")
    assert encode_index_record(T, 0, 16) == bytes.fromhex("158d3dad7621df1300000000000000001000000000000000")
    assert encode_index_record(T, 0, 8) == bytes.fromhex("158d3dad7621df1300000000000000000800000000000000")


@pytest.mark.parametrize("header", [8, 16])
def test_reads_both_header_sizes_with_and_without_index(tmp_path: Path, header: int) -> None:
    log = tmp_path / "LOG"
    head = b"LOG\x01\x00\x00\x00\x00" + (struct.pack("<q", 0) if header == 16 else b"")
    log.write_bytes(head + encode_record(b"hello", T) + encode_record(b"\xff\x00", T + 1))
    for with_index in (False, True):
        if with_index:
            index_path(log).write_bytes(encode_header(IDX_MAGIC) + encode_index_record(T, 0, header))
        assert log_header_size(log, log.read_bytes()) == header
        records, problems = scan_all(log)
        assert problems == []
        assert records == [
            {"index": 0, "time": "2015-05-17T22:00:00.123456789Z", "flags": 0, "data": "hello"},
            {"index": 1, "time": "2015-05-17T22:00:00.123456790Z", "flags": 0, "data_base64": "/wA="},
        ]


def test_zero_tail_ends_quietly(tmp_path: Path) -> None:
    log = tmp_path / "LOG"
    log.write_bytes(encode_header(LOG_MAGIC) + encode_record(b"a", T) + bytes(512 * 1024))
    records, problems = scan_all(log)
    assert [r["data"] for r in records] == ["a"]
    assert problems == []


def test_truncation_at_every_offset(tmp_path: Path) -> None:
    full = encode_header(LOG_MAGIC) + encode_record(b"first", T) + encode_record(b"second!", T + 5)
    first_end = 16 + 16 + 5
    log = tmp_path / "LOG"
    # the index says where record 0 starts, as it does for any real log
    index_path(log).write_bytes(encode_header(IDX_MAGIC) + encode_index_record(T, 0, 16))
    for cut in range(16, len(full) + 1):
        log.write_bytes(full[:cut])
        records, problems = scan_all(log)
        expected = ["first", "second!"][: (cut >= first_end) + (cut == len(full))]
        assert [r["data"] for r in records] == expected, cut
        torn = cut not in (16, first_end, len(full))
        assert bool(problems) == torn, cut
        if torn:
            assert problems[0].offset == (16 if cut < first_end else first_end)


def test_chunks_cover_many_records_and_buckets(tmp_path: Path) -> None:
    log = tmp_path / "LOG"
    create_pair(log)
    WallabyWriter(log).write([{"time": T + i * 60 * 10**9, "data": str(i)} for i in range(10_000)])
    stream = WallabyLog(log, "hour")
    chunks = [c for c in stream.scan(None, None) if isinstance(c, Chunk)]
    assert len(chunks) >= 3
    assert [c.state["seq"] for c in chunks] == [
        sum(len(c.records[stream.records_view]) for c in chunks[:i]) for i in range(len(chunks))
    ]
    buckets = {v for c in chunks for v in c.records if "/buckets/" in v}
    assert "LOG/buckets/2015-05-17T22.jsonl" in buckets
    assert len(buckets) == 10_000 // 60 + 1
    # resuming from the last chunk gives the same records as the first scan
    last = chunks[-1]
    resumed = [c for c in stream.scan(last.start, last.state) if isinstance(c, Chunk)]
    assert resumed[0].records == last.records


def test_writer_completes_a_lagging_partial_index_and_cuts_a_zero_tail(tmp_path: Path) -> None:
    log = tmp_path / "LOG"
    create_pair(log)
    writer = WallabyWriter(log)
    writer.write([{"time": T, "data": "one"}, {"time": T + 1, "data": "two"}])
    idx = index_path(log)
    # crash shapes: the index lost its last record and half of another; zeros after the log
    idx.write_bytes(idx.read_bytes()[: 16 + 24 + 10])
    log.write_bytes(log.read_bytes() + bytes(4096))
    writer.write([{"time": T + 2, "data": "three"}])
    data = idx.read_bytes()
    assert len(data) == 16 + 3 * 24
    offsets = [struct.unpack_from("<qQq", data, 16 + 24 * i) for i in range(3)]
    assert [o[1] for o in offsets] == [0, 1, 2]
    assert [o[0] for o in offsets] == [T, T + 1, T + 2]
    assert offsets[0][2] == 16 and offsets[1][2] == 16 + 16 + 3 and offsets[2][2] == 16 + 2 * 16 + 6
    records, problems = scan_all(log)
    assert [r["data"] for r in records] == ["one", "two", "three"] and not problems


def test_many_small_writes_give_the_files_one_write_gives(tmp_path: Path) -> None:
    """A mount hands the writer one write() per 128 KiB of `cat >>`: each
    brings the index in line from the mapped files (not the whole index
    read again), and the result is the same bytes as one write()."""
    records = [{"time": T + i, "data": f"record {i}", "flags": i % 3} for i in range(300)]
    one, many = tmp_path / "one", tmp_path / "many"
    for log in (one, many):
        create_pair(log)
    WallabyWriter(one).write(records)
    writer = WallabyWriter(many)
    for start in range(0, len(records), 7):
        writer.write(records[start : start + 7])
    assert many.read_bytes() == one.read_bytes()
    assert index_path(many).read_bytes() == index_path(one).read_bytes()
    assert [r["data"] for r in scan_all(many)[0]] == [r["data"] for r in records]


def test_writer_creates_missing_index_with_8_byte_log_header(tmp_path: Path) -> None:
    log = tmp_path / "LOG"
    log.write_bytes(b"LOG\x01\x00\x00\x00\x00" + encode_record(b"x", T))
    WallabyWriter(log).write([{"time": T + 1, "data": "y"}])
    idx = index_path(log).read_bytes()
    assert idx[:4] == IDX_MAGIC and len(idx) == 16 + 48
    assert struct.unpack_from("<qQq", idx, 16 + 24) == (T + 1, 1, 8 + 17)


@pytest.mark.parametrize(
    "bad",
    [
        {"data": 5},
        {"time": "yesterday", "data": "x"},
        {"data_base64": "!!"},
        {"data": "x", "flags": -1},
        {"data": "x", "extra": 1},
        {"data": "x" * 65537},
        {"data": "x", "index": 7},
        {},
    ],
)
def test_bad_records_are_refused_and_nothing_is_written(tmp_path: Path, bad: dict) -> None:
    log = tmp_path / "LOG"
    create_pair(log)
    before = (log.read_bytes(), index_path(log).read_bytes())
    with pytest.raises(BadRecord):
        WallabyWriter(log).write([{"data": "good"}, bad])
    assert (log.read_bytes(), index_path(log).read_bytes()) == before


def test_writer_refuses_after_a_torn_record(tmp_path: Path) -> None:
    log = tmp_path / "LOG"
    create_pair(log)
    log.write_bytes(log.read_bytes() + encode_record(b"whole", T)[:-2])
    with pytest.raises(BadRecord, match="torn"):
        WallabyWriter(log).write([{"data": "x"}])


def test_detection(tmp_path: Path) -> None:
    assert not WallabyFormat.detect(tmp_path)
    create_pair(tmp_path / "app.log")
    assert WallabyFormat.detect(tmp_path)
    assert WallabyFormat.detect(tmp_path / "app.log")
    assert not WallabyFormat.detect(tmp_path / "app.log.idx")


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.binary(max_size=300), st.integers(1, 2**62), st.integers(0, 2**32 - 1)), max_size=30
    )
)
def test_round_trip(tmp_path_factory, items) -> None:
    log = tmp_path_factory.mktemp("rt") / "LOG"
    create_pair(log)
    WallabyWriter(log).write(
        [{"time": t, "flags": f, "data_base64": base64.b64encode(p).decode()} for p, t, f in items]
    )
    records, problems = scan_all(log)
    assert not problems
    assert len(records) == len(items)
    for i, (record, (payload, stamp, flags)) in enumerate(zip(records, items, strict=True)):
        assert record["index"] == i and record["flags"] == flags
        assert parse_time(record["time"]) == stamp
        assert take_data(record) == payload


HOUR_NS = 3600 * 10**9
# times anywhere, and a nanosecond either side of bucket edges (a minute, an hour, a day)
STAMPS = st.one_of(
    st.integers(1, 2**62),
    st.builds(lambda n, d: n * 60 * 10**9 + d, st.integers(1, 2**25), st.sampled_from([-1, 0, 1])),
    st.builds(lambda n, d: n * 24 * HOUR_NS + d, st.integers(1, 2**15), st.sampled_from([-1, 0, 1])),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(STAMPS, min_size=1, max_size=40), st.sampled_from(["minute", "hour", "day"]))
def test_every_record_is_in_the_bucket_of_its_time(tmp_path_factory, stamps, unit) -> None:
    """The decoder asks for a bucket only when a record falls outside the
    last one's span: records out of time order, or a nanosecond across an
    edge, still each land in their own bucket, with their own time text."""
    log = tmp_path_factory.mktemp("buckets") / "LOG"
    create_pair(log)
    WallabyWriter(log).write([{"time": t, "data": str(i)} for i, t in enumerate(stamps)])
    stream = WallabyLog(log, unit)
    chunks = [c for c in stream.scan(None, None) if isinstance(c, Chunk)]
    got = {v: [r["index"] for r in rs] for c in chunks for v, rs in c.records.items() if "/buckets/" in v}
    expected: dict[str, list[int]] = {}
    for i, t in enumerate(stamps):
        expected.setdefault(f"LOG/buckets/{Bucketer(unit).name(t)}.jsonl", []).append(i)
    assert got == expected
    records = [r for c in chunks for r in c.records[stream.records_view]]
    assert [r["time"] for r in records] == [format_time(t) for t in stamps]


def test_generation_a_geometry_is_reported_not_decoded(tmp_path: Path) -> None:
    log = tmp_path / "LOG"
    records = b"".join(struct.pack("<IIqQ", 30, 0, T + i, i) + bytes(range(30)) for i in range(3))
    log.write_bytes(b"LOG\x01\x00\x00\x00\x00" + records)
    index_path(log).write_bytes(
        b"IDX\x01\x00\x00\x00\x00" + b"".join(struct.pack("<qQqq", T + i, i, 8, 0) for i in range(3))
    )
    found, problems = scan_all(log)
    assert found == []
    assert len(problems) == 1 and "generation A" in problems[0].error


def _append_many(log: Path, name: int) -> None:
    writer = WallabyWriter(log)
    for i in range(25):
        writer.write([{"time": T + i, "data": f"writer {name} record {i}"}])


def test_writers_in_several_processes_do_not_interleave(tmp_path: Path) -> None:
    import multiprocessing

    log = tmp_path / "LOG"
    create_pair(log)
    workers = [multiprocessing.Process(target=_append_many, args=(log, n)) for n in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    records, problems = scan_all(log)
    assert not problems and len(records) == 100
    idx, data = index_path(log).read_bytes(), log.read_bytes()
    assert len(idx) == 16 + 100 * 24
    for i in range(100):
        stamp, seq, offset = struct.unpack_from("<qQq", idx, 16 + 24 * i)
        assert seq == i and struct.unpack_from("<IIq", data, offset)[2] == stamp
