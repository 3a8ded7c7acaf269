"""A kestrel queue folder: which file is what, and in which order (spec §4, §8).

Names decide the kind, magic bytes confirm it:
- `<queue>.<digits>` starting `27 64 26 03`: a libkestrel writer file;
- `<queue>.read.<reader>` (reader may be empty): a libkestrel reader file;
- `<queue>`, `<queue>.<digits>` or `<queue>.<digits>.pack` whose first byte
  is an opcode 0-9 (or empty): a kestrel 0.8-2.x journal.
Names containing `~` are temporaries (`~~`) or archives and are ignored.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path

from fmtfs.formats.files import read_prefix
from fmtfs.formats.kestrel import legacy
from fmtfs.formats.kestrel.records import WRITER_MAGIC, Corrupt, Put, read_record


@dataclass
class WriterFile:
    queue: str
    number: int  # the <n> of <queue>.<n>
    path: Path
    first_id: int | None  # the first PUT id, None when the file holds none
    sort_key: tuple[int, int] = (0, 0)


@dataclass
class ReaderFile:
    queue: str
    reader: str  # "" for the default reader
    path: Path


@dataclass
class LegacyFile:
    queue: str
    path: Path
    stamp: int | None  # <ms> of a rotated file or a pack, None for the live file
    pack: bool = False


@dataclass
class Queue:
    name: str
    writers: list[WriterFile] = field(default_factory=list)  # kestrel's order
    readers: list[ReaderFile] = field(default_factory=list)  # by name
    legacy: list[LegacyFile] = field(default_factory=list)  # every legacy file, replay order first
    replay: list[LegacyFile] = field(default_factory=list)  # the files a replay reads


@dataclass(frozen=True)
class FileFacts:
    """What scan_folder read of one native file, kept while its identity
    holds: a rebuild asks for the queues four times (streams, view sources,
    derived and writable views), and reading every file's head and first
    PUT each time made a second mount of 10,000 queues take 8.4 s."""

    identity: tuple[int, int, int] | None  # inode, size, mtime_ns
    path: Path
    head: bytes  # the first 4 bytes
    first_id: int | None  # a writer file's first PUT id


def map_file(path: Path) -> mmap.mmap | bytes:
    """The file's bytes, mapped (an empty file cannot be mapped)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return b""
        return mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)


def first_put_id(path: Path) -> int | None:
    """The id of the first PUT in a writer file (kestrel keys files by it)."""
    try:
        buf = map_file(path)
    except OSError:
        return None
    try:
        pos, end = 4, len(buf)
        while True:
            got = read_record(buf, pos, end)
            if got is None:
                return None
            record, pos = got
            if isinstance(record, Put):
                return record.id
    except Corrupt:
        return None
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()


def looks_like_legacy(path: Path, head: bytes) -> bool:
    """A plausible old journal: its first few operations parse (used only by
    detection, where a stray file starting with a small byte must not win)."""
    if not head or head[0] > 9:
        return False
    sample = read_prefix(path, 65536)
    try:
        size = path.stat().st_size
    except OSError:
        return False
    pos = 0
    for _ in range(8):
        try:
            got = legacy.read_op(sample, pos, len(sample))
        except legacy.BrokenItem:
            return len(sample) < size  # cut by our sample, not by the file
        if got is None:
            return True
        pos = got[1]
    return True


def _is_digits(text: str) -> bool:
    return text.isdigit() and text.isascii()


def has_writer_file(folder: Path) -> bool:
    """Whether a `<queue>.<digits>` file in `folder` starts with the writer
    magic: detection's quick answer, stopping at the first one (scan_folder
    reads every file's head and first PUT)."""
    try:
        entries = os.scandir(folder)
    except OSError:
        return False
    with entries:
        for entry in entries:
            _, parts = _name_parts(entry.name)
            if "~" not in entry.name and _is_writer_name(parts):
                if read_prefix(Path(entry.path), 4) == WRITER_MAGIC:
                    return True
    return False


def _name_parts(name: str) -> tuple[str, list[str]]:
    """A file name's queue name and its dot-separated parts (a leading "."
    belongs to the queue's name, shown as %2E...)."""
    lead = "." if name.startswith(".") else ""
    parts = name[len(lead) :].split(".")
    return lead + parts[0], parts


