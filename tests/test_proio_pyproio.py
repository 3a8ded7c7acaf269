"""py-proio 0.12.467 as an oracle: it must read what our writer writes.

py-proio cannot live in the project venv (it needs protobuf 3.x and lz4 2.x;
spec §8), so it runs in its own interpreter, found via $PYPROIO_PYTHON
(default /tmp/pyproio-venv/bin/python, made with
`python3 -m venv /tmp/pyproio-venv && SETUPTOOLS_USE_DISTUTILS=stdlib
/tmp/pyproio-venv/bin/pip install protobuf==3.20.3 lz4==2.2.1 proio==0.12.467`).
scripts/test.sh installs it as .venv-pyproio and sets $PYPROIO_PYTHON."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fmtfs.formats.base import Problem
from fmtfs.formats.proio import ProioFormat, wire
from fmtfs.formats.proio.reader import read_head
from fmtfs.formats.proio.schema import Resolver, bundled
from fmtfs.formats.proio.writer import ProioWriter
from tests.conftest import FIXTURES as FIXTURES_ROOT

FIXTURES = FIXTURES_ROOT / "proio"
PYTHON = os.environ.get("PYPROIO_PYTHON", "/tmp/pyproio-venv/bin/python")

ORACLE = r"""
import base64, json, sys
import proio
from google.protobuf import json_format
out = []
with proio.Reader(sys.argv[1]) as reader:
    for event in reader:
        tags = {t: list(event.tagged_entries(t)) for t in event.tags()}
        entries = {}
        for i in event.all_entries():
            e = event.get_entry(i)
            entries[str(i)] = {"type": e.DESCRIPTOR.full_name,
                               "value": json_format.MessageToDict(e, preserving_proto_field_name=True)}
        meta = {k: base64.b64encode(v).decode() for k, v in event.metadata.items()}
        out.append({"metadata": meta, "tags": tags, "entries": entries})
print(json.dumps(out))
"""


@pytest.fixture(scope="module", autouse=True)
def oracle_interpreter() -> None:
    """scripts/test.sh installs the oracle; without it these tests fail, not skip."""
    usable = Path(PYTHON).exists() and (
        subprocess.run([PYTHON, "-c", "import proio"], capture_output=True).returncode == 0
    )
    assert usable, (
        f"py-proio oracle interpreter {PYTHON} is missing: run scripts/test.sh (see module docstring)"
    )


def oracle(path: Path) -> list[dict]:
    done = subprocess.run([PYTHON, "-c", ORACLE, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def ours(path: Path) -> list[dict]:
    (stream,) = ProioFormat(path, {}).streams()
    out = []
    for item in stream.scan(None, None):
        assert not isinstance(item, Problem)
        for line in item.records.get(stream.events_path, []):
            meta = {k: base64.b64encode(v.encode()).decode() for k, v in line["metadata"].items()}
            meta.update(line.get("metadata_base64", {}))
            entries = {k: {"type": e["type"], "value": e["value"]} for k, e in line["entries"].items()}
            out.append({"metadata": meta, "tags": line["tags"], "entries": entries})
    return out


def test_oracle_agrees_on_a_fixture():
    assert oracle(FIXTURES / "py-uncompressed.proio") == ours(FIXTURES / "py-uncompressed.proio")


@pytest.mark.parametrize("compression", [wire.NONE, wire.GZIP, wire.LZ4])  # py-proio has no LZMA
def test_py_proio_reads_our_buckets(tmp_path, compression):
    source = FIXTURES / "py-uncompressed.proio"
    (stream,) = ProioFormat(source, {}).streams()
    lines = [line for c in stream.scan(None, None) for line in c.records[stream.events_path]]
    path = tmp_path / "w.proio"
    writer = ProioWriter(path, [bundled()], compression=compression)
    writer.write(lines[:4])
    writer.write(lines[4:])
    writer.close()
    theirs = oracle(path)
    assert len(theirs) == 20
    assert theirs == ours(path) == ours(source)


def test_py_proio_reads_appended_custom_types(tmp_path):
    path = tmp_path / "c.proio"
    shutil.copy(FIXTURES / "py-custom-type.proio", path)
    blobs = read_head(path.read_bytes(), 0, path.stat().st_size).descriptors
    writer = ProioWriter(path, [Resolver(blobs), bundled()])
    hit = {"type": "fixture.custom.Hit", "value": {"cell": "9", "kind": "CALO", "labels": ["z"]}}
    particle = {"type": "proio.model.lcio.MCParticle", "value": {"PDG": 13}}
    writer.write(
        [
            {
                "metadata": {"note": "added"},
                "tags": {"Hits": [1], "MC": [2]},
                "entries": {"1": hit, "2": particle},
            }
        ]
    )
    writer.close()
    theirs = oracle(path)
    assert len(theirs) == 5
    assert theirs == ours(path)
    assert theirs[4]["entries"]["1"]["value"] == {"cell": "9", "labels": ["z"], "kind": "CALO"}
