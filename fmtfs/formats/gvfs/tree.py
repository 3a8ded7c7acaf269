"""Tree files: reading them into a MetaModel and writing a model out exactly
as gvfsd-metadata's metabuilder does (spec §2)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from fmtfs.formats.gvfs.ghash import SlotOrder
from fmtfs.formats.gvfs.model import MetaModel, Node

TREE_MAGIC = b"\xda\x1ameta"
HEADER_SIZE = 32
KEYWORDS_OFFSET = 32
ROTATED_OFFSET = 8
KEY_IS_LIST = 0x80000000
ROTATED = 0xFFFFFFFF
_U32 = 0xFFFFFFFF
MAX_PROBLEMS = 50

_HEADER = struct.Struct(">6sBBIIIIq")
_DIRENT = struct.Struct(">IIII")
_U32S = struct.Struct(">I")


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
    """Pointer checks as in metatree.c: blocks 4-aligned and in bounds,
    strings NUL-terminated before the end of the file."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)

    def block(self, pos: int, length: int) -> bool:
        return pos % 4 == 0 and pos + length <= self.size

    def array(self, pos: int, element: int) -> int | None:
        """The element count of an array block, None when it is invalid."""
        if not self.block(pos, 4):
            return None
        (n,) = _U32S.unpack_from(self.data, pos)
        return n if self.block(pos, 4 + n * element) else None

    def string(self, pos: int) -> bytes | None:
        if pos > self.size:
            return None
        end = self.data.find(b"\0", pos)
        return None if end < 0 else self.data[pos:end]


def read_tree(data: bytes) -> TreeFile:
    """Decode a tree file with gvfs's semantics (times in memory are raw +
    base, the root included).  Raises TreeError for the checks gvfs makes on
    open; damage found later is skipped and listed in `problems`."""
    header = read_header(data)
    if header is None:
        raise TreeError("not a gvfs metadata tree (size or magic)")
    if header.major != 1:
        raise TreeError(f"unsupported tree version {header.major}.{header.minor}")
    r = _Reader(data)
    if not r.block(header.root, 16):
        raise TreeError(f"root pointer {header.root} is invalid")
    n_keys = r.array(header.keywords, 4)
    if n_keys is None:
        raise TreeError(f"keyword table pointer {header.keywords} is invalid")
    keywords: list[bytes] = []
    for off in struct.unpack_from(f">{n_keys}I", data, header.keywords + 4):
        word = r.string(off)
        if word is None:
            raise TreeError(f"keyword at {off} is not NUL-terminated")
        keywords.append(word)

    base = header.base
    problems: list[tuple[int, str]] = []

    def problem(offset: int, message: str) -> None:
        if len(problems) < MAX_PROBLEMS:
            problems.append((offset, message))

    size = len(data)
    find = data.find
    unpack_from = struct.unpack_from

    def string(pos: int) -> bytes | None:
        if pos > size:
            return None
        end = find(b"\0", pos)
        return None if end < 0 else data[pos:end]

    def array(pos: int, element: int) -> int | None:
        if pos & 3 or pos + 4 > size:
            return None
        (n,) = _U32S.unpack_from(data, pos)
        return n if pos + 4 + n * element <= size else None

    n_keywords = len(keywords)
    root = Node()
    _, root_children, root_meta, root_raw = _DIRENT.unpack_from(data, header.root)
    seen_blocks: set[int] = set()
    # (offset of the dirent, node, children offset, metadata offset, raw time)
    stack = [(header.root, root, root_children, root_meta, root_raw)]
    pop, push = stack.pop, stack.append
    while stack:
        dirent_off, node, children_off, meta_off, raw_time = pop()
        node.last_changed = raw_time + base if raw_time else 0
        if meta_off:
            n_meta = array(meta_off, 8)
            if n_meta is None:
                problem(dirent_off + 8, f"metadata pointer {meta_off} is invalid")
            elif n_meta:
                keys = node.keys
                flat = unpack_from(f">{2 * n_meta}I", data, meta_off + 4)
                pos = meta_off + 4
                for i in range(0, 2 * n_meta, 2):
                    key_raw, value_off = flat[i], flat[i + 1]
                    key_id = key_raw & 0x7FFFFFFF
                    if key_id >= n_keywords:
                        problem(pos + 4 * i, f"key id {key_id} is not in the keyword table")
                    elif key_raw & KEY_IS_LIST:
                        count = array(value_off, 4)
                        if count is None:
                            problem(pos + 4 * i + 4, f"string list pointer {value_off} is invalid")
                            continue
                        items = []
                        for item_off in unpack_from(f">{count}I", data, value_off + 4):
                            item = string(item_off)
                            if item is None:
                                problem(value_off, f"list item pointer {item_off} is invalid")
                            else:
                                items.append(item)
                        keys[keywords[key_id]] = items
                    else:
                        value = string(value_off)
                        if value is None:
                            problem(pos + 4 * i + 4, f"value pointer {value_off} is invalid")
                        else:
                            keys[keywords[key_id]] = value
        if children_off:
            n_children = array(children_off, 16)
            if n_children is None:
                problem(dirent_off + 4, f"children pointer {children_off} is invalid")
            elif children_off in seen_blocks:
                problem(dirent_off + 4, f"children block {children_off} is used twice (a loop)")
            elif n_children:
                seen_blocks.add(children_off)
                children = node.children
                flat = unpack_from(f">{4 * n_children}I", data, children_off + 4)
                pos = children_off + 4
                for i in range(0, 4 * n_children, 4):
                    name = string(flat[i])
                    if name is None:
                        problem(pos + 4 * i, f"name pointer {flat[i]} is invalid")
                    else:
                        child = children[name] = Node()
                        push((pos + 4 * i, child, flat[i + 1], flat[i + 2], flat[i + 3]))
    model = MetaModel(root, root_raw)
    return TreeFile(header, keywords, model, problems)


