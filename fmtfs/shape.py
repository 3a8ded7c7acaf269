"""The JSON shape shared by every format (LAYOUT.md §2): times, opaque bytes,
names taken from data.  Formats build records with these helpers so that
every view spells the same things the same way."""

from __future__ import annotations

import base64
import binascii
import time
from datetime import UTC, datetime
from typing import Any

from fmtfs.errors import BadRecord

_NS = 1_000_000_000
_UNIT_DIGITS = {"ns": 9, "us": 6, "ms": 3, "s": 0}
_UNIT_PER_SECOND = {"ns": _NS, "us": 1_000_000, "ms": 1000, "s": 1}


def _day_text(day: int, _cache: dict[int, str] = {}) -> str:  # noqa: B006 - deliberate memo
    text = _cache.get(day)
    if text is None:
        if len(_cache) > 65536:
            _cache.clear()
        tm = time.gmtime(day * 86400)  # strftime's %Y does not zero-pad years below 1000
        text = _cache[day] = f"{tm.tm_year:04d}-{tm.tm_mon:02d}-{tm.tm_mday:02d}T"
    return text


# "YYYY-MM-DDTHH:" memoised per hour and "MM:SS" per second of the hour: a
# time's text up to the second is one dict and one list lookup, whether
# records share a second (Beats: a memo per second would hit) or are a
# minute apart (wallaby's sample: it would miss every time, and keeping it
# cost more than it saved).
MINUTES_SECONDS = [f"{s // 60:02d}:{s % 60:02d}" for s in range(3600)]
HOUR_HEADS: dict[int, str] = {}  # whole hours since the epoch -> "YYYY-MM-DDTHH:"


def hour_text(hour: int) -> str:
    """ "YYYY-MM-DDTHH:" of a whole hour since the epoch, memoised in
    HOUR_HEADS.  A hot loop may read `HOUR_HEADS.get(hour) or
    hour_text(hour)` itself (Beats' payload decoder does)."""
    if len(HOUR_HEADS) > 4096:
        HOUR_HEADS.clear()
    day, of_day = divmod(hour, 24)
    text = HOUR_HEADS[hour] = f"{_day_text(day)}{of_day:02d}:"
    return text


def format_time(value: int, unit: str = "ns") -> str:
    """RFC 3339 UTC with the native precision: 9, 6, 3 or 0 fraction digits.

    Hot path of every view (a third of a wallaby decode was strftime-like
    arithmetic): the text up to the hour is memoised, minutes and seconds
    come from a table; the fraction is zero-padded by adding 10**digits and
    dropping the leading 1 (faster than :09d)."""
    per_second = _UNIT_PER_SECOND[unit]
    seconds, fraction = divmod(value, per_second)
    hour, of_hour = divmod(seconds, 3600)
    head = HOUR_HEADS.get(hour) or hour_text(hour)
    if per_second == 1:
        return f"{head}{MINUTES_SECONDS[of_hour]}Z"
    return f"{head}{MINUTES_SECONDS[of_hour]}.{str(fraction + per_second)[1:]}Z"


def parse_time(value: Any, unit: str = "ns", field: str = "time") -> int:
    """A time written into a view: an RFC 3339 string or an integer in the
    native unit.  Returns the integer in the native unit."""
    if isinstance(value, bool):
        raise BadRecord(f"{field}: expected a time, got a boolean")
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        raise BadRecord(f"{field}: expected an RFC 3339 string or an integer")
    text = value.strip()
    head, dot, rest = text.partition(".")
    fraction = ""
    zone = ""
    if dot:
        digits_end = len(rest) - len(rest.lstrip("0123456789"))
        fraction, zone = rest[:digits_end], rest[digits_end:]
    try:
        parsed = datetime.fromisoformat(head + zone) if dot else datetime.fromisoformat(text)
    except ValueError:
        raise BadRecord(f"{field}: {value!r} is not an RFC 3339 time") from None
    if parsed.tzinfo is None:
        raise BadRecord(f"{field}: {value!r} has no time zone (use Z)")
    whole = int(parsed.astimezone(UTC).timestamp())
    per_second = _UNIT_PER_SECOND[unit]
    digits = _UNIT_DIGITS[unit]
    if len(fraction) > 9:
        raise BadRecord(f"{field}: {value!r} has more than 9 fraction digits")
    frac_ns = int(fraction.ljust(9, "0")) if fraction else 0
    if frac_ns % (10 ** (9 - digits)):
        raise BadRecord(f"{field}: {value!r} is finer than the native unit ({unit})")
    return whole * per_second + frac_ns // (10 ** (9 - digits))


def put_data(record: dict[str, Any], payload: bytes, key: str = "data") -> dict[str, Any]:
    """Store opaque bytes as `data` (valid UTF-8) or `data_base64` (otherwise)."""
    try:
        record[key] = payload.decode("utf-8")
    except UnicodeDecodeError:
        record[key + "_base64"] = base64.b64encode(payload).decode("ascii")
    return record


def take_data(record: dict[str, Any], key: str = "data", required: bool = True) -> bytes | None:
    """The bytes of a written record's `data` or `data_base64` key."""
    text = record.get(key)
    encoded = record.get(key + "_base64")
    if text is not None and encoded is not None:
        raise BadRecord(f"give either {key} or {key}_base64, not both")
    if text is not None:
        if not isinstance(text, str):
            raise BadRecord(f"{key}: expected a string")
        return text.encode("utf-8")
    if encoded is not None:
        return decode_base64(encoded, f"{key}_base64")
    if required:
        raise BadRecord(f"missing {key} or {key}_base64")
    return None


def decode_base64(text: Any, what: str) -> bytes:
    """Strict base64 from a written record; BadRecord naming `what` otherwise."""
    if not isinstance(text, str):
        raise BadRecord(f"{what}: expected a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise BadRecord(f"{what}: not valid base64") from None


def encode_name(name: str) -> str:
    """A name from the data as one safe path component (LAYOUT.md §2)."""
    out = name.replace("%", "%25").replace("/", "%2F").replace("\x00", "%00")
    if out.startswith("."):
        out = "%2E" + out[1:]
    return out or "%"  # an empty name still needs a component; "%" alone cannot come from encoding


def decode_name(component: str) -> str:
    """Inverse of encode_name."""
    if component == "%":
        return ""
    out = []
    i = 0
    while i < len(component):
        if (
            component[i] == "%"
            and i + 2 < len(component) + 0
            and component[i + 1 : i + 3] in ("25", "2F", "00", "2E")
        ):
            out.append({"25": "%", "2F": "/", "00": "\x00", "2E": "."}[component[i + 1 : i + 3]])
            i += 3
        else:
            out.append(component[i])
            i += 1
    return "".join(out)
