"""Keeping the FUSE loop awake for a moment after a metadata request.

A listing by path (`ls -l a/b/c d/e/f ...`, Spark's file status calls) is a
chain of lookups: the caller sends one, waits for the answer, then sends the
next.  When the loop goes to sleep in epoll between them, every lookup pays
a wake-up of the mount's CPU by the caller's.  On the VMs measured here (an
idle vCPU halts at once, `haltpoll.guest_halt_poll_ns=0`) that cross-CPU
wake-up costs more than pyfuse3, trio and fmtfs together: the minimal
pyfuse3 filesystem's 30,000 lookups (`ls -ld` of 10,000 kestrel views) took
2.1-2.3 s with it and `ls` pinned to one CPU, and 3.8-10.5 s unpinned.

So for SPIN_SECONDS after a lookup, getattr or readdir, the spinner keeps
trio's run loop turning: trio then polls epoll with a zero timeout, the
next request is read as soon as it is queued, and the loop's CPU never
halts between two requests of a chain.  It spins only while a chain is
likely (right after a metadata request), so an idle mount spends nothing,
and a `cat` of an indexed view, whose reads come in batches from the
kernel's readahead, never starts it (a derived view's reads each follow a
getattr, since its attributes are never cached: there the spin waits for
that read).  The cost is bounded: at most SPIN_SECONDS of the loop's CPU
per metadata request that is not followed by another one.

Measured on that listing over fmtfs, six alternated mounts each: 4.3-11.9 s
(median 5.8) before, 4.0-10.6 s (5.2) without the spinner, 3.2-4.7 s (4.3)
with it, for the same mount CPU.  With `ls` and the mount pinned to one CPU
(no wake-up to save) it made no difference either way."""

from __future__ import annotations

import time

import trio

# Longer than `ls` takes between two of its lookups here, short enough that
# the last request of a chain wastes little (see the README's figures).
SPIN_SECONDS = 150e-6


class Spinner:
    """A trio task that keeps the run loop polling while a request chain
    may go on.  Handlers call more(); run() is started once per mount."""

    def __init__(self, seconds: float = SPIN_SECONDS) -> None:
        self.seconds = seconds
        self.until = 0.0
        self.wake: trio.Event | None = None  # set while parked

    def more(self) -> None:
        """A metadata request came: poll for the next one for `seconds`."""
        self.until = time.perf_counter() + self.seconds
        if self.wake is not None:
            self.wake.set()

    @property
    def parked(self) -> bool:
        return self.wake is not None and not self.wake.is_set()

    async def run(self) -> None:
        while True:
            if time.perf_counter() < self.until:
                # another turn of the run loop: an epoll poll with no timeout
                await trio.lowlevel.checkpoint()
            else:
                self.wake = trio.Event()
                await self.wake.wait()
                self.wake = None
