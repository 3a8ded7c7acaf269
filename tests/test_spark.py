"""Spark over real mounts, and the fmtfs data source (local mode, no network).

For every format whose sample generator exists, a generated source is
mounted for real, and for every folder of record views:
  - spark.read.json(folder) gives exactly the lines of the views (count,
    a column checksum, every row), each file read as several byte ranges;
  - spark.read.parquet(parquet/folder) gives the same number of rows, the
    same checksum, typed columns;
  - spark.read.format("fmtfs") over the native files gives the same
    DataFrame as spark.read.json of the folder (schema and rows).
One SparkSession serves the whole module (its start costs seconds)."""

from __future__ import annotations

import importlib
import os
import sys
import zlib
from collections import Counter
from pathlib import Path

import orjson
import pytest

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    BinaryType,
    DoubleType,
    LongType,
    StringType,
    StructType,
    TimestampType,
)

from tests.mounting import mounted  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MAX_PARTITION_BYTES = 32 * 1024
# records per sample: views of a few hundred KB, so every view file spans
# several byte ranges of MAX_PARTITION_BYTES without slowing the suite
RECORDS = {"wallaby": 3000, "kestrel": 2000, "gvfs": 2000, "proio": 400, "beats": 2000}
FORMATS = [f for f in RECORDS if importlib.util.find_spec(f"fmtfs.samples.{f}") is not None]


@pytest.fixture(scope="module")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # Python workers find pyspark_fmtfs (static registration) on this path
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = f"{REPO}{os.pathsep}{path}" if path else str(REPO)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("fmtfs-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.files.maxPartitionBytes", str(MAX_PARTITION_BYTES))
        .config("spark.sql.files.openCostInBytes", "1024")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """format -> (source path, cache dir, mount point), mounted for the module."""
    from contextlib import ExitStack

    out = {}
    with ExitStack() as stack:
        for name in FORMATS:
            folder = tmp_path_factory.mktemp(f"src-{name}")
            source = importlib.import_module(f"fmtfs.samples.{name}").generate(folder, RECORDS[name])
            cache = tmp_path_factory.mktemp(f"cache-{name}")
            mnt = stack.enter_context(mounted(source, "--time-bucket", "hour", cache_dir=cache))
            out[name] = (source, cache, mnt)
        yield out


def view_folders(mnt: Path) -> dict[str, list[Path]]:
    """Folder (relative to the mount) -> its record view files, outside parquet/."""
    found: dict[str, list[Path]] = {}
    for folder, dirs, files in os.walk(mnt):
        rel = os.path.relpath(folder, mnt)
        if rel == "parquet" or rel.startswith("parquet" + os.sep):
            dirs[:] = []
            continue
        views = sorted(Path(folder) / f for f in files if f.endswith(".jsonl") and not f.startswith("_"))
        if views:
            found["" if rel == "." else rel] = views
    return found


def read_records(files: list[Path]) -> list[dict]:
    return [orjson.loads(line) for f in files for line in f.read_bytes().splitlines()]


def canonical(value):
    """A row or record as comparable text: nulls dropped, keys sorted."""
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in sorted(value.items()) if v is not None}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def row_texts(rows) -> Counter:
    return Counter(orjson.dumps(canonical(r.asDict(recursive=True))) for r in rows)


def record_texts(records, schema: StructType) -> Counter:
    return Counter(orjson.dumps(canonical(as_spark(r, schema))) for r in records)


def as_spark(value, spark_type):
    """A JSON value the way Spark's JSON reader holds it in `spark_type`:
    a value of another kind in a string column is its JSON text."""
    if value is None:
        return None
    if isinstance(spark_type, StringType):
        return value if isinstance(value, str) else orjson.dumps(value).decode()
    if isinstance(spark_type, StructType):
        return {f.name: as_spark(value.get(f.name), f.dataType) for f in spark_type.fields}
    if isinstance(spark_type, ArrayType):
        return [as_spark(v, spark_type.elementType) for v in value]
    if isinstance(spark_type, DoubleType):
        return float(value)
    return value


