"""Reading gvfs trees and journals: spec vectors, the real fixtures, damage."""

from __future__ import annotations

import shutil
import zlib
from pathlib import Path

import pytest

from fmtfs.formats.base import Chunk, Problem
from fmtfs.formats.gvfs import GvfsFormat, ghash, store
from fmtfs.formats.gvfs.ghash import SlotOrder, str_hash, str_hashes
from fmtfs.formats.gvfs.journal import decode_entry, encode_entry, read_journal, verify_entry
from fmtfs.formats.gvfs.model import OP_COPY, OP_REMOVE, OP_SET, OP_SETV, MetaModel, Node
from fmtfs.formats.gvfs.tree import (
    LazyTree,
    TreeError,
    _open,
    _read_checked,
    _read_clean,
    read_header,
    read_tree,
)
from fmtfs.formats.gvfs.treecheck import is_clean
from fmtfs.formats.gvfs.treewriter import build_tree
from fmtfs.render import parse_lines
from fmtfs.samples import gvfs as sample
from tests import resume
from tests.conftest import FIXTURES as FIXTURES_ROOT

FIXTURES = FIXTURES_ROOT / "gvfs"


def scan_all(stream) -> tuple[list[dict], list[Problem], list[Chunk]]:
    records, problems, chunks = [], [], []
    for item in stream.scan(None, None):
        if isinstance(item, Problem):
            problems.append(item)
        else:
            chunks.append(item)
            records.extend(item.records[stream.view])
    return records, problems, chunks


def home_stream(folder: Path):
    (stream,) = [s for s in GvfsFormat(folder, {}).streams() if s.tree == "home"]
    return stream


def metadata(folder: Path, tree: str = "home") -> dict[str, dict]:
    lines = GvfsFormat(folder, {}).derived_views()[f"{tree}/metadata.jsonl"]()
    return {r["path"]: r for r in parse_lines(lines)}


# -- spec vectors ---------------------------------------------------------------


def test_empty_tree_vector():
    want = bytes.fromhex(
        "da1a6d65 74610100 00000000 15752868 00000024 00000020 00000000 00000000"
        "00000000 00000034 00000038 0000003c 00000000 2f000000 00000000 00000000"
    )
    assert build_tree(read_tree(want).model, 0x15752868) == want
    assert (FIXTURES / "01-fresh-journal" / "home").read_bytes() == want


ENTRY_VECTORS = [
    (
        "0000003c 31fba1dd 000000006b02ba0f 00 "
        "2f446f63756d656e74732f612e74787400 636f6d6d656e7400 68656c6c6f20776f726c6400 0000 0000003c",
        (OP_SET, 1795340815, b"/Documents/a.txt", b"comment", b"hello world", None),
    ),
    (
        "00000040 8ca2e852 000000006b02ba0f 01 2f446f63756d656e74732f612e74787400 7461677300 "
        "00 00000003 72656400 677265656e00 626c756500 00 00000040",
        (OP_SETV, 1795340815, b"/Documents/a.txt", b"tags", [b"red", b"green", b"blue"], None),
    ),
    (
        "00000040 90b7db6a 000000006b02ba0f 03 "
        "2f446f63756d656e74732f622d72656e616d65642e74787400 2f446f63756d656e74732f622e74787400 00 00000040",
        (OP_COPY, 1795340815, b"/Documents/b-renamed.txt", None, None, b"/Documents/b.txt"),
    ),
    (
        "00000028 9a3d98ab 000000006b02ba0f 04 2f446f63756d656e74732f622e74787400 0000 00000028",
        (OP_REMOVE, 1795340815, b"/Documents/b.txt", None, None, None),
    ),
    (
        "0000003c e3b9f83a 000000006b02ba9f 00 "
        "2f4d616e792f72c3a973756dc3a92e74787400 63617074696f6e00 68c3a96c6c6f20e29c9300 00 0000003c",
        (OP_SET, 1795340959, "/Many/résumé.txt".encode(), b"caption", "héllo ✓".encode(), None),
    ),
]


@pytest.mark.parametrize("hexdata,fields", ENTRY_VECTORS)
def test_entry_vectors(hexdata, fields):
    raw = bytes.fromhex(hexdata)  # spec §3.4, spaces as printed there
    assert encode_entry(*fields) == raw
    assert verify_entry(raw, 0) == len(raw)
    assert int.from_bytes(raw[4:8], "big") == zlib.crc32(raw[8:])
    entry = decode_entry(raw, 0, len(raw))
    assert (entry.op, entry.mtime, entry.path, entry.key, entry.value, entry.source) == fields


