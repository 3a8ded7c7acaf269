"""Time filters Spark pushes down, as a test on a chunk's time range.

Spark (4.1+, `spark.sql.python.filterPushdown.enabled`) hands the reader
the conjuncts of a query's filter.  Those comparing the record's time
column (the stream's `time_field`: `timestamp`, `time`, `add_time`) with a
literal let the planner skip chunks whose [earliest, latest] time cannot
match.  Every filter is still returned to Spark, which filters the rows:
skipping is only ever an optimisation, so rows equal Spark's own filtering
of the full read whatever the order of the records' times.

Literals are read the way Spark compares them:
- a string (the JSON-mode column is RFC 3339 text): Spark compares text, so
  the chunk's bounds are written as the same text (fmtfs.shape.format_time
  in the column's native unit) and compared as text.  Any string literal
  works, a prefix such as '2022-07-29T15' included.
- a datetime (types=parquet, where the column is a timestamp): compared in
  microseconds, Spark's timestamp precision; a naive datetime is local
  time, as PySpark gives it.
Other literals (numbers, nulls) skip nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fmtfs.shape import format_time

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PER_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_OPS = {"EqualTo", "GreaterThan", "GreaterThanOrEqual", "LessThan", "LessThanOrEqual", "In"}


@dataclass(frozen=True)
class TimeTest:
    """One pushed comparison `column <op> value` (op: a Spark filter name)."""

    column: str
    op: str
    values: tuple[Any, ...]

    def may_match(self, times: tuple[int, int], unit: str) -> bool:
        """Can a record of a chunk whose times lie in `times` (ns) pass?"""
        return any(self._may_match(times, unit, value) for value in self.values)

    def _may_match(self, times: tuple[int, int], unit: str, value: Any) -> bool:
        if isinstance(value, str):
            per = _PER_NS[unit]
            low, high = format_time(times[0] // per, unit), format_time(times[1] // per, unit)
        elif isinstance(value, datetime):
            low, high = times[0] // 1000, times[1] // 1000
            value = _micros(value)
        else:
            return True
        op = self.op
        if op in ("EqualTo", "In"):
            return low <= value <= high
        if op == "GreaterThan":
            return high > value
        if op == "GreaterThanOrEqual":
            return high >= value
        if op == "LessThan":
            return low < value
        return low <= value  # LessThanOrEqual


def _micros(value: datetime) -> int:
    """Microseconds since the epoch; a naive datetime is local time, as
    PySpark's conversion of timestamps gives it."""
    delta = value.astimezone(UTC) - EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def time_tests(filters: Iterable[Any], columns: set[str]) -> list[TimeTest]:
    """The pushed filters that compare one of `columns` with literals."""
    tests = []
    for f in filters:
        name = type(f).__name__
        path = getattr(f, "attribute", ())
        if name not in _OPS or len(path) != 1 or path[0] not in columns:
            continue
        values = tuple(f.value) if name == "In" else (f.value,)
        tests.append(TimeTest(path[0], name, values))
    return tests


def chunk_may_match(tests: list[TimeTest], time_field: tuple[str, str] | None, times) -> bool:
    """Whether a chunk must be read: every test on its stream's time column
    may match (no range, or no time column: always read)."""
    if time_field is None or times is None:
        return True
    column, unit = time_field
    return all(t.may_match(times, unit) for t in tests if t.column == column)
