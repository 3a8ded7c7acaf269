"""Rendered pieces kept across mounts (fmtfs.keptpieces): a scan keeps every
chunk's rendered bytes, compressed, and a later tree or mount reads them
back instead of decoding; the bytes are always the decoded ones, a damaged
store costs a decode only, a file still being written keeps no copies of
its last chunk, and a store mostly dead is rewritten."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from fmtfs import index as index_module
from fmtfs.formats import open_source
from fmtfs.formats.base import Chunk
from fmtfs.formats.wallaby import WallabyWriter
from fmtfs.keptpieces import Kept, KeptPieces, parse_size
from fmtfs.mountoptions import expand_options
from fmtfs.render import render_chunk
from fmtfs.samples import beats, gvfs, kestrel, proio, wallaby
from fmtfs.samples.wallaby import START_NS
from fmtfs.treefiles import IndexedFile
from fmtfs.views import SourceTree
from tests.mounting import decode_workers, fmtfs, mounted
from tests.test_read_path import reads_at_once

SAMPLES = {"beats": beats, "wallaby": wallaby, "kestrel": kestrel, "proio": proio, "gvfs": gvfs}
AN_HOUR_AGO = 3600
RECORDS = "events.log/records.jsonl"


def settle(folder: Path, seconds_ago: int = AN_HOUR_AGO) -> None:
    """Date every file of `folder` `seconds_ago` back: a settled source."""
    for path in folder.rglob("*"):
        if path.is_file():
            st = path.stat()
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - seconds_ago * 10**9))


def sample(fmt: str, folder: Path, records: int = 6000) -> Path:
    source = folder / fmt
    source.mkdir()
    SAMPLES[fmt].generate(source, records)
    settle(source)
    return source


def indexed_views(tree: SourceTree) -> dict[str, IndexedFile]:
    return {path: view for path, view in tree.files.items() if isinstance(view, IndexedFile)}


def whole(tree: SourceTree, path: str) -> bytes:
    view = tree.file(path)
    return tree.read(path, 0, view.size())


# -- the store -------------------------------------------------------------------


def test_a_kept_piece_reads_back_and_a_damaged_one_is_refused(tmp_path: Path) -> None:
    store = KeptPieces(tmp_path / "rendered" / "x.lz4", 1 << 20)
    pieces = {"a.jsonl": b'{"n":1}\n' * 1000, "b.jsonl": b'{"m":"x"}\n' * 10, "empty": b""}
    kept = store.keep(pieces)
    assert set(kept) == {"a.jsonl", "b.jsonl"}  # nothing to keep of an empty piece
    assert store.get(kept["a.jsonl"]) == pieces["a.jsonl"]
    assert store.get(kept["b.jsonl"]) == pieces["b.jsonl"]
    assert store.size() < len(pieces["a.jsonl"]) // 5  # compressed
    # a torn write: one byte of the piece changed on disk
    where = kept["a.jsonl"]
    with open(store.path, "r+b") as f:
        f.seek(where.at + where.length // 2)
        byte = f.read(1)
        f.seek(where.at + where.length // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert store.get(where) is None
    assert store.get(kept["b.jsonl"]) == pieces["b.jsonl"]
    # a place in another store file (replaced since) is not trusted either
    moved = Kept(where.at, where.length, where.size, where.check, where.file + 1)
    assert store.get(moved) is None
    store.close()


def test_a_store_copied_elsewhere_keeps_its_pieces(tmp_path: Path) -> None:
    """A store names itself by the id in its header, not by its inode: a
    copy (a new inode) reads the pieces written to the original."""
    store = KeptPieces(tmp_path / "a" / "s.lz4", 1 << 20)
    kept = store.keep({"v.jsonl": b'{"n":1}\n' * 300})["v.jsonl"]
    store.close()
    (tmp_path / "b").mkdir()
    copy = tmp_path / "b" / "s.lz4"
    copy.write_bytes((tmp_path / "a" / "s.lz4").read_bytes())
    assert copy.stat().st_ino != (tmp_path / "a" / "s.lz4").stat().st_ino
    store = KeptPieces(copy, 1 << 20)
    assert store.file == kept.file
    assert store.get(kept) == b'{"n":1}\n' * 300
    store.close()


def test_a_file_that_is_not_a_store_is_started_anew(tmp_path: Path) -> None:
    """An older fmtfs's store (no header) or a damaged one: nothing of it
    is trusted, and the store works again from empty."""
    path = tmp_path / "s.lz4"
    path.write_bytes(os.urandom(5000))
    store = KeptPieces(path, 1 << 20)
    assert store.size() == 0
    kept = store.keep({"v.jsonl": b"x\n" * 100})["v.jsonl"]
    assert store.get(kept) == b"x\n" * 100
    assert KeptPieces(path, 1 << 20).file == store.file  # the next opener finds the same store
    store.close()


def test_views_given_the_same_bytes_share_one_kept_copy(tmp_path: Path) -> None:
    store = KeptPieces(tmp_path / "s.lz4", 1 << 20)
    lines = bytearray(b'{"t":"2015-05-17T22:00:00Z"}\n' * 500)  # a segment's piece, also its hour bucket's
    kept = store.keep({"segments/0.jsonl": lines, "buckets/2015-05-17T22.jsonl": lines})
    assert kept["segments/0.jsonl"] == kept["buckets/2015-05-17T22.jsonl"]
    assert store.size() == kept["segments/0.jsonl"].length
    assert store.get(kept["buckets/2015-05-17T22.jsonl"]) == bytes(lines)
    store.close()


def test_a_store_keeps_nothing_past_its_limit(tmp_path: Path) -> None:
    store = KeptPieces(tmp_path / "s.lz4", 100)
    assert store.keep({"v": os.urandom(500)}) == {}  # incompressible, over the limit
    assert store.size() == 0
    small = store.keep({"v": b"x" * 1000})
    assert store.get(small["v"]) == b"x" * 1000
    store.close()


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("auto", None),
        ("off", 0),
        ("0", 0),
        ("512M", 512 << 20),
        ("4g", 4 << 30),
        ("1.5K", 1536),
        ("100", 100),
    ],
)
def test_rendered_cache_sizes_as_users_write_them(text: str, size: int | None) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "-1G", "G", "inf", "nan"])
def test_a_bad_rendered_cache_size_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_a_bad_rendered_cache_size_is_one_line_from_the_command_line(tmp_path: Path) -> None:
    done = fmtfs("ls", tmp_path, "--rendered-cache", "inf", check=False)
    assert done.returncode == 2 and b"not a size" in done.stderr and b"Traceback" not in done.stderr


def test_rendered_cache_rides_in_a_mount_option_list() -> None:
    assert expand_options(["SRC", "MNT", "-o", "ro,rendered_cache=off"]) == [
        "SRC",
        "MNT",
        "--rendered-cache",
        "off",
        "-o",
        "ro",
    ]


# -- scans keep, trees read back -------------------------------------------------


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_every_kept_piece_is_the_chunk_decoded_and_rendered(fmt: str, tmp_path: Path) -> None:
    """What a scan kept == what a decode renders, for every piece of every
    indexed view (Beats: its measured scan; the others: scan()'s records)."""
    source = sample(fmt, tmp_path)
    tree = SourceTree(open_source(source, fmt, {}), tmp_path / "cache")
    checked = 0
    for entry in tree.index.entries.values():
        for view, pieces in entry.views.items():
            for seq in pieces.seqs:
                kept = entry.kept.get((view, seq))
                assert kept is not None, (view, seq)  # a settled source keeps every piece
                meta = entry.chunks[seq]
                decoded = render_chunk(entry.stream, Chunk(meta.start, meta.end, meta.state, {}), view)
                assert tree.index.kept.get(kept) == decoded[view]
                checked += 1
    tree.close()
    assert checked > 0 or fmt == "gvfs"  # gvfs's views are derived: nothing indexed to keep


@pytest.mark.parametrize("fmt", ["beats", "wallaby", "kestrel", "proio"])
def test_a_second_tree_reads_kept_pieces_and_shows_the_decoded_bytes(fmt: str, tmp_path: Path) -> None:
    source = sample(fmt, tmp_path)
    SourceTree(open_source(source, fmt, {}), tmp_path / "cache").close()
    kept = SourceTree(open_source(source, fmt, {}), tmp_path / "cache")
    decoding = SourceTree(open_source(source, fmt, {}), tmp_path / "other", keep_limit=0)
    assert decoding.index.kept is None
    paths = sorted(indexed_views(kept))
    assert paths
    for path in paths:
        assert whole(kept, path) == whole(decoding, path)
    assert kept.index.kept.served > 0
    kept.close()
    decoding.close()


def test_the_last_chunk_of_a_file_still_being_written_is_not_kept(tmp_path: Path) -> None:
    source = tmp_path / "wal"
    source.mkdir()
    wallaby.generate(source, 20000)  # written just now
    tree = SourceTree(open_source(source, "wallaby", {}), tmp_path / "cache")
    (entry,) = tree.index.entries.values()
    last = len(entry.chunks) - 1
    assert last > 0
    kept_seqs = {seq for _, seq in entry.kept}
    assert last not in kept_seqs and set(range(last)) <= kept_seqs
    tree.close()


def test_the_last_chunk_is_kept_once_the_file_has_settled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A source copied just now and never written again: the first tree
    keeps all but each stream's last chunk; a tree opened once the files
    have settled scans that chunk again and keeps it; the next scans nothing."""
    source = tmp_path / "wal"
    source.mkdir()
    wallaby.generate(source, 20000)
    cache = tmp_path / "cache"
    tree = SourceTree(open_source(source, "wallaby", {}), cache)
    (entry,) = tree.index.entries.values()
    last = len(entry.chunks) - 1
    assert (RECORDS, last) not in entry.kept
    tree.close()
    monkeypatch.setattr(index_module, "SETTLED_NS", 0)  # as if a minute had passed
    tree = SourceTree(open_source(source, "wallaby", {}), cache)
    (entry,) = tree.index.entries.values()
    assert (RECORDS, last) in entry.kept and len(entry.chunks) == last + 1
    size = tree.index.kept.size()
    decoding = SourceTree(open_source(source, "wallaby", {}), tmp_path / "other", keep_limit=0)
    assert whole(tree, RECORDS) == whole(decoding, RECORDS)
    tree.close()
    decoding.close()
    tree = SourceTree(open_source(source, "wallaby", {}), cache)
    assert tree.index.kept.size() == size  # nothing scanned, nothing kept again
    tree.close()


def test_a_grown_file_keeps_its_earlier_pieces_and_reads_right(tmp_path: Path) -> None:
    source = sample("wallaby", tmp_path, 20000)
    cache = tmp_path / "cache"
    tree = SourceTree(open_source(source, "wallaby", {}), cache)
    (before,) = tree.index.entries.values()
    size_before = tree.index.kept.size()
    # the producer appends: the log grows, written just now
    WallabyWriter(source / "events.log").write(
        [{"time": START_NS + i, "data": f"grown {i}"} for i in range(3000)]
    )
    tree.refresh(force=True)
    (after,) = tree.index.entries.values()
    assert len(after.chunks) > len(before.chunks)
    earlier = {k: v for k, v in before.kept.items() if k[1] < len(before.chunks) - 1}
    assert earlier and all(after.kept[k] == v for k, v in earlier.items())
    decoding = SourceTree(open_source(source, "wallaby", {}), tmp_path / "other", keep_limit=0)
    for path in indexed_views(tree):
        assert whole(tree, path) == whole(decoding, path)
    # only the old last chunk and the new ones were kept again: no second copy of the rest
    assert tree.index.kept.size() - size_before < size_before
    tree.close()
    decoding.close()


def test_a_cache_folder_copied_elsewhere_serves_its_pieces(tmp_path: Path) -> None:
    """`cp -a` of a cache (a backup restored, a CI cache): the copy's tree
    reads the kept pieces instead of decoding, and they are the decoded bytes."""
    import shutil

    source = sample("beats", tmp_path, 12000)
    first = SourceTree(open_source(source, "beats", {}), tmp_path / "cache")
    size = first.index.kept.size()
    first.close()
    shutil.copytree(tmp_path / "cache", tmp_path / "copy")
    tree = SourceTree(open_source(source, "beats", {}), tmp_path / "copy")
    decoding = SourceTree(open_source(source, "beats", {}), tmp_path / "other", keep_limit=0)
    views = indexed_views(tree)
    for path in views:
        assert whole(tree, path) == whole(decoding, path)
    assert tree.index.kept.served >= len(views)
    assert tree.index.kept.size() == size  # read back: nothing scanned and kept again
    tree.close()
    decoding.close()


def test_a_store_with_its_pieces_live_is_not_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live bytes are summed once per distinct piece (a wallaby chunk
    within one hour shares its piece with its bucket): a store just written
    is not mistaken for a dead one, whatever the threshold."""
    monkeypatch.setattr(index_module, "COMPACT_DEAD_BYTES", 0)
    source = sample("wallaby", tmp_path, 20000)
    cache = tmp_path / "cache"
    tree = SourceTree(open_source(source, "wallaby", {}), cache)
    store, size = tree.index.kept.file, tree.index.kept.size()
    assert size > 0
    tree.close()
    tree = SourceTree(open_source(source, "wallaby", {}), cache)
    assert (tree.index.kept.file, tree.index.kept.size()) == (store, size)  # the same file, as it was
    tree.close()


def test_a_store_mostly_dead_is_rewritten_with_its_live_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_module, "COMPACT_DEAD_BYTES", 0)
    source = sample("beats", tmp_path, 20000)
    cache = tmp_path / "cache"
    tree = SourceTree(open_source(source, "beats", {}), cache)
    full = tree.index.kept.size()
    segments = sorted(source.glob("*.seg"))
    assert len(segments) >= 2
    tree.close()
    for seg in segments[:-1]:  # the queue acknowledged all but its last segment
        seg.unlink()
    SourceTree(open_source(source, "beats", {}), cache).close()  # forgets them: their pieces die
    tree = SourceTree(open_source(source, "beats", {}), cache)  # finds the store mostly dead
    assert tree.index.kept.size() < full
    decoding = SourceTree(open_source(source, "beats", {}), tmp_path / "other", keep_limit=0)
    served = tree.index.kept.served
    for path in indexed_views(tree):
        assert whole(tree, path) == whole(decoding, path)
    assert tree.index.kept.served > served
    tree.close()
    decoding.close()


