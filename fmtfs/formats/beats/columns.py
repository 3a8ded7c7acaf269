"""The declared schema of the Beats record views (fmtfs.formats.schema).

Every record view (`segments/<id>.jsonl`, `buckets/<bucket>.jsonl`,
`pending.jsonl`) holds frame lines: the event's time in nanoseconds, its
flags, and the free-form `meta` and `fields` objects; a frame whose payload
does not decode keeps its bytes as `data`/`data_base64`.  Protobuf
shipper events add `source` and `data_stream` objects (inferred)."""

from __future__ import annotations

from fmtfs.formats.schema import Field, Kind, ViewSchema

FRAME = ViewSchema(
    Field.time("timestamp", "ns"),
    Field("flags", Kind.INT),
    Field.nested("meta"),
    Field.nested("fields"),
    Field("data", Kind.BYTES),
)


def view_schema(view_path: str) -> ViewSchema | None:
    return FRAME if view_path.endswith(".jsonl") else None
