"""Where this process's writers found or left the end of a native file.

Write-through opens a new Writer for every open of a view, so a loop of
`echo line >> view` used to walk the whole native file once per line to
find where the next record goes and that nothing before it is damaged (a
69 MB Beats segment: 0.25-0.4 s for one line; a kestrel writer file
likewise).  A writer that walked a file, or appended to it, leaves what it
learnt here for the next writer of that file in this process, valid while
the file's identity (FileIdentity: size, mtime, inode) is the one it left:
any other writer changes that identity, an append by its size and any
write by its mtime, and the next writer walks again.  (Linux 6.13 and
later stamp a write made after the mtime was read with a fine-grained
time, so two writes within one clock tick still differ; before, only a
same-size rewrite within one tick would go unseen, and producers append.)"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

from fmtfs.formats.base import FileIdentity

End = TypeVar("End")

# Files remembered per format (the least recently used forgotten first):
# a mount writes to a few files at a time (a stream's newest file).
LIMIT = 64


class WrittenEnds(Generic[End]):
    """A format's memo of file ends, one per path, each as of an identity.
    The values must not be changed once put: several writers may hold one."""

    def __init__(self, limit: int = LIMIT) -> None:
        self._ends: OrderedDict[str, tuple[FileIdentity, End]] = OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()  # writers of different sources run in parallel threads

    def get(self, identity: FileIdentity) -> End | None:
        """What was learnt of the file, if it is still as it was left."""
        with self._lock:
            found = self._ends.get(identity.path)
            if found is None or found[0] != identity:
                return None
            self._ends.move_to_end(identity.path)
            return found[1]

    def put(self, identity: FileIdentity, end: End) -> None:
        with self._lock:
            self._ends[identity.path] = (identity, end)
            self._ends.move_to_end(identity.path)
            while len(self._ends) > self._limit:
                self._ends.popitem(last=False)