def test_an_index_of_the_older_shape_is_dropped_and_built_again(tmp_path: Path) -> None:
    """A cache written by the version that kept a row per piece (schema 5:
    a `pieces` table, chunks without their pieces) is rebuilt, not read."""
    source = sample("wallaby", tmp_path, 3000)
    cache = tmp_path / "cache"
    cache.mkdir()
    db = sqlite3.connect(cache / "index.sqlite3")
    db.executescript(
        "CREATE TABLE chunks (stream INTEGER NOT NULL, seq INTEGER NOT NULL, start INTEGER NOT NULL,"
        " end_ INTEGER NOT NULL, state BLOB NOT NULL, count INTEGER NOT NULL, tmin INTEGER, tmax INTEGER,"
        " PRIMARY KEY (stream, seq));"
        "CREATE TABLE pieces (stream INTEGER NOT NULL, view TEXT NOT NULL, seq INTEGER NOT NULL,"
        " length INTEGER NOT NULL, kept_at INTEGER, kept_length INTEGER, kept_check INTEGER,"
        " kept_file INTEGER, PRIMARY KEY (stream, view, seq));"
        "PRAGMA user_version=5;"
    )
    db.close()
    tree = SourceTree(open_source(source, "wallaby", {}), cache)
    decoding = SourceTree(open_source(source, "wallaby", {}), tmp_path / "other", keep_limit=0)
    assert whole(tree, RECORDS) == whole(decoding, RECORDS)
    tree.close()
    decoding.close()
    db = sqlite3.connect(cache / "index.sqlite3")
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "pieces" not in tables
    assert db.execute("PRAGMA user_version").fetchone()[0] == index_module.SCHEMA_VERSION
    db.close()


