"""The Access of every view of a tree (fmtfs.permissions applied to views).

fmtfs.fuse asks ViewPermissions, which memoises per state of the tree
(`SourceTree.generation`) so a getattr costs a dictionary look-up, not an
os.stat."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

from fmtfs.permissions import Access, folder_access, most_restrictive
from fmtfs.snapshot import snapshot_folder
from fmtfs.views import SourceTree

ALL = "\0all"  # the key for "every native file" (no view has this path)


class ViewPermissions:
    """The Access of every view of one tree, memoised per tree generation.

    The tree's snapshot (fmtfs.snapshot) holds every native file's mode and
    owner as its last look saw them, so a chmod or chown of a native file
    starts a new generation, and a view's Access is read from it: the first
    `ls -l` of 1,000 streams stat'ed each native file again.  A file the
    snapshot does not list is stat'ed, once per generation."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self.mounter = (os.getuid(), os.getgid())
        self._lock = threading.Lock()
        self._generation = -1
        # by native path as text: hashing 10,000 Path objects was a tenth
        # of the first `ls -l` of as many views, on the FUSE loop
        self._stats: dict[str, Access | None] = {}
        self._views: dict[str, Access] = {}
        self._folder: Access | None = None

    def _current(self) -> None:
        generation = self.tree.generation
        if generation != self._generation:
            self._generation = generation
            self._stats, self._views, self._folder = self._snapshot_accesses(), {}, None

    def _snapshot_accesses(self) -> dict[str, Access | None]:
        """The Access of every native file in the tree's snapshot, by path."""
        folder = os.fspath(snapshot_folder(self.tree.format.source)[0])
        return {
            os.path.join(folder, name): Access(uid, gid, stat.S_IMODE(mode))
            for name, _, _, _, mode, uid, gid in self.tree.snapshot or ()
        }

    def folder(self) -> Access:
        with self._lock:
            self._current()
            if self._folder is None:
                self._folder = folder_access(self.tree.format.source)
            return self._folder

    def _file(self, path: Path) -> Access | None:
        key = os.fspath(path)
        try:
            return self._stats[key]
        except KeyError:
            pass
        try:
            found: Access | None = Access.of_path(path)
        except OSError:
            found = None  # gone since the refresh: it grants nothing
        self._stats[key] = found
        return found

    def _combined(self, natives: list[Path]) -> Access | None:
        accesses = [self._file(p) for p in natives]
        if any(a is None for a in accesses):
            # a native file vanished between the refresh and now: grant nothing
            return Access(self.mounter[0], self.mounter[1], 0)
        return most_restrictive([a for a in accesses if a is not None], self.mounter)

    def view(self, path: str) -> Access:
        """Owner, group and the native files' combined bits for a view."""
        with self._lock:
            self._current()
            found = self._views.get(path)
            if found is None:
                natives = self.tree.native_files_of(path)
                if natives is None:  # every native file: computed once per generation
                    found = self._views.get(ALL)
                    if found is None:
                        found = self._views[ALL] = self._of_all()
                else:
                    found = self._combined(natives) or self._of_all()
                self._views[path] = found
            return found

    def _of_all(self) -> Access:
        found = self._combined(self.tree.all_native_files())
        if found is None:  # no native file at all (an empty source's meta files)
            folder = self._folder or folder_access(self.tree.format.source)
            found = Access(folder.uid, folder.gid, folder.mode & 0o666)
        return found
