"""Reading every layout and option combination, chunking, resuming, pending."""

from __future__ import annotations

import struct
from pathlib import Path

import lz4.frame
import orjson
import pytest

from fmtfs.formats.base import Chunk, FormatError, Problem
from fmtfs.formats.beats import BeatsFormat
from fmtfs.formats.beats.layout import QueueState, encode_state
from fmtfs.render import render_chunk, render_views
from fmtfs.shape import format_time
from tests import resume
from tests.test_beats_build import EXAMPLE_HEX, KEY, TS, event, proto_event, segment
from tests.trees import view_records

EXPECTED_EXAMPLE = {
    "timestamp": "2022-07-29T14:43:00.000000000Z",
    "flags": 1,
    "meta": {},
    "fields": {"message": "hi"},
}


def expected(ev: dict, proto: bool = False) -> dict:
    if not proto:
        return {**ev, "timestamp": format_time(ev["timestamp"])}

    def numbers(v):
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if isinstance(v, int | float):
            return float(v)
        if isinstance(v, dict):
            return {k: numbers(x) for k, x in v.items()}
        return [numbers(x) for x in v]

    return {
        "timestamp": format_time(ev["timestamp"]),
        "flags": 0,
        "meta": numbers(ev["meta"]),
        "fields": numbers(ev["fields"]),
    }


def read(src: Path, key: bytes | None = KEY) -> tuple[dict[str, list[dict]], list[Problem]]:
    """Every view's records and every problem; checks on the way that each
    chunk re-decodes to exactly the records the scan produced."""
    fmt = BeatsFormat(src, {"key": key})
    views: dict[str, list[dict]] = {}
    problems: list[Problem] = []
    for stream in fmt.streams():
        for view in stream.view_paths():
            views.setdefault(view, [])
        last_end = None
        for item in stream.scan(None, None):
            if isinstance(item, Problem):
                problems.append(item)
                continue
            assert last_end is None or item.start >= last_end - (1 << 23)
            last_end = item.end
            again = stream.decode(Chunk(item.start, item.end, item.state))  # as the index asks
            assert again == item.records
            # rendered as decoded (the read path) = the scan's records rendered
            assert render_chunk(stream, Chunk(item.start, item.end, item.state)) == render_views(item.records)
            orjson.dumps(item.records)  # renderable
            views[stream.view].extend(item.records[stream.view])  # buckets: test_buckets.py
    return views, problems


