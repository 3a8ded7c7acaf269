"""The fast MessageToDict twin gives exactly what json_format gives."""

from __future__ import annotations

import json

import orjson
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory, text_format
from hypothesis import given, settings
from hypothesis import strategies as st

from fmtfs.formats.proio.reader import read_head
from fmtfs.formats.proio.schema import Resolver, bundled
from fmtfs.formats.proio.tojson import converter
from tests.conftest import FIXTURES as FIXTURES_ROOT

FIXTURES = FIXTURES_ROOT / "proio"

SCALARS = {
    "TYPE_INT32": st.integers(-(2**31), 2**31 - 1),
    "TYPE_INT64": st.integers(-(2**63), 2**63 - 1),
    "TYPE_UINT32": st.integers(0, 2**32 - 1),
    "TYPE_UINT64": st.integers(0, 2**64 - 1),
    "TYPE_SINT32": st.integers(-(2**31), 2**31 - 1),
    "TYPE_SINT64": st.integers(-(2**63), 2**63 - 1),
    "TYPE_FIXED32": st.integers(0, 2**32 - 1),
    "TYPE_FIXED64": st.integers(0, 2**64 - 1),
    "TYPE_SFIXED32": st.integers(-(2**31), 2**31 - 1),
    "TYPE_SFIXED64": st.integers(-(2**63), 2**63 - 1),
    "TYPE_FLOAT": st.floats(width=32),
    "TYPE_DOUBLE": st.floats(),
    "TYPE_BOOL": st.booleans(),
    "TYPE_STRING": st.text(max_size=5),
    "TYPE_BYTES": st.binary(max_size=5),
}


def _fields() -> str:
    out = []
    for n, kind in enumerate(SCALARS, 1):
        name = kind[5:].lower()
        out.append(f'field {{ name: "s_{name}" number: {n} type: {kind} label: LABEL_OPTIONAL }}')
        out.append(f'field {{ name: "r_{name}" number: {n + 100} type: {kind} label: LABEL_REPEATED }}')
    return "\n".join(out)


ALL = f"""
name: "t/all.proto" package: "t" syntax: "proto3"
dependency: "google/protobuf/timestamp.proto" dependency: "google/protobuf/wrappers.proto"
enum_type {{ name: "Color" value {{ name: "RED" number: 0 }} value {{ name: "GREEN" number: 1 }}
  value {{ name: "BLUE" number: 5 }} }}
message_type {{
  name: "All"
  {_fields()}
  field {{ name: "color" number: 40 type: TYPE_ENUM type_name: ".t.Color" label: LABEL_OPTIONAL }}
  field {{ name: "colors" number: 41 type: TYPE_ENUM type_name: ".t.Color" label: LABEL_REPEATED }}
  field {{ name: "child" number: 42 type: TYPE_MESSAGE type_name: ".t.All" label: LABEL_OPTIONAL }}
  field {{ name: "children" number: 43 type: TYPE_MESSAGE type_name: ".t.All" label: LABEL_REPEATED }}
  field {{ name: "when" number: 44 type: TYPE_MESSAGE type_name: ".google.protobuf.Timestamp"
    label: LABEL_OPTIONAL }}
  field {{ name: "wrapped" number: 45 type: TYPE_MESSAGE type_name: ".google.protobuf.Int64Value"
    label: LABEL_OPTIONAL }}
  field {{ name: "o_s" number: 46 type: TYPE_STRING label: LABEL_OPTIONAL oneof_index: 0 }}
  field {{ name: "o_i" number: 47 type: TYPE_INT64 label: LABEL_OPTIONAL oneof_index: 0 }}
  field {{ name: "opt" number: 48 type: TYPE_INT32 label: LABEL_OPTIONAL oneof_index: 1
    proto3_optional: true }}
  field {{ name: "m_si" number: 49 type: TYPE_MESSAGE type_name: ".t.All.MSiEntry" label: LABEL_REPEATED }}
  field {{ name: "m_bc" number: 50 type: TYPE_MESSAGE type_name: ".t.All.MBcEntry" label: LABEL_REPEATED }}
  field {{ name: "m_ia" number: 51 type: TYPE_MESSAGE type_name: ".t.All.MIaEntry" label: LABEL_REPEATED }}
  nested_type {{ name: "MSiEntry" options {{ map_entry: true }}
    field {{ name: "key" number: 1 type: TYPE_STRING label: LABEL_OPTIONAL }}
    field {{ name: "value" number: 2 type: TYPE_INT64 label: LABEL_OPTIONAL }} }}
  nested_type {{ name: "MBcEntry" options {{ map_entry: true }}
    field {{ name: "key" number: 1 type: TYPE_BOOL label: LABEL_OPTIONAL }}
    field {{ name: "value" number: 2 type: TYPE_ENUM type_name: ".t.Color" label: LABEL_OPTIONAL }} }}
  nested_type {{ name: "MIaEntry" options {{ map_entry: true }}
    field {{ name: "key" number: 1 type: TYPE_INT32 label: LABEL_OPTIONAL }}
    field {{ name: "value" number: 2 type: TYPE_MESSAGE type_name: ".t.All" label: LABEL_OPTIONAL }} }}
  oneof_decl {{ name: "choice" }} oneof_decl {{ name: "_opt" }}
}}
"""

