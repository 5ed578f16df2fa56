"""One worker thread for the store's small blocking file operations.

Creating a transcript (its missing directories, each synced in its parent, then
the file, synced in its directory) and replacing an agent meta file (temp file,
fsync, rename, fsync of the directory) wait on the disk: never on the event
loop. One thread, not a pool: they land in the order they were asked for (two
SetAgentMeta of one agent: the last one wins), and a burst of new sessions holds
a bounded number of descriptors however many there are (a daemon under a low
fd limit must not run out mid-walk). Serial, as they would be on the loop,
but nothing else waits for them.

The writer's two jobs are here too: ``create_files`` runs on this thread, a
batch at a time (the files asked for while one batch is made go together in
the next, each directory synced once for all: ``DirSyncs``), ``cut_torn_file``
in the default pool (it waits for the file's lock, which must not hold up the
creations behind it).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sessiond.store.appendfile import TornTail, cut_torn_tail, file_lock
from sessiond.store.safeopen import DirSyncs, StoreRoot

CREATE_BATCH = 32
"""Files made in one ``create_files`` job at most, and the most directories it
holds open until their sync (``DirSyncs``; the writer lends it fewer under a
low fd limit)."""


class FileWork:
    """The daemon's one thread for blocking file creations and meta-file
    replacements: they run in the order asked for, off the event loop, holding a
    bounded number of descriptors."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sessiond-files")

    def submit(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future:
        """Run ``fn(*args)`` on the thread; the future completes on the loop."""
        return asyncio.wrap_future(self._pool.submit(fn, *args), loop=self.loop)

    def wait(self) -> None:
        """Block until every job asked for so far is done (shutdown, before it
        writes: a batch of new files is synced by then)."""
        try:
            self._pool.submit(int).result()
        except RuntimeError:  # shut down already: nothing is left to run
            pass

    def close(self) -> None:
        """Shutdown: let what was asked for finish (each job leaves whole files:
        a creation or a rename)."""
        self._pool.shutdown(wait=True)


def create_files(root: StoreRoot, paths: list[Path], max_held: int = CREATE_BATCH,
                 resync: frozenset[int] = frozenset()) -> list[OSError | None]:
    """Create transcripts and their missing directories (worker thread): every
    entry is made first, then each directory that got one is synced once, so a
    batch of new files costs about one journal commit rather than one or two
    each (``max_held``: directories held open for that at most). ``resync``:
    the indexes of paths whose every directory level is synced again, made now
    or not (a batch of theirs failed to sync). What became of each path, in
    order: None (there, its entries synced) or the error; a failed sync fails
    every path of the batch (one path's entries may be in a directory another
    one made)."""
    syncs = DirSyncs(limit=max_held)
    results: list[OSError | None] = []
    try:
        for i, path in enumerate(paths):
            try:
                fd, _ = root.open_append(path, syncs)
                os.close(fd)
                if i in resync:
                    root.sync_levels(path, syncs)
            except OSError as exc:
                results.append(exc)
            else:
                results.append(None)
    finally:
        syncs.sync()
    if syncs.error is not None:
        return [syncs.error if r is None else r for r in results]
    return results


def cut_torn_file(root: StoreRoot, path: Path, ident: tuple[int, int] | None) -> TornTail | None:
    """Cut the torn tail of the file at ``path`` under its lock (worker thread),
    on a descriptor of its own; nothing if the path names another file now
    (the writer's next drain notices that)."""
    fd = root.open(path, os.O_RDWR | os.O_APPEND)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != ident:
            return None
        with file_lock(fd):
            return cut_torn_tail(fd, path, os.fstat(fd).st_size, root)
    finally:
        os.close(fd)

