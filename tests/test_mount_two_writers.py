"""Two fmtfs mounts of one source, written at the same time: the native
formats assume one producer, so fmtfs serialises writers across processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from fmtfs.samples.kestrel import generate
from tests.mounting import fmtfs, mounted

WRITER = """
import sys
view = sys.argv[1]
for i in range(40):
    with open(view, "ab") as f:
        f.write(b'{"data": "from %s %d"}\\n' % (sys.argv[2].encode(), i))
"""


def test_two_mounts_appending_to_one_queue(tmp_path: Path) -> None:
    source = generate(tmp_path / "queue", 30)
    with (
        mounted(source, cache_dir=tmp_path / "a") as first,
        mounted(source, cache_dir=tmp_path / "b") as second,
    ):
        newest = sorted((first / "jobs" / "journal").iterdir(), key=lambda p: int(p.stem))[-1].name
        writers = [
            subprocess.Popen([sys.executable, "-c", WRITER, str(mnt / "jobs" / "journal" / newest), name])
            for mnt, name in ((first, "first"), (second, "second"))
        ]
        assert [w.wait(timeout=120) for w in writers] == [0, 0]
    lines = []
    listing = fmtfs("ls", source, "jobs/journal", "--cache-dir", tmp_path / "c").stdout.decode().split()
    for name in sorted(listing, key=lambda n: int(n.split(".")[0])):
        view = f"jobs/journal/{name}"
        lines += [
            orjson.loads(x)
            for x in fmtfs("cat", source, view, "--cache-dir", tmp_path / "c").stdout.splitlines()
        ]
    ids = [line["id"] for line in lines]
    assert ids == sorted(set(ids))  # dense writers never reuse or reorder an id
    written = [line["data"] for line in lines if line.get("data", "").startswith("from ")]
    assert sorted(written) == sorted(f"from {w} {i}" for w in ("first", "second") for i in range(40))
