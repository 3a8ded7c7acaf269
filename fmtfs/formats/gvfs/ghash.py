"""The slot order of a glib (>= 2.59, checked against 2.74) GHashTable keyed
by strings, insert-only.

gvfsd-metadata writes every string block of a tree by iterating such a table,
so reproducing its trees byte for byte needs this order (spec §2.5).  Readers
never depend on it."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from itertools import accumulate

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


# strings hashed at once by str_hashes: bounds its arrays (five 8-byte
# words per byte of the strings) whatever the tree's size
_BATCH_BYTES = 1 << 20


def str_hashes(keys: list[bytes]) -> list[int]:
    """str_hash of every key, computed with numpy (a tree's rebuild hashes
    each of its 200,000 strings: 1.9 s a byte at a time).  The hash of
    c_1 .. c_n is 5381 * 33^n + sum of c_i * 33^(n-i), modulo 2^32, which
    uint64 arithmetic (modulo 2^64) gives in its low 32 bits."""
    ends = list(accumulate(map(len, keys)))
    out: list[int] = []
    start = 0
    while start < len(keys):
        room = (ends[start - 1] if start else 0) + _BATCH_BYTES
        stop = max(bisect_right(ends, room, start), start + 1)
        out += _hash_batch(keys[start:stop])
        start = stop
    return out


def _hash_batch(keys: list[bytes]) -> list[int]:
    import numpy as np  # only a tree's writer needs it: not imported with the reader

    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    ends = np.cumsum(lengths)
    powers = np.ones(int(lengths.max(initial=0)) + 1, dtype=np.uint64)  # 33^k modulo 2^64
    np.cumprod(np.full(powers.size - 1, 33, dtype=np.uint64), out=powers[1:])
    # signed chars (int8), each times 33 to the power of the number of chars after it
    chars = np.frombuffer(b"".join(keys), dtype=np.int8).astype(np.int64).view(np.uint64)
    after = np.repeat(ends, lengths) - 1 - np.arange(chars.size)
    terms = chars * powers[after]
    sums = np.zeros(len(keys), dtype=np.uint64)
    filled = lengths > 0  # reduceat would give an empty key its next key's first term
    sums[filled] = np.add.reduceat(terms, (ends - lengths)[filled]) if terms.size else 0
    hashes = (powers[lengths] * np.uint64(5381) + sums) & np.uint64(_U32)
    return np.maximum(hashes, np.uint64(2)).tolist()


def _probe(taken: list, h: int, mod: int, mask: int) -> int:
    """The first slot of hash h's probe sequence that `taken` says is free
    (glib's quadratic probing)."""
    i = ((h * 11) & _U32) % mod
    step = 0
    while taken[i]:
        step += 1
        i = (i + step) & mask
    return i


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
        self.add_all([key], [str_hash(key)])

    def add_all(self, keys: Iterable[bytes], hashes: Iterable[int]) -> None:
        """add() each of `keys`, whose str_hashes are `hashes`, in order."""
        table, names, mod, mask = self.hashes, self.keys, self.mod, self.mask
        n = self.nnodes
        for key, h in zip(keys, hashes, strict=True):
            i = _probe(table, h, mod, mask)
            table[i] = h
            names[i] = key
            n += 1
            # insert-only: no tombstones, so noccupied == nnodes here
            if len(table) <= n + n // 16:
                self.nnodes = n
                self._grow()
                table, names, mod, mask = self.hashes, self.keys, self.mod, self.mask
        self.nnodes = n

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
                j = _probe(placed, node_hash, mod, mask)
                placed[j] = True
                replaced_hash, replaced_key = hashes[j], keys[j]
                hashes[j], keys[j] = node_hash, key
                if replaced_hash < 2:
                    break
                node_hash, key = replaced_hash, replaced_key
        self.hashes, self.keys = hashes, keys

    def __iter__(self):
        return (k for k in self.keys if k is not None)
