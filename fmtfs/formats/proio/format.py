"""The proio Format: a `.proio` file or a folder of them (top level only).

Views per stream file `<file>` (shape.encode_name of the file name):
`<file>/events.jsonl`, `<file>/buckets/<n>.jsonl`, `<file>/types/<type>.jsonl`
(records, from the chunk scan) and `<file>/_summary.txt` (derived: exactly
what `proio-summary <file>` prints).  The mount root also has `_summary.txt`,
proio-summary of all the streams concatenated in name order (for a single-
file source, the same as that file's).  The leading `_` keeps both out of
Spark's way.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from fmtfs.formats.base import DerivedRender, Format, FormatError, ReadOnlyView, Stream, Writer
from fmtfs.formats.proio import wire
from fmtfs.formats.proio.card import CARD, SNIFF_BYTES, is_stream  # noqa: F401 - SNIFF_BYTES: imported from here too
from fmtfs.formats.proio.reader import ProioStream, _Source, summary, walk_heads
from fmtfs.formats.proio.schema import Resolver, Resolvers, bundled, load_descriptor_set
from fmtfs.formats.proio.writer import ProioWriter
from fmtfs.formats.schema import ViewSchema
from fmtfs.shape import decode_name, encode_name


class ProioFormat(Format, card=CARD):
    def __init__(self, source: Path, options: dict[str, Any]) -> None:
        super().__init__(source, options)
        fallbacks: list[Resolver] = []
        descriptor_set = options.get("descriptor_set")
        if descriptor_set:
            try:
                fallbacks.append(load_descriptor_set(Path(descriptor_set)))
            except Exception as exc:  # noqa: BLE001 - a user error, one line
                raise FormatError(f"{descriptor_set}: not a readable FileDescriptorSet ({exc})") from None
        fallbacks.append(bundled())
        self._fallbacks = fallbacks
        self._streams: dict[Path, ProioStream] = {}
        self._writers: dict[Path, ProioWriter] = {}

    def _paths(self) -> list[Path]:
        if self.source.is_file():
            return [self.source]
        return sorted(p for p in self.source.iterdir() if is_stream(p))

    def streams(self) -> list[Stream]:
        out: list[Stream] = []
        for path in self._paths():
            stream = self._streams.get(path)
            if stream is None:
                stream = self._streams[path] = ProioStream(path.name, path, self._fallbacks)
            out.append(stream)
        return out

    def derived_views(self) -> dict[str, DerivedRender]:
        paths = self._paths()
        views: dict[str, DerivedRender] = {"_summary.txt": lambda: summary(paths)}
        for path in paths:
            views[f"{encode_name(path.name)}/_summary.txt"] = lambda p=path: summary([p])
        return views

    def view_sources(self, streams: list[Stream]) -> dict[str, list[Path]]:
        """A file's `_summary.txt` reads that file only (the root one: all)."""
        return {f"{encode_name(s.path.name)}/_summary.txt": [s.path] for s in streams}

    def view_schema(self, view_path: str) -> ViewSchema | None:
        """Event lines (`events.jsonl`, `buckets/<n>.jsonl`), and type lines
        typed by the message descriptor (from the stream's headers, then
        the fallbacks)."""
        # imported here: its Arrow types bring in pyarrow, 50 MB for every
        # process opening a format (the mount's decode workers never need it)
        from fmtfs.formats.proio import columns

        parts = view_path.split("/")
        if len(parts) < 2 or not parts[-1].endswith(".jsonl"):
            return None
        if parts[1:] == ["events.jsonl"] or (len(parts) == 3 and parts[1] == "buckets"):
            return columns.EVENT_VIEW
        if len(parts) != 3 or parts[1] != "types":
            return None
        path = _by_name(self._paths()).get(parts[0])
        if path is None:
            return None
        src = _Source(path)
        try:
            blobs = [blob for head in walk_heads(src.buf, src.length) for blob in head.descriptors]
        finally:
            src.close()
        found = Resolvers(Resolver(blobs) if blobs else None, self._fallbacks).lookup(
            decode_name(parts[2][: -len(".jsonl")])
        )
        return columns.type_view_schema(found.cls.DESCRIPTOR) if found is not None else None

    def info(self) -> dict[str, Any]:
        streams = {}
        for path in self._paths():
            src = _Source(path)
            try:
                compression: dict[str, int] = {}
                buckets = events = 0
                descriptors: list[str] = []
                keys: dict[str, None] = {}
                for head in walk_heads(src.buf, src.length):
                    buckets += 1
                    events += head.n_events
                    label = wire.COMPRESSION_NAMES.get(head.compression, str(head.compression))
                    compression[label] = compression.get(label, 0) + 1
                    descriptors += Resolver.names(head.descriptors)
                    keys.update(dict.fromkeys(k for k, _ in head.metadata))
            finally:
                src.close()
            streams[path.name] = {
                "buckets": buckets,
                "events": events,
                "compression": compression,
                "descriptors": descriptors,
                "metadata_keys": sorted(keys),
            }
        descriptor_set = self.options.get("descriptor_set")
        return {
            "streams": streams,
            "descriptor_set": str(descriptor_set) if descriptor_set else None,
            "bundled_descriptors": sorted(bundled().blobs),
        }

    def writable_views(self, streams: list[Stream], views: Collection[str]) -> set[str]:
        # every file's events.jsonl (writer() looks for the file among all)
        return {s.events_path for s in streams if isinstance(s, ProioStream)} & set(views)

    def writer(self, view_path: str, create: bool) -> Writer:
        parts = view_path.strip("/").split("/")
        names = _by_name(self._paths())
        if len(parts) < 2 or (parts[0] not in names and not (create and len(parts) == 2)):
            raise FileNotFoundError(view_path)
        if parts[1:] != ["events.jsonl"]:
            raise ReadOnlyView(view_path)
        path = names.get(parts[0])
        if path is None:
            # A new stream file in a folder source: `<name>.proio/events.jsonl`.
            name = decode_name(parts[0])
            if self.source.is_file() or "/" in name or "\x00" in name or not name.endswith(".proio"):
                raise FileNotFoundError(view_path)
            path = self.source / name
        writer = self._writers.get(path)
        if writer is None:
            writer = self._writers[path] = ProioWriter(path, self._fallbacks)
        return writer


def _by_name(paths: list[Path]) -> dict[str, Path]:
    """Stream files by the encoded name their views' folder has."""
    return {encode_name(p.name): p for p in paths}
