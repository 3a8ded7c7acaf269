"""A gvfs-metadata folder on disk: which files are live trees and journals,
the effective state of a tree, and the writes gvfsd-metadata makes
(journal appends, rebuild + rotation; spec §4 and §8).

Journal size.  gvfsd-metadata creates 32 KiB journals, but it reads, and
appends to, a journal of any size whose header `file_size` equals the
file's size (meta_journal_open, meta_journal_add_entry: offsets are u32,
nothing else limits it), and so do gio's readers.  A rebuild costs a pass
over the whole tree, so where the daemon rebuilds every 32 KiB, fmtfs first
grows a full journal (doubling; a copy renamed over it, same tag, so a crash
leaves the old journal or the new one, never a header that disagrees with
the file) up to MAX_JOURNAL_SIZE, and rebuilds only past that: a bulk write
of N entries costs O(N) instead of a rebuild per 32 KiB.  The daemon's next
rebuild (its 60 s timer after a change of its own) brings the journal back
to 32 KiB.
"""

from __future__ import annotations

import os
import re
import secrets
import string
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

from fmtfs.formats.base import BadRecord
from fmtfs.formats.files import fsync_path, read_prefix
from fmtfs.formats.gvfs.journal import (
    FILE_SIZE_OFFSET,
    JOURNAL_MAGIC,
    NUM_ENTRIES_OFFSET,
    JournalState,
    header_error,
    new_journal,
    read_journal,
)
from fmtfs.formats.gvfs.lazy import lazy_model
from fmtfs.formats.gvfs.model import MetaModel
from fmtfs.formats.gvfs.tree import (
    HEADER_SIZE,
    ROTATED,
    ROTATED_OFFSET,
    LazyTree,
    TreeError,
    TreeFile,
    TreeHeader,
    read_header,
    read_tree,
)
from fmtfs.formats.gvfs.treewriter import build_tree
from fmtfs.gcpause import paused
from fmtfs.permissions import inherit

_TEMP = re.compile(r"^(?P<tree>.+)\.[A-Za-z0-9]{6}$")  # mkstemp's <tree>.XXXXXX
_BACKUP = re.compile(r"\.backup\.\d{4}-\d\d-\d\d")  # <tree>.backup.<ISO 8601>
_JOURNAL = re.compile(r"^(?P<tree>.+)-(?P<tag>[0-9a-f]{8})\.log$")
_ALNUM = string.ascii_letters + string.digits

# Past this a full journal is rebuilt into the tree instead of grown: large
# enough that bulk writes rarely rebuild, small enough that gio's lookups,
# which walk the journal newest first, stay quick (4 MiB ~ 60,000 entries).
MAX_JOURNAL_SIZE = 4 << 20

# Writers of one process take turns; gvfsd-metadata itself must not run
# while fmtfs writes (it keeps the journal mapped, spec §8).
WRITE_LOCK = threading.RLock()


def journal_name(tree: str, tag: int) -> str:
    return f"{tree}-{tag:08x}.log"


@dataclass
class TreeRef:
    name: str
    path: Path
    header: TreeHeader

    @property
    def journal_path(self) -> Path:
        return self.path.with_name(journal_name(self.name, self.header.tag))


@dataclass
class Catalog:
    trees: list[TreeRef]
    ignored: list[str]  # temporaries, backups, rotated trees, stale journals


def catalog(folder: Path) -> Catalog:
    try:
        entries = sorted(
            (e for e in os.scandir(folder) if e.is_file(follow_symlinks=False)), key=lambda e: e.name
        )
    except OSError:
        return Catalog([], [])
    names = {e.name for e in entries}
    candidates: list[TreeRef] = []
    journals: list[str] = []
    ignored: list[str] = []
    for e in entries:
        head = read_prefix(Path(e.path), HEADER_SIZE)
        if head.startswith(JOURNAL_MAGIC):
            journals.append(e.name)
            continue
        header = read_header(head)
        if header is None:
            continue
        temp = _TEMP.match(e.name)
        if (
            e.name.startswith(".")
            or _BACKUP.search(e.name)
            or (temp and temp["tree"] in names)
            or header.rotated
        ):
            ignored.append(e.name)
            continue
        candidates.append(TreeRef(e.name, Path(e.path), header))
    live = {journal_name(t.name, t.header.tag) for t in candidates}
    ignored.extend(j for j in journals if j not in live)
    return Catalog(candidates, sorted(ignored))


def is_gvfs_folder(folder: Path) -> bool:
    if not folder.is_dir():
        return False
    cat = catalog(folder)
    if cat.trees:
        return True
    # a folder holding only journals (trees lost) still reads as gvfs
    return any(_JOURNAL.match(name) for name in cat.ignored)


