"""How much of a file's page cache sits in large folios.

    scripts/page_folios.py FILE ...     (as root: it reads /proc/kpageflags)

A warm `cat` copies page-cached bytes, and it runs at the speed of the
page cache's folios: the bench's warm `cat` figure compares a view with a
freshly written regular copy, which ext4 keeps in large folios on recent
kernels, while the kernel's FUSE may keep every view in 4 KiB pages,
whatever the filesystem does (see the README's *Benchmarks*). This prints,
for each file, how many of its pages are in large folios and how many
are single 4 KiB pages. Pages not cached yet are read in first (the file
is mapped and every page touched).

How: each page's physical frame from /proc/self/pagemap, then that
frame's flags from /proc/kpageflags (COMPOUND_HEAD and COMPOUND_TAIL mark
the pages of a large folio; Documentation/admin-guide/mm/pagemap.rst)."""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import struct
from dataclasses import dataclass

PAGE = mmap.PAGESIZE
PRESENT = 1 << 63
PFN_MASK = (1 << 55) - 1
COMPOUND_HEAD = 1 << 15
COMPOUND_TAIL = 1 << 16


@dataclass
class Folios:
    pages: int = 0
    small: int = 0  # pages that are a folio of their own
    large_pages: int = 0  # pages in large folios
    large: int = 0  # large folios (their heads)
    largest: int = 0  # pages of the largest folio seen
    absent: int = 0  # pages the mapping did not get (file shrank meanwhile)


def folios(path: str) -> Folios:
    """The folios behind `path`'s page cache, its pages read in if need be."""
    found = Folios()
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            return found
        # a private mapping maps the page cache's own pages until written,
        # and gives ctypes the writable buffer it needs for the address
        with mmap.mmap(file.fileno(), size, access=mmap.ACCESS_COPY) as mapped:
            anchor = ctypes.c_char.from_buffer(mapped)
            base = ctypes.addressof(anchor) // PAGE
            del anchor  # the mapping cannot close while exported
            found.pages = (size + PAGE - 1) // PAGE
            for page in range(found.pages):
                mapped[page * PAGE]  # mapped now (read in if not cached)
            with open("/proc/self/pagemap", "rb") as pagemap, open("/proc/kpageflags", "rb") as flags:
                pagemap.seek(base * 8)
                entries = struct.unpack(f"<{found.pages}Q", pagemap.read(8 * found.pages))
                run = 0
                for entry in entries:
                    if not entry & PRESENT:
                        found.absent += 1
                        continue
                    flags.seek((entry & PFN_MASK) * 8)
                    (kind,) = struct.unpack("<Q", flags.read(8))
                    if kind & COMPOUND_HEAD:
                        found.large += 1
                        found.large_pages += 1
                        run = 1
                    elif kind & COMPOUND_TAIL:
                        found.large_pages += 1
                        run += 1
                    else:
                        found.small += 1
                        run = 0
                    found.largest = max(found.largest, run)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", metavar="FILE")
    args = parser.parse_args()
    for path in args.files:
        f = folios(path)
        print(
            f"{path}: {f.pages} pages, {f.large_pages} in {f.large} large folios"
            f" (largest {f.largest * PAGE // 1024} KiB), {f.small} in 4 KiB folios"
            + (f", {f.absent} not mapped" if f.absent else "")
        )


if __name__ == "__main__":
    main()
