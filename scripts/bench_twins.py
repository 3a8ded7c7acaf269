#!/usr/bin/env python3
"""Benchmark: Parquet twins of a Beats version-2 queue, one run.

    .venv/bin/python scripts/bench_twins.py [MEGABYTES] [--root CHECKOUT] [--no-spark]

Generates a plaintext Beats queue of about MEGABYTES of segments, then:
  1. indexes it (`fmtfs ls`, no twin built), mounts it and times
     `ls -l parquet/segments` right away: no twin is on disk yet, so this
     is the time to build them all (the background builder, which starts
     with the mount, and the listing's stats building side by side);
  2. reads the mount process's peak RSS (VmHWM in /proc/PID/status), once
     mounted and after building the twins;
  3. deletes the twins, mounts, and waits for the background builder to
     make them all (nobody stats parquet/): time and the mount's peak RSS;
  4. mounts again and times `ls -l parquet/segments` with the twins on
     disk (nothing to build: the stat of a twin is a stat of its file);
  5. times spark.read.parquet(parquet/segments).count() over the mount
     against spark.read.json(...).count() of a plain local folder holding
     the same JSON bytes as segments/.
`--root` runs another checkout's fmtfs (e.g. /work/main) for a before/after.
bench_twins() returns the figures, for scripts/bench.py."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _fmtfs(root: Path, *args: object) -> None:
    subprocess.run(
        [sys.executable, "-m", "fmtfs", *map(str, args)], check=True, cwd=root, stdout=subprocess.DEVNULL
    )


def _mount_pid(mountpoint: Path) -> int:
    """The pid of the fmtfs process serving `mountpoint`."""
    needle = os.fsencode(str(mountpoint))
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    args = f.read().split(b"\0")
            except OSError:
                continue
            if needle in args and b"mount" in args:
                return int(entry.name)
    raise RuntimeError(f"no fmtfs process serves {mountpoint}")


def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _timed_ls(folder: Path) -> float:
    start = time.perf_counter()
    subprocess.run(["ls", "-l", str(folder)], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def _background_build(root: Path, source: Path, mnt: Path, cache: Path) -> dict[str, float]:
    """With no twin on disk, mount and let the background builder make them
    all while nobody stats parquet/: how long, and the mount's peak RSS."""
    shutil.rmtree(cache / "parquet")
    start = time.perf_counter()
    _fmtfs(root, "mount", source, mnt, "--cache-dir", cache)
    try:
        pid = _mount_pid(mnt)
        views = 0
        for folder, dirs, files in os.walk(mnt):
            if folder == str(mnt):
                dirs.remove("parquet")  # a readdir there stats (so builds) the twins
            views += sum(1 for name in files if name.endswith(".jsonl") and not name.startswith("_"))
        while len(list((cache / "parquet").glob("*.parquet"))) < views:
            time.sleep(0.2)
        took = time.perf_counter() - start
        rss = _peak_rss_mb(pid)
    finally:
        _fmtfs(root, "umount", mnt)
    print(f"background build of all {views} twins after a mount: {took:.1f} s, mount's peak RSS {rss:.0f} MB")
    return {"background_build_s": took, "background_peak_rss_mb": rss}


