"""Formats declare the schema of their record views (fmtfs.formats.schema):
the JSON lines spell what is declared, the Parquet twins type it (times as
timestamps of the declared precision, bytes as binary), and a view without
a declaration is still inferred from its records."""

from __future__ import annotations

import base64
import importlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fmtfs.formats.schema import Field, Kind, ViewSchema
from fmtfs.formats.wallaby import WallabyFormat
from fmtfs.render import parse_lines
from fmtfs.shape import parse_time
from fmtfs.views import SourceTree
from tests.test_parquet import OPTIONS, SAMPLES, canonical, declared_bytes, tree_of, twin_records

# Time text per declared unit: its width (years 0001-9999) and fraction digits
WIDTH = {"s": 20, "ms": 24, "us": 27, "ns": 30}
# Declared fields each format's sample must show typed (so no format passes
# by having nothing declared)
EXPECTED = {
    "wallaby": {"time", "data"},
    "beats": {"timestamp"},
    "kestrel": {"add_time", "data"},
    "gvfs": {"time", "last_changed"},
    "proio": {"value"},
}


@pytest.fixture(scope="module", params=sorted(SAMPLES))
def sample(request, tmp_path_factory) -> tuple[str, SourceTree]:
    name = request.param
    folder = tmp_path_factory.mktemp(f"src-{name}")
    source = importlib.import_module(f"fmtfs.samples.{name}").generate(folder, SAMPLES[name])
    return name, tree_of(source, tmp_path_factory.mktemp(f"cache-{name}"), name)


def record_views(tree: SourceTree) -> list[str]:
    return [p for p in tree.files if p.endswith(".jsonl") and not p.startswith(("_", "parquet/"))]


def test_every_record_view_is_declared(sample) -> None:
    _, tree = sample
    views = record_views(tree)
    assert views
    missing = [v for v in views if tree.format.view_schema(v) is None]
    assert not missing


def test_json_lines_spell_what_is_declared(sample) -> None:
    """TIME fields are RFC 3339 text no finer than the declared unit (or the
    raw integer of a time beyond the calendar); BYTES fields appear as `K`
    or `K_base64`, never both."""
    _, tree = sample
    checked = 0
    for view in record_views(tree):
        schema = tree.format.view_schema(view)
        for record in parse_lines(tree.read(view, 0, tree.size(view))):
            for f in schema:
                value = record.get(f.name)
                if f.kind is Kind.TIME and value is not None:
                    if isinstance(value, str):
                        assert len(value) <= WIDTH[f.unit], (view, f.name, value)
                        parse_time(value, f.unit, f.name)  # exact in the declared unit
                    else:
                        assert isinstance(value, int), (view, f.name, value)
                    checked += 1
                elif f.kind is Kind.BYTES:
                    assert not (f.name in record and f.name + "_base64" in record), (view, record)
                    for key in (f.name, f.name + "_base64"):
                        assert record.get(key) is None or isinstance(record[key], str)
    assert checked or not any(
        f.kind is Kind.TIME for v in record_views(tree) for f in tree.format.view_schema(v)
    )


def _expected_type(f: Field) -> pa.DataType:
    if f.kind is Kind.TIME:
        # Parquet stores whole seconds as milliseconds; Spark reads no nanoseconds (K + K_ns)
        unit = {"s": "ms", "ns": "us"}.get(f.unit, f.unit)
        return pa.timestamp(unit, tz="UTC")
    if f.kind is Kind.BYTES:
        return pa.binary()
    assert f.kind is Kind.ARROW
    return f.arrow


