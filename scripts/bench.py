#!/usr/bin/env python3
"""fmtfs benchmark: every figure of issue #8 as a ratio to a baseline run
side by side, in the same run, on the same bytes.

    .venv/bin/python scripts/bench.py 100                     # 100 MB of native data per format
    .venv/bin/python scripts/bench.py 100 --formats beats,gvfs=20 --json out.json
    .venv/bin/python scripts/bench.py 0.3 --no-spark --streams 50

Per format it generates a sample source of about SIZE MB (fmtfs.samples),
then measures, with real mounts (`python -m fmtfs mount`) and real `cat`/`ls`
subprocesses, every format's figures without Spark first, then the Spark
ones (the JVM stays up once started):

  first_mount    index build rate (`fmtfs mount`, empty cache, then the first stat of every view
                 `cat` reads: derived views render then)  vs  the plain decode+render loop
                 (each the best of 7, the two taken in turn)
  cold_cat       `cat` of every record view over a fresh mount, from their first stat
                 vs  the plain decode+render loop (the best of 5 mounts)
                 (the pieces the first mount's scan rendered are kept: read back, not decoded;
                 cold_cat_decoding: the same over a mount of a cache of its own that keeps none,
                 every chunk and derived view decoded)
  warm_cat       the same `cat` again                           vs  `cat` of the same bytes in regular files
                 (each the best of 9, the two taken in turn)
  spark_json     spark.read.json(view folder).count(), a fresh mount, then again  vs  a plain local folder
                 holding the same files (Spark lists a folder recursively: a `buckets/` sub-folder too)
                 (spark_glob: the same with the glob `folder/*.jsonl` the README recommends, on another
                 fresh mount, vs the same glob over a plain folder of the folder's own views)
                 (each the median of 5 fresh mounts, the plain reads' too, taken in turn)
  data_source    spark.read.format("fmtfs"), default options, first query and again  vs  plain read.json
                 (each the median of 5, in turn with plain ones: first queries over copies of the cache)
                 (data_source_unkept: again with keptBytes=0, no Arrow batch kept or loaded),
                 Spark's Python workers started just before (python_ds_start: a session's first
                 Python data source query, one row per core, vs the same plain read.json;
                 python_ds_floor: that query again right before the format's first, the floor
                 of the data_source figures)
  time_filter    the data source with a 1/24-of-the-span time filter vs  its full read, both run once
                 before (the first filtered query starts Spark's Python worker for filter pushdown)
  ls_N           `ls -l` of N stream views on a second mount    vs  `ls -l` of N regular files
                 (the median of 3 mounts; ls_N_floor: vs a minimal pyfuse3 filesystem answering
                 from a dict, scripts/minimal_fuse.py: the kernel, libfuse, pyfuse3 and trio alone)
  write_through  `cat lines >> view` (20,000 lines)              vs  the format's encoder in process
  peak_rss_mb    peak PSS of the mount and its children while it serves one more cold cat of each
                 kind, untimed (MB, not a ratio: sampled every 50 ms, never during a timed cat)
  first_read_rss_mb  the same over an empty cache, from the first stat of every view (derived
                 views render then) through the cat (MB)
  twins_build    `fmtfs index` building every Parquet twin (index built) vs the plain loop (time ratio)
  twins_background_s  the background builder making every twin after a fresh mount (seconds), with
                 twins_rss_mount_mb and twins_rss_total_mb: the peak RSS of the mount alone and with
                 its children (the builder process, decode workers) meanwhile (MB, sampled every
                 50 ms); twins_rss_index_mb: the peak RSS of `fmtfs index` building them (MB)
  twins_ls       `ls -l parquet/<folder>` with the twins on disk vs as many regular files
  spark_parquet  spark.read.parquet(parquet/<folder>).count() over a mount vs spark.read.json of the
                 same JSON bytes in a plain folder (scripts/bench_twins.py: these for one format, any size)

The "plain loop" (scripts/plain_loops.py) decodes and renders without fmtfs
(beats, wallaby, kestrel); proio and gvfs, whose decoding needs a schema
machinery, are measured against fmtfs's own single-thread in-process decode
(their `baseline` column says `fmtfs-1t`).  Ratios are oriented as the
issue's targets: throughput ratios (higher is better) for cat, mount and
write; time ratios (lower is better) for Spark and listing.  Each figure
also records the hypervisor's steal while it was measured (`steal_s`, from
/proc/stat; printed when not zero): a figure timed while this machine's
vCPUs waited for the host ran on a slower machine than the ones around it.

Adding a figure: write `def figure_x(run: FormatRun) -> list[Figure]` and
append it to FIGURES (or SPARK_FIGURES when it needs Spark).  Each figure
function mounts and unmounts what it needs; FormatRun holds the generated
source and the baseline timings.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import multiprocessing
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from fnmatch import fnmatch
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from plain_loops import PLAIN_LOOPS, gc_paused, keep_freed_heap  # noqa: E402

from fmtfs.formats import open_source  # noqa: E402
from fmtfs.render import parse_lines, render_views  # noqa: E402

FORMATS = ("beats", "wallaby", "kestrel", "proio", "gvfs")
PARQUET = "parquet"  # the mount's folder of Parquet twins
OPTIONS = {"key": None, "time_bucket": "hour", "descriptor_set": None, "kestrel_journal_size": 16 << 20}


@dataclass(frozen=True)
class Layout:
    """Where a format's sample keeps what the bench reads and writes."""

    views: tuple[str, ...]  # globs of the record views `cat` reads (what the baseline renders)
    spark_folder: str  # the view folder Spark reads
    write_view: Callable[[Path], str]  # the view `cat lines >>` appends to (given the source folder)
    positional: tuple[str, ...]  # keys the writer assigns itself: dropped from written lines
    stream_files: Callable[[Path], list[Path]]  # the files of one stream, copied to make N streams
    renamed: Callable[[str, int], str]  # a stream file's name in copy i
    stream_view: Callable[[int, str], str]  # the view of copy i (given the first stream file's name)


def _newest(folder: Path, pattern: str, field: int) -> int:
    """The largest number among the names of `folder`'s files matching
    `pattern`, at dot-separated `field` (`12.seg`, `jobs.1795959152892`)."""
    return max(int(p.name.split(".")[field]) for p in folder.glob(pattern))


