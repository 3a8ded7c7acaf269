"""Small file helpers shared by the format modules: sniffing a magic and
making written bytes durable."""

from __future__ import annotations

import os
from pathlib import Path


def read_prefix(path: Path, size: int) -> bytes:
    """The first `size` bytes of a file (fewer if it is shorter); b"" when it
    cannot be read, so detection over a folder never raises."""
    try:
        with open(path, "rb") as f:
            return f.read(size)
    except OSError:
        return b""


def fsync_path(path: Path, missing_ok: bool = False) -> None:
    """fsync a file by name (a Writer's sync() after its handle is closed)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        if missing_ok:
            return
        raise
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new file in `folder` durable (best effort: some
    file systems refuse fsync on directories)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
