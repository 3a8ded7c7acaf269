import importlib
import sys
from pathlib import Path


def main() -> None:
    name, folder = sys.argv[1], Path(sys.argv[2])
    records = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    folder.mkdir(parents=True, exist_ok=True)
    print(importlib.import_module(f"fmtfs.samples.{name}").generate(folder, records))


main()
