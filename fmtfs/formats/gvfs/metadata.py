"""`<tree>/metadata.jsonl` rendered a piece at a time (fmtfs.formats.gvfs.lazy
says how the tree is walked without a model of it).  Apart from the store
module, which detection imports: rendering needs orjson and the records."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from fmtfs.formats.gvfs.lazy import keyed_rows, part_bounds
from fmtfs.formats.gvfs.records import metadata_record
from fmtfs.formats.gvfs.store import effective_model, read_state
from fmtfs.formats.gvfs.tree import LazyTree
from fmtfs.jsonlines import render_pieces


def metadata_pieces(tree_path: Path, part: int = 0, parts: int = 1) -> Iterator[bytes]:
    """The view's lines as the walk finds them, a piece at a time: no
    model of the tree, no list of records; with `parts`, only the lines of
    the `part`-th of that many runs of them (lazy.part_bounds), so that
    `parts` processes render the view together.  OSError or TreeError when
    the tree cannot be read, before the first piece."""
    state = read_state(tree_path, whole=False)
    assert isinstance(state.tree, LazyTree)
    model = effective_model(state)
    bounds = part_bounds(model, state.tree, part, parts) if parts > 1 else (None, None)
    if bounds is None:
        return  # a tree too small for that many parts: the earlier ones have its lines
    # the walk runs as each piece takes its rows
    yield from render_pieces(metadata_record(*row) for row in keyed_rows(model, state.tree, *bounds))
