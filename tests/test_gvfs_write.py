"""Writing through `<tree>/journal.jsonl`: validation, byte-exact entries,
rotation, crash order, refusal of invalid journals, tree round trips."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fmtfs.formats.base import BadRecord, Problem, ReadOnlyView
from fmtfs.formats.gvfs import GvfsFormat, store
from fmtfs.formats.gvfs.journal import HEADER_SIZE, JOURNAL_SIZE, read_journal
from fmtfs.formats.gvfs.model import MetaModel, Node
from fmtfs.formats.gvfs.records import record_entry, show_time
from fmtfs.formats.gvfs.tree import read_header, read_tree
from fmtfs.formats.gvfs.treewriter import build_tree
from fmtfs.render import parse_lines
from fmtfs.samples import gvfs as sample
from tests.conftest import FIXTURES as FIXTURES_ROOT

FIXTURES = FIXTURES_ROOT / "gvfs"


def metadata_by_path(folder: Path) -> dict[str, dict]:
    """home/metadata.jsonl's lines by path."""
    lines = GvfsFormat(folder, {}).derived_views()["home/metadata.jsonl"]()
    return {r["path"]: r for r in parse_lines(lines)}


def journal_lines(folder: Path, tree: str = "home") -> list[dict]:
    (stream,) = [s for s in GvfsFormat(folder, {}).streams() if s.tree == tree]
    out = []
    for item in stream.scan(None, None):
        assert not isinstance(item, Problem), item
        out.extend(item.records[stream.view])
    return out


def journal_bytes(folder: Path, tree: str = "home") -> bytes:
    tag = read_header((folder / tree).read_bytes()).tag
    return (folder / f"{tree}-{tag:08x}.log").read_bytes()


def writer(folder: Path, view: str = "home/journal.jsonl", create: bool = False):
    return GvfsFormat(folder, {}).writer(view, create)


def copy_fixture(name: str, target: Path) -> Path:
    shutil.copytree(FIXTURES / name, target)
    for f in target.iterdir():
        f.chmod(0o600)
    return target


def test_rewriting_the_journal_view_reproduces_the_daemons_bytes(tmp_path):
    """journal.jsonl of fixture 01, written into the empty tree of 01, gives
    the daemon's journal byte for byte (entries, padding, CRCs, count)."""
    lines = journal_lines(FIXTURES / "01-fresh-journal")
    folder = tmp_path / "m"
    folder.mkdir()
    shutil.copy(FIXTURES / "01-fresh-journal" / "home", folder / "home")
    writer(folder, create=True).write(lines)
    assert journal_bytes(folder) == (FIXTURES / "01-fresh-journal" / "home-15752868.log").read_bytes()


def test_append_after_existing_entries(tmp_path):
    folder = copy_fixture("03-tree-plus-journal", tmp_path / "m")
    before = journal_bytes(folder)
    w = writer(folder)
    w.write(
        [
            {
                "op": "set",
                "time": "2026-11-22T10:00:00Z",
                "path": "/Pictures/p.png",
                "key": "rating",
                "value": "5",
            }
        ]
    )
    w.sync()
    after = journal_bytes(folder)
    assert after[20:336] == before[20:336] and struct.unpack_from(">I", after, 16)[0] == 7
    state = read_journal(after)
    assert state.end == 336 + state.entries[-1].size and state.invalid is None
    meta = metadata_by_path(folder)
    assert meta["/Pictures/p.png"]["metadata"]["rating"] == "5"
    assert meta["/Pictures/p.png"]["last_changed"] == "2026-11-22T10:00:00Z"


def test_integer_times_and_default_time(tmp_path):
    folder = copy_fixture("02-after-timer-flush", tmp_path / "m")
    writer(folder).write(
        [
            {"op": "remove", "time": 1700000000, "path": "/Pictures"},
            {"op": "set", "path": "/x", "key": "k", "value": "v"},
        ]
    )
    lines = journal_lines(folder)
    assert lines[0] == {"op": "remove", "time": "2023-11-14T22:13:20Z", "path": "/Pictures"}
    assert lines[1]["time"] >= "2024-01-01T00:00:00Z"


