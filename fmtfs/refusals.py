"""Refused writes that fmtfs answers itself (EACCES, EPERM, EROFS) go to the
log and `_errors.jsonl` like the EINVAL refusals of bad lines do: one line
with the view, the offset and the reason, logged once.

A program probing the mount (a backup tool trying every file, a loop
retrying an append) must not flood either: a refusal is recorded the first
time a view is refused for a given reason; repeats are only counted (at
debug level), and past RECORD_LIMIT distinct refusals one last line says
that further ones are not recorded.

Refusals the kernel answers without asking fmtfs (the mode bits checked by
`default_permissions`, every write on a `-o ro` mount) never reach fmtfs and
so leave no line."""

from __future__ import annotations

import logging
import threading
from typing import Protocol

import pyfuse3

log = logging.getLogger("fmtfs")

RECORD_LIMIT = 1000


class ErrorSink(Protocol):
    """What a refusal is recorded in (fmtfs.views.SourceTree): it logs the
    refusal and adds it to `_errors.jsonl`."""

    def record_write_error(self, path: str, offset: int, error: str) -> None: ...


class Refusals:
    def __init__(self, sink: ErrorSink, limit: int = RECORD_LIMIT) -> None:
        self.sink = sink
        self.limit = limit
        self.counts: dict[tuple[str, str], int] = {}  # (view, reason) -> times refused
        self.unrecorded = 0  # distinct refusals past the limit
        self._lock = threading.Lock()

    def refuse(self, code: int, path: str, offset: int, reason: str) -> pyfuse3.FUSEError:
        """Record the refusal (once per view and reason); returns the
        FUSEError for the handler to raise."""
        key = (path, reason)
        with self._lock:
            seen = self.counts.get(key)
            if seen is not None:
                self.counts[key] = seen + 1
                log.debug("refused again (%d times): %s: %s", seen + 1, path, reason)
                return pyfuse3.FUSEError(code)
            if len(self.counts) >= self.limit:
                self.unrecorded += 1
                if self.unrecorded > 1:
                    return pyfuse3.FUSEError(code)
                path, offset = "", 0
                reason = f"more than {self.limit} different refusals: further ones are not recorded"
            else:
                self.counts[key] = 1
        self.sink.record_write_error(path, offset, reason)
        return pyfuse3.FUSEError(code)