def _is_writer_name(parts: list[str]) -> bool:
    """`<queue>.<digits>`: a writer file's name (or an old rotated journal's)."""
    return len(parts) == 2 and _is_digits(parts[1])


def _facts(entry: os.DirEntry, writer_name: bool, memo: dict[str, FileFacts] | None) -> FileFacts:
    """A file's head (and first PUT id if its name is a writer file's), from
    `memo` while the file's inode, size and mtime are as when it was read."""
    identity = None  # not kept: no memo, or the file could not be stat'ed
    if memo is not None:
        try:
            st = entry.stat()
            identity = (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            pass
        known = memo.get(entry.name)
        if identity is not None and known is not None and known.identity == identity:
            return known
    path = Path(entry.path)
    head = read_prefix(path, 4)
    facts = FileFacts(
        identity, path, head, first_put_id(path) if writer_name and head == WRITER_MAGIC else None
    )
    if memo is not None and identity is not None:
        memo[entry.name] = facts
    return facts


def scan_folder(
    folder: Path, only: str | None = None, memo: dict[str, FileFacts] | None = None
) -> dict[str, Queue]:
    """Every queue in `folder` (or just `only`), files classified and ordered.
    `memo`: FileFacts by file name, used and kept up to date."""
    queues: dict[str, Queue] = {}
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return queues
    for entry in entries:
        name = entry.name
        if "~" in name:
            continue
        try:
            if not entry.is_file():
                continue
        except OSError:
            continue
        qname, parts = _name_parts(name)
        if only is not None and qname != only:
            continue
        if len(parts) >= 3 and parts[1] == "read":
            queue = queues.setdefault(qname, Queue(qname))
            queue.readers.append(ReaderFile(qname, name[len(qname) + 6 :], Path(entry.path)))
            continue
        writer_name = _is_writer_name(parts)
        facts = _facts(entry, writer_name, memo)
        head = facts.head
        if writer_name and head == WRITER_MAGIC:
            queue = queues.setdefault(qname, Queue(qname))
            queue.writers.append(WriterFile(qname, int(parts[1]), facts.path, facts.first_id))
            continue
        if head[:1] and head[0] > 9:
            continue
        if not head and len(parts) > 1:
            continue  # an empty rotated file adds nothing; it may be a writer file being born
        if len(parts) == 1:
            stamp, pack = None, False
        elif _is_writer_name(parts):
            stamp, pack = int(parts[1]), False
        elif len(parts) == 3 and _is_digits(parts[1]) and parts[2] == "pack":
            stamp, pack = int(parts[1]), True
        else:
            continue
        queue = queues.setdefault(qname, Queue(qname))
        queue.legacy.append(LegacyFile(qname, facts.path, stamp, pack))
    if memo is not None and only is None:
        for gone in memo.keys() - {entry.name for entry in entries}:
            memo.pop(gone, None)
    for queue in queues.values():
        order_writers(queue.writers)
        queue.readers.sort(key=lambda r: r.reader)
        queue.replay = replay_order(queue.legacy)
        rest = [f for f in queue.legacy if f not in queue.replay]
        queue.legacy = queue.replay + sorted(rest, key=lambda f: (f.stamp or 0, f.pack))
    return queues


def order_writers(writers: list[WriterFile]) -> None:
    """Kestrel's order: by first PUT id, ties by number.  A file without a
    PUT (fresh after a rotation) takes the key kestrel registers it under,
    one past the last id of the files named before it."""
    writers.sort(key=lambda w: w.number)
    running = 0
    for w in writers:
        if w.first_id is None:
            w.sort_key = (running + 1, w.number)
        else:
            w.sort_key = (w.first_id, w.number)
            running = max(running, w.first_id)
    writers.sort(key=lambda w: w.sort_key)


def replay_order(files: list[LegacyFile]) -> list[LegacyFile]:
    """Rotated files by timestamp, then the live file; the newest pack stands
    in for every file stamped at or before it."""
    packs = [f for f in files if f.pack]
    newest_pack = max(packs, key=lambda f: f.stamp or 0) if packs else None
    cutoff = newest_pack.stamp if newest_pack else -1
    rotated = sorted(
        (f for f in files if not f.pack and f.stamp is not None and f.stamp > cutoff), key=lambda f: f.stamp
    )
    live = [f for f in files if f.stamp is None]
    return ([newest_pack] if newest_pack else []) + rotated + live