BAD_LINES = [
    ("not a dict", "JSON object"),
    ({"op": "move", "path": "/a"}, "op must be one of"),
    ({"op": "set", "path": "/a", "key": "k"}, "value"),
    ({"op": "set", "path": "a", "key": "k", "value": "v"}, "absolute"),
    ({"op": "set", "path": "/a\u0000b", "key": "k", "value": "v"}, "NUL"),
    ({"op": "set", "path": "/a", "key": "", "value": "v"}, "empty"),
    ({"op": "setv", "path": "/a", "key": "k", "value": "v"}, "list of strings"),
    ({"op": "setv", "path": "/a", "key": "k", "value": ["a", 1]}, "list of strings"),
    ({"op": "unset", "path": "/a", "key": "k", "value": "v"}, "unexpected field"),
    ({"op": "copy", "path": "/a"}, "source"),
    ({"op": "remove", "path": "/a", "time": True}, "boolean"),
    ({"op": "remove", "path": "/a", "time": -1}, "range"),
    ({"op": "remove", "path": "/a", "time": "yesterday"}, "RFC 3339"),
    ({"op": "set", "path": "/a", "key": "k", "value": "x" * 40000}, "exceeds"),
    ({"op": "set", "path_base64": "!!", "key": "k", "value": "v"}, "base64"),
]


@pytest.mark.parametrize("line,message", BAD_LINES)
def test_invalid_lines_write_nothing(tmp_path, line, message):
    folder = copy_fixture("03-tree-plus-journal", tmp_path / "m")
    before = journal_bytes(folder)
    good = {"op": "set", "path": "/ok", "key": "k", "value": "v"}
    with pytest.raises(BadRecord, match=message):
        writer(folder).write([good, line])
    assert journal_bytes(folder) == before


def test_non_utf8_fields_round_trip(tmp_path):
    folder = copy_fixture("02-after-timer-flush", tmp_path / "m")
    lines = [
        {"op": "set", "time": 5, "path_base64": "L2Zm/w==", "key": "k", "value_base64": "gA=="},
        {"op": "setv", "time": 6, "path": "/l", "key_base64": "/w==", "value_base64": ["gA==", ""]},
        {"op": "copy", "time": 7, "path": "/c", "source_base64": "L2Zm/w=="},
    ]
    writer(folder).write(lines)
    assert journal_lines(folder) == [
        {
            "op": "set",
            "time": "1970-01-01T00:00:05Z",
            "path_base64": "L2Zm/w==",
            "key": "k",
            "value_base64": "gA==",
        },
        {
            "op": "setv",
            "time": "1970-01-01T00:00:06Z",
            "path": "/l",
            "key_base64": "/w==",
            "value_base64": ["gA==", ""],
        },
        {"op": "copy", "time": "1970-01-01T00:00:07Z", "path": "/c", "source_base64": "L2Zm/w=="},
    ]
    meta = parse_lines(GvfsFormat(folder, {}).derived_views()["home/metadata.jsonl"]())
    odd = [r for r in meta if "path_base64" in r]
    assert [r["path_base64"] for r in odd] == ["L2Zm/w=="]
    assert odd[0]["metadata"] == {} and odd[0]["metadata_base64"] == {"aw==": "gA=="}
    listed = [r for r in meta if r.get("path") == "/l"][0]
    assert listed["metadata_base64"] == {"/w==": ["gA==", ""]}


def test_full_journal_grows_before_it_rebuilds(tmp_path, monkeypatch):
    folder = copy_fixture("05-many-journal", tmp_path / "m")
    tag = read_header((folder / "home").read_bytes()).tag
    jpath = folder / f"home-{tag:08x}.log"
    before = journal_lines(folder)
    os.chmod(jpath, 0o644)  # gvfs <= 1.56 made journals 0644: a grown copy keeps the mode
    inode = jpath.stat().st_ino
    lines = [
        {"op": "set", "time": 1795341000 + i, "path": f"/Bulk/f{i:04d}", "key": "n", "value": f"v{i}"}
        for i in range(800)
    ]
    assert store.append_entries(folder / "home", [record_entry(line) for line in lines]) == 0
    assert read_header((folder / "home").read_bytes()).tag == tag  # no rotation
    assert jpath.stat().st_size == 2 * JOURNAL_SIZE and jpath.stat().st_ino != inode
    assert oct(jpath.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["home", jpath.name, "root", "root-37a40498.log"]
    )
    state = store.read_state(folder / "home")
    assert state.journal_error is None and state.journal.invalid is None  # header file_size follows
    assert state.journal.header.file_size == 2 * JOURNAL_SIZE
    assert journal_lines(folder) == before + [{**line, "time": show_time(line["time"])} for line in lines]
    # capped: past MAX_JOURNAL_SIZE a full journal is rebuilt, and the new one is 32 KiB again
    monkeypatch.setattr(store, "MAX_JOURNAL_SIZE", 2 * JOURNAL_SIZE)
    more = [{**line, "path": line["path"] + ".2"} for line in lines]
    assert store.append_entries(folder / "home", [record_entry(line) for line in more]) == 1
    new_tag = read_header((folder / "home").read_bytes()).tag
    assert new_tag != tag and (folder / f"home-{new_tag:08x}.log").stat().st_size == JOURNAL_SIZE
    meta = metadata_by_path(folder)
    assert meta["/Bulk/f0799.2"]["metadata"] == {"n": "v799"} and meta["/Bulk/f0000"]["metadata"] == {
        "n": "v0"
    }


