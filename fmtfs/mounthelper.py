"""Mounting the way administrators do: `mount -t fuse.fmtfs`, `/etc/fstab`.

mount(8) runs a helper as `HELPER SOURCE MOUNTPOINT [-sfnv] [-o OPTIONS]`.
For `-t fuse.fmtfs`, Debian's `mount.fuse3` is that helper: it drops the
options meant for mount(8) alone and starts `fmtfs SOURCE MOUNTPOINT -o
OPTIONS` through /bin/sh, so `fmtfs` must be in the system's own paths
(setup links /usr/local/bin/fmtfs).  For `-t fmtfs`, mount(8) runs
`mount.fmtfs` (this module's `main`) directly.  Both end in `fmtfs mount`,
whose `-o` lists fmtfs.mountoptions reads."""

from __future__ import annotations

import sys

from fmtfs.cli import main as fmtfs_main


def mount_arguments(argv: list[str]) -> list[str]:
    """A mount helper's command line (`SOURCE MOUNTPOINT [-sfnv] [-o ...]
    [-t TYPE]`) -> `fmtfs mount` arguments."""
    words: list[str] = []
    it = iter(argv)
    for word in it:
        if word == "-t":
            next(it, None)  # the type mount(8) was asked for: it brought us here
        elif word in ("-s", "-n", "-f"):
            continue  # sloppy, no mtab, fake: nothing to do differently
        else:
            words.append(word)
    return ["mount", *words]


def main(argv: list[str] | None = None) -> int:
    """`mount.fmtfs SOURCE MOUNTPOINT -o OPTIONS` (mount(8), /etc/fstab)."""
    return fmtfs_main(mount_arguments(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
