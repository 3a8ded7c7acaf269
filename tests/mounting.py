"""Real mounts for tests: `fmtfs mount` in a subprocess, unmounted after.

FUSE is real here (Debian's fuse3, running as root); nothing is mocked."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def fmtfs(
    *args: str | os.PathLike, check: bool = True, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run the fmtfs command line in a subprocess (bytes out)."""
    return subprocess.run(
        [sys.executable, "-m", "fmtfs", *map(str, args)],
        capture_output=True,
        check=check,
        env=env,
        timeout=300,
    )


@contextmanager
def mounted(
    source: Path, *options: str, cache_dir: Path | None = None, env: dict | None = None
) -> Iterator[Path]:
    """Mount `source` and yield the mount point; always unmounts."""
    with tempfile.TemporaryDirectory(prefix="fmtfs-mnt-") as scratch:
        mountpoint = Path(scratch) / "mnt"
        mountpoint.mkdir()
        cache = cache_dir or Path(scratch) / "cache"
        done = fmtfs("mount", source, mountpoint, "--cache-dir", cache, *options, check=False, env=env)
        assert done.returncode == 0, done.stderr.decode()
        # `fmtfs mount` returns only once the mount is ready: no polling here
        assert os.path.ismount(mountpoint)
        try:
            yield mountpoint
        finally:
            unmount(mountpoint)


def unmount(mountpoint: Path) -> None:
    for _ in range(50):
        if not os.path.ismount(mountpoint):
            return
        if subprocess.run(["fusermount3", "-u", str(mountpoint)], capture_output=True).returncode == 0:
            return
        time.sleep(0.1)
    subprocess.run(["fusermount3", "-uz", str(mountpoint)], capture_output=True)


def refused_write(view: Path, data: bytes) -> int:
    """Append `data` to a view in one write(); returns the errno it failed
    with (the test asserts which), or 0 when it was taken."""
    fd = os.open(view, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, data)
        return 0
    except OSError as exc:
        return exc.errno or -1
    finally:
        try:
            os.close(fd)
        except OSError:
            pass  # a refused partial line may fail the close too


def bytes_served(log_file: Path, view: str) -> int:
    """What a mount started with `--debug --log-file log_file` served of
    `view`, from its log (one line a read)."""
    total = 0
    for line in log_file.read_text().splitlines():
        if f" read {view} at " in line:
            total += int(line.rsplit(", ", 1)[1].split()[0])
    return total
