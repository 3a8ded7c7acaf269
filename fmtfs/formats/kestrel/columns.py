"""The declared schema of the kestrel record views (fmtfs.formats.schema).

One declaration covers every `.jsonl` view: PUT lines (`journal/<n>.jsonl`,
`pending/<reader>.jsonl`, `buckets/<bucket>.jsonl`), legacy operation lines
(`journal/<file>.jsonl`) and legacy `items.jsonl`; a declared key a view's
lines never carry is no column.  Times are milliseconds (a legacy ADD's
whole-second expire_time is shown without a fraction, the same instant);
the item payload is opaque bytes.  `readers/<reader>.json` is a document,
not a record view."""

from __future__ import annotations

from fmtfs.formats.schema import Field, Kind, ViewSchema

LINE = ViewSchema(
    Field("op", Kind.STRING),
    Field("xid", Kind.INT),
    Field("id", Kind.INT),
    Field.time("add_time", "ms"),
    Field.time("expire_time", "ms"),
    Field("error_count", Kind.INT),
    Field("data", Kind.BYTES),
)


def view_schema(view_path: str) -> ViewSchema | None:
    return LINE if view_path.endswith(".jsonl") else None
