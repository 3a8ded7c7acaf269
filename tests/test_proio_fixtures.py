"""proio reader against the shared fixtures and their independent decodes."""

from __future__ import annotations

import base64
import json
import shutil

import orjson
import pytest

from fmtfs.formats import detect
from fmtfs.formats.base import Chunk, Problem
from fmtfs.formats.proio import ProioFormat, wire
from fmtfs.formats.proio.bundled import BUNDLED
from fmtfs.formats.proio.format import SNIFF_BYTES
from fmtfs.formats.proio.reader import read_head
from tests import resume
from tests.conftest import FIXTURES as FIXTURES_ROOT

FIXTURES = FIXTURES_ROOT / "proio"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.proio"))

# spec §9: LZMA, LZ4, GZIP, uncompressed, events, FileDescriptorProtos
SUMMARY = {
    "py-uncompressed": (0, 0, 0, 11, 20, 3),
    "py-lz4": (0, 11, 0, 0, 20, 3),
    "go-gzip": (0, 0, 10, 0, 20, 3),
    "py-custom-type": (0, 0, 0, 1, 4, 2),
    "corrupt-truncated": (0, 0, 0, 11, 20, 3),
    "sample-muons-lz4": (0, 1, 0, 0, 10, 0),
}


def scan(fmt: ProioFormat) -> tuple[dict[str, list], list[Problem], list[Chunk]]:
    records: dict[str, list] = {}
    problems, chunks = [], []
    for stream in fmt.streams():
        for item in stream.scan(None, None):
            if isinstance(item, Problem):
                problems.append(item)
                continue
            chunks.append(item)
            for path, lines in item.records.items():
                records.setdefault(path, []).extend(lines)
    return records, problems, chunks


