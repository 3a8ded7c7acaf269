"""Real FUSE mounts of a kestrel queue folder: views, write-through of PUTs
(with rotation) and reader rewrites, refusals."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import orjson
import pytest

from fmtfs.formats.kestrel import KestrelFormat
from fmtfs.formats.kestrel import legacy as L
from fmtfs.formats.kestrel.readers import read_reader_file
from fmtfs.formats.kestrel.records import encode_reader_file
from fmtfs.samples.kestrel import generate
from tests.mounting import fmtfs, mounted


@pytest.fixture()
def source(tmp_path: Path) -> Path:
    return generate(tmp_path / "src", 400)


def _newest(source: Path, queue: str) -> str:
    views = [s.view_paths()[0] for s in KestrelFormat(source, {}).streams() if s.name.startswith(queue + "/")]
    return views[-1]


def jsonl(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_views_match_fmtfs_cat(source: Path, tmp_path: Path) -> None:
    with mounted(source) as mnt:
        assert sorted(os.listdir(mnt / "mail")) == ["buckets", "journal", "pending", "readers"]
        assert os.listdir(mnt / "jobs" / "readers") == ["default.json"]
        for rel in ("mail/readers/indexer.json", "mail/pending/indexer.jsonl", _newest(source, "jobs")):
            expected = fmtfs("cat", source, rel, "--cache-dir", tmp_path / "c").stdout
            assert (mnt / rel).stat().st_size == len(expected)
            assert (mnt / rel).read_bytes() == expected
        indexer = orjson.loads((mnt / "mail/readers/indexer.json").read_bytes())
        assert [r["id"] for r in jsonl(mnt / "mail/pending/indexer.jsonl")][:2] == [
            indexer["head"] + 1,
            indexer["head"] + 3,
        ]


def test_append_and_rotation_through_the_mount(source: Path) -> None:
    view = _newest(source, "mail")
    before = set(os.listdir(source))
    with mounted(source, "--kestrel-journal-size", "4200") as mnt:
        pending_before = len(jsonl(mnt / "mail/pending/indexer.jsonl"))
        with open(mnt / view, "ab") as f:
            f.write(b'{"data": "one"}\n{"data_base64": "/wA=", "expire_time": "2030-01-01T00:00:00.000Z"}\n')
            f.write(b'{"data": "' + b"x" * 3000 + b'"}\n{"id": 1000, "error_count": 2, "data": "last"}\n')
        created = set(os.listdir(source)) - before
        assert len(created) == 1  # the 3000-byte line passed 4200 bytes: a new mail.<ms>
        pending = jsonl(mnt / "mail/pending/indexer.jsonl")
        assert len(pending) == pending_before + 4
        assert pending[-1] == {**pending[-1], "id": 1000, "error_count": 2, "data": "last"}
        assert (
            pending[-3]["data_base64"] == "/wA=" and pending[-3]["expire_time"] == "2030-01-01T00:00:00.000Z"
        )
        new_view = _newest(source, "mail")
        assert new_view != view and [r["id"] for r in jsonl(mnt / new_view)][-1] == 1000
        # the older file's view is history now; the new one takes lines
        with pytest.raises(OSError) as caught:
            open(mnt / view, "ab").close()
        assert caught.value.errno in (errno.EACCES, errno.EROFS)
        fd = os.open(mnt / new_view, os.O_WRONLY | os.O_APPEND)
        try:
            size = (source / created.pop()).stat().st_size
            for bad in (b'{"id": 5, "data": "old id"}\n', b'{"data": 7}\n', b"nope\n"):
                with pytest.raises(OSError) as caught:
                    os.write(fd, bad)
                assert caught.value.errno == errno.EINVAL
        finally:
            os.close(fd)
        assert max((source / n).stat().st_size for n in set(os.listdir(source)) - before) == size


def test_reader_rewrite_and_creation_through_the_mount(source: Path) -> None:
    with mounted(source) as mnt:
        with open(mnt / "mail/readers/indexer.json", "w") as f:
            f.write('{"reader": "indexer", "head": 90,\n "done": [95, 92]}\n')
        assert (source / "mail.read.indexer").read_bytes() == encode_reader_file(90, [92, 95])
        assert orjson.loads((mnt / "mail/readers/indexer.json").read_bytes()) == {
            "reader": "indexer",
            "head": 90,
            "done": [92, 95],
        }
        assert [r["id"] for r in jsonl(mnt / "mail/pending/indexer.jsonl")] == [
            91,
            93,
            94,
            96,
            97,
            98,
            99,
            100,
        ]
        (mnt / "mail/readers/audit.json").write_text('{"head": 99}')
        state = read_reader_file(source / "mail.read.audit")
        assert (state.head, state.done) == (99, set())
        assert [r["id"] for r in jsonl(mnt / "mail/pending/audit.jsonl")] == [100]
        with pytest.raises(OSError) as caught:
            (mnt / "mail/readers/indexer.json").write_text('{"head": 1, "done": [1]}')
        assert caught.value.errno == errno.EINVAL
        assert not [n for n in os.listdir(source) if "~~" in n]
        with pytest.raises(OSError) as caught:
            open(mnt / "mail/pending/indexer.jsonl", "ab").close()
        assert caught.value.errno in (errno.EACCES, errno.EROFS)


def test_legacy_journal_views_are_read_only(tmp_path: Path) -> None:
    src = tmp_path / "old"
    src.mkdir()
    ops = [
        L.Op(L.ADDX, None, 1000, None, b"a"),
        L.Op(L.ADDX, None, 2000, None, b"b"),
        L.Op(L.REMOVE, None, None, None, None),
    ]
    (src / "jobs").write_bytes(b"".join(map(L.encode_op, ops)))
    with mounted(src) as mnt:
        assert jsonl(mnt / "jobs/items.jsonl") == [{"add_time": "1970-01-01T00:00:02.000Z", "data": "b"}]
        assert [r["op"] for r in jsonl(mnt / "jobs/journal/jobs.jsonl")] == ["ADDX", "ADDX", "REMOVE"]
        for view in ("jobs/journal/jobs.jsonl", "jobs/items.jsonl"):
            with pytest.raises(OSError) as caught:
                open(mnt / view, "ab").close()
            assert caught.value.errno in (errno.EROFS, errno.EACCES)
