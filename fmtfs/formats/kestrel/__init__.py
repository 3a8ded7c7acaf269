"""Kestrel queue journals (LAYOUT.md §3): libkestrel writer and reader files,
and the older kestrel 0.8-2.x opcode journals.

Modules: `records` (libkestrel framing), `legacy` (older journals and their
replay), `files` (what each file in a queue folder is, and their order),
`shapes` (JSON shapes and view paths), `streams` (chunked scans), `readers`
(reader files), `writers` (writing through the mount), `format` (the Format).
"""

from fmtfs.formats.kestrel.format import KestrelFormat

__all__ = ["KestrelFormat"]
