"""Mounting the way administrators do: `mount -t fuse.fmtfs`, `/etc/fstab`.

mount(8) runs a helper as `HELPER SOURCE MOUNTPOINT [-sfnv] [-o OPTIONS]`.
For `-t fuse.fmtfs`, Debian's `mount.fuse3` is that helper: it drops the
options meant for mount(8) alone and starts `fmtfs SOURCE MOUNTPOINT -o
OPTIONS` through /bin/sh, so `fmtfs` must be in the system's own paths
(setup links /usr/local/bin/fmtfs).  For `-t fmtfs`, mount(8) runs
`mount.fmtfs` (this module's `main`) directly.  Both end in `fmtfs mount`.

fmtfs's own settings ride in the option list as `key=value` (format=,
cache_dir=, key_file=, time_bucket=, descriptor_set=,
kestrel_journal_size=, log_file=) or flags (debug, verbose); options for mount(8)
alone (`_netdev`, `noauto`, `nofail`, ...) are ignored, as mount.fuse3
does; everything else goes to FUSE (ro, allow_other, ...)."""

from __future__ import annotations

import sys

# option name -> the `fmtfs mount` argument it stands for
SETTINGS = {
    "format": "--format",
    "cache_dir": "--cache-dir",
    "key_file": "--key-file",
    "time_bucket": "--time-bucket",
    "descriptor_set": "--descriptor-set",
    "kestrel_journal_size": "--kestrel-journal-size",
    "log_file": "--log-file",
}
FLAGS = {"debug": "--debug", "verbose": "-v"}
# read by mount(8), systemd and mount.fuse3 themselves, never by the file system
FOR_MOUNT_ONLY = {"_netdev", "noauto", "auto", "nofail", "user", "users", "nouser", "defaults", "rw"}
FOR_MOUNT_ONLY_PREFIXES = ("x-", "comment=", "fsname=", "subtype=")


def split_options(options: list[str]) -> tuple[list[str], list[str]]:
    """`-o` options -> (fmtfs arguments, options for FUSE)."""
    arguments: list[str] = []
    fuse: list[str] = []
    for option in options:
        name, has_value, value = option.partition("=")
        if name in SETTINGS and has_value:
            arguments += [SETTINGS[name], value]
        elif name in FLAGS and not has_value:
            arguments.append(FLAGS[name])
        elif option in FOR_MOUNT_ONLY or option.startswith(FOR_MOUNT_ONLY_PREFIXES):
            continue
        elif option:
            fuse.append(option)
    return arguments, fuse


def expand_options(words: list[str]) -> list[str]:
    """`fmtfs mount` arguments with every `-o` list split: fmtfs's settings
    become their own arguments (after the others, so they win), options for
    mount(8) alone are dropped, one `-o` keeps what FUSE gets."""
    kept: list[str] = []
    options: list[str] = []
    it = iter(words)
    for word in it:
        if word == "-o":
            options += next(it, "").split(",")
        elif word.startswith("-o"):
            options += word[2:].split(",")
        else:
            kept.append(word)
    arguments, fuse = split_options(options)
    return kept + arguments + (["-o", ",".join(fuse)] if fuse else [])


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
    return ["mount", *expand_options(words)]


def main(argv: list[str] | None = None) -> int:
    """`mount.fmtfs SOURCE MOUNTPOINT -o OPTIONS` (mount(8), /etc/fstab)."""
    from fmtfs.cli import main as fmtfs_main

    return fmtfs_main(mount_arguments(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
