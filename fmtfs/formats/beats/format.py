"""The Beats disk queue as an fmtfs source (LAYOUT §3, §4)."""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from fmtfs.formats.base import Format, FormatError, Problem, ReadOnlyView, Stream, ViewSlice, Writer
from fmtfs.formats.beats import columns
from fmtfs.formats.beats.card import CARD
from fmtfs.formats.beats.keys import resolve_key
from fmtfs.formats.beats.layout import (
    OPT_ENCRYPTED,
    STATE_FILE,
    HeaderError,
    QueueState,
    parse_state,
    segment_files,
)
from fmtfs.formats.beats.segment import KeyNeeded, KeyRejected, Segment
from fmtfs.formats.beats.stream import SegmentStream, view_path
from fmtfs.formats.beats.writer import SegmentWriter, create_segment
from fmtfs.formats.schema import ViewSchema

PENDING = "pending.jsonl"
_VIEW = re.compile(r"segments/(0|[1-9][0-9]*)\.jsonl")


class BeatsFormat(Format, card=CARD):
    def __init__(self, source: Path, options: dict[str, Any]) -> None:
        # the key file (or password) becomes the key once, here: decode
        # workers are handed the options with the key, never re-read the file
        rest = {name: value for name, value in options.items() if name not in ("key_file", "key")}
        self.key: bytes | None = resolve_key(options.get("key_file"), options.get("key"))
        super().__init__(source, rest | {"key": self.key})
        del self.options["key_file"]  # the key replaces it (what workers and the index get)
        self._streams: dict[int, SegmentStream] = {}
        self._check_keys()

    def public_options(self) -> dict[str, Any]:
        return super().public_options() | {"encrypted_key": self.key is not None}

    def _check_keys(self) -> None:
        """One clear error for a missing or wrong key, instead of garbage.  A
        key that opens some encrypted segments but not another leaves that
        one to be reported as damaged by its scan."""
        opened = 0
        rejected: list[str] = []
        for _, path in segment_files(self.source)[0]:
            try:
                seg = Segment.open(path, self.key)
            except KeyNeeded as exc:
                raise FormatError(
                    f"{path.name} is {exc}: give --key-file or set FMTFS_BEATS_PASSWORD"
                ) from None
            except KeyRejected:
                rejected.append(path.name)
                continue
            except (HeaderError, OSError):
                continue
            if seg.header.encrypted:
                opened += 1
        if rejected and not opened:
            raise FormatError(
                f"wrong key: {rejected[0]} does not decrypt (its first frame fails the CRC check)"
            )

    # -- streams and views -----------------------------------------------------

    def streams(self) -> list[Stream]:
        current, _ = segment_files(self.source)
        out: list[Stream] = []
        for seg_id, path in current:
            stream = self._streams.get(seg_id)
            if stream is None or stream.path != path:
                bucket = self.options["time_bucket"]
                stream = self._streams[seg_id] = SegmentStream(seg_id, path, self.key, bucket)
            out.append(stream)
        return out

    def _state(self) -> QueueState | Problem | None:
        path = self.source / STATE_FILE
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            return parse_state(data)
        except ValueError as exc:
            return Problem(STATE_FILE, 0, str(exc))

    def derived_views(self) -> dict:
        state = self._state()
        if not isinstance(state, QueueState):
            return {}
        return {PENDING: self.pending(state)}

    def pending(self, state: QueueState) -> list[ViewSlice]:
        """Frames not yet acknowledged (spec §8): segment `segment_id` after
        its `frame_index` ACKed frames (all of it for a version-0 state, or
        when `frame_index` is 0), then every frame of every later segment.
        Given as slices of the segment views, so the index serves it."""
        streams = [s for s in self.streams() if isinstance(s, SegmentStream)]
        if streams and state.segment_id < streams[0].segment_id:
            state = QueueState(state.version, streams[0].segment_id, 0, 0)
        return [
            ViewSlice(
                view_path(s.segment_id), (state.frame_index or 0) if s.segment_id == state.segment_id else 0
            )
            for s in streams
            if s.segment_id >= state.segment_id
        ]

    def problems(self) -> list[Problem]:
        out = list(segment_files(self.source)[1])
        state = self._state()
        if isinstance(state, Problem):
            out.append(state)
        return out

    def view_sources(self, streams: list[Stream]) -> dict[str, list[Path]]:
        """pending.jsonl reads state.dat and the segments it slices."""
        state = self._state()
        if not isinstance(state, QueueState):
            return {}
        paths = {s.view: s.path for s in streams if isinstance(s, SegmentStream)}
        sliced = [paths[s.view] for s in self.pending(state) if s.view in paths]
        return {PENDING: [self.source / STATE_FILE, *sliced]}

    def view_schema(self, view_path: str) -> ViewSchema | None:
        return columns.view_schema(view_path)

    def info(self) -> dict[str, Any]:
        segments = []
        for stream in self.streams():
            assert isinstance(stream, SegmentStream)
            entry: dict[str, Any] = {"id": stream.segment_id, "file": stream.path.name}
            seg = stream.opened()
            if isinstance(seg, Problem):
                entry["error"] = seg.error
            else:
                entry.update(seg.header.describe())
            segments.append(entry)
        out: dict[str, Any] = {"segments": segments}
        state = self._state()
        if isinstance(state, QueueState):
            out["state"] = state.describe()
        elif isinstance(state, Problem):
            out["state"] = {"error": state.error}
        return out

    # -- writing ---------------------------------------------------------------

    def writable_views(self, streams: list[Stream], views: Collection[str]) -> set[str]:
        # only the newest segment takes appends: writer() is asked of it
        # alone (it lists the folder: once per view made `ls -l` O(N^2))
        segments = [s for s in streams if isinstance(s, SegmentStream)]
        newest = max(segments, key=lambda s: s.segment_id, default=None)
        return {newest.view} if newest and newest.view in views and self.writable(newest.view) else set()

    def writer(self, view_path: str, create: bool) -> Writer:
        match = _VIEW.fullmatch(view_path)
        if match is None:
            raise ReadOnlyView(f"{view_path}: only segments/<id>.jsonl views take writes")
        seg_id = int(match.group(1))
        current, _ = segment_files(self.source)
        newest = current[-1] if current else None
        if create or seg_id not in dict(current):
            if newest is not None and seg_id <= newest[0]:
                raise ReadOnlyView(f"{view_path}: a new segment needs an id above {newest[0]}")
            if seg_id >= 1 << 64:
                raise FileNotFoundError(f"{view_path}: segment ids are 64-bit")
            options = self._new_segment_options(newest[1] if newest else None)
            path = self.source / f"{seg_id}.seg"
            create_segment(path, options, self.key)
        else:
            if seg_id != newest[0]:
                raise ReadOnlyView(f"{view_path}: only the newest segment ({newest[0]}) can be appended to")
            path = newest[1]
        try:
            return SegmentWriter(path, self.key)
        except (ValueError, HeaderError, KeyNeeded, KeyRejected) as exc:
            raise ReadOnlyView(f"{view_path}: {exc}") from None

    def _new_segment_options(self, newest: Path | None) -> int:
        """Spec §11 / LAYOUT §4: the newest segment's options when it is a
        shipped v2 segment (and its key is known), else plaintext."""
        if newest is None:
            return 0
        try:
            header = Segment.open(newest, self.key).header
        except (HeaderError, KeyNeeded, KeyRejected, OSError):
            return 0
        if header.layout != "v2":
            return 0
        if header.options & OPT_ENCRYPTED and self.key is None:
            return 0
        return header.options & 0x7
