"""What a data source task imports (every Spark Python worker pays its
imports at the first query it runs): a task whose chunks all parse from
the lines the index kept opens no format and converts no records, so it
imports neither the format's decoding nor fmtfs.parquet (pyarrow.compute,
pyarrow.parquet), nor the view tree and its index.  No Spark session: the task runs in a fresh interpreter,
as a worker runs it, on a partition planned here."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

from fmtfs.samples import proio
from fmtfs.spark import open_tree, plan_partitions, view_files
from fmtfs.spark.schema import infer, spark_schema

# runs one partition as a task does, then names the modules it loaded
TASK = """
import pickle, sys
from fmtfs.spark.batch import read_batches
opts, schema, partition = pickle.loads(sys.stdin.buffer.read())
rows = sum(batch.num_rows for batch in read_batches(opts, schema, None, partition))
print(rows, *sys.modules)
"""
DECODING = ("fmtfs.formats.proio.format", "fmtfs.formats.proio.wire", "google.protobuf")
CONVERTING = ("fmtfs.parquet", "fmtfs.spark.schema", "pyarrow.compute", "pyarrow.parquet")
# the view tree and its index: the chunks a task unpickles are fmtfs.viewchunk's
TREE = ("fmtfs.views", "fmtfs.index", "sqlite3", "fmtfs.decoders")


def _task(opts: dict[str, str], schema, partition) -> tuple[int, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", TASK],
        input=pickle.dumps((opts, schema, partition)),
        capture_output=True,
        check=True,
    )
    rows, *modules = done.stdout.split()
    return int(rows), {m.decode() for m in modules}


def test_a_task_reading_kept_lines_imports_no_decoding_or_conversion(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    source = proio.generate(tmp_path / "src", 3000)
    hour_ago = time.time() - 3600  # settled: the last chunk's lines are kept too
    for path in source.rglob("*"):
        os.utime(path, (hour_ago, hour_ago))
    opts = {"path": str(source), "format": "proio", "cachedir": str(tmp_path / "c"), "view": "sample.proio"}
    tree = open_tree(opts)
    views = view_files(tree, opts["view"])
    schema = spark_schema(infer(tree, views, opts, typed=False), "json")
    (partition,) = plan_partitions(tree, views, opts | {"partitionbytes": str(1 << 40)})
    assert partition.pieces and all(partition.pieces)  # every chunk's lines kept
    rows, loaded = _task(opts, schema, partition)
    assert rows == sum(len(f.chunk_records(c)) for f in map(tree.files.get, views) for c in f.chunks())
    assert not loaded & set(DECODING + CONVERTING + TREE), loaded & set(DECODING + CONVERTING + TREE)

    # the same task with no kept lines decodes: the format is imported then
    partition.pieces = None
    rows_decoded, loaded = _task(opts, schema, partition)
    assert rows_decoded == rows
    assert "fmtfs.formats.proio.format" in loaded


def test_opening_a_tree_finds_no_twin_folder_until_a_twin_is_used(tmp_path: Path) -> None:
    """A tree makes a twin object per record view (wallaby: one per hour
    bucket); where each twin's versions live is found when the twin is
    used, not for every view each time a data source worker opens the tree."""
    from fmtfs.samples import wallaby

    (tmp_path / "src").mkdir()
    source = wallaby.generate(tmp_path / "src", 3000)
    tree = open_tree({"path": str(source), "format": "wallaby", "cachedir": str(tmp_path / "c")})
    twins = [f for name, f in tree.files.items() if name.endswith(".parquet")]
    assert len(twins) >= 2
    assert not any("home" in vars(twin) for twin in twins)
    twin = twins[0]
    assert twin.size() > 0  # built and served: its folder found then
    assert twin.home.parent == tree.twins.folder and twin.path().parent == twin.home


def test_typing_records_imports_no_pyarrow_compute_or_parquet() -> None:
    """fmtfs.parquet loads pyarrow.compute and pyarrow.parquet where they
    are used: the schema step, which types records, and a task parsing kept
    lines load neither; a cast loads pyarrow.compute, and still works."""
    code = """
import sys
from fmtfs import parquet
from fmtfs.render import parse_lines
arr = parquet.records_to_array(parse_lines(b'{"a": 1, "b": {"c": "x"}}\\n{"a": 2.5}\\n'))
print(arr.type, *sys.modules)
import pyarrow as pa
cast = parquet.conform(arr, pa.struct([("a", pa.string()), ("b", pa.struct([("c", pa.string())]))]))
print(cast.to_pylist(), *sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    typed, cast = done.stdout.splitlines()
    assert typed.startswith("struct<a: double, b: struct<c: string>>")
    assert not {"pyarrow.compute", "pyarrow.parquet"} & set(typed.split())
    assert cast.startswith("[{'a': '1', 'b': {'c': 'x'}}, {'a': '2.5', 'b': None}]")
    assert "pyarrow.compute" in cast.split()
