"""Views of a format object through the view layer, without FUSE (for
format tests whose views are derived from the index, e.g. beats pending)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from fmtfs.formats.base import Format, Record
from fmtfs.render import parse_lines
from fmtfs.views import SourceTree


def view_records(fmt: Format, view: str) -> list[Record]:
    with tempfile.TemporaryDirectory(prefix="fmtfs-tree-") as cache:
        tree = SourceTree(fmt, Path(cache))
        return parse_lines(tree.read(view, 0, tree.size(view)))
