"""Frame payloads <-> view lines.

Every frame becomes one line `{"timestamp", "flags", "meta", "fields"}`:

* CBOR (v1, v2) and JSON (v0) payloads are chosen by their first byte, not by
  the version (`{` is JSON, anything else is tried as CBOR; spec §5.5).  The
  timestamp (integer nanoseconds) is shown as RFC 3339 with 9 digits; flags,
  meta and fields as stored.  A map missing a key gets Go's zero value
  (timestamp 0, flags 0, `{}`), as Beats' struct decoding would; keys beyond
  the four are kept, after them.  CBOR values JSON cannot hold are mapped:
  byte strings to base64 text, `undefined` to null, non-text map keys to
  their text form, tagged values (which Beats rejects) to text.  Invalid
  UTF-8 in a v0 JSON payload (elastic/beats#26335) becomes U+FFFD.
* protobuf shipper events (bit 0x4) use the same keys: timestamp from the
  event, flags 0 (shipper events have none), meta = metadata, fields =
  fields (Struct values as JSON; numbers are doubles, timestamps RFC 3339),
  followed by `source` and `data_stream` objects when present.  When the
  protobuf parse fails the first byte decides, as above.
* A payload that is none of these (its frame's CRC was right, so the frame
  boundaries are sound) keeps the shape with `timestamp` and `flags` null,
  empty meta and fields, and the bytes as `data` / `data_base64`; a Problem
  is reported for it and reading continues.  Such lines cannot be written.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from typing import Any

import cbor2
import lz4.block
import lz4.frame
import orjson

from fmtfs.formats.base import BadRecord
from fmtfs.formats.beats import cbor, protobuf
from fmtfs.shape import HOUR_HEADS, MINUTES_SECONDS, format_time, hour_text, parse_time, put_data

KEYS = ("timestamp", "flags", "meta", "fields")
PROTOBUF_KEYS = KEYS + ("source", "data_stream")
Record = dict[str, Any]
_INT64 = 1 << 63
# doc-v3 raw LZ4 blocks do not carry their size; bound what one may inflate to.
MAX_FRAME_PAYLOAD = 64 << 20


class PayloadError(ValueError):
    """A frame whose (CRC-valid) payload is not an event."""


def _normal(d: Any) -> Record:
    """An event map in the line shape (slow path for unusual maps)."""
    if not isinstance(d, dict):
        raise PayloadError(f"payload is a {type(d).__name__}, not a map")
    ts = d.get("timestamp", 0)
    if type(ts) is float and ts.is_integer():
        ts = int(ts)
    meta, fields = d.get("meta"), d.get("fields")
    out: Record = {
        "timestamp": format_time(ts) if type(ts) is int else sanitize(ts),
        "flags": sanitize(d.get("flags", 0)),
        "meta": {} if meta is None else sanitize(meta),
        "fields": {} if fields is None else sanitize(fields),
    }
    for key, value in d.items():
        if key not in KEYS:
            out[key if isinstance(key, str) else str(key)] = sanitize(value)
    return out


_KEY_LIST = list(KEYS)


def _event(d: Any) -> Record:
    """A decoded JSON/CBOR value as a line (fast path: the map Beats writes)."""
    if type(d) is dict and len(d) == 4 and [*d] == _KEY_LIST and type(d["timestamp"]) is int:
        d["timestamp"] = format_time(d["timestamp"])
        return d
    return _normal(d)


def from_json(payload: memoryview) -> Record:
    try:
        d = orjson.loads(payload)
    except orjson.JSONDecodeError:
        try:
            d = json.loads(bytes(payload).decode("utf-8", "replace"))
        except ValueError as exc:
            raise PayloadError(f"invalid JSON: {exc}") from None
    return _event(d)


def sniffed(
    payload: memoryview,
    _loads=cbor2.loads,
    _hours=HOUR_HEADS,
    _mmss=MINUTES_SECONDS,
    _dict=dict,
    _int=int,
    _str=str,
) -> Record:
    """JSON when the payload starts with `{`, else CBOR.  The CBOR case is
    the hot path of every scan, so _event and format_time are inlined
    (format_time's memo and table read here directly)."""
    if payload[0] == 0x7B:
        return from_json(payload)
    try:
        d = _loads(payload)
    except Exception as exc:  # cbor2 raises several types for bad input
        raise PayloadError(f"invalid CBOR: {exc}") from None
    if type(d) is _dict and len(d) == 4 and [*d] == _KEY_LIST:
        ts = d["timestamp"]
        if type(ts) is _int:
            seconds, fraction = divmod(ts, 1_000_000_000)
            hour, of_hour = divmod(seconds, 3600)
            head = _hours.get(hour) or hour_text(hour)
            d["timestamp"] = f"{head}{_mmss[of_hour]}.{_str(fraction + 1_000_000_000)[1:]}Z"
            return d
    return _normal(d)


def from_protobuf(payload: memoryview) -> Record:
    try:
        return protobuf.decode_event(payload)
    except protobuf.ProtoError as exc:
        try:
            return sniffed(payload)
        except PayloadError:
            raise PayloadError(f"invalid protobuf event: {exc}") from None


def lz4_payload(payload: memoryview) -> bytes:
    """A document-v3 frame payload: an LZ4 frame, else a raw LZ4 block."""
    raw = bytes(payload)
    try:
        if raw[:4] == b"\x04\x22\x4d\x18":
            return lz4.frame.decompress(raw)
        return lz4.block.decompress(raw, uncompressed_size=MAX_FRAME_PAYLOAD)
    except Exception as exc:
        raise PayloadError(f"invalid LZ4 payload: {exc}") from None


def decoder(protobuf_payloads: bool, lz4_payloads: bool) -> Callable[[memoryview], Record]:
    """The payload decoder for a segment layout."""
    base = from_protobuf if protobuf_payloads else sniffed
    if lz4_payloads:

        def inflated(payload: memoryview) -> Record:
            raw = lz4_payload(payload)
            if not raw:
                raise PayloadError("empty payload after LZ4 decompression")
            return base(memoryview(raw))

        return inflated
    return base


def opaque(payload: memoryview) -> Record:
    """The line for a payload that is not an event (see module docstring)."""
    return put_data({"timestamp": None, "flags": None, "meta": {}, "fields": {}}, bytes(payload))


def sanitize(value: Any) -> Any:
    """A decoded CBOR value made JSON-shaped (see module docstring)."""
    kind = type(value)
    if kind is str or kind is bool or kind is float or value is None:
        return value
    if kind is int:
        return value if -_INT64 <= value < (1 << 64) else str(value)
    if kind is dict:
        return {k if type(k) is str else str(k): sanitize(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [sanitize(v) for v in value]
    if kind is bytes or kind is bytearray:
        return base64.b64encode(value).decode("ascii")
    if value is cbor2.undefined:
        return None
    return str(value)


def check_json(records: list[Record]) -> tuple[list[Record], bool, int | None]:
    """Make sure orjson can render every record; sanitize only when needed
    (one orjson pass per chunk is far cheaper than walking every value).
    Returns the records, whether they had to be sanitized (the chunk state
    remembers it so decode() sanitizes without re-checking), and the length
    of their JSON Lines when the check's dump tells it (`[a,b]` is one byte
    longer than `a\nb\n`), so a scan need not dump them again."""
    try:
        return records, False, len(orjson.dumps(records)) - 1
    except TypeError:
        return [sanitize(r) for r in records], True, None


# -- written lines -> payloads -------------------------------------------------


def encode_line(record: Any, protobuf_payloads: bool) -> bytes:
    """Validate one written line and encode it as a frame payload.  Missing
    keys default to what Beats would write for an empty event now:
    timestamp = now, flags = 1 (GuaranteedSend; 0 for protobuf), meta and
    fields empty."""
    if not isinstance(record, dict):
        raise BadRecord("a line must be a JSON object")
    allowed = PROTOBUF_KEYS if protobuf_payloads else KEYS
    unknown = [k for k in record if k not in allowed]
    if unknown:
        raise BadRecord(f"unknown keys {unknown} (allowed: {', '.join(allowed)})")
    if "data" in record or "data_base64" in record:
        raise BadRecord("opaque payloads cannot be written")
    ts = record.get("timestamp")
    ts = time.time_ns() if ts is None else parse_time(ts, "ns", "timestamp")
    if not -_INT64 <= ts < _INT64:
        raise BadRecord("timestamp: out of the int64 nanosecond range")
    meta = record.get("meta")
    meta = {} if meta is None else meta
    fields = record.get("fields")
    fields = {} if fields is None else fields
    for name, value in (("meta", meta), ("fields", fields)):
        if not isinstance(value, dict):
            raise BadRecord(f"{name}: expected an object")
    if protobuf_payloads:
        flags = record.get("flags") or 0
        if flags != 0:
            raise BadRecord("flags: protobuf (shipper) events cannot carry flags")
        extra = {}
        for name in ("source", "data_stream"):
            if record.get(name) is not None:
                if not isinstance(record[name], dict):
                    raise BadRecord(f"{name}: expected an object")
                extra[name] = record[name]
        return protobuf.encode_event(ts, meta, fields, **extra)
    flags = record.get("flags", 1)
    if type(flags) is not int or not 0 <= flags < 1 << 32:
        raise BadRecord("flags: expected an integer from 0 to 4294967295")
    return cbor.encode_event(ts, flags, meta, fields)
