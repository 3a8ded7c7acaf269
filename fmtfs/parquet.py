"""Records -> Parquet files (the `parquet/` mirror of every record view).

Records arrive in their JSON shape (LAYOUT.md §2), one batch per chunk of
the view.  The twin holds the same records with typed columns:

Inference.  Each batch becomes an Arrow struct array in C++ (`pa.array`),
and the batch types are unified field by field, so the schema fits every
record of the view (objects -> structs with the union of their keys, in
first-seen order; arrays -> lists; int -> int64; int mixed with float ->
float64).  Values of conflicting kinds in one field (a string here, a
number there) become a string column holding their JSON text, as Spark's
JSON reader does.  A field that is always null becomes a string column (unless declared); an
object that is always empty is left out (Parquet cannot store a struct
without fields, and Spark's JSON reader drops it too).

Declared kinds.  The format declares the kinds of its views' fields
(fmtfs.formats.schema, Format.view_schema); the twin follows them and
guesses nothing from what a string looks like:

- a TIME field of unit s/ms/us/ns becomes a UTC timestamp of that unit
  (Parquet has no seconds unit: whole seconds are stored as milliseconds).
  Spark cannot read Parquet nanosecond timestamps, so a nanosecond field
  `K` becomes a microsecond timestamp `K` plus an int64 column `K_ns`
  holding the exact nanoseconds since the epoch right after it: nothing is
  lost and Spark reads both.  A declared time field holding anything but
  RFC 3339 text (a raw integer for a time beyond the calendar) stays as
  inferred: the twin never drops a value the view shows.
- a BYTES field `K`: `K` and `K_base64` are the same bytes spelled two
  ways (UTF-8 text or base64); they merge into ONE binary column `K`
  holding the raw bytes of every record, and `K_base64` disappears.
- any other `K_base64` (text base64'd only when it is not UTF-8: a gvfs
  path, a key name) is a binary column of the raw bytes, null where `K`
  was valid UTF-8; `K` stays a string column.
- INT/FLOAT/BOOL/STRING fields have that type even when always null;
  NESTED fields are structs whose declared children follow these rules;
  an ARROW field (a proio message typed by its descriptor) is cast to its
  type: integers spelled as strings (protobuf's JSON mapping) become
  integers, base64 strings in a binary column are decoded, JSON objects
  become maps where a map is declared, missing struct fields are null.

Limits: a view whose records are all empty objects has no column, and
Parquet cannot hold rows without columns (its twin has no rows).

Bounded memory.  The schema must fit every record, but a view may be
larger than memory, so a twin is written in two passes over its batches
(write_twin).  The first converts each batch (one chunk of the index) to
Arrow, folds its type and the facts the typing rules need (Shape: the
unified type; the declared time fields that hold something other than
time text) into O(schema) state, and spills the Arrow batch to a
scratch file beside the target (IPC, no native decoding twice).  The second
reads the spill back batch by batch, types it by the plan and hands row
groups to a pyarrow ParquetWriter.  Peak memory is a few chunks plus one
row group, whatever the size of the view.  The plan does not depend on how
the records are cut into batches.

The file is built once per state of the view (the caller names it by the
view's identity), written to a temporary file and renamed, so a reader
never sees a half-written twin.  Row groups hold a bounded number of rows
so that Spark splits one file into several tasks."""

from __future__ import annotations

import base64
import math
import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from fmtfs.formats.base import BadRecord, Record
from fmtfs.formats.schema import Field, Kind, ViewSchema
from fmtfs.shape import parse_time

# pyarrow.compute and pyarrow.parquet (55 ms to import) are loaded where
# they are used: a Spark worker that only types or parses records needs
# neither (Array.cast and is_null load pyarrow.compute themselves).

# Row groups: about this many bytes of Arrow data each, at least MIN rows,
# and at least TARGET_GROUPS of them for a view that is not tiny, so Spark
# (which splits files by byte ranges and assigns row groups by their
# midpoint) reads one twin with several tasks.
ROW_GROUP_BYTES = 8 << 20
ROW_GROUP_MIN_ROWS = 1024
TARGET_GROUPS = 8

SUFFIX = "_base64"


# -- JSON-shaped records -> Arrow -------------------------------------------


