"""The permission model without a mount: the most restrictive of several
files, which native files each format's views come from, the cache and
key-file checks.  (tests/test_security.py checks the same through real
mounts, as another user.)"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from pathlib import Path

import pytest

from fmtfs.formats import open_source
from fmtfs.permissions import Access, most_restrictive, view_mode, warn_if_shared
from fmtfs.samples import beats, gvfs, kestrel, proio
from fmtfs.viewpermissions import ViewPermissions
from fmtfs.views import SourceTree

ROOT = (0, 0)
NOBODY = 65534


def test_same_owner_intersects_the_bits() -> None:
    got = most_restrictive([Access(7, 8, 0o644), Access(7, 8, 0o640), Access(7, 8, 0o660)], ROOT)
    assert got == Access(7, 8, 0o640)


@pytest.mark.parametrize(
    "files",
    [
        [Access(7, 8, 0o644), Access(9, 8, 0o640)],
        [Access(7, 8, 0o600), Access(9, 9, 0o644)],
        [Access(7, 8, 0o604), Access(7, 9, 0o664)],  # an odd mode: others more than group
        [Access(7, 8, 0o666), Access(9, 10, 0o644), Access(11, 8, 0o464)],
    ],
)
def test_nobody_gains_a_bit_any_file_denies(files: list[Access]) -> None:
    """Every user (owner of some file, member of some group, or neither)
    gets from the result at most what each file gives them."""
    got = most_restrictive(files, ROOT)
    assert got is not None

    def bits(access: Access, uid: int, groups: set[int]) -> int:
        if uid == access.uid:
            return access.mode >> 6 & 7
        if access.gid in groups:
            return access.mode >> 3 & 7
        return access.mode & 7

    owners = {a.uid for a in files} | {got.uid, 1000}
    group_ids = {a.gid for a in files} | {got.gid, 1000}
    for uid in owners:
        for gid in group_ids:
            for groups in ({gid}, {gid} | {a.gid for a in files}):
                min_bits = 7
                for access in files:
                    min_bits &= bits(access, uid, groups)
                allowed = bits(got, uid, groups)
                assert allowed & ~min_bits == 0, (uid, groups, oct(got.mode))


def test_different_owners_give_the_view_to_the_mounter() -> None:
    got = most_restrictive([Access(7, 8, 0o644), Access(9, 8, 0o644)], ROOT)
    assert got == Access(0, 8, 0o444)  # everyone read both; only the mounter owns it


def test_view_mode_keeps_write_bits_only_for_writable_views() -> None:
    assert view_mode(Access(0, 0, 0o755), writable=False) == 0o444
    assert view_mode(Access(0, 0, 0o664), writable=True) == 0o664
    assert view_mode(Access(0, 0, 0o444), writable=True) == 0o444


def _permissions(source: Path, tmp_path: Path) -> tuple[SourceTree, ViewPermissions]:
    tree = SourceTree(open_source(source, None, {}), tmp_path / "cache")
    return tree, ViewPermissions(tree)


def test_kestrel_views_come_from_their_own_files(tmp_path: Path) -> None:
    source = kestrel.generate(tmp_path / "q", 200)
    reader = source / "mail.read.indexer"
    os.chown(reader, NOBODY, NOBODY)
    os.chmod(reader, 0o600)
    tree, perms = _permissions(source, tmp_path)
    assert perms.view("mail/readers/indexer.json") == Access(NOBODY, NOBODY, 0o600)
    # pending: the reader file (nobody's) and root's writer files: the mounter, nothing for others
    pending = perms.view("mail/pending/indexer.jsonl")
    assert pending.uid == os.getuid() and pending.mode & 0o077 == 0
    # the jobs queue is untouched by this: its views stay 0644
    assert all(perms.view(p).mode == 0o644 for p in tree.files if p.startswith("jobs/"))
    assert perms.view("parquet/mail/pending/indexer.parquet") == pending


def test_views_take_their_access_from_the_trees_look_and_follow_a_chmod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A view's owner and mode come from the snapshot the tree's look took
    (no stat of its own: the first `ls -l` of 1,000 streams made 1,000),
    and a chmod starts a new generation that the next look brings."""
    source = kestrel.generate(tmp_path / "q", 200)
    os.chmod(source / "mail.read.indexer", 0o640)
    tree, perms = _permissions(source, tmp_path)
    stat_of, stated = os.stat, []
    with monkeypatch.context() as patched:
        patched.setattr(os, "stat", lambda path, *a, **k: stated.append(Path(path)) or stat_of(path, *a, **k))
        assert perms.view("mail/readers/indexer.json") == Access(0, 0, 0o640)
        assert all(perms.view(p) for p in tree.files)
    assert not set(stated) & set(source.iterdir())
    os.chmod(source / "mail.read.indexer", 0o600)
    assert perms.view("mail/readers/indexer.json").mode == 0o640  # until the tree looks again
    tree.refresh(force=True)
    assert perms.view("mail/readers/indexer.json").mode == 0o600


