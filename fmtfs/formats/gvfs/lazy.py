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


def _listing(prefix: bytes, node: Node | Ref, tree: LazyTree) -> list[_Entry]:
    """A node's children as entries in path order: each child's own line
    and, for a child that may have children, the lines below it."""
    entries: list[_Entry] = []
    add = entries.append
    may_have_children = tree.may_have_children
    for name, child in node.all_children().items() if isinstance(node, Node) else node.children().items():
        path = prefix + b"/" + name
        add((name, False, child, path))
        if isinstance(child, Ref):
            below = may_have_children(child.dirent[0])
        else:
            below = bool(child.children) or (
                child.base is not None and may_have_children(child.base.dirent[0])
            )
        if below:
            add((name + b"/", True, child, path))
    entries.sort(key=_KEY)  # tree blocks are sorted already: a linear pass
    return entries
