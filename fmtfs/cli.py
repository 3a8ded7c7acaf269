"""fmtfs mount|umount|ls|cat|info (LAYOUT.md §1)."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from fmtfs.formats import FORMATS, open_source
from fmtfs.formats.base import FormatError
from fmtfs.views import META_INFO, SourceTree

log = logging.getLogger("fmtfs")


class UserError(Exception):
    """Printed as one line, exit status 1, no traceback."""


def _source_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=sorted(FORMATS), help="native format (default: detected)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="index folder (default ~/.cache/fmtfs)")
    parser.add_argument("--key-file", type=Path, help="AES key of encrypted beats segments")
    parser.add_argument("--time-bucket", choices=("minute", "hour", "day"), default="hour")
    parser.add_argument("--descriptor-set", type=Path, help="FileDescriptorSet for proio streams")
    parser.add_argument(
        "--kestrel-journal-size",
        type=int,
        default=16 << 20,
        help="rotate kestrel writer files past this size",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fmtfs", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    mount = commands.add_parser("mount", help="mount SOURCE at MOUNTPOINT")
    mount.add_argument("source", type=Path)
    mount.add_argument("mountpoint", type=Path)
    mount.add_argument("-f", "--foreground", action="store_true")
    mount.add_argument("-o", dest="mount_options", action="append", default=[], metavar="OPT[,OPT...]")
    mount.add_argument("--debug", action="store_true", help="log every request")
    _source_options(mount)

    umount = commands.add_parser("umount", help="unmount MOUNTPOINT")
    umount.add_argument("mountpoint", type=Path)

    info = commands.add_parser("info", help="print the _fmtfs.json document")
    info.add_argument("source", type=Path)
    _source_options(info)

    ls = commands.add_parser("ls", help="list the view tree without mounting")
    ls.add_argument("source", type=Path)
    ls.add_argument("viewpath", nargs="?", default="")
    ls.add_argument("-l", dest="long", action="store_true", help="show sizes")
    ls.add_argument("-R", dest="recursive", action="store_true", help="list sub-folders too")
    _source_options(ls)

    cat = commands.add_parser("cat", help="print a view file without mounting")
    cat.add_argument("source", type=Path)
    cat.add_argument("viewpath")
    _source_options(cat)
    return parser


def format_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "key": resolve_key(args),
        "time_bucket": args.time_bucket,
        "descriptor_set": args.descriptor_set,
        "kestrel_journal_size": args.kestrel_journal_size,
    }


def resolve_key(args: argparse.Namespace) -> bytes | None:
    """The beats AES key from --key-file or FMTFS_BEATS_PASSWORD; never logged."""
    password = os.environ.get("FMTFS_BEATS_PASSWORD")
    if args.key_file is None and not password:
        return None
    from fmtfs.formats.beats import derive_key, read_key_file

    if args.key_file is not None:
        return read_key_file(args.key_file)
    return derive_key(password)


def open_tree(args: argparse.Namespace, readonly: bool = False) -> SourceTree:
    fmt = open_source(args.source, args.format, format_options(args))
    cache_dir = args.cache_dir or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fmtfs"
    return SourceTree(fmt, cache_dir, readonly=readonly)


def view_path(text: str) -> str:
    """A view path as the user typed it (`./a/b`, `a//b/`) -> `a/b`."""
    normal = os.path.normpath("/" + text).lstrip("/")
    return "" if normal == "." else normal


def cmd_info(args: argparse.Namespace) -> None:
    sys.stdout.buffer.write(open_tree(args).read(META_INFO, 0, 1 << 30))


def cmd_cat(args: argparse.Namespace) -> None:
    tree = open_tree(args)
    path = view_path(args.viewpath)
    if tree.is_dir(path):
        raise UserError(f"{args.viewpath}: is a folder")
    if not tree.exists(path):
        raise UserError(f"{args.viewpath}: no such view (try `fmtfs ls {args.source}`)")
    out = sys.stdout.buffer
    offset, size = 0, tree.size(path)
    while offset < size:
        data = tree.read(path, offset, min(1 << 20, size - offset))
        if not data:
            break
        out.write(data)
        offset += len(data)


def cmd_ls(args: argparse.Namespace) -> None:
    tree = open_tree(args)
    root = view_path(args.viewpath)
    if not tree.exists(root):
        raise UserError(f"{args.viewpath}: no such view")
    lines = []

    def show(path: str, label: str) -> None:
        is_dir = tree.is_dir(path)
        name = label + ("/" if is_dir else "")
        lines.append(f"{0 if is_dir else tree.size(path):>12} {name}" if args.long else name)

    def walk(folder: str, prefix: str) -> None:
        for name in tree.listdir(folder):
            path = f"{folder}/{name}" if folder else name
            show(path, prefix + name)
            if args.recursive and tree.is_dir(path):
                walk(path, prefix + name + "/")

    if tree.is_dir(root):
        walk(root, "")
    else:
        show(root, root)
    sys.stdout.write("".join(line + "\n" for line in lines))


def cmd_umount(args: argparse.Namespace) -> None:
    if not os.path.ismount(args.mountpoint):
        raise UserError(f"{args.mountpoint}: not mounted")
    tool = shutil.which("fusermount3") or shutil.which("fusermount")
    if tool is None:
        raise UserError("fusermount3 not found (install Debian's fuse3)")
    done = subprocess.run([tool, "-u", str(args.mountpoint)], capture_output=True, text=True)
    if done.returncode:
        raise UserError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "unmount failed")


def cmd_mount(args: argparse.Namespace) -> None:
    from fmtfs import daemon

    mountpoint = args.mountpoint
    if not mountpoint.is_dir():
        raise UserError(f"{mountpoint}: mount point is not a folder")
    if os.path.ismount(mountpoint):
        raise UserError(f"{mountpoint}: mount point busy (already mounted)")
    options = [opt for group in args.mount_options for opt in group.split(",") if opt]
    readonly = "ro" in options
    if args.foreground:
        logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO, format="fmtfs: %(message)s")
        tree = open_tree(args, readonly)
        daemon.run_mount(tree, mountpoint, options, ready=None)
        return
    daemon.mount_in_background(lambda: open_tree(args, readonly), mountpoint, options, args.debug)


COMMANDS = {"mount": cmd_mount, "umount": cmd_umount, "info": cmd_info, "ls": cmd_ls, "cat": cmd_cat}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        COMMANDS[args.command](args)
    except (UserError, FormatError) as exc:
        print(f"fmtfs: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"fmtfs: {exc.filename or ''}{': ' if exc.filename else ''}{exc.strerror or exc}", file=sys.stderr
        )
        return 1
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
