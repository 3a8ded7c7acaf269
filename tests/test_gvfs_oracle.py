"""The real gvfsd-metadata as the oracle (spec §6).

Needs the Debian packages gvfs, gvfs-daemons, libglib2.0-bin and dbus; the
tests fail (never skip) with a clear message when they are missing."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fmtfs.formats.base import BadRecord
from fmtfs.formats.gvfs import GvfsFormat, store
from fmtfs.formats.gvfs.journal import JOURNAL_SIZE
from fmtfs.formats.gvfs.tree import read_header
from fmtfs.formats.gvfs.treewriter import build_tree
from fmtfs.render import parse_lines
from tests.conftest import FIXTURES as FIXTURES_ROOT

FIXTURES = FIXTURES_ROOT / "gvfs"
DAEMON = "/usr/libexec/gvfsd-metadata"
PACKAGES = "gvfs gvfs-daemons libglib2.0-bin dbus"


def _require_tools() -> None:
    missing = [t for t in ("dbus-daemon", "gio", "gdbus") if shutil.which(t) is None]
    if not os.path.exists(DAEMON):
        missing.append(DAEMON)
    if not any(Path("/usr/lib").glob("*/gio/modules/libgvfsdbus.so")):
        missing.append("libgvfsdbus.so (GIO module)")
    if missing:
        pytest.fail(
            f"gvfs oracle tools missing: {', '.join(missing)}; install the Debian packages: "
            f"apt-get install -y --no-install-recommends {PACKAGES}",
            pytrace=False,
        )


class Session:
    """A private session bus with HOME in a temporary folder; gvfsd-metadata
    is D-Bus-activated by the first metadata write."""

    def __init__(self, root: Path) -> None:
        _require_tools()
        self.home = root / "home"
        self.run = root / "run"
        self.data = self.home / ".local" / "share"
        self.folder = self.data / "gvfs-metadata"
        self.home.mkdir(parents=True, exist_ok=True)
        self.run.mkdir(mode=0o700, exist_ok=True)
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "XDG_DATA_HOME": str(self.data),
            "XDG_RUNTIME_DIR": str(self.run),
            "LANG": "C.UTF-8",
        }
        self.bus: subprocess.Popen | None = None

    def start(self) -> None:
        self.bus = subprocess.Popen(
            ["dbus-daemon", "--session", "--nofork", "--print-address=1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self.env,
            text=True,
        )
        self.env["DBUS_SESSION_BUS_ADDRESS"] = self.bus.stdout.readline().strip()

    def stop_bus(self) -> None:
        """Close the bus: a running gvfsd-metadata flushes (rebuilds) and exits."""
        pid = self.daemon_pid()
        if self.bus is not None:
            self.bus.terminate()
            self.bus.wait(timeout=10)
            self.bus = None
        if pid:
            _wait_exit(pid)

    def stop_daemon(self) -> None:
        """SIGTERM gvfsd-metadata: it exits WITHOUT flushing its journal."""
        pid = self.daemon_pid()
        if pid:
            os.kill(pid, signal.SIGTERM)
            _wait_exit(pid)

    def daemon_pid(self) -> int | None:
        if self.bus is None:
            return None
        out = self.call(
            "gdbus", "call", "--session", "--dest", "org.freedesktop.DBus",
            "--object-path", "/org/freedesktop/DBus",
            "--method", "org.freedesktop.DBus.GetConnectionUnixProcessID", "org.gtk.vfs.Metadata",
            check=False,
        )  # fmt: skip
        if out.returncode != 0:
            return None
        return int(out.stdout.strip().strip("(),").split()[-1])

    def call(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(args, env=self.env, capture_output=True, text=True, check=check, timeout=30)

    def gio_set(
        self, rel: str, key: str, *values: str, kind: str | None = None
    ) -> subprocess.CompletedProcess:
        args = (
            ["gio", "set"]
            + (["-t", kind] if kind else [])
            + [str(self.home / rel.lstrip("/")), f"metadata::{key}"]
        )
        return self.call(*args, *values, check=False)

    def info(self, rels: list[str]) -> dict[str, dict[str, str]]:
        """`gio info -a metadata::*` for home-relative paths -> {path: {key: printed value}}."""
        out: dict[str, dict[str, str]] = {}
        for start in range(0, len(rels), 100):
            batch = rels[start : start + 100]
            files = [str(self.home / r.lstrip("/")) if r != "/" else str(self.home) for r in batch]
            result = self.call("gio", "info", "-a", "metadata::*", *files)
            current: dict[str, str] | None = None
            by_path = dict(zip(files, batch, strict=True))
            for line in result.stdout.splitlines():
                if line.startswith("local path: "):
                    current = out.setdefault(by_path[line[len("local path: ") :]], {})
                elif line.startswith("  metadata::") and current is not None:
                    key, _, value = line[len("  metadata::") :].partition(": ")
                    current[key] = value
        return out

    def close(self) -> None:
        if self.bus is not None:
            self.stop_daemon()
            self.bus.terminate()
            self.bus.wait(timeout=10)
            self.bus = None


def _wait_exit(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.02)
    raise AssertionError(f"gvfsd-metadata (pid {pid}) did not exit")


@pytest.fixture
def session(tmp_path):
    s = Session(tmp_path)
    s.start()
    yield s
    s.close()


def printed(value) -> str:
    """How gio info prints a metadata value."""
    return "[" + ", ".join(value) + "]" if isinstance(value, list) else value


def home_metadata(folder: Path) -> dict[str, dict]:
    records = parse_lines(GvfsFormat(folder, {}).derived_views()["home/metadata.jsonl"]())
    return {r["path"]: r for r in records}


def touch_paths(home: Path, paths: list[str]) -> None:
    """Create the files (directories for paths that have children) so gio can stat them."""
    dirs = {p.rsplit("/", 1)[0] for p in paths if p.count("/") > 1}
    for d in sorted(dirs):
        parts = d.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            (home / "/".join(parts[:i])).mkdir(exist_ok=True)
    for p in paths:
        target = home / p.lstrip("/")
        if p != "/" and not target.exists():
            target.touch()


def assert_matches_gio(session: Session, expected: dict[str, dict], extra_paths: list[str] = ()) -> int:
    """gio info agrees with fmtfs's metadata.jsonl for every path (and shows
    nothing for `extra_paths`, which fmtfs says have no keys)."""
    paths = sorted(expected) + [p for p in extra_paths if p not in expected]
    touch_paths(session.home, paths)
    seen = session.info(paths)
    for path in paths:
        want = {k: printed(v) for k, v in expected[path]["metadata"].items()} if path in expected else {}
        assert seen.get(path, {}) == want, path
    return len(paths)


# -- fixtures read by gio and by fmtfs ---------------------------------------


@pytest.mark.parametrize(
    "snapshot", ["01-fresh-journal", "02-after-timer-flush", "03-tree-plus-journal", "05-many-journal"]
)
def test_fixture_snapshots_agree_with_gio(session, snapshot):
    shutil.copytree(FIXTURES / snapshot, session.folder)
    for f in session.folder.iterdir():
        f.chmod(0o600)
    expected = home_metadata(session.folder)
    assert expected
    gone = ["/Documents/b.txt", "/Documents/sub/c.txt", "/Documents", "/Many"]
    assert assert_matches_gio(session, expected, gone) >= len(expected)


def test_bad_crc_journal_agrees_with_gio_and_both_refuse_writes(session):
    session.folder.mkdir(parents=True)
    shutil.copy(FIXTURES / "02-after-timer-flush" / "home", session.folder / "home")
    shutil.copy(FIXTURES / "10-bad-crc-journal.log", session.folder / "home-1e0f4c72.log")
    for f in session.folder.iterdir():
        f.chmod(0o600)
    expected = home_metadata(session.folder)
    assert expected["/Documents/a.txt"]["metadata"] == {"k1": "v1", "tags": ["red", "green", "blue"]}
    assert_matches_gio(session, expected)
    touch_paths(session.home, ["/Documents/a.txt"])
    refused = session.gio_set("Documents/a.txt", "k4", "v4")
    assert refused.returncode != 0 and "Unable to set metadata key" in refused.stderr
    session.stop_daemon()  # it scheduled a write-out; do not let it repair the journal
    with pytest.raises(BadRecord, match="invalid"):
        GvfsFormat(session.folder, {}).writer("home/journal.jsonl", False).write(
            [{"op": "set", "path": "/Documents/a.txt", "key": "k4", "value": "v4"}]
        )


# -- (a) the daemon writes, fmtfs decodes -------------------------------------


def test_daemon_journal_decodes_and_rebuild_is_byte_identical(session, tmp_path):
    touch_paths(session.home, ["/D/a.txt", "/D/b.txt", "/D/sub/c.txt", "/M/x.txt"])
    t0 = int(time.time())
    ok = [
        session.gio_set("D/a.txt", "comment", "hello wörld ✓"),
        session.gio_set("D/a.txt", "tags", "red", "", "red", "blue", kind="stringv"),
        session.gio_set("D/b.txt", "custom-icon", "file:///x.png"),
        session.gio_set("D/sub/c.txt", "pos", "1,2"),
        session.gio_set("/", "home-key", "on home"),
        session.gio_set("D/a.txt", "comment", kind="unset"),
        session.call(
            "gio", "move", str(session.home / "D/b.txt"), str(session.home / "D/b2.txt"), check=False
        ),
        session.call("gio", "remove", str(session.home / "D/sub/c.txt"), check=False),
        session.call("gio", "move", str(session.home / "D"), str(session.home / "E"), check=False),
    ]
    # many keys and files so the rebuilt string blocks grow the hash table 8 -> 64
    for i in range(40):
        (session.home / "M" / f"f{i:02d}").touch()
        ok.append(session.gio_set(f"M/f{i:02d}", f"k{i % 20}", f"value-{i}"))
    ok.append(session.gio_set("M/x.txt", "list", *[f"item{i % 61}" for i in range(70)], kind="stringv"))
    t1 = int(time.time())
    assert all(r.returncode == 0 for r in ok), [r.stderr for r in ok if r.returncode]

    snapshot = tmp_path / "snapshot"
    shutil.copytree(session.folder, snapshot)  # the daemon keeps the journal mmapped: a live copy
    fmt = GvfsFormat(snapshot, {})
    (stream,) = [s for s in fmt.streams() if s.name.startswith("home-")]
    lines = [r for c in stream.scan(None, None) for r in c.records["home/journal.jsonl"]]
    ops = [(r["op"], r["path"]) for r in lines[:12]]
    assert ops == [
        ("set", "/D/a.txt"),
        ("setv", "/D/a.txt"),
        ("set", "/D/b.txt"),
        ("set", "/D/sub/c.txt"),
        ("set", "/"),
        ("unset", "/D/a.txt"),
        ("copy", "/D/b2.txt"),
        ("remove", "/D/b.txt"),
        ("remove", "/D/sub/c.txt"),
        ("copy", "/E"),
        ("remove", "/D"),
        ("set", "/M/f00"),
    ]
    assert lines[1]["value"] == ["red", "", "red", "blue"]
    assert lines[6]["source"] == "/D/b.txt"
    stamps = {r["time"] for r in lines}
    assert all(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)) <= s for s in stamps)
    assert all(s <= time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t1)) for s in stamps)

    expected = home_metadata(snapshot)
    assert expected["/E/a.txt"]["metadata"] == {"tags": ["red", "", "red", "blue"]}
    assert assert_matches_gio(session, expected, ["/D/a.txt", "/E/sub/c.txt"]) > 40

    # close the bus: the daemon rebuilds; fmtfs's rebuild of the snapshot is byte-identical
    session.stop_bus()
    live_tree = (session.folder / "home").read_bytes()
    new_tag = read_header(live_tree).tag
    model = store.effective_model(store.read_state(snapshot / "home"))
    assert build_tree(model, new_tag) == live_tree
    assert not (session.folder / f"home-{read_header((snapshot / 'home').read_bytes()).tag:08x}.log").exists()
    after = home_metadata(session.folder)
    assert {p: r["metadata"] for p, r in after.items()} == {p: r["metadata"] for p, r in expected.items()}


# -- (b) fmtfs writes, the daemon reads ---------------------------------------


def test_fmtfs_appends_and_rotates_and_gio_reads_them(session, monkeypatch):
    touch_paths(session.home, ["/W/seed.txt"])
    assert session.gio_set("W/seed.txt", "seed", "1").returncode == 0
    session.stop_daemon()  # no flush: the seed stays in the journal
    fmt = GvfsFormat(session.folder, {})
    writer = fmt.writer("home/journal.jsonl", False)
    writer.write(
        [
            {"op": "set", "path": "/W/a.txt", "key": "comment", "value": "hé ✓"},
            {"op": "setv", "path": "/W/a.txt", "key": "tags", "value": ["x", "", "x"]},
            {"op": "set", "path": "/W/b.txt", "key": "gone", "value": "soon"},
            {"op": "unset", "path": "/W/b.txt", "key": "gone"},
            {"op": "set", "path": "/W/sub/c.txt", "key": "k", "value": "v"},
            {"op": "copy", "path": "/W/sub2", "source": "/W/sub"},
            {"op": "remove", "path": "/W/sub"},
            {"op": "set", "path": "/", "key": "home-key", "value": "top"},
        ]
    )
    writer.sync()
    expected = home_metadata(session.folder)
    assert expected["/W/sub2/c.txt"]["metadata"] == {"k": "v"}
    assert_matches_gio(session, expected, ["/W/b.txt", "/W/sub/c.txt"])

    # a fresh daemon accepts our journal as valid and appends after our entries
    assert session.gio_set("W/a.txt", "after", "daemon").returncode == 0
    session.stop_daemon()
    (stream,) = GvfsFormat(session.folder, {}).streams()
    last = [r for c in stream.scan(None, None) for r in c.records["home/journal.jsonl"]][-1]
    assert (last["op"], last["key"], last["value"]) == ("set", "after", "daemon")

    # enough entries to fill the journal grown to its cap: rebuild + rotation
    monkeypatch.setattr(store, "MAX_JOURNAL_SIZE", 2 * JOURNAL_SIZE)
    old_tag = read_header((session.folder / "home").read_bytes()).tag
    batch = [
        {"op": "set", "time": 1_795_400_000 + i, "path": f"/R/f{i:04d}", "key": f"k{i % 7}", "value": f"v{i}"}
        for i in range(3000)
    ]
    fmt.writer("home/journal.jsonl", False).write(batch)
    tree = (session.folder / "home").read_bytes()
    new_tag = read_header(tree).tag
    assert new_tag != old_tag
    logs = sorted(p.name for p in session.folder.glob("home-*.log"))
    assert logs == [f"home-{new_tag:08x}.log"]
    expected = home_metadata(session.folder)
    assert expected["/R/f2999"]["metadata"] == {"k3": "v2999"}
    assert expected["/W/a.txt"]["metadata"]["after"] == "daemon"
    sample = {p: r for p, r in expected.items() if not p.startswith("/R/") or p.endswith(("0", "9"))}
    assert assert_matches_gio(session, sample) > 300

    # and the daemon keeps working on the rotated files: write, flush, compare
    assert session.gio_set("W/a.txt", "final", "yes").returncode == 0
    session.stop_bus()
    final = home_metadata(session.folder)
    assert final["/W/a.txt"]["metadata"]["final"] == "yes"
    assert {p: r["metadata"] for p, r in final.items() if p != "/W/a.txt"} == {
        p: r["metadata"] for p, r in expected.items() if p != "/W/a.txt"
    }


def test_a_bulk_write_grows_the_journal_and_the_daemon_reads_and_extends_it(session, tmp_path):
    """50,000 sets go into one grown journal (no rebuild per 32 KiB); gio
    reads it, the daemon appends to it and its own rebuild keeps every entry,
    byte for byte as fmtfs rebuilds it (folders of 1,000 names: string
    blocks whose hash tables grew eight times)."""
    touch_paths(session.home, ["/B/seed.txt"])
    assert session.gio_set("B/seed.txt", "seed", "1").returncode == 0
    session.stop_daemon()
    tag = read_header((session.folder / "home").read_bytes()).tag
    writer = GvfsFormat(session.folder, {}).writer("home/journal.jsonl", False)
    lines = [
        {
            "op": "set",
            "time": 1_795_400_000 + i,
            "path": f"/B/d{i // 1000:02d}/f{i:05d}",
            "key": "n",
            "value": f"v{i}",
        }
        for i in range(50_000)
    ]
    for i in range(0, len(lines), 500):  # as FUSE hands a `cat` over, in pieces
        writer.write(lines[i : i + 500])
    writer.sync()
    assert read_header((session.folder / "home").read_bytes()).tag == tag  # not rotated
    journal = session.folder / store.journal_name("home", tag)
    assert JOURNAL_SIZE < journal.stat().st_size <= store.MAX_JOURNAL_SIZE
    expected = home_metadata(session.folder)
    assert len(expected) == 50_001
    sample = {p: r for p, r in expected.items() if p.endswith(("000", "999", "seed.txt"))}
    started = time.perf_counter()
    assert assert_matches_gio(session, sample) > 100
    print(
        f"gio info of {len(sample)} paths over a {journal.stat().st_size >> 10} KiB journal: "
        f"{time.perf_counter() - started:.2f} s"
    )

    # the daemon appends after our entries in the grown journal, then rebuilds on exit
    assert session.gio_set("B/seed.txt", "after", "daemon").returncode == 0
    session.stop_daemon()
    (stream,) = GvfsFormat(session.folder, {}).streams()
    last = [r for c in stream.scan(None, None) for r in c.records["home/journal.jsonl"]][-1]
    assert (last["op"], last["key"], last["value"]) == ("set", "after", "daemon")
    assert session.gio_set("B/seed.txt", "final", "yes").returncode == 0
    snapshot = tmp_path / "snapshot"
    shutil.copytree(session.folder, snapshot)  # the daemon keeps the journal mmapped: a live copy
    session.stop_bus()
    live_tree = (session.folder / "home").read_bytes()
    assert read_header(live_tree).tag != tag  # the daemon's rebuild
    model = store.effective_model(store.read_state(snapshot / "home"))
    assert build_tree(model, read_header(live_tree).tag) == live_tree
    final = home_metadata(session.folder)
    assert final["/B/seed.txt"]["metadata"] == {"seed": "1", "after": "daemon", "final": "yes"}
    assert {p: r["metadata"] for p, r in final.items() if p != "/B/seed.txt"} == {
        p: r["metadata"] for p, r in expected.items() if p != "/B/seed.txt"
    }
