"""The write path: a burst of writes is indexed once, not once a write; the
views show every line once the writer closes; a reader holding the view
open sees lines written by a writer that has not closed yet."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import orjson
import pytest

from fmtfs.samples.wallaby import generate
from tests.mounting import fmtfs, mounted

RECORDS = "events.log/records.jsonl"
WRITES = 20


@pytest.fixture()
def source(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    return generate(folder, 500)


def _events(log_file: Path, view: str) -> list[str]:
    """The mount's debug log reduced to what it did: "write" for every write
    FUSE handed it for `view`, "index" for every re-indexing of the source."""
    events = []
    for line in log_file.read_text().splitlines():
        if f" write {view} at " in line:
            events.append("write")
        elif "the source changed: re-indexing" in line:
            events.append("index")
    return events


def test_a_burst_of_writes_is_indexed_once_after_it_not_once_a_write(source: Path, tmp_path: Path) -> None:
    log_file = tmp_path / "mount.log"
    lines = [orjson.dumps({"data": f"burst {i}"}) + b"\n" for i in range(WRITES)]
    with mounted(source, "--debug", "--log-file", log_file) as mnt:
        view = mnt / RECORDS
        before = view.read_bytes().count(b"\n")
        fd = os.open(view, os.O_WRONLY | os.O_APPEND)
        try:
            for line in lines:  # one write() each: FUSE hands them over one by one
                os.write(fd, line)
        finally:
            os.close(fd)
        after = view.read_bytes()
    events = _events(log_file, RECORDS)
    assert events.count("write") == WRITES
    first, last = events.index("write"), len(events) - 1 - events[::-1].index("write")
    # between the first and the last write the mount encoded, it did not
    # re-index (before: one re-indexing after every write); a poll may
    # still fall into a pause of a loaded machine
    assert events[first:last].count("index") <= 2
    assert "index" in events[last:]  # the burst was indexed once it ended
    written = [orjson.loads(line)["data"] for line in after.splitlines()[before:]]
    assert written == [f"burst {i}" for i in range(WRITES)]
    assert after == fmtfs("cat", source, RECORDS, "--cache-dir", tmp_path / "cli").stdout


def test_a_reader_holding_the_view_sees_lines_of_a_writer_still_open(source: Path) -> None:
    with mounted(source) as mnt:
        view = mnt / RECORDS
        with open(view, "rb") as reader, open(view, "ab", buffering=0) as writer:
            seen = reader.read()
            writer.write(b'{"data": "while open"}\n')
            deadline = time.monotonic() + 5
            while b"while open" not in seen and time.monotonic() < deadline:
                time.sleep(0.1)
                seen += reader.read()  # as tail -f does: read on past the old end
        assert b'"data":"while open"' in seen


def test_a_write_to_one_stream_keeps_the_cached_pages_of_the_others(source: Path, tmp_path: Path) -> None:
    # views show their own native file's mtime: the kernel (FUSE's
    # auto_inval_data) drops a file's cached pages when its mtime changes
    for name in ("events.log", "events.log.idx"):
        shutil.copyfile(source / name, source / name.replace("events", "other"))
    other = "other.log/records.jsonl"
    log_file = tmp_path / "mount.log"
    with mounted(source, "--debug", "--log-file", log_file) as mnt:
        first = (mnt / other).read_bytes()
        served_once = _bytes_read(log_file, other)
        with open(mnt / RECORDS, "ab") as writer:
            writer.write(b'{"data": "elsewhere"}\n')
        time.sleep(1.5)  # past the attribute timeout: the kernel asks for them again
        assert (mnt / other).read_bytes() == first
        served_twice = _bytes_read(log_file, other)
    assert served_once >= len(first)
    # the kernel may drop a few kept pages on its own (see the README)
    assert served_twice - served_once < len(first) // 10


def _bytes_read(log_file: Path, view: str) -> int:
    """What the mount served of `view`, from its debug log (one line a read)."""
    return sum(
        int(line.rsplit(", ", 1)[1].split()[0])
        for line in log_file.read_text().splitlines()
        if f" read {view} at " in line
    )
