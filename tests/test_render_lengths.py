"""rendered_lengths: the index's view lengths without keeping the bytes."""

from __future__ import annotations

import orjson

from fmtfs.render import render_views, rendered_lengths


def _records(n: int) -> list[dict]:
    return [{"i": i, "text": "é" * (i % 7), "nested": {"k": [i, None]}} for i in range(n)]


def test_lengths_equal_the_rendered_bytes_when_a_bucket_holds_the_whole_chunk():
    records = _records(50)
    views = {"segments/0.jsonl": records, "buckets/2024-01-01T00.jsonl": list(records)}
    assert rendered_lengths(views) == {v: len(b) for v, b in render_views(views).items()}


def test_lengths_of_buckets_splitting_a_chunk():
    records = _records(50)
    views = {"s.jsonl": records, "b/0.jsonl": records[:20], "b/1.jsonl": records[20:], "empty.jsonl": []}
    assert rendered_lengths(views) == {v: len(b) for v, b in render_views(views).items()}


def test_a_view_of_the_same_length_but_other_records_is_dumped_on_its_own():
    records = _records(10)
    other = [dict(r, i=r["i"] + 1000) for r in records]  # equal count, different objects and lengths
    views = {"a.jsonl": records, "b.jsonl": other}
    lengths = rendered_lengths(views)
    assert lengths["a.jsonl"] != lengths["b.jsonl"]
    assert lengths == {v: len(b) for v, b in render_views(views).items()}


def test_a_length_the_scan_knows_is_taken_and_shared_by_a_bucket_of_the_same_records():
    records = _records(30)
    views = {"segments/0.jsonl": records, "buckets/h.jsonl": list(records)}
    told = 12345  # not the real length: proves it was taken, not recomputed
    assert rendered_lengths(views, {"segments/0.jsonl": told}) == {
        "segments/0.jsonl": told,
        "buckets/h.jsonl": told,
    }


def test_the_beats_scan_tells_the_segment_views_length_from_its_json_check(tmp_path):
    from fmtfs.formats import open_source
    from fmtfs.samples.beats import generate

    generate(tmp_path, 5_000, segments=1)
    (stream,) = open_source(tmp_path, None, {}).streams()
    chunks = [c for c in stream.scan(None, None) if hasattr(c, "lengths")]
    assert chunks
    for chunk in chunks:
        assert set(chunk.lengths) == {stream.view}
        assert chunk.lengths[stream.view] == len(render_views(chunk.records)[stream.view])


def test_a_chunk_rendered_for_one_view_is_that_views_bytes_of_all_views(tmp_path):
    """A decode worker renders the view its reader asked for only."""
    from fmtfs.formats import open_source
    from fmtfs.formats.base import Chunk
    from fmtfs.render import render_chunk
    from fmtfs.samples.beats import generate

    generate(tmp_path, 5_000, segments=1)
    (stream,) = open_source(tmp_path, None, {}).streams()
    scanned = next(c for c in stream.scan(None, None) if hasattr(c, "records"))
    chunk = Chunk(scanned.start, scanned.end, scanned.state, {})
    every = render_chunk(stream, chunk)
    assert len(every) >= 2  # the segment view and at least one hour bucket
    for view, data in every.items():
        assert render_chunk(stream, chunk, view) == {view: data}
    assert render_chunk(stream, chunk, "buckets/not-a-view.jsonl") == {}


def _dumped(records: list[dict]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def test_views_are_each_their_own_records_dumped_whether_runs_or_not():
    """render_views slices a later view out of the first when its records are
    a run of the first's very objects; every other shape is dumped alone."""
    records = _records(60)
    copies = [dict(r) for r in records]  # equal values, other objects
    views = {
        "s.jsonl": records,
        "whole.jsonl": list(records),
        "head.jsonl": records[:7],
        "middle.jsonl": records[20:41],
        "tail.jsonl": records[50:],
        "every_other.jsonl": records[::2],  # not a run
        "reversed.jsonl": records[::-1],
        "copies.jsonl": copies[5:9],
        "past_the_end.jsonl": records[55:] + [copies[0]],
        "empty.jsonl": [],
    }
    rendered = render_views(views)
    assert rendered == {view: _dumped(recs) for view, recs in views.items()}
    assert rendered["whole.jsonl"] is rendered["s.jsonl"]  # kept once by a store of kept pieces


def test_runs_that_follow_each_other_are_slices_of_the_first_view() -> None:
    """Time buckets of time-ordered records come as runs in order, found
    without an index of every record; a run out of order still is one."""
    records = _records(30)
    views = {"s.jsonl": records, "a.jsonl": records[:10], "b.jsonl": records[10:25], "c.jsonl": records[25:]}
    views["again.jsonl"] = records[10:25]  # back to an earlier run
    rendered = render_views(views)
    assert rendered == {view: _dumped(recs) for view, recs in views.items()}
    assert b"".join(rendered[v] for v in ("a.jsonl", "b.jsonl", "c.jsonl")) == rendered["s.jsonl"]
