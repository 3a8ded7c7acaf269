"""A segment file as a Stream of the chunk index."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from fmtfs.formats.base import Chunk, Problem, Record, Stream
from fmtfs.formats.beats.layout import HeaderError
from fmtfs.formats.beats.segment import KeyNeeded, KeyRejected, Run, Segment


def view_path(segment_id: int) -> str:
    return f"segments/{segment_id}.jsonl"


class SegmentStream(Stream):
    renderer_version = 1

    def __init__(self, segment_id: int, path: Path, key: bytes | None) -> None:
        super().__init__(f"segments/{segment_id}", path)
        self.segment_id = segment_id
        self.view = view_path(segment_id)
        self._key = key
        self._cached: tuple[tuple[int, int, int], Segment] | None = None

    def open(self) -> Segment:
        """The segment as it is now (reused while the file is unchanged)."""
        st = os.stat(self.path)
        ident = (st.st_size, st.st_mtime_ns, st.st_ino)
        if self._cached is None or self._cached[0] != ident:
            self._cached = (ident, Segment.open(self.path, self._key))
        return self._cached[1]

    def opened(self) -> Segment | Problem:
        try:
            return self.open()
        except FileNotFoundError:
            return Problem(self.path.name, 0, "segment file vanished")
        except HeaderError as exc:
            return Problem(self.path.name, 0, str(exc))
        except KeyNeeded as exc:
            return Problem(self.path.name, 0, f"{exc}: key required")
        except KeyRejected as exc:
            return Problem(self.path.name, 0, f"cannot decrypt: {exc} (damaged, or another key)")

    def scan(self, start: int | None, state: dict | None) -> Iterator[Chunk | Problem]:
        seg = self.opened()
        if isinstance(seg, Problem):
            yield seg
            return
        for item in seg.runs_from(start, state):
            if isinstance(item, Run):
                yield Chunk(item.start, item.end, item.state, {self.view: item.records})
            else:
                yield item

    def decode(self, chunk: Chunk) -> dict[str, list[Record]]:
        return {self.view: self.open().decode_chunk(chunk.state, chunk.end)}

    def view_paths(self) -> list[str]:
        return [self.view]
