"""Kept Arrow batches (fmtfs.spark.kept): found only for the same native
bytes, view, schema and options; bounded by keptBytes, oldest-used first.
No Spark session: the batches are built as a task builds them."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pyarrow as pa
import pytest

from fmtfs.spark import open_tree, view_files
from fmtfs.spark.kept import KeptBatches, kept_dir, trim
from fmtfs.spark.plan import plan_partitions
from fmtfs.spark.source import current_streams, format_for

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