def records_to_array(records: Sequence[Record], type_: pa.DataType | None = None) -> pa.StructArray:
    """One batch of records as a struct array, converted in C++ when the
    values allow; with conflicting kinds in a field, through the slow path
    that turns the odd values into JSON text."""
    try:
        arr = pa.array(records, type=type_) if type_ is not None else pa.array(records)
        if pa.types.is_struct(arr.type) or not records:
            return arr
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        pass
    if type_ is None:
        type_ = pa.struct([])
        for record in records:
            type_ = unify(type_, _python_type(record))
    return pa.array([_normalize(r, type_) for r in records], type=type_)


def _python_type(value: Any) -> pa.DataType:
    """The Arrow type of one JSON value (the slow path of inference)."""
    if value is None:
        return pa.null()
    if isinstance(value, bool):
        return pa.bool_()
    if isinstance(value, int):
        return pa.int64() if -(1 << 63) <= value < 1 << 63 else pa.string()
    if isinstance(value, float):
        return pa.float64()
    if isinstance(value, str):
        return pa.string()
    if isinstance(value, dict):
        return pa.struct([pa.field(k, _python_type(v)) for k, v in value.items()])
    if isinstance(value, list):
        item: pa.DataType = pa.null()
        for v in value:
            item = unify(item, _python_type(v))
        return pa.list_(item)
    return pa.string()


def _normalize(value: Any, type_: pa.DataType) -> Any:
    """`value` reshaped to fit `type_`: anything a string column gets that is
    not a string becomes its JSON text."""
    if value is None:
        return None
    if pa.types.is_string(type_):
        return value if isinstance(value, str) else orjson.dumps(value).decode()
    if pa.types.is_struct(type_):
        if not isinstance(value, dict):
            return None
        return {f.name: _normalize(value.get(f.name), f.type) for f in type_}
    if pa.types.is_list(type_):
        if not isinstance(value, list):
            return None
        return [_normalize(v, type_.value_type) for v in value]
    return value


def unify(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """The narrowest type holding values of both types (JSON kinds only)."""
    if a.equals(b):
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        fields = {f.name: f.type for f in a}
        for f in b:
            fields[f.name] = unify(fields[f.name], f.type) if f.name in fields else f.type
        return pa.struct([pa.field(name, t) for name, t in fields.items()])
    if pa.types.is_list(a) and pa.types.is_list(b):
        return pa.list_(unify(a.value_type, b.value_type))
    numbers = {pa.int64(), pa.float64()}
    if a in numbers and b in numbers:
        return pa.float64()
    return pa.string()


def conform(arr: pa.Array, type_: pa.DataType) -> pa.Array:
    """`arr` as `type_`: struct fields matched by name (missing ones null),
    lists element-wise, scalars cast; what cannot be cast becomes JSON text."""
    if arr.type.equals(type_):
        return arr
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), type_)
    if pa.types.is_struct(type_) and pa.types.is_struct(arr.type):
        names = {arr.type.field(i).name: i for i in range(arr.type.num_fields)}
        children = [
            conform(arr.field(names[f.name]), f.type) if f.name in names else pa.nulls(len(arr), f.type)
            for f in type_
        ]
        return pa.StructArray.from_arrays(children, fields=list(type_), mask=_null_mask(arr))
    if pa.types.is_list(type_) and pa.types.is_list(arr.type):
        values = conform(arr.values, type_.value_type)
        return pa.ListArray.from_arrays(arr.offsets, values, type=type_, mask=_null_mask(arr))
    if pa.types.is_string(type_) and (pa.types.is_struct(arr.type) or pa.types.is_list(arr.type)):
        return pa.array(
            [None if v is None else orjson.dumps(v).decode() for v in arr.to_pylist()], type=type_
        )
    if pa.types.is_map(type_) and pa.types.is_struct(arr.type):
        # a JSON object with data keys (a protobuf map): the keys it has
        rows = [
            None if v is None else [(k, x) for k, x in v.items() if x is not None] for v in arr.to_pylist()
        ]
        keys = pa.array([k for row in rows if row for k, _ in row], pa.string())
        items = pa.array([x for row in rows if row for _, x in row])
        offsets = [0]
        for row in rows:
            offsets.append(offsets[-1] + (len(row) if row else 0))
        return pa.MapArray.from_arrays(
            pa.array(offsets, pa.int32()),
            conform(keys, type_.key_type),
            conform(items, type_.item_type),
            type=type_,
            mask=_null_mask(arr),
        )
    if pa.types.is_binary(type_) and pa.types.is_string(arr.type):
        # only declared schemas get here: protobuf's JSON mapping spells bytes in base64
        return _b64_decode(arr, type_)
    return arr.cast(type_)


