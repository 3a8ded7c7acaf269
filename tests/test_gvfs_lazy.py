"""metadata.jsonl read lazily (fmtfs.formats.gvfs.lazy) against the whole
model a rebuild uses: the same lines, in the same order, for random trees
and journals, damaged trees too; and memory that stays near the bytes."""

from __future__ import annotations

import shutil
import tracemalloc
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fmtfs.formats.gvfs import GvfsFormat, store
from fmtfs.formats.gvfs.journal import decode_entry, encode_entry
from fmtfs.formats.gvfs.lazy import keyed_rows, lazy_model, part_bounds
from fmtfs.formats.gvfs.metadata import metadata_pieces
from fmtfs.formats.gvfs.model import OP_COPY, OP_REMOVE, OP_SET, OP_SETV, OP_UNSET, Entry, MetaModel, Node
from fmtfs.formats.gvfs.records import metadata_record
from fmtfs.formats.gvfs.tree import LazyTree, TreeError, read_tree
from fmtfs.formats.gvfs.treewriter import build_tree
from fmtfs.jsonlines import PIECE_LINES
from fmtfs.pieces import Pieces
from fmtfs.render import parse_lines, render_lines
from fmtfs.views import SourceTree
from tests.conftest import FIXTURES

# names around "/" in byte order ("." and "-" sort before it), and not UTF-8
NAMES = [b"a", b"a.txt", b"a-b", b"b", b"\xff", b"a b", b"z"]


def whole_rows(model: MetaModel) -> list:
    """The reference: every node of a whole model with keys, sorted by path."""
    rows = [(path, model.display_time(node), node.keys) for path, node in model.walk() if node.keys]
    return sorted(rows, key=lambda row: row[0])


def lazy_rows(data: bytes, entries: list[Entry]) -> list:
    tree = LazyTree(data)
    return list(keyed_rows(lazy_model(tree, entries), tree))


def whole_model_rows(data: bytes, entries: list[Entry]) -> list:
    model = read_tree(data).model
    for entry in entries:
        model.apply(entry)
    return whole_rows(model)


@st.composite
def trees(draw, depth=0):
    node = Node(draw(st.sampled_from([0, 5, 1_700_000_000])))
    node.keys = draw(st.dictionaries(st.sampled_from([b"k", b"tags", b"\xfe"]), st.just(b"v"), max_size=2))
    if depth < 3:
        for name in draw(st.lists(st.sampled_from(NAMES), max_size=4, unique=True)):
            node.children[name] = draw(trees(depth + 1))
    return node


paths = st.lists(st.sampled_from(NAMES), max_size=3).map(lambda parts: b"/" + b"/".join(parts))


@st.composite
def entries(draw):
    op = draw(st.sampled_from([OP_SET, OP_SETV, OP_UNSET, OP_COPY, OP_REMOVE]))
    key = draw(st.sampled_from([b"k", b"new"])) if op in (OP_SET, OP_SETV, OP_UNSET) else None
    value = {OP_SET: b"x", OP_SETV: [b"p", b""]}.get(op)
    source = draw(paths) if op == OP_COPY else None
    encoded = encode_entry(op, draw(st.sampled_from([0, 1_800_000_000])), draw(paths), key, value, source)
    entry = decode_entry(encoded, 0, len(encoded))
    assert isinstance(entry, Entry)
    return entry


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees(), st.lists(entries(), max_size=12))
def test_lazy_lines_equal_the_whole_models(root, journal):
    data = build_tree(MetaModel(root), 0x12345678)
    assert lazy_rows(data, journal) == whole_model_rows(data, journal)


def rows_in_parts(data: bytes, entries: list[Entry], parts: int) -> list[list]:
    """The rows of each of `parts` runs of the view (part_bounds)."""
    tree = LazyTree(data)
    model = lazy_model(tree, entries)
    runs = []
    for part in range(parts):
        bounds = part_bounds(model, tree, part, parts)
        runs.append([] if bounds is None else list(keyed_rows(model, tree, *bounds)))
    return runs


# cut points: paths of the trees above and names next to them ("a b" has a
# byte below "/", so a folder named "a" has lines after "/a b")
cuts = st.one_of(
    st.none(), paths, paths.map(lambda p: p + b" "), st.binary(max_size=6).map(lambda b: b"/" + b)
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees(), st.lists(entries(), max_size=8), cuts, cuts)
def test_a_range_of_the_lines_is_the_lines_in_it(root, journal, lo, hi):
    data = build_tree(MetaModel(root), 0x12345678)
    tree = LazyTree(data)
    want = [
        row
        for row in whole_model_rows(data, journal)
        if (lo is None or lo <= row[0]) and (hi is None or row[0] < hi)
    ]
    assert list(keyed_rows(lazy_model(tree, journal), tree, lo, hi)) == want


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees(), st.lists(entries(), max_size=8), st.integers(2, 5))
def test_the_parts_of_the_lines_are_all_of_them_in_order(root, journal, parts):
    data = build_tree(MetaModel(root), 0x12345678)
    runs = rows_in_parts(data, journal, parts)
    assert len(runs) == parts and [row for run in runs for row in run] == whole_model_rows(data, journal)


