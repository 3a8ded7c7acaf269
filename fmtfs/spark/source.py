"""Opening a source from the data source's options, on the driver (the view
tree and its chunk index) and on executors (the format alone: executors
decode the chunks they are given and need no index)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from fmtfs.formats.base import Format
from fmtfs.formats.options import Option, from_spark
from fmtfs.formats.registry import detect, format_class, open_source

Options = dict[str, str]


def lower_options(options: Any) -> Options:
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def format_options(opts: Options, declared: tuple[Option, ...]) -> dict[str, Any]:
    """A format's declared options found among the reader's options, under
    their camelCase names (`keyFile`; Spark lowercases keys, any case works)."""
    try:
        return from_spark(declared, opts)
    except ValueError as exc:
        raise ValueError(f"fmtfs data source: {exc}") from None


def source_path(opts: Options) -> Path:
    path = opts.get("path")
    if not path:
        raise ValueError("fmtfs data source: give the source folder to load(...)")
    return Path(path)


def open_format(opts: Options) -> Format:
    source = source_path(opts)
    name = opts.get("format") or detect(source)
    return open_source(source, name, format_options(opts, format_class(name).declared_options))


def cache_dir(opts: Options) -> Path:
    if opts.get("cachedir"):
        return Path(opts["cachedir"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fmtfs"


def open_tree(opts: Options):
    from fmtfs.views import SourceTree

    return SourceTree(open_format(opts), cache_dir(opts), readonly=True)


_trees: dict[tuple, Any] = {}  # the last tree opened by tree_for, by its options
# options of the read alone, not of the source: a query with another view or
# keptBytes reads the same tree
_READ_ONLY_OPTIONS = {
    "view",
    "types",
    "inferchunks",
    "partitionbytes",
    "parallelism",
    "chunksperpartition",
    "keptbytes",
}
_trees_lock = threading.Lock()


def tree_for(opts: Options):
    """The source's view tree for a query step, kept by this process for the
    next one: Spark reuses its Python workers between queries, and opening
    a tree costs a look at every stream's index rows and a view object per
    view (a 20 MB wallaby log's 5,194 hour buckets: 0.12-0.18 s, paid by
    the schema step, the reader and the planning of every query).  A kept
    tree is refreshed first, as a mount's is: a source that changed is
    re-indexed, so a query sees what the source holds now (a file's last
    chunk, not kept while it was written, is kept by a tree opened after
    the file settled).  One tree at a time, and none that rendered a
    derived view (a rendered view may hold its records as Python objects,
    10-15x its JSON): that one is opened anew."""
    key = tuple(sorted(item for item in opts.items() if item[0] not in _READ_ONLY_OPTIONS))
    with _trees_lock:
        tree = _trees.get(key)
        if tree is not None and not _holds_rendered_views(tree):
            tree.refresh(force=True)
            return tree
        for old in _trees.values():
            old.close()
        _trees.clear()
        tree = _trees[key] = open_tree(opts)
        return tree


def _holds_rendered_views(tree) -> bool:
    from fmtfs.treefiles import BytesFile

    return any(isinstance(f, BytesFile) and f.size_known() for f in tree.files.values())


def required_view(opts: Options) -> str:
    if "view" not in opts:
        raise ValueError('fmtfs data source: option "view" is required (e.g. "events.log/records.jsonl")')
    return opts["view"]


def view_files(tree, view: str) -> list[str]:
    """The record views a `view` option names: one file, or the `.jsonl`
    files directly inside a folder (as spark.read.json of that folder)."""
    view = view.strip("/")
    if view in tree.files:
        if not view.endswith(".jsonl"):
            raise ValueError(f"fmtfs data source: {view} is not a record view (.jsonl)")
        return [view]
    if tree.is_dir(view):
        prefix = f"{view}/" if view else ""
        return [
            f"{prefix}{name}"
            for name in tree.listdir(view)
            if name.endswith(".jsonl") and not name.startswith(("_", ".")) and f"{prefix}{name}" in tree.files
        ]
    raise ValueError(f"fmtfs data source: no view {view!r} in {tree.format.source}")


_formats: dict[tuple, Any] = {}
_formats_lock = threading.Lock()


def format_for(opts: Options):
    """One Format object per source and options, per Python worker."""
    key = tuple(sorted(opts.items()))
    with _formats_lock:
        fmt = _formats.get(key)
        if fmt is None:
            fmt = _formats[key] = open_format(opts)
        return fmt


def forget_formats() -> None:
    """Drop the Format objects of this process (a forked child opens its
    own: file positions are shared with the parent across a fork)."""
    with _formats_lock:
        _formats.clear()


def current_streams(opts: Options) -> dict[str, Any]:
    """The source's streams by name, as an executor sees them now."""
    return {s.name: s for s in format_for(opts).streams()}
