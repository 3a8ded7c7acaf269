"""Sample sources for the demo, the tests and the benchmarks.

Each module `fmtfs.samples.<format>` offers
`generate(folder: Path, records: int) -> Path`, writing a small realistic
source with the format's own encoder and returning the path to mount.
Run `python -m fmtfs.samples FORMAT FOLDER [RECORDS]`."""
