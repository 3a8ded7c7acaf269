"""Time filters pushed down to the data source: only chunks whose time range
can match are read, and the rows equal Spark's own filtering of the full
read (Spark 4.1+ pushFilters)."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from fmtfs.formats.beats import BeatsFormat
from fmtfs.formats.kestrel import KestrelFormat
from fmtfs.formats.kestrel.records import WRITER_MAGIC
from fmtfs.formats.wallaby import WallabyWriter, create_pair
from fmtfs.shape import format_time
from fmtfs.spark.timefilter import TimeTest
from tests.sparking import fmtfs_session

DAY = datetime(2024, 3, 1, tzinfo=UTC)
DAY_NS = int(DAY.timestamp()) * 1_000_000_000
HOUR_NS = 3600 * 1_000_000_000


@pytest.fixture(scope="module")
def spark():
    session = fmtfs_session("local[2]", "fmtfs-pushdown")
    yield session
    session.stop()


def beats_queue(folder: Path, frames: int) -> Path:
    """A day of frames in 3 segments, times jittered by up to two hours
    around their place in the day: out of order, as Beats' often are."""
    folder.mkdir()
    rng = random.Random(7)
    per = frames // 3
    for segment in range(3):
        lines = []
        for i in range(segment * per, (segment + 1) * per):
            at = DAY_NS + i * (24 * HOUR_NS // frames) + rng.randrange(-2 * HOUR_NS, 2 * HOUR_NS)
            lines.append({"timestamp": format_time(at), "fields": {"n": i}})
        BeatsFormat(folder, {}).writer(f"segments/{segment}.jsonl", create=True).write(lines)
    return folder


def wallaby_log(folder: Path, records: int) -> Path:
    folder.mkdir()
    log = folder / "events.log"
    create_pair(log)
    step = 24 * HOUR_NS // records
    WallabyWriter(log).write([{"time": DAY_NS + i * step, "data": f"r{i}"} for i in range(records)])
    return folder


def kestrel_queue(folder: Path, records: int) -> Path:
    folder.mkdir()
    (folder / "jobs.1").write_bytes(WRITER_MAGIC)
    step = 24 * 3600 * 1000 // records
    lines = [{"add_time": DAY_NS // 1_000_000 + i * step, "data": f"j{i}"} for i in range(records)]
    KestrelFormat(folder, {}).writer("jobs/journal/1.jsonl", create=False).write(lines)
    return folder


CASES = {  # format -> (make source, view, time column)
    "beats": (beats_queue, "segments", "timestamp"),
    "wallaby": (wallaby_log, "events.log/records.jsonl", "time"),
    "kestrel": (kestrel_queue, "jobs/journal", "add_time"),
}


def read(spark, source: Path, view: str, cache: Path):
    # one partition per chunk, so skipped chunks show as fewer partitions
    return (
        spark.read.format("fmtfs")
        .option("view", view)
        .option("cacheDir", str(cache))
        .option("partitionBytes", "1")
        .load(str(source))
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_one_hour_filter_reads_fewer_chunks_and_the_same_rows(spark, tmp_path, name) -> None:
    make, view, column = CASES[name]
    source = make(tmp_path / "src", 24_000)
    full = read(spark, source, view, tmp_path / "cache")
    low, high = "2024-03-01T10", "2024-03-01T11"
    condition = (F.col(column) >= low) & (F.col(column) < high)
    pushed = read(spark, source, view, tmp_path / "cache").filter(condition)
    by_spark = full.filter(condition)  # computed on the full read's rows
    assert pushed.rdd.getNumPartitions() < full.rdd.getNumPartitions()
    want = by_spark.count()
    assert 0 < want < full.count()
    assert pushed.count() == want
    assert pushed.exceptAll(by_spark).count() == 0 and by_spark.exceptAll(pushed).count() == 0


def test_out_of_order_times_at_the_edges_of_a_filter_are_kept(spark, tmp_path) -> None:
    """Equality and the four comparisons, each against Spark's own filter of
    the full read, with times far out of order."""
    source = beats_queue(tmp_path / "src", 12_000)
    full = read(spark, source, "segments", tmp_path / "cache")
    edge = full.orderBy(F.col("fields.n")).collect()[5000]["timestamp"]
    for condition in (
        F.col("timestamp") == edge,
        F.col("timestamp") > edge,
        F.col("timestamp") <= edge,
        F.col("timestamp").isin(edge, "2024-03-01T23:59:59.999999999Z"),
        F.col("timestamp") < "2024-03-01T03",
    ):
        pushed = read(spark, source, "segments", tmp_path / "cache").filter(condition)
        want = sorted(r["fields"]["n"] for r in full.filter(condition).collect())
        assert sorted(r["fields"]["n"] for r in pushed.collect()) == want, str(condition)
        assert want


def test_typed_columns_take_timestamp_literals(spark, tmp_path) -> None:
    """types=parquet: the time column is a timestamp and the literal a datetime."""
    source = wallaby_log(tmp_path / "src", 24_000)

    def typed():  # a DataFrame per query: Spark keeps a pushed reader with its DataFrame
        return (
            spark.read.format("fmtfs")
            .option("view", "events.log/records.jsonl")
            .option("types", "parquet")
            .option("cacheDir", str(tmp_path / "cache"))
            .option("partitionBytes", "1")
            .load(str(source))
        )

    start, end = datetime(2024, 3, 1, 10, tzinfo=UTC), datetime(2024, 3, 1, 11, tzinfo=UTC)
    condition = (F.col("time") >= F.lit(start)) & (F.col("time") < F.lit(end))
    pushed = typed().filter(condition)
    assert pushed.rdd.getNumPartitions() < typed().rdd.getNumPartitions()
    rows = pushed.collect()
    assert len(rows) == 1000 == typed().filter(condition).count()
    assert all(start <= r["time"].astimezone(UTC) < end for r in rows)


def test_a_chunk_range_against_text_and_datetime_literals() -> None:
    """The text of a literal is compared as Spark compares strings: prefixes work."""
    times = (DAY_NS + 10 * HOUR_NS, DAY_NS + 11 * HOUR_NS - 1)  # 10:00 to 10:59:59.999999999
    assert TimeTest("time", "GreaterThanOrEqual", ("2024-03-01T10",)).may_match(times, "ns")
    assert not TimeTest("time", "GreaterThan", ("2024-03-01T11",)).may_match(times, "ns")
    assert not TimeTest("time", "LessThan", ("2024-03-01T10",)).may_match(times, "ns")
    assert TimeTest("time", "LessThan", ("2024-03-01T10:00:00.000000001Z",)).may_match(times, "ns")
    assert TimeTest("time", "EqualTo", ("2024-03-01T10:30:00.000Z",)).may_match(times, "ms")
    assert not TimeTest("time", "In", ("2024-03-01T09:59:59Z", "2024-03-01T11:00:00Z")).may_match(times, "s")
    assert TimeTest("time", "LessThanOrEqual", (datetime(2024, 3, 1, 10, tzinfo=UTC),)).may_match(times, "ns")
    assert not TimeTest("time", "GreaterThan", (datetime(2024, 3, 1, 11, tzinfo=UTC),)).may_match(times, "ns")
    assert TimeTest("time", "GreaterThan", (42,)).may_match(times, "ns")  # not a time: read the chunk
