"""A smoke run of scripts/bench.py on a tiny size: every figure comes out as
a positive number in the JSON.  Nothing here is timed or compared with a
target: the bench prints ratios, tests never assert speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "scripts" / "bench.py"
TABLE = BENCH.with_name("bench_table.py")
FIGURES = {
    "first_mount",
    "cold_cat",
    "cold_cat_decoding",
    "warm_cat",
    "peak_rss_mb",
    "first_read_rss_mb",
    "ls_20",
    "ls_20_floor",
    "write_through",
} | {
    "twins_build",
    "twins_background_s",
    "twins_rss_mount_mb",
    "twins_rss_total_mb",
    "twins_rss_index_mb",
    "twins_ls",
}
SPARK_FIGURES = {
    "spark_json_first",
    "spark_json_second",
    "spark_glob_first",
    "spark_glob_second",
    "data_source",
    "data_source_cold",
    "data_source_again",
    "data_source_unkept",
    "python_ds_floor",
    "time_filter",
    "spark_parquet",
}
# measured once per run, with the first format: Spark's Python workers start
SESSION_FIGURES = {"python_ds_start"}


def bench(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "bench.json"
    subprocess.run(
        [sys.executable, str(BENCH), "0.2", "--streams", "20", "--json", str(out), *args],
        check=True,
        timeout=900,
        capture_output=True,
    )
    return json.loads(out.read_text())


def assert_figures(result: dict, fmt: str, expected: set[str]) -> None:
    figures = result["formats"][fmt]["figures"]
    assert set(figures) == expected
    for name, value in figures.items():
        assert isinstance(value, float) and value > 0, (fmt, name, value)
        # the hypervisor's steal while it was measured (/proc/stat): seconds, never negative
        assert result["formats"][fmt]["details"][name]["steal_s"] >= 0, (fmt, name)
    assert result["formats"][fmt]["records"] > 0


def test_bench_beats_with_spark(tmp_path: Path) -> None:
    result = bench(tmp_path, "--formats", "beats")
    assert_figures(result, "beats", FIGURES | SPARK_FIGURES | SESSION_FIGURES)
    assert result["formats"]["beats"]["baseline"] == "plain loop"
    assert result["machine"]["cpus"] > 0
    # the interpreter's own file, not the virtualenv's link to it
    assert result["machine"]["interpreter"] == os.path.realpath(sys.executable)
    # the README's table is made from such files: a row for every figure of them
    done = subprocess.run(
        [sys.executable, str(TABLE), "--all", str(tmp_path / "bench.json"), str(tmp_path / "bench.json")],
        check=True,
        capture_output=True,
        text=True,
    )
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(FIGURES | SPARK_FIGURES | SESSION_FIGURES)  # the header too


def test_bench_wallaby_and_gvfs_without_spark(tmp_path: Path) -> None:
    result = bench(tmp_path, "--formats", "wallaby,gvfs", "--no-spark")
    for fmt in ("wallaby", "gvfs"):
        assert_figures(result, fmt, FIGURES)
    assert result["formats"]["gvfs"]["baseline"] == "fmtfs-1t"


def test_only_runs_the_figures_named(tmp_path: Path) -> None:
    result = bench(tmp_path, "--formats", "wallaby", "--no-spark", "--only", "first_mount")
    assert_figures(result, "wallaby", {"first_mount"})


def test_help_names_every_figure() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--help"], capture_output=True, text=True, check=True)
    documented = FIGURES - {"ls_20", "ls_20_floor"} | {
        "ls_N",
        "ls_N_floor",
        "spark_json",
        "spark_glob",
        "data_source",
        "python_ds_start",
        "python_ds_floor",
        "time_filter",
    }
    for name in documented:
        assert name in done.stdout, name
