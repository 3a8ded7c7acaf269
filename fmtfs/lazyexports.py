"""A package's names loaded on first use (PEP 562 module `__getattr__`).

`from fmtfs.formats.beats import BeatsFormat` keeps working, but importing
the package (as `fmtfs.formats.beats.card` does) loads none of the modules
behind those names: the command line reads a format's card without paying
for its decoders (fmtfs.formats.card)."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def loader(package: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """The `__getattr__` of `package`: name -> the module that defines it."""

    def load(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(homes[name]), name)

    return load
