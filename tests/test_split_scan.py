"""Split scans (fmtfs.scanning): a stream cut into ranges at the chunk starts
its format finds cheaply (Stream.cuts), the ranges scanned apart and joined,
gives the one-job scan's result exactly (chunks, states, counts, times, view
lengths, problems) on every format, on intact and damaged input alike; a
wrong cut costs time only; a single big file is scanned by the workers and
this process at once."""

from __future__ import annotations

import logging
import shutil
import struct
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path

import cbor2
import orjson
import pytest

from fmtfs.decoders import DecodePool
from fmtfs.formats import open_source
from fmtfs.formats.base import CUT_GRID, Boundary, Problem, State, Stream
from fmtfs.formats.beats import frames as beats_frames
from fmtfs.formats.beats import segment as beats_segment
from fmtfs.formats.kestrel import streams as kestrel_streams
from fmtfs.formats.kestrel.records import PUT_HEADER, WRITER_MAGIC
from fmtfs.formats.proio import wire
from fmtfs.formats.wallaby import WallabyLog, WallabyWriter
from fmtfs.index import Index
from fmtfs.render import rendered_lengths
from fmtfs.samples import beats, gvfs, kestrel, proio, wallaby
from fmtfs.scanning import Scanned, ScannedChunk, ScanRange, joined, scan_range, scan_ranges, scan_stream
from tests.conftest import FIXTURES
from tests.test_beats_build import KEY, TS, event, frame, payload_for, segment
from tests.test_index_parallel import table

SAMPLES = {"beats": beats, "wallaby": wallaby, "kestrel": kestrel, "proio": proio, "gvfs": gvfs}
# the formats whose streams cut: a sample of a few MB must give several ranges
CUTTING = {"beats", "wallaby", "proio", "kestrel"}


def measured_by_hand(stream: Stream) -> Scanned:
    """What the index makes of scan()'s records (Stream.measured, where a
    format has it, must give the same)."""
    out = Scanned()
    for item in stream.scan(None, None):
        if isinstance(item, Problem):
            out.problems.append(item)
            continue
        count = len(next(iter(item.records.values()))) if item.records else 0
        lengths = rendered_lengths(item.records, item.lengths)
        out.chunks.append(ScannedChunk(item.start, item.end, item.state, count, item.times, lengths))
    return out


def split(stream: Stream, every: int = 1) -> tuple[Scanned | BaseException, int]:
    """The joined scans of `stream`'s ranges (every=1: a cut at each chunk)."""
    parts = scan_ranges(stream, None, None, every)
    return joined([scan_range(stream, part, None) for part in parts]), len(parts)


def assert_split_is_whole(source: Path, fmt: str, options: dict | None = None) -> int:
    """Split == whole == scan()'s records measured, for every stream of
    `source`; returns the ranges made."""
    made = 0
    for stream in open_source(source, fmt, options or {}).streams():
        whole = scan_stream(stream, None, None, None)
        by_hand = measured_by_hand(stream)
        assert (whole.chunks, whole.problems) == (by_hand.chunks, by_hand.problems), stream.name
        found, parts = split(stream)
        assert isinstance(found, Scanned)
        assert (found.chunks, found.problems) == (whole.chunks, whole.problems), stream.name
        made += parts
    return made


# Beats' and kestrel's cuts are found near grid lines 1 MiB apart
# (base.CUT_GRID), at which their chunks also end: 16 KiB here, so that the
# samples of a few MB are cut as finely as a big file is.
GRID = 16 << 10


@pytest.fixture(autouse=True)
def small_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kestrel_streams, "CUT_GRID", GRID)
    monkeypatch.setattr(beats_segment, "CUT_GRID", GRID)


