"""Writing through the format: byte-exact vectors, every option combination
checked by an independent reader, validation, refusals, crash safety."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmtfs.formats.base import BadRecord, ReadOnlyView
from fmtfs.formats.beats import BeatsFormat, frames
from fmtfs.formats.beats import cbor as beats_cbor
from fmtfs.formats.beats.layout import QueueState, encode_state, parse_state
from tests.test_beats_build import (
    EXAMPLE_EVENT,
    EXAMPLE_HEX,
    IV,
    KEY,
    event,
    frame,
    payload_for,
    reference_read,
    segment,
)
from tests.test_beats_read import expected, read

# spec §4.2, verbatim
VECTORS = {
    1: (
        "020000000100000001000000101112131415161718191a1b1c1d1e1f47feef7445bc7707fd6b9d65eff9e28885c496ee"
        "7dbe0a02231f1103ec8adf6ca7444c0695839ec200faee5f00b2501f238107d33e20d51cddb4d8da8e0cd108"
    ),
    2: (
        "02000000010000000200000004224d186470b94000008040000000a46974696d657374616d701b170653eaa5b2880065"
        "666c61677301646d657461a0666669656c6473a1676d657373616765626869f127edd84000000000000000090f6bbb"
    ),
    3: (
        "020000000100000003000000101112131415161718191a1b1c1d1e1f03dca26c85a5ba2e900e6e518e949237fbb6ac69"
        "bd7ff6632b0966758daa34ad78a93802538999cc1697ee41c4a15cda36940fd13726ced44bfe5071bd6db66d546c9735"
        "b9c2cd8a79ca8b284c81923651f697"
    ),
}


def test_worked_example_byte_for_byte(tmp_path: Path) -> None:
    fmt = BeatsFormat(tmp_path, {"key": None})
    writer = fmt.writer("segments/0.jsonl", True)
    writer.write([EXAMPLE_EVENT])
    writer.sync()
    seg = tmp_path / "0.seg"
    assert seg.read_bytes() == bytes.fromhex(EXAMPLE_HEX)
    assert seg.stat().st_mode & 0o777 == 0o600
    # state.dat after the frame is acked (spec §4.1)
    state = QueueState(1, 0, 76, 1)
    assert (
        encode_state(state).hex() == "01000000" + "0000000000000000" + "4c00000000000000" + "0100000000000000"
    )
    assert parse_state(encode_state(state)) == state


@pytest.mark.parametrize("options", sorted(VECTORS))
def test_option_vectors_byte_for_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: int) -> None:
    # the newest segment carries the options; the new one inherits them
    (tmp_path / "0.seg").write_bytes(segment("v2", [event(0)], options))
    monkeypatch.setattr(os, "urandom", lambda n: IV[:n])
    writer = BeatsFormat(tmp_path, {"key": KEY}).writer("segments/1.jsonl", True)
    writer.write([{"timestamp": "2022-07-29T14:43:00Z", "meta": {}, "fields": {"message": "hi"}}])
    assert (tmp_path / "1.seg").read_bytes().hex() == VECTORS[options]


@pytest.mark.parametrize("options", range(8))
def test_round_trip_every_option_combination(tmp_path: Path, options: int) -> None:
    (tmp_path / "0.seg").write_bytes(segment("v2", [event(0)], options))
    fmt = BeatsFormat(tmp_path, {"key": KEY})
    proto = bool(options & 4)
    flags = 0 if proto else 1  # shipper events carry no flags
    batches = [
        [{**event(i, size=i * 37 % 300), "flags": flags} for i in range(k, k + 7)] for k in range(1, 30, 7)
    ]
    writer = fmt.writer("segments/1.jsonl", True)
    for batch in batches[:2]:
        writer.write(batch)
    writer = fmt.writer("segments/1.jsonl", False)  # a new handle on the existing newest segment
    for batch in batches[2:]:
        writer.write(batch)
    written = [e for b in batches for e in b]
    count, events = reference_read((tmp_path / "1.seg").read_bytes())
    assert count == len(written)
    if proto:
        assert [expected({**e, "flags": 0}, True) for e in events] == [expected(e, True) for e in written]
    else:
        assert events == written
    views, problems = read(tmp_path)
    assert problems == []
    assert views["segments/1.jsonl"] == [expected(e, proto) for e in written]


@pytest.mark.parametrize("options", [0, 1, 2, 3])
def test_append_to_a_segment_written_elsewhere(tmp_path: Path, options: int) -> None:
    old = [event(i) for i in range(5)]
    (tmp_path / "7.seg").write_bytes(segment("v2", old, options, count=0))  # crashed: count 0
    BeatsFormat(tmp_path, {"key": KEY}).writer("segments/7.jsonl", False).write([event(9)])
    count, events = reference_read((tmp_path / "7.seg").read_bytes())
    assert count == 6 and events == old + [event(9)]


def test_written_lines_defaults_and_time_forms(tmp_path: Path) -> None:
    writer = BeatsFormat(tmp_path, {}).writer("segments/0.jsonl", True)
    writer.write([{"timestamp": 5, "fields": {"a": 1}}, {"timestamp": "2022-07-29T16:43:00.5+02:00"}])
    _, events = reference_read((tmp_path / "0.seg").read_bytes())
    assert events == [
        {"timestamp": 5, "flags": 1, "meta": {}, "fields": {"a": 1}},
        {"timestamp": 1659105780500000000, "flags": 1, "meta": {}, "fields": {}},
    ]


@pytest.mark.parametrize(
    "bad",
    [
        [1],
        [{"timestamp": "yesterday"}],
        [{"timestamp": 1, "flags": -1}],
        [{"timestamp": 1, "flags": 1 << 32}],
        [{"timestamp": 1, "flags": True}],
        [{"timestamp": 1 << 63}],
        [{"timestamp": 1, "meta": []}],
        [{"timestamp": 1, "fields": {"n": 1 << 64}}],
        [{"timestamp": 1, "extra": 1}],
        [{"timestamp": 1, "data": "raw"}],
        [{"timestamp": 1}, {"timestamp": 1, "fields": "x"}],  # the good line is not written either
    ],
)
def test_invalid_lines_write_nothing(tmp_path: Path, bad: list) -> None:
    (tmp_path / "0.seg").write_bytes(bytes.fromhex(EXAMPLE_HEX))
    writer = BeatsFormat(tmp_path, {}).writer("segments/0.jsonl", False)
    with pytest.raises(BadRecord):
        writer.write(bad)
    assert (tmp_path / "0.seg").read_bytes() == bytes.fromhex(EXAMPLE_HEX)


def test_refusals(tmp_path: Path) -> None:
    (tmp_path / "0.seg").write_bytes(bytes.fromhex(EXAMPLE_HEX))
    (tmp_path / "1.seg").write_bytes(segment("v1", [event(1)]))
    (tmp_path / "state.dat").write_bytes(encode_state(QueueState(1, 0, 0, 0)))
    fmt = BeatsFormat(tmp_path, {"key": KEY})
    with pytest.raises(ReadOnlyView):
        fmt.writer("pending.jsonl", False)
    with pytest.raises(ReadOnlyView, match="newest"):
        fmt.writer("segments/0.jsonl", False)
    with pytest.raises(ReadOnlyView, match="read-only"):
        fmt.writer("segments/1.jsonl", False)
    with pytest.raises(ReadOnlyView, match="needs an id above"):  # EACCES: not above the newest id
        fmt.writer("segments/1.jsonl", True)
    with pytest.raises(ReadOnlyView):
        fmt.writer("segments/01.jsonl", True)
    # a new segment after a v1 one is plaintext v2
    fmt.writer("segments/2.jsonl", True).write([event(2)])
    assert reference_read((tmp_path / "2.seg").read_bytes()) == (1, [event(2)])
    for layout in ("doc2", "doc3"):
        (tmp_path / "5.seg").write_bytes(segment(layout, [event(1)]))
        with pytest.raises(ReadOnlyView, match="read-only"):
            BeatsFormat(tmp_path, {"key": KEY}).writer("segments/5.jsonl", False)


def test_crash_between_frames_and_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "0.seg").write_bytes(bytes.fromhex(EXAMPLE_HEX))
    writer = BeatsFormat(tmp_path, {}).writer("segments/0.jsonl", False)
    real = os.pwrite

    def crash_on_count(fd: int, data: bytes, offset: int) -> int:
        if offset == 4:
            raise OSError("simulated crash")
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", crash_on_count)
    with pytest.raises(OSError):
        writer.write([event(1), event(2)])
    monkeypatch.setattr(os, "pwrite", real)
    data = (tmp_path / "0.seg").read_bytes()
    assert struct.unpack_from("<I", data, 4)[0] == 1  # Beats still reads the one counted frame
    assert reference_read(data)[1] == [EXAMPLE_EVENT, event(1), event(2)]  # all whole frames
    BeatsFormat(tmp_path, {}).writer("segments/0.jsonl", False).write([event(3)])
    assert reference_read((tmp_path / "0.seg").read_bytes()) == (
        4,
        [EXAMPLE_EVENT, event(1), event(2), event(3)],
    )


@pytest.mark.parametrize("options", [0, 1])
def test_torn_tail_is_replaced(tmp_path: Path, options: int) -> None:
    whole = segment("v2", [event(1), event(2)], options, count=1)
    (tmp_path / "0.seg").write_bytes(whole[:-5])  # second frame torn, one frame counted
    BeatsFormat(tmp_path, {"key": KEY}).writer("segments/0.jsonl", False).write([event(3)])
    assert reference_read((tmp_path / "0.seg").read_bytes()) == (2, [event(1), event(3)])


def test_refuses_to_append_before_counted_damage(tmp_path: Path) -> None:
    data = bytearray(segment("v2", [event(1), event(2)], 0))
    data[20] ^= 1
    (tmp_path / "0.seg").write_bytes(bytes(data))
    with pytest.raises(BadRecord, match="refusing"):
        BeatsFormat(tmp_path, {}).writer("segments/0.jsonl", False).write([event(3)])
    assert (tmp_path / "0.seg").read_bytes() == bytes(data)


def test_the_next_writer_skips_the_walk_until_the_segment_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each `echo line >> view` opens a new writer: only the first walks the segment
    (tmp_path / "0.seg").write_bytes(segment("v2", [event(1)], 0))
    walks = []
    real_walk = frames.walk
    monkeypatch.setattr(frames, "walk", lambda *args, **kw: walks.append(1) or real_walk(*args, **kw))
    fmt = BeatsFormat(tmp_path, {})
    fmt.writer("segments/0.jsonl", False).write([event(2)])
    fmt.writer("segments/0.jsonl", False).write([event(3)])
    assert len(walks) == 1
    # another producer appends a frame: the next writer walks again and counts it
    with open(tmp_path / "0.seg", "ab") as f:
        f.write(frame(payload_for(event(4), "cbor")))
    fmt.writer("segments/0.jsonl", False).write([event(5)])
    assert len(walks) == 2
    assert reference_read((tmp_path / "0.seg").read_bytes()) == (5, [event(i) for i in range(1, 6)])


# -- the CBOR encoder ------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 64), (1 << 64) - 1) | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_cbor_round_trips_through_cbor2(value) -> None:
    encoded = beats_cbor.encode(value)
    back = cbor2.loads(encoded)
    assert back == value or (value != value and back != back) or repr(back) == repr(value)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(-(1 << 64), (1 << 64) - 1)
    | st.text()
    | st.dictionaries(st.text(), st.integers(0, 1000), max_size=1)
)
def test_cbor_matches_go_structform_where_cbor2_does(value) -> None:
    # shortest integers and one-key maps: cbor2's default output is Go's
    assert beats_cbor.encode(value) == cbor2.dumps(value)


@pytest.mark.parametrize("value", [0.0, 1.5, -2.0, float("inf"), 1e300])
def test_cbor_floats_are_always_float64(value: float) -> None:
    encoded = beats_cbor.encode(value)
    assert encoded[0] == 0xFB and len(encoded) == 9


def test_cbor_event_key_order() -> None:
    encoded = beats_cbor.encode_event(1, 1, {"b": 1}, {})
    assert encoded.startswith(b"\xa4\x69timestamp\x01\x65flags\x01\x64meta\xa1")


field_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(1 << 63), (1 << 63) - 1)
    | st.floats(allow_nan=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
events_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "timestamp": st.integers(-(1 << 63), (1 << 63) - 1),
            "flags": st.integers(0, (1 << 32) - 1),
            "meta": st.dictionaries(st.text(max_size=6), field_values, max_size=2),
            "fields": st.dictionaries(st.text(max_size=6), field_values, max_size=4),
        }
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=40, deadline=None)
@given(events_strategy, st.sampled_from([0, 1, 2, 3]), st.integers(1, 3))
def test_hypothesis_round_trip(events: list[dict], options: int, writes: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        src = Path(scratch)
        (src / "0.seg").write_bytes(segment("v2", [event(0)], options))
        writer = BeatsFormat(src, {"key": KEY}).writer("segments/1.jsonl", True)
        for k in range(writes):
            writer.write(events[k::writes])
        written = [e for k in range(writes) for e in events[k::writes]]
        count, back = reference_read((src / "1.seg").read_bytes())
        assert count == len(written) and back == written
        views, problems = read(src)
        assert problems == [] and views["segments/1.jsonl"] == [expected(e) for e in written]


def test_refuses_to_cut_uncounted_frames_behind_damage(tmp_path: Path) -> None:
    data = bytearray(segment("v2", [event(1), event(2), event(3)], 0, count=0))  # live: count 0
    data[20] ^= 1  # the first frame is bad, two good ones follow
    (tmp_path / "0.seg").write_bytes(bytes(data))
    with pytest.raises(BadRecord, match="refusing"):
        BeatsFormat(tmp_path, {}).writer("segments/0.jsonl", False).write([event(4)])
    assert (tmp_path / "0.seg").read_bytes() == bytes(data)


def test_garbled_last_frame_is_replaced(tmp_path: Path) -> None:
    data = bytearray(segment("v2", [event(1), event(2)], 0, count=1))
    data[-3] ^= 1  # the repeated size of the last (uncounted) frame
    (tmp_path / "0.seg").write_bytes(bytes(data))
    BeatsFormat(tmp_path, {}).writer("segments/0.jsonl", False).write([event(3)])
    assert reference_read((tmp_path / "0.seg").read_bytes()) == (2, [event(1), event(3)])


@pytest.mark.parametrize("options", [2, 3])
def test_append_to_a_header_only_lz4_segment(tmp_path: Path, options: int) -> None:
    """A compressed segment that holds only its 12-byte header (its LZ4
    frame not begun, IV right after it when encrypted) takes appends: the
    first one writes the LZ4 frame header."""
    header = struct.pack("<III", 2, 0, options) + (IV if options & 1 else b"")
    (tmp_path / "4.seg").write_bytes(header)
    fmt = BeatsFormat(tmp_path, {"key": KEY})
    writer = fmt.writer("segments/4.jsonl", False)
    writer.write([event(1)])
    writer.write([event(2), event(3)])
    count, back = reference_read((tmp_path / "4.seg").read_bytes())
    assert count == 3 and back == [event(1), event(2), event(3)]
    views, problems = read(tmp_path)
    assert problems == [] and views["segments/4.jsonl"] == [
        expected(e) for e in (event(1), event(2), event(3))
    ]
