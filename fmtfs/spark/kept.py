"""Arrow batches of decoded chunks kept under cacheDir, so a query that
reads a chunk again loads its batch instead of decoding it.

A data source task spends nearly all its time decoding native records and
converting them to Arrow; a second query over the same source did all of
it again.  Each chunk's batch (exactly what the task hands Spark) is kept
as a zstd-compressed Arrow IPC stream, about a tenth of the chunk's JSON
(Beats: 1.4 MB per 40,000 records).  Per Beats record, measured: finding
the key 0.2 us (the chunk's bytes hashed), keeping 1.0 us, loading 0.7 us,
vs ~13 us to decode and convert it (proio: 1.5 / 1.6 vs ~50 us).

A kept batch is found by a digest of everything its rows depend on: the
fmtfs version, the source and the format's options (secrets by digest,
Format.options_identity), the stream's class and renderer version, the
view, the chunk's native range, decoder state and record cut (skip/take),
the batch's Arrow schema and typing plan, and the native bytes themselves
(the file's first 4 KiB, its header, and the chunk's range, hashed when the
task reads the chunk): an appended file keeps its old chunks' batches, a
file replaced or rewritten under the same name and range is decoded anew.

Bounded: option `keptBytes` (default 2 GiB; 0 keeps nothing, and nothing
is read) caps the folder, oldest-used batches first; the driver trims it
when it plans a read (`trim`).  Streaming micro-batches keep nothing: each
reads records no query has read before.  A batch that cannot be written or read (a
read-only or full cacheDir on an executor) is decoded as if never kept."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from fmtfs import __version__
from fmtfs.digest import digest
from fmtfs.spark.source import Options, cache_dir

if TYPE_CHECKING:  # the planning worker trims and loads no pyarrow (fmtfs.spark's docstring)
    import pyarrow as pa

DEFAULT_KEPT_BYTES = 2 << 30
HEAD_BYTES = 4096  # a file's header: segment options, encryption IV


def kept_bytes(opts: Options) -> int:
    value = opts.get("keptbytes")
    if value is None:
        return DEFAULT_KEPT_BYTES
    try:
        return max(0, int(value))
    except ValueError:
        raise ValueError(f"fmtfs data source: keptBytes must be a number of bytes, not {value!r}") from None


def kept_dir(opts: Options) -> Path:
    return cache_dir(opts) / "spark" / "batches"


class KeptBatches:
    """The kept batches of one read (one source, options and schema)."""

    def __init__(self, opts: Options, fmt, schema: pa.Schema, typing: object, keep: bool = True) -> None:
        self.folder = kept_dir(opts)
        self.enabled = keep and kept_bytes(opts) > 0
        self.prefix = digest(
            __version__,
            fmt.name,
            fmt.source.resolve(),
            sorted(fmt.options_identity().items()),
            schema.to_string(show_schema_metadata=True),
            repr(typing),
        )

    def key(self, stream, chunk) -> str | None:
        """The digest naming `chunk`'s batch, reading its native bytes now
        (None: not kept, or the file cannot be read; decoding reports why)."""
        if not self.enabled:
            return None
        try:
            with open(stream.path, "rb") as native:
                content = hashlib.sha256(native.read(HEAD_BYTES))  # SHA-NI: 1.7 GB/s here, twice blake2b
                native.seek(chunk.start)
                content.update(native.read(max(0, chunk.end - chunk.start)))
        except OSError:
            return None
        return digest(
            self.prefix,
            type(stream).__qualname__,
            stream.renderer_version,
            chunk.stream,
            chunk.view,
            chunk.start,
            chunk.end,
            repr(chunk.state),
            chunk.skip,
            chunk.take,
            content.hexdigest(),
        )

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.arrow"

    def load(self, key: str | None) -> pa.RecordBatch | None:
        if key is None:
            return None
        import pyarrow as pa

        path = self._path(key)
        try:
            with pa.memory_map(str(path)) as source:
                batch = pa.ipc.open_stream(source).read_next_batch()
            os.utime(path)  # used now: trimmed last
        except (OSError, pa.ArrowException, StopIteration):
            return None
        return batch

    def store(self, key: str | None, batch: pa.RecordBatch) -> None:
        if key is None:
            return
        import pyarrow as pa

        path = self._path(key)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with (
                pa.OSFile(str(tmp), "wb") as sink,
                pa.ipc.new_stream(
                    sink, batch.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")
                ) as out,
            ):
                out.write_batch(batch)
            os.replace(tmp, path)
        except (OSError, pa.ArrowException):
            tmp.unlink(missing_ok=True)


def trim(opts: Options) -> None:
    """Remove the least recently used kept batches until they fit the
    `keptBytes` limit (all of them when it is 0)."""
    limit = kept_bytes(opts)
    files: list[tuple[float, int, str]] = []
    try:
        subs = [sub.path for sub in os.scandir(kept_dir(opts)) if sub.is_dir()]
    except OSError:
        return  # nothing kept yet
    for sub in subs:
        try:
            entries = list(os.scandir(sub))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat()
            except OSError:
                continue  # renamed or removed by a task meanwhile
            files.append((info.st_mtime, info.st_size, entry.path))
    total = sum(size for _, size, _ in files)
    for _, size, path in sorted(files):
        if total <= limit:
            break
        try:
            os.unlink(path)
        except OSError:
            pass
        total -= size
