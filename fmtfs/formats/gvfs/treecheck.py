"""Whether a tree file is free of the damage gvfs would silently skip,
checked over all its pointers at once with numpy.

LazyTree.problems() walks every node in Python to list that damage (0.7 s
for an 11.6 MB tree of 200,000 nodes), and a mount needs its answer for the
sizes of `_errors.jsonl` and `_fmtfs.json`.  Nearly every tree has none:
this check reads the tree a level at a time, each level's children blocks,
entries and metadata blocks as arrays, and says whether the walk would
find anything (tens of milliseconds).  Only a tree it finds damaged is
walked, for the exact problems in the walk's order.

The checks are the walk's (fmtfs.formats.gvfs.tree._Reader): a block is
4-aligned and inside the file, a string has a NUL after it (so a string at
`off` is valid when off <= the file's last NUL), a key id is in the
keyword table.  Without a block read twice (which the walk reports as a
loop, and this check refuses), the nodes the walk visits are every entry
of every block it reaches, in whatever order: so level by level is the
same set."""

from __future__ import annotations

import numpy as np

# a key id's flag for a string list (spec §2.2; tree.KEY_IS_LIST, not
# imported: tree imports this module, on a tree's first check)
KEY_IS_LIST = 0x80000000


def is_clean(data: bytes, root_dirent: tuple[int, int, int], keyword_count: int) -> bool:
    """True when a walk of the tree (LazyTree.problems) would find no problem."""
    size = len(data)
    words = np.frombuffer(data, dtype=">u4", count=size // 4)  # read at 4-aligned offsets only
    last_nul = data.rfind(b"\0")  # a string at off is NUL-terminated when off <= this
    blocks: list[np.ndarray] = []  # the children blocks read so far
    metas = [np.array([root_dirent[1]], dtype=np.int64)]
    level = np.array([root_dirent[0]], dtype=np.int64)
    while level.size:
        level = level[level != 0]  # 0: no children (trees written before gvfs 1.31.3)
        counts = _array_counts(words, level, 16, size)
        if counts is None:
            return False
        level, counts = level[counts > 0], counts[counts > 0]
        if _reads_twice(level, blocks):
            return False
        blocks.append(level)
        # each entry: name, children, metadata pointers and a time
        entries = _u32s(words, _ranges(level // 4 + 1, 4 * counts)).reshape(-1, 4)
        if (entries[:, 0] > last_nul).any():
            return False
        metas.append(entries[:, 2])
        level = entries[:, 1]
    return _keys_are_clean(words, np.concatenate(metas), keyword_count, size, last_nul)


def _keys_are_clean(
    words: np.ndarray, metas: np.ndarray, keyword_count: int, size: int, last_nul: int
) -> bool:
    """Every metadata block valid, its key ids known, its strings and string lists too."""
    metas = metas[metas != 0]
    counts = _array_counts(words, metas, 8, size)
    if counts is None:
        return False
    pairs = _u32s(words, _ranges(metas // 4 + 1, 2 * counts)).reshape(-1, 2)  # key, value pointer
    keys, values = pairs[:, 0], pairs[:, 1]
    if ((keys & ~KEY_IS_LIST) >= keyword_count).any():
        return False
    listed = (keys & KEY_IS_LIST) != 0
    if (values[~listed] > last_nul).any():
        return False
    lists = values[listed]
    items = _array_counts(words, lists, 4, size)
    return items is not None and not (_u32s(words, _ranges(lists // 4 + 1, items)) > last_nul).any()


def _array_counts(words: np.ndarray, at: np.ndarray, element: int, size: int) -> np.ndarray | None:
    """The element counts of the arrays at `at`, None if any is not a valid
    block: 4-aligned, its count and its elements inside the file."""
    if ((at % 4 != 0) | (at + 4 > size)).any():
        return None
    counts = _u32s(words, at // 4)
    if (at + 4 + element * counts > size).any():
        return None
    return counts


def _u32s(words: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The words at these indices, as int64 (offsets plus counts do not overflow)."""
    return words[at].astype(np.int64)


def _reads_twice(level: np.ndarray, earlier: list[np.ndarray]) -> bool:
    """Whether a block of this level is read twice: in it, or on an earlier level."""
    if np.unique(level).size != level.size:
        return True
    return any(np.isin(level, before).any() for before in earlier)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices start, start+1, ... start+length-1 of every range, in order."""
    ends = np.cumsum(lengths)
    return np.arange(ends[-1] if ends.size else 0) + np.repeat(starts - (ends - lengths), lengths)
