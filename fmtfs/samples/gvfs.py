"""A sample gvfs-metadata folder: a `home` tree plus its journal, as a
desktop leaves them (file-manager icon positions, emblems, tags, a rename, a
deletion), and a small `root` tree for a file outside $HOME.

Records beyond what the journal holds go into the tree through fmtfs's own
rebuild, the way gvfsd-metadata folds its journal into the tree."""

from __future__ import annotations

from pathlib import Path

from fmtfs.formats.gvfs import store
from fmtfs.formats.gvfs.journal import HEADER_SIZE, JOURNAL_SIZE, decode_entry
from fmtfs.formats.gvfs.model import Entry, MetaModel
from fmtfs.formats.gvfs.records import record_entry

START = 1_795_340_815  # 2026-11-22T09:46:55Z
JOURNAL_BUDGET = (JOURNAL_SIZE - HEADER_SIZE) // 2  # leave room for appends


def _line(i: int) -> dict:
    folder = ("Documents", "Pictures", "Music", "Projects/fmtfs", "Downloads")[i % 5]
    path = f"/{folder}/file-{i:06d}.txt"
    t = START + i
    kind = i % 7
    if kind == 0:
        return {"op": "setv", "time": t, "path": path, "key": "emblems", "value": ["emblem-important", "x"]}
    if kind == 1:
        return {"op": "set", "time": t, "path": path, "key": "comment", "value": f"note {i} · résumé"}
    if kind == 2:
        return {"op": "setv", "time": t, "path": path, "key": "xattr::tags", "value": ["red", "", "red"]}
    if kind == 3 and i > 10:
        prev = f"/{('Documents', 'Pictures', 'Music', 'Projects/fmtfs', 'Downloads')[(i - 7) % 5]}"
        return {"op": "copy", "time": t, "path": path, "source": f"{prev}/file-{i - 7:06d}.txt"}
    if kind == 4 and i > 10:
        return {"op": "remove", "time": t, "path": f"/Downloads/file-{i - 9:06d}.txt"}
    if kind == 5:
        return {"op": "unset", "time": t, "path": f"/Documents/file-{i - 5:06d}.txt", "key": "comment"}
    return {
        "op": "set",
        "time": t,
        "path": path,
        "key": "nautilus-icon-position",
        "value": f"{i % 640},{i % 480}",
    }


def generate(folder: Path, records: int) -> Path:
    """Write `records` journal operations: the newest ones (up to half a
    journal) stay in `home-<tag>.log`, older ones are already in `home`."""
    folder.mkdir(parents=True, exist_ok=True)
    home = folder / "home"
    lines = [_line(i) for i in range(records)]
    entries = [record_entry(line) for line in lines]
    # how many of the newest entries fit in the journal budget
    used = keep = 0
    for entry in reversed(entries):
        if used + len(entry) > JOURNAL_BUDGET:
            break
        used += len(entry)
        keep += 1
    older = len(entries) - keep
    model = MetaModel()
    for i in range(older):
        _apply_line(model, entries[i])
    store.rebuild(home, model)
    if keep:
        store.append_entries(home, entries[older:])
    root = folder / "root"
    if not root.exists():
        store.append_entries(
            root,
            [
                record_entry(
                    {
                        "op": "set",
                        "time": START,
                        "path": "/srv/data/o.txt",
                        "key": "where",
                        "value": "outside",
                    }
                )
            ],
        )
    return folder


def _apply_line(model: MetaModel, encoded: bytes) -> None:
    """Apply an already-encoded line to the model directly (no journal)."""
    entry = decode_entry(encoded, 0, len(encoded))
    assert isinstance(entry, Entry)
    model.apply(entry)
