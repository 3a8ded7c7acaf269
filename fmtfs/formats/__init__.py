"""Native formats: one package (or module) per format, each a
`fmtfs.formats.base.Format`, found through the registry (`registry.py`:
the `fmtfs.formats` entry-point group) and opened with the options it
declares (`options.py`)."""

from fmtfs.formats.registry import detect, format_class, open_source

__all__ = ["detect", "format_class", "open_source"]
