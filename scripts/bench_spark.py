#!/usr/bin/env python3
"""Benchmark: Spark over fmtfs, side by side, one run.

    .venv/bin/python scripts/bench_spark.py [--format wallaby] [--records 300000]

Generates a sample source, mounts it, copies the JSONL bytes of its biggest
view folder to a plain local folder, then times in one local-mode Spark
session:
  1. spark.read.json(folder).count() over the plain local folder (baseline)
  2. the same over the mount (the first read renders; the second is warm)
  3. spark.read.parquet(parquet/folder).count() over the mount (the first
     read builds the Parquet twins: every twin Spark's listing stats,
     sub-folders such as wallaby's buckets/ included)
  4. spark.read.format("fmtfs") over the native files, no mount (the first
     read infers the schema on the driver; the second uses the cached one;
     then with 16 chunks per Spark task instead of one)
and prints the figures with the ratio to the baseline."""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def fmtfs(*args: object) -> None:
    subprocess.run([sys.executable, "-m", "fmtfs", *map(str, args)], check=True, cwd=ROOT)


def biggest_view_folder(mnt: Path) -> tuple[str, list[Path]]:
    best: tuple[int, str, list[Path]] = (-1, "", [])
    for folder, dirs, files in os.walk(mnt):
        rel = os.path.relpath(folder, mnt)
        if rel == "parquet":
            dirs[:] = []
            continue
        views = [Path(folder) / f for f in files if f.endswith(".jsonl") and not f.startswith("_")]
        size = sum(v.stat().st_size for v in views)
        if size > best[0]:
            best = (size, "" if rel == "." else rel, views)
    return best[1], best[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", default="wallaby")
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--cores", default="*", help="local[N] Spark cores")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))

    with tempfile.TemporaryDirectory(prefix="fmtfs-bench-spark-") as scratch_name:
        scratch = Path(scratch_name)
        src, mnt, plain, cache = (scratch / n for n in ("src", "mnt", "plain", "cache"))
        for folder in (src, mnt, plain):
            folder.mkdir()
        t0 = time.perf_counter()
        source = importlib.import_module(f"fmtfs.samples.{args.format}").generate(src, args.records)
        generated = time.perf_counter() - t0
        t0 = time.perf_counter()
        fmtfs("mount", source, mnt, "--cache-dir", cache)
        mounted = time.perf_counter() - t0
        try:
            rel, views = biggest_view_folder(mnt)
            for view in views:
                shutil.copyfile(view, plain / view.name)
            size = sum(v.stat().st_size for v in views)
            print(
                f"{args.format}: {args.records} records generated in {generated:.1f} s, "
                f"mounted in {mounted:.1f} s"
            )
            print(f"view folder {rel or '.'}: {len(views)} file(s), {size / 1e6:.1f} MB of JSON Lines")
            run_spark(args, source, mnt, plain, cache, rel, size)
        finally:
            fmtfs("umount", mnt)


def run_spark(args, source: Path, mnt: Path, plain: Path, cache: Path, rel: str, size: int) -> None:
    from pyspark.sql import SparkSession

    from fmtfs.spark import FmtfsDataSource

    spark = (
        SparkSession.builder.master(f"local[{args.cores}]")
        .appName("fmtfs-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(FmtfsDataSource)

    def timed(label: str, action) -> float:
        start = time.perf_counter()
        count = action()
        seconds = time.perf_counter() - start
        results.append((label, seconds, count))
        return seconds

    results: list[tuple[str, float, int]] = []
    for _ in range(2):  # warm up the JVM (JIT) and the page cache
        spark.read.json(str(plain)).count()
    json_plain = lambda: spark.read.json(str(plain)).count()  # noqa: E731
    json_mount = lambda: spark.read.json(str(mnt / rel)).count()  # noqa: E731
    parquet_mount = lambda: spark.read.parquet(str(mnt / "parquet" / rel)).count()  # noqa: E731
    source_read = lambda per=1: (  # noqa: E731
        spark.read.format("fmtfs")
        .option("format", args.format)
        .option("view", rel)
        .option("cacheDir", str(cache))
        .option("chunksPerPartition", str(per))
        .load(str(source))
        .count()
    )
    base = timed("read.json, plain local folder", json_plain)
    timed("read.json, mount (first read)", json_mount)
    timed("read.json, mount (again)", json_mount)
    timed("read.parquet, mount (builds the twins)", parquet_mount)
    timed("read.parquet, mount (again)", parquet_mount)
    timed("format(fmtfs), no mount (infers schema)", source_read)
    timed("format(fmtfs), no mount (again)", source_read)
    timed("format(fmtfs), no mount, 16 chunks/task", lambda: source_read(16))
    timed("read.json, plain local folder (again)", json_plain)
    spark.stop()

    counts = {count for _, _, count in results}
    print(
        f"\nSpark local[{args.cores}], {size / 1e6:.1f} MB of JSON, "
        f"rows: {', '.join(map(str, sorted(counts)))}"
    )
    print(f"{'':44} {'seconds':>8} {'MB/s':>7} {'vs plain':>9}")
    for label, seconds, _ in results:
        print(f"{label:44} {seconds:8.2f} {size / 1e6 / seconds:7.1f} {seconds / base:8.2f}x")
    if len(counts) != 1:
        raise SystemExit("row counts differ between the ways of reading")


if __name__ == "__main__":
    main()
