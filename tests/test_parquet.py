"""Parquet twins: typed columns that hold exactly the records of the views,
row groups for parallel reads, one file per state of the source.

The main check is a round trip: every twin, read back with pyarrow and
turned into JSON shape again (timestamps -> RFC 3339 with the unit the
column says, binary -> data / data_base64), equals its `.jsonl` view."""

from __future__ import annotations

import base64
import importlib
import re
import struct
import threading
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fmtfs import parquet
from fmtfs.formats import open_source
from fmtfs.formats.schema import Field, Kind, ViewSchema
from fmtfs.render import parse_lines
from fmtfs.shape import format_time, parse_time, put_data
from fmtfs.twins import ParquetFile
from fmtfs.views import SourceTree

SAMPLES = {"wallaby": 3000, "kestrel": 1500, "gvfs": 1500, "proio": 300, "beats": 1500}
FORMATS = [f for f in SAMPLES if importlib.util.find_spec(f"fmtfs.samples.{f}") is not None]
OPTIONS = {"key": None, "time_bucket": "hour", "descriptor_set": None, "kestrel_journal_size": 16 << 20}


def tree_of(source: Path, cache: Path, fmt: str | None = None) -> SourceTree:
    return SourceTree(open_source(source, fmt, dict(OPTIONS)), cache)


# -- typed rows back to JSON shape -------------------------------------------


def _int_times(t: pa.DataType) -> pa.DataType:
    """`t` with every timestamp as int64, so values keep their exact unit."""
    if pa.types.is_timestamp(t):
        return pa.int64()
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _int_times(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(_int_times(t.value_type))
    return t


def back_to_json(value, t: pa.DataType, bytes_keys):
    """A typed value (times as ints) -> the JSON shape of the view."""
    if value is None:
        return None
    if pa.types.is_timestamp(t):
        return format_time(value, t.unit)
    if pa.types.is_list(t):
        return [back_to_json(v, t.value_type, bytes_keys) for v in value]
    if not pa.types.is_struct(t):
        return value
    out: dict = {}
    for f in t:
        v = value.get(f.name)
        if f.name.endswith("_ns") and f.name[:-3] in value and pa.types.is_int64(f.type):
            continue  # folded into its timestamp below
        if pa.types.is_timestamp(f.type) and f.name + "_ns" in value:
            out[f.name] = None if value[f.name + "_ns"] is None else format_time(value[f.name + "_ns"], "ns")
        elif pa.types.is_binary(f.type) and f.name.endswith("_base64"):
            out[f.name] = None if v is None else base64.b64encode(v).decode()
        elif (
            pa.types.is_list(f.type) and pa.types.is_binary(f.type.value_type) and f.name.endswith("_base64")
        ):
            out[f.name] = None if v is None else [base64.b64encode(x).decode() for x in v]
        elif pa.types.is_binary(f.type) and f.name in bytes_keys:
            if v is not None:
                put_data(out, v, f.name)
        else:
            out[f.name] = back_to_json(v, f.type, bytes_keys)
    return out


def declared_bytes(schema: ViewSchema | None) -> set[str]:
    """The BYTES fields a declaration names (at any depth): their binary
    columns go back to `K` / `K_base64`."""
    out: set[str] = set()
    stack = list(schema or ())
    while stack:
        f = stack.pop()
        if f.kind is Kind.BYTES:
            out.add(f.name)
        stack.extend(f.children)
    return out


def twin_records(path: Path, bytes_keys: set[str] = frozenset()) -> list[dict]:
    table = pq.read_table(path)
    type_ = pa.struct(list(table.schema))  # the typed schema tells units and kinds
    table = table.cast(pa.schema([pa.field(f.name, _int_times(f.type)) for f in table.schema]))
    return [back_to_json(row, type_, bytes_keys) for row in table.to_pylist()]


TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{3}|\.\d{6}|\.\d{9})?Z$")


