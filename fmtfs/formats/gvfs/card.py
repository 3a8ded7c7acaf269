"""gvfs metadata's card (fmtfs.formats.card): name and detection, readable
without importing the tree and journal readers."""

from __future__ import annotations

from pathlib import Path

from fmtfs.formats.card import Card


def detect(source: Path) -> bool:
    from fmtfs.formats.gvfs.store import is_gvfs_folder

    return is_gvfs_folder(source)


CARD = Card(name="gvfs", title="gvfs metadata", looks_for="metadata trees and journals", detect=detect)
