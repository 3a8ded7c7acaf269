"""Reading one segment file: its header, its (decrypted, decompressed)
frame stream, and runs of decoded frames that can be resumed anywhere.

Positions.  `p` is an offset in the segment's plaintext frame stream
(after header and IV, before encryption; inside the LZ4 content for
compressed segments).  Chunk states:

* linear segments (plain or CTR): {"pos": p}; the chunk spans the file
  bytes [data_offset + p, ...).  CTR decryption starts at any byte: the
  counter is IV + p // 16 and p % 16 keystream bytes are dropped.
* LZ4 segments: {"block": c, "u": u, "skip": s}: the LZ4 block whose size
  field is at container offset c holds uncompressed bytes from u, and the
  chunk's first frame starts s bytes into it (frames may straddle blocks).
  Linked-block frames add "linked": true and decode from the first block.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fmtfs.formats.base import CUT_GRID, Boundary, Problem, boundary, grid_end
from fmtfs.formats.beats import frames as fr
from fmtfs.formats.beats import lz4stream
from fmtfs.formats.beats.keys import ctr_xor
from fmtfs.formats.beats.layout import HeaderError, SegmentHeader, document_layout, parse_header, shipped_v2
from fmtfs.formats.beats.payload import check_json, decoder, sanitize
from fmtfs.gcpause import paused

CHUNK_RECORDS = 2000
CHUNK_BYTES = 1 << 20


def chunk_bytes(p: int) -> int:
    """The plaintext bytes after which a chunk starting at `p` ends (at its
    next frame), unless CHUNK_RECORDS end it first; at the grid lines too,
    where cuts are found (base.CUT_GRID)."""
    return grid_end(p, CHUNK_BYTES, CUT_GRID) - p


WINDOW = CHUNK_BYTES + (256 << 10)  # decrypted per step; a little over a chunk
HEAD_BYTES = 12 + 16
PLAUSIBLE_FRAME = 100 << 20


# Makes something of a run's records, given one by one as they are decoded
# (each dropped once measured: no chunk's worth is kept), or None when it
# cannot (the run's records are then decoded again and kept).
Measure = Callable[[Iterator[Any]], Any]


class KeyNeeded(Exception):
    """An encrypted segment and no key (message names the segment only)."""


class KeyRejected(Exception):
    """The key does not decrypt this segment's first frame."""


@dataclass
class Run:
    """Consecutive decoded frames and the state decoding them starts from."""

    start: int  # native file offset where decoding starts
    end: int  # native file offset of the resume point
    state: dict[str, Any]
    records: list[Any]
    positions: list[int] = field(default_factory=list)  # logical offsets (if asked)
    rendered_length: int | None = None  # bytes of the records' JSON Lines, when checking told it
    # what a Measure made of the records instead of keeping them (runs(measure=...))
    measured: Any = None


def _map(path: Path) -> memoryview:
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return memoryview(b"")
        return memoryview(mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ))


