"""Derived views (computed from the whole source) over a real mount: fresh
right after a write through the same mount, with no attribute-cache delay;
an unchanged one read again from the kernel's kept pages, a changed one
never."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from fmtfs.formats.gvfs.format import GvfsJournalWriter
from fmtfs.samples import gvfs as gvfs_sample
from fmtfs.samples.beats import generate
from tests.mounting import bytes_served, fmtfs, mounted


def test_pending_is_fresh_right_after_a_write(tmp_path: Path) -> None:
    source = generate(tmp_path / "queue", 60)
    with mounted(source) as mnt:
        pending = mnt / "pending.jsonl"
        before = pending.stat().st_size
        lines_before = pending.read_bytes().count(b"\n")
        newest = sorted((mnt / "segments").iterdir(), key=lambda p: int(p.stem))[-1]
        line = {"timestamp": "2022-07-29T14:43:00.000000000Z", "flags": 1, "meta": {}, "fields": {"n": 1}}
        with open(newest, "ab") as f:
            f.write(orjson.dumps(line) + b"\n")
        # no sleep: the kernel must not answer from a stale cache
        assert pending.stat().st_size == before + len(orjson.dumps(line)) + 1
        data = pending.read_bytes()
        assert data.count(b"\n") == lines_before + 1
        assert orjson.loads(data.splitlines()[-1]) == line
        info = orjson.loads((mnt / "_fmtfs.json").read_bytes())
        assert info["records"] == 61


@pytest.mark.parametrize(
    ("make", "view"),
    [
        (lambda folder: gvfs_sample.generate(folder, 500), "home/metadata.jsonl"),  # rendered whole
        (lambda folder: generate(folder, 300), "pending.jsonl"),  # slices of indexed views
    ],
    ids=["gvfs-metadata", "beats-pending"],
)
def test_a_second_read_of_an_unchanged_derived_view_is_served_by_the_kernel(
    tmp_path: Path, make, view: str
) -> None:
    source = make(tmp_path / "src")
    log_file = tmp_path / "mount.log"
    with mounted(source, "--debug", "--log-file", log_file) as mnt:
        first = (mnt / view).read_bytes()
        served_once = bytes_served(log_file, view)
        assert (mnt / view).read_bytes() == first
        served_twice = bytes_served(log_file, view)
    assert first and served_once >= len(first)
    # the kernel may drop a few kept pages on its own; a view whose pages
    # were dropped at open would be served whole again
    assert served_twice - served_once < len(first) // 10
    getattrs = sum(f"getattr {view}:" in line for line in log_file.read_text().splitlines())
    assert getattrs < 5  # not one per read() of `cat` (auto_inval_data with attr_timeout 0)


# a gvfs journal entry for a path the sample never names
NEW_ENTRY = {"op": "set", "time": "2022-01-01T00:00:00Z", "path": "/new.txt", "key": "comment", "value": "x"}


def _assert_shows_the_new_entry(metadata: bytes, before: bytes, source: Path, tmp_path: Path) -> None:
    """`metadata` (home/metadata.jsonl read over the mount) is what `fmtfs
    cat` shows now, with NEW_ENTRY in it, and differs from `before`."""
    expected = fmtfs("cat", source, "home/metadata.jsonl", "--cache-dir", tmp_path / "cli").stdout
    assert metadata == expected != before
    assert b'"/new.txt"' in metadata


def test_a_derived_view_read_before_its_source_changed_shows_the_change(tmp_path: Path) -> None:
    """Kept pages of a derived view never outlive a change: the producer
    appends to the gvfs journal behind the mount's back."""
    source = gvfs_sample.generate(tmp_path / "src", 500)
    view = "home/metadata.jsonl"
    with mounted(source) as mnt:
        first = (mnt / view).read_bytes()
        assert (mnt / view).read_bytes() == first  # kept
        GvfsJournalWriter(source / "home").write([NEW_ENTRY])
        deadline = time.monotonic() + 5
        while (mnt / view).stat().st_size == len(first) and time.monotonic() < deadline:
            time.sleep(0.1)
        _assert_shows_the_new_entry((mnt / view).read_bytes(), first, source, tmp_path)


def test_a_derived_view_read_before_a_write_through_shows_it_right_after(tmp_path: Path) -> None:
    """Kept pages and cached attributes of gvfs metadata.jsonl never hide a
    line just appended to its journal through the same mount (no sleep)."""
    source = gvfs_sample.generate(tmp_path / "src", 500)
    with mounted(source) as mnt:
        metadata = mnt / "home/metadata.jsonl"
        first = metadata.read_bytes()
        size = metadata.stat().st_size
        with open(mnt / "home/journal.jsonl", "ab") as f:
            f.write(orjson.dumps(NEW_ENTRY) + b"\n")
        assert metadata.stat().st_size > size
        _assert_shows_the_new_entry(metadata.read_bytes(), first, source, tmp_path)
