"""Who holds a live session (SPEC 7): the one shape every side prints.

The daemon fills it in ``session_busy`` and ``lease_lost`` errors, ``status``
and ``list``; the client raises it inside ``SessionBusy`` / ``LeaseLost``; the
CLI names the holder from it. Times are ISO-8601 UTC with milliseconds, like
transcript timestamps.
"""


import time
from collections.abc import Callable

import msgspec

CHAIN_TYPES = frozenset({"user", "assistant", "system", "attachment", "progress"})
"""Entry types that take part in a session's chain (SPEC 2, 4): the ones the
lease guards. Everything else (titles, tags, snapshots ...) is metadata, which
anyone may add to a live session."""


class LeaseHolder(msgspec.Struct, omit_defaults=True):
    """Who holds a live session: pid, client name, since when and the last write;
    what ``session_busy`` errors, ``status``, ``list`` and the CLI show of a holder."""

    session: str
    pid: int
    client: str
    since: str
    lastWrite: str | None = None
    reconnecting: bool = False
    """Held by a client of the previous daemon, kept for it for a grace period
    after a restart until it reconnects."""

    def describe(self, when: Callable[[str], str] = str) -> str:
        """Who holds it, since when, last write when; ``when`` renders the
        ISO-8601 UTC times (the CLI passes its local-time helper; the daemon's
        log keeps them as they are)."""
        what = f"pid {self.pid} ({self.client or 'unnamed'})" if self.pid else f"{self.client or 'an unnamed client'}"
        since = f", since {when(self.since)}"
        last = f", last write {when(self.lastWrite)}" if self.lastWrite else ""
        return f"{what}{since}{last}" + (" [reconnecting after a daemon restart]" if self.reconnecting else "")

    def live(self) -> dict[str, object]:
        """The ``live`` object of ``list --json`` and ``status --json``."""
        return {"pid": self.pid, "client": self.client, "since": self.since}


def iso(ts: float) -> str:
    """A wall-clock time as transcripts write it: ``2025-01-31T12:00:00.123Z``."""
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts))
    return f"{whole}.{int(ts * 1000) % 1000:03d}Z"