OLD = """
name: "t/old.proto" package: "t2" syntax: "proto2"
enum_type { name: "Kind" value { name: "A" number: 1 } value { name: "B" number: 2 } }
message_type { name: "Old"
  field { name: "kind" number: 1 type: TYPE_ENUM type_name: ".t2.Kind" label: LABEL_OPTIONAL }
  field { name: "n" number: 2 type: TYPE_INT32 label: LABEL_OPTIONAL default_value: "7" }
  field { name: "f" number: 3 type: TYPE_FLOAT label: LABEL_REPEATED options { packed: true } }
  field { name: "big" number: 4 type: TYPE_UINT64 label: LABEL_OPTIONAL }
}
"""


def _pool() -> descriptor_pool.DescriptorPool:
    # importing the _pb2 modules registers the well-known files in the default pool
    from google.protobuf import timestamp_pb2, wrappers_pb2  # noqa: F401

    pool = descriptor_pool.DescriptorPool()
    for name in ("google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto"):
        fdp = descriptor_pb2.FileDescriptorProto()
        descriptor_pool.Default().FindFileByName(name).CopyToProto(fdp)
        pool.Add(fdp)
    for text in (ALL, OLD):
        pool.Add(text_format.Parse(text, descriptor_pb2.FileDescriptorProto()))
    return pool


POOL = _pool()
AllMsg = message_factory.GetMessageClass(POOL.FindMessageTypeByName("t.All"))
OldMsg = message_factory.GetMessageClass(POOL.FindMessageTypeByName("t2.Old"))


@st.composite
def all_messages(draw, depth=0):
    m = AllMsg()
    for kind, strategy in SCALARS.items():
        name = kind[5:].lower()
        if draw(st.booleans()):
            setattr(m, f"s_{name}", draw(strategy))
        if draw(st.integers(0, 3)) == 0:
            getattr(m, f"r_{name}").extend(draw(st.lists(strategy, max_size=3)))
    if draw(st.booleans()):
        m.color = draw(st.sampled_from([0, 1, 5, 9]))  # 9: unknown value of an open enum
    m.colors.extend(draw(st.lists(st.sampled_from([0, 1, 5, 3]), max_size=3)))
    if depth < 2 and draw(st.integers(0, 3)) == 0:
        m.child.CopyFrom(draw(all_messages(depth + 1)))
    if depth < 2 and draw(st.integers(0, 4)) == 0:
        m.children.add().CopyFrom(draw(all_messages(depth + 1)))
    if draw(st.booleans()):
        m.when.seconds = draw(st.integers(0, 2**34))
        m.when.nanos = draw(st.integers(0, 999_999_999))
    if draw(st.booleans()):
        m.wrapped.value = draw(SCALARS["TYPE_INT64"])
    choice = draw(st.integers(0, 2))
    if choice == 1:
        m.o_s = draw(st.text(max_size=3))
    elif choice == 2:
        m.o_i = draw(st.integers(-5, 5))
    if draw(st.booleans()):
        m.opt = draw(st.integers(-2, 2))
    for k, v in draw(st.dictionaries(st.text(max_size=3), SCALARS["TYPE_INT64"], max_size=3)).items():
        m.m_si[k] = v
    for k, v in draw(st.dictionaries(st.booleans(), st.sampled_from([0, 1, 5]), max_size=2)).items():
        m.m_bc[k] = v
    if depth < 1:
        for k in draw(st.lists(st.integers(-3, 3), max_size=2)):
            m.m_ia[k].s_int32 = k
    return m


