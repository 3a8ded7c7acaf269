"""The data source on executors that are separate processes from the driver
(Spark's local-cluster master: two executor JVMs, each with its own Python
workers), batch and streaming, so nothing relies on driver-side state."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from fmtfs.formats import open_source
from fmtfs.samples.beats import generate
from fmtfs.views import SourceTree
from tests.sparking import fmtfs_session, stream_available_now


@pytest.fixture(scope="module")
def spark():
    session = fmtfs_session("local-cluster[2,1,1024]", "fmtfs-cluster", **{"spark.executor.memory": "768m"})
    yield session
    session.stop()


def view_records(source: Path, cache: Path, view: str) -> list[dict]:
    tree = SourceTree(open_source(source, None, {}), cache, readonly=True)
    return [orjson.loads(line) for line in tree.read(view, 0, tree.size(view)).splitlines()]


def test_batch_read_on_separate_executors_equals_the_view(spark, tmp_path: Path) -> None:
    source = generate(tmp_path / "queue", 6_000, segments=3)
    want = sum(
        (view_records(source, tmp_path / "c", f"segments/{p.stem}.jsonl") for p in source.glob("*.seg")), []
    )
    df = (
        spark.read.format("fmtfs")
        .option("view", "segments")
        .option("cacheDir", str(tmp_path / "driver-cache"))
        .option("partitionBytes", str(256 << 10))  # several partitions, spread over both executors
        .load(str(source))
    )
    assert df.rdd.getNumPartitions() > 2
    rows = df.select("fields.message").collect()
    assert sorted(r[0] for r in rows) == sorted(r["fields"]["message"] for r in want)
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver
    assert executors == 2


def test_streaming_on_separate_executors_delivers_appends_once(spark, tmp_path: Path) -> None:
    source = generate(tmp_path / "queue", 1_000, segments=1)
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"
    newest = max(int(p.stem) for p in source.glob("*.seg"))
    for step in range(2):
        if step:
            lines = [
                {"timestamp": 1_700_000_000_000_000_000 + n, "fields": {"message": f"late {n}"}}
                for n in range(250)
            ]
            open_source(source, None, {}).writer(f"segments/{newest}.jsonl", False).write(lines)
        stream_available_now(spark, source, "segments", tmp_path / "driver-cache", sink, checkpoint)
    delivered = spark.read.json(str(sink)).select("fields.message").collect()
    messages = [r[0] for r in delivered]
    want = [r["fields"]["message"] for r in view_records(source, tmp_path / "c", f"segments/{newest}.jsonl")]
    assert len(messages) == len(want) == 1_250
    assert sorted(messages) == sorted(want)
