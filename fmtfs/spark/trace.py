"""Timestamps of the data source's steps, for profiling a query end to end.

    FMTFS_SPARK_TRACE=/tmp/trace.log  (in the environment Spark starts its
    Python workers with: the driver's, in local mode)

appends one line per step, `<unix time> <pid> <step> <facts>`, from every
Python worker the query uses: the schema (create_data_source), the
planning (plan_data_source_read) and each task reading a partition, so the
gaps between them (Spark's own time) show as well as the steps.  Off (one
environment look-up per step) unless the variable is set."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager

_TRACE = os.environ.get("FMTFS_SPARK_TRACE")


def event(step: str, **facts: object) -> None:
    if not _TRACE:
        return
    text = " ".join(f"{k}={v}" for k, v in facts.items())
    with open(_TRACE, "a") as out:  # one write per line: lines of processes do not mix
        out.write(f"{time.time():.3f} {os.getpid()} {step} {text}\n")


@contextmanager
def step(name: str, **facts: object) -> Iterator[dict[str, object]]:
    """Trace `name` begun and ended, with its seconds, this process's CPU
    seconds meanwhile (a task's, when two tasks share the cores with the
    JVM) and the facts the block adds to the dict it is given."""
    if not _TRACE:
        yield facts
        return
    event(f"{name}.begin")
    start, cpu, usage = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
    try:
        yield facts
    finally:
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        waits = _waits(usage, resource.getrusage(resource.RUSAGE_SELF))
        event(f"{name}.end", seconds=f"{seconds:.3f}", cpu=f"{cpu:.3f}", **waits, **facts)


def _waits(before: resource.struct_rusage, after: resource.struct_rusage) -> dict[str, int]:
    """What kept a step off the CPU meanwhile: page faults that read the
    disk (majflt), blocks read (inblock: a file's pages evicted from the
    page cache), and the times it waited (nvcsw) or was preempted (nivcsw:
    other processes wanted the cores)."""
    return {name: getattr(after, f"ru_{name}") - getattr(before, f"ru_{name}") for name in _WAITS}


_WAITS = ("majflt", "inblock", "nvcsw", "nivcsw")


event("imported")  # when a worker first imports the data source (module import order is cheap to see)
