"""A PySpark data source reading native files directly (no mount).

    spark.dataSource.register(FmtfsDataSource)        # or: pip install fmtfs (pyspark_fmtfs)
    df = (spark.read.format("fmtfs")
          .option("format", "wallaby")                 # optional: detected from the files
          .option("view", "events.log/records.jsonl")  # a record view, or a folder of them
          .load("/shared/wal"))

The driver indexes the source once (the same SQLite chunk index a mount
uses, under option `cacheDir`, default ~/.cache/fmtfs) and plans one input
partition per chunk of every stream feeding the view (a derived view, e.g.
kestrel pending, is one partition).  Each executor opens the native file
itself, decodes its chunk and hands Spark one Arrow record batch, so a
cluster reads a source on shared storage with no FUSE mount anywhere.

Columns.  By default (`types` = `json`) the DataFrame has exactly the
columns `spark.read.json` gives for the same view: the union of the keys of
all records, sorted by name at every level, objects as structs, numbers as
long/double, times and `data`/`data_base64` as strings, conflicting kinds
as JSON text, always-empty objects left out.  Differences from
spark.read.json: integers beyond the int64 range are strings here (Spark
infers decimals); the schema is inferred on the driver by decoding the
whole view once and then cached under `cacheDir` per state of the source
(pass `.schema(...)` to skip it).  With `types` = `parquet` the columns are
those of the view's Parquet twin (timestamps, binary bytes, `K_ns` for
nanosecond times; see fmtfs.parquet).

Options: format, view (required), timeBucket (minute|hour|day),
descriptorSet, keyFile (beats AES key; FMTFS_BEATS_PASSWORD works too, on
every executor), kestrelJournalSize, cacheDir, types (json|parquet),
chunksPerPartition (default 1: one input partition per chunk; a few per
partition pay Spark's per-task cost less often)."""

from __future__ import annotations

import argparse
import os
import pickle
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from fmtfs import parquet

# -- opening a source the way the command line does -------------------------


def _options(options: Any) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def format_options(opts: dict[str, str]) -> dict[str, Any]:
    from fmtfs.cli import format_options as cli_options

    args = argparse.Namespace(
        key_file=Path(opts["keyfile"]) if opts.get("keyfile") else None,
        time_bucket=opts.get("timebucket", "hour"),
        descriptor_set=Path(opts["descriptorset"]) if opts.get("descriptorset") else None,
        kestrel_journal_size=int(opts.get("kestreljournalsize", 16 << 20)),
    )
    return cli_options(args)


def source_path(opts: dict[str, str]) -> Path:
    path = opts.get("path")
    if not path:
        raise ValueError("fmtfs data source: give the source folder to load(...)")
    return Path(path)


def open_format(opts: dict[str, str]):
    from fmtfs.formats import open_source

    return open_source(source_path(opts), opts.get("format") or None, format_options(opts))


