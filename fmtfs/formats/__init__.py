"""Registry of native formats and detection over a source."""

from __future__ import annotations

import importlib
from pathlib import Path

from fmtfs.formats.base import Format, FormatError

# name -> "module:Class"; imported lazily so one format's optional
# dependency never slows or breaks another's mount.
FORMATS: dict[str, str] = {
    "beats": "fmtfs.formats.beats:BeatsFormat",
    "kestrel": "fmtfs.formats.kestrel:KestrelFormat",
    "wallaby": "fmtfs.formats.wallaby:WallabyFormat",
    "gvfs": "fmtfs.formats.gvfs:GvfsFormat",
    "proio": "fmtfs.formats.proio:ProioFormat",
}


def format_class(name: str) -> type[Format]:
    try:
        target = FORMATS[name]
    except KeyError:
        raise FormatError(f"unknown format {name!r} (one of: {', '.join(FORMATS)})") from None
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def detect(source: Path) -> str:
    """The name of the format whose files `source` holds."""
    if not source.exists():
        raise FormatError(f"{source}: no such file or directory")
    for name in FORMATS:
        try:
            cls = format_class(name)
        except (ImportError, AttributeError):  # a format whose module cannot load detects nothing
            continue
        if cls.detect(source):
            return name
    raise FormatError(
        f"{source}: no known format detected (looked for beats <id>.seg segments, "
        "kestrel <queue>.<n> journals, wallaby LOG/IDX files, gvfs metadata trees "
        "and journals, proio .proio files or bucket magics); use --format"
    )


def open_source(source: Path, format_name: str | None, options: dict) -> Format:
    name = format_name or detect(source)
    cls = format_class(name)
    if format_name and not cls.detect(source) and _has_files(source):
        # an empty folder is fine: writing through the mount may create data
        raise FormatError(f"{source}: does not hold {name} files (try without --format)")
    return cls(source, options)


def _has_files(source: Path) -> bool:
    if not source.exists():
        raise FormatError(f"{source}: no such file or directory")
    return source.is_file() or any(p.is_file() for p in source.iterdir())
