"""Test-only encoders for every Beats segment layout, written from the spec
independently of fmtfs.formats.beats (cryptography for CTR, lz4.frame for
the container, cbor2/orjson for payloads, google.protobuf for shipper
events).  The read-only layouts (v0, v1, document v2/v3) exist only here.
Also a reference reader (decrypt, decompress, walk frames) used as an
oracle for what fmtfs writes."""

from __future__ import annotations

import struct
import zlib

import cbor2
import lz4.block
import lz4.frame
import orjson
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from tests.conftest import FIXTURES as FIXTURES_ROOT

FIXTURES = FIXTURES_ROOT / "beats"
KEY = bytes.fromhex("000102030405060708090a0b0c0d0e0f")
IV = bytes.fromhex("101112131415161718191a1b1c1d1e1f")
TS = 1659105780000000000

EXAMPLE_EVENT = {"timestamp": TS, "flags": 1, "meta": {}, "fields": {"message": "hi"}}
EXAMPLE_HEX = (
    "02000000010000000000000040000000a46974696d657374616d701b170653eaa5b2880065666c61677301646d"
    "657461a0666669656c6473a1676d657373616765626869f127edd840000000"
)


def event(i: int, size: int = 0) -> dict:
    """A Filebeat-like event; `size` pads the message."""
    return {
        "timestamp": TS + i * 1_000_001,
        "flags": 1,
        "meta": {"pipeline": "p"} if i % 3 == 0 else {},
        "fields": {
            "message": f"line {i} " + "x" * size,
            "log": {"offset": i * 10, "file": {"path": "/var/log/a.log"}},
            "n": -i,
            "ratio": i / 7,
            "ok": i % 2 == 0,
            "none": None,
            "list": [1, "two", 3.5],
        },
    }


def frame(payload: bytes) -> bytes:
    size = len(payload) + 12
    head = struct.pack("<I", size)
    return head + payload + struct.pack("<II", zlib.crc32(head + payload), size)


def ctr(data: bytes, key: bytes = KEY, iv: bytes = IV) -> bytes:
    enc = Cipher(algorithms.AES(key), modes.CTR(iv)).encryptor()
    return enc.update(data) + enc.finalize()


def lz4_container(data: bytes, block_size: int = lz4.frame.BLOCKSIZE_MAX4MB, linked: bool = False) -> bytes:
    c = lz4.frame.LZ4FrameCompressor(
        block_size=block_size,
        block_linked=linked,
        content_checksum=True,
        compression_level=0,
        auto_flush=True,
    )
    return c.begin() + c.compress(data) + c.flush()


def lz4_small_blocks(data: bytes, piece: int) -> bytes:
    """An LZ4 frame (Beats header) whose independent blocks each hold `piece`
    bytes, as Beats' per-batch Flush() produces: frames straddle blocks."""
    out = bytearray(bytes.fromhex("04224d186470b9"))
    for i in range(0, len(data), piece):
        chunk = data[i : i + piece]
        packed = lz4.block.compress(chunk, store_size=False)
        out += struct.pack("<I", len(packed)) + packed
    checksum = lz4_container(data)[-4:]
    return bytes(out + b"\0\0\0\0" + checksum)


# -- protobuf shipper events, through google.protobuf -------------------------


def _proto_classes():
    f = descriptor_pb2.FileDescriptorProto(name="beats_test_shipper.proto", package="t", syntax="proto3")

    def msg(name, *fields):
        m = f.message_type.add(name=name)
        for number, fname, ftype, label, type_name in fields:
            fd = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                fd.type_name = type_name
        return m

    T = descriptor_pb2.FieldDescriptorProto
    opt, rep = T.LABEL_OPTIONAL, T.LABEL_REPEATED
    msg("Timestamp", (1, "seconds", T.TYPE_INT64, opt, None), (2, "nanos", T.TYPE_INT32, opt, None))
    msg("Source", (1, "input_id", T.TYPE_STRING, opt, None), (2, "stream_id", T.TYPE_STRING, opt, None))
    msg(
        "DataStream",
        (1, "type", T.TYPE_STRING, opt, None),
        (2, "dataset", T.TYPE_STRING, opt, None),
        (3, "namespace", T.TYPE_STRING, opt, None),
    )
    entry = msg("Struct", (1, "data", T.TYPE_MESSAGE, rep, ".t.Struct.DataEntry"))
    e = entry.nested_type.add(name="DataEntry")
    e.field.add(name="key", number=1, type=T.TYPE_STRING, label=opt)
    e.field.add(name="value", number=2, type=T.TYPE_MESSAGE, label=opt, type_name=".t.Value")
    e.options.map_entry = True
    value = msg(
        "Value",
        (2, "number_value", T.TYPE_DOUBLE, opt, None),
        (3, "string_value", T.TYPE_STRING, opt, None),
        (4, "bool_value", T.TYPE_BOOL, opt, None),
        (5, "struct_value", T.TYPE_MESSAGE, opt, ".t.Struct"),
        (6, "list_value", T.TYPE_MESSAGE, opt, ".t.ListValue"),
        (7, "timestamp", T.TYPE_MESSAGE, opt, ".t.Timestamp"),
    )
    value.field.add(name="null_value", number=1, type=T.TYPE_INT32, label=opt)
    value.oneof_decl.add(name="kind")
    for fd in value.field:
        fd.oneof_index = 0
    msg("ListValue", (1, "values", T.TYPE_MESSAGE, rep, ".t.Value"))
    msg(
        "Event",
        (1, "timestamp", T.TYPE_MESSAGE, opt, ".t.Timestamp"),
        (2, "source", T.TYPE_MESSAGE, opt, ".t.Source"),
        (3, "data_stream", T.TYPE_MESSAGE, opt, ".t.DataStream"),
        (4, "metadata", T.TYPE_MESSAGE, opt, ".t.Struct"),
        (5, "fields", T.TYPE_MESSAGE, opt, ".t.Struct"),
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return {
        n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"t.{n}")) for n in ("Event", "Value")
    }


