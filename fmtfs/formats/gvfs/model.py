"""The in-memory metadata tree and gvfs's rebuild semantics (spec §3.6).

This mirrors what gvfsd-metadata holds while rebuilding: nodes named by raw
bytes, keys and values as bytes, `last_changed` as a signed 64-bit second
count (0 = never).  Journal entries are applied with `apply`."""

from __future__ import annotations

from dataclasses import dataclass

Value = bytes | list[bytes]

OP_SET, OP_SETV, OP_UNSET, OP_COPY, OP_REMOVE = 0, 1, 2, 3, 4
OP_NAMES = {OP_SET: "set", OP_SETV: "setv", OP_UNSET: "unset", OP_COPY: "copy", OP_REMOVE: "remove"}
OP_CODES = {name: code for code, name in OP_NAMES.items()}


def to_i64(value: int) -> int:
    """A u64 journal mtime as gvfs's gint64 last_changed."""
    return value - (1 << 64) if value >= 1 << 63 else value


class Node:
    __slots__ = ("children", "keys", "last_changed")

    def __init__(self, last_changed: int = 0) -> None:
        self.children: dict[bytes, Node] = {}
        self.keys: dict[bytes, Value] = {}
        self.last_changed = last_changed

    def deep_copy(self, mtime: int) -> Node:
        """meta_file_copy_into: every copied node takes `mtime` (or keeps its
        own time when mtime is 0)."""
        top = Node()
        stack = [(self, top)]
        while stack:
            src, dst = stack.pop()
            dst.last_changed = mtime if mtime else src.last_changed
            dst.keys = {k: (list(v) if isinstance(v, list) else v) for k, v in src.keys.items()}
            for name, child in src.children.items():
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
            child = node.children.get(name)
            if child is None:
                if not create:
                    return None, parent, name
                child = node.children[name] = Node()
            node = child
        return node, parent, name

    def remove(self, path: bytes, mtime: int) -> None:
        node, parent, name = self.lookup(path, False)
        if node is None:
            return
        if parent is not None:
            del parent.children[name]
            if mtime:
                self._touch(parent, mtime)
        else:  # the root itself: only its children go
            node.children = {}
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
        target.children = temp.children
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

    def keyed(self) -> list[tuple[bytes, Node]]:
        """(path, node) for every node that has keys, in no particular order."""
        out = []
        stack: list[tuple[bytes, Node]] = [(b"", self.root)]
        pop, push = stack.pop, stack.append
        while stack:
            prefix, node = pop()
            if node.keys:
                out.append((prefix or b"/", node))
            for name, child in node.children.items():
                push((prefix + b"/" + name, child))
        return out