def valid_tree_name(name: str) -> str | None:
    """Why `name` cannot be a new tree file name, or None."""
    if not name or name in (".", "..") or name.startswith("."):
        return "a tree name must be non-empty and not start with '.'"
    if "/" in name or "\0" in name:
        return "a tree name cannot hold '/' or NUL"
    if _JOURNAL.match(name) or _BACKUP.search(name):
        return "a tree name cannot look like a journal or a backup"
    return None


# -- reading state -----------------------------------------------------------


@dataclass
class TreeState:
    tree: TreeFile | LazyTree  # the whole model, or the bytes read on demand
    journal_path: Path
    journal: JournalState | None  # None: missing or ignored (see journal_error)
    journal_error: str | None


def read_state(tree_path: Path, whole: bool = True) -> TreeState:
    """The tree and its journal as gvfs would open them (TreeError when the
    tree itself is unreadable): the whole tree as a model (what a rebuild
    needs), or, not `whole`, read lazily (what reading needs: LazyTree)."""
    data = tree_path.read_bytes()
    tree = read_tree(data) if whole else LazyTree(data)
    jpath = tree_path.with_name(journal_name(tree_path.name, tree.header.tag))
    try:
        data = jpath.read_bytes()
    except FileNotFoundError:
        return TreeState(tree, jpath, None, "missing")
    error = header_error(data, tree.header.tag)
    if error:
        return TreeState(tree, jpath, None, error)
    return TreeState(tree, jpath, read_journal(data), None)


def effective_model(state: TreeState) -> MetaModel:
    """The tree with the journal's valid entries applied, as a rebuild does
    (a lazy model for a lazily read tree: fmtfs.formats.gvfs.lazy)."""
    if isinstance(state.tree, LazyTree):
        return lazy_model(state.tree, state.journal.entries if state.journal else ())
    model = state.tree.model
    if state.journal is not None:
        for entry in state.journal.entries:
            model.apply(entry)
    return model


# -- writing -----------------------------------------------------------------


