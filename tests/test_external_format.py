"""A format from outside fmtfs gets every layer with no core change.

`tally` is written here, as a third party would: a package of its own
(`tally_format`) in a temporary folder, registered through a
`*.dist-info/entry_points.txt` under the `fmtfs.formats` group, found by
importlib.metadata because the folder is on PYTHONPATH.  A tally sheet is a
`<name>.tally` text file: a `TALLY 1` header line, then `<item> <count>`
lines; it shows as `<name>/records.jsonl` with `{"line", "item", "count"}`
lines, whose kinds it declares (fmtfs.formats.schema).  It declares one
option, `tally_scale` (every count is multiplied by it), which fmtfs spells
--tally-scale, -o tally_scale= and Spark tallyScale.

With only that, the test gets: `fmtfs ls` and `cat` (the option as a flag),
a real FUSE mount (ls, cat, the option in -o, an append written through to
the native file, a Parquet twin read by pyarrow), the mount's handling of a
decoder that raises (EIO, the traceback in the log, the mount alive), and
Spark: `spark.read.json` of the mount and the fmtfs data source with the
option in camelCase."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from tests.mounting import fmtfs, mounted, refused_write

REPO = Path(__file__).resolve().parents[1]

TALLY_FORMAT = '''
"""tally sheets: `<name>.tally` files of `<item> <count>` lines after a
`TALLY 1` header; one view `<name>/records.jsonl` per sheet."""

import os
import re
from pathlib import Path

from fmtfs.formats.base import BadRecord, Chunk, Format, Problem, ReadOnlyView, Stream, Writer
from fmtfs.formats.options import Option
from fmtfs.formats.schema import Field, Kind, ViewSchema

HEADER = b"TALLY 1\\n"
LINES_PER_CHUNK = 3
LINE = re.compile(rb"([^ \\n]+) (-?[0-9]+)")


class TallyStream(Stream):
    def __init__(self, path, scale):
        super().__init__(path.stem, path)
        self.view = f"{path.stem}/records.jsonl"
        self.scale = scale

    def view_paths(self):
        return [self.view]

    def _records(self, lines, first):
        out = []
        for number, line in enumerate(lines, first):
            item, count = LINE.fullmatch(line).groups()
            out.append({"line": number, "item": item.decode(), "count": int(count) * self.scale})
        return out

    def scan(self, start, state):
        data = self.path.read_bytes()
        position = len(HEADER) if start is None else start
        number = 1 if state is None else state["line"]
        while True:
            lines, end = [], position
            while len(lines) < LINES_PER_CHUNK and data.find(b"\\n", end) >= 0:
                cut = data.index(b"\\n", end)
                if not LINE.fullmatch(data[end:cut]):
                    if lines:
                        break
                    yield Problem(self.path.name, end, "not an <item> <count> line")
                    return
                lines.append(data[end:cut])
                end = cut + 1
            if not lines:
                return
            yield Chunk(position, end, {"line": number}, {self.view: self._records(lines, number)})
            position, number = end, number + len(lines)

    def decode(self, chunk):
        if os.environ.get("TALLY_BROKEN_DECODE"):  # the test's stand-in for a decoder bug
            raise ValueError("tally decoder bug")
        with open(self.path, "rb") as fh:
            fh.seek(chunk.start)
            lines = fh.read(chunk.end - chunk.start).splitlines()
        return {self.view: self._records(lines, chunk.state["line"])}


class TallyWriter(Writer):
    def __init__(self, path):
        self.path = path

    def write(self, records):
        lines = []
        for record in records:
            item, count = record.get("item"), record.get("count")
            if not isinstance(item, str) or not re.fullmatch(r"[^ \\n]+", item) or type(count) is not int:
                raise BadRecord("a tally line is {\\"item\\": \\"<word>\\", \\"count\\": <integer>}")
            lines.append(f"{item} {count}\\n".encode())
        with open(self.path, "ab") as fh:
            fh.write(b"".join(lines))


class TallyFormat(Format):
    name = "tally"
    title = "tally sheets"
    looks_for = "<name>.tally sheets"
    declared_options = (
        Option("tally_scale", "multiply every count by this", parse=int, default=1, metavar="N"),
    )

    @classmethod
    def detect(cls, source):
        return source.is_dir() and any(p.suffix == ".tally" for p in source.iterdir())

    def _sheets(self):
        return sorted(p for p in self.source.iterdir() if p.suffix == ".tally")

    def streams(self):
        return [TallyStream(p, self.options["tally_scale"]) for p in self._sheets()]

    def view_schema(self, view_path):
        return ViewSchema(Field("line", Kind.INT), Field("item", Kind.STRING), Field("count", Kind.INT))

    def writer(self, view_path, create):
        for path in self._sheets():
            if view_path == f"{path.stem}/records.jsonl" and self.options["tally_scale"] == 1:
                return TallyWriter(path)
        raise ReadOnlyView(view_path)
'''

ENTRY_POINTS = """\
[fmtfs.formats]
tally = tally_format:TallyFormat
"""


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Iterator[Path]:
    """The tally package and its metadata, on sys.path and PYTHONPATH for
    this module only (so Spark's Python workers find it too)."""
    root = tmp_path_factory.mktemp("third-party")
    (root / "tally_format.py").write_text(textwrap.dedent(TALLY_FORMAT))
    info = root / "tally_format-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tally-format\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    saved_path, saved_env = list(sys.path), os.environ.get("PYTHONPATH")
    sys.path.insert(0, str(root))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(root), str(REPO), *filter(None, [saved_env])])
    yield root
    sys.path[:] = saved_path
    if saved_env is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = saved_env


