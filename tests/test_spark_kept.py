"""Kept Arrow batches (fmtfs.spark.kept): found only for the same native
bytes, view, schema and options; bounded by keptBytes, oldest-used first.
No Spark session: the batches are built as a task builds them."""

from __future__ import annotations

import importlib
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from fmtfs.spark import open_tree, view_files
from fmtfs.spark.kept import KeptBatches, kept_dir, trim
from fmtfs.spark.plan import plan_partitions
from fmtfs.spark.source import current_streams, format_for
from tests.conftest import FIXTURES

VIEW = "events.log/records.jsonl"


@pytest.fixture()
def wallaby(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "src").mkdir()
    source = importlib.import_module("fmtfs.samples.wallaby").generate(tmp_path / "src", 3000)
    return {"path": str(source), "format": "wallaby", "view": VIEW, "cachedir": str(tmp_path / "cache")}


def _chunks(opts: dict[str, str]) -> list:
    tree = open_tree(opts)
    return [c for p in plan_partitions(tree, view_files(tree, VIEW), opts) for c in p.chunks]


SCHEMA = pa.schema([pa.field("n", pa.int64())])


def _batch(n: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array([n, n + 1])], schema=SCHEMA)


def test_a_kept_batch_is_found_for_the_same_chunk_and_bytes_only(wallaby) -> None:
    chunk = _chunks(wallaby)[0]
    stream = current_streams(wallaby)[chunk.stream]
    kept = KeptBatches(wallaby, format_for(wallaby), SCHEMA, None)
    key = kept.key(stream, chunk)
    assert kept.load(key) is None
    kept.store(key, _batch(7))
    assert kept.load(key).equals(_batch(7))
    assert kept.key(stream, chunk) == key
    # another cut of the chunk, another schema, another typing plan: other batches
    assert kept.key(stream, chunk.part(1)) != key
    other = pa.schema([pa.field("n", pa.float64())])
    assert KeptBatches(wallaby, format_for(wallaby), other, None).key(stream, chunk) != key
    assert KeptBatches(wallaby, format_for(wallaby), SCHEMA, "plan").key(stream, chunk) != key
    # one native byte of the chunk changed in place: its batch is not used
    with open(stream.path, "r+b") as native:
        native.seek((chunk.start + chunk.end) // 2)
        byte = native.read(1)
        native.seek(-1, os.SEEK_CUR)
        native.write(bytes([byte[0] ^ 0xFF]))
    assert kept.key(stream, chunk) not in (key, None)
    assert kept.load(kept.key(stream, chunk)) is None


def test_nothing_is_kept_with_kept_bytes_zero(wallaby) -> None:
    opts = wallaby | {"keptbytes": "0"}
    chunk = _chunks(opts)[0]
    kept = KeptBatches(opts, format_for(opts), SCHEMA, None)
    key = kept.key(current_streams(opts)[chunk.stream], chunk)
    kept.store(key, _batch(1))
    assert key is None and kept.load(key) is None and not kept_dir(opts).exists()


def test_trim_drops_the_least_recently_used_batches_first(wallaby) -> None:
    chunk = _chunks(wallaby)[0]
    stream = current_streams(wallaby)[chunk.stream]
    kept = KeptBatches(wallaby, format_for(wallaby), SCHEMA, None)
    keys = [kept.key(stream, chunk.part(i)) for i in range(3)]  # three cuts: three batches
    for i, key in enumerate(keys):
        kept.store(key, _batch(i))
    files = {key: next(kept_dir(wallaby).rglob(f"{key}.arrow")) for key in keys}
    for age, key in enumerate(keys):  # keys[0] the newest
        os.utime(files[key], (1000 - age, 1000 - age))
    kept.load(keys[2])  # used now: the newest
    size = files[keys[0]].stat().st_size
    trim(wallaby | {"keptbytes": str(2 * size + size // 2)})
    assert [files[k].exists() for k in keys] == [True, False, True]
    trim(wallaby | {"keptbytes": "0"})
    assert not any(f.exists() for f in files.values())


def test_an_unreadable_kept_batch_is_decoded_again(wallaby) -> None:
    chunk = _chunks(wallaby)[0]
    kept = KeptBatches(wallaby, format_for(wallaby), SCHEMA, None)
    key = kept.key(current_streams(wallaby)[chunk.stream], chunk)
    kept.store(key, _batch(3))
    path = next(kept_dir(wallaby).rglob(f"{key}.arrow"))
    path.write_bytes(path.read_bytes()[:20])  # cut short (a full disk, a crash)
    assert kept.load(key) is None


def test_a_bad_kept_bytes_option_is_a_clear_error(wallaby) -> None:
    with pytest.raises(ValueError, match="keptBytes must be a number of bytes"):
        trim(wallaby | {"keptbytes": "lots"})


def _source(kind: str, fmt: str, into: Path) -> Path:
    """A small generated sample, the format's fixtures, or a damaged sample
    (one byte flipped in the middle of every native file)."""
    from fmtfs.samples import beats, gvfs, kestrel, proio, wallaby
    from tests.test_split_scan import _flip, copy_of, fixture_source

    if kind == "fixtures":
        if fmt == "gvfs":
            return copy_of(FIXTURES / "gvfs" / "05-many-journal", into)
        return fixture_source(fmt, into)
    into.mkdir()
    module = {"beats": beats, "wallaby": wallaby, "kestrel": kestrel, "proio": proio, "gvfs": gvfs}[fmt]
    made = module.generate(into, 3000)
    source = made if made.is_dir() else made.parent
    if kind == "damaged":
        for path in sorted(p for p in source.rglob("*") if p.is_file() and p.stat().st_size > 4096):
            _flip(path, 0.5)
    return source


CASES = [
    (kind, fmt) for kind in ("sample", "damaged") for fmt in ("beats", "wallaby", "kestrel", "proio", "gvfs")
]
CASES += [("fixtures", fmt) for fmt in ("beats", "kestrel", "proio", "gvfs")]


@pytest.mark.parametrize(("kind", "fmt"), CASES)
def test_a_kept_batch_loads_exactly_the_decoded_batch(tmp_path: Path, kind: str, fmt: str) -> None:
    """For every chunk of every record view, JSON and typed columns alike
    (non-UTF-8 payloads, big integers, nulls, nested structs, times): the
    batch loaded back is the batch the task built, schema and values."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from fmtfs.spark.listing import is_chunked
    from fmtfs.spark.schema import infer, spark_schema, to_batch

    opts = {"path": str(_source(kind, fmt, tmp_path / "src")), "format": fmt, "cachedir": str(tmp_path / "c")}
    tree = open_tree(opts)
    streams = current_streams(opts)
    checked = 0
    for view, file in tree.files.items():
        if not (view.endswith(".jsonl") and is_chunked(file)):
            continue
        inferred = infer(tree, [view], opts | {"view": view, "inferchunks": "all"})
        for types in ("json", "parquet"):
            expected = to_arrow_schema(spark_schema(inferred, types), timezone="UTC")
            typing = inferred if types == "parquet" else None
            kept = KeptBatches(opts, format_for(opts), expected, typing)
            for chunk in file.chunks():
                stream = streams[chunk.stream]
                records = chunk.records(stream)
                if not records or not expected.names:
                    continue
                batch = to_batch(records, expected, typing)
                key = kept.key(stream, chunk)
                kept.store(key, batch)
                loaded = kept.load(key)
                assert loaded.schema.equals(batch.schema, check_metadata=True), (view, types)
                assert loaded.equals(batch), (view, types)
                checked += 1
    assert checked >= 2


def _settled(source: Path) -> None:
    """Every native file last written an hour ago: the index keeps the
    rendered lines of every chunk, a file's last one included."""
    hour_ago = time.time() - 3600
    for path in source.rglob("*"):
        os.utime(path, (hour_ago, hour_ago))


@pytest.mark.parametrize(("kind", "fmt"), CASES)
def test_a_chunk_parsed_from_its_kept_lines_is_its_decoded_batch(tmp_path: Path, kind: str, fmt: str) -> None:
    """fmtfs.spark.pieces: for every chunk of every record view whose lines
    the index kept, the batch parsed from them equals the batch decoded
    from the native records, schema and values, whole and cut (skip/take),
    pyarrow's reader refusing a value (gvfs `value`: strings and lists in
    one column of JSON text) or not; where a chunk cannot be parsed, the
    task decodes it."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from fmtfs.formats.base import Chunk
    from fmtfs.spark.listing import is_chunked
    from fmtfs.spark.pieces import RenderedPieces
    from fmtfs.spark.schema import infer, spark_schema, to_batch

    source = _source(kind, fmt, tmp_path / "src")
    _settled(source)
    opts = {"path": str(source), "format": fmt, "cachedir": str(tmp_path / "c")}
    tree = open_tree(opts)
    streams = current_streams(opts)
    parsed = refused = by_line = 0
    for view, file in tree.files.items():
        if not (view.endswith(".jsonl") and is_chunked(file)):
            continue
        inferred = infer(tree, [view], opts | {"view": view})
        expected = to_arrow_schema(spark_schema(inferred, "json"), timezone="UTC")
        if not expected.names:
            continue
        for partition in plan_partitions(tree, [view], opts | {"partitionbytes": "1"}):
            (chunk,) = partition.chunks
            pieces = RenderedPieces.open(partition.store, partition.pieces)
            assert pieces is not None, view  # every chunk's lines kept
            native = Chunk(chunk.start, chunk.end, chunk.state, {})
            whole = streams[chunk.stream].records_of(native, chunk.view)  # uncut
            refuses = _reader_refuses(pieces.store.get(partition.pieces[0]), expected)
            for cut in (chunk, chunk.part(1), chunk.part(1, 3)):
                batch = pieces.batch(0, cut, expected)
                wanted = cut.cut(whole)
                if batch is None:
                    refused += 1  # another kind than its column: decoded instead
                    continue
                assert batch.schema.equals(to_batch(wanted, expected, None).schema), view
                assert batch.equals(to_batch(wanted, expected, None)), (view, cut.skip, cut.take)
                parsed += 1
                by_line += refuses
            pieces.close()
    assert parsed >= 2
    if fmt == "gvfs" and kind != "damaged":  # strings and lists in `value`: parsed line by line
        assert by_line >= 1


def _reader_refuses(data: bytes, schema: pa.Schema) -> bool:
    """Whether pyarrow's JSON reader alone refuses these lines as `schema`."""
    import pyarrow.json as pj

    try:
        pj.read_json(
            pa.py_buffer(data),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
    except pa.ArrowInvalid:
        return True
    return False


def _wiped(source: Path) -> None:
    """Every native file's bytes zeroed behind the index's back (same size
    and times): what is read from now on comes from what the index kept."""
    for path in (p for p in source.rglob("*") if p.is_file()):
        info = path.stat()
        path.write_bytes(bytes(info.st_size))
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


@pytest.mark.parametrize(("kind", "fmt"), CASES)
def test_the_schema_sample_is_parsed_from_the_kept_lines(tmp_path: Path, kind: str, fmt: str) -> None:
    """Inference reads a sampled chunk from the lines the index kept of it
    (fmtfs.spark.schema.sample_arrays): the same arrays as decoding the
    chunks, in order, in process and in forked workers, even once the
    native bytes are gone (so nothing was decoded)."""
    from fmtfs import parquet
    from fmtfs.spark.listing import is_chunked
    from fmtfs.spark.schema import sample_arrays, sampled

    source = _source(kind, fmt, tmp_path / "src")
    _settled(source)
    opts = {"path": str(source), "format": fmt, "cachedir": str(tmp_path / "c")}
    tree = open_tree(opts)
    views = [v for v, f in tree.files.items() if v.endswith(".jsonl") and is_chunked(f)]
    samples = {view: sampled(tree, [view], 0)[0] for view in views}
    decoded = {
        view: [parquet.records_to_array(r) for r in (f.chunk_records(c) for f, c in sample) if r]
        for view, sample in samples.items()
    }
    _wiped(source)
    checked = 0
    for view, sample in samples.items():
        for workers in (1, 2):
            arrays = list(sample_arrays(opts | {"view": view}, sample, workers))
            assert len(arrays) == len(decoded[view]), (view, workers)
            assert all(a.equals(b) for a, b in zip(arrays, decoded[view], strict=True)), (view, workers)
            checked += len(arrays)
    assert checked >= 2


@pytest.mark.parametrize(("kind", "fmt"), CASES)
def test_the_json_columns_typed_from_kept_lines_are_those_of_the_records(
    tmp_path: Path, kind: str, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """infer(typed=False), the schema of types=json, types each sampled
    chunk from its kept lines with pyarrow's JSON reader
    (fmtfs.spark.schema.json_type): the same JSON type as the records
    give (infer's typed path), for every record view, whole and as a
    folder, and the reader typed some chunks itself."""
    from fmtfs.spark import schema
    from fmtfs.spark.listing import is_chunked

    source = _source(kind, fmt, tmp_path / "src")
    _settled(source)
    opts = {"path": str(source), "format": fmt, "cachedir": str(tmp_path / "c"), "inferchunks": "all"}
    tree = open_tree(opts)
    views = [v for v, f in tree.files.items() if v.endswith(".jsonl") and is_chunked(f)]
    typed_by_reader = 0
    original = schema.lines_type

    def counted(data: bytes, count: int | None = None):
        nonlocal typed_by_reader
        found = original(data, count)
        typed_by_reader += found is not None
        return found

    monkeypatch.setattr(schema, "lines_type", counted)  # the real function, counted
    for group in [[v] for v in views] + [view_files(tree, views[0].rpartition("/")[0])]:
        quick = schema.infer(tree, group, opts | {"view": group[0]}, typed=False)
        records = schema.infer(tree, group, opts | {"view": group[0]}, typed=True)
        assert quick.plan is None
        assert quick.json_type.equals(records.json_type), group
    # the gvfs fixture's journals mix kinds in `value` in every chunk
    assert typed_by_reader >= 1 or (kind, fmt) == ("fixtures", "gvfs")


@pytest.mark.parametrize(("kind", "fmt"), [("sample", "proio"), ("damaged", "beats"), ("sample", "wallaby")])
def test_a_sample_typed_in_threads_is_typed_as_in_one(
    tmp_path: Path, kind: str, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """json_type types a sample of some megabytes in a thread per core:
    the same type as typing it chunk after chunk."""
    from fmtfs.spark import schema
    from fmtfs.spark.listing import is_chunked

    source = _source(kind, fmt, tmp_path / "src")
    _settled(source)
    opts = {"path": str(source), "format": fmt, "cachedir": str(tmp_path / "c")}
    tree = open_tree(opts)
    views = [v for v, f in tree.files.items() if v.endswith(".jsonl") and is_chunked(f)]
    monkeypatch.setattr(schema, "PARALLEL_SAMPLE_BYTES", 1 << 60)
    alone = [schema.json_type(tree, [v], opts, 0) for v in views]
    monkeypatch.setattr(schema, "PARALLEL_SAMPLE_BYTES", 0)
    threads = [schema.json_type(tree, [v], opts, 0) for v in views]
    assert schema.sample_workers(schema.sampled(tree, views, 0)[0]) == min(2, os.cpu_count() or 1)  # threads
    assert all(a.equals(b) for a, b in zip(alone, threads, strict=True))
    assert any(len(t) for t in threads)


LINES = {
    "plain": b'{"a": 1, "b": "x"}\n{"a": 2.5, "c": [1, 2]}\n',
    "times": b'{"t": "2020-01-01T00:00:00Z"}\n{"t": "not a time"}\n',
    "nested": b'{"a": {"b": null}}\n{"a": {"b": {"c": true}, "d": []}}\n',
    "digits in text": b'{"id": "12345678901234567890123", "n": 1}\n',
    "uint64": b'{"a": 18446744073709551615}\n',
    "uint64 beside a double": b'{"a": 18446744073709551615, "b": 1.5}\n',
    "negative beside a double": b'{"a": -92233720368547758080, "b": 1.5}\n',
    "in a list beside a double": b'{"a": [1.5,12345678901234567890]}\n',
    "long fraction": b'{"r": 0.0066123569921588965, "b": 1.5}\n',
    "long fraction, exponent": b'{"r": 1.0066123569921588965e-7}\n',
    "kinds mixed": b'{"a": "1"}\n{"a": 1}\n',
    "list kinds mixed": b'{"a": [1, "x"]}\n',
    "key twice": b'{"a": 1, "a": "x"}\n',
    "object then list": b'{"a": {"b": 1}}\n{"a": [1]}\n',
}


@pytest.mark.parametrize("name", list(LINES))
def test_lines_type_is_the_records_type_or_none(name: str) -> None:
    """fmtfs.spark.schema.lines_type gives records_to_array's type of the
    parsed lines, or None (typed from the records instead) where pyarrow's
    JSON reader would type them otherwise or refuses them."""
    from fmtfs import parquet
    from fmtfs.render import parse_lines
    from fmtfs.spark.schema import lines_type

    data = LINES[name]
    found = lines_type(data)
    if name in ("plain", "times", "nested", "digits in text", "long fraction", "long fraction, exponent"):
        assert found is not None and found.equals(parquet.records_to_array(parse_lines(data)).type)
    else:
        assert found is None
    assert lines_type(data, count=99) is None  # not the chunk's count of lines


@pytest.mark.parametrize(("kind", "fmt"), [("sample", "gvfs"), ("fixtures", "gvfs"), ("damaged", "gvfs")])
def test_a_derived_view_is_parsed_from_the_bytes_the_index_keeps(tmp_path: Path, kind: str, fmt: str) -> None:
    """A derived view (gvfs metadata.jsonl, computed from the whole source)
    is read by a task from the bytes the index keeps of it
    (fmtfs.spark.pieces.rendered_view): the batch the task would compute,
    schema and values; an executor without the driver's kept store (no
    such file here) computes it instead."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from fmtfs.spark.pieces import rendered_view
    from fmtfs.spark.plan import DerivedPartition, partition_records
    from fmtfs.spark.schema import infer, spark_schema, to_batch

    source = _source(kind, fmt, tmp_path / "src")
    opts = {"path": str(source), "format": fmt, "cachedir": str(tmp_path / "c")}
    tree = open_tree(opts)
    derived = [
        (view, part)
        for view in tree.files
        if view.endswith(".jsonl") and not view.startswith("_")
        for part in plan_partitions(tree, [view], opts)
        if isinstance(part, DerivedPartition)
    ]
    checked = 0
    for view, partition in derived:
        inferred = infer(tree, [view], opts | {"view": view})
        expected = to_arrow_schema(spark_schema(inferred, "json"), timezone="UTC")
        records = next(partition_records(opts, partition), None)
        if not records or not expected.names:
            continue
        batch = rendered_view(opts, partition.store, view, expected)
        computed = to_batch(records, expected, None)
        assert batch is not None and batch.schema.equals(computed.schema), view
        assert batch.equals(computed), view
        assert rendered_view(opts, str(tmp_path / "elsewhere"), view, expected) is None
        checked += 1
    assert checked >= 1


def test_a_query_step_reuses_its_tree_and_sees_the_source_grow(wallaby) -> None:
    """fmtfs.spark.source.tree_for: a Python worker keeps the tree it
    opened for the next query of the same source (whatever the view or
    keptBytes), refreshed first, so the records appended meanwhile are
    in it."""
    from fmtfs.samples import wallaby as sample
    from fmtfs.spark.source import tree_for

    tree = tree_for(wallaby)
    before = tree.files[VIEW].record_count()
    assert tree_for(wallaby | {"keptbytes": "0", "view": "events.log"}) is tree
    log = Path(wallaby["path"]) / "events.log"
    grown = Path(wallaby["cachedir"]).parent / "grown"
    grown.mkdir()
    sample.generate(grown, 3500)  # the same records and 500 more: appended below
    with open(log, "ab") as out:
        out.write((grown / "events.log").read_bytes()[log.stat().st_size :])
    (Path(wallaby["path"]) / "events.log.idx").write_bytes((grown / "events.log.idx").read_bytes())
    again = tree_for(wallaby)
    assert again is tree and again.files[VIEW].record_count() == before + 500
    other = tree_for(wallaby | {"cachedir": wallaby["cachedir"] + "-other"})
    assert other is not tree


def test_a_tree_that_rendered_a_derived_view_is_not_kept(tmp_path: Path) -> None:
    """A derived view may hold its records in memory once rendered (10-15x
    its JSON): a worker does not keep a tree that rendered one for its next
    query, it opens a new one."""
    from fmtfs.spark.source import tree_for
    from fmtfs.treefiles import BytesFile

    opts = {"path": str(_source("sample", "gvfs", tmp_path / "src")), "format": "gvfs"}
    opts["cachedir"] = str(tmp_path / "c")
    tree = tree_for(opts)
    assert tree_for(opts) is tree
    view = next(v for v, f in tree.files.items() if v.endswith(".jsonl") and isinstance(f, BytesFile))
    assert tree.files[view].data()
    assert tree_for(opts) is not tree
