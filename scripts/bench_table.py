#!/usr/bin/env python3
"""The README's benchmark table from several runs of scripts/bench.py.

    .venv/bin/python scripts/bench.py 50 --formats ... --json a.json   # once per run
    .venv/bin/python scripts/bench_table.py a.json b.json c.json

One run's figures vary by 20-30 % on a small machine, so a figure is
judged over several runs.  The output is Markdown: each cell gives the
runs' values in order (A / B / C ...).  A cell is in bold when every run
meets the target, and a miss is written with three decimals, so that
0.999 does not read as 1.00.  A list after the table names each cell
that some run missed, with its median over the runs.  A target is the
one bench.py gives the figure (">= 1.0", "< 0.5 s" ...).  A target in
seconds is checked against fmtfs's time, not against the ratio."""

from __future__ import annotations

import argparse
import json
import operator
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# the figures the README shows, in its order and words (--all: every figure)
TITLES = {
    "first_mount": "first mount (index build, pieces kept) until every view's size is known, vs plain loop",
    "cold_cat": "cold `cat` of every view, fresh mount, from their first stat, vs plain loop",
    "cold_cat_decoding": "cold `cat`, decoding (`--rendered-cache off`, a cache of its own)",
    "warm_cat": "warm `cat` vs regular file (best of 9 each, in turn)",
    "peak_rss_mb": "peak memory (PSS), mount + workers, while `cat`ting",
    "ls_1000": "`ls -l` of 1,000 stream views, second mount (median of 3 mounts)",
    "ls_1000_floor": "the same vs a minimal pyfuse3 filesystem answering from a dict (FUSE's floor here)",
    "ls_10000": "`ls -l` of 10,000 stream views (`--many`), second mount (median of 3 mounts)",
    "ls_10000_floor": "the same vs the minimal pyfuse3 filesystem",
    "write_through": "write-through `cat` 20,000 lines `>>` vs in-process encoder",
    "spark_json_first": (
        "`spark.read.json(folder).count()`, fresh mount, vs a plain folder of the same files"
        " (medians of 5 mounts)"
    ),
    "spark_json_second": "the same, second query",
    "spark_glob_first": "`spark.read.json(folder/*.jsonl)`, fresh mount",
    "spark_glob_second": "the same, second query",
    "data_source": "data source, default options, first query (median of 5), vs plain `read.json`",
    "data_source_cold": "the same, the session's first query of the shape (JVM compiling for it)",
    "data_source_again": "data source, again (median of 5)",
    "python_ds_floor": "a one-row Python data source's query (any source's floor) vs plain `read.json`",
    "time_filter": "one-hour time filter vs full read (data source)",
}

_COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
}
_TARGET = re.compile(r"^\s*(>=|<=|>|<)\s*([0-9.]+)\s*(s\b|MB\b)?")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")


@dataclass(frozen=True)
class Target:
    """A figure's target as bench.py writes it: '>= 1.0', '< 0.5 s', '-'
    (no target: `sign` is None)."""

    text: str
    sign: str | None = None  # one of _COMPARISONS
    bound: str = ""  # as written ("1.0"), for the table
    unit: str = ""  # "s": checked against fmtfs's time, not the ratio

    @classmethod
    def parse(cls, text: str) -> Target:
        found = _TARGET.match(text)
        if found is None:
            return cls(text)
        return cls(text, found.group(1), found.group(2), found.group(3) or "")

    @property
    def judged(self) -> bool:
        return self.sign is not None

    @property
    def in_seconds(self) -> bool:
        return self.unit == "s"

    def meets(self, value: float) -> bool:
        assert self.sign is not None
        return _COMPARISONS[self.sign](value, float(self.bound))

    def markdown(self, unit: str = "") -> str:
        """As the README writes it: '≥ 1.0', '< 0.5 s', '< 300 MB' (`unit`:
        the values' own, for a target that does not say it), '–'."""
        if self.sign is None:
            return "–"
        sign = {">=": "≥", "<=": "≤"}.get(self.sign, self.sign)
        return f"{sign} {self.bound}{f' {self.unit}' if self.unit else unit}"


def load(paths: list[Path]) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in paths]


def measured(run: dict[str, Any], fmt: str, name: str, target: Target) -> float:
    """The value a figure's target is checked against in one run."""
    found = run["formats"][fmt]
    if target.in_seconds:  # e.g. ls_1000: "0.23 s, mount CPU 0.16 s"
        return float(_NUMBER.findall(found["details"][name]["fmtfs"])[0])
    return float(found["figures"][name])


