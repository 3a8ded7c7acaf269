"""The sample queue: detected, readable, with a state.dat in its first segment."""

from __future__ import annotations

from pathlib import Path

from fmtfs.formats import detect
from fmtfs.formats.beats import BeatsFormat
from fmtfs.formats.beats.layout import parse_state
from fmtfs.samples.beats import generate
from tests.test_beats_build import reference_read
from tests.test_beats_read import read
from tests.trees import view_records


def test_sample_queue(tmp_path: Path) -> None:
    src = generate(tmp_path, 900)
    assert detect(src) == "beats"
    assert sorted(p.name for p in src.iterdir()) == ["0.seg", "1.seg", "2.seg", "state.dat"]
    views, problems = read(src)
    assert problems == [] and sum(len(v) for v in views.values()) == 900
    counts = [reference_read((src / f"{i}.seg").read_bytes())[0] for i in range(3)]
    assert counts == [300, 300, 300]
    state = parse_state((src / "state.dat").read_bytes())
    assert state.segment_id == 0 and state.frame_index == 100
    pending = view_records(BeatsFormat(src, {}), "pending.jsonl")
    assert pending == views["segments/0.jsonl"][100:] + views["segments/1.jsonl"] + views["segments/2.jsonl"]
    info = BeatsFormat(src, {}).info()
    assert [s["frame_count"] for s in info["segments"]] == [300, 300, 300]
