"""Record times for the chunk index: a chunk's time range and time buckets.

A format that has its records' native integer times at hand while it scans
(wallaby, gvfs) gives them to native_range.  The others (beats, kestrel,
whose hot decode loops render the time directly) read the text back:

Records hold their time as RFC 3339 text with the format's native precision
(fmtfs.shape.format_time), so every well-formed time of one column has the
same width and text order *is* time order.  That makes both jobs cheap:

- a chunk's range is the text minimum and maximum, parsed once each;
- a record's bucket is a prefix of its time text (`2015-05-17T21` for an
  hour), the same names wallaby's Bucketer gives.

A chunk whose time column holds something else (a raw integer for a time
beyond the calendar, a non-time string) gets no range (None): a time filter
then always keeps it, which is never wrong.
"""

from __future__ import annotations

from collections.abc import Iterable

from fmtfs.formats.base import BadRecord, Record
from fmtfs.shape import parse_time

_PER_NS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1000, "ns": 1}
_INT64 = 1 << 63


def native_range(values: list[int], unit: str) -> tuple[int, int] | None:
    """(earliest, latest) in ns of native integer times in `unit`, or None
    when there is none or one does not fit the index's int64 nanoseconds
    (a damaged or sentinel time: a time filter then keeps the chunk)."""
    if not values:
        return None
    per_ns = _PER_NS[unit]
    low, high = min(values) * per_ns, max(values) * per_ns
    return (low, high) if -_INT64 <= low and high < _INT64 else None


# Width of a well-formed time text per native unit (years 0001-9999).
TEXT_WIDTH = {"ns": 30, "us": 27, "ms": 24, "s": 20}
# Length of the time text prefix naming a bucket, per --time-bucket.
BUCKET_PREFIX = {"minute": 16, "hour": 13, "day": 10}


def text_range(values: Iterable[object], unit: str) -> tuple[int, int] | None:
    """(earliest, latest) in ns of the time texts `values` (None is skipped),
    or None when there is none or one is not a well-formed time."""
    present = values if type(values) is list else list(values)
    if None in present:
        present = [v for v in present if v is not None]
    if not present:
        return None
    try:
        low, high = min(present), max(present)  # mixed kinds raise TypeError
    except TypeError:
        return None
    width = TEXT_WIDTH[unit]
    if type(low) is not str or type(high) is not str or len(low) != width or len(high) != width:
        return None
    return _parsed_range(low, high)


def _parsed_range(low: str, high: str) -> tuple[int, int] | None:
    """(earliest, latest) in ns of two time texts of the right width, or
    None when one is not a time after all."""
    try:
        return parse_time(low, "ns"), parse_time(high, "ns")
    except BadRecord:
        return None


def bucket_views(
    records: list[Record], key: str, unit: str, time_bucket: str, folder: str
) -> dict[str, list[Record]]:
    """`records` grouped into `<folder>/<bucket>.jsonl` by the bucket of their
    `key` time, keeping their order; records without a well-formed time are
    in no bucket."""
    texts = [record.get(key) for record in records]
    width = TEXT_WIDTH[unit]
    return _grouped(records, texts, _extremes(texts, width), width, BUCKET_PREFIX[time_bucket], folder)


def timed_bucket_views(
    records: list[Record], key: str, unit: str, time_bucket: str, folder: str
) -> tuple[dict[str, list[Record]], tuple[int, int] | None]:
    """bucket_views() and the records' text_range() at once: what a scan
    wants of each chunk, from one pass over the records' time texts."""
    texts = [record.get(key) for record in records]
    width = TEXT_WIDTH[unit]
    extremes = _extremes(texts, width)
    views = _grouped(records, texts, extremes, width, BUCKET_PREFIX[time_bucket], folder)
    # every time well-formed (the common chunk): the range is the extremes
    # the buckets were told by, not a second min() and max() of the texts
    times = _parsed_range(*extremes) if extremes is not None else text_range(texts, unit)
    return views, times