LAYOUTS: dict[str, Layout] = {
    "beats": Layout(
        views=("segments/*.jsonl",),
        spark_folder="segments",
        write_view=lambda src: f"segments/{_newest(src, '*.seg', 0)}.jsonl",
        positional=(),
        stream_files=lambda src: [src / "0.seg"],
        renamed=lambda name, i: f"{i}.seg",
        stream_view=lambda i, name: f"segments/{i}.jsonl",
    ),
    "wallaby": Layout(
        views=("*/records.jsonl",),
        spark_folder="events.log",
        write_view=lambda src: "events.log/records.jsonl",
        positional=("index",),
        stream_files=lambda src: [src / "events.log", src / "events.log.idx"],
        renamed=lambda name, i: name.replace("events", f"l{i:05d}"),
        stream_view=lambda i, name: f"l{i:05d}.log/records.jsonl",
    ),
    "kestrel": Layout(
        views=("*/journal/*.jsonl",),
        spark_folder="jobs/journal",
        write_view=lambda src: f"jobs/journal/{_newest(src, 'jobs.[0-9]*', 1)}.jsonl",
        positional=("id",),
        stream_files=lambda src: [min(src.glob("jobs.[0-9]*"))],
        renamed=lambda name, i: f"q{i:05d}.{name.split('.')[1]}",
        stream_view=lambda i, name: f"q{i:05d}/journal/{name.split('.')[1]}.jsonl",
    ),
    "proio": Layout(
        views=("*/events.jsonl",),
        spark_folder="sample.proio",
        write_view=lambda src: "sample.proio/events.jsonl",
        positional=("event",),
        stream_files=lambda src: [src / "sample.proio"],
        renamed=lambda name, i: f"s{i:05d}.proio",
        stream_view=lambda i, name: f"s{i:05d}.proio/events.jsonl",
    ),
    "gvfs": Layout(
        views=("*/journal.jsonl", "*/metadata.jsonl"),
        spark_folder="home",
        write_view=lambda src: "home/journal.jsonl",
        positional=(),
        stream_files=lambda src: [src / "home", *src.glob("home-*.log")],
        renamed=lambda name, i: name.replace("home", f"t{i:05d}"),
        stream_view=lambda i, name: f"t{i:05d}/journal.jsonl",
    ),
}


@dataclass
class Figure:
    """One row of the table: fmtfs's measurement, the baseline's, their ratio."""

    name: str
    ratio: float
    fmtfs: str  # what fmtfs did, with its time or rate
    baseline: str  # what the baseline did
    target: str
    steal: float = 0.0  # seconds of this machine's vCPUs the hypervisor gave away meanwhile (stolen_seconds)


@dataclass
class FormatRun:
    """One format's generated source and what every figure shares."""

    fmt: str
    layout: Layout
    scratch: Path
    source: Path
    records: int
    native_bytes: int
    args: argparse.Namespace
    baseline_seconds: list[float] = field(default_factory=list)  # one per baseline run
    baseline_kind: str = ""
    baseline: ProcessPoolExecutor | None = None  # the interpreter the baseline runs in (run_baseline)
    rendered_bytes: int = 0
    rows: list[Figure] = field(default_factory=list)  # the figures measured so far

    def fresh(self, name: str) -> Path:
        path = self.scratch / name
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    @property
    def baseline_rate(self) -> float:
        """The baseline's native MB/s: its best run in this format's run (a
        run slowed by the machine must not flatter fmtfs)."""
        return self.native_bytes / 1e6 / min(self.baseline_seconds)


# -- mounts and processes ------------------------------------------------------


def fmtfs(*args: object) -> None:
    subprocess.run([sys.executable, "-m", "fmtfs", *map(str, args)], check=True, cwd=ROOT)


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


@contextmanager
def mounted(source: Path, mnt: Path, cache: Path, *options: str) -> Iterator[float]:
    """Mount (yielding how long `fmtfs mount` took) and always unmount."""
    mnt.mkdir(parents=True, exist_ok=True)
    seconds, _ = timed(lambda: fmtfs("mount", source, mnt, "--cache-dir", cache, *options))
    try:
        yield seconds
    finally:
        for _ in range(50):
            if not os.path.ismount(mnt):
                break
            if subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)


WARM_RUNS = 9  # timings of a warm `cat` (and of the regular files'), of which the best counts


def run_cat(paths: list[Path]) -> float:
    seconds, _ = timed(
        lambda: subprocess.run(["cat", *map(str, paths)], stdout=subprocess.DEVNULL, check=True)
    )
    return seconds


def view_files(mnt: Path, layout: Layout) -> list[Path]:
    return sorted(p for pattern in layout.views for p in mnt.glob(pattern) if p.is_file())


def stat_views(mnt: Path, layout: Layout) -> list[Path]:
    """The views `cat` reads, each stat'ed (its size known) as `ls -l` does."""
    views = view_files(mnt, layout)
    for view in views:
        view.stat()
    return views


def run_first_cat(mnt: Path, layout: Layout) -> float:
    """The first `cat` of every view over a mount, timed from their first
    stat: a view whose size is known only once rendered (a derived view)
    is rendered there, and a user's `cat` waits for it as well."""
    seconds, _ = timed(lambda: run_cat(stat_views(mnt, layout)))
    return seconds


class PeakRss:
    """Samples the summed memory (PSS, see _rss) of the mount process
    serving `mnt` and all its descendants (decode workers included) until
    stopped."""

    def __init__(self, mnt: Path) -> None:
        self.root = _mount_pid(mnt)
        self.peak = 0
        self.own_peak = 0  # the mount process alone
        self.children_peak = 0  # its descendants together (decode workers, the twin builder)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while True:
            own, *children = (_rss(pid) for pid in _tree(self.root))
            self.own_peak = max(self.own_peak, own)
            self.children_peak = max(self.children_peak, sum(children))
            self.peak = max(self.peak, own + sum(children))
            if self._stop.wait(0.05):
                return


def _mount_pid(mnt: Path) -> int:
    needle = str(mnt).encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"mount" in argv and needle in argv and any(b"fmtfs" in a for a in argv):
                return int(entry.name)
    raise SystemExit(f"no fmtfs process serves {mnt}")


def stolen_seconds() -> float:
    """CPU time the hypervisor has kept this machine's vCPUs waiting while
    they had work (/proc/stat's `steal`, all CPUs), so far.  A figure
    measured while it grows ran on a slower machine than the figures
    around it: fmtfs's side uses both cores, a baseline one."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")  # cpu user nice system idle iowait irq softirq steal


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far: what it spent, whatever
    the load of a shared machine made the wall time."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_quiet(pid: int, step: float = 0.1, limit: float = 10.0) -> None:
    """Until `pid` and its descendants stop using the CPU (less than 5 % of
    one core for `step`), or `limit` seconds."""
    end = time.monotonic() + limit
    last = cpu_seconds_of(_tree(pid))
    while time.monotonic() < end:
        time.sleep(step)
        now = cpu_seconds_of(_tree(pid))
        if now - last < step / 20:
            return
        last = now


def cpu_seconds_of(pids: Iterable[int]) -> float:
    """cpu_seconds summed over `pids`, but for those that have ended since
    they were listed (a worker let go)."""
    total = 0.0
    for pid in pids:
        try:
            total += cpu_seconds(pid)
        except OSError:
            continue
    return total


def _tree(root: int) -> list[int]:
    """`root` and its descendants, from each thread's list of the children
    it started: a walk of all of /proc took 6 ms a sample, a tenth of a
    core at the sampler's 50 ms."""
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        for children in Path(f"/proc/{pid}/task").glob("*/children"):
            try:
                todo.extend(int(child) for child in children.read_text().split())
            except OSError:
                continue  # a thread or process that just ended
    return pids


