"""Keep freed memory in the process, so that training does not pay for fresh pages at every step.

glibc's malloc serves a large request (above a threshold that grows to at most 32 MiB) with its own `mmap`
and gives it back to the kernel with `munmap` when it is freed; the top of the heap is likewise trimmed
back to the kernel. A training step allocates and frees the same large activations and gradients every time
(the logits of a 1,500-token batch over an 8,000-token vocabulary alone are 48 MB), so each step faults
in fresh zeroed pages again, and first-touch faults are several times slower than a copy into pages the
process already holds (measured in docs/results.md, "Timings behind choices in the code"):
`keep_freed_memory` tells malloc to take every block from the heap and never trim it, so a step reuses the
pages of the one before. The resident size stays at the peak of one step, which training reaches anyway.
(Preloading tcmalloc does the same from outside the process; this needs no extra package.)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed memory for reuse (no mmap per block, no trimming). Returns whether
    it took effect: False on other C libraries and systems, where nothing is changed."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    no_mmap = mallopt(_M_MMAP_MAX, 0) == 1
    no_trim = mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1  # the largest value the int parameter takes
    return no_mmap and no_trim