def _grouped(
    records: list[Record],
    texts: list[object],
    extremes: tuple[str, str] | None,
    width: int,
    cut: int,
    folder: str,
) -> dict[str, list[Record]]:
    """bucket_views() of `records`, given their time texts and _extremes()."""
    if extremes is not None and extremes[0][:cut] == extremes[1][:cut]:
        # the common chunk: all of it in one bucket, told at C speed
        return {f"{folder}/{extremes[0][:cut]}.jsonl": records[:]}
    buckets: dict[str, list[Record]] = {}  # bucket prefix -> its records
    # the last record's bucket: a chunk's records come in time order, so
    # most records are in their predecessor's, which `startswith` tells
    # without a new string per record (a third of this loop's time)
    prefix, bucket = "", None
    for record, text in zip(records, texts, strict=True):
        if type(text) is str and len(text) == width:
            if bucket is None or not text.startswith(prefix):
                prefix = text[:cut]
                bucket = buckets.get(prefix)
                if bucket is None:
                    bucket = buckets[prefix] = []
            bucket.append(record)
    return {f"{folder}/{name}.jsonl": members for name, members in buckets.items()}


def _extremes(texts: list[object], width: int) -> tuple[str, str] | None:
    """The earliest and latest time text when every one is well-formed (a
    string of `width`), else None; told at C speed.  A chunk whose
    extremes share a bucket is all of it in that bucket."""
    if not texts or set(map(type, texts)) != {str} or set(map(len, texts)) != {width}:
        return None
    return min(texts), max(texts)  # type: ignore[type-var]


class BucketRoute:
    """A record -> the views it is in: `view`, then the
    `<folder>/<bucket>.jsonl` of its `key` time when it has a well-formed
    one (bucket_views' rule, for one record at a time).  The same tuple is
    returned for every record of a bucket (a chunk has few), so a renderer
    routing records by it hashes no new strings."""

    def __init__(self, view: str, key: str, unit: str, time_bucket: str, folder: str) -> None:
        self.view, self.key, self.folder = view, key, folder
        self.cut = BUCKET_PREFIX[time_bucket]
        self.width = TEXT_WIDTH[unit]
        self.alone = (view,)
        self.routes: dict[str, tuple[str, str]] = {}

    def __call__(self, record: Record) -> tuple[str, ...]:
        text = record.get(self.key)
        if type(text) is not str or len(text) != self.width:
            return self.alone
        prefix = text[: self.cut]
        route = self.routes.get(prefix)
        if route is None:
            route = self.routes[prefix] = (self.view, f"{self.folder}/{prefix}.jsonl")
        return route


class BucketRuns:
    """Where each time bucket's lines lie in a chunk's JSON Lines, for a
    renderer that writes the stream's view line by line (wallaby's and
    kestrel's templates): a chunk's records are mostly in time order, so a
    bucket's lines are a run of the chunk's (or a few runs), and its bytes
    are cut from the chunk's rather than rendered again."""

    def __init__(self, folder: str) -> None:
        self.folder = folder  # of the views `<folder>/<bucket>.jsonl`
        self.runs: dict[str, list[int]] = {}  # bucket -> [start, end, start, end, ...]
        self.bucket: str | None = None  # the bucket of the lines from `since` on
        self.since = 0

    def enter(self, bucket: str | None, at: int) -> None:
        """From offset `at` of the lines on, records are in `bucket` (None: in
        none, a record without a well-formed time)."""
        if bucket == self.bucket:
            return
        if self.bucket is not None and at > self.since:
            self.runs.setdefault(self.bucket, []).extend((self.since, at))
        self.bucket, self.since = bucket, at

    def views(self, view: str, lines: bytes | bytearray) -> dict[str, bytes | bytearray]:
        """`view` (every line) first, then each bucket's view as its first line
        came; a bucket holding the whole chunk is the very same object (a
        store of kept pieces keeps it once)."""
        self.enter(None, len(lines))
        out = {view: lines}
        for name, cuts in self.runs.items():
            whole = len(cuts) == 2 and cuts[0] == 0 and cuts[1] == len(lines)
            out[f"{self.folder}/{name}.jsonl"] = (
                lines if whole else b"".join(lines[a:b] for a, b in zip(cuts[::2], cuts[1::2], strict=True))
            )
        return out

    def lengths(self, view: str, length: int) -> dict[str, int]:
        """views()'s lengths, joining nothing."""
        self.enter(None, length)
        out = {view: length}
        for name, cuts in self.runs.items():
            out[f"{self.folder}/{name}.jsonl"] = sum(cuts[1::2]) - sum(cuts[::2])
        return out
