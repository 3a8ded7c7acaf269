"""`<tree>/metadata.jsonl` without a model of the whole tree.

The effective state of a tree is the tree file plus its journal's valid
entries (spec §3.6).  A rebuild needs every node in memory (read_tree); a
reader does not: the model here starts as the root alone, every child a
Ref into the tree file (LazyTree), and applying the journal loads only the
nodes its entries reach (a journal is at most 4 MiB, the tree any size).
The view's lines are then walked in path order straight from the bytes,
one directory listing at a time, so what a rendering holds is the tree
file's bytes, the nodes the journal touched and the listings on the path
to the current line: a 17 MB tree of 435,000 nodes took 400 MB as a model
plus a list of records, and its lines stream now.

Line order is by path bytes, as a sort of every path would give it: a
directory's own line sorts by its name, the lines below it by its name
plus "/" (so `/a.txt` comes before `/a/b`, since "." < "/")."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from heapq import heappop, heappush, merge
from operator import itemgetter

from fmtfs.formats.gvfs.model import Entry, MetaModel, Node, Ref, Value
from fmtfs.formats.gvfs.tree import LazyTree

# (path, shown last_changed, keys) of a node with keys
Row = tuple[bytes, int, dict[bytes, Value]]
# (sort key, whether it stands for the lines below the child, child, child's path)
_Entry = tuple[bytes, bool, "Node | Ref", bytes]
_KEY = itemgetter(0)


def lazy_model(tree: LazyTree, entries: Iterable[Entry]) -> MetaModel:
    """The tree with journal entries applied, loading only what they reach."""
    model = MetaModel(Ref(tree, tree.header.root, tree.root_dirent).load(), tree.root_dirent[2])
    for entry in entries:
        model.apply(entry)
    return model


def keyed_rows(model: MetaModel, tree: LazyTree) -> Iterator[Row]:
    """Every node that has keys, in path-bytes order."""
    root = model.root
    if root.keys:
        yield b"/", model.display_time(root), root.keys
    # children blocks of the listings being walked: a damaged tree whose
    # block lies below itself is read once on a path, never forever
    blocks: list[int | None] = [tree.root_dirent[0]]
    stack = [iter(_listing(b"", root, tree))]
    while stack:
        for _, below, child, path in stack[-1]:
            if below:
                block = child.dirent[0] if isinstance(child, Ref) else None
                if block is None or block not in blocks:
                    blocks.append(block)
                    stack.append(iter(_listing(path, child, tree)))
                    break
            elif isinstance(child, Ref):
                keys = tree.keys(child.off, child.dirent[1])
                if keys:
                    yield path, child.last_changed(), keys
            elif child.keys:
                yield path, child.last_changed, child.keys
        else:
            stack.pop()
            blocks.pop()


def _listing(prefix: bytes, node: Node | Ref, tree: LazyTree) -> Iterator[_Entry]:
    """A node's children as entries in path order: each child's own line
    and, for a child that may have children, the lines below it, which sort
    by its name plus "/", among its later siblings.  The children come in
    name order straight from the tree's bytes, so a listing holds only the
    folders it has passed and not yet entered (`later`)."""
    later: list[tuple[bytes, int, Node | Ref, bytes]] = []  # a heap
    may_have_children = tree.may_have_children
    for seq, (name, child) in enumerate(_in_order(node, tree)):
        while later and later[0][0] < name:
            key, _, folder, path = heappop(later)
            yield key, True, folder, path
        path = prefix + b"/" + name
        yield name, False, child, path
        if isinstance(child, Ref):
            below = may_have_children(child.dirent[0])
        else:
            below = bool(child.children) or (
                child.base is not None and may_have_children(child.base.dirent[0])
            )
        if below:
            heappush(later, (name + b"/", seq, child, path))
    while later:
        key, _, folder, path = heappop(later)
        yield key, True, folder, path


def _in_order(node: Node | Ref, tree: LazyTree) -> Iterator[tuple[bytes, Node | Ref]]:
    """(name, child) of a node's children in name order: the stored ones
    (a Ref's, a Node's `base`'s) merged with a Node's own (which replace
    or, as None, remove the stored ones of their name)."""
    base = node if isinstance(node, Ref) else node.base
    stored: Iterator[tuple[bytes, Node | Ref]] = iter(())
    if base is not None:
        time = base.time
        stored = (
            (name, Ref(tree, off, dirent, time))
            for off, name, dirent in tree.sorted_children(base.off, base.dirent[0])
        )
    if isinstance(node, Ref) or not node.children:
        yield from stored
        return
    own = node.children
    for name, child in merge(stored, sorted(own.items(), key=_KEY), key=_KEY):
        if own.get(name, child) is child and child is not None:  # a stored child replaced: skipped
            yield name, child
