"""Writing event lines into a proio stream as new buckets (spec §11).

Each write() appends one bucket per run of events sharing the same header
metadata (a metadata change needs a new header, as in the reference writers)
and splits further at the 16 MiB uncompressed flush threshold; usually that
is exactly one bucket per write().  The first new bucket's header carries
the FileDescriptorProtos (with their dependencies, dependencies first) of
every type the batch uses that no earlier header of the stream described.
Compression: that of the stream's last bucket, NONE for a new stream (or
when the last bucket's compression is unknown).

Metadata semantics of a written line: keys in `metadata`/`metadata_base64`
that differ from the stream's running metadata are written; absent keys keep
their value (proio metadata keys are never deleted).  `event` is ignored (the
position decides).  Entry ids are kept as given (nEntries = the largest id);
type ids are assigned 1..k per event in ascending entry order.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from fmtfs.formats.base import BadRecord, Record, Writer
from fmtfs.formats.proio import wire
from fmtfs.formats.proio.reader import Damaged, Head, Truncated, _Source, read_head
from fmtfs.formats.proio.schema import Resolver, Resolvers, dependency_closure
from fmtfs.permissions import inherit
from fmtfs.shape import decode_base64

_U64 = 1 << 64
_DIGITS = re.compile(r"[0-9]+\Z")
_KEYS = {"event", "metadata", "metadata_base64", "tags", "entries"}


@dataclass
class _Tail:
    """What the writer must know about the stream so far."""

    end: int = 0  # offset after the last complete bucket walked
    metadata: dict[str, bytes] = field(default_factory=dict)
    descriptor_names: set[str] = field(default_factory=set)
    blobs: list[bytes] = field(default_factory=list)
    compression: int = wire.NONE
    torn: int | None = None  # offset of a truncated last bucket


@dataclass
class _Event:
    metadata: dict[str, bytes]
    data: bytes
    files: list[Any]  # FileDescriptors the event's types need


def _walk_tail(tail: _Tail, buf: Any, length: int) -> None:
    pos = tail.end
    tail.torn = None
    while pos < length:
        magic = buf.find(wire.MAGIC, pos)
        if magic < 0:
            rest = bytes(buf[pos:length])
            if wire.MAGIC.startswith(rest):  # a torn magic
                tail.torn = pos
            return
        try:
            head: Head = read_head(buf, magic, length)
            if head.end > length:
                raise Truncated("payload")
        except Truncated:
            if buf.find(wire.MAGIC, magic + 1) < 0:
                tail.torn = magic
                return
            pos = magic + 1
            continue
        except Damaged:
            pos = magic + 1
            continue
        for key, value in head.metadata:
            tail.metadata[key] = value
        for blob in head.descriptors:
            tail.blobs.append(blob)
        if head.descriptors:
            tail.descriptor_names.update(Resolver.names(head.descriptors))
        if head.compression in wire.COMPRESSION_NAMES:
            tail.compression = head.compression
        pos = tail.end = head.end


def _mapping(record: Record, key: str) -> dict[str, Any]:
    value = record.get(key, {})
    if not isinstance(value, dict):
        raise BadRecord(f"{key}: expected an object")
    return value


def _utf8(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise BadRecord(f"{what}: expected a string")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRecord(f"{what}: not encodable as UTF-8") from None


def _uint64(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _U64:
        raise BadRecord(f"{what}: expected an integer from 0 to 2^64-1")
    return value


def _metadata(record: Record, n: int) -> dict[str, bytes]:
    """`metadata` (UTF-8 text) and `metadata_base64` (any bytes), merged."""
    metadata: dict[str, bytes] = {}
    for key, value in _mapping(record, "metadata").items():
        metadata[key] = _utf8(value, f"line {n}: metadata {key!r}")
    for key, value in _mapping(record, "metadata_base64").items():
        if key in metadata:
            raise BadRecord(f"line {n}: metadata key {key!r} given twice")
        metadata[key] = decode_base64(value, f"line {n}: metadata_base64 {key!r}")
    for key in metadata:
        _utf8(key, f"line {n}: metadata key")
    return metadata


def _add_tags(event: Any, record: Record, n: int) -> None:
    for tag, ids in _mapping(record, "tags").items():
        if not isinstance(ids, list):
            raise BadRecord(f"line {n}: tag {tag!r}: expected a list of entry ids")
        item = event.tag.add()
        item.key = _utf8(tag, f"line {n}: tag name")
        item.value.SetInParent()
        item.value.entry.extend(_uint64(i, f"line {n}: tag {tag!r}") for i in ids)


def _entries(record: Record, n: int, resolvers: Resolvers) -> tuple[dict[int, tuple[str, bytes]], list[Any]]:
    """(entry id -> (type name, serialized payload), the FileDescriptors the
    entries' types need)."""
    entries: dict[int, tuple[str, bytes]] = {}
    files: list[Any] = []
    for key, entry in _mapping(record, "entries").items():
        what = f"line {n}: entry {key}"
        if not _DIGITS.match(key) or int(key) >= _U64:
            raise BadRecord(f"{what}: entry ids are decimal integers")
        if not isinstance(entry, dict):
            raise BadRecord(f"{what}: expected an object")
        extra = set(entry) - {"type", "value", "payload_base64"}
        if extra:
            raise BadRecord(f"{what}: unknown field(s) {', '.join(sorted(extra))}")
        name = entry.get("type")
        if not isinstance(name, str) or not name or name.startswith("."):
            raise BadRecord(f"{what}: type: expected a full message name")
        if ("value" in entry) == ("payload_base64" in entry):
            raise BadRecord(f"{what}: give either value or payload_base64")
        resolved = resolvers.lookup(name)
        if "value" in entry:
            payload = _encode_value(entry["value"], name, resolved, what)
        else:
            payload = decode_base64(entry["payload_base64"], f"{what}: payload_base64")
        if resolved is not None:
            files.append(resolved.file)
        _utf8(name, f"{what}: type")
        entries[int(key)] = (name, payload)
    return entries, files


def _encode_value(value: Any, name: str, resolved: Any, what: str) -> bytes:
    """An entry's `value` (protobuf's JSON mapping) serialized as its type."""
    if resolved is None:
        raise BadRecord(f"{what}: unknown type {name!r} (no descriptor in the stream or bundled)")
    try:
        message = json_format.ParseDict(value, resolved.cls(), descriptor_pool=resolved.file.pool)
        return message.SerializeToString()
    except Exception as exc:  # noqa: BLE001 - ParseError, EncodeError, TypeError ...
        raise BadRecord(f"{what}: value is not a valid {name}: {exc}") from None


def _add_entries(event: Any, entries: dict[int, tuple[str, bytes]]) -> None:
    """Entries in id order; type ids 1..k in order of first use."""
    type_ids: dict[str, int] = {}
    for entry_id in sorted(entries):
        name, payload = entries[entry_id]
        type_id = type_ids.setdefault(name, len(type_ids) + 1)
        item = event.entry.add()
        item.key = entry_id
        item.value.SetInParent()
        item.value.type = type_id
        if payload:
            item.value.payload = payload
    if entries:
        event.nEntries = max(entries)
    if type_ids:
        event.nTypes = len(type_ids)
    for name, type_id in type_ids.items():
        item = event.type.add()
        item.key = type_id
        item.value = name.encode("utf-8")


class ProioWriter(Writer):
    def __init__(self, path: Path, fallbacks: list, compression: int | None = None) -> None:
        self.path = path
        self._fallbacks = fallbacks
        self._compression = compression  # None: the last bucket's, or NONE
        self._tail = _Tail()
        self._fd: int | None = None

    # -- the stream so far --------------------------------------------------

    def _refresh(self) -> None:
        if not self.path.exists():
            self._tail = _Tail()
            return
        src = _Source(self.path)
        try:
            if src.length < self._tail.end:  # replaced or truncated: start over
                self._tail = _Tail()
            _walk_tail(self._tail, src.buf, src.length)
        finally:
            src.close()

    # -- validation / encoding ------------------------------------------------

    def _event(self, record: Any, n: int, resolvers: Resolvers) -> _Event:
        """Line `n` validated and encoded (BadRecord, naming the line)."""
        if not isinstance(record, dict):
            raise BadRecord(f"line {n}: expected a JSON object")
        unknown = set(record) - _KEYS
        if unknown:
            raise BadRecord(f"line {n}: unknown field(s) {', '.join(sorted(unknown))}")
        if "event" in record and (isinstance(record["event"], bool) or not isinstance(record["event"], int)):
            raise BadRecord(f"line {n}: event: expected an integer")
        metadata = _metadata(record, n)
        event = wire.Event()
        _add_tags(event, record, n)
        entries, files = _entries(record, n, resolvers)
        _add_entries(event, entries)
        return _Event(metadata, event.SerializeToString(), files)

    def _buckets(self, events: list[_Event]) -> bytes:
        tail = self._tail
        compression = self._compression if self._compression is not None else tail.compression
        # Descriptors not yet in the stream, dependencies first, into the
        # first new header (they precede every use in the batch).
        descriptors: dict[str, bytes] = {}
        blobs = {name: blob for r in reversed(self._resolvers().chain) for name, blob in r.blobs.items()}
        for event in events:
            for file in event.files:
                for fd in dependency_closure(file):
                    if fd.name not in tail.descriptor_names and fd.name not in descriptors:
                        descriptors[fd.name] = blobs.get(fd.name) or fd.serialized_pb
        running = dict(tail.metadata)
        groups: list[tuple[dict[str, bytes], list[bytes], int]] = []
        for event in events:
            changed = {k: v for k, v in event.metadata.items() if running.get(k) != v}
            running.update(changed)
            record = wire.pack_u32(len(event.data)) + event.data
            if changed or not groups or groups[-1][2] + len(record) > wire.BUCKET_DUMP_THRES:
                groups.append((changed, [], 0))
            meta, records, size = groups[-1]
            records.append(record)
            groups[-1] = (meta, records, size + len(record))
        out = []
        for i, (meta, records, _size) in enumerate(groups):
            payload = wire.compress(compression, b"".join(records))
            header = wire.Header()
            header.nEvents = len(records)
            header.bucketSize = len(payload)
            if compression:
                header.compression = compression
            if i == 0:
                header.fileDescriptor.extend(descriptors.values())
            for key, value in meta.items():
                item = header.metadata.add()
                item.key = key.encode("utf-8")
                item.value = value
            out.append(wire.encode_bucket(header.SerializeToString(), payload))
        return b"".join(out)

    def _resolvers(self) -> Resolvers:
        blobs = self._tail.blobs
        return Resolvers(Resolver(blobs) if blobs else None, self._fallbacks)

    # -- Writer ---------------------------------------------------------------

    def write(self, records: list[Record]) -> None:
        self._refresh()
        resolvers = self._resolvers()
        events = [self._event(record, n, resolvers) for n, record in enumerate(records, 1)]
        if not events:
            return
        data = self._buckets(events)
        if self._tail.torn is not None:
            # A bucket torn by a crash can never complete; appending after it
            # would make readers misparse our bucket as its payload.
            os.truncate(self.path, self._tail.torn)
        if self._fd is None:
            new = not self.path.exists()
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            if new:  # a new stream file: owner and mode of the other .proio files
                inherit(self.path, self.path.parent.glob("*.proio"))
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self._refresh()

    def sync(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.close()
