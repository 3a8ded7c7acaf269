"""Count the FUSE requests a listing makes, and fmtfs's time in each.

    scripts/listing_ops.py FORMAT N [--repeat R] [--scratch DIR]

Makes a source of N copies of one sample stream (as `scripts/bench.py
--only listing` does), mounts it once to index it, then mounts it again in
this process's child with every handler of fmtfs.fuse wrapped to count its
calls and time them, and runs `ls -ld` of the N stream views R times.
Prints, per request kind, how many the kernel sent, fmtfs's total time in
them, and the wall time of each `ls` with the CPU time the mount spent
(steadier than wall time on a shared machine): what the kernel asks of a listing
(lookups per path component, getattrs, xattrs) is the part a profiler of
the mount cannot show, since the mount waits idle between requests.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench import LAYOUTS, cpu_seconds, mounted  # noqa: E402


def make_source(fmt: str, n: int, scratch: Path) -> tuple[Path, list[str]]:
    """N copies of a small sample's first stream; their views' paths."""
    layout = LAYOUTS[fmt]
    sample, source = scratch / "sample", scratch / "src"
    for folder in (sample, source):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    importlib.import_module(f"fmtfs.samples.{fmt}").generate(sample, 20)
    for i in range(n):
        for path in layout.stream_files(sample):
            shutil.copyfile(path, source / layout.renamed(path.name, i))
    first = layout.stream_files(sample)[0].name
    return source, [layout.stream_view(i, first) for i in range(n)]


def serve_counting(
    source: Path,
    mnt: Path,
    cache: Path,
    report: Path,
    also: tuple[tuple[type, str, str], ...] = (),
    workers: bool = False,
) -> None:
    """Mount in the foreground with every handler counted (the child).
    `also`: (class, method, label) of plain methods counted too (under
    `label`); `workers`: decode in worker processes, as `fmtfs mount` does."""
    import pyfuse3
    import trio

    from fmtfs.formats import open_source
    from fmtfs.fuse import FmtfsOperations, serve
    from fmtfs.views import SourceTree

    calls: dict[str, int] = defaultdict(int)
    spent: dict[str, float] = defaultdict(float)

    def counted(name, handler):
        @functools.wraps(handler)
        async def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return await handler(*args, **kwargs)
            finally:
                calls[name] += 1
                spent[name] += time.perf_counter() - start

        return wrapper

    def counted_plain(name, method):
        @functools.wraps(method)
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                calls[name] += 1
                spent[name] += time.perf_counter() - start

        return wrapper

    for name, value in list(vars(pyfuse3.Operations).items()):
        if not name.startswith("_") and callable(value) and name not in ("init", "stacktrace"):
            setattr(FmtfsOperations, name, counted(name, getattr(FmtfsOperations, name)))
    for cls, method, label in also:
        setattr(cls, method, counted_plain(label, getattr(cls, method)))

    def dump(*_):
        lines = [f"{name} {calls[name]} {spent[name]:.4f}" for name in sorted(calls)]
        report.write_text("\n".join(lines) + "\n")

    signal.signal(signal.SIGUSR1, lambda *_: (dump(), calls.clear(), spent.clear()))
    tree = SourceTree(open_source(source, None, {}), cache, watch=True)  # as `fmtfs mount`'s
    ops = FmtfsOperations(tree)
    if workers:
        tree.decode_in_workers()  # and the spill file, as fmtfs.daemon.run_mount
    options = set(pyfuse3.default_options) | {"fsname=fmtfs", "subtype=fmtfs", "default_permissions"}
    pyfuse3.init(ops, str(mnt), options)
    try:
        trio.run(serve, ops)  # until fusermount3 -u
    finally:
        pyfuse3.close(unmount=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("format", choices=sorted(LAYOUTS))
    parser.add_argument("n", type=int)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scratch", type=Path)
    parser.add_argument("--serve", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve_counting(*map(Path, args.serve))
        return
    with tempfile.TemporaryDirectory(prefix="fmtfs-listing-", dir=args.scratch) as tmp:
        scratch = Path(tmp)
        source, views = make_source(args.format, args.n, scratch)
        mnt, cache, report = scratch / "mnt", scratch / "cache", scratch / "report"
        with mounted(source, mnt, cache):
            pass  # the first mount indexes: the listing is timed on the second
        mnt.mkdir(exist_ok=True)
        child = subprocess.Popen(
            [sys.executable, __file__, args.format, "0", "--serve", source, mnt, cache, report]
        )
        try:
            while not os.path.ismount(mnt):
                time.sleep(0.05)
            for attempt in range(args.repeat):
                time.sleep(1.5)  # past the attribute and entry timeouts
                cpu = cpu_seconds(child.pid)
                start = time.perf_counter()
                subprocess.run(["ls", "-ld", *(str(mnt / v) for v in views)], stdout=subprocess.DEVNULL)
                seconds = time.perf_counter() - start
                cpu = cpu_seconds(child.pid) - cpu
                report.unlink(missing_ok=True)
                child.send_signal(signal.SIGUSR1)
                while not report.exists():
                    time.sleep(0.01)
                time.sleep(0.05)
                print(f"ls -ld of {args.n} views, try {attempt + 1}: {seconds:.3f} s, mount CPU {cpu:.3f} s")
                for line in report.read_text().splitlines():
                    name, count, total = line.split()
                    print(f"  {name:12} {int(count):7d} requests  {float(total):7.3f} s in fmtfs")
        finally:
            subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
            child.wait(timeout=30)


if __name__ == "__main__":
    main()
