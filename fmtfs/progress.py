"""Progress of long work (indexing a source) for the person waiting.

On a terminal a tqdm bar shows native bytes (with rate and time left) and
records; without one nothing is drawn, and the command says at most one line
per file once it is done.  The index reports every chunk it scans through
`fmtfs.index.Progress`; this module only presents it."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm


def _bar(**settings: Any) -> tqdm:
    """A tqdm bar; tqdm is imported only when a bar is drawn (6 ms of every
    command's start otherwise).  Without tqdm's monitor thread: the decode
    workers a first index starts are forked only from a process running
    no other thread (fmtfs.decoders), and a mount on a terminal spawned
    them instead, a second each."""
    from tqdm import tqdm

    tqdm.monitor_interval = 0  # read by tqdm when the first bar is made
    return tqdm(**settings)


def native_size(paths: Iterable[Path]) -> int:
    """The bytes of the native files to index (the bar's total)."""
    total = 0
    for path in set(paths):
        try:
            total += path.stat().st_size
        except OSError:
            pass  # vanished since the format listed it: nothing to index
    return total


class IndexProgress:
    """A bar over the native bytes, with the records counted beside it.
    Use as `SourceTree(..., progress=bar)`; `close()` when the tree is built."""

    def __init__(self, total: int, stream: TextIO | None = None, label: str = "indexing") -> None:
        self.records = 0
        self.started = time.monotonic()
        self.bar = _bar(
            total=total,
            desc=label,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            file=stream or sys.stderr,
            dynamic_ncols=True,
            leave=True,
        )

    def __call__(self, native_bytes: int, records: int) -> None:
        self.records += records
        rate = self.records / max(time.monotonic() - self.started, 1e-6)
        self.bar.set_postfix_str(f"{self.records:,} records, {rate:,.0f} rec/s", refresh=False)
        self.bar.update(native_bytes)

    def close(self) -> None:
        # streams already in the index were not scanned again: they are done too
        if self.bar.total and self.bar.n < self.bar.total:
            self.bar.update(self.bar.total - self.bar.n)
        self.bar.close()


def on_terminal(stream: TextIO | None = None) -> bool:
    stream = stream or sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class TwinProgress:
    """A bar over the Parquet twins `fmtfs index` builds (fmtfs.twinbuilder.build_all's progress)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.bar: tqdm | None = None
        self.stream = stream or sys.stderr

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = _bar(total=total, desc="parquet twins", unit="twin", file=self.stream, leave=True)
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
