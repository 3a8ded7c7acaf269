"""Rendered pieces kept across mounts: the JSON Lines bytes every scan
renders anyway (to learn each view's exact size), lz4-compressed into one
file per source under `--cache-dir/rendered/`.

Why: a scan renders every chunk of every view once, to measure it, and used
to throw the bytes away, so the first `cat` or Spark query of every later
mount decoded the whole source again, at the speed of a Python loop (a
Beats queue: 45 MB/s of JSON per core).  Kept, a piece costs a `pread` and
an lz4 decompression (2-4 GB/s) instead; JSON compresses 6-8x, so the
store is about a sixth of the views' size (Beats 100 MB: about 30 MB,
its hour buckets included).  Compressing costs the scan 1.4-1.6 GB/s.

The chunk index (fmtfs.index) says where each kept piece is (`Kept`, in
its `pieces` rows), so a piece is trusted exactly as long as the chunk
row it belongs to, and only in the store file it was written to: the
file starts with a random id (`HEADER`), new at every rewrite, that each
`Kept` names.  An id, not the file's inode: a cache folder copied or
restored elsewhere (`cp -a`, a backup, a CI cache) keeps its pieces,
where an inode check sent every read of a copy back to decoding.  The
file only grows: decode workers and the indexing process append to it
at once, each holding `flock` while it writes, and
pieces are published (committed to SQLite) only after they are written.
A piece whose bytes do not match its checksum (a crash before the page
cache reached the disk) is ignored: it is decoded instead.  Pieces of
streams the index forgot stay as dead bytes until a later open finds the
file mostly dead and rewrites it (`compacted`).  The file holds decoded
records: it is created for its owner only, like the rest of the cache."""

from __future__ import annotations

import errno
import fcntl
import logging
import math
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import lz4.block
import xxhash

log = logging.getLogger("fmtfs")

# A store file starts with these bytes and its id (8 bytes, little-endian):
# the id of a new file, or of a file rewritten, is random.
MAGIC = b"fmtfs-kp"
HEADER = len(MAGIC) + 8

# The default budget: at most this much disk, and at most a quarter of what
# is free when the store opens.
DEFAULT_LIMIT = 8 << 30


class Kept(NamedTuple):
    """Where one kept piece is, in the store file whose id is `file`.  A
    named tuple: a first mount's workers send one per piece (wallaby 100 MB:
    26,713), which unpickle in 17 ms, against 76 ms as a dataclass."""

    at: int
    length: int  # compressed bytes
    size: int  # rendered bytes: the piece's length in its view
    check: int  # checksum() of the compressed bytes
    file: int


def checksum(blob: bytes) -> int:
    # 63 bits: SQLite integers are signed
    return xxhash.xxh3_64_intdigest(blob) & ((1 << 63) - 1)


def _new_id() -> int:
    return int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)


def _write_header(fd: int) -> int:
    """Start an empty store file: its magic and a new id (returned)."""
    file_id = _new_id()
    header = MAGIC + file_id.to_bytes(8, "little")
    if os.pwrite(fd, header, 0) != HEADER:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return file_id


def _read_id(fd: int) -> int | None:
    """A store file's id; None when it does not start as a store does
    (written by an older fmtfs, which named its store by inode, or damaged)."""
    header = os.pread(fd, HEADER, 0)
    if len(header) != HEADER or not header.startswith(MAGIC):
        return None
    return int.from_bytes(header[len(MAGIC) :], "little")


def default_limit(folder: Path) -> int:
    return min(DEFAULT_LIMIT, shutil.disk_usage(folder).free // 4)


def parse_size(text: str) -> int | None:
    """`--rendered-cache` as a user writes it: `auto` (None: the default
    budget), `0`/`off`, or bytes with an optional K/M/G/T suffix."""
    word = text.strip().lower()
    if word == "auto":
        return None
    if word in ("off", "no", "none"):
        return 0
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    factor = units.get(word[-1:], 1)
    number = word[:-1] if word[-1:] in units else word
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"not a size: {text!r} (say auto, off, or e.g. 512M, 4G)") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"not a size: {text!r} (say auto, off, or e.g. 512M, 4G)")
    return int(value * factor)


