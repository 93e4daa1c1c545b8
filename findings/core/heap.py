"""How this process's C heap gives memory back (D177).

glibc's malloc serves a block of 128 KiB or more from a mapping of its own,
unmapped when it is freed, but raises that threshold to the size of each
such block freed, up to 32 MiB: after the first large list or buffer is
freed, the next ones come from the heap, whose pages a few live objects
can hold long after the rest is freed. A render after a new campaign at
a million points held 65 MiB of freed heap at the end of the document's
build, its peak. ``large_blocks_apart`` fixes the threshold, so that every
large block is mapped apart and given back when it is freed: 18 MiB less
at that peak. It is called once the store is loaded (api.py), not before:
reading 100k run files of one point each maps and unmaps so many large
blocks that the render took 1.2 s longer with it fixed from the start
(D177). Elsewhere than glibc, nothing.
"""

from __future__ import annotations

#: mallopt's parameter for the threshold (malloc.h: M_MMAP_THRESHOLD).
_M_MMAP_THRESHOLD = -3
#: glibc's own initial threshold: fixed there, not raised as blocks are freed.
THRESHOLD = 128 * 1024

_done = False


def large_blocks_apart() -> bool:
    """Fixes glibc's threshold for mapping a block apart (once per
    process); whether it was set (False: not glibc, or refused)."""
    global _done
    if _done:
        return True
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not a C library with mallopt (not glibc)
        return False
    if not hasattr(libc, "gnu_get_libc_version"):  # (musl has no such threshold to fix)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    _done = bool(mallopt(_M_MMAP_THRESHOLD, THRESHOLD) == 1)
    return _done
