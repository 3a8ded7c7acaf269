"""A sample Beats disk queue: plaintext version-2 segments as Filebeat writes
them, plus a state.dat acknowledging the first third of the first segment."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

from fmtfs.formats.beats.cbor import encode_event
from fmtfs.formats.beats.frames import encode_frame
from fmtfs.formats.beats.layout import QueueState, encode_state, new_header

START_NS = 1659105780_000000000  # 2022-07-29T14:43:00Z
LEVELS = ("INFO", "INFO", "INFO", "WARN", "ERROR", "DEBUG")
HOSTS = ("web-1", "web-2", "db-1")


def _event(i: int, rng: random.Random) -> bytes:
    level = rng.choice(LEVELS)
    took = rng.randint(1, 900)
    message = f"2022-07-29 14:43:{i % 60:02d}.{i % 1000:03d} {level} request {i:07d} served in {took} ms"
    fields = {
        "message": message,
        "log": {"offset": i * 96, "file": {"path": f"/var/log/app/{HOSTS[i % 3]}.log"}},
        "input": {"type": "filestream"},
        "ecs": {"version": "8.0.0"},
        "host": {"name": HOSTS[i % 3]},
        "agent": {"type": "filebeat", "version": "8.4.0"},
    }
    if level == "ERROR":
        fields["error"] = {"code": rng.randint(400, 599), "retry": rng.random() < 0.5, "ratio": rng.random()}
    return encode_event(START_NS + i * 1_000_003, 1, {}, fields)


def generate(folder: Path, records: int, segments: int = 3) -> Path:
    """Write `records` events over `segments` segments (0.seg, 1.seg, ...)
    and a version-1 state.dat; returns the queue folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(42)
    per = max(1, -(-records // segments))
    first_ack: QueueState | None = None
    i = 0
    seg_id = 0
    while i < records or seg_id == 0:
        count = min(per, records - i)
        path = folder / f"{seg_id}.seg"
        offset = 12
        with open(path, "wb") as fh:
            os.chmod(path, 0o600)
            fh.write(new_header(0, None))
            batch = []
            for k in range(count):
                frame = encode_frame(_event(i + k, rng))
                if seg_id == 0 and k == count // 3:
                    first_ack = QueueState(1, 0, offset, k)
                offset += len(frame)
                batch.append(frame)
                if len(batch) >= 4096:
                    fh.write(b"".join(batch))
                    batch.clear()
            fh.write(b"".join(batch))
            fh.seek(4)
            fh.write(struct.pack("<I", count))
        i += count
        seg_id += 1
        if i >= records:
            break
    (folder / "state.dat").write_bytes(encode_state(first_ack or QueueState(1, 0, 0, 0)))
    os.chmod(folder / "state.dat", 0o600)
    return folder
