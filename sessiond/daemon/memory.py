"""Giving memory back once sessions leave, and saying what is held.

A per-user daemon runs for weeks; its peak is a busy afternoon, its normal state
idle. Freed Python objects go back to pymalloc's arenas and glibc's heap, which
keep the pages: 200 evicted sessions left 100+ MB resident that nobody used.
After a sweep that evicted sessions, ``shrink`` collects cycles and asks glibc
(``malloc_trim(0)``, through ctypes, which lets go of the GIL for the call) to
return every free page, in the read pool, so the loop does not wait for it.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
from typing import TYPE_CHECKING

from .libc import libc_function
from .workers import BACKGROUND

if TYPE_CHECKING:
    from .sessions import Registry
    from .workers import FairShare

log = logging.getLogger("sessiond")

_malloc_trim = libc_function("malloc_trim", [ctypes.c_size_t])  # glibc only; None elsewhere
_mallopt = libc_function("mallopt", [ctypes.c_int, ctypes.c_int])
M_ARENA_MAX = -8
ARENAS = 1
"""glibc arenas the daemon's threads share (glibc's default is 8 per core): a
worker's frees and the loop's would otherwise sit in separate heaps, each
keeping its own free pages."""


def limit_arenas() -> None:
    if _mallopt is not None:
        try:
            _mallopt(M_ARENA_MAX, ARENAS)
        except OSError:
            pass


def rss_bytes() -> int:
    """Resident set size of this process (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _trim() -> None:
    if _malloc_trim is not None:
        _malloc_trim(0)


def shrink(fair: FairShare) -> None:
    """After sessions were evicted: free cycles now, return free pages to the
    system in the background."""
    gc.collect()
    if _malloc_trim is not None:
        fair.submit(_trim, owner=BACKGROUND).add_done_callback(_report)


def _report(fut) -> None:
    if fut.cancelled():
        return
    exc = fut.exception()
    if exc is not None:
        log.warning("malloc_trim failed: %s", exc)
    else:
        log.debug("memory returned after eviction: RSS %.1f MB", rss_bytes() / 2**20)


def status(registry: Registry) -> dict[str, int]:
    """What dedup holds (uuids and bytes of their packed form) and the RSS."""
    uuids = packed = recent = 0
    for state in registry.sessions.values():
        for s in (state.side_uuids, *(t.uuids for t in state.targets())):
            uuids += len(s)
            packed += s.nbytes
            recent += len(s) - s.packed
    out = {"rssBytes": rss_bytes(), "uuids": uuids, "uuidsUnpacked": recent, "packedUuidBytes": packed}
    if registry.compactor is not None:
        out["packingBacklog"] = registry.compactor.backlog
        out["packedInline"] = registry.compactor.inline
    return out
