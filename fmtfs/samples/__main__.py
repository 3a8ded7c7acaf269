"""python -m fmtfs.samples FORMAT|all FOLDER [RECORDS]: write sample sources."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

FORMATS = ("beats", "kestrel", "wallaby", "gvfs", "proio")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fmtfs.samples",
        description="Write small, realistic sample sources with each format's own encoder (for trying "
        "fmtfs out; the demo, tests and benchmarks use them).  Prints the path to mount.",
        epilog="`all` writes FOLDER/<format> for every format, e.g. "
        "`python -m fmtfs.samples all ~/fmtfs-samples` gives ~/fmtfs-samples/wallaby, ...",
    )
    parser.add_argument("format", choices=(*FORMATS, "all"), help="the format to write, or all of them")
    parser.add_argument("folder", type=Path, help="where to write (created if missing)")
    parser.add_argument(
        "records", type=int, nargs="?", default=100, help="about how many records (default 100)"
    )
    return parser


def main() -> None:
    args = build_parser().parse_args()
    if args.records < 1:
        build_parser().error("RECORDS must be at least 1")
    for name in FORMATS if args.format == "all" else (args.format,):
        folder = args.folder / name if args.format == "all" else args.folder
        folder.mkdir(parents=True, exist_ok=True)
        print(importlib.import_module(f"fmtfs.samples.{name}").generate(folder, args.records))


main()
