"""The background twin builder of a real mount waits while the mount is in
use: from the mount's start, and while views are opened or folders listed
even when no read reaches fmtfs (the kernel's kept pages serve a second
Spark query; its listing and opens still reach the mount).  A Spark job
started right after `fmtfs mount` used to meet a builder at work on every
twin of the tree (wallaby's 5,195 hour buckets: 12 s of CPU)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from fmtfs import twinbuilder
from fmtfs.formats import open_source
from fmtfs.samples.wallaby import generate as wallaby_sample
from fmtfs.views import SourceTree
from tests.mounting import mounted


def twin_files(cache: Path) -> list[Path]:
    return sorted((cache / "parquet").rglob("*.parquet"))


def test_a_mount_builds_no_twin_while_it_is_listed_and_opened_then_builds_them(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    source = wallaby_sample(tmp_path / "src", 2000)
    cache = tmp_path / "cache"
    with mounted(source, cache_dir=cache) as mnt:
        # a user of the mount, from its first moment: listings and opens, no read
        busy_until = time.monotonic() + 2 * twinbuilder.QUIET_SECONDS + 1
        while time.monotonic() < busy_until:
            views = [p for p in (mnt / "events.log" / "buckets").iterdir()]
            os.close(os.open(views[0], os.O_RDONLY))
            assert twin_files(cache) == []
            time.sleep(0.1)
        # quiet: the builder catches up on its own (the twins nobody asked for)
        deadline = time.monotonic() + 120
        while len(twin_files(cache)) < len(views) + 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(twin_files(cache)) == len(views) + 1  # every bucket and records.jsonl


def test_the_quiet_time_counts_from_serving_and_a_write_is_use(tmp_path: Path) -> None:
    """A first mount's index build may outlast the quiet time (100 MB of
    wallaby: 2.4 s): the builder's wait counts from when the mount serves
    (start_builder), not from the tree's opening, and a write through the
    mount keeps it waiting as a read does."""
    (tmp_path / "src").mkdir()
    tree = SourceTree(open_source(wallaby_sample(tmp_path / "src", 2000), None, {}), tmp_path / "cache")
    try:
        tree.last_use -= 10 * twinbuilder.QUIET_SECONDS  # the tree opened long ago
        builder = twinbuilder.start_builder(tree)
        builder.stop()
        assert builder._busy()
        tree.last_use -= 10 * twinbuilder.QUIET_SECONDS
        assert not builder._busy()
        tree.wrote()
        assert builder._busy()
    finally:
        tree.close()


def test_a_listing_by_path_keeps_the_builder_waiting(tmp_path: Path) -> None:
    """`ls -l a/b.jsonl c/d.jsonl ...` reaches the mount as lookups only (no
    opendir, no open). A builder that stat'ed 10,000 twins during such a
    listing of 10,000 proio streams took the GIL from the FUSE loop: 4.3-5.9 s
    instead of 2.5-4.0 s."""
    (tmp_path / "src").mkdir()
    source = wallaby_sample(tmp_path / "src", 2000)
    cache = tmp_path / "cache"
    with mounted(source, cache_dir=cache) as mnt:
        views = sorted(os.listdir(mnt / "events.log" / "buckets"))
        busy_until = time.monotonic() + 2 * twinbuilder.QUIET_SECONDS + 1
        while time.monotonic() < busy_until:
            for name in views:  # each a lookup again once its entry's timeout passed
                os.stat(mnt / "events.log" / "buckets" / name)
            assert twin_files(cache) == []
            time.sleep(0.1)
        deadline = time.monotonic() + 120
        while not twin_files(cache) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert twin_files(cache)  # quiet again: the builder went to work