def canonical(value):
    """Nulls and empty objects dropped; times compared as instants (Parquet
    has no seconds unit: a seconds column comes back in milliseconds)."""
    if isinstance(value, str) and TIME.match(value):
        return parse_time(value, "ns")
    if isinstance(value, dict):
        out = {k: canonical(v) for k, v in sorted(value.items()) if v is not None}
        return {k: v for k, v in out.items() if v != {}}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def shaped(value, t: pa.DataType, proto: bool = False):
    """A JSON value as the twin holds it: in a string column, a value of
    another kind is its JSON text (conflicting kinds in one field)."""
    if value is None:
        return None
    if pa.types.is_string(t):
        return value if isinstance(value, str) else orjson.dumps(value).decode()
    # descriptor-typed columns (proio): protobuf's JSON spells 64-bit integers
    # as strings and bytes as base64; float fields hold float32 values
    if proto and pa.types.is_integer(t) and isinstance(value, str):
        return int(value)
    if proto and pa.types.is_binary(t) and isinstance(value, str):
        return base64.b64decode(value)
    if proto and pa.types.is_float32(t) and isinstance(value, int | float):
        return struct.unpack("<f", struct.pack("<f", value))[0]
    if pa.types.is_struct(t) and isinstance(value, dict):
        names = {f.name for f in t}
        return {k: shaped(v, t.field(k).type, proto) if k in names else v for k, v in value.items()}
    if pa.types.is_list(t) and isinstance(value, list):
        return [shaped(v, t.value_type, proto) for v in value]
    return value


def same_records(got: list[dict], want: list[dict], schema: pa.Schema, proto: bool = False) -> None:
    assert len(got) == len(want)
    type_ = pa.struct(list(schema))
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert canonical(a) == canonical(shaped(b, type_, proto)), i


# -- every format's sample ------------------------------------------------------


@pytest.mark.parametrize("name", FORMATS)
def test_twins_hold_exactly_the_view_records(tmp_path: Path, name: str) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    source = importlib.import_module(f"fmtfs.samples.{name}").generate(folder, SAMPLES[name])
    tree = tree_of(source, tmp_path / "cache", name)
    views = [p for p in tree.files if p.endswith(".jsonl") and not p.startswith("_")]
    assert views
    for view in views:
        twin_path = f"parquet/{view[: -len('.jsonl')]}.parquet"
        twin = tree.files[twin_path]
        assert isinstance(twin, ParquetFile)
        data = tree.read(twin_path, 0, twin.size())
        assert len(data) == twin.size() == twin.path().stat().st_size  # exact size
        assert data[:4] == b"PAR1" and data[-4:] == b"PAR1"
        want = parse_lines(tree.read(view, 0, tree.size(view)))
        declared = tree.format.view_schema(view)
        got = twin_records(twin.path(), declared_bytes(declared))
        typed_by_descriptor = name == "proio" and "/types/" in view
        if typed_by_descriptor:
            assert declared is not None
            value = pq.read_schema(twin.path()).field("value").type
            assert value.equals(declared.field("value").arrow)
        same_records(got, want, pq.read_schema(twin.path()), typed_by_descriptor)


def test_wallaby_columns_are_typed(tmp_path: Path) -> None:
    from fmtfs.samples.wallaby import generate

    tree = tree_of(generate(tmp_path, 3000), tmp_path / "cache")
    twin = tree.files["parquet/events.log/records.parquet"]
    schema = pq.read_schema(twin.path())
    assert schema.field("index").type == pa.int64()
    assert schema.field("time").type == pa.timestamp("us", tz="UTC")
    assert schema.field("time_ns").type == pa.int64()
    assert schema.field("data").type == pa.binary()
    assert "data_base64" not in schema.names  # merged into the binary column
    rows = pq.read_table(twin.path()).to_pylist()
    assert rows[96]["data"] == b"\xde\xad\xbe\xef"  # the sample's non-UTF-8 payload
    assert rows[0]["data"] == b'{"event":"click","n":0}'
    # the row groups let Spark split the file
    meta = pq.ParquetFile(twin.path()).metadata
    assert meta.num_row_groups >= 2
    assert sum(meta.row_group(i).num_rows for i in range(meta.num_row_groups)) == 3000


def test_one_file_per_state_and_never_stale(tmp_path: Path) -> None:
    from fmtfs.formats.wallaby import WallabyWriter
    from fmtfs.samples.wallaby import generate

    (tmp_path / "src").mkdir()
    source = generate(tmp_path / "src", 2000)
    cache = tmp_path / "cache"
    first = tree_of(source, cache).files["parquet/events.log/records.parquet"]
    path = first.path()
    stamp = path.stat().st_mtime_ns
    # a second mount of the unchanged source reuses the file as it is
    again = tree_of(source, cache).files["parquet/events.log/records.parquet"]
    assert again.path() == path and path.stat().st_mtime_ns == stamp
    # the source grows: a new file with the new records, the old one gone
    WallabyWriter(source / "events.log").write([{"time": 1_500_000_000_000_000_000, "data": "late"}])
    tree = tree_of(source, cache)
    grown = tree.files["parquet/events.log/records.parquet"]
    assert grown.path() != path
    assert not path.exists()
    rows = pq.read_table(grown.path()).to_pylist()
    assert len(rows) == 2001 and rows[-1]["data"] == b"late"
    # and the same tree, refreshed after another append, never serves the old twin
    WallabyWriter(source / "events.log").write([{"time": 1_500_000_000_000_000_001, "data": "later"}])
    tree.refresh(force=True)
    latest = tree.files["parquet/events.log/records.parquet"]
    assert pq.read_table(latest.path()).num_rows == 2002