def checksum_column(records: list[dict]) -> str | None:
    """A top-level key whose values are all strings or integers (no floats,
    whose text differs between Python and Spark)."""
    keys = list(records[0]) if records else []
    for key in keys:
        values = [r.get(key) for r in records]
        if all(v is None or (type(v) in (int, str)) for v in values) and any(v is not None for v in values):
            return key
    return None


def expected_checksum(records: list[dict], key: str) -> int:
    return sum(zlib.crc32(str(r[key]).encode()) for r in records if r.get(key) is not None)


def spark_checksum(df, key: str) -> int:
    if isinstance(df.schema[key].dataType, TimestampType):
        return None  # a typed time: compared through the JSON text elsewhere
    column = F.col(f"`{key}`")
    if isinstance(df.schema[key].dataType, BinaryType):
        text = column
    else:
        text = column.cast("string").cast("binary")
    total = df.select(F.sum(F.crc32(text))).first()[0]
    return int(total or 0)


def ranges(files: list[Path]) -> int:
    """How many byte ranges Spark reads these files in, at least (the short
    tails of several files may share one partition)."""
    return sum(max(1, f.stat().st_size // MAX_PARTITION_BYTES) for f in files)


@pytest.mark.parametrize("name", FORMATS)
def test_spark_reads_json_views_over_the_mount(spark, sources, name) -> None:
    _, _, mnt = sources[name]
    folders = view_folders(mnt)
    assert folders, f"{name}: the mount shows no record views"
    for rel, files in folders.items():
        expected = read_records(files)
        df = spark.read.json(str(mnt / rel))
        assert df.count() == len(expected), rel
        big = [f for f in files if f.stat().st_size > 2 * MAX_PARTITION_BYTES]
        if big:  # files are really read as several byte ranges
            assert df.rdd.getNumPartitions() >= ranges(big), rel
        key = checksum_column(expected)
        if key is not None:
            assert spark_checksum(df, key) == expected_checksum(expected, key), (rel, key)
        assert row_texts(df.collect()) == record_texts(expected, df.schema), rel


@pytest.mark.parametrize("name", FORMATS)
def test_spark_reads_a_folders_views_by_glob(spark, sources, name) -> None:
    """`spark.read.json("<folder>/*.jsonl")`, as the README and
    scripts/spark_query.py name a folder's views (Spark lists a folder
    recursively, its bucket views included, before ignoring subfolders),
    reads exactly the folder's own views: none of a subfolder, no `_` file."""
    _, _, mnt = sources[name]
    for rel, files in view_folders(mnt).items():
        df = spark.read.json(str(mnt / rel / "*.jsonl"))
        assert sorted(Path(p.removeprefix("file:")).name for p in df.inputFiles()) == [f.name for f in files]
        assert row_texts(df.collect()) == record_texts(read_records(files), df.schema), rel


@pytest.mark.parametrize("name", FORMATS)
def test_spark_reads_parquet_twins_over_the_mount(spark, sources, name) -> None:
    _, _, mnt = sources[name]
    for rel, files in view_folders(mnt).items():
        expected = read_records(files)
        twins = [mnt / "parquet" / rel / (f.name[: -len(".jsonl")] + ".parquet") for f in files]
        assert all(t.is_file() for t in twins), rel
        df = spark.read.option("mergeSchema", "true").parquet(str(mnt / "parquet" / rel))
        assert df.count() == len(expected), rel
        key = checksum_column(expected)
        if key is not None and key in df.columns and not isinstance(df.schema[key].dataType, BinaryType):
            got = spark_checksum(df, key)
            if got is not None:
                assert got == expected_checksum(expected, key), (rel, key)
        # times are typed: every top-level key whose values are RFC 3339 texts
        times = [
            k
            for k in (expected[0] if expected else {})
            if isinstance(expected[0][k], str) and k not in ("data",) and _is_time(expected, k)
        ]
        for k in times:
            assert isinstance(df.schema[k].dataType, TimestampType), (rel, k)
        # several row groups in a big twin: Spark reads it with several tasks
        big = [t for t in twins if t.stat().st_size > 4 * MAX_PARTITION_BYTES]
        if big:
            one = spark.read.parquet(str(big[0]))
            assert one.rdd.getNumPartitions() > 1, big[0]
            assert one.count() == len(read_records([files[twins.index(big[0])]]))


def _is_time(records: list[dict], key: str) -> bool:
    import re

    pattern = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3}|\.\d{6}|\.\d{9})?Z$")
    values = [r.get(key) for r in records if r.get(key) is not None]
    return (
        bool(values)
        and all(isinstance(v, str) and pattern.match(v) for v in values)
        and (len({len(v) for v in values}) == 1)
    )


