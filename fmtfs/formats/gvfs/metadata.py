"""`<tree>/metadata.jsonl` rendered a piece at a time (fmtfs.formats.gvfs.lazy
says how the tree is walked without a model of it).  Apart from the store
module, which detection imports: rendering needs orjson and the records."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from fmtfs.formats.base import PIECE_LINES
from fmtfs.formats.gvfs.lazy import keyed_rows, part_bounds
from fmtfs.formats.gvfs.records import metadata_record
from fmtfs.formats.gvfs.store import effective_model, read_state
from fmtfs.formats.gvfs.tree import LazyTree
from fmtfs.gcpause import paused
from fmtfs.jsonlines import render_lines


def metadata_pieces(tree_path: Path, part: int = 0, parts: int = 1) -> Iterator[bytes]:
    """The view's lines as the walk finds them, PIECE_LINES at a time: no
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
    rows = keyed_rows(model, state.tree, *bounds)
    while True:
        with paused():  # the walk builds many small objects, none in a cycle
            piece = render_lines(metadata_record(*row) for row in islice(rows, PIECE_LINES))
        if not piece:
            return
        yield piece
