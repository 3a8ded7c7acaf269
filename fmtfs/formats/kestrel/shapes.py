"""The JSON shape of kestrel records (LAYOUT.md §3) and the view paths."""

from __future__ import annotations

from typing import Any

from fmtfs.formats.kestrel import legacy
from fmtfs.shape import decode_name, encode_name, format_time, put_data

# The default reader (empty name) is shown as `default`, so Spark (which
# skips names starting with `_` or `.`) reads its pending items; a reader
# really named `default` is shown as `%64efault`, as a leading `.` is `%2E`.
DEFAULT_READER = "default"
_NAMED_DEFAULT = "%64efault"

# RFC 3339 has four-digit years: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59Z.
_FIRST_SECOND = -62_135_596_800
_LAST_SECOND = 253_402_300_799
_PER_SECOND = {"ms": 1000, "s": 1}


def safe_time(value: int, unit: str) -> str | int:
    """RFC 3339 text, or the raw integer for a time no calendar can show
    (a damaged or sentinel value must not stop a scan)."""
    per_second = _PER_SECOND[unit]
    if not _FIRST_SECOND * per_second <= value < (_LAST_SECOND + 1) * per_second:
        return value
    try:
        return format_time(value, unit)
    except (OverflowError, OSError, ValueError):
        return value


def second_text(seconds: int, _seconds: dict[int, str | None] = {}) -> str | None:  # noqa: B006 - deliberate memo
    """ "YYYY-MM-DDTHH:MM:SS" of a whole second since the epoch, or None
    beyond the calendar (safe_time's rule), memoised."""
    text = _seconds.get(seconds, "")
    if text == "":
        if len(_seconds) > 4096:
            _seconds.clear()
        whole = safe_time(seconds * 1000, "ms")
        text = _seconds[seconds] = whole[:-5] if isinstance(whole, str) else None
    return text


def ms_text(value: int) -> str | int:
    """safe_time(value, "ms"), the calendar part memoised per second (the
    hot path of a writer-file scan: items arrive many per second)."""
    seconds, millis = divmod(value, 1000)
    text = second_text(seconds)
    if text is None:
        return value
    return f"{text}.{millis:03d}Z"


def put_record(
    ident: int, add_time: int, expire_time: int | None, error_count: int, data: bytes
) -> dict[str, Any]:
    record: dict[str, Any] = {"id": ident, "add_time": ms_text(add_time)}
    if expire_time is not None:
        record["expire_time"] = ms_text(expire_time)
    record["error_count"] = error_count
    return put_data(record, data)


def op_record(op: legacy.Op) -> dict[str, Any]:
    """One line of a legacy journal view: {"op": NAME, ...fields}."""
    record: dict[str, Any] = {"op": legacy.OP_NAMES[op.code]}
    if op.xid is not None:
        record["xid"] = op.xid
    if op.data is None:
        return record
    if op.add_time is not None:
        record["add_time"] = safe_time(op.add_time, "ms")
    if op.expire_time is not None:
        # ADD keeps its native unit (whole seconds); the rest are ms.
        record["expire_time"] = safe_time(op.expire_time, "s" if op.code == legacy.ADD else "ms")
    return put_data(record, op.data)


def item_record(item: legacy.Item) -> dict[str, Any]:
    """One line of `<queue>/items.jsonl`; ADD items carry no add_time."""
    record: dict[str, Any] = {}
    if item.add_time is not None:
        record["add_time"] = safe_time(item.add_time, "ms")
    if item.expire_time is not None:
        record["expire_time"] = safe_time(item.expire_time, "ms")
    return put_data(record, item.data)


def reader_component(reader: str) -> str:
    if not reader:
        return DEFAULT_READER
    return _NAMED_DEFAULT if reader == DEFAULT_READER else encode_name(reader)


def reader_of_component(component: str) -> str | None:
    """The reader name a `readers/` or `pending/` file name shows, or None
    when no reader name is shown so."""
    if component == DEFAULT_READER:
        return ""
    reader = DEFAULT_READER if component == _NAMED_DEFAULT else decode_name(component)
    return reader if reader and reader_component(reader) == component else None


def journal_view(queue: str, number: int) -> str:
    return f"{encode_name(queue)}/journal/{number}.jsonl"


def buckets_folder(queue: str) -> str:
    return f"{encode_name(queue)}/buckets"


def legacy_view(queue: str, file_name: str) -> str:
    return f"{encode_name(queue)}/journal/{encode_name(file_name)}.jsonl"


def reader_view(queue: str, reader: str) -> str:
    return f"{encode_name(queue)}/readers/{reader_component(reader)}.json"


def pending_view(queue: str, reader: str) -> str:
    return f"{encode_name(queue)}/pending/{reader_component(reader)}.jsonl"


def items_view(queue: str) -> str:
    return f"{encode_name(queue)}/items.jsonl"
