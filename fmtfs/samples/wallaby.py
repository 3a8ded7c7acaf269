"""A sample wallaby log: JSON-ish payloads spread over a few hours, plus one
binary payload, so both `data` and `data_base64` show."""

from __future__ import annotations

from pathlib import Path

from fmtfs.formats.wallaby import WallabyWriter, create_pair

START_NS = 1_431_900_000_123_456_789  # 2015-05-17T22:00:00.123456789Z


def generate(folder: Path, records: int, name: str = "events.log", step_ns: int = 61_000_000_000) -> Path:
    log = folder / name
    create_pair(log)
    writer = WallabyWriter(log)
    batch = []
    for i in range(records):
        if i % 97 == 96:
            batch.append({"time": START_NS + i * step_ns, "data_base64": "3q2+7w=="})
        else:
            batch.append({"time": START_NS + i * step_ns, "data": f'{{"event":"click","n":{i}}}'})
        if len(batch) == 10_000:
            writer.write(batch)
            batch = []
    if batch:
        writer.write(batch)
    return folder
