"""fmtfs's view of a gvfs-metadata folder (LAYOUT.md §3, §4):

<tree>/journal.jsonl    the valid journal entries (a Stream; writable)
<tree>/metadata.jsonl   tree + valid journal entries, per path (derived)
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from fmtfs.formats.base import (
    BadRecord,
    Chunk,
    Format,
    PiecedRender,
    Problem,
    ReadOnlyView,
    Record,
    State,
    Stream,
    Writer,
)
from fmtfs.formats.gvfs import columns, store
from fmtfs.formats.gvfs.card import CARD
from fmtfs.formats.gvfs.journal import (
    HEADER_SIZE,
    Invalid,
    Malformed,
    header_error,
    iter_entries,
    read_header,
)
from fmtfs.formats.gvfs.metadata import metadata_pieces
from fmtfs.formats.gvfs.records import entry_record, record_entry
from fmtfs.formats.gvfs.tree import LazyTree, TreeError
from fmtfs.formats.schema import ViewSchema
from fmtfs.formats.timerange import native_range
from fmtfs.shape import decode_name, encode_name

JOURNAL_VIEW = "journal.jsonl"
METADATA_VIEW = "metadata.jsonl"
CHUNK_RECORDS = 2000


class GvfsJournalStream(Stream):
    """One tree's live journal.  The stream is named after the journal file,
    so a rotation (new tag, new file) starts a new stream."""

    renderer_version = 2  # chunks carry their time range
    time_field = ("time", "s")  # the time column and its unit (time filters)

    def __init__(self, path: Path, tree: str, tag: int) -> None:
        super().__init__(path.name, path)
        self.tree = tree
        self.tag = tag
        self.view = f"{encode_name(tree)}/{JOURNAL_VIEW}"

    def view_paths(self) -> list[str]:
        return [self.view]

    def _data(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None

    def scan(self, start: int | None, state: State | None) -> Iterator[Chunk | Problem]:
        data = self._data()
        if data is None:
            return
        error = header_error(data, self.tag)
        if error:
            yield Problem(self.name, 0, f"journal ignored, as gvfs does: {error}")
            return
        total = read_header(data).num_entries
        off = HEADER_SIZE if start is None else start
        index = state["entries"] if state else 0
        chunk_start, chunk_index, records, mtimes = off, index, [], []
        for item in iter_entries(data, off, index, total):
            if isinstance(item, Invalid):
                if off > chunk_start:
                    yield self._chunk(chunk_start, off, chunk_index, records, mtimes)
                yield Problem(
                    self.name,
                    item.offset,
                    f"entry {item.index}: {item.error}; gvfs ignores it and every later entry",
                )
                return
            if isinstance(item, Malformed):
                yield Problem(self.name, item.offset, f"entry {index}: {item.error}")
                off += int.from_bytes(data[off : off + 4], "big")
            else:
                records.append(entry_record(item))
                mtimes.append(item.mtime)
                off += item.size
            index += 1
            if len(records) >= CHUNK_RECORDS:
                yield self._chunk(chunk_start, off, chunk_index, records, mtimes)
                chunk_start, chunk_index, records, mtimes = off, index, [], []
        if off > chunk_start:
            yield self._chunk(chunk_start, off, chunk_index, records, mtimes)

    def _chunk(self, start: int, end: int, first: int, records: list[Record], mtimes: list[int]) -> Chunk:
        times = native_range(mtimes, "s")  # the entries' native times (seconds)
        return Chunk(start, end, {"entries": first}, {self.view: records}, times=times)

    def decode(self, chunk: Chunk) -> dict[str, list[Record]]:
        data = self._data()
        records: list[Record] = []
        if data is not None and read_header(data) is not None:
            off = chunk.start
            for item in iter_entries(
                data, chunk.start, chunk.state["entries"], read_header(data).num_entries
            ):
                if off >= chunk.end or isinstance(item, Invalid):
                    break
                if isinstance(item, Malformed):
                    off += int.from_bytes(data[off : off + 4], "big")
                else:
                    records.append(entry_record(item))
                    off += item.size
        return {self.view: records}


class GvfsJournalWriter(Writer):
    """Appends written journal lines as entries of a tree's journal."""

    def __init__(self, tree_path: Path) -> None:
        self.tree_path = tree_path

    def write(self, records: list[Record]) -> None:
        entries = [self._encode(i, r) for i, r in enumerate(records)]
        if entries:
            store.append_entries(self.tree_path, entries)

    @staticmethod
    def _encode(index: int, record: Record) -> bytes:
        try:
            return record_entry(record)
        except BadRecord as exc:
            raise BadRecord(f"line {index + 1}: {exc}") from None

    def sync(self) -> None:
        store.sync_journal(self.tree_path)


