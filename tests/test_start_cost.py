"""What a command does before its real work (the fixed start cost of every
`fmtfs` command): the problems it waits for before serving or printing."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.conftest import FIXTURES
from tests.mounting import fmtfs, mounted


def _looping_gvfs_tree(folder: Path) -> Path:
    """A gvfs folder whose `home` tree has a children block pointing back
    at the root's (a loop the tree reader reports and skips)."""
    data = bytearray((FIXTURES / "gvfs" / "02-after-timer-flush" / "home").read_bytes())
    data[128:132] = (120).to_bytes(4, "big")
    folder.mkdir()
    (folder / "home").write_bytes(bytes(data))
    return folder


def test_gvfs_tree_damage_is_listed_not_waited_for(tmp_path: Path) -> None:
    source = _looping_gvfs_tree(tmp_path / "meta")
    cache = tmp_path / "c"
    listing = fmtfs("ls", source, "--cache-dir", cache)
    # the whole-tree read that finds the loop is not done before listing
    assert listing.stderr == b"" and "home/" in listing.stdout.decode().split()
    errors = fmtfs("cat", source, "_errors.jsonl", "--cache-dir", cache)
    problems = [orjson.loads(line) for line in errors.stdout.splitlines()]
    assert any(p["file"] == "home" and "loop" in p["error"] for p in problems)
    assert errors.stderr == b""
    text = fmtfs("info", source, "--cache-dir", cache).stdout.decode()
    assert f"errors:   {len(problems)} " in text and "home at offset" in text


def test_gvfs_mount_lists_tree_damage_in_errors_file(tmp_path: Path) -> None:
    source = _looping_gvfs_tree(tmp_path / "meta")
    with mounted(source) as mnt:
        problems = [orjson.loads(line) for line in (mnt / "_errors.jsonl").read_bytes().splitlines()]
        document = orjson.loads((mnt / "_fmtfs.json").read_bytes())
    assert any(p["file"] == "home" and "loop" in p["error"] for p in problems)
    assert document["errors"] == len(problems)
