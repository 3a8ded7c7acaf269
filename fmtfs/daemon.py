"""Serving a mount: FUSE set up over a source's tree and served until
unmounted by any means (`fmtfs umount`, `fusermount3 -u`, `umount`) or
SIGTERM/SIGINT.  `fmtfs mount` runs this in the background child of
fmtfs.background, which imports this module (pyfuse3, trio) while its
decode workers index the source."""

from __future__ import annotations

import functools
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pyfuse3
import trio

from fmtfs.background import READY
from fmtfs.errors import MountRefused
from fmtfs.fuse import FmtfsOperations, serve
from fmtfs.twinbuilder import start_builder
from fmtfs.views import SourceTree

log = logging.getLogger("fmtfs")
# The kernel reads ahead 128 KiB of a FUSE file by default, one request per
# 128 KiB: widened to the largest request libfuse 3 takes (1 MiB), a
# sequential `cat` or Spark split costs an eighth of the requests, each a
# hop through Python (measured: 6-8% less mount CPU for a cold `cat`).
READ_AHEAD_KB = 1024


def run_mount(tree: SourceTree, mountpoint: Path, options: list[str], ready: int | None) -> None:
    """Mount and serve until unmounted.  `ready` is a pipe fd told READY once
    the mount has answered its first request."""
    # first: workers forked now (fmtfs.decoders) inherit neither the
    # invalidation thread's locks nor the FUSE session's descriptor
    tree.decode_in_workers()
    tree.watch_source()  # a no-op for `fmtfs mount`'s tree, watched from its first look
    try:
        ops = FmtfsOperations(tree)
        _init_fuse(ops, mountpoint, options)
    except BaseException:
        tree.close()
        raise
    log.info("serving %s at %s (pid %d)", tree.format.source, mountpoint, os.getpid())
    try:
        start_builder(tree)  # Parquet twins not on disk yet, in the background
        # SIGTERM/SIGINT unmount cleanly instead of leaving a dead mount point
        trio.run(_serve_until_signal, ops, functools.partial(_answering, mountpoint, ready))
    finally:
        pyfuse3.close(unmount=True)
        log.info("unmounted %s; the server ends", mountpoint)
        tree.close()


def _init_fuse(ops: FmtfsOperations, mountpoint: Path, options: list[str]) -> None:
    fuse_options = set(pyfuse3.default_options)
    # the kernel checks every open against the views' owners and modes,
    # which follow the native files (fmtfs.permissions)
    fuse_options |= {"subtype=fmtfs", "default_permissions"}
    # `mount`, `df` and findmnt show the source, as for a disk or sshfs
    # (libfuse splits options at commas unless escaped)
    source = os.path.abspath(ops.tree.format.source)
    fuse_options.add("fsname=" + source.replace("\\", "\\\\").replace(",", "\\,"))
    fuse_options |= {opt for opt in options if opt not in ("rw",)}
    try:
        pyfuse3.init(ops, str(mountpoint), fuse_options)
    except RuntimeError as exc:  # libfuse says only "fuse_session_new() failed"
        raise MountRefused(
            f"FUSE refused the mount (check the -o options: {','.join(options) or 'none'}): {exc}"
        ) from None


def _answering(mountpoint: Path, ready: int | None) -> None:
    """Run in a thread as serving starts.  A look at the mount point waits
    for the kernel's INIT, which sets the mount's read-ahead (to at most
    128 KiB), and for our answer; then the read-ahead is widened and READY
    told, so every file opened after `fmtfs mount` returns reads ahead
    READ_AHEAD_KB (a file takes the read-ahead in force when it is opened)."""
    _widen_read_ahead(os.stat(mountpoint).st_dev)
    if ready is not None:
        os.write(ready, READY)
        os.close(ready)


def _widen_read_ahead(device: int) -> None:
    """READ_AHEAD_KB for the mount's device, in its sysfs entry (writable
    by root alone; others keep the kernel's default)."""
    setting = Path(f"/sys/class/bdi/{os.major(device)}:{os.minor(device)}/read_ahead_kb")
    try:
        if int(setting.read_text()) < READ_AHEAD_KB:
            setting.write_text(str(READ_AHEAD_KB))
    except (OSError, ValueError) as exc:
        log.debug("read-ahead left as it is: %s", exc)


async def _serve_until_signal(ops: FmtfsOperations, answering: Callable[[], None]) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(functools.partial(trio.to_thread.run_sync, answering))

        async def watch_signals() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    log.info("signal received: unmounting")
                    nursery.cancel_scope.cancel()

        nursery.start_soon(watch_signals)
        await serve(ops)
        nursery.cancel_scope.cancel()
