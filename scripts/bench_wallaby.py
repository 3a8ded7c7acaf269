#!/usr/bin/env python3
"""Benchmark: a 1-million-record wallaby log through fmtfs.

Prints, side by side: generating the log; the first mount (which indexes);
`ls -lR` of every view on the second mount (index from SQLite, nothing
decoded); `cat records.jsonl` over the mount vs. the same bytes rendered in
process by the view layer (the baseline for FUSE overhead).

    .venv/bin/python scripts/bench_wallaby.py [RECORDS]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fmtfs.formats import open_source  # noqa: E402
from fmtfs.samples.wallaby import generate  # noqa: E402
from fmtfs.views import SourceTree  # noqa: E402


def timed(action) -> tuple[float, object]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def fmtfs(*args: object) -> None:
    subprocess.run([sys.executable, "-m", "fmtfs", *map(str, args)], check=True, cwd=ROOT)


def main() -> None:
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with tempfile.TemporaryDirectory(prefix="fmtfs-bench-") as scratch:
        base = Path(scratch)
        source, cache, mnt = base / "src", base / "cache", base / "mnt"
        source.mkdir()
        mnt.mkdir()
        seconds, _ = timed(lambda: generate(source, records, step_ns=1_000_000_000))
        log_mb = (source / "events.log").stat().st_size / 1e6
        print(f"generate      {records:,} records, {log_mb:.1f} MB log: {seconds:.2f} s")

        first, _ = timed(lambda: fmtfs("mount", source, mnt, "--cache-dir", cache))
        print(f"first mount   (indexes everything): {first:.2f} s = {log_mb / first:.1f} MB/s of log")
        fmtfs("umount", mnt)
        time.sleep(0.5)

        mount2, _ = timed(lambda: fmtfs("mount", source, mnt, "--cache-dir", cache))
        listing, out = timed(
            lambda: (
                subprocess.run(["ls", "-lR", str(mnt / "events.log")], capture_output=True, check=True).stdout
            )
        )
        views = sum(1 for line in out.decode().splitlines() if line.startswith("-"))
        print(f"second mount  {mount2:.2f} s; ls -lR of {views} views: {listing:.3f} s")

        view = mnt / "events.log" / "records.jsonl"
        size = view.stat().st_size
        over_fuse, _ = timed(
            lambda: subprocess.run(["cat", str(view)], stdout=subprocess.DEVNULL, check=True)
        )
        fmtfs("umount", mnt)

        tree = SourceTree(open_source(source, None, {"time_bucket": "hour"}), base / "cache2")
        tree.size("events.log/records.jsonl")

        def render_in_process() -> None:
            offset = 0
            while offset < size:
                offset += len(tree.read("events.log/records.jsonl", offset, 1 << 20))

        in_process, _ = timed(render_in_process)
        mb = size / 1e6
        print(
            f"cat           {mb:.0f} MB over the mount: {mb / over_fuse:.0f} MB/s; "
            f"in process: {mb / in_process:.0f} MB/s; ratio mount/in-process {in_process / over_fuse:.2f}"
        )


if __name__ == "__main__":
    main()
