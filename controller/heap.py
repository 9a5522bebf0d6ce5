"""Process heap hygiene: keep the resident set near what the cache really holds.

Two costs of CPython on glibc that grow with the number of cached objects, not with work:

- **Free heap kept.** Decoding the first list (every Stack as JSON, then as Python objects)
  allocates several times what the frozen cache keeps. glibc keeps most of that freed
  memory mapped. ``settle`` returns it (``malloc_trim(0)``).
- **Collector pauses.** Every full cyclic-GC pass walks every live container, including
  the whole cache, so its pauses grow with the fleet and land on whatever thread triggered
  it (a status write, an acknowledgment). ``settle`` moves the objects alive then into the
  permanent generation (``gc.freeze``): later passes skip them. Objects freed afterwards
  are still freed by reference counting; only cycles among frozen objects would leak, and
  the frozen cache holds none.

``limit_arenas`` caps glibc's per-thread malloc arenas (one per core by default, eight
times the cores at most), whose free lists each thread fragments on its own; the operator
runs a dozen threads of light work. It must run before the threads start.

On a C library without ``malloc_trim``/``mallopt`` (musl, macOS) both are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc

M_ARENA_MAX = -8  # glibc's mallopt parameter number
ARENAS = 2


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas at ``arenas``; True if the C library took it."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    return bool(libc.mallopt(ctypes.c_int(M_ARENA_MAX), ctypes.c_int(arenas)))


def settle() -> bool:
    """Collect, freeze the survivors out of later GC passes, return free heap to the OS.

    Call after a burst that left long-lived objects behind (the first list). Returns True
    if memory was given back (``malloc_trim`` reported so).
    """
    gc.collect()
    gc.freeze()
    libc = _libc()
    if libc is None or not hasattr(libc, "malloc_trim"):
        return False
    return bool(libc.malloc_trim(ctypes.c_size_t(0)))
