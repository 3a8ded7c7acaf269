"""`fmtfs info SOURCE`: what a source holds, in lines a person can scan.

Everything comes from the same tree a mount shows: `_fmtfs.json` for the
format and counts, `_errors.jsonl` for the problems, the chunk index for
sizes and time ranges (`ChunkMeta.times`, filled by formats whose records
carry a time)."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from fmtfs.views import META_ERRORS, META_INFO, PARQUET_DIR, SourceTree

# Problems listed in full; the rest are counted (all are in _errors.jsonl).
SHOWN_PROBLEMS = 5


def whole(tree: SourceTree, path: str) -> bytes:
    return tree.read(path, 0, tree.size(path))


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{size:,} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def rfc3339(ns: int) -> str:
    seconds, fraction = divmod(ns, 1_000_000_000)
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{fraction:09d}Z" if fraction else f"{stamp}Z"


def time_range(tree: SourceTree) -> tuple[int, int] | None:
    spans = [c.times for e in tree.entries for c in e.chunks if c.times is not None]
    if not spans:
        return None
    return min(t[0] for t in spans), max(t[1] for t in spans)


def summary(tree: SourceTree) -> str:
    info = orjson.loads(whole(tree, META_INFO))
    native = sum(e.identity.size for e in tree.entries)
    views = [
        p
        for p in tree.files
        if p.endswith((".jsonl", ".json")) and not p.startswith(("_", PARQUET_DIR + "/"))
    ]
    json_bytes = sum(tree.size(p) for p in views)
    lines = [
        f"source:   {info['source']}",
        f"format:   {info['format']}",
        f"streams:  {info['streams']:,} ({human_size(native)} of native files)",
        f"records:  {info['records']:,}",
        f"views:    {len(views):,} JSON files, {human_size(json_bytes)} (Parquet twins under {PARQUET_DIR}/)",
    ]
    span = time_range(tree)
    if span is not None:
        lines.append(f"times:    {rfc3339(span[0])} .. {rfc3339(span[1])}")
    options = {k: v for k, v in info["options"].items() if v not in (None, False)}
    if options:
        lines.append("options:  " + ", ".join(f"{k}={v}" for k, v in options.items()))
    problems = [orjson.loads(line) for line in whole(tree, META_ERRORS).splitlines()]
    lines.append(f"errors:   {len(problems):,}" + (" (listed in _errors.jsonl)" if problems else ""))
    for problem in problems[:SHOWN_PROBLEMS]:
        lines.append(f"  {problem['file']} at offset {problem['offset']}: {problem['error']}")
    if len(problems) > SHOWN_PROBLEMS:
        lines.append(f"  ... and {len(problems) - SHOWN_PROBLEMS:,} more")
    return "".join(line + "\n" for line in lines)
