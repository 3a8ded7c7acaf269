#!/usr/bin/env python3
"""Benchmark: the Parquet twin figures of scripts/bench.py for one format at
any size (issue #13 measures a 1 GB Beats queue).

    .venv/bin/python scripts/bench_twins.py [MEGABYTES] [--format beats] [--no-spark] [--json OUT]

Generates the format's sample source of about MEGABYTES (fmtfs.samples, as
scripts/bench.py does), indexes it without twins (`fmtfs index
--no-parquet`), then runs bench.py's figure_twins (every twin built by
`fmtfs index`; the background builder after a mount with the peak RSS of
the mount and of its builder child; `ls -l` of the twins on disk) and
figure_spark_parquet (spark.read.parquet of the twins over the mount vs
spark.read.json of the same JSON bytes in a plain folder)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench  # noqa: E402


def bench_twins(fmt: str, megabytes: float, spark: bool, scratch: Path) -> dict[str, dict[str, object]]:
    (scratch / fmt).mkdir()
    source, records, native = bench.generate(fmt, scratch / fmt, megabytes)
    print(f"{fmt}: {records:,} records, {native / 1e6:.0f} MB of native files", flush=True)
    args = argparse.Namespace(no_spark=not spark)
    run = bench.FormatRun(fmt, bench.LAYOUTS[fmt], scratch / fmt, source, records, native, args)
    seconds, _ = bench.timed(
        lambda: bench.fmtfs("index", source, "--cache-dir", run.scratch / "cache", "-q", "--no-parquet")
    )
    print(f"  index (no twins)   {seconds:.1f} s", flush=True)
    figures = bench.figure_twins(run) + (bench.figure_spark_parquet(run) if spark else [])
    out = {}
    for row in figures:
        print(
            f"  {row.name:20} {row.ratio:9.3g}   {row.fmtfs:40} vs {row.baseline:30} {row.target}", flush=True
        )
        out[row.name] = {"value": row.ratio, "fmtfs": row.fmtfs, "baseline": row.baseline}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("megabytes", type=float, nargs="?", default=1000)
    parser.add_argument("--format", default="beats", choices=bench.FORMATS)
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--json", type=Path, metavar="OUT")
    parser.add_argument(
        "--scratch", type=Path, help="folder for the source and mounts (default: a temporary one)"
    )
    args = parser.parse_args()
    if args.scratch is not None:
        args.scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fmtfs-bench-twins-", dir=args.scratch) as scratch:
        try:
            figures = bench_twins(args.format, args.megabytes, not args.no_spark, Path(scratch))
        finally:
            if bench._SPARK:
                bench._SPARK[0].stop()
    result = {
        "machine": bench.machine(),
        "format": args.format,
        "size_mb": args.megabytes,
        "figures": figures,
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