# -- real mounts -----------------------------------------------------------------


def test_a_second_mount_serves_the_kept_pieces_without_decoding(tmp_path: Path) -> None:
    """The native bytes are wiped behind the index's back (same size, inode
    and mtime): a mount that decoded would show errors, one that reads the
    kept pieces shows the records the first mount rendered."""
    source = sample("wallaby", tmp_path, 20000)
    cache = tmp_path / "cache"
    with mounted(source, cache_dir=cache) as mnt:
        views = sorted(p.relative_to(mnt) for p in (mnt / "events.log").glob("*.jsonl"))
        first = {view: (mnt / view).read_bytes() for view in views}
    assert any(first.values())
    log = source / "events.log"
    st = log.stat()
    with open(log, "r+b") as f:  # the header stays (the format is still detected)
        f.seek(64)
        f.write(b"\0" * (st.st_size - 64))
    os.utime(log, ns=(st.st_atime_ns, st.st_mtime_ns))
    with mounted(source, cache_dir=cache) as mnt:
        assert {view: (mnt / view).read_bytes() for view in views} == first
    # and with the store off, the same mount decodes: the wiped bytes show
    with mounted(source, "--rendered-cache", "off", cache_dir=cache) as mnt:
        assert (mnt / views[0]).read_bytes() != first[views[0]]


