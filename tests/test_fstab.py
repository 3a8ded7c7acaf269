"""Mounting the way administrators do, for real: `mount -t fuse.fmtfs`
(through Debian's mount.fuse3, which starts `fmtfs` from the system's
paths), `mount -t fmtfs` (mount.fmtfs), lines of an fstab (`mount -T`), and
both `umount` and `fusermount3 -u` ending the server."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from fmtfs.samples.beats import generate as beats_sample
from fmtfs.samples.wallaby import generate as wallaby_sample
from tests.mounting import unmount


@pytest.fixture
def beats(tmp_path: Path) -> Path:
    return beats_sample(tmp_path / "queue", 60)


def run(*args: str | os.PathLike) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120)


def server_pid(log_file: Path) -> int:
    found = re.search(r"serving .* \(pid (\d+)\)", log_file.read_text())
    assert found, log_file.read_text()
    return int(found.group(1))


def wait_until_gone(pid: int, log_file: Path) -> None:
    """The server exits by itself once unmounted (waits, asserts no speed)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"server {pid} still running after the unmount")
    assert "the server ends" in log_file.read_text()


def test_mount_t_fuse_fmtfs_then_umount(beats: Path, tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log_file = tmp_path / "fmtfs.log"
    options = f"format=beats,ro,_netdev,nofail,cache_dir={tmp_path / 'c'},log_file={log_file},verbose"
    done = run("mount", "-t", "fuse.fmtfs", beats, mnt, "-o", options)
    assert done.returncode == 0, done.stderr
    try:
        assert os.path.ismount(mnt)
        info = orjson.loads((mnt / "_fmtfs.json").read_bytes())
        assert info["format"] == "beats" and info["options"]["read_only"] is True
        with pytest.raises(OSError) as refused:
            with open(mnt / "segments/0.jsonl", "ab") as f:
                f.write(b"{}\n")
        assert refused.value.errno == 30  # EROFS: `ro` reached fmtfs
        pid = server_pid(log_file)
        assert run("umount", mnt).returncode == 0
    finally:
        unmount(mnt)
    assert not os.path.ismount(mnt)
    wait_until_gone(pid, log_file)


def test_fstab_lines_mount_by_mount_point(beats: Path, tmp_path: Path) -> None:
    wal = tmp_path / "wal"
    wal.mkdir()
    wallaby_sample(wal, 50)
    first, second = tmp_path / "m1", tmp_path / "m2"
    first.mkdir()
    second.mkdir()
    logs = tmp_path / "one.log", tmp_path / "two.log"
    fstab = tmp_path / "fstab"
    fstab.write_text(
        "# a test-only fstab (mount -T)\n"
        f"{beats} {first} fuse.fmtfs noauto,nofail,_netdev,format=beats,time_bucket=day,"
        f"cache_dir={tmp_path / 'c1'},log_file={logs[0]},verbose 0 0\n"
        f"{wal} {second} fmtfs noauto,ro,cache_dir={tmp_path / 'c2'},log_file={logs[1]},verbose 0 0\n"
    )
    for mnt in (first, second):
        done = run("mount", "-T", fstab, mnt)
        assert done.returncode == 0, done.stderr
    try:
        assert os.path.ismount(first) and os.path.ismount(second)
        assert orjson.loads((first / "_fmtfs.json").read_bytes())["options"]["time_bucket"] == "day"
        wal_info = orjson.loads((second / "_fmtfs.json").read_bytes())
        assert wal_info["format"] == "wallaby" and wal_info["options"]["read_only"] is True
        assert (second / "events.log/records.jsonl").read_bytes().count(b"\n") == 50
        pids = [server_pid(log) for log in logs]
        assert run("fusermount3", "-u", first).returncode == 0
        assert run("umount", second).returncode == 0
    finally:
        unmount(first)
        unmount(second)
    for pid, log in zip(pids, logs, strict=True):
        wait_until_gone(pid, log)
