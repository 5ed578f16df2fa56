"""A query's CPU budget: the query is interrupted once it has used it.

Why: FTS5 answers a one-letter prefix, or only the commonest words, by merging
the doclists of every term they cover inside one step of the statement, where
no progress handler is ever called. On an index of gigabytes of transcripts
``a*`` takes seconds of CPU, and ``a* b* c*`` several times that. Through the
daemon that is a read-pool thread held and a core burned for a query no one can use; in the
CLI's own read of the index it is a process Ctrl-C cannot stop. SQLite's
``interrupt()`` may be called from any thread and stops such a step within
milliseconds, so a watcher thread measures the querying thread's own CPU time
(``pthread_getcpuclockid``: a loaded machine stretches the wall time of a
cheap query, not its CPU) and interrupts the connection once the budget is
spent. Without per-thread CPU clocks (macOS), wall time stands in.

The same watcher stops the query early when its ``stop`` event is set: the
daemon sets it when the client that asked has gone, so a query whose answer
nobody will read frees its thread within a tick instead of its whole budget.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import sqlite3  # the CLI's daemon path never loads the library

DEFAULT_CPU_SECONDS: Final = 3.0
"""Many times what any query of the search benchmark needs (docs/benchmarks.md,
"Search": the commonest word and a two-letter prefix included), a fraction of
what a one-letter prefix takes."""


class Budget:
    """``with Budget(conn, seconds):`` runs the block's statements on ``conn``
    under the budget; a statement stopped raises ``sqlite3.OperationalError``
    out of the block, with ``expired`` set (``stopped`` too when ``stop`` was
    set rather than the budget spent)."""

    def __init__(self, conn: sqlite3.Connection, seconds: float, stop: threading.Event | None = None) -> None:
        self.conn = conn
        self.seconds = seconds
        self.stop = stop
        self.stopped = False
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._running = False
        self.expired = False

    def __enter__(self) -> Budget:
        clock = _thread_clock()
        start = time.clock_gettime(clock)
        every = max(0.001, min(0.1, self.seconds / 4))
        self._running = True

        def watch() -> None:
            # Again at every tick once spent: SQLite drops an interrupt that
            # finds no statement running, as between two of the query's.
            while not self._done.wait(every):
                stopped = self.stop is not None and self.stop.is_set()
                if stopped or time.clock_gettime(clock) - start >= self.seconds:
                    with self._lock:
                        if not self._running:
                            return
                        self.expired = True
                        self.stopped = self.stopped or stopped
                        self.conn.interrupt()

        threading.Thread(target=watch, name="query-budget", daemon=True).start()
        return self

    def __exit__(self, kind, exc, tb) -> None:
        with self._lock:
            self._running = False
        self._done.set()
        if not self.expired:
            return
        # An interrupt that came as the last statement ended may still be
        # pending on the connection: spend it here, not on the next query.
        import sqlite3

        try:
            self.conn.execute("SELECT 1").fetchall()
        except sqlite3.OperationalError:
            pass


def _thread_clock() -> int:
    """The CPU clock of the calling thread, else the monotonic clock."""
    try:
        return time.pthread_getcpuclockid(threading.get_ident())
    except (AttributeError, OSError):
        return time.CLOCK_MONOTONIC
