"""Records -> Parquet files (the `parquet/` mirror of every record view).

Records arrive in their JSON shape (LAYOUT.md §2), one batch per chunk of
the view.  The twin holds the same records with typed columns:

Inference.  Each batch becomes an Arrow struct array in C++ (`pa.array`),
and the batch types are unified field by field, so the schema fits every
record of the view (objects -> structs with the union of their keys, in
first-seen order; arrays -> lists; int -> int64; int mixed with float ->
float64).  Values of conflicting kinds in one field (a string here, a
number there) become a string column holding their JSON text, as Spark's
JSON reader does.  A field that is always null becomes a string column; an
object that is always empty is left out (Parquet cannot store a struct
without fields, and Spark's JSON reader drops it too).

Times.  A string field whose every value is an RFC 3339 UTC time with one
fixed precision (`...:SSZ`, 3, 6 or 9 fraction digits; fmtfs.shape spells
every native time so) becomes a UTC timestamp of that unit (Parquet has
no seconds unit: whole seconds are stored as milliseconds).  Spark cannot
read Parquet nanosecond timestamps, so a nanosecond field `K` becomes a
microsecond timestamp `K` plus an int64 column `K_ns` holding the exact
nanoseconds since the epoch right after it: nothing is lost and Spark
reads both.

Bytes.  `K_base64` always becomes a binary column with the decoded bytes.
When `K` names opaque bytes (`data`, `payload`, or a key the format lists
in fmtfs.schemas), `K` and `K_base64` are the same bytes spelled two ways
(UTF-8 text or base64): they merge into ONE binary column `K` holding the
raw bytes of every record, and `K_base64` disappears.  When `K` is text
that is only base64'd when not UTF-8 (a gvfs path, a key name), `K` stays a
string column and `K_base64` is a binary column of the raw bytes, null
where `K` was valid UTF-8.

A format may declare its own schema (Format.parquet_schema; fmtfs.schemas
builds one from a protobuf descriptor); the inferred columns are then cast
to it by name: integers spelled as strings (protobuf's JSON mapping) become
integers, base64 strings in a declared binary column are decoded, JSON
objects become maps where a map is declared, missing columns are null and
undeclared ones are left out.

Limits: a view whose records are all empty objects has no column, and
Parquet cannot hold rows without columns (its twin has no rows); the
whole view is held as Arrow arrays while its twin is built (about the size
of its JSON).

The file is built once per state of the view (the caller names it by the
view's identity), written to a temporary file and renamed, so a reader
never sees a half-written twin.  Row groups hold a bounded number of rows
so that Spark splits one file into several tasks."""

from __future__ import annotations

import base64
import itertools
import math
import os
import threading
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fmtfs.formats.base import Record

# Row groups: about this many bytes of Arrow data each, at least MIN rows,
# and at least TARGET_GROUPS of them for a view that is not tiny, so Spark
# (which splits files by byte ranges and assigns row groups by their
# midpoint) reads one twin with several tasks.
ROW_GROUP_BYTES = 8 << 20
ROW_GROUP_MIN_ROWS = 1024
TARGET_GROUPS = 8
# Part of every twin's file name: a change of the typing rules rebuilds twins.
VERSION = 1

DEFAULT_BYTES_KEYS = frozenset({"data", "payload"})
SUFFIX = "_base64"
TIME_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{3}|\.\d{6}|\.\d{9})?Z$"
# length of the RFC 3339 text -> timestamp unit
TIME_UNITS = {20: "s", 24: "ms", 27: "us", 30: "ns"}


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
    return pc.cast(arr, type_)


def _null_mask(arr: pa.Array) -> pa.Array | None:
    return pc.is_null(arr) if arr.null_count else None


# -- typing plan: JSON shape -> typed columns --------------------------------


@dataclass
class Plan:
    """How one field of the JSON shape becomes typed column(s)."""

    kind: str  # keep | drop | null | time | bytes | struct | list
    out: pa.DataType | None = None  # type of the column produced
    unit: str = ""  # time unit of the text
    merge: str | None = None  # bytes: name of the K_base64 sibling folded into K
    children: dict[str, Plan] = field(default_factory=dict)
    item: Plan | None = None
    name: str = ""  # output name


