"""The command line as a person meets it: help, version, messages, logs,
`fmtfs index` with its progress, `fmtfs info`'s summary (LAYOUT.md §1)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from fmtfs import __version__
from fmtfs.render import parse_lines
from fmtfs.samples.beats import generate as beats_sample
from fmtfs.samples.wallaby import generate as wallaby_sample
from tests.mounting import fmtfs, unmount

COMMANDS = ("mount", "umount", "index", "info", "ls", "cat")


@pytest.fixture
def wallaby(tmp_path: Path) -> Path:
    (tmp_path / "wal").mkdir()
    return wallaby_sample(tmp_path / "wal", 300)


@pytest.fixture
def torn(tmp_path: Path) -> Path:
    """A wallaby log whose last record lost its end."""
    (tmp_path / "torn").mkdir()
    source = wallaby_sample(tmp_path / "torn", 20)
    log = source / "events.log"
    log.write_bytes(log.read_bytes()[:-5])
    return source


def test_help_describes_every_command_and_argument() -> None:
    top = fmtfs("--help").stdout.decode()
    assert "shared" not in top and ".md" not in top  # cites nothing outside the project
    for command in COMMANDS:
        assert f"    {command} " in top
    assert "FMTFS_BEATS_PASSWORD" in top
    mount = fmtfs("mount", "--help").stdout.decode()
    lines = mount.splitlines()
    # an argument's line and the next (argparse moves the help there when the name is long)
    described = {
        x.split()[0]: x + lines[i + 1]
        for i, x in enumerate(lines[:-1])
        if x.startswith("  ") and not x.startswith("   ")
    }
    for word in ("source", "mountpoint", "-f,", "-o", "--time-bucket", "--debug", "--log-file", "--key-file"):
        assert len(described[word].split()) > 4, word  # the name, then words saying what it is
    for option in ("ro ", "allow_other", "format=F", "_netdev", "FMTFS_BEATS_PASSWORD"):
        assert option in mount, option
    # argparse prints an argument without help as its bare name on a line of its own
    for command in COMMANDS:
        text = fmtfs(command, "--help").stdout.decode()
        bare = [x for x in text.splitlines() if x.startswith("  ") and x[2] != " " and len(x.split()) == 1]
        assert bare == [], (command, bare)


def test_version() -> None:
    done = fmtfs("--version")
    assert done.stdout.decode().strip() == f"fmtfs {__version__}"


def test_missing_mount_point_says_it_does_not_exist(wallaby: Path, tmp_path: Path) -> None:
    done = fmtfs("mount", wallaby, tmp_path / "nowhere", check=False)
    message = done.stderr.decode()
    assert done.returncode == 1 and message.count("\n") == 1
    assert "does not exist" in message and "Traceback" not in message
    a_file = tmp_path / "file"
    a_file.write_text("x")
    done = fmtfs("mount", wallaby, a_file, check=False)
    assert done.returncode == 1 and "is not a folder" in done.stderr.decode()


def test_a_line_that_is_not_json_says_so_with_its_number() -> None:
    with pytest.raises(ValueError) as caught:
        parse_lines(b'{"data": "a"}\n{"data": "b"}\nhello world\n')
    message = str(caught.value)
    assert message.startswith("line 3 is not valid JSON") and "hello world" in message
    assert "expected" not in message
    with pytest.raises(ValueError, match=r"^line 1 is JSON but not an object"):
        parse_lines(b"[1, 2]\n")


def test_info_is_a_summary_and_json_is_the_document(wallaby: Path, tmp_path: Path) -> None:
    cache = tmp_path / "c"
    text = fmtfs("info", wallaby, "--cache-dir", cache).stdout.decode()
    fields = dict(line.split(":", 1) for line in text.splitlines() if not line.startswith(" "))
    assert fields["format"].strip() == "wallaby"
    assert fields["records"].strip() == "300"
    assert fields["errors"].strip() == "0"
    native = (wallaby / "events.log").stat().st_size
    assert f"{native / 1024:.1f} KiB of native files" in fields["streams"]
    document = fmtfs("info", wallaby, "--json", "--cache-dir", cache).stdout
    mounted_bytes = fmtfs("cat", wallaby, "_fmtfs.json", "--cache-dir", cache).stdout
    assert document == mounted_bytes and orjson.loads(document)["records"] == 300


def test_info_lists_damage_and_warnings_name_file_and_offset(torn: Path, tmp_path: Path) -> None:
    problems = fmtfs("cat", torn, "_errors.jsonl", "--cache-dir", tmp_path / "c")
    first = orjson.loads(problems.stdout.splitlines()[0])
    text = fmtfs("info", torn, "--cache-dir", tmp_path / "c").stdout.decode()
    assert "errors:   1 " in text and f"{first['file']} at offset {first['offset']}" in text
    # reading a damaged source warns on stderr, with file and offset
    assert f"warning: {first['file']} at offset {first['offset']}:" in problems.stderr.decode()
    quiet = fmtfs("cat", torn, "_errors.jsonl", "-q", "--cache-dir", tmp_path / "c")
    assert quiet.stderr == b"" and quiet.stdout == problems.stdout


def test_log_file_takes_the_warnings(torn: Path, tmp_path: Path) -> None:
    log_file = tmp_path / "fmtfs.log"
    done = fmtfs("ls", torn, "--log-file", log_file, "--cache-dir", tmp_path / "c")
    assert done.stderr == b""
    assert "WARNING" in log_file.read_text() and "offset" in log_file.read_text()


def test_index_without_a_terminal_says_one_line_per_file(tmp_path: Path) -> None:
    source = beats_sample(tmp_path / "q", 200)
    done = fmtfs("index", source, "--cache-dir", tmp_path / "c")
    lines = done.stderr.decode().splitlines()
    segments = sorted(p.name for p in source.glob("*.seg"))
    assert len(lines) == len(segments) and "\r" not in done.stderr.decode()
    assert [Path(x.split(":")[1].split()[-1]).name for x in lines] == segments
    assert sum(int(x.split(": ")[2].split()[0].replace(",", "")) for x in lines) == 200
    assert done.stdout.decode().startswith(f"indexed {len(segments)} streams, 200 records")
    # a mount afterwards finds the index built: its cache holds the chunk table
    assert (tmp_path / "c" / "index.sqlite3").stat().st_size > 0
    # ... and the Parquet twins of every record view (one per segment, plus pending)
    twins = sorted((tmp_path / "c" / "parquet").glob("*/*.parquet"))
    assert done.stdout.decode().splitlines()[1].startswith(f"built {len(twins)} Parquet twins")
    assert len(twins) >= len(segments)
    for twin in twins:
        assert pq.read_metadata(twin).num_rows > 0


def test_index_no_parquet_builds_no_twins(tmp_path: Path) -> None:
    source = beats_sample(tmp_path / "q", 50)
    done = fmtfs("index", source, "--cache-dir", tmp_path / "c", "--no-parquet")
    assert "Parquet" not in done.stdout.decode()
    assert not list((tmp_path / "c" / "parquet").glob("*/*.parquet"))


def read_terminal(controller: int) -> str:
    """Everything written to a pseudo-terminal until its last writer closed it."""
    shown = b""
    while True:
        try:
            data = os.read(controller, 4096)
        except OSError:  # EIO: the terminal's last writer closed it
            break
        if not data:
            break
        shown += data
    os.close(controller)
    return shown.decode(errors="replace")


def a_terminal() -> tuple[int, int]:
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a window's size
    return controller, terminal


def test_index_on_a_terminal_shows_a_progress_bar(tmp_path: Path) -> None:
    (tmp_path / "wal").mkdir()
    source = wallaby_sample(tmp_path / "wal", 20_000)
    controller, terminal = a_terminal()
    process = subprocess.Popen(
        [sys.executable, "-m", "fmtfs", "index", str(source), "--cache-dir", str(tmp_path / "c")],
        stdout=subprocess.PIPE,
        stderr=terminal,
    )
    os.close(terminal)
    bar = read_terminal(controller)
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 0 and "indexing" in bar
    assert "100%" in bar and "20,000 records" in bar and "rec/s" in bar and "B/s" in bar
    assert out.decode().startswith("indexed 1 streams, 20,000 records")


@pytest.mark.parametrize("command", [["info"], ["ls", "-l"], ["cat", "events.log/records.jsonl"]])
def test_a_first_look_indexes_with_a_progress_bar_on_a_terminal(tmp_path: Path, command: list[str]) -> None:
    # info, ls and cat index as `fmtfs index` does (on every core), the bar on
    # stderr only: their output is the one they print without a terminal
    (tmp_path / "wal").mkdir()
    source = wallaby_sample(tmp_path / "wal", 20_000)
    argv = [sys.executable, "-m", "fmtfs", command[0], str(source), *command[1:]]
    controller, terminal = a_terminal()
    printed = tmp_path / "printed"
    with open(printed, "wb") as out:  # a file, not a pipe: cat's output fills no buffer while we read the bar
        process = subprocess.Popen([*argv, "--cache-dir", str(tmp_path / "c")], stdout=out, stderr=terminal)
    os.close(terminal)
    bar = read_terminal(controller)
    assert process.wait(timeout=120) == 0 and "indexing" in bar and "20,000 records" in bar
    assert printed.read_bytes() == fmtfs(*argv[3:], "--cache-dir", tmp_path / "again").stdout


def test_mount_in_the_foreground_on_a_terminal_shows_the_progress(tmp_path: Path) -> None:
    (tmp_path / "wal").mkdir()
    source = wallaby_sample(tmp_path / "wal", 5_000)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    controller, terminal = a_terminal()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fmtfs",
            "mount",
            "-f",
            str(source),
            str(mnt),
            "--cache-dir",
            str(tmp_path / "c"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=terminal,
    )
    os.close(terminal)
    try:
        deadline = time.monotonic() + 120
        while not os.path.ismount(mnt) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert os.path.ismount(mnt)
        assert (mnt / "events.log/records.jsonl").read_bytes().count(b"\n") == 5_000
    finally:
        unmount(mnt)
    assert process.wait(timeout=60) == 0  # unmounting ends the foreground server
    bar = read_terminal(controller)
    assert "indexing" in bar and "100%" in bar and "5,000 records" in bar


def test_samples_have_a_usage_message(tmp_path: Path) -> None:
    bare = subprocess.run([sys.executable, "-m", "fmtfs.samples"], capture_output=True, text=True)
    assert bare.returncode == 2 and "usage: python -m fmtfs.samples" in bare.stderr
    assert "Traceback" not in bare.stderr
    done = subprocess.run(
        [sys.executable, "-m", "fmtfs.samples", "all", str(tmp_path), "20"],
        capture_output=True,
        text=True,
        check=True,
    )
    written = done.stdout.split()
    assert {Path(p).name for p in written} >= {"beats", "kestrel", "wallaby", "gvfs", "proio"}
    for path in written:
        info = orjson.loads(fmtfs("info", path, "--json", "--cache-dir", tmp_path / "c").stdout)
        assert info["format"] == Path(path).name and info["records"] > 0
