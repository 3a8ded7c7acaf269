"""Who may read and write a view: the native files decide.

A mount must never widen who can read the data.  Every view shows the
owner, group and permission bits of the native files it is decoded from,
and the mount is made with `default_permissions`, so the kernel itself
checks them on every open (allow_other then lets other users in only as far
as the native files already let them).

- A view decoded from one native file takes that file's owner, group and
  read bits; write bits only where the view takes writes, and then only the
  file's own write bits.
- A view built from several native files (Beats pending, kestrel pending
  and items, gvfs metadata, proio summaries, Parquet twins of those, the
  `_fmtfs.json`/`_errors.jsonl` meta files) takes the most restrictive of
  them, computed per class (owner, group, others) so that nobody gets a bit
  they lack on any one of the files.  The owner is kept when all the files
  agree on it, else the view belongs to the mounter (root, usually, who
  could read them all anyway); the same for the group.
- Folders take the source folder's owner, group and mode (a single-file
  source: the file's, with x wherever it has r).
- Native files fmtfs creates (a new Beats segment, a kestrel writer or
  reader file, a rotated gvfs tree) copy the owner and the most restrictive
  mode of their siblings, so a write through the mount never leaves a file
  more readable than the ones beside it.

Everything here works from stat results and knows no view tree (formats
use it for the files they create); fmtfs.viewpermissions applies it to a
tree's views, memoised per state of the tree.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("fmtfs")

READ_BITS = 0o444
WRITE_BITS = 0o222
USER, GROUP, OTHER = 0o700, 0o070, 0o007


@dataclass(frozen=True)
class Access:
    """Owner, group and permission bits (no file type) of a file or view."""

    uid: int
    gid: int
    mode: int

    @classmethod
    def of_stat(cls, st: os.stat_result) -> Access:
        return cls(st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))

    @classmethod
    def of_path(cls, path: Path) -> Access:
        return cls.of_stat(os.stat(path))


def _class_bits(access: Access, mask: int) -> int:
    """The rwx of one class (USER, GROUP or OTHER) as 0-7."""
    shift = {USER: 6, GROUP: 3, OTHER: 0}[mask]
    return (access.mode & mask) >> shift


def most_restrictive(accesses: Iterable[Access], mounter: tuple[int, int]) -> Access | None:
    """One owner/group/mode that grants nobody more than any of `accesses`
    grants them.  For each class of the result, a member could hold any
    role towards a source file whose owner or group differs from the
    result's, so it gets only the bits common to every role it might hold
    there.  With ordinary modes (owner >= group >= others) and a common
    owner and group, this is the plain intersection of the mode bits."""
    files = list(accesses)
    if len(files) <= 1:
        return files[0] if files else None  # the common case: one native file
    uids = {a.uid for a in files}
    gids = {a.gid for a in files}
    uid = uids.pop() if len(uids) == 1 else mounter[0]
    gid = gids.pop() if len(gids) == 1 else mounter[1]
    user = group = other = 0o7
    for a in files:
        u, g, o = _class_bits(a, USER), _class_bits(a, GROUP), _class_bits(a, OTHER)
        # the result's owner: that file's owner, or else maybe in its group, maybe not
        user &= u if a.uid == uid else g & o
        # a member of the result's group, not its owner
        if a.uid == uid:
            group &= g if a.gid == gid else g & o
        else:
            group &= u & g if a.gid == gid else u & g & o
        # anyone else: not in the result's group, not its owner
        if a.uid == uid:
            other &= o if a.gid == gid else g & o
        else:
            other &= u & o if a.gid == gid else u & g & o
    return Access(uid, gid, (user << 6) | (group << 3) | other)


def view_mode(access: Access, writable: bool) -> int:
    """A view's permission bits: the read bits of its native files, their
    write bits only where the view takes writes, never x."""
    return (access.mode & READ_BITS) | (access.mode & WRITE_BITS if writable else 0)


def folder_access(source: Path) -> Access:
    """The owner and mode of the mount's folders: the source folder's, or
    for a single-file source the file's, with x wherever it has r."""
    access = Access.of_path(source)
    if source.is_dir():
        return Access(access.uid, access.gid, access.mode & 0o7777)
    bits = access.mode & 0o777
    return Access(access.uid, access.gid, bits | ((bits & READ_BITS) >> 2))


# -- new native files ---------------------------------------------------------


def inherit(new: Path, like: Iterable[Path]) -> None:
    """Give a native file fmtfs just created the owner and the most
    restrictive mode of `like` (its siblings: the files of the same stream
    or queue), or, when none of them exists, the folder's owner with the
    folder's mode less x.  Call it before a temporary file is renamed into
    place, so the file never shows wider permissions than its siblings."""
    accesses = []
    for path in like:
        if path == new:
            continue
        try:
            accesses.append(Access.of_path(path))
        except OSError:
            continue
    target = most_restrictive(accesses, (os.getuid(), os.getgid()))
    if target is None:
        # the folder's owner and read bits, never writable by others (a
        # sticky /tmp-like folder must not give a world-writable file)
        folder = Access.of_path(new.parent)
        target = Access(folder.uid, folder.gid, folder.mode & 0o644)
    mine = Access.of_path(new)
    if os.geteuid() == 0 and (mine.uid, mine.gid) != (target.uid, target.gid):
        os.chown(new, target.uid, target.gid)
    os.chmod(new, target.mode & 0o777)


def private_folder(folder: Path, ours: bool = False) -> None:
    """Create a cache folder for its owner only: it holds decoded records
    (derived views, Parquet twins) of files others may not read.  A folder
    the user named is left as it is; one of fmtfs's own (`ours`, e.g. the
    cache's parquet/ folder) is made private even if an older run made it
    readable by others."""
    if not folder.exists():
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    elif ours and stat.S_IMODE(folder.stat().st_mode) & 0o077:
        os.chmod(folder, 0o700)


def private_file(path: Path) -> None:
    """Make one of fmtfs's cache files (the index) readable by its owner only."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o600)


# -- who may write -------------------------------------------------------------


def process_groups(pid: int, gid: int) -> set[int]:
    """The supplementary groups of the process behind a request (from
    /proc), plus its group from the request itself."""
    groups = {gid}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Groups:"):
                    groups.update(int(g) for g in line.split()[1:])
                    break
    except (OSError, ValueError):
        pass  # the process is gone: only its own group counts
    return groups


def may_write(access: Access, uid: int, groups: set[int]) -> bool:
    """Whether a user may write a file of `access` (root always may)."""
    if uid == 0:
        return True
    if uid == access.uid:
        return bool(access.mode & 0o200)
    if access.gid in groups:
        return bool(access.mode & 0o020)
    return bool(access.mode & 0o002)


def warn_if_shared(key_file: Path) -> None:
    """A key file others can read gives away every encrypted segment."""
    try:
        mode = stat.S_IMODE(os.stat(key_file).st_mode)
    except OSError:
        return  # reading it reports the problem
    if mode & 0o044:
        log.warning(
            "key file %s is readable by others (mode %04o): make it 0600 (chmod 600 %s)",
            key_file,
            mode,
            key_file,
        )
