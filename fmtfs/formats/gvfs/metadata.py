"""`<tree>/metadata.jsonl` rendered a piece at a time (fmtfs.formats.gvfs.lazy
says how the tree is walked without a model of it).  Apart from the store
module, which detection imports: rendering needs orjson and the records."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from fmtfs.formats.gvfs.lazy import keyed_rows
from fmtfs.formats.gvfs.records import metadata_record
from fmtfs.formats.gvfs.store import effective_model, read_state
from fmtfs.formats.gvfs.tree import LazyTree
from fmtfs.gcpause import paused
from fmtfs.jsonlines import render_lines

# Lines rendered at a time (about 250 KB of JSON).
PIECE_LINES = 2000


def metadata_pieces(tree_path: Path) -> Iterator[bytes]:
    """The view's lines as the walk finds them, PIECE_LINES at a time: no
    model of the tree, no list of records.  OSError or TreeError when the
    tree cannot be read, before the first piece."""
    state = read_state(tree_path, whole=False)
    assert isinstance(state.tree, LazyTree)
    rows = keyed_rows(effective_model(state), state.tree)
    while True:
        with paused():  # the walk builds many small objects, none in a cycle
            piece = render_lines(metadata_record(*row) for row in islice(rows, PIECE_LINES))
        if not piece:
            return
        yield piece
