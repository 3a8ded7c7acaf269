"""The slot order of a glib (>= 2.59, checked against 2.74) GHashTable keyed
by strings, insert-only.

gvfsd-metadata writes every string block of a tree by iterating such a table,
so reproducing its trees byte for byte needs this order (spec §2.5).  Readers
never depend on it."""

from __future__ import annotations

# glib's prime_mod table, indexed by shift (the table holds 1 << shift slots).
PRIME_MOD = (
    1, 2, 3, 7, 13, 31, 61, 127, 251, 509, 1021, 2039, 4093, 8191, 16381, 32749,
    65521, 131071, 262139, 524287, 1048573, 2097143, 4194301, 8388593, 16777213,
    33554393, 67108859, 134217689, 268435399, 536870909, 1073741789, 2147483647,
)  # fmt: skip
MIN_SHIFT = 3
_U32 = 0xFFFFFFFF


def str_hash(data: bytes) -> int:
    """g_str_hash: djb2 over *signed* chars; values below 2 are reserved."""
    h = 5381
    for c in data:
        h = (h * 33 + (c - 256 if c > 127 else c)) & _U32
    return h if h >= 2 else 2


class SlotOrder:
    """Keys in the order g_hash_table_iter would return them."""

    __slots__ = ("shift", "mod", "mask", "hashes", "keys", "nnodes")

    def __init__(self) -> None:
        self._set_shift(MIN_SHIFT)
        self.hashes = [0] * (1 << MIN_SHIFT)
        self.keys: list[bytes | None] = [None] * (1 << MIN_SHIFT)
        self.nnodes = 0

    def _set_shift(self, shift: int) -> None:
        self.shift = shift
        self.mod = PRIME_MOD[shift]
        self.mask = (1 << shift) - 1

    def add(self, key: bytes) -> None:
        """Insert a key known to be new (callers deduplicate with a dict)."""
        h = str_hash(key)
        hashes = self.hashes
        i = ((h * 11) & _U32) % self.mod
        step = 0
        while hashes[i]:
            step += 1
            i = (i + step) & self.mask
        hashes[i] = h
        self.keys[i] = key
        self.nnodes += 1
        # Insert-only: no tombstones, so noccupied == nnodes here.
        n = self.nnodes
        if len(hashes) <= n + n // 16:
            self._grow()

    def _grow(self) -> None:
        old_size = len(self.hashes)
        self._set_shift(max(MIN_SHIFT, int(self.nnodes * 1.333).bit_length()))
        size = 1 << self.shift
        if size <= old_size:  # cannot happen insert-only; keep glib's shape anyway
            size = old_size
        hashes = self.hashes + [0] * (size - old_size)
        keys = self.keys + [None] * (size - old_size)
        placed = [False] * size
        mod, mask = self.mod, self.mask
        # glib's in-place rehash: walk the old slots, lift each entry out and
        # drop it at the first unplaced slot of its new probe sequence,
        # evicting (and then re-placing) whatever sat there.
        for i in range(old_size):
            node_hash = hashes[i]
            if node_hash < 2 or placed[i]:
                continue
            key = keys[i]
            hashes[i] = 0
            keys[i] = None
            while True:
                j = ((node_hash * 11) & _U32) % mod
                step = 0
                while placed[j]:
                    step += 1
                    j = (j + step) & mask
                placed[j] = True
                replaced_hash, replaced_key = hashes[j], keys[j]
                hashes[j], keys[j] = node_hash, key
                if replaced_hash < 2:
                    break
                node_hash, key = replaced_hash, replaced_key
        self.hashes, self.keys = hashes, keys

    def __iter__(self):
        return (k for k in self.keys if k is not None)
