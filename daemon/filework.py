"""One worker thread for the store's small blocking file operations.

Creating a transcript (its missing directories, each synced in its parent, then
the file, synced in its directory) and replacing an agent meta file (temp file,
fsync, rename, fsync of the directory) wait on the disk: never on the event
loop. One thread, not a pool: they land in the order they were asked for (two
SetAgentMeta of one agent: the last one wins), and a burst of new sessions holds
a bounded number of descriptors however many there are (a daemon under a low
fd limit must not run out mid-walk). They were serial on the loop before, so
none waits longer than it did; everyone else no longer waits at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class FileWork:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sessiond-files")

    def submit(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future:
        """Run ``fn(*args)`` on the thread; the future completes on the loop."""
        return asyncio.wrap_future(self._pool.submit(fn, *args), loop=self.loop)

    def close(self) -> None:
        """Shutdown: let what was asked for finish (each job leaves whole files:
        a creation or a rename)."""
        self._pool.shutdown(wait=True)
