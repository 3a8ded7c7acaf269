"""CBOR exactly as go-structform's `cborl` visitor writes an event (spec §5.2):
definite lengths, shortest integers, every float as float64 (0xfb), no tags,
no half floats.  cbor2 cannot be told to do all of that at once (canonical
mode shrinks floats), so this small encoder does it."""

from __future__ import annotations

import struct
from typing import Any

from fmtfs.formats.base import BadRecord

_pack_d = struct.Struct(">d").pack


def _head(major: int, value: int, out: bytearray) -> None:
    m = major << 5
    if value < 24:
        out.append(m | value)
    elif value < 0x100:
        out += bytes((m | 24, value))
    elif value < 0x10000:
        out.append(m | 25)
        out += value.to_bytes(2, "big")
    elif value < 0x100000000:
        out.append(m | 26)
        out += value.to_bytes(4, "big")
    else:
        out.append(m | 27)
        out += value.to_bytes(8, "big")


def _encode(value: Any, out: bytearray, where: str) -> None:
    kind = type(value)
    if kind is str:
        raw = value.encode("utf-8", "surrogatepass")
        _head(3, len(raw), out)
        out += raw
    elif kind is bool:
        out.append(0xF5 if value else 0xF4)
    elif kind is int:
        if value >= 0:
            if value >= 1 << 64:
                raise BadRecord(f"{where}: integer {value} does not fit in 64 bits")
            _head(0, value, out)
        else:
            if value < -(1 << 64):
                raise BadRecord(f"{where}: integer {value} does not fit in 64 bits")
            _head(1, -1 - value, out)
    elif kind is float:
        out.append(0xFB)
        out += _pack_d(value)
    elif value is None:
        out.append(0xF6)
    elif kind is dict:
        _head(5, len(value), out)
        for key, item in value.items():
            if type(key) is not str:
                raise BadRecord(f"{where}: map keys must be strings")
            _encode(key, out, where)
            _encode(item, out, f"{where}.{key}")
    elif kind is list or kind is tuple:
        _head(4, len(value), out)
        for item in value:
            _encode(item, out, where)
    else:
        raise BadRecord(f"{where}: cannot encode a {kind.__name__}")


def encode(value: Any, where: str = "record") -> bytes:
    out = bytearray()
    _encode(value, out, where)
    return bytes(out)


def encode_event(timestamp: int, flags: int, meta: dict, fields: dict) -> bytes:
    """The 4-key map Beats writes for one event, keys in struct order."""
    return encode({"timestamp": timestamp, "flags": flags, "meta": meta, "fields": fields})
