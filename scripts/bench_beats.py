#!/usr/bin/env python3
"""Benchmark: a ~200 MB plaintext version-2 Beats queue.

Side by side, in one run: `cat` of every segment view over a real mount vs.
an in-process baseline loop doing the same decode and render with no fmtfs
in it (walk the frames, check the CRC, cbor2.loads, format the timestamp,
orjson-dump the lines).  Prints both rates and their ratio.

    .venv/bin/python scripts/bench_beats.py [MEGABYTES]
"""

from __future__ import annotations

import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import cbor2
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fmtfs.samples.beats import generate  # noqa: E402
from fmtfs.shape import format_time  # noqa: E402


def fmtfs(*args: object) -> None:
    subprocess.run([sys.executable, "-m", "fmtfs", *map(str, args)], check=True, cwd=ROOT)


def baseline(segment: Path) -> int:
    """Decode and render one segment the straightforward way; bytes rendered."""
    data = segment.read_bytes()
    offset, lines = 12, []
    while offset + 4 <= len(data):
        (size,) = struct.unpack_from("<I", data, offset)
        if size < 12 or offset + size > len(data):
            break
        payload = data[offset + 4 : offset + size - 8]
        crc, repeated = struct.unpack_from("<II", data, offset + size - 8)
        if crc != zlib.crc32(data[offset : offset + size - 8]) or repeated != size:
            break
        event = cbor2.loads(payload)
        lines.append(
            {
                "timestamp": format_time(event["timestamp"]),
                "flags": event["flags"],
                "meta": event["meta"],
                "fields": event["fields"],
            }
        )
        offset += size
    return len(b"\n".join(map(orjson.dumps, lines))) + 1


def main() -> None:
    megabytes = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    with tempfile.TemporaryDirectory(prefix="fmtfs-bench-") as scratch:
        base = Path(scratch)
        probe = generate(base / "probe", 2000, segments=1)
        per_record = sum(p.stat().st_size for p in probe.glob("*.seg")) / 2000
        records = int(megabytes * 1e6 / per_record)
        source = generate(base / "queue", records, segments=max(1, megabytes // 10))
        native = sum(p.stat().st_size for p in source.glob("*.seg"))
        segments = len(list(source.glob("*.seg")))
        print(f"queue         {records:,} frames, {native / 1e6:.0f} MB in {segments} segments")

        mnt = base / "mnt"
        mnt.mkdir()
        start = time.perf_counter()
        fmtfs("mount", source, mnt, "--cache-dir", base / "cache")
        print(f"first mount   (indexes everything): {time.perf_counter() - start:.1f} s")
        views = sorted((mnt / "segments").iterdir())
        start = time.perf_counter()
        subprocess.run(["cat", *map(str, views)], stdout=subprocess.DEVNULL, check=True)
        over_mount = time.perf_counter() - start
        rendered = sum(v.stat().st_size for v in views)
        fmtfs("umount", mnt)

        start = time.perf_counter()
        baseline_rendered = sum(baseline(p) for p in sorted(source.glob("*.seg")))
        in_process = time.perf_counter() - start
        assert abs(baseline_rendered - rendered) < rendered * 0.01, (baseline_rendered, rendered)

        mount_rate, base_rate = native / 1e6 / over_mount, native / 1e6 / in_process
        print(
            f"cat over the mount   {mount_rate:6.1f} MB/s of native bytes ({rendered / 1e6:.0f} MB of JSON)"
        )
        print(f"in-process baseline  {base_rate:6.1f} MB/s (cbor2 + orjson, no fmtfs)")
        print(f"ratio mount/baseline {mount_rate / base_rate:.2f}")


if __name__ == "__main__":
    main()
