"""Appending records to a wallaby log and its index (spec section 7)."""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import time
from pathlib import Path

from fmtfs.formats.base import BadRecord, Record, Writer
from fmtfs.formats.files import fsync_path
from fmtfs.formats.wallaby.card import LOG_MAGIC
from fmtfs.formats.wallaby.layout import (
    IDX_MAGIC,
    INDEX_RECORD,
    MAX_PAYLOAD,
    RECORD,
    encode_header,
    encode_index_record,
    encode_record,
    index_path,
    log_header_size,
)
from fmtfs.shape import parse_time, take_data


def _mapped(path: Path) -> bytes | mmap.mmap:
    """A file's bytes, mapped (b"" when it is empty: mmap refuses those)."""
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(f.fileno()).st_size else b""


class WallabyWriter(Writer):
    """Appends log records, then their index records (spec §7)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.idx = index_path(log)

    def _prepare(self) -> tuple[int, int, int]:
        """Bring the index in line with the log and cut a zero tail.
        Returns (log end, next seq, header flags).  Both files are mapped,
        not read: fmtfs calls this once per write() (a `cat >>` through a
        mount makes one every 128 KiB), and reading the whole index each
        time made appending to a 300,000-record log O(index size) per write."""
        data = _mapped(self.log)
        idx: bytes | mmap.mmap = b""
        try:
            if data[:4] != LOG_MAGIC:
                raise BadRecord(f"{self.log.name}: not a wallaby log")
            header = log_header_size(self.log, data)
            flags = struct.unpack_from("<I", data, 4)[0] if len(data) >= 8 else 0
            if not self.idx.exists():
                self.idx.write_bytes(encode_header(IDX_MAGIC, flags))
            idx = _mapped(self.idx)
            valid = self._trusted_index_records(data, idx)
            if valid:
                stamp, _, at = INDEX_RECORD.unpack_from(idx, 16 + (valid - 1) * INDEX_RECORD.size)
                offset = at + RECORD.size + RECORD.unpack_from(data, at)[0]
            else:
                offset = header
            # scan only what the index does not cover yet (spec §6.3)
            missing = []
            seq = valid
            while offset + RECORD.size <= len(data):
                size, _, stamp = RECORD.unpack_from(data, offset)
                if stamp == 0 or offset + RECORD.size + size > len(data):
                    break
                missing.append(encode_index_record(stamp, seq, offset))
                seq += 1
                offset += RECORD.size + size
            if any(data[offset:]):
                raise BadRecord(
                    f"{self.log.name} ends in a torn record at offset {offset}; refusing to append after it"
                )
            log_size = len(data)
        finally:
            for mapped in (data, idx):
                if isinstance(mapped, mmap.mmap):
                    mapped.close()
        if offset < log_size:
            os.truncate(self.log, offset)  # zero tail of a preallocated log
        with open(self.idx, "r+b") as f:
            f.truncate(16 + valid * INDEX_RECORD.size)
            f.seek(0, os.SEEK_END)
            f.write(b"".join(missing))
        return offset, seq, flags

    @staticmethod
    def _trusted_index_records(log: bytes | mmap.mmap, idx: bytes | mmap.mmap) -> int:
        """How many leading index records agree with the log.  Records are
        dense and written in order, so checking the last complete one (and
        bisecting back when it disagrees) avoids walking the whole log."""

        def agrees(i: int) -> bool:
            stamp, seq, at = INDEX_RECORD.unpack_from(idx, 16 + i * INDEX_RECORD.size)
            if seq != i or at < 8 or at + RECORD.size > len(log):
                return False
            size, _, logged = RECORD.unpack_from(log, at)
            return logged == stamp and at + RECORD.size + size <= len(log)

        low, high = 0, max(0, (len(idx) - 16) // INDEX_RECORD.size)
        if high and agrees(high - 1):
            return high
        while low < high:  # the first record that disagrees
            middle = (low + high) // 2
            if agrees(middle):
                low = middle + 1
            else:
                high = middle
        return low

    def write(self, records: list[Record]) -> None:
        encoded = []
        now = time.time_ns()
        for number, record in enumerate(records, 1):
            try:
                unknown = set(record) - {"index", "time", "flags", "data", "data_base64"}
                if unknown:
                    raise BadRecord(f"unknown field(s) {', '.join(sorted(unknown))}")
                payload = take_data(record)
                stamp = parse_time(record["time"], "ns") if record.get("time") is not None else now
                if stamp <= 0 or stamp >= 1 << 63:
                    raise BadRecord("time: must be after 1970 and fit in an i64 of nanoseconds")
                flags = record.get("flags")
                if flags is not None and (type(flags) is not int or not 0 <= flags < 1 << 32):
                    raise BadRecord("flags: expected an integer from 0 to 2^32-1")
                encoded.append((payload, stamp, flags, record.get("index")))
                if len(payload) > MAX_PAYLOAD:
                    raise BadRecord(f"payload of {len(payload)} bytes exceeds wallaby's {MAX_PAYLOAD}")
            except BadRecord as exc:
                raise BadRecord(f"record {number}: {exc}") from None
        # wallaby has one writer; an exclusive lock on the log keeps two
        # fmtfs mounts of the same source from interleaving records
        with open(self.log, "ab") as log:
            fcntl.flock(log, fcntl.LOCK_EX)
            log_end, seq, header_flags = self._prepare()
            log_bytes, idx_bytes = [], []
            offset = log_end
            for i, (payload, stamp, flags, given) in enumerate(encoded):
                if given is not None and given != seq + i:
                    raise BadRecord(f"record {i + 1}: index {given} given, but the next index is {seq + i}")
                log_bytes.append(encode_record(payload, stamp, header_flags if flags is None else flags))
                idx_bytes.append(encode_index_record(stamp, seq + i, offset))
                offset += RECORD.size + len(payload)
            # The log record lands before its index record: a crash between the
            # two leaves a lagging index, which readers complete from the log.
            log.write(b"".join(log_bytes))
            log.flush()
            with open(self.idx, "ab") as idx:
                idx.write(b"".join(idx_bytes))

    def sync(self) -> None:
        fsync_path(self.log)
        fsync_path(self.idx)
