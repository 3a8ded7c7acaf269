"""The read path: kept page cache that still sees growth, immutable index
snapshots, one decode per chunk for concurrent readers, listings, the
look at the source a warm `cat` pays for."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fmtfs import views
from fmtfs.formats import open_source
from fmtfs.formats.wallaby import WallabyWriter
from fmtfs.samples.wallaby import START_NS, generate
from fmtfs.snapshot import source_snapshot
from fmtfs.sourcewatch import SourceWatch
from fmtfs.treefiles import IndexedFile
from fmtfs.views import LOOK_ON_CALLER_MAX, SourceTree
from tests.mounting import bytes_served, fmtfs, mounted, unmount

RECORDS = "events.log/records.jsonl"


def _wallaby(folder: Path, records: int) -> Path:
    folder.mkdir()
    return generate(folder, records)


@pytest.fixture()
def source(tmp_path: Path) -> Path:
    return _wallaby(tmp_path / "src", 3_000)  # one chunk


def test_a_reread_after_growth_shows_the_new_bytes_not_the_kept_pages(source: Path, tmp_path: Path) -> None:
    with mounted(source) as mnt:
        view = mnt / RECORDS
        first = view.read_bytes()
        assert view.read_bytes() == first  # served again (from the kept page cache)
        WallabyWriter(source / "events.log").write([{"time": START_NS, "data": "grown"}])
        deadline = time.monotonic() + 5
        while view.stat().st_size == len(first) and time.monotonic() < deadline:
            time.sleep(0.1)
        again = view.read_bytes()
        expected = fmtfs("cat", source, RECORDS, "--cache-dir", tmp_path / "cli").stdout
        assert again == expected
        assert again.startswith(first) and b'"grown"' in again[len(first) :]


def test_a_second_read_of_an_unchanged_view_is_served_by_the_kernel(source: Path, tmp_path: Path) -> None:
    log_file = tmp_path / "mount.log"
    with mounted(source, "--debug", "--log-file", log_file) as mnt:
        view = mnt / RECORDS
        first = view.read_bytes()
        served_once = bytes_served(log_file, RECORDS)
        time.sleep(1.5)  # past the attribute timeout: the kernel asks for them again
        assert view.read_bytes() == first
        served_twice = bytes_served(log_file, RECORDS)
    assert served_once >= len(first)
    # the kernel may drop a few kept pages on its own; a view re-rendered
    # (keep_cache off, or attributes that change) would be served whole again
    assert served_twice - served_once < len(first) // 10
    assert "invalidating" not in log_file.read_text()


def test_an_entry_readers_hold_is_never_changed_by_a_refresh(source: Path, tmp_path: Path) -> None:
    tree = SourceTree(open_source(source, None, {}), tmp_path / "cache")
    view = tree.file(RECORDS)
    assert isinstance(view, IndexedFile)
    held = view.entry
    chunks, size = list(held.chunks), view.size()
    before = view.read(0, size)
    WallabyWriter(source / "events.log").write([{"time": START_NS, "data": "grown"}])
    assert RECORDS in tree.refresh(force=True)
    assert held.chunks == chunks and view.size() == size  # the old snapshot is untouched
    assert view.read(0, size + 100) == before
    grown = tree.file(RECORDS)
    assert grown.size() > size and grown.read(0, grown.size()).startswith(before)


def test_growth_changes_the_views_it_reaches_and_no_other(tmp_path: Path) -> None:
    """A record appended to a log of several chunks and hundreds of hour
    buckets, timed in its first hour: the records view and that bucket
    change (their identity, what refresh() reports); every other bucket
    keeps its identity, so its Parquet twin and kept pages stay good; the
    entry readers hold keeps its pieces (the bucket's grew in a copy)."""
    source = _wallaby(tmp_path / "src", 20_000)
    tree = SourceTree(open_source(source, None, {}), tmp_path / "cache")
    held = tree.file(RECORDS).entry
    assert len(held.chunks) > 2
    buckets = sorted(p for p in held.views if p != RECORDS)
    assert len(buckets) > 100
    identities = {p: tree.file(p).identity() for p in [RECORDS, *buckets]}
    pieces = {p: (list(v.seqs), list(v.ends)) for p, v in held.views.items()}
    WallabyWriter(source / "events.log").write([{"time": START_NS, "data": "late"}])
    changed = tree.refresh(force=True)
    first = buckets[0]
    assert changed & set(identities) == {RECORDS, first}
    assert {p for p, was in identities.items() if tree.file(p).identity() != was} == {RECORDS, first}
    assert {p: (v.seqs, v.ends) for p, v in held.views.items()} == pieces
    assert tree.file(first).read(0, tree.file(first).size()).endswith(b'"data":"late"}\n')


def reads_at_once(view, readers: int) -> list[bytes]:
    """The first `readers` 4 KiB blocks of `view`, each read by a thread of
    its own, all let go at once."""
    gate = threading.Barrier(readers)
    results: list[bytes] = []

    def read(offset: int) -> None:
        gate.wait()
        results.append(view.read(offset, 4096))

    threads = [threading.Thread(target=read, args=(i * 4096,)) for i in range(readers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_concurrent_readers_of_one_chunk_decode_it_once(source: Path, tmp_path: Path) -> None:
    tree = SourceTree(open_source(source, None, {}), tmp_path / "cache")
    view = tree.file(RECORDS)
    stream = view.entry.stream
    decodes: list[int] = []
    real_render = stream.render  # a wallaby chunk is read by rendering its lines

    def counting_render(chunk, view=None):
        decodes.append(chunk.start)
        time.sleep(0.2)  # long enough for every reader to ask for the chunk meanwhile
        return real_render(chunk, view)

    stream.render = counting_render
    results = reads_at_once(view, 8)
    whole = fmtfs("cat", source, RECORDS, "--cache-dir", tmp_path / "cli").stdout
    assert sorted(results) == sorted(whole[i * 4096 : (i + 1) * 4096] for i in range(8))
    first_chunk = view.entry.chunks[0]
    assert view.entry.views[RECORDS].ends[0] >= 8 * 4096  # all eight reads hit chunk 0
    assert decodes == [first_chunk.start]


def test_a_worker_that_finishes_before_its_callback_is_added_does_not_hang_the_read(
    source: Path, tmp_path: Path
) -> None:
    """A decode worker can finish before the index registers its completion
    callback; the callback then runs at once in the reading thread, which
    must not hold the lock the callback takes (a hang seen under Spark)."""
    tree = SourceTree(open_source(source, None, {}), tmp_path / "cache")
    tree.decode_in_workers()
    pool = tree.index.reader.pool
    pool.wait_ready()  # a pool still starting is not used: reads decode in process meanwhile
    real_submit = pool.submit

    def submit_and_finish(*args):
        future = real_submit(*args)
        future.result()  # done before the index sees it: the race, every time
        return future

    pool.submit = submit_and_finish
    results: list[bytes] = []
    reader = threading.Thread(target=lambda: results.append(tree.read(RECORDS, 0, 1 << 20)), daemon=True)
    try:
        reader.start()
        reader.join(120)  # a deadlock never returns; a working read takes well under a second
        assert not reader.is_alive(), "the read hung"
    finally:
        tree.close()
    whole = fmtfs("cat", source, RECORDS, "--cache-dir", tmp_path / "cli").stdout
    assert results == [whole[: 1 << 20]]


@pytest.fixture()
def many_chunks(tmp_path: Path) -> Path:
    return _wallaby(tmp_path / "big", 40_000)


def test_a_read_of_rendered_bytes_needs_no_decode_and_equals_read(many_chunks: Path, tmp_path: Path) -> None:
    """The FUSE loop answers from memory only what is rendered already
    (read_in_memory); anything else is None, for a thread to render."""
    source = many_chunks
    tree = SourceTree(open_source(source, None, {}), tmp_path / "cache")
    view = tree.file(RECORDS)
    assert isinstance(view, IndexedFile)
    ends = view.entry.views[RECORDS].ends
    assert len(ends) >= 2
    across = (ends[0] - 100, 4096)  # the end of chunk 0 and the start of chunk 1
    assert tree.read_in_memory(RECORDS, 0, 4096) is None  # nothing rendered yet
    first = tree.read(RECORDS, 0, 4096)
    assert tree.read_in_memory(RECORDS, 0, 4096) == first
    assert tree.read_in_memory(RECORDS, *across) is None  # chunk 1 is not rendered
    joined = tree.read(RECORDS, *across)
    assert tree.read_in_memory(RECORDS, *across) == joined
    assert tree.read_in_memory(RECORDS, view.size(), 4096) == b""
    whole = fmtfs("cat", source, RECORDS, "--cache-dir", tmp_path / "cli").stdout
    assert first == whole[:4096] and joined == whole[across[0] : across[0] + 4096]
    tree.close()


def test_a_reader_going_forward_keeps_the_workers_decoding_ahead(many_chunks: Path, tmp_path: Path) -> None:
    """Reading a rendered chunk sends the next few to the workers, so a
    sequential reader never waits for a chunk it could have had decoded.
    (No rendered pieces kept: kept ones are read back, never decoded.)"""
    tree = SourceTree(open_source(many_chunks, None, {}), tmp_path / "cache", keep_limit=0)
    tree.decode_in_workers()
    pool = tree.index.reader.pool
    pool.wait_ready()
    view = tree.file(RECORDS)
    assert isinstance(view, IndexedFile)
    reader, entry = tree.index.reader, view.entry
    seqs = entry.views[RECORDS].seqs
    ahead = 2 * pool.workers
    assert len(seqs) > ahead + 2
    try:
        tree.read(RECORDS, 0, 4096)  # a miss: chunks 0 .. ahead-1 go to the workers
        for future in list(reader._pending.values()):
            future.result()
        last_ahead = entry.chunks[seqs[ahead]]
        key = (entry.stream.name, entry.identity.inode, last_ahead.start, last_ahead.end, RECORDS)
        assert key not in reader.rendered  # not asked for yet
        # a read of chunk 1, rendered already, sends the chunks after it
        start_of_1 = entry.views[RECORDS].ends[0]
        assert tree.read_in_memory(RECORDS, start_of_1, 4096) is not None
        for future in list(reader._pending.values()):
            future.result()
        assert key in reader.rendered
    finally:
        tree.close()


def test_a_whole_file_view_is_read_from_memory_once_rendered() -> None:
    from fmtfs.treefiles import BytesFile

    renders: list[int] = []
    view = BytesFile(lambda: renders.append(1) or b'{"a":1}\n{"a":2}\n', "id")
    assert view.read_in_memory(0, 4) is None and not renders  # rendering is a thread's job
    assert view.read(8, 100) == b'{"a":2}\n'
    assert view.read_in_memory(1, 5) == b'"a":1' and view.read_in_memory(99, 5) == b""
    assert renders == [1]


def test_reads_while_the_workers_start_and_after_give_the_views_bytes(
    many_chunks: Path, tmp_path: Path
) -> None:
    """Until its workers are up a mount's reader decodes in process (the
    reader's view only) and sends the next chunks to the pool: the bytes are
    the same whichever way each chunk went."""
    tree = SourceTree(open_source(many_chunks, None, {}), tmp_path / "cache")
    tree.spill_evicted_pieces()
    tree.decode_in_workers()  # not waited for
    view = tree.file(RECORDS)
    try:
        first = b"".join(tree.read(RECORDS, offset, 128 << 10) for offset in range(0, view.size(), 128 << 10))
        tree.index.reader.pool.wait_ready()
        second = b"".join(tree.read(RECORDS, offset, 1 << 20) for offset in range(0, view.size(), 1 << 20))
    finally:
        tree.close()
    expected = fmtfs("cat", many_chunks, RECORDS, "--cache-dir", tmp_path / "cli").stdout
    assert first == second == expected


def test_a_mount_reads_ahead_in_requests_of_a_mebibyte(tmp_path: Path) -> None:
    """fmtfs.daemon widens the kernel's read-ahead (128 KiB) for its mount:
    a sequential read arrives in 1 MiB requests, an eighth as many.  The
    mount point has a space."""
    from fmtfs.daemon import READ_AHEAD_KB

    source = _wallaby(tmp_path / "src", 40_000)
    mountpoint = tmp_path / "a mount"
    mountpoint.mkdir()
    log_file = tmp_path / "mount.log"
    fmtfs("mount", source, mountpoint, "--cache-dir", tmp_path / "cache", "--debug", "--log-file", log_file)
    try:
        device = os.stat(mountpoint).st_dev
        setting = Path(f"/sys/class/bdi/{os.major(device)}:{os.minor(device)}/read_ahead_kb")
        assert int(setting.read_text()) == READ_AHEAD_KB
        data = (mountpoint / RECORDS).read_bytes()
    finally:
        unmount(mountpoint)
    assert len(data) > 4 * READ_AHEAD_KB * 1024
    assert data == fmtfs("cat", source, RECORDS, "--cache-dir", tmp_path / "cli").stdout
    sizes = [
        int(line.rsplit(", ", 1)[1].split()[0])
        for line in log_file.read_text().splitlines()
        if " read " in line
    ]
    assert max(sizes) == READ_AHEAD_KB * 1024


def test_mount_tables_show_the_source(tmp_path: Path) -> None:
    """`mount`, `df` and findmnt name the source folder (fsname), commas
    and spaces in its path included."""
    source = _wallaby(tmp_path / "logs, spring 2026", 100)
    with mounted(source) as mnt:
        fields = next(
            line.split() for line in Path("/proc/self/mountinfo").read_text().splitlines() if str(mnt) in line
        )
        shown = fields[fields.index("-") + 2]  # after the separator: type, then source
        assert fields[fields.index("-") + 1] == "fuse.fmtfs"
        assert shown.replace("\\040", " ") == str(source)
        assert (mnt / RECORDS).stat().st_size > 0


# -- the look at the source a warm `cat` pays for ------------------------------
# The page cache serves a second `cat`'s bytes; what is left is each open's
# requests.  The first one after a pause looks at the source (a refresh); the
# look is taken on the FUSE loop when it is cheap (SourceTree.unchanged), not
# in a worker thread, and must still leave every change it sees to refresh().


@pytest.fixture()
def tree(source: Path, tmp_path: Path) -> Iterator[SourceTree]:
    tree = SourceTree(open_source(source, "wallaby", {}), tmp_path / "cache")
    yield tree
    tree.close()


@pytest.fixture()
def looks(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The looks at the source (source_snapshot calls) made during a test."""
    made: list[Path] = []
    monkeypatch.setattr(views, "source_snapshot", lambda s: made.append(s) or source_snapshot(s))
    return made


def _make_due(tree: SourceTree) -> None:
    tree.checked = float("-inf")  # as if the rate limit's interval had passed
    assert tree.due()


def test_a_look_at_an_unchanged_source_answers_and_rate_limits_again(tree: SourceTree) -> None:
    _make_due(tree)
    generation = tree.generation
    assert tree.unchanged()
    assert not tree.due()  # checked now: the next opens skip the look
    assert tree.generation == generation
    assert 0 < tree.look_cost < 1


def test_a_look_that_finds_growth_leaves_it_to_refresh(tree: SourceTree, source: Path) -> None:
    size = tree.size(RECORDS)
    WallabyWriter(source / "events.log").write([{"time": START_NS, "data": "grown"}])
    _make_due(tree)
    assert not tree.unchanged()
    assert tree.due()  # the change is not swallowed: the refresh still looks
    assert RECORDS in tree.refresh()
    assert tree.size(RECORDS) > size


def test_a_look_never_waits_for_a_tree_another_thread_holds(tree: SourceTree) -> None:
    _make_due(tree)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with tree.lock:
            held.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        held.wait()
        assert not tree.unchanged()  # a worker thread's refresh waits for it instead
        assert tree.due()
    finally:
        release.set()
        holder.join()
    assert tree.unchanged()


def test_a_costly_look_is_left_to_a_worker_thread(tree: SourceTree) -> None:
    _make_due(tree)
    # a source of thousands of native files: far above what a look at this
    # one costs, even on a loaded machine (a CI run's look took 0.6 ms)
    costly = LOOK_ON_CALLER_MAX * 5000  # 1 s
    tree.look_cost = costly
    assert not tree.unchanged()
    assert tree.due() and tree.look_cost == costly  # not looked at
    assert tree.refresh() == set()
    assert tree.look_cost < costly  # the worker's look measured itself


def test_reads_after_pauses_give_the_views_bytes_and_see_growth(source: Path, tmp_path: Path) -> None:
    """Over a mount: every open after a pause is due a look (taken on the
    loop); the bytes stay those of `fmtfs cat`, and an append to the native
    file reaches the next reader."""
    cli = ("--cache-dir", tmp_path / "cli")
    with mounted(source) as mnt:
        view = mnt / RECORDS
        first = view.read_bytes()
        assert first == fmtfs("cat", source, RECORDS, *cli).stdout
        for _ in range(3):
            time.sleep(0.1)  # past the 50 ms rate limit
            assert view.read_bytes() == first
        WallabyWriter(source / "events.log").write([{"time": START_NS, "data": "grown"}])
        expected = fmtfs("cat", source, RECORDS, *cli).stdout
        for _ in range(50):  # the look at an open, or the poller's second, sees it
            again = view.read_bytes()
            if again != first:
                break
            time.sleep(0.1)
        assert again == expected
        assert again.startswith(first) and b'"grown"' in again[len(first) :]


# -- the kernel's word on the source (fmtfs.sourcewatch) ----------------------


def test_a_watch_tells_each_change_to_a_source_folder_once_settled(tmp_path: Path) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    watch = SourceWatch.of(folder)
    assert watch is not None
    try:
        assert watch.changed()  # nothing looked at yet
        native = folder / "0.seg"
        changes = (
            lambda: native.write_bytes(b"new"),
            lambda: native.open("ab").write(b"more"),
            lambda: native.chmod(0o600),
            lambda: native.rename(folder / "1.seg"),
            lambda: (folder / "1.seg").unlink(),
        )
        for change in changes:
            watch.settle()
            assert not watch.changed()
            change()
            assert watch.changed() and watch.changed()  # until the next look settles it
        watch.settle()
        watch.mark_changed()  # a look found a change its caller did not apply
        assert watch.changed()
        watch.applied()  # applied: quiet again
        assert not watch.changed()
        watch.mark_changed()
        (folder / "2.seg").write_bytes(b"while it was applied")
        watch.applied()
        assert watch.changed()  # a change after the look began is still news
        (folder / "2.seg").unlink()
        folder.rmdir()
        watch.settle()
        assert watch.changed()  # the folder is gone: no more news, never quiet
    finally:
        watch.close()


def test_no_watch_where_the_kernel_gives_none(tmp_path: Path) -> None:
    assert SourceWatch.of(tmp_path / "missing") is None


def test_a_quiet_watched_source_needs_no_look_and_a_change_is_applied(
    tree: SourceTree, source: Path, looks: list[Path]
) -> None:
    tree.watch_source()
    _make_due(tree)
    assert tree.unchanged() and len(looks) == 1  # the first look settles the watch
    for _ in range(3):
        _make_due(tree)
        assert tree.unchanged()
        assert not tree.due()  # rate-limited again as a look would be
    assert len(looks) == 1  # no stat of the native files while quiet
    size = tree.size(RECORDS)
    WallabyWriter(source / "events.log").write([{"time": START_NS, "data": "grown"}])
    _make_due(tree)
    assert not tree.unchanged() and len(looks) == 2  # told, looked, left to refresh
    assert RECORDS in tree.refresh()  # which looks again and applies it
    assert tree.size(RECORDS) > size
    tree.wrote()  # a write through the mount: looked at whatever the watch says
    assert tree.due() and tree.unchanged()
    assert len(looks) == 4


def test_the_pollers_look_at_a_quiet_watched_source_is_rate_limited(
    tree: SourceTree, source: Path, looks: list[Path]
) -> None:
    assert tree.poll() == set() and len(looks) == 1  # no watch: every poll looks
    tree.watch_source()
    tree.poll()  # the watch starts as "changed": looked, and settled
    assert len(looks) == 2
    tree.look_cost = 1.0  # a source of many files: while quiet, a look every 10 s at most
    assert tree.poll() == set() and tree.poll() == set()
    assert len(looks) == 2
    WallabyWriter(source / "events.log").write([{"time": START_NS, "data": "grown"}])
    assert RECORDS in tree.poll()  # the kernel told: looked at once
    tree.poll()  # the change it applied is looked at once more, then quiet again
    tree.look_cost = 1.0
    assert tree.poll() == set() and len(looks) == 4
    tree.looked -= views.QUIET_CHECK_MAX_INTERVAL  # what inotify cannot see is looked for still
    tree.poll()
    assert len(looks) == 5
    tree.look_cost = 1.0
    tree.wrote()  # a write through the mount: looked at whatever the watch says
    tree.poll()
    assert len(looks) == 6


def test_a_costly_quiet_look_waits_while_the_mount_is_busy(
    tree: SourceTree, source: Path, looks: list[Path]
) -> None:
    tree.watch_source()
    tree.poll()  # settles the watch
    assert len(looks) == 1
    tree.look_cost = 0.05  # thousands of files: idle, a look every 2.5 s
    tree.looked -= 3.0
    tree.used()  # a listing going on: its lookups need the GIL the look's stats would hold
    assert tree.poll() == set() and len(looks) == 1
    tree.last_use -= views.BUSY_SECONDS  # the listing is over
    tree.poll()
    assert len(looks) == 2
    tree.looked -= views.QUIET_CHECK_MAX_INTERVAL  # busy for that long: looked at still
    tree.used()
    tree.poll()
    assert len(looks) == 3
    tree.look_cost = views.LOOK_ON_CALLER_MAX / 2  # a few files (gvfs): looked at, busy or not
    tree.looked -= 1.0
    tree.used()
    tree.poll()
    assert len(looks) == 4
    WallabyWriter(source / "events.log").write([{"time": START_NS, "data": "grown"}])
    tree.look_cost, tree.looked = 0.05, time.monotonic()
    tree.used()
    assert RECORDS in tree.poll()  # a change the kernel told of: looked at at once, busy or not


def test_a_mounts_watch_is_settled_by_its_first_look(source: Path, tmp_path: Path) -> None:
    """The mount's watch starts before the tree's first look, so the
    poller's first look waits as a quiet source's does (a watch started
    after it answered "changed" until looked at again)."""
    tree = SourceTree(open_source(source, "wallaby", {}), tmp_path / "cache", watch=True)
    try:
        assert tree.watch is not None and not tree.watch.changed()
        tree.look_cost = 1.0
        generation, looked = tree.generation, tree.looked
        assert tree.poll() == set()
        assert tree.looked == looked and tree.generation == generation  # no look
    finally:
        tree.close()