def test_twins_type_the_declared_fields(sample) -> None:
    name, tree = sample
    seen: set[str] = set()
    for view in record_views(tree):
        schema = tree.format.view_schema(view)
        twin = tree.files[f"parquet/{view[: -len('.jsonl')]}.parquet"]
        columns = pq.read_schema(twin.path())
        for f in schema:
            if f.kind not in (Kind.TIME, Kind.BYTES, Kind.ARROW) or f.name not in columns.names:
                continue
            assert columns.field(f.name).type.equals(_expected_type(f)), (view, f.name)
            if f.kind is Kind.TIME and f.unit == "ns":
                assert columns.field(f.name + "_ns").type == pa.int64()
            if f.kind is Kind.BYTES:
                assert f.name + "_base64" not in columns.names  # merged into the one column
            seen.add(f.name)
    assert EXPECTED[name] <= seen


def test_declared_time_column_holds_the_native_instants(sample) -> None:
    """The timestamp (and K_ns) of the first record equal its time text."""
    name, tree = sample
    for view in record_views(tree):
        schema = tree.format.view_schema(view)
        first = parse_lines(tree.read(view, 0, tree.size(view)))[:1]
        times = [f for f in schema.times() if first and isinstance(first[0].get(f.name), str)]
        if not times:
            continue
        twin = tree.files[f"parquet/{view[: -len('.jsonl')]}.parquet"]
        row = pq.read_table(twin.path()).slice(0, 1).to_pylist()[0]
        for f in times:
            ns = parse_time(first[0][f.name], "ns")
            if f.unit == "ns":
                assert row[f.name + "_ns"] == ns
            got = row[f.name]
            assert int(got.timestamp()) == ns // 1_000_000_000
            assert got.microsecond == ns // 1000 % 1_000_000
        return
    assert name == "proio"  # every other sample has a time to check


class UndeclaredWallaby(WallabyFormat):
    """A format that declares nothing (as an external one may)."""

    def view_schema(self, view_path: str) -> ViewSchema | None:
        return None


def test_an_undeclared_view_is_inferred(tmp_path: Path) -> None:
    from fmtfs.samples.wallaby import generate

    (tmp_path / "src").mkdir()
    source = generate(tmp_path / "src", 200)
    tree = SourceTree(UndeclaredWallaby(source, dict(OPTIONS)), tmp_path / "cache")
    view = "events.log/records.jsonl"
    twin = tree.files["parquet/events.log/records.parquet"].path()
    columns = pq.read_schema(twin)
    # JSON kinds only: nothing is guessed from what a string looks like
    assert columns.field("index").type == pa.int64()
    assert columns.field("time").type == pa.string()
    assert columns.field("data").type == pa.string()
    assert columns.field("data_base64").type == pa.binary()  # the `K_base64` convention
    rows = pq.read_table(twin).to_pylist()
    assert rows[96]["data_base64"] == b"\xde\xad\xbe\xef"  # the sample's non-UTF-8 payload
    want = parse_lines(tree.read(view, 0, tree.size(view)))
    got = twin_records(twin, declared_bytes(None))
    assert [canonical(r) for r in got] == [canonical(r) for r in want]
    assert base64.b64decode(want[96]["data_base64"]) == b"\xde\xad\xbe\xef"


def test_a_declaration_is_checked() -> None:
    with pytest.raises(ValueError, match="unit"):
        Field("t", Kind.TIME)
    with pytest.raises(ValueError, match="Arrow type"):
        Field("v", Kind.ARROW)
    with pytest.raises(ValueError, match="twice"):
        ViewSchema(Field("a", Kind.INT), Field("a", Kind.STRING))


def test_a_streams_time_field_is_a_declared_time_of_its_views(sample) -> None:
    """The time that chunk ranges (time filters, buckets) describe is the
    one the view schema declares, with the same unit."""
    name, tree = sample
    checked = 0
    for entry in tree.entries:
        time_field = getattr(entry.stream, "time_field", None)
        if time_field is None:
            continue
        column, unit = time_field
        for view in entry.stream.view_paths():
            declared = tree.format.view_schema(view).field(column)
            assert declared is not None and declared.kind is Kind.TIME and declared.unit == unit, view
            checked += 1
    assert checked or name == "proio"  # proio events carry no time
