"""proio wire level: the bucket magic, header and event messages, compression.

Headers and events are parsed with a *shadow* schema that is wire-compatible
with `proio.proto` but declares its maps as repeated entry messages: upb
parses it in C (fast) while we still see map entries in stored order (tags
keep their writer's order, duplicate keys stay visible).  The shadow schema
is proto2 so that map entries keep explicit presence: a written entry always
carries both key and value (`12 00` for an empty value), as the reference
writers do.  Field 6 (the pre-2018-03 `repeated NamedBytes metaData`) has the
same wire shape as a map entry and is read as metadata too.
"""

from __future__ import annotations

import gzip
import lzma
import struct

import lz4.frame
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

MAGIC = b"\xe1\xc1" + b"\x00" * 14
PREFIX = 20  # magic + u32le header length

NONE, GZIP, LZ4, LZMA = 0, 1, 2, 3
COMPRESSION_NAMES = {NONE: "NONE", GZIP: "GZIP", LZ4: "LZ4", LZMA: "LZMA"}

# Default flush threshold of the reference writers (uncompressed bucket bytes).
BUCKET_DUMP_THRES = 0x1000000

_U32 = struct.Struct("<I")
unpack_u32 = _U32.unpack_from
pack_u32 = _U32.pack

_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_U64, _BYTES, _MSG = _F.TYPE_UINT64, _F.TYPE_BYTES, _F.TYPE_MESSAGE

# message -> [(field name, number, label, type, message type name, packed)]
_SHADOW = {
    "MetaEntry": [("key", 1, _OPT, _BYTES, None, False), ("value", 2, _OPT, _BYTES, None, False)],
    "Header": [
        ("nEvents", 1, _OPT, _U64, None, False),
        ("bucketSize", 2, _OPT, _U64, None, False),
        ("compression", 3, _OPT, _U64, None, False),
        ("fileDescriptor", 5, _REP, _BYTES, None, False),
        ("metaData", 6, _REP, _MSG, "MetaEntry", False),
        ("metadata", 7, _REP, _MSG, "MetaEntry", False),
    ],
    "Tag": [("entry", 1, _REP, _U64, None, True)],
    "TagEntry": [("key", 1, _OPT, _BYTES, None, False), ("value", 2, _OPT, _MSG, "Tag", False)],
    "Any": [("type", 1, _OPT, _U64, None, False), ("payload", 2, _OPT, _BYTES, None, False)],
    "EntryEntry": [("key", 1, _OPT, _U64, None, False), ("value", 2, _OPT, _MSG, "Any", False)],
    "TypeEntry": [("key", 1, _OPT, _U64, None, False), ("value", 2, _OPT, _BYTES, None, False)],
    "Event": [
        ("tag", 1, _REP, _MSG, "TagEntry", False),
        ("nEntries", 2, _OPT, _U64, None, False),
        ("entry", 3, _REP, _MSG, "EntryEntry", False),
        ("nTypes", 4, _OPT, _U64, None, False),
        ("type", 5, _REP, _MSG, "TypeEntry", False),
    ],
}


def _shadow_classes() -> dict[str, type]:
    package = "fmtfs.proio_wire"
    fdp = descriptor_pb2.FileDescriptorProto(name="fmtfs/proio_wire.proto", package=package, syntax="proto2")
    for message, fields in _SHADOW.items():
        m = fdp.message_type.add(name=message)
        for name, number, label, ftype, type_name, packed in fields:
            f = m.field.add(name=name, number=number, label=label, type=ftype)
            if type_name:
                f.type_name = f".{package}.{type_name}"
            if packed:
                f.options.packed = True
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
        for name in _SHADOW
    }


_CLASSES = _shadow_classes()
Header = _CLASSES["Header"]
Event = _CLASSES["Event"]


def decompress(compression: int, data: bytes | memoryview) -> bytes:
    """The uncompressed payload; raises on damage (any exception)."""
    if compression == NONE:
        return bytes(data)
    if compression == GZIP:
        return gzip.decompress(data)
    if compression == LZ4:
        return lz4.frame.decompress(bytes(data))
    if compression == LZMA:
        return lzma.decompress(data, format=lzma.FORMAT_ALONE)
    raise ValueError(f"unknown compression {compression}")


def compress(compression: int, data: bytes) -> bytes:
    if compression == NONE:
        return data
    if compression == GZIP:
        # mtime 0 keeps written files reproducible; level 9 as py-proio.
        return gzip.compress(data, compresslevel=9, mtime=0)
    if compression == LZ4:
        return lz4.frame.compress(data)  # py-proio's call, byte for byte
    if compression == LZMA:
        return lzma.compress(data, format=lzma.FORMAT_ALONE)
    raise ValueError(f"unknown compression {compression}")


def split_events(payload: bytes, n_events: int) -> list[memoryview]:
    """The `n_events` length-prefixed Event messages of a payload.  Raises
    ValueError when a length runs past the payload.  Bytes after the last
    event are ignored, as the reference readers do."""
    view = memoryview(payload)
    size = len(payload)
    out = []
    append = out.append
    pos = 0
    for _ in range(n_events):
        if pos + 4 > size:
            raise ValueError(f"payload ends after {len(out)} of {n_events} events")
        (length,) = unpack_u32(payload, pos)
        pos += 4
        if pos + length > size:
            raise ValueError(f"event {len(out)} of {n_events} runs past the payload")
        append(view[pos : pos + length])
        pos += length
    return out


def encode_bucket(header: bytes, payload: bytes) -> bytes:
    return MAGIC + pack_u32(len(header)) + header + payload