def queue(tmp_path: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    return tmp_path


def test_spec_worked_example(tmp_path: Path) -> None:
    src = queue(tmp_path, {"0.seg": bytes.fromhex(EXAMPLE_HEX)})
    assert BeatsFormat.detect(src)
    views, problems = read(src)
    assert views == {"segments/0.jsonl": [EXPECTED_EXAMPLE]} and problems == []


LAYOUTS = [("v0", 0), ("v1", 0), ("doc2", 0), ("doc3", 0)] + [("v2", o) for o in range(8)]


@pytest.mark.parametrize(("layout", "options"), LAYOUTS)
def test_every_layout_reads(tmp_path: Path, layout: str, options: int) -> None:
    events = [event(i) for i in range(40)]
    src = queue(tmp_path, {"3.seg": segment(layout, events, options)})
    views, problems = read(src)
    assert problems == []
    assert views["segments/3.jsonl"] == [expected(e, bool(options & 4)) for e in events]
    info = BeatsFormat(src, {"key": KEY}).info()
    assert info["segments"][0]["layout"] == layout and "key" not in orjson.dumps(info).decode()


@pytest.mark.parametrize(
    ("options", "kw"),
    [
        (0, {}),
        (1, {}),
        (2, {"lz4_piece": 5000}),
        (3, {"lz4_piece": 5000}),
        (2, {"lz4_block": lz4.frame.BLOCKSIZE_MAX64KB}),
        (2, {"lz4_block": lz4.frame.BLOCKSIZE_MAX64KB, "lz4_linked": True}),
        (3, {"lz4_block": lz4.frame.BLOCKSIZE_MAX64KB, "lz4_linked": True}),
    ],
)
def test_many_chunks_and_straddling_frames(tmp_path: Path, options: int, kw: dict) -> None:
    events = [event(i, size=i % 700) for i in range(5000)]
    src = queue(tmp_path, {"0.seg": segment("v2", events, options, **kw)})
    fmt = BeatsFormat(src, {"key": KEY})
    chunks = [c for c in fmt.streams()[0].scan(None, None) if isinstance(c, Chunk)]
    assert len(chunks) > 2
    views, problems = read(src)
    assert problems == []
    assert views["segments/0.jsonl"] == [expected(e) for e in events]


def test_json_payloads_in_a_v1_header_are_sniffed(tmp_path: Path) -> None:
    v0 = segment("v0", [event(1)])
    data = struct.pack("<II", 1, 1) + v0[4:]
    views, problems = read(queue(tmp_path, {"0.seg": data}))
    assert views["segments/0.jsonl"] == [expected(event(1))] and problems == []


def test_v0_json_with_broken_utf8(tmp_path: Path) -> None:
    from tests.test_beats_build import frame

    payload = b'{"timestamp":5,"flags":1,"meta":{},"fields":{"message":"caf\xc3"}}'
    views, problems = read(queue(tmp_path, {"0.seg": b"\0\0\0\0" + frame(payload)}))
    assert views["segments/0.jsonl"] == [
        {"timestamp": format_time(5), "flags": 1, "meta": {}, "fields": {"message": "caf\ufffd"}}
    ]


def test_protobuf_source_and_fallback(tmp_path: Path) -> None:
    from tests.test_beats_build import frame

    ev = event(2)
    payloads = [proto_event(ev, {"input_id": "in", "stream_id": "st"}), segment("v1", [ev])[8 + 4 : -8]]
    data = struct.pack("<III", 2, 2, 4) + b"".join(frame(p) for p in payloads)
    views, problems = read(queue(tmp_path, {"0.seg": data}))
    first, second = views["segments/0.jsonl"]
    assert first == {**expected(ev, proto=True), "source": {"input_id": "in", "stream_id": "st"}}
    assert second == expected(ev)  # CBOR under the protobuf bit: sniffed
    assert problems == []


def test_growth_resumes_from_last_chunk(tmp_path: Path) -> None:
    events = [event(i) for i in range(30)]
    path = tmp_path / "0.seg"
    full = segment("v2", events, 1, count=0)
    cut = len(segment("v2", events[:10], 1, count=0))
    path.write_bytes(full[:cut])
    fmt = BeatsFormat(tmp_path, {"key": KEY})
    stream = fmt.streams()[0]
    chunks = [c for c in stream.scan(None, None) if isinstance(c, Chunk)]
    path.write_bytes(full)
    more = resume.rescan(stream, chunks[-1])
    assert resume.records(chunks[:-1] + more, "segments/0.jsonl") == [expected(e) for e in events]


def test_growth_of_a_compressed_segment_without_end_mark(tmp_path: Path) -> None:
    events = [event(i, 300) for i in range(60)]
    whole = segment("v2", events, 2, count=0, lz4_piece=4000)
    body = whole[12:-8]  # drop end mark and content checksum: a segment still being written
    first_blocks = 12 + 7 + 3 * 0  # find the end of the third block
    i = 7
    for _ in range(3):
        (size,) = struct.unpack_from("<I", body, i)
        i += 4 + (size & 0x7FFFFFFF)
    first_blocks = 12 + i
    path = tmp_path / "0.seg"
    path.write_bytes(whole[:first_blocks])
    stream = BeatsFormat(tmp_path, {"key": None}).streams()[0]
    items = list(stream.scan(None, None))
    chunks = [c for c in items if isinstance(c, Chunk)]
    path.write_bytes(whole)
    more = resume.rescan(stream, chunks[-1])
    assert resume.records(chunks[:-1] + more, "segments/0.jsonl") == [expected(e) for e in events]


def _pending(src: Path) -> list[dict]:
    return view_records(BeatsFormat(src, {"key": KEY}), "pending.jsonl")


def test_pending_from_state_v1(tmp_path: Path) -> None:
    a = [event(i) for i in range(10)]
    b = [event(i) for i in range(10, 15)]
    seg_a = segment("v2", a, 1)
    offset = len(segment("v2", a[:4], 1)) - 16  # logical: IV not counted
    src = queue(tmp_path, {"4.seg": seg_a, "5.seg": segment("v2", b, 0)})
    (src / "state.dat").write_bytes(encode_state(QueueState(1, 4, offset, 4)))
    assert _pending(src) == [expected(e) for e in a[4:] + b]
    (src / "state.dat").write_bytes(encode_state(QueueState(1, 5, 12, 0)))
    assert _pending(src) == [expected(e) for e in b]
    (src / "state.dat").write_bytes(encode_state(QueueState(0, 4, 99, None)))  # v0: whole segment
    assert _pending(src) == [expected(e) for e in a + b]
    (src / "state.dat").write_bytes(encode_state(QueueState(1, 1, 40, 2)))  # older than every segment
    assert _pending(src) == [expected(e) for e in a + b]


def test_pending_in_a_compressed_segment_counts_uncompressed_bytes(tmp_path: Path) -> None:
    a = [event(i, 200) for i in range(20)]
    offset = 12 + len(segment("v2", a[:7], 0)) - 12
    src = queue(tmp_path, {"0.seg": segment("v2", a, 3, lz4_piece=1000)})
    (src / "state.dat").write_bytes(encode_state(QueueState(1, 0, offset, 7)))
    assert _pending(src) == [expected(e) for e in a[7:]]


def test_no_pending_without_state(tmp_path: Path) -> None:
    src = queue(tmp_path, {"0.seg": bytes.fromhex(EXAMPLE_HEX)})
    assert BeatsFormat(src, {}).derived_views() == {}


def test_missing_and_wrong_key(tmp_path: Path) -> None:
    src = queue(tmp_path, {"0.seg": bytes.fromhex(EXAMPLE_HEX), "1.seg": segment("v2", [event(1)], 3)})
    with pytest.raises(FormatError, match="key-file") as missing:
        BeatsFormat(src, {"key": None})
    with pytest.raises(FormatError, match="wrong key") as wrong:
        BeatsFormat(src, {"key": b"k" * 16})
    for exc in (missing, wrong):
        assert "\n" not in str(exc.value) and KEY.hex() not in str(exc.value)
    for layout in ("doc2", "doc3"):
        (src / "1.seg").write_bytes(segment(layout, [event(1)]))
        with pytest.raises(FormatError, match="document-only"):
            BeatsFormat(src, {"key": None})
        with pytest.raises(FormatError, match="wrong key"):
            BeatsFormat(src, {"key": bytes(16)})


def test_names_and_detection(tmp_path: Path) -> None:
    data = bytes.fromhex(EXAMPLE_HEX)
    src = queue(tmp_path, {"10.SEG": data, "2.seg": data, "x.seg": data, "3.seg.bak": data, "4.log": data})
    fmt = BeatsFormat(src, {})
    assert [s.name for s in fmt.streams()] == ["segments/2", "segments/10"]
    assert not BeatsFormat.detect(tmp_path / "2.seg")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert not BeatsFormat.detect(empty)
    (empty / "state.dat").write_bytes(encode_state(QueueState(1, 0, 0, 0)))
    assert BeatsFormat.detect(empty)


def test_timestamp_precision_and_negative(tmp_path: Path) -> None:
    evs = [dict(event(0), timestamp=t) for t in (0, 1, -1, TS + 999_999_999)]
    views, _ = read(queue(tmp_path, {"0.seg": segment("v1", evs)}))
    got = [r["timestamp"] for r in views["segments/0.jsonl"]]
    assert got == [
        "1970-01-01T00:00:00.000000000Z",
        "1970-01-01T00:00:00.000000001Z",
        "1969-12-31T23:59:59.999999999Z",
        "2022-07-29T14:43:00.999999999Z",
    ]


@pytest.mark.parametrize("options_lookalike", [b"\0\0\0\0", b"\x01\0\0\0", b"\x06\0\0\0"])
def test_document_v2_whose_iv_looks_like_shipped_options(tmp_path: Path, options_lookalike: bytes) -> None:
    iv = b"\x05\0\0\0" + options_lookalike + bytes(range(8))  # IV bytes 4-7 = file bytes 8-11
    events = [event(i) for i in range(3)]
    src = queue(tmp_path, {"0.seg": segment("doc2", events, iv=iv)})
    views, problems = read(src)
    assert problems == [] and views["segments/0.jsonl"] == [expected(e) for e in events]
    assert BeatsFormat(src, {"key": KEY}).info()["segments"][0]["layout"] == "doc2"


def _resident_kb_of(path: Path) -> int:
    """Resident kB of this process's mappings of `path` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if line[0] in "0123456789abcdef" and " " in line:  # a mapping's header line
            inside = line.endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


def test_scanning_and_decoding_a_segment_leave_none_of_it_resident(tmp_path: Path) -> None:
    from fmtfs.samples.beats import generate

    source = generate(tmp_path / "queue", 4_000, segments=1)
    stream = BeatsFormat(source, {}).streams()[0]
    chunks = [c for c in stream.scan(None, None) if isinstance(c, Chunk)]
    records = stream.decode(chunks[-1])[stream.view]
    # the mapping is still there (records decoded), its pages no longer count in RSS
    assert records and stream.path.stat().st_size > 256 << 10
    assert _resident_kb_of(stream.path) < 64
