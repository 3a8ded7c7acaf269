"""Tree files: reading them into a MetaModel, or lazily (LazyTree), with
gvfs's checks (spec §2).  fmtfs.formats.gvfs.treewriter writes them."""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from fmtfs.formats.gvfs.model import Dirent, MetaModel, Node, Value
from fmtfs.gcpause import paused

TREE_MAGIC = b"\xda\x1ameta"
HEADER_SIZE = 32
ROTATED_OFFSET = 8
KEY_IS_LIST = 0x80000000
ROTATED = 0xFFFFFFFF
_U32 = 0xFFFFFFFF
MAX_PROBLEMS = 50

_HEADER = struct.Struct(">6sBBIIIIq")
_DIRENT = struct.Struct(">IIII")
_U32S = struct.Struct(">I")
_U32_CODE = next(code for code in "IL" if array(code).itemsize == 4)


def _words(data: bytes, pos: int, count: int) -> array:
    """`count` big-endian u32s from `pos` (inside the data), as an array:
    a folder's entries read at once, an int made only for a word looked
    at (struct.unpack_from made all four of each entry's: 60 ms of a
    0.12 s check of 200,000 names)."""
    words = array(_U32_CODE, data[pos : pos + 4 * count])
    if sys.byteorder == "little":
        words.byteswap()
    return words


@dataclass
class TreeHeader:
    major: int
    minor: int
    rotated: int
    tag: int
    root: int
    keywords: int
    base: int


def read_header(data: bytes) -> TreeHeader | None:
    """The header, or None when this is not a tree file at all."""
    if len(data) < HEADER_SIZE or data[:6] != TREE_MAGIC:
        return None
    _, major, minor, rotated, tag, root, keywords, base = _HEADER.unpack_from(data, 0)
    return TreeHeader(major, minor, rotated, tag, root, keywords, base)


@dataclass
class TreeFile:
    header: TreeHeader
    keywords: list[bytes]
    model: MetaModel
    # (offset, message) of pointers gvfs would silently skip
    problems: list[tuple[int, str]] = field(default_factory=list)


class TreeError(ValueError):
    """The tree fails one of gvfs's checks on open (spec §2.7)."""


