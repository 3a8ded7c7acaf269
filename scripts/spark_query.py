#!/usr/bin/env python3
"""A Spark query over a mounted view folder, for the demo:

    python scripts/spark_query.py MOUNTPOINT VIEW_FOLDER [COLUMN]

Reads the record views directly in VIEW_FOLDER (relative to MOUNTPOINT)
with spark.read.json in local mode, prints their record count, then the
row counts grouped by COLUMN (by default the top-level text column with
the fewest distinct values, or the hour of the first time column).

The views are named by the glob `VIEW_FOLDER/*.jsonl`, not by the folder:
Spark lists a folder recursively (partition discovery) before it ignores
the files of plain subfolders, so a folder with `buckets/` would cost a
stat of every bucket view per query."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> int:
    if len(sys.argv) not in (3, 4):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    mount, folder = Path(sys.argv[1]), sys.argv[2].strip("/")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    spark = (
        SparkSession.builder.master("local[*]")
        .appName("fmtfs-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = spark.read.json(str(mount / folder / "*.jsonl"))
        print(f"{folder}: {df.count()} records")
        column = sys.argv[3] if len(sys.argv) == 4 else pick_column(df, F, StringType)
        if column is None:
            return 0
        key = F.col(f"`{column}`")
        if column.startswith("hour of "):
            key = F.substring(F.col(f"`{column[len('hour of ') :]}`"), 1, 13)
        print(f"records by {column}:")
        df.groupBy(key.alias(column)).count().orderBy(F.desc("count"), column).show(10, truncate=60)
    finally:
        spark.stop()
    return 0


def pick_column(df, F, StringType) -> str | None:
    text = [f.name for f in df.schema.fields if isinstance(f.dataType, StringType)]
    if not text:
        return None
    sample = df.limit(2000)
    row = sample.agg(*[F.approx_count_distinct(F.col(f"`{c}`")).alias(c) for c in text]).first()
    counts = {c: row[c] for c in text}
    few = [c for c in text if 1 < counts[c] <= 50]
    if few:
        return min(few, key=lambda c: (counts[c], text.index(c)))
    times = sample.select(*[F.col(f"`{c}`").rlike(r"^\d{4}-\d\d-\d\dT\d\d").alias(c) for c in text]).first()
    for c in text:
        if times[c]:
            return f"hour of {c}"
    return text[0]


if __name__ == "__main__":
    sys.exit(main())