def make_plan(arrays: Sequence[pa.Array], bytes_keys: frozenset[str]) -> Plan:
    """Decide the typed shape of a struct type from all its values."""
    type_ = arrays[0].type
    return _plan(type_, arrays, bytes_keys, "")


def _plan(type_: pa.DataType, arrays: Sequence[pa.Array], bytes_keys: frozenset[str], name: str) -> Plan:
    if pa.types.is_null(type_):
        return Plan("null", pa.string(), name=name)
    if pa.types.is_struct(type_):
        return _plan_struct(type_, arrays, bytes_keys, name)
    if pa.types.is_list(type_):
        item = _plan(type_.value_type, [a.flatten() for a in arrays], bytes_keys, name)
        if item.kind == "drop":
            return Plan("drop", name=name)
        if item.kind == "time" and item.unit == "ns":  # no `_ns` twin inside lists: keep the text
            item = Plan("keep", type_.value_type, name=name)
        return Plan("list", pa.list_(item.out), item=item, name=name)
    if pa.types.is_string(type_):
        unit = _time_unit(arrays)
        if unit:
            out_unit = "us" if unit == "ns" else unit
            return Plan("time", pa.timestamp(out_unit, tz="UTC"), unit=unit, name=name)
    return Plan("keep", type_, name=name)


def _plan_struct(
    type_: pa.StructType, arrays: Sequence[pa.Array], bytes_keys: frozenset[str], name: str
) -> Plan:
    names = [type_.field(i).name for i in range(type_.num_fields)]
    kinds = {n: type_.field(n).type for n in names}
    children: dict[str, Plan] = {}
    merged: set[str] = set()
    for key in names:
        if key in merged:
            continue
        child = [a.field(key) for a in arrays]
        ktype = kinds[key]
        if key.endswith(SUFFIX) and _is_text(ktype):
            base = key[: -len(SUFFIX)]
            if base in bytes_keys and _is_text_or_null(kinds.get(base, pa.null())):
                # K_base64 before K (or K absent): K is produced at the first one seen
                children[base] = Plan("bytes", _bytes_type(ktype), merge=key, name=base)
                merged.add(base)
            else:
                children[key] = Plan("bytes", _bytes_type(ktype), name=key)
            continue
        if key in bytes_keys and _is_text_or_null(ktype):
            sibling = key + SUFFIX
            merge = sibling if sibling in kinds and _is_text(kinds[sibling]) else None
            out = _bytes_type(kinds[sibling]) if merge else pa.binary()
            if pa.types.is_list(ktype):
                out = pa.list_(pa.binary())
            children[key] = Plan("bytes", out, merge=merge, name=key)
            if merge:
                merged.add(merge)
            continue
        plan = _plan(ktype, child, bytes_keys, key)
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


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or (pa.types.is_list(t) and pa.types.is_string(t.value_type))


def _is_text_or_null(t: pa.DataType) -> bool:
    return pa.types.is_null(t) or _is_text(t) or (pa.types.is_list(t) and pa.types.is_null(t.value_type))


def _bytes_type(t: pa.DataType) -> pa.DataType:
    return pa.list_(pa.binary()) if pa.types.is_list(t) else pa.binary()


def _time_unit(arrays: Sequence[pa.Array]) -> str:
    """The unit when every value is an RFC 3339 UTC time of one precision."""
    column = pa.chunked_array(arrays, type=pa.string())
    if column.null_count == len(column):
        return ""
    lengths = pc.min_max(pc.utf8_length(column)).as_py()
    if lengths["min"] != lengths["max"] or lengths["min"] not in TIME_UNITS:
        return ""
    if not pc.all(pc.match_substring_regex(column, TIME_PATTERN)).as_py():
        return ""
    return TIME_UNITS[lengths["min"]]


def apply_plan(plan: Plan, arr: pa.StructArray) -> pa.StructArray:
    """One batch in its JSON shape -> the typed struct array of `plan`."""
    return _apply(plan, arr)[0][1]


