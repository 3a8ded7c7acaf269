"""`fmtfs mount` returns only once the mount is ready, then a child keeps
serving in the background (the readiness travels on a pipe).

The child indexes the source while the terminal is still its stderr (so a
progress bar and warnings reach the person waiting), then detaches: standard
streams to /dev/null, the log to a file.  This module imports nothing of
FUSE's: the caller's `serve` does (fmtfs.daemon), which the child may
import while it indexes."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from fmtfs.errors import UserError

if TYPE_CHECKING:
    from fmtfs.views import SourceTree

log = logging.getLogger("fmtfs")
READY = b"ready\n"


def mount_in_background(
    open_tree: Callable[[], SourceTree], serve: Callable[[SourceTree, int], None], log_file: Path
) -> None:
    """Fork; the child opens the source's tree (`open_tree`: indexing it if
    need be), then `serve(tree, ready)` mounts it and writes READY to the
    pipe `ready` once the mount answers; the parent exits (status 0,
    without returning) when the child says READY, or raises with the
    child's one-line error.  The child logs to `log_file` at the level the
    command line set."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_end)
        message = b""
        # until READY, or the end of the pipe (the child failed): decode
        # workers forked by the child hold the pipe open as long as it runs
        while message != READY and (chunk := os.read(read_end, 4096)):
            message += chunk
        os.close(read_end)
        if message == READY:
            # the mount is served by the child: this process has nothing left
            # to do but its interpreter's teardown, which took 0.35 s of every
            # `fmtfs mount` when it held pyarrow, trio and pyfuse3
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        os.waitpid(pid, 0)
        raise UserError(
            message.decode(errors="replace").strip() or "the mount process died before it was ready"
        )
    # child
    os.close(read_end)
    os.setsid()
    try:
        tree = open_tree()
        _detach(log_file)
        serve(tree, write_end)
    except BaseException as exc:  # noqa: BLE001 - report anything to the waiting parent
        try:
            os.write(write_end, str(exc).encode() or type(exc).__name__.encode())
        except OSError:
            log.exception("mount failed")
        os._exit(1)
    os._exit(0)


def _detach(log_file: Path) -> None:
    """Standard streams to /dev/null, the log (level unchanged) to `log_file`."""
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter(f"%(asctime)s [{os.getpid()}] %(levelname)s %(message)s"))
    log.handlers[:] = [handler]
    log.propagate = False
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
