"""The declared schema of the gvfs record views (fmtfs.formats.schema).

Paths, keys and values are text by convention, base64'd under `K_base64`
only when not UTF-8 (fmtfs.formats.gvfs.records); times are whole seconds.
`metadata` (and `metadata_base64`, for keys that are not UTF-8) are objects
keyed by the data's own keys: inferred."""

from __future__ import annotations

from fmtfs.formats.schema import Field, Kind, ViewSchema

JOURNAL = ViewSchema(
    Field("op", Kind.STRING),
    Field.time("time", "s"),
    Field("path", Kind.TEXT),
    Field("source", Kind.TEXT),
    Field("key", Kind.TEXT),
    Field("value", Kind.TEXT),  # a string, or an array of them for setv
)
METADATA = ViewSchema(
    Field("path", Kind.TEXT),
    Field.time("last_changed", "s"),
    Field.nested("metadata"),
    Field.nested("metadata_base64"),
)