def cache_dir(opts: dict[str, str]) -> Path:
    if opts.get("cachedir"):
        return Path(opts["cachedir"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fmtfs"


def open_tree(opts: dict[str, str]):
    from fmtfs.views import SourceTree

    return SourceTree(open_format(opts), cache_dir(opts), readonly=True)


def view_files(tree, view: str) -> list[str]:
    """The record views a `view` option names: one file, or the `.jsonl`
    files directly inside a folder (as spark.read.json of that folder)."""
    view = view.strip("/")
    if view in tree.files:
        if not view.endswith(".jsonl"):
            raise ValueError(f"fmtfs data source: {view} is not a record view (.jsonl)")
        return [view]
    if tree.is_dir(view):
        prefix = f"{view}/" if view else ""
        return [
            f"{prefix}{name}"
            for name in tree.listdir(view)
            if name.endswith(".jsonl") and not name.startswith(("_", ".")) and f"{prefix}{name}" in tree.files
        ]
    raise ValueError(f"fmtfs data source: no view {view!r} in {tree.format.source}")


# -- partitions ---------------------------------------------------------------


class ChunkPartition(InputPartition):
    """Consecutive chunks (start, end, state) of one stream, each decoded on
    its own by an executor into one Arrow batch."""

    def __init__(self, view: str, stream: str, chunks: list[tuple[int, int, dict]], skip: int = 0) -> None:
        self.view, self.stream, self.chunks = view, stream, chunks
        self.skip = skip  # records of `view` left out at the start (a slice of a view)


class DerivedPartition(InputPartition):
    """A derived view (computed from the whole source), read whole."""

    def __init__(self, view: str) -> None:
        self.view = view


def plan_partitions(tree, views: list[str], chunks_per_partition: int = 1) -> list[InputPartition]:
    """One partition per chunk of the index (or per `chunks_per_partition`
    consecutive chunks: Spark's cost per task is far above a chunk's)."""
    from fmtfs.views import IndexedFile, SlicedFile

    out: list[InputPartition] = []
    step = max(1, chunks_per_partition)
    for view in views:
        file = tree.files[view]
        if isinstance(file, IndexedFile):
            out += _chunk_partitions(file, step, 0)
        elif isinstance(file, SlicedFile):  # e.g. beats pending: slices of segment views
            for part, skip in file.parts:
                out += _chunk_partitions(part, step, skip)
        else:
            out.append(DerivedPartition(view))
    return out


def _chunk_partitions(file, step: int, skip: int) -> list[ChunkPartition]:
    """Partitions over an indexed view's chunks, leaving out its first `skip`
    records (chunk counts are exact for one-view streams; otherwise the
    skipped records stay in one partition that drops them when read)."""
    entry = file.entry
    pieces = entry.views.get(file.view)
    seqs = pieces.seqs if pieces else []
    if skip and len(entry.views) == 1:
        while seqs and entry.chunks[seqs[0]].count <= skip:
            skip -= entry.chunks[seqs[0]].count
            seqs = seqs[1:]
    elif skip:
        step = len(seqs) or 1
    out = []
    for i in range(0, len(seqs), step):
        chunks = [(m.start, m.end, m.state) for m in (entry.chunks[seq] for seq in seqs[i : i + step])]
        out.append(ChunkPartition(file.view, entry.stream.name, chunks, skip if i == 0 else 0))
    return out


# -- executors: native bytes -> records -------------------------------------

_formats: dict[tuple, Any] = {}
_formats_lock = threading.Lock()


def _format_for(opts: dict[str, str]):
    """One Format object per source and options, per Python worker."""
    key = tuple(sorted(opts.items()))
    with _formats_lock:
        fmt = _formats.get(key)
        if fmt is None:
            fmt = _formats[key] = open_format(opts)
        return fmt


def partition_records(opts: dict[str, str], partition: InputPartition) -> Iterator[list[dict]]:
    """The record batches of one partition: one per chunk."""
    from fmtfs.formats.base import Chunk

    fmt = _format_for(opts)
    if isinstance(partition, DerivedPartition):
        produced = fmt.derived_views()[partition.view]()
        if isinstance(produced, bytes):
            from fmtfs.render import parse_lines

            produced = parse_lines(produced)
        yield produced
        return
    streams = {s.name: s for s in fmt.streams()}
    stream = streams.get(partition.stream)
    if stream is None:
        raise FileNotFoundError(f"fmtfs: stream {partition.stream} disappeared from {fmt.source}")
    skip = partition.skip
    for start, end, state in partition.chunks:
        records = stream.decode(Chunk(start, end, state, {})).get(partition.view, [])
        if skip:
            records, skip = records[skip:], max(0, skip - len(records))
        yield records


# -- schemas -------------------------------------------------------------------


def json_spark_type(t: pa.DataType) -> DataType | None:
    """The type spark.read.json infers for values of Arrow type `t` (None:
    the field is left out, as Spark leaves out always-empty objects)."""
    if pa.types.is_struct(t):
        fields = []
        for f in sorted(t, key=lambda f: f.name):
            sub = json_spark_type(f.type)
            if sub is not None:
                fields.append(StructField(f.name, sub, True))
        return StructType(fields) if fields else None
    if pa.types.is_list(t):
        item = json_spark_type(t.value_type)
        return ArrayType(item if item is not None else StringType(), True)
    if pa.types.is_boolean(t):
        return BooleanType()
    if pa.types.is_integer(t):
        return LongType()
    if pa.types.is_floating(t):
        return DoubleType()
    return StringType()


def typed_spark_type(t: pa.DataType) -> DataType:
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(t, prefer_timestamp_ntz=False)


@dataclass
class Inferred:
    """What the driver learned from the records of the view."""

    json_type: pa.StructType  # union of the records' JSON shapes
    plan: parquet.Plan | None  # typing plan of the Parquet twin (types=parquet)


def infer(tree, views: list[str], opts: dict[str, str]) -> Inferred:
    """Decode the view once on the driver; cached per state of the source."""
    from fmtfs import schemas
    from fmtfs.index import digest

    identities = [tree.files[v].identity() for v in views]
    cache = (
        cache_dir(opts) / "spark" / f"{digest(tree.source_key, views, identities, parquet.VERSION)}.pickle"
    )
    try:
        return pickle.loads(cache.read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError):
        pass
    arrays = []
    type_: pa.DataType = pa.struct([])
    for view in views:
        for batch in tree.files[view].records():
            if batch:
                arr = parquet.records_to_array(batch)
                arrays.append(arr)
                type_ = parquet.unify(type_, arr.type)
    plan = None
    if arrays:
        arrays = [parquet.conform(a, type_) for a in arrays]
        plan = parquet.make_plan(arrays, schemas.bytes_keys(tree.format.name, views[0]))
    result = Inferred(type_, plan)
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
    tmp.write_bytes(pickle.dumps(result))
    os.replace(tmp, cache)
    return result


def spark_schema(inferred: Inferred, types: str) -> StructType:
    if types == "parquet":
        if inferred.plan is None or inferred.plan.kind != "struct":
            return StructType([])
        return StructType([StructField(f.name, typed_spark_type(f.type), True) for f in inferred.plan.out])
    spark_type = json_spark_type(inferred.json_type)
    return spark_type if isinstance(spark_type, StructType) else StructType([])


# -- the data source -----------------------------------------------------------


class FmtfsDataSource(DataSource):
    """spark.read.format("fmtfs").option("view", ...).load(SOURCE)"""

    @classmethod
    def name(cls) -> str:
        return "fmtfs"

    def _setup(self):
        opts = _options(self.options)
        if not opts.get("view") and opts.get("view") != "":
            raise ValueError('fmtfs data source: option "view" is required (e.g. "events.log/records.jsonl")')
        tree = open_tree(opts)
        return opts, tree, view_files(tree, opts["view"])

    def schema(self) -> StructType:
        opts, tree, views = self._setup()
        return spark_schema(infer(tree, views, opts), opts.get("types", "json"))

    def reader(self, schema: StructType) -> DataSourceReader:
        opts, tree, views = self._setup()
        types = opts.get("types", "json")
        inferred = infer(tree, views, opts) if types == "parquet" else None
        per = int(opts.get("chunksperpartition", 1))
        return FmtfsReader(opts, schema, plan_partitions(tree, views, per), inferred)


class FmtfsReader(DataSourceReader):
    def __init__(
        self, opts: dict[str, str], schema: StructType, parts: list[InputPartition], inferred: Inferred | None
    ) -> None:
        self.opts = opts
        self.schema = schema
        self.parts = parts
        self.inferred = inferred  # set for types=parquet: the typing plan

    def partitions(self) -> list[InputPartition]:
        return self.parts or [DerivedPartition("")]

    def read(self, partition: InputPartition):
        from pyspark.sql.pandas.types import to_arrow_schema

        expected = to_arrow_schema(self.schema, timezone="UTC")
        if isinstance(partition, DerivedPartition) and partition.view == "":
            return  # a view with no records at all
        for records in partition_records(self.opts, partition):
            if records:
                yield to_batch(records, expected, self.inferred)


def to_batch(records: list[dict], expected: pa.Schema, inferred: Inferred | None) -> pa.RecordBatch:
    """Records -> one Arrow batch of exactly the declared schema."""
    target = pa.struct(list(expected))
    if inferred is not None and inferred.plan is not None:
        arr = parquet.records_to_array(records, inferred.json_type)
        arr = parquet.apply_plan(inferred.plan, arr)
    else:
        # the JSON-mode Spark types map one to one onto JSON kinds
        arr = parquet.records_to_array(records, target)
    arr = parquet.conform(arr, target)
    return pa.RecordBatch.from_struct_array(arr).cast(expected)