def copy_of(folder: Path, into: Path) -> Path:
    shutil.copytree(folder, into)
    return into


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A few MB of each format: several chunks per stream."""
    out = {}
    for name, module in SAMPLES.items():
        folder = tmp_path_factory.mktemp(name)
        out[name] = (
            module.generate(folder, 20_000, segments=1)
            if name == "beats"
            else module.generate(folder, 20_000)
        )
        if out[name].is_file():
            out[name] = out[name].parent
    return out


@pytest.mark.parametrize("fmt", list(SAMPLES))
def test_a_split_scan_is_the_whole_scan(samples: dict[str, Path], fmt: str) -> None:
    made = assert_split_is_whole(samples[fmt], fmt)
    streams = len(open_source(samples[fmt], fmt, {}).streams())
    if fmt in CUTTING:
        assert made > streams  # cut indeed
    else:
        assert made == streams  # no cuts: one job per stream, as before


def fixture_source(fmt: str, into: Path) -> Path:
    """A source of `fmt` made of the format's fixtures (Beats' fixtures are
    LZ4 vectors, not segments: generated segments instead)."""
    into.mkdir()
    if fmt == "beats":
        return beats.generate(into, 3_000, segments=2)
    if fmt == "kestrel":  # every writer-file fixture as a queue's writer file
        for i, journal in enumerate(sorted((FIXTURES / "kestrel").glob("*.journal"))):
            shutil.copy(journal, into / f"q{i}.1000")
    else:
        for path in sorted((FIXTURES / "proio").glob("*.proio")):
            shutil.copy(path, into)
    return into


@pytest.mark.parametrize("fmt", ["beats", "kestrel", "proio"])
def test_the_fixtures_scan_alike_split_or_whole(tmp_path: Path, fmt: str) -> None:
    assert assert_split_is_whole(fixture_source(fmt, tmp_path / "src"), fmt) >= 2


@pytest.mark.parametrize("snapshot", ["03-tree-plus-journal", "05-many-journal", "01-fresh-journal"])
def test_the_gvfs_fixtures_scan_alike_split_or_whole(tmp_path: Path, snapshot: str) -> None:
    assert assert_split_is_whole(copy_of(FIXTURES / "gvfs" / snapshot, tmp_path / "src"), "gvfs") >= 1


def _flip(path: Path, at: float) -> None:
    """One byte flipped at a fraction of the file."""
    data = bytearray(path.read_bytes())
    i = int(len(data) * at)
    data[i] ^= 0x55
    path.write_bytes(bytes(data))


def _cut(path: Path, at: float) -> None:
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * at)])


def _junk(path: Path, at: float) -> None:
    """Junk inserted where a proio bucket starts, near `at`."""
    data = path.read_bytes()
    i = data.find(wire.MAGIC, int(len(data) * at))
    path.write_bytes(data[:i] + b"junk" * 9 + data[i:])


def _zero_size(path: Path, at: float) -> None:
    """A wallaby record's stamp zeroed near `at`: the log looks ended there."""
    data = bytearray(path.read_bytes())
    i = int(len(data) * at)
    data[i : i + 64] = bytes(64)
    path.write_bytes(bytes(data))


DAMAGE: list[tuple[str, Callable[[Path, float], None]]] = [
    ("beats", _flip),  # a bad checksum the cheap walk cannot see
    ("beats", _cut),  # a torn last frame
    ("wallaby", _flip),
    ("wallaby", _cut),
    ("wallaby", _zero_size),
    ("proio", _flip),  # a payload that does not decode: the scan resyncs
    ("proio", _cut),
    ("proio", _junk),
    ("kestrel", _flip),
    ("kestrel", _cut),
    ("gvfs", _flip),
]


@pytest.mark.parametrize(("fmt", "damage"), DAMAGE, ids=[f"{f}-{d.__name__}" for f, d in DAMAGE])
@pytest.mark.parametrize("at", [0.3, 0.77])
def test_damaged_input_scans_alike_split_or_whole(
    samples: dict[str, Path], tmp_path: Path, fmt: str, damage: Callable[[Path, float], None], at: float
) -> None:
    source = copy_of(samples[fmt], tmp_path / "src")
    files = sorted(p for p in source.rglob("*") if p.is_file() and p.stat().st_size > 4096)
    damage(max(files, key=lambda p: p.stat().st_size), at)
    assert_split_is_whole(source, fmt)


