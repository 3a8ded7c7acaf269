"""scripts/page_folios.py: a file's page cache counted by folio kind (it
reads /proc/kpageflags, so it runs as root, as CI does)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "page_folios.py"
LINE = re.compile(
    r"(?P<path>.+): (?P<pages>\d+) pages, (?P<large_pages>\d+) in (?P<large>\d+) large folios"
    r" \(largest (?P<largest>\d+) KiB\), (?P<small>\d+) in 4 KiB folios$"
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="/proc/kpageflags is root's")


def test_every_page_is_counted_once(tmp_path: Path) -> None:
    written = tmp_path / "written.bin"
    written.write_bytes(os.urandom(3 << 20) + b"tail")  # 768 pages and one more
    empty = tmp_path / "empty.bin"
    empty.touch()
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(written), str(empty)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert len(out) == 2
    first, second = (LINE.match(line) for line in out)
    assert first is not None and second is not None, out
    counts = {k: int(v) for k, v in first.groupdict().items() if k != "path"}
    assert first["path"] == str(written)
    assert counts["pages"] == 769
    assert counts["large_pages"] + counts["small"] == 769
    # a large folio holds at least two pages, and the largest at least that
    assert counts["large_pages"] >= 2 * counts["large"]
    assert (counts["largest"] >= 8) == (counts["large"] > 0)
    assert second["pages"] == "0" and second["small"] == "0"