class _Reader:
    """gvfs's verify_* checks over a tree file's bytes (blocks 4-aligned and
    inside the file, strings NUL-terminated before its end), and the blocks
    of one node read with them.  Damage gvfs would silently skip is listed
    in `problems` (at most MAX_PROBLEMS)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)
        self.last_nul = data.rfind(b"\0")  # a string at pos is valid when pos <= this
        self.problems: list[tuple[int, str]] = []

    def problem(self, offset: int, message: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append((offset, message))

    def block(self, pos: int, length: int) -> bool:
        return pos % 4 == 0 and pos + length <= self.size

    def array(self, pos: int, element: int) -> int | None:
        """The element count of an array block, None when it is invalid."""
        if not self.block(pos, 4):
            return None
        (n,) = _U32S.unpack_from(self.data, pos)
        return n if self.block(pos, 4 + n * element) else None

    def string(self, pos: int) -> bytes | None:
        if pos > self.last_nul:
            return None
        return self.data[pos : self.data.find(b"\0", pos)]

    def keywords(self, header: TreeHeader) -> list[bytes]:
        """The keyword table, checked on open as gvfs does (TreeError)."""
        if not self.block(header.root, 16):
            raise TreeError(f"root pointer {header.root} is invalid")
        n_keys = self.array(header.keywords, 4)
        if n_keys is None:
            raise TreeError(f"keyword table pointer {header.keywords} is invalid")
        keywords: list[bytes] = []
        for off in struct.unpack_from(f">{n_keys}I", self.data, header.keywords + 4):
            word = self.string(off)
            if word is None:
                raise TreeError(f"keyword at {off} is not NUL-terminated")
            keywords.append(word)
        return keywords

    def read_keys(self, dirent_off: int, meta_off: int, keywords: list[bytes], keys: dict) -> None:
        """A node's metadata block into `keys` (strings and string lists)."""
        n_meta = self.array(meta_off, 8)
        if n_meta is None:
            self.problem(dirent_off + 8, f"metadata pointer {meta_off} is invalid")
            return
        flat = struct.unpack_from(f">{2 * n_meta}I", self.data, meta_off + 4)
        pos = meta_off + 4
        for i in range(0, 2 * n_meta, 2):
            key_raw, value_off = flat[i], flat[i + 1]
            key_id = key_raw & 0x7FFFFFFF
            if key_id >= len(keywords):
                self.problem(pos + 4 * i, f"key id {key_id} is not in the keyword table")
            elif key_raw & KEY_IS_LIST:
                items = self.string_list(pos + 4 * i + 4, value_off)
                if items is not None:
                    keys[keywords[key_id]] = items
            else:
                value = self.string(value_off)
                if value is None:
                    self.problem(pos + 4 * i + 4, f"value pointer {value_off} is invalid")
                else:
                    keys[keywords[key_id]] = value

    def string_list(self, field_off: int, value_off: int) -> list[bytes] | None:
        """A stringv array (invalid items are skipped, as gvfs does)."""
        count = self.array(value_off, 4)
        if count is None:
            self.problem(field_off, f"string list pointer {value_off} is invalid")
            return None
        items = []
        for item_off in struct.unpack_from(f">{count}I", self.data, value_off + 4):
            item = self.string(item_off)
            if item is None:
                self.problem(value_off, f"list item pointer {item_off} is invalid")
            else:
                items.append(item)
        return items

    def dirents(
        self, dirent_off: int, children_off: int, seen: dict[int, int]
    ) -> list[tuple[int, bytes, Dirent]]:
        """(offset, name, dirent) of the children in a node's children block;
        `seen` maps the blocks read so far to the dirent that read them, so
        a block reached twice (a loop) is read once."""
        n_children = self.array(children_off, 16)
        if n_children is None:
            self.problem(dirent_off + 4, f"children pointer {children_off} is invalid")
            return []
        if n_children == 0:
            return []
        if children_off in seen:
            self.problem(dirent_off + 4, f"children block {children_off} is used twice (a loop)")
            return []
        seen[children_off] = dirent_off
        return self.entries(children_off, n_children)

    def entries(self, children_off: int, n_children: int) -> list[tuple[int, bytes, Dirent]]:
        """(offset, name, dirent) of a valid children block's entries."""
        flat = struct.unpack_from(f">{4 * n_children}I", self.data, children_off + 4)
        pos = children_off + 4
        out = []
        for i in range(0, 4 * n_children, 4):
            name = self.string(flat[i])
            if name is None:
                self.problem(pos + 4 * i, f"name pointer {flat[i]} is invalid")
            else:
                out.append((pos + 4 * i, name, (flat[i + 1], flat[i + 2], flat[i + 3])))
        return out


P = TypeVar("P")


def _open(data: bytes) -> tuple[TreeHeader, _Reader, list[bytes], Dirent]:
    """The checks gvfs makes on open (TreeError): header, keyword table,
    root dirent."""
    header = read_header(data)
    if header is None:
        raise TreeError("not a gvfs metadata tree (size or magic)")
    if header.major != 1:
        raise TreeError(f"unsupported tree version {header.major}.{header.minor}")
    r = _Reader(data)
    keywords = r.keywords(header)
    _, *root_dirent = _DIRENT.unpack_from(data, header.root)
    return header, r, keywords, tuple(root_dirent)


def _walk(
    r: _Reader,
    root: int,
    root_dirent: Dirent,
    payload: P,
    child: Callable[[P, bytes], P],
    seen: dict[int, int],
) -> Iterator[tuple[P, int, Dirent]]:
    """(payload, dirent offset, dirent) of every node, depth first, in the
    one order every whole-tree pass uses: which of two dirents sharing a
    children block (damage) reads it depends on it.  A node's children are
    read after the caller has had the node; each child's payload is
    child(parent payload, name)."""
    stack: list[tuple[P, int, Dirent]] = [(payload, root, root_dirent)]
    while stack:
        item = stack.pop()
        yield item
        parent, dirent_off, (children_off, _, _) = item
        if children_off:  # 0: none (trees written before gvfs 1.31.3)
            for child_off, name, dirent in r.dirents(dirent_off, children_off, seen):
                stack.append((child(parent, name), child_off, dirent))


