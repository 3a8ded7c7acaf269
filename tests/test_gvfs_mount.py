"""A gvfs-metadata folder through a real FUSE mount: the views equal
`fmtfs cat`, appends to `<tree>/journal.jsonl` land in the journal (and
rotate it when full), and the real gvfs client reads the result."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import orjson
import pytest

from fmtfs.formats.gvfs import GvfsFormat
from fmtfs.formats.gvfs.journal import JOURNAL_SIZE
from fmtfs.formats.gvfs.tree import read_header
from tests.mounting import fmtfs, mounted, refused_write
from tests.test_gvfs_oracle import FIXTURES, assert_matches_gio, home_metadata, session  # noqa: F401

JOURNAL = "home/journal.jsonl"
METADATA = "home/metadata.jsonl"


def lines_of(data: bytes) -> list[dict]:
    return [orjson.loads(line) for line in data.splitlines()]


@pytest.fixture
def source(tmp_path: Path) -> Path:
    folder = tmp_path / "gvfs-metadata"
    shutil.copytree(FIXTURES / "03-tree-plus-journal", folder)
    for f in folder.iterdir():
        f.chmod(0o600)
    return folder


def test_mount_shows_the_views(source: Path, tmp_path: Path) -> None:
    with mounted(source) as mnt:
        assert sorted(os.listdir(mnt / "home")) == ["journal.jsonl", "metadata.jsonl"]
        for view in (JOURNAL, METADATA, "root/metadata.jsonl"):
            expected = fmtfs("cat", source, view, "--cache-dir", tmp_path / "c").stdout
            assert (mnt / view).stat().st_size == len(expected)
            assert (mnt / view).read_bytes() == expected
        journal = lines_of((mnt / JOURNAL).read_bytes())
        assert [r["op"] for r in journal] == ["setv", "set", "set", "unset", "copy", "remove"]
        meta = {r["path"]: r for r in lines_of((mnt / METADATA).read_bytes())}
        assert meta["/Docs2/a.txt"]["metadata"]["tags"] == ["one", "two", "two", ""]
        info = orjson.loads((mnt / "_fmtfs.json").read_bytes())
        assert info["format"] == "gvfs"


def test_append_through_the_mount(source: Path) -> None:
    with mounted(source) as mnt:
        with open(mnt / JOURNAL, "ab") as f:
            f.write(b'{"op": "set", "time": "2026-11-22T10:00:00Z", "path": "/Pictures/p.png", ')
            f.write(
                b'"key": "rating", "value": "5"}\n{"op": "remove", "time": 1795341000, "path": "/Docs2"}\n'
            )
        journal = lines_of((mnt / JOURNAL).read_bytes())
        assert len(journal) == 8 and journal[-1] == {
            "op": "remove",
            "time": "2026-11-22T09:50:00Z",
            "path": "/Docs2",
        }
        meta = {r["path"]: r for r in lines_of((mnt / METADATA).read_bytes())}
        assert meta["/Pictures/p.png"]["metadata"]["rating"] == "5"
        assert not any(p.startswith("/Docs2") for p in meta)
        before = (source / "home-1e0f4c72.log").read_bytes()
        bad = b'{"op": "set", "path": "/a", "key": "k", "value": "ok"}\n{"op": "move"}\n'
        assert refused_write(mnt / JOURNAL, bad) == errno.EINVAL
        assert (source / "home-1e0f4c72.log").read_bytes() == before
        with pytest.raises(OSError):
            with open(mnt / METADATA, "ab") as f:
                f.write(b'{"path": "/x"}\n')
    assert GvfsFormat(source, {}).info()["trees"]["home"]["journal_valid_entries"] == 8


def test_bulk_append_through_the_mount_grows_the_journal_and_gio_reads_it(session) -> None:  # noqa: F811
    session.home.joinpath("W").mkdir()
    session.home.joinpath("W/seed.txt").touch()
    assert session.gio_set("W/seed.txt", "seed", "1").returncode == 0
    session.stop_daemon()
    old_tag = read_header((session.folder / "home").read_bytes()).tag
    with mounted(session.folder) as mnt:
        with open(mnt / JOURNAL, "ab") as f:
            for i in range(1000):
                line = {
                    "op": "set",
                    "time": 1795400000 + i,
                    "path": f"/W/f{i:03d}",
                    "key": "n",
                    "value": f"value-{i:04d}",
                }
                f.write(orjson.dumps(line) + b"\n")
        meta = {r["path"]: r for r in lines_of((mnt / METADATA).read_bytes())}
        assert meta["/W/f999"]["metadata"] == {"n": "value-0999"} and meta["/W/seed.txt"]["metadata"] == {
            "seed": "1"
        }
        # more than 32 KiB of entries: the journal grew instead of rotating, so
        # the journal view still shows every entry
        journal = lines_of((mnt / JOURNAL).read_bytes())
        assert len(journal) == 1001 and journal[-1]["path"] == "/W/f999"
    assert read_header((session.folder / "home").read_bytes()).tag == old_tag
    assert (session.folder / f"home-{old_tag:08x}.log").stat().st_size > JOURNAL_SIZE
    expected = home_metadata(session.folder)
    sample = {p: r for p, r in expected.items() if p.endswith(("0", "7", ".txt"))}
    assert assert_matches_gio(session, sample) > 150
