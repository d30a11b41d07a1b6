"""Keep freed tensor memory in the process instead of handing it back to the kernel after every step.

Training one client after another allocates and frees the same activation-sized blocks thousands of times a
round. glibc serves blocks above its mmap threshold with a fresh ``mmap`` and trims the heap top on free, so
every step pays page faults for memory it just gave back: on a 2-core VM that was a third of a round's CPU
time. Raising the mmap and trim thresholds (what ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` do)
makes the heap keep those blocks for reuse. The cost is that RSS stays at its peak instead of shrinking.

Set ``FEDSIM_MALLOC_TUNING=0`` to leave the allocator alone. Not glibc (macOS, musl): nothing to do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# mallopt parameters from <malloc.h>
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value on 64-bit
TRIM_THRESHOLD = 1 << 30
TOP_PAD = 64 << 20


def tune_malloc() -> bool:
    """Apply the thresholds to this process; True when glibc accepted all of them."""
    if os.environ.get("FEDSIM_MALLOC_TUNING", "1") == "0":
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    settings = ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD), (_M_TOP_PAD, TOP_PAD))
    return all(mallopt(param, value) == 1 for param, value in settings)