def test_damaged_trees_read_lazily_as_whole():
    good = (FIXTURES / "gvfs" / "05-many-journal" / "home").read_bytes()
    compared = 0
    for pos in range(len(good)):
        damaged = bytearray(good)
        damaged[pos] ^= 0xA5
        try:
            want = whole_model_rows(bytes(damaged), [])
        except TreeError:
            continue
        assert lazy_rows(bytes(damaged), []) == want, pos
        if pos % 5 == 0:  # and cut in three parts (a fifth of them, for time)
            assert [row for run in rows_in_parts(bytes(damaged), [], 3) for row in run] == want, pos
        compared += 1
    assert compared > len(good) // 2


def test_children_block_loop_reads_as_whole():
    data = bytearray((FIXTURES / "gvfs" / "02-after-timer-flush" / "home").read_bytes())
    data[128:132] = (120).to_bytes(4, "big")  # Documents' children -> the root's block
    assert any("loop" in msg for _, msg in LazyTree(bytes(data)).problems())
    assert lazy_rows(bytes(data), []) == whole_model_rows(bytes(data), [])


def test_a_block_of_names_out_of_order_reads_as_whole():
    """A children block whose names are not all valid, sorted and distinct
    (LazyTree._sorted says so, and lookups scan it) reads as the whole
    model does, with journal entries looked up in it."""
    model = MetaModel()
    for name in (b"a", b"b", b"c", b"d"):
        node, _, _ = model.lookup(b"/dir/" + name, True)
        node.keys = {b"k": name}
    good = build_tree(model, 7)
    tree = LazyTree(good)
    ((_, name, dirent),) = tree.children(tree.header.root, tree.root_dirent[0])
    assert name == b"dir"
    block = dirent[0]
    pointers = [int.from_bytes(good[at : at + 4], "big") for at in range(block + 4, block + 4 + 64, 16)]
    journal = []
    for name in (b"a", b"b", b"c", b"d", b"e"):
        encoded = encode_entry(OP_SET, 1_800_000_000, b"/dir/" + name, b"k", b"new", None)
        journal.append(decode_entry(encoded, 0, len(encoded)))
    variants = {
        "swapped": [pointers[1], pointers[0], pointers[2], pointers[3]],
        "twice": [pointers[0], pointers[0], pointers[2], pointers[3]],
        "invalid": [len(good), pointers[1], pointers[2], pointers[3]],  # no NUL after it
    }
    for label, names in variants.items():
        data = bytearray(good)
        for i, pointer in enumerate(names):
            data[block + 4 + 16 * i : block + 8 + 16 * i] = pointer.to_bytes(4, "big")
        damaged = LazyTree(bytes(data))
        n = damaged._reader.array(block, 16)
        assert n == 4 and not damaged._sorted(block, n), label
        assert lazy_rows(bytes(data), journal) == whole_model_rows(bytes(data), journal), label
    assert LazyTree(good)._sorted(block, 4)
    assert lazy_rows(good, journal) == whole_model_rows(good, journal)


def big_tree(folder: Path, files: int) -> Path:
    """A tree of `files` files with keys in 4 folders, and a journal that
    reaches into each folder (a set, a copy, a remove)."""
    model = MetaModel()
    for i in range(files):
        node, _, _ = model.lookup(b"/F%d/file-%06d.txt" % (i % 4, i), True)
        node.keys = {b"comment": b"note %d" % i, b"tags": [b"red", b"x"]}
        node.last_changed = 1_700_000_000 + i
    tree = folder / "home"
    store.rebuild(tree, model)
    lines = [(OP_SET, b"/F%d/file-%06d.txt" % (f, f), b"comment", b"changed", None) for f in range(4)]
    lines += [(OP_COPY, b"/F0/copy.txt", None, None, b"/F1/file-000001.txt")]
    lines += [(OP_REMOVE, b"/F2/file-000002.txt", None, None, None)]
    store.append_entries(tree, [encode_entry(op, 1_800_000_000, p, k, v, s) for op, p, k, v, s in lines])
    return tree


