"""The older kestrel journal (0.8 - 2.4, spec §8): opcodes, records, replay.

One opcode byte and fixed little-endian fields per record; no magic, no
checksum.  `read_op` parses one operation, `encode_op` writes one (tests and
samples only: fmtfs never writes these files), `Replay` rebuilds the queue
contents the way `PersistentQueue.replayJournal` does.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

(
    ADD,
    REMOVE,
    ADDX,
    REMOVE_TENTATIVE,
    SAVE_XID,
    UNREMOVE,
    CONFIRM_REMOVE,
    ADD_XID,
    CONTINUE,
    REMOVE_TENTATIVE_XID,
) = range(10)
OP_NAMES = (
    "ADD",
    "REMOVE",
    "ADDX",
    "REMOVE_TENTATIVE",
    "SAVE_XID",
    "UNREMOVE",
    "CONFIRM_REMOVE",
    "ADD_XID",
    "CONTINUE",
    "REMOVE_TENTATIVE_XID",
)
OP_CODES = {name: code for code, name in enumerate(OP_NAMES)}

_I32 = struct.Struct("<i")
_ITEM = struct.Struct("<qq")  # add_time ms, expiry ms (0 = none)


class BrokenItem(Exception):
    """EOF inside a record or an unknown opcode (`offset`: the record start)."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset = offset
        self.message = message


class Op(NamedTuple):
    code: int
    xid: int | None  # SAVE_XID, UNREMOVE, CONFIRM_REMOVE, ADD_XID, CONTINUE, REMOVE_TENTATIVE_XID
    add_time: int | None  # ms; None for ADD (kestrel stamps the replay time)
    expire_time: int | None  # ADD: seconds, the ADDX family: ms; None when 0 (no expiry)
    data: bytes | None


def read_op(buf, pos: int, end: int) -> tuple[Op, int] | None:
    """The operation at `pos` and the offset after it, None at EOF."""
    if pos >= end:
        return None
    code = buf[pos]
    if code > 9:
        raise BrokenItem(pos, f"invalid opcode in journal: {code}")
    after = pos + 1
    if code in (REMOVE, REMOVE_TENTATIVE):
        return Op(code, None, None, None, None), after
    xid = None
    if code >= SAVE_XID and code != ADDX:
        if after + 4 > end:
            raise BrokenItem(pos, "truncated record")
        (xid,) = _I32.unpack_from(buf, after)
        after += 4
        if code in (SAVE_XID, UNREMOVE, CONFIRM_REMOVE, REMOVE_TENTATIVE_XID):
            return Op(code, xid, None, None, None), after
    # A block: i32 length, then that many bytes.
    if after + 4 > end:
        raise BrokenItem(pos, "truncated record")
    (length,) = _I32.unpack_from(buf, after)
    start = after + 4
    least = 4 if code == ADD else 16
    if length < least:
        raise BrokenItem(pos, f"corrupted item: block of {length} bytes")
    stop = start + length
    if stop > end:
        raise BrokenItem(pos, "truncated record")
    if code == ADD:
        (expiry,) = _I32.unpack_from(buf, start)
        return Op(code, None, None, expiry or None, bytes(buf[start + 4 : stop])), stop
    added, expiry = _ITEM.unpack_from(buf, start)
    return Op(code, xid, added, expiry or None, bytes(buf[start + 16 : stop])), stop


def encode_op(op: Op) -> bytes:
    code = op.code
    head = bytes([code])
    if code in (REMOVE, REMOVE_TENTATIVE):
        return head
    if code in (SAVE_XID, UNREMOVE, CONFIRM_REMOVE, REMOVE_TENTATIVE_XID):
        return head + _I32.pack(op.xid)
    data = op.data or b""
    if code == ADD:
        block = _I32.pack(op.expire_time or 0) + data
    else:
        block = _ITEM.pack(op.add_time or 0, op.expire_time or 0) + data
    xid = _I32.pack(op.xid) if code in (ADD_XID, CONTINUE) else b""
    return head + xid + _I32.pack(len(block)) + block


class Item(NamedTuple):
    add_time: int | None  # ms; None for ADD (replay-time stamped, not deterministic)
    expire_time: int | None  # ms
    data: bytes


@dataclass
class Replay:
    """Queue contents rebuilt from operations (PersistentQueue.replayJournal).

    Expiry is not applied (kestrel discards expired items using the clock at
    replay time, which would make the view depend on when it is read)."""

    legacy_counter: bool = False  # files with REMOVE_TENTATIVE: 1.x's ++counter rule
    queue: deque[Item] = field(default_factory=deque)
    open: dict[int, Item] = field(default_factory=dict)
    counter: int = 0

    def apply(self, op: Op) -> None:
        code = op.code
        if code in (ADD, ADDX, ADD_XID):
            self.queue.append(_item(op))
        elif code == REMOVE:
            if self.queue:
                self.queue.popleft()
        elif code == REMOVE_TENTATIVE:
            if self.legacy_counter:
                # 1.x: nextXid() only runs when there is an item to hand out.
                if self.queue:
                    xid = self.counter + 1
                    while xid in self.open:
                        xid += 1
                    self.counter = xid
                    self.open[xid] = self.queue.popleft()
            else:
                self._take(0)  # 2.x reads opcode 3 as RemoveTentative(0)
        elif code == REMOVE_TENTATIVE_XID:
            self._take(op.xid)
        elif code == SAVE_XID:
            self.counter = op.xid
        elif code == UNREMOVE:
            item = self.open.pop(op.xid, None)
            if item is not None:
                self.queue.appendleft(item)
        elif code == CONFIRM_REMOVE:
            self.open.pop(op.xid, None)
        elif code == CONTINUE:
            self.open.pop(op.xid, None)
            self.queue.append(_item(op))

    def _take(self, xid: int) -> None:
        # 2.x: an empty queue opens no transaction, but the counter still moves.
        if self.queue:
            self.open[xid] = self.queue.popleft()
        self.counter = xid

    def finish(self) -> list[Item]:
        """Return open transactions to the head, highest xid first, so the
        lowest xid ends up first; the queue contents in order."""
        for xid in sorted(self.open, reverse=True):
            self.queue.appendleft(self.open[xid])
        self.open.clear()
        return list(self.queue)


def _item(op: Op) -> Item:
    expire = op.expire_time
    if op.code == ADD and expire is not None:
        expire *= 1000  # ADD stores seconds; QItem keeps ms
    return Item(op.add_time, expire, op.data or b"")