class WrongCuts(Stream):
    """A stream whose cuts are off: shifted by `shift`, or with another state;
    its scan passes a range's `stop` on (the format then ends at a boundary
    there) or ignores it."""

    def __init__(self, inner: Stream, shift: int, state: State | None, passes_stop: bool = True) -> None:
        super().__init__(inner.name, inner.path)
        self.inner = inner
        self.shift = shift
        self.state = state
        self.passes_stop = passes_stop

    def scan(self, start: int | None, state: State | None, stop: int | None = None) -> Iterator:
        return self.inner.scan(start, state, stop if self.passes_stop else None)

    def decode(self, chunk):  # noqa: ANN001, ANN201 - unused here
        return self.inner.decode(chunk)

    def cuts(self, start: int | None, state: State | None, every: int) -> Iterator[tuple[int, State]]:
        for at, at_state in self.inner.cuts(start, state, every):
            yield at + self.shift, at_state if self.state is None else self.state


def attempt(stream: Stream, part: ScanRange) -> Scanned | BaseException:
    """A range's scan, or its error, as the index takes them."""
    try:
        return scan_range(stream, part, None)
    except Exception as exc:  # noqa: BLE001 - a wrong state may fail: the join does not need it
        return exc


@pytest.mark.parametrize("passes_stop", [True, False])
@pytest.mark.parametrize(("shift", "state"), [(1, None), (-1, None), (0, {"seq": 7}), (0, {"pos": 3})])
def test_a_wrong_cut_costs_time_not_correctness(
    samples: dict[str, Path], shift: int, state: State | None, passes_stop: bool
) -> None:
    for fmt in ("beats", "wallaby", "kestrel", "proio"):
        inner = next(s for s in open_source(samples[fmt], fmt, {}).streams() if list(s.cuts(None, None, 1)))
        stream = WrongCuts(inner, shift, state, passes_stop)
        whole = scan_stream(inner, None, None, None)
        parts = scan_ranges(stream, None, None, 1)
        scans = [attempt(stream, part) for part in parts]
        found = joined(scans)
        assert isinstance(found, Scanned)
        assert (found.chunks, found.problems) == (whole.chunks, whole.problems)
        if state is None or state.get("seq") == 7 and fmt == "wallaby" or "pos" in state and fmt == "beats":
            assert isinstance(scans[0], Scanned) and not scans[0].joins  # it saw the cut was wrong


def test_a_range_stops_at_its_cut_and_leaves_the_rest_to_the_next(samples: dict[str, Path]) -> None:
    stream = open_source(samples["wallaby"], "wallaby", {}).streams()[0]
    parts = scan_ranges(stream, None, None, 256 << 10)
    assert len(parts) >= 2
    first = scan_range(stream, parts[0], None)
    assert first.joins and first.chunks[-1].end == parts[0].stop == parts[1].start
    assert parts[1] == ScanRange(parts[0].stop, parts[0].stop_state, parts[1].stop, parts[1].stop_state)


@pytest.mark.parametrize("fmt", sorted(CUTTING))
def test_a_range_scan_decodes_nothing_past_its_stop(samples: dict[str, Path], fmt: str) -> None:
    """Given a range's `stop`, a format's scan (and measure) ends with the
    boundary there, its start and the cut's state, instead of decoding the
    chunk that starts there: that chunk was decoded twice, by both ranges
    (a fifth to a third of a first mount's scan)."""
    stream = next(s for s in open_source(samples[fmt], fmt, {}).streams() if list(s.cuts(None, None, 1)))
    whole = scan_stream(stream, None, None, None)
    parts = scan_ranges(stream, None, None, 1)
    assert len(parts) >= 3
    walks = {"scan": stream.scan}
    if stream.measured(None, None) is not None:
        walks["measured"] = lambda start, state, stop: stream.measured(start, state, stop=stop)
    for name, walk in walks.items():
        for part in parts[:-1]:
            items = [i for i in walk(part.start, part.state, part.stop) if not isinstance(i, Problem)]
            *chunks, last = items
            assert all(c.end > c.start and c.start < part.stop for c in chunks), name
            assert isinstance(last, Boundary) and last.start == part.stop and not last.records, name
            assert part.stop_state.items() <= last.state.items(), name
        assert not any(
            isinstance(i, Boundary)
            for i in walk(parts[-1].start, parts[-1].state, None)
            if not isinstance(i, Problem)
        )
    assert [c.start for c in whole.chunks][: len(parts)] == [p.start or whole.chunks[0].start for p in parts]


