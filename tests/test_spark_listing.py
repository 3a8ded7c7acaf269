"""The planning step plans from the listing the schema step made
(fmtfs.spark.listing), pickled with the DataSource as Spark pickles it
between its Python workers, while the source's files are unchanged; a
source that changed since is planned from its tree, appended records
included.  No Spark session: each step runs in a fresh interpreter, as a
Spark worker runs it, on the DataSource the step before pickled."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from fmtfs.samples import wallaby
from fmtfs.spark import FmtfsDataSource, open_tree, plan_partitions, view_files

VIEW = "events.log/records.jsonl"

# the planning step as Spark's planning worker runs it: reader, then partitions
PLAN = """
import pickle, sys
from fmtfs.spark import source
source_, schema = pickle.loads(sys.stdin.buffer.read())
reader = source_.reader(schema)
partitions = reader.partitions()
print(pickle.dumps({
    "trees": len(source._trees),
    "tree_loaded": "fmtfs.views" in sys.modules,
    "index_loaded": "fmtfs.index" in sys.modules,
    "left": "_seen" in vars(source_),
    "reader": sorted(vars(pickle.loads(pickle.dumps(reader)))),
    "records": sum(c.count for p in partitions for c in p.chunks),
    "pieces": [p.pieces for p in partitions],
}).hex())
"""


def _plan(source: FmtfsDataSource, schema) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PLAN], input=pickle.dumps((source, schema)), capture_output=True, check=True
    )
    return pickle.loads(bytes.fromhex(done.stdout.decode()))


def _grow(source: Path, scratch: Path, records: int) -> None:
    """Append to the wallaby log the records a sample of `records` has beyond it."""
    scratch.mkdir()
    wallaby.generate(scratch, records)
    log = source / "events.log"
    with open(log, "ab") as out:
        out.write((scratch / "events.log").read_bytes()[log.stat().st_size :])
    (source / "events.log.idx").write_bytes((scratch / "events.log.idx").read_bytes())


@pytest.fixture()
def opts(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "src").mkdir()
    source = wallaby.generate(tmp_path / "src", 3000)
    return {"path": str(source), "format": "wallaby", "view": VIEW, "cacheDir": str(tmp_path / "cache")}


def test_the_planning_step_opens_no_tree_for_an_unchanged_source(opts: dict[str, str]) -> None:
    source = FmtfsDataSource(opts)
    schema = source.schema()
    planned = _plan(source, schema)
    assert planned["trees"] == 0  # planned from the schema step's listing
    assert not planned["tree_loaded"] and not planned["index_loaded"]  # nor imported them
    assert not planned["left"]  # nor pickled on into the tasks' command
    assert "listing" not in planned["reader"] and "columns" in planned["reader"]
    lower = {k.lower(): v for k, v in opts.items()}
    tree = open_tree(lower)
    partitions = plan_partitions(tree, view_files(tree, VIEW), lower)
    assert planned["records"] == tree.files[VIEW].record_count() == 3000
    assert planned["pieces"] == [p.pieces for p in partitions]


def test_a_source_changed_since_the_schema_step_is_planned_from_its_tree(
    opts: dict[str, str], tmp_path: Path
) -> None:
    source = FmtfsDataSource(opts)
    schema = source.schema()
    _grow(Path(opts["path"]), tmp_path / "grown", 3500)
    planned = _plan(source, schema)
    assert planned["trees"] == 1 and planned["tree_loaded"]
    assert planned["records"] == 3500


def test_a_source_without_a_schema_step_is_planned_from_its_tree(opts: dict[str, str]) -> None:
    """.schema(...) given by the user: Spark runs no schema step."""
    schema = FmtfsDataSource(opts).schema()
    planned = _plan(FmtfsDataSource(opts), schema)
    assert planned["trees"] == 1 and planned["records"] == 3000
