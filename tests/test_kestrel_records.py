"""libkestrel record framing against the spec's vectors and fixtures (§2, §3)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fmtfs.formats.kestrel.readers import ReaderState, parse_reader
from fmtfs.formats.kestrel.records import (
    READER_MAGIC,
    WRITER_MAGIC,
    Corrupt,
    Put,
    ReadDone,
    ReadHead,
    Unknown,
    check_magic,
    encode_put,
    encode_read_done,
    encode_read_head,
    encode_reader_file,
    iter_records,
    put_size,
)
from tests.conftest import FIXTURES as FIXTURES_ROOT

FIXTURES = FIXTURES_ROOT / "kestrel"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def writer_records(buf: bytes) -> list[tuple]:
    """(id, add_time, expire_time, error_count, data) of every PUT."""
    check_magic(buf, WRITER_MAGIC, "journal")
    out = []
    for _, rec in iter_records(buf, 4, len(buf)):
        assert isinstance(rec, Put)
        out.append(
            (rec.id, rec.add_time, rec.expire_time, rec.error_count, buf[rec.data_start : rec.data_end])
        )
    return out


# name -> PUTs as (id, add_time ms, expire_time ms or None, error_count, data), from the spec's table
WRITER_VECTORS = {
    "spec_put_id100_t255_err1.journal": [(100, 255, None, 1, b"hello")],
    "spec_read_several.journal": [(100, 255, None, 3, b"hello"), (101, 900, None, 2, b"goodbye")],
    "spec_append.journal": [(100, 255, None, 256, b"hello"), (101, 900, None, 0, b"goodbye")],
    "example_hello.journal": [(1, 1000, None, 0, b"hello")],
    "example_hello_expiry.journal": [(1, 1000, 2000, 0, b"hello")],
}

# name -> (head, done) from the spec's table
READER_VECTORS = {
    "spec_readhead_511.read": (511, set()),
    "spec_readdone_10_20_30.read": (0, {10, 20, 30}),
    "spec_whole_read_file.read": (65536, {65538}),
    "spec_unknown_command.read": (16384, set()),
    "example_head1_done34.read": (1, {3, 4}),
    "example_default_reader.read": (0, set()),
}


def test_fixture_folder_holds_every_vector():
    names = {p.name for p in FIXTURES.iterdir() if p.suffix in (".journal", ".read")}
    assert names == set(WRITER_VECTORS) | set(READER_VECTORS) | {"spec_too_large.journal"}


@pytest.mark.parametrize("name", sorted(WRITER_VECTORS))
def test_writer_vectors_decode(name):
    assert writer_records(fixture(name)) == WRITER_VECTORS[name]


@pytest.mark.parametrize("name", sorted(WRITER_VECTORS))
def test_writer_vectors_encode_byte_exact(name):
    blob = WRITER_MAGIC + b"".join(
        encode_put(i, added, data, expire, errors) for i, added, expire, errors, data in WRITER_VECTORS[name]
    )
    assert blob == fixture(name)


@pytest.mark.parametrize("name", sorted(WRITER_VECTORS))
def test_zero_padding_is_a_clean_end(name):
    assert writer_records(fixture(name) + bytes(100)) == WRITER_VECTORS[name]


def test_too_large_vector():
    buf = fixture("spec_too_large.journal")
    with pytest.raises(Corrupt) as err:
        list(iter_records(buf, 4, len(buf)))
    assert (err.value.offset, err.value.message) == (4, "item too large")


@pytest.mark.parametrize("name", sorted(READER_VECTORS))
def test_reader_vectors_decode(name):
    state = parse_reader(fixture(name))
    assert (state.head, state.done) == READER_VECTORS[name]


def test_unknown_command_is_skipped_by_its_declared_size():
    buf = fixture("spec_unknown_command.read")
    got = list(iter_records(buf, 4, len(buf)))
    assert got == [(4, Unknown(15, 17)), (21, ReadHead(16384))]
    assert parse_reader(buf).notes and parse_reader(buf).notes[0][0] == 4


@pytest.mark.parametrize("name", ["example_head1_done34.read", "example_default_reader.read"])
def test_checkpoint_files_encode_byte_exact(name):
    head, done = READER_VECTORS[name]
    assert encode_reader_file(head, sorted(done)) == fixture(name)


def test_read_done_and_head_encodings():
    assert fixture("spec_readhead_511.read") == READER_MAGIC + encode_read_head(511)
    assert fixture("spec_readdone_10_20_30.read") == READER_MAGIC + encode_read_done([30, 10, 20])
    assert encode_read_done([]) == b"\x91\x00\x00\x00\x00"


def test_truncation_at_every_offset_of_the_put_vector():
    buf = fixture("spec_put_id100_t255_err1.journal")
    for length in range(len(buf)):
        cut = buf[:length]
        if length < 4:
            with pytest.raises(Corrupt, match="No header"):
                check_magic(cut, WRITER_MAGIC, "journal")
        elif length == 4:
            assert writer_records(cut) == []
        else:
            with pytest.raises(Corrupt) as err:
                writer_records(cut)
            assert err.value.offset == 4


def test_truncation_at_every_offset_of_two_puts_keeps_the_first():
    buf = fixture("spec_read_several.journal")
    first_end = 4 + put_size(5, False)
    for length in range(first_end, len(buf)):
        got, error = [], None
        try:
            for _, rec in iter_records(buf[:length], 4, length):
                got.append(rec.id)
        except Corrupt as exc:
            error = exc
        assert got == [100]
        assert (error is None) == (length == first_end)
        if error is not None:
            assert error.offset == first_end


@pytest.mark.parametrize("name", sorted(READER_VECTORS))
def test_reader_truncation_at_every_offset(name):
    buf = fixture(name)
    ends = {4} | {after for after in _ends(buf)}
    for length in range(4, len(buf)):
        if length in ends:
            parse_reader(buf[:length])
        else:
            with pytest.raises(Corrupt):
                parse_reader(buf[:length])


def _ends(buf: bytes):
    pos = 4
    for offset, rec in iter_records(buf, 4, len(buf)):
        pos = (
            offset
            + {
                ReadHead: 9,
                ReadDone: 5 + 8 * len(getattr(rec, "ids", ())),
                Unknown: getattr(rec, "size", 0),
            }[type(rec)]
        )
        yield pos


def test_wrong_magic():
    with pytest.raises(Corrupt, match="Not a bookmark file"):
        parse_reader(fixture("example_hello.journal"))
    with pytest.raises(Corrupt, match="Not a journal file"):
        check_magic(fixture("example_head1_done34.read"), WRITER_MAGIC, "journal")


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (b"\x91\x07\x00\x00\x00" + bytes(7), "corrupted READ_DONE"),
        (b"\x01\x01\x02\x03\x04", "corrupted READ_HEAD"),
        (b"\x86\xff\xff\xff\xff" + bytes(20), "negative"),
        (b"\x81\x00\x00\x00\x00" + bytes(8), "corrupted PUT"),
        (b"\x83\x05\x00\x00\x00" + bytes(8), "truncated entry"),
        (b"\x8f\x00\x00\x00\x00", "truncated header"),
        (b"\xa2\x10\x00\x00\x00\x00\x00\x00\x00" + bytes(15), "truncated entry"),
    ],
)
def test_damaged_records(record, message):
    buf = WRITER_MAGIC + record
    with pytest.raises(Corrupt, match=message) as err:
        list(iter_records(buf, 4, len(buf)))
    assert err.value.offset == 4


def test_reader_file_records_in_any_order_last_head_wins():
    buf = (
        READER_MAGIC
        + encode_read_done([7, 9])
        + encode_read_head(5)
        + encode_read_done([12])
        + encode_read_head(6)
    )
    state = parse_reader(buf)
    assert (state.head, state.done) == (6, {7, 9, 12})
    assert state.as_json("x") == {"reader": "x", "head": 6, "done": [7, 9, 12]}
    assert ReaderState().head == 0


ids = st.integers(min_value=1, max_value=2**63 - 1)
times = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@given(
    st.lists(
        st.tuples(ids, times, st.none() | times, st.integers(-(2**31), 2**31 - 1), st.binary(max_size=64)),
        max_size=8,
    )
)
def test_put_round_trip(puts):
    blob = WRITER_MAGIC + b"".join(encode_put(i, a, d, e, c) for i, a, e, c, d in puts)
    assert len(blob) == 4 + sum(put_size(len(d), e is not None) for _, _, e, _, d in puts)
    assert writer_records(blob) == puts


@given(st.integers(0, 2**63 - 1), st.sets(ids, max_size=20))
def test_reader_round_trip(head, done):
    state = parse_reader(encode_reader_file(head, sorted(done)))
    assert (state.head, state.done) == (head, done)
    assert len(encode_reader_file(head, sorted(done))) == 4 + 9 + 5 + 8 * len(done)


def test_journal_size_vector_two_1000_byte_puts_in_two_files():
    # JournalSpec: two 1000-byte PUTs in 2 files give journalSize 2058
    files = [WRITER_MAGIC + encode_put(i, 0, bytes(1000)) for i in (1, 2)]
    assert sum(map(len, files)) == 2058 == 2 * (4 + put_size(1000, False))