def bench_twins(
    megabytes: int = 400, root: Path = ROOT, spark: bool = True, background: bool = True
) -> dict[str, float]:
    """Figures of the Parquet twins of a Beats queue (see the module docstring)."""
    sys.path.insert(0, str(ROOT))
    from fmtfs.samples.beats import generate

    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="fmtfs-bench-twins-") as scratch:
        base = Path(scratch)
        probe = generate(base / "probe", 2000, segments=1)
        per_record = sum(p.stat().st_size for p in probe.glob("*.seg")) / 2000
        records = int(megabytes * 1e6 / per_record)
        source = generate(base / "queue", records, segments=max(1, megabytes // 100))
        native = sum(p.stat().st_size for p in source.glob("*.seg"))
        segments = len(list(source.glob("*.seg")))
        print(f"queue              {records:,} frames, {native / 1e6:.0f} MB in {segments} segments")
        figures["native_mb"] = native / 1e6
        mnt, cache = base / "mnt", base / "cache"
        mnt.mkdir()

        start = time.perf_counter()
        _fmtfs(root, "ls", source, "--cache-dir", cache)  # indexes, builds no twin
        figures["index_s"] = time.perf_counter() - start
        print(f"index              {figures['index_s']:.1f} s")
        _fmtfs(root, "mount", source, mnt, "--cache-dir", cache)
        pid = _mount_pid(mnt)
        figures["rss_after_mount_mb"] = _peak_rss_mb(pid)
        figures["ls_no_twins_s"] = _timed_ls(mnt / "parquet" / "segments")
        figures["peak_rss_mb"] = _peak_rss_mb(pid)
        twins = sum(f.stat().st_size for f in (mnt / "parquet" / "segments").iterdir())
        json_bytes = sum(f.stat().st_size for f in (mnt / "segments").iterdir())
        figures["twins_mb"], figures["json_mb"] = twins / 1e6, json_bytes / 1e6
        print(f"ls -l parquet/segments, no twin on disk (builds them all): {figures['ls_no_twins_s']:.1f} s")
        print(
            f"peak RSS of the mount: {figures['rss_after_mount_mb']:.0f} MB once mounted, "
            f"{figures['peak_rss_mb']:.0f} MB after building the twins"
        )
        print(f"twins {twins / 1e6:.0f} MB for {json_bytes / 1e6:.0f} MB of JSON")
        _fmtfs(root, "umount", mnt)
        if background:
            figures |= _background_build(root, source, mnt, cache)

        _fmtfs(root, "mount", source, mnt, "--cache-dir", cache)
        try:
            figures["ls_twins_on_disk_s"] = _timed_ls(mnt / "parquet" / "segments")
            print(
                f"ls -l parquet/segments, second mount (twins on disk): {figures['ls_twins_on_disk_s']:.2f} s"
            )
            if spark:
                figures |= _spark_counts(mnt, base / "plain")
        finally:
            _fmtfs(root, "umount", mnt)
    return figures


def _spark_counts(mnt: Path, plain: Path) -> dict[str, float]:
    """spark.read.parquet of the twins vs spark.read.json of the same bytes
    in a plain folder, one local session, each read twice (the first warms
    the page cache and the JVM)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    plain.mkdir()
    for view in (mnt / "segments").iterdir():
        with open(view, "rb") as src, open(plain / view.name, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    spark = (
        SparkSession.builder.master("local[*]")
        .appName("fmtfs-bench-twins")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    figures: dict[str, float] = {}
    try:
        reads = {
            "json_plain": lambda: spark.read.json(str(plain)).count(),
            "parquet_mount": lambda: spark.read.parquet(str(mnt / "parquet" / "segments")).count(),
        }
        counts = {}
        for name, read in reads.items():
            counts[name] = read()
            start = time.perf_counter()
            read()
            figures[f"spark_{name}_s"] = time.perf_counter() - start
        assert counts["json_plain"] == counts["parquet_mount"], counts
    finally:
        spark.stop()
    ratio = figures["spark_parquet_mount_s"] / figures["spark_json_plain_s"]
    print(
        f"spark count(): read.json of a plain folder {figures['spark_json_plain_s']:.2f} s, "
        f"read.parquet of the twins over the mount {figures['spark_parquet_mount_s']:.2f} s "
        f"(ratio {ratio:.2f}; {counts['json_plain']:,} rows)"
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("megabytes", type=int, nargs="?", default=400)
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose fmtfs is mounted")
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--no-background", action="store_true", help="for a checkout without the builder")
    args = parser.parse_args()
    bench_twins(args.megabytes, args.root.resolve(), not args.no_spark, not args.no_background)


if __name__ == "__main__":
    main()
