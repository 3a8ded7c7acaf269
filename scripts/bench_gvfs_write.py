#!/usr/bin/env python3
"""Benchmark: a bulk write of gvfs `set` entries through fmtfs.

Writes N `set` lines (distinct paths, as a script tagging many files would)
into `home/journal.jsonl` of a fresh gvfs-metadata folder, two ways, and
prints the time, how many tree rebuilds (rotations) it took, and the final
journal size:

- in process: the gvfs writer, fed BATCH lines per write() as FUSE hands a
  `cat` over in pieces;
- over a real mount: `cat lines >> <mnt>/home/journal.jsonl`.

    .venv/bin/python scripts/bench_gvfs_write.py [N] [BATCH]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fmtfs.formats.gvfs import GvfsFormat, store  # noqa: E402
from fmtfs.formats.gvfs.tree import read_header  # noqa: E402


def lines(n: int) -> list[dict]:
    return [
        {
            "op": "set",
            "time": 1_795_400_000 + i,
            "path": f"/bulk/d{i // 1000:03d}/f{i:06d}.txt",
            "key": "k",
            "value": f"v{i}",
        }
        for i in range(n)
    ]


def fresh(folder: Path) -> None:
    folder.mkdir()
    store.create_tree(folder / "home")


def outcome(folder: Path) -> str:
    tag = read_header((folder / "home").read_bytes()).tag
    journal = folder / store.journal_name("home", tag)
    return (
        f"journal {journal.stat().st_size // 1024} KiB, tree {(folder / 'home').stat().st_size // 1024} KiB"
    )


def in_process(folder: Path, records: list[dict], batch: int) -> float:
    writer = GvfsFormat(folder, {}).writer("home/journal.jsonl", False)
    start = time.perf_counter()
    for i in range(0, len(records), batch):
        writer.write(records[i : i + batch])
    writer.sync()
    return time.perf_counter() - start


def over_mount(folder: Path, data: bytes, scratch: Path) -> float:
    mnt = scratch / "mnt"
    mnt.mkdir()
    fmtfs = [sys.executable, "-m", "fmtfs"]
    subprocess.run([*fmtfs, "mount", folder, mnt, "--cache-dir", scratch / "cache"], check=True, cwd=ROOT)
    try:
        source = scratch / "lines.jsonl"
        source.write_bytes(data)
        start = time.perf_counter()
        with open(mnt / "home" / "journal.jsonl", "ab") as out, open(source, "rb") as src:
            while piece := src.read(128 << 10):
                out.write(piece)
        return time.perf_counter() - start
    finally:
        subprocess.run([*fmtfs, "umount", mnt], check=True, cwd=ROOT)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    records = lines(n)
    data = b"".join(orjson.dumps(r) + b"\n" for r in records)
    with tempfile.TemporaryDirectory(prefix="fmtfs-bench-") as scratch:
        base = Path(scratch)
        fresh(base / "a")
        seconds = in_process(base / "a", records, batch)
        print(f"in process  {n:,} sets, {batch} per write(): {seconds:.2f} s  ({outcome(base / 'a')})")
        fresh(base / "b")
        seconds = over_mount(base / "b", data, base)
        print(f"over mount  {n:,} sets, cat >> journal.jsonl: {seconds:.2f} s  ({outcome(base / 'b')})")


if __name__ == "__main__":
    main()
