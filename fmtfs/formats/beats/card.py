"""The Beats disk queue's card (fmtfs.formats.card): its name, options and
detection, readable without importing its decoding."""

from __future__ import annotations

import struct
from pathlib import Path

from fmtfs.formats.card import Card
from fmtfs.formats.options import TIME_BUCKET, Option

PASSWORD_VARIABLE = "FMTFS_BEATS_PASSWORD"

KEY_FILE = Option(
    "key_file",
    "AES-128 key of encrypted Beats segments: 16 raw bytes or 32 hex characters "
    f"(or set {PASSWORD_VARIABLE})",
    parse=Path,
    metavar="FILE",
    secret=True,
)


def detect(source: Path) -> bool:
    """A segment whose version is one Beats wrote, or a state.dat alone."""
    from fmtfs.formats.beats.layout import STATE_FILE, parse_state, segment_files

    if not source.is_dir():
        return False
    segments, _ = segment_files(source)
    for _, path in segments:
        with open(path, "rb") as fh:
            head = fh.read(4)
        if len(head) == 4 and struct.unpack("<I", head)[0] <= 3:
            return True
    state = source / STATE_FILE
    if state.is_file():
        try:
            parse_state(state.read_bytes()[:28])
            return state.stat().st_size in (20, 28)
        except ValueError:
            return False
    return False


CARD = Card(
    name="beats",
    title="Elastic Beats disk queue",
    looks_for="<id>.seg segments",
    detect=detect,
    declared_options=(KEY_FILE, TIME_BUCKET),
    environment=(
        (
            PASSWORD_VARIABLE,
            "password of encrypted Beats segments; the AES key is derived from it "
            "(PBKDF2-HMAC-SHA1, 4096 rounds) unless --key-file is given",
        ),
    ),
)
