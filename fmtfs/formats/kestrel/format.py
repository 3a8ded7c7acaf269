"""KestrelFormat: a kestrel queue folder as views (LAYOUT.md §3, §4).

Decisions where LAYOUT.md leaves room:
- `<queue>/readers/<reader>.json` is one JSON object and a newline,
  `{"reader": NAME, "head": H, "done": [ids ascending]}`, NAME being the
  native reader name ("" for the default reader, whose file is `default`;
  a reader really named `default` is `%64efault`).
  head and done are the file's own values (last READ_HEAD, union of the
  READ_DONE sets), not kestrel's load-time clamps.  A reader file that does
  not parse gets no views and is listed by problems(); writing its
  `readers/` path replaces it.
- Writing `readers/<reader>.json`: keys reader (optional, must match the
  path), head (required), done (optional, ids above head); anything else is
  EINVAL.  The file is replaced as kestrel's checkpoint does it.
- Only the newest writer file's `journal/<n>.jsonl` opens for appending;
  older ones are history (EACCES).  An open handle follows the queue, so
  lines written after a rotation go to the new newest file.
- PUT lines accept exactly id, add_time, expire_time, error_count and data
  or data_base64 (what the view shows, so a line can be copied back).
- A time outside years 1-9999 shows as the raw integer (ms or s).
- Legacy `items.jsonl` lines are {"add_time", "expire_time", "data"} with
  add_time absent for ADD items (kestrel stamps them at replay time) and
  expiry not applied (it depends on the clock of the replay).
- Unknown records in writer and reader files are skipped by their declared
  size and listed in `_errors.jsonl`, as kestrel logs them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import orjson

from fmtfs.formats.base import (
    DerivedRender,
    Format,
    FormatError,
    PiecedRender,
    Problem,
    ReadOnlyView,
    Stream,
    Writer,
)
from fmtfs.formats.kestrel import columns
from fmtfs.formats.kestrel.card import CARD
from fmtfs.formats.kestrel.files import FileFacts, Queue, scan_folder
from fmtfs.formats.kestrel.readers import ReaderState, read_reader_file
from fmtfs.formats.kestrel.records import Corrupt
from fmtfs.formats.kestrel.shapes import (
    item_record,
    items_view,
    pending_view,
    put_record,
    reader_of_component,
    reader_view,
)
from fmtfs.formats.kestrel.streams import LegacyStream, WriterStream, iter_puts, replay_files
from fmtfs.formats.kestrel.writers import PutWriter, ReaderWriter
from fmtfs.formats.schema import ViewSchema
from fmtfs.jsonlines import render_pieces
from fmtfs.shape import encode_name


class KestrelFormat(Format, card=CARD):
    # -- reading -------------------------------------------------------------

    def __init__(self, source: Path, options: dict[str, Any]) -> None:
        super().__init__(source, options)
        self._file_facts: dict[str, FileFacts] = {}

    def _queues(self) -> dict[str, Queue]:
        return scan_folder(self.source, memo=self._file_facts)

    def streams(self) -> list[Stream]:
        out: list[Stream] = []
        for _, queue in sorted(self._queues().items()):
            bucket = self.options["time_bucket"]
            out.extend(WriterStream(w, bucket) for w in queue.writers)
            out.extend(LegacyStream(f) for f in queue.legacy)
        return out

    def view_sources(self, streams: list[Stream]) -> dict[str, list[Path]]:
        """A reader document is its reader file; pending items are that file
        and the queue's writer files; items.jsonl the queue's legacy files."""
        out: dict[str, list[Path]] = {}
        for queue in self._queues().values():
            if queue.legacy:
                out[items_view(queue.name)] = [f.path for f in queue.legacy]
            writers = [w.path for w in queue.writers]
            for rf in queue.readers:
                out[reader_view(queue.name, rf.reader)] = [rf.path]
                out[pending_view(queue.name, rf.reader)] = [rf.path, *writers]
        return out

    def _reader_states(self, queue: Queue) -> tuple[dict[str, ReaderState], list[Problem]]:
        states: dict[str, ReaderState] = {}
        problems: list[Problem] = []
        for rf in queue.readers:
            try:
                state = read_reader_file(rf.path)
            except Corrupt as exc:
                problems.append(Problem(rf.path.name, exc.offset, f"reader file skipped: {exc.message}"))
                continue
            except OSError as exc:
                problems.append(Problem(rf.path.name, 0, f"reader file skipped: {exc.strerror}"))
                continue
            states[rf.reader] = state
            problems.extend(Problem(rf.path.name, off, text) for off, text in state.notes)
        return states, problems

    def problems(self) -> list[Problem]:
        out: list[Problem] = []
        for _, queue in sorted(self._queues().items()):
            out.extend(self._reader_states(queue)[1])
        return out

    def derived_views(self) -> dict[str, DerivedRender]:
        views: dict[str, DerivedRender] = {}
        for _, queue in sorted(self._queues().items()):
            states, _ = self._reader_states(queue)
            for reader, state in sorted(states.items()):
                body = orjson.dumps(state.as_json(reader)) + b"\n"
                views[reader_view(queue.name, reader)] = lambda body=body: body
                # rendered when looked at, not by every mount (a live queue's
                # changes on each): kept compressed, and across mounts
                views[pending_view(queue.name, reader)] = PiecedRender(
                    lambda queue=queue, state=state: pending_pieces(queue, state.head, state.done),
                    ahead=False,
                )
            if queue.legacy:
                views[items_view(queue.name)] = lambda queue=queue: [
                    item_record(item) for item in replay_files(queue.replay)
                ]
        return views

    def view_schema(self, view_path: str) -> ViewSchema | None:
        return columns.view_schema(view_path)

    def info(self) -> dict[str, Any]:
        queues: dict[str, Any] = {}
        for name, queue in sorted(self._queues().items()):
            entry: dict[str, Any] = {}
            if queue.writers:
                entry["writer_files"] = [
                    {"file": w.path.name, "first_id": w.first_id, "size": _size(w.path)}
                    for w in queue.writers
                ]
            if queue.readers:
                entry["readers"] = [r.reader for r in queue.readers]
            if queue.legacy:
                entry["legacy_files"] = [f.path.name for f in queue.legacy]
                entry["replay_order"] = [f.path.name for f in queue.replay]
            queues[name] = entry
        return {"journal_size": self._journal_size(), "queues": queues}

    def _journal_size(self) -> int:
        return int(self.options["kestrel_journal_size"])

    # -- writing -------------------------------------------------------------

    def writable_views(self, streams: list[Stream], views: Collection[str]) -> set[str]:
        # writer()'s answers with the folder scanned once for the whole
        # listing: once per view made `ls -l` of N queues O(N^2)
        queues = _by_name(self._queues())
        out = set()
        for view in views:
            try:
                self._writer(view, False, queues)
            except (ReadOnlyView, FileNotFoundError, FormatError, OSError):
                continue
            out.add(view)
        return out

    def writer(self, view_path: str, create: bool) -> Writer:
        return self._writer(view_path, create, _by_name(self._queues()))

    def _writer(self, view_path: str, create: bool, queues: dict[str, Queue]) -> Writer:
        """writer() with `queues` by the encoded name of their folder."""
        parts = view_path.strip("/").split("/")
        queue = queues.get(parts[0]) if parts else None
        if len(parts) == 2 and parts[1] == "items.jsonl" and queue and queue.legacy:
            raise ReadOnlyView(f"{view_path}: kestrel 2.x queues are read-only", read_only_kind=True)
        if queue is None or len(parts) != 3:
            raise FileNotFoundError(view_path)
        kind, leaf = parts[1], parts[2]
        if kind == "journal" and leaf.endswith(".jsonl"):
            stem = leaf[: -len(".jsonl")]
            numbers = [w.number for w in queue.writers]
            if stem.isdigit() and int(stem) in numbers and str(int(stem)) == stem:
                if int(stem) != queue.writers[-1].number:
                    # Lines go to the newest file only; an older file's view is history.
                    raise ReadOnlyView(f"{view_path}: not the newest writer file of the queue")
                return PutWriter(self.source, queue.name, self._journal_size())
            if any(encode_name(f.path.name) == stem for f in queue.legacy):
                raise ReadOnlyView(f"{view_path}: kestrel 2.x journals are read-only", read_only_kind=True)
            raise FileNotFoundError(view_path)
        if kind == "readers" and leaf.endswith(".json"):
            reader = reader_of_component(leaf[: -len(".json")])
            if reader is None:
                raise FileNotFoundError(view_path)
            if reader and ("/" in reader or "\x00" in reader or "~" in reader):
                raise FileNotFoundError(f"{view_path}: kestrel cannot name a reader so")
            return ReaderWriter(self.source, queue.name, reader)
        if kind in ("pending", "buckets") and leaf.endswith(".jsonl"):
            raise ReadOnlyView(view_path)
        raise FileNotFoundError(view_path)


def pending_pieces(queue: Queue, head: int, done: set[int]) -> Iterator[bytes]:
    """The lines of items a reader has not consumed (PUT ids above head not
    in done, across every writer file, in id order), a piece at a time:
    the records of a big queue's pending items are never all held (147,000
    took more memory than their 73 MB of lines)."""
    keep = (lambda i: i > head and i not in done) if done else (lambda i: i > head)
    found = []
    for wf in queue.writers:
        found.extend(iter_puts(wf, keep))
    found.sort(key=lambda pair: pair[0].id)  # stable: repeated ids keep file order
    yield from render_pieces(
        put_record(p.id, p.add_time, p.expire_time, p.error_count, data) for p, data in found
    )


def _by_name(queues: dict[str, Queue]) -> dict[str, Queue]:
    """Queues by the encoded name of their views' folder."""
    return {encode_name(name): queue for name, queue in queues.items()}


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None
