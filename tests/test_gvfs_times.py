"""gvfs times as shown: RFC 3339 seconds within years 1..9999, the plain
integer beyond (show_time has no memo of its own: format_time's is used)."""

from __future__ import annotations

from datetime import UTC, datetime

from fmtfs.formats.gvfs.records import show_time


def _reference(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_times_in_range_are_rfc3339_seconds() -> None:
    for seconds in (0, 59, 3599, 3600, 86399, 951_782_400, 1_700_000_000, 1_700_000_061, 253402300799):
        assert show_time(seconds) == _reference(seconds)
    # the same second again (a memo hit) gives the same text
    assert show_time(1_700_000_061) == _reference(1_700_000_061)


def test_times_out_of_range_are_integers() -> None:
    assert show_time(253402300800) == 253402300800
    assert show_time(-1) == -1
