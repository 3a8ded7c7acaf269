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

from collections.abc import Iterable, Iterator, Sequence
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


def keyed_rows(
    model: MetaModel, tree: LazyTree, lo: bytes | None = None, hi: bytes | None = None
) -> Iterator[Row]:
    """Every node that has keys, in path-bytes order; with `lo` or `hi`,
    only those whose path is in [lo, hi) (a part of the view: part_bounds),
    entering only the folders whose lines may be in it."""
    root = model.root
    if root.keys and (lo is None or lo <= b"/") and (hi is None or b"/" < hi):
        yield b"/", model.display_time(root), root.keys
    # children blocks of the listings being walked: a damaged tree whose
    # block lies below itself is read once on a path, never forever
    blocks: list[int | None] = [tree.root_dirent[0]]
    stack = [iter(_listing(b"", root, tree, *_start(b"", lo)))]
    while stack:
        for _, below, child, path in stack[-1]:
            if below:  # the lines below `path`: paths from path + "/" to before path + "0"
                if hi is not None and path + b"/" >= hi:
                    return
                if lo is not None and path + b"0" <= lo:
                    continue
                block = child.dirent[0] if isinstance(child, Ref) else None
                if block is None or block not in blocks:
                    blocks.append(block)
                    stack.append(iter(_listing(path, child, tree, *_start(path, lo))))
                    break
            else:
                if hi is not None and path >= hi:
                    return
                if lo is not None and path < lo:
                    continue
                if isinstance(child, Ref):
                    keys = tree.keys(child.off, child.dirent[1])
                    if keys:
                        yield path, child.last_changed(), keys
                elif child.keys:
                    yield path, child.last_changed, child.keys
        else:
            stack.pop()
            blocks.pop()


def _start(prefix: bytes, lo: bytes | None) -> tuple[bytes, list[bytes]]:
    """Where the listing of the folder at `prefix` may start for the lines
    from `lo` on: its children named `lo`'s name under it or later, and
    the few named before it whose lines below may still be at lo or
    later.  A child `c`'s own line is prefix/c, the lines below it sort
    from prefix/c/ on: after prefix/c-x ("-" < "/"), so for lo = prefix/c-x
    the folder c's lines below are in the range, and no child named before
    c other than such a prefix of lo's name has a line in it."""
    if lo is None or not lo.startswith(prefix + b"/"):
        return b"", []
    name = lo[len(prefix) + 1 :].split(b"/", 1)[0]
    return name, [name[:i] for i, byte in enumerate(name) if byte < 0x2F and i]


def part_bounds(
    model: MetaModel, tree: LazyTree, part: int, parts: int
) -> tuple[bytes | None, bytes | None] | None:
    """[lo, hi) of the paths of the `part`-th of `parts` runs of the view's
    lines, cut where the tree file's node counts put an equal share of its
    nodes (the journal's few changes are not weighed): None when the tree
    is too small for that many.  Every part's reader finds the same cuts."""
    root = tree.root_dirent
    total = 1 + tree.nodes_below(tree.header.root, root[0])
    cuts: list[bytes] = []
    for k in range(1, parts):
        cut = _path_at(model, tree, k * total // parts)
        if cut is not None and (not cuts or cut > cuts[-1]):
            cuts.append(cut)
    bounds: list[bytes | None] = [None, *cuts, None]
    return (bounds[part], bounds[part + 1]) if part + 1 < len(bounds) else None


def _path_at(model: MetaModel, tree: LazyTree, rank: int) -> bytes | None:
    """The path of about the `rank`-th node in path order ("/" is the 0th)."""
    node: Node | Ref = model.root
    prefix = b""
    rank -= 1  # the root's own line
    while rank >= 0:
        for _, below, child, path in _listing(prefix, node, tree):
            weight = _nodes_below(child, tree) if below else 1
            if rank < weight:
                if not below:
                    return path
                # a stored folder of files (whatever few the journal changed
                # in it): about its rank-th child, found without a listing
                stored = child if isinstance(child, Ref) else child.base
                name = None if stored is None else tree.flat_child_name(stored.off, stored.dirent[0], rank)
                if name is not None:
                    return path + b"/" + name
                node, prefix = child, path
                break
            rank -= weight
        else:
            return None  # the counts were short (a journal removed nodes)
    return None


def _nodes_below(child: Node | Ref, tree: LazyTree) -> int:
    if isinstance(child, Ref):
        return tree.nodes_below(child.off, child.dirent[0])
    stored = child.base
    return len(child.children) + (0 if stored is None else tree.nodes_below(stored.off, stored.dirent[0]))


def _listing(
    prefix: bytes, node: Node | Ref, tree: LazyTree, start: bytes = b"", before: Sequence[bytes] = ()
) -> Iterator[_Entry]:
    """A node's children as entries in path order: each child's own line
    and, for a child that may have children, the lines below it, which sort
    by its name plus "/", among its later siblings.  The children come in
    name order straight from the tree's bytes, so a listing holds only the
    folders it has passed and not yet entered (`later`).  With `start`,
    children named before it are skipped, but for the lines below those
    named in `before` (_start)."""
    later: list[tuple[bytes, int, Node | Ref, bytes]] = []  # a heap
    for seq, name in enumerate(before, start=-len(before)):  # seq: unique, as for the children
        child = node.child(name)
        if child is not None and _may_have_children(child, tree):
            heappush(later, (name + b"/", seq, child, prefix + b"/" + name))
    for seq, (name, child) in enumerate(_in_order(node, tree, start)):
        while later and later[0][0] < name:
            key, _, folder, path = heappop(later)
            yield key, True, folder, path
        path = prefix + b"/" + name
        yield name, False, child, path
        if _may_have_children(child, tree):
            heappush(later, (name + b"/", seq, child, path))
    while later:
        key, _, folder, path = heappop(later)
        yield key, True, folder, path


def _may_have_children(child: Node | Ref, tree: LazyTree) -> bool:
    """False when a node surely has none (cheap: most nodes are files)."""
    if isinstance(child, Ref):
        return tree.may_have_children(child.dirent[0])
    return bool(child.children) or (child.base is not None and tree.may_have_children(child.base.dirent[0]))


def _in_order(node: Node | Ref, tree: LazyTree, start: bytes = b"") -> Iterator[tuple[bytes, Node | Ref]]:
    """(name, child) of a node's children in name order: the stored ones
    (a Ref's, a Node's `base`'s) merged with a Node's own (which replace
    or, as None, remove the stored ones of their name)."""
    base = node if isinstance(node, Ref) else node.base
    stored: Iterator[tuple[bytes, Node | Ref]] = iter(())
    if base is not None:
        time = base.time
        stored = (
            (name, Ref(tree, off, dirent, time))
            for off, name, dirent in tree.sorted_children(base.off, base.dirent[0], start)
        )
    if isinstance(node, Ref) or not node.children:
        yield from stored
        return
    own = node.children
    for name, child in merge(stored, sorted((i for i in own.items() if i[0] >= start), key=_KEY), key=_KEY):
        if own.get(name, child) is child and child is not None:  # a stored child replaced: skipped
            yield name, child