class Segment:
    """One `<id>.seg` file as it is now."""

    def __init__(self, path: Path, header: SegmentHeader, key: bytes | None, data: memoryview) -> None:
        self.path = path
        self.header = header
        self.key = key
        self.data = data
        self.avail = max(0, len(data) - header.data_offset)
        self.decode_payload = decoder(header.protobuf, header.lz4_payloads)

    def drop_pages(self) -> None:
        """Unmap the pages of the segment this process touched: pages of a
        file mapping count in its RSS, so a mount that scanned or decoded a
        1 GB queue would otherwise hold it all.  They stay in the page cache
        (a later access is a minor fault), and a thread still reading the
        mapping faults them back in."""
        mapping = self.data.obj
        if isinstance(mapping, mmap.mmap):
            mapping.madvise(mmap.MADV_DONTNEED)

    # -- opening -------------------------------------------------------------

    @classmethod
    def open(cls, path: Path, key: bytes | None) -> Segment:
        """Read and resolve the header (raises HeaderError, KeyNeeded,
        KeyRejected).  Version 2 is ambiguous (spec §10): bytes 8-11 of the
        document layout's random IV can look like shipped options, so with
        a key, a version-2 segment whose first frame fails under one reading
        is tried under the other."""
        data = _map(path)
        head = bytes(data[:HEAD_BYTES])
        header = parse_header(head)
        plain = header.layout not in ("doc2", "doc3") and not header.encrypted
        if plain and (key is None or header.version != 2):
            return cls(path, header, key, data)
        if key is None:
            if header.layout == "v2":
                raise KeyNeeded("encrypted (options 0x1)")
            raise KeyNeeded(f"encrypted, document-only layout version {header.version}")
        seg = cls(path, header, key, data)
        verdict = seg.first_frame_ok()
        if verdict:
            return seg
        if header.version == 2:
            try:
                other = document_layout(head, 2) if header.layout == "v2" else shipped_v2(head)
            except HeaderError:
                other = None
            if other is not None:
                alt = cls(path, other, key, data)
                if alt.first_frame_ok():
                    return alt
        if plain or verdict is None:
            return seg  # damaged or still being written: its scan reports where
        raise KeyRejected("the first frame fails its size or CRC check after decryption")

    def first_frame_ok(self) -> bool | None:
        """Whether the first frame decodes (None: no complete frame yet)."""
        if self.avail == 0:
            return None
        if self.header.lz4_stream:
            try:
                head = lz4stream.parse_header(bytes(self.read(0, min(self.avail, 19))))
            except lz4stream.Lz4Error:
                return False if self.avail >= 19 else None
            tail: list[lz4stream.Tail] = []
            buf = b""
            for block in lz4stream.blocks(self.read, self.avail, head, head.size, 0, tail):
                buf += block.data
                verdict = fr.first_frame_ok(buf, complete=False)
                if verdict is not None:
                    return verdict
            if tail and tail[0].kind == "bad":
                return False
            return fr.first_frame_ok(buf, complete=bool(tail) and tail[0].kind == "end")
        head = bytes(self.read(0, min(self.avail, 4)))
        if len(head) < 4:
            return None
        size = int.from_bytes(head, "little")
        if size <= fr.FRAME_OVERHEAD:
            return False  # spec §6: an implausible first size means a wrong key
        if size > self.avail:
            # Larger than the data: a wrong key, or a first frame still being
            # written / torn by a crash.  Only a size no Beats segment can
            # hold (default MaxSegmentSize) proves the key wrong.
            return None if size <= PLAUSIBLE_FRAME else False
        return fr.first_frame_ok(bytes(self.read(0, size)), complete=True)

    # -- bytes -----------------------------------------------------------------

    def read(self, c: int, n: int) -> bytes | memoryview:
        """`n` plaintext container bytes from container offset `c`."""
        d = self.header.data_offset + c
        raw = self.data[d : d + n]
        if self.header.iv is None:
            return raw
        return ctr_xor(self.key, self.header.iv, c, raw)

    def problem(self, offset: int, error: str) -> Problem:
        return Problem(self.path.name, offset, error)

    # -- runs ------------------------------------------------------------------

    def runs(
        self,
        state: dict[str, Any] | None,
        positions: bool = False,
        measure: Measure | None = None,
        stop: int | None = None,
    ) -> Iterator[Run | Problem | Boundary]:
        """Decoded runs of about a chunk each, from `state` (None: the first
        frame) to the end of the readable data; Problems for damage.  With
        `measure`, a plaintext segment's runs hold what it made of their
        records, each dropped as soon as measured, instead of the records.
        With `stop` (a native offset, one of cuts()), the runs end with
        Stream.scan's boundary at the first that would start at or past it."""
        if self.header.lz4_stream:
            yield from self._lz4_runs(state, positions)
        else:
            yield from self._linear_runs((state or {}).get("pos", 0), positions, measure=measure, stop=stop)

    @staticmethod
    def _checked(records: list[Any], state: dict[str, Any], check: bool) -> tuple[list[Any], int | None]:
        if not check:
            return records, None
        records, dirty, length = check_json(records)
        if dirty:
            state["sanitize"] = True
        return records, length

    def runs_from(
        self,
        start: int | None,
        state: dict[str, Any] | None,
        measure: Measure | None = None,
        stop: int | None = None,
    ) -> Iterator[Run | Problem | Boundary]:
        """runs() for Stream.scan: a chunk state, or only a native offset."""
        if start is not None and not state and not self.header.lz4_stream:
            state = {"pos": max(0, start - self.header.data_offset)}
        return self.runs(state if start is not None else None, measure=measure, stop=stop)

    def cuts(self, start: int | None, state: dict[str, Any] | None, every: int) -> Iterator[tuple[int, dict]]:
        """Stream.cuts of runs_from(start, state): chunk starts about `every`
        bytes apart, the first frames past grid lines (chunk_bytes), found
        near them.  A plaintext segment only: an
        encrypted one is decrypted in windows that bound its chunks too, and
        an LZ4 stream cannot be entered midway."""
        h = self.header
        if h.lz4_stream or h.iv is not None:
            return
        d = h.data_offset
        p = (state or {}).get("pos", max(0, start - d)) if start is not None else 0
        for q in fr.grid_frame_starts(self.data[d:], p, self.avail, every, CUT_GRID):
            yield d + q, {"pos": q}

    def _emit(self, walk: fr.Walk, base: int, start: int) -> Iterator[Problem]:
        for offset, message in walk.payload_errors:
            yield self.problem(start + offset, f"frame at plaintext offset {base + offset}: {message}")

    def _linear_runs(
        self,
        p: int,
        positions: bool,
        check: bool = True,
        measure: Measure | None = None,
        stop: int | None = None,
    ) -> Iterator[Run | Problem | Boundary]:
        h = self.header
        avail = self.avail
        d = h.data_offset
        plain = h.iv is None
        whole = self.data[d:] if plain else None
        window = WINDOW
        logical = h.logical_base
        while p < avail:
            if stop is not None and d + p >= stop:
                yield boundary(d + p, {"pos": p})
                return
            if plain:
                buf, base = whole, 0
            else:
                buf, base = self.read(p, min(window, avail - p)), p
            at_eof = base + len(buf) >= avail
            measured = None
            if measure is not None and plain and not positions:
                w = fr.Walk()
                with paused():
                    measured = measure(
                        fr.frames(buf, p, len(buf), self.decode_payload, w, CHUNK_RECORDS, chunk_bytes(p))
                    )
            if measured is None:  # kept records (or a record measure() could not render)
                w = fr.walk(
                    buf, p - base, len(buf), self.decode_payload, CHUNK_RECORDS, chunk_bytes(p), positions
                )
            new_p = base + w.end
            yield from self._emit(w, base, d)
            got = bool(w.records) or new_p > p
            if measured is not None and new_p > p:
                yield Run(d + p, d + new_p, {"pos": p}, [], measured=measured)
            elif w.records:
                state = {"pos": p}
                records, length = self._checked(w.records, state, check)
                yield Run(
                    d + p,
                    d + new_p,
                    state,
                    records,
                    [logical + base + x for x in w.positions],
                    length,
                )
            status = w.status
            if status == fr.MORE or (status in (fr.END, fr.PARTIAL) and not at_eof and got):
                p = new_p
                window = WINDOW
                continue
            if status == fr.PARTIAL and not at_eof:
                # A frame larger than the window: widen it to the frame.
                rel = new_p - base
                need = int.from_bytes(bytes(buf[rel : rel + 4]), "little")
                window = max(window * 2, need)
                p = new_p
                continue
            if status == fr.PARTIAL:
                yield self.problem(
                    d + new_p, f"truncated frame at plaintext offset {new_p} (segment ends inside it)"
                )
            elif status == fr.BAD:
                yield self.problem(
                    d + new_p, f"frame at plaintext offset {new_p}: {w.error}; rest of segment skipped"
                )
            elif status == fr.ZERO and not at_eof:
                yield self.problem(d + new_p, f"frame at plaintext offset {new_p}: implausible frame size 0")
            return

    def _lz4_runs(
        self, state: dict[str, Any] | None, positions: bool, check: bool = True
    ) -> Iterator[Run | Problem]:
        d = self.header.data_offset
        try:
            lz = lz4stream.parse_header(bytes(self.read(0, min(self.avail, 19))))
        except lz4stream.Lz4Error as exc:
            if self.avail:  # nothing at all: the LZ4 header is not written yet
                yield self.problem(d, str(exc))
            return
        if state and "block" in state:
            c, u, s = state["block"], state["u"], state["skip"]
        else:
            c, u, s = lz.size, 0, 0
        target_c = c
        if lz.linked:
            c0, u0 = lz.size, 0  # decoding must start at the frame's first block
        else:
            c0, u0 = c, u
        tail: list[lz4stream.Tail] = []
        source = lz4stream.blocks(self.read, self.avail, lz, c0, u0, tail)
        held: list[lz4stream.Block] = []  # blocks from the one holding position s
        buf = b""
        exhausted = False
        logical = self.header.logical_base
        extra = {"linked": True} if lz.linked else {}

        def pull() -> bool:
            nonlocal buf, exhausted
            for block in source:
                if block.c < target_c:
                    continue  # linked frames: decoded only for their history
                held.append(block)
                buf += block.data
                return True
            exhausted = True
            return False

        while True:
            while not exhausted and len(buf) - s < WINDOW:
                pull()
            if not held:
                break
            w = fr.walk(
                memoryview(buf), s, len(buf), self.decode_payload, CHUNK_RECORDS, CHUNK_BYTES, positions
            )
            base_u = held[0].u
            for offset, message in w.payload_errors:
                yield self.problem(
                    d + held[0].c, f"frame at uncompressed offset {base_u + offset}: {message}"
                )
            status = w.status
            if status in (fr.PARTIAL, fr.END) and not exhausted and not w.records:
                pull()
                continue
            # Find the block holding the resume point w.end.
            j, off = 0, 0
            while j < len(held) and off + len(held[j].data) <= w.end:
                off += len(held[j].data)
                j += 1
            if j < len(held):
                nc, nu, ns = held[j].c, held[j].u, w.end - off
            else:
                nc, nu, ns = self._after(held[-1], lz), base_u + len(buf), 0
            if w.records:
                # "stop" (uncompressed resume point) lets decode() end exactly
                # where this run ends: chunk.end alone names only a block.
                start_state = {"block": held[0].c, "u": base_u, "skip": s, "stop": nu + ns, **extra}
                records, length = self._checked(w.records, start_state, check)
                yield Run(
                    d + held[0].c,
                    d + nc,
                    start_state,
                    records,
                    [logical + base_u + x for x in w.positions],
                    length,
                )
            if status == fr.MORE or (status in (fr.END, fr.PARTIAL) and not exhausted):
                buf = buf[off:]
                del held[:j]
                s = ns
                if not held:
                    target_c = nc
                continue
            if status == fr.PARTIAL:
                yield self.problem(d + nc, f"truncated frame at uncompressed offset {base_u + w.end}")
            elif status == fr.BAD:
                yield self.problem(d + nc, f"frame at uncompressed offset {base_u + w.end}: {w.error}")
            elif status == fr.ZERO:
                yield self.problem(
                    d + nc, f"frame at uncompressed offset {base_u + w.end}: implausible frame size 0"
                )
            break
        if tail:
            yield from self._lz4_end_problems(lz, tail[0], check)

    def _lz4_end_problems(
        self, lz: lz4stream.Lz4Header, tail: lz4stream.Tail, check: bool
    ) -> Iterator[Problem]:
        """How the LZ4 block sequence ended, when that is a problem: a bad
        block, bytes after the frame, and (on a scan: decode_chunk passes
        check=False) a content checksum that does not match."""
        d = self.header.data_offset
        if tail.kind == "bad":
            yield self.problem(d + tail.c, tail.error + "; rest of segment skipped")
        elif tail.kind == "end" and tail.trailing:
            yield self.problem(d + tail.c, f"{tail.trailing} bytes after the LZ4 frame ignored")
        if check:
            error = lz4stream.content_error(self.read, self.avail, lz, tail)
            if error:
                yield self.problem(d + tail.c + 4, f"{error}; the frames are shown as read")

    def _after(self, block: lz4stream.Block, lz: lz4stream.Lz4Header) -> int:
        """Container offset just after `block` (its stored size + checksum)."""
        word = int.from_bytes(bytes(self.read(block.c, 4)), "little")
        return block.c + 4 + (word & ~lz4stream.RAW_BIT) + (4 if lz.block_checksum else 0)

    # -- random access ---------------------------------------------------------

    def decode_chunk(self, state: dict[str, Any], end: int) -> list[Any]:
        """The records of the chunk starting at `state` and ending at native
        offset `end` (LZ4 chunks carry their exact end in state["stop"]).
        The scan already proved them renderable, or marked the state."""
        with paused():
            return list(self.iter_chunk(state, end))

    def iter_chunk(self, state: dict[str, Any], end: int) -> Iterator[Any]:
        """decode_chunk() one record at a time, each yielded as soon as it is
        decoded (plain and CTR segments; LZ4 chunks are inflated whole
        first).  The caller pauses the GC."""
        if self.header.lz4_stream:
            records: Iterator[Any] = iter(self._lz4_chunk(state))
        else:
            p, stop = state.get("pos", 0), end - self.header.data_offset
            if self.header.iv is None:
                d = self.header.data_offset
                buf, base = self.data[d : d + stop], 0
            else:
                buf, base = self.read(p, stop - p), p
            records = fr.frames(buf, p - base, stop - base, self.decode_payload, fr.Walk())
        if state.get("sanitize"):
            return map(sanitize, records)
        return records

    def _lz4_chunk(self, state: dict[str, Any]) -> list[Any]:
        # Exact even if the file grew since the scan: stop by position.
        out: list[Any] = []
        stop = self.header.logical_base + state["stop"]
        for run in self._lz4_runs(state, True, check=False):
            if isinstance(run, Run):
                for position, record in zip(run.positions, run.records, strict=True):
                    if position >= stop:
                        return out
                    out.append(record)
        return out
