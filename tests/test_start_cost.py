"""What a command does before its real work (the fixed start cost of every
`fmtfs` command): which modules parsing and detection import, and the
problems a command waits for before serving or printing."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from fmtfs.formats import registry
from fmtfs.samples.wallaby import generate as wallaby_sample
from tests.conftest import FIXTURES
from tests.mounting import fmtfs, mounted, unmount

# each built-in format's own module (its decoding), which only opening that format loads
FORMAT_MODULES = {
    "beats": "fmtfs.formats.beats.format",
    "kestrel": "fmtfs.formats.kestrel.format",
    "wallaby": "fmtfs.formats.wallaby.format",
    "gvfs": "fmtfs.formats.gvfs.format",
    "proio": "fmtfs.formats.proio.format",
}
VIEW_LAYER = ("fmtfs.views", "fmtfs.index", "fmtfs.decoders", "pyfuse3", "trio", "pyarrow", "tqdm")


def loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    done = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print('\\n'.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(done.stdout.split())


def test_help_and_parsing_load_no_format_and_no_view_layer(tmp_path: Path) -> None:
    code = f"""
from fmtfs import cli
try:
    cli.build_parser().parse_args(["mount", "--help"])  # every format's options
except SystemExit:
    pass
words = ["mount", "SRC", "MNT", "--key-file", "{tmp_path}/k", "--time-bucket", "day"]
args = cli.build_parser().parse_args(cli.command_line(words + ["-o", "ro,descriptor_set=x"]))
assert args.time_bucket == "day" and args.descriptor_set == Path("x") and str(args.key_file).endswith("/k")
"""
    loaded = loaded_after("from pathlib import Path\n" + code)
    assert "fmtfs.cli" in loaded and "fmtfs.formats.registry" in loaded
    assert loaded.isdisjoint(FORMAT_MODULES.values()), loaded & set(FORMAT_MODULES.values())
    assert loaded.isdisjoint(VIEW_LAYER), loaded & set(VIEW_LAYER)


def test_a_built_in_formats_command_line_reads_no_package_metadata(tmp_path: Path) -> None:
    """Parsing knows the built-in formats alone unless it must know more
    (reading the installed packages' entry points costs about 35 ms)."""
    parsed = f"""
from fmtfs import cli
words = ["mount", "SRC", "MNT", "--key-file", "{tmp_path}/k", "-o", "ro,time_bucket=day,allow_other"]
args = cli.parse_command_line(words)
assert args.time_bucket == "day" and args.mount_options == ["ro,allow_other"], args
assert cli.format_options(args) == {{"time_bucket": "day", "key_file": Path("{tmp_path}/k")}}
"""
    assert "importlib.metadata" not in loaded_after("from pathlib import Path\n" + parsed)
    # an -o name=value no built-in format declares may be another format's:
    # every format is known then, and it goes to FUSE as before
    fuse = """
from fmtfs import cli
args = cli.parse_command_line(["SRC", "MNT", "-o", "max_read=65536,format=wallaby"])
assert args.mount_options == ["max_read=65536"] and args.format == "wallaby", args
"""
    assert "importlib.metadata" in loaded_after(fuse)
    # so are help and a format name that is not built in (an error here)
    for words in (["ls", "--help"], ["ls", "SRC", "--format", "tally"]):
        code = f"from fmtfs import cli\ntry:\n    cli.parse_command_line({words!r})\n"
        assert "importlib.metadata" in loaded_after(code + "except SystemExit:\n    pass"), words


def _sample(name: str, folder: Path) -> Path:
    folder.mkdir(parents=True)
    importlib.import_module(f"fmtfs.samples.{name}").generate(folder, 50)
    return folder


def test_cards_say_what_the_classes_say(tmp_path: Path) -> None:
    # a built-in format's class takes its card's facts (Format(card=...))
    samples = {name: _sample(name, tmp_path / name) for name in registry.BUILTIN}
    facts = ("name", "title", "looks_for", "declared_options", "environment")
    for name in registry.BUILTIN:
        card, cls = registry.described(name), registry.format_class(name)
        assert card is not cls
        assert [getattr(card, f) for f in facts] == [getattr(cls, f) for f in facts]
        detected = {other: cls.detect(source) for other, source in samples.items()}
        assert detected == {other: other == name for other in samples}
        assert detected == {other: card.detect(source) for other, source in samples.items()}


@pytest.mark.parametrize("name", list(FORMAT_MODULES))
def test_detecting_and_opening_load_that_format_alone(name: str, tmp_path: Path) -> None:
    source = _sample(name, tmp_path / "src")
    detect = f"""
from pathlib import Path
from fmtfs.formats import registry
assert registry.detect(Path("{source}")) == "{name}"
"""
    detected = loaded_after(detect)
    assert detected.isdisjoint(FORMAT_MODULES.values()), detected & set(FORMAT_MODULES.values())
    opened = loaded_after(detect + f'registry.open_source(Path("{source}"), None, {{}})')
    assert FORMAT_MODULES[name] in opened
    # built-in names are reserved: no installed package's metadata is read
    assert "importlib.metadata" not in opened
    assert opened.isdisjoint(m for other, m in FORMAT_MODULES.items() if other != name)


def _looping_gvfs_tree(folder: Path) -> Path:
    """A gvfs folder whose `home` tree has a children block pointing back
    at the root's (a loop the tree reader reports and skips)."""
    data = bytearray((FIXTURES / "gvfs" / "02-after-timer-flush" / "home").read_bytes())
    data[128:132] = (120).to_bytes(4, "big")
    folder.mkdir()
    (folder / "home").write_bytes(bytes(data))
    return folder


def test_gvfs_tree_damage_is_listed_not_waited_for(tmp_path: Path) -> None:
    source = _looping_gvfs_tree(tmp_path / "meta")
    cache = tmp_path / "c"
    listing = fmtfs("ls", source, "--cache-dir", cache)
    # the whole-tree read that finds the loop is not done before listing
    assert listing.stderr == b"" and "home/" in listing.stdout.decode().split()
    errors = fmtfs("cat", source, "_errors.jsonl", "--cache-dir", cache)
    problems = [orjson.loads(line) for line in errors.stdout.splitlines()]
    assert any(p["file"] == "home" and "loop" in p["error"] for p in problems)
    assert errors.stderr == b""
    text = fmtfs("info", source, "--cache-dir", cache).stdout.decode()
    assert f"errors:   {len(problems)} " in text and "home at offset" in text


def test_gvfs_mount_lists_tree_damage_in_errors_file(tmp_path: Path) -> None:
    source = _looping_gvfs_tree(tmp_path / "meta")
    with mounted(source) as mnt:
        problems = [orjson.loads(line) for line in (mnt / "_errors.jsonl").read_bytes().splitlines()]
        document = orjson.loads((mnt / "_fmtfs.json").read_bytes())
    assert any(p["file"] == "home" and "loop" in p["error"] for p in problems)
    assert document["errors"] == len(problems)


def _processes_naming(path: Path) -> list[int]:
    """Live processes whose command line names `path` (a mount's server)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(path).encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue  # ended meanwhile
    return found


def test_a_mount_failing_while_it_indexes_leaves_no_server(tmp_path: Path) -> None:
    # the server is forked before the command indexes: it must end with it
    source = tmp_path / "junk"
    source.mkdir()
    (source / "x.bin").write_bytes(b"junk" * 100)
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    done = fmtfs("mount", source, mountpoint, "--cache-dir", tmp_path / "c", check=False)
    message = done.stderr.decode()
    assert done.returncode == 1 and message.count("\n") == 1 and "no known format detected" in message
    assert not os.path.ismount(mountpoint) and _processes_naming(mountpoint) == []


def test_a_mount_warns_of_damage_met_while_indexing_then_serves(tmp_path: Path) -> None:
    (tmp_path / "torn").mkdir()
    source = wallaby_sample(tmp_path / "torn", 20)
    log = source / "events.log"
    log.write_bytes(log.read_bytes()[:-5])
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    done = fmtfs("mount", source, mountpoint, "--cache-dir", tmp_path / "c")
    try:
        assert "warning: events.log at offset" in done.stderr.decode()
        lines = (mountpoint / "events.log" / "records.jsonl").read_bytes().splitlines()
        assert len(lines) == 19 and _processes_naming(mountpoint)
    finally:
        unmount(mountpoint)
    assert not os.path.ismount(mountpoint)


def test_indexing_off_a_terminal_loads_no_bar_and_no_fuse_server(tmp_path: Path) -> None:
    """tqdm only draws bars (on a terminal), and the FUSE server's modules
    (pyfuse3, trio: 0.13 s) are the mount's to import while its decode
    workers scan, not the indexing's or the forking parent's."""
    source = _sample("wallaby", tmp_path / "src")
    code = f"""
from fmtfs import background, cli
args = cli.parse_command_line(["index", "{source}", "--cache-dir", "{tmp_path}/c"])
assert cli.open_tree_showing_progress(args).entries
"""
    loaded = loaded_after(code)
    assert "fmtfs.views" in loaded and "fmtfs.background" in loaded
    assert loaded.isdisjoint({"tqdm", "pyfuse3", "trio", "fmtfs.daemon"}), loaded & {
        "tqdm",
        "pyfuse3",
        "trio",
    }


def test_gvfs_tree_damage_is_read_once_per_state_of_the_source(tmp_path: Path) -> None:
    # the whole-tree read behind _errors.jsonl and _fmtfs.json (1.1 s for an
    # 11.6 MB store) ran for each of them, at every mount's first `ls -l`
    from fmtfs.formats import open_source
    from fmtfs.views import META_ERRORS, META_INFO, SourceTree

    source = _looping_gvfs_tree(tmp_path / "meta")
    cache = tmp_path / "c"

    def meta_files_and_reads() -> tuple[bytes, bytes, int]:
        fmt = open_source(source, None, {})
        reads = []
        ask = fmt.problems
        fmt.problems = lambda: reads.append(1) or ask()  # type: ignore[method-assign]
        tree = SourceTree(fmt, cache)
        try:
            whole = [tree.read(path, 0, tree.size(path)) for path in (META_ERRORS, META_INFO)]
        finally:
            tree.close()
        return whole[0], whole[1], len(reads)

    errors, info, reads = meta_files_and_reads()
    assert reads == 1 and b"loop" in errors
    assert orjson.loads(info)["errors"] == len(errors.splitlines())
    assert meta_files_and_reads() == (errors, info, 0)  # the next tree (mount) reads nothing
    # another tree file: its problems are read again (none now)
    (source / "home").write_bytes((FIXTURES / "gvfs" / "02-after-timer-flush" / "home").read_bytes())
    errors_now, info_now, reads = meta_files_and_reads()
    assert reads == 1 and b"loop" not in errors_now and orjson.loads(info_now)["errors"] == 0