def _new_child(parent: Node, name: bytes) -> Node:
    node = parent.children[name] = Node()
    return node


def read_tree(data: bytes) -> TreeFile:
    """Decode a whole tree file with gvfs's semantics (times in memory are
    raw + base, the root included).  Raises TreeError for the checks gvfs
    makes on open; damage found later is skipped and listed in `problems`.
    A model of every node: what a rebuild needs (reading views goes through
    LazyTree instead)."""
    from fmtfs.formats.gvfs.treecheck import is_clean  # numpy: imported when a tree is read whole

    header, r, keywords, root_dirent = _open(data)
    root = Node()
    with paused():  # a node each, none in a cycle: collections only slowed it (2.4 -> 1.5 s)
        if is_clean(data, root_dirent, len(keywords)):
            _read_clean(data, header.base, keywords, root, root_dirent)
        else:
            _read_checked(r, header, keywords, root, root_dirent)
    return TreeFile(header, keywords, MetaModel(root, root_dirent[2]), r.problems)


def _read_checked(
    r: _Reader, header: TreeHeader, keywords: list[bytes], root: Node, root_dirent: Dirent
) -> None:
    """The tree's nodes into `root`, each pointer checked as gvfs does (the
    problems are r's)."""
    base = header.base
    for node, dirent_off, (_, meta_off, raw_time) in _walk(r, header.root, root_dirent, root, _new_child, {}):
        node.last_changed = raw_time + base if raw_time else 0
        if meta_off:  # 0: none (trees written before gvfs 1.31.3)
            r.read_keys(dirent_off, meta_off, keywords, node.keys)


def _read_clean(data: bytes, base: int, keywords: list[bytes], root: Node, root_dirent: Dirent) -> None:
    """_read_checked for a tree treecheck found free of damage: the same
    nodes, with none of _Reader's checks, each a call per pointer (a
    rebuild reads a whole 11.6 MB tree of 200,000 nodes: 1.5 -> 0.9 s).  A
    clean tree reads no block twice, so the order of the walk is free."""
    unpack, find = struct.unpack_from, data.find
    stack = [(root, root_dirent)]
    while stack:
        node, (children_off, meta_off, raw_time) = stack.pop()
        node.last_changed = raw_time + base if raw_time else 0
        if meta_off:
            (count,) = unpack(">I", data, meta_off)
            pairs = unpack(f">{2 * count}I", data, meta_off + 4)
            keys = node.keys
            for key_raw, value_off in zip(pairs[::2], pairs[1::2], strict=True):
                if key_raw & KEY_IS_LIST:
                    (items,) = unpack(">I", data, value_off)
                    value: Value = [
                        data[at : find(b"\0", at)] for at in unpack(f">{items}I", data, value_off + 4)
                    ]
                else:
                    value = data[value_off : find(b"\0", value_off)]
                keys[keywords[key_raw & ~KEY_IS_LIST]] = value
        if children_off:
            (count,) = unpack(">I", data, children_off)
            entries = unpack(f">{4 * count}I", data, children_off + 4)
            children = node.children
            for i in range(0, 4 * count, 4):
                at = entries[i]
                child = children[data[at : find(b"\0", at)]] = Node()
                stack.append((child, entries[i + 1 : i + 4]))


def _no_payload(parent: None, name: bytes) -> None:
    return None