def test_full_journal_rebuilds_and_rotates(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "MAX_JOURNAL_SIZE", JOURNAL_SIZE)  # no growth: rotate as the daemon does
    folder = copy_fixture("05-many-journal", tmp_path / "m")
    old_tag = read_header((folder / "home").read_bytes()).tag
    old_fd = os.open(folder / "home", os.O_RDONLY)  # a reader holding the old tree
    try:
        expected_model = store.effective_model(store.read_state(folder / "home"))
        lines = [
            {"op": "set", "time": 1795341000 + i, "path": f"/Bulk/f{i:04d}", "key": "n", "value": f"v{i}"}
            for i in range(800)
        ]
        rebuilds = store.append_entries(folder / "home", [record_entry(line) for line in lines])
        assert rebuilds == 1
        rotated = struct.unpack(">I", os.pread(old_fd, 4, 8))[0]
        assert rotated == 0xFFFFFFFF
    finally:
        os.close(old_fd)
    new_tag = read_header((folder / "home").read_bytes()).tag
    assert new_tag != old_tag
    assert not (folder / f"home-{old_tag:08x}.log").exists()
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["home", f"home-{new_tag:08x}.log", "root", "root-37a40498.log"]
    )
    assert oct((folder / "home").stat().st_mode & 0o777) == "0o600"
    assert (folder / f"home-{new_tag:08x}.log").stat().st_size == JOURNAL_SIZE
    # the rebuilt tree holds the old tree + old journal + the entries that fitted
    state = store.read_state(folder / "home")
    tree_paths = {p for p, _ in state.tree.model.walk()}
    assert {p for p, _ in expected_model.walk()} <= tree_paths
    in_journal = [r["path"] for r in journal_lines(folder)]
    assert in_journal and in_journal[-1] == "/Bulk/f0799"
    assert {f"/Bulk/f{i:04d}" for i in range(800)} == {
        p.decode() for p in tree_paths if p.startswith(b"/Bulk/")
    } | set(in_journal)
    meta = metadata_by_path(folder)
    assert meta["/Bulk/f0000"]["metadata"] == {"n": "v0"}
    assert meta["/Many/résumé.txt"]["metadata"] == {"caption": "héllo ✓"}


def test_a_crash_before_the_count_leaves_the_old_journal(tmp_path, monkeypatch):
    folder = copy_fixture("03-tree-plus-journal", tmp_path / "m")
    before = journal_bytes(folder)
    real_pwrite = os.pwrite

    def crashing_pwrite(fd, data, offset):
        if offset == 16:  # num_entries: the crash hits after the entry bytes
            raise KeyboardInterrupt
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", crashing_pwrite)
    with pytest.raises(KeyboardInterrupt):
        writer(folder).write([{"op": "set", "time": 9, "path": "/a", "key": "k", "value": "lost"}])
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    after = journal_bytes(folder)
    assert after[:336] == before[:336] and after[336:340] != b"\0\0\0\0"  # entry written, count not
    assert journal_lines(folder) == journal_lines(FIXTURES / "03-tree-plus-journal")
    writer(folder).write([{"op": "set", "time": 9, "path": "/a", "key": "k", "value": "kept"}])
    assert journal_lines(folder)[-1]["value"] == "kept" and len(journal_lines(folder)) == 7