def _apply(plan: Plan, arr: pa.Array) -> list[tuple[str, pa.Array]]:
    kind = plan.kind
    if kind == "keep":
        return [(plan.name, arr)]
    if kind == "null":
        return [(plan.name, pa.nulls(len(arr), pa.string()))]
    if kind == "time":
        exact = pc.cast(arr, pa.timestamp(plan.unit, tz="UTC"))
        if plan.unit != "ns":
            return [(plan.name, exact)]
        micros = pc.cast(exact, pa.timestamp("us", tz="UTC"), safe=False)
        return [(plan.name, micros), (plan.name + "_ns", pc.cast(exact, pa.int64()))]
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
        out = decoded if out is None else pc.coalesce(out, decoded)
    return out if out is not None else pa.nulls(len(parent), plan.out)


def _as_binary(arr: pa.Array, type_: pa.DataType) -> pa.Array:
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), type_)
    return pc.cast(arr, type_)  # utf8 -> binary reuses the buffers


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


# -- building a table --------------------------------------------------------


def records_table(
    batches: Iterable[list[Record]],
    schema: pa.Schema | None = None,
    bytes_keys: Iterable[str] = DEFAULT_BYTES_KEYS,
) -> pa.Table:
    """Every batch of records as one typed table (see the module docstring)."""
    arrays: list[pa.StructArray] = []
    type_: pa.DataType = pa.struct([])
    for batch in batches:
        if not batch:
            continue
        arr = records_to_array(batch)
        arrays.append(arr)
        type_ = unify(type_, arr.type)
    if not arrays:
        return (schema or pa.schema([])).empty_table()
    arrays = [conform(a, type_) for a in arrays]
    plan = make_plan(arrays, frozenset(bytes_keys))
    if plan.kind == "drop":  # only empty objects: rows without columns
        typed = [
            pa.RecordBatch.from_struct_array(pa.array([{}] * len(a), type=pa.struct([]))) for a in arrays
        ]
        return pa.Table.from_batches(typed)
    out = [pa.RecordBatch.from_struct_array(apply_plan(plan, a)) for a in arrays]
    table = pa.Table.from_batches(out)
    if schema is not None:
        table = conform_table(table, schema)
    return table


def conform_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Cast a table to a declared schema (columns by name, missing ones null)."""
    struct_type = pa.struct(list(schema))
    batches = [
        pa.RecordBatch.from_struct_array(conform(b.to_struct_array(), struct_type))
        for b in table.to_batches()
    ]
    return pa.Table.from_batches(batches, schema=schema)


def row_group_rows(table: pa.Table) -> int:
    rows = table.num_rows
    if rows == 0:
        return ROW_GROUP_MIN_ROWS
    per_row = max(1, table.nbytes // rows)
    by_bytes = max(1, ROW_GROUP_BYTES // per_row)
    return max(ROW_GROUP_MIN_ROWS, min(by_bytes, math.ceil(rows / TARGET_GROUPS)))


def write_table(table: pa.Table, target: Path) -> None:
    """Write `table` to `target` atomically (temporary file + rename)."""
    tmp = target.with_name(f"{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        pq.write_table(table, tmp, row_group_size=row_group_rows(table), compression="snappy")
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_parquet(
    batches: Iterable[list[Record]],
    schema: Any,
    target: Path,
    bytes_keys: Iterable[str] = DEFAULT_BYTES_KEYS,
) -> None:
    """Records -> the Parquet twin at `target` (atomic)."""
    write_table(records_table(batches, schema, bytes_keys), target)


# One build per target at a time, across the threads of a mount.
_building: dict[str, threading.Lock] = {}
_building_lock = threading.Lock()


def build_once(target: Path, build) -> Path:
    """Run `build(target)` unless `target` exists; concurrent callers wait."""
    with _building_lock:
        lock = _building.setdefault(str(target), threading.Lock())
    with lock:
        if not target.exists():
            build(target)
    return target


def remove_older(folder: Path, prefix: str, keep: Path) -> None:
    """Drop twins of earlier states of the same view (same name prefix)."""
    for old in itertools.islice(folder.glob(prefix + "*.parquet"), 1000):
        if old != keep:
            try:
                old.unlink()
            except OSError:
                pass