def test_data_source_found_without_register(spark, sources) -> None:
    """pyspark_fmtfs.DefaultSource is registered by Spark itself."""
    name = FORMATS[0]
    source, cache, mnt = sources[name]
    rel, files = next(iter(view_folders(mnt).items()))
    df = spark.read.format("fmtfs").option("view", rel).option("cacheDir", str(cache)).load(str(source))
    assert df.count() == len(read_records(files))


@pytest.mark.parametrize("name", FORMATS)
def test_data_source_equals_json_view(spark, sources, name) -> None:
    from fmtfs.spark import FmtfsDataSource

    spark.dataSource.register(FmtfsDataSource)
    source, cache, mnt = sources[name]
    for rel, files in view_folders(mnt).items():
        json_df = spark.read.json(str(mnt / rel))
        df = (
            spark.read.format("fmtfs")
            .option("format", name)
            .option("view", rel)
            .option("timeBucket", "hour")
            .option("cacheDir", str(cache))
            .load(str(source))
        )
        assert df.schema.simpleString() == json_df.schema.simpleString(), rel
        assert df.count() == json_df.count() == len(read_records(files)), rel
        assert df.exceptAll(json_df).count() == 0, rel
        assert json_df.exceptAll(df).count() == 0, rel


@pytest.mark.parametrize("name", FORMATS)
def test_a_chunk_decoded_for_one_view_equals_its_share_of_the_whole_decode(sources, name) -> None:
    """Executors decode a chunk for the view they read (Stream.records_of,
    which skips the hour buckets of a stream's own view): the same records
    as the view's share of decode(), for every chunk of every record view."""
    from fmtfs.formats.base import Chunk
    from fmtfs.spark import open_tree
    from fmtfs.spark.listing import is_chunked

    source, cache, _ = sources[name]
    tree = open_tree({"path": str(source), "format": name, "timebucket": "hour", "cachedir": str(cache)})
    streams = {stream.name: stream for stream in tree.format.streams()}
    own_view = set()  # whether a checked chunk was of its stream's own view (else a bucket)
    for path, file in tree.files.items():
        if not (path.endswith(".jsonl") and is_chunked(file)):
            continue
        for chunk in file.chunks():
            stream = streams[chunk.stream]
            native = Chunk(chunk.start, chunk.end, chunk.state, {})
            records = stream.records_of(native, chunk.view)
            assert records == stream.decode(native).get(chunk.view, []) and records, path
            own_view.add(chunk.view == getattr(stream, "view", None))
    assert own_view == {True, False} if name in ("beats", "kestrel") else own_view, own_view