def test_invalid_journal_refuses_writes(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    shutil.copy(FIXTURES / "02-after-timer-flush" / "home", folder / "home")
    shutil.copy(FIXTURES / "10-bad-crc-journal.log", folder / "home-1e0f4c72.log")
    before = journal_bytes(folder)
    with pytest.raises(BadRecord, match=r"entry 1 at offset 64 is invalid \(bad CRC-32"):
        writer(folder).write([{"op": "remove", "path": "/x"}])
    assert journal_bytes(folder) == before


def test_foreign_journal_header_refuses_writes(tmp_path):
    folder = copy_fixture("02-after-timer-flush", tmp_path / "m")
    journal = folder / "home-1e0f4c72.log"
    journal.write_bytes(journal.read_bytes()[:-4])  # file_size no longer matches
    with pytest.raises(BadRecord, match="file_size"):
        writer(folder).write([{"op": "remove", "path": "/x"}])


def test_missing_journal_is_recreated_with_the_trees_tag(tmp_path):
    folder = copy_fixture("02-after-timer-flush", tmp_path / "m")
    (folder / "home-1e0f4c72.log").unlink()
    w = writer(folder, create=True)
    w.write([{"op": "remove", "time": 1, "path": "/Pictures"}])
    assert (folder / "home-1e0f4c72.log").exists() and len(journal_lines(folder)) == 1


def test_new_tree_is_created_on_first_write(tmp_path):
    folder = copy_fixture("02-after-timer-flush", tmp_path / "m")
    with pytest.raises(FileNotFoundError):
        writer(folder, "uuid-1234/journal.jsonl", create=False)
    with pytest.raises(FileNotFoundError):
        writer(folder, "%2Ehidden/journal.jsonl", create=True)
    writer(folder, "uuid-1234/journal.jsonl", create=True).write(
        [{"op": "set", "time": 1795340815, "path": "/p/x", "key": "k", "value": "v"}]
    )
    tree = (folder / "uuid-1234").read_bytes()
    assert len(tree) == 64 and tree[:8] == b"\xda\x1ameta\x01\x00"
    assert tree == build_tree(MetaModel(), read_header(tree).tag)
    fmt = GvfsFormat(folder, {})
    assert "uuid-1234/metadata.jsonl" in fmt.derived_views()
    assert journal_lines(folder, "uuid-1234")[0]["path"] == "/p/x"


def test_metadata_view_is_read_only(tmp_path):
    folder = copy_fixture("02-after-timer-flush", tmp_path / "m")
    with pytest.raises(ReadOnlyView):
        writer(folder, "home/metadata.jsonl")


# -- model semantics (spec §3.6) --------------------------------------------------


def test_remove_of_root_keeps_its_keys_and_copy_into_own_subtree(tmp_path):
    folder = copy_fixture("02-after-timer-flush", tmp_path / "m")
    writer(folder).write(
        [
            {"op": "copy", "time": 100, "path": "/Documents/inner", "source": "/Documents"},
            {"op": "copy", "time": 101, "path": "/Pictures", "source": "/Pictures/p.png"},
            {"op": "copy", "time": 102, "path": "/nowhere", "source": "/missing"},
            {"op": "unset", "time": 103, "path": "/absent", "key": "k"},
        ]
    )
    meta = metadata_by_path(folder)
    assert meta["/Documents/inner/a.txt"]["metadata"] == {"tags": ["red", "green", "blue"]}
    assert "/Documents/inner/inner/a.txt" not in meta
    # COPY onto an ancestor of the source: the destination is removed first, so the source is gone
    assert not any(p.startswith("/Pictures") for p in meta)
    assert "/nowhere" not in meta and "/absent" not in meta
    writer(folder).write([{"op": "remove", "time": 200, "path": "/"}])
    meta = metadata_by_path(folder)
    assert list(meta) == ["/"] and meta["/"]["metadata"] == {"home-key": "on home dir"}
    assert meta["/"]["last_changed"] == "1970-01-01T00:03:20Z"


def test_time_base_of_negative_times_keeps_the_span_from_zero():
    """metabuilder's largest time starts at 0: a tree whose times are all
    negative (journal mtimes past 2^63) spans from its smallest to 0, and
    the base moves up to 0 - 0xFFFFFFFF when that span overflows 32 bits."""
    root = Node(-(2**40))
    root.children[b"a"] = Node(-(2**40) + 10)
    assert read_header(build_tree(MetaModel(root), 1)).base == -0xFFFFFFFF
    root = Node(-5)
    root.children[b"a"] = Node(-3)
    assert read_header(build_tree(MetaModel(root), 1)).base == -6


names = st.binary(min_size=1, max_size=6).filter(lambda b: b"/" not in b and b"\0" not in b)
texts = st.binary(max_size=8).filter(lambda b: b"\0" not in b)
keys = st.binary(min_size=1, max_size=6).filter(lambda b: b"\0" not in b)
values = st.one_of(texts, st.lists(texts, max_size=4))


@st.composite
def models(draw, depth=0):
    node = Node(draw(st.one_of(st.just(0), st.integers(1, 2**40))))
    node.keys = draw(st.dictionaries(keys, values, max_size=3))
    if depth < 3:
        for name in draw(st.lists(names, max_size=3, unique=True)):
            node.children[name] = draw(models(depth + 1))
    return node


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models(), st.integers(0, 2**32 - 1))
def test_tree_round_trip(root, tag):
    model = MetaModel(root)
    data = build_tree(model, tag)
    back = read_tree(data)
    assert back.problems == [] and back.header.tag == tag
    a = [(p, n.keys) for p, n in model.walk()]
    b = [(p, n.keys) for p, n in back.model.walk()]
    assert a == b
    # rebuilding what was read is a fixed point once the root time is absolute
    again = read_tree(build_tree(back.model, tag)).model
    assert [(p, n.keys) for p, n in again.walk()] == b


