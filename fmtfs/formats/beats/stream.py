"""A segment file as a Stream of the chunk index."""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import orjson

from fmtfs.formats.base import Chunk, Problem, Record, Routed, Stream
from fmtfs.formats.beats.layout import HeaderError
from fmtfs.formats.beats.segment import KeyNeeded, KeyRejected, Run, Segment
from fmtfs.formats.timerange import BucketRoute, bucket_views, text_range

BUCKETS = "buckets"
_LINE = orjson.OPT_APPEND_NEWLINE
TIME_KEY = "timestamp"


def view_path(segment_id: int) -> str:
    return f"segments/{segment_id}.jsonl"


class SegmentStream(Stream):
    """One segment: its `segments/<id>.jsonl` view, and its share of every
    `buckets/<bucket>.jsonl` (the view layer joins the shares of all
    segments in id order, so a bucket spans the queue)."""

    renderer_version = 2
    time_field = (TIME_KEY, "ns")  # the time column and its unit (time filters)

    def __init__(self, segment_id: int, path: Path, key: bytes | None, time_bucket: str = "hour") -> None:
        super().__init__(f"segments/{segment_id}", path)
        self.segment_id = segment_id
        self.view = view_path(segment_id)
        self.time_bucket = time_bucket
        self._key = key
        self._cached: tuple[tuple[int, int, int], Segment] | None = None
        self._route = BucketRoute(self.view, TIME_KEY, "ns", time_bucket, BUCKETS)

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

    def scan(
        self, start: int | None, state: dict | None, stop: int | None = None
    ) -> Iterator[Chunk | Problem]:
        seg = self.opened()
        if isinstance(seg, Problem):
            yield seg
            return
        for item in seg.runs_from(start, state, stop=stop):
            if isinstance(item, Run):
                seg.drop_pages()  # the mount's RSS stays small however big the queue
                yield from self._chunks(item)
            else:
                yield item

    def _chunks(self, run: Run) -> Iterator[Chunk]:
        """A run of decoded records as a chunk."""
        times = text_range((r.get(TIME_KEY) for r in run.records), "ns")
        views = self._views(run.records)
        known = {} if run.rendered_length is None else {self.view: run.rendered_length}
        yield Chunk(run.start, run.end, run.state, views, times=times, lengths=known)

    def measured(
        self, start: int | None, state: dict | None, render: bool = False, stop: int | None = None
    ) -> Iterator[Chunk | Problem] | None:
        seg = self.opened()
        if isinstance(seg, Problem) or seg.header.lz4_stream or seg.header.iv is not None:
            return None  # scan() then: only a plaintext segment's runs are measured
        return self._measured_runs(seg, start, state, render, stop)

    def _measured_runs(
        self, seg: Segment, start: int | None, state: dict | None, render: bool, stop: int | None
    ) -> Iterator[Chunk | Problem]:
        for item in seg.runs_from(start, state, measure=partial(self._measure, render=render), stop=stop):
            if isinstance(item, Run):
                seg.drop_pages()
                if item.measured is None:  # a run measure() could not render: its records, kept
                    yield from self._chunks(item)
                else:
                    count, lengths, times, rendered = item.measured
                    yield Chunk(
                        item.start,
                        item.end,
                        item.state,
                        {},
                        times=times,
                        lengths=lengths,
                        count=count,
                        rendered=rendered,
                    )
            else:
                yield item

    def _measure(
        self, records: Iterator[Record], render: bool
    ) -> tuple[int, dict[str, int], tuple[int, int] | None, dict[str, bytes | bytearray] | None] | None:
        """(count, view -> rendered length, time range, view -> bytes if
        `render`) of a run's records, as scan()'s chunk of them gives (its
        segment view, its buckets by the route decode_iter uses,
        text_range's range); None when one does not render as it is
        (check_json sanitizes the whole run then).  Each record is dumped
        once; every record is in the segment view, so a bucket's piece is
        the spans of the segment's where the route was that bucket's (the
        route gives the same tuple for a bucket: a chunk has a span or two)."""
        dumps = orjson.dumps
        route = self._route  # the views a record is in: decode_iter's rule
        out = bytearray() if render else None
        spans: list[tuple[tuple[str, ...], int]] = []  # (route, where its records start)
        last = None
        at = 0
        count = 0
        low = high = None
        texts = True  # every time present is text
        for record in records:
            try:
                line = dumps(record, option=_LINE)
            except TypeError:
                return None
            count += 1
            views = route(record)
            if views is not last:
                spans.append((views, at))
                last = views
            at += len(line)
            if out is not None:
                out += line
            text = record.get(TIME_KEY)
            if text is None:
                continue
            if type(text) is not str:
                texts = False
                continue
            if low is None or text < low:
                low = text
            if high is None or text > high:
                high = text
        times = text_range((low, high), "ns") if texts and low is not None else None
        lengths = {self.view: at}
        cuts: dict[str, list[tuple[int, int]]] = {}
        for i, (views, start) in enumerate(spans):
            stop = spans[i + 1][1] if i + 1 < len(spans) else at
            for view in views[1:]:
                cuts.setdefault(view, []).append((start, stop))
                lengths[view] = lengths.get(view, 0) + stop - start
        if out is None:
            return count, lengths, times, None
        # a bucket holding the whole run (the usual case) is the very same bytes
        whole = memoryview(out)
        rendered: dict[str, bytes | bytearray] = {self.view: out}
        for view, parts in cuts.items():
            rendered[view] = out if parts == [(0, at)] else b"".join(whole[a:b] for a, b in parts)
        return count, lengths, times, rendered

    def cuts(self, start: int | None, state: dict | None, every: int) -> Iterator[tuple[int, dict]]:
        seg = self.opened()
        if isinstance(seg, Problem):
            return
        try:
            yield from seg.cuts(start, state, every)
        finally:
            seg.drop_pages()

    def _views(self, records: list[Record]) -> dict[str, list[Record]]:
        views = {self.view: records}  # the segment view first: chunk counts are its
        views.update(bucket_views(records, TIME_KEY, "ns", self.time_bucket, BUCKETS))
        return views

    def decode(self, chunk: Chunk) -> dict[str, list[Record]]:
        seg = self.open()
        try:
            return self._views(seg.decode_chunk(chunk.state, chunk.end))
        finally:
            seg.drop_pages()

    def decode_iter(self, chunk: Chunk) -> Iterator[Routed]:
        seg = self.open()
        route = self._route
        try:
            for record in seg.iter_chunk(chunk.state, chunk.end):
                yield record, route(record)
        finally:
            seg.drop_pages()

    def view_records(self, chunk: Chunk, view: str) -> Iterator[Record] | None:
        # every record is in the segment view: no bucket routing for its reader
        return self._records(chunk) if view == self.view else None

    def _records(self, chunk: Chunk) -> Iterator[Record]:
        seg = self.open()
        try:
            yield from seg.iter_chunk(chunk.state, chunk.end)
        finally:
            seg.drop_pages()

    def view_paths(self) -> list[str]:
        return [self.view]
