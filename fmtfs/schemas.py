"""Per-format hints for the Parquet twins (see fmtfs.parquet).

The twin's columns are inferred from the records of each view; what the
JSON shape cannot say is which string keys hold *opaque bytes* (one binary
column, whether the JSON spelled them as UTF-8 `K` or as `K_base64`) and
which hold text that is only base64'd when it is not UTF-8 (paths, key
names: `K` stays a string column, `K_base64` becomes a binary column).
Keys listed here are opaque bytes; every other `K_base64` is the second
kind.  A format needing more (declared types, as proio's descriptors give)
overrides Format.parquet_schema(view_path)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from fmtfs.parquet import DEFAULT_BYTES_KEYS

BYTES_KEYS: dict[str, frozenset[str]] = {
    "wallaby": frozenset({"data"}),  # the log record payload
    "kestrel": frozenset({"data"}),  # the item payload (PUT / ADDX / items)
    "beats": frozenset({"data"}),  # a frame whose payload does not decode
    "proio": frozenset({"payload"}),  # an entry whose type is unknown
    "gvfs": frozenset(),  # paths, keys and values are text
}


def bytes_keys(format_name: str, view_path: str) -> frozenset[str]:
    """Keys holding opaque bytes in the records of `view_path`."""
    return BYTES_KEYS.get(format_name, DEFAULT_BYTES_KEYS)


# -- protobuf messages (proio) -------------------------------------------------
#
# A proio `types/<type>.jsonl` line holds the entry's message in protobuf's
# JSON mapping (int64 as strings, bytes as base64, enums by name).  The
# message descriptor gives the real types; fmtfs.parquet casts the inferred
# columns to them (strings -> integers, base64 -> binary).

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


def proio_type_view_schema(descriptor: Any) -> pa.Schema:
    """The schema of a proio `<file>/types/<type>.jsonl` twin (LAYOUT.md §3):
    for ProioFormat.parquet_schema."""
    return pa.schema(
        [
            ("event", pa.int64()),
            ("entry", pa.int64()),
            ("tags", pa.list_(pa.string())),
            ("value", message_arrow_type(descriptor)),
        ]
    )