# -- writing -----------------------------------------------------------------


class _Out:
    """metabuilder's output buffer: u32 placeholders patched later, string
    blocks emitted in GHashTable order."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def u32(self, value: int = 0) -> int:
        at = len(self.buf)
        self.buf += _U32S.pack(value & _U32)
        return at

    def patch(self, at: int, value: int) -> None:
        _U32S.pack_into(self.buf, at, value)

    def pad(self) -> None:
        self.buf += b"\0" * (-len(self.buf) % 4)


class _StringBlock:
    """Deduplicated strings of one block; each reference is a placeholder."""

    def __init__(self, out: _Out) -> None:
        self.out = out
        self.refs: dict[bytes, list[int]] = {}
        self.order = SlotOrder()

    def ref(self, text: bytes) -> None:
        at = self.out.u32(0xDEADDEAD)
        refs = self.refs.get(text)
        if refs is None:
            refs = self.refs[text] = []
            self.order.add(text)
        refs.append(at)

    def end(self) -> None:
        out = self.out
        for text in self.order:
            here = len(out.buf)
            out.buf += text + b"\0"
            for at in self.refs[text]:
                out.patch(at, here)
        out.pad()


def _times(root: Node) -> int:
    """metabuilder's time base: minimum non-zero time minus one, moved up
    when the span would overflow 32 bits."""
    t_min = t_max = 0
    stack = [root]
    while stack:
        node = stack.pop()
        t = node.last_changed
        if t_min == 0:
            t_min = t
        elif t != 0 and t < t_min:
            t_min = t
        if t > t_max:
            t_max = t
        stack.extend(node.children.values())
    base = t_min - 1 if t_min != 0 else 0
    if t_max - base > _U32:
        base = t_max - _U32
    return base


def build_tree(model: MetaModel, tag: int) -> bytes:
    """Serialise `model` as gvfsd-metadata would (spec §2.3), with `tag`."""
    root = model.root
    base = _times(root)
    out = _Out()
    out.buf += _HEADER.pack(TREE_MAGIC, 1, 0, 0, tag, 0, 0, base)

    # keywords: every key in use, strcmp order; id = index
    used: set[bytes] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        used.update(node.keys)
        stack.extend(node.children.values())
    keys = sorted(used)
    key_ids = {k: i for i, k in enumerate(keys)}
    out.patch(20, len(out.buf))
    out.u32(len(keys))
    block = _StringBlock(out)
    for k in keys:
        block.ref(k)
    block.end()

    # root dirent, its name, then children blocks breadth first
    out.patch(16, len(out.buf))
    name_at = out.u32()
    children_field = {id(root): out.u32()}
    meta_field = {id(root): out.u32()}
    out.u32(root.last_changed)  # absolute, truncated (spec §2.6)
    out.patch(name_at, len(out.buf))
    out.buf += b"/\0"
    out.pad()

    def rel_time(t: int) -> int:
        if t == 0:
            return 0
        return 1 if t <= base else t - base

    order: list[Node] = []  # breadth-first, for the metadata pass
    queue = [root]
    qi = 0
    while qi < len(queue):
        node = queue[qi]
        qi += 1
        order.append(node)
        out.patch(children_field[id(node)], len(out.buf))
        names = sorted(node.children)
        out.u32(len(names))
        block = _StringBlock(out)
        for name in names:
            child = node.children[name]
            block.ref(name)
            children_field[id(child)] = out.u32()
            meta_field[id(child)] = out.u32()
            out.u32(rel_time(child.last_changed))
            queue.append(child)
        block.end()

    def write_group(nodes: list[Node]) -> None:
        strings = _StringBlock(out)
        stringvs: list[tuple[int, list[bytes]]] = []
        for node in nodes:
            out.patch(meta_field[id(node)], len(out.buf))
            out.u32(len(node.keys))
            for key in sorted(node.keys):
                value = node.keys[key]
                if isinstance(value, list):
                    out.u32(key_ids[key] | KEY_IS_LIST)
                    stringvs.append((out.u32(0xDEADDEAD), value))
                else:
                    out.u32(key_ids[key])
                    strings.ref(value)
        for at, items in reversed(stringvs):  # metabuilder prepends to a list
            out.patch(at, len(out.buf))
            out.u32(len(items))
            for item in items:
                strings.ref(item)
        out.pad()
        strings.end()

    write_group([root])
    for node in order:
        if node.children:
            write_group([node.children[name] for name in sorted(node.children)])
    return bytes(out.buf)


def empty_tree(tag: int) -> bytes:
    return build_tree(MetaModel(), tag)
