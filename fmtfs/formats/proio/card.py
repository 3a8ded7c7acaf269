"""proio's card (fmtfs.formats.card): name, options and detection,
readable without importing protobuf or the stream reader."""

from __future__ import annotations

from pathlib import Path

from fmtfs.formats.card import Card
from fmtfs.formats.files import read_prefix
from fmtfs.formats.options import Option

# How far into a file detection looks for a bucket magic: a stream whose
# start is junk or torn is still proio (the reader resyncs at the first
# magic and reports the skipped bytes), as the reference readers resync.
SNIFF_BYTES = 64 << 10


def is_stream(path: Path) -> bool:
    """A `.proio` file (whatever its first bytes), or any file with a bucket
    magic within its first SNIFF_BYTES."""
    from fmtfs.formats.proio.wire import MAGIC

    return path.is_file() and (path.suffix == ".proio" or MAGIC in read_prefix(path, SNIFF_BYTES))


def detect(source: Path) -> bool:
    if source.is_dir():
        return any(is_stream(p) for p in source.iterdir())
    return is_stream(source)


CARD = Card(
    name="proio",
    title="proio event streams",
    looks_for=".proio files or bucket magics",
    detect=detect,
    declared_options=(
        Option(
            "descriptor_set",
            "a protobuf FileDescriptorSet for proio streams that carry no descriptors",
            parse=Path,
            metavar="FILE",
        ),
    ),
)
