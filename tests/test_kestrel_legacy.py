"""Older kestrel journals (spec §8): operations, replay rules, the views."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fmtfs.formats.base import Chunk, Problem, ReadOnlyView
from fmtfs.formats.kestrel import KestrelFormat
from fmtfs.formats.kestrel import legacy as L
from fmtfs.formats.kestrel.legacy import BrokenItem, Item, Op, Replay, encode_op, read_op

HELLO_ADDX = bytes.fromhex("02 15000000 e803000000000000 0000000000000000 68656c6c6f".replace(" ", ""))


def addx(data: bytes, added: int = 1000, expire: int | None = None) -> Op:
    return Op(L.ADDX, None, added, expire, data)


def xop(code: int, xid: int) -> Op:
    return Op(code, xid, None, None, None)


def ops_of(buf: bytes) -> list[Op]:
    out, pos = [], 0
    while (got := read_op(buf, pos, len(buf))) is not None:
        op, pos = got
        out.append(op)
    return out


def replay(ops: list[Op], legacy_counter: bool = False) -> list[bytes]:
    state = Replay(legacy_counter=legacy_counter)
    for op in ops:
        state.apply(op)
    return [item.data for item in state.finish()]


def test_spec_addx_vector():
    assert encode_op(addx(b"hello")) == HELLO_ADDX
    assert ops_of(HELLO_ADDX) == [addx(b"hello")]
    assert len(encode_op(addx(b""))) == 21  # kestrel's JournalSpec: an empty ADDX is 21 bytes


def test_every_opcode_round_trips_with_its_size():
    ops = [
        Op(L.ADD, None, None, 1234, b"old"),
        Op(L.REMOVE, None, None, None, None),
        addx(b"x", 5, 9),
        Op(L.REMOVE_TENTATIVE, None, None, None, None),
        xop(L.SAVE_XID, 7),
        xop(L.UNREMOVE, 7),
        xop(L.CONFIRM_REMOVE, 7),
        Op(L.ADD_XID, 3, 10, None, b"ab"),
        Op(L.CONTINUE, 4, 11, None, b"abc"),
        xop(L.REMOVE_TENTATIVE_XID, 5),
    ]
    sizes = [5 + 4 + 3, 1, 5 + 16 + 1, 1, 5, 5, 5, 9 + 16 + 2, 9 + 16 + 3, 5]
    assert [len(encode_op(op)) for op in ops] == sizes
    assert ops_of(b"".join(map(encode_op, ops))) == ops


def test_truncation_at_every_offset_and_bad_opcode():
    blob = b"".join(map(encode_op, [addx(b"hello"), xop(L.REMOVE_TENTATIVE_XID, 1), addx(b"more")]))
    bounds = {0, 26, 31, len(blob)}
    for length in range(len(blob)):
        cut = blob[:length]
        if length in bounds:
            assert len(ops_of(cut)) == sorted(bounds).index(length)
        else:
            with pytest.raises(BrokenItem) as err:
                ops_of(cut)
            assert err.value.offset == max(b for b in bounds if b < length)
    with pytest.raises(BrokenItem, match="invalid opcode"):
        ops_of(b"\x0a")


@pytest.mark.parametrize("blob", [b"\x02\x0f\x00\x00\x00" + bytes(15), b"\x00\x03\x00\x00\x00" + bytes(3)])
def test_short_blocks_are_corrupt(blob):
    with pytest.raises(BrokenItem, match="block"):
        ops_of(blob)


def test_replay_transactions():
    a, b, c = addx(b"a"), addx(b"b"), addx(b"c")
    # remove into xid 1, confirm: a is gone; remove into 2, unremove: b back at the head
    assert replay([a, b, c, xop(9, 1), xop(6, 1), xop(9, 2), xop(5, 2)]) == [b"b", b"c"]
    # CONTINUE confirms the xid and appends its item
    assert replay([a, b, xop(9, 1), Op(L.CONTINUE, 1, 5, None, b"a2")]) == [b"b", b"a2"]
    # open transactions return to the head at the end, lowest xid first
    assert replay([a, b, c, xop(9, 7), xop(9, 3), xop(9, 5)]) == [b"b", b"c", b"a"]
    # plain REMOVE pops the head; an empty queue hands out nothing
    assert replay([a, Op(L.REMOVE, None, None, None, None), Op(L.REMOVE, None, None, None, None), b]) == [
        b"b"
    ]


def test_remove_tentative_quirks():
    a, b = addx(b"a"), addx(b"b")
    rt = Op(L.REMOVE_TENTATIVE, None, None, None, None)
    # 2.x reads opcode 3 as xid 0: the second overwrites the first, which is lost
    assert replay([a, b, rt, rt]) == [b"b"]
    # 1.x: ++counter from SAVE_XID, so both stay open and come back; CONFIRM_REMOVE(11) drops b
    assert replay([a, b, xop(L.SAVE_XID, 9), rt, rt], legacy_counter=True) == [b"a", b"b"]
    assert replay([a, b, xop(L.SAVE_XID, 9), rt, rt, xop(6, 11)], legacy_counter=True) == [b"a"]


def test_add_expiry_is_seconds_and_items_keep_ms():
    state = Replay()
    state.apply(Op(L.ADD, None, None, 1700, b"x"))
    assert state.finish() == [Item(None, 1_700_000, b"x")]


@given(st.lists(st.sampled_from(["add", "remove", "take", "confirm", "undo"]), max_size=40))
def test_replay_matches_a_model(actions):
    ops, model, open_, counter = [], [], {}, 0
    for n, action in enumerate(actions):
        if action == "add":
            ops.append(addx(str(n).encode()))
            model.append(str(n).encode())
        elif action == "remove":
            ops.append(Op(L.REMOVE, None, None, None, None))
            model[:1] = []
        elif action == "take":
            counter += 1
            ops.append(xop(L.REMOVE_TENTATIVE_XID, counter))
            if model:
                open_[counter] = model.pop(0)
        elif open_:
            xid = min(open_)
            ops.append(xop(L.CONFIRM_REMOVE if action == "confirm" else L.UNREMOVE, xid))
            item = open_.pop(xid)
            if action == "undo":
                model.insert(0, item)
    for xid in sorted(open_, reverse=True):
        model.insert(0, open_[xid])
    assert replay(ops) == model


# -- the views -------------------------------------------------------------------


def write(path: Path, ops: list[Op]) -> None:
    path.write_bytes(b"".join(map(encode_op, ops)))


def records_of(fmt: KestrelFormat) -> dict[str, list]:
    out: dict[str, list] = {}
    for stream in fmt.streams():
        for got in stream.scan(None, None):
            if isinstance(got, Chunk):
                for view, recs in got.records.items():
                    out.setdefault(view, []).extend(recs)
                assert stream.decode(Chunk(got.start, got.end, got.state)) == got.records
    return out


def test_folder_views_replay_order_and_damage(tmp_path):
    write(tmp_path / "jobs.200", [addx(b"second", 2000)])
    write(tmp_path / "jobs.100", [addx(b"first", 1000, 5000), Op(L.ADD, None, None, 60, b"old")])
    write(tmp_path / "jobs", [xop(L.REMOVE_TENTATIVE_XID, 1), addx(b"third", 3000)])
    (tmp_path / "jobs~~123").write_bytes(encode_op(addx(b"temp")))
    # a damaged rotated file: replay stops there and goes on with the next file
    (tmp_path / "jobs.150").write_bytes(encode_op(addx(b"mid", 1500)) + b"\x02\x40\x00")
    assert KestrelFormat.detect(tmp_path)
    fmt = KestrelFormat(tmp_path, {})
    records = records_of(fmt)
    assert records["jobs/journal/jobs.100.jsonl"] == [
        {
            "op": "ADDX",
            "add_time": "1970-01-01T00:00:01.000Z",
            "expire_time": "1970-01-01T00:00:05.000Z",
            "data": "first",
        },
        {"op": "ADD", "expire_time": "1970-01-01T00:01:00Z", "data": "old"},
    ]
    assert records["jobs/journal/jobs.jsonl"][0] == {"op": "REMOVE_TENTATIVE_XID", "xid": 1}
    assert [s.name for s in fmt.streams()] == [f"jobs/journal/jobs.{n}" for n in (100, 150, 200)] + [
        "jobs/journal/jobs"
    ]
    problems = [p for s in fmt.streams() for p in s.scan(None, None) if isinstance(p, Problem)]
    assert problems == [Problem("jobs.150", 24, "truncated record")]
    items = fmt.derived_views()["jobs/items.jsonl"]()
    # "first" was taken into xid 1, never confirmed: back at the head
    assert [i["data"] for i in items] == ["first", "old", "mid", "second", "third"]
    assert items[1] == {"expire_time": "1970-01-01T00:01:00.000Z", "data": "old"}
    for view in ("jobs/journal/jobs.jsonl", "jobs/journal/jobs.100.jsonl", "jobs/items.jsonl"):
        with pytest.raises(ReadOnlyView):
            fmt.writer(view, False)


def test_pack_stands_in_for_older_files(tmp_path):
    write(tmp_path / "q.100", [addx(b"dead")])
    write(tmp_path / "q.200", [addx(b"dead too")])
    write(tmp_path / "q.200.pack", [addx(b"packed")])
    write(tmp_path / "q.300", [addx(b"later")])
    write(tmp_path / "q", [addx(b"live")])
    fmt = KestrelFormat(tmp_path, {})
    assert [i["data"] for i in fmt.derived_views()["q/items.jsonl"]()] == ["packed", "later", "live"]
    assert fmt.info()["queues"]["q"]["replay_order"] == ["q.200.pack", "q.300", "q"]


def test_detection_ignores_stray_small_byte_files(tmp_path):
    (tmp_path / "notes").write_bytes(b"\x05garbage that is no journal")
    assert not KestrelFormat.detect(tmp_path)
    write(tmp_path / "jobs", [addx(b"a"), xop(L.REMOVE_TENTATIVE_XID, 1)])
    assert KestrelFormat.detect(tmp_path)
