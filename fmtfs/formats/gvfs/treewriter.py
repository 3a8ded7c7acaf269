"""Writing a model out as a tree file exactly as gvfsd-metadata's
metabuilder does (spec §2.3): header, keyword table, root dirent, every
node's children block breadth first, then the metadata groups in the same
order.

A rebuild writes every node of the store (a journal rotation of an 11.6 MB
tree: 200,000 nodes), so the file is laid out a block at a time rather
than a word at a time: each block is a list of u32 words packed at once,
its strings placed right after it in GHashTable slot order (ghash), their
hashes computed for all the tree's strings in one pass (ghash.str_hashes).
A dirent's pointers to its node's children and metadata blocks, which come
later in the file, are set once those are placed."""

from __future__ import annotations

import struct
from itertools import accumulate

from fmtfs.formats.gvfs.ghash import SlotOrder, str_hashes
from fmtfs.formats.gvfs.model import MetaModel, Node
from fmtfs.formats.gvfs.tree import _DIRENT, _HEADER, _U32S, KEY_IS_LIST, TREE_MAGIC
from fmtfs.gcpause import paused

_U32 = 0xFFFFFFFF
# the file's first blocks: the header, then the keyword table (its pointer at 20)
_ROOT_POINTER, _KEYWORDS_POINTER = 16, 20
_NONE = bytes(4)  # an empty block: a count of 0
_POINTERS = struct.Struct(">II")  # a dirent's children and metadata pointers


def build_tree(model: MetaModel, tag: int) -> bytes:
    """Serialise `model` as gvfsd-metadata would, with `tag`."""
    with paused():  # lists of words and strings, none in a cycle
        return _TreeWriter(model, tag).write()


def _time_base(nodes: list[Node]) -> int:
    """metabuilder's time base: the smallest non-zero time minus one, moved
    up when the span to the largest time (or to 0: its maximum starts
    there) would overflow 32 bits."""
    times = [node.last_changed for node in nodes]
    t_min = min(filter(None, times), default=0)
    t_max = max(0, *times)
    base = t_min - 1 if t_min != 0 else 0
    if t_max - base > _U32:
        base = t_max - _U32
    return base


def _breadth_first(root: Node) -> tuple[list[Node], list[int]]:
    """Every node breadth first, children in name order (the order of both
    the children blocks and the metadata blocks), and where each node's
    children start in that list (they follow one another)."""
    order = [root]
    first_child = []
    for node in order:  # grows as it goes
        first_child.append(len(order))
        children = node.children
        if children:
            order.extend([children[name] for name in sorted(children)])
    return order, first_child


def _texts(nodes: list[Node]) -> tuple[list[bytes], list[bytes]]:
    """The keys in use, in strcmp order (a key's id is its index), and
    every string a string block holds: names, keys, values, list items."""
    keys: set[bytes] = set()
    texts: set[bytes] = set()
    for node in nodes:
        if node.children:
            texts.update(node.children)
        if node.keys:
            keys.update(node.keys)
            for value in node.keys.values():
                if isinstance(value, list):
                    texts.update(value)
                else:
                    texts.add(value)
    return sorted(keys), list(texts | keys)