def _rss(pid: int) -> int:
    """The memory a process holds, its pages shared with others split
    among them (PSS): decode workers forked from the mount share its pages,
    and summing their RSS would count those once per process."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


# -- baselines -------------------------------------------------------------------


def run_baseline(run: FormatRun) -> None:
    """Decode + render every record view single-threaded; one more entry in
    run.baseline_seconds.  It runs in an interpreter of its own for the
    format (spawned, keeping the heap it frees: plain_loops.keep_freed_heap),
    whose first pass is run once untimed: every timed pass is the loop at
    its best, whatever the bench ran before (a wallaby loop run in the bench
    process after Beats' figures ran at half its speed)."""
    if run.baseline is None:
        spawn = multiprocessing.get_context("spawn")
        run.baseline = ProcessPoolExecutor(1, mp_context=spawn, initializer=keep_freed_heap)
    warm_up = not run.baseline_seconds
    job = run.baseline.submit(baseline_pass, run.fmt, run.source, run.layout.views, warm_up)
    run.baseline_kind, seconds, run.rendered_bytes = job.result()
    run.baseline_seconds.append(seconds)


def baseline_pass(fmt: str, source: Path, views: tuple[str, ...], warm_up: bool) -> tuple[str, float, int]:
    """In the baseline's interpreter: (kind, seconds, bytes rendered) of one
    timed pass, after an untimed one if `warm_up`."""
    if fmt in PLAIN_LOOPS:
        files, loop = PLAIN_LOOPS[fmt]
        kind = "plain loop"
        one_pass: Callable[[], int] = lambda: sum(len(loop(path)) for path in files(source))  # noqa: E731
    else:
        kind = "fmtfs-1t"
        one_pass = lambda: fmtfs_single_thread(fmt, source, views)  # noqa: E731
    if warm_up:
        one_pass()
    seconds, rendered = timed(one_pass)
    return kind, seconds, rendered


def fmtfs_single_thread(fmt_name: str, source: Path, views: tuple[str, ...]) -> int:
    """fmtfs's own decode + render, one thread, no index, no FUSE: every
    stream scanned, derived views rendered, for the views `cat` reads."""
    fmt = open_source(source, fmt_name, dict(OPTIONS))
    wanted = lambda view: any(fnmatch(view, pattern) for pattern in views)  # noqa: E731
    total = 0
    with gc_paused():
        for stream in fmt.streams():
            for chunk in stream.scan(None, None):
                records = getattr(chunk, "records", None)
                if records:
                    rendered = render_views({v: r for v, r in records.items() if wanted(v)})
                    total += sum(map(len, rendered.values()))
        for view, render in fmt.derived_views().items():
            if wanted(view) and callable(render):
                out = render()
                total += (
                    len(out) if isinstance(out, bytes) else sum(map(len, render_views({view: out}).values()))
                )
    return total


# -- figures ---------------------------------------------------------------------


# first mounts timed, each over an empty cache, of which the best counts (as
# the baseline's best of FIRST_MOUNTS + 1 runs does): a mount, three
# processes on two vCPUs, varies by 20-30 % from one to the next here, and
# the single-thread baseline's best of six ran at 5.3, 7.8 and 6.3 MB/s in
# three runs of one session (gvfs): the best of more samples moves less
FIRST_MOUNTS = 7


def figure_first_mount(run: FormatRun) -> list[Figure]:
    """First mount (index build, empty cache) vs the single-thread baseline:
    `fmtfs mount` and the first stat of every view `cat` reads, which is
    when `ls -l` shows them (a derived view, gvfs's metadata.jsonl, is
    rendered by its first stat, and the baseline renders it too). The best
    of FIRST_MOUNTS mounts, as the baseline's best run counts, each taken in
    turn with a baseline run (one mount varies by 20-30% here)."""
    run_baseline(run)
    mounts = []
    for _ in range(FIRST_MOUNTS):
        mnt = run.fresh("mnt")
        start = time.perf_counter()
        with mounted(run.source, mnt, run.fresh("cache")):
            stat_views(mnt, run.layout)
            mounts.append(time.perf_counter() - start)
        run_baseline(run)
    seconds = min(mounts)
    mb = run.native_bytes / 1e6
    return [
        Figure(
            "first_mount",
            mb / seconds / run.baseline_rate,
            f"{seconds:.2f} s, {mb / seconds:.1f} MB/s",
            f"{run.baseline_kind} {run.baseline_rate:.1f} MB/s",
            ">= 1.0",
        )
    ]


# cold `cat`s timed, each over a fresh mount, of which the best counts (the
# baseline's best is of FIRST_MOUNTS + 1 runs or more by then)
COLD_RUNS = 5


def cold_mount(
    run: FormatRun, mnt: Path, *options: str, decoding: bool = False
) -> AbstractContextManager[float]:
    """A fresh mount of the built index (`options` added) for a cold `cat`.
    `decoding`: over a cache of its own, indexed by that mount (untimed), so
    no rendered byte is reused, derived views' included."""
    cache = run.fresh("cache-decoding") if decoding else run.scratch / "cache"
    return mounted(run.source, mnt, cache, *options)


def cold_cats(run: FormatRun, mnt: Path, *options: str, decoding: bool = False) -> tuple[float, int]:
    """The best of COLD_RUNS cold `cat`s of every record view (run_first_cat),
    each over a cold_mount, as the baseline's best run counts; and the
    mount's peak PSS over one more, untimed: the sampler's walks of /proc
    would take CPU from the decoding it times."""
    seconds = []
    for _ in range(COLD_RUNS):
        with cold_mount(run, mnt, *options, decoding=decoding):
            seconds.append(run_first_cat(mnt, run.layout))
    with cold_mount(run, mnt, *options, decoding=decoding), PeakRss(mnt) as rss:
        run_first_cat(mnt, run.layout)
    return min(seconds), rss.peak


def figure_cat(run: FormatRun) -> list[Figure]:
    """Cold then warm `cat` of every record view over a fresh mount (the
    index already built, with the rendered pieces its scan kept), with the
    mount's peak RSS while it serves them; then the cold `cat` of a mount
    that keeps no rendered pieces (`--rendered-cache off`): every chunk
    decoded, on every core (cold_cat_decoding)."""
    mnt = run.scratch / "mnt"
    plain = run.fresh("plain-views")
    # the index and its kept pieces built first (figure_first_mount did, if
    # it ran): built by the mount that keeps none, the index has none to read
    with mounted(run.source, mnt, run.scratch / "cache"):
        pass
    decoding, rss_decoding = cold_cats(run, mnt, "--rendered-cache", "off", decoding=True)
    cold, rss = cold_cats(run, mnt)
    with mounted(run.source, mnt, run.scratch / "cache"):
        views = view_files(mnt, run.layout)
        size = sum(v.stat().st_size for v in views)
        run_cat(views)  # into the page cache
        copies = []
        for view in views:
            copy = plain / view.relative_to(mnt)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(view, copy)
            copies.append(copy)
        # outside the sampler: its walks of /proc every 50 ms ran during this
        # cat alone, not during the regular files' one it is compared with.
        # The best of several, each side in turn (the same moments of the
        # machine for both): one `cat` of page-cached bytes takes 5-50 ms,
        # the size of a scheduler hiccup
        warm_runs, regular_runs = [], []
        for _ in range(WARM_RUNS):
            warm_runs.append(run_cat(views))
            regular_runs.append(run_cat(copies))
        warm, regular = min(warm_runs), min(regular_runs)
    run_baseline(run)
    if size != run.rendered_bytes:
        raise SystemExit(
            f"{run.fmt}: the views hold {size} bytes, the baseline rendered {run.rendered_bytes}"
        )
    mb, json_mb = run.native_bytes / 1e6, size / 1e6
    baseline_text = f"{run.baseline_kind} {run.baseline_rate * json_mb / mb:.1f} MB/s of JSON"
    return [
        Figure(
            "cold_cat",
            mb / cold / run.baseline_rate,
            f"{cold:.2f} s, {json_mb / cold:.1f} MB/s of JSON",
            baseline_text,
            ">= 1.0",
        ),
        Figure(
            "cold_cat_decoding",
            mb / decoding / run.baseline_rate,
            f"{decoding:.2f} s, {json_mb / decoding:.1f} MB/s of JSON",
            baseline_text,
            ">= 1.0",
        ),
        Figure(
            "warm_cat",
            regular / warm,
            f"{warm:.3f} s, {json_mb / warm:.0f} MB/s",
            f"regular files {json_mb / regular:.0f} MB/s",
            ">= 0.5",
        ),
        Figure(
            "peak_rss_mb",
            max(rss, rss_decoding) / 1e6,
            f"{rss / 1e6:.0f} MB (decoding {rss_decoding / 1e6:.0f} MB)",
            "-",
            "< 300 (1 GB read)",
        ),
    ]


def figure_first_read_rss(run: FormatRun) -> list[Figure]:
    """The peak memory (PSS, see _rss) of a mount over an empty cache (and its children) from
    its first stat of every view through a `cat` of them: what the cat
    figure's sampler, started after the stats, does not see (a derived view
    such as gvfs metadata.jsonl is rendered by the first stat)."""
    mnt = run.scratch / "mnt"
    with mounted(run.source, mnt, run.fresh("cache-first-read")):
        with PeakRss(mnt) as rss:
            views = view_files(mnt, run.layout)
            sum(v.stat().st_size for v in views)
            run_cat(views)
    return [
        Figure(
            "first_read_rss_mb",
            rss.peak / 1e6,
            f"{rss.peak / 1e6:.0f} MB (mount {rss.own_peak / 1e6:.0f} MB)",
            "-",
            "< 300 (1 GB read)",
        )
    ]


def figure_listing(run: FormatRun) -> list[Figure]:
    """`ls -l` of N stream views on a second mount vs N regular files, and
    vs a minimal pyfuse3 filesystem serving the same paths (the floor)."""
    counts = [run.args.streams] + ([10_000] if run.args.many else [])
    return [figure for n in counts for figure in _listing(run, n)]


LISTING_SAMPLES = 3  # first listings of a second mount (a new mount each); the median counts


def _listing(run: FormatRun, n: int) -> list[Figure]:
    """The first `ls -ld` of N views on a second mount (the first indexed
    the source), the median of LISTING_SAMPLES mounts, each in turn with the
    same listing over a fresh minimal pyfuse3 filesystem and over regular
    files: one listing varies by 2x from mount to mount on these machines."""
    sample = run.fresh(f"many-{n}/sample")
    importlib.import_module(f"fmtfs.samples.{run.fmt}").generate(sample, 20)
    source, plain = run.fresh(f"many-{n}/src"), run.fresh(f"many-{n}/plain")
    for i in range(n):
        for path in run.layout.stream_files(sample):
            shutil.copyfile(path, source / run.layout.renamed(path.name, i))
    mnt, cache = run.fresh(f"many-{n}/mnt"), run.fresh(f"many-{n}/cache")
    first = run.layout.stream_files(sample)[0].name
    views = [run.layout.stream_view(i, first) for i in range(n)]
    for view in views:
        target = plain / view
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()
    paths_file = run.scratch / f"many-{n}/paths"
    paths_file.write_text("\n".join(views))
    with mounted(source, mnt, cache):
        pass
    over_mount, cpu, floor, regular = [], [], [], []
    for _ in range(LISTING_SAMPLES):
        with mounted(source, mnt, cache):
            pid = _mount_pid(mnt)
            before = cpu_seconds(pid)
            over_mount.append(_ls([mnt / v for v in views]))
            cpu.append(cpu_seconds(pid) - before)
        with minimal_mount(paths_file, mnt):
            floor.append(_ls([mnt / v for v in views]))
        regular.append(_ls([plain / v for v in views]))
    seconds, text = median_text(over_mount)
    floor_seconds, floor_text = median_text(floor)
    text += f", mount CPU {statistics.median(cpu):.2f} s"
    return [
        Figure(
            f"ls_{n}",
            seconds / statistics.median(regular),
            text,
            f"regular files {statistics.median(regular):.3f} s",
            "< 0.5 s" if n <= 1000 else "< 5 s",
        ),
        Figure(f"ls_{n}_floor", seconds / floor_seconds, text, f"minimal pyfuse3 {floor_text}", "-"),
    ]


@contextmanager
def minimal_mount(paths_file: Path, mnt: Path) -> Iterator[None]:
    """scripts/minimal_fuse.py serving the paths in `paths_file` at `mnt`."""
    server = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("minimal_fuse.py")), paths_file, mnt]
    )
    try:
        while not os.path.ismount(mnt):
            if server.poll() is not None:
                raise SystemExit(f"minimal_fuse.py ended with {server.returncode}")
            time.sleep(0.02)
        os.stat(mnt)  # answered: the kernel's INIT is done, as `fmtfs mount` waits for
        yield
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        server.wait(timeout=30)