SHEET = b"TALLY 1\napples 3\npears 5\nplums 7\nfigs 11\n"
EXPECTED = [
    {"line": 1, "item": "apples", "count": 3},
    {"line": 2, "item": "pears", "count": 5},
    {"line": 3, "item": "plums", "count": 7},
    {"line": 4, "item": "figs", "count": 11},
]


def lines(records: list[dict]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def scaled(factor: int) -> list[dict]:
    return [r | {"count": r["count"] * factor} for r in EXPECTED]


@pytest.fixture
def source(tmp_path: Path) -> Path:
    folder = tmp_path / "sheets"
    folder.mkdir()
    (folder / "market.tally").write_bytes(SHEET)
    return folder


def test_the_format_is_listed_detected_and_printed_without_a_mount(package, source, tmp_path):
    cache = tmp_path / "cache"
    listing = fmtfs("ls", source, "-R", "--cache-dir", cache).stdout.decode().split()
    assert "market/" in listing and "market/records.jsonl" in listing
    assert fmtfs("cat", source, "market/records.jsonl", "--cache-dir", cache).stdout == lines(EXPECTED)
    # its option is a flag of fmtfs's own command line, parsed by the format's declaration
    tripled = fmtfs("cat", source, "market/records.jsonl", "--tally-scale", "3", "--cache-dir", cache)
    assert tripled.stdout == lines(scaled(3))
    bad = fmtfs("cat", source, "market/records.jsonl", "--tally-scale", "x", check=False)
    assert bad.returncode == 2 and b"tally_scale" in bad.stderr and b"Traceback" not in bad.stderr
    assert "--tally-scale N" in fmtfs("mount", "--help").stdout.decode()
    # _fmtfs.json shows the declared option in force
    info = orjson.loads(fmtfs("info", source, "--json", "--tally-scale", "2", "--cache-dir", cache).stdout)
    assert info["format"] == "tally" and info["options"]["tally_scale"] == 2 and info["records"] == 4


def test_an_unregistered_format_is_not_detected(source, tmp_path):
    """Without the entry point on the path, the same folder is nothing fmtfs knows."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = fmtfs("ls", source, "--cache-dir", tmp_path / "cache", check=False, env=env)
    assert done.returncode == 1 and b"no known format detected" in done.stderr
    assert b"tally" not in done.stderr


def test_an_entry_point_under_a_built_in_name_is_ignored(tmp_path):
    """Built-in names are reserved (fmtfs.formats.registry): a package that
    registers `beats` changes nothing, and says so when the formats are listed."""
    root = tmp_path / "squatter"
    info = root / "squatter-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: squatter\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[fmtfs.formats]\nbeats = squatter:Beats\n")
    code = (
        "import logging; logging.basicConfig()\n"
        "from fmtfs.formats import registry\n"
        "print(registry.format_class('beats').__module__, registry.names())"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), str(REPO)]))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.split(" ", 1)[0] == "fmtfs.formats.beats.format"
    assert "squatter:Beats is ignored, beats is a built-in format" in done.stderr


def test_a_real_mount_reads_writes_and_has_a_parquet_twin(package, source, tmp_path):
    with mounted(source, "-o", "tally_scale=1", cache_dir=tmp_path / "cache") as mnt:
        assert sorted(os.listdir(mnt / "market")) == ["records.jsonl"]
        view = mnt / "market" / "records.jsonl"
        assert view.read_bytes() == lines(EXPECTED)
        twin = pq.read_table(mnt / "parquet" / "market" / "records.parquet")
        assert twin.to_pylist() == EXPECTED
        assert [str(t) for t in twin.schema.types] == ["int64", "string", "int64"]  # as declared
        with open(view, "ab") as fh:
            fh.write(b'{"item": "kiwis", "count": 13}\n')
        assert (source / "market.tally").read_bytes() == SHEET + b"kiwis 13\n"
        assert view.read_bytes() == lines([*EXPECTED, {"line": 5, "item": "kiwis", "count": 13}])
        assert refused_write(view, b'{"item": "two words", "count": 1}\n') == errno.EINVAL
        assert (source / "market.tally").read_bytes() == SHEET + b"kiwis 13\n"  # nothing of it written
        info = orjson.loads((mnt / "_fmtfs.json").read_bytes())
        assert info["format"] == "tally" and info["options"]["tally_scale"] == 1
    # the -o spelling with dashes, as for every declared option
    with mounted(source, "-o", "tally-scale=10", cache_dir=tmp_path / "cache2") as mnt:
        first = orjson.loads((mnt / "market" / "records.jsonl").read_bytes().splitlines()[0])
        assert first == {"line": 1, "item": "apples", "count": 30}


def test_a_decoder_that_raises_is_eio_with_a_traceback_and_the_mount_lives(package, source, tmp_path):
    cache = tmp_path / "cache"
    fmtfs("index", source, "--cache-dir", cache)  # indexed (and twinned) while decoding works
    env = dict(os.environ, TALLY_BROKEN_DECODE="1")
    log_file = tmp_path / "mount.log"
    with mounted(source, "--log-file", log_file, cache_dir=cache, env=env) as mnt:
        view = mnt / "market" / "records.jsonl"
        assert view.stat().st_size == len(lines(EXPECTED))  # sizes come from the index
        with pytest.raises(OSError) as failed:
            view.read_bytes()
        assert failed.value.errno == errno.EIO  # a decoder bug, not the reader's EINVAL
        # the mount still serves
        assert orjson.loads((mnt / "_fmtfs.json").read_bytes())["format"] == "tally"
        assert os.listdir(mnt / "market") == ["records.jsonl"]
    log = log_file.read_text()
    assert "Traceback" in log and "ValueError: tally decoder bug" in log


@pytest.fixture(scope="module")
def spark(package):
    from tests.sparking import start_session

    session = start_session("local[2]", "fmtfs-external-format")
    yield session
    session.stop()


def test_spark_reads_the_mount_and_the_data_source_takes_the_option(package, spark, source, tmp_path):
    with mounted(source, cache_dir=tmp_path / "mount-cache") as mnt:
        rows = spark.read.json(str(mnt / "market")).orderBy("line").collect()
        assert [r.asDict() for r in rows] == EXPECTED
    frame = (
        spark.read.format("fmtfs")
        .option("view", "market/records.jsonl")
        .option("tallyScale", "2")
        .option("cacheDir", str(tmp_path / "spark-cache"))
        .load(str(source))
    )
    assert [r.asDict() for r in frame.orderBy("line").collect()] == scaled(2)
    # Spark lowercases option keys; any case of the camelCase name works
    frame = (
        spark.read.format("fmtfs")
        .option("format", "tally")
        .option("view", "market")
        .option("TALLYSCALE", "5")
        .option("cacheDir", str(tmp_path / "spark-cache"))
        .load(str(source))
    )
    assert sorted(r["count"] for r in frame.collect()) == sorted(r["count"] for r in scaled(5))
