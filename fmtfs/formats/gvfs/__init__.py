"""GNOME gvfs metadata: tree files and their journals (specs/gvfs-metadata.md)."""

from fmtfs.formats.gvfs.format import GvfsFormat

__all__ = ["GvfsFormat"]
