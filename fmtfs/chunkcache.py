"""The mount's in-memory caches of a source's chunks: rendered view pieces
(bounded in bytes, evicting to a spill file) and the last few decoded
chunks.  Each owns its lock."""

from __future__ import annotations

import threading
from collections import OrderedDict

from fmtfs.formats.base import Record
from fmtfs.spill import SpilledPieces


class RenderedChunks:
    """LRU of rendered view pieces, bounded in bytes (fsspec's blockcache idea).
    It holds what readers are about to ask for (the chunks decoded ahead,
    2x workers of ~1-3 MB each, every view of them) and what readahead and
    Spark's parallel range reads ask for again soon; a view read a second
    time is served from the kernel's page cache, not from here, so 32 MB is
    plenty and counts in the mount's RSS."""

    def __init__(self, capacity: int = 32 << 20) -> None:
        self.capacity = capacity
        self.used = 0
        self.items: OrderedDict[tuple, bytes] = OrderedDict()
        # pieces read back from the store of kept pieces: evicted, they are
        # dropped, not spilled (a second read decompresses them again, at
        # 2-4 GB/s; spilling wrote every piece of a 1 GB `cat` to disk)
        self.unspilled: set[tuple] = set()
        self.lock = threading.Lock()
        self.spill: SpilledPieces | None = None  # where evicted pieces go (the mount sets it)

    def get(self, key: tuple) -> bytes | None:
        data = self.in_memory(key)
        if data is None and self.spill is not None:
            data = self.spill.get(key)
        return data

    def in_memory(self, key: tuple) -> bytes | None:
        """The piece if it is in the LRU itself (never read from disk)."""
        with self.lock:
            data = self.items.get(key)
            if data is not None:
                self.items.move_to_end(key)
            return data

    def __contains__(self, key: tuple) -> bool:
        """Whether get() would find the piece (without reading it from disk)."""
        with self.lock:
            if key in self.items:
                return True
        return self.spill is not None and key in self.spill

    def put(self, key: tuple, data: bytes, spill: bool = True) -> None:
        """Cache `data` as `key`'s piece; `spill` False: never to the spill
        file (a piece the caller can have again cheaply)."""
        evicted = []
        with self.lock:
            if key in self.items:
                return
            self.items[key] = data
            self.used += len(data)
            if not spill:
                self.unspilled.add(key)
            while self.used > self.capacity and len(self.items) > 1:
                old_key, old = self.items.popitem(last=False)
                self.used -= len(old)
                if old_key in self.unspilled:
                    self.unspilled.discard(old_key)
                else:
                    evicted.append((old_key, old))
        if self.spill is not None:
            for old_key, old in evicted:
                self.spill.put(old_key, old)

    def drop_stream(self, name: str) -> None:
        with self.lock:
            for key in [k for k in self.items if k[0] == name]:
                self.used -= len(self.items.pop(key))
                self.unspilled.discard(key)
        if self.spill is not None:
            self.spill.drop_stream(name)


class DecodedChunks:
    """The last few decoded chunks (all their views), shared by the record
    iterations of one stream's views: the Parquet twins of wallaby's hour
    buckets, built one after the other as a listing stats them, each need
    one or two chunks that their neighbours decoded already.  Two are kept:
    each decoded chunk is thousands of dicts, and a twin builder reading a
    view front to back never comes back further (six cost a builder 35 MB
    more on a 180,000-record Beats pending view)."""

    def __init__(self, capacity: int = 2) -> None:
        self.capacity = capacity
        self.items: dict[tuple, dict[str, list[Record]]] = {}
        self.lock = threading.Lock()

    def get(self, key: tuple, decode) -> dict[str, list[Record]]:
        with self.lock:
            found = self.items.pop(key, None)
            if found is not None:
                self.items[key] = found  # most recent last
                return found
        found = decode()
        with self.lock:
            self.items[key] = found
            while len(self.items) > self.capacity:
                self.items.pop(next(iter(self.items)))
        return found
