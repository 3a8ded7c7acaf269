"""proio reader on damaged input: truncation, junk, bad headers and payloads."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from fmtfs.formats.base import Chunk, Problem
from fmtfs.formats.proio import ProioFormat, wire
from fmtfs.formats.proio.reader import read_head, walk_heads
from tests.conftest import FIXTURES as FIXTURES_ROOT
from tests.mounting import fmtfs

FIXTURES = FIXTURES_ROOT / "proio"


def read(path: Path) -> tuple[list[dict], list[Problem]]:
    stream = ProioFormat(path, {}).streams()[0]
    events, problems = [], []
    for item in stream.scan(None, None):  # must never raise
        if isinstance(item, Problem):
            problems.append(item)
        else:
            events += item.records.get(stream.events_path, [])
    return events, problems


def same(a, b) -> bool:
    return orjson.dumps(a) == orjson.dumps(b)


def bucket_ends(data: bytes) -> list[tuple[int, int, int]]:
    """(start, end, events so far) of each bucket."""
    out, total = [], 0
    for head in walk_heads(data, len(data)):
        total += head.n_events
        out.append((head.offset, head.end, total))
    return out


@pytest.mark.parametrize("name", ["py-custom-type", "py-lz4"])
def test_truncation_at_every_offset(tmp_path, name):
    data = (FIXTURES / f"{name}.proio").read_bytes()
    full, _ = read(FIXTURES / f"{name}.proio")
    ends = bucket_ends(data)
    path = tmp_path / "t.proio"
    step = 1 if len(data) < 4000 else 7
    cuts = set(range(0, len(data), step)) | {e for _, e, _ in ends} | {s + 1 for s, _, _ in ends}
    for cut in sorted(cuts):
        path.write_bytes(data[:cut])
        events, problems = read(path)
        complete = max([n for _, e, n in ends if e <= cut], default=0)
        assert len(events) == complete, cut
        assert same(events, full[:complete]), cut
        at_boundary = cut in {e for _, e, _ in ends} or cut == 0
        if at_boundary:
            assert problems == [], cut
        elif not wire.MAGIC.startswith(data[max(e for _, e, _ in ends if e <= cut) if complete else 0 : cut]):
            assert len(problems) == 1 and "truncated" in problems[0].error, (cut, problems)


def test_corrupt_truncated_fixture_reports_the_torn_bucket():
    events, problems = read(FIXTURES / "corrupt-truncated.proio")
    assert len(events) == 19
    assert (
        len(problems) == 1 and problems[0].offset == 13256 and problems[0].file == "corrupt-truncated.proio"
    )


def test_junk_between_buckets_resyncs(tmp_path):
    data = (FIXTURES / "py-uncompressed.proio").read_bytes()
    ends = bucket_ends(data)
    cut = ends[3][1]
    junk = b"junk\xe1\xc1\x00garbage"
    path = tmp_path / "j.proio"
    path.write_bytes(data[:cut] + junk + data[cut:])
    events, problems = read(path)
    full, _ = read(FIXTURES / "py-uncompressed.proio")
    assert same(events, full)
    assert [(p.offset, "junk" in p.error) for p in problems] == [(cut, True)]


# A torn start: the tail of a bucket payload, then a magic cut in two.
TORN_START = b"\x17junk\x00from a torn bucket" + wire.MAGIC[:9]


def test_junk_before_the_first_bucket_resyncs_and_is_reported(tmp_path):
    data = (FIXTURES / "py-lz4.proio").read_bytes()
    path = tmp_path / "torn.proio"
    path.write_bytes(TORN_START + data)
    events, problems = read(path)
    full, _ = read(FIXTURES / "py-lz4.proio")
    assert same(events, full)
    assert [(p.file, p.offset) for p in problems] == [("torn.proio", 0)]
    assert f"skipped {len(TORN_START)} bytes" in problems[0].error
    assert f"magic at {len(TORN_START)}" in problems[0].error


@pytest.mark.parametrize("format_option", [(), ("--format", "proio")])
@pytest.mark.parametrize("single_file", [False, True])
def test_junk_start_through_the_command_line(tmp_path, format_option, single_file):
    folder = tmp_path / "src"
    folder.mkdir()
    path = folder / "torn.proio"
    path.write_bytes(TORN_START + (FIXTURES / "py-lz4.proio").read_bytes())
    source = path if single_file else folder
    cache = tmp_path / "cache"
    listed = fmtfs("ls", source, "torn.proio", "--cache-dir", cache, *format_option).stdout.decode()
    assert listed.split() == ["_summary.txt", "buckets/", "events.jsonl", "types/"]
    events = fmtfs("cat", source, "torn.proio/events.jsonl", "--cache-dir", cache, *format_option).stdout
    full, _ = read(FIXTURES / "py-lz4.proio")
    assert events == b"".join(orjson.dumps(e) + b"\n" for e in full)
    errors = fmtfs("cat", source, "_errors.jsonl", "--cache-dir", cache, *format_option).stdout
    assert [orjson.loads(line) for line in errors.splitlines()] == [
        {
            "file": "torn.proio",
            "offset": 0,
            "error": f"skipped {len(TORN_START)} bytes of junk before the bucket magic at {len(TORN_START)}",
        }
    ]


def test_unparsable_header_drops_only_that_bucket(tmp_path):
    data = bytearray((FIXTURES / "py-uncompressed.proio").read_bytes())
    ends = bucket_ends(bytes(data))
    start = ends[1][0]  # bucket 1: events 3 and 4
    data[start + 20] = 0xFF  # an invalid field key
    data[start + 21] = 0xFF
    path = tmp_path / "h.proio"
    path.write_bytes(bytes(data))
    events, problems = read(path)
    assert [e["event"] for e in events][:4] == [0, 1, 2, 3]
    assert len(events) == 18  # bucket 1's two events are lost, the rest renumbered after them
    assert problems[0].offset == start and "header" in problems[0].error


def test_bad_lz4_payload_resyncs_to_next_bucket(tmp_path):
    data = bytearray((FIXTURES / "py-lz4.proio").read_bytes())
    head = read_head(bytes(data), bucket_ends(bytes(data))[2][0], len(data))
    for i in range(head.payload + 7, head.end):
        data[i] ^= 0x5A
    path = tmp_path / "p.proio"
    path.write_bytes(bytes(data))
    events, problems = read(path)
    full, _ = read(FIXTURES / "py-lz4.proio")
    assert len(events) == 20 - head.n_events
    assert same(events[:5], full[:5])
    assert len(problems) == 1 and problems[0].offset == head.offset and "damaged" in problems[0].error


def test_event_length_overrun_is_damage(tmp_path):
    data = bytearray((FIXTURES / "py-uncompressed.proio").read_bytes())
    head = read_head(bytes(data), 0, len(data))
    data[head.payload : head.payload + 4] = wire.pack_u32(100000)
    path = tmp_path / "o.proio"
    path.write_bytes(bytes(data))
    events, problems = read(path)
    assert events[0]["event"] == 0 and len(events) == 17
    assert problems[0].offset == 0 and "damaged" in problems[0].error


def _bucket(header: wire.Header, payload: bytes) -> bytes:
    raw = header.SerializeToString()
    return wire.encode_bucket(raw, payload)


def test_unknown_compression_is_reported_and_skipped(tmp_path):
    data = (FIXTURES / "py-custom-type.proio").read_bytes()
    odd = wire.Header(nEvents=1, bucketSize=5, compression=7)
    path = tmp_path / "u.proio"
    path.write_bytes(_bucket(odd, b"\xe1\xc1\x00\x00\x00") + data)
    events, problems = read(path)
    assert len(events) == 4  # the custom-type bucket after it
    assert len(problems) == 1 and "unknown compression 7" in problems[0].error
    stream = ProioFormat(path, {}).streams()[0]
    chunks = [c for c in stream.scan(None, None) if isinstance(c, Chunk)]
    paths = {p for c in chunks for p in c.records}
    assert "u.proio/buckets/0.jsonl" in paths and "u.proio/buckets/1.jsonl" in paths
    summary = ProioFormat(path, {}).derived_views()["_summary.txt"]().decode()
    assert "Number of uncompressed buckets: 1\nNumber of events: 5\n" in summary


def test_zero_event_bucket_with_payload_is_skipped_not_rescanned(tmp_path):
    data = (FIXTURES / "py-custom-type.proio").read_bytes()
    # its payload is a whole bucket: reference readers would rescan into it
    empty = wire.Header(nEvents=0, bucketSize=len(data))
    path = tmp_path / "z.proio"
    path.write_bytes(_bucket(empty, data))
    events, problems = read(path)
    assert events == []
    assert len(problems) == 1 and "0 events" in problems[0].error


def test_zero_tail_and_partial_magic_are_quiet(tmp_path):
    data = (FIXTURES / "py-custom-type.proio").read_bytes()
    path = tmp_path / "q.proio"
    for tail in (b"\x00" * 64, wire.MAGIC[:7]):
        path.write_bytes(data + tail)
        events, problems = read(path)
        assert len(events) == 4 and problems == []
    path.write_bytes(data + b"trailing rubbish")
    events, problems = read(path)
    assert len(events) == 4 and len(problems) == 1 and problems[0].offset == len(data)


def test_magic_inside_payload_is_not_a_bucket(tmp_path):
    # raw = MAGIC inside an uncompressed payload must not split the bucket
    from fmtfs.formats.proio.schema import Resolver, bundled
    from fmtfs.formats.proio.writer import ProioWriter

    blobs = read_head((FIXTURES / "py-custom-type.proio").read_bytes(), 0, 2086).descriptors
    path = tmp_path / "m.proio"
    writer = ProioWriter(path, [Resolver(blobs), bundled()])
    import base64

    raw = base64.b64encode(wire.MAGIC * 2).decode()
    writer.write([{"entries": {"1": {"type": "fixture.custom.Hit", "value": {"raw": raw, "cell": "7"}}}}] * 3)
    writer.close()
    assert path.read_bytes().count(wire.MAGIC) == 1 + 6
    events, problems = read(path)
    assert problems == [] and len(events) == 3
    assert events[2]["entries"]["1"]["value"] == {"cell": "7", "raw": raw}