ops = st.sampled_from(["set", "setv", "unset", "copy", "remove"])
paths = st.lists(st.sampled_from(["a", "b", "é", "c d"]), min_size=0, max_size=3).map(
    lambda p: "/" + "/".join(p)
)


@st.composite
def lines(draw):
    op = draw(ops)
    line = {
        "op": op,
        "time": draw(st.one_of(st.integers(0, 2**34), st.integers(2**62, 2**64 - 1))),
        "path": draw(paths),
    }
    if op in ("set", "setv", "unset"):
        line["key"] = draw(st.text(min_size=1, max_size=5).filter(lambda s: "\0" not in s))
    if op == "set":
        line["value"] = draw(st.text(max_size=9).filter(lambda s: "\0" not in s))
    if op == "setv":
        line["value"] = draw(st.lists(st.text(max_size=4).filter(lambda s: "\0" not in s), max_size=4))
    if op == "copy":
        line["source"] = draw(paths)
    return line


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(lines(), min_size=1, max_size=30))
def test_journal_lines_round_trip(tmp_path_factory, batch):
    folder = tmp_path_factory.mktemp("rt")
    writer(folder, create=True).write(batch)
    shown = journal_lines(folder)
    # times past year 9999 have no RFC 3339 form and show as integers
    assert shown == [{**line, "time": show_time(line["time"])} for line in batch]
    assert any(isinstance(r["time"], int) for r in shown) == any(
        line["time"] > 253402300799 for line in batch
    )
    # the same lines through the model agree with the rebuild the daemon would make
    model = store.effective_model(store.read_state(folder / "home"))
    rebuilt = tmp_path_factory.mktemp("rb") / "home"
    store.rebuild(rebuilt, model)
    again = store.effective_model(store.read_state(rebuilt))
    assert [(p, n.keys) for p, n in again.walk()] == [(p, n.keys) for p, n in model.walk()]


def test_sample_generates_a_readable_folder(tmp_path):
    folder = sample.generate(tmp_path / "s", 1200)
    fmt = GvfsFormat(folder, {})
    assert GvfsFormat.detect(folder)
    info = fmt.info()["trees"]
    assert info["home"]["journal_status"] == "valid" and 0 < info["home"]["journal_entries"] < 1200
    assert info["home"]["journal_bytes_used"] <= HEADER_SIZE + (JOURNAL_SIZE - HEADER_SIZE) // 2
    meta = parse_lines(fmt.derived_views()["home/metadata.jsonl"]())
    assert len(meta) > 100 and fmt.problems() == []
    assert any(isinstance(v, list) for r in meta for v in r["metadata"].values())
