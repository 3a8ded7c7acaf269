"""The declared schema of proio's record views (fmtfs.formats.schema),
and the Arrow type of a protobuf message in its JSON mapping.

A `types/<type>.jsonl` line holds the entry's message in protobuf's JSON
mapping (int64 as strings, bytes as base64, enums by name); the message
descriptor gives the real types, so its `value` is declared with the Arrow
type built here and fmtfs.parquet casts the JSON to it (strings ->
integers, base64 -> binary, objects -> maps).  Event lines are free-form
objects (metadata, tags, entries keyed by id) whose keys come from the
data: they are inferred."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from fmtfs.formats.schema import Field, Kind, ViewSchema

# FieldDescriptor.TYPE_* -> Arrow type of a scalar
_PROTO_SCALARS = {
    1: pa.float64(),  # double
    2: pa.float32(),  # float
    3: pa.int64(),  # int64
    4: pa.uint64(),  # uint64
    5: pa.int32(),  # int32
    6: pa.uint64(),  # fixed64
    7: pa.int64(),  # fixed32 (fits; Spark has no unsigned 32)
    8: pa.bool_(),
    9: pa.string(),
    12: pa.binary(),
    13: pa.int64(),  # uint32
    14: pa.string(),  # enum: by name, as the JSON mapping spells it
    15: pa.int32(),  # sfixed32
    16: pa.int64(),  # sfixed64
    17: pa.int32(),  # sint32
    18: pa.int64(),  # sint64
}
_WRAPPERS = {
    "google.protobuf.DoubleValue": pa.float64(),
    "google.protobuf.FloatValue": pa.float32(),
    "google.protobuf.Int64Value": pa.int64(),
    "google.protobuf.UInt64Value": pa.uint64(),
    "google.protobuf.Int32Value": pa.int32(),
    "google.protobuf.UInt32Value": pa.int64(),
    "google.protobuf.BoolValue": pa.bool_(),
    "google.protobuf.StringValue": pa.string(),
    "google.protobuf.BytesValue": pa.binary(),
    "google.protobuf.Timestamp": pa.timestamp("us", tz="UTC"),  # Spark's precision
}
_MAX_DEPTH = 8


def message_arrow_type(descriptor: Any, _stack: tuple[str, ...] = ()) -> pa.DataType:
    """The Arrow type of a protobuf message in its JSON mapping: messages as
    structs (.proto field names), repeated as lists, maps as maps, scalars
    by their proto type.  Well-known types with a JSON form of their own
    (Struct, Value, Any, Duration, ...), recursive and field-less messages
    become strings holding their JSON text."""
    name = descriptor.full_name
    if name in _WRAPPERS:
        return _WRAPPERS[name]
    if name.startswith("google.protobuf.") or name in _stack or len(_stack) >= _MAX_DEPTH:
        return pa.string()
    fields = []
    for fd in descriptor.fields:
        fields.append(pa.field(fd.name, _field_type(fd, (*_stack, name))))
    return pa.struct(fields) if fields else pa.string()


def _field_type(fd: Any, stack: tuple[str, ...]) -> pa.DataType:
    message = fd.message_type
    if message is not None and message.GetOptions().map_entry:
        key = _value_type(message.fields_by_name["key"], stack)
        return pa.map_(key, _value_type(message.fields_by_name["value"], stack))
    value = _value_type(fd, stack)
    return pa.list_(value) if fd.is_repeated else value


def _value_type(fd: Any, stack: tuple[str, ...]) -> pa.DataType:
    if fd.message_type is not None:
        return message_arrow_type(fd.message_type, stack)
    return _PROTO_SCALARS.get(fd.type, pa.string())


EVENT_VIEW = ViewSchema(
    Field("event", Kind.INT),
    Field.nested("metadata"),
    Field.nested("metadata_base64"),  # values not UTF-8, base64 (an object, not bytes)
    Field.nested("tags"),
    Field.nested("entries"),
)


def type_view_schema(descriptor: Any) -> ViewSchema:
    """A `<file>/types/<type>.jsonl` view (LAYOUT.md §3) of a message type
    with this descriptor; a value that did not convert keeps its bytes."""
    return ViewSchema(
        Field("event", Kind.INT),
        Field("entry", Kind.INT),
        Field.typed("tags", pa.list_(pa.string())),
        Field.typed("value", message_arrow_type(descriptor)),
        Field("payload", Kind.BYTES),
    )