def number(value: float, missed: bool, megabytes: bool = False) -> str:
    if missed:
        return f"{value:.3f}"
    if megabytes:
        return f"{value:.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def column(run: dict[str, Any], fmt: str) -> str:
    native = run["formats"][fmt]["native_mb"]
    return f"{fmt} {native:.0f} MB" if native >= 1 else f"{fmt} {native:.1f} MB"


@dataclass
class Cell:
    values: list[float]
    target: Target
    steals: list[float | None]  # each run's steal while the figure was measured (None: not recorded)

    @property
    def misses(self) -> list[int]:
        """The runs (0-based) whose value misses the target."""
        if not self.target.judged:
            return []
        return [i for i, v in enumerate(self.values) if not self.target.meets(v)]

    def markdown(self, unit: str) -> str:
        missed = set(self.misses)
        megabytes = unit == " MB"
        text = " / ".join(number(v, i in missed, megabytes) for i, v in enumerate(self.values)) + unit
        return f"**{text}**" if self.target.judged and not missed else text


def cells(runs: list[dict[str, Any]], show_all: bool) -> tuple[list[str], list[str], dict]:
    """The figures and formats to show, and each (figure, format)'s Cell."""
    formats = list(dict.fromkeys(fmt for run in runs for fmt in run["formats"]))
    names = list(dict.fromkeys(n for run in runs for f in run["formats"].values() for n in f["figures"]))
    shown = [n for n in TITLES if n in names] + ([n for n in names if n not in TITLES] if show_all else [])
    table: dict[tuple[str, str], Cell] = {}
    for name in shown:
        for fmt in formats:
            details = [run["formats"].get(fmt, {}).get("details", {}).get(name) for run in runs]
            if any(d is None for d in details):
                continue  # not measured for this format (or not in every run)
            target = Target.parse(details[0]["target"])
            values = [measured(run, fmt, name, target) for run in runs]
            table[name, fmt] = Cell(values, target, [d.get("steal_s") for d in details])
    return shown, formats, table


def unit_of(name: str, target: Target) -> str:
    if target.in_seconds:
        return " s"
    return " MB" if name.endswith("_mb") else ""


def markdown(runs: list[dict[str, Any]], show_all: bool = False) -> str:
    shown, formats, table = cells(runs, show_all)
    header = ["figure", "target"] + [column(runs[0], fmt) for fmt in formats]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in shown:
        row = [table.get((name, fmt)) for fmt in formats]
        target = next((c.target for c in row if c is not None), Target.parse("-"))
        texts = [c.markdown(unit_of(name, c.target)) if c is not None else "–" for c in row]
        title = TITLES.get(name, name)
        lines.append(f"| {title} | {target.markdown(unit_of(name, target))} | " + " | ".join(texts) + " |")
    lines.append("")
    lines += summary(shown, formats, table, len(runs))
    return "\n".join(lines) + "\n"


def summary(shown: list[str], formats: list[str], table: dict, runs: int) -> list[str]:
    """A line per cell that some run missed: which runs, and its median."""
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    out = []
    for name in shown:
        for fmt in formats:
            cell = table.get((name, fmt))
            if cell is None or not cell.misses:
                continue
            median = statistics.median(cell.values)
            meets = cell.target.meets(median)
            which = ", ".join(letters[i] for i in cell.misses)
            out.append(
                f"- {fmt} {name}: missed in {which} of {runs} runs; median "
                f"{number(median, not meets)}, which {'meets' if meets else 'misses'} {cell.target.text}"
                + _steals(cell, letters)
            )
    return out or [f"- every cell met its target in all {runs} runs"]


def _steals(cell: Cell, letters: str) -> str:
    """The hypervisor's steal while the cell was measured, in the runs that
    recorded it: a miss with seconds of steal ran on a slower machine."""
    known = [f"{letters[i]} {s:.1f} s" for i, s in enumerate(cell.steals) if s is not None]
    return f"; steal while measured: {', '.join(known)}" if known else ""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    parser.add_argument("runs", type=Path, nargs="+", help="JSON files written by scripts/bench.py --json")
    parser.add_argument("--all", action="store_true", help="every figure, not only the README's")
    args = parser.parse_args(argv)
    print(markdown(load(args.runs), args.all), end="")


if __name__ == "__main__":
    main()
