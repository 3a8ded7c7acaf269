"""The DataFrame's columns, inferred from the view's records on the driver.

By default (`types` = `json`) the columns are those `spark.read.json`
gives for the same view: the union of the keys of the records, sorted by
name at every level, objects as structs, numbers as long/double, times and
`data`/`data_base64` as strings, conflicting kinds as JSON text,
always-empty objects left out (integers beyond int64 are strings here,
where Spark infers decimals).  With `types` = `parquet` they are those of
the view's Parquet twin, typed by the format's declared view schema
(timestamps of the declared precision, binary bytes, `K_ns` for
nanosecond times; see fmtfs.parquet and fmtfs.formats.schema).

Inference reads a sample of the view's chunks, spread evenly from its
first to its last (option `inferChunks`, default 8; `all` reads every
chunk, as spark.read.json reads every line), so it costs a few chunks, not
a second pass over the data.  A chunk whose lines the index kept is parsed
from them (as spark.read.json of the view would see it: a NaN float is
null), the others are decoded.  The schema step of a query runs before
any task, on the driver alone.  With `types` = `json` only the records'
JSON type is needed: a kept chunk (and a derived view's kept bytes) is
typed by pyarrow's JSON reader, with no Python object per value
(json_type, lines_type: a proio sample of 8 chunks in 0.08 s instead of
0.37 s), unless the reader would type it otherwise than the records (kinds
mixed in a field, an integer that may not fit int64).  What is left, and
the typed sample of `types` = `parquet`, is read as records, by forked
processes on every core when it is some megabytes (sample_arrays).  A key
found in no sampled chunk is not a column (as with spark.read.json's
samplingRatio); give `.schema(...)` or `inferChunks=all` when that
matters.  The result is cached under `cacheDir` per state of the source
and kind of types."""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pj
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
from fmtfs.digest import digest
from fmtfs.keptpieces import KeptPieces
from fmtfs.render import parse_lines
from fmtfs.spark.listing import is_chunked, kept_place
from fmtfs.spark.plan import ChunkPartition, partition_records
from fmtfs.spark.source import Options, cache_dir, forget_formats
from fmtfs.twins import VERSION

DEFAULT_INFER_CHUNKS = 8


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


def spark_arrow_type(t: pa.DataType) -> pa.DataType:
    """`t` with the unsigned integers Spark has no type for widened as
    Spark reads them from Parquet (uint64 -> decimal(20,0), smaller ones
    -> the next signed width): a declared proio uint64 field."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, spark_arrow_type(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(spark_arrow_type(t.value_type))
    if pa.types.is_map(t):
        return pa.map_(spark_arrow_type(t.key_type), spark_arrow_type(t.item_type))
    return _UNSIGNED.get(t, t)


_UNSIGNED = {
    pa.uint64(): pa.decimal128(20, 0),
    pa.uint32(): pa.int64(),
    pa.uint16(): pa.int32(),
    pa.uint8(): pa.int16(),
}


def typed_spark_type(t: pa.DataType) -> DataType:
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(spark_arrow_type(t), prefer_timestamp_ntz=False)


@dataclass
class Inferred:
    """What the driver learned from the records of the view."""

    json_type: pa.StructType  # union of the records' JSON shapes
    plan: parquet.Plan | None  # typing plan of the Parquet twin (types=parquet)


def _spread(items: list, n: int) -> list:
    """`n` items evenly from first to last (all when n covers them)."""
    if n <= 0 or len(items) <= n:
        return items
    if n == 1:
        return items[:1]
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


def sampled(tree, views: list[str], chunks: int) -> tuple[list, list]:
    """What inference reads: up to `chunks` (file, view chunk) pairs spread
    over `views` (0: all), and the derived views' files (computed whole
    anyway)."""
    sample: list = []
    derived: list = []
    for view in views:
        file = tree.files[view]
        if is_chunked(file):
            sample += [(file, chunk) for chunk in file.chunks()]
        else:
            derived.append(file)
    return _spread(sample, chunks), derived


# Below this many rendered bytes in the sample, forking decoders costs
# more than it saves (tens of ms); above it, the schema step runs alone
# on the driver with every other core idle.
PARALLEL_SAMPLE_BYTES = 4 << 20


def sample_arrays(opts: Options, sample: list, workers: int) -> Iterator[pa.StructArray]:
    """The records of the sampled (file, chunk) pairs as struct arrays, in
    order, each parsed from the lines the index kept of its chunk
    (`lines_records`: a proio chunk twice as cheap as decoding it, Beats
    4x) or else decoded, here or by `workers` forked processes (they have
    everything imported already, and open the source and the kept store
    anew from `opts` as executors do: no file position or SQLite handle is
    shared)."""
    jobs = [(chunk, kept_place(file, chunk)) for file, chunk in sample]
    if workers <= 1:
        try:
            for (file, chunk), job in zip(sample, jobs, strict=True):
                records = _kept_records(job)
                arr = _array(records if records is not None else file.chunk_records(chunk))
                if arr is not None:
                    yield arr
        finally:
            _close_stores()
        return
    with multiprocessing.get_context("fork").Pool(workers, initializer=_fresh_formats) as pool:
        yield from filter(None, pool.imap(partial(_job_array, opts), jobs))


def _fresh_formats() -> None:
    forget_formats()
    _stores.clear()  # this process opens the stores itself
    gc.disable()  # a worker's records live one chunk each and form no cycles


# kept stores opened by this process while it reads a sample, by path
_stores: dict[str, KeptPieces] = {}
_stores_lock = threading.Lock()  # json_type's threads open a store once


def _close_stores() -> None:
    for store in _stores.values():
        store.close()
    _stores.clear()


def _kept_bytes(store: str, kept) -> bytes | None:
    """The lines kept at `kept` in the store at `store` (opened once per
    process while it reads a sample); None: none kept, or the store cannot
    be opened here."""
    if kept is None:
        return None
    try:
        with _stores_lock:
            if store not in _stores:
                _stores[store] = KeptPieces(Path(store), 0)
        return _stores[store].get(kept)
    except OSError:
        return None


def _kept_records(job: tuple) -> list | None:
    """A sampled chunk's records parsed from its kept lines (None: decode it)."""
    chunk, (store, kept) = job
    return lines_records(_kept_bytes(store, kept), chunk)