PROTO = _proto_classes()


def _fill_value(v, value) -> None:
    if value is None:
        v.null_value = 0
    elif isinstance(value, bool):
        v.bool_value = value
    elif isinstance(value, int | float):
        v.number_value = float(value)
    elif isinstance(value, str):
        v.string_value = value
    elif isinstance(value, dict):
        v.struct_value.SetInParent()
        _fill_struct(v.struct_value, value)
    elif isinstance(value, list):
        v.list_value.SetInParent()
        for item in value:
            _fill_value(v.list_value.values.add(), item)


def _fill_struct(s, data: dict) -> None:
    for k, value in data.items():
        _fill_value(s.data[k], value)


def proto_event(ev: dict, source: dict | None = None) -> bytes:
    m = PROTO["Event"]()
    m.timestamp.seconds, m.timestamp.nanos = divmod(ev["timestamp"], 1_000_000_000)
    if source:
        m.source.input_id = source["input_id"]
        m.source.stream_id = source["stream_id"]
    if ev["meta"]:
        _fill_struct(m.metadata, ev["meta"])
    if ev["fields"]:
        _fill_struct(m.fields, ev["fields"])
    return m.SerializeToString()


def proto_decode(payload: bytes) -> dict:
    m = PROTO["Event"]()
    m.ParseFromString(payload)

    def val(v):
        kind = v.WhichOneof("kind")
        if kind in (None, "null_value"):
            return None
        if kind == "struct_value":
            return struct_(v.struct_value)
        if kind == "list_value":
            return [val(x) for x in v.list_value.values]
        return getattr(v, kind)

    def struct_(s):
        return {k: val(v) for k, v in s.data.items()}

    return {
        "timestamp": m.timestamp.seconds * 1_000_000_000 + m.timestamp.nanos,
        "meta": struct_(m.metadata),
        "fields": struct_(m.fields),
    }


# -- whole segments ---------------------------------------------------------------


def payload_for(ev: dict, kind: str) -> bytes:
    if kind == "json":
        return orjson.dumps(ev)
    if kind == "proto":
        return proto_event(ev)
    return cbor2.dumps(ev)


def segment(layout: str, events: list[dict], options: int = 0, count: int | None = None, **kw) -> bytes:
    """A whole segment file.  layout: v0, v1, v2 (with `options`), doc2, doc3.
    kw: key, iv, lz4_piece (small independent blocks), lz4_linked."""
    key, iv = kw.get("key", KEY), kw.get("iv", IV)
    n = len(events) if count is None else count
    if layout == "v0":
        return struct.pack("<I", 0) + b"".join(frame(payload_for(e, "json")) for e in events)
    if layout == "v1":
        return struct.pack("<II", 1, n) + b"".join(frame(payload_for(e, "cbor")) for e in events)
    if layout in ("doc2", "doc3"):
        version = 2 if layout == "doc2" else 3
        payloads = [payload_for(e, "cbor") for e in events]
        if layout == "doc3":
            payloads = [
                lz4.frame.compress(p) if i % 2 else lz4.block.compress(p, store_size=False)
                for i, p in enumerate(payloads)
            ]
        return struct.pack("<I", version) + iv + ctr(b"".join(frame(p) for p in payloads), key, iv)
    body = b"".join(frame(payload_for(e, "proto" if options & 4 else "cbor")) for e in events)
    if options & 2:
        if kw.get("lz4_piece"):
            body = lz4_small_blocks(body, kw["lz4_piece"])
        else:
            body = lz4_container(
                body,
                block_size=kw.get("lz4_block", lz4.frame.BLOCKSIZE_MAX4MB),
                linked=kw.get("lz4_linked", False),
            )
    head = struct.pack("<III", 2, n, options)
    if options & 1:
        return head + iv + ctr(body, key, iv)
    return head + body


def reference_read(data: bytes, key: bytes | None = KEY) -> tuple[int, list[dict]]:
    """An independent reader for shipped v2 segments: (frame count in the
    header, decoded events with integer timestamps)."""
    version, count, options = struct.unpack_from("<III", data, 0)
    assert version == 2 and options & ~7 == 0
    body = data[12:]
    if options & 1:
        body = ctr(body[16:], key, body[:16])
    if options & 2:
        body = lz4.frame.decompress(body)
    events = []
    i = 0
    while i < len(body):
        (size,) = struct.unpack_from("<I", body, i)
        crc, size2 = struct.unpack_from("<II", body, i + size - 8)
        assert size2 == size and crc == zlib.crc32(body[i : i + size - 8])
        payload = body[i + 4 : i + size - 8]
        events.append(proto_decode(payload) if options & 4 else cbor2.loads(payload))
        i += size
    return count, events


def test_reference_reader_reads_the_spec_example() -> None:
    count, events = reference_read(bytes.fromhex(EXAMPLE_HEX))
    assert count == 1 and events == [EXAMPLE_EVENT]


@pytest.mark.parametrize("options", range(8))
def test_builders_round_trip_through_the_reference_reader(options: int) -> None:
    events = [event(i) for i in range(5)]
    count, back = reference_read(segment("v2", events, options))
    assert count == 5
    if options & 4:
        assert [e["fields"]["message"] for e in back] == [e["fields"]["message"] for e in events]
    else:
        assert back == events