class GvfsFormat(Format, card=CARD):
    def _catalog(self) -> store.Catalog:
        return store.catalog(self.source)

    def streams(self) -> list[Stream]:
        out: list[Stream] = []
        for tree in self._catalog().trees:
            if tree.journal_path.is_file():
                out.append(GvfsJournalStream(tree.journal_path, tree.name, tree.header.tag))
        return out

    def derived_views(self) -> dict[str, Any]:
        return {
            f"{encode_name(tree.name)}/{METADATA_VIEW}": self._metadata_renderer(tree.path)
            for tree in self._catalog().trees
        }

    @staticmethod
    def _metadata_renderer(tree_path: Path) -> PiecedRender:
        # lines a piece at a time, not records: the records of a big tree
        # held at once cost 15x their JSON (fmtfs.formats.gvfs.lazy)
        def pieces(part: int = 0, parts: int = 1) -> Iterator[bytes]:
            try:
                found = metadata_pieces(tree_path, part, parts)
                first = next(found, None)  # the tree and journal are read here
            except (OSError, TreeError):
                return  # reported by problems()
            if first is not None:
                yield first
                yield from found

        return PiecedRender(pieces, part=pieces)

    def problems(self) -> list[Problem]:
        out = []
        for tree in self._catalog().trees:
            try:
                lazy = LazyTree(tree.path.read_bytes())
            except TreeError as exc:
                out.append(Problem(tree.name, 0, f"tree unreadable, as for gvfs: {exc}"))
                continue
            except OSError as exc:
                out.append(Problem(tree.name, 0, f"cannot read the tree: {exc.strerror}"))
                continue
            out.extend(Problem(tree.name, off, msg) for off, msg in lazy.problems())
        return out

    def early_problems(self) -> list[Problem]:
        # a tree's damage is found only by reading all of it (0.2 s for a
        # 2 MB store, 11 s for 58 MB): left to _errors.jsonl and `fmtfs
        # info`, so that a mount, `ls` and `cat` do not wait for that read
        return []

    def view_schema(self, view_path: str) -> ViewSchema | None:
        parts = view_path.split("/")
        if len(parts) != 2:
            return None
        return {JOURNAL_VIEW: columns.JOURNAL, METADATA_VIEW: columns.METADATA}.get(parts[1])

    def info(self) -> dict[str, Any]:
        cat = self._catalog()
        trees: dict[str, Any] = {}
        for tree in cat.trees:
            detail: dict[str, Any] = {
                "tag": f"{tree.header.tag:08x}",
                "version": f"{tree.header.major}.{tree.header.minor}",
                "time_t_base": tree.header.base,
                "journal": tree.journal_path.name,
            }
            try:
                state = store.read_state(tree.path, whole=False)
            except (OSError, TreeError) as exc:
                detail["error"] = str(exc)
                trees[tree.name] = detail
                continue
            detail["keywords"] = len(state.tree.keywords)
            if state.journal is None:
                detail["journal_status"] = state.journal_error
            else:
                j = state.journal
                detail["journal_status"] = "invalid" if j.invalid else "valid"
                detail["journal_entries"] = j.header.num_entries
                detail["journal_valid_entries"] = j.count
                detail["journal_bytes_used"] = j.end
                detail["journal_size"] = j.header.file_size
            trees[tree.name] = detail
        return {"trees": trees, "ignored_files": cat.ignored}

    def view_sources(self, streams: list[Stream]) -> dict[str, list[Path]]:
        """Both views of a tree read (and a write may rewrite) the tree and
        its journal.  One catalog read per listing: one per view made `ls -l`
        of N trees O(N^2) (107 s for 1,000)."""
        out: dict[str, list[Path]] = {}
        for tree in self._catalog().trees:
            files = [tree.path] + ([tree.journal_path] if tree.journal_path.is_file() else [])
            for view in (JOURNAL_VIEW, METADATA_VIEW):
                out[f"{encode_name(tree.name)}/{view}"] = files
        return out

    def writable_views(self, streams: list[Stream], views: Collection[str]) -> set[str]:
        # every listed tree's journal.jsonl (writer() looks for the tree in the catalog)
        return {s.view for s in streams if isinstance(s, GvfsJournalStream)} & set(views)

    def writer(self, view_path: str, create: bool) -> Writer:
        parts = view_path.strip("/").split("/")
        if len(parts) != 2 or parts[1] not in (JOURNAL_VIEW, METADATA_VIEW):
            raise FileNotFoundError(view_path)
        name = decode_name(parts[0])
        if parts[1] == METADATA_VIEW:
            raise ReadOnlyView(view_path)
        trees = {t.name: t for t in self._catalog().trees}
        if name not in trees:
            reason = store.valid_tree_name(name)
            if not create or reason or (self.source / name).exists():
                raise FileNotFoundError(view_path)
        return GvfsJournalWriter(self.source / name)