def _null_mask(arr: pa.Array) -> pa.Array | None:
    return arr.is_null() if arr.null_count else None


# -- typing plan: JSON shape + declaration -> typed columns -----------------

# A field's place in the JSON shape: struct keys, LIST_ITEM for list items.
FieldPath = tuple[str | None, ...]
LIST_ITEM = None

_SCALARS = {
    Kind.INT: (pa.int64(), pa.types.is_integer),
    Kind.FLOAT: (pa.float64(), lambda t: pa.types.is_integer(t) or pa.types.is_floating(t)),
    Kind.BOOL: (pa.bool_(), pa.types.is_boolean),
    Kind.STRING: (pa.string(), pa.types.is_string),
}


@dataclass
class Plan:
    """How one field of the JSON shape becomes typed column(s)."""

    kind: str  # keep | drop | null | cast | time | bytes | struct | list
    out: pa.DataType | None = None  # type of the column produced
    unit: str = ""  # time unit of the text
    merge: str | None = None  # bytes: name of the K_base64 sibling folded into K
    children: dict[str, Plan] = field(default_factory=dict)
    item: Plan | None = None
    name: str = ""  # output name


def declared_times(schema: ViewSchema | None) -> dict[FieldPath, str]:
    """The paths of the declared TIME fields (through NESTED children) and
    their units."""
    out: dict[FieldPath, str] = {}

    def walk(fields: Iterable[Field], path: FieldPath) -> None:
        for f in fields:
            if f.kind is Kind.TIME:
                out[(*path, f.name)] = f.unit
            walk(f.children, (*path, f.name))

    walk(schema or (), ())
    return out


def _as_times(arr: pa.Array, unit: str) -> pa.Array | None:
    """The instants of a column of RFC 3339 text (a zone is required), or
    None when a value is something else."""
    type_ = pa.timestamp(unit, tz="UTC")
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), type_)
    if not pa.types.is_string(arr.type):
        return None
    try:
        return arr.cast(type_)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _lenient_times(arr: pa.Array, unit: str) -> pa.Array:
    """_as_times, with null for a value that is not a time (a batch the
    Spark data source's sampled plan did not see)."""
    exact = _as_times(arr, unit)
    if exact is not None:
        return exact
    values = []
    for value in arr.to_pylist():
        try:
            values.append(parse_time(value, unit) if isinstance(value, str) else None)
        except BadRecord:
            values.append(None)
    return pa.array(values, pa.int64()).cast(pa.timestamp(unit, tz="UTC"))


class Shape:
    """The JSON shape of a view, learnt batch by batch in O(schema) memory:
    the unified Arrow type of its records and which declared time fields
    hold something other than time text (they stay as inferred).  Feeding
    the same records cut into batches differently gives the same plan."""

    def __init__(self, schema: ViewSchema | None = None) -> None:
        self.schema = schema
        self.type: pa.DataType = pa.struct([])
        self.rows = 0
        self.nbytes = 0  # of the JSON-shaped Arrow batches (sizes row groups)
        self.times = declared_times(schema)
        self.not_times: set[FieldPath] = set()

    def add(self, arr: pa.Array) -> None:
        self.type = unify(self.type, arr.type)
        self.rows += len(arr)
        self.nbytes += arr.nbytes
        for path, unit in self.times.items():
            if path not in self.not_times:
                column = _at(arr, path)
                if column is not None and _as_times(column, unit) is None:
                    self.not_times.add(path)

    def plan(self) -> Plan:
        """The typed shape of the records (see the module docstring)."""
        return _plan_struct(self.type, (), self, _by_name(self.schema or ()), "")


def _at(arr: pa.Array, path: FieldPath) -> pa.Array | None:
    """The values at `path` in a struct array, None when it has no such key."""
    for name in path:
        if not pa.types.is_struct(arr.type) or arr.type.get_field_index(name) < 0:
            return None
        arr = arr.field(name)
    return arr


def _by_name(fields: Iterable[Field]) -> dict[str, Field]:
    return {f.name: f for f in fields}