def test_fixture_entries_sit_where_the_readme_says():
    data = (FIXTURES / "01-fresh-journal" / "home-15752868.log").read_bytes()
    state = read_journal(data)
    assert [(e.offset, e.size) for e in state.entries] == [
        (20, 60), (80, 64), (144, 80), (224, 60), (284, 76), (360, 72),
        (432, 44), (476, 48), (524, 64), (588, 40), (628, 44),
    ]  # fmt: skip
    assert state.end == 672 and state.invalid is None
    # our encoder reproduces every entry of the daemon's journal byte for byte
    for e in state.entries:
        assert (
            encode_entry(e.op, e.mtime, e.path, e.key, e.value, e.source)
            == data[e.offset : e.offset + e.size]
        )


def test_string_block_order_matches_the_daemon():
    # fixture 02: the keyword block and Documents' names block (spec §2.4)
    order = SlotOrder()
    for k in [b"caption", b"comment", b"custom-icon", b"home-key", b"tags"]:
        order.add(k)
    assert list(order) == [b"tags", b"custom-icon", b"comment", b"caption", b"home-key"]
    names = SlotOrder()
    for n in [b"a.txt", b"b-renamed.txt", b"sub"]:
        names.add(n)
    assert list(names) == [b"b-renamed.txt", b"sub", b"a.txt"]
    assert str_hash(b"") == 5381 and str_hash(b"\xff") == (5381 * 33 - 1) & 0xFFFFFFFF


def test_string_block_growth_keeps_every_key_once():
    order = SlotOrder()
    keys = [f"k{i}".encode() for i in range(300)]
    for k in keys:
        order.add(k)
    out = list(order)
    assert sorted(out) == sorted(keys) and out != keys
    assert len(order.hashes) == 512


# -- the fixtures ---------------------------------------------------------------


def test_hashes_at_once_match_the_hash_of_each(monkeypatch):
    """str_hashes (numpy, for a rebuild's every string) gives str_hash's
    values, over signed chars, empty keys and keys longer than a batch;
    add_all places keys where add() one at a time does."""
    keys = [b"", b"\xff", b"a", bytes(range(1, 256)), b"x" * 5000]
    keys += [f"file-{i:05d}.txt".encode() for i in range(3000)]
    want = [str_hash(k) for k in keys]
    assert str_hashes(keys) == want
    monkeypatch.setattr(ghash, "_BATCH_BYTES", 7)
    assert str_hashes(keys) == want
    assert str_hashes([]) == []
    one, all_at_once = SlotOrder(), SlotOrder()
    for key in keys:
        one.add(key)
    all_at_once.add_all(keys, want)
    assert list(all_at_once) == list(one) and len(one.hashes) == 4096


def test_tree_walk_of_fixture_02():
    tree = read_tree((FIXTURES / "02-after-timer-flush" / "home").read_bytes())
    assert tree.header.tag == 0x1E0F4C72 and tree.header.base == 1795340814 and tree.header.root == 100
    assert tree.keywords == [b"caption", b"comment", b"custom-icon", b"home-key", b"tags"]
    root = tree.model.root
    assert tree.model.root_raw == 1795340815
    assert root.last_changed == 1795340815 + 1795340814  # gvfs's reading of the absolute root time
    assert root.keys == {b"home-key": b"on home dir"}
    docs = root.children[b"Documents"]
    assert sorted(docs.children) == [b"a.txt", b"b-renamed.txt", b"sub"]
    assert docs.children[b"a.txt"].keys == {b"tags": [b"red", b"green", b"blue"]}
    assert docs.children[b"sub"].keys == {} and docs.children[b"sub"].children == {}
    assert root.children[b"Pictures"].last_changed == 0
    assert docs.children[b"b-renamed.txt"].last_changed == 1795340815
    assert tree.problems == []


@pytest.mark.parametrize(
    "old,new,tree",
    [
        ("01-fresh-journal", "02-after-timer-flush", "home"),
        ("01-fresh-journal", "02-after-timer-flush", "root"),
        ("03-tree-plus-journal", "05-many-journal", "home"),
    ],
)
def test_rebuild_reproduces_the_daemons_tree(old, new, tree):
    model = store.effective_model(store.read_state(FIXTURES / old / tree))
    want = (FIXTURES / new / tree).read_bytes()
    assert build_tree(model, read_header(want).tag) == want


