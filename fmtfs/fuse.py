"""The thin pyfuse3 adapter over fmtfs.views.SourceTree.

Every handler turns the tree's exceptions into FUSEError: anything else
raised from a handler would end pyfuse3.main and kill the mount.

Threading: the trio loop answers every request; work that decodes (reads,
refreshes, writes) runs in trio's worker threads so one slow chunk never
blocks the loop serving other requests.  Work that is a dictionary look-up
is answered by the loop itself, where a thread hop would cost more than the
work: a read whose bytes are already rendered in memory, and the attributes
of folders and indexed views from the tree's snapshot (a listing is one
lookup per path component); inode numbers are given on the loop only.
After a lookup, getattr or readdir the loop keeps polling for the next
request a moment (fmtfs.spin) rather than sleep between the requests of
a chain.  The
tree and index hand the threads immutable snapshots (fmtfs.entries), so reads
take no lock.  Read-only opens keep the kernel's page cache (`keep_cache`):
a second `cat` never reaches us; a derived or meta view's pages are kept
only while its identity is the one they were read under (_pages_current).
When a view changes (growth noticed by the poller or a refresh, a write
through the mount), its inode is queued for ONE invalidation thread, which
tells the kernel to drop the view's cached attributes and data; it must be
a thread of its own, since the kernel may wait on a request of that inode
that only the trio loop can answer.  Only attributes (no page lock) are
dropped in a handler's own worker thread: the derived views' before a write
through the mount is answered, so a stat right after it is fresh."""

from __future__ import annotations

import errno
import functools
import logging
import os
import queue
import stat
import threading
import time
from collections.abc import Callable

import pyfuse3
import trio

from fmtfs import permissions
from fmtfs.formats.base import BadRecord, FormatError, ReadOnlyView
from fmtfs.permissions import Access
from fmtfs.refusals import Refusals
from fmtfs.spin import Spinner
from fmtfs.treefiles import BytesFile, IndexedFile, SlicedFile
from fmtfs.twins import ParquetFile, TwinHandle
from fmtfs.viewfile import ViewFile
from fmtfs.viewpermissions import ViewPermissions
from fmtfs.views import META_ERRORS, META_INFO, SourceTree
from fmtfs.viewwriter import ViewWriter

log = logging.getLogger("fmtfs")

# Short attribute/entry lifetimes so a fresh stat sees a grown view; open
# readers are told through invalidate_inode by the poller.
ATTR_TIMEOUT = 1.0
POLL_SECONDS = 1.0


