"""Records -> Parquet files (the `parquet/` mirror of every record view)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from fmtfs.formats.base import Record

# Small enough that Spark splits one view file into several tasks.
ROW_GROUP_ROWS = 64 * 1024


def write_parquet(batches: Iterable[list[Record]], schema: Any, target: Path) -> None:
    """Write the records to `target` atomically (temporary file + rename)."""
    tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
    writer: pq.ParquetWriter | None = None
    pending: list[Record] = []
    try:
        for batch in batches:
            pending.extend(batch)
            if len(pending) >= ROW_GROUP_ROWS:
                writer = _flush(pending, schema, writer, tmp)
                pending = []
        if pending or writer is None:
            writer = _flush(pending, schema, writer, tmp)
        writer.close()
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


def _flush(
    records: list[Record], schema: Any, writer: pq.ParquetWriter | None, tmp: Path
) -> pq.ParquetWriter:
    if writer is not None:
        schema = writer.schema
    table = pa.Table.from_pylist(records, schema=schema) if records or schema is not None else pa.table({})
    if writer is None:
        writer = pq.ParquetWriter(tmp, table.schema)
    writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
    return writer
