"""Derived views (computed from the whole source) over a real mount: fresh
right after a write through the same mount, with no attribute-cache delay."""

from __future__ import annotations

from pathlib import Path

import orjson

from fmtfs.samples.beats import generate
from tests.mounting import mounted


def test_pending_is_fresh_right_after_a_write(tmp_path: Path) -> None:
    source = generate(tmp_path / "queue", 60)
    with mounted(source) as mnt:
        pending = mnt / "pending.jsonl"
        before = pending.stat().st_size
        lines_before = pending.read_bytes().count(b"\n")
        newest = sorted((mnt / "segments").iterdir(), key=lambda p: int(p.stem))[-1]
        line = {"timestamp": "2022-07-29T14:43:00.000000000Z", "flags": 1, "meta": {}, "fields": {"n": 1}}
        with open(newest, "ab") as f:
            f.write(orjson.dumps(line) + b"\n")
        # no sleep: the kernel must not answer from a stale cache
        assert pending.stat().st_size == before + len(orjson.dumps(line)) + 1
        data = pending.read_bytes()
        assert data.count(b"\n") == lines_before + 1
        assert orjson.loads(data.splitlines()[-1]) == line
        info = orjson.loads((mnt / "_fmtfs.json").read_bytes())
        assert info["records"] == 61