def make_plan(arrays: Sequence[pa.Array], schema: ViewSchema | None = None) -> Plan:
    """Decide the typed shape of a struct type from all its values."""
    shape = Shape(schema)
    for arr in arrays:
        shape.add(arr)
    return shape.plan()


def _plan(type_: pa.DataType, path: FieldPath, shape: Shape, declared: Field | None, name: str) -> Plan:
    kind = declared.kind if declared is not None else None
    if (
        kind is Kind.TIME
        and path not in shape.not_times
        and (pa.types.is_null(type_) or pa.types.is_string(type_))
    ):
        assert declared is not None
        # Spark cannot read Parquet nanosecond timestamps: microseconds, and `K_ns`
        out_unit = "us" if declared.unit == "ns" else declared.unit
        return Plan("time", pa.timestamp(out_unit, tz="UTC"), unit=declared.unit, name=name)
    if kind is Kind.ARROW:
        assert declared is not None
        return Plan("cast", declared.arrow, name=name)
    if kind in _SCALARS:
        out, fits = _SCALARS[kind]
        if pa.types.is_null(type_) or fits(type_):
            return Plan("cast", out, name=name)
    if pa.types.is_null(type_):
        return Plan("null", pa.string(), name=name)
    if pa.types.is_struct(type_):
        children = declared.children if kind is Kind.NESTED and declared is not None else ()
        return _plan_struct(type_, path, shape, _by_name(children), name)
    if pa.types.is_list(type_):
        item = _plan(type_.value_type, (*path, LIST_ITEM), shape, None, name)
        if item.kind == "drop":
            return Plan("drop", name=name)
        return Plan("list", pa.list_(item.out), item=item, name=name)
    return Plan("keep", type_, name=name)


def _plan_struct(
    type_: pa.StructType, path: FieldPath, shape: Shape, declared: dict[str, Field], name: str
) -> Plan:
    names = [type_.field(i).name for i in range(type_.num_fields)]
    kinds = {n: type_.field(n).type for n in names}
    children: dict[str, Plan] = {}
    merged: set[str] = set()
    for key in names:
        if key in merged:
            continue
        ktype = kinds[key]
        if key.endswith(SUFFIX) and _is_text(ktype):
            base = key[: -len(SUFFIX)]
            if _is_bytes(declared.get(base)) and _is_text_or_null(kinds.get(base, pa.null())):
                # K_base64 before K (or K absent): K is produced at the first one seen
                children[base] = Plan("bytes", _bytes_type(ktype), merge=key, name=base)
                merged.add(base)
            else:  # text base64'd when not UTF-8, declared or not: its raw bytes
                children[key] = Plan("bytes", _bytes_type(ktype), name=key)
            continue
        if _is_bytes(declared.get(key)) and _is_text_or_null(ktype):
            sibling = key + SUFFIX
            merge = sibling if sibling in kinds and _is_text(kinds[sibling]) else None
            out = _bytes_type(kinds[sibling]) if merge else pa.binary()
            if pa.types.is_list(ktype):
                out = pa.list_(pa.binary())
            children[key] = Plan("bytes", out, merge=merge, name=key)
            if merge:
                merged.add(merge)
            continue
        plan = _plan(ktype, (*path, key), shape, declared.get(key), key)
        if plan.kind != "drop":
            children[key] = plan
    if not children:
        return Plan("drop", name=name)
    fields = []
    for key, plan in children.items():
        fields.append(pa.field(key, plan.out))
        if plan.kind == "time" and plan.unit == "ns":
            fields.append(pa.field(key + "_ns", pa.int64()))
    return Plan("struct", pa.struct(fields), children=children, name=name)


def _is_bytes(declared: Field | None) -> bool:
    return declared is not None and declared.kind is Kind.BYTES


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or (pa.types.is_list(t) and pa.types.is_string(t.value_type))


def _is_text_or_null(t: pa.DataType) -> bool:
    return pa.types.is_null(t) or _is_text(t) or (pa.types.is_list(t) and pa.types.is_null(t.value_type))


def _bytes_type(t: pa.DataType) -> pa.DataType:
    return pa.list_(pa.binary()) if pa.types.is_list(t) else pa.binary()


def apply_plan(plan: Plan, arr: pa.StructArray) -> pa.StructArray:
    """One batch in its JSON shape -> the typed struct array of `plan`."""
    return _apply(plan, arr)[0][1]