class LazyTree:
    """A tree file read the way gvfsd-metadata reads its mmapped tree: a
    node's keys and children are read from the bytes when asked for, so
    nothing per node is held (a model of all 435,000 nodes of a 17 MB tree
    took 180 MB).  Making one makes gvfs's checks on open (TreeError).

    Every answer is read_tree's: a children block that two dirents point
    at (damage: a loop, a shared block) belongs to the one read_tree reads
    it with, found on first use by a pass over the folders in read_tree's
    order (_find_owners); a block's other dirents have no children."""

    def __init__(self, data: bytes) -> None:
        self.header, self._reader, self.keywords, self.root_dirent = _open(data)
        self.base = self.header.base
        self._owners: dict[int, int] | None = None
        self._below: dict[int, int] = {}  # children block -> nodes below it (_find_owners)
        self._sorted_blocks: dict[int, bool] = {}

    def time(self, raw: int) -> int:
        """A stored non-root time as gvfs reads it (0: never)."""
        return raw + self.base if raw else 0

    def keys(self, dirent_off: int, meta_off: int) -> dict[bytes, Value]:
        keys: dict[bytes, Value] = {}
        if meta_off:
            self._reader.read_keys(dirent_off, meta_off, self.keywords, keys)
        return keys

    def children(self, dirent_off: int, children_off: int) -> list[tuple[int, bytes, Dirent]]:
        """(offset, name, dirent) of a node's children, as read_tree gives them."""
        if not self._owns(dirent_off, children_off):
            return []  # none, empty, invalid, or read by another dirent
        n_children = self._reader.array(children_off, 16)
        return self._reader.entries(children_off, n_children) if n_children else []

    def child(self, dirent_off: int, children_off: int, name: bytes) -> tuple[int, Dirent] | None:
        """(offset, dirent) of the child `name`, as children() would give it:
        a binary search, as gvfs's own lookups make, in a block whose names
        are sorted and distinct (gvfs writes them so); a scan otherwise."""
        if not self._owns(dirent_off, children_off):
            return None
        r = self._reader
        n = r.array(children_off, 16) or 0
        if self._sorted(children_off, n):
            lo = self._first_at_least(children_off, n, name)
            if lo < n and self._name_at(children_off, lo) == name:
                at = children_off + 4 + 16 * lo
                _, *dirent = _DIRENT.unpack_from(r.data, at)
                return at, tuple(dirent)  # type: ignore[return-value]
            return None
        found = None
        for off, each, dirent in self.children(dirent_off, children_off):
            if each == name:
                found = (off, dirent)  # the last one, as read_tree keeps
        return found

    def sorted_children(
        self, dirent_off: int, children_off: int, start: bytes = b""
    ) -> Iterator[tuple[int, bytes, Dirent]]:
        """children() in name order from the first named `start` or later,
        read from the bytes one at a time when the block is sorted (a
        folder of 87,000 files held as a list took 25 MB; a part of a view
        starts in the middle of one by a binary search); sorted in memory
        otherwise (damage)."""
        if not self._owns(dirent_off, children_off):
            return iter(())
        r = self._reader
        n = r.array(children_off, 16) or 0
        if not self._sorted(children_off, n):
            last = {name: (off, name, d) for off, name, d in self.children(dirent_off, children_off)}
            return iter([last[name] for name in sorted(last) if name >= start])
        return self._in_order(children_off, n, self._first_at_least(children_off, n, start) if start else 0)

    def flat_child_name(self, dirent_off: int, children_off: int, index: int) -> bytes | None:
        """The name of the `index`-th child in name order, when that is
        where the child's lines are: a sorted block none of whose children
        has children (None otherwise)."""
        if not self._owns(dirent_off, children_off):
            return None
        n = self._reader.array(children_off, 16) or 0
        if not 0 <= index < n or self._below[children_off] != n or not self._sorted(children_off, n):
            return None
        return self._name_at(children_off, index)

    def nodes_below(self, dirent_off: int, children_off: int) -> int:
        """How many nodes are below a node (its children, theirs, ...), as
        read_tree would read them; 0 for a block it does not read there."""
        return self._below.get(children_off, 0) if self._owns(dirent_off, children_off) else 0

    def _name_at(self, children_off: int, index: int) -> bytes | None:
        r = self._reader
        return r.string(_U32S.unpack_from(r.data, children_off + 4 + 16 * index)[0])

    def _first_at_least(self, children_off: int, n: int, name: bytes) -> int:
        """The index of the first child named `name` or later (a sorted block)."""
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if self._name_at(children_off, mid) < name:  # type: ignore[operator]  # checked by _sorted
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _in_order(self, children_off: int, n: int, first: int = 0) -> Iterator[tuple[int, bytes, Dirent]]:
        r, unpack = self._reader, _DIRENT.unpack_from
        for at in range(children_off + 4 + 16 * first, children_off + 4 + 16 * n, 16):
            name_off, *dirent = unpack(r.data, at)
            yield at, r.string(name_off), tuple(dirent)  # type: ignore[misc]  # checked by _sorted

    def _owns(self, dirent_off: int, children_off: int) -> bool:
        if not children_off:
            return False
        if self._owners is None:
            self._owners = self._find_owners()
        return self._owners.get(children_off) == dirent_off

    def _sorted(self, children_off: int, n: int) -> bool:
        """Whether a block's names are all valid, sorted and distinct (once per block)."""
        known = self._sorted_blocks.get(children_off)
        if known is None:
            r = self._reader
            known = _names_sorted(r, _words(r.data, children_off + 4, 4 * n)[::4])
            self._sorted_blocks[children_off] = known
        return known

    def may_have_children(self, children_off: int) -> bool:
        """False when a node surely has none (cheap: most nodes are files)."""
        return (
            bool(children_off)
            and children_off + 4 <= self._reader.size
            and any(self._reader.data[children_off : children_off + 4])
        )

    def _find_owners(self) -> dict[int, int]:
        """The blocks _walk would read, each with the dirent that reads it,
        in _walk's order, visiting only folders: a child whose children
        block is empty or invalid reads nothing, so neither its name nor
        its place on the stack changes who reads what (a third of the
        time of a walk of every node).  It counts the nodes below each
        block on the way (`_below`: where a view's parts split, a tree's
        lines in even runs)."""
        r, data, size = self._reader, self._reader.data, self._reader.size
        seen: dict[int, int] = {}
        below_count: dict[int, int] = {}
        parents: list[tuple[int, int]] = []  # (block, the block it is in), in reading order
        stack = [(self.header.root, self.root_dirent[0], 0)]
        while stack:
            dirent_off, children_off, parent = stack.pop()
            n = r.array(children_off, 16) if children_off else None
            if not n or children_off in seen:
                continue
            seen[children_off] = dirent_off
            below_count[children_off] = n
            parents.append((children_off, parent))
            flat = _words(data, children_off + 4, 4 * n)
            for i in range(0, 4 * n, 4):
                below = flat[i + 1]
                if (
                    below
                    and below + 4 <= size
                    and data[below : below + 4] != b"\0\0\0\0"
                    and flat[i] <= r.last_nul
                ):
                    stack.append((children_off + 4 + 4 * i, below, children_off))
        for block, parent in reversed(parents):  # a block's count is whole before its parent's
            if parent:
                below_count[parent] += below_count[block]
        self._below = below_count
        return seen

    def problems(self) -> list[tuple[int, str]]:
        """(offset, message) of the damage gvfs would skip, in read_tree's
        order, without building a model: none when a check of all its
        pointers at once finds the tree clean (treecheck), as nearly every
        tree is; else a walk of every node finds them."""
        from fmtfs.formats.gvfs.treecheck import is_clean  # numpy: imported when a tree is checked

        if is_clean(self._reader.data, self.root_dirent, len(self.keywords)):
            return []
        return self.walked_problems()

    def walked_problems(self) -> list[tuple[int, str]]:
        """problems(), found by a walk of every node."""
        r = _Reader(self._reader.data)
        scratch: dict[bytes, Value] = {}
        for _, dirent_off, (_, meta_off, _) in _walk(
            r, self.header.root, self.root_dirent, None, _no_payload, {}
        ):
            if meta_off:
                r.read_keys(dirent_off, meta_off, self.keywords, scratch)
                scratch.clear()
        return r.problems


def _names_sorted(r: _Reader, name_offsets: array) -> bool:
    """Whether the names at these offsets are all valid (r.string), in
    strictly increasing byte order."""
    if name_offsets and max(name_offsets) > r.last_nul:
        return False
    data, find, last = r.data, r.data.find, None
    for off in name_offsets:
        name = data[off : find(b"\0", off)]
        if last is not None and not last < name:
            return False
        last = name
    return True
