"""What a second `cat` of a view costs fmtfs: the page cache serves its
bytes (tests/test_read_path.py), so what is left is the requests of each
open.  The first one after a pause looks at the source (a refresh); that
look is taken on the FUSE loop when it is cheap (SourceTree.unchanged),
not in a worker thread, and must still leave every change it sees to a
full refresh."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from fmtfs.formats import open_source
from fmtfs.formats.wallaby import WallabyWriter
from fmtfs.samples.wallaby import START_NS, generate
from fmtfs.views import LOOK_ON_CALLER_MAX, SourceTree
from tests.mounting import fmtfs, mounted

RECORDS = "events.log/records.jsonl"


@pytest.fixture()
def source(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    return generate(folder, 2_000)


@pytest.fixture()
def tree(source: Path, tmp_path: Path):
    tree = SourceTree(open_source(source, "wallaby", {}), tmp_path / "cache")
    yield tree
    tree.close()


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
    tree.look_cost = LOOK_ON_CALLER_MAX * 2  # a source of thousands of native files
    assert not tree.unchanged()
    assert tree.due() and tree.look_cost == LOOK_ON_CALLER_MAX * 2  # not looked at
    assert tree.refresh() == set()
    assert tree.look_cost < LOOK_ON_CALLER_MAX * 2  # the worker's look measured itself


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
