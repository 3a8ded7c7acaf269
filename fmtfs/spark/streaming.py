"""The streaming reader: `spark.readStream.format("fmtfs")`.

Offsets are record counts per stream, `{"<stream name>": records}` (a
stream: a Beats segment, a Kestrel writer file, a wallaby log, a proio
file, a gvfs journal).  A micro-batch from offset `start` to `end` holds,
for every stream, its records from start's count (0 for a new stream) to
end's: chunks of the index cut at those record numbers.  The native files
only grow, so the same offsets give the same records again, and a query
restarted from its checkpoint delivers every record exactly once.  A
stream whose file disappeared (Beats deletes acknowledged segments) is
left out of later offsets: what it delivered stays delivered; a chunk of it
planned but gone by the time an executor reads it yields nothing.

Only views that grow by appending can be streamed: the stream's own view
(segments, journals, records, events, gvfs journals), or a folder of them
(new streams join as they appear).  Buckets, pending and other derived
views cannot: they change in the middle."""

from __future__ import annotations

import logging

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from fmtfs.spark.batch import read_batches
from fmtfs.spark.plan import Piece, pack, primary_view
from fmtfs.spark.schema import Inferred
from fmtfs.spark.source import Options, open_tree, view_files

log = logging.getLogger("fmtfs.spark")

Offset = dict[str, int]


def followed_entries(tree, view: str) -> list:
    """The index entries of the streams whose own views `view` names, in
    the source's stream order."""
    from fmtfs.views import IndexedFile

    views = set(view_files(tree, view))
    followed = []
    for path in views:
        file = tree.files[path]
        if not isinstance(file, IndexedFile) or primary_view(file.entry) != path:
            raise ValueError(
                f"fmtfs data source: {path} cannot be streamed: only views that grow by appending "
                "(segments, journals, records, events) can"
            )
    for entry in tree.entries:
        if primary_view(entry) in views:
            followed.append(entry)
    return followed


def count_pieces(entry, first: int, last: int) -> list[list[Piece]]:
    """Pieces holding records [first, last) of the entry's own view."""
    view = primary_view(entry)
    pieces = entry.views.get(view)
    units: list[list[Piece]] = []
    begin = 0
    for i, seq in enumerate(pieces.seqs if pieces else []):
        meta = entry.chunks[seq]
        end = begin + meta.count
        low, high = max(first, begin), min(last, end)
        if low < high:
            size = pieces.ends[i] - (pieces.ends[i - 1] if i else 0)
            piece = Piece(
                view, entry.stream.name, meta.start, meta.end, meta.state, low - begin, high - low, size
            )
            units.append([piece])
        begin = end
        if begin >= last:
            break
    return units


class FmtfsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: Options, schema: StructType, inferred: Inferred | None) -> None:
        self.opts = opts
        self.schema = schema
        self.inferred = inferred
        self.frozen: Offset | None = None  # Trigger.AvailableNow: what existed when it began
        self._tree = None

    def _entries(self) -> list:
        """The followed streams as the index has them now (driver)."""
        if self._tree is None:
            self._tree = open_tree(self.opts)
        else:
            self._tree.refresh(force=True)
        return followed_entries(self._tree, self.opts["view"])

    def _available(self) -> Offset:
        return {e.stream.name: e.record_count for e in self._entries()}

    def initialOffset(self) -> Offset:
        return {}  # nothing read yet: every stream from its first record

    def prepareForTriggerAvailableNow(self) -> None:
        self.frozen = self._available()

    def latestOffset(self, start: Offset, limit) -> Offset:
        available = self._available()
        if self.frozen is not None:
            available = {k: min(v, self.frozen[k]) for k, v in available.items() if k in self.frozen}
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        latest: Offset = {}
        for name, count in available.items():
            done = start.get(name, 0)
            grow = max(0, count - done)
            if budget is not None:
                grow = min(grow, budget)
                budget -= grow
            latest[name] = done + grow
        return latest

    def partitions(self, start: Offset, end: Offset) -> list[InputPartition]:
        entries = {e.stream.name: e for e in self._entries()}
        units: list[list[Piece]] = []
        for name, last in end.items():
            entry = entries.get(name)
            if entry is None:
                log.warning("fmtfs: stream %s vanished before its records were planned", name)
                continue
            units += count_pieces(entry, start.get(name, 0), last)
        return pack(units, self.opts, vanish_ok=True)

    def read(self, partition: InputPartition):
        return read_batches(self.opts, self.schema, self.inferred, partition)

    def commit(self, end: Offset) -> None:
        """Nothing to release: offsets name records of files that only grow."""
