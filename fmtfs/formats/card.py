"""What the command line knows of a format before it opens a source: its
name, title, options, environment variables and how to detect its files.

Every `fmtfs` command (even `--help`) builds its parser from every format's
options, and detection asks the formats in turn; importing all five formats
for that (decoders, protobuf, lz4, cbor2) was 0.05-0.15 s of each command.
So a built-in format writes these facts once, in a small module of its own
(`<format>/card.py`) that imports none of its decoding;
its `detect` imports what it needs when it is called.  The Format class
takes the same card (`class BeatsFormat(Format, card=CARD)`), so nothing is
written twice.  An external format (an entry point) is its own card: its
class has the same attributes, and is imported to read them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fmtfs.formats.options import Option


@dataclass(frozen=True)
class Card:
    name: str
    title: str  # for `fmtfs --help` ("wallaby write-ahead logs")
    looks_for: str  # for the error when nothing is detected ("LOG/IDX files")
    detect: Callable[[Path], bool]  # does `source` hold this format's files (magic bytes)?
    declared_options: tuple[Option, ...] = ()
    environment: tuple[tuple[str, str], ...] = ()  # variables read: (name, what for)