def lines_records(data: bytes | None, chunk) -> list | None:
    """The records of `chunk` parsed from the JSON lines kept of the whole
    chunk (None: none kept, torn, or not the chunk's count of lines: decode
    it).  The view's records exactly as decoding gives them, but for a NaN
    or infinite float, which the view and spark.read.json show as null."""
    if data is None:
        return None
    try:
        records = parse_lines(data)
    except ValueError:
        return None
    if chunk.total is not None and len(records) != chunk.total:
        return None
    return chunk.cut(records)


def _array(records: list) -> pa.StructArray | None:
    return parquet.records_to_array(records) if records else None


def _job_array(opts: Options, job: tuple) -> pa.StructArray | None:
    """A forked worker's array of one sampled chunk: parsed, else decoded."""
    records = _kept_records(job)
    if records is None:
        records = next(partition_records(opts, ChunkPartition([job[0]])), [])
    return _array(records)


def sample_workers(sample: list) -> int:
    """Processes worth reading `sample` with, or threads worth typing its
    kept lines with (1: this one alone)."""
    if sum(chunk.size for _, chunk in sample) < PARALLEL_SAMPLE_BYTES:
        return 1
    return max(1, min(len(sample), os.cpu_count() or 1))


def infer(tree, views: list[str], opts: Options, typed: bool = True) -> Inferred:
    """Infer from a sample of chunks; cached per state of the source.
    `typed`: learn the Parquet twin's typing plan too (types=parquet);
    else the JSON type alone, which the kept lines give without building
    records (json_type)."""
    setting = opts.get("inferchunks", str(DEFAULT_INFER_CHUNKS)).lower()
    chunks = 0 if setting == "all" else max(1, int(setting))
    identities = [tree.files[v].identity() for v in views]
    key = digest(tree.source_key, views, identities, VERSION, chunks, typed)
    cache = cache_dir(opts) / "spark" / f"{key}.pickle"
    try:
        return pickle.loads(cache.read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError):
        pass
    result = (
        _typed(tree, views, opts, chunks) if typed else Inferred(json_type(tree, views, opts, chunks), None)
    )
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
    tmp.write_bytes(pickle.dumps(result))
    os.replace(tmp, cache)
    return result


def _typed(tree, views: list[str], opts: Options, chunks: int) -> Inferred:
    shape = parquet.Shape(tree.format.view_schema(views[0]))  # the views of a folder share one
    sample, derived = sampled(tree, views, chunks)
    for file in derived:
        for batch in file.records():
            if batch:
                shape.add(parquet.records_to_array(batch))
    for arr in sample_arrays(opts, sample, sample_workers(sample)):
        shape.add(arr)  # folded as it comes: O(schema) memory
    plan = shape.plan() if shape.rows else None
    return Inferred(shape.type, plan)


