"""Reading proio streams: bucket headers, chunks of buckets, event records.

A chunk is a run of consecutive, complete, decodable buckets (grouped until
~2000 events or ~1 MiB of native bytes, so streams of tiny buckets do not
make one index row per bucket; a bucket is never split).  Its state is

    {"event": index of its first event, "bucket": index of its first bucket,
     "metadata": {key: base64 value} (the running metadata before it),
     "descriptors": [offsets of the earlier bucket headers carrying
                     FileDescriptorProtos]}

Descriptors are not copied into the state: decode() re-reads those few
headers (the index keeps the offsets) and builds the pool once per distinct
offset list (cached), so random reads stay cheap and the state stays small.
"""

from __future__ import annotations

import base64
import mmap
import os
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fmtfs.formats.base import Chunk, Problem, Record, State, Stream, boundary
from fmtfs.formats.proio import wire
from fmtfs.formats.proio.schema import Resolver, Resolvers
from fmtfs.shape import encode_name

CHUNK_EVENTS = 2000
CHUNK_BYTES = 1 << 20
_RESOLVER_CACHE = 16


class Damaged(Exception):
    """A bucket that cannot be used; the reader resyncs at its magic + 1."""


class Truncated(Exception):
    """The file ends inside this bucket."""


@dataclass
class Head:
    """A parsed bucket header."""

    offset: int  # of the magic
    header_len: int
    n_events: int
    size: int  # stored payload bytes
    compression: int
    descriptors: list[bytes]
    metadata: list[tuple[str, bytes]]  # in header order; later entries win

    @property
    def payload(self) -> int:
        return self.offset + wire.PREFIX + self.header_len

    @property
    def end(self) -> int:
        return self.payload + self.size


def read_head(buf: Any, pos: int, length: int) -> Head:
    """The header of the bucket whose magic is at `pos` (Truncated / Damaged)."""
    if pos + wire.PREFIX > length:
        raise Truncated("the file ends inside the bucket's magic and header length")
    (header_len,) = wire.unpack_u32(buf, pos + 16)
    start = pos + wire.PREFIX
    if start + header_len > length:
        raise Truncated(f"the file ends inside the {header_len}-byte bucket header")
    try:
        h = wire.Header.FromString(buf[start : start + header_len])
    except Exception as exc:  # noqa: BLE001 - any parse failure means damage
        raise Damaged(f"bucket header does not parse ({exc})") from None
    metadata = [(m.key.decode("utf-8", "replace"), m.value) for m in h.metaData]
    metadata += [(m.key.decode("utf-8", "replace"), m.value) for m in h.metadata]
    return Head(pos, header_len, h.nEvents, h.bucketSize, h.compression, list(h.fileDescriptor), metadata)


def render_metadata(metadata: dict[str, bytes]) -> tuple[dict[str, str], dict[str, str]]:
    """(UTF-8 values, base64 of the others), keys sorted."""
    text: dict[str, str] = {}
    other: dict[str, str] = {}
    for key in sorted(metadata):
        value = metadata[key]
        try:
            text[key] = value.decode("utf-8")
        except UnicodeDecodeError:
            other[key] = base64.b64encode(value).decode("ascii")
    return text, other


class _Source:
    """The bytes of one file: an mmap (or b"" when empty)."""

    def __init__(self, path: Path) -> None:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            self.buf: Any = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        self.length = size

    def close(self) -> None:
        if isinstance(self.buf, mmap.mmap):
            self.buf.close()


class _Cursor:
    """Running decoder state between buckets (the state dict, unpacked)."""

    def __init__(self, state: State | None) -> None:
        state = state or {}
        self.event: int = state.get("event", 0)
        self.bucket: int = state.get("bucket", 0)
        self.metadata: dict[str, bytes] = {
            k: base64.b64decode(v) for k, v in state.get("metadata", {}).items()
        }
        self.descriptors: list[int] = list(state.get("descriptors", []))
        self._rendered: tuple[dict[str, str], dict[str, str]] | None = None

    def state(self) -> State:
        return {
            "event": self.event,
            "bucket": self.bucket,
            "metadata": {k: base64.b64encode(v).decode("ascii") for k, v in self.metadata.items()},
            "descriptors": list(self.descriptors),
        }

    def apply(self, head: Head) -> None:
        if head.metadata:
            for key, value in head.metadata:
                self.metadata[key] = value
            self._rendered = None
        if head.descriptors:
            self.descriptors.append(head.offset)

    def rendered(self) -> tuple[dict[str, str], dict[str, str]]:
        if self._rendered is None:
            self._rendered = render_metadata(self.metadata)
        return self._rendered


