"""What a scan gives: Stream.measured() (Beats: each record measured and
dumped as it is decoded, so the index keeps no chunk's worth of records;
wallaby and kestrel: lines written from a template, no records built) equals scan()
and render_views() chunk by chunk, its bounds, state, time range, record
count, every view's length and, with `render`, its bytes, and the
problems too; so does a chunk a stream renders itself (Stream.render) for
a reader; a wallaby scan of odd records gives every record once, in
order, in the bucket of its time; odd kestrel records render as their
records do."""

from __future__ import annotations

from pathlib import Path

from fmtfs.formats import open_source
from fmtfs.formats.base import Chunk, Problem, Stream
from fmtfs.formats.kestrel.files import WriterFile
from fmtfs.formats.kestrel.records import WRITER_MAGIC, encode_put, encode_read_done, encode_read_head
from fmtfs.formats.kestrel.streams import WriterStream
from fmtfs.formats.wallaby import WallabyLog, create_pair, encode_record
from fmtfs.render import render_chunk, render_views
from fmtfs.samples import beats, kestrel, wallaby
from fmtfs.shape import take_data

HOUR_NS = 3600 * 10**9


def assert_measured_as_scanned(stream: Stream) -> int:
    """measured() equals scan() + render_views() chunk by chunk; the chunks."""
    scanned = list(stream.scan(None, None))
    for render in (True, False):
        measured = list(stream.measured(None, None, render=render))
        assert [p for p in measured if isinstance(p, Problem)] == [
            p for p in scanned if isinstance(p, Problem)
        ]
        pairs = list(
            zip(
                [c for c in scanned if isinstance(c, Chunk)],
                [c for c in measured if isinstance(c, Chunk)],
                strict=True,
            )
        )
        for plain, quick in pairs:
            assert (quick.start, quick.end, quick.state, quick.times) == (
                plain.start,
                plain.end,
                plain.state,
                plain.times,
            )
            rendered = render_views(plain.records)
            assert quick.records == {}
            assert quick.count == len(next(iter(plain.records.values())))
            assert quick.lengths == {view: len(data) for view, data in rendered.items()}
            if render:
                assert quick.rendered is not None
                assert {view: bytes(data) for view, data in quick.rendered.items()} == rendered
            else:
                assert quick.rendered is None
        for plain, _ in pairs:  # a reader's chunk (no records), as the stream renders it
            chunk = Chunk(plain.start, plain.end, plain.state)
            rendered = render_views(stream.decode(chunk))
            assert render_chunk(stream, chunk) == rendered
            for view, data in rendered.items():
                assert render_chunk(stream, chunk, view) == ({view: data} if data else {})
    return len(pairs)


def test_odd_wallaby_records_are_scanned_whole(tmp_path: Path) -> None:
    """Times out of order, back and forth across hours, before 1970 and at
    int64's ends; payloads that are not UTF-8, empty, or big enough to end
    a chunk by its bytes; a torn record at the end: every record once, in
    order, in records.jsonl and in the one bucket of its time, each chunk's
    time range its records' earliest and latest, the torn one reported."""
    log = tmp_path / "odd.log"
    create_pair(log)
    times = [5 * HOUR_NS + 1, 3 * HOUR_NS, 5 * HOUR_NS + 2, -1, -HOUR_NS - 7, (1 << 63) - 1, -(1 << 63), 1]
    payloads = [b"text", b"\xff\xfe not utf-8", b"", "\u00e9t\u00e9 \U0001f600".encode(), b"x" * 60_000]
    written = [(payloads[i % len(payloads)], times[i % len(times)], i % 3) for i in range(600)]
    with log.open("ab") as out:
        for payload, stamp, flags in written:
            out.write(encode_record(payload, stamp, flags))
        out.write(encode_record(b"torn", 7)[:-2])
    stream = WallabyLog(log, "hour")
    items = list(stream.scan(None, None))
    chunks = [c for c in items if isinstance(c, Chunk)]
    assert len(chunks) >= 2 and isinstance(items[-1], Problem)  # 60 kB records: chunks cut by their bytes
    records = [r for c in chunks for r in c.records[stream.records_view]]
    assert [(r["index"], r["flags"], take_data(dict(r))) for r in records] == [
        (i, flags, payload) for i, (payload, _, flags) in enumerate(written)
    ]
    at = 0
    for chunk in chunks:
        stamps = [stamp for _, stamp, _ in written[at : at + len(chunk.records[stream.records_view])]]
        at += len(stamps)
        assert chunk.times == (min(stamps), max(stamps))
        buckets = {view: recs for view, recs in chunk.records.items() if view != stream.records_view}
        assert sorted(r["index"] for recs in buckets.values() for r in recs) == [
            r["index"] for r in chunk.records[stream.records_view]
        ]
        for view, recs in buckets.items():
            assert {
                f"odd.log/buckets/{stream.bucketer.name(written[r['index']][1])}.jsonl" for r in recs
            } == {view}
    assert assert_measured_as_scanned(stream) == len(chunks)


