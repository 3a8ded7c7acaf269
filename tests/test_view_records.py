"""Stream.view_records: a decode worker renders its reader's one view
without routing records to the others (fmtfs.render.render_chunk).  Its
bytes must be that view's bytes of a whole-chunk render, for every format
that has the shortcut, on samples and on odd inputs (opaque and binary
payloads, undecodable proio entries, several type views)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fmtfs.formats import open_source
from fmtfs.formats.base import Chunk
from fmtfs.formats.proio.schema import bundled
from fmtfs.formats.proio.writer import ProioWriter
from fmtfs.render import render_chunk
from fmtfs.samples import beats as beats_sample
from fmtfs.samples import proio as proio_sample
from fmtfs.samples import wallaby as wallaby_sample
from tests.conftest import FIXTURES


def _sources(tmp_path: Path) -> list[tuple[str, Path]]:
    out = []
    for name, sample, records in (
        ("beats", beats_sample, 3_000),
        ("wallaby", wallaby_sample, 5_000),  # 61 s apart, one binary payload in 97
        ("proio", proio_sample, 3_000),
    ):
        folder = tmp_path / name
        folder.mkdir()
        sample.generate(folder, records)
        out.append((name, folder))
    for fixture in sorted((FIXTURES / "proio").glob("*.proio")):
        folder = tmp_path / fixture.stem
        folder.mkdir()
        shutil.copy(fixture, folder)
        out.append(("proio", folder))
    # proio entries kept as bytes: a type nobody knows, a payload that does not decode
    folder = tmp_path / "proio-opaque"
    folder.mkdir()
    writer = ProioWriter(folder / "p.proio", [bundled()])
    writer.write(
        [
            {
                "tags": {"x": [1, 5], "y": [5]},
                "entries": {
                    "1": {"type": "some.Unknown", "payload_base64": "CAE="},
                    "5": {"type": "proio.model.eic.Particle", "payload_base64": "//8="},
                },
            }
        ]
        * 3
    )
    writer.close()
    out.append(("proio", folder))
    # a Beats segment with a payload that is no event: its opaque line
    folder = tmp_path / "beats-opaque"
    shutil.copytree(tmp_path / "beats", folder)
    segment = min(folder.glob("*.seg"))
    _damage_a_payload(segment)
    out.append(("beats", folder))
    return out


def _damage_a_payload(segment: Path) -> None:
    """Replace the first frame's CBOR payload by bytes that are not CBOR,
    with a CRC that matches (the frame stays sound, the payload is opaque)."""
    import struct
    import zlib

    data = bytearray(segment.read_bytes())
    at = 12  # plaintext version-2 header
    (size,) = struct.unpack_from("<I", data, at)
    payload = at + 4, at + size - 8
    data[payload[0] : payload[1]] = b"\xff" * (payload[1] - payload[0])
    struct.pack_into("<I", data, at + size - 8, zlib.crc32(data[at : at + size - 8]))
    segment.write_bytes(bytes(data))


def test_one_view_of_a_chunk_renders_as_that_view_of_the_whole_chunk(tmp_path: Path) -> None:
    shortcuts = 0
    rendered: dict[str, bytes] = {}
    for fmt_name, folder in _sources(tmp_path):
        fmt = open_source(folder, fmt_name, {})
        for stream in fmt.streams():
            for scanned in stream.scan(None, None):
                if not isinstance(scanned, Chunk):
                    continue
                chunk = Chunk(scanned.start, scanned.end, scanned.state, {})
                every = render_chunk(stream, chunk)
                assert every, f"{folder.name}: a chunk renders nothing"
                for view, data in every.items():
                    shortcut = stream.view_records(chunk, view)
                    if shortcut is not None:
                        shortcuts += 1
                        assert list(shortcut) == stream.decode(chunk)[view], (folder.name, view)
                    assert render_chunk(stream, chunk, view) == {view: data}, (folder.name, view)
                    rendered[folder.name] = rendered.get(folder.name, b"") + data
    assert shortcuts > 0
    # the odd cases were really met
    assert b'"data_base64"' in rendered["beats-opaque"] and b'"data_base64"' not in rendered["beats"]
    assert b'"data_base64"' in rendered["wallaby"]
    assert rendered["proio-opaque"].count(b'"payload_base64"') >= 12  # 2 per event, in events and types


@pytest.mark.parametrize("fmt_name", ["beats", "wallaby", "proio"])
def test_views_without_a_shortcut_are_left_to_the_whole_chunk_decode(tmp_path: Path, fmt_name: str) -> None:
    sample = {"beats": beats_sample, "wallaby": wallaby_sample, "proio": proio_sample}[fmt_name]
    sample.generate(tmp_path, 500)
    stream = open_source(tmp_path, fmt_name, {}).streams()[0]
    scanned = next(c for c in stream.scan(None, None) if isinstance(c, Chunk))
    chunk = Chunk(scanned.start, scanned.end, scanned.state, {})
    views = list(scanned.records)
    assert len(views) >= 2  # the stream's own view, then buckets (and proio's type views)
    assert stream.view_records(chunk, views[0]) is not None
    assert all(stream.view_records(chunk, view) is None for view in views[1:])