# A type id's (name, resolved type or None, the lines of its type view).
_Kind = tuple[str, Any, list[Record]]


def _parse_events(buf: Any, head: Head) -> list[Any]:
    """The bucket's events, parsed (Damaged when the payload does not
    decode).  Buckets of unknown compression or without events give none:
    scan() reports a payload there and skips it by bucketSize."""
    if head.compression not in wire.COMPRESSION_NAMES or head.n_events == 0:
        return []
    try:
        payload = wire.decompress(head.compression, buf[head.payload : head.end])
        return [wire.Event.FromString(e) for e in wire.split_events(payload, head.n_events)]
    except Exception as exc:  # noqa: BLE001 - any failure is damage
        raise Damaged(f"bucket payload does not decode ({type(exc).__name__}: {exc})") from None


def _tags(event: Any) -> dict[str, list[int]]:
    """tag -> entry ids in stored order."""
    return {t.key.decode("utf-8", "replace"): list(t.value.entry) for t in event.tag}


def _tagged(tags: dict[str, list[int]]) -> dict[int, list[str]]:
    """entry id -> its tags (what a type view's line shows)."""
    tagged: dict[int, list[str]] = {}
    for tag, ids in tags.items():
        for entry_id in dict.fromkeys(ids):
            tagged.setdefault(entry_id, []).append(tag)
    return tagged


def _entries(
    event: Any, index: int, kinds: dict[int, _Kind], tagged: dict[int, list[str]] | None
) -> dict[str, Any]:
    """The event's entries by id, decoded where their type resolves (else
    kept as payload_base64); each entry's line is appended to its type view,
    unless `tagged` is None (the events view alone is wanted)."""
    b64 = base64.b64encode
    stored = {e.key: e.value for e in event.entry}
    entries: dict[str, Any] = {}
    for entry_id in sorted(stored):
        any_ = stored[entry_id]
        kind = kinds.get(any_.type)
        if kind is None:  # a type id missing from the event's table
            entries[str(entry_id)] = {"type": None, "payload_base64": b64(any_.payload).decode("ascii")}
            continue
        name, resolved, lines = kind
        # its type view's line, unless only the events view is wanted
        line = (
            None if tagged is None else {"event": index, "entry": entry_id, "tags": tagged.get(entry_id, [])}
        )
        if resolved is not None:
            try:
                value = resolved.to_json(resolved.cls.FromString(any_.payload))
            except Exception:  # noqa: BLE001 - undecodable payload: keep the bytes
                resolved = None
        if resolved is not None:
            entries[str(entry_id)] = {"type": name, "value": value}
            if line is not None:
                line["value"] = value
        else:
            raw = b64(any_.payload).decode("ascii")
            entries[str(entry_id)] = {"type": name, "payload_base64": raw}
            if line is not None:
                line["payload_base64"] = raw
        if line is not None:
            lines.append(line)
    return entries


