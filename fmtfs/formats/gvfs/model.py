"""The in-memory metadata tree and gvfs's rebuild semantics (spec §3.6).

This mirrors what gvfsd-metadata holds while rebuilding: nodes named by raw
bytes, keys and values as bytes, `last_changed` as a signed 64-bit second
count (0 = never).  Journal entries are applied with `apply`.

A model is whole (read_tree: every node a Node, what a rebuild writes) or
lazy (fmtfs.formats.gvfs.lazy: a child may be a Ref, a subtree of the tree
file nobody changed, loaded into Nodes only when a journal entry reaches
into it).  Applying entries works on both; the whole-tree passes (walk,
the tree writer) take whole models only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

Value = bytes | list[bytes]
# a dirent's (children offset, metadata offset, raw last_changed)
Dirent = tuple[int, int, int]

OP_SET, OP_SETV, OP_UNSET, OP_COPY, OP_REMOVE = 0, 1, 2, 3, 4
OP_NAMES = {OP_SET: "set", OP_SETV: "setv", OP_UNSET: "unset", OP_COPY: "copy", OP_REMOVE: "remove"}
OP_CODES = {name: code for code, name in OP_NAMES.items()}


def to_i64(value: int) -> int:
    """A u64 journal mtime as gvfs's gint64 last_changed."""
    return value - (1 << 64) if value >= 1 << 63 else value


class TreeSource(Protocol):
    """Where a Ref reads its subtree (fmtfs.formats.gvfs.tree.LazyTree)."""

    def time(self, raw: int) -> int: ...
    def keys(self, dirent_off: int, meta_off: int) -> dict[bytes, Value]: ...
    def children(self, dirent_off: int, children_off: int) -> list[tuple[int, bytes, Dirent]]: ...
    def child(self, dirent_off: int, children_off: int, name: bytes) -> tuple[int, Dirent] | None: ...


class Ref:
    """A subtree of the tree file, not loaded: the node at dirent `off` and
    everything below it, as stored, except that every node of it shows
    `time` when a copy set it (None: the file's own times)."""

    __slots__ = ("tree", "off", "dirent", "time")

    def __init__(self, tree: TreeSource, off: int, dirent: Dirent, time: int | None = None) -> None:
        self.tree, self.off, self.dirent, self.time = tree, off, dirent, time

    def last_changed(self) -> int:
        return self.tree.time(self.dirent[2]) if self.time is None else self.time

    def load(self) -> Node:
        """This node as a Node, its children still in the file (`base`)."""
        node = Node(self.last_changed())
        node.keys = self.tree.keys(self.off, self.dirent[1])
        node.base = self
        return node

    def child(self, name: bytes) -> Ref | None:
        found = self.tree.child(self.off, self.dirent[0], name)
        return None if found is None else Ref(self.tree, found[0], found[1], self.time)

    def children(self) -> dict[bytes, Ref]:
        # a dict: a damaged block naming a child twice keeps the last, as read_tree does
        tree, time = self.tree, self.time
        return {
            name: Ref(tree, off, dirent, time)
            for off, name, dirent in tree.children(self.off, self.dirent[0])
        }

    def copied(self, mtime: int) -> Ref:
        """deep_copy's copy: every node takes `mtime` (0: keeps its time)."""
        return Ref(self.tree, self.off, self.dirent, mtime if mtime else self.time)


class Node:
    """A node in memory.  In a lazy model its children are `base`'s (the
    stored node it was loaded from) overlaid with `children`: a Node or Ref
    replaces the stored child of that name, None removes it.  A big stored
    folder thus costs nothing until a child is listed (a journal touching
    one file of a folder of 87,000 made a Ref of each: 60 MB)."""

    __slots__ = ("children", "keys", "last_changed", "base")

    def __init__(self, last_changed: int = 0) -> None:
        self.children: dict[bytes, Node | Ref | None] = {}
        self.keys: dict[bytes, Value] = {}
        self.last_changed = last_changed
        self.base: Ref | None = None

    def child(self, name: bytes) -> Node | Ref | None:
        if name in self.children:
            return self.children[name]
        return None if self.base is None else self.base.child(name)

    def drop(self, name: bytes) -> None:
        if self.base is None:
            del self.children[name]
        else:
            self.children[name] = None

    def all_children(self) -> dict[bytes, Node | Ref]:
        """Every child, stored or in memory (a listing: built when asked)."""
        if self.base is None:
            return self.children  # type: ignore[return-value]  # no None without a base
        merged: dict[bytes, Node | Ref | None] = self.base.children()
        merged.update(self.children)
        return {name: child for name, child in merged.items() if child is not None}

    def deep_copy(self, mtime: int) -> Node:
        """meta_file_copy_into: every copied node takes `mtime` (or keeps its
        own time when mtime is 0)."""
        top = Node()
        stack = [(self, top)]
        while stack:
            src, dst = stack.pop()
            dst.last_changed = mtime if mtime else src.last_changed
            dst.keys = {k: (list(v) if isinstance(v, list) else v) for k, v in src.keys.items()}
            dst.base = None if src.base is None else src.base.copied(mtime)
            for name, child in src.children.items():
                if not isinstance(child, Node):  # a stored subtree, or a removal
                    dst.children[name] = child if child is None else child.copied(mtime)
                    continue
                copy = Node()
                dst.children[name] = copy
                stack.append((child, copy))
        return top


