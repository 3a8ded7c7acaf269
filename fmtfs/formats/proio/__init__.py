"""proio event streams (buckets of self-described protobuf events).

Decisions (see the module docstrings for details):
- source: one `.proio` file, or a folder whose top-level files are named
  `*.proio` or start with the bucket magic; one Stream per file.
- views per file `<file>`: `events.jsonl`, `buckets/<n>.jsonl` (n counts the
  buckets that decoded, from 0), `types/<type>.jsonl`, and the derived
  `<file>/_summary.txt` (proio-summary of that file); the root
  `_summary.txt` is proio-summary of all files concatenated (format.py).
- event lines: metadata keys sorted, tags in stored order, entries by
  ascending id; type lines list the entry's tags in the event's tag order.
  Types resolve from the stream's descriptors seen so far, then
  --descriptor-set, then the bundled proio models (schema.py).
- a chunk is a run of whole buckets (~2000 events / ~1 MiB); its state holds
  the running metadata and the offsets of earlier descriptor-carrying
  headers, never descriptors themselves (reader.py).
- writing `<file>/events.jsonl`: one bucket per write() (more when the
  metadata changes inside it), compression of the last bucket or NONE, new
  descriptors in the first new header, a torn tail cut first (writer.py).
"""

from fmtfs.lazyexports import loader

__all__ = ["ProioFormat"]
# loaded on first use: detection and --help import only the format's card
__getattr__ = loader(__name__, {"ProioFormat": "fmtfs.formats.proio.format"})
