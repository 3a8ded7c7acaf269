"""A writer file's chunk as JSON Lines, written straight from its bytes.

Every PUT is one line of the writer file's journal view, and of its time
bucket's view:

    {"id":<id>,"add_time":"<RFC 3339, ms>",["expire_time":"<...>",]"error_count":<n>,"data":<text>}

The common PUT (times the calendar can show) is written from a template,
with only its data dumped by orjson (or put in base64, as put_data does):
byte for byte what orjson.dumps of WriterStream's record dict gives (the
keys in this order, integers in decimal, time texts that need no
escaping).  Anything else (a record that is not a whole PUT, a time
beyond the calendar, damage) goes through WriterStream's own decode loop
one record at a time, whose dict is dumped: one set of rules, in one
place.  One thread over 100 MB of kestrel, four passes alternated:
1.85-2.10 s so, 2.24-2.28 s building each record's dict and dumping it.
The dicts stay for readers that want records (Spark, Parquet twins);
tests/test_measured.py checks that both give the same bytes."""

from __future__ import annotations

from base64 import b64encode
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from fmtfs.formats.base import Problem, Record
from fmtfs.formats.kestrel.records import LARGEST_DATA, PUT_HEADER, PUT_HEADER_X
from fmtfs.formats.kestrel.shapes import ms_text, second_text
from fmtfs.formats.timerange import BUCKET_PREFIX, TEXT_WIDTH, BucketRuns, text_range
from fmtfs.jsonlines import LINE

# WriterStream._run: decodes records from `pos` into `out` (max_records,
# limit), notes on skipped records into `skipped`; (next offset, finished,
# the Problem that stopped it)
DecodeRun = Callable[
    [object, int, int, int, int, list[Record], list[Problem]], tuple[int, bool, Problem | None]
]

_TIME_WIDTH = TEXT_WIDTH["ms"]


@dataclass
class RenderedRun:
    lines: bytearray  # the journal view's lines
    buckets: BucketRuns  # where each bucket's lines are in them
    count: int  # records rendered
    end: int  # native offset after the last of them
    finished: bool  # the walk met the end of the records (a clean end or damage)
    times: tuple[int, int] | None  # their earliest and latest add_time (ns)
    problem: Problem | None  # the damage the run stopped at
    skipped: list[Problem] = field(default_factory=list)  # records skipped on the way


class PutLines:
    """Renders runs of one writer file's records into its views."""

    def __init__(self, decode_run: DecodeRun, bucket_folder: str, time_bucket: str) -> None:
        self.decode_run = decode_run
        self.bucket_folder = bucket_folder
        self.cut = BUCKET_PREFIX[time_bucket]  # of a time text: its bucket's name

    def run(self, buf, pos: int, end: int, max_records: int, limit: int) -> RenderedRun:
        """The records WriterStream._run(buf, pos, end, max_records, limit)
        decodes, rendered."""
        unpack6 = PUT_HEADER.unpack_from
        unpack8 = PUT_HEADER_X.unpack_from
        dumps = orjson.dumps
        cut = self.cut
        out = bytearray()
        buckets = BucketRuns(self.bucket_folder)
        enter = buckets.enter
        skipped: list[Problem] = []
        # the time text up to the second, looked up when the second changes
        # (items arrive many per second), and so is the bucket
        last_second, head = None, None
        low = high = ""  # the earliest and latest add_time text
        texts = True  # every add_time is a well-formed text
        problem = None
        finished = False
        n = 0
        while n < max_records and pos < limit:
            if pos >= end:
                finished = True
                break
            command = buf[pos]
            if command == 0x86 and end - pos >= 25:
                size, errors, ident, added = unpack6(buf, pos + 1)
                start, expire = pos + 25, None
            elif command == 0x88 and end - pos >= 33:
                size, errors, ident, added, expire = unpack8(buf, pos + 1)
                start = pos + 33
            else:
                size = start = -1  # not a PUT's header: the decode loop tells what
            stop = start + size
            if 0 <= size <= LARGEST_DATA and stop <= end:
                seconds, millis = divmod(added, 1000)
                if seconds != last_second:
                    last_second, head = seconds, second_text(seconds)
                    if head is not None:
                        enter(head[:cut], len(out))
                if head is not None:
                    when = f"{head}.{str(millis + 1000)[1:]}Z"
                    if expire is None:
                        front = f'{{"id":{ident},"add_time":"{when}","error_count":{errors},"data":'
                    else:
                        until = ms_text(expire)
                        front = (
                            f'{{"id":{ident},"add_time":"{when}","expire_time":"{until}",'
                            f'"error_count":{errors},"data":'
                        )
                    if expire is None or type(until) is str:
                        if not low or when < low:
                            low = when
                        if when > high:
                            high = when
                        data = buf[start:stop]
                        try:
                            text = data.decode()
                        except UnicodeDecodeError:  # put_data's data_base64
                            out += f'{front[:-2]}_base64":"'.encode()
                            out += b64encode(data)
                            out += b'"}\n'
                        else:
                            out += front.encode()
                            out += dumps(text)
                            out += b"}\n"
                        n += 1
                        pos = stop
                        continue
            # anything else: the decode loop's rules, for one record
            records: list[Record] = []
            pos, finished, problem = self.decode_run(buf, pos, end, 1, limit, records, skipped)
            for record in records:
                when = record.get("add_time")
                if type(when) is str and len(when) == _TIME_WIDTH:
                    enter(when[:cut], len(out))
                    if not low or when < low:
                        low = when
                    if when > high:
                        high = when
                else:
                    enter(None, len(out))
                    texts = False
                out += dumps(record, option=LINE)
                n += 1
            last_second = None  # the next template line enters its bucket again
            if finished:
                break
        else:
            finished = pos >= end
        times = text_range((low, high), "ms") if texts and low else None
        return RenderedRun(out, buckets, n, pos, finished, times, problem, skipped)
