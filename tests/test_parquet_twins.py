"""Parquet twins at scale: built ahead of time, listed without building,
rebuilt in the background when a view grows, read whole through a mount.

Real mounts (tests/mounting.py); what was built is checked through the
files in the cache folder and their modification times, never by timing."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings

from fmtfs import parquet, twinbuilder, twins, twinwrite
from fmtfs.render import parse_lines
from fmtfs.samples.beats import generate as beats_sample
from fmtfs.samples.wallaby import generate as wallaby_sample
from tests.mounting import mounted
from tests.test_parquet import OPTIONS, batches, declared_bytes, same_records, tree_of, twin_records

TWIN = "parquet/events.log/records.parquet"
VIEW = "events.log/records.jsonl"
WAIT_SECONDS = 120  # an upper bound for background work on a loaded machine


def cache_state(cache: Path) -> dict[str, int]:
    """Twin files on disk -> their mtimes (what a build would change)."""
    return {twin_name(cache, p): p.stat().st_mtime_ns for p in (cache / "parquet").glob("*/*.parquet")}


def twin_name(cache: Path, path: Path) -> str:
    """A twin file's name under the cache's parquet folder (view folder/version)."""
    return str(path.relative_to(cache / "parquet"))


def wait_for(condition, what: str):
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"never happened: {what}")


def read_whole(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# -- the schema does not depend on how the records are cut ----------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_streamed_plan_equals_the_plan_of_all_records_at_once(drawn) -> None:
    parts, schema = drawn
    records = [r for part in parts for r in part]
    one = parquet.Shape(schema)
    if records:
        one.add(parquet.records_to_array(records))
    streamed = parquet.Shape(schema)
    for part in parts:
        if part:
            streamed.add(parquet.records_to_array(part))
    assert streamed.rows == one.rows == len(records)
    if records:
        assert streamed.plan().out == one.plan().out


def test_row_groups_follow_the_size_rule(tmp_path: Path) -> None:
    records = [{"n": i, "text": "x" * (i % 50), "when": "2020-01-01T00:00:00.000Z"} for i in range(30_000)]
    chunks = [records[i : i + 4096] for i in range(0, 30_000, 4096)]
    target = tmp_path / "t.parquet"
    rows = parquet.write_twin(chunks, None, target)
    meta = pq.ParquetFile(target).metadata
    groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert rows == sum(groups) == 30_000
    per_group = parquet.group_rows(30_000, sum(parquet.records_to_array(c).nbytes for c in chunks))
    assert groups[:-1] == [per_group] * (len(groups) - 1) and len(groups) >= 2
    assert pq.read_table(target).column("n").to_pylist() == list(range(30_000))
    assert not [p for p in tmp_path.iterdir() if p != target]  # no scratch file left


# -- serving an older twin while the new one is built ---------------------------


def test_a_grown_view_keeps_its_old_twin_until_the_new_one_is_whole(tmp_path: Path) -> None:
    from fmtfs.formats.wallaby import WallabyWriter

    (tmp_path / "src").mkdir()
    source = wallaby_sample(tmp_path / "src", 2000)
    tree = tree_of(source, tmp_path / "cache")
    old = tree.files[TWIN].build()
    # a mount's builder, not started: what it is asked to do stays observable
    builder = twinbuilder.TwinBuilder(tree)
    tree.twins.builder = builder
    WallabyWriter(source / "events.log").write([{"time": 1_500_000_000_000_000_000, "data": "late"}])
    tree.refresh(force=True)
    grown = tree.files[TWIN]
    assert grown.path() == old and grown.size() == old.stat().st_size  # old file, whole
    assert pq.read_table(io.BytesIO(tree.read(TWIN, 0, grown.size()))).num_rows == 2000
    assert builder.requested == {VIEW: grown}
    new = grown.build()
    assert new != old and not old.exists()
    assert grown.path() == new
    assert pq.read_table(new).column("data").to_pylist()[-1] == b"late"


def test_the_background_builder_waits_while_views_are_read(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    source = wallaby_sample(tmp_path / "src", 2000)
    tree = tree_of(source, tmp_path / "cache")
    twin = tree.files[TWIN]
    tree.read(VIEW, 0, 4096)  # a reader was there when the mount started its builder
    builder = twinbuilder.TwinBuilder(tree).start()
    try:
        # a reader keeps the tree busy: nothing nobody asked for is built
        reading_until = time.monotonic() + 2 * twinbuilder.QUIET_SECONDS + 1
        while time.monotonic() < reading_until:
            tree.read(VIEW, 0, 4096)
            time.sleep(0.05)
            assert not twin.built()
        # quiet: the builder catches up on its own
        deadline = time.monotonic() + 120
        while not twin.built() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert twin.built()
    finally:
        builder.stop()


# -- through real mounts ----------------------------------------------------------


def test_twins_read_through_a_mount_hold_exactly_the_view_rows(tmp_path: Path) -> None:
    from fmtfs.formats.beats.columns import FRAME

    source = beats_sample(tmp_path / "queue", 9000)
    with mounted(source, cache_dir=tmp_path / "cache") as mnt:
        twin_folder = mnt / "parquet" / "segments"
        names = sorted(p.name for p in twin_folder.iterdir())
        assert names and all(n.endswith(".parquet") for n in names)
        for name in names:
            data = read_whole(twin_folder / name)
            assert len(data) == (twin_folder / name).stat().st_size
            (tmp_path / name).write_bytes(data)
            want = parse_lines(read_whole(mnt / "segments" / (name[: -len(".parquet")] + ".jsonl")))
            got = twin_records(tmp_path / name, declared_bytes(FRAME))
            same_records(got, want, pq.read_schema(tmp_path / name))


def listed_twin_sizes(mnt: Path) -> list[int]:
    """stat() of every file under parquet/ through the mount."""
    return sorted(
        os.stat(os.path.join(folder, name)).st_size
        for folder, _, files in os.walk(mnt / "parquet")
        for name in files
    )


def test_the_mount_builds_missing_twins_in_the_background(tmp_path: Path) -> None:
    source = beats_sample(tmp_path / "queue", 6000)
    cache = tmp_path / "cache"
    with mounted(source, cache_dir=cache) as mnt:
        # nobody stats parquet/: the builder makes every twin on its own
        # a twin per segment view, per time bucket view, and pending.jsonl's
        expected = len(list((mnt / "segments").iterdir())) + len(list((mnt / "buckets").iterdir())) + 1
        built = wait_for(
            lambda: len(cache_state(cache)) == expected and cache_state(cache), "all twins built"
        )
        sizes = listed_twin_sizes(mnt)
        assert cache_state(cache) == built  # listing them built nothing more
        assert sizes == sorted((cache / "parquet" / name).stat().st_size for name in built)


def test_listing_prebuilt_twins_builds_nothing(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    source = wallaby_sample(tmp_path / "src", 3000)
    cache = tmp_path / "cache"
    tree = tree_of(source, cache)
    assert twinbuilder.build_all(tree) == len(twinbuilder.twins_of(tree)) > 1
    before = cache_state(cache)
    assert twinbuilder.build_all(tree) == 0
    with mounted(source, cache_dir=cache) as mnt:
        sizes = listed_twin_sizes(mnt)
        assert sizes == sorted((cache / "parquet" / name).stat().st_size for name in before)
        assert read_whole(mnt / TWIN)[-4:] == b"PAR1"
        time.sleep(1.5)  # let the builder look around once more: it must find nothing to do
        assert cache_state(cache) == before


def test_an_append_rebuilds_the_twins_of_the_views_it_reached_alone(tmp_path: Path) -> None:
    """A line appended through the mount (timed now: a new hour bucket)
    gets the records view a new twin and the new bucket its first; the
    twins of the log's 50 earlier hour buckets stay the files they were."""
    (tmp_path / "src").mkdir()
    source = wallaby_sample(tmp_path / "src", 3000)
    cache = tmp_path / "cache"
    tree = tree_of(source, cache)
    twinbuilder.build_all(tree)
    records_home = tree.files[TWIN].home.name
    before = cache_state(cache)
    earlier = {name: mtime for name, mtime in before.items() if not name.startswith(records_home)}
    assert len(earlier) == len(before) - 1 > 40
    with mounted(source, cache_dir=cache) as mnt:
        with open(mnt / VIEW, "ab") as f:
            f.write(orjson.dumps({"data": "now"}) + b"\n")

        def rebuilt() -> dict[str, int] | None:
            state = cache_state(cache)
            new = set(state) - set(before)
            homes = {name.split("/")[0] for name in new}
            return state if len(new) == 2 and records_home in homes else None

        wait_for(rebuilt, "the records view's new twin and the new bucket's")
        time.sleep(1.5)  # the builder's next look must find nothing more to do
        after = cache_state(cache)
    assert {name: after.get(name) for name in earlier} == earlier
    assert len(set(after) - set(before)) == 2


