"""The wallaby format: a folder of logs (or one log), a stream per log."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from fmtfs.formats.base import Format, ReadOnlyView, Stream, Writer
from fmtfs.formats.schema import Field, Kind, ViewSchema
from fmtfs.formats.wallaby.card import CARD, is_log
from fmtfs.formats.wallaby.layout import HEADER_16, INDEX_RECORD, index_path, log_header_size
from fmtfs.formats.wallaby.log import WallabyLog
from fmtfs.formats.wallaby.writer import WallabyWriter
from fmtfs.shape import encode_name

# Every view (`<name>/records.jsonl`, `<name>/buckets/<b>.jsonl`) holds record lines.
RECORD_SCHEMA = ViewSchema(
    Field("index", Kind.INT), Field.time("time", "ns"), Field("flags", Kind.INT), Field("data", Kind.BYTES)
)


class WallabyFormat(Format, card=CARD):
    def logs(self) -> list[Path]:
        if self.source.is_file():
            return [self.source]
        return sorted(p for p in self.source.iterdir() if is_log(p))

    def streams(self) -> list[Stream]:
        bucket = self.options["time_bucket"]
        return [WallabyLog(p, bucket) for p in self.logs()]

    def writable_views(self, streams: list[Stream], views: Collection[str]) -> set[str]:
        # every log's records.jsonl (writer() looks for the log among all)
        return {s.records_view for s in streams if isinstance(s, WallabyLog)} & set(views)

    def view_schema(self, view_path: str) -> ViewSchema | None:
        return RECORD_SCHEMA if view_path.endswith(".jsonl") else None

    def info(self) -> dict[str, Any]:
        details = {}
        for log in self.logs():
            with open(log, "rb") as f:
                head = f.read(16)
                data = head + f.read(1 << 16)
            header = log_header_size(log, data)
            _, version, flags, ttl = HEADER_16.unpack_from(head.ljust(16, b"\0"))
            idx = index_path(log)
            details[encode_name(log.name)] = {
                "version": version,
                "header_size": header,
                "flags": flags,
                "ttl_ns": ttl if header == 16 else 0,
                "index": idx.name if idx.exists() else None,
                "index_records": max(0, (idx.stat().st_size - 16) // INDEX_RECORD.size)
                if idx.exists()
                else 0,
            }
        return {"logs": details}

    def writer(self, view_path: str, create: bool) -> Writer:
        for log in self.logs():
            if view_path == f"{encode_name(log.name)}/records.jsonl":
                if create:
                    raise FileExistsError(view_path)
                return WallabyWriter(log)
        raise ReadOnlyView(f"{view_path}: only <name>/records.jsonl takes appended records")