def test_fixture_01_views():
    folder = FIXTURES / "01-fresh-journal"
    records, problems, _ = scan_all(home_stream(folder))
    assert problems == []
    assert [r["op"] for r in records] == [
        "set",
        "setv",
        "set",
        "set",
        "set",
        "set",
        "set",
        "unset",
        "copy",
        "remove",
        "remove",
    ]
    assert records[0] == {
        "op": "set",
        "time": "2026-11-22T09:46:55Z",
        "path": "/Documents/a.txt",
        "key": "comment",
        "value": "hello world",
    }
    assert records[7] == {
        "op": "unset",
        "time": "2026-11-22T09:46:55Z",
        "path": "/Documents/a.txt",
        "key": "comment",
    }
    assert records[8]["source"] == "/Documents/b.txt" and records[8]["path"] == "/Documents/b-renamed.txt"
    assert records[9] == {"op": "remove", "time": "2026-11-22T09:46:55Z", "path": "/Documents/b.txt"}
    meta = metadata(folder)
    assert list(meta) == ["/", "/Documents/a.txt", "/Documents/b-renamed.txt", "/Pictures/p.png"]
    assert meta["/Documents/b-renamed.txt"]["metadata"] == {
        "comment": "hello world",
        "custom-icon": "file:///usr/share/icons/x.png",
    }
    assert {r["last_changed"] for r in meta.values()} == {"2026-11-22T09:46:55Z"}
    assert metadata(folder, "root") == {
        "/srv/data/outside/o.txt": {
            "path": "/srv/data/outside/o.txt",
            "last_changed": "2026-11-22T09:46:55Z",
            "metadata": {"where": "outside home"},
        }
    }


def test_fixture_02_shows_the_root_time_absolute():
    meta = metadata(FIXTURES / "02-after-timer-flush")
    assert meta["/"]["last_changed"] == "2026-11-22T09:46:55Z"  # raw 1795340815, not raw + base
    assert metadata(FIXTURES / "01-fresh-journal") == meta
    assert scan_all(home_stream(FIXTURES / "02-after-timer-flush"))[0] == []


def test_fixture_03_directory_move():
    meta = metadata(FIXTURES / "03-tree-plus-journal")
    assert meta["/Docs2/a.txt"]["metadata"] == {"emblems-like": "x", "tags": ["one", "two", "two", ""]}
    assert meta["/Docs2/b-renamed.txt"]["metadata"] == {"comment": "second"}
    assert meta["/"]["last_changed"] == "2026-11-22T09:48:06Z"  # the REMOVE of /Documents touched the root
    assert meta["/Docs2/a.txt"]["last_changed"] == "2026-11-22T09:48:06Z"
    assert meta["/Pictures/p.png"]["last_changed"] == "2026-11-22T09:46:55Z"
    assert not any(p.startswith("/Documents") for p in meta)


def test_fixture_05_many():
    folder = FIXTURES / "05-many-journal"
    records, problems, chunks = scan_all(home_stream(folder))
    assert len(records) == 42 and problems == [] and chunks[-1].end == 2084
    assert records[0]["path"] == "/Many/résumé.txt" and records[0]["value"] == "héllo ✓"
    assert records[41]["value"] == [chr(c) for c in range(ord("a"), ord("t") + 1)]
    meta = metadata(folder)
    for n in range(1, 41):
        assert meta[f"/Many/f{n:02d}.txt"]["metadata"][f"k{n % 20}"] == f"value-{n:02d}"
    assert meta["/Many/f01.txt"]["metadata"]["list"][-1] == "t"
    assert "/Many" not in meta


def test_bad_crc_journal(tmp_path):
    shutil.copy(FIXTURES / "02-after-timer-flush" / "home", tmp_path / "home")
    shutil.copy(FIXTURES / "10-bad-crc-journal.log", tmp_path / "home-1e0f4c72.log")
    records, problems, chunks = scan_all(home_stream(tmp_path))
    assert [(r["key"], r["value"], r["time"]) for r in records] == [("k1", "v1", "2023-11-14T22:13:20Z")]
    assert len(problems) == 1 and problems[0].offset == 64 and "CRC" in problems[0].error
    assert "d0d12073" in problems[0].error and "2fd12073" in problems[0].error
    assert chunks[-1].end == 64
    meta = metadata(tmp_path)["/Documents/a.txt"]
    assert meta["metadata"] == {"k1": "v1", "tags": ["red", "green", "blue"]}
    assert meta["last_changed"] == "2023-11-14T22:13:20Z"