def test_a_growing_view_gets_a_new_twin_and_size_and_bytes_always_agree(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    source = wallaby_sample(tmp_path / "src", 2000)
    with mounted(source, cache_dir=tmp_path / "cache") as mnt:
        twin = mnt / TWIN
        assert pq.read_table(io.BytesIO(read_whole(twin))).num_rows == 2000
        lines = b"".join(orjson.dumps({"data": f"new {i}"}) + b"\n" for i in range(50))
        with open(mnt / VIEW, "ab") as f:
            f.write(lines)
        seen = set()

        def grown() -> bool:
            with open(twin, "rb") as f:
                data = f.read()
            table = pq.read_table(io.BytesIO(data))  # always a whole file of one state
            seen.add(table.num_rows)
            return table.num_rows == 2050 and table

        table = wait_for(grown, "the new rows in the twin")
        assert seen <= {2000, 2050}
        assert table.column("data").to_pylist()[-1] == b"new 49"
        data = read_whole(twin)
        assert twin.stat().st_size == len(data) and pq.read_table(io.BytesIO(data)).num_rows == 2050


def test_a_big_view_asked_for_by_a_stat_is_built_by_a_child_process(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "src").mkdir()
    tree = tree_of(wallaby_sample(tmp_path / "src", 2000), tmp_path / "cache")
    tree.twins.builder = twinbuilder.TwinBuilder(tree)  # as in a mount (not started)
    monkeypatch.setattr(twins, "IN_PROCESS_LIMIT", 0)  # every view counts as big
    built_here = []
    monkeypatch.setattr(parquet, "write_twin", lambda *a, **k: built_here.append(a))
    twin = tree.files[TWIN]
    path = twin.path()
    assert not built_here  # nothing was written by this process
    assert path == twin.target() and pq.read_table(path).num_rows == 2000


# -- versions of a twin are prefixes of each other ------------------------------


def group_starts(path_or_data) -> list[int]:
    """Where each row group's first column chunk starts."""
    source = io.BytesIO(path_or_data) if isinstance(path_or_data, bytes) else path_or_data
    meta = pq.ParquetFile(source).metadata
    starts = []
    for i in range(meta.num_row_groups):
        column = meta.row_group(i).column(0)
        starts.append(column.dictionary_page_offset or column.data_page_offset)
    return starts


def cache_file_holding(cache: Path, data: bytes) -> Path:
    return next(p for p in (cache / "parquet").glob("*/*.parquet") if p.read_bytes() == data)


GROWTHS = {
    # the same schema: only the new rows are written, after the old file
    "wallaby-append": (
        lambda tmp: wallaby_sample(tmp, 3000),
        lambda mnt: (TWIN, VIEW),
        b"".join(orjson.dumps({"data": f"new {i}"}) + b"\n" for i in range(40)),
    ),
    # a field no record had: the twin is rebuilt whole, after the old file
    "beats-new-field": (
        lambda tmp: beats_sample(tmp, 3000),
        lambda mnt: (
            f"parquet/segments/{max((p.stem for p in (mnt / 'segments').iterdir()), key=int)}.parquet",
            f"segments/{max((p.stem for p in (mnt / 'segments').iterdir()), key=int)}.jsonl",
        ),
        b'{"timestamp": "2022-07-29T15:00:00Z", "flags": 1, "meta": {}, '
        b'"fields": {"message": "hello", "brand_new": 7}}\n',
    ),
}


@pytest.mark.parametrize("growth", sorted(GROWTHS))
def test_a_reader_that_stats_before_a_switch_and_opens_after_reads_the_whole_old_file(
    tmp_path: Path, growth: str
) -> None:
    make, names, lines = GROWTHS[growth]
    (tmp_path / "src").mkdir()
    source = make(tmp_path / "src")
    cache = tmp_path / "cache"
    with mounted(source, cache_dir=cache) as mnt:
        twin_name, view_name = names(mnt)
        twin, view = mnt / twin_name, mnt / view_name
        old = read_whole(twin)
        old_rows = pq.read_table(io.BytesIO(old)).num_rows
        listed = os.stat(twin).st_size  # what Spark's driver lists
        assert listed == len(old)
        old_file = cache_file_holding(cache, old)
        added = lines.count(b"\n")
        with open(view, "ab") as f:
            f.write(lines)

        def switched() -> bool:
            # the native file may change in steps (Beats: frames, then the
            # header's count): wait for the version holding every new row
            for path in old_file.parent.glob("*.parquet"):  # the view's versions
                try:
                    if pq.read_metadata(path).num_rows == old_rows + added:
                        return not old_file.exists()
                except FileNotFoundError:
                    continue  # replaced meanwhile
            return False

        wait_for(switched, "the rebuilt twin switched in")
        fd = os.open(twin, os.O_RDONLY)  # what an executor does seconds later
        try:
            seen = os.pread(fd, listed, 0)
            whole = os.pread(fd, 1 << 30, 0)
        finally:
            os.close(fd)
        assert seen == old  # the listed size reads the old file, whole
        assert pq.read_table(io.BytesIO(seen)).num_rows == old_rows
        assert os.stat(twin).st_size == len(whole) > listed  # a new stat sees the new version
        table = pq.read_table(io.BytesIO(whole))
        assert table.num_rows == old_rows + added
        starts = group_starts(whole)
        if growth == "wallaby-append":  # the old row groups are the new file's first ones
            assert starts[: len(group_starts(old))] == group_starts(old) and max(starts) > listed
            assert table.column("data").to_pylist()[-1] == b"new 39"
        else:  # a whole rebuild, after the old bytes
            assert min(starts) > listed
            assert "brand_new" in table.schema.field("fields").type.names


def test_readers_of_two_versions_of_one_twin_at_once_each_read_their_own(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    source = wallaby_sample(tmp_path / "src", 3000)
    cache = tmp_path / "cache"
    with mounted(source, cache_dir=cache) as mnt:
        twin = mnt / TWIN
        old = read_whole(twin)
        old_file = cache_file_holding(cache, old)
        first = os.open(twin, os.O_RDONLY)  # opened on the old version
        try:
            with open(mnt / VIEW, "ab") as f:
                f.write(b"".join(orjson.dumps({"data": f"new {i}"}) + b"\n" for i in range(40)))
            wait_for(lambda: not old_file.exists() and twin.stat().st_size > len(old), "the switch")
            second = os.open(twin, os.O_RDONLY)  # the new version, while the first reads the old
            try:
                # the old reader fills the page cache up to its end, the last page part zeros
                assert os.pread(first, 1 << 30, 0) == old
                new = os.pread(second, 1 << 30, 0)
            finally:
                os.close(second)
        finally:
            os.close(first)
        assert new.startswith(old) and len(new) == twin.stat().st_size
        assert pq.read_table(io.BytesIO(new)).num_rows == 3040


def test_a_twin_nobody_stated_lately_is_rebuilt_without_the_old_bytes(tmp_path: Path, monkeypatch) -> None:
    source = beats_sample(tmp_path / "queue", 500, segments=1)
    tree = tree_of(source, tmp_path / "cache")
    path = "parquet/segments/0.parquet"
    first = tree.read(path, 0, tree.size(path))  # a stat reports the first version

    def add(fields: bytes) -> bytes:
        line = b'{"timestamp": "2022-07-29T15:00:00Z", "flags": 1, "meta": {}, "fields": ' + fields + b"}\n"
        tree.open_writer("segments/0.jsonl", False).write(line)
        tree.refresh()  # as the stat after a write does in a mount
        return tree.read(path, 0, tree.size(path))  # a new field: rebuilt whole

    second = add(b'{"second": 1}')
    assert second[: len(first)] == first and min(group_starts(second)) > len(first)
    monkeypatch.setattr(twins, "GRACE_SECONDS", 0.0)  # nobody can hold the second's size any more
    third = add(b'{"third": "x"}')
    assert min(group_starts(third)) == 4  # right after the leading PAR1: no dead weight
    assert pq.read_table(io.BytesIO(third)).num_rows == 502


def test_a_twin_grown_by_many_small_appends_is_rebuilt_into_full_row_groups(
    tmp_path: Path, monkeypatch
) -> None:
    from fmtfs.formats.wallaby import WallabyWriter

    (tmp_path / "src").mkdir()
    source = wallaby_sample(tmp_path / "src", 20_000)
    tree = tree_of(source, tmp_path / "cache")
    first = pq.ParquetFile(tree.files[TWIN].build()).metadata.num_row_groups
    monkeypatch.setattr(twinwrite, "MAX_GROUPS_FACTOR", 1)
    monkeypatch.setattr(twinwrite, "TARGET_EXTRA_GROUPS", 0)
    counts = []
    for n in range(2):
        WallabyWriter(source / "events.log").write([{"data": f"small {n}"}])
        tree.refresh(force=True)
        counts.append(pq.ParquetFile(tree.files[TWIN].build()).metadata.num_row_groups)
    assert counts[0] == first + 1  # appended: one small group more
    assert counts[1] == first  # past the limit: whole again
    assert pq.read_table(tree.files[TWIN].build()).column("data").to_pylist()[-2:] == [b"small 0", b"small 1"]


# -- spliced files as other readers see them --------------------------------------


@pytest.fixture(scope="module")
def spark():
    from tests.sparking import start_session

    session = start_session("local[2]", "fmtfs-twins", **{"spark.sql.files.maxPartitionBytes": "65536"})
    yield session
    session.stop()


def test_spliced_twins_read_the_same_in_spark_and_pyarrow(tmp_path: Path, spark) -> None:
    from fmtfs.formats.wallaby import WallabyWriter
    from fmtfs.parquet_splice import splice

    (tmp_path / "src").mkdir()
    source = wallaby_sample(tmp_path / "src", 20_000)
    tree = tree_of(source, tmp_path / "cache")
    old = tree.files[TWIN].build()
    kept = tmp_path / "old.parquet"
    kept.write_bytes(old.read_bytes())
    WallabyWriter(source / "events.log").write([{"data": f"late {i}"} for i in range(3000)])
    tree.refresh(force=True)
    appended = tree.files[TWIN].build()  # old row groups + new ones
    dead_prefix = tmp_path / "dead-prefix.parquet"  # a whole rebuild after the old bytes
    splice(kept, appended, dead_prefix, False, {})
    whole = tmp_path / "whole.parquet"
    parquet.write_twin(tree.files[VIEW].records(), tree.format.view_schema(VIEW), whole)
    want = pq.read_table(whole)
    assert want.num_rows == 23_000
    for path in (appended, dead_prefix):
        assert path.read_bytes().startswith(kept.read_bytes())
        assert pq.read_table(path).equals(want)
        frame = spark.read.parquet(str(path))
        assert frame.rdd.getNumPartitions() > 1  # split by byte ranges: row groups found by their offsets
        row = frame.selectExpr("count(*)", "sum(index)", "count(distinct data)").first()
        assert tuple(row) == (23_000, sum(range(23_000)), len(set(want.column("data").to_pylist())))


def test_footers_decode_and_encode_to_the_same_bytes(tmp_path: Path) -> None:
    from fmtfs.parquet_splice import encode_struct, read_footer

    source = beats_sample(tmp_path / "queue", 2000, segments=1)
    twin = tmp_path / "pyarrow.parquet"  # a footer as pyarrow writes it (nested structs, lists, times)
    parquet.write_twin(tree_of(source, tmp_path / "cache").files["segments/0.jsonl"].records(), None, twin)
    data = twin.read_bytes()
    footer, start = read_footer(twin)
    assert encode_struct(footer) == data[start:-8]


def test_a_builder_started_before_a_stat_still_keeps_the_old_bytes(tmp_path: Path) -> None:
    source = beats_sample(tmp_path / "queue", 500, segments=1)
    path = "parquet/segments/0.parquet"
    builder = tree_of(source, tmp_path / "cache")  # a builder child's tree, opened first
    mount = tree_of(source, tmp_path / "cache")
    first = mount.read(path, 0, mount.size(path))  # the mount's stat reports the first version
    line = b'{"timestamp": "2022-07-29T15:00:00Z", "flags": 1, "meta": {}, "fields": {"later": 1}}\n'
    mount.open_writer("segments/0.jsonl", False).write(line)
    builder.refresh(force=True)
    rebuilt = builder.files[path].build()  # a new field: rebuilt whole, by the other tree
    data = rebuilt.read_bytes()
    assert data[: len(first)] == first and min(group_starts(data)) > len(first)


# -- a build round decodes each chunk once --------------------------------------


def twin_files(cache: Path) -> dict[str, bytes]:
    return {twin_name(cache, p): p.read_bytes() for p in (cache / "parquet").glob("*/*.parquet")}


def test_a_build_round_decodes_each_chunk_once_for_all_its_twins(tmp_path: Path, monkeypatch) -> None:
    source = beats_sample(tmp_path / "src", 12_000, segments=3)  # ACKed a third into segment 0
    alone = tree_of(source, tmp_path / "alone")
    for twin in twinbuilder.twins_of(alone):
        twin.build()  # one twin at a time, each reading its own records
    tree = tree_of(source, tmp_path / "round")
    stream_type = type(tree.entries[0].stream)
    real_decode = stream_type.decode
    decoded: list[tuple[str, int]] = []

    def counting(stream, chunk):
        decoded.append((stream.name, chunk.start))
        return real_decode(stream, chunk)

    monkeypatch.setattr(stream_type, "decode", counting)
    twins_made = twinbuilder.build_all(tree)
    assert twins_made == len(twinbuilder.twins_of(tree)) >= 5  # segments, buckets, pending
    chunks = {(e.stream.name, c.start) for e in tree.entries for c in e.chunks}
    assert set(decoded) == chunks
    # once each, and once more the chunk where pending.jsonl starts (its
    # remaining records are converted alone, as the view shows them)
    assert len(decoded) == len(chunks) + 1
    assert twin_files(tmp_path / "round") == twin_files(tmp_path / "alone")
    assert not [p for p in (tmp_path / "round" / "parquet").iterdir() if "chunks-" in p.name]


def test_fmtfs_index_converts_chunks_in_the_decode_workers_to_the_same_twins(
    tmp_path: Path, monkeypatch
) -> None:
    from fmtfs.formats import open_source
    from fmtfs.views import SourceTree

    source = beats_sample(tmp_path / "src", 12_000, segments=3)
    twinbuilder.build_all(tree_of(source, tmp_path / "one"))
    tree = SourceTree(open_source(source, None, dict(OPTIONS)), tmp_path / "workers", workers=2)
    stream_type = type(tree.entries[0].stream)
    real_decode = stream_type.decode
    in_process: list[int] = []
    monkeypatch.setattr(
        stream_type, "decode", lambda s, chunk: in_process.append(chunk.start) or real_decode(s, chunk)
    )
    try:
        twinbuilder.build_all(tree)
    finally:
        tree.close()
    # the workers decoded every chunk; in process only the records pending.jsonl starts with
    assert len(in_process) == 1
    assert twin_files(tmp_path / "workers") == twin_files(tmp_path / "one")


def test_a_mount_serving_views_does_not_load_pyarrow() -> None:
    # the mount, and the decode workers it spawns, import these; pyarrow is
    # loaded only where a twin is built (fmtfs.twinwrite, fmtfs.twinchunks)
    import subprocess
    import sys

    code = "import sys, fmtfs.cli, fmtfs.fuse, fmtfs.decoders, fmtfs.views; print('pyarrow' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_dead_weight_is_bounded_past_it_the_old_twin_stays_served_until_stats_pause(
    tmp_path: Path, monkeypatch
) -> None:
    source = beats_sample(tmp_path / "queue", 500, segments=1)
    tree = tree_of(source, tmp_path / "cache")
    path = "parquet/segments/0.parquet"
    first = tree.read(path, 0, tree.size(path))  # a stat reports the first version
    monkeypatch.setattr(twinwrite, "DEAD_FACTOR", 1)  # dead weight at most the live bytes
    monkeypatch.setattr(twinwrite, "DEAD_SLACK", 0)

    def add(fields: bytes) -> bytes:
        line = b'{"timestamp": "2022-07-29T15:00:00Z", "flags": 1, "meta": {}, "fields": ' + fields + b"}\n"
        tree.open_writer("segments/0.jsonl", False).write(line)
        tree.refresh()
        return tree.read(path, 0, tree.size(path))  # a new field: rebuilt whole

    second = add(b'{"second": 1}')  # first had no dead weight: kept as the prefix
    assert second[: len(first)] == first and min(group_starts(second)) > len(first)
    third = add(b'{"third": "x"}')  # second's dead weight is as big as its live bytes: deferred
    assert third == second  # the previous version, whole, is what a stat and a read give
    missing = [t for t in twinbuilder.twins_of(tree) if not t.built()]
    assert tree.files[path] in missing
    assert twinbuilder.build_all(tree) == len(missing) - 1  # fmtfs index leaves it to the mount
    assert not tree.files[path].built()
    monkeypatch.setattr(twins, "GRACE_SECONDS", 0.0)  # stats paused: nobody holds a size any more
    fourth = tree.read(path, 0, tree.size(path))
    assert min(group_starts(fourth)) == 4  # rebuilt without the dead weight
    assert pq.read_table(io.BytesIO(fourth)).num_rows == 502


def test_a_stat_whose_twin_version_is_removed_under_it_looks_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the builder removes an earlier version once a newer one switched in;
    # a stat between path() and its stat must not tell the kernel ENOENT
    (tmp_path / "src").mkdir()
    tree = tree_of(wallaby_sample(tmp_path / "src", 300), tmp_path / "cache")
    twin = tree.file(TWIN)
    assert isinstance(twin, twins.ParquetFile)
    real = twin.path()
    removed = iter([real.with_name("removed-meanwhile.parquet")])
    monkeypatch.setattr(twin, "path", lambda: next(removed, real))
    assert twin.size() == real.stat().st_size
    removed = iter([real.with_name("removed-meanwhile.parquet")])  # and an open
    with twin.open() as handle:
        assert handle.read(0, 1 << 30) == real.read_bytes()