def both(message):
    try:
        want = json_format.MessageToDict(message, preserving_proto_field_name=True)
    except Exception as exc:  # noqa: BLE001
        want = type(exc)
    try:
        got = converter(message.DESCRIPTOR)(message)
    except Exception as exc:  # noqa: BLE001
        got = type(exc)
    return got, want


@settings(max_examples=150, deadline=None)
@given(all_messages())
def test_random_messages_match_message_to_dict(message):
    # through the wire, as the reader sees them
    message = AllMsg.FromString(message.SerializeToString())
    got, want = both(message)
    assert orjson.dumps(got) == orjson.dumps(want)
    assert got == want
    again, _ = both(message)  # the second pass hits the float memo
    assert orjson.dumps(again) == orjson.dumps(want)


@given(
    kind=st.sampled_from([None, 1, 2]),
    n=st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
    f=st.lists(st.floats(width=32), max_size=4),
    big=st.one_of(st.none(), st.integers(0, 2**64 - 1)),
)
def test_proto2_presence_and_closed_enums(kind, n, f, big):
    m = OldMsg()
    if kind is not None:
        m.kind = kind
    if n is not None:
        m.n = n
    if big is not None:
        m.big = big
    m.f.extend(f)
    got, want = both(OldMsg.FromString(m.SerializeToString()))
    assert orjson.dumps(got) == orjson.dumps(want)


def test_negative_zero_and_specials():
    m = AllMsg(
        s_float=-0.0, s_double=-0.0, r_float=[float("nan"), float("inf"), 0.1], r_double=[float("-inf")]
    )
    got, want = both(m)
    assert orjson.dumps(got) == orjson.dumps(want)
    assert got["s_float"] == 0.0 and str(got["s_float"]) == "-0.0"
    assert got["r_float"] == ["NaN", "Infinity", 0.1]


@pytest.mark.parametrize("name", ["py-uncompressed", "sample-muons-lz4", "py-custom-type"])
def test_every_fixture_entry_matches(name):
    from fmtfs.formats.proio import wire

    data = (FIXTURES / f"{name}.proio").read_bytes()
    expected = json.loads((FIXTURES / f"{name}.expected.json").read_text())
    blobs = []
    pos, checked = 0, 0
    while pos < len(data):
        head = read_head(data, pos, len(data))
        if head.end > len(data):
            break
        blobs += head.descriptors
        resolver = Resolver(blobs) if blobs else bundled()
        payload = wire.decompress(head.compression, data[head.payload : head.end])
        for raw in wire.split_events(payload, head.n_events):
            event = wire.Event.FromString(raw)
            types = {t.key: t.value.decode() for t in event.type}
            for e in event.entry:
                t = resolver.lookup(types[e.value.type])
                msg = t.cls.FromString(e.value.payload)
                assert orjson.dumps(t.to_json(msg)) == orjson.dumps(
                    json_format.MessageToDict(msg, preserving_proto_field_name=True)
                )
                checked += 1
        pos = head.end
    assert checked == sum(len(e["entries"]) for e in expected["events"])