def test_a_wallaby_log_of_big_records_is_indexed_to_its_end(tmp_path: Path) -> None:
    """A chunk ended by its byte limit is not the end of the log (it was:
    a log of 2 KB records showed its first MiB only)."""
    wallaby.generate(tmp_path, 10, name="big.log")
    log = tmp_path / "big.log"
    WallabyWriter(log).write([{"time": 1, "data": "x" * 2000} for _ in range(2_000)])
    stream = open_source(tmp_path, "wallaby", {}).streams()[0]
    whole = scan_stream(stream, None, None, None)
    assert sum(c.count for c in whole.chunks) == 2_010
    assert whole.chunks[-1].end == log.stat().st_size
    found, parts = split(stream, 1 << 20)
    assert parts > 2 and isinstance(found, Scanned) and found.chunks == whole.chunks


def test_wallaby_cuts_come_from_its_index_as_the_walk_finds_them(tmp_path: Path) -> None:
    """A wallaby log's cuts are looked up in its index (record offsets), a
    few per chunk, instead of walking every record header; they are the
    walk's, for small records (chunks of CHUNK_RECORDS) and big ones (chunks
    ended by CHUNK_BYTES); an index that lags, lies or is missing costs time
    only."""
    wallaby.generate(tmp_path, 20_000, name="small.log")
    wallaby.generate(tmp_path, 10, name="big.log")
    WallabyWriter(tmp_path / "big.log").write([{"time": 1, "data": "x" * 3000} for _ in range(3_000)])
    for name in ("small.log", "big.log"):
        log = tmp_path / name
        stream = WallabyLog(log, "hour")
        whole = scan_stream(stream, None, None, None)
        with_index = {every: list(stream.cuts(None, None, every)) for every in (1, 300_000)}
        index = log.with_name(name + ".idx")
        saved = index.read_bytes()
        try:
            index.unlink()
            assert {every: list(stream.cuts(None, None, every)) for every in with_index} == with_index
            assert len(with_index[1]) >= 3
            half = 16 + 24 * (len(saved) // 48)  # lags: cuts up to where it ends
            index.write_bytes(saved[:half])
            lagging = list(stream.cuts(None, None, 1))
            assert 0 < len(lagging) < len(with_index[1]) and lagging == with_index[1][: len(lagging)]
            lying = bytearray(saved)  # the second cut's record said 16 bytes further on
            at = 16 + 24 * with_index[1][1][1]["seq"] + 16
            lying[at : at + 8] = struct.pack("<q", with_index[1][1][0] + 16)
            index.write_bytes(bytes(lying))
            assert list(stream.cuts(None, None, 1)) != with_index[1]
            found, _ = split(stream)
            assert isinstance(found, Scanned) and found.chunks == whole.chunks
        finally:
            index.write_bytes(saved)


def test_one_big_file_is_scanned_by_the_workers_and_here_at_once(
    samples: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fmt = open_source(samples["wallaby"], "wallaby", {})
    serial = Index(tmp_path / "serial", "test", "v1").update_all(fmt.streams())
    pool = DecodePool(fmt, 2)
    try:
        pool.wait_ready()  # the workers up: they take ranges from the front
        with caplog.at_level(logging.INFO, logger="fmtfs"):
            parallel = Index(tmp_path / "parallel", "test", "v1").update_all(fmt.streams(), None, pool, 0)
    finally:
        pool.close()
    assert "ranges of 1 streams here and in" in caplog.text
    assert "could not scan" not in caplog.text
    assert [table(e) for e, _ in parallel] == [table(e) for e, _ in serial]  # type: ignore[misc]


def test_a_beats_segment_measured_record_by_record_is_scanned_alike(tmp_path: Path) -> None:
    """Stream.measured (Beats: each record dumped and dropped as decoded)
    gives scan()'s chunks: times over several hours, JSON and odd payloads,
    a value only sanitizing renders (that run's records are then kept), a
    bad frame at the end; an encrypted segment is scanned as before."""
    hour = 3_600_000_000_000
    events = [dict(event(i), timestamp=TS + i * hour // 700) for i in range(5_000)]
    events[10]["fields"] = {"price": Decimal("1.5")}  # CBOR tag 4: orjson cannot dump it
    payloads = [cbor2.dumps(e) for e in events]
    payloads[20] = b"\xa4\xff"  # not CBOR
    payloads[4_000] = orjson.dumps({"timestamp": "2022-07-29T14:43:00.000000000Z", "fields": {}})
    data = struct.pack("<III", 2, 0, 0) + b"".join(frame(p) for p in payloads) + b"\x07" * 40
    (tmp_path / "0.seg").write_bytes(data)
    (tmp_path / "1.seg").write_bytes(segment("v2", [event(i) for i in range(3_000)], 1, key=KEY))
    fmt = open_source(tmp_path, "beats", {"key": KEY})
    plain, encrypted = fmt.streams()
    assert plain.measured(None, None) is not None and encrypted.measured(None, None) is None
    assert_split_is_whole(tmp_path, "beats", {"key": KEY})
    whole = scan_stream(plain, None, None, None)
    assert sum(c.count for c in whole.chunks) == 5_000
    assert [c.state.get("sanitize") for c in whole.chunks][:2] == [True, None]
    assert len({view for c in whole.chunks for view in c.lengths}) > 5  # hour buckets
    assert whole.problems and whole.problems[-1].offset > whole.problems[0].offset


def test_streams_are_cut_by_the_workers_and_here_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DecodePool.cut_all: the workers cut streams from the front while this
    process cuts from the back, into the very ranges scan_ranges makes;
    a stream a worker cannot cut is cut here."""
    # the workers may be spawned (a thread ran here before): they cut at the real grid
    monkeypatch.setattr(beats_segment, "CUT_GRID", CUT_GRID)
    fmt = open_source(beats.generate(tmp_path, 20_000, segments=4), "beats", {})
    streams = fmt.streams()
    assert len(streams) == 4
    # a cut at every chunk, or none: each stream's ranges tell its job apart
    every = {0: 1, 1: 1 << 40, 2: 1, 3: 1 << 40}
    cut_here: list[int] = []

    def here(i: int) -> list[ScanRange]:
        cut_here.append(i)
        return scan_ranges(streams[i], None, None, every[i])

    pool = DecodePool(fmt, 2)
    try:
        pool.wait_ready()
        found = pool.cut_all({i: (s.name, None, None, every[i]) for i, s in enumerate(streams)}, here)
        # a worker that fails (no such stream there) leaves the cut to this process
        fallback = pool.cut_all({0: ("no-such-stream", None, None, 1)}, lambda i: [ScanRange(None, None)])
    finally:
        pool.close()
    assert found == {i: scan_ranges(s, None, None, every[i]) for i, s in enumerate(streams)}
    assert [len(found[i]) > 1 for i in range(4)] == [True, False, True, False]
    assert cut_here and 0 not in cut_here and 1 not in cut_here  # the workers took the first two
    assert fallback == {0: [ScanRange(None, None)]}


def _put(data: bytes, ident: int) -> bytes:
    return b"\x86" + PUT_HEADER.pack(len(data), 0, ident, 1_700_000_000_000 + ident) + data


def test_kestrel_cuts_are_found_near_their_grid_lines_not_walked_to(tmp_path: Path) -> None:
    """A kestrel cut is the first PUT at or past a grid line: found by
    looking there, so bytes before it that no walk could get through do not
    stop it; every such PUT starts a chunk of the whole scan (the chunks end
    at the grid lines too), so a split scan is the whole scan."""
    queue = tmp_path / "q"
    queue.mkdir()
    puts = [_put(orjson.dumps({"n": i, "pad": "x" * (i % 300)}), i) for i in range(1600)]
    journal = WRITER_MAGIC + b"".join(puts)
    (queue / "q.1000").write_bytes(journal)
    stream = open_source(queue, "kestrel", {}).streams()[0]
    cuts = list(stream.cuts(None, None, 1))
    starts = {4 + sum(map(len, puts[:i])) for i in range(len(puts))}
    lines = range(GRID, len(journal), GRID)
    assert [at for at, _ in cuts] == [min(s for s in starts if s >= line) for line in lines]
    assert {at for at, _ in cuts} <= {c.start for c in scan_stream(stream, None, None, None).chunks}
    assert assert_split_is_whole(queue, "kestrel") == len(cuts) + 1
    # the first record's size made impossible: the cuts past it are found all the same
    broken = bytearray(journal)
    broken[5:9] = (-1).to_bytes(4, "little", signed=True)
    (queue / "q.1000").write_bytes(bytes(broken))
    assert list(open_source(queue, "kestrel", {}).streams()[0].cuts(None, None, 1)) == cuts


def test_a_kestrel_cut_inside_a_puts_data_costs_time_not_correctness(tmp_path: Path) -> None:
    """A PUT whose data holds a run of PUT headers across a grid line: the
    cut is guessed inside it, the scan before it does not end there, and
    the split scan is still the whole scan."""
    queue = tmp_path / "q"
    queue.mkdir()
    fake = b"".join(_put(b"", 10_000 + i) for i in range(kestrel_streams.CHAIN + 4))
    head = [_put(orjson.dumps({"n": i}), i) for i in range(100)]
    before = 4 + sum(map(len, head))
    pad = GRID - before - 25 + 8  # the big PUT's data reaches the grid line 8 bytes in...
    assert pad > 0
    big = _put(b"y" * pad + fake + b"z" * 500, 100)  # ...where the fake headers begin
    tail = [_put(orjson.dumps({"n": i}), i) for i in range(101, 300)]
    (queue / "q.1000").write_bytes(WRITER_MAGIC + b"".join(head) + big + b"".join(tail))
    stream = open_source(queue, "kestrel", {}).streams()[0]
    first_cut = next(iter(stream.cuts(None, None, 1)))[0]
    assert before < first_cut < before + len(big)  # guessed inside the big PUT
    assert assert_split_is_whole(queue, "kestrel") >= 2


def test_beats_cuts_are_found_near_their_grid_lines_big_frames_walked_to(tmp_path: Path) -> None:
    """A Beats cut is the first frame at or past a grid line, found near it
    (checksum and repeated sizes), or walked to when a frame longer than
    the search spans the line; each starts a chunk of the whole scan, and
    a damaged frame before a line does not stop the cuts past it."""
    queue = tmp_path / "q"
    queue.mkdir()
    events = [event(i, size=i % 400) for i in range(600)]
    events[300] = event(300, size=beats_frames.SEARCH + 2 * GRID)  # longer than the search: walked over
    body = [frame(payload_for(e, "cbor")) for e in events]
    data = segment("v2", events)
    d = len(data) - sum(map(len, body))
    (queue / "0.seg").write_bytes(data)
    stream = open_source(queue, "beats", {}).streams()[0]
    cuts = [at for at, _ in stream.cuts(None, None, 1)]
    starts = [sum(map(len, body[:i])) for i in range(len(body))]
    lines = [line for line in range(GRID, starts[-1] + 1, GRID) if line <= starts[-1]]
    expected = sorted({d + min(s for s in starts if s >= line) for line in lines})
    assert cuts == expected and len(cuts) > 10
    big = d + starts[301]  # the frame after the long one, walked to from the cut before it
    assert big in cuts and big - d - starts[300] > beats_frames.SEARCH
    assert set(cuts) <= {c.start for c in scan_stream(stream, None, None, None).chunks}
    assert assert_split_is_whole(queue, "beats") == len(cuts) + 1
    # a frame's size made implausible early on: the cuts past it are found all the same
    broken = bytearray(data)
    broken[d + starts[5] : d + starts[5] + 4] = (7).to_bytes(4, "little")
    (queue / "0.seg").write_bytes(bytes(broken))
    damaged = open_source(queue, "beats", {}).streams()[0]
    assert [at for at, _ in damaged.cuts(None, None, 1)] == cuts
    assert assert_split_is_whole(queue, "beats") == len(cuts) + 1
