"""Damaged inputs: bad CRC, size mismatch, truncation at every offset, odd
segments, and the LZ4 golden vectors of the Beats compression tests."""

from __future__ import annotations

import struct
from pathlib import Path

import lz4.frame
import orjson
import pytest

from fmtfs.formats.base import FormatError, Problem
from fmtfs.formats.beats import BeatsFormat, derive_key, lz4stream, read_key_file
from fmtfs.formats.beats.layout import QueueState, encode_state
from tests import resume
from tests.mounting import fmtfs
from tests.test_beats_build import EXAMPLE_HEX, FIXTURES, KEY, event, frame, segment
from tests.test_beats_read import expected, read
from tests.trees import view_records


def frame_ends(layout: str, events: list[dict], options: int = 0) -> list[int]:
    """File offsets just after each frame (linear layouts)."""
    return [len(segment(layout, events[: k + 1], options, count=len(events))) for k in range(len(events))]


@pytest.mark.parametrize(
    ("layout", "options"), [("v2", 0), ("v2", 1), ("v0", 0), ("v1", 0), ("doc3", 0), ("v2", 4)]
)
def test_truncation_at_every_offset(tmp_path: Path, layout: str, options: int) -> None:
    events = [event(i) for i in range(3)]
    whole = segment(layout, events, options)
    ends = frame_ends(layout, events, options)
    start = len(segment(layout, [], options))  # where the first frame begins
    for cut in range(len(whole) + 1):
        src = tmp_path / f"cut{cut}"
        src.mkdir()
        (src / "0.seg").write_bytes(whole[:cut])
        views, problems = read(src)  # a torn first frame is not mistaken for a wrong key
        got = views["segments/0.jsonl"]
        whole_frames = sum(1 for e in ends if e <= cut)
        assert len(got) == whole_frames
        assert got == [expected(e, bool(options & 4)) for e in events[:whole_frames]]
        clean = cut in ends or cut == start
        assert bool(problems) == (not clean), (cut, problems)


def test_truncation_of_a_compressed_segment_at_every_offset(tmp_path: Path) -> None:
    events = [event(i, 100) for i in range(6)]
    whole = segment("v2", events, 2, lz4_piece=300)
    seen = []
    for cut in range(len(whole) + 1):
        src = tmp_path / f"cut{cut}"
        src.mkdir()
        (src / "0.seg").write_bytes(whole[:cut])
        views, _ = read(src)
        got = views["segments/0.jsonl"]
        assert got == [expected(e) for e in events[: len(got)]]  # always a clean prefix
        seen.append(len(got))
    assert seen == sorted(seen) and seen[-1] == len(events)


def _damaged(tmp_path: Path, mutate) -> tuple[list[dict], list]:
    data = bytearray(segment("v2", [event(i) for i in range(4)], 0))
    mutate(data)
    (tmp_path / "0.seg").write_bytes(bytes(data))
    (tmp_path / "1.seg").write_bytes(bytes.fromhex(EXAMPLE_HEX))
    views, problems = read(tmp_path)
    assert len(views["segments/1.jsonl"]) == 1  # the next segment is unaffected
    return views["segments/0.jsonl"], problems


def test_bad_crc_ends_the_segment(tmp_path: Path) -> None:
    second = frame_ends("v2", [event(i) for i in range(4)])[0]
    got, problems = _damaged(tmp_path, lambda d: d.__setitem__(second + 30, d[second + 30] ^ 0x40))
    assert got == [expected(event(0))]
    assert len(problems) == 1 and "checksum" in problems[0].error and problems[0].offset == second


def test_repeated_size_mismatch(tmp_path: Path) -> None:
    ends = frame_ends("v2", [event(i) for i in range(4)])
    got, problems = _damaged(tmp_path, lambda d: d.__setitem__(ends[2] - 4, d[ends[2] - 4] ^ 1))
    assert len(got) == 2 and "repeated size" in problems[0].error


def test_implausible_size(tmp_path: Path) -> None:
    got, problems = _damaged(tmp_path, lambda d: d.__setitem__(slice(12, 16), struct.pack("<I", 12)))
    assert got == [] and "implausible" in problems[0].error


def test_odd_segments_are_reported_and_skipped(tmp_path: Path) -> None:
    (tmp_path / "0.seg").write_bytes(b"")
    (tmp_path / "1.seg").write_bytes(b"\x02\x00")
    (tmp_path / "2.seg").write_bytes(struct.pack("<I", 7) + bytes(20))
    (tmp_path / "3.seg").write_bytes(bytes.fromhex(EXAMPLE_HEX) + bytes(40))  # zero tail: quiet
    (tmp_path / "03.seg").write_bytes(bytes.fromhex(EXAMPLE_HEX))  # duplicate id
    (tmp_path / "state.dat").write_bytes(struct.pack("<I", 9) + bytes(24))
    views, problems = read(tmp_path)
    errors = {p.file: p.error for p in problems}
    assert errors["0.seg"] == "empty segment"
    assert "truncated" in errors["1.seg"]
    assert errors["2.seg"] == "unrecognized schema version 7"
    assert "3.seg" not in errors and len(views["segments/3.jsonl"]) == 1
    fmt = BeatsFormat(tmp_path, {})
    extra = {p.file: p.error for p in fmt.problems()}
    assert "also used" in extra["3.seg"] and "unsupported queue metadata version 9" in extra["state.dat"]
    assert fmt.derived_views() == {}