def test_a_damaged_store_is_decoded_around_in_a_mount(tmp_path: Path) -> None:
    source = sample("beats", tmp_path, 12000)
    cache = tmp_path / "cache"
    expected = fmtfs("cat", source, "segments/0.jsonl", "--cache-dir", tmp_path / "plain").stdout
    with mounted(source, cache_dir=cache) as mnt:
        assert (mnt / "segments/0.jsonl").read_bytes() == expected
    (store,) = (cache / "rendered").glob("*.lz4")
    data = bytearray(store.read_bytes())
    for at in range(0, len(data), 97):
        data[at] ^= 0x5A
    store.write_bytes(bytes(data))
    with mounted(source, cache_dir=cache) as mnt:
        assert (mnt / "segments/0.jsonl").read_bytes() == expected


def test_rendered_cache_off_writes_no_store(tmp_path: Path) -> None:
    source = sample("kestrel", tmp_path, 3000)
    fmtfs("index", source, "--cache-dir", tmp_path / "cache", "--rendered-cache", "off", "-q")
    assert not list((tmp_path / "cache").glob("rendered/*.lz4"))
    fmtfs("index", source, "--cache-dir", tmp_path / "cache2", "-q")
    (store,) = (tmp_path / "cache2").glob("rendered/*.lz4")
    assert store.stat().st_size > 0
    assert store.stat().st_mode & 0o077 == 0  # decoded records: the owner's alone


