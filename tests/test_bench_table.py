"""scripts/bench_table.py: the README's table from several bench runs.  A
cell is bold only when every run meets its target, a miss shows three
decimals, and a target in seconds is checked against fmtfs's time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TABLE = Path(__file__).resolve().parents[1] / "scripts" / "bench_table.py"


def run_json(figures: dict[str, tuple[float, str, str]], native_mb: float = 20.4) -> dict:
    """One run in the shape bench.py writes: figure -> (ratio, fmtfs text, target)."""
    return {
        "size_mb": 20,
        "machine": {},
        "formats": {
            "wallaby": {
                "records": 1,
                "native_mb": native_mb,
                "json_mb": 30.0,
                "baseline": "plain loop",
                "figures": {name: ratio for name, (ratio, _, _) in figures.items()},
                "details": {
                    name: {"fmtfs": text, "baseline": "-", "target": target}
                    for name, (_, text, target) in figures.items()
                },
            }
        },
    }


def table(tmp_path: Path, runs: list[dict]) -> list[str]:
    paths = []
    for i, run in enumerate(runs):
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps(run))
        paths.append(str(path))
    done = subprocess.run(
        [sys.executable, str(TABLE), *paths], check=True, capture_output=True, text=True, timeout=60
    )
    return done.stdout.splitlines()


def row(lines: list[str], title_start: str) -> list[str]:
    (found,) = [line for line in lines if line.startswith(f"| {title_start}")]
    return [cell.strip() for cell in found.strip("|").split("|")]


def test_bold_only_when_every_run_meets(tmp_path: Path) -> None:
    a = run_json({"first_mount": (1.04, "0.51 s", ">= 1.0"), "warm_cat": (0.58, "x", ">= 0.5")})
    b = run_json({"first_mount": (0.9994, "0.55 s", ">= 1.0"), "warm_cat": (0.53, "x", ">= 0.5")})
    lines = table(tmp_path, [a, b])
    assert lines[0] == "| figure | target | wallaby 20 MB |"
    assert row(lines, "first mount") == [
        "first mount (index build, pieces kept) until every view's size is known, vs plain loop",
        "≥ 1.0",
        "1.04 / 0.999",  # not bold, and not rounded up to a pass
    ]
    assert row(lines, "warm `cat`")[2] == "**0.58 / 0.53**"
    assert "- wallaby first_mount: missed in B of 2 runs; median 1.02, which meets >= 1.0" in lines
    assert not any("warm_cat" in line for line in lines if line.startswith("- "))


def test_a_target_in_seconds_is_checked_against_the_time(tmp_path: Path) -> None:
    # ls_1000's ratio is against regular files (tens); its target is on fmtfs's seconds
    fast = run_json({"ls_1000": (22.6, "0.23 s, mount CPU 0.16 s", "< 0.5 s")})
    slow = run_json({"ls_1000": (23.0, "0.62 s, mount CPU 0.40 s", "< 0.5 s")})
    cells = row(table(tmp_path, [fast, fast]), "`ls -l`")
    assert cells[1:] == ["< 0.5 s", "**0.23 / 0.23 s**"]
    lines = table(tmp_path, [fast, slow, slow])
    assert row(lines, "`ls -l`")[2] == "0.23 / 0.620 / 0.620 s"
    assert "- wallaby ls_1000: missed in B, C of 3 runs; median 0.620, which misses < 0.5 s" in lines


def test_megabytes_and_figures_without_a_target(tmp_path: Path) -> None:
    run = run_json(
        {
            "peak_rss_mb": (88.2, "88 MB", "< 300 (1 GB read)"),
            "python_ds_floor": (0.23, "0.09 s", "-"),
        }
    )
    lines = table(tmp_path, [run])
    assert row(lines, "peak memory")[1:] == ["< 300 MB", "**88 MB**"]
    assert row(lines, "a one-row")[1:] == ["–", "0.23"]  # a figure with no target is never bold
    assert lines[-1] == "- every cell met its target in all 1 runs"


def test_a_miss_lists_the_steal_each_run_recorded(tmp_path: Path) -> None:
    met = run_json({"first_mount": (1.3, "2.0 s", ">= 1.0")})
    missed = run_json({"first_mount": (0.92, "3.2 s", ">= 1.0")})
    met["formats"]["wallaby"]["details"]["first_mount"]["steal_s"] = 0.0
    missed["formats"]["wallaby"]["details"]["first_mount"]["steal_s"] = 4.25
    lines = table(tmp_path, [met, missed])
    assert (
        "- wallaby first_mount: missed in B of 2 runs; median 1.11, which meets >= 1.0;"
        " steal while measured: A 0.0 s, B 4.2 s"
    ) in lines
    # runs written before bench.py recorded steal: no steal is claimed for them
    old = run_json({"first_mount": (0.92, "3.2 s", ">= 1.0")})
    assert "- wallaby first_mount: missed in A of 1 runs; median 0.920, which misses >= 1.0" in table(
        tmp_path, [old]
    )
