"""elastic-agent-shipper events (options bit 0x4, spec §5.3), at the wire level.

Only five small messages are involved, so they are read and written here
directly instead of through generated classes:

    Event      1 timestamp (google.protobuf.Timestamp: 1 seconds, 2 nanos)
               2 source {1 input_id, 2 stream_id}
               3 data_stream {1 type, 2 dataset, 3 namespace}
               4 metadata (Struct)   5 fields (Struct)
    Struct     1 repeated map entry {1 key, 2 Value}
    Value      oneof 1 null, 2 number (double), 3 string, 4 bool,
               5 Struct, 6 ListValue {1 repeated Value}, 7 Timestamp
"""

from __future__ import annotations

import struct
from typing import Any

from fmtfs.formats.base import BadRecord
from fmtfs.shape import format_time

_unpack_d = struct.Struct("<d").unpack_from
_pack_d = struct.Struct("<d").pack
_NS = 1_000_000_000


class ProtoError(ValueError):
    """Bytes that are not a well-formed shipper event."""


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if i >= len(buf):
            raise ProtoError("truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise ProtoError("varint too long")


def _fields(buf: bytes):
    """(field number, wire type, value): an int for varints, bytes for
    length-delimited fields, raw bytes for fixed-size ones."""
    i = 0
    end = len(buf)
    while i < end:
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtoError("field number 0")
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            size, i = _varint(buf, i)
            if i + size > end:
                raise ProtoError("length-delimited field runs past the message")
            value = buf[i : i + size]
            i += size
        elif wire == 1:
            if i + 8 > end:
                raise ProtoError("truncated fixed64")
            value = buf[i : i + 8]
            i += 8
        elif wire == 5:
            if i + 4 > end:
                raise ProtoError("truncated fixed32")
            value = buf[i : i + 4]
            i += 4
        else:
            raise ProtoError(f"unsupported wire type {wire}")
        yield number, wire, value


def _expect(wire: int, wanted: int, what: str) -> None:
    if wire != wanted:
        raise ProtoError(f"{what}: unexpected wire type {wire}")


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtoError(f"{what}: invalid UTF-8") from None


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _timestamp(buf: bytes) -> int:
    seconds = nanos = 0
    for number, wire, value in _fields(buf):
        if number == 1:
            _expect(wire, 0, "timestamp.seconds")
            seconds = _signed(value)
        elif number == 2:
            _expect(wire, 0, "timestamp.nanos")
            nanos = _signed(value)
    return seconds * _NS + nanos


def _strings(buf: bytes, names: tuple[str, ...], what: str) -> dict[str, str]:
    out = dict.fromkeys(names, "")
    for number, wire, value in _fields(buf):
        if 1 <= number <= len(names):
            _expect(wire, 2, what)
            out[names[number - 1]] = _text(value, what)
    return out


def _value(buf: bytes) -> Any:
    result: Any = None
    for number, wire, value in _fields(buf):
        if number == 1:
            _expect(wire, 0, "null_value")
            result = None
        elif number == 2:
            _expect(wire, 1, "number_value")
            result = _unpack_d(value)[0]
        elif number == 3:
            _expect(wire, 2, "string_value")
            result = _text(value, "string_value")
        elif number == 4:
            _expect(wire, 0, "bool_value")
            result = bool(value)
        elif number == 5:
            _expect(wire, 2, "struct_value")
            result = _struct(value)
        elif number == 6:
            _expect(wire, 2, "list_value")
            result = [_value(item) for n, w, item in _fields(value) if n == 1 and w == 2]
        elif number == 7:
            _expect(wire, 2, "timestamp")
            result = format_time(_timestamp(value))
    return result


def _struct(buf: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, wire, entry in _fields(buf):
        if number != 1:
            continue
        _expect(wire, 2, "struct entry")
        key = ""
        item: Any = None
        for n, w, value in _fields(entry):
            if n == 1:
                _expect(w, 2, "struct key")
                key = _text(value, "struct key")
            elif n == 2:
                _expect(w, 2, "struct value")
                item = _value(value)
        out[key] = item
    return out


def decode_event(payload: bytes) -> dict[str, Any]:
    """A shipper Event as a line: timestamp (ns), flags 0 (shipper events
    carry no publisher flags), meta = metadata, fields = fields, then
    `source` and `data_stream` when the event has them."""
    ts = 0
    meta: dict[str, Any] = {}
    fields: dict[str, Any] = {}
    source = data_stream = None
    for number, wire, value in _fields(bytes(payload)):
        if number == 1:
            _expect(wire, 2, "timestamp")
            ts = _timestamp(value)
        elif number == 2:
            _expect(wire, 2, "source")
            source = _strings(value, ("input_id", "stream_id"), "source")
        elif number == 3:
            _expect(wire, 2, "data_stream")
            data_stream = _strings(value, ("type", "dataset", "namespace"), "data_stream")
        elif number == 4:
            _expect(wire, 2, "metadata")
            meta = _struct(value)
        elif number == 5:
            _expect(wire, 2, "fields")
            fields = _struct(value)
    record: dict[str, Any] = {"timestamp": format_time(ts), "flags": 0, "meta": meta, "fields": fields}
    if source is not None:
        record["source"] = source
    if data_stream is not None:
        record["data_stream"] = data_stream
    return record


# -- encoding (appends to protobuf segments) ---------------------------------


def _put_varint(out: bytearray, value: int) -> None:
    value &= (1 << 64) - 1
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _put_bytes(out: bytearray, number: int, raw: bytes) -> None:
    _put_varint(out, (number << 3) | 2)
    _put_varint(out, len(raw))
    out += raw


def _enc_timestamp(ns: int) -> bytes:
    seconds, nanos = divmod(ns, _NS)
    out = bytearray()
    if seconds:
        _put_varint(out, 1 << 3)
        _put_varint(out, seconds)
    if nanos:
        _put_varint(out, 2 << 3)
        _put_varint(out, nanos)
    return bytes(out)


def _enc_value(value: Any, where: str) -> bytes:
    out = bytearray()
    if value is None:
        out += b"\x08\x00"
    elif isinstance(value, bool):
        out += b"\x20\x01" if value else b"\x20\x00"
    elif isinstance(value, int | float):
        out.append(0x11)
        out += _pack_d(float(value))
    elif isinstance(value, str):
        _put_bytes(out, 3, value.encode("utf-8"))
    elif isinstance(value, dict):
        _put_bytes(out, 5, _enc_struct(value, where))
    elif isinstance(value, list):
        inner = bytearray()
        for item in value:
            _put_bytes(inner, 1, _enc_value(item, where))
        _put_bytes(out, 6, bytes(inner))
    else:
        raise BadRecord(f"{where}: cannot encode a {type(value).__name__}")
    return bytes(out)


def _enc_struct(data: dict[str, Any], where: str) -> bytes:
    out = bytearray()
    for key, value in data.items():
        entry = bytearray()
        _put_bytes(entry, 1, key.encode("utf-8"))
        _put_bytes(entry, 2, _enc_value(value, f"{where}.{key}"))
        _put_bytes(out, 1, bytes(entry))
    return bytes(out)


def _enc_strings(values: dict[str, Any], names: tuple[str, ...], where: str) -> bytes:
    out = bytearray()
    for number, name in enumerate(names, 1):
        text = values.get(name, "")
        if not isinstance(text, str):
            raise BadRecord(f"{where}.{name}: expected a string")
        if text:
            _put_bytes(out, number, text.encode("utf-8"))
    unknown = set(values) - set(names)
    if unknown:
        raise BadRecord(f"{where}: unknown keys {sorted(unknown)}")
    return bytes(out)


def encode_event(
    timestamp: int, meta: dict, fields: dict, source: dict | None = None, data_stream: dict | None = None
) -> bytes:
    out = bytearray()
    _put_bytes(out, 1, _enc_timestamp(timestamp))
    if source is not None:
        _put_bytes(out, 2, _enc_strings(source, ("input_id", "stream_id"), "source"))
    if data_stream is not None:
        _put_bytes(out, 3, _enc_strings(data_stream, ("type", "dataset", "namespace"), "data_stream"))
    if meta:
        _put_bytes(out, 4, _enc_struct(meta, "meta"))
    if fields:
        _put_bytes(out, 5, _enc_struct(fields, "fields"))
    return bytes(out)