class KeptPieces:
    """One source's store file, opened by every process that scans or reads
    it (the mount, its decode workers, `fmtfs index`, `fmtfs cat`)."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.limit = limit
        path.parent.mkdir(mode=0o700, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            self.file = self._identify()
        except BaseException:
            os.close(self._fd)
            raise
        self.served = 0  # pieces read back (tests count them)
        self._failed = False  # a write failed (said once in the log)

    def _identify(self) -> int:
        """The file's id, under the lock that keeps (processes open one
        store at once): a new file gets its header; one that does not start
        as a store is rewritten empty, as compaction rewrites a store (its
        pieces were named by another id, so none of them is read)."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            if os.fstat(self._fd).st_size == 0:
                return _write_header(self._fd)
            found = _read_id(self._fd)
            if found is not None:
                return found
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        log.info("%s is not a store of kept pieces (an older fmtfs's?): starting it anew", self.path)
        self.file = -1  # no piece's id: compacted() keeps nothing of it
        if self.compacted(()) is None:
            raise OSError(errno.EBUSY, f"{self.path} is being rewritten by another process")
        return self.file

    @property
    def spec(self) -> tuple[Path, int]:
        """What another process opens the same store with: KeptPieces(*spec)."""
        return self.path, self.limit

    def keep(self, pieces: dict[str, bytes | bytearray]) -> dict[str, Kept]:
        """Append `pieces` (view -> rendered bytes), compressed; where each
        went.  Views given the very same object (a Beats segment's hour
        bucket holding its whole chunk) share one copy.  Nothing is kept
        once the file would pass its limit."""
        packed: dict[int, bytes] = {}  # id of a piece's bytes -> compressed
        for data in pieces.values():
            if data and id(data) not in packed:
                packed[id(data)] = lz4.block.compress(data, store_size=False)
        if not packed:
            return {}
        total = sum(map(len, packed.values()))
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            at = os.fstat(self._fd).st_size
            if at + total > self.limit:
                return {}
            blob = b"".join(packed.values())
            if os.pwrite(self._fd, blob, at) != len(blob):  # the disk filled up on the way
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as exc:  # a full disk: keeping is worth a decode, never a failed scan
            if not self._failed:
                log.warning("cannot keep rendered pieces in %s: %s", self.path, exc.strerror or exc)
                self._failed = True
            return {}
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        where: dict[int, tuple[int, int, int]] = {}  # id -> (offset, compressed length, checksum)
        for key, blob in packed.items():
            where[key] = (at, len(blob), checksum(blob))
            at += len(blob)
        out = {}
        for view, data in pieces.items():
            if data:
                offset, length, check = where[id(data)]
                out[view] = Kept(offset, length, len(data), check, self.file)
        return out

    def get(self, kept: Kept) -> bytes | None:
        """The piece's rendered bytes, or None when they are not there as
        they were written (another store file, a torn write)."""
        if kept.file != self.file:
            return None
        try:
            blob = os.pread(self._fd, kept.length, kept.at)
        except OSError:  # a disk error: the piece is decoded instead
            return None
        if len(blob) != kept.length or checksum(blob) != kept.check:
            return None
        try:
            data = lz4.block.decompress(blob, uncompressed_size=kept.size)
        except lz4.block.LZ4BlockError:
            return None
        self.served += 1
        return data

    def size(self) -> int:
        """Bytes of pieces the file holds (its header aside)."""
        return max(0, os.fstat(self._fd).st_size - HEADER)

    def compacted(self, live: Iterable[Kept]) -> dict[Kept, Kept] | None:
        """Rewrite the file with only the `live` pieces (in file order), if
        no other process has it open for writing: old -> new place of each,
        or None when the file was left as it was.  The caller publishes the
        new places; until then the old file, still open here, serves."""
        lock = os.open(self.path.with_suffix(".compacting"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None  # another process compacts it now
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            new_path = self.path.with_suffix(".new")
            fd = os.open(new_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            moved: dict[Kept, Kept] = {}
            try:
                file_id = _write_header(fd)
                at = HEADER
                for old in sorted(set(live), key=lambda k: k.at):
                    if old.file != self.file:
                        continue
                    blob = os.pread(self._fd, old.length, old.at)
                    os.pwrite(fd, blob, at)
                    moved[old] = Kept(at, old.length, old.size, old.check, file_id)
                    at += old.length
                os.replace(new_path, self.path)
            except BaseException:
                os.close(fd)
                new_path.unlink(missing_ok=True)
                raise
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd, self.file = fd, file_id
            return moved
        finally:
            os.close(lock)

    def close(self) -> None:
        os.close(self._fd)
