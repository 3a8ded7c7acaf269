"""Real FUSE mounts of a wallaby source: the bytes of the mount are the bytes
of `fmtfs cat`, sizes are exact, growth shows, writes go through."""

from __future__ import annotations

import errno
import os
import random
import struct
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from fmtfs.formats.wallaby import WallabyWriter, index_path
from fmtfs.samples.wallaby import START_NS, generate
from tests.mounting import fmtfs, mounted

RECORDS = "events.log/records.jsonl"


@pytest.fixture()
def source(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    return generate(folder, 5_000)


def view_files(root: Path) -> list[Path]:
    return sorted(Path(d) / f for d, _, files in os.walk(root) for f in files)


def test_mount_shows_exactly_what_fmtfs_cat_shows(source: Path, tmp_path: Path) -> None:
    with mounted(source) as mnt:
        files = view_files(mnt)
        names = {str(p.relative_to(mnt)) for p in files}
        assert {RECORDS, "_fmtfs.json", "_errors.jsonl", "parquet/events.log/records.parquet"} <= names
        assert any(n.startswith("events.log/buckets/2015-05-17T") for n in names)
        rng = random.Random(1)
        for path in files:
            rel = str(path.relative_to(mnt))
            expected = fmtfs("cat", source, rel, "--cache-dir", tmp_path / "cli-cache").stdout
            size = path.stat().st_size
            assert size == len(expected), rel  # exact before any read
            assert path.read_bytes() == expected, rel
            with open(path, "rb") as f:
                for _ in range(10):
                    offset = rng.randrange(size + 1)
                    assert os.pread(f.fileno(), 65536, offset) == expected[offset : offset + 65536]
        # mode bits say which views take writes
        modes = {str(p.relative_to(mnt)): p.stat().st_mode & 0o777 for p in files}
        assert modes[RECORDS] == 0o644
        assert {m for n, m in modes.items() if n != RECORDS} == {0o444}
        listing = fmtfs("ls", source, "events.log", "--cache-dir", tmp_path / "cli-cache").stdout.decode()
        assert listing.splitlines() == ["buckets/", "records.jsonl"]
        assert sorted(os.listdir(mnt / "events.log")) == ["buckets", "records.jsonl"]


def test_growth_shows_in_stat_and_in_an_open_reader(source: Path) -> None:
    with mounted(source) as mnt:
        view = mnt / RECORDS
        size = view.stat().st_size
        tail = subprocess.Popen(["tail", "-n", "0", "-f", str(view)], stdout=subprocess.PIPE)
        try:
            with open(view, "rb") as reader:
                assert len(reader.read()) == size
                time.sleep(0.5)
                WallabyWriter(source / "events.log").write([{"time": START_NS, "data": "grown"}])
                deadline = time.monotonic() + 5
                while view.stat().st_size == size and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert view.stat().st_size > size
                more = b""
                while not more.endswith(b"\n") and time.monotonic() < deadline:
                    more += reader.read()
                    time.sleep(0.1)
                assert orjson.loads(more)["data"] == "grown"
            os.set_blocking(tail.stdout.fileno(), False)
            seen = b""
            deadline = time.monotonic() + 5
            while b"grown" not in seen and time.monotonic() < deadline:
                seen += tail.stdout.read() or b""
                time.sleep(0.1)
            assert b'"index":5000' in seen and b"grown" in seen
        finally:
            tail.kill()
            tail.wait()


def test_write_through_encodes_log_and_index_records(source: Path) -> None:
    log = source / "events.log"
    with mounted(source) as mnt:
        with open(mnt / RECORDS, "ab") as f:
            # a line cut across two writes waits for its newline
            f.write(b'{"time": "2020-01-02T03:04:05.000000006Z", "data": "first')
            f.flush()
            f.write(b'"}\n{"data_base64": "/wA="}\n{"data": "no newline at close"}')
        lines = (mnt / RECORDS).read_bytes().splitlines()[-3:]
        assert [orjson.loads(x).get("data") for x in lines] == ["first", None, "no newline at close"]
        assert orjson.loads(lines[0])["time"] == "2020-01-02T03:04:05.000000006Z"
        assert orjson.loads(lines[1]) == {**orjson.loads(lines[1]), "index": 5001, "data_base64": "/wA="}
    # the native files hold the records: read them back with the codec's layout
    idx = index_path(log).read_bytes()
    assert (len(idx) - 16) // 24 == 5003
    stamp, seq, offset = struct.unpack_from("<qQq", idx, 16 + 5000 * 24)
    assert (stamp, seq) == (1577934245000000006, 5000)
    size, _, logged = struct.unpack_from("<IIq", log.read_bytes(), offset)
    assert logged == stamp and log.read_bytes()[offset + 16 : offset + 16 + size] == b"first"


def test_a_partial_line_survives_a_child_closing_its_descriptor(source: Path) -> None:
    with mounted(source) as mnt:
        view = mnt / RECORDS
        script = (
            f'exec 3>>"{view}"; printf %s \'{{"data":"sp\' >&3; /bin/true; printf %s \'lit"}}\' >&3; echo >&3'
        )
        subprocess.run(["bash", "-c", script], check=True)
        assert orjson.loads(view.read_bytes().splitlines()[-1])["data"] == "split"
        assert (mnt / "_errors.jsonl").read_bytes() == b""
        # a line left without its newline is encoded at the close
        with open(view, "ab") as f:
            f.write(b'{"data": "last"}')
        assert orjson.loads(view.read_bytes().splitlines()[-1])["data"] == "last"


def test_a_single_log_file_as_the_source(source: Path) -> None:
    log = source / "events.log"
    with mounted(log) as mnt:
        assert sorted(os.listdir(mnt / "events.log")) == ["buckets", "records.jsonl"]
        done = subprocess.run(
            ["sh", "-c", f"echo '{{\"data\": \"one file\"}}' >> '{mnt / RECORDS}'"], timeout=30
        )
        assert done.returncode == 0
        assert orjson.loads((mnt / RECORDS).read_bytes().splitlines()[-1])["data"] == "one file"
    assert (len(index_path(log).read_bytes()) - 16) // 24 == 5001


def test_bad_line_fails_the_write_with_einval_and_writes_nothing(source: Path) -> None:
    log = source / "events.log"
    before = (log.read_bytes(), index_path(log).read_bytes())
    with mounted(source) as mnt:
        fd = os.open(mnt / RECORDS, os.O_WRONLY | os.O_APPEND)
        try:
            for bad in (
                b'{"data": "ok"}\nnot json\n',
                b'{"data": 1}\n',
                b"[1]\n",
                b'{"time": "soon", "data": "x"}\n',
                b'{"data": "ok"}\ngarbage without a newline',  # can never become an object
            ):
                with pytest.raises(OSError) as caught:
                    os.write(fd, bad)
                assert caught.value.errno == errno.EINVAL
        finally:
            os.close(fd)
        assert (log.read_bytes(), index_path(log).read_bytes()) == before
        errors = [orjson.loads(x) for x in (mnt / "_errors.jsonl").read_bytes().splitlines()]
        assert len(errors) == 5 and all(e["file"] == RECORDS for e in errors)
        # offsets in the view: each write started at its (unchanged) end; the
        # last one's refused part starts after its first, valid, line
        end = (mnt / RECORDS).stat().st_size
        assert [e["offset"] for e in errors] == [end] * 4 + [end + len(b'{"data": "ok"}\n')]
        assert orjson.loads((mnt / "_fmtfs.json").read_bytes())["errors"] == 5


def _pwrite_at_start(view: Path) -> None:
    fd = os.open(view, os.O_WRONLY)
    try:
        os.pwrite(fd, b'{"data": "pw"}\n', 0)
    finally:
        os.close(fd)


def test_truncation_and_names_are_refused(source: Path) -> None:
    log = source / "events.log"
    before = log.read_bytes()
    with mounted(source) as mnt:
        for action in (
            lambda: open(mnt / RECORDS, "wb").close(),  # `>`: the log is append-only
            lambda: _pwrite_at_start(mnt / RECORDS),  # a write that is not at the end
            lambda: (mnt / RECORDS).unlink(),
            lambda: (mnt / "new").mkdir(),
            lambda: (mnt / "_fmtfs.json").rename(mnt / "x.json"),
        ):
            with pytest.raises(OSError) as caught:
                action()
            assert caught.value.errno == errno.EPERM
        assert (mnt / RECORDS).stat().st_size > 0
    assert log.read_bytes() == before


def test_read_only_mount_and_read_only_views(source: Path) -> None:
    with mounted(source, "-o", "ro") as mnt:
        with pytest.raises(OSError) as caught:
            open(mnt / RECORDS, "ab").close()
        assert caught.value.errno == errno.EROFS
    with mounted(source) as mnt:
        for view in ("_fmtfs.json", "parquet/events.log/records.parquet"):
            with pytest.raises(OSError) as caught:
                open(mnt / view, "ab").close()
            assert caught.value.errno in (errno.EACCES, errno.EROFS)


def test_second_mount_reuses_the_index(source: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with mounted(source, cache_dir=cache) as mnt:
        first = (mnt / RECORDS).read_bytes()
    index_file = cache / "index.sqlite3"
    assert index_file.exists()
    with mounted(source, cache_dir=cache) as mnt:
        assert (mnt / RECORDS).stat().st_size == len(first)
        assert (mnt / RECORDS).read_bytes() == first


def test_user_errors_are_one_line_without_traceback(source: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    target = tmp_path / "mnt"
    target.mkdir()
    bad = fmtfs("mount", empty, target, check=False)
    assert bad.returncode != 0 and not os.path.ismount(target)
    message = bad.stderr.decode()
    assert message.count("\n") == 1 and "Traceback" not in message and "no known format" in message
    with mounted(source) as mnt:
        busy = fmtfs("mount", source, mnt, check=False)
        assert (
            busy.returncode != 0
            and "busy" in busy.stderr.decode()
            and "Traceback" not in busy.stderr.decode()
        )
    wrong = fmtfs("info", source, "--format", "beats", check=False)
    assert wrong.returncode != 0 and wrong.stderr.decode().count("\n") == 1 and b"beats" in wrong.stderr
    missing = fmtfs("cat", source, "nope.jsonl", check=False)
    assert missing.returncode != 0 and missing.stderr.decode().count("\n") == 1


def test_umount(source: Path, tmp_path: Path) -> None:
    target = tmp_path / "m"
    target.mkdir()
    fmtfs("mount", source, target, "--cache-dir", tmp_path / "c")
    assert os.path.ismount(target)
    fmtfs("umount", target)
    assert not os.path.ismount(target)
    again = fmtfs("umount", target, check=False)
    assert again.returncode != 0 and again.stderr.decode().count("\n") == 1 and b"not mounted" in again.stderr
    bad_option = fmtfs("mount", source, target, "-o", "bogusopt", "--cache-dir", tmp_path / "c", check=False)
    assert bad_option.returncode != 0 and b"bogusopt" in bad_option.stderr and not os.path.ismount(target)
    # view paths as people type them
    dotted = fmtfs("cat", source, "./events.log//records.jsonl", "--cache-dir", tmp_path / "c").stdout
    assert dotted == fmtfs("cat", source, RECORDS, "--cache-dir", tmp_path / "c").stdout != b""
