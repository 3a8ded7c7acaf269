"""A small proio sample: one LZ4 stream of J/psi -> e+ e- events (bundled
`proio.model.eic.Particle`), with `run` metadata changing between buckets,
written through fmtfs's own writer."""

from __future__ import annotations

import random
from pathlib import Path

from fmtfs.formats.proio import wire
from fmtfs.formats.proio.schema import bundled
from fmtfs.formats.proio.writer import ProioWriter

PARTICLE = "proio.model.eic.Particle"
EVENTS_PER_BUCKET = 500


def _event(rng: random.Random, run: int) -> dict:
    pz = round(rng.uniform(5, 50), 3)
    z = round(rng.uniform(-20, 20), 2)
    electrons = {
        str(i): {
            "type": PARTICLE,
            "value": {
                "parent": ["1"],
                "pdg": pdg,
                "vertex": {"x": 0.0, "y": 0.0, "z": z, "t": 0.0},
                "p": {"x": round(rng.gauss(0, 1), 3), "y": round(rng.gauss(0, 1), 3), "z": round(pz / 2, 3)},
                "mass": 0.000511,
                "charge": -pdg / 11,
            },
        }
        for i, pdg in ((2, 11), (3, -11))
    }
    jpsi = {"type": PARTICLE, "value": {"child": ["2", "3"], "pdg": 443, "p": {"z": pz}, "mass": 3.097}}
    return {
        "metadata": {"generator": "fmtfs sample", "run": str(run)},
        "tags": {"Particle": [1, 2, 3], "GenStable": [2, 3]},
        "entries": {"1": jpsi, **electrons},
    }


def generate(folder: Path, records: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "sample.proio"
    path.unlink(missing_ok=True)
    rng = random.Random(1)
    writer = ProioWriter(path, [bundled()], compression=wire.LZ4)
    try:
        for first in range(0, records, EVENTS_PER_BUCKET):
            count = min(EVENTS_PER_BUCKET, records - first)
            run = 1 + first // (EVENTS_PER_BUCKET * 2)
            writer.write([_event(rng, run) for _ in range(count)])
        writer.sync()
    finally:
        writer.close()
    return folder