def _ls(paths: list[Path]) -> float:
    seconds, _ = timed(
        lambda: subprocess.run(["ls", "-ld", *map(str, paths)], stdout=subprocess.DEVNULL, check=True)
    )
    return seconds


WRITE_RUNS = 3  # `cat lines >> view`s timed, in turn with the encoder's; the best of each counts


def figure_write_through(run: FormatRun) -> list[Figure]:
    """`cat lines >> view` through a mount vs the format's Writer in process,
    the same lines: the best of WRITE_RUNS appends each, taken in turn (one
    append of 20,000 gvfs lines took 0.60, 1.09 and 0.72 s in three runs of
    the same code).  The appends through the mount go to one mount, warm
    after the first as the encoder's interpreter is; the encoder appends to
    one copy of the source as well: both sides write the same lines to a
    source grown alike (a gvfs append to a grown journal is slower than the
    first), each to its copy's newest view (an append may start a new
    kestrel writer file, whose view is then the one written: the old one
    refuses, and its name is the time it started).  The two copies are
    synced to disk first, and each side's append starts with the mount
    quiet."""
    lines = _lines_to_write(run)
    lines_file = run.scratch / "lines.jsonl"
    lines_file.write_bytes(lines)
    mnt = run.scratch / "mnt"
    through = _fresh_copy(run, "write-mount")
    in_process = _fresh_copy(run, "write-process")
    os.sync()  # the copies on disk: an append's fsync writes what it appended only
    over_mount, encoder = [], []
    with mounted(through, mnt, run.fresh("write-cache")):
        mount_pid = _mount_pid(mnt)
        for _ in range(WRITE_RUNS):
            view = run.layout.write_view(through)
            before = _identities(through)
            over_mount.append(timed(partial(_append, lines_file, mnt / view))[0])
            if _identities(through) == before:
                raise SystemExit(f"{run.fmt}: writing {view} changed no native file")
            # the mount indexes what the append grew (wallaby 100 MB: 0.4 s
            # of CPU) after `cat` has returned: not on the encoder's cores
            wait_quiet(mount_pid)
            own = run.layout.write_view(in_process)
            encoder.append(timed(partial(_encode, in_process, run.fmt, own, lines))[0])
    count = lines.count(b"\n")
    return [
        Figure(
            "write_through",
            min(encoder) / min(over_mount),
            f"{count} lines in {min(over_mount):.2f} s (of {_listed(over_mount)})",
            f"in-process writer {min(encoder):.2f} s (of {_listed(encoder)})",
            ">= 0.5",
        )
    ]