def expected(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.expected.json").read_text())


def expected_metadata(meta: dict) -> tuple[dict, dict]:
    text, other = {}, {}
    for key, value in meta.items():
        raw = base64.b64decode(value["b64"])
        try:
            text[key] = raw.decode("utf-8")
        except UnicodeDecodeError:
            other[key] = value["b64"]
    return text, other


def dumps(value) -> bytes:
    return orjson.dumps(value)  # key order matters: compare rendered bytes


@pytest.mark.parametrize("name", NAMES)
def test_events_match_expected_decode(name):
    exp = expected(name)
    fmt = ProioFormat(FIXTURES / f"{name}.proio", {})
    records, problems, _ = scan(fmt)
    view = f"{name}.proio"
    events = records[f"{view}/events.jsonl"]
    assert len(events) == len(exp["events"]) == exp["n_events"] == exp["reference_reader_events"]
    for line, want in zip(events, exp["events"], strict=True):
        assert line["event"] == want["index"]
        text, other = expected_metadata(want["metadata"])
        assert line["metadata"] == text
        assert line.get("metadata_base64", {}) == other
        assert list(line) == ["event", "metadata"] + (["metadata_base64"] if other else []) + [
            "tags",
            "entries",
        ]
        assert {k: line["tags"][k] for k in sorted(line["tags"])} == want["tags"]
        assert list(line["entries"]) == list(want["entries"])
        for entry_id, entry in line["entries"].items():
            w = want["entries"][entry_id]
            assert entry["type"] == w["type"]
            assert dumps(entry["value"]) == dumps(w["json"])  # same keys, same order, same values
    assert [p.offset for p in problems] == (
        [exp["buckets"][-1]["offset"]] if name == "corrupt-truncated" else []
    )


@pytest.mark.parametrize("name", NAMES)
def test_bucket_and_type_views_partition_the_events(name):
    exp = expected(name)
    records, _, _ = scan(ProioFormat(FIXTURES / f"{name}.proio", {}))
    view = f"{name}.proio"
    events = records[f"{view}/events.jsonl"]
    for b, bucket in enumerate(b for b in exp["buckets"] if not b["truncated"]):
        want = [e["index"] for e in exp["events"] if e["bucket"] == b]
        assert [e["event"] for e in records[f"{view}/buckets/{b}.jsonl"]] == want
        assert len(want) == bucket["nEvents"]
    # every entry of every event shows once in its type's file, with its tags
    by_type: dict[str, list] = {}
    for event in events:
        for entry_id, entry in event["entries"].items():
            tags = [t for t, ids in event["tags"].items() if int(entry_id) in ids]
            by_type.setdefault(entry["type"], []).append(
                {"event": event["event"], "entry": int(entry_id), "tags": tags, "value": entry["value"]}
            )
    types = {p.split("/types/")[1][: -len(".jsonl")]: v for p, v in records.items() if "/types/" in p}
    assert types == by_type


def test_tag_order_is_stored_order():
    records, _, _ = scan(ProioFormat(FIXTURES / "py-uncompressed.proio", {}))
    line = records["py-uncompressed.proio/types/proio.model.eic.Particle.jsonl"][1]
    assert line["tags"] == ["Particle", "GenStable"]  # as LAYOUT.md §3 shows it, first-use order
    assert list(line) == ["event", "entry", "tags", "value"]
    untagged = [
        t for t in records["py-uncompressed.proio/types/proio.model.eic.Particle.jsonl"] if not t["tags"]
    ]
    assert [(t["event"], t["entry"]) for t in untagged] == [(3, 4)]


@pytest.mark.parametrize("name", NAMES)
def test_summary_matches_proio_summary(name):
    fmt = ProioFormat(FIXTURES / f"{name}.proio", {})
    n = SUMMARY[name]
    want = (
        f"Number of LZMA buckets: {n[0]}\nNumber of LZ4 buckets: {n[1]}\nNumber of GZIP buckets: {n[2]}\n"
        f"Number of uncompressed buckets: {n[3]}\nNumber of events: {n[4]}\n"
        f"Number of FileDescriptorProtos: {n[5]}\n"
    )
    views = fmt.derived_views()
    assert views[f"{name}.proio/_summary.txt"]() == want.encode()
    assert views["_summary.txt"]() == want.encode()


def test_folder_source_root_summary_adds_up(tmp_path):
    for name in ("py-lz4", "go-gzip"):
        shutil.copy(FIXTURES / f"{name}.proio", tmp_path / f"{name}.proio")
    (tmp_path / "notes.txt").write_text("not a stream")
    assert detect(tmp_path) == "proio"
    fmt = ProioFormat(tmp_path, {})
    assert [s.name for s in fmt.streams()] == ["go-gzip.proio", "py-lz4.proio"]
    text = fmt.derived_views()["_summary.txt"]().decode()
    assert "Number of LZ4 buckets: 11\nNumber of GZIP buckets: 10\n" in text
    assert "Number of events: 40\n" in text
    assert fmt.info()["streams"]["go-gzip.proio"]["compression"] == {"GZIP": 10}


def test_detect(tmp_path):
    assert ProioFormat.detect(FIXTURES / "py-lz4.proio")
    other = tmp_path / "x.bin"
    other.write_bytes(b"\xe1\xc1" + b"\x00" * 13 + b"\x01")
    assert not ProioFormat.detect(other)
    assert not ProioFormat.detect(tmp_path)
    # a torn start: detected by the suffix, or by a magic within the first bytes
    data = (FIXTURES / "py-lz4.proio").read_bytes()
    torn = data[5:]  # starts inside the first magic
    (tmp_path / "torn.proio").write_bytes(torn)
    assert ProioFormat.detect(tmp_path / "torn.proio") and ProioFormat.detect(tmp_path)
    (tmp_path / "torn.proio").unlink()
    (tmp_path / "torn.bin").write_bytes(torn)
    assert ProioFormat.detect(tmp_path / "torn.bin") and ProioFormat.detect(tmp_path)
    (tmp_path / "torn.bin").write_bytes(b"\x00" * SNIFF_BYTES + data)
    assert not ProioFormat.detect(tmp_path / "torn.bin") and not ProioFormat.detect(tmp_path)


@pytest.mark.parametrize("name", NAMES)
def test_decode_repeats_scan_and_state_is_small(name):
    stream = ProioFormat(FIXTURES / f"{name}.proio", {}).streams()[0]
    chunks = [c for c in stream.scan(None, None) if isinstance(c, Chunk)]
    assert chunks
    for chunk in chunks:
        fresh = Chunk(chunk.start, chunk.end, chunk.state)
        assert dumps(stream.decode(fresh)) == dumps(chunk.records)
        assert len(orjson.dumps(chunk.state)) < 300  # offsets, not descriptors
        json.loads(json.dumps(chunk.state))  # JSON-serialisable


def test_chunks_group_small_buckets_and_decode_from_the_middle(monkeypatch):
    from fmtfs.formats.proio import reader

    monkeypatch.setattr(reader, "CHUNK_EVENTS", 3)
    stream = ProioFormat(FIXTURES / "py-uncompressed.proio", {}).streams()[0]
    chunks = [c for c in stream.scan(None, None) if isinstance(c, Chunk)]
    assert len(chunks) > 3
    assert all(a.end == b.start for a, b in zip(chunks, chunks[1:], strict=False))
    # a scan from any chunk's start and state gives that chunk and the rest again
    for i in (1, len(chunks) // 2, len(chunks) - 1):
        again = resume.rescan(stream, chunks[i])
        assert [(c.end, c.state) for c in again] == [(c.end, c.state) for c in chunks[i:]]
        assert dumps([c.records for c in again]) == dumps([c.records for c in chunks[i:]])
    # a chunk after the example/lcio descriptors resolves them from offsets
    last = chunks[-1]
    assert len(last.state["descriptors"]) == 3
    stream2 = ProioFormat(FIXTURES / "py-uncompressed.proio", {}).streams()[0]  # cold caches
    fresh = stream2.decode(Chunk(last.start, last.end, last.state))
    assert dumps(fresh) == dumps(last.records)
    assert any("lcio.MCParticle" in p for p in fresh)


def test_scan_resumes_when_the_file_grows(tmp_path):
    data = (FIXTURES / "py-uncompressed.proio").read_bytes()
    path = tmp_path / "s.proio"
    cut = 7000
    path.write_bytes(data[:cut])
    stream = ProioFormat(path, {}).streams()[0]
    first = list(stream.scan(None, None))
    chunks = [c for c in first if isinstance(c, Chunk)]
    assert isinstance(first[-1], Problem) and "truncated" in first[-1].error
    path.write_bytes(data)
    assert not [p for p in stream.scan(chunks[-1].start, chunks[-1].state) if isinstance(p, Problem)]
    resumed = resume.records(chunks[:-1] + resume.rescan(stream, chunks[-1]), "s.proio/events.jsonl")
    whole, _, _ = scan(ProioFormat(path, {}))
    assert dumps(resumed) == dumps(whole["s.proio/events.jsonl"])


def test_muons_need_bundled_or_given_descriptors(tmp_path):
    records, _, _ = scan(ProioFormat(FIXTURES / "sample-muons-lz4.proio", {}))
    entry = records["sample-muons-lz4.proio/events.jsonl"][0]["entries"]["1"]
    assert entry["type"] == "proio.model.eic.Particle" and "value" in entry


def test_descriptor_set_option_resolves_unknown_types(tmp_path, monkeypatch):
    from google.protobuf import descriptor_pb2

    from fmtfs.formats.proio import schema

    # a stream with a type known neither to it nor to the bundle: fixture.custom.Hit
    # without its descriptors in the header.
    data = (FIXTURES / "py-custom-type.proio").read_bytes()
    head = read_head(data, 0, len(data))
    header = wire.Header.FromString(data[20 : 20 + head.header_len])
    blobs = list(header.fileDescriptor)
    del header.fileDescriptor[:]
    raw = header.SerializeToString()
    path = tmp_path / "bare.proio"
    path.write_bytes(wire.MAGIC + wire.pack_u32(len(raw)) + raw + data[head.payload :])
    records, _, _ = scan(ProioFormat(path, {}))
    entry = records["bare.proio/events.jsonl"][0]["entries"]["1"]
    assert entry["type"] == "fixture.custom.Hit" and "payload_base64" in entry and "value" not in entry
    assert (
        records["bare.proio/types/fixture.custom.Hit.jsonl"][0]["payload_base64"] == entry["payload_base64"]
    )

    fds = descriptor_pb2.FileDescriptorSet(
        file=[descriptor_pb2.FileDescriptorProto.FromString(b) for b in blobs]
    )
    set_path = tmp_path / "custom.desc"
    set_path.write_bytes(fds.SerializeToString())
    records, _, _ = scan(ProioFormat(path, {"descriptor_set": set_path}))
    want = expected("py-custom-type")["events"][0]["entries"]["1"]["json"]
    assert dumps(records["bare.proio/events.jsonl"][0]["entries"]["1"]["value"]) == dumps(want)
    assert schema.bundled().blobs["proio/model/eic/eic.proto"] == BUNDLED["eic"]


def test_bundled_descriptors_match_fixture_files():
    for name, blob in BUNDLED.items():
        assert (FIXTURES / "descriptors" / f"{name}.fdp.bin").read_bytes() == blob


def test_first_header_worked_example():
    data = (FIXTURES / "py-uncompressed.proio").read_bytes()
    head = read_head(data, 0, len(data))
    assert (head.header_len, head.n_events, head.size, head.compression) == (1813, 3, 723, wire.NONE)
    assert head.metadata == [("generator", b"proio-fixture-gen 1.0"), ("run", b"1")]
    assert len(head.descriptors[0]) == 1759
    assert data[head.payload : head.payload + 8] == bytes.fromhex("ed0000000a110a08")
