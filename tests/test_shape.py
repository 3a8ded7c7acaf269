"""The JSON shape shared by all formats: times, opaque bytes, names."""

from __future__ import annotations

import time

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
