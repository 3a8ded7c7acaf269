"""The chunk index scanned in decode worker processes (Index.update_all with
a DecodePool, as `fmtfs mount` and `fmtfs index` do) is the one a serial
scan builds: same chunks, views, problems, the same progress, the same rows
in SQLite; a scan a worker cannot do is done in process."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fmtfs.decoders import DecodePool
from fmtfs.entries import StreamEntry
from fmtfs.formats import open_source
from fmtfs.formats.base import Format, Stream
from fmtfs.formats.beats.stream import SegmentStream
from fmtfs.formats.wallaby import WallabyWriter
from fmtfs.index import MIN_RANGE_BYTES, Index
from fmtfs.samples import beats, proio, wallaby
from fmtfs.views import SourceTree
from tests.mounting import fmtfs, mounted


def table(entry: StreamEntry) -> tuple:
    """Everything the index knows of a stream."""
    chunks = [(c.start, c.end, c.state, c.count, c.times) for c in entry.chunks]
    views = {view: (p.seqs, p.ends) for view, p in sorted(entry.views.items())}
    return entry.stream.name, chunks, views, entry.problems, entry.identity


class Counted:
    """A Progress hook adding up what it is told."""

    def __init__(self) -> None:
        self.native = self.records = self.calls = 0

    def __call__(self, native: int, records: int) -> None:
        self.native += native
        self.records += records
        self.calls += 1


def index(cache: Path, streams: list[Stream], pool: DecodePool | None = None) -> tuple[list[tuple], Counted]:
    progress = Counted()
    found = Index(cache, "test", "v1").update_all(streams, progress, pool, parallel_bytes=0)
    assert not [f for f in found if isinstance(f, Exception)]
    return [table(entry) for entry, _ in found], progress


@pytest.fixture(scope="module")
def pool_source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Format, DecodePool]:
    """Four Beats segments of several chunks each, the last one torn."""
    source = beats.generate(tmp_path_factory.mktemp("queue"), 12_000, segments=4)
    last = source / "3.seg"
    last.write_bytes(last.read_bytes()[:-50])  # a torn frame: a problem in the table
    fmt = open_source(source, "beats", {})
    pool = DecodePool(fmt, 2)
    yield fmt, pool
    pool.close()


def test_the_workers_build_the_chunk_table_a_serial_scan_builds(
    pool_source: tuple[Format, DecodePool], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fmt, pool = pool_source
    serial, told_serial = index(tmp_path / "serial", fmt.streams())
    with caplog.at_level(logging.WARNING, logger="fmtfs"):
        parallel, told_parallel = index(tmp_path / "parallel", fmt.streams(), pool)
    assert "could not scan" not in caplog.text  # the workers did scan
    assert parallel == serial
    assert sum(len(t[1]) for t in serial) > 4  # several chunks per segment
    assert [p.file for t in serial for p in t[3]] == ["3.seg"]
    # progress: every chunk, reported from the workers as from a serial scan
    chunks = [c for t in serial for c in t[1]]
    assert told_parallel.calls == told_serial.calls == len(chunks)
    assert told_parallel.native == told_serial.native == sum(end - start for start, end, *_ in chunks)
    assert told_parallel.records == told_serial.records == 12_000 - 1
    # the rows the workers' scans were stored as load back the same, scanning nothing
    again, told_again = index(tmp_path / "parallel", fmt.streams())
    assert again == serial and told_again.calls == 0


def test_the_indexing_process_scans_too_while_the_workers_take_the_first_streams(
    pool_source: tuple[Format, DecodePool], tmp_path: Path
) -> None:
    """Four streams, two workers: the workers take the first ranges, this
    process the last ones (it never waits idle for workers to start)."""
    fmt, pool = pool_source
    streams = fmt.streams()  # the very objects this process scans (not the workers' own)
    scanned_here: list[str] = []
    for stream in streams:
        real_scan = stream.measured  # a Beats segment's scan for the index

        def counting_scan(start, state, render=False, stop=None, stream=stream, real_scan=real_scan):
            scanned_here.append(stream.name)
            return real_scan(start, state, render, stop)

        stream.measured = counting_scan
    serial, _ = index(tmp_path / "serial", streams)
    scanned_here.clear()
    parallel, told = index(tmp_path / "parallel", streams, pool)
    assert parallel == serial
    assert scanned_here and streams[0].name not in scanned_here and streams[-1].name in scanned_here
    assert told.records == 12_000 - 1  # every chunk reported once, wherever it was scanned


def test_meanwhile_runs_once_while_the_workers_scan_and_changes_nothing(
    pool_source: tuple[Format, DecodePool], tmp_path: Path
) -> None:
    """`fmtfs mount` imports its FUSE server while the workers scan
    (update_all's `meanwhile`): it runs once, with every worker up, and the
    workers report chunks while it runs, when this process scans nothing."""
    fmt, pool = pool_source
    serial, _ = index(tmp_path / "serial", fmt.streams())
    workers_up: list[int] = []
    told_meanwhile = Counted()

    def meanwhile() -> None:
        workers_up.append(pool.workers_up())
        deadline = time.monotonic() + 60
        while told_meanwhile.calls < 2 and time.monotonic() < deadline:
            pool.report(told_meanwhile)
            time.sleep(0.01)

    told = Counted()
    found = Index(tmp_path / "parallel", "test", "v1").update_all(
        fmt.streams(), told, pool, meanwhile=meanwhile
    )
    assert workers_up == [2]
    assert told_meanwhile.calls >= 2  # chunks scanned in the workers while meanwhile() ran here
    assert [table(entry) for entry, _ in found] == serial
    assert told.records + told_meanwhile.records == 12_000 - 1


def test_meanwhile_is_not_run_when_nothing_is_scanned_in_the_pool(
    pool_source: tuple[Format, DecodePool], tmp_path: Path
) -> None:
    fmt, pool = pool_source
    index(tmp_path / "cache", fmt.streams())
    calls: list[int] = []
    Index(tmp_path / "cache", "test", "v1").update_all(
        fmt.streams(), None, pool, meanwhile=lambda: calls.append(1)
    )
    assert calls == []  # indexed already: no scan, nothing beside it


def test_a_scan_smaller_than_a_range_starts_no_worker(tmp_path: Path) -> None:
    """Workers would be up after such a scan is over (a gvfs store's
    journals): it runs here, and `meanwhile` is left to the caller."""
    source = tmp_path / "src"
    source.mkdir()
    wallaby.generate(source, 300)
    fmt = open_source(source, "wallaby", {})
    assert sum(s.path.stat().st_size for s in fmt.streams()) < MIN_RANGE_BYTES
    serial, _ = index(tmp_path / "serial", fmt.streams())
    pool = DecodePool(fmt, 2)
    calls: list[int] = []
    try:
        found = Index(tmp_path / "cache", "test", "v1").update_all(
            fmt.streams(), None, pool, parallel_bytes=0, meanwhile=lambda: calls.append(1)
        )
        assert not pool.started and calls == []
    finally:
        pool.close()
    assert [table(entry) for entry, _ in found] == serial


def test_grown_streams_are_resumed_in_the_workers(tmp_path: Path) -> None:
    source = tmp_path / "logs"
    source.mkdir()
    for name in ("a.log", "b.log"):
        wallaby.generate(source, 5_000, name=name)
    fmt = open_source(source, "wallaby", {"time_bucket": "hour"})
    pool = DecodePool(fmt, 2)
    try:
        cache = tmp_path / "cache"
        idx = Index(cache, "test", "v1")
        before = [entry for entry, _ in idx.update_all(fmt.streams(), None, pool, parallel_bytes=0)]
        for name in ("a.log", "b.log"):
            WallabyWriter(source / name).write([{"time": 1, "data": f"grown {i}"} for i in range(3_000)])
        progress = Counted()
        grown = idx.update_all(fmt.streams(), progress, pool, parallel_bytes=0)
    finally:
        pool.close()
    fresh, _ = index(tmp_path / "fresh", fmt.streams())
    assert [table(entry) for entry, changed in grown] == fresh
    assert all(changed for _, changed in grown)
    # only the last chunk of each stream and what follows it was scanned again
    rescanned = sum(entry.chunks[-1].end - entry.chunks[-1].start for entry in before)
    grew = sum((source / n).stat().st_size for n in ("a.log", "b.log")) - sum(e.identity.size for e in before)
    assert progress.native <= rescanned + grew
    assert progress.records == sum(e.chunks[-1].count for e in before) + 6_000


def test_a_stream_a_worker_cannot_scan_is_scanned_in_process(
    pool_source: tuple[Format, DecodePool], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker knows the streams of its own listing of the source: a stream
    outside it fails there, and the index scans it here instead."""
    fmt, pool = pool_source
    stranger = tmp_path / "elsewhere" / "7.seg"
    stranger.parent.mkdir()
    stranger.write_bytes((fmt.source / "1.seg").read_bytes())
    # first: the workers take streams from the front (this process from the back)
    streams = [SegmentStream(7, stranger, None), *fmt.streams()[:2]]
    serial, _ = index(tmp_path / "serial", streams)
    with caplog.at_level(logging.WARNING, logger="fmtfs"):
        parallel, told = index(tmp_path / "parallel", streams, pool)
    assert "could not scan" in caplog.text and "7.seg" in caplog.text
    assert parallel == serial
    assert told.records == sum(c[3] for t in serial for c in t[1])


def test_a_tree_with_workers_shows_the_bytes_of_one_without(tmp_path: Path) -> None:
    source = beats.generate(tmp_path / "queue", 3_000, segments=3)
    fmt = open_source(source, "beats", {})
    plain = SourceTree(fmt, tmp_path / "plain")
    with_workers = SourceTree(open_source(source, "beats", {}), tmp_path / "workers", workers=2)
    try:
        with_workers.decode_in_workers()
        views = [p for p in plain.files if p.endswith(".jsonl")]
        assert "segments/2.jsonl" in views and "pending.jsonl" in views
        for view in views:
            size = plain.size(view)
            assert with_workers.size(view) == size
            assert with_workers.read(view, 0, size + 1) == plain.read(view, 0, size + 1)
    finally:
        with_workers.close()


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z"
    except OSError:
        return False


def test_a_mount_indexes_in_workers_returns_at_once_and_takes_them_along_when_it_ends(tmp_path: Path) -> None:
    """`fmtfs mount` scans a source that takes long enough in its decode
    workers before it detaches (a proio file of 1.5 MB: seconds of decoding,
    cut into ranges): they (and multiprocessing's resource tracker) must
    not hold the output pipes of the caller, which would wait until the
    unmount; after the unmount none of them is left behind."""
    source = proio.generate(tmp_path / "proio", 30_000)
    log_file = tmp_path / "mount.log"
    with mounted(source, "-v", "--log-file", log_file) as mnt:  # returns: the pipes are free
        logged = log_file.read_text()
        assert "ranges of 1 streams here and in" in logged
        # forked: the mount runs no other thread before it serves
        assert "started 2 worker processes (fork) to scan at once" in logged
        view = mnt / "sample.proio" / "events.jsonl"
        expected = fmtfs("cat", source, "sample.proio/events.jsonl", "--cache-dir", tmp_path / "cli").stdout
        assert view.stat().st_size == len(expected)
        assert view.read_bytes() == expected
        server = int(log_file.read_text().split("(pid ")[1].split(")")[0])
        workers = _children(server)
        assert len(workers) >= 2
    deadline = time.monotonic() + 30
    while any(map(_alive, [server, *workers])) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in [server, *workers] if _alive(pid)]