def _errors_to_fuse(handler):
    """The tree's exceptions as FUSE errors.  A line the format cannot
    encode is BadRecord (EINVAL); a user-facing FormatError is EIO with its
    one line; anything else (a decoder's ValueError included) is a bug:
    EIO, logged with its traceback, and the mount keeps serving."""

    @functools.wraps(handler)
    async def wrapper(*args, **kwargs):
        try:
            return await handler(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except FileNotFoundError:
            raise pyfuse3.FUSEError(errno.ENOENT) from None
        except FileExistsError:
            raise pyfuse3.FUSEError(errno.EEXIST) from None
        except ReadOnlyView as exc:  # handlers that refuse record it themselves (Refusals)
            log.debug("refused: %s", exc)
            raise pyfuse3.FUSEError(errno.EROFS if exc.read_only_kind else errno.EACCES) from None
        except BadRecord as exc:  # already logged and in _errors.jsonl (ViewWriter._refuse)
            log.debug("invalid write: %s", exc)
            raise pyfuse3.FUSEError(errno.EINVAL) from None
        except FormatError as exc:
            log.error("%s", exc)
            raise pyfuse3.FUSEError(errno.EIO) from None
        except Exception:
            log.exception("internal error in %s", handler.__name__)
            raise pyfuse3.FUSEError(errno.EIO) from None

    return wrapper


class Inodes:
    """Stable inode numbers for view paths ("" is the root)."""

    def __init__(self) -> None:
        self.by_path: dict[str, int] = {"": pyfuse3.ROOT_INODE}
        self.by_inode: dict[int, str] = {pyfuse3.ROOT_INODE: ""}

    def inode(self, path: str) -> int:
        ino = self.by_path.get(path)
        if ino is None:
            ino = len(self.by_inode) + pyfuse3.ROOT_INODE
            self.by_path[path] = ino
            self.by_inode[ino] = path
        return ino

    def path(self, inode: int) -> str:
        try:
            return self.by_inode[inode]
        except KeyError:
            raise pyfuse3.FUSEError(errno.ENOENT) from None


def _child(parent: str, name: bytes) -> str:
    text = os.fsdecode(name)
    return f"{parent}/{text}" if parent else text


def _name_refusal(operation: str):
    """A handler refusing `operation` (unlink, rename, ...): the tree mirrors
    the native files, so no names are made or removed."""

    async def refuse(self: FmtfsOperations, parent_inode: int, name: bytes | int, *args, **kwargs):
        try:
            path = _child(self.inodes.path(parent_inode), name) if isinstance(name, bytes) else ""
        except pyfuse3.FUSEError:
            path = ""
        raise self.refusals.refuse(
            errno.EPERM, path, 0, f"{operation} refused: the tree mirrors the native files"
        )

    return refuse


class FmtfsOperations(pyfuse3.Operations):
    supports_dot_lookup = False
    enable_writeback_cache = False

    def __init__(self, tree: SourceTree) -> None:
        super().__init__()
        self.tree = tree
        self.inodes = Inodes()
        self.handles: dict[int, tuple[str, ViewWriter | None]] = {}
        # handles opened for writing without O_APPEND: the only offset their
        # next write may have (a write anywhere else would not be an append)
        self.positions: dict[int, int] = {}
        self.next_handle = 1
        self.permissions = ViewPermissions(tree)
        self.refusals = Refusals(tree)
        self.spinner = Spinner()  # keeps the loop polling through a chain of lookups
        self.invalidations: queue.SimpleQueue[list[int]] = queue.SimpleQueue()
        threading.Thread(target=_invalidate_forever, args=(self.invalidations,), daemon=True).start()
        # an open Parquet twin reads the file it was opened on to the end
        self.twin_handles: dict[int, TwinHandle] = {}
        # derived and meta views: the identity their kept pages were read under
        self.page_identities: dict[int, str] = {}
        # derived and meta views whose attributes the kernel may hold
        self.derived_attributes: set[int] = set()

    # -- attributes -------------------------------------------------------

    async def _refresh(self) -> None:
        if self.tree.unchanged():
            return  # rate-limited, or a look on the loop found the source as indexed: no thread hop
        changed = await trio.to_thread.run_sync(self.tree.refresh)
        if changed:
            self._invalidate_later(changed)

    def _attributes(self, path: str) -> pyfuse3.EntryAttributes:
        return self._attributes_of(path, self.inodes.inode(path), self.tree.file(path))

    def _attributes_of(self, path: str, inode: int, view: ViewFile | None) -> pyfuse3.EntryAttributes:
        """A path's attributes, its inode and view looked up (on the loop:
        this may run in a worker thread, which then changes nothing)."""
        entry = pyfuse3.EntryAttributes()
        entry.st_ino = inode
        entry.entry_timeout = ATTR_TIMEOUT
        entry.attr_timeout = ATTR_TIMEOUT
        entry.st_blksize = 128 * 1024
        tree = self.tree
        if tree.is_dir(path):
            access = self.permissions.folder()
            entry.st_uid, entry.st_gid = access.uid, access.gid
            entry.st_mode = stat.S_IFDIR | (access.mode & ~0o222 if tree.readonly else access.mode)
            entry.st_nlink = 2
            entry.st_atime_ns = entry.st_mtime_ns = entry.st_ctime_ns = tree.mtime_ns
            return entry
        if view is None and path not in tree.created:
            raise pyfuse3.FUSEError(errno.ENOENT)
        if isinstance(view, (BytesFile, SlicedFile)):
            # derived and meta views change with any write through the
            # mount: their cached attributes are dropped before a write is
            # answered (_forget_derived_attributes), so a stat right after
            # it is fresh.  Never cached, they cost a GETATTR per read()
            # (auto_inval_data): most of a second `cat` of gvfs metadata
            self.derived_attributes.add(entry.st_ino)
        elif not isinstance(view, IndexedFile):
            entry.attr_timeout = 0  # Parquet twins, views being created
        access = self.permissions.view(path)
        entry.st_uid, entry.st_gid = access.uid, access.gid
        entry.st_mode = stat.S_IFREG | permissions.view_mode(access, tree.writable(path))
        entry.st_nlink = 1
        entry.st_size = size = view.size() if view is not None else 0
        entry.st_blocks = (size + 511) // 512
        entry.st_atime_ns = entry.st_mtime_ns = entry.st_ctime_ns = tree.modified_ns(path)
        return entry

    async def _attributes_async(self, path: str) -> pyfuse3.EntryAttributes:
        """A path's attributes, answered on the loop for a folder or a view
        whose size is a look-up (an indexed view's is in the index snapshot,
        a derived view's once rendered); a size that may need rendering is
        answered in a worker thread.  A thread hop per lookup
        was most of a listing's time (`ls -l` of 1,000 kestrel views:
        3,000 lookups, one per path component)."""
        inode = self.inodes.inode(path)  # numbered here: Inodes is changed on the loop only
        view = self.tree.file(path)
        if view is None or view.size_known():  # a folder, a view being created, or a look-up
            return self._attributes_of(path, inode, view)
        return await trio.to_thread.run_sync(self._attributes_of, path, inode, view)

    @_errors_to_fuse
    async def lookup(self, parent_inode, name, ctx=None):
        self.spinner.more()
        path = _child(self.inodes.path(parent_inode), name)
        await self._refresh()
        self.tree.used()  # a listing by path (`ls -l a/b c/d`) keeps the twin builder waiting too
        if not self.tree.exists(path):
            raise pyfuse3.FUSEError(errno.ENOENT)
        return await self._attributes_async(path)

    @_errors_to_fuse
    async def getattr(self, inode, ctx=None):
        self.spinner.more()
        await self._refresh()
        entry = await self._attributes_async(self.inodes.path(inode))
        log.debug("getattr %s: size %d, mtime %d", self.inodes.path(inode), entry.st_size, entry.st_mtime_ns)
        return entry

    @_errors_to_fuse
    async def setattr(self, inode, attr, fields, fh, ctx):
        path = self.inodes.path(inode)
        # `>` truncates before writing: accepted (as a no-op) only where the
        # write that follows replaces the whole view, or for a view being created.
        if fields.update_size and attr.st_size != self.tree.size(path):
            writer = self.handles.get(fh, (None, None))[1] if fh is not None else None
            replacing = writer is not None and writer.writer.mode == "replace"
            if not (attr.st_size == 0 and (replacing or path in self.tree.created)):
                code = errno.EPERM if self.tree.writable(path) else errno.EROFS
                raise self.refusals.refuse(code, path, attr.st_size, "truncation refused: views only grow")
        return await self._attributes_async(path)

    # -- directories ------------------------------------------------------

    @_errors_to_fuse
    async def opendir(self, inode, ctx):
        path = self.inodes.path(inode)
        await self._refresh()
        if not self.tree.is_dir(path):
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        self.tree.used()  # a listing (Spark's) keeps the twin builder waiting
        return inode

    @_errors_to_fuse
    async def readdir(self, fh, start_id, token):
        self.spinner.more()
        path = self.inodes.path(fh)
        names = self.tree.listdir(path)
        # resume where the kernel's buffer filled: offset = index + 1
        for position in range(start_id, len(names)):
            child = f"{path}/{names[position]}" if path else names[position]
            try:
                attributes = await self._attributes_async(child)
            except Exception:
                # one view that cannot be rendered must not hide its siblings;
                # a lookup of it reports the error itself
                log.exception("listing %s", child)
                continue
            if not pyfuse3.readdir_reply(token, os.fsencode(names[position]), attributes, position + 1):
                return

    # -- files ------------------------------------------------------------

    def _new_handle(self, path: str, writer: ViewWriter | None) -> int:
        fh = self.next_handle
        self.next_handle += 1
        self.handles[fh] = (path, writer)
        return fh

    @_errors_to_fuse
    async def open(self, inode, flags, ctx):
        path = self.inodes.path(inode)
        writing = flags & (os.O_WRONLY | os.O_RDWR)
        if not writing:
            # a write through the mount marks the tree stale (SourceTree.wrote):
            # a reader opening a derived view now must see what it changed
            await self._refresh()
        if not self.tree.exists(path) or self.tree.is_dir(path):
            raise pyfuse3.FUSEError(errno.ENOENT if not self.tree.exists(path) else errno.EISDIR)
        writer = None
        if writing:
            self._check_writer(path, ctx)
            writer = await self._open_writer(path, False)
            if flags & os.O_TRUNC and writer.writer.mode == "append" and self.tree.size(path):
                # the native formats are append-only: `>` cannot replace a view, use `>>`
                raise self.refusals.refuse(
                    errno.EPERM, path, 0, "`>` refused: views only grow, append with `>>`"
                )
        info = pyfuse3.FileInfo(fh=self._new_handle(path, writer))
        # an open keeps the twin builder waiting even when the kernel's kept
        # pages will serve every read (a second Spark query reaches us here only)
        self.tree.used()
        view = self.tree.file(path)
        if isinstance(view, ParquetFile):
            # readers of two versions share the inode's page cache: they agree
            # (each version starts with the previous one's bytes), and a short
            # read at the end of the older one shrinks the kernel's size, so
            # its zero-filled last page is dropped when a newer size is seen
            self.twin_handles[info.fh] = await trio.to_thread.run_sync(view.open)
        if writer is not None and writer.writer.mode == "append" and not flags & os.O_APPEND:
            self.positions[info.fh] = self.tree.size(path)
        # writes go straight to us so a refused line fails the writer's write();
        # reads keep the page cache (mmap works), across opens while the view
        # is unchanged (_pages_current)
        info.direct_io = writer is not None
        info.keep_cache = writer is None and view is not None and self._pages_current(inode, view)
        return info

    def _pages_current(self, inode: int, view: ViewFile) -> bool:
        """Whether the kernel's kept pages of `inode` may serve this open.
        An indexed view's may, always: every change to its stream is
        invalidated (_invalidate_later).  A derived or meta view changes
        with any change to the source, so its pages are kept only while its
        identity is the one the kernel's pages were read under (the last
        open); a changed one is dropped by this open.  (Opened without
        keep_cache and with attr_timeout 0, as they were, a second `cat` of
        an unchanged gvfs metadata.jsonl reached fmtfs for every byte.)"""
        if isinstance(view, IndexedFile):
            return True
        if isinstance(view, ParquetFile):
            return False  # twins: shared pages handled by the twin's own versions
        identity = view.identity()
        kept = self.page_identities.get(inode) == identity
        self.page_identities[inode] = identity
        return kept

    @_errors_to_fuse
    async def create(self, parent_inode, name, mode, flags, ctx):
        path = _child(self.inodes.path(parent_inode), name)
        if self.tree.exists(path):
            raise pyfuse3.FUSEError(errno.EEXIST)
        if not permissions.may_write(
            self.permissions.folder(), ctx.uid, permissions.process_groups(ctx.pid, ctx.gid)
        ):
            raise self.refusals.refuse(
                errno.EACCES, path, 0, "not allowed to create files in the source folder"
            )
        writer = await self._open_writer(path, True)
        info = pyfuse3.FileInfo(fh=self._new_handle(path, writer))
        info.direct_io = True
        return info, self._attributes(path)

    @_errors_to_fuse
    async def read(self, fh, off, size):
        path = self.handles[fh][0]
        twin = self.twin_handles.get(fh)
        if twin is not None:
            return twin.read(off, size)
        log.debug("read %s at %d, %d bytes", path, off, size)  # tests count these
        data = self.tree.read_in_memory(path, off, size)
        if data is not None:  # already rendered: answered here, no thread hop
            return data
        return await trio.to_thread.run_sync(self.tree.read, path, off, size)

    @_errors_to_fuse
    async def write(self, fh, off, buf):
        path, writer = self.handles[fh]
        if writer is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        log.debug("write %s at %d, %d bytes", path, off, len(buf))  # tests count these
        expected = self.positions.get(fh)
        if expected is not None:
            if off != expected:  # views only grow at their end
                raise self.refusals.refuse(
                    errno.EPERM, path, off, f"write at {off}, not at the end ({expected})"
                )
            self.positions[fh] = expected + len(buf)
        try:
            changed = await trio.to_thread.run_sync(self._through, writer.write, bytes(buf), off)
        except BadRecord:
            self._invalidate_later({META_ERRORS, META_INFO})
            raise
        except ReadOnlyView as exc:
            raise self.refusals.refuse(_refusal_code(exc), path, off, str(exc)) from None
        self._invalidate_later(changed | {path})
        return len(buf)

    @_errors_to_fuse
    async def flush(self, fh):
        writer = self.handles[fh][1]
        if writer is not None:
            self._invalidate_later(await trio.to_thread.run_sync(self._through, writer.flush))

    @_errors_to_fuse
    async def fsync(self, fh, datasync):
        # `datasync` (pyfuse3's signature) changes nothing: a flush writes
        # the encoded records and syncs the native files, data and metadata
        await self.flush(fh)

    @_errors_to_fuse
    async def release(self, fh):
        path, writer = self.handles.pop(fh, (None, None))
        self.positions.pop(fh, None)
        twin = self.twin_handles.pop(fh, None)
        if twin is not None:
            twin.close()
        if writer is not None:
            try:
                changed = await trio.to_thread.run_sync(self._through, writer.release)
                self._invalidate_later(changed | {META_ERRORS})
            finally:
                with self.tree.lock:
                    self.tree.created.discard(path)

    def _through(self, action: Callable[..., set[str]], *args: object) -> set[str]:
        """A writer's write/flush/release (in a worker thread); when it
        changed the native files, or refused a line (into _errors.jsonl),
        the derived views' cached attributes are dropped before the request
        is answered: the tree is re-read at the next stat, which must see it."""
        try:
            changed = action(*args)
        except BadRecord:
            self._forget_derived_attributes()
            raise
        if changed:
            self._forget_derived_attributes()
        return changed

    def _forget_derived_attributes(self) -> None:
        """Attributes only (the invalidation thread drops pages later): that
        takes no page lock, so it cannot wait on a request of ours."""
        inodes, self.derived_attributes = self.derived_attributes, set()
        for ino in list(inodes):  # a copy: a stat answered meanwhile may still add to it
            try:
                pyfuse3.invalidate_inode(ino, attr_only=True)
            except OSError:
                pass  # ENOENT: the kernel has forgotten the inode already

    # -- permissions and refusals ------------------------------------------

    def _check_writer(self, path: str, ctx: pyfuse3.RequestContext) -> None:
        """fmtfs runs as root but writes for the user behind the request only
        where that user may write every native file behind the view (the
        kernel checked the view's mode, derived from the same files, but
        that may be up to ATTR_TIMEOUT old)."""
        if ctx.uid == 0:
            return
        groups = permissions.process_groups(ctx.pid, ctx.gid)
        natives = self.tree.native_files_of(path)
        for native in self.tree.all_native_files() if natives is None else natives:
            try:
                allowed = permissions.may_write(Access.of_path(native), ctx.uid, groups)
            except OSError:
                continue  # gone: the writer reports it
            if not allowed:
                raise self.refusals.refuse(
                    errno.EACCES, path, 0, f"uid {ctx.uid} may not write the native file {native.name}"
                )

    async def _open_writer(self, path: str, create: bool) -> ViewWriter:
        try:
            return await trio.to_thread.run_sync(self.tree.open_writer, path, create)
        except ReadOnlyView as exc:
            raise self.refusals.refuse(_refusal_code(exc), path, 0, str(exc)) from None

    unlink = _name_refusal("unlink")
    rmdir = _name_refusal("rmdir")
    mkdir = _name_refusal("mkdir")
    rename = _name_refusal("rename")
    symlink = _name_refusal("symlink")
    link = _name_refusal("link")
    mknod = _name_refusal("mknod")

    async def statfs(self, ctx):
        result = pyfuse3.StatvfsData()
        result.f_bsize = result.f_frsize = 4096
        result.f_namemax = 255
        return result

    # -- growth -----------------------------------------------------------

    def _invalidate_later(self, paths: set[str]) -> None:
        """Tell the kernel a view changed (size and bytes).  Done by the
        invalidation thread, never inside the handler serving that inode
        (the kernel would deadlock)."""
        inodes = [self.inodes.by_path[p] for p in paths if p in self.inodes.by_path]
        if inodes:
            self.invalidations.put(inodes)

    async def poll_source(self) -> None:
        """Notice growth by the producing application, for `tail -f` readers."""
        while True:
            await trio.sleep(POLL_SECONDS)
            if self._only_unread_writes():
                continue
            try:
                changed = await trio.to_thread.run_sync(self.tree.poll)
            except Exception:
                log.exception("refreshing the source failed")
                continue
            if changed:
                self._invalidate_later(changed)

    def _only_unread_writes(self) -> bool:
        """Whether this poll can wait: a write burst through the mount is
        going on (a write within the last poll period) and no view is open
        for reading, so no one waits to see growth; the writer's close, or
        the next stat or lookup, indexes it.  Indexing every second during a
        burst took the GIL from the writer (a third of `cat lines >> view`
        of Beats frames, py-spy)."""
        if time.monotonic() - self.tree.last_write >= POLL_SECONDS:
            return False
        return all(writer is not None for _, writer in list(self.handles.values()))


def _refusal_code(exc: ReadOnlyView) -> int:
    return errno.EROFS if exc.read_only_kind else errno.EACCES


def _invalidate_forever(invalidations: queue.SimpleQueue[list[int]]) -> None:
    while True:
        inodes = set(invalidations.get())
        while not invalidations.empty():  # one pass over a burst of changes
            inodes.update(invalidations.get())
        log.debug("invalidating inodes %s", sorted(inodes))
        for ino in inodes:
            try:
                pyfuse3.invalidate_inode(ino, attr_only=False)
            except OSError:
                pass  # ENOENT: the kernel has forgotten the inode already


async def serve(ops: FmtfsOperations) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ops.poll_source)
        nursery.start_soon(ops.spinner.run)
        await pyfuse3.main()
        nursery.cancel_scope.cancel()
