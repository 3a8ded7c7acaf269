"""Kestrel queue journals (LAYOUT.md §3): libkestrel writer and reader files,
and the older kestrel 0.8-2.x opcode journals.

Modules: `records` (libkestrel framing), `legacy` (older journals and their
replay), `files` (what each file in a queue folder is, and their order),
`shapes` (JSON shapes and view paths), `streams` (chunked scans), `readers`
(reader files), `writers` (writing through the mount), `format` (the Format).
"""

from fmtfs.lazyexports import loader

__all__ = ["KestrelFormat"]
# loaded on first use: detection and --help import only the format's card
__getattr__ = loader(__name__, {"KestrelFormat": "fmtfs.formats.kestrel.format"})