def test_concurrent_readers_of_one_kept_piece_read_it_once(tmp_path: Path) -> None:
    source = sample("wallaby", tmp_path, 20000)
    SourceTree(open_source(source, "wallaby", {}), tmp_path / "cache").close()
    tree = SourceTree(open_source(source, "wallaby", {}), tmp_path / "cache")
    view = tree.file("events.log/records.jsonl")
    assert view.entry.views["events.log/records.jsonl"].ends[0] >= 8 * 4096  # all reads in piece 0
    store = tree.index.kept
    reads: list[Kept] = []
    real_get = store.get

    def slow_get(kept: Kept) -> bytes | None:
        reads.append(kept)
        time.sleep(0.2)  # long enough for every reader to ask for the piece meanwhile
        return real_get(kept)

    store.get = slow_get
    results = reads_at_once(view, 8)
    decoding = SourceTree(open_source(source, "wallaby", {}), tmp_path / "other", keep_limit=0)
    expected = whole(decoding, "events.log/records.jsonl")
    assert sorted(results) == sorted(expected[i * 4096 : (i + 1) * 4096] for i in range(8))
    assert len(reads) == 1
    tree.close()
    decoding.close()


def test_a_full_disk_keeps_nothing_and_fails_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A real file system of 64 KiB (tmpfs): keeping a piece past its space
    is skipped, said once in the log, and what was kept still reads."""
    disk = tmp_path / "small"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True)
    store = KeptPieces(disk / "rendered" / "x.lz4", 1 << 30)
    try:
        small = store.keep({"a.jsonl": b'{"n":1}\n' * 100})
        with caplog.at_level(logging.WARNING, logger="fmtfs"):
            assert store.keep({"b.jsonl": os.urandom(256 << 10)}) == {}  # incompressible: ENOSPC
            assert store.keep({"c.jsonl": os.urandom(256 << 10)}) == {}
        assert caplog.text.count("cannot keep rendered pieces") == 1
        assert store.get(small["a.jsonl"]) == b'{"n":1}\n' * 100
    finally:
        store.close()
        subprocess.run(["umount", "-l", str(disk)], check=True)


def test_a_mount_of_kept_pieces_starts_decode_workers_only_when_a_piece_needs_them(tmp_path: Path) -> None:
    source = sample("wallaby", tmp_path, 20000)
    cache = tmp_path / "cache"
    fmtfs("index", source, "--cache-dir", cache, "--no-parquet", "-q")
    with mounted(source, cache_dir=cache) as mnt:
        assert (mnt / RECORDS).read_bytes() == fmtfs("cat", source, RECORDS, "--cache-dir", cache).stdout
        assert not decode_workers(mnt)  # nothing decoded
        # the producer appends: the new chunks are decoded (the workers start then)
        WallabyWriter(source / "events.log").write(
            [{"time": START_NS + i, "data": f"grown {i}"} for i in range(20000)]
        )
        deadline = time.monotonic() + 10
        grown = (mnt / RECORDS).read_bytes()
        while b"grown 19999" not in grown and time.monotonic() < deadline:
            time.sleep(0.2)
            grown = (mnt / RECORDS).read_bytes()
        assert grown == fmtfs("cat", source, RECORDS, "--cache-dir", tmp_path / "other").stdout


def test_a_mount_that_will_decode_forks_its_workers_before_it_serves(tmp_path: Path) -> None:
    # forked, they have fmtfs imported: no spawned worker takes both cores
    # for a second beside the mount's first `ls`, or keeps its first reader
    # decoding alone
    source = sample("wallaby", tmp_path, 20000)
    with mounted(source, "--rendered-cache", "off") as mnt:
        workers = decode_workers(mnt)
        assert len(workers) >= 2 and not [argv for argv in workers.values() if "spawn_main" in argv]
        assert (mnt / RECORDS).read_bytes() == fmtfs(
            "cat", source, RECORDS, "--cache-dir", tmp_path / "c"
        ).stdout
        assert decode_workers(mnt) == workers  # they served it