def test_payload_that_is_not_an_event(tmp_path: Path) -> None:
    data = (
        struct.pack("<III", 2, 3, 0)
        + frame(b"\xa4\xff")
        + frame(b"\x00\x01")
        + frame(bytes.fromhex(EXAMPLE_HEX)[16:-8])
    )
    (tmp_path / "0.seg").write_bytes(data)
    views, problems = read(tmp_path)
    first, second, third = views["segments/0.jsonl"]
    assert first == {"timestamp": None, "flags": None, "meta": {}, "fields": {}, "data_base64": "pP8="}
    assert second["data"] == "\x00\x01" and third["fields"] == {"message": "hi"}
    assert [p.offset for p in problems] == [12, 26]
    assert "invalid CBOR" in problems[0].error and "not a map" in problems[1].error


def test_unusual_cbor_values_stay_renderable(tmp_path: Path) -> None:
    import cbor2

    ev = {
        "timestamp": 3,
        "flags": 1,
        "meta": {1: b"\x00\xff"},
        "fields": {"u": cbor2.undefined, "big": -(1 << 64)},
    }
    extra = {"flags": 2, "fields": {}, "x": 1}  # keys missing, out of order, one extra
    (tmp_path / "0.seg").write_bytes(
        struct.pack("<II", 1, 2) + frame(cbor2.dumps(ev)) + frame(cbor2.dumps(extra))
    )
    views, problems = read(tmp_path)
    assert views["segments/0.jsonl"] == [
        {
            "timestamp": "1970-01-01T00:00:00.000000003Z",
            "flags": 1,
            "meta": {"1": "AP8="},
            "fields": {"u": None, "big": str(-(1 << 64))},
        },
        {"timestamp": "1970-01-01T00:00:00.000000000Z", "flags": 2, "meta": {}, "fields": {}, "x": 1},
    ]


def test_one_damaged_encrypted_segment_among_good_ones(tmp_path: Path) -> None:
    good = segment("v2", [event(1)], 1)
    bad = bytearray(segment("v2", [event(2)], 1))
    bad[30] ^= 0xFF
    (tmp_path / "0.seg").write_bytes(good)
    (tmp_path / "1.seg").write_bytes(bytes(bad))
    views, problems = read(tmp_path)
    assert views["segments/0.jsonl"] == [expected(event(1))] and views["segments/1.jsonl"] == []
    assert [p.file for p in problems] == ["1.seg"]


# -- LZ4 golden vectors (elastic/beats compression_test.go) ---------------------------


def _decode_container(data: bytes) -> tuple[bytes, lz4stream.Tail]:
    head = lz4stream.parse_header(data[:19])
    tail: list[lz4stream.Tail] = []
    read_at = lambda c, n: data[c : c + n]  # noqa: E731
    out = b"".join(b.data for b in lz4stream.blocks(read_at, len(data), head, head.size, 0, tail))
    return out, tail[0]


def _content_error(data: bytes, tail: lz4stream.Tail) -> str | None:
    read_at = lambda c, n: data[c : c + n]  # noqa: E731
    return lz4stream.content_error(read_at, len(data), lz4stream.parse_header(data[:19]), tail)


def test_lz4_pierrec_vector() -> None:
    data = (FIXTURES / "lz4_abc_pierrec_v4.bin").read_bytes()
    assert data.hex() == "04224d186470b903000080616263" + "00000000ff53d132"
    out, tail = _decode_container(data)
    assert out == b"abc" and tail.kind == "end" and tail.trailing == 0
    assert tail.digest == 0x32D153FF and _content_error(data, tail) is None
    # Python's lz4 reproduces Beats' writer (pierrec/lz4 v4 defaults) byte for byte
    ctx = lz4.frame.LZ4FrameCompressor(
        block_size=lz4.frame.BLOCKSIZE_MAX4MB,
        block_linked=False,
        content_checksum=True,
        compression_level=0,
        auto_flush=True,
    )
    assert ctx.begin() + ctx.compress(b"abc") + ctx.flush() == data
    assert lz4stream.xxh32(b"abc") == 0x32D153FF
    assert lz4stream.BEATS_HEADER + lz4stream.encode_blocks(b"abc") + lz4stream.END_MARK + data[-4:] == data


def test_lz4_cli_vector_with_trailing_byte() -> None:
    data = (FIXTURES / "lz4_abc_lz4cli_1.9.3.bin").read_bytes()
    assert len(data) == 24
    out, tail = _decode_container(data)
    head = lz4stream.parse_header(data)
    assert out == b"abc\n" and head.max_block == 64 << 10
    assert tail.kind == "end" and tail.trailing == 1
    assert tail.digest == 0x087B3E6C and _content_error(data, tail) is None


