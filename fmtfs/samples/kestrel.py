"""A kestrel 3 queue folder: two queues, rotated writer files, a default
reader and a named reader with a head and an out-of-order done set."""

from __future__ import annotations

import base64
import random
from pathlib import Path

import orjson

from fmtfs.formats.kestrel.readers import rewrite_reader
from fmtfs.formats.kestrel.writers import PutWriter, create_writer_file

START_MS = 1_700_000_000_000  # fixed, so the same call writes the same bytes


class _Clock:
    """A deterministic millisecond clock: one tick per reading."""

    def __init__(self, start: int) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 1
        return self.now


def _payload(rng: random.Random, n: int) -> dict:
    if n % 17 == 5:  # an opaque binary item shows as data_base64
        return {"data_base64": base64.b64encode(rng.randbytes(48)).decode()}
    job = {
        "job": n,
        "kind": rng.choice(["resize", "transcode", "thumbnail", "email"]),
        "user": f"user{rng.randrange(1000):03d}",
        "args": {"width": rng.randrange(64, 2048), "quality": rng.randrange(50, 100)},
        "note": "x" * rng.randrange(0, 120),
    }
    return {"data": orjson.dumps(job).decode()}


def generate(folder: Path, records: int) -> Path:
    """Write `records` PUTs split over queues `jobs` and `mail` (about 3:1),
    with a journal size small enough that each queue rotates a few times."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(4)
    clock = _Clock(START_MS)
    counts = {"jobs": records - records // 4, "mail": records // 4}
    for queue, count in counts.items():
        create_writer_file(folder, queue, clock(), clock)
        # ~4 files per queue; at least 4 KiB so each file holds several items
        journal_size = max(4096, count * 230 // 4)
        writer = PutWriter(folder, queue, journal_size, clock)
        batch: list[dict] = []
        for n in range(count):
            line = _payload(rng, n)
            if n % 10 == 3:
                line["expire_time"] = START_MS + 86_400_000 + n
            if n % 50 == 7:
                line["error_count"] = 1 + n % 3
            batch.append(line)
            if len(batch) == 1000:
                writer.write(batch)
                batch = []
        if batch:
            writer.write(batch)
        writer.sync()
    # The default reader of `jobs` consumed a third; `mail` has a named
    # reader that also committed two items out of order.
    jobs_head = counts["jobs"] // 3
    rewrite_reader(folder, "jobs.read.", jobs_head, [])
    mail_head = counts["mail"] // 2
    done = [i for i in (mail_head + 2, mail_head + 5) if i <= counts["mail"]]
    rewrite_reader(folder, "mail.read.indexer", mail_head, done)
    return folder
