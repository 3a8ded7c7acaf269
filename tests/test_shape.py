"""The JSON shape shared by all formats: times, opaque bytes, names."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fmtfs.formats.base import BadRecord
from fmtfs.shape import decode_name, encode_name, format_time, parse_time, put_data, take_data


@given(st.integers(-(10**18), 4 * 10**18))
def test_format_time_agrees_with_strftime_and_parses_back(value: int) -> None:
    seconds, fraction = divmod(value, 10**9)
    expected = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)).zfill(19) + f".{fraction:09d}Z"
    assert format_time(value) == expected
    assert parse_time(expected) == value


_UNIT_DIGITS = {"ns": 9, "us": 6, "ms": 3, "s": 0}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FIRST, _LAST = -62135596800, 253402300799  # 0001-01-01T00:00:00Z, 9999-12-31T23:59:59Z


def _reference_time(value: int, unit: str) -> str:
    """format_time spelled the slow, obvious way (datetime + isoformat)."""
    digits = _UNIT_DIGITS[unit]
    seconds, fraction = divmod(value, 10**digits)
    whole = (_EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S").zfill(19)
    return f"{whole}.{fraction:0{digits}d}Z" if digits else f"{whole}Z"


_EDGE_SECONDS = [
    _FIRST,
    _LAST,
    -1,
    0,
    1,
    951782399,  # 2000-02-28T23:59:59Z
    951782400,  # 2000-02-29 (a leap day of a year divisible by 400)
    951868799,  # 2000-02-29T23:59:59Z
    4107542399,  # 2100-02-28T23:59:59Z (2100 is not a leap year)
    4107542400,  # 2100-03-01
    1709164800,  # 2024-02-29
    -2203891200,  # 1900-03-01 (1900 is not a leap year)
    1659105780,
]


@pytest.mark.parametrize("unit", ["ns", "us", "ms", "s"])
def test_fast_format_time_matches_the_reference_at_the_edges(unit: str) -> None:
    per_second = 10 ** _UNIT_DIGITS[unit]
    candidates = (0, 1, per_second // 10, per_second // 2, per_second - 1, 120)
    fractions = sorted({f for f in candidates if f < per_second})
    for seconds in _EDGE_SECONDS:
        for fraction in fractions:
            value = seconds * per_second + fraction
            for _ in range(2):  # the second call is served by the per-second memo
                assert format_time(value, unit) == _reference_time(value, unit), value


@given(st.sampled_from(["ns", "us", "ms", "s"]), st.data())
def test_fast_format_time_matches_the_reference(unit: str, data: st.DataObject) -> None:
    per_second = 10 ** _UNIT_DIGITS[unit]
    value = data.draw(st.integers(_FIRST * per_second, _LAST * per_second + per_second - 1))
    assert format_time(value, unit) == _reference_time(value, unit)
    nearby = value + data.draw(st.integers(-per_second, per_second))  # same or next second: memo hits
    if _FIRST * per_second <= nearby < (_LAST + 1) * per_second:
        assert format_time(nearby, unit) == _reference_time(nearby, unit)


def test_fast_format_time_over_many_consecutive_values() -> None:
    # Every second of two days around a leap day, with a fraction that walks
    # through the digits: exercises the memo's clearing (more than 4096 seconds).
    start = 951782400 - 86400
    for seconds in range(start, start + 2 * 86400, 7):
        value = seconds * 10**9 + (seconds * 7919) % 10**9
        assert format_time(value) == _reference_time(value, "ns")
        assert format_time(seconds, "s") == _reference_time(seconds, "s")


def test_years_below_1000_are_zero_padded() -> None:
    value = -62135596800 * 10**9  # 0001-01-01T00:00:00Z
    assert format_time(value) == "0001-01-01T00:00:00.000000000Z"
    assert parse_time(format_time(value)) == value


def test_native_precisions() -> None:
    assert format_time(1659105780000000000) == "2022-07-29T14:43:00.000000000Z"
    assert format_time(1659105780123, "ms") == "2022-07-29T14:43:00.123Z"
    assert format_time(1659105780, "s") == "2022-07-29T14:43:00Z"
    assert parse_time("2022-07-29T14:43:00.123Z", "ms") == 1659105780123
    assert parse_time("2022-07-29T14:43:00Z", "s") == 1659105780
    assert parse_time("2022-07-29T16:43:00+02:00", "s") == 1659105780
    assert parse_time(42, "ms") == 42


@pytest.mark.parametrize(
    "bad", ["yesterday", "2022-07-29T14:43:00", True, 1.5, None, "2022-07-29T14:43:00.1234567891Z"]
)
def test_bad_times_are_refused(bad) -> None:
    with pytest.raises(BadRecord):
        parse_time(bad)


def test_time_finer_than_the_native_unit_is_refused() -> None:
    with pytest.raises(BadRecord):
        parse_time("2022-07-29T14:43:00.1234Z", "ms")


@given(st.binary(max_size=64))
def test_data_round_trip(payload: bytes) -> None:
    record = put_data({}, payload)
    assert list(record) == ["data"] or list(record) == ["data_base64"]
    assert take_data(record) == payload


def test_data_errors() -> None:
    for bad in ({}, {"data": 1}, {"data_base64": "***"}, {"data": "a", "data_base64": "YQ=="}):
        with pytest.raises(BadRecord):
            take_data(bad)


@given(st.text(max_size=20))
def test_names_are_one_safe_component(name: str) -> None:
    encoded = encode_name(name)
    assert "/" not in encoded and "\x00" not in encoded and not encoded.startswith(".")
    assert encoded not in ("", ".", "..")
    assert decode_name(encoded) == name


def test_name_examples() -> None:
    assert encode_name("a/b%c\x00") == "a%2Fb%25c%00"
    assert encode_name(".hidden") == "%2Ehidden"
    assert encode_name("..") == "%2E."