class ProioStream(Stream):
    renderer_version = 1

    def __init__(self, name: str, path: Path, fallbacks: list[Resolver]) -> None:
        super().__init__(name, path)
        self.view = encode_name(name)
        self.events_path = f"{self.view}/events.jsonl"
        self._fallbacks = fallbacks
        self._resolvers: OrderedDict[tuple[int, ...], Resolvers] = OrderedDict()
        self._type_paths: dict[str, str] = {}

    def view_paths(self) -> list[str]:
        return [self.events_path]

    # -- type resolution -------------------------------------------------

    def _resolvers_for(self, offsets: tuple[int, ...], buf: Any, length: int) -> Resolvers:
        found = self._resolvers.get(offsets)
        if found is not None:
            self._resolvers.move_to_end(offsets)
            return found
        blobs: list[bytes] = []
        for offset in offsets:
            blobs += read_head(buf, offset, length).descriptors
        found = Resolvers(Resolver(blobs) if blobs else None, self._fallbacks)
        self._resolvers[offsets] = found
        if len(self._resolvers) > _RESOLVER_CACHE:
            self._resolvers.popitem(last=False)
        return found

    # -- one bucket -> records --------------------------------------------

    def _bucket_records(
        self,
        buf: Any,
        length: int,
        head: Head,
        cursor: _Cursor,
        out: dict[str, list[Record]],
        every_view: bool = True,
    ) -> None:
        """Decode one complete bucket into `out` and advance `cursor`.
        Raises Damaged (nothing added, cursor unchanged) when unusable.
        `every_view` False: events.jsonl only (no bucket or type views: the
        type views' lines and tag inversion were a fifth of the decode)."""
        events = _parse_events(buf, head)
        cursor.apply(head)
        lookup = self._resolvers_for(tuple(cursor.descriptors), buf, length).lookup
        metadata, metadata_b64 = cursor.rendered()
        event_lines = out.setdefault(self.events_path, [])
        if every_view:
            bucket_lines = out.setdefault(f"{self.view}/buckets/{cursor.bucket}.jsonl", [])
        type_lines: dict[str, list[Record]] = {}  # type name -> its view's list in `out`
        index = cursor.event
        for event in events:
            kinds = self._entry_types(event, lookup, type_lines, out if every_view else None)
            tags = _tags(event)
            record: dict[str, Any] = {"event": index, "metadata": metadata}
            if metadata_b64:
                record["metadata_base64"] = metadata_b64
            record["tags"] = tags
            record["entries"] = _entries(event, index, kinds, _tagged(tags) if every_view else None)
            event_lines.append(record)
            if every_view:
                bucket_lines.append(record)
            index += 1
        cursor.event = index
        cursor.bucket += 1

    def _entry_types(
        self,
        event: Any,
        lookup: Any,
        type_lines: dict[str, list[Record]],
        out: dict[str, list[Record]] | None,
    ) -> dict[int, _Kind]:
        """The event's type table: type id -> (name, resolved type or None,
        the lines of that type's view in `out`; an empty list when `out` is
        None: no type view wanted)."""
        kinds: dict[int, _Kind] = {}
        for t in event.type:
            name = t.value.decode("utf-8", "replace")
            lines = type_lines.get(name)
            if lines is None and out is None:
                lines = type_lines[name] = []
            elif lines is None:
                path = self._type_paths.get(name)
                if path is None:
                    path = self._type_paths[name] = f"{self.view}/types/{encode_name(name)}.jsonl"
                lines = type_lines[name] = out.setdefault(path, [])
            kinds[t.key] = (name, lookup(name), lines)
        return kinds

    # -- scan / decode ------------------------------------------------------

    def scan(
        self, start: int | None, state: State | None, stop: int | None = None
    ) -> Iterator[Chunk | Problem]:
        src = _Source(self.path)
        try:
            yield from self._scan(src.buf, src.length, start or 0, state, stop)
        finally:
            src.close()

    def _problem(self, offset: int, error: str) -> Problem:
        return Problem(self.name, offset, error)

    def _scan(
        self, buf: Any, length: int, pos: int, state: State | None, stop: int | None
    ) -> Iterator[Chunk | Problem]:
        cursor = _Cursor(state)
        chunk: Chunk | None = None
        pending: list[Problem] = []  # problems met inside the current chunk

        def close() -> Iterator[Chunk | Problem]:
            nonlocal chunk
            if chunk is not None:
                yield chunk
                chunk = None
            yield from pending
            pending.clear()

        while True:
            magic = buf.find(wire.MAGIC, pos) if pos < length else -1
            if magic < 0:
                yield from close()
                rest = bytes(buf[pos:length])
                if rest.strip(b"\x00") and not wire.MAGIC.startswith(rest):
                    yield self._problem(pos, f"{len(rest)} bytes after the last bucket hold no bucket magic")
                return
            if magic > pos:
                yield from close()
                yield self._problem(
                    pos, f"skipped {magic - pos} bytes of junk before the bucket magic at {magic}"
                )
            if chunk is None and stop is not None and magic >= stop:
                yield boundary(magic, cursor.state())
                return
            try:
                head = read_head(buf, magic, length)
                if head.end > length:
                    raise Truncated(
                        f"bucket declares {head.size} payload bytes, "
                        f"the file ends after {length - head.payload}"
                    )
                if head.n_events == 0 and head.size > 0:
                    pending.append(
                        self._problem(
                            magic, f"bucket has 0 events and {head.size} payload bytes; payload skipped"
                        )
                    )
                if head.compression not in wire.COMPRESSION_NAMES:
                    pending.append(
                        self._problem(
                            magic, f"unknown compression {head.compression}; bucket payload skipped"
                        )
                    )
                records: dict[str, list[Record]] = {} if chunk is None else chunk.records
                before = cursor.state() if chunk is None else None
                self._bucket_records(buf, length, head, cursor, records)
            except (Truncated, Damaged) as exc:
                yield from close()
                later = buf.find(wire.MAGIC, magic + 1)
                if isinstance(exc, Truncated) and later < 0:
                    # A torn tail (or a bucket still being written): stop here
                    # so a scan of the grown file resumes at this magic.
                    yield self._problem(magic, f"truncated bucket: {exc}")
                    return
                if later < 0:
                    yield self._problem(magic, f"damaged bucket: {exc}; no bucket follows")
                    return
                yield self._problem(magic, f"damaged bucket: {exc}; resynchronized at {later}")
                pos = later
                continue
            if chunk is None:
                chunk = Chunk(start=magic, end=head.end, state=before, records=records)
            chunk.end = head.end
            pos = head.end
            if (
                len(chunk.records.get(self.events_path, ())) >= CHUNK_EVENTS
                or chunk.end - chunk.start >= CHUNK_BYTES
            ):
                yield from close()

    def cuts(self, start: int | None, state: State | None, every: int) -> Iterator[tuple[int, State]]:
        """Chunk starts from the bucket headers alone (payloads skipped by
        bucketSize, events counted by nEvents), with the running state; ends
        at the first bucket _scan would report (junk, a damaged or truncated
        header, a payload it skips)."""
        src = _Source(self.path)
        try:
            buf, length = src.buf, src.length
            cursor = _Cursor(state)
            pos = chunk = start or 0
            events = 0
            last = pos
            while pos < length and buf.find(wire.MAGIC, pos, pos + len(wire.MAGIC)) == pos:
                try:
                    head = read_head(buf, pos, length)
                except (Truncated, Damaged):
                    return
                if head.end > length or head.compression not in wire.COMPRESSION_NAMES:
                    return
                if head.n_events == 0 and head.size > 0:
                    return
                if events >= CHUNK_EVENTS or pos - chunk >= CHUNK_BYTES:  # _scan closed a chunk here
                    chunk, events = pos, 0
                    if pos - last >= every:
                        yield pos, cursor.state()
                        last = pos
                cursor.apply(head)
                cursor.event += head.n_events
                cursor.bucket += 1
                events += head.n_events
                pos = head.end
        finally:
            src.close()

    def decode(self, chunk: Chunk) -> dict[str, list[Record]]:
        return self._decode(chunk, every_view=True)

    def view_records(self, chunk: Chunk, view: str) -> list[Record] | None:
        if view != self.events_path:
            return None
        return self._decode(chunk, every_view=False).get(view, [])

    def _decode(self, chunk: Chunk, every_view: bool) -> dict[str, list[Record]]:
        src = _Source(self.path)
        try:
            cursor = _Cursor(chunk.state)
            out: dict[str, list[Record]] = {}
            pos = chunk.start
            while pos < chunk.end:
                head = read_head(src.buf, pos, src.length)
                self._bucket_records(src.buf, src.length, head, cursor, out, every_view)
                pos = head.end
            return out
        finally:
            src.close()