def test_beats_pending_includes_state_dat(tmp_path: Path) -> None:
    source = beats.generate(tmp_path / "q", 30)
    for path in source.iterdir():
        os.chmod(path, 0o644)
    os.chmod(source / "state.dat", 0o640)
    _, perms = _permissions(source, tmp_path)
    assert perms.view("segments/0.jsonl").mode == 0o644
    assert perms.view("pending.jsonl").mode == 0o640


def test_gvfs_and_proio_views_come_from_their_files(tmp_path: Path) -> None:
    store = gvfs.generate(tmp_path / "gvfs", 20)
    os.chmod(store / "home", 0o600)  # the tree; its journal stays 0644
    for path in store.iterdir():
        if path.name != "home":
            os.chmod(path, 0o644)
    _, perms = _permissions(store, tmp_path)
    assert perms.view("home/metadata.jsonl").mode == 0o600
    assert perms.view("home/journal.jsonl").mode == 0o600  # a write may rotate the tree
    assert perms.view("root/metadata.jsonl").mode == 0o644

    streams = proio.generate(tmp_path / "proio", 20)
    shutil.copy(streams / "sample.proio", streams / "other.proio")
    os.chmod(streams / "sample.proio", 0o600)
    os.chmod(streams / "other.proio", 0o644)
    _, perms = _permissions(streams, tmp_path / "p")
    assert perms.view("sample.proio/_summary.txt").mode == 0o600
    assert perms.view("other.proio/_summary.txt").mode == 0o644
    assert perms.view("other.proio/events.jsonl").mode == 0o644
    assert perms.view("_summary.txt").mode == 0o600  # all files


def test_the_cache_holds_decoded_records_for_its_owner_only(tmp_path: Path) -> None:
    source = beats.generate(tmp_path / "q", 30)
    tree, _ = _permissions(source, tmp_path)
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "cache/parquet").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "cache/index.sqlite3").stat().st_mode) & 0o077 == 0


def test_a_shared_key_file_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    key = tmp_path / "key"
    key.write_text("00" * 16)
    os.chmod(key, 0o600)
    with caplog.at_level(logging.WARNING, logger="fmtfs"):
        warn_if_shared(key)
    assert caplog.records == []
    os.chmod(key, 0o644)
    with caplog.at_level(logging.WARNING, logger="fmtfs"):
        warn_if_shared(key)
    assert len(caplog.records) == 1 and "0600" in caplog.records[0].getMessage()


def test_gvfs_rewrites_keep_the_store_its_users(tmp_path: Path) -> None:
    """Root rebuilding or growing a user's gvfs store leaves every file the
    user's, with the mode it had (else the user's own daemon could not read it)."""
    from fmtfs.formats.gvfs import store as gvfs_store

    folder = gvfs.generate(tmp_path / "gvfs", 20)
    for path in folder.iterdir():
        os.chown(path, NOBODY, NOBODY)
        os.chmod(path, 0o600)
    tree = folder / "home"
    gvfs_store.rebuild(tree, gvfs_store.effective_model(gvfs_store.read_state(tree)))
    journal = next(p for p in folder.iterdir() if p.name.startswith("home-"))
    assert gvfs_store._grow_journal(journal, 0)
    for path in folder.iterdir():
        st = path.stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (NOBODY, NOBODY, 0o600), path.name
