"""Real FUSE mounts of a Beats queue: the sample reads as `fmtfs cat` shows
it, appends and new segments written through the mount reach the segment
files as frames an independent reader accepts, bad lines fail with EINVAL,
and an encrypted queue mounts with FMTFS_BEATS_PASSWORD."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import orjson
import pytest

from fmtfs.formats.beats import derive_key
from fmtfs.samples.beats import generate
from tests.mounting import fmtfs, mounted, refused_write
from tests.test_beats_build import event, reference_read, segment

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")


def _line(ev: dict) -> bytes:
    return orjson.dumps(ev) + b"\n"


def test_sample_reads_and_writes_through_the_mount(tmp_path: Path) -> None:
    src = generate(tmp_path / "q", 3000)
    with mounted(src) as mnt:
        for rel in ("segments/0.jsonl", "segments/2.jsonl", "pending.jsonl"):
            expected = fmtfs("cat", src, rel, "--cache-dir", tmp_path / "c").stdout
            assert (mnt / rel).stat().st_size == len(expected)
            assert (mnt / rel).read_bytes() == expected
        # append to the newest segment
        with open(mnt / "segments/2.jsonl", "ab") as f:
            f.write(_line(event(1)) + _line(event(2)))
        count, events = reference_read((src / "2.seg").read_bytes())
        assert count == 1002 and events[-2:] == [event(1), event(2)]
        # a line that is not an event: EINVAL, nothing written
        size = (src / "2.seg").stat().st_size
        assert refused_write(mnt / "segments/2.jsonl", b'{"timestamp": "soon"}\n') == errno.EINVAL
        assert (src / "2.seg").stat().st_size == size
        # a new segment
        with open(mnt / "segments/3.jsonl", "wb") as f:
            f.write(_line(event(3)))
        assert reference_read((src / "3.seg").read_bytes()) == (1, [event(3)])
        lines = (mnt / "segments/2.jsonl").read_bytes().splitlines()
        assert orjson.loads(lines[-1])["fields"] == event(2)["fields"]
        # old segments and pending refuse writes
        for rel in ("segments/0.jsonl", "pending.jsonl"):
            with pytest.raises(OSError) as err:
                with open(mnt / rel, "ab") as f:
                    f.write(_line(event(4)))
            assert err.value.errno in (errno.EACCES, errno.EROFS, errno.EPERM)


def test_encrypted_queue_with_password(tmp_path: Path) -> None:
    key = derive_key("changeme")
    src = tmp_path / "q"
    src.mkdir()
    (src / "0.seg").write_bytes(segment("v2", [event(i) for i in range(5)], 3, key=key))
    env = dict(os.environ, FMTFS_BEATS_PASSWORD="changeme")
    with mounted(src, env=env) as mnt:
        lines = (mnt / "segments/0.jsonl").read_bytes().splitlines()
        assert [orjson.loads(x)["fields"]["message"] for x in lines] == [f"line {i} " for i in range(5)]
        with open(mnt / "segments/0.jsonl", "ab") as f:
            f.write(_line(event(5)))
    count, events = reference_read((src / "0.seg").read_bytes(), key)
    assert count == 6 and events[-1] == event(5)
    bad = fmtfs("ls", src, check=False, env=dict(os.environ, FMTFS_BEATS_PASSWORD="wrong"))
    assert bad.returncode != 0 and b"wrong key" in bad.stderr and b"Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
