"""Count the FUSE requests a cold and a warm `cat` of every record view
make, how much of each view the page cache still holds after the cold one,
and fmtfs's time in each request kind.

    scripts/cat_ops.py FORMAT MB [--repeat R] [--scratch DIR]

Generates a source of about MB of native files (as `scripts/bench.py`
does), mounts it once to index it, then mounts it again in this process's
child with every handler of fmtfs.fuse wrapped to count and time its calls
(scripts/listing_ops.py), and runs `cat` of the record views: once cold,
then R times warm.  Before each warm `cat` it prints how many pages of the
views `fincore` finds cached: a warm `cat` reaches fmtfs only for what the
kernel no longer holds (the DAMON kdamond on these VMs evicts page cache).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench import LAYOUTS, _tree, cpu_seconds, cpu_seconds_of, generate, mounted, view_files  # noqa: E402


def serve_counting_reads(source: Path, mnt: Path, cache: Path, report: Path) -> None:
    """listing_ops.serve_counting with decode workers, and where reads
    found their bytes counted too: in memory on the loop, in a thread (the
    LRU, the spill file), a decode here, a chunk sent to the workers."""
    from listing_ops import serve_counting

    from fmtfs.chunkreader import ChunkReader
    from fmtfs.decoders import DecodePool
    from fmtfs.spill import SpilledPieces

    also = (
        (ChunkReader, "_render", "decode"),
        (ChunkReader, "_slice", "slice_thread"),
        (ChunkReader, "read_in_memory", "read_in_memory"),
        (SpilledPieces, "get", "spill_get"),
        (DecodePool, "submit", "pool_submit"),
    )
    serve_counting(source, mnt, cache, report, also, workers=True)


def cached_pages(paths: list[Path]) -> tuple[int, int]:
    """(pages in the page cache, pages) over the files, by fincore."""
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES,SIZE", *map(str, paths)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    resident = size = 0
    for line in out.splitlines():
        res, total = map(int, line.split())
        resident += res
        size += total
    return resident // 4096, (size + 4095) // 4096


def _workers_cpu(pid: int) -> float:
    return cpu_seconds_of(_tree(pid)[1:])


def report(child: subprocess.Popen, path: Path) -> list[str]:
    path.unlink(missing_ok=True)
    child.send_signal(signal.SIGUSR1)
    while not path.exists():
        time.sleep(0.01)
    time.sleep(0.05)
    lines = []
    for line in path.read_text().splitlines():
        name, count, total = line.split()
        lines.append(f"  {name:12} {int(count):7d} requests  {float(total):7.3f} s in fmtfs")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("format", choices=sorted(LAYOUTS))
    parser.add_argument("mb", type=float)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between the cats")
    parser.add_argument("--scratch", type=Path)
    parser.add_argument("--serve", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve_counting_reads(*map(Path, args.serve))
        return
    with tempfile.TemporaryDirectory(prefix="fmtfs-cat-", dir=args.scratch) as tmp:
        scratch = Path(tmp)
        source, _, _ = generate(args.format, scratch, args.mb)
        mnt, cache, out = scratch / "mnt", scratch / "cache", scratch / "report"
        with mounted(source, mnt, cache):
            pass  # the first mount indexes
        child = subprocess.Popen(
            [sys.executable, __file__, args.format, "0", "--serve", source, mnt, cache, out]
        )
        try:
            while not os.path.ismount(mnt):
                time.sleep(0.05)
            views = view_files(mnt, LAYOUTS[args.format])
            size = sum(v.stat().st_size for v in views)
            report(child, out)  # the listing's requests: not counted
            print(f"{len(views)} views, {size / 1e6:.1f} MB")
            for attempt in range(args.repeat + 1):
                if attempt:
                    time.sleep(args.pause)
                    resident, pages = cached_pages(views)
                    print(f"cached before warm cat {attempt}: {resident}/{pages} pages")
                cpu, workers = cpu_seconds(child.pid), _workers_cpu(child.pid)
                start = time.perf_counter()
                subprocess.run(["cat", *map(str, views)], stdout=subprocess.DEVNULL, check=True)
                seconds = time.perf_counter() - start
                cpu, workers = cpu_seconds(child.pid) - cpu, _workers_cpu(child.pid) - workers
                kind = "cold" if attempt == 0 else f"warm {attempt}"
                print(f"{kind} cat: {seconds:.4f} s, mount CPU {cpu:.3f} s, its workers' {workers:.3f} s")
                print("\n".join(report(child, out)))
            copies = []
            for i, view in enumerate(views):
                copies.append(scratch / f"copy-{i}")
                shutil.copyfile(view, copies[-1])
            for _ in range(args.repeat):
                for kind, paths in (("regular", copies), ("fuse", views)):
                    start = time.perf_counter()
                    subprocess.run(["cat", *map(str, paths)], stdout=subprocess.DEVNULL, check=True)
                    print(f"{kind} cat: {time.perf_counter() - start:.4f} s", end="  ")
                print()
        finally:
            subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
            child.wait(timeout=30)


if __name__ == "__main__":
    main()