def test_concurrent_readers_build_once(tmp_path: Path, monkeypatch) -> None:
    from fmtfs.samples.wallaby import generate

    (tmp_path / "src").mkdir()
    tree = tree_of(generate(tmp_path / "src", 500), tmp_path / "cache")
    builds = []
    real = parquet.write_twin

    def counting(*args, **kwargs):
        builds.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(parquet, "write_twin", counting)
    twin = tree.files["parquet/events.log/records.parquet"]
    sizes = []
    threads = [threading.Thread(target=lambda: sizes.append(twin.size())) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and len(set(sizes)) == 1


# -- the typing rules ----------------------------------------------------------


def test_declared_times_by_precision() -> None:
    schema = ViewSchema(Field.time("s", "s"), Field.time("ms", "ms"), Field.time("ns", "ns"))
    table = parquet.records_table(
        [
            [
                {
                    "s": "2020-01-02T03:04:05Z",
                    "ms": "2020-01-02T03:04:05.123Z",
                    "ns": "2020-01-02T03:04:05.123456789Z",
                },
                {"s": "2020-01-02T03:04:06Z", "ms": None, "ns": "2020-01-02T03:04:05.000000001Z"},
            ]
        ],
        schema,
    )
    assert table.schema.field("s").type == pa.timestamp("s", tz="UTC")
    assert table.schema.field("ms").type == pa.timestamp("ms", tz="UTC")
    assert table.schema.field("ns").type == pa.timestamp("us", tz="UTC")
    assert table.schema.names == ["s", "ms", "ns", "ns_ns"]
    assert table.column("ns_ns").to_pylist() == [1577934245123456789, 1577934245000000001]


def test_times_only_where_declared() -> None:
    records = [
        {"a": "2020-01-02T03:04:05Z", "b": "2020-01-02T03:04:05Z", "c": "2020-01-02T03:04:05Z"},
        {"a": "2020-01-02T03:04:05.1Z", "b": "soon", "c": 253402300800},
    ]
    schema = ViewSchema(Field.time("a", "ms"), Field.time("b", "s"), Field.time("c", "s"))
    table = parquet.records_table([records[:1], records[1:]], schema)
    # text of a coarser precision is still the declared unit's instant
    assert table.schema.field("a").type == pa.timestamp("ms", tz="UTC")
    assert table.column("a").cast(pa.int64()).to_pylist() == [1577934245000, 1577934245100]
    # a declared time holding something else keeps what the view shows
    assert table.schema.field("b").type == pa.string()
    assert table.column("c").to_pylist() == ["2020-01-02T03:04:05Z", "253402300800"]
    # nothing is guessed from what a string looks like
    undeclared = parquet.records_table([records[:1]])
    assert undeclared.schema.field("a").type == pa.string()


def test_bytes_merge_and_text_fallbacks() -> None:
    records = [
        {"data": "héllo", "path": "/a", "x": {"payload_base64": "AAE="}, "raw": "r"},
        {"data_base64": base64.b64encode(b"\xff\x00").decode(), "path_base64": "/w==", "x": {}},
    ]
    schema = ViewSchema(
        Field("data", Kind.BYTES), Field("path", Kind.TEXT), Field.nested("x", Field("payload", Kind.BYTES))
    )
    table = parquet.records_table([records[:1], records[1:]], schema)
    assert table.schema.field("data").type == pa.binary()
    assert table.column("data").to_pylist() == ["héllo".encode(), b"\xff\x00"]
    assert table.schema.field("path").type == pa.string()  # text with a bytes fallback
    assert table.column("path_base64").to_pylist() == [None, b"\xff"]
    assert table.column("x").to_pylist() == [{"payload": b"\x00\x01"}, {"payload": None}]
    assert "data_base64" not in table.schema.names
    assert table.schema.field("raw").type == pa.string()  # undeclared: as the JSON says
    # undeclared, `data` is a string like any other and `data_base64` its bytes
    plain = parquet.records_table([records])
    assert plain.schema.field("data").type == pa.string()
    assert plain.column("data_base64").to_pylist() == [None, b"\xff\x00"]
    assert plain.column("x").to_pylist() == [{"payload_base64": b"\x00\x01"}, {"payload_base64": None}]


def test_conflicts_nulls_and_empty_objects() -> None:
    table = parquet.records_table(
        [
            [{"v": 1, "n": None, "e": {}, "l": []}],
            [{"v": "x", "n": None, "e": {}, "l": [1.5]}],
            [{"v": {"k": [1]}}],
        ]
    )
    assert table.schema.field("v").type == pa.string()
    assert table.column("v").to_pylist() == ["1", "x", '{"k":[1]}']  # JSON text, as Spark's JSON reader
    assert table.schema.field("n").type == pa.string()
    assert "e" not in table.schema.names
    assert table.schema.field("l").type == pa.list_(pa.float64())


def test_declared_scalars_and_arrow_types() -> None:
    schema = ViewSchema(
        Field("n", Kind.INT),
        Field("odd", Kind.INT),
        Field.typed("id", pa.int64()),
        Field.typed("when", pa.timestamp("ms", tz="UTC")),
        Field("absent", Kind.INT),
        Field("ratio", Kind.FLOAT),
        Field("flag", Kind.BOOL),
    )
    records = [
        {"n": None, "odd": "x", "id": "7", "when": "2020-01-01T00:00:00.500Z", "ratio": 2, "flag": None}
    ]
    table = parquet.records_table([records], schema)
    assert table.schema.field("n").type == pa.int64()  # always null, still the declared type
    assert table.schema.field("odd").type == pa.string()  # not an integer: kept as the view shows
    assert table.to_pylist()[0]["id"] == 7
    assert table.schema.field("when").type == pa.timestamp("ms", tz="UTC")
    assert "absent" not in table.schema.names  # a declared key no record has is no column
    assert table.schema.field("ratio").type == pa.float64() and table.to_pylist()[0]["ratio"] == 2.0
    assert table.schema.field("flag").type == pa.bool_()


def test_empty_view(tmp_path: Path) -> None:
    parquet.write_parquet([], None, tmp_path / "e.parquet")
    assert pq.read_table(tmp_path / "e.parquet").num_rows == 0


# -- any records of consistent kinds survive the round trip ----------------------

KINDS = {
    "int": st.integers(-(1 << 63), (1 << 63) - 1),
    "str": st.text(st.characters(blacklist_categories=("Cs",)), max_size=8),
    "bool": st.booleans(),
    "time": st.integers(0, 4_000_000_000_000).map(lambda ms: format_time(ms, "ms")),
    "bytes": st.binary(max_size=6),
}


@st.composite
def batches(draw):
    kinds = draw(
        st.dictionaries(
            st.sampled_from(["a", "b", "c", "data", "t"]), st.sampled_from(sorted(KINDS)), min_size=1
        )
    )
    nested = draw(st.booleans())
    rows = []
    for _ in range(draw(st.integers(1, 30))):
        record: dict = {}
        for key, kind in kinds.items():
            if draw(st.integers(0, 4)) == 0:
                continue  # missing key
            value = draw(KINDS[kind])
            if kind == "bytes":  # `data`: opaque bytes; other keys: text with a base64 fallback
                put_data(record, value, key)
            else:
                record[key if key != "data" else "d"] = value
        rows.append({"inner": record} if nested else record)
    cut = draw(st.integers(0, len(rows)))
    # declared or not, the twin holds the same records
    fields = [Field.time(k, "ms") for k, kind in kinds.items() if kind == "time"]
    fields += [Field(k, Kind.BYTES) for k, kind in kinds.items() if kind == "bytes" and k == "data"]
    schema = draw(st.sampled_from([None, ViewSchema(*fields)]))
    if schema is not None and nested:
        schema = ViewSchema(Field.nested("inner", *fields))
    return [rows[:cut], rows[cut:]], schema


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_round_trip_of_generated_records(tmp_path_factory, drawn) -> None:
    parts, schema = drawn
    # rows without any column cannot be stored in Parquet (documented)
    assume(any(canonical(r) for part in parts for r in part))
    target = tmp_path_factory.mktemp("rt") / "t.parquet"
    parquet.write_parquet(parts, schema, target)
    want = [r for part in parts for r in part]
    got = twin_records(target, declared_bytes(schema))
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert canonical(a) == canonical(orjson.loads(orjson.dumps(b)))


# -- declared types from protobuf descriptors (proio) ---------------------------


def _test_message():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto(name="fmtfs_test.proto", package="t", syntax="proto3")
    enum = fdp.enum_type.add(name="Kind")
    enum.value.add(name="ZERO", number=0)
    enum.value.add(name="ONE", number=1)
    msg = fdp.message_type.add(name="M")
    F = descriptor_pb2.FieldDescriptorProto
    entry = msg.nested_type.add(name="TagsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    msg.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    msg.field.add(name="blob", number=2, type=F.TYPE_BYTES, label=F.LABEL_OPTIONAL)
    msg.field.add(
        name="tags", number=3, type=F.TYPE_MESSAGE, type_name=".t.M.TagsEntry", label=F.LABEL_REPEATED
    )
    msg.field.add(name="kind", number=4, type=F.TYPE_ENUM, type_name=".t.Kind", label=F.LABEL_OPTIONAL)
    msg.field.add(name="ids", number=5, type=F.TYPE_UINT64, label=F.LABEL_REPEATED)
    msg.field.add(name="child", number=6, type=F.TYPE_MESSAGE, type_name=".t.M", label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    desc = pool.FindMessageTypeByName("t.M")
    return desc, message_factory.GetMessageClass(desc)


def test_protobuf_descriptor_gives_the_types() -> None:
    from google.protobuf import json_format

    from fmtfs.formats.proio.columns import message_arrow_type, type_view_schema

    desc, cls = _test_message()
    message = cls(id=-(1 << 62), blob=b"\x00\xff", kind=1, ids=[1 << 63, 2])
    message.tags["a"] = 7
    message.child.id = 5
    value = json_format.MessageToDict(message, preserving_proto_field_name=True)
    assert value["id"] == str(-(1 << 62))  # the JSON mapping spells int64 as a string
    records = [
        {"event": 0, "entry": 1, "tags": ["T"], "value": value},
        {"event": 1, "entry": 2, "tags": [], "value": {}},
    ]
    table = parquet.records_table([records], type_view_schema(desc))
    assert table.schema == pa.schema(
        [
            ("event", pa.int64()),
            ("entry", pa.int64()),
            ("tags", pa.list_(pa.string())),
            ("value", message_arrow_type(desc)),
        ]
    )
    got = table.column("value").to_pylist()[0]
    assert got["id"] == -(1 << 62) and got["blob"] == b"\x00\xff" and got["kind"] == "ONE"
    assert got["ids"] == [1 << 63, 2] and got["tags"] == [("a", 7)]
    assert got["child"] == '{"id":"5"}'  # a recursive message keeps its JSON text
    assert table.column("value").to_pylist()[1]["id"] is None


@pytest.mark.skipif("proio" not in FORMATS, reason="no proio sample")
def test_proio_types_view_with_declared_schema(tmp_path: Path) -> None:
    from fmtfs.formats.proio.columns import type_view_schema
    from fmtfs.formats.proio.schema import bundled
    from fmtfs.samples.proio import generate

    (tmp_path / "src").mkdir()
    tree = tree_of(generate(tmp_path / "src", 50), tmp_path / "cache", "proio")
    view = next(p for p in tree.files if "/types/" in p and p.endswith("Particle.jsonl"))
    records = parse_lines(tree.read(view, 0, tree.size(view)))
    desc = bundled().lookup("proio.model.eic.Particle").cls.DESCRIPTOR
    table = parquet.records_table([records], type_view_schema(desc))
    values = table.column("value").to_pylist()
    assert table.schema.field("value").type.field("pdg").type == pa.int32()
    for row, record in zip(values, records, strict=True):
        assert row["pdg"] == record["value"].get("pdg")
        for key in ("child", "parent"):
            want = record["value"].get(key)
            assert row[key] == (None if want is None else [int(v) for v in want])


@pytest.mark.parametrize("per_partition", [1, 2, 100])
def test_data_source_partitions_of_a_sliced_view_hold_its_records(tmp_path: Path, per_partition: int) -> None:
    """beats pending.jsonl is made of slices of segment views: the data
    source plans it from the chunk index and skips the ACKed frames."""
    from fmtfs.samples.beats import generate
    from fmtfs.spark import open_tree, partition_records, plan_partitions

    source = generate(tmp_path / "queue", 9000)  # the state ACKs the first 1000 frames
    opts = {"path": str(source), "cachedir": str(tmp_path / "cache")}
    tree = open_tree(opts)
    want = parse_lines(tree.read("pending.jsonl", 0, tree.size("pending.jsonl")))
    parts = plan_partitions(tree, ["pending.jsonl"], {"chunksperpartition": str(per_partition)})
    # one chunk per partition splits it; 100 may pack every slice into one
    assert len(parts) > 1 if per_partition == 1 else len(parts) >= 1
    got = [r for p in parts for batch in partition_records(opts, p) for r in batch]
    assert len(got) == len(want) == 8000 and got == want
