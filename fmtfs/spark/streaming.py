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
from fmtfs.spark.plan import pack
from fmtfs.spark.schema import Inferred
from fmtfs.spark.source import Options, open_tree, view_files

log = logging.getLogger("fmtfs.spark")

Offset = dict[str, int]


def followed_files(tree, view: str) -> dict:
    """The stream views `view` names, by stream name, in the source's
    stream order: views that grow by appending (a stream's own view)."""
    from fmtfs.treefiles import IndexedFile

    views = set(view_files(tree, view))
    for path in views:
        file = tree.files[path]
        if not isinstance(file, IndexedFile) or not file.counted:
            raise ValueError(
                f"fmtfs data source: {path} cannot be streamed: only views that grow by appending "
                "(segments, journals, records, events) can"
            )
    # the tree lists its files in the source's stream order
    return {tree.files[p].stream.name: tree.files[p] for p in tree.files if p in views}


class FmtfsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: Options, schema: StructType, inferred: Inferred | None) -> None:
        self.opts = opts
        self.schema = schema
        self.inferred = inferred
        self.frozen: Offset | None = None  # Trigger.AvailableNow: what existed when it began
        self._tree = None

    def _followed(self) -> dict:
        """The followed stream views as the index has them now (driver)."""
        if self._tree is None:
            self._tree = open_tree(self.opts)
        else:
            self._tree.refresh(force=True)
        return followed_files(self._tree, self.opts["view"])

    def _available(self) -> Offset:
        return {name: file.record_count() for name, file in self._followed().items()}

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
        files = self._followed()
        chunks = []
        for name, last in end.items():
            file = files.get(name)
            if file is None:
                log.warning("fmtfs: stream %s vanished before its records were planned", name)
                continue
            chunks += file.chunks(start.get(name, 0), last)
        return pack(chunks, self.opts, vanish_ok=True)

    def read(self, partition: InputPartition):
        # micro-batches read each record once: nothing worth keeping (nor trimmed by streams)
        return read_batches(self.opts, self.schema, self.inferred, partition, keep=False)

    def commit(self, end: Offset) -> None:
        """Nothing to release: offsets name records of files that only grow."""
