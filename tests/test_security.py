"""A mount never widens who can read or write the data (issue 12).

Real mounts under `-o allow_other`, with another user (nobody, uid 65534)
acting through `setpriv`; the tests run as root, like the rest of the
mount tests."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from fmtfs.samples import beats, kestrel
from tests.mounting import mounted

NOBODY = 65534
LINE = {"timestamp": "2022-07-29T14:43:00.000000000Z", "flags": 1, "meta": {}, "fields": {"n": 1}}


def as_nobody(*command: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *command],
        input=stdin,
        capture_output=True,
        timeout=60,
    )


def nobody_reads(path: Path) -> subprocess.CompletedProcess:
    return as_nobody("cat", str(path))


def nobody_appends(path: Path, data: bytes) -> subprocess.CompletedProcess:
    # the shell's `>>` opens the view O_WRONLY|O_APPEND, as a user would
    return as_nobody("sh", "-c", f'cat >> "{path}"', stdin=data)


def open_to_nobody(mnt: Path) -> None:
    """tempfile folders are 0700: let nobody reach the mount point."""
    os.chmod(mnt.parent, 0o755)


@pytest.fixture
def queue(tmp_path: Path) -> Path:
    """Beats writes its segments 0600; here 0.seg stays so, the rest and
    state.dat are made 0644.  pending.jsonl starts in segment 0."""
    source = beats.generate(tmp_path / "queue", 60)
    os.chmod(source, 0o755)
    for name in ("1.seg", "2.seg", "state.dat"):
        os.chmod(source / name, 0o644)
    return source


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_views_show_the_native_files_owner_and_mode(queue: Path) -> None:
    os.chown(queue / "1.seg", NOBODY, NOBODY)
    with mounted(queue, "-o", "allow_other") as mnt:
        assert _mode(mnt / "segments/0.jsonl") == 0o400  # older segment: takes no writes
        assert _mode(mnt / "segments/2.jsonl") == 0o644  # the newest takes appends
        one = (mnt / "segments/1.jsonl").stat()
        assert (one.st_uid, one.st_gid, stat.S_IMODE(one.st_mode)) == (NOBODY, NOBODY, 0o444)
        assert _mode(mnt / "parquet/segments/0.parquet") == 0o400
        assert _mode(mnt / "parquet/segments/1.parquet") == 0o444
        # several native files, several owners: the mounter, and only what all grant
        pending = (mnt / "pending.jsonl").stat()
        assert (pending.st_uid, stat.S_IMODE(pending.st_mode)) == (0, 0o400)
        assert _mode(mnt / "_fmtfs.json") == 0o400
        root = mnt.stat()
        assert (root.st_uid, stat.S_IMODE(root.st_mode)) == (0, 0o755)
        assert _mode(mnt / "segments") == 0o755


def test_another_user_reads_only_what_the_native_files_let_them(queue: Path) -> None:
    with mounted(queue, "-o", "allow_other") as mnt:
        open_to_nobody(mnt)
        readable = nobody_reads(mnt / "segments/1.jsonl")
        assert readable.returncode == 0, readable.stderr
        assert readable.stdout == (mnt / "segments/1.jsonl").read_bytes() != b""
        assert nobody_reads(mnt / "parquet/segments/1.parquet").stdout[:4] == b"PAR1"
        for refused in ("segments/0.jsonl", "parquet/segments/0.parquet", "pending.jsonl", "_errors.jsonl"):
            done = nobody_reads(mnt / refused)
            assert done.returncode != 0 and b"Permission denied" in done.stderr, refused
            assert done.stdout == b""
        # root still reads everything: the decoded bytes are there
        assert (mnt / "pending.jsonl").read_bytes().count(b"\n") > 0


def test_another_user_writes_only_where_the_native_file_lets_them(queue: Path) -> None:
    line = orjson.dumps(LINE) + b"\n"
    before = (queue / "2.seg").read_bytes()
    with mounted(queue, "-o", "allow_other") as mnt:
        open_to_nobody(mnt)
        # 0644 root-owned segment: the view is rw-r--r--, nobody is refused
        refused = nobody_appends(mnt / "segments/2.jsonl", line)
        assert refused.returncode != 0 and b"Permission denied" in refused.stderr
        # and may not create a new segment in a root-owned 0755 folder
        created = nobody_appends(mnt / "segments/3.jsonl", line)
        assert created.returncode != 0 and b"Permission denied" in created.stderr
    assert (queue / "2.seg").read_bytes() == before
    assert not (queue / "3.seg").exists()

    os.chmod(queue / "2.seg", 0o666)  # now writable by everyone: so is the view
    with mounted(queue, "-o", "allow_other") as mnt:
        open_to_nobody(mnt)
        assert _mode(mnt / "segments/2.jsonl") == 0o666
        taken = nobody_appends(mnt / "segments/2.jsonl", line)
        assert taken.returncode == 0, taken.stderr
        assert orjson.loads((mnt / "segments/2.jsonl").read_bytes().splitlines()[-1]) == LINE
    assert (queue / "2.seg").read_bytes() != before


def test_the_owner_of_a_native_file_writes_its_view(queue: Path) -> None:
    os.chown(queue / "2.seg", NOBODY, NOBODY)
    with mounted(queue, "-o", "allow_other") as mnt:
        open_to_nobody(mnt)
        taken = nobody_appends(mnt / "segments/2.jsonl", orjson.dumps(LINE) + b"\n")
        assert taken.returncode == 0, taken.stderr
        assert orjson.loads((mnt / "segments/2.jsonl").read_bytes().splitlines()[-1]) == LINE
        # nobody's own file is theirs to read; segment 1 (0644) too; segment 0 is not
        assert nobody_reads(mnt / "segments/2.jsonl").returncode == 0
        assert nobody_reads(mnt / "segments/0.jsonl").returncode != 0


def test_a_chmod_of_a_native_file_reaches_the_mount(queue: Path) -> None:
    with mounted(queue, "-o", "allow_other") as mnt:
        open_to_nobody(mnt)
        assert nobody_reads(mnt / "segments/1.jsonl").returncode == 0
        os.chmod(queue / "1.seg", 0o600)
        # a stat re-checks the native files (their mode is part of the
        # snapshot) once the kernel's attributes expire (fuse.ATTR_TIMEOUT)
        for _ in range(100):
            if _mode(mnt / "segments/1.jsonl") == 0o400:
                break
            time.sleep(0.1)
        assert _mode(mnt / "segments/1.jsonl") == 0o400
        assert nobody_reads(mnt / "segments/1.jsonl").returncode != 0


def test_new_native_files_copy_their_siblings_owner_and_mode(tmp_path: Path) -> None:
    source = beats.generate(tmp_path / "queue", 30)
    for seg in source.glob("*.seg"):
        os.chown(seg, NOBODY, NOBODY)
        os.chmod(seg, 0o640)
    with mounted(source) as mnt:
        with open(mnt / "segments/9.jsonl", "wb") as f:  # a new segment, written by root
            f.write(orjson.dumps(LINE) + b"\n")
    made = (source / "9.seg").stat()
    assert (made.st_uid, made.st_gid, stat.S_IMODE(made.st_mode)) == (NOBODY, NOBODY, 0o640)


def test_a_rewritten_kestrel_reader_keeps_its_owner_and_mode(tmp_path: Path) -> None:
    source = kestrel.generate(tmp_path / "queues", 200)
    reader = source / "mail.read.indexer"
    os.chown(reader, NOBODY, NOBODY)
    os.chmod(reader, 0o600)
    with mounted(source) as mnt:
        document = orjson.loads((mnt / "mail/readers/indexer.json").read_bytes())
        document["head"] += 1
        (mnt / "mail/readers/indexer.json").write_bytes(orjson.dumps(document) + b"\n")
    after = reader.stat()
    assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (NOBODY, NOBODY, 0o600)
    # the rewrite did happen
    from fmtfs.formats.kestrel.readers import read_reader_file

    assert read_reader_file(reader).head == document["head"]


def test_refusals_are_recorded_once_with_file_and_offset(queue: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with mounted(queue, cache_dir=cache) as mnt:
        for _ in range(3):  # repeated probes: one line
            with pytest.raises(PermissionError):
                open(mnt / "pending.jsonl", "ab")
        with pytest.raises(OSError) as truncated:
            open(mnt / "segments/2.jsonl", "wb")
        assert truncated.value.errno == errno.EPERM
        fd = os.open(mnt / "segments/2.jsonl", os.O_WRONLY)
        try:
            with pytest.raises(OSError) as misplaced:
                os.pwrite(fd, orjson.dumps(LINE) + b"\n", 5)
            assert misplaced.value.errno == errno.EPERM
        finally:
            os.close(fd)
        bad = os.open(mnt / "segments/2.jsonl", os.O_WRONLY | os.O_APPEND)
        try:
            with pytest.raises(OSError) as invalid:
                os.write(bad, b"x")  # can never begin a JSON object
            assert invalid.value.errno == errno.EINVAL
        finally:
            os.close(bad)
        errors = [orjson.loads(line) for line in (mnt / "_errors.jsonl").read_bytes().splitlines()]
    refused = [e for e in errors if e["error"].startswith("write refused")]
    files = [e["file"] for e in refused]
    assert files.count("pending.jsonl") == 1
    assert files.count("segments/2.jsonl") == 3  # `>`, the pwrite, the bad text
    assert {"file": "segments/2.jsonl", "offset": 5} in [
        {k: e[k] for k in ("file", "offset")} for e in refused
    ]
    # each refusal is logged once: not once by the view layer and again by FUSE's
    lines = (cache / "fmtfs.log").read_text().splitlines()
    assert len([line for line in lines if "pending.jsonl" in line]) == 1
    assert len([line for line in lines if "expected a JSON object" in line]) == 1
    # ... as an error (LAYOUT: errors for refused writes, warnings for damaged records)
    assert all(" ERROR " in line for line in lines if "pending.jsonl" in line or "expected a JSON" in line)