def test_metadata_view_memory_stays_near_its_bytes(tmp_path):
    tree = big_tree(tmp_path, 40_000)
    tree_bytes = tree.stat().st_size
    tracemalloc.start()
    try:
        lines = b"".join(metadata_pieces(tree))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    records = parse_lines(lines)
    assert len(records) == 40_000 and records[0]["path"] == "/F0/copy.txt"
    assert render_lines(metadata_record(*row) for row in whole_model_rows(tree.read_bytes(), [])) != lines
    # the tree's bytes, the lines (and their copy into bytes) and one listing;
    # a whole model plus the records took 12x the lines
    assert peak < tree_bytes + 2 * len(lines) + (8 << 20), (peak, tree_bytes, len(lines))


def test_a_big_tree_is_cut_in_even_parts(tmp_path):
    """Two or three processes render a big view together: its runs joined
    are the view, each about an even share of its lines, the first found
    without reading the lines before it (a binary search in a folder of
    10,000 files)."""
    tree = big_tree(tmp_path, 40_000)
    whole = b"".join(metadata_pieces(tree))
    for parts in (2, 3):
        runs = [b"".join(metadata_pieces(tree, part, parts)) for part in range(parts)]
        assert b"".join(runs) == whole
        shares = [run.count(b"\n") / 40_000 for run in runs]
        assert all(abs(share - 1 / parts) < 0.02 for share in shares), shares
    (tmp_path / "small").mkdir()
    small = big_tree(tmp_path / "small", 3)  # 6 lines: more parts than a tree has cuts
    small_runs = [b"".join(metadata_pieces(small, part, 16)) for part in range(16)]
    assert b"".join(small_runs) == b"".join(metadata_pieces(small)) and small_runs[-1] == b""


def test_metadata_view_is_held_as_compressed_pieces(tmp_path):
    """Through the view tree (what a mount and `fmtfs cat` serve): exact
    size, the same bytes at every offset, records a piece at a time, and
    neither the rendering nor the view holding the whole text."""
    folder = tmp_path / "src"
    folder.mkdir()
    tree_path = big_tree(folder, 40_000)
    want = GvfsFormat(folder, {}).derived_views()["home/metadata.jsonl"]()
    tracemalloc.start()
    try:
        tree = SourceTree(GvfsFormat(folder, {}), tmp_path / "cache")
        size = tree.size("home/metadata.jsonl")
        _, peak = tracemalloc.get_traced_memory()
        held, _ = tracemalloc.get_traced_memory()
        got = b"".join(tree.read("home/metadata.jsonl", at, 131072) for at in range(0, size, 131072))
    finally:
        tracemalloc.stop()
    assert size == len(want) and got == want
    # the tree's bytes while it is walked, one piece of lines, their compressed copies
    assert peak < tree_path.stat().st_size + len(want) // 2 + (8 << 20), (peak, len(want))
    view = tree.file("home/metadata.jsonl")
    batches = list(view.records())
    assert len(batches) == -(-40_000 // PIECE_LINES) and sum(map(len, batches)) == 40_000
    assert [r for batch in batches for r in batch] == parse_lines(want)
    # a second tree over the same cache takes the pieces from it: no walk, same bytes
    again = SourceTree(GvfsFormat(folder, {}), tmp_path / "cache")
    assert again.read("home/metadata.jsonl", 0, size) == want
    assert held < len(want)


def test_pieces_read_like_bytes():
    parts = [b"a" * 10, b"", b"bc\n" * 7, b"d", b"efgh" * 3]
    whole = b"".join(parts)
    pieces = Pieces.of(parts)
    assert len(pieces) == len(whole)
    for start in range(len(whole) + 2):
        for stop in range(start, len(whole) + 3):
            assert pieces[start:stop] == whole[start:stop], (start, stop)
    back = Pieces.from_blob(pieces.blob())
    assert back is not None and back[0 : len(whole)] == whole
    assert Pieces.from_blob(b'{"a":1}\n') is None
    assert len(Pieces.of([])) == 0 and Pieces.of([])[0:5] == b""


def test_an_empty_metadata_view_from_the_cache_is_empty(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    shutil.copy(FIXTURES / "gvfs" / "01-fresh-journal" / "home", folder / "home")  # no keys, no journal
    for _ in range(2):  # rendered, then from the derived-view cache
        tree = SourceTree(GvfsFormat(folder, {}), tmp_path / "cache")
        assert tree.size("home/metadata.jsonl") == 0
        assert tree.read("home/metadata.jsonl", 0, 100) == b""
        assert list(tree.file("home/metadata.jsonl").records()) == []
