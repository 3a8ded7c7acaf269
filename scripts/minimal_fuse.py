"""The floor of a FUSE listing in Python: a pyfuse3 filesystem on trio, as
fmtfs is, that answers lookups of the paths it is given from a dict.

    scripts/minimal_fuse.py PATHS_FILE MOUNTPOINT     (serves until unmounted)

PATHS_FILE holds one relative path a line; each is an empty read-only file,
every folder on the way a folder.  Nothing is decoded, checked or stat'ed:
what `ls -ld` of these paths costs here is the round trip of each request
through the kernel, libfuse, pyfuse3 and trio, which fmtfs pays too
(scripts/bench.py's ls_N_floor figure)."""

from __future__ import annotations

import errno
import stat
import sys
from pathlib import Path

import pyfuse3
import trio

TIMEOUT = 1.0  # as fmtfs's ATTR_TIMEOUT


class MinimalOperations(pyfuse3.Operations):
    supports_dot_lookup = False

    def __init__(self, paths: list[str]) -> None:
        super().__init__()
        self.children: dict[tuple[int, bytes], int] = {}
        self.attributes = {pyfuse3.ROOT_INODE: _attributes(pyfuse3.ROOT_INODE, folder=True)}
        folders = {"": pyfuse3.ROOT_INODE}
        for path in paths:
            parent = pyfuse3.ROOT_INODE
            parts = path.split("/")
            for depth, name in enumerate(parts):
                key = "/".join(parts[: depth + 1])
                folder = depth < len(parts) - 1
                inode = folders.get(key) if folder else None
                if inode is None:
                    inode = len(self.attributes) + pyfuse3.ROOT_INODE
                    self.attributes[inode] = _attributes(inode, folder)
                    self.children[(parent, name.encode())] = inode
                    if folder:
                        folders[key] = inode
                parent = inode

    async def lookup(self, parent_inode, name, ctx=None):
        inode = self.children.get((parent_inode, name))
        if inode is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self.attributes[inode]

    async def getattr(self, inode, ctx=None):
        return self.attributes[inode]


def _attributes(inode: int, folder: bool) -> pyfuse3.EntryAttributes:
    entry = pyfuse3.EntryAttributes()
    entry.st_ino = inode
    entry.entry_timeout = entry.attr_timeout = TIMEOUT
    entry.st_mode = (stat.S_IFDIR | 0o555) if folder else (stat.S_IFREG | 0o444)
    entry.st_nlink = 2 if folder else 1
    entry.st_blksize = 128 * 1024
    return entry


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        raise SystemExit(__doc__)
    paths = Path(sys.argv[1]).read_text().split()
    pyfuse3.init(MinimalOperations(paths), sys.argv[2], set(pyfuse3.default_options) | {"fsname=minimal"})
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close(unmount=True)


if __name__ == "__main__":
    main()
