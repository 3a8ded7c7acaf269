"""The JSON shape of gvfs views (LAYOUT.md §3) and its inverse for writes.

Paths are raw bytes (file names) and keys/values UTF-8 by convention; any of
them that is not valid UTF-8 is shown base64-encoded under `<field>_base64`
(`path_base64`, `value_base64`, ... and `metadata_base64` for keys)."""

from __future__ import annotations

import base64
import time
from typing import Any

from fmtfs.formats.base import BadRecord, Record
from fmtfs.formats.gvfs.journal import MAX_ENTRY, encode_entry
from fmtfs.formats.gvfs.model import OP_CODES, OP_COPY, OP_NAMES, OP_SETV, Entry, Value
from fmtfs.shape import format_time, parse_time, put_data, take_data

# time.gmtime / strftime cover years 1..9999; beyond that a time shows as
# the plain integer (writes accept integers too).
_MAX_TIME = 253402300799


def show_time(seconds: int) -> str | int:
    # no memo of its own: format_time memoises per hour already
    return format_time(seconds, "s") if 0 <= seconds <= _MAX_TIME else seconds


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _put_value(record: Record, value: Value) -> None:
    if isinstance(value, list):
        try:
            record["value"] = [item.decode("utf-8") for item in value]
        except UnicodeDecodeError:
            record["value_base64"] = [_b64(item) for item in value]
    else:
        put_data(record, value, "value")


def entry_record(entry: Entry) -> Record:
    """One line of `<tree>/journal.jsonl`."""
    record: Record = {"op": OP_NAMES[entry.op], "time": show_time(entry.mtime)}
    try:  # the common all-UTF-8 case first; put_data sorts out the rest
        record["path"] = entry.path.decode("utf-8")
    except UnicodeDecodeError:
        put_data(record, entry.path, "path")
    if entry.op == OP_COPY:
        put_data(record, entry.source, "source")
    elif entry.key is not None:
        put_data(record, entry.key, "key")
        if entry.value is not None:
            _put_value(record, entry.value)
    return record


def metadata_record(path: bytes, last_changed: int, keys: dict[bytes, Value]) -> Record:
    """One line of `<tree>/metadata.jsonl`: a node with keys."""
    record: Record = {}
    try:
        record["path"] = path.decode("utf-8")
    except UnicodeDecodeError:
        put_data(record, path, "path")
    record["last_changed"] = show_time(last_changed)
    plain: dict[str, Any] = {}
    encoded: dict[str, Any] = {}
    for key in sorted(keys) if len(keys) > 1 else keys:
        value = keys[key]
        try:
            text_key = key.decode("utf-8")
            plain[text_key] = (
                [item.decode("utf-8") for item in value] if isinstance(value, list) else value.decode("utf-8")
            )
        except UnicodeDecodeError:
            encoded[_b64(key)] = [_b64(v) for v in value] if isinstance(value, list) else _b64(value)
    record["metadata"] = plain
    if encoded:
        record["metadata_base64"] = encoded
    return record


# -- writes ------------------------------------------------------------------


def _text(record: Record, field: str, what: str) -> bytes:
    data = take_data(record, field)
    if b"\0" in data:
        raise BadRecord(f"{what} contains a NUL byte")
    return data


def _value(record: Record, op: int) -> bytes | list[bytes]:
    if op != OP_SETV:
        return _text(record, "value", "value")
    items = record.get("value")
    encoded = record.get("value_base64")
    if (items is None) == (encoded is None):
        raise BadRecord("setv needs exactly one of value (a list of strings) or value_base64")
    if items is not None:
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise BadRecord("setv value must be a list of strings")
        out = [i.encode("utf-8") for i in items]
    else:
        if not isinstance(encoded, list):
            raise BadRecord("value_base64 must be a list of base64 strings for setv")
        out = [take_data({"v_base64": i}, "v") for i in encoded]
    if any(b"\0" in item for item in out):
        raise BadRecord("a list item contains a NUL byte")
    return out


def record_entry(record: Any, now: int | None = None) -> bytes:
    """Encode one written journal line into a journal entry (BadRecord when
    it is not a valid gvfs operation)."""
    if not isinstance(record, dict):
        raise BadRecord("a journal line must be a JSON object")
    op_name = record.get("op")
    if op_name not in OP_CODES:
        raise BadRecord(f"op must be one of {', '.join(OP_CODES)}, got {op_name!r}")
    op = OP_CODES[op_name]
    allowed = {"op", "time", "path", "path_base64"}
    if op_name in ("set", "setv", "unset"):
        allowed |= {"key", "key_base64"}
    if op_name in ("set", "setv"):
        allowed |= {"value", "value_base64"}
    if op_name == "copy":
        allowed |= {"source", "source_base64"}
    extra = sorted(set(record) - allowed)
    if extra:
        raise BadRecord(f"{op_name}: unexpected field(s) {', '.join(extra)}")
    if record.get("time") is None:
        mtime = int(time.time()) if now is None else now
    else:
        mtime = parse_time(record["time"], "s")
    if not 0 <= mtime < 1 << 64:
        raise BadRecord(f"time {mtime} is outside the journal's unsigned 64-bit range")
    path = _text(record, "path", "path")
    if not path.startswith(b"/"):
        raise BadRecord(f"path must be absolute (start with /), got {path!r}")
    key = value = source = None
    if op_name in ("set", "setv", "unset"):
        key = _text(record, "key", "key")
        if not key:
            raise BadRecord("key must not be empty")
    if op_name in ("set", "setv"):
        value = _value(record, op)
    if op_name == "copy":
        source = _text(record, "source", "source")
        if not source.startswith(b"/"):
            raise BadRecord(f"source must be absolute (start with /), got {source!r}")
    entry = encode_entry(op, mtime, path, key, value, source)
    if len(entry) > MAX_ENTRY:
        raise BadRecord(f"entry of {len(entry)} bytes exceeds the journal's limit of {MAX_ENTRY}")
    return entry
