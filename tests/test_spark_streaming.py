"""spark.readStream.format("fmtfs"): record views that grow by appending as
streaming sources, with a real checkpoint and a real file sink.  Records
are appended with each format's own writer between availableNow triggers;
every trigger is a restart of the query from its checkpoint; the sink must
end up holding every record that was ever in the views exactly once (a
Beats segment deleted after delivery included)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

import pytest

from fmtfs.formats import open_source
from fmtfs.formats.kestrel.records import WRITER_MAGIC
from fmtfs.render import parse_lines
from fmtfs.spark.kept import kept_dir
from fmtfs.views import SourceTree
from tests.sparking import fmtfs_session, stream_available_now


@pytest.fixture(scope="module")
def spark():
    session = fmtfs_session("local[2]", "fmtfs-streaming")
    yield session
    session.stop()


def write(source: Path, view: str, lines: list[dict], create: bool = False, **options) -> None:
    """Append through the format's own writer, as a mount would."""
    fmt = "beats" if view.startswith("segments/") else None  # an empty queue folder detects nothing
    open_source(source, fmt, options).writer(view, create).write(lines)


def wallaby(source: Path, step: int) -> None:
    if step == 0:
        source.mkdir()
        importlib.import_module("fmtfs.samples.wallaby").generate(source, 500)
    else:
        write(source, "events.log/records.jsonl", [{"data": f"step {step} n {n}"} for n in range(300)])


def beats(source: Path, step: int) -> None:
    """Segment 0, then more in it and a new segment 1 (a new stream joins),
    then segment 0 is deleted (Beats drops ACKed segments) while 1 grows."""
    lines = [
        {"timestamp": 1_700_000_000_000_000_000 + n, "fields": {"step": step, "n": n}} for n in range(400)
    ]
    if step == 0:
        source.mkdir()
        write(source, "segments/0.jsonl", lines, create=True)
    elif step == 1:
        write(source, "segments/0.jsonl", lines[:100])
        write(source, "segments/1.jsonl", lines[100:], create=True)
    else:
        (source / "0.seg").unlink()
        write(source, "segments/1.jsonl", lines)


def kestrel(source: Path, step: int) -> None:
    """Small journal files: appends rotate into new writer files."""
    if step == 0:
        source.mkdir()
        (source / "jobs.1").write_bytes(WRITER_MAGIC)
    newest = max(int(p.name.split(".")[1]) for p in source.glob("jobs.*"))
    lines = [{"data": f"step {step} n {n}"} for n in range(300)]
    write(source, f"jobs/journal/{newest}.jsonl", lines, kestrel_journal_size=4000)


def gvfs(source: Path, step: int) -> None:
    if step == 0:
        importlib.import_module("fmtfs.samples.gvfs").generate(source, 200)
    else:
        lines = [{"op": "set", "path": f"/s{step}/{n}", "key": "k", "value": f"{n}"} for n in range(200)]
        write(source, "home/journal.jsonl", lines)


def proio(source: Path, step: int) -> None:
    if step == 0:
        importlib.import_module("fmtfs.samples.proio").generate(source, 100)
    else:
        lines = [{"metadata": {"step": f"{step}", "n": f"{n}"}, "entries": {}} for n in range(50)]
        write(source, "sample.proio/events.jsonl", lines)


CASES: dict[str, tuple[Callable[[Path, int], None], str]] = {
    "wallaby": (wallaby, "events.log/records.jsonl"),
    "beats": (beats, "segments"),
    "kestrel": (kestrel, "jobs/journal"),
    "gvfs": (gvfs, "home/journal.jsonl"),
    "proio": (proio, "sample.proio/events.jsonl"),
}


def view_lines(source: Path, cache: Path, view: str) -> dict[tuple[str, int], bytes]:
    """(view file, line number) -> line, for the record views `view` names."""
    tree = SourceTree(open_source(source, None, {}), cache, readonly=True)
    files = (
        [view] if view in tree.files else [f"{view}/{n}" for n in tree.listdir(view) if n.endswith(".jsonl")]
    )
    out = {}
    for path in files:
        data = tree.read(path, 0, tree.size(path))
        for number, line in enumerate(data.splitlines()):
            out[(path, number)] = line
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_restarted_queries_deliver_every_appended_record_once(spark, tmp_path, name) -> None:
    change, view = CASES[name]
    source, cache, sink, checkpoint = (tmp_path / n for n in ("src", "cache", "sink", "checkpoint"))
    expected: dict[tuple[str, int], bytes] = {}
    for step in range(3):
        change(source, step)
        expected |= view_lines(source, tmp_path / "cache-check", view)
        stream_available_now(spark, source, view, cache, sink, checkpoint)
    delivered = spark.read.json(str(sink))
    want = spark.read.schema(delivered.schema).json(
        spark.sparkContext.parallelize([line.decode() for line in expected.values()])
    )
    assert delivered.count() == len(expected) > 0
    assert delivered.exceptAll(want).count() == 0 and want.exceptAll(delivered).count() == 0
    assert not kept_dir({"cachedir": str(cache)}).exists()  # micro-batches keep no batches
    if name == "beats":  # segment 0 was deleted after its records were delivered
        assert not (source / "0.seg").exists()
        assert any(path == "segments/0.jsonl" for path, _ in expected)


def test_only_views_that_grow_by_appending_stream(spark, tmp_path) -> None:
    (tmp_path / "src").mkdir()
    source = importlib.import_module("fmtfs.samples.wallaby").generate(tmp_path / "src", 100)
    with pytest.raises(Exception, match="cannot be streamed"):
        (
            spark.readStream.format("fmtfs")
            .option("view", "events.log/buckets")
            .option("cacheDir", str(tmp_path / "cache"))
            .load(str(source))
            .writeStream.format("noop")
            .trigger(availableNow=True)
            .start()
            .awaitTermination()
        )


def test_lines_parse(tmp_path) -> None:
    """The expectation helper reads what fmtfs cat shows."""
    (tmp_path / "src").mkdir()
    source = importlib.import_module("fmtfs.samples.wallaby").generate(tmp_path / "src", 10)
    lines = view_lines(source, tmp_path / "cache", "events.log/records.jsonl")
    assert [r["index"] for r in parse_lines(b"\n".join(lines.values()) + b"\n")] == list(range(10))