def json_type(tree, views: list[str], opts: Options, chunks: int) -> pa.DataType:
    """The union of the sampled records' JSON types, as _typed learns it
    (Shape.type), each sampled chunk typed from its kept lines by
    pyarrow's JSON reader where it can be (lines_type: a proio sample of 8
    chunks in 0.08 s instead of 0.37 s, so no forked workers), the others
    and the derived views from their records."""
    sample, derived = sampled(tree, views, chunks)
    found: pa.DataType = pa.struct([])
    rest = []
    jobs = [(chunk, kept_place(file, chunk)) for file, chunk in sample]
    try:
        # a thread per core for a sample of some megabytes: the reader and
        # lz4 release the GIL, and the schema step runs alone, before any
        # task (a proio sample of 8 chunks, 9.6 MB: 0.10 -> 0.06 s on 2
        # cores; wallaby's 3.4 MB took 0.02 s alone and longer in threads)
        with ThreadPoolExecutor(sample_workers(sample)) as pool:
            types = list(pool.map(lambda job: _kept_lines_type(*job), jobs))
    finally:
        _close_stores()
    for pair, typed in zip(sample, types, strict=True):
        if typed is None:
            rest.append(pair)
        else:
            found = parquet.unify(found, typed)
    for file in derived:
        found = parquet.unify(found, _derived_type(file))
    for arr in sample_arrays(opts, rest, sample_workers(rest)):
        found = parquet.unify(found, arr.type)
    return found


def _derived_type(file) -> pa.DataType:
    """A derived view's records' type: from its bytes (the index keeps them:
    gvfs metadata.jsonl, 3.6 MB in 0.05 s instead of 0.13 s) where
    lines_type can tell, else from its records."""
    from fmtfs.treefiles import BytesFile

    if isinstance(file, BytesFile):
        size = file.size()
        typed = lines_type(file.read(0, size)) if size else None  # its bytes, pieces joined
        if typed is not None:
            return typed
    found: pa.DataType = pa.struct([])
    for batch in file.records():
        if batch:
            found = parquet.unify(found, parquet.records_to_array(batch).type)
    return found


def _kept_lines_type(chunk, place: tuple) -> pa.DataType | None:
    """The type of a whole chunk's records from its kept lines (None: no
    lines kept here, the chunk is cut, or lines_type cannot tell)."""
    if chunk.skip or chunk.take is not None:
        return None
    data = _kept_bytes(*place)
    return lines_type(data, chunk.total) if data else None


def lines_type(data: bytes, count: int | None = None) -> pa.DataType | None:
    """The type records_to_array(parse_lines(data)) has, by pyarrow's JSON
    reader (C++: no Python object per value), or None where the two may
    differ: a value the reader refuses (kinds mixed in one field, a key
    twice in an object), an integer that may not fit int64, a count of
    lines other than `count`.  The reader types RFC 3339 text as
    timestamps, which are text here."""
    try:
        table = pj.read_json(
            pa.py_buffer(data), read_options=pj.ReadOptions(use_threads=False, block_size=len(data) + 1)
        )
    except (pa.ArrowException, ValueError):
        return None
    if count is not None and table.num_rows != count:
        return None
    found = _json_kinds(pa.struct(list(table.schema)))
    if found is None or (_holds_doubles(found) and _LONG_INTEGER in data.translate(_DIGITS)):
        # an integer of 19 digits or more may not fit int64: the records
        # make it text, the reader a double
        return None
    return found


# each byte -> "0" for a digit, "." for a point, " " for any other: a run
# of 19 digits after no point (an integer's, or text's) is then found by
# `in` at memchr speed (a regex took 15 ms per MB).  Digits after a point
# are a fraction, a double either way: Beats' `0.0066123569921588965` sent
# 6 of 8 sampled chunks to be typed from their records (0.15 s).
_DIGITS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x2E if b == 0x2E else 0x20 for b in range(256))
_LONG_INTEGER = b" " + b"0" * 19


def _holds_doubles(t: pa.DataType) -> bool:
    if pa.types.is_struct(t):
        return any(_holds_doubles(f.type) for f in t)
    if pa.types.is_list(t):
        return _holds_doubles(t.value_type)
    return t == pa.float64()


def _json_kinds(t: pa.DataType) -> pa.DataType | None:
    """`t` with timestamps as text (None: a type no JSON value has here)."""
    if pa.types.is_struct(t):
        fields = [(f.name, _json_kinds(f.type)) for f in t]
        if any(sub is None for _, sub in fields):
            return None
        return pa.struct([pa.field(name, sub) for name, sub in fields])
    if pa.types.is_list(t):
        item = _json_kinds(t.value_type)
        return None if item is None else pa.list_(item)
    if pa.types.is_timestamp(t):
        return pa.string()
    return t if t in _JSON_KINDS else None


_JSON_KINDS = {pa.null(), pa.bool_(), pa.int64(), pa.float64(), pa.string()}


def spark_schema(inferred: Inferred, types: str) -> StructType:
    if types == "parquet":
        if inferred.plan is None or inferred.plan.kind != "struct":
            return StructType([])
        return StructType([StructField(f.name, typed_spark_type(f.type), True) for f in inferred.plan.out])
    spark_type = json_spark_type(inferred.json_type)
    return spark_type if isinstance(spark_type, StructType) else StructType([])


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
