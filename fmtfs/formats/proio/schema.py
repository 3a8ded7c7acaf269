"""Type resolution: FileDescriptorProtos (from stream headers, a user's
FileDescriptorSet, the bundled proio models) -> message classes and their
JSON converters.

Descriptors inside a header come in arbitrary order and a dependency may sit
in an earlier header, so files are added to a pool order-independently
(spec §7): repeatedly add every pending file whose dependencies are all
present; the rest wait.  Names already in the pool are skipped (a
concatenation of two streams carries each file twice).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from fmtfs.formats.proio import tojson
from fmtfs.formats.proio.bundled import BUNDLED


@dataclass(frozen=True)
class MessageType:
    name: str
    cls: type
    to_json: tojson.Converter
    file: Any  # the FileDescriptor defining it (for the writer's descriptors)


def _has_file(pool: descriptor_pool.DescriptorPool, name: str) -> bool:
    try:
        pool.FindFileByName(name)
        return True
    except KeyError:
        return False


def _well_known(name: str) -> descriptor_pb2.FileDescriptorProto | None:
    """google/protobuf/*.proto from the runtime, for dependencies a stream
    did not carry (writers normally include them)."""
    if not name.startswith("google/protobuf/"):
        return None
    try:
        fd = descriptor_pool.Default().FindFileByName(name)
    except KeyError:
        return None
    fdp = descriptor_pb2.FileDescriptorProto()
    fd.CopyToProto(fdp)
    return fdp


class Resolver:
    """One descriptor pool and its message classes, looked up by full name."""

    def __init__(self, blobs: Iterable[bytes]) -> None:
        self.pool = descriptor_pool.DescriptorPool()
        # name -> the serialized FileDescriptorProto as it was given, kept so
        # the writer copies descriptors byte for byte.
        self.blobs: dict[str, bytes] = {}
        self._types: dict[str, MessageType | None] = {}
        pending = []
        for blob in blobs:
            try:
                fdp = descriptor_pb2.FileDescriptorProto.FromString(blob)
            except Exception:  # noqa: BLE001 - a damaged descriptor resolves nothing
                continue
            pending.append((fdp, bytes(blob)))
        self._add_all(pending)

    def _add_all(self, pending: list[tuple[descriptor_pb2.FileDescriptorProto, bytes]]) -> None:
        pool = self.pool
        progress = True
        while pending and progress:
            progress = False
            waiting = []
            for fdp, blob in pending:
                if _has_file(pool, fdp.name):
                    progress = True
                    continue
                if all(_has_file(pool, dep) for dep in fdp.dependency):
                    try:
                        pool.Add(fdp)
                        self.blobs[fdp.name] = blob
                    except Exception:  # noqa: BLE001 - conflicting or invalid file: skip it
                        pass
                    progress = True
                else:
                    waiting.append((fdp, blob))
            pending = waiting
            if pending and not progress:
                # Last resort: well-known dependencies the stream left out.
                missing = {dep for fdp, _ in pending for dep in fdp.dependency if not _has_file(pool, dep)}
                for dep in sorted(missing):
                    wk = _well_known(dep)
                    if wk is not None:
                        pending.append((wk, wk.SerializeToString()))
                        progress = True

    @staticmethod
    def names(blobs: Iterable[bytes]) -> list[str]:
        """The file names of serialized FileDescriptorProtos (damaged ones skipped)."""
        out = []
        for blob in blobs:
            try:
                out.append(descriptor_pb2.FileDescriptorProto.FromString(blob).name)
            except Exception:  # noqa: BLE001
                continue
        return out

    def lookup(self, name: str) -> MessageType | None:
        try:
            return self._types[name]
        except KeyError:
            pass
        found = None
        try:
            desc = self.pool.FindMessageTypeByName(name)
        except KeyError:
            desc = None
        if desc is not None:
            cls = message_factory.GetMessageClass(desc)
            found = MessageType(name, cls, tojson.converter(desc), desc.file)
        self._types[name] = found
        return found


class Resolvers:
    """The stream's own resolver first, then the fallbacks (a user's
    FileDescriptorSet, then the bundled proio models), as in spec §7 step 4."""

    def __init__(self, stream: Resolver | None, fallbacks: list[Resolver]) -> None:
        self.chain = ([stream] if stream is not None else []) + fallbacks
        self._cache: dict[str, MessageType | None] = {}

    def lookup(self, name: str) -> MessageType | None:
        try:
            return self._cache[name]
        except KeyError:
            pass
        found = None
        for resolver in self.chain:
            found = resolver.lookup(name)
            if found is not None:
                break
        self._cache[name] = found
        return found


_BUNDLED: Resolver | None = None


def bundled() -> Resolver:
    global _BUNDLED
    if _BUNDLED is None:
        _BUNDLED = Resolver(BUNDLED.values())
    return _BUNDLED


def load_descriptor_set(path: Path) -> Resolver:
    fds = descriptor_pb2.FileDescriptorSet.FromString(Path(path).read_bytes())
    return Resolver(f.SerializeToString() for f in fds.file)


def dependency_closure(file: Any) -> list[Any]:
    """`file` (a FileDescriptor) and everything it imports, dependencies first."""
    seen: dict[str, Any] = {}

    def visit(fd: Any) -> None:
        if fd.name in seen:
            return
        for dep in fd.dependencies:
            visit(dep)
        seen[fd.name] = fd

    visit(file)
    return list(seen.values())
