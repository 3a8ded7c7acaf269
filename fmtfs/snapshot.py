"""What a source's native files look like to a view tree (fmtfs.views),
apart so that a check needs no tree: the Spark data source's planning
step tells by it whether the listing its schema step made still holds
(fmtfs.spark.listing) without importing the tree and its index."""

from __future__ import annotations

import os
from pathlib import Path


def snapshot_folder(source: Path) -> tuple[Path, str]:
    """The folder a source's native files are in, and the prefix of their
    names: a folder source's own files, or a file source and its siblings
    named after it (a rotated log's .1, .2)."""
    return (source, "") if source.is_dir() else (source.parent, source.name)


def source_snapshot(source: Path) -> tuple:
    """The source's native files as a tree sees them to tell a change: a
    tree whose `snapshot` equals this is what the source holds now: one
    (name, size, mtime_ns, inode, st_mode, uid, gid) a file, sorted."""
    folder, prefix = snapshot_folder(source)
    seen = []
    with os.scandir(folder) as it:
        for item in it:
            if item.name.startswith(prefix) and item.is_file():
                st = item.stat()
                # mode and owner too: a chmod/chown changes who may read the views
                seen.append(
                    (item.name, st.st_size, st.st_mtime_ns, st.st_ino, st.st_mode, st.st_uid, st.st_gid)
                )
    return tuple(sorted(seen))
