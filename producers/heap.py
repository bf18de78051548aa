"""The host agent's malloc settings: a resident set that does not creep up with each upload.

glibc starts with an mmap threshold of 128 KiB, but raises it (up to 32 MiB) each time a chunk it mapped is freed,
and its trim threshold to twice that. An agent frees such chunks every upload (a second's ``probe.v1`` columns and
IPC bytes, 100-300 KiB), so after the first few uploads the same buffers come from the ``brk`` heap instead, and
the heap keeps the freed pages: `bench agent` measured 28.2-28.4 MiB PSS a host agent with the dynamic thresholds,
24.6-24.9 MiB with both fixed at 128 KiB, the same CPU within the run-to-run spread (docs/agent.md).
Fixing them costs an ``mmap``/``munmap`` pair per large buffer: a few a second.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1  # glibc's <malloc.h> parameter numbers
M_MMAP_THRESHOLD = -3
STEADY_THRESHOLD_BYTES = 128 * 1024  # glibc's own starting value, kept instead of raised


def fix_malloc_thresholds(threshold: int = STEADY_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap and trim thresholds at ``threshold`` bytes (which stops glibc raising them).

    Returns True where both were set; False where the C library has no ``mallopt`` (not glibc) or refused one
    (an out-of-range value): the agent then runs with the library's own policy, as before.
    """
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold)) and bool(mallopt(M_TRIM_THRESHOLD, threshold))
