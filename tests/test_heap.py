"""fmtfs.heap: the mount's processes reuse the heap their freed buffers
leave, instead of faulting fresh pages in for every buffer."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# THREADS reader threads each making and dropping 200 buffers of SIZES
# bytes, as a mount's readers do with a request's pieces (1-3 MiB) or a
# write through it with a whole gvfs tree (12 MiB); prints the page faults
BUFFERS = textwrap.dedent(
    """
    import os, resource, sys, threading
    mode, threads, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if mode == "settings":
        from fmtfs.heap import reuse_freed_buffers
        reuse_freed_buffers()

    def reader():
        for i in range(200 // threads):
            piece = os.urandom(16) * (65536 * (mib + i % 3))
            joined = piece[1:]
            del piece, joined

    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    readers = [threading.Thread(target=reader) for _ in range(threads)]
    for thread in readers:
        thread.start()
    for thread in readers:
        thread.join()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """
)


def _faults(mode: str, threads: int, mib: int) -> int:
    done = subprocess.run(
        [sys.executable, "-c", BUFFERS, mode, str(threads), str(mib)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


def test_freed_request_buffers_are_reused_not_faulted_in_again():
    defaults, settings = _faults("defaults", 4, 1), _faults("settings", 4, 1)
    # measured: 6,200-7,700 faults with glibc's defaults, about 1,500 with the settings
    assert settings * 2 < defaults, (settings, defaults)


def test_whole_file_buffers_fault_no_more_than_with_the_defaults():
    # a 4 MiB mmap threshold faulted every 12 MiB buffer in anew: about
    # 1,300,000 faults here, against 27,000 with the defaults (7,000 with the settings)
    defaults, settings = _faults("defaults", 1, 12), _faults("settings", 1, 12)
    assert settings < defaults * 2, (settings, defaults)
