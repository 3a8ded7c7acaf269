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
        server = server_processes(mountpoint)
        try:
            yield mountpoint
        finally:
            unmount(mountpoint)
            # the server (and its decode workers, twin builder) ends a moment
            # after the kernel lets go: it may still write the cache folder,
            # which the caller's temporary directory is about to remove
            wait_gone(list(server))


def unmount(mountpoint: Path) -> None:
    for _ in range(50):
        if not os.path.ismount(mountpoint):
            return
        if subprocess.run(["fusermount3", "-u", str(mountpoint)], capture_output=True).returncode == 0:
            return
        time.sleep(0.1)
    subprocess.run(["fusermount3", "-uz", str(mountpoint)], capture_output=True)


def server_processes(mnt: Path) -> dict[int, str]:
    """The process serving `mnt` and its descendants: pid -> command line."""
    table: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue  # ended meanwhile
            table[int(entry.name)] = (parent, argv)
    serving = {pid for pid, (_, argv) in table.items() if " mount " in argv and f" {mnt} " in f"{argv} "}
    # forked decode workers have the server's command line: the root is the
    # one whose parent does not, so it is listed first
    roots = [pid for pid in serving if table[pid][0] not in serving]
    found, todo = {}, roots
    while todo:
        pid = todo.pop()
        found[pid] = table[pid][1]
        todo += [child for child, (parent, _) in table.items() if parent == pid]
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has spent so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def decode_workers(mnt: Path) -> dict[int, str]:
    """The decode workers of the process serving `mnt`: forks of it (its
    command line) or spawned ones (multiprocessing's spawn_main)."""
    server = server_processes(mnt)
    root = next(iter(server), None)  # listed first, before its descendants
    return {
        pid: argv
        for pid, argv in server.items()
        if pid != root and (argv == server[root] or "spawn_main" in argv)
    }


def wait_gone(pids: list[int], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    for pid in pids:
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has ended; its parent was not told yet


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
