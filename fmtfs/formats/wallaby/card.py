"""The wallaby write-ahead log's card (fmtfs.formats.card): name, options
and detection, readable without importing the log reader."""

from __future__ import annotations

from pathlib import Path

from fmtfs.formats.card import Card
from fmtfs.formats.files import read_prefix
from fmtfs.formats.options import TIME_BUCKET

LOG_MAGIC = b"LOG\x01"


def is_log(path: Path) -> bool:
    return path.is_file() and not path.name.endswith(".idx") and read_prefix(path, 4) == LOG_MAGIC


def detect(source: Path) -> bool:
    if source.is_file():
        return is_log(source)
    return any(is_log(p) for p in source.iterdir())


CARD = Card(
    name="wallaby",
    title="wallaby write-ahead logs",
    looks_for="LOG/IDX files",
    detect=detect,
    declared_options=(TIME_BUCKET,),
)
