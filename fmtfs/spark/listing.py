"""What a batch read is planned from: the record views a `view` option
names, each chunked view's chunks (fmtfs.viewchunk.ViewChunk) with where the
index kept their rendered lines, and the source's files as they were
when the tree was listed.

Spark runs a query's schema step and its planning in two Python workers,
and each opened the source's view tree (a 20 MB wallaby log with 5,194
hour buckets: 0.06-0.1 s of CPU, twice on the first query's critical
path).  The schema step opens it anyway: it keeps this listing on the
DataSource, which Spark pickles from the schema step to the planning
step, and the planning uses it instead of opening the tree again while
the source's files are those the listing saw (`current`: the check a
kept tree makes before re-indexing).  Spark plans a DataFrame's read once
and keeps that plan for its later queries, but a DataFrame filtered later
(with filter pushdown on) is planned again from the DataSource pickled at
its schema step: if the source has changed since, the planning opens the
tree as before."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


def is_chunked(file) -> bool:
    """Whether a view file is served from the chunk index (has chunks())."""
    from fmtfs.treefiles import IndexedFile, SlicedFile

    return isinstance(file, (IndexedFile, SlicedFile))


def _indexed_part(file, chunk):
    """The indexed view file `chunk` is of (a part of a sliced view)."""
    from fmtfs.treefiles import SlicedFile

    if isinstance(file, SlicedFile):
        return next(f for f, _ in file.parts if f.stream.name == chunk.stream and f.view == chunk.view)
    return file


def kept_piece(file, chunk):
    """Where the index kept `chunk`'s rendered lines (fmtfs.keptpieces.Kept), or None."""
    return _indexed_part(file, chunk).entry.kept.get((chunk.view, chunk.seq))


def kept_place(file, chunk) -> tuple[str | None, Any]:
    """Where the index kept the lines of the whole `chunk`: its store file's
    path and the piece (fmtfs.keptpieces.Kept), or (None, None)."""
    kept = kept_piece(file, chunk)
    store = _indexed_part(file, chunk).reader.kept
    return (str(store.path), kept) if kept is not None and store is not None else (None, None)


@dataclass
class Listing:
    """The views of a read and their chunks, as one tree showed them."""

    source: Path  # the format's source (a folder, or a file and its siblings)
    snapshot: tuple  # its files when listed (fmtfs.snapshot)
    store: str | None  # the path of the index's kept pieces, if it keeps any
    views: list[str]
    # each chunked view's chunks, each with its kept piece (None: not kept);
    # the views not in it are derived (computed whole)
    chunked: dict[str, list[tuple[Any, Any]]]

    @classmethod
    def of(cls, tree, views: list[str]) -> Listing:
        store = tree.index.kept
        chunked = {
            view: [(c, kept_piece(file, c)) for c in file.chunks()]
            for view in views
            if is_chunked(file := tree.files[view])
        }
        where = str(store.path) if store is not None else None
        return cls(tree.format.source, tree.snapshot, where, list(views), chunked)

    def current(self) -> bool:
        """Whether the source's files are still those listed."""
        from fmtfs.snapshot import source_snapshot

        try:
            return source_snapshot(self.source) == self.snapshot
        except OSError:
            return False  # gone or unreadable: opening the tree says why

    def time_columns(self) -> set[str]:
        """The time columns of the views' chunks (their streams' `time_field`)."""
        return {c.time_field[0] for chunks in self.chunked.values() for c, _ in chunks if c.time_field}