@pytest.mark.parametrize("name", ["lz4_abc_pierrec_v4.bin", "lz4_abc_lz4cli_1.9.3.bin"])
def test_lz4_vectors_with_a_flipped_content_checksum(name: str) -> None:
    data = bytearray((FIXTURES / name).read_bytes())
    at = data.index(lz4stream.END_MARK, 7) + 4  # the checksum follows the end mark
    data[at] ^= 0x01
    out, tail = _decode_container(bytes(data))
    assert out.startswith(b"abc")  # the content is still read
    error = _content_error(bytes(data), tail)
    assert error is not None and f"{tail.digest:08x}" in error
    # a pass that started mid-frame (no digest of its own) decodes the frame again
    again = lz4stream.Tail("end", tail.c, trailing=tail.trailing)
    assert _content_error(bytes(data), again) == error


def test_lz4_segment_with_a_flipped_content_checksum(tmp_path: Path) -> None:
    events = [event(i, 300) for i in range(40)]
    data = bytearray(segment("v2", events, 2, lz4_piece=4000))
    data[-4:] = bytes(b ^ 0xFF for b in data[-4:])
    (tmp_path / "0.seg").write_bytes(bytes(data))
    views, problems = read(tmp_path)
    assert views["segments/0.jsonl"] == [expected(e) for e in events]  # every frame stays readable
    assert [(p.file, p.offset) for p in problems] == [("0.seg", len(data) - 4)]
    assert "content checksum" in problems[0].error
    errors = fmtfs("cat", tmp_path, "_errors.jsonl", "--cache-dir", tmp_path / "cache").stdout
    assert [orjson.loads(line) for line in errors.splitlines()] == [
        {"file": "0.seg", "offset": len(data) - 4, "error": problems[0].error}
    ]
    data[-4:] = bytes(b ^ 0xFF for b in data[-4:])
    (tmp_path / "0.seg").write_bytes(bytes(data))
    assert read(tmp_path)[1] == []


@pytest.mark.parametrize("good", [True, False])
def test_lz4_checksum_checked_when_a_resumed_scan_meets_the_end_mark(
    tmp_path: Path, good: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fmtfs.formats.beats import segment as segment_module

    monkeypatch.setattr(segment_module, "CHUNK_RECORDS", 8)  # so the last chunk starts mid-frame
    events = [event(i, 300) for i in range(60)]
    whole = bytearray(segment("v2", events, 2 | 1, lz4_piece=4000))
    if not good:
        whole[-1] ^= 0x01  # CTR: flipping a ciphertext bit flips that plaintext bit
    path = tmp_path / "0.seg"
    path.write_bytes(bytes(whole[: len(whole) * 2 // 3]))  # still being written: no end mark yet
    stream = BeatsFormat(tmp_path, {"key": KEY}).streams()[0]
    items = list(stream.scan(None, None))
    chunks = [c for c in items if not isinstance(c, Problem)]
    assert chunks[-1].state["block"] > chunks[0].state["block"] and not [
        p for p in items if isinstance(p, Problem) and "checksum" in p.error
    ]
    path.write_bytes(bytes(whole))
    rest = list(stream.scan(chunks[-1].start, chunks[-1].state))
    problems = [p for p in rest if isinstance(p, Problem)]
    assert resume.records([c for c in chunks[:-1] + rest if not isinstance(c, Problem)], stream.view) == [
        expected(e) for e in events
    ]
    assert [(p.offset, "content checksum" in p.error) for p in problems] == (
        [] if good else [(len(whole) - 4, True)]
    )


def test_lz4_segment_with_trailing_data_reports_it(tmp_path: Path) -> None:
    (tmp_path / "0.seg").write_bytes(segment("v2", [event(1)], 2) + b"\x00")
    views, problems = read(tmp_path)
    assert views["segments/0.jsonl"] == [expected(event(1))]
    assert len(problems) == 1 and "after the LZ4 frame" in problems[0].error


# -- keys ---------------------------------------------------------------------------


def test_password_derivation_vector() -> None:
    assert derive_key("changeme").hex() == "9b62976884c2cbb738c2b844838bac27"


def test_key_files(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    raw.write_bytes(KEY)
    text = tmp_path / "hex"
    text.write_text(KEY.hex().upper() + "\n")
    bad = tmp_path / "bad"
    bad.write_text("not a key")
    assert read_key_file(raw) == KEY == read_key_file(text)
    with pytest.raises(FormatError, match="16 raw bytes or 32 hex"):
        read_key_file(bad)
    with pytest.raises(FormatError, match="cannot read"):
        read_key_file(tmp_path / "missing")


def test_state_dat_v0_and_v1_parse(tmp_path: Path) -> None:
    (tmp_path / "0.seg").write_bytes(bytes.fromhex(EXAMPLE_HEX))
    for state in (QueueState(0, 0, 12, None), QueueState(1, 0, 76, 1)):
        (tmp_path / "state.dat").write_bytes(encode_state(state))
        fmt = BeatsFormat(tmp_path, {})
        assert fmt.info()["state"]["version"] == state.version
        pending = view_records(fmt, "pending.jsonl")
        assert len(pending) == (1 if state.version == 0 else 0)
