"""Agent meta files (``agent-<id>.meta.json``) written off the event loop.

A meta file is replaced whole (temp file, fsync, rename, fsync of the
directory): several disk waits that must not stall every other client, so they
run in one worker thread of their own. One thread, not a pool: two SetAgentMeta
of the same agent land in the order they arrived, the last one wins.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sessiond.protocol.transcript.safeopen import StoreRoot, error_for
from sessiond.protocol.wire.errors import SessiondError, io_error

log = logging.getLogger("sessiond")


class MetaWriter:
    def __init__(self, loop: asyncio.AbstractEventLoop, root: StoreRoot) -> None:
        self.loop = loop
        self.root = root
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sessiond-meta")
        self.in_flight = 0

    def write(self, path: Path, data: bytes, done: Callable[[SessiondError | None], None]) -> None:
        """Replace ``path`` with ``data``; ``done`` gets None or the error, on the loop."""
        self.in_flight += 1
        fut = asyncio.wrap_future(self._pool.submit(self.root.write_atomic, path, data), loop=self.loop)

        def finished(f: asyncio.Future) -> None:
            self.in_flight -= 1
            exc = f.exception()
            if exc is None:
                done(None)
                return
            log.error("writing %s failed: %s", path, exc)
            done(error_for(exc, f"writing {path.name}") if isinstance(exc, OSError) else io_error(f"writing {path.name} failed: {exc}"))

        fut.add_done_callback(finished)

    def close(self) -> None:
        """Shutdown: let the writes already asked for finish (their files are
        whole either way: each is a rename)."""
        self._pool.shutdown(wait=True)