# -- detection ------------------------------------------------------------------


def test_detection_and_ignored_files(tmp_path):
    assert not GvfsFormat.detect(tmp_path)
    (tmp_path / "notes.txt").write_text("hello")
    assert not GvfsFormat.detect(tmp_path)
    src = FIXTURES / "03-tree-plus-journal"
    shutil.copy(src / "home", tmp_path / "home")
    shutil.copy(src / "home-1e0f4c72.log", tmp_path / "home-1e0f4c72.log")
    assert GvfsFormat.detect(tmp_path)
    shutil.copy(src / "home", tmp_path / "home.Ab3xYz")  # mkstemp leftover
    shutil.copy(src / "home", tmp_path / "home.backup.2026-11-22T09:48:06.123456+00")
    shutil.copy(src / "root-37a40498.log", tmp_path / "home-37a40498.log")  # stale journal
    rotated = bytearray((src / "root").read_bytes())
    rotated[8:12] = b"\xff\xff\xff\xff"
    (tmp_path / "old").write_bytes(bytes(rotated))
    fmt = GvfsFormat(tmp_path, {})
    assert [s.name for s in fmt.streams()] == ["home-1e0f4c72.log"]
    assert list(fmt.derived_views()) == ["home/metadata.jsonl"]
    assert fmt.info()["ignored_files"] == [
        "home-37a40498.log",
        "home.Ab3xYz",
        "home.backup.2026-11-22T09:48:06.123456+00",
        "old",
    ]


def test_journal_with_a_foreign_tag_is_ignored(tmp_path):
    shutil.copy(FIXTURES / "02-after-timer-flush" / "home", tmp_path / "home")
    data = bytearray((FIXTURES / "03-tree-plus-journal" / "home-1e0f4c72.log").read_bytes())
    data[8:12] = b"\x00\x00\x00\x01"
    (tmp_path / "home-1e0f4c72.log").write_bytes(bytes(data))
    records, problems, _ = scan_all(home_stream(tmp_path))
    assert records == [] and "tag 00000001" in problems[0].error
    assert metadata(tmp_path) == metadata(FIXTURES / "02-after-timer-flush")


# -- resumable scans ------------------------------------------------------------


def test_scan_resumes_and_decode_matches(tmp_path):
    src = FIXTURES / "05-many-journal"
    shutil.copy(src / "home", tmp_path / "home")
    full = (src / "home-6efe53a7.log").read_bytes()
    partial = bytearray(full)
    partial[16:20] = (10).to_bytes(4, "big")
    (tmp_path / "home-6efe53a7.log").write_bytes(bytes(partial))
    stream = home_stream(tmp_path)
    first, _, chunks = scan_all(stream)
    assert len(first) == 10
    last = chunks[-1]
    assert stream.decode(Chunk(last.start, last.end, last.state)) == last.records
    assert [(c.end, c.records) for c in resume.rescan(stream, last)] == [(last.end, last.records)]
    (tmp_path / "home-6efe53a7.log").write_bytes(full)
    rest = resume.rescan(stream, last)
    whole, _, _ = scan_all(stream)
    assert resume.records(chunks[:-1] + rest, stream.view) == whole and len(whole) == 42
    assert whole[:10] == first


# -- damage ---------------------------------------------------------------------


def test_every_flipped_byte_keeps_the_valid_prefix(tmp_path):
    shutil.copy(FIXTURES / "01-fresh-journal" / "home", tmp_path / "home")
    good = (FIXTURES / "01-fresh-journal" / "home-15752868.log").read_bytes()
    journal = tmp_path / "home-15752868.log"
    journal.write_bytes(good)
    stream = home_stream(tmp_path)
    original, _, _ = scan_all(stream)
    starts = [e.offset for e in read_journal(good).entries] + [672]
    for pos in range(20, 672):
        damaged = bytearray(good)
        damaged[pos] ^= 0x5A
        journal.write_bytes(bytes(damaged))
        records, problems, _ = scan_all(stream)
        broken = max(i for i, s in enumerate(starts) if s <= pos)
        assert records == original[:broken], pos
        assert len(problems) == 1 and problems[0].offset == starts[broken], pos


