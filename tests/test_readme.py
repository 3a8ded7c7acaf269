"""The README's sessions run as written.

Every ```console block of README.md is a session: `$ ` lines are commands,
the lines after one are what it prints on stdout (a `...` line stands for any
number of lines; a command shown without output is not compared).  The first
block writes the sample sources; each later block runs after it, in a fresh
HOME (so `~/fmtfs-samples`, `~/mnt` and the default cache are the test's
own), from the checkout's root, with `fmtfs` on PATH as set-up leaves it.

`python -m tests.test_readme` prints what the sessions print today (to
refresh the README after a change of the samples)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


@dataclass
class Step:
    command: str
    expected: list[str]


def sessions(text: str) -> list[list[Step]]:
    blocks: list[list[Step]] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```console"
            if inside:
                blocks.append([])
            continue
        if not inside:
            continue
        if line.startswith("$ "):
            blocks[-1].append(Step(line[2:], []))
        elif blocks[-1]:
            blocks[-1][-1].expected.append(line)
    return blocks


def matches(expected: list[str], actual: list[str]) -> bool:
    """`...` in `expected` matches any run of lines (also none)."""
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(matches(expected[1:], actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and actual[0] == expected[0] and matches(expected[1:], actual[1:])


def run(step: Step, home: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HOME=str(home), PYSPARK_PYTHON=sys.executable)
    env.pop("XDG_CACHE_HOME", None)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", step.command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def unmount_all(home: Path) -> None:
    for line in Path("/proc/mounts").read_text().splitlines():
        point = line.split()[1]
        if point.startswith(str(home)):
            subprocess.run(["fusermount3", "-u", point], capture_output=True)


BLOCKS = sessions(README.read_text())


def test_the_readme_has_sessions() -> None:
    assert len(BLOCKS) >= 6 and "fmtfs.samples" in BLOCKS[0][0].command
    for block in BLOCKS[1:]:
        commands = " ".join(s.command for s in block)
        assert "fmtfs mount" in commands and " >> " in commands and "fmtfs umount" in commands


@pytest.mark.parametrize("number", range(1, len(BLOCKS)), ids=lambda n: BLOCKS[n][0].command.split("/")[-1])
def test_readme_session(number: int, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    try:
        for step in BLOCKS[0] + BLOCKS[number]:
            done = run(step, home)
            assert done.returncode == 0, f"$ {step.command}\n{done.stderr}"
            if step.expected:
                shown = done.stdout.splitlines()
                assert matches(step.expected, shown), f"$ {step.command}\n{done.stdout}"
    finally:
        unmount_all(home)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        for number in range(1, len(BLOCKS)):
            home = Path(scratch) / str(number)
            home.mkdir()
            try:
                for step in BLOCKS[0] + BLOCKS[number]:
                    done = run(step, home)
                    print(f"$ {step.command}\n{done.stdout}", end="")
                    if done.returncode:
                        print(f"!! exit {done.returncode}: {done.stderr}")
            finally:
                unmount_all(home)
            print("----")