def _listed(seconds: list[float]) -> str:
    return ", ".join(f"{s:.2f}" for s in seconds)


def _fresh_copy(run: FormatRun, name: str) -> Path:
    copy = run.scratch / name
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(run.source, copy)
    return copy


def _append(lines_file: Path, view: Path) -> None:
    subprocess.run(["sh", "-c", 'cat "$1" >> "$2"', "sh", lines_file, view], check=True)


def _encode(source: Path, fmt_name: str, view: str, lines: bytes) -> None:
    writer = open_source(source, fmt_name, dict(OPTIONS)).writer(view, False)
    writer.write(parse_lines(lines))
    writer.sync()


def _identities(folder: Path) -> set[tuple[str, int, int]]:
    return {(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir() if p.is_file()}


LINES_WRITTEN = 20_000  # the issue's `cat 20k lines >> view`


def _lines_to_write(run: FormatRun) -> bytes:
    """LINES_WRITTEN lines of the format's own record views (the first glob:
    gvfs metadata lines are not journal entries), minus the keys the writer
    assigns (an index or id must be the next one); a source with fewer
    lines (gvfs's journal) gives its lines again, in order."""
    import orjson

    out: list[bytes] = []
    for view in _view_bytes(run, run.layout.views[0]):
        for line in view.splitlines():
            record = orjson.loads(line)
            for key in run.layout.positional:
                record.pop(key, None)
            out.append(orjson.dumps(record))
            if len(out) >= LINES_WRITTEN:
                return b"\n".join(out) + b"\n"
    if not out:
        raise SystemExit(f"{run.fmt}: no lines to write")
    out = (out * (LINES_WRITTEN // len(out) + 1))[:LINES_WRITTEN]
    return b"\n".join(out) + b"\n"


def _view_bytes(run: FormatRun, pattern: str) -> Iterator[bytes]:
    """The bytes of the record views matching `pattern`, in path order: the
    copies figure_cat left, or (`--only write_through`) rendered in process."""
    copies = sorted((run.scratch / "plain-views").glob(pattern))
    if copies:
        yield from (path.read_bytes() for path in copies)
        return
    from fmtfs.views import SourceTree

    tree = SourceTree(open_source(run.source, run.fmt, dict(OPTIONS)), run.fresh("lines-cache"))
    for path in sorted(p for p in tree.files if fnmatch(p, pattern)):
        yield tree.read(path, 0, tree.size(path))
    tree.close()


# -- Spark figures ---------------------------------------------------------------

_SPARK: list[Any] = []
_ONE_ROW: list[float] = []  # the one-row Python data source's first query, once per session


def spark_session() -> Any:
    """One local-mode session for the whole run, JVM warmed up."""
    if not _SPARK:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        from pyspark.sql import SparkSession

        from fmtfs.spark import FmtfsDataSource

        spark = (
            SparkSession.builder.master("local[*]")
            .appName("fmtfs-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.memory", "2g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(FmtfsDataSource)
        _SPARK.append(spark)
    return _SPARK[0]


def copy_spark_views(folder: Path, plain: Path, whole_tree: bool) -> None:
    """The JSON views of `folder` as regular files in `plain`: its own
    (what the glob `folder/*.jsonl` reads), or its whole tree (what Spark
    lists for spark.read.json(folder): sub-folders too), without the names
    Spark skips (`_`, `.`)."""
    for view in folder.iterdir():
        if view.name.startswith(("_", ".")):
            continue
        if view.is_file() and view.suffix == ".jsonl":
            shutil.copyfile(view, plain / view.name)
        elif view.is_dir() and whole_tree:
            (plain / view.name).mkdir()
            copy_spark_views(view, plain / view.name, whole_tree)


# timings of a Spark query that can be repeated (a fresh mount each); the
# median counts.  Five since session 35: with three, two figures of the same
# work (kestrel's folder and its glob, the same files) came out 1.05 and 1.49
# in one run, the mount's queries using 0.02 s of its CPU
SPARK_SAMPLES = 5


def median_text(samples: list[float]) -> tuple[float, str]:
    """The median of `samples` (seconds), and its text with every sample."""
    median = statistics.median(samples)
    return median, f"{median:.2f} s (of {_listed(samples)})"


def figure_spark(run: FormatRun) -> list[Figure]:
    """spark.read.json(view folder).count() over a fresh mount (twice), then
    the same with the glob `folder/*.jsonl` over another fresh mount, each
    vs the same read of a plain local folder holding the same files.  A
    folder is listed by Spark recursively (its partition discovery), so a
    view folder with a `buckets/` subfolder (wallaby's, proio's) costs a
    stat of every bucket view per query, over a mount as over the plain
    copy of that tree; the glob lists the folder's own entries only, and is
    compared with a plain folder of those.  One query takes 0.2-1.5 s here
    and varies by 20-40 % from one to the next (the JVM's collections, the
    scheduler): each figure is the median of SPARK_SAMPLES fresh mounts' and
    of the plain reads taken in turn with them, not one sample."""
    spark = spark_session()
    mnt, cache = run.scratch / "mnt", run.scratch / "cache"
    plains = {"json": plain_copy(run, whole_tree=True), "glob": plain_copy(run)}
    for plain in plains.values():
        for _ in range(2):  # JIT and page cache
            spark.read.json(str(plain)).count()
    counts = set()

    def count(path: Path | str) -> float:
        seconds, rows = timed(lambda: spark.read.json(str(path)).count())
        counts.add(rows)
        return seconds

    ways = {"json": run.layout.spark_folder, "glob": f"{run.layout.spark_folder}/*.jsonl"}
    base_seconds: dict[str, list[float]] = {way: [count(plains[way])] for way in ways}
    measured: dict[str, tuple[str, list[float]]] = {
        f"spark_{way}_{which}": (way, []) for way in ways for which in ("first", "second")
    }
    for _ in range(SPARK_SAMPLES):
        for way, path in ways.items():
            with mounted(run.source, mnt, cache):
                measured[f"spark_{way}_first"][1].append(count(mnt / path))
                measured[f"spark_{way}_second"][1].append(count(mnt / path))
            base_seconds[way].append(count(plains[way]))
    if len(counts) != 1:
        raise SystemExit(f"{run.fmt}: row counts differ between the ways of reading: {sorted(counts)}")
    base = {way: statistics.median(seconds) for way, seconds in base_seconds.items()}
    figures = []
    for name, (way, samples) in measured.items():
        seconds, text = median_text(samples)
        figures.append(
            Figure(
                name,
                seconds / base[way],
                text,
                f"plain {'folder' if way == 'json' else 'glob'} {base[way]:.2f} s",
                "<= 2.0" if "first" in name else "<= 1.3",
            )
        )
    return figures


def plain_copy(run: FormatRun, whole_tree: bool = False) -> Path:
    """The record views of the Spark folder (with `whole_tree`, its
    sub-folders' too) copied into a plain folder, made once per format run,
    through a mount."""
    name = "plain-spark-tree" if whole_tree else "plain-spark"
    plain = run.scratch / name
    if plain.is_dir():
        return plain
    plain = run.fresh(name)
    with mounted(run.source, run.scratch / "mnt", run.scratch / "cache"):
        copy_spark_views(run.scratch / "mnt" / run.layout.spark_folder, plain, whole_tree)
    return plain


def _one_row_source() -> type:
    """A Python data source of one row per core: what any Python data
    source pays (Spark's Python workers: one to create the source, one to
    plan its read, one per task reading)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class OneRowReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(os.cpu_count() or 1)]

        def read(self, partition: Any) -> Iterator[tuple[int]]:
            yield (1,)

    class OneRow(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_one_row"

        def schema(self) -> str:
            return "n long"

        def reader(self, schema: Any) -> DataSourceReader:
            return OneRowReader()

    return OneRow


def figure_data_source(run: FormatRun) -> list[Figure]:
    """spark.read.format("fmtfs") with default options, .count(), vs plain
    read.json of the same bytes: the source's first query (its schema
    inferred from sampled chunks; the chunk index is the one the mounts
    built, with the rendered lines its scan kept: fmtfs.spark.pieces), a
    second one (the decoded chunks' Arrow batches kept by the first,
    fmtfs.spark.kept) and a third that keeps no batch (keptBytes=0).

    Plain read.json is timed after two untimed runs of it (the JVM's JIT,
    the code Spark generates for the data's shape, the page cache); the
    data source's first query is timed after one untimed query of it over
    a copy of the cache (fmtfs's own first-query work, the schema step and
    every chunk without a kept batch, is still all ahead of it; Spark has
    seen the source and its shape, as it has for read.json).  That untimed
    query, the session's first of this source and shape, is reported too
    (data_source_cold, no target): the JVM compiling for a new shape
    (session 17's runs: 1.0-1.9x the first; in a fresh session, about twice it).
    The first query is the median of SPARK_SAMPLES, each taken in turn
    with a plain read.json: over fresh copies of the cache, the last over
    the cache itself, whose kept batches the later queries read (session
    18: over gvfs one first query took 0.17-0.32 s from run to run, the
    untimed one before it sometimes less).

    Spark starts its Python workers (one per
    kind of job: schema, planning, reading) at the first Python data
    source query of a session, whatever the source, and again after about
    a minute without Python work (its idle timeout): that start is
    measured once, with a one-row Python data source (python_ds_start),
    and the same source runs right before each format's first query, so
    the fmtfs figures do not depend on which format the run starts with or
    on how long the figures before it took.  It runs twice, the second
    time timed (python_ds_floor): what a query of any Python data source,
    one row per core, costs beside plain read.json, the floor of the
    data_source figures on a small source."""
    spark = spark_session()
    plain = plain_copy(run)
    figures = []
    base_seconds: list[float] = []
    plain_json = lambda: spark.read.json(str(plain)).count()  # noqa: E731
    for _ in range(2):  # JIT and page cache
        plain_json()
    base_seconds.append(timed(plain_json)[0])
    one_row = lambda: spark.read.format("bench_one_row").load().count()  # noqa: E731
    if not _ONE_ROW:
        spark.dataSource.register(_one_row_source())
        start, _ = timed(one_row)
        _ONE_ROW.append(start)
        text = f"plain folder {base_seconds[0]:.2f} s"
        figures.append(Figure("python_ds_start", start / base_seconds[0], f"{start:.2f} s", text, "-"))
    one_row()  # Spark's Python workers up (restarted if they idled out)
    floor, _ = timed(one_row)  # what any Python data source's query costs here, now

    def fmtfs_count(kept: str | None = None, cache: Path = run.scratch / "cache") -> int:
        reader = spark.read.format("fmtfs").option("format", run.fmt).option("view", run.layout.spark_folder)
        if kept is not None:
            reader = reader.option("keptBytes", kept)
        return reader.option("cacheDir", str(cache)).load(str(run.source)).count()

    def first_query(cache: Path | None) -> tuple[float, int]:
        """A first query of the source: over a copy of the cache as the
        mounts left it, without the data source's own files (schema, kept
        batches), or (None) over that cache itself, which keeps them for
        the queries after it."""
        if cache is None:
            return timed(fmtfs_count)
        shutil.rmtree(cache, ignore_errors=True)
        shutil.copytree(run.scratch / "cache", cache, ignore=shutil.ignore_patterns("spark"), symlinks=True)
        try:
            return timed(lambda: fmtfs_count(cache=cache))
        finally:
            shutil.rmtree(cache)

    copy = run.scratch / "cache-copy"
    cold, rows_cold = first_query(copy)
    rows = {rows_cold}
    firsts = []
    for i in range(SPARK_SAMPLES):  # as "again": the median of some, in turn with plain ones
        seconds, rows_first = first_query(copy if i < SPARK_SAMPLES - 1 else None)
        firsts.append(seconds)
        rows.add(rows_first)
        base_seconds.append(timed(plain_json)[0])
    first, first_text = median_text(firsts)
    agains = []
    for _ in range(
        SPARK_SAMPLES
    ):  # a query that can be repeated: the median of some, in turn with plain ones
        seconds, rows_again = timed(fmtfs_count)
        agains.append(seconds)
        rows.add(rows_again)
        base_seconds.append(timed(plain_json)[0])
    again, again_text = median_text(agains)
    unkept, rows_unkept = timed(lambda: fmtfs_count(kept="0"))
    if len(rows | {rows_unkept, plain_json()}) != 1:
        raise SystemExit(f"{run.fmt}: the data source and read.json count different rows")
    base = statistics.median(base_seconds)
    text = f"plain read.json {base:.2f} s"
    return figures + [
        Figure("python_ds_floor", floor / base, f"{floor:.2f} s", text, "-"),
        Figure("data_source", first / base, first_text, text, "<= 2.0"),
        Figure("data_source_cold", cold / base, f"{cold:.2f} s", text, "-"),
        Figure("data_source_again", again / base, again_text, text, "<= 2.0"),
        Figure("data_source_unkept", unkept / base, f"{unkept:.2f} s", text, "-"),
    ]


def _utc(text: str) -> datetime.datetime:
    """An RFC 3339 UTC time as fmtfs renders it (any fraction digits) -> datetime."""
    whole, _, fraction = text.rstrip("Z").partition(".")
    micros = int((fraction + "000000")[:6]) if fraction else 0
    return datetime.datetime.fromisoformat(whole).replace(tzinfo=datetime.UTC, microsecond=micros)


def _rfc3339(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# the record time column of formats whose records carry one (LAYOUT §5)
TIME_COLUMNS = {"beats": "timestamp", "wallaby": "time", "kestrel": "add_time"}


def figure_time_filter(run: FormatRun) -> list[Figure]:
    """The data source with a time filter covering 1/24 of the data's time
    span (one hour of a day) vs the same full read, each measured after a
    first run: pushdown reads only the chunks whose time range can match.
    Spark plans a query with filters in a Python worker of another kind
    (its data_source_pushdown_filters module), started by the first such
    query of a session (and again after a minute idle), as python_ds_start
    is for the others: that first filtered query's time is in the text."""
    column = TIME_COLUMNS.get(run.fmt)
    if column is None:
        return []
    spark = spark_session()
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    options = {"format": run.fmt, "view": run.layout.spark_folder, "cacheDir": str(run.scratch / "cache")}

    def frame() -> Any:
        return spark.read.format("fmtfs").options(**options).load(str(run.source))

    # RFC 3339 UTC text of one precision sorts as the times do
    bounds = frame().selectExpr(f"min({column})", f"max({column})").first()
    start, end = _utc(bounds[0]), _utc(bounds[1])
    low = _rfc3339(start + (end - start) / 2)
    high = _rfc3339(start + (end - start) / 2 + (end - start) / 24)
    where = f"{column} >= '{low}' AND {column} < '{high}'"
    first, _ = timed(lambda: frame().where(where).count())
    full, rows = timed(lambda: frame().count())
    filtered, kept = timed(lambda: frame().where(where).count())
    read, chunks = _chunks_read(run, options, column, low, high)
    return [
        Figure(
            "time_filter",
            filtered / full,
            f"{kept:,} rows, {read} chunks, {filtered:.2f} s (first {first:.2f} s)",
            f"full read {rows:,} rows, {chunks} chunks, {full:.2f} s",
            "< 1 (fewer chunks)",
        )
    ]


def _chunks_read(
    run: FormatRun, options: dict[str, str], column: str, low: str, high: str
) -> tuple[int, int]:
    """(chunks a read with the filter `low <= column < high` plans, all chunks)."""
    from fmtfs.spark.plan import plan_partitions
    from fmtfs.spark.source import lower_options, open_tree, view_files
    from fmtfs.spark.timefilter import TimeTest

    opts = lower_options(options) | {"path": str(run.source)}
    tree = open_tree(opts)
    views = view_files(tree, opts["view"])
    tests = [TimeTest(column, "GreaterThanOrEqual", (low,)), TimeTest(column, "LessThan", (high,))]
    count = lambda planned: sum(len(getattr(p, "chunks", ())) for p in planned)  # noqa: E731
    counts = count(plan_partitions(tree, views, opts, tests)), count(plan_partitions(tree, views, opts))
    tree.close()
    return counts


# Started by a small middleman: Linux keeps a process's peak RSS across
# exec (`signal->maxrss`), so a command this (big) process forks directly
# would report this process's peak, not its own.
_MIDDLEMAN = (
    "import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:]); "
    "_, status, usage = os.wait4(p.pid, 0); print(status, usage.ru_maxrss)"
)


def peak_rss_of(command: list[str]) -> tuple[int, int]:
    """Run `command`; its wait status and the peak RSS (kB) of it and its children."""
    done = subprocess.run(
        [sys.executable, "-c", _MIDDLEMAN, *command], cwd=ROOT, stdout=subprocess.PIPE, check=True
    )
    status, kb = done.stdout.split()[-2:]
    return int(status), int(kb)


def figure_twins(run: FormatRun) -> list[Figure]:
    """Parquet twins: every twin built by `fmtfs index` (the index is
    already there) vs the plain loop over the same source; the background
    builder of a fresh mount, with the peak RSS of the mount and of its
    children (the builder process); `ls -l` of the twins on disk vs as many
    regular files."""
    cache = run.scratch / "cache"
    shutil.rmtree(cache / "parquet", ignore_errors=True)
    start = time.perf_counter()
    command = [sys.executable, "-m", "fmtfs", "index", str(run.source), "--cache-dir", str(cache), "-q"]
    status, index_kb = peak_rss_of(command)
    build = time.perf_counter() - start
    if status:
        raise SystemExit(f"{run.fmt}: fmtfs index failed ({status})")
    run_baseline(run)
    built = sorted(p.name for p in (cache / "parquet").glob("*/*.parquet"))
    shutil.rmtree(cache / "parquet")
    mnt = run.scratch / "mnt"
    with mounted(run.source, mnt, cache), PeakRss(mnt) as rss:
        start = time.perf_counter()
        while len(list((cache / "parquet").glob("*/*.parquet"))) < len(built):
            if time.perf_counter() - start > 3600:
                raise SystemExit(f"{run.fmt}: the background builder made no {len(built)} twins in an hour")
            time.sleep(0.1)  # nobody stats parquet/: the background builder makes them all
        background = time.perf_counter() - start
    plain = run.fresh("plain-twins")
    with mounted(run.source, mnt, cache):
        twins = sorted(p for p in (mnt / PARQUET / run.layout.spark_folder).iterdir() if p.is_file())
        listed = _ls(twins)
    for twin in twins:
        (plain / twin.name).touch()
    regular = _ls([plain / twin.name for twin in twins])
    mb = run.native_bytes / 1e6
    base = sum(run.baseline_seconds) / len(run.baseline_seconds)
    own, children, total = rss.own_peak / 1e6, rss.children_peak / 1e6, rss.peak / 1e6
    index_mb = index_kb / 1e3
    return [
        Figure(
            "twins_build",
            build / base,
            f"{len(built)} twins in {build:.2f} s ({mb / build:.1f} MB/s)",
            f"{run.baseline_kind} {base:.2f} s",
            "time ratio (lower is better)",
        ),
        Figure(
            "twins_background_s",
            background,
            f"{len(built)} twins in {background:.2f} s after a mount",
            "-",
            "s (nice 19, one child)",
        ),
        Figure("twins_rss_mount_mb", own, f"{own:.0f} MB (the mount alone)", "-", "MB"),
        Figure(
            "twins_rss_total_mb",
            total,
            f"{total:.0f} MB (mount + children, {children:.0f} MB at most for the children)",
            "-",
            "< 300 MB",
        ),
        Figure("twins_rss_index_mb", index_mb, f"{index_mb:.0f} MB (fmtfs index building them)", "-", "MB"),
        Figure(
            "twins_ls",
            listed / regular,
            f"{len(twins)} twins {listed:.3f} s",
            f"regular {regular:.3f} s",
            "-",
        ),
    ]


def figure_spark_parquet(run: FormatRun) -> list[Figure]:
    """spark.read.parquet(parquet/<folder>).count() over a mount (twins on
    disk) vs spark.read.json of the same JSON bytes in a plain folder."""
    spark = spark_session()
    mnt, cache = run.scratch / "mnt", run.scratch / "cache"
    plain = plain_copy(run)
    with mounted(run.source, mnt, cache):
        twins = str(mnt / PARQUET / run.layout.spark_folder)
        rows = {spark.read.parquet(twins).count(), spark.read.json(str(plain)).count()}  # warm both
        parquet_s, n = timed(lambda: spark.read.parquet(twins).count())
        json_s, m = timed(lambda: spark.read.json(str(plain)).count())
    if len(rows | {n, m}) != 1:
        raise SystemExit(f"{run.fmt}: the twins and the JSON views hold different rows: {rows | {n, m}}")
    return [
        Figure(
            "spark_parquet",
            parquet_s / json_s,
            f"read.parquet twins {parquet_s:.2f} s",
            f"read.json plain {json_s:.2f} s",
            "< 1 (lower is better)",
        )
    ]


# The order matters: first_mount builds the index the later figures reuse,
# figure_cat leaves the view copies figure_write_through takes lines from.
FIGURES: list[Callable[[FormatRun], list[Figure]]] = [
    figure_first_mount,
    figure_cat,
    figure_first_read_rss,
    figure_listing,
    figure_write_through,
    figure_twins,
]
SPARK_FIGURES: list[Callable[[FormatRun], list[Figure]]] = [
    figure_spark,
    figure_data_source,
    figure_time_filter,
    figure_spark_parquet,
]


# -- driver ----------------------------------------------------------------------


def generate(fmt: str, scratch: Path, megabytes: float) -> tuple[Path, int, int]:
    """A sample source of about `megabytes` of native files: (source, records, bytes)."""
    sample = importlib.import_module(f"fmtfs.samples.{fmt}")
    probe = scratch / "probe"
    probe.mkdir()
    sample.generate(probe, 2000)
    per_record = _native_bytes(probe) / 2000
    shutil.rmtree(probe)
    records = max(100, int(megabytes * 1e6 / per_record))
    source = scratch / "src"
    source.mkdir()
    if fmt == "beats":  # about 25 MB per segment, as the 100 MB queue of 4
        sample.generate(source, records, segments=max(1, round(megabytes / 25)))
    else:
        sample.generate(source, records)
    return source, records, _native_bytes(source)


def _native_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def prepare_format(fmt: str, megabytes: float, args: argparse.Namespace, scratch: Path) -> FormatRun:
    """Generate `fmt`'s source; the run its figures share."""
    (scratch / fmt).mkdir()
    seconds, (source, records, native) = timed(lambda: generate(fmt, scratch / fmt, megabytes))
    print(f"{fmt}: {records:,} records, {native / 1e6:.1f} MB of native files (generated in {seconds:.0f} s)")
    return FormatRun(fmt, LAYOUTS[fmt], scratch / fmt, source, records, native, args)


def run_figures(run: FormatRun, figures: list[Callable[[FormatRun], list[Figure]]]) -> None:
    """Add the rows of `figures` (those --only lets through) to run.rows."""
    chosen = [f for f in figures if not run.args.only or f.__name__.removeprefix("figure_") in run.args.only]
    if chosen:
        print(f"\n{run.fmt}:")
    for figure in chosen:
        before = stolen_seconds()
        rows = figure(run)
        steal = stolen_seconds() - before
        for row in rows:
            row.steal = steal
            run.rows.append(row)
            print(
                f"  {row.name:18} {row.ratio:7.3g}   {row.fmtfs:34} vs {row.baseline:36} target {row.target}"
                + (f"  (steal {steal:.1f} s)" if steal >= 0.05 else "")
            )
    if run.baseline is not None:
        run.baseline.shutdown()
        run.baseline = None


def format_results(run: FormatRun) -> dict[str, Any]:
    return {
        "records": run.records,
        "native_mb": run.native_bytes / 1e6,
        "json_mb": run.rendered_bytes / 1e6,
        "baseline": run.baseline_kind,
        "figures": {row.name: row.ratio for row in run.rows},
        "details": {
            row.name: {
                "fmtfs": row.fmtfs,
                "baseline": row.baseline,
                "target": row.target,
                "steal_s": row.steal,
            }
            for row in run.rows
        },
    }


def machine() -> dict[str, Any]:
    load = os.getloadavg()
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in load],
        "python": platform.python_version(),
        # which build ran the figures: builds differ in speed (scripts/setup.sh)
        "interpreter": os.path.realpath(sys.executable),
        "kernel": platform.release(),
    }


def print_table(results: dict[str, Any]) -> None:
    names = list(dict.fromkeys(name for r in results["formats"].values() for name in r["figures"]))
    formats = list(results["formats"])
    targets = {n: d["target"] for r in results["formats"].values() for n, d in r["details"].items()}
    print(f"\n{'figure':18} " + " ".join(f"{f:>9}" for f in formats) + "   target")
    for name in names:
        cells = (results["formats"][f]["figures"].get(name) for f in formats)
        print(f"{name:18} " + " ".join(f"{c:9.3g}" if c is not None else f"{'-':>9}" for c in cells), end="")
        print(f"   {targets[name]}")
    m = results["machine"]
    print(
        f"\n{m['date']}, {m['cpus']} CPUs, load average {m['load_average']},"
        f" Python {m['python']} ({m['interpreter']})"
    )


def parse_formats(text: str, size: float) -> dict[str, float]:
    """ "beats,gvfs=20" -> {"beats": size, "gvfs": 20.0}."""
    out = {}
    for item in filter(None, text.split(",")):
        name, _, mb = item.partition("=")
        if name not in FORMATS:
            raise SystemExit(f"unknown format {name!r} (choose from {', '.join(FORMATS)})")
        out[name] = float(mb) if mb else size
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    parser.add_argument("size", type=float, help="MB of native data generated per format")
    parser.add_argument(
        "--formats", default=",".join(FORMATS), help="comma-separated; FORMAT=MB overrides the size (gvfs=20)"
    )
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the results as JSON")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark figures")
    parser.add_argument(
        "--only",
        type=lambda text: set(filter(None, text.split(","))),
        help="run only these figure functions, comma-separated (e.g. spark,time_filter)",
    )
    parser.add_argument(
        "--streams", type=int, default=1000, help="stream views listed by ls_N (default 1000)"
    )
    parser.add_argument("--many", action="store_true", help="also list 10,000 stream views")
    parser.add_argument(
        "--scratch", type=Path, help="folder for sources and mounts (default: a temporary one)"
    )
    args = parser.parse_args(argv)
    keep_freed_heap()  # the in-process encoder (write_through), as tight from its first pass
    plan = parse_formats(args.formats, args.size)
    results: dict[str, Any] = {"size_mb": args.size, "machine": machine(), "formats": {}}
    if args.scratch is not None:
        args.scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fmtfs-bench-", dir=args.scratch) as scratch:
        runs = [prepare_format(fmt, megabytes, args, Path(scratch)) for fmt, megabytes in plan.items()]
        try:
            # every format's figures that time fmtfs alone first, then the
            # Spark ones: a JVM started for one format's Spark figures would
            # otherwise stay (JIT, GC threads, 2 GB heap) while the next
            # format's mount and cat are timed
            for figures in [FIGURES] + ([] if args.no_spark else [SPARK_FIGURES]):
                for run in runs:
                    run_figures(run, figures)
            for run in runs:
                results["formats"][run.fmt] = format_results(run)
        finally:
            if _SPARK:
                _SPARK[0].stop()
    results["machine"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
