"""Which formats exist: the `fmtfs.formats` entry-point group.

A format is a package with a `Format` subclass, registered under its name:

    [project.entry-points."fmtfs.formats"]
    tally = "tally_format:TallyFormat"

fmtfs's own five are declared the same way in its pyproject.toml; BUILTIN
holds them too, for a checkout whose package metadata is not installed.
Their names are reserved: an entry point under a built-in name is ignored
(with a warning), so a built-in format is found without reading the
installed packages' metadata at all.  That read (importlib.metadata and the
scan) costs about 40 ms; a decode worker, a Spark Python worker or a twin
builder opening a built-in format no longer pays it.  It happens when a
name is not built in, when detection finds no built-in format, or when
every format is listed (the command line's help; its parser tries the
built-in formats' options alone first).  Classes are imported on first use, so a format whose
module cannot load (a missing optional dependency) is skipped by detection
and listings and breaks no other format's mount.

Detection asks the formats in order: the built-in ones first (their magics
are strict), then the others by name.

What the command line needs before it opens a source (titles, options,
detection) comes from each format's card (fmtfs.formats.card): a built-in
format's small card module, an external format's class.  So `--help`,
argument parsing and detection import no built-in format's decoding, and a
command imports the one format it opens.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from fmtfs.errors import FormatError
from fmtfs.formats.card import Card
from fmtfs.formats.options import Option, unique, values

if TYPE_CHECKING:
    from fmtfs.formats.base import Format

log = logging.getLogger("fmtfs")

GROUP = "fmtfs.formats"
BUILTIN: dict[str, str] = {
    "beats": "fmtfs.formats.beats:BeatsFormat",
    "kestrel": "fmtfs.formats.kestrel:KestrelFormat",
    "wallaby": "fmtfs.formats.wallaby:WallabyFormat",
    "gvfs": "fmtfs.formats.gvfs:GvfsFormat",
    "proio": "fmtfs.formats.proio:ProioFormat",
}
# the module holding each built-in format's CARD (imports none of the format)
BUILTIN_CARDS: dict[str, str] = {
    "beats": "fmtfs.formats.beats.card",
    "kestrel": "fmtfs.formats.kestrel.card",
    "wallaby": "fmtfs.formats.wallaby.card",
    "gvfs": "fmtfs.formats.gvfs.card",
    "proio": "fmtfs.formats.proio.card",
}
# a format as the command line sees it: a card, or an external format's class
Described = Card | type["Format"]

_external: dict[str, str] | None = None  # installed formats not built in, read on first need
_classes: dict[str, type[Format]] = {}


def _scan() -> dict[str, str]:
    from importlib.metadata import entry_points

    found = {}
    for ep in entry_points(group=GROUP):
        if ep.name in BUILTIN:
            if ep.value != BUILTIN[ep.name]:
                log.warning("format %s: %s is ignored, %s is a built-in format", ep.name, ep.value, ep.name)
        else:
            found[ep.name] = ep.value
    return dict(sorted(found.items()))


def external(rescan: bool = False) -> dict[str, str]:
    """The installed formats that are not built in: name -> "module:Class"."""
    global _external
    if _external is None or rescan:
        _external = _scan()
    return _external


def targets(rescan: bool = False) -> dict[str, str]:
    """Format name -> "module:Class", in detection order."""
    return BUILTIN | external(rescan)


def names(installed: bool = True) -> list[str]:
    """Every format's name; `installed` False: the built-in ones alone."""
    return list(_names(installed))


def format_class(name: str) -> type[Format]:
    cls = _classes.get(name)
    if cls is not None:
        return cls
    known = BUILTIN if name in BUILTIN else targets()
    if name not in known:  # registered since the last look (a path added at run time)
        known = targets(rescan=True)
    try:
        target = known[name]
    except KeyError:
        raise FormatError(f"unknown format {name!r} (one of: {', '.join(known)})") from None
    from fmtfs.formats.base import Format

    module_name, _, class_name = target.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    if not (isinstance(cls, type) and issubclass(cls, Format)):
        raise FormatError(f"format {name!r} ({target}) is not a fmtfs Format class")
    _classes[name] = cls
    return cls


def described(name: str) -> Described:
    """A format's card: a built-in one's card module (its class stays
    unimported), an external one's class."""
    if name in BUILTIN:
        card: Card = importlib.import_module(BUILTIN_CARDS[name]).CARD
        return card
    return format_class(name)


def cards(rescan: bool = False, installed: bool = True) -> Iterator[Described]:
    """Every registered format that loads, as its card, in detection order:
    the built-in ones before the installed packages' metadata is read
    (`installed` False: the built-in ones alone, that metadata unread)."""
    if rescan:
        external(rescan=True)
    for name in _names(installed):
        try:
            yield described(name)
        except (ImportError, AttributeError, FormatError) as exc:
            log.debug("format %s is not usable here: %s", name, exc)


def _names(installed: bool = True) -> Iterator[str]:
    yield from BUILTIN
    if installed:
        yield from external()


def all_options(installed: bool = True) -> list[Option]:
    """The options of every format (`installed` False: of the built-in
    ones), each name once (for the command line)."""
    return unique(option for card in cards(installed=installed) for option in card.declared_options)


def detect(source: Path) -> str:
    """The name of the format whose files `source` holds."""
    if not source.exists():
        raise FormatError(f"{source}: no such file or directory")
    formats: list[Described] = []
    for card in cards():  # stops at a built-in format: no metadata read
        formats.append(card)
        if card.detect(source):
            return card.name
    # a format registered since the registry was read (a path added at run time)
    for card in cards(rescan=True):
        if card not in formats:
            formats.append(card)
            if card.detect(source):
                return card.name
    looked_for = ", ".join(f"{card.name} {card.looks_for}" for card in formats)
    raise FormatError(f"{source}: no known format detected (looked for {looked_for}); use --format")


def open_source(source: Path, format_name: str | None, options: dict) -> Format:
    """The format of `source` (named, or detected) opened with `options`
    (parsed values by option name; defaults fill the rest)."""
    name = format_name or detect(source)
    cls = format_class(name)
    if format_name and not cls.detect(source) and _has_files(source):
        # an empty folder is fine: writing through the mount may create data
        raise FormatError(f"{source}: does not hold {name} files (try without --format)")
    return cls(source, values(cls.declared_options, options))


def _has_files(source: Path) -> bool:
    if not source.exists():
        raise FormatError(f"{source}: no such file or directory")
    return source.is_file() or any(p.is_file() for p in source.iterdir())