def test_a_wallaby_log_is_measured_as_it_is_scanned(tmp_path: Path) -> None:
    """A log in time order (the sample's): its lines from the template are
    its records' lines, and a bucket holding a whole chunk is the chunk's
    very bytes (a store of kept pieces keeps them once)."""
    wallaby.generate(
        tmp_path, 20_000, step_ns=5 * 10**8
    )  # 2,048 s a chunk: some within an hour, some across two
    (stream,) = open_source(tmp_path, "wallaby", {}).streams()
    assert assert_measured_as_scanned(stream) >= 4
    chunks = [c for c in stream.measured(None, None, render=True) if isinstance(c, Chunk)]
    whole = [c for c in chunks if len(c.lengths) == 2]
    assert whole and len(whole) < len(chunks)
    for chunk in whole:
        assert chunk.rendered is not None
        records, bucket = chunk.rendered.values()
        assert bucket is records


def test_a_beats_queue_is_measured_as_it_is_scanned(tmp_path: Path) -> None:
    beats.generate(tmp_path, 5_000, segments=2)
    streams = open_source(tmp_path, "beats", {}).streams()
    assert sum(assert_measured_as_scanned(s) for s in streams if s.measured(None, None) is not None) >= 2


def test_a_kestrel_queue_is_measured_as_it_is_scanned(tmp_path: Path) -> None:
    """The sample's writer files (binary items, expiry times, error counts):
    the lines from the template are their records' lines."""
    kestrel.generate(tmp_path, 12_000)
    streams = [s for s in open_source(tmp_path, "kestrel", {}).streams() if isinstance(s, WriterStream)]
    assert len(streams) >= 4
    assert sum(assert_measured_as_scanned(s) for s in streams) >= 8


def test_odd_kestrel_records_are_measured_as_scanned(tmp_path: Path) -> None:
    """Times out of order and back and forth across hours, before 1970 and
    beyond the calendar (a raw integer, in no bucket); data that is not
    UTF-8, empty, or big enough to end a chunk by its bytes; records a
    writer file should not hold (skipped and reported) and a torn PUT at
    the end: measured() and render() give what scan() does."""
    hour = 3_600_000
    times = [5 * hour + 1, 3 * hour, 5 * hour + 2, -1, -hour - 7, 7 * hour, 1]
    payloads = [b"text", b"\xff\xfe not utf-8", b"", "\u00e9t\u00e9 \U0001f600".encode(), b"x" * 40_000]
    body = bytearray(WRITER_MAGIC + encode_read_head(0))
    for i in range(1200):
        # the latest times in PUTs without expiry; one chunk with no time range
        added = 1 << 62 if i == 100 else times[i % len(times)] + (hour // 2 if i % 3 == 1 else 0)
        expire = None if i % 3 else (added + hour if i % 9 else -(1 << 62))
        body += encode_put(i + 1, added, payloads[i % len(payloads)], expire, i % 4)
        if i % 700 == 5:
            body += encode_read_head(i)
        if i % 900 == 8:
            body += encode_read_done([i, i + 1])
    body += encode_put(9999, 1, b"torn")[:-2]
    path = tmp_path / "odd.1"
    path.write_bytes(body)
    stream = WriterStream(WriterFile("odd", 1, path, 1))
    problems = [p for p in stream.scan(None, None) if isinstance(p, Problem)]
    assert len(problems) == 3 + 2 + 1  # the READ_HEADs, the READ_DONEs, the torn PUT
    assert assert_measured_as_scanned(stream) >= 6
    chunks = [c for c in stream.measured(None, None) if isinstance(c, Chunk)]
    assert sum(c.count for c in chunks) == 1200
    assert any(len(c.lengths) > 3 for c in chunks)  # chunks across several buckets
    assert chunks[0].times is None and all(c.times is not None for c in chunks[1:])
