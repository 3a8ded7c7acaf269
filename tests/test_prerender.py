"""A mount renders its costly whole-source files (gvfs's metadata.jsonl,
the format's problems()) in its decode workers as it starts
(fmtfs.prerender), so the first look waits for those jobs alone: the
bytes are the ones rendering in process gives, the mount's own process
renders none of them, and a job that fails is rendered in process."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

from fmtfs.formats import open_source
from fmtfs.formats.base import Format, PiecedRender
from fmtfs.prerender import Prerendered
from fmtfs.samples.gvfs import generate
from fmtfs.views import META_ERRORS, META_INFO, RENDER_AHEAD_BYTES, SourceTree

METADATA = "home/metadata.jsonl"
ROOT_METADATA = "root/metadata.jsonl"  # the sample's other tree, a small one


def _counting(fmt: Format, calls: list[str]) -> Format:
    """`fmt`, telling `calls` of every derived view's rendering and every
    problems() in this process (a worker's own format tells nothing)."""
    derived, problems = fmt.derived_views, fmt.problems

    def counted(path: str, render: PiecedRender) -> PiecedRender:
        return PiecedRender(lambda: (calls.append(path), render.pieces())[1])

    fmt.derived_views = lambda: {  # type: ignore[method-assign]
        path: counted(path, render) if isinstance(render, PiecedRender) else render
        for path, render in derived().items()
    }
    fmt.problems = lambda: (calls.append("problems"), problems())[1]  # type: ignore[method-assign]
    return fmt


def _whole(tree: SourceTree, path: str) -> bytes:
    return tree.read(path, 0, tree.size(path))


def test_a_mount_renders_the_metadata_view_and_the_problems_in_its_workers(tmp_path: Path) -> None:
    source = generate(tmp_path / "src", 30_000)
    assert (source / "home").stat().st_size >= RENDER_AHEAD_BYTES > (source / "root").stat().st_size
    paths = (METADATA, ROOT_METADATA, META_ERRORS, META_INFO)
    here = SourceTree(open_source(source, None, {}), tmp_path / "here")
    expected = {path: _whole(here, path) for path in paths}
    here.close()
    assert len(expected[METADATA].splitlines()) > 1000

    calls: list[str] = []
    mounted = SourceTree(_counting(open_source(source, None, {}), calls), tmp_path / "cache")
    mounted.decode_in_workers()  # what `fmtfs mount` does before it serves
    try:
        assert {path: _whole(mounted, path) for path in paths} == expected
    finally:
        mounted.close()
    # home's view and the problems were rendered in the workers; root's tree
    # is small, its view rendered when read, in process, as without workers
    assert calls == [ROOT_METADATA]
    calls.clear()

    # kept in the index: the next mount starts no job and renders nothing
    again = SourceTree(_counting(open_source(source, None, {}), calls), tmp_path / "cache")
    again.decode_in_workers()
    try:
        assert again._to_render_ahead() == []
        assert {path: _whole(again, path) for path in paths} == expected
    finally:
        again.close()
    assert calls == []


def test_a_job_that_failed_is_rendered_in_process(tmp_path: Path) -> None:
    source = generate(tmp_path / "src", 500)
    calls: list[str] = []
    tree = SourceTree(_counting(open_source(source, None, {}), calls), tmp_path / "cache")
    expected = PiecedRender(tree.format.derived_views()[METADATA].pieces)()
    calls.clear()
    failed: Future = Future()
    failed.set_exception(RuntimeError("a worker died"))
    tree.prerendered._jobs[METADATA, tree.deps] = (failed, lambda _: None)
    try:
        assert _whole(tree, METADATA) == expected
    finally:
        tree.close()
    assert calls == [METADATA]


def test_a_result_is_taken_once() -> None:
    jobs = Prerendered()
    done: Future = Future()
    done.set_result(b"blob")
    kept: list[bytes] = []
    jobs._jobs["view", "deps"] = (done, kept.append)
    assert jobs.result("view", "other deps") is None  # another state of the source
    assert jobs.result("view", "deps") == b"blob" and kept == [b"blob"]
    assert jobs.result("view", "deps") is None and kept == [b"blob"]


class _Pool:
    """Runs nothing: hands out the future the test completes itself."""

    def __init__(self) -> None:
        self.job: Future = Future()

    def run(self, fn, *args) -> Future:
        return self.job


def test_a_result_is_kept_when_done_whether_asked_for_or_not() -> None:
    jobs, pool = Prerendered(), _Pool()
    kept: list[bytes] = []
    jobs.start(pool, "view", "deps", kept.append, None)  # type: ignore[arg-type]
    assert kept == []
    pool.job.set_result(b"blob")
    assert kept == [b"blob"]  # done: kept, before anyone asks
    assert jobs.result("view", "deps") == b"blob" and kept == [b"blob"]  # once
    jobs.start(pool := _Pool(), "running", "deps", kept.append, None)  # type: ignore[arg-type]
    jobs.start(waiting := _Pool(), "waiting", "deps", kept.append, None)  # type: ignore[arg-type]
    pool.job.set_running_or_notify_cancel()  # a worker has it: it cannot be cancelled
    jobs.cancel()
    assert waiting.job.cancelled()
    pool.job.set_result(b"late")
    assert kept == [b"blob"]  # nothing kept once cancelled (the index may be closed)
