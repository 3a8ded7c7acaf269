"""A mount renders its costly whole-source files (gvfs's metadata.jsonl,
the format's problems()) in its decode workers as it starts
(fmtfs.prerender), so the first look waits for those jobs alone: the
bytes are the ones rendering in process gives, the mount's own process
renders none of them, and a job that fails is rendered in process."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

import pytest

from fmtfs.decoders import DecodePool
from fmtfs.digest import digest
from fmtfs.formats import open_source
from fmtfs.formats.base import Format, PiecedRender
from fmtfs.pieces import Pieces
from fmtfs.prerender import Ahead, Prerendered, SourceChanged, _gathered
from fmtfs.samples.gvfs import generate
from fmtfs.snapshot import source_snapshot
from fmtfs.views import META_ERRORS, META_INFO, RENDER_AHEAD_BYTES, SourceTree

METADATA = "home/metadata.jsonl"
ROOT_METADATA = "root/metadata.jsonl"  # the sample's other tree, a small one


def _counting(fmt: Format, calls: list[str]) -> Format:
    """`fmt`, telling `calls` of every derived view's rendering and every
    problems() in this process (a worker's own format tells nothing)."""
    derived, problems = fmt.derived_views, fmt.problems

    def counted(path: str, render: PiecedRender) -> PiecedRender:
        return PiecedRender(lambda: (calls.append(path), render.pieces())[1], render.part)

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


def _job() -> None:
    """What the jobs of _Pool stand for (it runs none)."""


class _Pool:
    """Runs nothing: hands out the future the test completes itself."""

    def __init__(self) -> None:
        self.job: Future = Future()

    def run(self, fn, *args) -> Future:
        return self.job


def test_a_result_is_kept_when_done_whether_asked_for_or_not() -> None:
    jobs, pool = Prerendered(), _Pool()
    kept: list[bytes] = []
    jobs.start(pool, Ahead("view", [(_job, ())]), "deps", kept.append)  # type: ignore[arg-type]
    assert kept == []
    pool.job.set_result(b"blob")
    assert kept == [b"blob"]  # done: kept, before anyone asks
    assert jobs.result("view", "deps") == b"blob" and kept == [b"blob"]  # once
    jobs.start(pool := _Pool(), Ahead("running", [(_job, ())]), "deps", kept.append)  # type: ignore[arg-type]
    jobs.start(waiting := _Pool(), Ahead("waiting", [(_job, ())]), "deps", kept.append)  # type: ignore[arg-type]
    pool.job.set_running_or_notify_cancel()  # a worker has it: it cannot be cancelled
    jobs.cancel()
    assert waiting.job.cancelled()
    pool.job.set_result(b"late")
    assert kept == [b"blob"]  # nothing kept once cancelled (the index may be closed)


def test_a_view_cut_in_runs_is_rendered_by_every_worker_as_one(tmp_path: Path) -> None:
    source = generate(tmp_path / "src", 30_000)
    fmt = open_source(source, None, {})
    render = fmt.derived_views()[METADATA]
    assert isinstance(render, PiecedRender) and render.part is not None
    want = render()
    pool = DecodePool(fmt, workers=3)
    try:
        ahead = Ahead.view(METADATA, render, 3, digest(source_snapshot(source)))
        assert [args[1:3] for _, args in ahead.jobs] == [(0, 3), (1, 3), (2, 3)]
        pieces = Pieces.from_blob(ahead.start(pool).result())
        assert pieces is not None and pieces[0 : len(pieces)] == want
        # a source that changed since the mount looked: no view of two states
        stale = Ahead.view(METADATA, render, 3, "the state the mount saw")
        with pytest.raises(SourceChanged):
            stale.start(pool).result()
    finally:
        pool.close()


def test_runs_gathered_fail_with_any_and_cancel_together() -> None:
    first, second = Future(), Future()
    whole = _gathered([first, second], sum)
    first.set_result(1)
    assert not whole.done()
    second.set_result(2)
    assert whole.result() == 3
    first, second = Future(), Future()
    whole = _gathered([first, second], sum)
    first.set_exception(SourceChanged("x"))
    second.set_result(2)
    assert isinstance(whole.exception(), SourceChanged)
    first, second = Future(), Future()
    whole = _gathered([first, second], sum)
    assert whole.cancel() and first.cancelled() and second.cancelled()