def test_truncated_journal_is_ignored_cleanly(tmp_path):
    shutil.copy(FIXTURES / "01-fresh-journal" / "home", tmp_path / "home")
    good = (FIXTURES / "01-fresh-journal" / "home-15752868.log").read_bytes()
    journal = tmp_path / "home-15752868.log"
    journal.write_bytes(good)
    stream = home_stream(tmp_path)
    for size in list(range(0, 700)) + [32767]:
        journal.write_bytes(good[:size])
        records, problems, _ = scan_all(stream)
        assert records == [] and len(problems) == 1 and problems[0].offset == 0


def canonical(model) -> list:
    return [(path, dict(node.keys), node.last_changed) for path, node in model.walk()]


def test_truncated_and_flipped_trees_never_crash():
    good = (FIXTURES / "05-many-journal" / "home").read_bytes()
    full = read_tree(good).model
    for size in range(len(good)):
        try:
            tree = read_tree(good[:size])
        except TreeError:
            continue
        # either the reader says what it lost, or only padding was cut
        assert tree.problems or canonical(tree.model) == canonical(full), size
    for pos in range(len(good)):
        damaged = bytearray(good)
        damaged[pos] ^= 0xA5
        try:
            tree = read_tree(bytes(damaged))
        except TreeError:
            continue
        assert isinstance(tree.model.root.children, dict)
    assert full.root.children


def test_children_block_loop_is_reported(tmp_path):
    data = bytearray((FIXTURES / "02-after-timer-flush" / "home").read_bytes())
    # point Documents' children at the root's children block (offset 120)
    data[128:132] = (120).to_bytes(4, "big")
    tree = read_tree(bytes(data))
    assert any("loop" in msg for _, msg in tree.problems)
    (tmp_path / "home").write_bytes(bytes(data))
    problems = GvfsFormat(tmp_path, {}).problems()
    assert problems and problems[0].file == "home"


def test_the_quick_check_finds_damage_exactly_when_the_walk_does():
    """LazyTree.problems() walks a tree only when treecheck finds it
    damaged: on every truncation and every flipped byte of the fixtures'
    trees, the quick check says clean exactly when the walk finds nothing."""
    checked = {True: 0, False: 0}
    for fixture in ("02-after-timer-flush", "03-tree-plus-journal", "05-many-journal"):
        good = (FIXTURES / fixture / "home").read_bytes()
        variants = [good[:size] for size in range(len(good))]
        for pos in range(len(good)):
            damaged = bytearray(good)
            damaged[pos] ^= 0xA5
            variants.append(bytes(damaged))
        for data in variants:
            try:
                tree = LazyTree(data)
            except TreeError:
                continue
            clean = is_clean(data, tree.root_dirent, len(tree.keywords))
            assert clean == (tree.walked_problems() == []), (fixture, data.hex())
            assert tree.problems() == tree.walked_problems()
            checked[clean] += 1
    assert checked[True] > 100 and checked[False] > 100, checked


def shape(root: Node) -> list:
    """Every node of a model: path, time, keys and children in their order."""
    return [(path, n.last_changed, n.keys, list(n.children)) for path, n in MetaModel(root).walk()]


def test_a_clean_tree_is_read_alike_without_the_checks(tmp_path):
    """read_tree reads a tree treecheck finds clean without checking each
    pointer: the same model as the checked walk, for the fixtures, every
    variant of them the check finds clean, and a sample store's tree."""
    sample_tree = sample.generate(tmp_path / "s", 3000) / "home"
    trees = [(FIXTURES / f / "home").read_bytes() for f in ("02-after-timer-flush", "05-many-journal")]
    for good in trees[:]:
        for pos in range(len(good)):
            damaged = bytearray(good)
            damaged[pos] ^= 0xA5
            trees.append(bytes(damaged))
    compared = 0
    for data in [sample_tree.read_bytes(), *trees]:
        try:
            header, reader, keywords, root_dirent = _open(data)
        except TreeError:
            continue
        if not is_clean(data, root_dirent, len(keywords)):
            continue
        fast, checked = Node(), Node()
        _read_clean(data, header.base, keywords, fast, root_dirent)
        _read_checked(reader, header, keywords, checked, root_dirent)
        assert reader.problems == []
        assert shape(fast) == shape(checked), data.hex()
        assert shape(read_tree(data).model.root) == shape(checked)
        compared += 1
    assert compared > 100