FORKS_OR_SPAWNS = """
import gc, sys, threading
from contextlib import nullcontext
from pathlib import Path
from fmtfs.decoders import DecodePool
from fmtfs.formats import open_source
from fmtfs.gcpause import paused
pool = DecodePool(open_source(Path(sys.argv[1]), "beats", {}), 2)
if sys.argv[2] == "thread":
    threading.Thread(target=threading.Event().wait, daemon=True).start()
if sys.argv[2] == "bar":  # a mount on a terminal draws one while it indexes
    import io
    from fmtfs.progress import IndexProgress
    bar = IndexProgress(1000, io.StringIO())
    bar(500, 10)
# a scan here pauses the GC, and may start the workers on the way
with paused() if sys.argv[2] == "paused" else nullcontext():
    pool.start()
print(pool.method, pool.run(gc.isenabled).result())  # a worker must not keep it paused
pool.close()
"""


@pytest.mark.parametrize(
    ("other_thread", "method"), [("", "fork"), ("thread", "spawn"), ("bar", "fork"), ("paused", "fork")]
)
def test_workers_are_forked_unless_another_thread_runs(
    pool_source: tuple[Format, DecodePool], other_thread: str, method: str
) -> None:
    # forked workers have fmtfs imported and work at once; a process serving
    # a mount runs threads, whose locks a fork would copy held: its workers
    # are spawned (asked in a process of its own: this one runs the threads
    # earlier tests left)
    fmt, _ = pool_source
    done = subprocess.run(
        [sys.executable, "-c", FORKS_OR_SPAWNS, str(fmt.source), other_thread],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == [method, "True"]