# -- header walks (summary, writer) --------------------------------------------


def walk_heads(buf: Any, length: int, pos: int = 0) -> Iterator[Head]:
    """Every bucket header from `pos` on, skipping payloads by bucketSize, as
    go-proio's Skip does: the header of a truncated last bucket is included;
    an unparsable header resyncs at its magic + 1."""
    while pos < length:
        magic = buf.find(wire.MAGIC, pos)
        if magic < 0:
            return
        try:
            head = read_head(buf, magic, length)
        except (Truncated, Damaged):
            pos = magic + 1
            continue
        yield head
        pos = head.end if head.end > magic else magic + 1


def summary(paths: list[Path]) -> bytes:
    """proio-summary's six lines over the streams (concatenated, in order)."""
    counts = {wire.NONE: 0, wire.GZIP: 0, wire.LZ4: 0, wire.LZMA: 0}
    events = descriptors = 0
    for path in paths:
        src = _Source(path)
        try:
            for head in walk_heads(src.buf, src.length):
                if head.compression in counts:
                    counts[head.compression] += 1
                events += head.n_events
                descriptors += len(head.descriptors)
        finally:
            src.close()
    lines = [
        f"Number of LZMA buckets: {counts[wire.LZMA]}",
        f"Number of LZ4 buckets: {counts[wire.LZ4]}",
        f"Number of GZIP buckets: {counts[wire.GZIP]}",
        f"Number of uncompressed buckets: {counts[wire.NONE]}",
        f"Number of events: {events}",
        f"Number of FileDescriptorProtos: {descriptors}",
    ]
    return ("\n".join(lines) + "\n").encode()
