"""`-o` option lists as mount(8) and /etc/fstab give them, turned into
`fmtfs mount` arguments.

fmtfs's own settings ride in the list as `name=value`: the core ones
(format=, cache_dir=, rendered_cache=, log_file=) and every option a format declares (as
declared, `key_file=`, or with dashes, `key-file=`; fmtfs.formats.options);
flags are `debug` and `verbose`.  Options for mount(8) alone (`_netdev`,
`noauto`, `nofail`, ...) are dropped, as mount.fuse3 does; everything else
goes to FUSE (ro, allow_other, ...)."""

from __future__ import annotations

from fmtfs.formats.registry import all_options

# the settings every source has, whatever its format
CORE_SETTINGS = {
    "format": "--format",
    "cache_dir": "--cache-dir",
    "rendered_cache": "--rendered-cache",
    "log_file": "--log-file",
}
FLAGS = {"debug": "--debug", "verbose": "-v"}
# read by mount(8), systemd and mount.fuse3 themselves, never by the file system
FOR_MOUNT_ONLY = {"_netdev", "noauto", "auto", "nofail", "user", "users", "nouser", "defaults", "rw"}
FOR_MOUNT_ONLY_PREFIXES = ("x-", "comment=", "fsname=", "subtype=")


class MaybeAnotherFormats(Exception):
    """An `-o name=value` no built-in format declares: FUSE's, or a setting
    of a format installed from another package (split_options with
    installed=False cannot tell)."""


def settings(installed: bool = True) -> dict[str, str]:
    """`-o` name -> the `fmtfs mount` argument it stands for (`installed`
    False: the built-in formats' settings alone)."""
    out: dict[str, str] = {}
    for name, flag in CORE_SETTINGS.items():
        out[name] = out[name.replace("_", "-")] = flag
    for option in all_options(installed):
        for name in option.mount_names:
            out[name] = option.flag
    return out


def split_options(options: list[str], installed: bool = True) -> tuple[list[str], list[str]]:
    """`-o` options -> (fmtfs arguments, options for FUSE)."""
    named = settings(installed)
    arguments: list[str] = []
    fuse: list[str] = []
    for option in options:
        name, has_value, value = option.partition("=")
        if name in named and has_value:
            arguments += [named[name], value]
        elif name in FLAGS and not has_value:
            arguments.append(FLAGS[name])
        elif option in FOR_MOUNT_ONLY or option.startswith(FOR_MOUNT_ONLY_PREFIXES):
            continue
        elif has_value and not installed:
            raise MaybeAnotherFormats(name)
        elif option:
            fuse.append(option)
    return arguments, fuse


def expand_options(words: list[str], installed: bool = True) -> list[str]:
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
    arguments, fuse = split_options(options, installed)
    return kept + arguments + (["-o", ",".join(fuse)] if fuse else [])
