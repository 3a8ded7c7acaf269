"""proio through a real FUSE mount: the views equal `fmtfs cat`, lines
appended to `<file>/events.jsonl` become a new bucket, bad lines fail with
EINVAL and write nothing, the other views refuse writes."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import orjson
import pytest

from fmtfs.formats.proio.reader import walk_heads
from tests.conftest import FIXTURES as FIXTURES_ROOT
from tests.mounting import fmtfs, mounted

FIXTURES = FIXTURES_ROOT / "proio"


def jsonl(data: bytes) -> list[dict]:
    return [orjson.loads(line) for line in data.splitlines()]


@pytest.fixture
def source(tmp_path: Path) -> Path:
    folder = tmp_path / "streams"
    folder.mkdir()
    shutil.copy(FIXTURES / "py-lz4.proio", folder / "lz4.proio")
    shutil.copy(FIXTURES / "sample-muons-lz4.proio", folder / "muons.proio")
    return folder


def test_views_match_fmtfs_cat(source: Path, tmp_path: Path) -> None:
    views = (
        "lz4.proio/events.jsonl",
        "lz4.proio/buckets/10.jsonl",
        "lz4.proio/types/proio.model.lcio.MCParticle.jsonl",
        "muons.proio/types/proio.model.eic.SimHit.jsonl",
        "lz4.proio/_summary.txt",
        "_summary.txt",
    )
    with mounted(source) as mnt:
        assert sorted(os.listdir(mnt / "lz4.proio")) == ["_summary.txt", "buckets", "events.jsonl", "types"]
        for rel in views:
            expected = fmtfs("cat", source, rel, "--cache-dir", tmp_path / "c").stdout
            assert (mnt / rel).stat().st_size == len(expected)
            assert (mnt / rel).read_bytes() == expected
        assert b"Number of LZ4 buckets: 12\n" in (mnt / "_summary.txt").read_bytes()
        assert len(jsonl((mnt / "muons.proio/events.jsonl").read_bytes())) == 10


def test_append_through_the_mount(source: Path) -> None:
    native = source / "lz4.proio"
    with mounted(source) as mnt:
        view = mnt / "lz4.proio/events.jsonl"
        before = jsonl(view.read_bytes())
        line = {
            "metadata": {"run": "3"},
            "tags": {"Particle": [1]},
            "entries": {"1": {"type": "proio.model.mc.Particle", "value": {"pdg": 321, "mass": 0.5}}},
        }
        with open(view, "ab") as f:
            f.write(orjson.dumps(line) + b"\n" + orjson.dumps(before[0])[:40])
            f.write(orjson.dumps(before[0])[40:] + b"\n")
        after = jsonl(view.read_bytes())
        assert len(after) == 22
        assert after[20]["metadata"]["run"] == "3" and after[20]["entries"] == line["entries"]
        # the copied line carries run 1 again: a metadata change, so a bucket of its own
        assert after[21]["entries"] == before[0]["entries"] and after[21]["metadata"]["run"] == "1"
        data = native.read_bytes()
        heads = list(walk_heads(data, len(data)))
        assert len(heads) == 13 and [h.n_events for h in heads[-2:]] == [1, 1]
        assert {h.compression for h in heads} == {2}  # LZ4, as the stream's last bucket
        assert [h.metadata for h in heads[-2:]] == [[("run", b"3")], [("run", b"1")]]
        assert [len(h.descriptors) for h in heads[-2:]] == [1, 0]  # mc.proto, once
        size = native.stat().st_size
        fd = os.open(view, os.O_WRONLY | os.O_APPEND)
        try:
            for bad in (b'{"entries": {"1": {"type": "no.Such", "value": {}}}}\n', b"not json\n"):
                with pytest.raises(OSError) as caught:
                    os.write(fd, bad)
                assert caught.value.errno == errno.EINVAL
        finally:
            os.close(fd)
        assert native.stat().st_size == size
        for ro in ("lz4.proio/buckets/0.jsonl", "lz4.proio/types/proio.model.eic.Particle.jsonl"):
            with pytest.raises(OSError) as caught:
                open(mnt / ro, "ab").close()
            assert caught.value.errno in (errno.EACCES, errno.EROFS)


def test_junk_start_is_read_reported_and_appended_to(tmp_path: Path) -> None:
    """A stream whose first bytes are junk mounts (detected by its suffix, with
    --format too), reads from the first magic, reports the junk in
    `_errors.jsonl`, and takes appends."""
    folder = tmp_path / "torn"
    folder.mkdir()
    junk = b"\x00\x17 torn bucket tail " + b"\xe1\xc1\x00\x00"
    native = folder / "run.proio"
    native.write_bytes(junk + (FIXTURES / "py-lz4.proio").read_bytes())
    expected = fmtfs("cat", FIXTURES / "py-lz4.proio", "py-lz4.proio/events.jsonl").stdout
    with mounted(folder, "--format", "proio") as mnt:
        view = mnt / "run.proio/events.jsonl"
        assert view.stat().st_size == len(expected)
        assert view.read_bytes() == expected
        errors = jsonl((mnt / "_errors.jsonl").read_bytes())
        assert errors == [
            {
                "file": "run.proio",
                "offset": 0,
                "error": f"skipped {len(junk)} bytes of junk before the bucket magic at {len(junk)}",
            }
        ]
        assert b"Number of events: 20\n" in (mnt / "run.proio/_summary.txt").read_bytes()
        with open(view, "ab") as f:
            f.write(orjson.dumps(jsonl(expected)[3]) + b"\n")
        after = jsonl(view.read_bytes())
        assert len(after) == 21 and after[20]["entries"] == jsonl(expected)[3]["entries"]
    assert native.read_bytes().startswith(junk)
