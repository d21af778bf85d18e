"""Keep freed request buffers in the process heap (glibc mallopt).

A produce request is one buffer of up to a megabyte; by default glibc
serves each from a fresh mmap (or trims the heap after it) and the kernel
zero-fills every page again on first touch: that page-fault work was most
of the server's system time per produced GB.  Raising the mmap and trim
thresholds lets the next request reuse the same pages.  Not glibc (musl,
macOS): nothing happens.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("kcoord.server")

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20   # buffers below this come from the heap, reused when freed
TRIM_THRESHOLD = 256 << 20  # free heap kept before it is returned to the kernel
TOP_PAD = 16 << 20          # heap grown in steps of this, fewer brk calls


def keep_freed_buffers() -> bool:
    """-> whether glibc accepted the settings."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    ok = all(mallopt(param, value) == 1 for param, value in (
        (_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
        (_M_TOP_PAD, TOP_PAD)))
    if not ok:
        log.info("mallopt refused a setting: freed buffers may go back to the kernel")
    return ok
