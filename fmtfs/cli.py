"""The fmtfs command line: mount, umount, index, info, ls, cat (LAYOUT.md §1).

Every command opens the source through the same view layer as the mount, so
`ls`, `cat` and `info` print the bytes a mount shows.  A user mistake is one
line on stderr and exit status 1, never a traceback.

The view layer, progress bars, Parquet and FUSE are imported by the
commands that use them, and the formats are known by their cards
(fmtfs.formats.card): `fmtfs --help` and the parsing of any command line
load neither a format's decoding nor the view layer."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

from fmtfs import __version__
from fmtfs.errors import UserError
from fmtfs.formats import registry
from fmtfs.keptpieces import parse_size
from fmtfs.mountoptions import MaybeAnotherFormats, expand_options

if TYPE_CHECKING:
    from fmtfs.formats.base import Format
    from fmtfs.formats.options import Option
    from fmtfs.views import SourceTree

log = logging.getLogger("fmtfs")

# The formats' titles, options and environment variables come from the
# formats themselves (fmtfs.formats.registry): this module names none.


def about(installed: bool = True) -> str:
    titles = ", ".join(card.title or card.name for card in registry.cards(installed=installed))
    return textwrap.fill(
        f"fmtfs shows binary append-only files ({titles}) as JSON Lines and Parquet files: "
        "mounted with FUSE, or printed without a mount.",
        78,
    )


def environment(installed: bool = True) -> str:
    variables = [pair for card in registry.cards(installed=installed) for pair in card.environment]
    variables.append(("XDG_CACHE_HOME", "the default index folder is $XDG_CACHE_HOME/fmtfs (~/.cache/fmtfs)"))
    return "environment:\n" + "\n".join(_described(name, text) for name, text in variables)


def mount_options(installed: bool = True) -> str:
    settings = ["format=F", "cache_dir=DIR", "rendered_cache=SIZE"]
    settings += [
        f"{o.name}={o.metavar or '|'.join(o.choices) or 'VALUE'}" for o in registry.all_options(installed)
    ]
    settings += ["log_file=FILE", "debug", "verbose"]
    listed = textwrap.fill(", ".join(settings), 76, initial_indent="  ", subsequent_indent="    ")
    return "\n".join(
        [
            "mount options (-o, comma-separated, as in mount(8) and /etc/fstab):",
            _described("ro", "refuse every write with EROFS"),
            _described("allow_other", "let other users reach the mount (FUSE option)"),
            listed,
            _described("", "the same as the options of the same name below (dashes or underscores)"),
            _described("_netdev, noauto, nofail, auto, user, defaults", "for mount(8) alone: ignored"),
            _described("anything else", "passed to FUSE (e.g. default_permissions)"),
        ]
    )


def _described(name: str, text: str) -> str:
    """`  NAME   text` in two columns, as argparse lays out its options."""
    lines = textwrap.wrap(text, 54)
    if len(name) > 20:
        return f"  {name}\n" + "\n".join(" " * 24 + line for line in lines)
    return "\n".join(f"  {name if i == 0 else '':<22}{line}" for i, line in enumerate(lines))


def _log_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("logging")
    group.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="say more: -v progress and mounts, -vv every detail",
    )
    group.add_argument("-q", "--quiet", action="store_true", help="errors only (no warnings)")
    group.add_argument(
        "--log-file",
        type=Path,
        metavar="FILE",
        help="append log lines to FILE (a background mount logs to CACHE_DIR/fmtfs.log by default)",
    )


def _source_options(parser: argparse.ArgumentParser, installed: bool) -> None:
    parser.add_argument(
        "source",
        type=Path,
        help="the native files: a folder (or, for formats that read one, a single file)",
    )
    group = parser.add_argument_group("source options")
    group.add_argument(
        "--format",
        choices=registry.names(installed),
        help="native format (default: detected from the files' magic bytes)",
    )
    group.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where the index and the Parquet twins are kept (default ~/.cache/fmtfs)",
    )
    group.add_argument(
        "--rendered-cache",
        type=_size,
        default=None,
        metavar="SIZE",
        help="disk for the rendered views kept in the cache folder, lz4-compressed, so that no later "
        "mount decodes them again: auto (default: up to 8G or a quarter of the free space), off, "
        "or a size such as 512M",
    )
    options = registry.all_options(installed)
    parser.set_defaults(format_option_names=[option.name for option in options])
    for option in options:  # every format's own options
        group.add_argument(
            option.flag,
            dest=option.name,
            type=_argument_type(option),
            choices=option.choices or None,
            default=None,  # not given: the format's default applies
            metavar=option.metavar,
            help=option.help_text(),
        )


def _size(text: str) -> int | None:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _argument_type(option: Option) -> Callable[[str], Any]:
    """option.parse_text as argparse wants it: its message in the usage error."""

    def parse(text: str) -> Any:
        try:
            return option.parse_text(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _command(
    commands: argparse._SubParsersAction, name: str, summary: str, epilog: str | None = None
) -> argparse.ArgumentParser:
    return commands.add_parser(
        name,
        help=summary,
        description=summary,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


class UnparsedHere(Exception):
    """A command line the built-in formats' parser could not take."""


