"""A short, stable name for a tuple of values: the keys of the index's
sources, of inferred schemas and of kept Arrow batches.

Apart from fmtfs.index so that what names a cached thing need not import
the index (SQLite, the decode pool): a Spark task naming a kept batch, or
the schema step naming its cached inference."""

from __future__ import annotations

import hashlib

import orjson


def digest(*parts: object) -> str:
    return hashlib.sha256(orjson.dumps([str(p) for p in parts])).hexdigest()[:32]
