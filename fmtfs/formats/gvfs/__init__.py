"""GNOME gvfs metadata: tree files and their journals (specs/gvfs-metadata.md)."""

from fmtfs.lazyexports import loader

__all__ = ["GvfsFormat"]
# loaded on first use: detection and --help import only the format's card
__getattr__ = loader(__name__, {"GvfsFormat": "fmtfs.formats.gvfs.format"})