class _BuiltInParser(argparse.ArgumentParser):
    """The parser of the built-in formats' options: an error raises
    UnparsedHere (main then parses with every format's) instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise UnparsedHere(message)


def build_parser(installed: bool = True) -> argparse.ArgumentParser:
    """The command line's parser, with every format's options (`installed`
    False: the built-in formats' alone, and errors raise UnparsedHere)."""
    env = environment(installed)
    parser = (argparse.ArgumentParser if installed else _BuiltInParser)(
        prog="fmtfs",
        description=about(installed),
        epilog=env + "\n\nRun `fmtfs COMMAND --help` for a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fmtfs {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    mount = _command(
        commands,
        "mount",
        "index SOURCE, mount its views at MOUNTPOINT, and return once the mount answers",
        mount_options(installed) + "\n\n" + env,
    )
    _source_options(mount, installed)
    mount.add_argument("mountpoint", type=Path, help="an existing, empty folder")
    mount.add_argument(
        "-f",
        "--foreground",
        action="store_true",
        help="serve in the foreground, logging to stderr, until unmounted or interrupted",
    )
    mount.add_argument(
        "-o",
        dest="mount_options",
        action="append",
        default=[],
        metavar="OPT[,OPT...]",
        help="mount options (listed below)",
    )
    mount.add_argument("--debug", action="store_true", help="log every FUSE request (implies -vv)")
    _log_options(mount)

    umount = _command(commands, "umount", "unmount MOUNTPOINT (the server then exits)")
    umount.add_argument("mountpoint", type=Path, help="where fmtfs is mounted")
    _log_options(umount)

    index = _command(
        commands,
        "index",
        "build SOURCE's on-disk index ahead of a mount, showing progress on a terminal",
        env,
    )
    index.add_argument(
        "--no-parquet",
        action="store_true",
        help="do not build the Parquet twins (by default they are built too, so a mount lists them at once)",
    )
    _source_options(index, installed)
    _log_options(index)

    info = _command(
        commands,
        "info",
        "summarise SOURCE: format, streams, records, sizes, time range, errors",
        env,
    )
    _source_options(info, installed)
    info.add_argument("--json", action="store_true", help="print the _fmtfs.json document instead")
    _log_options(info)

    ls = _command(commands, "ls", "list SOURCE's views without mounting", env)
    _source_options(ls, installed)
    ls.add_argument(
        "viewpath", nargs="?", default="", help="a folder or file of the view tree (default: root)"
    )
    ls.add_argument("-l", dest="long", action="store_true", help="show sizes")
    ls.add_argument("-R", dest="recursive", action="store_true", help="list sub-folders too")
    _log_options(ls)

    cat = _command(commands, "cat", "print a view file of SOURCE without mounting", env)
    _source_options(cat, installed)
    cat.add_argument("viewpath", help="the view's path, as `fmtfs ls -R SOURCE` shows it")
    _log_options(cat)
    return parser


class TerminalFormatter(logging.Formatter):
    """`fmtfs: warning: segments/1.seg at offset 12: bad CRC`."""

    def format(self, record: logging.LogRecord) -> str:
        return f"fmtfs: {record.levelname.lower()}: {record.getMessage()}"


def setup_logging(args: argparse.Namespace) -> None:
    """Warnings (damaged records, refused writes) and errors by default."""
    level = logging.WARNING
    if getattr(args, "debug", False) or args.verbose >= 2:
        level = logging.DEBUG
    elif args.verbose == 1:
        level = logging.INFO
    elif args.quiet:
        level = logging.ERROR
    handler: logging.Handler
    if args.log_file is not None:
        handler = logging.FileHandler(args.log_file)
        handler.setFormatter(logging.Formatter(f"%(asctime)s [{os.getpid()}] %(levelname)s %(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(TerminalFormatter())
    log.handlers[:] = [handler]
    log.setLevel(level)
    log.propagate = False


def format_options(args: argparse.Namespace) -> dict[str, Any]:
    """The format options given on the command line, parsed (not given: absent)."""
    given = {name: getattr(args, name) for name in args.format_option_names}
    return {name: value for name, value in given.items() if value is not None}


def cache_dir(args: argparse.Namespace) -> Path:
    return args.cache_dir or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fmtfs"


def open_format(args: argparse.Namespace) -> Format:
    given = format_options(args)
    fmt = registry.open_source(args.source, args.format, given)
    declared = {option.name for option in fmt.declared_options}
    for name in sorted(set(given) - declared):
        log.warning("--%s does not apply to %s sources: ignored", name.replace("_", "-"), fmt.name)
    return fmt


def open_tree_showing_progress(
    args: argparse.Namespace,
    readonly: bool = False,
    while_scanning: Callable[[], object] | None = None,
    watch: bool = False,
) -> SourceTree:
    """SOURCE's tree, its index built or brought up to date first: streams
    scanned on every core (a first `fmtfs info` of 100 MB took 4.9 s on one,
    2.7 s on two), with a progress bar while it indexes when stderr is a
    terminal (SourceTree's `while_scanning` runs meanwhile; `watch`: the
    mount's, SourceTree's)."""
    from fmtfs.progress import IndexProgress, native_size, on_terminal
    from fmtfs.views import SourceTree

    fmt = open_format(args)
    settings = {
        "readonly": readonly,
        "workers": os.cpu_count() or 1,
        "keep_limit": args.rendered_cache,
        "while_scanning": while_scanning,
        "watch": watch,
    }
    if not on_terminal():
        return SourceTree(fmt, cache_dir(args), **settings)
    bar = IndexProgress(native_size(s.path for s in fmt.streams()))
    try:
        return SourceTree(fmt, cache_dir(args), progress=bar, **settings)
    finally:
        bar.close()


def warn_problems(tree: SourceTree) -> None:
    """Damaged records met while indexing, with file and offset, as
    warnings (all problems are in _errors.jsonl; the log says where each is)."""
    for problem in tree.early_problems():
        log.warning("%s at offset %s: %s", problem.file, problem.offset, problem.error)


def view_path(text: str) -> str:
    """A view path as the user typed it (`./a/b`, `a//b/`) -> `a/b`."""
    normal = os.path.normpath("/" + text).lstrip("/")
    return "" if normal == "." else normal


def cmd_index(args: argparse.Namespace) -> None:
    from fmtfs import summary
    from fmtfs.progress import on_terminal

    started = time.monotonic()
    tree = open_tree_showing_progress(args)
    seconds = time.monotonic() - started
    if not on_terminal() and not args.quiet:  # no bar was drawn: one line per file instead
        for entry in tree.entries:
            size = summary.human_size(entry.identity.size)
            print(
                f"fmtfs: indexed {entry.stream.path}: {entry.record_count:,} records, {size}", file=sys.stderr
            )
    warn_problems(tree)
    records = sum(e.record_count for e in tree.entries)
    native = sum(e.identity.size for e in tree.entries)
    print(
        f"indexed {len(tree.entries):,} streams, {records:,} records, {summary.human_size(native)} "
        f"in {seconds:.1f} s (index in {cache_dir(args)})"
    )
    if not args.no_parquet:
        build_twins_showing_progress(tree)


def build_twins_showing_progress(tree: SourceTree) -> None:
    """The Parquet twins not on disk yet, so that a mount lists and serves
    them at once (a bar on a terminal, one line when done)."""
    from fmtfs import twinbuilder
    from fmtfs.progress import TwinProgress, on_terminal

    started = time.monotonic()
    bar = TwinProgress() if on_terminal() else None
    try:
        built = twinbuilder.build_all(tree, bar)
    finally:
        if bar is not None:
            bar.close()
    print(f"built {built:,} Parquet twins in {time.monotonic() - started:.1f} s")


def cmd_info(args: argparse.Namespace) -> None:
    from fmtfs import summary
    from fmtfs.views import META_INFO

    tree = open_tree_showing_progress(args)
    if args.json:
        sys.stdout.buffer.write(tree.read(META_INFO, 0, tree.size(META_INFO)))
    else:
        sys.stdout.write(summary.summary(tree))


def cmd_cat(args: argparse.Namespace) -> None:
    tree = open_tree_showing_progress(args)
    warn_problems(tree)
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
    tree = open_tree_showing_progress(args)
    warn_problems(tree)
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
    from fmtfs import background

    mountpoint = args.mountpoint
    if not mountpoint.exists():
        raise UserError(f"{mountpoint}: mount point does not exist (create the folder first)")
    if not mountpoint.is_dir():
        raise UserError(f"{mountpoint}: mount point is not a folder")
    if os.path.ismount(mountpoint):
        raise UserError(f"{mountpoint}: mount point busy (already mounted)")
    options = [opt for group in args.mount_options for opt in group.split(",") if opt]
    readonly = "ro" in options

    def prepare() -> SourceTree:
        from fmtfs.heap import reuse_freed_buffers

        reuse_freed_buffers()  # before any thread starts, and inherited by the forked workers
        # the FUSE server's modules (pyfuse3, trio: 0.13 s of imports) are
        # imported while the decode workers scan a source not indexed yet
        tree = open_tree_showing_progress(args, readonly, while_scanning=_import_server, watch=True)
        # the workers start rendering ahead (fmtfs.prerender) before this
        # process imports the server, if the scan did not: 0.13 s sooner
        tree.decode_in_workers()
        warn_problems(tree)
        return tree

    def serve(tree: SourceTree, ready: int | None) -> None:
        _import_server().run_mount(tree, mountpoint, options, ready)

    if args.foreground:
        serve(prepare(), None)
        return
    background.mount_in_background(prepare, serve, args.log_file or cache_dir(args) / "fmtfs.log")


def _import_server() -> ModuleType:
    import fmtfs.daemon

    return fmtfs.daemon


COMMANDS = {
    "mount": cmd_mount,
    "umount": cmd_umount,
    "index": cmd_index,
    "info": cmd_info,
    "ls": cmd_ls,
    "cat": cmd_cat,
}


def command_line(argv: list[str], installed: bool = True) -> list[str]:
    """mount.fuse3 starts `fmtfs SOURCE MOUNTPOINT -o OPTIONS` (no command
    word); `-o` lists may carry fmtfs's own settings (format=...)."""
    if len(argv) >= 2 and argv[0] not in COMMANDS and not argv[0].startswith("-") and argv[1][:1] != "-":
        argv = ["mount", *argv]
    if argv and argv[0] == "mount":
        argv = ["mount", *expand_options(argv[1:], installed)]
    return argv


def parse_command_line(argv: list[str]) -> argparse.Namespace:
    """`argv` parsed knowing the built-in formats alone when that is enough:
    knowing the others means reading the installed packages' metadata,
    about 35 ms of every command's start.  Help, and anything the built-in
    parse cannot take (another format's option or name, an `-o name=value`
    that may be one), are parsed knowing every format."""
    if not {"-h", "--help"} & set(argv):
        try:
            return build_parser(installed=False).parse_args(command_line(argv, installed=False))
        except (UnparsedHere, MaybeAnotherFormats):
            pass
    return build_parser().parse_args(command_line(argv))


def main(argv: list[str] | None = None) -> int:
    args = parse_command_line(sys.argv[1:] if argv is None else argv)
    try:
        setup_logging(args)
        COMMANDS[args.command](args)
        sys.stdout.flush()
    except UserError as exc:  # FormatError and MountRefused too
        print(f"fmtfs: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # the reader went away (`fmtfs cat ... | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"fmtfs: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fmtfs: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
