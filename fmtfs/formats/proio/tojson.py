"""A fast equivalent of `json_format.MessageToDict(m, preserving_proto_field_name=True)`.

json_format walks every field through several Python method calls; on the
scan path that dominates (one call per entry).  Here each message descriptor
gets a table, built once, of field number -> (name, value converter), and a
message converts with one `ListFields()` (C, upb) and a loop.  The output is
identical to MessageToDict: 64-bit integers as strings, bytes as base64,
enums as names (open enums fall back to the number), float fields in their
shortest round-trip form, NaN/Infinity as strings, fields in ListFields
order.  Anything unusual (extensions, well-known types, enum JSON-name
options) is handed to json_format itself, so the result never differs.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

Converter = Callable[[Any], Any]

_FD = FieldDescriptor
_INT64 = {_FD.CPPTYPE_INT64, _FD.CPPTYPE_UINT64}
_b64 = base64.b64encode


def slow(message: Any) -> Any:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _special(value: float) -> str:
    if value != value:
        return "NaN"
    return "-Infinity" if value < 0 else "Infinity"


def _double(value: float) -> Any:
    return value if value - value == 0 else _special(value)


_f32 = struct.Struct("<f")
_float_memo: dict[float, float] = {}


def _float(value: float) -> Any:
    """type_checkers.ToShortestFloat (the fewest digits, from 6 up, that
    survive a float32 round trip), inlined and memoised: it is the hottest
    call of a physics stream."""
    if not value:
        return value  # 0.0 and -0.0 (equal as memo keys, yet printed differently)
    try:
        return _float_memo[value]
    except KeyError:
        pass
    if value - value != 0:
        return _special(value)
    pack, unpack = _f32.pack, _f32.unpack
    precision = 6
    rounded = float(f"{value:.6g}")
    while unpack(pack(rounded))[0] != value:
        precision += 1
        rounded = float(f"{value:.{precision}g}")
    if len(_float_memo) > 65536:
        _float_memo.clear()
    _float_memo[value] = rounded
    return rounded


def _bytes(value: bytes) -> str:
    return _b64(value).decode("ascii")


def _is_wkt(desc: Descriptor) -> bool:
    # json_format gives these (Timestamp, Duration, Struct, wrappers, Any,
    # FieldMask, ...) their own JSON forms; leave them to it.
    return desc.file.name.startswith("google/protobuf/")


class _Builder:
    def __init__(self) -> None:
        self._messages: dict[str, Converter] = {}

    def message(self, desc: Descriptor) -> Converter:
        known = self._messages.get(desc.full_name)
        if known is not None:
            return known
        if _is_wkt(desc):
            self._messages[desc.full_name] = slow
            return slow
        # Keyed by the FieldDescriptor itself: upb hands out one object per
        # field, and a dict lookup beats reading `.number` every time.  Each
        # field's converter takes the whole value (a repeated field's list,
        # a map), None where the value is shown as it is.
        table: dict[Any, tuple[str, Converter | None]] = {}
        fields_of = table.get

        def convert(message: Any) -> Any:
            out = {}
            for field, value in message.ListFields():
                known = fields_of(field)
                if known is None:  # an extension: json_format knows its spelling
                    return slow(message)
                name, fn = known
                out[name] = value if fn is None else fn(value)
            return out

        # Registered before the fields so that recursive messages find it.
        self._messages[desc.full_name] = convert
        for field in desc.fields:
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                table[field] = (field.name, _map_of(self.value(field.message_type.fields_by_name["value"])))
            elif _repeated(field):
                table[field] = (field.name, _list_of(self.value(field)))
            else:
                table[field] = (field.name, self.value(field))
        return convert

    def value(self, field: FieldDescriptor) -> Converter | None:
        """The converter of one value of `field` (None: the value as is)."""
        cpp = field.cpp_type
        if cpp == _FD.CPPTYPE_MESSAGE:
            return self.message(field.message_type)
        if cpp == _FD.CPPTYPE_ENUM:
            return _enum(field)
        if cpp == _FD.CPPTYPE_STRING:
            return _bytes if field.type == _FD.TYPE_BYTES else None
        if cpp == _FD.CPPTYPE_BOOL:
            return bool
        if cpp in _INT64:
            return str
        if cpp == _FD.CPPTYPE_DOUBLE:
            return _double
        if cpp == _FD.CPPTYPE_FLOAT:
            return _float
        return None  # 32-bit integers


def _list_of(fn: Converter | None) -> Converter:
    if fn is None:
        return list
    return lambda values: list(map(fn, values))


def _map_of(fn: Converter | None) -> Converter:
    if fn is None:
        return lambda entries: {_key(k): entries[k] for k in entries}
    return lambda entries: {_key(k): fn(entries[k]) for k in entries}


def _key(key: Any) -> str:
    if key is True:
        return "true"
    if key is False:
        return "false"
    return str(key)


def _repeated(field: FieldDescriptor) -> bool:
    is_repeated = getattr(field, "is_repeated", None)
    if is_repeated is not None:
        return bool(is_repeated)
    return field.label == _FD.LABEL_REPEATED


def _enum(field: FieldDescriptor) -> Converter:
    enum = field.enum_type
    if enum.full_name == "google.protobuf.NullValue":
        return lambda _value: None
    if any(v.GetOptions().ListFields() for v in enum.values):
        # A value with options may carry a JSON name (pb.enumvalue.json).
        return _raise_slow
    # values_by_number decides between aliases exactly as json_format does.
    names = {number: v.name for number, v in enum.values_by_number.items()}
    closed = getattr(enum, "is_closed", False)

    def convert(value: int) -> Any:
        name = names.get(value)
        if name is not None:
            return name
        if closed:
            raise ValueError(f"enum {enum.full_name} has no value {value}")
        return value

    return convert


class _Slow(Exception):
    pass


def _raise_slow(_value: Any) -> Any:
    raise _Slow


def converter(desc: Descriptor) -> Converter:
    """message -> its MessageToDict form (raises like MessageToDict would)."""
    fast = _Builder().message(desc)
    if fast is slow:
        return slow

    def convert(message: Any) -> Any:
        try:
            return fast(message)
        except _Slow:
            return slow(message)

    return convert