@dataclass(slots=True)
class Entry:
    """One journal entry, decoded."""

    offset: int
    size: int
    op: int
    mtime: int  # u64 as stored
    path: bytes
    key: bytes | None = None
    value: Value | None = None
    source: bytes | None = None


def split_path(path: bytes) -> list[bytes]:
    return [part for part in path.split(b"/") if part]


class MetaModel:
    """A tree being rebuilt.  `root_raw` is the root's stored (absolute)
    time; `root_touched` says a journal entry has since set the root's time,
    so the displayed root time is `root.last_changed` rather than `root_raw`."""

    def __init__(self, root: Node | None = None, root_raw: int = 0) -> None:
        self.root = root if root is not None else Node()
        self.root_raw = root_raw
        self.root_touched = False

    def _touch(self, node: Node, mtime: int) -> None:
        node.last_changed = mtime
        if node is self.root:
            self.root_touched = True

    def lookup(self, path: bytes, create: bool) -> tuple[Node | None, Node | None, bytes]:
        """(node, parent, last name); node None when absent and not created."""
        node: Node | None = self.root
        parent: Node | None = None
        name = b""
        for name in split_path(path):
            parent = node
            child = node.child(name)
            if child is None:
                if not create:
                    return None, parent, name
                child = node.children[name] = Node()
            elif isinstance(child, Ref):  # about to be read or changed: load it
                child = node.children[name] = child.load()
            node = child
        return node, parent, name

    def remove(self, path: bytes, mtime: int) -> None:
        node, parent, name = self.lookup(path, False)
        if node is None:
            return
        if parent is not None:
            parent.drop(name)
            if mtime:
                self._touch(parent, mtime)
        else:  # the root itself: only its children go
            node.children, node.base = {}, None
            if mtime:
                self._touch(node, mtime)

    def copy(self, source: bytes, dest: bytes, mtime: int) -> None:
        self.remove(dest, mtime)
        src, _, _ = self.lookup(source, False)
        if src is None:
            return
        # Copy first: the destination may lie inside the source.
        temp = src.deep_copy(mtime)
        target, _, _ = self.lookup(dest, True)
        target.keys = temp.keys
        target.children, target.base = temp.children, temp.base
        self._touch(target, temp.last_changed)

    def apply(self, entry: Entry) -> None:
        op = entry.op
        mtime = to_i64(entry.mtime)
        if op == OP_SET or op == OP_SETV:
            node, _, _ = self.lookup(entry.path, True)
            node.keys[entry.key] = list(entry.value) if op == OP_SETV else entry.value
            self._touch(node, mtime)
        elif op == OP_UNSET:
            node, _, _ = self.lookup(entry.path, False)
            if node is not None:
                node.keys.pop(entry.key, None)
                self._touch(node, mtime)
        elif op == OP_COPY:
            self.copy(entry.source, entry.path, mtime)
        elif op == OP_REMOVE:
            self.remove(entry.path, mtime)
        # other op codes: ignored, as gvfs ignores them

    def display_time(self, node: Node) -> int:
        if node is self.root and not self.root_touched:
            return self.root_raw
        return node.last_changed

    def walk(self):
        """(path bytes, node) for every node, root first, depth first."""
        stack: list[tuple[bytes, Node]] = [(b"", self.root)]
        while stack:
            prefix, node = stack.pop()
            yield (prefix or b"/"), node
            for name in sorted(node.children, reverse=True):
                stack.append((prefix + b"/" + name, node.children[name]))
