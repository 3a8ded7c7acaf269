"""The spinner (fmtfs.spin): the FUSE loop polls without sleeping for a
moment after a metadata request, and sleeps again after it."""

from __future__ import annotations

import time
from pathlib import Path

import trio

from fmtfs.samples import kestrel as kestrel_sample
from fmtfs.spin import Spinner
from tests.mounting import cpu_seconds, mounted, server_processes


class IoWaits(trio.abc.Instrument):
    """The timeout of every epoll wait of the run loop."""

    def __init__(self) -> None:
        self.timeouts: list[float] = []

    def before_io_wait(self, timeout: float) -> None:
        self.timeouts.append(timeout)


def test_the_loop_polls_while_the_spinner_spins_and_sleeps_after() -> None:
    waits = IoWaits()

    async def main() -> tuple[list[float], list[float], bool, bool]:
        spinner = Spinner(seconds=0.05)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(spinner.run)
            await trio.sleep(0.05)
            parked_before = spinner.parked
            waits.timeouts.clear()
            spinner.more()
            await trio.sleep(0.02)  # inside the spin: the loop never blocks
            spinning = list(waits.timeouts)
            await trio.sleep(0.2)  # the spin is over: the loop waits for the timer
            waits.timeouts.clear()
            await trio.sleep(0.05)
            after = list(waits.timeouts)
            parked_after = spinner.parked
            nursery.cancel_scope.cancel()
        return spinning, after, parked_before, parked_after

    spinning, after, parked_before, parked_after = trio.run(main, instruments=[waits])
    assert parked_before and parked_after
    assert len(spinning) > 10 and all(timeout == 0 for timeout in spinning)
    assert after and max(after) > 0.01  # asleep in epoll until the timer, not polling


def test_an_idle_mount_spends_no_cpu_after_a_listing(tmp_path: Path) -> None:
    """A mount that served lookups parks its spinner: an idle second costs
    it what the poller costs, not a core (a spinner that never parked would
    take the whole second)."""
    source = tmp_path / "queues"
    kestrel_sample.generate(source, 5)
    with mounted(source) as mnt:
        for path in mnt.rglob("*"):
            path.stat()
        server = next(iter(server_processes(mnt)))  # the mount's own process, listed first
        time.sleep(0.2)
        before = cpu_seconds(server)
        time.sleep(1.0)
        spent = cpu_seconds(server) - before
    assert spent < 0.25, f"an idle mount spent {spent:.2f} s of CPU in one second"
