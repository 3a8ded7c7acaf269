"""Rendered pieces the LRU evicts are kept on disk (fmtfs.spill): reading
them again is a read of the scratch file, not a chunk decode."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from fmtfs.formats import open_source
from fmtfs.samples.wallaby import generate
from fmtfs.spill import SpillAppender, Spilled, SpilledPieces
from fmtfs.treefiles import IndexedFile
from fmtfs.views import SourceTree
from tests.mounting import fmtfs

RECORDS = "events.log/records.jsonl"
STEP = 64 << 10  # reads of a size the kernel sends


def _read_all(view: IndexedFile) -> bytes:
    return b"".join(view.read(offset, STEP) for offset in range(0, view.size(), STEP))


def test_pieces_the_lru_evicts_are_read_back_from_disk(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    generate(source, 20_000)
    # nothing kept by the scan: every piece is decoded, and spilled when evicted
    tree = SourceTree(open_source(source, None, {}), tmp_path / "cache", keep_limit=0)
    tree.spill_evicted_pieces()
    rendered = tree.index.reader.rendered
    rendered.capacity = 1  # the LRU keeps one piece: every other goes to disk
    view = tree.file(RECORDS)
    assert isinstance(view, IndexedFile)
    chunks = len(view.entry.views[RECORDS].seqs)
    assert chunks >= 4
    first = _read_all(view)
    spill = rendered.spill
    assert spill is not None
    after_first = spill.served
    second = _read_all(view)
    tree.close()
    expected = fmtfs("cat", source, RECORDS, "--cache-dir", tmp_path / "cli").stdout
    assert first == second == expected
    # every piece of the second pass but the one the LRU held came from disk
    assert spill.served - after_first >= chunks - 1


def test_pieces_read_back_from_the_kept_store_are_dropped_not_spilled(tmp_path: Path) -> None:
    """A kept piece the LRU evicts is not written to the scratch file: it is
    decompressed again if asked for (spilling them wrote every piece of a
    1 GB `cat` to disk: 1.9 s -> 8.9 s)."""
    source = tmp_path / "src"
    source.mkdir()
    generate(source, 20_000)
    tree = SourceTree(open_source(source, None, {}), tmp_path / "cache")
    tree.spill_evicted_pieces()
    rendered = tree.index.reader.rendered
    rendered.capacity = 1
    view = tree.file(RECORDS)
    assert isinstance(view, IndexedFile)
    kept = len(view.entry.kept)
    assert kept >= 3  # the scan kept the pieces: they are read back, not decoded
    first, second = _read_all(view), _read_all(view)
    spill = rendered.spill
    assert spill is not None
    spilled = os.fstat(spill._file.fileno()).st_size
    decoded = sum(  # what the pieces not kept weigh (of every view a decode renders): only those spill
        end - start
        for name, pieces in view.entry.views.items()
        for seq, start, end in zip(pieces.seqs, [0, *pieces.ends], pieces.ends, strict=False)
        if (name, seq) not in view.entry.kept
    )
    tree.close()
    assert first == second == fmtfs("cat", source, RECORDS, "--cache-dir", tmp_path / "cli").stdout
    assert spilled <= decoded < view.size() / 2
    assert len(rendered.unspilled) <= 1  # the LRU's one piece, if kept


def test_the_scratch_file_keeps_no_more_than_its_limit(tmp_path: Path) -> None:
    spill = SpilledPieces(tmp_path, limit=10)
    spill.put(("s", 1, 0, 6, "v"), b"abcdef")
    spill.put(("s", 1, 6, 12, "v"), b"ghijkl")  # past the limit: not kept
    assert spill.get(("s", 1, 0, 6, "v")) == b"abcdef"
    assert spill.get(("s", 1, 0, 6, "v"), 2, 5) == b"cde"  # only what a request wants
    assert spill.get(("s", 1, 0, 6, "v"), 4, 99) == b"ef"
    assert ("s", 1, 6, 12, "v") not in spill and spill.get(("s", 1, 6, 12, "v")) is None
    spill.drop_stream("s")
    assert spill.get(("s", 1, 0, 6, "v")) is None
    assert list(tmp_path.iterdir()) == []  # unlinked from the start
    spill.close()


def _dropped_from_the_page_cache(spill: SpilledPieces, key: tuple) -> bool:
    """Ask the kernel to drop the spill file's pages until get_cached stops
    finding them. DONTNEED is advice: a page still in a per-CPU LRU batch or
    under writeback stays, so one call is not always enough (a CI run met
    that). A get_cached that ignored the cache would never return None."""
    fd = spill._file.fileno()
    for _ in range(50):
        os.fsync(fd)  # clean pages can be dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if spill.get_cached(key, 0, 4096) is None:
            return True
        time.sleep(0.02)
    return False


def test_a_piece_whose_pages_are_cached_is_read_without_waiting_and_one_on_disk_is_not(
    tmp_path: Path,
) -> None:
    spill = SpilledPieces(tmp_path)
    key = ("s", 1, 0, 1 << 20, "v")
    piece = bytes(range(256)) * 4096  # 1 MiB
    spill.put(key, piece)
    assert spill.get_cached(key, 4096, 12288) == piece[4096:12288]  # just written: in the page cache
    assert spill.get_cached(key, (1 << 20) - 10, 1 << 21) == piece[-10:]
    assert spill.get_cached(("s", 1, 9, 10, "v"), 0, 1) is None  # not spilled
    assert _dropped_from_the_page_cache(spill, key)  # on disk only: a thread reads it
    assert spill.get(key, 0, 4096) == piece[:4096]  # which brings it into the cache
    assert spill.get_cached(key, 0, 4096) == piece[:4096]
    spill.close()


def test_a_reread_finds_evicted_pieces_without_a_thread(tmp_path: Path) -> None:
    """ChunkReader.read_in_memory (what the FUSE loop answers itself) serves a
    piece the LRU evicted to the spill file while its pages are cached."""
    source = tmp_path / "src"
    source.mkdir()
    generate(source, 20_000)
    # nothing kept by the scan: every piece is decoded, and spilled when evicted
    tree = SourceTree(open_source(source, None, {}), tmp_path / "cache", keep_limit=0)
    tree.spill_evicted_pieces()
    tree.index.reader.rendered.capacity = 1
    view = tree.file(RECORDS)
    assert isinstance(view, IndexedFile)
    first = _read_all(view)
    second = b"".join(view.read_in_memory(offset, STEP) or b"?" for offset in range(0, view.size(), STEP))
    tree.close()
    assert second == first


def test_pieces_another_process_appends_never_overlap_this_ones(tmp_path: Path) -> None:
    """A decode worker appends to the mount's scratch file by its shared
    path (SpillAppender) while the mount appends its own evicted pieces:
    each lands whole where its writer was told."""
    spill = SpilledPieces(tmp_path)
    spill.put(("s", 1, 0, 3, "v"), b"own")
    appended = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from fmtfs.spill import SpillAppender;"
            "a = SpillAppender(sys.argv[1], int(sys.argv[2]));"
            "print(*a.append(b'worker piece'))",
            *map(str, spill.for_workers),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    where = Spilled(*map(int, appended))
    spill.put(("s", 1, 3, 6, "v"), b"next")
    spill.record(("s", 1, 6, 9, "v"), where)
    assert where == Spilled(3, 12)
    assert spill.get(("s", 1, 0, 3, "v")) == b"own"
    assert spill.get(("s", 1, 6, 9, "v")) == b"worker piece"
    assert spill.get(("s", 1, 3, 6, "v")) == b"next"
    assert spill.read(where, 7) == b"piece"
    spill.close()


def test_an_appender_at_the_limit_keeps_nothing(tmp_path: Path) -> None:
    spill = SpilledPieces(tmp_path, limit=8)
    appender = SpillAppender(*spill.for_workers)
    assert appender.append(b"12345") == Spilled(0, 5)
    assert appender.append(b"6789") is None  # 9 bytes > 8: the caller keeps them
    appender.close()
    spill.close()


def test_a_mounts_workers_send_back_where_their_pieces_went_not_the_bytes(tmp_path: Path) -> None:
    """Pieces decoded by the mount's workers are read from the spill file:
    none passes through the in-memory LRU, and the bytes are `fmtfs cat`'s."""
    source = tmp_path / "src"
    source.mkdir()
    generate(source, 40_000)
    tree = SourceTree(open_source(source, None, {}), tmp_path / "cache", keep_limit=0)
    tree.decode_in_workers()
    reader = tree.index.reader
    assert reader.pool is not None
    reader.pool.wait_ready()  # else the first chunk is decoded in process
    view = tree.file(RECORDS)
    assert isinstance(view, IndexedFile)
    try:
        read = _read_all(view)
        pieces = view.entry.views[RECORDS]
        keys = [(*reader._chunk_key(view.entry, seq), RECORDS) for seq in pieces.seqs]
        assert len(keys) >= 4
        assert reader.rendered.spill is not None
        assert all(key in reader.rendered.spill for key in keys)
        assert not any(reader.rendered.in_memory(key) for key in keys)
    finally:
        tree.close()
    assert read == fmtfs("cat", source, RECORDS, "--cache-dir", tmp_path / "cli").stdout