def _create_exclusive(base: Path, data: bytes, like: Path) -> Path:
    """Write `data` to a new `<base>.XXXXXX` and fsync it.  It takes the
    owner and mode of `like` (the tree it belongs to, or the journal it
    replaces: the store is its user's, even when root writes it), or the
    folder's for a new tree."""
    for _ in range(100):
        tmp = base.with_name(base.name + "." + "".join(secrets.choice(_ALNUM) for _ in range(6)))
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            continue
        try:
            inherit(tmp, [like])
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        return tmp
    raise OSError(f"cannot create a temporary file beside {base}")


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rebuild(tree_path: Path, model: MetaModel) -> int:
    """meta_builder_write: new tree (new tag) to a temporary file, a new empty
    journal, rename over the tree, directory fsync, mark the old tree rotated
    through a handle opened before the rename, unlink the old journal.
    Returns the new tag."""
    folder = tree_path.parent
    try:
        old_fd: int | None = os.open(tree_path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        old_fd = None
    try:
        old_tag = None
        if old_fd is not None:
            old_header = read_header(os.pread(old_fd, HEADER_SIZE, 0))
            old_tag = old_header.tag if old_header else None
        tag = secrets.randbits(32)
        while tag == old_tag:
            tag = secrets.randbits(32)
        tmp = _create_exclusive(tree_path, build_tree(model, tag), tree_path)
        jpath = tree_path.with_name(journal_name(tree_path.name, tag))
        jtmp = _create_exclusive(jpath, new_journal(tag), tree_path)
        os.replace(jtmp, jpath)
        os.replace(tmp, tree_path)
        _fsync_dir(folder)
        if old_fd is not None:
            os.pwrite(old_fd, struct.pack(">I", ROTATED), ROTATED_OFFSET)
            if old_tag is not None:
                old_journal = tree_path.with_name(journal_name(tree_path.name, old_tag))
                _VALIDATED.pop(old_journal, None)
                try:
                    os.unlink(old_journal)
                except FileNotFoundError:
                    pass
        return tag
    finally:
        if old_fd is not None:
            os.close(old_fd)


def create_tree(tree_path: Path) -> int:
    """A new empty tree and journal (what the daemon does on first use)."""
    return rebuild(tree_path, MetaModel())


def append_entries(tree_path: Path, entries: list[bytes]) -> int:
    """Append encoded entries to the tree's journal, rebuilding and rotating
    whenever the next entry does not fit.  Returns the number of rebuilds."""
    rebuilds = 0
    pending = list(entries)
    with WRITE_LOCK:
        if not tree_path.exists():
            create_tree(tree_path)
        while pending:
            try:
                header = LazyTree(tree_path.read_bytes()).header  # gvfs's checks on open
            except TreeError as exc:
                raise BadRecord(
                    f"{tree_path.name}: the tree is unreadable ({exc}); gvfs cannot write it"
                ) from None
            jpath = tree_path.with_name(journal_name(tree_path.name, header.tag))
            if not jpath.exists():  # the daemon recreates a missing journal with the tree's tag
                tmp = _create_exclusive(jpath, new_journal(header.tag), tree_path)
                os.replace(tmp, jpath)
            written = _append_fitting(jpath, header.tag, pending)
            pending = pending[written:]
            if pending and not _grow_journal(jpath, sum(len(e) for e in pending)):
                # every node in memory at once, none in a cycle: collections
                # walked them over and over (reading a full journal after an
                # 11.6 MB tree: 0.4-0.9 s of it -> 0.16 s)
                with paused():
                    rebuild(tree_path, effective_model(read_state(tree_path)))
                rebuilds += 1
    return rebuilds


def _grow_journal(jpath: Path, wanted: int) -> bool:
    """Replace a full journal by a larger copy (same tag and entries; at
    least double, room for `wanted` more bytes if the cap allows).  False
    when it is at MAX_JOURNAL_SIZE already: time to rebuild."""
    data = jpath.read_bytes()
    size = len(data)
    if size >= MAX_JOURNAL_SIZE:
        return False
    used = _VALIDATED[jpath][1] if jpath in _VALIDATED else size
    new_size = size * 2
    while new_size < used + wanted and new_size < MAX_JOURNAL_SIZE:
        new_size *= 2
    new_size = min(new_size, MAX_JOURNAL_SIZE)
    grown = bytearray(data)
    grown += bytes(new_size - size)
    struct.pack_into(">I", grown, FILE_SIZE_OFFSET, new_size)
    tmp = _create_exclusive(jpath, bytes(grown), jpath)  # the journal's own owner and mode
    os.replace(tmp, jpath)
    _fsync_dir(jpath.parent)
    known = _VALIDATED.pop(jpath, None)
    if known is not None:  # same entries: no need to validate them again
        st = os.stat(jpath)
        _VALIDATED[jpath] = ((st.st_ino, st.st_size, st.st_mtime_ns), known[1], known[2])
    return True


# Journal path -> ((inode, size, mtime_ns), end of the valid entries, count),
# as this process last validated or wrote it: appends to an unchanged journal
# validate only what they add (a grown journal holds tens of thousands of
# entries; gvfsd-metadata keeps the same running state).
_VALIDATED: dict[Path, tuple[tuple[int, int, int], int, int]] = {}


def _identity(fd: int) -> tuple[int, int, int]:
    st = os.fstat(fd)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _append_fitting(jpath: Path, tag: int, entries: list[bytes]) -> int:
    """Append the leading entries that fit; entry bytes are written and
    synced before num_entries is raised, so a crash leaves the old count or
    complete entries."""
    fd = os.open(jpath, os.O_RDWR | os.O_CLOEXEC)
    try:
        ident = _identity(fd)
        known = _VALIDATED.get(jpath)
        if known is not None and known[0] == ident:
            end, count = known[1], known[2]
        else:
            end, count = _validated_end(jpath, os.pread(fd, ident[1], 0), tag)
        size, written = ident[1], 0
        for entry in entries:
            if len(entry) > size - end:
                break
            os.pwrite(fd, entry, end)
            end += len(entry)
            count += 1
            written += 1
        if written:
            os.fdatasync(fd)
            os.pwrite(fd, struct.pack(">I", count), NUM_ENTRIES_OFFSET)
        _VALIDATED[jpath] = (_identity(fd), end, count)
        return written
    finally:
        os.close(fd)


def _validated_end(jpath: Path, data: bytes, tag: int) -> tuple[int, int]:
    """(end of the valid entries, their count) of a journal gvfs would append
    to; BadRecord when gvfs would refuse writes."""
    error = header_error(data, tag)
    if error:
        raise BadRecord(f"{jpath.name}: {error}; gvfs ignores this journal and refuses writes")
    state = read_journal(data)
    if state.invalid is not None:
        raise BadRecord(
            f"{jpath.name}: entry {state.invalid.index} at offset {state.invalid.offset} is invalid "
            f"({state.invalid.error}); gvfs refuses writes to this journal until it is rebuilt"
        )
    return state.end, state.count


def sync_journal(tree_path: Path) -> None:
    header = read_header(read_prefix(tree_path, HEADER_SIZE))
    if header is None:
        return
    fsync_path(tree_path.with_name(journal_name(tree_path.name, header.tag)), missing_ok=True)