@pytest.mark.parametrize("name", FORMATS)
def test_schema_sample_decoded_on_every_core_equals_in_process(sources, name) -> None:
    """A big inference sample is decoded by forked processes that open the
    source themselves: the same arrays, in the same order, as decoding it
    in the driver's process; a small one stays in process."""
    from fmtfs.spark import open_tree, view_files
    from fmtfs.spark.schema import PARALLEL_SAMPLE_BYTES, sample_arrays, sample_workers, sampled

    source, cache, mnt = sources[name]
    for rel in view_folders(mnt):
        opts = {
            "path": str(source),
            "format": name,
            "view": rel,
            "timebucket": "hour",
            "cachedir": str(cache),
        }
        tree = open_tree(opts)
        sample, _ = sampled(tree, view_files(tree, rel), 0)
        if not sample:
            continue
        here = list(sample_arrays(opts, sample, 1))
        forked = list(sample_arrays(opts, sample, 2))
        assert len(forked) == len(here) > 0, rel
        assert all(a.equals(b) for a, b in zip(here, forked, strict=True)), rel
        rendered = sum(chunk.size for _, chunk in sample)
        if rendered < PARALLEL_SAMPLE_BYTES:
            assert sample_workers(sample) == 1, rel
        big = sample * (PARALLEL_SAMPLE_BYTES // rendered + 1)
        assert sample_workers(big) == min(len(big), os.cpu_count() or 1), rel


def test_data_source_partitions_are_packed_from_chunks(spark, tmp_path) -> None:
    """Partitions come from the chunk index: by default packed to Spark's
    split size, or one per `partitionBytes` worth of chunks, or a fixed
    number of chunks; every packing gives the same rows."""
    from fmtfs.spark import FmtfsDataSource, open_tree, plan_partitions, view_files

    spark.dataSource.register(FmtfsDataSource)
    (tmp_path / "src").mkdir()
    source = importlib.import_module("fmtfs.samples.wallaby").generate(tmp_path / "src", 30_000)
    cache, rel = tmp_path / "cache", "events.log/records.jsonl"
    opts = {"path": str(source), "view": rel, "cachedir": str(cache), "partitionbytes": str(4 << 20)}
    tree = open_tree(opts)
    views = view_files(tree, rel)
    chunks = sum(len(p.chunks) for p in plan_partitions(tree, views, opts))

    def read(**options: str):
        reader = spark.read.format("fmtfs").option("view", rel).option("cacheDir", str(cache))
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load(str(source))

    default = read(partitionBytes=str(4 << 20))  # Spark's smallest default split
    assert default.rdd.getNumPartitions() == len(plan_partitions(tree, views, opts)) < chunks
    per_chunk = read(partitionBytes="1")
    assert per_chunk.rdd.getNumPartitions() == chunks > 1
    grouped = read(chunksPerPartition="3")
    assert grouped.rdd.getNumPartitions() == -(-chunks // 3)
    for df in (per_chunk, grouped):
        assert df.count() == default.count() and df.exceptAll(default).count() == 0


def test_a_read_after_an_append_sees_the_records_appended(spark, tmp_path) -> None:
    """A read's schema step hands the planning step its listing of the
    chunks (fmtfs.spark.listing): a read planned after records were
    appended plans them, though an earlier read listed the source."""
    from fmtfs.samples import wallaby
    from fmtfs.spark import FmtfsDataSource

    spark.dataSource.register(FmtfsDataSource)
    (tmp_path / "src").mkdir()
    source = wallaby.generate(tmp_path / "src", 3000)

    def read():
        reader = spark.read.format("fmtfs").option("view", "events.log/records.jsonl")
        return reader.option("cacheDir", str(tmp_path / "cache")).load(str(source))

    assert read().count() == 3000
    (tmp_path / "grown").mkdir()
    wallaby.generate(tmp_path / "grown", 3500)  # the same records and 500 more: appended below
    log = source / "events.log"
    with open(log, "ab") as out:
        out.write((tmp_path / "grown" / "events.log").read_bytes()[log.stat().st_size :])
    (source / "events.log.idx").write_bytes((tmp_path / "grown" / "events.log.idx").read_bytes())
    df = read()
    assert df.count() == 3500
    assert df.agg(F.max("index")).first()[0] == 3499


def typed_read(spark, source: Path, cache: Path, view: str):
    """The data source over `view` with the Parquet twin's typed columns."""
    return (
        spark.read.format("fmtfs")
        .option("view", view)
        .option("types", "parquet")
        .option("cacheDir", str(cache))
        .load(str(source))
    )


def test_data_source_typed_equals_parquet_twin(spark, sources) -> None:
    from fmtfs.spark import FmtfsDataSource

    spark.dataSource.register(FmtfsDataSource)
    name = FORMATS[0]
    source, cache, mnt = sources[name]
    for rel, files in view_folders(mnt).items():
        for view in files:
            rel_view = f"{rel}/{view.name}" if rel else view.name
            twin = mnt / "parquet" / (rel_view[: -len(".jsonl")] + ".parquet")
            pq_df = spark.read.parquet(str(twin))
            df = typed_read(spark, source, cache, rel_view)
            assert [f.name for f in df.schema] == [f.name for f in pq_df.schema], rel_view
            assert df.schema == pq_df.schema or _same_types(df.schema, pq_df.schema), rel_view
            assert df.count() == pq_df.count()
            assert df.exceptAll(pq_df).count() == 0 and pq_df.exceptAll(df).count() == 0, rel_view
            return


def _same_types(a: StructType, b: StructType) -> bool:
    return [f.dataType.simpleString() for f in a] == [f.dataType.simpleString() for f in b]


@pytest.mark.parametrize("name", FORMATS)
def test_data_source_typed_columns_follow_the_declared_schema(spark, sources, name) -> None:
    """types=parquet: a declared time is a timestamp (with the exact `K_ns`
    for nanoseconds), declared bytes are binary, and the rows are the twin's."""
    from fmtfs.formats import open_source
    from fmtfs.formats.schema import Kind
    from fmtfs.spark import FmtfsDataSource

    spark.dataSource.register(FmtfsDataSource)
    source, cache, mnt = sources[name]
    options = {"key": None, "time_bucket": "hour", "descriptor_set": None, "kestrel_journal_size": 16 << 20}
    fmt = open_source(source, name, options)
    checked = 0
    for rel, files in view_folders(mnt).items():
        rel_view = f"{rel}/{files[0].name}" if rel else files[0].name
        df = typed_read(spark, source, cache, rel_view)
        types = {f.name: f.dataType for f in df.schema}
        for f in fmt.view_schema(rel_view):
            if f.name not in types or f.kind not in (Kind.TIME, Kind.BYTES):
                continue
            want = TimestampType() if f.kind is Kind.TIME else BinaryType()
            assert types[f.name] == want, (rel_view, f.name)
            if f.kind is Kind.TIME and f.unit == "ns":
                assert types[f.name + "_ns"] == LongType()
            checked += 1
        twin = spark.read.parquet(str(mnt / "parquet" / (rel_view[: -len(".jsonl")] + ".parquet")))
        assert df.count() == twin.count() > 0
        assert df.exceptAll(twin).count() == 0 and twin.exceptAll(df).count() == 0, rel_view
    assert checked or name == "proio"  # proio declares no time nor bytes its sample shows


def fmtfs_read(spark, name: str, source: Path, cache: Path, view: str, **options: str):
    reader = spark.read.format("fmtfs").option("format", name).option("view", view)
    reader = reader.option("timeBucket", "hour").option("cacheDir", str(cache))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(source))


@pytest.mark.parametrize("name", FORMATS)
def test_kept_batches_give_the_decoded_rows_again(spark, sources, name, tmp_path) -> None:
    """A first read keeps each decoded chunk's Arrow batch under cacheDir
    (typed columns: no chunk is parsed from the index's kept lines; derived
    views, computed whole, keep none); a second read loads them (their use
    time moves) and gives exactly the rows of the first and of a read that
    keeps nothing (keptBytes=0)."""
    from fmtfs.spark import FmtfsDataSource, open_tree, view_files
    from fmtfs.spark.kept import kept_dir
    from fmtfs.spark.listing import is_chunked

    spark.dataSource.register(FmtfsDataSource)
    source, _, mnt = sources[name]
    for i, rel in enumerate(view_folders(mnt)):
        cache = tmp_path / f"cache-{i}"  # this folder's batches alone
        opts = {"path": str(source), "format": name, "timebucket": "hour", "cachedir": str(cache)}
        tree = open_tree(opts)
        # typed columns: every chunk decoded (the index's kept lines serve JSON-typed ones only)
        first = fmtfs_read(spark, name, source, cache, rel, types="parquet")
        rows = first.collect()
        kept = sorted(kept_dir({"cachedir": str(cache)}).rglob("*.arrow"))
        assert bool(kept) == any(is_chunked(tree.files[v]) for v in view_files(tree, rel)), rel
        for path in kept:
            os.utime(path, (0, 0))
        again = fmtfs_read(spark, name, source, cache, rel, types="parquet")
        assert again.count() == len(rows), rel
        assert all(path.stat().st_mtime > 0 for path in kept), rel  # each loaded
        decoded = fmtfs_read(spark, name, source, tmp_path / "none", rel, types="parquet", keptBytes="0")
        assert decoded.count() == len(rows), rel
        assert not kept_dir({"cachedir": str(tmp_path / "none")}).exists(), rel
        for a, b in ((again, first), (again, decoded), (decoded, again)):
            assert a.exceptAll(b).count() == 0, rel
