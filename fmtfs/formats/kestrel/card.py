"""Kestrel journals' card (fmtfs.formats.card): name, options and
detection, readable without importing the journal readers."""

from __future__ import annotations

from pathlib import Path

from fmtfs.formats.card import Card
from fmtfs.formats.options import TIME_BUCKET, Option

DEFAULT_JOURNAL_SIZE = 16 * 1024 * 1024

JOURNAL_SIZE = Option(
    "kestrel_journal_size",
    "start a new kestrel writer file past this size when writing",
    parse=int,
    default=DEFAULT_JOURNAL_SIZE,
    metavar="BYTES",
)


def detect(source: Path) -> bool:
    """Writer or reader files with their magic; failing those, files
    that parse as older opcode journals (checked more carefully)."""
    from fmtfs.formats.files import read_prefix
    from fmtfs.formats.kestrel.files import has_writer_file, looks_like_legacy, scan_folder
    from fmtfs.formats.kestrel.records import READER_MAGIC

    if not source.is_dir():
        return False
    if has_writer_file(source):
        return True
    queues = scan_folder(source).values()
    if any(read_prefix(r.path, 4) == READER_MAGIC for q in queues for r in q.readers):
        return True
    return any(
        f.path.stat().st_size > 0 and looks_like_legacy(f.path, read_prefix(f.path, 1))
        for q in queues
        for f in q.legacy
    )


CARD = Card(
    name="kestrel",
    title="Kestrel journals",
    looks_for="<queue>.<n> journals",
    detect=detect,
    declared_options=(TIME_BUCKET, JOURNAL_SIZE),
)