class _TreeWriter:
    def __init__(self, model: MetaModel, tag: int) -> None:
        self.root = model.root
        self.tag = tag
        self.nodes, self.first_child = _breadth_first(self.root)
        self.base = _time_base(self.nodes)
        self.buf = bytearray()
        self.keywords, texts = _texts(self.nodes)
        self.key_ids = {k: i for i, k in enumerate(self.keywords)}
        self.hashes = dict(zip(texts, str_hashes(texts), strict=True))
        # per node, in self.nodes' order: where its dirent is, and the
        # children and metadata blocks its second and third words point to
        self.dirents = [0] * len(self.nodes)
        self.children_blocks = [0] * len(self.nodes)
        self.meta_blocks = [0] * len(self.nodes)

    def write(self) -> bytes:
        buf, nodes = self.buf, self.nodes
        buf += _HEADER.pack(TREE_MAGIC, 1, 0, 0, self.tag, 0, 0, self.base)
        _U32S.pack_into(buf, _KEYWORDS_POINTER, len(buf))
        offsets, strings = self._strings(self.keywords, len(buf) + 4 + 4 * len(self.keywords))
        buf += struct.pack(f">{1 + len(offsets)}I", len(offsets), *offsets) + strings
        self._root_dirent()
        for i, node in enumerate(nodes):
            if node.children:
                self._children_block(node, i)
            else:  # most nodes: a count of 0
                self.children_blocks[i] = len(buf)
                buf += _NONE
        self._metadata_group(0, 1)
        for i, node in enumerate(nodes):
            if node.children:
                self._metadata_group(self.first_child[i], len(node.children))
        self._point_dirents()
        return bytes(buf)

    def _root_dirent(self) -> None:
        buf = self.buf
        at = len(buf)
        _U32S.pack_into(buf, _ROOT_POINTER, at)
        self.dirents[0] = at
        # its name right after it, padded; its time absolute, truncated (spec §2.6)
        buf += _DIRENT.pack(at + 16, 0, 0, self.root.last_changed & _U32) + b"/\0\0\0"

    def _strings(self, refs: list[bytes], first: int) -> tuple[list[int], bytes]:
        """The string block of a block whose strings start at `first`: the
        offset of each of `refs`, and the strings (each once, in GHashTable
        slot order: the order of their first reference), NUL-terminated and
        padded."""
        unique = list(dict.fromkeys(refs))
        order = SlotOrder()
        order.add_all(unique, map(self.hashes.__getitem__, unique))
        strings = list(order)
        if not strings:
            return [], b""
        ends = list(accumulate([len(text) + 1 for text in strings], initial=first))
        offsets = dict(zip(strings, ends, strict=False))  # each string's start (the last end unused)
        return list(map(offsets.__getitem__, refs)), b"\0".join(strings) + bytes(1 + (-ends[-1] % 4))

    def _children_block(self, node: Node, i: int) -> None:
        """Node i's children block: a count, then a dirent per child in name
        order (its name, its pointers set by _point_dirents, its time), then
        the names."""
        names = sorted(node.children)
        n = len(names)
        start = len(self.buf)
        self.children_blocks[i] = start
        first = self.first_child[i]
        self.dirents[first : first + n] = range(start + 4, start + 4 + 16 * n, 16)
        base = self.base
        words = [0] * (1 + 4 * n)
        words[0] = n
        words[1::4], strings = self._strings(names, start + 4 + 16 * n)
        words[4::4] = [
            0 if t == 0 else 1 if t <= base else (t - base) & _U32
            for t in (child.last_changed for child in self.nodes[first : first + n])
        ]
        self.buf += struct.pack(f">{len(words)}I", *words) + strings

    def _point_dirents(self) -> None:
        """Every dirent's children and metadata pointers, now that the
        blocks are placed (numpy: one assignment for 200,000 dirents)."""
        import numpy as np

        words = np.frombuffer(self.buf, dtype=">u4")  # a view: the file is 4-aligned throughout
        at = np.array(self.dirents, dtype=np.int64) // 4
        words[at + 1] = self.children_blocks
        words[at + 2] = self.meta_blocks
        del words  # the view holds the buffer

    def _metadata_group(self, first: int, count: int) -> None:
        """The metadata blocks of the sibling nodes first .. first+count-1:
        per node a count and (key id, value) pairs in key order; then the
        string lists, the last one first (metabuilder prepends them to a
        list); then one string block for the group."""
        start = len(self.buf)
        key_ids, nodes, meta_blocks = self.key_ids, self.nodes, self.meta_blocks
        words: list[int] = []
        refs: list[bytes] = []
        slots: list[int] = []
        lists: list[tuple[int, list[bytes]]] = []
        put, ref, slot_at = words.append, refs.append, slots.append  # a tree's 200,000 nodes
        for i in range(first, first + count):
            keys = nodes[i].keys
            at = len(words)
            meta_blocks[i] = start + 4 * at
            put(len(keys))
            for key in sorted(keys):
                value = keys[key]
                at += 2  # the word of this key's value
                if isinstance(value, list):
                    lists.append((at, value))
                    put(key_ids[key] | KEY_IS_LIST)
                else:
                    slot_at(at)
                    ref(value)
                    put(key_ids[key])
                put(0)
        for slot, items in reversed(lists):
            words[slot] = start + 4 * len(words)
            words.append(len(items))
            slots.extend(range(len(words), len(words) + len(items)))
            refs.extend(items)
            words += [0] * len(items)
        offsets, strings = self._strings(refs, start + 4 * len(words))
        for slot, offset in zip(slots, offsets, strict=True):
            words[slot] = offset
        self.buf += struct.pack(f">{len(words)}I", *words) + strings