def _apply(plan: Plan, arr: pa.Array) -> list[tuple[str, pa.Array]]:
    kind = plan.kind
    if kind == "keep":
        return [(plan.name, arr)]
    if kind == "null":
        return [(plan.name, pa.nulls(len(arr), pa.string()))]
    if kind == "cast":
        return [(plan.name, conform(arr, plan.out))]
    if kind == "time":
        exact = _lenient_times(arr, plan.unit)
        if plan.unit != "ns":
            return [(plan.name, exact)]
        micros = exact.cast(pa.timestamp("us", tz="UTC"), safe=False)
        return [(plan.name, micros), (plan.name + "_ns", exact.cast(pa.int64()))]
    if kind == "list":
        assert plan.item is not None
        values = _apply(plan.item, arr.flatten())[0][1]
        return [
            (plan.name, pa.ListArray.from_arrays(arr.offsets, values, type=plan.out, mask=_null_mask(arr)))
        ]
    if kind == "struct":
        names = {arr.type.field(i).name for i in range(arr.type.num_fields)}
        columns: list[tuple[str, pa.Array]] = []
        for key, child in plan.children.items():
            if child.kind == "bytes":
                columns.append((key, _bytes_column(child, arr, names)))
            else:
                columns.extend(_apply(child, arr.field(key)))
        fields = [pa.field(n, c.type) for n, c in columns]
        return [
            (
                plan.name,
                pa.StructArray.from_arrays([c for _, c in columns], fields=fields, mask=_null_mask(arr)),
            )
        ]
    raise AssertionError(kind)


def _bytes_column(plan: Plan, parent: pa.StructArray, names: set[str]) -> pa.Array:
    """The raw bytes: UTF-8 text cast to binary, base64 text decoded, merged."""
    text_key = plan.name if not plan.name.endswith(SUFFIX) or plan.merge else None
    b64_key = plan.merge if plan.merge else (plan.name if plan.name.endswith(SUFFIX) else None)
    if text_key is not None and text_key == b64_key:
        text_key = None
    out: pa.Array | None = None
    if text_key is not None and text_key in names:
        out = _as_binary(parent.field(text_key), plan.out)
    if b64_key is not None and b64_key in names:
        decoded = _b64_decode(parent.field(b64_key), plan.out)
        if out is None:
            out = decoded
        else:
            import pyarrow.compute as pc

            out = pc.coalesce(out, decoded)
    return out if out is not None else pa.nulls(len(parent), plan.out)


def _as_binary(arr: pa.Array, type_: pa.DataType) -> pa.Array:
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), type_)
    return arr.cast(type_)  # utf8 -> binary reuses the buffers


def _b64_decode(arr: pa.Array, type_: pa.DataType) -> pa.Array:
    """base64 text -> bytes.  Arrow has no base64 kernel; only the non-null
    values go through Python (they are the rare non-UTF-8 payloads)."""
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), type_)
    if pa.types.is_list(type_):
        values = _b64_decode(arr.values, type_.value_type)
        return pa.ListArray.from_arrays(arr.offsets, values, type=type_, mask=_null_mask(arr))
    if arr.null_count == len(arr):
        return pa.nulls(len(arr), type_)
    decode = base64.b64decode
    return pa.array([None if v is None else decode(v) for v in arr.to_pylist()], type=type_)


# -- writing a twin ------------------------------------------------------------


def records_table(batches: Iterable[list[Record]], schema: ViewSchema | None = None) -> pa.Table:
    """Every batch of records as one typed table, in memory (for small
    inputs and tests; twins are written by write_twin)."""
    arrays = [records_to_array(batch) for batch in batches if batch]
    shape = Shape(schema)
    for arr in arrays:
        shape.add(arr)
    typer = Typer(shape)
    if typer.no_rows:
        return typer.schema.empty_table()
    return pa.Table.from_batches([typer.batch(a) for a in arrays], schema=typer.schema)


