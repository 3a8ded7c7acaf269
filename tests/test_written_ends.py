"""The memo of file ends that lets a writer skip the walk of a file its
predecessor in this process left unchanged (fmtfs.formats.writtenends)."""

from __future__ import annotations

from pathlib import Path

from fmtfs.formats.base import FileIdentity
from fmtfs.formats.writtenends import WrittenEnds


def test_an_end_holds_while_the_file_is_as_it_was_left(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    ends: WrittenEnds[int] = WrittenEnds()
    left = FileIdentity.of(path)
    ends.put(left, 3)
    assert ends.get(FileIdentity.of(path)) == 3
    with open(path, "r+b") as f:  # rewritten in place, same size: its (fine-grained) mtime tells
        f.write(b"x")
    assert ends.get(FileIdentity.of(path)) is None
    path.write_bytes(b"abcd")  # grown
    assert ends.get(FileIdentity.of(path)) is None
    assert ends.get(left) == 3  # the identity it was left with still finds it


def test_the_least_recently_used_file_is_forgotten_first(tmp_path: Path) -> None:
    ends: WrittenEnds[str] = WrittenEnds(limit=2)
    identities = {}
    for name in "abc":
        (tmp_path / name).write_bytes(name.encode())
        identities[name] = FileIdentity.of(tmp_path / name)
    ends.put(identities["a"], "a")
    ends.put(identities["b"], "b")
    assert ends.get(identities["a"]) == "a"  # a used last: b goes first
    ends.put(identities["c"], "c")
    assert [ends.get(identities[n]) for n in "abc"] == ["a", None, "c"]
