"""Segment headers, segment names and state.dat (spec §2, §3, §8, §10)."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from fmtfs.formats.base import Problem

OPT_ENCRYPTED = 0x1
OPT_LZ4 = 0x2
OPT_PROTOBUF = 0x4
KNOWN_OPTIONS = OPT_ENCRYPTED | OPT_LZ4 | OPT_PROTOBUF
OPTION_NAMES = {OPT_ENCRYPTED: "aes-128-ctr", OPT_LZ4: "lz4", OPT_PROTOBUF: "protobuf"}
IV_SIZE = 16
STATE_FILE = "state.dat"
MAX_UINT64 = (1 << 64) - 1


class HeaderError(ValueError):
    """A segment header that cannot be read (too short, unknown version)."""


@dataclass(frozen=True)
class SegmentHeader:
    """Where a segment's frame stream lives and how it is wrapped.

    `data_offset` is the file offset of the first (possibly encrypted) byte
    after the header and IV; `logical_base` is what Beats adds to plaintext
    offsets for state.dat positions (the IV is never counted)."""

    version: int
    layout: str  # "v0", "v1", "v2" (as shipped), "doc2", "doc3" (document only)
    data_offset: int
    logical_base: int
    frame_count: int | None
    options: int
    iv: bytes | None

    @property
    def encrypted(self) -> bool:
        return self.iv is not None

    @property
    def lz4_stream(self) -> bool:
        """One LZ4 frame over the whole frame stream (shipped v2, bit 0x2)."""
        return self.layout == "v2" and bool(self.options & OPT_LZ4)

    @property
    def lz4_payloads(self) -> bool:
        """Each frame payload LZ4-compressed (document version 3)."""
        return self.layout == "doc3"

    @property
    def protobuf(self) -> bool:
        return self.layout == "v2" and bool(self.options & OPT_PROTOBUF)

    @property
    def writable(self) -> bool:
        return self.layout == "v2"

    def describe(self) -> dict:
        out: dict = {"version": self.version, "layout": self.layout}
        if self.frame_count is not None:
            out["frame_count"] = self.frame_count
        if self.layout == "v2":
            out["options"] = self.options
            out["option_names"] = [n for bit, n in OPTION_NAMES.items() if self.options & bit]
        elif self.layout in ("doc2", "doc3"):
            out["option_names"] = ["aes-128-ctr"] + (["lz4-per-frame"] if self.layout == "doc3" else [])
        return out


def shipped_v2(head: bytes) -> SegmentHeader:
    """The v2 header as Beats writes it: version, frameCount, options [, IV]."""
    if len(head) < 12:
        raise HeaderError("truncated version-2 header")
    _, count, options = struct.unpack_from("<III", head, 0)
    iv = None
    data_offset = 12
    if options & OPT_ENCRYPTED:
        if len(head) < 12 + IV_SIZE:
            raise HeaderError("truncated IV of an encrypted segment")
        iv = bytes(head[12 : 12 + IV_SIZE])
        data_offset = 12 + IV_SIZE
    return SegmentHeader(2, "v2", data_offset, 12, count, options, iv)


def document_layout(head: bytes, version: int) -> SegmentHeader:
    """The format document's versions 2 and 3: u32 version, 16-byte IV."""
    if len(head) < 4 + IV_SIZE:
        raise HeaderError(f"truncated IV of a document-layout version-{version} segment")
    return SegmentHeader(version, f"doc{version}", 4 + IV_SIZE, 4, None, 0, bytes(head[4 : 4 + IV_SIZE]))


def parse_header(head: bytes) -> SegmentHeader:
    """The layout a header announces.  A version-2 header whose option bits
    are not all known is returned as the document layout (spec §10); the
    caller confirms either by checking the first frame."""
    if len(head) < 4:
        raise HeaderError("empty segment" if not head else "truncated segment header")
    (version,) = struct.unpack_from("<I", head, 0)
    if version == 0:
        return SegmentHeader(0, "v0", 4, 4, None, 0, None)
    if version == 1:
        if len(head) < 8:
            raise HeaderError("truncated version-1 header")
        return SegmentHeader(1, "v1", 8, 8, struct.unpack_from("<I", head, 4)[0], 0, None)
    if version == 2:
        if len(head) >= 12 and struct.unpack_from("<I", head, 8)[0] & ~KNOWN_OPTIONS == 0:
            return shipped_v2(head)
        return document_layout(head, 2)
    if version == 3:
        return document_layout(head, 3)
    raise HeaderError(f"unrecognized schema version {version}")


def new_header(options: int, iv: bytes | None) -> bytes:
    """A fresh shipped-v2 header with frame count 0 (spec §11)."""
    head = struct.pack("<III", 2, 0, options)
    return head + iv if options & OPT_ENCRYPTED else head


def parse_segment_name(name: str) -> int | None:
    """`<id>.seg` with id a base-10 uint64 and the suffix case-insensitive."""
    parts = name.split(".")
    if len(parts) != 2 or parts[1].lower() != "seg" or not parts[0].isascii() or not parts[0].isdigit():
        return None
    value = int(parts[0])
    return value if value <= MAX_UINT64 else None


def segment_files(source: Path) -> tuple[list[tuple[int, Path]], list[Problem]]:
    """(id, path) of every segment, by id; a second file with an id already
    seen (`7.seg` and `007.seg`) is reported and ignored."""
    found: dict[int, Path] = {}
    problems = []
    try:
        names = sorted(p.name for p in source.iterdir())
    except (NotADirectoryError, FileNotFoundError):
        return [], []
    for name in names:
        seg_id = parse_segment_name(name)
        if seg_id is None or not (source / name).is_file():
            continue
        if seg_id in found:
            problems.append(
                Problem(name, 0, f"segment id {seg_id} also used by {found[seg_id].name}; ignored")
            )
            continue
        found[seg_id] = source / name
    return sorted(found.items()), problems


@dataclass(frozen=True)
class QueueState:
    """state.dat: the position of the first frame not yet acknowledged."""

    version: int
    segment_id: int
    byte_index: int
    frame_index: int | None

    def describe(self) -> dict:
        out = {"version": self.version, "segment_id": self.segment_id, "byte_index": self.byte_index}
        if self.frame_index is not None:
            out["frame_index"] = self.frame_index
        return out


def parse_state(data: bytes) -> QueueState:
    if len(data) < 4:
        raise ValueError("state.dat: truncated")
    (version,) = struct.unpack_from("<I", data, 0)
    if version == 0 and len(data) >= 20:
        seg, byte_index = struct.unpack_from("<QQ", data, 4)
        return QueueState(0, seg, byte_index, None)
    if version == 1 and len(data) >= 28:
        seg, byte_index, frame_index = struct.unpack_from("<QQQ", data, 4)
        return QueueState(1, seg, byte_index, frame_index)
    if version > 1:
        raise ValueError(f"state.dat: unsupported queue metadata version {version}")
    raise ValueError(f"state.dat: truncated version-{version} file ({len(data)} bytes)")


def encode_state(state: QueueState) -> bytes:
    if state.version == 0:
        return struct.pack("<IQQ", 0, state.segment_id, state.byte_index)
    return struct.pack("<IQQQ", 1, state.segment_id, state.byte_index, state.frame_index or 0)