class Typer:
    """JSON-shaped Arrow batches -> typed record batches of one schema."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.plan = shape.plan() if shape.rows else None
        if self.plan is None or self.plan.kind == "drop":
            self.schema = pa.schema([])  # rows without columns cannot be stored (documented)
        else:
            self.schema = pa.schema(list(self.plan.out))
        # no records, or records without any column: Parquet cannot hold them
        self.no_rows = not self.schema.names

    def batch(self, arr: pa.StructArray) -> pa.RecordBatch:
        """One spilled batch, typed (only while the schema has columns)."""
        assert self.plan is not None
        return pa.RecordBatch.from_struct_array(apply_plan(self.plan, conform(arr, self.shape.type)))


def group_rows(rows: int, nbytes: int) -> int:
    """Rows per row group: about ROW_GROUP_BYTES each, at least MIN rows, and
    at least TARGET_GROUPS groups for a view that is not tiny."""
    if rows == 0:
        return ROW_GROUP_MIN_ROWS
    by_bytes = max(1, ROW_GROUP_BYTES // max(1, nbytes // rows))
    return max(ROW_GROUP_MIN_ROWS, min(by_bytes, math.ceil(rows / TARGET_GROUPS)))


def ipc_bytes(arr: pa.StructArray) -> bytes:
    """A struct array as one Arrow IPC stream (its schema, one batch)."""
    batch = pa.RecordBatch.from_struct_array(arr)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.StructArray:
    return pa.ipc.open_stream(data).read_next_batch().to_struct_array()


class Spill:
    """A scratch file of Arrow batches of varying types (IPC messages, each
    with its schema), written once and read back in order."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = open(path, "w+b")  # noqa: SIM115 - closed by close()
        self.count = 0

    def put(self, arr: pa.StructArray) -> None:
        data = ipc_bytes(arr)
        self.file.write(len(data).to_bytes(8, "little"))
        self.file.write(data)
        self.count += 1

    def __iter__(self) -> Iterator[pa.StructArray]:
        self.file.seek(0)
        for _ in range(self.count):
            size = int.from_bytes(self.file.read(8), "little")
            yield from_ipc(self.file.read(size))

    def close(self) -> None:
        self.file.close()
        self.path.unlink(missing_ok=True)


class SchemaChanged(Exception):
    """The records need another schema than the one expected (write_twin)."""


def write_twin(
    batches: Iterable[list[Record] | pa.StructArray],
    schema: ViewSchema | None,
    target: Path,
    shape: Shape | None = None,
    expect: pa.Schema | None = None,
) -> int:
    """Records -> the Parquet twin at `target` (atomic), row group by row
    group in bounded memory (see the module docstring).  Returns the rows.
    A batch is a list of records or their struct array (records_to_array).
    `shape`: what earlier records of the view taught (new rows of a grown
    view are typed as the whole view; it is updated); with `expect`, raises
    SchemaChanged, writing nothing, if the records need another schema."""
    scratch = f"{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    tmp = target.with_name(scratch + ".tmp")
    spill = Spill(target.with_name(scratch + ".spill"))
    try:
        shape = Shape(schema) if shape is None else shape
        for batch in batches:
            arr = batch if isinstance(batch, pa.Array) else records_to_array(batch) if batch else None
            if arr is not None and len(arr):
                shape.add(arr)
                spill.put(arr)
        typer = Typer(shape)
        if expect is not None and not typer.schema.equals(expect, check_metadata=False):
            raise SchemaChanged(f"{target.name}: {typer.schema} is not {expect}")
        rows = _write_groups(typer, spill, tmp, group_rows(shape.rows, shape.nbytes))
        os.replace(tmp, target)
        return rows
    finally:
        spill.close()
        tmp.unlink(missing_ok=True)


def _write_groups(typer: Typer, spill: Spill, tmp: Path, per_group: int) -> int:
    import pyarrow.parquet as pq

    written = 0
    with pq.ParquetWriter(tmp, typer.schema, compression="snappy") as writer:
        if typer.no_rows:
            return 0
        pending: list[pa.RecordBatch] = []
        held = 0
        for arr in spill:
            batch = typer.batch(arr)
            pending.append(batch)
            held += batch.num_rows
            while held >= per_group:
                table = pa.Table.from_batches(pending, schema=typer.schema)
                writer.write_table(table.slice(0, per_group), row_group_size=per_group)
                rest = table.slice(per_group)
                pending, held = rest.to_batches(), rest.num_rows
                written += per_group
        if held:
            writer.write_table(pa.Table.from_batches(pending, schema=typer.schema), row_group_size=held)
            written += held
    return written


def write_parquet(batches: Iterable[list[Record]], schema: ViewSchema | None, target: Path) -> None:
    """Records -> the Parquet twin at `target` (atomic)."""
    write_twin(batches, schema, target)
